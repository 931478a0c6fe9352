"""Kept runs re-predicted with the point-to-point alpha from the fastest small ping-pongs.

`fit_alpha_beta` takes the p2p alpha from the smallest message's median. On the emulated cluster a
node throttled by its CPU quota stalls a small ping-pong for the rest of the CFS period, and in most
kept network files of sets 18-25 the median 1 kB ping-pong was such a stall: alpha 1.2-4.5 ms where
the fastest repeats took 0.06-0.11 ms. The sharing crossover already uses the fastest repeats
(`sgdscale.comm.network.startup_s`). This re-predicts the kept runs of the named sets with every
network file refitted from its points (as `--refit` elsewhere) and its p2p alpha taken as today's
fit does, or from `startup_s`. Nothing rerun.

    .venv/bin/python benchmarks/p2p_alpha.py [--sets heldout18,...,heldout25] [--method fine]
        [--strategies allreduce,ps-sync,ps-async] [--output p2p_alpha]
Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from unittest import mock

from repredict_refit_networks import refitted
from repredict_sets import variant_table

import sgdscale.comm as comm_package
from sgdscale.comm.network import AlphaBeta, startup_s

HERE = Path(__file__).resolve().parent
SETS = ",".join(f"heldout{i}" for i in range(18, 26))


def fastest_alpha(path) -> object:
    network = refitted(str(path))
    alpha = startup_s(network.points, network.p2p)
    return network.model_copy(update={"p2p": AlphaBeta(alpha_s=alpha, beta_s_per_byte=network.p2p.beta_s_per_byte)})


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--method", default="fine")
    parser.add_argument("--strategies", default="allreduce,ps-sync,ps-async")
    parser.add_argument("--output", default="p2p_alpha")
    args = parser.parse_args(argv)
    variants = [("alpha: smallest median", f"{args.method}, alpha from the smallest size's median",
                 contextlib.nullcontext),
                ("alpha: fastest repeats", f"{args.method}, alpha from the fastest small repeats",
                 lambda: mock.patch.object(comm_package, "load_network", fastest_alpha))]
    text = variant_table(argv, "p2p_alpha.py", "Kept runs re-predicted with the p2p alpha from the fastest ping-pongs",
                         "Error of the median prediction against the median measurement; every network file "
                         "refitted from its raw points.", args.sets.split(","), set(args.strategies.split(",")),
                         variants, method=args.method, refit=True)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
