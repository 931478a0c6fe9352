"""The order of a shard's held replies (sgdscale.fine.ps.in_notice_order) on the kept PS runs of earlier sets.

gloo writes a shard's replies to a worker in the order the worker's receive notices and the
shard's sends meet: replies the shard has in hand when the notices come go out in the order the
worker posted its receives (parameter order, forward's), later ones as the shard finishes them.
The fine method sends them in the order the shard updated them (forward's first layer last), so
forward never overlaps a pull; gloo's order is modelled (`POSTED_ORDER`) but off. The cause was
measured on set 32's resnet50 replay (`benchmarks/async_pull_overlap.py`), so every set run so far
is a tuning set for it. This re-predicts every kept PS run of the named sets (fine method, the only
one that orders messages) both ways. Nothing is rerun.

    .venv/bin/python benchmarks/reply_order_tuning.py [--sets heldout25,...] [--kind real|replay] [--output NAME]

Raw output: benchmarks/results/reply_order_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.fine.ps as fine_ps

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(10, 33))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="all", choices=("all", "real", "replay"))
    parser.add_argument("--output", default="reply_order_tuning")
    args = parser.parse_args(argv)
    variants = [("update order (used)", "update order", lambda: mock.patch.object(fine_ps, "POSTED_ORDER", False)),
                ("posted order (gloo's)", "posted order", lambda: mock.patch.object(fine_ps, "POSTED_ORDER", True))]
    text = variant_table(argv, "reply_order_tuning.py", "Reply order on the kept PS runs (fine)",
                         "Error of the median prediction against the median measurement, per case, with the "
                         "shard's held replies sent in its update order and in the worker's posted order.",
                         args.sets.split(","), {"ps-sync", "ps-async"}, variants, method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
