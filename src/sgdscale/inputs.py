"""The bounds of every input, and the one-line message when one is broken.

Every reader (command-line options through `sgdscale.units` and the commands, profile, network and
cluster files through their pydantic models) checks numbers here, so a value that is not finite
or is physically absurd stops the run with one line naming the field, the value, the allowed range
and a fix (exit status 2) instead of a nan/inf prediction, a traceback or a run that never ends.

The ranges are wide on purpose: each admits anything a real cluster or model can have by orders of
magnitude and rejects only values that are typos or corruption (1e30 s, 1e-300 bit/s, NaN). The
work bounds (`check_work`) are what this program can finish: they are in the units the engines'
cost grows with (worker-steps for the vectorized all-reduce simulation, worker x step x tensor for the
discrete-event one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, ValidationError

from sgdscale.errors import UserError


@dataclass(frozen=True)
class Range:
    """A closed range [low, high] (or (low, high] with `low_open`) of a quantity in base units."""

    low: float
    high: float
    unit: str = ""
    low_open: bool = False
    integer: bool = False
    label: str = ""  # the range as people write it, where that reads better than numbers

    def text(self) -> str:
        if self.label:
            return self.label
        unit = f" {self.unit}" if self.unit else ""
        if math.isinf(self.high):
            return f"{'above' if self.low_open else 'at least'} {self.low:g}{unit}"
        number = "{:,.0f}" if self.integer and self.high < 1e10 else "{:g}"
        low = f"above {number.format(self.low)}" if self.low_open else number.format(self.low)
        return f"{low} to {number.format(self.high)}{unit}"

    def problem(self, value: Any) -> str | None:
        """Why `value` is not allowed (None when it is)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "not a number"
        if isinstance(value, float) and not math.isfinite(value):
            return "not a finite number"
        if self.integer and isinstance(value, float) and not value.is_integer():
            return "not a whole number"
        if value < self.low or (self.low_open and value == self.low):
            return "too small"
        if value > self.high:
            return "too large"
        return None


FINITE_NON_NEGATIVE = Range(0, math.inf)  # internal quantities: any size, but a number
FINITE_POSITIVE = Range(0, math.inf, low_open=True)
# Times: no part of one SGD step (a layer, a step, a message) takes longer than a day.
SECONDS = Range(0, 86400, "s")
LATENCY_S = Range(0, 10, "s")  # a one-way link latency: 10 s is beyond any real network
BANDWIDTH_BPS = Range(1e3, 1e16, "bit/s", label="1 kbit/s to 10 Pbit/s")  # 1 kbit/s (a modem) to 10 Pbit/s (1000x an NVLink switch)
SECONDS_PER_BYTE = Range(0, 8e-3, "s/byte", low_open=True)  # 8 / BANDWIDTH_BPS
BYTES = Range(0, 1e13, "bytes", integer=True)  # one tensor (numel too): 10 TB, 100x a device's memory
WORK = Range(0, 1e21)  # counted flops or bytes moved by one layer in one step
BATCH = Range(1, 1e9, integer=True)
SCALE = Range(1e-3, 1e3)  # a node's compute speed relative to the profile
SLOWDOWN = Range(1, 1e3)  # interference ratios (>= 1 by definition)
CORES = Range(1e-3, 1e4, "cores")  # a thousandth of a core: below what a cgroup quota can give
CPU_S_PER_BYTE = Range(0, 1, "s/byte", low_open=True)
# Cluster sizes: the largest data-parallel jobs run ~1e5 devices; the fine all-reduce simulation
# keeps ~110 bytes of state per worker, so 1e6 workers stay ~100 MB.
MAX_WORKERS = 1_000_000
WORKERS = Range(1, MAX_WORKERS, "workers", integer=True)
GPUS_PER_NODE = Range(1, 1024, "devices", integer=True)
SERVERS = Range(1, 100_000, "shards", integer=True)
# Steps: per-step arrays cost 8 bytes x a few per step; averages settle long before 1e6 steps.
ITERATIONS = Range(1, 1_000_000, "steps", integer=True)
WARMUP = Range(0, 1_000_000, "steps", integer=True)
SEED = Range(0, 2**32 - 1, integer=True)  # numpy's SeedSequence takes non-negative integers
BUCKET_MIB = Range(0, 1e7, "MiB", low_open=True)
SAMPLES_PER_S = Range(0, 1e15, "samples/s", low_open=True)
WORKER_COUNTS = 10_000  # distinct counts in one prediction: each is a whole prediction

