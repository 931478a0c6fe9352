"""Does a longer measured window steady the ground truth? (root, torch)

Async PS workers drift in and out of bunches (`benchmarks/async_phases.py`), so 15 measured
steps, validation's window, catch different mixes of those phases from run to run. This replays
one profile with async PS on the emulated cluster, interleaving runs of each window length
(round r runs every length once before round r+1, so a slow spell of the machine hits all alike),
and reports each length's runs, median and spread = (max - min) / median. With `--real`, PROFILE
names a model that trains for real (batch `--batch-size`, `--image-size`), as validation's
real-compute cases do: is the spread of a compute-bound case (set 35's real cnn: 24.8% median over
15-step windows at 0.40 cores) a matter of window length?

    .venv/bin/python benchmarks/window_length.py PROFILE [--workers 3] [--bandwidth 700Mbit]
        [--cpu-quota 0.38] [--steps 15,45] [--rounds 4] [--strategy ps-async] [--name NAME]
        [--real --batch-size 16 --image-size 32]

Raw output: benchmarks/results/window_length/NAME.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from sgdscale.runtime.testbed import Testbed
from sgdscale.runtime.train import TrainConfig, replay_config, run_training
from sgdscale.units import parse_bandwidth_bps

OUT = Path(__file__).parent / "results" / "window_length"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--strategy", default="ps-async")
    parser.add_argument("--bandwidth", default="700Mbit")
    parser.add_argument("--cpu-quota", type=float, default=0.38)
    parser.add_argument("--steps", default="15,45", help="measured steps per run, one window length each")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--name", default=None, help="result file stem [default: from the arguments]")
    parser.add_argument("--real", action="store_true", help="PROFILE is a model to train for real")
    parser.add_argument("--batch-size", type=int, default=16, help="with --real")
    parser.add_argument("--image-size", type=int, default=None, help="with --real")
    args = parser.parse_args(argv)
    rate = parse_bandwidth_bps(args.bandwidth)
    lengths = [int(s) for s in args.steps.split(",")]
    name = args.name or f"{Path(args.profile).stem}{'-real' if args.real else ''}-{args.strategy}-w{args.workers}-{args.bandwidth}-q{args.cpu_quota:g}"
    runs: dict[int, list[dict]] = {n: [] for n in lengths}
    began = time.time()
    for round_index in range(args.rounds):
        for steps in lengths:
            options = dict(workers=args.workers, strategy=args.strategy,
                           ps_count=1 if args.strategy != "allreduce" else 0, iterations=steps,
                           warmup=args.warmup, bandwidth_bps=rate, cpu_quota=args.cpu_quota)
            config = (TrainConfig(model=args.profile, batch_size=args.batch_size, image_size=args.image_size,
                                  **options) if args.real else replay_config(args.profile, **options))
            with Testbed(config.world_size, rate, args.cpu_quota, pin_cpus=True) as bed:
                measurement = run_training(config, placement=bed, timeout_s=900)
            cpu = measurement.environment.cpu or {}
            runs[steps].append({"throughput": measurement.throughput,
                                "other_load_cores": cpu.get("other_load_cores"),
                                "nodes": cpu.get("nodes"),
                                "iteration_s": [w.iteration_s for w in measurement.workers]})
            print(f"round {round_index + 1}/{args.rounds}, {steps} steps: {measurement.throughput:.2f} samples/s",
                  flush=True)
    lines = [f"# Window length: {name}", "",
             f"`benchmarks/window_length.py {' '.join(argv)}` ({time.time() - began:.0f} s in all; "
             f"{args.warmup} warm-up steps per run; runs interleaved by round). Spread = (max - min) / median.", "",
             "| measured steps | runs (samples/s) | median | spread |", "|---:|---|---:|---:|"]
    for steps, chosen in runs.items():
        values = [r["throughput"] for r in chosen]
        lines.append(f"| {steps} | {', '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.2f} | "
                     f"{(max(values) - min(values)) / statistics.median(values):.1%} |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps({"args": vars(args), "runs": {str(k): v for k, v in runs.items()}},
                                                 indent=1) + "\n")
    (OUT / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
