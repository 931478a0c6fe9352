"""Which testbed settings make the ground truth hold still? (needs root and torch)

The same short real runs are repeated under each testbed setting, interleaved (round r runs every
setting and case once before round r+1), so a slow spell of the machine hits every setting alike:

- settings: CFS period, nodes pinned to cores (cpuset) or not, CPU quota per node (`--settings`;
  the default compares periods and pinning at one quota);
- cases: one worker alone (compute only: what a profile sees) and two workers with DDP over a
  shaped link (compute and communication); `--cases` picks among them.

For every run it records the throughput, the cores each node really received against its quota,
the fraction of CFS periods in which it was throttled, the CPU the rest of the machine used
meanwhile (Testbed.cpu_report), and the CPU time the hypervisor stole from this VM (/proc/stat). It also re-reads every run's per-iteration times to show what the
warm-up and window lengths change. Spread = (max - min) / median over the rounds.

    .venv/bin/python benchmarks/noise_sources.py [--rounds 4] [--quota 0.45]
    .venv/bin/python benchmarks/noise_sources.py --rounds 5 --output noise_low_quota \
        --settings 10:pinned:0.28,20:pinned:0.28,10:pinned:0.45 --cases cnn-1,mobilenet_v2-ddp-2

Raw output: benchmarks/results/<output>.{json,md} (noise_sources by default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from sgdscale.runtime.testbed import Testbed
from sgdscale.runtime.train import TrainConfig, run_training

OUT = Path(__file__).parent / "results"
DEFAULT_SETTINGS = "10:unpinned,10:pinned,100:pinned"  # CFS period in ms : pinning [: quota]
CASES = {  # name: (label, TrainConfig keyword arguments), as `sgdscale validate` runs the models
    "cnn-1": ("cnn, 1 worker", dict(model="cnn", workers=1, batch_size=16, image_size=32, bandwidth_bps=1e9)),
    "mlp-ddp-2": ("mlp, 2 workers, DDP, 1 Gbit/s",
                  dict(model="mlp", workers=2, batch_size=32, model_options={"width": 512, "depth": 4},
                       bandwidth_bps=1e9)),
    "mobilenet_v2-ddp-2": ("mobilenet_v2, 2 workers, DDP, 2.2 Gbit/s",
                           dict(model="mobilenet_v2", workers=2, batch_size=4, image_size=32, bandwidth_bps=2.2e9)),
}


def parse_settings(text: str, default_quota: float) -> dict[str, tuple[int, bool, float]]:
    """'10:pinned:0.28,20:pinned' -> {name: (CFS period in us, pinned, quota in cores)}."""
    settings = {}
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) not in (2, 3) or parts[1] not in ("pinned", "unpinned"):
            sys.exit(f"bad setting {item!r}: write PERIOD_MS:pinned|unpinned[:QUOTA_CORES], e.g. 10:pinned:0.28")
        period_ms, pinned = int(parts[0]), parts[1] == "pinned"
        quota = float(parts[2]) if len(parts) == 3 else default_quota
        settings[f"period {period_ms} ms, {parts[1]}, {quota:g} cores"] = (period_ms * 1000, pinned, quota)
    return settings


def steal_s() -> float:
    """CPU time the hypervisor has stolen from this VM since boot, all CPUs (/proc/stat, USER_HZ ticks)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def run_once(case: dict, period_us: int, pinned: bool, quota: float, iterations: int, warmup: int) -> dict:
    config = TrainConfig(**case, iterations=iterations, warmup=warmup, cpu_quota=quota)
    with Testbed(config.world_size, config.bandwidth_bps, quota, pin_cpus=pinned, cfs_period_us=period_us) as bed:
        stolen_before = steal_s()
        measurement = run_training(config, placement=bed, timeout_s=600)
        stolen = steal_s() - stolen_before
    cpu = measurement.environment.cpu or {}
    nodes = cpu.get("nodes", [])
    return {
        "throughput": measurement.throughput,
        "iteration_s": [w.iteration_s for w in measurement.workers],
        "received_cores": [n["received_cores"] for n in nodes],
        "throttled_periods_fraction": [n["throttled_periods_fraction"] for n in nodes],
        "other_load_cores": cpu.get("other_load_cores"),
        "stolen_s": stolen,  # over the whole run (start-up included), both CPUs
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
    parser.add_argument("--settings", default=DEFAULT_SETTINGS,
                        help="comma-separated PERIOD_MS:pinned|unpinned[:QUOTA_CORES] (default %(default)s, at --quota)")
    parser.add_argument("--cases", default="cnn-1,mlp-ddp-2", help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--output", default="noise_sources", help="results file stem under benchmarks/results")
    args = parser.parse_args()
    settings = parse_settings(args.settings, args.quota)
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown:
        sys.exit(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    cases = {CASES[c][0]: CASES[c][1] for c in args.cases.split(",")}
    runs: dict[tuple[str, str], list[dict]] = {}
    began = time.time()
    for round_index in range(args.rounds):
        for setting, (period_us, pinned, quota) in settings.items():
            for case_name, case in cases.items():
                run = run_once(case, period_us, pinned, quota, args.iterations, args.warmup)
                runs.setdefault((setting, case_name), []).append(run)
                other = run["other_load_cores"]
                print(f"round {round_index + 1}/{args.rounds} {setting:24s} {case_name:32s} "
                      f"{run['throughput']:7.1f} samples/s, received {run['received_cores']} cores, "
                      f"throttled {[round(f, 2) for f in run['throttled_periods_fraction']]}, "
                      f"other load {'-' if other is None else f'{other:.2f}'} cores, "
                      f"stolen {run['stolen_s']:.2f} s", flush=True)
    lines = ["# Noise sources of the emulated cluster", "",
             f"`benchmarks/noise_sources.py --rounds {args.rounds} --quota {args.quota} --settings {args.settings} "
             f"--cases {args.cases} --output {args.output}` "
             f"({args.iterations} measured iterations after {args.warmup} warm-up; {time.time() - began:.0f} s in all). "
             "Spread = (max - min) / median of throughput over the rounds, interleaved.", "",
             "| setting | case | median samples/s | spread | received cores (min..max per node) | "
             "throttled periods | other load (cores, median) | stolen by the hypervisor (s per run, max) |",
             "|---|---|---:|---:|---|---:|---:|---:|"]
    for (setting, case_name), case_runs in runs.items():
        values = [r["throughput"] for r in case_runs]
        received = [c for r in case_runs for c in r["received_cores"] if c is not None]
        throttled = [f for r in case_runs for f in r["throttled_periods_fraction"]]
        others = [r["other_load_cores"] for r in case_runs if r["other_load_cores"] is not None] or [float("nan")]
        lines.append(f"| {setting} | {case_name} | {statistics.median(values):.1f} | {spread(values):.1%} | "
                     f"{min(received, default=float('nan')):.3f}..{max(received, default=float('nan')):.3f} | "
                     f"{statistics.median(throttled):.0%} | {statistics.median(others):.2f} | "
                     f"{max(r.get('stolen_s', 0.0) for r in case_runs):.2f} |")
    lines += ["", "Window and warm-up, recomputed from the same runs (spread of throughput):", "",
              "| setting | case | whole window | 3 more warm-up | first half | second half |", "|---|---|---:|---:|---:|---:|"]
    for (setting, case_name), case_runs in runs.items():
        case = cases[case_name]
        effects = window_effects(case_runs, case["batch_size"], case["workers"])
        lines.append(f"| {setting} | {case_name} | " + " | ".join(f"{v:.1%}" for v in effects.values()) + " |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{args.output}.md").write_text("\n".join(lines) + "\n")
    (OUT / f"{args.output}.json").write_text(json.dumps(
        {"args": vars(args), "runs": [{"setting": s, "case": c, "runs": r} for (s, c), r in runs.items()]}, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