# Work the fine method may take on. Discrete-event PS: ~4 us per worker x step x tensor
# (benchmarks/results/predict_speed.md: 64 workers x 110 steps x 161 tensors in 4.2-4.3 s), twice
# that on a loaded machine. Vectorized all-reduce: ~75 us per step plus ~23 ns per worker-step
# (`sgdscale predict resnet18 --method fine` with --iterations 20000, and with --workers 1000000:
# 2.9 s and 160 MB). Both bounds are about a minute of one core; the coarse method answers in ms.
FINE_ALLREDUCE_WORKER_STEPS = 2.5e9
FINE_ALLREDUCE_STEP_OVERHEAD_WORKERS = 3300  # the per-step cost, in worker units
FINE_DES_MESSAGES = 1e7


def show(value: Any) -> str:
    """A value as the user wrote or a file held it (floats compact)."""
    if isinstance(value, float):
        return f"{value:g}"
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check(value: Any, what: str, allowed: Range, fix: str, shown: str | None = None) -> Any:
    """`value` if `allowed`, else one UserError: what, the value, the range, the fix."""
    problem = allowed.problem(value)
    if problem is not None:
        raise UserError(f"{what} {shown if shown is not None else show(value)}: {problem} "
                        f"(allowed: {allowed.text()}); {fix}")
    return value


def bounded(allowed: Range) -> AfterValidator:
    """A pydantic validator for a file's field: the same rule and wording as `check`."""

    def validate(value: Any) -> Any:
        if value is None:
            return value
        problem = allowed.problem(value)
        if problem is not None:
            raise ValueError(f"{problem} (allowed: {allowed.text()})")
        return value

    return AfterValidator(validate)


# Field types of the file formats (profile, network, cluster).
Seconds = Annotated[float, bounded(SECONDS)]
LatencySeconds = Annotated[float, bounded(LATENCY_S)]
SecondsPerByte = Annotated[float, bounded(SECONDS_PER_BYTE)]
ByteCount = Annotated[int, bounded(BYTES)]
ElementCount = Annotated[int, bounded(Range(0, 1e13, "elements", integer=True))]
WorkCount = Annotated[float, bounded(WORK)]
BatchSize = Annotated[int, bounded(BATCH)]
ComputeScale = Annotated[float, bounded(SCALE)]
Slowdown = Annotated[float, bounded(SLOWDOWN)]
Cores = Annotated[float, bounded(CORES)]
CpuSecondsPerByte = Annotated[float, bounded(CPU_S_PER_BYTE)]
WorkerCount = Annotated[int, bounded(WORKERS)]
GpusPerNode = Annotated[int, bounded(GPUS_PER_NODE)]
ServerCount = Annotated[int, bounded(SERVERS)]
NonNegative = Annotated[float, bounded(FINITE_NON_NEGATIVE)]
Positive = Annotated[float, bounded(FINITE_POSITIVE)]
NodeIndex = Annotated[int, bounded(Range(0, MAX_WORKERS - 1, integer=True))]


def worker_key(key: str) -> str:
    """A worker count written as a JSON object key ("8"); pydantic wording, for `field_validator`s."""
    try:
        count = int(key)
    except (TypeError, ValueError):
        raise ValueError(f"key {show(key)!r} is not a worker count (write it as \"8\")") from None
    problem = WORKERS.problem(count)
    if problem is not None:
        raise ValueError(f"key {key!r}: {problem} (allowed: {WORKERS.text()})")
    return key


