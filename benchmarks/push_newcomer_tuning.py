"""Whether a worker's push that starts beside its own pushes to another shard yields at the shard
(fine method), on the kept PS runs of sets with several shards.

The fine method's incumbents-first rule (`sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT`) gives a
message that starts out of a node whose link is already busy a sharing weight of 0.22, measured
for TCP flows out of one node (`benchmarks/head_start.py`; into one node they share equally). The
weight is the message's in weighted max-min on both its links. With several shards a worker's NIC
carries one push connection per shard, so a push to one shard that starts while a push to another
is in flight keeps 0.22 for its whole burst, also at the shard's downlink, where flows from
several workers share equally: resnet18 with three shards (round-robin: 46.72 MB on shard 0, 20 kB
of BatchNorm tensors on each other shard) ran as fast as one shard or faster, where fine was 8.3% too
slow with three and 1.2% too fast with one (`results/shard_cpu_overlap-resnet18-w3-640Mbit.md`).
Variants (`sgdscale.comm.sharing.PUSHES_SHARE_EQUALLY`): `never`, the rule for every push (before);
`sync`, sync PS pushes with at least as many workers as shards share equally (one device per node,
dedicated shards: every kept run here); `always`, every push does (replies keep the rule in all
three). One-shard predictions are the same under all (a worker's NIC then carries one push
connection). Re-predicts every kept PS run with several shards of the named sets; nothing is rerun.
Every set named here is a tuning set for it.

    .venv/bin/python benchmarks/push_newcomer_tuning.py [--sets heldout27,...] [--method fine]
        [--strategies ps-sync,ps-async] [--output NAME]

Raw output: benchmarks/results/push_newcomer_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.comm.sharing as sharing

DEFAULT_SETS = "heldout27,heldout28,heldout64,heldout68,heldout69,heldout70,heldout71,heldout75"


def pushes_equal(where: str):
    return lambda: mock.patch.object(sharing, "PUSHES_SHARE_EQUALLY", where)


VARIANTS = {
    "never": ("every push yields to the worker's pushes already moving (before)", "never", pushes_equal("never")),
    "sync": ("sync pushes share equally (workers >= shards)", "sync", pushes_equal("sync")),
    "always": ("every push shares equally", "always", pushes_equal("always")),
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--method", default="fine", help="fine, fine-nominal or fine-budget")
    parser.add_argument("--kind", default="all", choices=("all", "real", "replay"))
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--variants", default="never,sync,always", help=f"of {','.join(VARIANTS)}")
    parser.add_argument("--all-shards", action="store_true", help="also the one-shard cases (unchanged)")
    parser.add_argument("--output", default="push_newcomer_tuning")
    args = parser.parse_args(argv)
    only = None if args.all_shards else (lambda case: case.ps_count > 1)
    text = variant_table(argv, "push_newcomer_tuning.py", "A push beside the worker's pushes to other shards (fine)",
                         f"Error of the median prediction ({args.method}) against the median measurement, per "
                         "case with several shards, with a push that starts while the worker's NIC sends to "
                         "another shard yielding (weight 0.22, before) and sharing equally, in sync PS or everywhere.",
                         args.sets.split(","), set(args.strategies.split(",")),
                         [VARIANTS[name] for name in args.variants.split(",")],
                         method=args.method, kind=args.kind, only=only)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
