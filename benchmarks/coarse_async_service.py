"""Coarse async PS: MVA with the shard's service variability per station (push / update / pull).

The coarse method solves async PS as a closed queueing network by MVA. Plain MVA (cv2 1) is exact
for exponential service, and for processor-sharing stations whatever their service times: an
arriving worker waits for the whole service of the one it finds at a FCFS station. A reply of fixed
bytes at a fixed rate takes a fixed time, so the one found in service has half of it left on
average. Reiser's residual-life correction for a squared coefficient of variation cv2 (1: plain MVA;
0: deterministic), `sgdscale.coarse.mva`:

    R_k(n) = D_k * (1 + Q_k(n-1) - U_k(n-1) * (1 - cv2) / 2),   U_k(n-1) = X(n-1) * D_k

Tried on sets 18-21 (one cv2 for every station) and on sets 18-49 per station (both with the models
of the time) and not adopted then; tried again on sets 40-64 and 18-39 with today's models, where
push 1 / update 1 / pull 0 (the shard's pushes and updates share, its replies take turns:
`sgdscale.coarse.models.SERVICE_CV2`) was adopted. Each variant patches SERVICE_CV2 and re-predicts
the kept async runs of the named sets. Nothing rerun.

    .venv/bin/python benchmarks/coarse_async_service.py [--sets heldout18,heldout19,heldout20,heldout21]
        [--cv2 1,0.5,0,1/1/0] [--no-refit] [--output coarse_async_service]
Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

from repredict_sets import variant_table, write_change_factors

import sgdscale.coarse.models as coarse_models

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout18,heldout19,heldout20,heldout21")
    parser.add_argument("--cv2", default="1,0.5,0",
                        help="squared coefficients of variation of service to try, comma-separated; each one number "
                             "for every station or push/update/pull (e.g. 1/0/0: pushes share the shard's link, "
                             "processor sharing, whose MVA needs no correction; update and pull FCFS, fixed)")
    parser.add_argument("--output", default="coarse_async_service")
    parser.add_argument("--method", default="coarse", choices=("coarse", "coarse-nominal", "coarse-budget"),
                        help="the prediction re-made: from the measured network file, nominal figures, or nominal "
                             "figures with the set's CPU budget")
    parser.add_argument("--no-refit", action="store_true",
                        help="use each set's network file as it is (sets run since the file format last changed)")
    parser.add_argument("--factors-out", default=None, metavar="NAME",
                        help="instead, write results/NAME.json: per set and case, the coarse predictions (measured "
                             "file, nominal, budget) with SERVICE_CV2 as shipped over the plain MVA's, for the sets "
                             "recorded with the plain MVA (benchmarks/heldout_ranges.py --factors)")
    args = parser.parse_args(argv)
    if args.factors_out:
        plain = dict.fromkeys(("push", "update", "pull"), 1.0)
        write_change_factors(f"benchmarks/coarse_async_service.py {' '.join(argv)}",
                             "per held-out set and case: the coarse async prediction with the shard stations' service "
                             "variability (SERVICE_CV2 as shipped) over the plain MVA's (median over the kept runs), per "
                             "validation variant", args.sets.split(","), {"ps-async"}, args.factors_out,
                             lambda: mock.patch.dict(coarse_models.SERVICE_CV2, plain))
        return 0
    variants = [(f"cv2 {text}", f"coarse, service cv2 {text}",
                 lambda c=c: mock.patch.dict(coarse_models.SERVICE_CV2, dict(zip(("push", "update", "pull"), c))))
                for text, c in ((text, [float(v) for v in text.split("/")] * (3 if "/" not in text else 1))
                                for text in args.cv2.split(","))]
    text = variant_table(argv, "coarse_async_service.py",
                         "Coarse async PS: MVA with exponential against deterministic service, on the kept runs",
                         "Error of the median prediction against the median measurement; network files "
                         + ("as they are" if args.no_refit else "refitted from their raw points")
                         + "; cv2 1 is plain MVA, 0 deterministic service.",
                         args.sets.split(","), {"ps-async"}, variants, method=args.method, refit=not args.no_refit)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
