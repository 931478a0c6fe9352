"""How steady is netbench's CPU per byte, and how many samples does it need?

A network file's point-to-point CPU per byte (`CpuCost.p2p_s_per_byte`, what every PS prediction
charges a shard per byte it moves) moved 26% in the median and up to 84% between the rounds of one
held-out set (`network_file_spread.md`), while the runs it predicted moved 3%. Its samples at 16 MB
are bimodal within one benchmark (set 71: 8.9-9.7 ms or 16.1-17.4 ms of CPU per round trip), and
netbench fits the median of 5 per size. This runs netbench's p2p op (validation's sizes, 1 kB-16 MB)
with many repeats on the cluster shape of a held-out set, several times on fresh clusters, and
scores estimators on the same samples:
- "median of 5" (netbench until now): least squares over the per-size medians of 5 repeats, one
  estimate per consecutive block of 5 repeats;
- "mean of R" and "median of R": least squares over the per-size means (medians) of all R repeats;
- "mean of 5": the per-size means of each block of 5.
Spread = (max - min) / median over the estimates. It also gives each rank's share of the CPU (the
file keeps the busier rank's per repeat) and each run's samples at the largest size. An experiment
on the measurement, not a held-out set.

    flock /tmp/sgdscale-cpu.lock .venv/bin/python benchmarks/netbench_cpu_samples.py [--runs 4]
        [--repeats 40] [--nodes 4] [--bandwidth-mbit 850] [--quota 0.22] [--output netbench_cpu_samples]

Raw output: benchmarks/results/<output>.md and <output>.json (every sample).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BLOCK = 5  # netbench's repeats per size until now


def slope_s_per_byte(sizes: list[int], cpu_s: list[float]) -> float:
    """Least-squares slope of CPU seconds against bytes moved (a round trip moves 2M), as netbench fits."""
    moved = np.array([2.0 * s for s in sizes])
    design = np.vstack([np.ones(len(moved)), moved]).T
    return float(np.linalg.lstsq(design, np.array(cpu_s), rcond=None)[0][1])


def estimate(per_size: dict[int, list[float]], pick, statistic) -> float:
    sizes = sorted(per_size)
    return slope_s_per_byte(sizes, [statistic(pick(per_size[s])) for s in sizes])


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def run_cluster(nodes: int, bandwidth_bps: float, quota: float, repeats: int, launches: int) -> list[dict]:
    """`launches` netbench p2p runs one after another on one fresh cluster (new processes and
    connections each); per run and size, the busier rank's CPU per repeat and both ranks'."""
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.netbench import BENCH_TARGET, bench_config, machine_summary, message_sizes
    from sgdscale.runtime.testbed import Testbed

    config = bench_config(message_sizes(1e3, 16e6, 9), repeats=repeats, warmup=1, ops=["p2p"])
    runs = []
    with Testbed(nodes, bandwidth_bps, quota, pin_cpus=True) as bed:
        for _ in range(launches):
            before = bed.cpu_snapshot()
            result = launch(BENCH_TARGET, config, nodes, placement=bed, timeout_s=600)
            machine = machine_summary(bed.cpu_report(before, bed.cpu_snapshot()))
            by_rank = {int(r["rank"]): r["cpu_s"]["p2p"] for r in result.results}
            wall = next(r["samples"]["p2p"] for r in result.results if int(r["rank"]) == 0)
            runs.append({"cpu_s": {size: [max(a, b) for a, b in zip(by_rank[0][size], by_rank[1][size])]
                                   for size in by_rank[0]},
                         "rank0_cpu_s": by_rank[0], "rank1_cpu_s": by_rank[1], "wall_s": wall, "machine": machine})
    return runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=4, help="fresh clusters")
    parser.add_argument("--launches", type=int, default=1, help="netbench runs one after another on each cluster")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--bandwidth-mbit", type=float, default=850)
    parser.add_argument("--quota", type=float, default=0.22)
    parser.add_argument("--output", default="netbench_cpu_samples")
    parser.add_argument("--reuse", action="store_true", help="score the kept <output>.json again, run nothing")
    args = parser.parse_args(argv)
    raw_path = HERE / "results" / f"{args.output}.json"
    if args.reuse:
        kept = json.loads(raw_path.read_text())
        runs = kept["runs"]
        for key in ("runs", "launches", "repeats", "nodes", "bandwidth_mbit", "quota"):
            setattr(args, key, kept["args"].get(key, getattr(args, key)))
    else:
        runs = []
        for index in range(args.runs):
            for run in run_cluster(args.nodes, args.bandwidth_mbit * 1e6, args.quota, args.repeats, args.launches):
                runs.append({**run, "cluster": index + 1})
            print(f"cluster {index + 1}/{args.runs} done", flush=True)
        raw_path.write_text(json.dumps({"args": vars(args), "runs": runs}) + "\n")

    for index, run in enumerate(runs):
        run.setdefault("cluster", index + 1)  # one run per cluster
    per_run = [{int(k): v for k, v in run["cpu_s"].items()} for run in runs]
    repeats = min(len(v) for run in per_run for v in run.values())
    blocks = repeats // BLOCK
    estimators = {
        "median of 5 (until now)": [[estimate(r, lambda xs, b=b: xs[b * BLOCK:(b + 1) * BLOCK], statistics.median)
                                     for b in range(blocks)] for r in per_run],
        "mean of 5": [[estimate(r, lambda xs, b=b: xs[b * BLOCK:(b + 1) * BLOCK], statistics.mean)
                       for b in range(blocks)] for r in per_run],
        f"median of {repeats}": [[estimate(r, lambda xs: xs[:repeats], statistics.median)] for r in per_run],
        f"mean of {repeats}": [[estimate(r, lambda xs: xs[:repeats], statistics.mean)] for r in per_run],
        f"mean of {repeats}, pooled per cluster": [
            [estimate({size: [x for r, run in zip(per_run, runs) if run["cluster"] == cluster for x in r[size]]
                       for size in per_run[0]}, lambda xs: xs, statistics.mean)]
            for cluster in sorted({run["cluster"] for run in runs})],
        f"mean of {repeats // 2}": [[estimate(r, lambda xs, h=h: xs[h * (repeats // 2):(h + 1) * (repeats // 2)],
                                              statistics.mean) for h in range(2)] for r in per_run],
    }
    lines = ["# netbench's point-to-point CPU per byte: how steady, from how many samples", "",
             f"Generated by `benchmarks/netbench_cpu_samples.py {' '.join(argv)}`. {len(runs)} netbench p2p runs, "
             f"{args.launches} after another on each of fresh {args.nodes}-node emulated cluster ({args.bandwidth_mbit:g} Mbit/s, {args.quota:g} "
             f"cores per node, pinned, as `validate`), {repeats} kept repeats per size (1 kB-16 MB, 9 sizes). "
             "CPU per byte moved in ns (CPU seconds, not wall). Within a run: the spread over its blocks of 5 "
             "consecutive repeats (or halves); between runs: the spread of the runs' estimates (for the "
             "blocked estimators, of every block of every run).", "",
             "| estimator | estimates (ns/B) | median | spread within runs (median over runs) | spread over all |",
             "|---|---|---:|---:|---:|"]
    for name, by_run in estimators.items():
        flat = [x for r in by_run for x in r]
        within = [spread(r) for r in by_run if len(r) > 1]
        lines.append(f"| {name} | " + "; ".join(", ".join(f"{x * 1e9:.2f}" for x in r) for r in by_run)
                     + f" | {statistics.median(flat) * 1e9:.2f} | "
                     + (f"{statistics.median(within):.0%}" if within else "-") + f" | {spread(flat):.0%} |")
    largest = max(per_run[0])
    lines += ["", f"At {largest / 1e6:g} MB, CPU per round trip (ms), the busier rank per repeat, and each rank's "
              "median; wall time per one-way transfer (ms, median):", "",
              "| run | cluster | mean of all (ns/B) | samples (ms) | rank 0 median | rank 1 median | wall median | "
              "other load (cores) | of it steal |", "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for index, run in enumerate(runs):
        key = str(largest)
        lines.append(f"| {index + 1} | {run['cluster']} | "
                     f"{estimate(per_run[index], lambda xs: xs[:repeats], statistics.mean) * 1e9:.2f} | " + ", ".join(f"{x * 1e3:.1f}" for x in run["cpu_s"][key][:repeats])
                     + f" | {statistics.median(run['rank0_cpu_s'][key]) * 1e3:.1f} | "
                     f"{statistics.median(run['rank1_cpu_s'][key]) * 1e3:.1f} | "
                     f"{statistics.median(run['wall_s'][key]) * 1e3:.1f} | "
                     + (f"{run['machine']['other_load_cores']:.2f} | {run['machine']['steal_cores']:.2f} |"
                        if run.get("machine") else "- | - |"))
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
