"""Which share of late workers the kept sync-PS runs favour for coarse's reply order.

Coarse sync PS takes S / (S + 1) of the workers as late with S shards (`sgdscale.coarse.heuristics.
late_share`). Matched to the fine simulator case by case the one-shard share spreads from 0 to 1,
median 0.35 (benchmarks/coarse_vs_fine_syncps.py). This re-predicts every kept one-shard sync-PS
run of sets 2-14 (`benchmarks/repredict_sets.py`) with the one-shard share set to each value given,
so the choice rests on measurements; these sets are tuning sets for it.

    .venv/bin/python benchmarks/late_share_on_kept_runs.py [0.25 0.35 0.5] [--sets heldout2,...] [--tag TAG]
Raw output: benchmarks/results/late_share_on_kept_runs-<share>[-TAG].md. Run with the coarse model
of its time (the one-step form, before `heuristics.sync_ps_end_s`) for sets 2-14; again with the
two-class form for sets 2-15, tag `two_class`.
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from repredict_sets import main as repredict

from sgdscale.coarse import heuristics

SETS = "heldout2,heldout3,heldout4,heldout5,heldout6,heldout7,heldout8,heldout9,heldout10,heldout12,heldout13,heldout14"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shares", type=float, nargs="*", default=[0.25, 0.35, 0.5])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    for share in args.shares:
        def late(workers: int, shards: int, share: float = share) -> float:
            return 1.0 if workers <= 1 else (share if shards == 1 else shards / (shards + 1.0))

        with mock.patch.object(heuristics, "late_share", late):
            repredict(["--methods", "coarse,coarse-nominal", "--strategies", "ps-sync", "--sets", args.sets,
                       "--output", f"late_share_on_kept_runs-{share:g}" + (f"-{args.tag}" if args.tag else "")])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
