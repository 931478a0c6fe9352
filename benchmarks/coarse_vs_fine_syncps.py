"""Coarse against fine on synchronous PS, where the held-out sets show coarse 12-18% too slow.

The fine method is within 1-5% of the held-out sync-PS runs (sets 5 and 7), the coarse one 12-18%
too slow on the replays and set 7: it keeps push and pull as serial phases with the compute in
front, while fine hides much of it (gloo's early receive notice lets the first worker pull during
the next push phase; workers that got their parameters early compute while others still pull).
This measures that gap on built-in profiles, 1 and 10 Gbit/s, 2-16 workers, one shard, sharing
sigma 0.2 (the emulated cluster's typical measured value), no variability: coarse / fine - 1.

    .venv/bin/python benchmarks/coarse_vs_fine_syncps.py

Raw output: benchmarks/results/coarse_vs_fine_syncps.txt.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from pathlib import Path

from sgdscale.cluster import Cluster
from sgdscale.coarse.models import solve_ps_sync
from sgdscale.comm import CommModel
from sgdscale.fine.ps import simulate_ps
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy

MODELS = ("resnet50", "gpt2", "bert", "mobilenet_v2", "densenet121", "resnet18")
SIGMA = 0.2


def main() -> int:
    lines, gaps = [], []
    strategy = Strategy(kind="ps-sync")
    for model in MODELS:
        profile = load_profile(model)
        for bandwidth_bps in (1e9, 10e9):
            for workers in (2, 3, 4, 6, 8, 16):
                comm = dataclasses.replace(CommModel.from_link(bandwidth_bps, 50e-6), share_weight_sigma=SIGMA)
                cluster = Cluster(workers, bandwidth_bps, 50e-6, 1)
                fine = simulate_ps(profile, cluster, strategy, comm, iterations=60, warmup=10, seed=0,
                                   variability=False).throughput
                coarse = solve_ps_sync(profile, cluster, strategy, comm, iterations=60, seed=0, variability=False,
                                       heuristics=True).throughput
                gaps.append(coarse / fine - 1)
                lines.append(f"{model:12s} {bandwidth_bps / 1e9:4.0f} Gbit/s {workers:2d} workers: "
                             f"fine {fine:8.2f}, coarse {coarse:8.2f} samples/s, coarse/fine - 1 {gaps[-1]:+.1%}")
                print(lines[-1], flush=True)
    absolute = [abs(g) for g in gaps]
    lines.append(f"{len(gaps)} cases: median |coarse/fine - 1| {statistics.median(absolute):.1%}, "
                 f"max {max(absolute):.1%}, mean signed {statistics.mean(gaps):+.1%}")
    print(lines[-1])
    out = Path(__file__).parent / "results" / "coarse_vs_fine_syncps.txt"
    out.write_text("`benchmarks/coarse_vs_fine_syncps.py`\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
