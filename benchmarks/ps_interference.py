"""Kept real-compute parameter-server runs re-predicted with and without interference on PS workers.

A PS worker's backward hands its pushes to its own uplink as gradients become ready; gloo's sends
and the kernel's TCP work then share the node's CPU with the backward still running, which slows
(`sgdscale.comm.interference.ps_compute_slowdown`, `compute_while_sending`). This re-predicts the
kept runs of the named sets (nothing rerun, results.json untouched) without interference (the PS
methods before it) and with it. Replays sleep instead of computing and are predicted without
interference either way. At f83a424 a third way also slowed the sends by the file's communication
slowdown (`results/ps_interference*_three_ways_f83a424.md`); `benchmarks/send_while_computing.py`
then measured sends that compute does not slow, so that form was not kept.

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
SETS = ",".join(f"heldout{i}" for i in range(6, 25))


def without_ps_interference():
    """The PS predictors as before the change: no compute slowdown reaches them."""
    stack = contextlib.ExitStack()
    for module in (fine_ps, coarse_models):
        stack.enter_context(mock.patch.object(module, "ps_compute_slowdown", lambda comm: None))
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
                ("backward slowed", f"{args.method}, backward slowed while sending", contextlib.nullcontext)]
    text = variant_table(argv, "ps_interference.py",
                         f"Kept PS runs re-predicted by the {args.method} method with and without interference on workers",
                         "Error of the median prediction against the median measurement.",
                         args.sets.split(","), set(args.strategies.split(",")), variants, method=args.method,
                         kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
