"""Late joiners into a busy node, in the fine method: what the rule moves on the kept runs (no runs).

gloo's senders into one node do not share its link equally: one that starts while the others already
move gets less than its share (`benchmarks/late_joiner.py`: a weight of 0.21-0.64 against each early
flow's 1, three configurations, raw `results/late_joiner-*.md`), where plain TCP flows share about
equally (`benchmarks/head_start.py`). In sync PS the workers whose backward ends last push into a shard
whose link the first ones fill; async workers push at their own times. The fine method gives such a
flow `comm.sharing.LATE_JOINER_WEIGHT` (`fine.links.LinkNetwork`, late_joiner_weight) for its burst.
This re-predicts the kept PS runs of the named sets with the rule off (1.0: the model before it) and at
each weight of `--weights`; every set named is a tuning set for it.

    .venv/bin/python benchmarks/late_joiner_tuning.py [--sets heldout40,...] [--strategy ps-sync|ps-async]
        [--kind real|replay|all] [--weights 0.51] [--output NAME]

Raw output: benchmarks/results/<output>.md (default late_joiner_tuning-<strategy>-<kind>).
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from current_model import CURRENT
from repredict_sets import HERE, variant_table

from sgdscale.comm import sharing


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=None, help="default: the strategy's sets in current_model.py's CURRENT")
    parser.add_argument("--strategy", default="ps-sync", choices=("ps-sync", "ps-async"))
    parser.add_argument("--kind", default="real", choices=("real", "replay", "all"))
    parser.add_argument("--weights", default=str(sharing.LATE_JOINER_WEIGHT))
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    sets = args.sets.split(",") if args.sets else [f"heldout{n}" for n in CURRENT[args.strategy]["sets"]]

    def weight(value: float):
        return lambda: mock.patch.object(sharing, "LATE_JOINER_WEIGHT", value)

    variants = [("rule off (1.0)", "rule off", weight(1.0))]
    variants += [(f"weight {float(w):g}", f"late joiners at {float(w):g}", weight(float(w)))
                 for w in args.weights.split(",") if w.strip()]
    text = variant_table(argv, "late_joiner_tuning.py", f"Late joiners into a busy node on the kept {args.strategy} runs (fine)",
                         f"Error of the median prediction against the median measurement, per {args.strategy} case "
                         f"({args.kind}), with late joiners at each weight.", sets, {args.strategy}, variants,
                         method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output or f'late_joiner_tuning-{args.strategy}-{args.kind}'}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
