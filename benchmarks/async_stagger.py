"""Do async parameter-server workers push at the same time, or take turns? Measured from traces.

Held-out set 19's async replays ran 20-36% faster than the fine method predicted with the link
sharing measured on that cluster. This runs one such case on the emulated cluster with `sgdscale
train --trace` (the shard timestamps every gradient it applies) and reads, per worker and step, the
*push window*: from the shard's first to its last update of that worker's step, the span over
which the worker's gradients arrived. It reports how much of each window other workers' windows
cover (0: the workers take turns; near 1: they push together and share the shard's NIC) and how
long a window lasts against the line time of its bytes. Beside it: the fine method's throughput
from the case's network file with equal sharing among started flows (newcomer weight 1) and with
the flows already moving first (`sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT`).

    .venv/bin/python benchmarks/async_stagger.py [--workers 2,3] [--rounds 2]
        [--profile benchmarks/results/accuracy-heldout19/profiles/replay-resnet18-b16.json]
        [--network benchmarks/results/accuracy-heldout19/networks/1800Mbit-q0.44-n2-3-4.json]
        [--bandwidth-mbit 1800] [--quota 0.44] [--tag NAME]
Raw output: benchmarks/results/async_stagger/README.md and the traces (*.trace.json.gz); with --tag,
benchmarks/results/async_stagger/NAME/.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "async_stagger"
SET19 = HERE / "results" / "accuracy-heldout19"


def push_windows(trace: dict) -> dict[int, list[tuple[float, float, float]]]:
    """Per worker: (start s, end s, bytes) of each step's push window, from the shard's updates."""
    sizes = {int(e["name"].split()[-1]): e["args"]["bytes"] for e in trace["traceEvents"]
             if e.get("ph") == "X" and e["name"].startswith("push tensor")}
    steps: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e["name"].startswith("update tensor"):
            steps[(e["args"]["worker"], e["args"]["iteration"])].append(e)
    windows: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    for (worker, _), events in sorted(steps.items()):
        start = min(e["ts"] for e in events) / 1e6
        end = max(e["ts"] + e["dur"] for e in events) / 1e6
        windows[worker].append((start, end, float(sum(sizes[e["args"]["tensor"]] for e in events))))
    return windows


def overlap_fraction(windows: dict[int, list[tuple[float, float, float]]]) -> list[float]:
    """For every window: the share of it that some other worker's window covers."""
    out = []
    for worker, own in windows.items():
        others = sorted((s, e) for w, ws in windows.items() if w != worker for s, e, _ in ws)
        for start, end, _ in own:
            covered, cursor = 0.0, start
            for s, e in others:
                lo, hi = max(s, cursor), min(e, end)
                if hi > lo:
                    covered += hi - lo
                    cursor = hi
            out.append(covered / (end - start) if end > start else 0.0)
    return out


def predicted(profile: str, network: str, bandwidth_bps: float, workers: int, weight: float) -> float:
    """Fine throughput from the network file, as validation predicts a slept replay."""
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel, load_network
    from sgdscale.predict import predict
    from sgdscale.profile import load_profile
    from sgdscale.strategy import Strategy

    measured = load_network(network)
    comm = dataclasses.replace(CommModel.from_network(measured), interference=None, newcomer_share_weight=weight)
    cluster = Cluster(workers, bandwidth_bps, measured.p2p.alpha_s, 1)
    result = predict(load_profile(profile), cluster, Strategy(kind="ps-async"), comm, [workers], methods=("fine",),
                     iterations=100, variability=False)
    return result.results[0].throughput


def main(argv: list[str]) -> int:
    from sgdscale.comm.sharing import NEWCOMER_SHARE_WEIGHT

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="2,3")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profile", default=str(SET19 / "profiles" / "replay-resnet18-b16.json"))
    parser.add_argument("--network", default=str(SET19 / "networks" / "1800Mbit-q0.44-n2-3-4.json"))
    parser.add_argument("--bandwidth-mbit", type=float, default=1800)
    parser.add_argument("--quota", type=float, default=0.44)
    parser.add_argument("--tag", default=None, help="write to results/async_stagger/TAG/")
    args = parser.parse_args(argv)
    out = OUT / args.tag if args.tag else OUT
    out.mkdir(parents=True, exist_ok=True)
    line_Bps = args.bandwidth_mbit * 1e6 / 8
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            for workers in [int(w) for w in args.workers.split(",")]:
                stem = f"w{workers}-r{round_index + 1}"
                trace_path, out_path = Path(tmp) / f"{stem}.trace.json", Path(tmp) / f"{stem}.json"
                subprocess.run([sys.executable, "-m", "sgdscale", "train", args.profile, "--replay", "--strategy", "ps-async",
                                "--ps", "1", "--workers", str(workers), "--emulate", "--bandwidth",
                                f"{args.bandwidth_mbit:g}Mbit", "--cpu-quota", str(args.quota), "-i", "30",
                                "-o", str(out_path), "--trace", str(trace_path)], check=True, capture_output=True)
                throughput = json.loads(out_path.read_text())["throughput"]
                trace = json.loads(trace_path.read_text())
                with open(trace_path, "rb") as raw, gzip.open(out / f"{stem}.trace.json.gz", "wb") as packed:
                    shutil.copyfileobj(raw, packed)
                windows = push_windows(trace)
                overlap = overlap_fraction(windows)
                stretch = [(e - s) * line_Bps / b for ws in windows.values() for s, e, b in ws if b]
                rows.append((workers, round_index + 1, throughput, statistics.median(overlap), max(overlap),
                             statistics.median(stretch)))
                print(f"{workers} workers, round {round_index + 1}: {throughput:.1f} samples/s, push windows overlapped "
                      f"{statistics.median(overlap):.0%} (median), lasting {statistics.median(stretch):.2f}x line time",
                      flush=True)
    fine = {(w, weight): predicted(args.profile, args.network, args.bandwidth_mbit * 1e6, w, weight)
            for w in sorted({r[0] for r in rows}) for weight in (1.0, NEWCOMER_SHARE_WEIGHT)}
    lines = ["# Async PS: do the workers' pushes overlap at the shard?", "",
             "Generated by `benchmarks/async_stagger.py " + " ".join(argv) + f"`. Replay of `{Path(args.profile).name}`, one shard, "
             f"{args.bandwidth_mbit:g} Mbit/s, {args.quota:g} cores per node, 30 measured steps. Push window: the shard's "
             "first to last update of one worker's step; overlapped: the share of it other workers' windows cover; "
             "line time: its bytes at the nominal rate. Traces: `w<workers>-r<round>.trace.json.gz` (Perfetto).", "",
             "| workers | round | measured (samples/s) | push window overlapped, median | max | window / line time, median | "
             f"fine, equal sharing | fine, flows already moving first ({NEWCOMER_SHARE_WEIGHT:g}) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for workers, round_index, throughput, overlap, worst, stretch in rows:
        lines.append(f"| {workers} | {round_index} | {throughput:.1f} | {overlap:.0%} | {worst:.0%} | {stretch:.2f} | "
                     f"{fine[(workers, 1.0)]:.1f} | {fine[(workers, NEWCOMER_SHARE_WEIGHT)]:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (out / "README.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
