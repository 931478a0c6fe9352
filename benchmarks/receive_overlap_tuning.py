"""A shard receives each copy as it comes in (sgdscale.fine.ps.RECEIVE_OVERLAPS_TRANSFER), on the
kept PS runs of earlier sets.

Both PS methods charge a shard the measured CPU per byte for every byte in and out. The fine
method charged a copy's receive CPU only once the message's last copy had arrived (in sync PS all N
copies' worth, after the last one), in series with the wire. Held-out sets 34 and 36 ran sync PS
19-34% faster than predicted where the shard's CPU binds, and their shards received 0.5-0.8 of the
CPU the fine method charges them (`benchmarks/shard_cpu_charge.py`). Now each copy's receive CPU
runs on the shard as the copy arrives, overlapping its transfer. This re-predicts every kept PS run
of the named sets (fine method) both ways; nothing is rerun. Every set named here is a tuning set
for the change.

    .venv/bin/python benchmarks/receive_overlap_tuning.py [--sets heldout10,...] [--kind real|replay]
        [--output NAME]

Raw output: benchmarks/results/receive_overlap_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.fine.ps as fine_ps

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(10, 37))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="all", choices=("all", "real", "replay"))
    parser.add_argument("--output", default="receive_overlap_tuning")
    args = parser.parse_args(argv)
    variants = [("transport CPU in series (before)", "in series",
                 lambda: mock.patch.multiple(fine_ps, RECEIVE_OVERLAPS_TRANSFER=False, SEND_OVERLAPS_TRANSFER=False)),
                ("receive overlaps", "receive overlaps",
                 lambda: mock.patch.multiple(fine_ps, RECEIVE_OVERLAPS_TRANSFER=True, SEND_OVERLAPS_TRANSFER=False)),
                ("receive and send overlap", "both overlap",
                 lambda: mock.patch.multiple(fine_ps, RECEIVE_OVERLAPS_TRANSFER=True, SEND_OVERLAPS_TRANSFER=True))]
    text = variant_table(argv, "receive_overlap_tuning.py", "A shard receives each copy as it comes in (fine)",
                         "Error of the median prediction against the median measurement, per case, with "
                         "every copy's receive CPU charged after the last copy arrives, and with each copy's "
                         "charged as it arrives.", args.sets.split(","), {"ps-sync", "ps-async"}, variants,
                         method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
