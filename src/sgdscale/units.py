"""Parse and print quantities with units (SI prefixes), at the edges of the program only.

Inside, every quantity is a float in base units with the unit in its name: seconds (`_s`),
bytes (`_bytes`), bits per second (`_bps`).
"""

from __future__ import annotations

import re

from sgdscale import inputs
from sgdscale.errors import UserError

_SI = {"": 1.0, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6, "g": 1e9, "G": 1e9, "t": 1e12, "T": 1e12}
_BINARY = {"Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3, "Ti": 1024.0**4}
_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


def _split(text: str, what: str, example: str, zero_ok: bool = False) -> tuple[float, str]:
    match = re.fullmatch(r"\s*" + _NUMBER + r"\s*([A-Za-z/]*)\s*", str(text))
    if not match:
        if str(text).strip().startswith("-"):
            rule = "must not be negative" if zero_ok else "must be positive"
            raise UserError(f"{what} {rule}, got '{text}' (e.g. {example})")
        raise UserError(f"cannot read {what} '{text}' (e.g. {example})")
    return float(match.group(1)), match.group(2)


def parse_bandwidth_bps(text: str | float, what: str = "bandwidth") -> float:
    """'10Gbit', '10Gbps', '200Mbit', '1.25GB/s', '100MiB/s' or a number (from a file) of bit/s -> bit/s.

    Text needs a unit: a bare '10' is 10 bit/s to a program and 10 Gbit/s to most readers."""
    example = "10Gbit, 200Mbit, 1.25GB/s"
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return inputs.check(float(text), what, inputs.BANDWIDTH_BPS, f"give bit/s, e.g. {example}")
    value, unit = _split(text, what, example)
    if not unit:
        raise UserError(f"{what} '{text}' has no unit; write {text.strip()}Gbit, {text.strip()}Mbit or "
                        f"{text.strip()}bit (bit/s), or bytes as {text.strip()}GB/s")
    unit = unit.removesuffix("/s")
    for suffix, bits_per_unit in (("bit", 1.0), ("bps", 1.0), ("Bps", 8.0), ("B", 8.0), ("b", 1.0), ("", 1.0)):
        if unit.endswith(suffix):
            stem = unit[: len(unit) - len(suffix)]
            break
    scale = _BINARY.get(stem) or _SI.get(stem)
    if scale is None:
        raise UserError(f"unknown {what} unit '{unit}' in '{text}' (use e.g. {example})")
    return inputs.check(value * scale * bits_per_unit, what, inputs.BANDWIDTH_BPS, f"e.g. {example}", shown=text)


def parse_time_s(text: str | float, what: str = "time", allowed: inputs.Range = inputs.SECONDS) -> float:
    """'20us', '1.5ms', '2s', '0' or a number of seconds -> seconds, within `allowed`."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), "s"
    else:
        value, unit = _split(text, what, "20us, 1.5ms, 0", zero_ok=True)
    scale = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}.get(unit)
    if scale is None:
        raise UserError(f"unknown {what} unit '{unit}' in '{text}' (use s, ms, us or ns, e.g. 20us)")
    return inputs.check(value * scale, what, allowed, "e.g. 20us, 1.5ms or 0", shown=str(text))


def parse_size_bytes(text: str | float, what: str = "size") -> float:
    """'25MB', '1MiB', '512kB', '4096' -> bytes."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), "B"
    else:
        value, unit = _split(text, what, "25MB, 1MiB")
    stem = unit[:-1] if unit.endswith("B") else unit
    scale = _BINARY.get(stem) or _SI.get(stem)
    if scale is None:
        raise UserError(f"unknown {what} unit '{unit}' in '{text}' (use e.g. 25MB, 1MiB, 4096)")
    return inputs.check(value * scale, what, inputs.Range(0, inputs.BYTES.high, "bytes"), "e.g. 25MB or 1MiB",
                        shown=str(text))


def parse_rate_per_s(text: str | float, what: str = "throughput") -> float:
    """'253/s', '253', '1.2k/s', '253 samples/s', '253img/s' -> events per second (> 0)."""
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        match = re.fullmatch(r"\s*" + _NUMBER + r"\s*([kKMG]?)\s*([A-Za-z]*)\s*(/s)?\s*", str(text))
        if match and not match.group(4) and match.group(2) + match.group(3) in ("s", "ms", "us", "ns", "Ms"):
            raise UserError(f"{what} '{text}' looks like a time; give a rate such as 253/s (or use --step-time)")
        if not match:
            if str(text).strip().startswith("-"):
                raise UserError(f"{what} must be positive, got '{text}' (e.g. 253/s)")
            raise UserError(f"cannot read {what} '{text}' (e.g. 253/s, 1.2k/s, 253 samples/s)")
        value, unit = float(match.group(1)), match.group(2)
    return inputs.check(value * _SI[unit], what, inputs.Range(0, 1e15, "/s", low_open=True), "e.g. 253/s",
                        shown=str(text))


def parse_workers(text: str) -> list[int]:
    """'1,2,4', '1-64', '1-64:x2' (doubling) or '8' -> sorted unique worker counts (each >= 1),
    within the bounds of `sgdscale.inputs` (checked before a range is built)."""
    counts: set[int] = set()
    if not str(text).strip():
        raise UserError("no worker counts given; write e.g. --workers 8, 1,2,4 or 1-64:x2")
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(-?\d{1,40})(?:-(\d{1,40})(?::x(\d{1,40}))?)?", part)
        if not match:
            raise UserError(f"cannot read worker counts '{text}' (use e.g. 8, 1,2,4 or 1-64 or 1-64:x2)")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if low < 1 or high < 1:
            raise UserError(f"worker counts must be at least 1, got '{part}'")
        if high < low:
            raise UserError(f"worker range '{part}' runs backwards; write it as {high}-{low}")
        inputs.check(high, "worker count", inputs.WORKERS, "the fine simulation keeps state per worker; "
                     "predict at most 1,000,000 workers", shown=part)
        if match.group(3):
            factor = int(match.group(3))
            if factor < 2:
                raise UserError(f"range step ':x{factor}' must multiply by at least 2")
            n = low
            while n <= high:
                counts.add(n)
                n *= factor
        else:
            if high - low >= inputs.WORKER_COUNTS:
                raise UserError(f"worker range '{part}' holds {high - low + 1:,} counts, each a whole prediction "
                                f"(allowed: up to {inputs.WORKER_COUNTS:,}); step it, e.g. {low}-{high}:x2")
            counts.update(range(low, high + 1))
        if len(counts) > inputs.WORKER_COUNTS:
            raise UserError(f"'{text}' holds more than {inputs.WORKER_COUNTS:,} worker counts, each a whole "
                            "prediction; step the ranges, e.g. 1-1024:x2")
    return sorted(counts)


def parse_key_values(pairs: tuple[str, ...] | list[str], option: str = "--option") -> dict[str, int | float | str]:
    """Repeated KEY=VALUE options (model options of `profile`, `train`, `import`) -> a dict: keys
    with '-' become '_' (hidden-size = hidden_size), values are int, else float, else text."""
    options: dict[str, int | float | str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"bad {option} '{pair}': write KEY=VALUE, e.g. {option} layers=6")
        options[key.strip().replace("-", "_")] = _number_or_text(value.strip())
    return options


def _number_or_text(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def format_seconds(seconds: float) -> str:
    """Seconds in the most readable unit: '1.25 s', '12.3 ms', '45.0 us'."""
    seconds = float(f"{seconds:.3g}")  # round first, so 0.9996 s prints as '1 s', not '1e+03 ms'
    magnitude = abs(seconds)
    if magnitude >= 1.0:
        return f"{seconds:.3g} s" if magnitude < 100 else f"{seconds:.0f} s"
    if magnitude >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    if magnitude >= 1e-6 or magnitude == 0:
        return f"{seconds * 1e6:.3g} us"
    return f"{seconds * 1e9:.3g} ns"


def format_bytes(nbytes: float) -> str:
    """Bytes in decimal units: '97.5 MB'."""
    nbytes = float(f"{nbytes:.3g}")
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def format_bandwidth(bps: float) -> str:
    """Bit/s in decimal units: '10 Gbit/s'."""
    bps = float(f"{bps:.3g}")
    for unit, scale in (("Tbit/s", 1e12), ("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.3g} {unit}"
    return f"{bps:.3g} bit/s"
