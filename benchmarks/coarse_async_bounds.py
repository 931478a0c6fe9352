"""Tried and not adopted: coarse async PS without queueing, the flows already moving going first.

The fine method now lets a flow already moving keep the link (`NEWCOMER_SHARE_WEIGHT`), so async
workers take turns at the shard where its NIC allows it; the coarse method's MVA assumes random
arrivals and queues them. A coarse counterpart would be the closed network's asymptotic bounds:
X = min(N / (Z + sum D), 1 / max D), no queueing below saturation. This re-predicts the kept async
runs of the named sets with MVA (today) and with those bounds in its place, network files refitted
from their raw points (set 18's as kept fitted no link sharing). Nothing rerun.

    .venv/bin/python benchmarks/coarse_async_bounds.py [--sets heldout18,heldout19,heldout20]
Raw output: benchmarks/results/coarse_async_bounds.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from repredict_sets import variant_table

import sgdscale.coarse.models as coarse_models
from sgdscale.coarse.mva import MVAResult

HERE = Path(__file__).resolve().parent


def no_queueing(demands, think_time_s: float, customers: int) -> tuple[MVAResult, str]:
    """The asymptotic bounds as an MVA result: response = demand, the bottleneck absorbing the rest."""
    d = np.asarray(demands, dtype=float)
    x = min(customers / (think_time_s + d.sum()), 1.0 / d.max() if d.max() > 0 else float("inf"))
    r = d.copy()
    extra = customers / x - think_time_s - d.sum()
    if extra > 0:
        r[int(np.argmax(d))] += extra
    return MVAResult(x, r, x * r, x * d), "exact"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout18,heldout19,heldout20")
    args = parser.parse_args(argv)
    variants = [("MVA (today)", "coarse, MVA", contextlib.nullcontext),
                ("no queueing", "coarse, no queueing", lambda: mock.patch.object(coarse_models, "solve_mva", no_queueing))]
    text = variant_table(argv, "coarse_async_bounds.py", "Coarse async PS: MVA against the no-queueing bounds, on the kept runs",
                         "Error of the median prediction against the median measurement; network files refitted from "
                         "their raw points.", args.sets.split(","), {"ps-async"}, variants, method="coarse", refit=True)
    (HERE / "results" / "coarse_async_bounds.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
