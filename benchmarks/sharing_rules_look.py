"""Do the link-sharing rules or the compute's variability carry the real-compute PS misses? (no runs)

Sets 80-83's link-bound real-compute PS cases are predicted too slow by fine (sync bert and mlp -7% to
-9%, async mlp -19%), and in set 82's traced bert the run's workers come in two bunches where fine's
stay evenly apart (`results/step_parts/bert-real-sync-w5-580Mbit-heldout82.md`). What spreads fine's
workers could be the rules by which flows share a link, or the step-to-step spread of the compute it
samples. This re-predicts the kept runs of the named sets with each taken out: the link-sharing spread
at the typical 0.17 (`sgdscale.comm.sharing.UNMEASURED_WEIGHT_SIGMA`, where the file's is 0.19-0.68);
no head start for the flows already leaving a node (newcomer weight 1.0 instead of 0.22); both, with
equal sharing; and every worker at the profile's mean compute (variability off). A look: every set
named is a tuning set for any change that comes of it.

    .venv/bin/python benchmarks/sharing_rules_look.py [--sets heldout80,heldout82,heldout83] [--kind real]
        [--output sharing_rules_look-80-83]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from ps_cpu_ablation import without
from repredict_sets import HERE, variant_table

from sgdscale.validation import Validator


def mean_compute():
    """Every case predicted with the profile's mean compute at every step (variability off)."""
    original = Validator.case_inputs

    def case_inputs(self, case, *args, **kwargs):
        return (*original(self, case, *args, **kwargs)[:4], False)

    return mock.patch.object(Validator, "case_inputs", case_inputs)


# The sharing spread at 0 in a file is simulated as the typical one (sharing.simulated_weight_sigma)
# while the head start holds; with no head start too, sharing is equal.
VARIANTS = [
    ("as the model stands", "as the model stands", contextlib.nullcontext),
    ("sharing spread 0.17", "the typical sharing spread (0.17)", without({"share_weight_sigma": 0.0})),
    ("no head start", "no head start (newcomer weight 1.0)", without({"newcomer_share_weight": 1.0})),
    ("equal sharing", "equal sharing (both)", without({"newcomer_share_weight": 1.0, "share_weight_sigma": 0.0})),
    ("mean compute", "every step at the profile's mean compute", mean_compute),
]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="heldout80,heldout82,heldout83")
    parser.add_argument("--kind", default="real", choices=("real", "replay", "all"))
    parser.add_argument("--output", default="sharing_rules_look-80-83")
    args = parser.parse_args(argv)
    text = variant_table(argv, "sharing_rules_look.py", "Link-sharing rules and compute variability (fine, a look)",
                         f"Error of the median prediction against the median measurement, per PS case ({args.kind}).",
                         args.sets.split(","), {"ps-sync", "ps-async"}, VARIANTS, method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
