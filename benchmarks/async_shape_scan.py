"""Which profiles put a sleeping async PS replay in the tight, fast state fine misses. (needs root)

`async_compute_kind.py` found set 86's real bert as fast and as tight replayed asleep as run for real,
and fine 13-20% too slow on both, while the kept replays of the built-in profiles are wide and fine is
right on them. This replays, asleep and interleaved over rounds on one emulated cluster, set 86's small
bert profile at its own compute and with every compute time scaled up, and the built-in bert profile, and
sets each beside fine's prediction (as `validate` predicts a replay): which property of a profile the
state follows (`--sized`: the same profile with its bytes and compute times scaled together, which
changes nothing for fine but each message's latency). Each run's iterations are chosen from fine's step so that its window is about
`--window-s` long.

    .venv/bin/python benchmarks/async_shape_scan.py [--rounds 2] [--scales 1,4] [--sized 8] [--builtin bert]
        [--output NAME]

Raw output: benchmarks/results/<output>.md and <output>/ (the scaled profiles and each run's measurement).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from async_compute_kind import NETWORK, PROFILE, train_run

from sgdscale.calibrate import to_step_time
from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel
from sgdscale.comm.network import load_network
from sgdscale.predict import predict
from sgdscale.profile import load_profile, save_profile
from sgdscale.strategy import Strategy
from sgdscale.units import parse_bandwidth_bps

HERE = Path(__file__).resolve().parent


def fine_of(profile_path: Path, workers: int, bandwidth: str) -> tuple[float, float, float]:
    """Fine's (samples/s, a worker's mean step, step spread p95 / median) for a sleeping replay."""
    network = load_network(str(NETWORK))
    cluster = Cluster(workers, parse_bandwidth_bps(bandwidth), network.p2p.alpha_s, 1)
    result = predict(load_profile(str(profile_path)), cluster, Strategy(kind="ps-async"),
                     CommModel.from_network(network).for_sleeping_workers(), [workers], methods=("fine",),
                     iterations=200, variability=False).results[0]
    return result.throughput, result.iteration_s["mean"], result.iteration_s["p95"] / result.iteration_s["p50"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--scales", default="1,4", help="compute scales of set 86's bert profile")
    parser.add_argument("--sized", default="", help="scales of set 86's bert profile's bytes and compute times "
                        "together (the same shape, its messages k times larger and its steps k times longer)")
    parser.add_argument("--builtin", default="bert", help="a built-in profile replayed beside them ('' for none)")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--bandwidth", default="570Mbit")
    parser.add_argument("--quota", type=float, default=0.28)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--output", default="async_shape_scan-w6-570Mbit")
    args = parser.parse_args(argv)
    folder = HERE / "results" / args.output
    folder.mkdir(parents=True, exist_ok=True)
    base = load_profile(str(PROFILE))
    variants: dict[str, Path] = {}
    for scale in (float(s) for s in args.scales.split(",")):
        path = folder / f"bert-small-compute-x{scale:g}.json"
        save_profile(to_step_time(base, base.compute_s * scale, same_device=True), path)
        variants[f"set 86's bert, compute x{scale:g}"] = path
    for scale in (float(s) for s in args.sized.split(",") if s.strip()):
        data = to_step_time(base, base.compute_s * scale, same_device=True).to_json()
        for layer in data["layers"]:
            for tensor in layer["params"]:
                tensor["numel"] = int(tensor["numel"] * scale)
                tensor["bytes"] = int(tensor["bytes"] * scale)
        path = folder / f"bert-small-sized-x{scale:g}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        variants[f"set 86's bert, bytes and compute x{scale:g}"] = path
    if args.builtin:
        path = folder / f"builtin-{args.builtin}.json"
        save_profile(load_profile(args.builtin), path)
        variants[f"built-in {args.builtin}"] = path
    fine = {name: fine_of(path, args.workers, args.bandwidth) for name, path in variants.items()}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, path in variants.items():
            iterations = max(10, math.ceil(args.window_s / fine[name][1]))
            out = folder / f"{path.stem}-r{r}.json"
            runs[name].append(train_run([str(path), "--replay", "--replay-compute", "sleep", "--workers", str(args.workers),
                                         "--strategy", "ps-async", "--ps", "1", "--emulate", "--bandwidth", args.bandwidth,
                                         "--cpu-quota", str(args.quota), "--iterations", str(iterations), "--warmup", "5"],
                                        out))
            print(f"round {r} {name}: {runs[name][-1][0]:.1f} samples/s, step spread {runs[name][-1][1]:.2f}", flush=True)
    lines = ["# Sleeping async PS replays of different profiles: the tight state and fine", "",
             "Generated by `benchmarks/async_shape_scan.py " + " ".join(argv) + f"`. Network file `{NETWORK.name}` "
             f"(set 86, round 0); {args.workers} workers, one shard, {args.bandwidth}, {args.quota} cores per node, "
             f"sleeping compute; runs interleaved over {args.rounds} rounds. Step spread: p95 over median of the "
             "workers' steps. Fine: as `validate` predicts a replay.", "",
             "| profile | samples/s per run | median | step spread per run | fine (samples/s) | fine's step spread | fine's error |",
             "|---|---|---:|---|---:|---:|---:|"]
    for name in variants:
        speeds = [s for s, _ in runs[name]]
        median = statistics.median(speeds)
        lines.append(f"| {name} | {', '.join(f'{s:.1f}' for s in speeds)} | {median:.1f} | "
                     f"{', '.join(f'{p:.2f}' for _, p in runs[name])} | {fine[name][0]:.1f} | {fine[name][2]:.2f} | "
                     f"{fine[name][0] / median - 1:+.1%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
