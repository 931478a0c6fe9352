"""One async PS case with real compute, and the same profile replayed asleep and spinning. (needs root)

Fine is too slow on one-shard async PS with real compute and 4-6 workers, and right on replays, whose
compute sleeps (`async_step_spread.py`): the real runs' steps stay tight, the replays' spread wide. This
runs one such case three ways on the same emulated cluster, interleaved over rounds: the real model;
its own profile replayed with sleeping compute (`--replay-compute sleep`: the CPU stays free, as in every
kept replay); and replayed with spinning compute (`spin`: calibrated CPU work that takes the node's quota
as real compute does). If the spinning replay runs like the real model and the sleeping one like the
replays, what puts a run in the tight, fast state is the workers' CPU being busy while they compute.
Beside each run: its throughput, the spread of its steps (p95 over median, as `validate` records them)
and the fine method's prediction from the profile and the network file (for the sleeping replay, less
what sleeping workers do not pay, as `validate` predicts replays).

    .venv/bin/python benchmarks/async_compute_kind.py [--rounds 3] [--iterations 80] [--output NAME]
        (default: set 86's real bert, 6 workers, one shard, 570 Mbit/s, 0.28 cores, its round-0 profile and file)

Raw output: benchmarks/results/<output>.md and <output>/ (each run's measurement JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel
from sgdscale.comm.network import load_network
from sgdscale.predict import predict
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy
from sgdscale.units import parse_bandwidth_bps

HERE = Path(__file__).resolve().parent
SET86 = HERE / "results" / "accuracy-heldout86"
PROFILE = SET86 / "profiles" / "bert-b4-s64-layers2-hidden128-vocab2048-q0.28.json"
NETWORK = SET86 / "networks" / "570Mbit-q0.28-n6-7.json"
MODEL = ["bert", "--batch-size", "4", "--seq-len", "64", "--option", "layers=2", "--option", "hidden=128",
         "--option", "vocab=2048"]
KINDS = ("real", "replay, sleep", "replay, spin")


def train_args(kind: str, profile: Path, workers: int, shards: int, bandwidth: str, quota: float,
               iterations: int) -> list[str]:
    """`sgdscale train` arguments of one run of `kind`."""
    model = MODEL if kind == "real" else [str(profile), "--replay", "--replay-compute", kind.split(", ")[1]]
    return [*model, "--workers", str(workers), "--strategy", "ps-async", "--ps", str(shards), "--emulate",
            "--bandwidth", bandwidth, "--cpu-quota", str(quota), "--iterations", str(iterations), "--warmup", "5"]


def train_run(train: list[str], out: Path) -> tuple[float, float]:
    """Run `sgdscale train TRAIN --output OUT`; its (samples/s, step spread: p95 over median of the steps)."""
    subprocess.run([sys.executable, "-m", "sgdscale", "train", *train, "--output", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    measured = json.loads(out.read_text())
    steps = measured["iteration_s"]
    return measured["throughput"], steps["p95"] / steps["p50"]


def fine_of(kind: str, profile: Path, workers: int, shards: int, bandwidth: str, network: Path = NETWORK):
    """Fine's result (samples/s, a worker's step times) for a run of `kind`, as `validate` predicts it: a
    sleeping replay less what sleeping workers do not pay, a replay without per-step variability."""
    measured = load_network(str(network))
    comm = CommModel.from_network(measured)
    if kind == "replay, sleep":
        comm = comm.for_sleeping_workers()
    cluster = Cluster(workers, parse_bandwidth_bps(bandwidth), measured.p2p.alpha_s, shards)
    return predict(load_profile(str(profile)), cluster, Strategy(kind="ps-async"), comm, [workers],
                   methods=("fine",), iterations=200, variability=kind == "real").results[0]


def run_cells(runs: list[tuple[float, float]]) -> tuple[str, float]:
    """A report's cells for one variant's runs ((samples/s, step spread) each): "speeds | median | spreads",
    and the median samples/s."""
    median = statistics.median(speed for speed, _ in runs)
    return (f"{', '.join(f'{speed:.1f}' for speed, _ in runs)} | {median:.1f} | "
            f"{', '.join(f'{spread:.2f}' for _, spread in runs)}"), median


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=80)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--bandwidth", default="570Mbit")
    parser.add_argument("--quota", type=float, default=0.28)
    parser.add_argument("--output", default="async_compute_kind-bert-w6-570Mbit")
    args = parser.parse_args(argv)
    folder = HERE / "results" / args.output
    folder.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    for r in range(args.rounds):
        for kind in KINDS:
            out = folder / f"{kind.replace(', ', '-')}-r{r}.json"
            runs[kind].append(train_run(train_args(kind, PROFILE, args.workers, args.shards, args.bandwidth,
                                                   args.quota, args.iterations), out))
            print(f"round {r} {kind}: {runs[kind][-1][0]:.1f} samples/s, step spread {runs[kind][-1][1]:.2f}", flush=True)
    lines = ["# One async PS case: real compute, and its profile replayed asleep and spinning", "",
             "Generated by `benchmarks/async_compute_kind.py " + " ".join(argv) + f"`. Profile `{PROFILE.name}`, "
             f"network file `{NETWORK.name}` (set 86, round 0); {args.workers} workers, {args.shards} shard(s), "
             f"{args.bandwidth}, {args.quota} cores per node; runs interleaved over {args.rounds} rounds. Step spread: "
             "p95 over median of the workers' steps. Fine: today's prediction as `validate` makes it.", "",
             "| compute | samples/s per run | median | step spread per run | fine (samples/s) | fine's error |",
             "|---|---|---:|---|---:|---:|"]
    for kind in KINDS:
        fine = fine_of(kind, PROFILE, args.workers, args.shards, args.bandwidth).throughput
        cells, median = run_cells(runs[kind])
        lines.append(f"| {kind} | {cells} | {fine:.1f} | {fine / median - 1:+.1%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
