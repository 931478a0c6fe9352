"""Tried and not adopted: coarse async PS by MVA with deterministic service instead of exponential.

The coarse method solves async PS as a closed queueing network by MVA. Plain MVA is exact for
exponential service times: an arriving worker waits for the whole service of the one it finds at
the shard. A worker's push (pull) at a shard NIC is a fixed number of bytes at a fixed rate, and
its update a fixed time, so service is close to deterministic: the one found in service has half
its service left on average. Reiser's residual-life correction for a squared coefficient of
variation cv2 (1: exponential, plain MVA; 0: deterministic):

    R_k(n) = D_k * (1 + Q_k(n-1)) - U_k(n-1) * D_k * (1 - cv2) / 2,   U_k(n-1) = X(n-1) * D_k
This re-predicts the kept async runs of the named sets with each squared coefficient of variation
(network files refitted from their raw points, as `benchmarks/coarse_async_bounds.py`). Nothing rerun.

    .venv/bin/python benchmarks/coarse_async_service.py [--sets heldout18,heldout19,heldout20,heldout21]
        [--cv2 1,0.5,0] [--output coarse_async_service]
Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from repredict_sets import variant_table

import sgdscale.coarse.models as coarse_models
from sgdscale.coarse.mva import MVAResult

HERE = Path(__file__).resolve().parent


def reiser_mva(demands, think_time_s: float, customers: int, service_cv2=1.0) -> tuple[MVAResult, str]:
    """Exact MVA with Reiser's residual-life correction (service_cv2 1: `sgdscale.coarse.mva.exact_mva`).
    `service_cv2` is one number for every station, or a (push, update, pull) triple repeated over the
    shards in the order `solve_ps_async` lists its stations."""
    d = np.asarray(demands, dtype=float)
    cv2 = np.resize(np.asarray(service_cv2, dtype=float), d.shape)
    cut = d * d * (1.0 - cv2) / 2.0  # per unit of throughput X(n-1)
    q, r, x = np.zeros_like(d), d.copy(), 0.0
    for n in range(1, int(customers) + 1):
        r = d * (1.0 + q) - x * cut
        x = n / (think_time_s + float(r.sum()))
        q = x * r
    return MVAResult(x, r, q, x * d), "exact"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout18,heldout19,heldout20,heldout21")
    parser.add_argument("--cv2", default="1,0.5,0",
                        help="squared coefficients of variation of service to try, comma-separated; each one number "
                             "for every station or push/update/pull (e.g. 1/0/0: pushes share the shard's link, "
                             "processor sharing, whose MVA needs no correction; update and pull FCFS, fixed)")
    parser.add_argument("--output", default="coarse_async_service")
    args = parser.parse_args(argv)
    variants = [(f"cv2 {text}", f"coarse, service cv2 {text}",
                 lambda c=c: mock.patch.object(coarse_models, "solve_mva", functools.partial(reiser_mva, service_cv2=c)))
                for text, c in ((text, [float(v) for v in text.split("/")]) for text in args.cv2.split(","))]
    text = variant_table(argv, "coarse_async_service.py",
                         "Coarse async PS: MVA with exponential against deterministic service, on the kept runs",
                         "Error of the median prediction against the median measurement; network files refitted "
                         "from their raw points; cv2 1 is plain MVA, 0 deterministic service.",
                         args.sets.split(","), {"ps-async"}, variants, method="coarse", refit=True)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
