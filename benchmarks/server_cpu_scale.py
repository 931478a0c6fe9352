"""Kept parameter-server runs re-predicted by the fine method with the shard's CPU charge scaled.

`benchmarks/shard_cpu.py` finds the real shard using 1.5-2.7 times the CPU the fine method charges
it (netbench's point-to-point CPU per byte times the bytes it moves, `server_cpu_s_per_byte`).
This re-predicts the kept one-shard PS runs of the named sets with that charge multiplied by each
factor (nothing rerun) and prints every case's error and, per factor, the median and max absolute
error. Set 18's network files are refitted from their raw points first (`--refit`), as in
`benchmarks/newcomer_weight.py`.

    .venv/bin/python benchmarks/server_cpu_scale.py [--sets heldout19,heldout20,heldout21] [--factors 1,2,2.7,10]
        [--refit] [--kind replay] [--output server_cpu_scale]
Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from unittest import mock

from repredict_sets import variant_table

from sgdscale.comm.cost import CommModel

HERE = Path(__file__).resolve().parent
ORIGINAL = CommModel.from_network.__func__


def scaled_charge(factor: float):
    """CommModel.from_network with the shard's CPU charge per byte times `factor`, in place."""
    def from_network(cls, *args, **kwargs):
        comm = ORIGINAL(cls, *args, **kwargs)
        return dataclasses.replace(comm, server_cpu_s_per_byte=comm.server_cpu_s_per_byte * factor)

    return mock.patch.object(CommModel, "from_network", classmethod(from_network))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout19,heldout20,heldout21")
    parser.add_argument("--factors", default="1,2,2.7,10")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--kind", default="all", help="replay, real or all")
    parser.add_argument("--refit", action="store_true", help="refit every network file from its raw points")
    parser.add_argument("--output", default="server_cpu_scale")
    args = parser.parse_args(argv)
    variants = [(f"x{f:g}", f"fine, shard CPU x{f:g}", lambda f=f: scaled_charge(f))
                for f in (float(text) for text in args.factors.split(","))]
    text = variant_table(argv, "server_cpu_scale.py",
                         "Kept PS runs re-predicted by the fine method with the shard's CPU charge scaled",
                         "Error of the median prediction against the median measurement; factor 1 is the fine "
                         "method as it is.", args.sets.split(","), set(args.strategies.split(",")), variants,
                         kind=args.kind, refit=args.refit)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