def describe(error: ValidationError, source: str, fix: str) -> str:
    """A pydantic error as one line: where, the field, its value, what is wrong, the fix."""
    problems = error.errors()
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = first["msg"].removeprefix("Value error, ")
    value = first.get("input")
    shown = "" if isinstance(value, (dict, list)) or first["type"] == "missing" else f" = {show(value)}"
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    return f"{source}: {where}{shown}: {message}{more}; {fix}"


# ---------------------------------------------------------------- command-line options


def check_run_options(*, iterations: int, warmup: int, seed: int) -> None:
    """The simulation options every predicting command shares."""
    check(iterations, "--iterations", ITERATIONS, "averages settle within a few hundred steps, e.g. --iterations 100")
    check(warmup, "--warmup", WARMUP, "e.g. --warmup 10")
    check(seed, "--seed", SEED, "give a non-negative whole number, e.g. --seed 0")


def check_predict_options(*, bucket_mb: float, ps_count: int, strategy: str, iterations: int, warmup: int,
                          seed: int) -> None:
    """`predict`'s own options (the CLI's and the Python API's), named as on the command line."""
    check(bucket_mb, "--bucket-mb", BUCKET_MIB, "DDP's default is 25")
    check(ps_count, "--ps", SERVERS, "e.g. --ps 2")
    if ps_count != 1 and strategy == "allreduce":
        raise UserError(f"--ps {ps_count} sets parameter-server shards, which all-reduce has none of; drop it, "
                        "or choose --strategy ps-sync or ps-async")
    check_run_options(iterations=iterations, warmup=warmup, seed=seed)


def check_work(kind: str, methods: Sequence[str], worker_counts: Sequence[int], steps: int, tensors: int) -> None:
    """Refuse before any work a fine simulation this program cannot finish in minutes (the bounds
    above say why); the coarse method's cost does not grow with the steps, workers or tensors."""
    if "fine" not in methods:
        return
    runs = list(worker_counts) + [1]  # the one-worker baseline of speedup
    if kind == "allreduce":
        work = sum(steps * (n + FINE_ALLREDUCE_STEP_OVERHEAD_WORKERS) for n in runs)
        limit, unit = FINE_ALLREDUCE_WORKER_STEPS, "worker-steps"
    else:
        work = sum(steps * n * max(tensors, 1) for n in runs)
        limit, unit = FINE_DES_MESSAGES, "messages (workers x steps x tensors)"
    if work > limit:
        raise UserError(
            f"--method fine for {kind} at {max(worker_counts):,} workers x {steps:,} steps (warm-up included) x "
            f"{tensors} tensors is {work:.3g} {unit} over all worker counts, over the limit of {limit:.3g} (about "
            "a minute of simulation); use --method coarse, fewer --iterations or fewer worker counts")


def check_output_path(path: str | os.PathLike[str] | None, option: str) -> None:
    """Fail before the work, not after it, when an output cannot be written where asked."""
    if path is None or str(path) == "":
        if path is not None:
            raise UserError(f"{option} needs a file name, e.g. {option} out.json")
        return
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{option} {path} is a directory; give a file name, e.g. {option} {path / 'out.json'}")
    parent = path.parent
    while not parent.exists():
        if parent.is_symlink() or parent == parent.parent:
            break
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise UserError(f"{option} {path}: {parent} is a file, not a directory; choose another path")
    if parent.is_dir() and not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {path}: cannot write in {parent} (permission denied); choose another directory")
    if path.exists() and not os.access(path, os.W_OK) and not os.access(parent, os.W_OK):
        raise UserError(f"{option} {path}: the file is not writable; choose another path")


def check_outputs(outputs: dict[str, str | os.PathLike[str] | None]) -> None:
    """Every output of a run (option -> path) checked, and no two the same file."""
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        check_output_path(path, option)
        if path:
            resolved = Path(path).resolve()
            if resolved in seen:
                raise UserError(f"{seen[resolved]} and {option} name the same file {path}; give two different files")
            seen[resolved] = option
