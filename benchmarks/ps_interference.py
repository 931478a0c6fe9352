"""Kept real-compute parameter-server runs re-predicted with and without interference on PS workers.

A PS worker's backward hands its pushes to its own uplink as gradients become ready; gloo's sends
and the kernel's TCP work then share the node's CPU with the backward still running. The fine method
slows a worker's backward by the network file's measured compute slowdown while its own uplink sends
(`sgdscale.comm.interference.compute_while_sending`). This re-predicts the kept runs of the named sets
(nothing rerun, results.json untouched) with that model and without it (the method as it was).
Replays sleep instead of computing and are predicted without interference either way.

    .venv/bin/python benchmarks/ps_interference.py [--sets heldout19,heldout23] [--method fine]
        [--strategies ps-sync,ps-async] [--kind real] [--output ps_interference]
Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

from repredict_sets import variant_table

import sgdscale.coarse.models as coarse_models
import sgdscale.fine.ps as fine_ps

HERE = Path(__file__).resolve().parent
SETS = ",".join(f"heldout{i}" for i in range(6, 24))


def without_ps_interference():
    """The PS predictors as they were: no interference model reaches them."""
    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(fine_ps, "interference_of", lambda comm: None))
    if hasattr(coarse_models, "ps_interference_of"):
        stack.enter_context(mock.patch.object(coarse_models, "ps_interference_of", lambda comm: None))
    return stack


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--method", default="fine")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--kind", default="real", help="replay, real or all")
    parser.add_argument("--output", default="ps_interference")
    args = parser.parse_args(argv)
    variants = [("without", f"{args.method}, without", without_ps_interference),
                ("with interference", f"{args.method}, with interference", contextlib.nullcontext)]
    text = variant_table(argv, "ps_interference.py",
                         f"Kept PS runs re-predicted by the {args.method} method with and without interference on workers",
                         "Error of the median prediction against the median measurement.",
                         args.sets.split(","), set(args.strategies.split(",")), variants, method=args.method,
                         kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
