"""Kept parameter-server runs re-predicted by the fine method under several newcomer weights.

The fine method shares a link weighted max-min; a flow that starts on a link busy since before it
gets `newcomer_weight` times its weight (`sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT`, where the
network file measured link sharing), so the flows already moving keep most of the link. Weight 1 is the old equal
sharing. This re-predicts the kept runs of the named sets (nothing rerun, results.json untouched)
with each weight and prints every case's error and, per weight, the median and max absolute error.
`--refit` refits each network file from its raw points first, as today's netbench would
(`benchmarks/repredict_refit_networks.py`: set 18's file as kept fitted no link sharing).

    .venv/bin/python benchmarks/newcomer_weight.py [--sets heldout18,heldout19] [--weights 1,0.3,0.1,0.02]
        [--strategies ps-sync,ps-async] [--kind replay] [--refit] [--output newcomer_weight]
Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from unittest import mock

from repredict_sets import variant_table

import sgdscale.comm.cost as cost_module

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout18,heldout19")
    parser.add_argument("--weights", default="1,0.3,0.1,0.02")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--kind", default="all", help="replay, real or all")
    parser.add_argument("--refit", action="store_true", help="refit every network file from its raw points")
    parser.add_argument("--output", default="newcomer_weight")
    args = parser.parse_args(argv)
    variants = [(f"weight {w:g}", f"fine, weight {w:g}",
                 lambda w=w: mock.patch.object(cost_module, "NEWCOMER_SHARE_WEIGHT", w))
                for w in (float(text) for text in args.weights.split(","))]
    text = variant_table(argv, "newcomer_weight.py", "Kept PS runs re-predicted by the fine method under each newcomer weight",
                         "Error of the median prediction against the median measurement; weight 1 is equal sharing.",
                         args.sets.split(","), set(args.strategies.split(",")), variants, kind=args.kind,
                         refit=args.refit)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
