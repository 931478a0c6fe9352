"""How many simulated iterations an asynchronous-PS throughput needs, and why stopping early on a
confidence interval does not save work.

One exact run (resnet50, async PS, 1 server, 10 Gbit/s, per-tensor, 64 workers, 10 warm-up +
ITERATIONS measured steps per worker, seed 0). From its step ends:
- the throughput estimate from each worker's first k measured steps (the predictor's formula,
  sum over workers of batch * k / their duration), against k;
- batch means: blocks of b consecutive steps of every worker, the cluster's throughput per block;
  their coefficient of variation and lag-1 correlation, and the 95% interval half-width a batch-means
  stop would report after 100 iterations.

    python benchmarks/async_ps_convergence.py
Writes benchmarks/results/async_ps_convergence.{json,md}.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.topology import Topology
from sgdscale.fine.dag import ps_plan
from sgdscale.fine.ps import run_ps
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy
from sgdscale.variability import ComputeSampler

RESULTS = Path(__file__).parent / "results"
WORKERS, WARMUP, ITERATIONS = 64, 10, 300
PREFIXES = (5, 10, 20, 40, 100, 200, 300)
BLOCKS = (1, 2, 5, 10)


def main() -> int:
    profile = load_profile("resnet50")
    cluster = Cluster(WORKERS)
    strategy = Strategy(kind="ps-async", grouping="per-tensor")
    topology = Topology.of(cluster, CommModel.from_link(10e9, 20e-6), strategy)
    sampler = ComputeSampler(profile, cluster, seed=0)
    total = WARMUP + ITERATIONS
    rows = np.array([sampler.draw_rows() for _ in range(total)]).reshape(total, WORKERS)
    began = time.process_time()
    run = run_ps(profile, cluster, topology, ps_plan(profile, cluster, strategy, topology), sampler, rows, False,
                 WARMUP)
    cpu_s = time.process_time() - began
    ends = np.array(run.ends)
    steps = np.diff(np.concatenate([np.zeros((WORKERS, 1)), ends], axis=1), axis=1)[:, WARMUP:]
    batch = profile.batch_size

    def estimate(first: int, last: int) -> float:
        return float((batch * (last - first) / steps[:, first:last].sum(axis=1)).sum())

    final = estimate(0, ITERATIONS)
    prefixes = [{"iterations": k, "throughput": estimate(0, k), "vs_final": estimate(0, k) / final - 1}
                for k in PREFIXES if k <= ITERATIONS]
    blocks = []
    for b in BLOCKS:
        per_block = np.array([estimate(i * b, (i + 1) * b) for i in range(ITERATIONS // b)])
        in_100 = 100 // b
        half = 1.96 * per_block[:in_100].std(ddof=1) / math.sqrt(in_100) / per_block[:in_100].mean()
        blocks.append({"steps_per_block": b, "cv": float(per_block.std() / per_block.mean()),
                       "lag1_correlation": float(np.corrcoef(per_block[:-1], per_block[1:])[0, 1]),
                       "half_width_after_100": float(half)})
    out = {"workers": WORKERS, "warmup": WARMUP, "iterations": ITERATIONS, "cpu_s": cpu_s,
           "step_cv_per_worker": float((steps.std(axis=1) / steps.mean(axis=1)).mean()),
           "prefixes": prefixes, "blocks": blocks, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "load_average_at_end": list(os.getloadavg())}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "async_ps_convergence.json").write_text(json.dumps(out, indent=1))
    lines = ["# Asynchronous PS: throughput against simulated iterations", "",
             f"`benchmarks/async_ps_convergence.py`: resnet50, async PS, 1 server, 10 Gbit/s, per-tensor, "
             f"{WORKERS} workers, {WARMUP} warm-up + {ITERATIONS} steps each (one exact run, {cpu_s:.0f} s CPU). "
             f"Mean per-worker step-time CV {out['step_cv_per_worker']:.2f}.", "",
             "| measured steps per worker | throughput | vs all |", "|---:|---:|---:|"]
    lines += [f"| {p['iterations']} | {p['throughput']:.1f}/s | {p['vs_final']:+.1%} |" for p in prefixes]
    lines += ["", "Batch means over blocks of consecutive steps of every worker:", "",
              "| steps per block | CV of block throughput | lag-1 correlation | 95% half-width after 100 steps |",
              "|---:|---:|---:|---:|"]
    lines += [f"| {b['steps_per_block']} | {b['cv']:.3f} | {b['lag1_correlation']:+.2f} | "
              f"{b['half_width_after_100']:.1%} |" for b in blocks]
    (RESULTS / "async_ps_convergence.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
