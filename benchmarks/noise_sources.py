"""Which testbed settings make the ground truth hold still? (needs root and torch)

The same short real runs are repeated under each testbed setting, interleaved (round r runs every
setting and case once before round r+1), so a slow spell of the machine hits every setting alike:

- settings: CFS period 10 ms or 100 ms, nodes pinned to cores (cpuset) or not, at one quota;
- cases: one worker alone (compute only: what a profile sees) and two workers with DDP over a
  shaped link (compute and communication).

For every run it records the throughput, the cores each node really received against its quota,
the fraction of CFS periods in which it was throttled, and the CPU the rest of the machine used
meanwhile (Testbed.cpu_report). It also re-reads every run's per-iteration times to show what the
warm-up and window lengths change. Spread = (max - min) / median over the rounds.

    .venv/bin/python benchmarks/noise_sources.py [--rounds 4] [--quota 0.45]

Raw output: benchmarks/results/noise_sources.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from sgdscale.runtime.testbed import Testbed
from sgdscale.runtime.train import TrainConfig, run_training

OUT = Path(__file__).parent / "results"
SETTINGS = {  # name: (CFS period in us, pin nodes to cores)
    "period 10 ms, unpinned": (10_000, False),
    "period 10 ms, pinned": (10_000, True),
    "period 100 ms, pinned": (100_000, True),
}
CASES = {  # name: TrainConfig keyword arguments (cnn and mlp as `sgdscale validate` runs them)
    "cnn, 1 worker": dict(model="cnn", workers=1, batch_size=16, image_size=32),
    "mlp, 2 workers, DDP, 1 Gbit/s": dict(model="mlp", workers=2, batch_size=32,
                                         model_options={"width": 512, "depth": 4}),
}


def run_once(case: dict, period_us: int, pinned: bool, quota: float, iterations: int, warmup: int) -> dict:
    config = TrainConfig(**case, iterations=iterations, warmup=warmup, bandwidth_bps=1e9, cpu_quota=quota)
    with Testbed(config.world_size, 1e9, quota, pin_cpus=pinned, cfs_period_us=period_us) as bed:
        measurement = run_training(config, placement=bed, timeout_s=600)
    cpu = measurement.environment.cpu or {}
    nodes = cpu.get("nodes", [])
    return {
        "throughput": measurement.throughput,
        "iteration_s": [w.iteration_s for w in measurement.workers],
        "received_cores": [n["received_cores"] for n in nodes],
        "throttled_periods_fraction": [n["throttled_periods_fraction"] for n in nodes],
        "other_load_cores": cpu.get("other_load_cores"),
    }


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def window_effects(runs: list[dict], batch: int, workers: int) -> dict[str, float]:
    """Spread of throughput recomputed from the kept iterations: drop more warm-up, or keep only
    half the window, to see whether a longer warm-up or window would have held still better."""
    def throughput(steps_per_worker: list[list[float]], begin: int, end: int) -> float:
        slowest = max(sum(steps[begin:end]) for steps in steps_per_worker)
        return workers * batch * (end - begin) / slowest

    n = len(runs[0]["iteration_s"][0])
    return {
        "whole window": spread([throughput(r["iteration_s"], 0, n) for r in runs]),
        "3 more warm-up iterations": spread([throughput(r["iteration_s"], 3, n) for r in runs]),
        "first half only": spread([throughput(r["iteration_s"], 0, n // 2) for r in runs]),
        "second half only": spread([throughput(r["iteration_s"], n // 2, n) for r in runs]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quota", type=float, default=0.45, help="CPU cores per node")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    runs: dict[tuple[str, str], list[dict]] = {}
    began = time.time()
    for round_index in range(args.rounds):
        for setting, (period_us, pinned) in SETTINGS.items():
            for case_name, case in CASES.items():
                run = run_once(case, period_us, pinned, args.quota, args.iterations, args.warmup)
                runs.setdefault((setting, case_name), []).append(run)
                print(f"round {round_index + 1}/{args.rounds} {setting:24s} {case_name:32s} "
                      f"{run['throughput']:7.1f} samples/s, received {run['received_cores']} cores, "
                      f"throttled {[round(f, 2) for f in run['throttled_periods_fraction']]}, "
                      f"other load {run['other_load_cores']:.2f} cores", flush=True)
    lines = ["# Noise sources of the emulated cluster", "",
             f"`benchmarks/noise_sources.py --rounds {args.rounds} --quota {args.quota}` "
             f"({args.iterations} measured iterations after {args.warmup} warm-up; {time.time() - began:.0f} s in all). "
             "Spread = (max - min) / median of throughput over the rounds, interleaved.", "",
             "| setting | case | median samples/s | spread | received cores (min..max per node) | "
             "throttled periods | other load (cores, median) |",
             "|---|---|---:|---:|---|---:|---:|"]
    for (setting, case_name), case_runs in runs.items():
        values = [r["throughput"] for r in case_runs]
        received = [c for r in case_runs for c in r["received_cores"] if c is not None]
        throttled = [f for r in case_runs for f in r["throttled_periods_fraction"]]
        others = [r["other_load_cores"] for r in case_runs if r["other_load_cores"] is not None]
        lines.append(f"| {setting} | {case_name} | {statistics.median(values):.1f} | {spread(values):.1%} | "
                     f"{min(received, default=float('nan')):.3f}..{max(received, default=float('nan')):.3f} | "
                     f"{statistics.median(throttled):.0%} | {statistics.median(others):.2f} |")
    lines += ["", "Window and warm-up, recomputed from the same runs (spread of throughput):", "",
              "| setting | case | whole window | 3 more warm-up | first half | second half |", "|---|---|---:|---:|---:|---:|"]
    for (setting, case_name), case_runs in runs.items():
        case = CASES[case_name]
        effects = window_effects(case_runs, case["batch_size"], case["workers"])
        lines.append(f"| {setting} | {case_name} | " + " | ".join(f"{v:.1%}" for v in effects.values()) + " |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "noise_sources.md").write_text("\n".join(lines) + "\n")
    (OUT / "noise_sources.json").write_text(json.dumps(
        {"args": vars(args), "runs": [{"setting": s, "case": c, "runs": r} for (s, c), r in runs.items()]}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
