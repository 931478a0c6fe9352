"""Bad input, generated: mutated profile, network and cluster files and option values, each run
through the real CLI in-process and classified by how it ended.

Shared by tests/test_fuzz_inputs.py (hypothesis drives the `random.Random` it hands over, so a
failing case shrinks) and benchmarks/fuzz.py (10,000 seeded cases, counted by outcome). Every case
must end in a finite result (exit 0, no NaN or infinity printed or written) or a clean error (exit
2, one line on stderr); anything else is a bug: a traceback, a NaN, a hang.
"""

from __future__ import annotations

import copy
import io
import json
import math
import re
import signal
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from random import Random
from typing import Any

from sgdscale.cli import main
from sgdscale.profile import load_profile

OUTCOMES = ("finite result", "clean error", "traceback", "nan", "timeout", "unclean error")

# Values that break readers: non-finite, absurd, wrong type, empty.
NASTY_VALUES: list[Any] = [
    math.nan, math.inf, -math.inf, -1, -1.5, 0, 0.0, -0.0, 1e30, -1e30, 1e-300, 1e308, 10**30, 2**63, 2**31,
    1e6, 0.5, 7, "", "abc", "1e400", "NaN", "10", "-5", None, True, [], {}, [1.0], {"a": 1}, "1Gbit", "5us",
]
# Option values as a user might type them by mistake.
NASTY_TEXT = [
    "nan", "inf", "-inf", "-1", "0", "1e400", "1e-300", "", " ", "abc", "10", "1e30", "1" * 45, "1,inf", "0.0",
    "1e308", "2,nan", "-5", "100000000000", "1-1000000", "3:1Gbit", "1e400Gbit", "1e-300bit", "NaN", "1,2,,4",
    "4-1", "1-64:x1", "１０", "\x00", "1Qbit", "-0", "5e-324",
]
OPTION_VALUES = {
    "--workers": ["1", "2", "1-8:x2", "3,5", "1000000", "64", "1-200"],
    "--nodes": ["1", "2", "1-4:x2"],
    "--bandwidth": ["1Gbit", "100Mbit", "1kbit", "10Pbit", "1.25GB/s", "1bit"],
    "--latency": ["20us", "0", "10s", "1ns", "5ms"],
    "--intra-bandwidth": ["300GB/s", "16GB/s"],
    "--intra-latency": ["2us", "0"],
    "--gpus-per-node": ["1", "2", "8", "1024", "2000"],
    "--compute-scale": ["1,2", "1,1,1,2", "0.001,1000", "1"],
    "--slow-link": ["0:1Gbit", "1:1kbit", "7:1Gbit"],
    "--iterations": ["1", "3", "1000000"],
    "--warmup": ["0", "1", "1000000"],
    "--seed": ["0", "4294967295", "4294967296"],
    "--ps": ["1", "2", "14", "100"],
    "--ps-bandwidth": ["1Gbit", "1kbit"],
    "--bucket-mb": ["0.001", "25", "1e7"],
    "--cpu-per-node": ["0.45", "1e-9", "10000"],
    "--strategy": ["allreduce", "ps-sync", "ps-async", "ps"],
    "--grouping": ["buckets", "per-tensor", "per-layer", "single", "mg-wfbp", "none"],
    "--algorithm": ["ring", "tree", "halving-doubling", "star"],
    "--allreduce": ["flat", "hierarchical", "tree", "auto", "ring"],
    "--ps-placement": ["dedicated", "colocated", "shared"],
    "--method": ["fine", "coarse", "both", "exact"],
    "--placement": ["round-robin", "size", "random"],
}

