"""Which share of late workers the kept sync-PS runs favour for coarse's reply order.

Coarse sync PS takes S / (S + 1) of the workers as late with S shards (`sgdscale.coarse.heuristics.
late_share`). Matched to the fine simulator case by case the one-shard share spreads from 0 to 1,
median 0.35 (benchmarks/coarse_vs_fine_syncps.py). This re-predicts every kept one-shard sync-PS
run of sets 2-14 (`benchmarks/repredict_sets.py`) with the one-shard share set to each value given,
so the choice rests on measurements; these sets are tuning sets for it.

    .venv/bin/python benchmarks/late_share_on_kept_runs.py [0.25 0.35 0.5]
Raw output: benchmarks/results/late_share_on_kept_runs-<share>.md.
"""

from __future__ import annotations

import sys
from unittest import mock

from repredict_sets import main as repredict

from sgdscale.coarse import heuristics

SETS = "heldout2,heldout3,heldout4,heldout5,heldout6,heldout7,heldout8,heldout9,heldout10,heldout12,heldout13,heldout14"


def main(shares: list[float]) -> int:
    for share in shares:
        def late(workers: int, shards: int, share: float = share) -> float:
            return 1.0 if workers <= 1 else (share if shards == 1 else shards / (shards + 1.0))

        with mock.patch.object(heuristics, "late_share", late):
            repredict(["--methods", "coarse,coarse-nominal", "--strategies", "ps-sync", "--sets", SETS,
                       "--output", f"late_share_on_kept_runs-{share:g}"])
    return 0


if __name__ == "__main__":
    sys.exit(main([float(a) for a in sys.argv[1:]] or [0.25, 0.35, 0.5]))
