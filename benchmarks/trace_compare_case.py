"""One case on the emulated cluster with `sgdscale train --trace-compare`, for benchmarks that read
the measured and the fine method's predicted timeline side by side (`sync_offset.py`, `step_parts.py`).

`parse(argv, default_iterations, strategy)` takes the benchmark's own options before `--` and the
model to train after it; `run(args, train_args, out_stem)` trains, keeps the trace gzipped at
`out_stem.trace.json.gz` (the run's measurement at `out_stem.measurement.json.gz`) and returns (measured
throughput, trace).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def parse(argv: list[str], description: str, default_iterations: int,
          strategy: str | None = None) -> tuple[argparse.Namespace, list[str]]:
    """(the benchmark's options, the model to train): split at `--`. `strategy` fixed, or an option."""
    if "--" not in argv:
        raise SystemExit("give the model to train after --, e.g. -- resnet18 -b 4 --image-size 32")
    split = argv.index("--")
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--profile", required=True, help="the profile to predict from")
    parser.add_argument("--network", required=True, help="the measured network file to predict with")
    parser.add_argument("--bandwidth-mbit", type=float, required=True)
    parser.add_argument("--quota", type=float, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=1, help="server shards of the PS strategies")
    parser.add_argument("--iterations", type=int, default=default_iterations)
    parser.add_argument("--report-only", action="store_true",
                        help="read the trace and measurement kept by an earlier run of the same --tag instead of training")
    if strategy is None:
        parser.add_argument("--strategy", default="ps-async")
    args = parser.parse_args(argv[:split])
    if strategy is not None:
        args.strategy = strategy
    return args, argv[split + 1:]


def run(args: argparse.Namespace, train_args: list[str], out_stem: Path) -> tuple[float, dict]:
    """Train the case with the trace comparison; keep the trace; (measured samples/s, the trace). With
    `--report-only`, the kept ones instead."""
    if args.report_only:
        with gzip.open(f"{out_stem}.measurement.json.gz", "rt") as f:
            throughput = json.load(f)["throughput"]
        with gzip.open(f"{out_stem}.trace.json.gz", "rt") as f:
            return throughput, json.load(f)
    out_stem.parent.mkdir(parents=True, exist_ok=True)
    ps = ["--ps", str(args.ps)] if args.strategy.startswith("ps") else []
    with tempfile.TemporaryDirectory() as tmp:
        trace_path, out_path = Path(tmp) / "compare.json", Path(tmp) / "m.json"
        subprocess.run([sys.executable, "-m", "sgdscale", "train", *train_args, "--strategy", args.strategy, *ps,
                        "--workers", str(args.workers), "-i", str(args.iterations), "--emulate", "--bandwidth",
                        f"{args.bandwidth_mbit:g}Mbit", "--cpu-quota", str(args.quota), "--trace-compare", str(trace_path),
                        "--trace-profile", args.profile, "--trace-network", args.network, "-o", str(out_path)],
                       check=True, capture_output=True)
        throughput = json.loads(out_path.read_text())["throughput"]
        with open(out_path, "rb") as raw, gzip.open(f"{out_stem}.measurement.json.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)  # its CPU report says what the nodes received
        trace = json.loads(trace_path.read_text())
        with open(trace_path, "rb") as raw, gzip.open(f"{out_stem}.trace.json.gz", "wb") as packed:
            shutil.copyfileobj(raw, packed)
    return throughput, trace