NETWORK = {
    "schema": "sgdscale.network/1", "source": "fuzz base",
    "p2p": {"alpha_s": 5e-4, "beta_s_per_byte": 8.4e-9},
    "allreduce": {"2": {"alpha_s": 9e-4, "beta_s_per_byte": 8.4e-9}, "4": {"alpha_s": 1e-2, "beta_s_per_byte": 1.3e-8}},
    "incast": {"2": {"alpha_s": 6e-4, "beta_s_per_byte": 8.5e-9}},
    "points": [{"op": "p2p", "workers": 2, "bytes": 1000, "samples_s": [1e-3, 1.1e-3], "median_s": 1.05e-3}],
    "environment": {"bandwidth_bps": 1e9, "cpu_quota_cores": 0.45},
    "interference": {"compute_slowdown": 1.2, "comm_slowdown": 1.1, "workers": 2, "bytes": 1000000},
    "cpu": {"allreduce_s_per_byte": 2e-9, "p2p_s_per_byte": 1e-9, "cores": 0.45},
}
CLUSTER = {
    "schema": "sgdscale.cluster/1", "name": "fuzz", "nodes": 2, "gpus_per_node": 2,
    "intra": {"bandwidth": "300GB/s", "latency": "2us"}, "nic": {"bandwidth": "10Gbit", "latency": 2e-5},
    "servers": {"count": 1, "bandwidth": "10Gbit"},
    "slow_nodes": [{"node": 1, "compute_scale": 1.5}], "slow_nics": [{"node": 0, "bandwidth": "5Gbit"}],
}
QUICK = ["--iterations", "4", "--warmup", "1"]  # every case's simulation stays short
SWEEP_SPEC = {"workers": "1,2", "bandwidth": ["1Gbit", "10Gbit"], "latency": "20us", "strategy": ["allreduce", "ps-sync"],
              "ps": [1, 2], "bucket_mb": [5, 25], "method": ["coarse"], "iterations": 4, "warmup": 1, "seed": 0}


