"""Coarse async PS with deterministic service: would it fix the 2-worker misses? (an experiment)

Coarse async PS solves a closed queueing network with MVA, which assumes exponential service. A
message of fixed size takes a fixed time on a link, and with few workers that matters: two workers
that alternate at the server (one pushes while the other pulls) never wait, while exponential
service makes them meet often. Held-out sets 8 and 9 measured 2-worker async PS at 77-90% of the
server link's bound and coarse 64-66% (15-27% too slow). Reiser's residual correction for FCFS
stations with deterministic service lets an arriving worker wait only half the service of the one
in service: R_k(n) = D_k (1 + Q_k(n-1) - U_k(n-1) / 2). This re-predicts every kept async PS run of
sets 1-9 with that MVA (`benchmarks/repredict_sets.py` with the solver swapped); the model itself is
unchanged.

    .venv/bin/python benchmarks/coarse_async_deterministic.py

Raw output: benchmarks/results/coarse_async_deterministic.md.
"""

from __future__ import annotations

import sys

import numpy as np

import repredict_sets
from sgdscale.coarse import models
from sgdscale.coarse.mva import MVAResult


def deterministic_mva(demands, think_time_s: float, customers: int) -> tuple[MVAResult, str]:
    """Exact MVA with Reiser's residual-life correction for deterministic FCFS service."""
    d = np.asarray(demands, dtype=float)
    q = np.zeros_like(d)
    u = np.zeros_like(d)
    x, r = 0.0, d.copy()
    for n in range(1, int(customers) + 1):
        r = d * (1.0 + q - 0.5 * u)
        x = n / (think_time_s + float(r.sum()))
        q, u = x * r, x * d
    return MVAResult(x, r, q, x * d), "exact"


if __name__ == "__main__":
    models.solve_mva = deterministic_mva
    sys.exit(repredict_sets.main(["--strategies", "ps-async", "--sets", ",".join(repredict_sets.SETS + ("heldout9",)),
                                  "--output", "coarse_async_deterministic", *sys.argv[1:]]))
