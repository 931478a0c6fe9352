"""Kept real-compute parameter-server runs re-predicted with and without interference on PS workers.

A PS worker's backward hands its pushes to its own uplink as gradients become ready; gloo's sends
and the kernel's TCP work then share the node's CPU with the backward still running
(`sgdscale.comm.interference.compute_while_sending`). This re-predicts the kept runs of the named sets
(nothing rerun, results.json untouched) three ways: without interference (the PS methods before it),
with the backward slowed by the network file's compute slowdown while the worker sends (sends at
full speed), and with the sends also slowed by the file's communication slowdown while backward runs.
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
from sgdscale.comm.interference import Interference

HERE = Path(__file__).resolve().parent
SETS = ",".join(f"heldout{i}" for i in range(6, 25))


def ps_interference(model):
    """The PS predictors given `model(measured interference or None)` instead of the file's model."""
    stack = contextlib.ExitStack()
    fine_of, coarse_of = fine_ps.interference_of, coarse_models.ps_interference_of
    stack.enter_context(mock.patch.object(fine_ps, "interference_of", lambda comm: model(fine_of(comm))))
    stack.enter_context(mock.patch.object(coarse_models, "ps_interference_of", lambda comm: model(coarse_of(comm))))
    return stack


def compute_only(measured: Interference | None) -> Interference | None:
    """The measured compute slowdown with sends at full speed (`benchmarks/send_while_computing.py`)."""
    return None if measured is None else Interference(measured.compute_slowdown, 1.0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--method", default="fine")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--kind", default="real", help="replay, real or all")
    parser.add_argument("--output", default="ps_interference")
    args = parser.parse_args(argv)
    variants = [("without", f"{args.method}, without", lambda: ps_interference(lambda measured: None)),
                ("backward slowed", f"{args.method}, backward slowed (sends at full speed)",
                 lambda: ps_interference(compute_only)),
                ("both slowed", f"{args.method}, both slowed (the file's two slowdowns)",
                 lambda: ps_interference(lambda measured: measured))]
    text = variant_table(argv, "ps_interference.py",
                         f"Kept PS runs re-predicted by the {args.method} method with and without interference on workers",
                         "Error of the median prediction against the median measurement.",
                         args.sets.split(","), set(args.strategies.split(",")), variants, method=args.method,
                         kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