def base_profile(name: str) -> dict[str, Any]:
    return load_profile(name).to_json()


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document: its path from the root."""
    out = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            out += _paths(value, prefix + (index,))
    return out


def _set(data: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return data


def mutate_document(rng: Random, document: dict[str, Any]) -> dict[str, Any]:
    """One to three edits: a value replaced by a nasty one or scaled, a key removed or added."""
    data = copy.deepcopy(document)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        action = rng.random()
        if action < 0.6:
            _set(data, path, rng.choice(NASTY_VALUES))
        elif action < 0.75:
            old = parent[path[-1]]
            if isinstance(old, (int, float)) and not isinstance(old, bool):
                _set(data, path, old * rng.choice([0, -1, 1e-9, 1e9, 1e300]))
        elif action < 0.88:
            if isinstance(parent, dict):
                del parent[path[-1]]
            elif len(parent) > 1:
                parent.pop(path[-1])
        elif isinstance(parent, dict):
            parent[rng.choice(["extra", "speed", "forward_s", "bytes", "2"])] = rng.choice(NASTY_VALUES)
    return data


def mutate_text(rng: Random, text: str) -> bytes:
    """Damage the file itself: cut, invalid UTF-8, deep nesting, JSON's missing NaN, a byte flipped."""
    raw = text.encode()
    action = rng.randrange(6)
    if action == 0:
        return raw[: rng.randrange(len(raw))]
    if action == 1:
        at = rng.randrange(len(raw))
        return raw[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\x00", b"\xed\xa0\x80"]) + raw[at:]
    if action == 2:
        depth = rng.choice([65, 1000, 100000])
        return b"[" * depth + b"]" * depth
    if action == 3:
        return re.sub(rb"\d+\.\d+(e-?\d+)?", rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999"]), raw, count=3)
    if action == 4:
        at = rng.randrange(len(raw))
        return raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1:]
    return rng.choice([b"", b"null", b"[]", b"{}", b'"x"', b"1e999", b'{"schema": "sgdscale.profile/1"}'])


def make_case(rng: Random, workdir: Path, profiles: dict[str, dict[str, Any]]) -> tuple[str, list[str], Path]:
    """One bad-input case: (kind, argv, the --json path its prediction would be written to)."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "prediction.json"
    out.unlink(missing_ok=True)
    name = rng.choice(sorted(profiles))
    kind = rng.choice(["profile", "profile-bytes", "network", "cluster", "options", "options", "show", "advise",
                       "sweep"])
    strategy = rng.choice(["allreduce", "ps-sync", "ps-async"])
    common = ["--strategy", strategy, "--method", rng.choice(["fine", "coarse", "both"]), *QUICK, "--json", str(out)]
    if kind in ("profile", "profile-bytes", "show"):
        path = workdir / "profile.json"
        if kind == "profile-bytes":
            path.write_bytes(mutate_text(rng, json.dumps(profiles[name])))
        else:
            path.write_text(json.dumps(mutate_document(rng, profiles[name])))
        if kind == "show":
            return kind, ["show", str(path)], out
        return kind, ["predict", str(path), "--workers", "1,2", *common], out
    if kind == "network":
        path = workdir / "network.json"
        if rng.random() < 0.2:
            path.write_bytes(mutate_text(rng, json.dumps(NETWORK)))
        else:
            path.write_text(json.dumps(mutate_document(rng, NETWORK)))
        return kind, ["predict", name, "--network", str(path), "--workers", "2,4", *common], out
    if kind == "cluster":
        path = workdir / "cluster.json"
        if rng.random() < 0.2:
            path.write_bytes(mutate_text(rng, json.dumps(CLUSTER)))
        else:
            path.write_text(json.dumps(mutate_document(rng, CLUSTER)))
        return kind, ["predict", name, "--cluster", str(path), *common], out
    if kind == "sweep":  # one process (-j 1): the grid's readers, not the pool, are under test
        path, csv = workdir / "spec.json", workdir / "sweep.csv"
        csv.unlink(missing_ok=True)
        if rng.random() < 0.2:
            path.write_bytes(mutate_text(rng, json.dumps({**SWEEP_SPEC, "profile": name})))
        else:
            path.write_text(json.dumps(mutate_document(rng, {**SWEEP_SPEC, "profile": name})))
        argv = ["sweep", "--spec", str(path), "-o", str(csv), "-j", "1"]
        if rng.random() < 0.3:
            option = rng.choice(["--workers", "--bandwidth", "--latency", "--bucket-mb", "--ps", "--seed",
                                 "--iterations", "--gpus-per-node", "--method"])
            argv += [option, rng.choice(OPTION_VALUES.get(option, []) + NASTY_TEXT)]
        return kind, argv, csv
    options: dict[str, str] = {"--workers": "1,2"}
    for option in rng.sample(sorted(OPTION_VALUES), rng.randint(1, 3)):
        pool = OPTION_VALUES[option] if rng.random() < 0.5 else NASTY_TEXT
        options[option] = rng.choice(pool)
    argv = [item for pair in options.items() for item in pair]
    if kind == "advise":
        advise = ["advise", name, "--workers", "1-8:x2", *QUICK, "--json", str(out)]
        extra = rng.choice([["--target-efficiency", rng.choice(["0.8", "nan", "inf", "-1", "2"])],
                            ["--target-throughput", rng.choice(["2000/s", "nan/s", "1e400/s", "0/s", "10s"])],
                            ["--bucket-sizes", rng.choice(["5,25", "nan", "inf,1", "-1"])],
                            ["--ps-counts", rng.choice(["1,2", "0", "100000000000"])],
                            ["--bandwidth", rng.choice(NASTY_TEXT)], ["--seed", rng.choice(NASTY_TEXT)]])
        return kind, advise + extra, out
    return kind, ["predict", name, *common, *argv], out


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so no `except Exception` in the code under test eats it."""


def _alarm(signum, frame):
    raise _Timeout


_FINITE_WORDS = re.compile(r"\b(nan|inf)\b")  # as Python formats them; a name "NaN" is text, not a number


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


def run_case(argv: list[str], out: Path, timeout_s: float = 20.0) -> tuple[str, str, float]:
    """Run the CLI in-process; (outcome, detail, seconds). The alarm needs the main thread."""
    stdout, stderr = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    outer_s, _ = signal.setitimer(signal.ITIMER_REAL, timeout_s)  # e.g. pytest-timeout's alarm, restored below
    began = time.perf_counter()
    try:
        with redirect_stdout(stdout), redirect_stderr(stderr):
            code = main(argv)
    except _Timeout:
        return "timeout", f"over {timeout_s:g} s", time.perf_counter() - began
    except BaseException as error:  # noqa: BLE001 - the point: anything escaping main is a traceback
        return "traceback", f"{type(error).__name__}: {str(error)[:300]}", time.perf_counter() - began
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_s > 0:
            signal.setitimer(signal.ITIMER_REAL, max(outer_s - (time.perf_counter() - began), 1e-3))
    seconds = time.perf_counter() - began
    err = stderr.getvalue().strip()
    if code == 0:
        if _FINITE_WORDS.search(stdout.getvalue()):
            return "nan", _FINITE_WORDS.search(stdout.getvalue()).group(0) + " printed", seconds
        if out.exists():
            written = out.read_text()
            if _FINITE_WORDS.search(written):
                return "nan", f"{_FINITE_WORDS.search(written).group(0)} written to {out.name}", seconds
            if out.suffix == ".json":
                try:
                    json.loads(written, parse_constant=_reject_constant)
                except ValueError as error:
                    return "nan", str(error), seconds
        return "finite result", "", seconds
    if code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1:
        return "clean error", err[:300], seconds
    return "unclean error", f"exit {code}: {err[:300]}", seconds
