"""A busy shard's replies share its uplink equally (sgdscale.fine.ps.BUSY_SHARD_SHARES_EQUALLY), on
the kept PS runs of earlier sets.

The fine method lets the flows already leaving a node keep its link (incumbents first, measured
with TCP out of an idle node: `benchmarks/head_start.py`). Out of a node whose CPU is busy with
other work, two flows finish together instead (`head_start.py --busy-sender`): the CPU paces the
writes. A shard whose update queue is busy now shares its uplink equally. The change was found on
sets 32 and 33 (their async replays, whose real workers run close together where the simulated
ones took turns), so every set here is a tuning set for it. It applies where moving bytes at line
rate both ways would take at least half the shard's CPU (`CPU_PACED_TRANSPORT_SHARE`), as `--share
0` shows it everywhere. This re-predicts every kept PS run of the named sets (fine method) both
ways; nothing is rerun.

    .venv/bin/python benchmarks/busy_shard_tuning.py [--sets heldout25,...] [--kind real|replay] [--share 0.5]
        [--output NAME]

Raw output: benchmarks/results/busy_shard_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.fine.ps as fine_ps

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(10, 34))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="all", choices=("all", "real", "replay"))
    parser.add_argument("--output", default="busy_shard_tuning")
    parser.add_argument("--share", type=float, default=fine_ps.CPU_PACED_TRANSPORT_SHARE,
                        help="CPU_PACED_TRANSPORT_SHARE to try (0: wherever a shard is busy)")
    args = parser.parse_args(argv)
    variants = [("incumbents first (before)", "incumbents first",
                 lambda: mock.patch.object(fine_ps, "BUSY_SHARD_SHARES_EQUALLY", False)),
                ("a busy shard shares equally", "busy shard shares",
                 lambda: mock.patch.multiple(fine_ps, BUSY_SHARD_SHARES_EQUALLY=True,
                                             CPU_PACED_TRANSPORT_SHARE=args.share))]
    text = variant_table(argv, "busy_shard_tuning.py", "A busy shard's replies share its uplink (fine)",
                         "Error of the median prediction against the median measurement, per case, with the "
                         "incumbents-first rule on a shard's uplink always, and off while the shard's update "
                         "queue is busy.", args.sets.split(","), {"ps-sync", "ps-async"}, variants,
                         method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
