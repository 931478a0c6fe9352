"""A sync shard that posts its next receives before its replies arrive: what it moves on the kept runs (no runs).

The runtime's sync shard posts the next step's receives once its replies' sends have completed, and a
gloo send completes once its last byte is in the socket: on the emulated cluster 39-43 ms before the
bytes arrive, whatever the messages' sizes and the nodes' quota (`benchmarks/send_completion.py`, raw
`results/send_completion*.md`: what TCP keeps queued in the shaper). Workers that already have their
parameters then push while the others still receive, as the traced real steps show
(set 83's mlp trace, `benchmarks/shard_post_lead.py`: the shard posts 59 ms after its last
update, the last worker has its parameters 117 ms after it). The fine method posted them once the
last reply had arrived, and still does: with `fine_ps.POSTS_AHEAD_BY_SEND_LEAD` on and a network file's
`send_lead` (`sgdscale netbench`, `CommModel.send_lead_s`) it posts once every reply would arrive within
that lead at its connection's rate, held out on set 84 and not kept. The network files of sets 40-83
were measured before netbench timed it, so this re-predicts their kept sync PS runs with each lead put
in; every set named is a tuning set for it.
Columns: the model as it stands (the rule is off, `fine_ps.POSTS_AHEAD_BY_SEND_LEAD`: posts on arrival),
the rule on with the lead the network files say (none before set 84: as it stands), and the rule on
with each lead of `--leads-ms` put in.

    .venv/bin/python benchmarks/send_lead_tuning.py [--sets heldout40,...,heldout83]
        [--kind real|replay|all] [--leads-ms 20,40,60 | ""] [--output NAME]

Raw output: benchmarks/results/<output>.md (default send_lead_tuning-<kind>).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from ps_cpu_ablation import without
from repredict_sets import HERE, variant_table

import sgdscale.fine.ps as fine_ps

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(40, 84))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="real", choices=("real", "replay", "all"))
    parser.add_argument("--leads-ms", default="20,40,60")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    def rule_on(lead_s: float | None):
        def patch():
            stack = contextlib.ExitStack()
            stack.enter_context(mock.patch.object(fine_ps, "POSTS_AHEAD_BY_SEND_LEAD", True))
            if lead_s is not None:
                stack.enter_context(without({"send_lead_s": lead_s})())
            return stack
        return patch

    variants = [("as the model stands (posts on arrival)", "as the model stands", contextlib.nullcontext),
                ("the files' lead", "the network files' lead", rule_on(None))]
    variants += [(f"lead {float(ms):g} ms", f"send lead {float(ms):g} ms", rule_on(float(ms) / 1e3))
                 for ms in args.leads_ms.split(",") if ms.strip()]
    text = variant_table(argv, "send_lead_tuning.py", "A sync shard's send lead on the kept runs (fine)",
                         "Error of the median prediction against the median measurement, per sync PS case "
                         f"({args.kind}), with each send lead put in the set's network files.",
                         args.sets.split(","), {"ps-sync"}, variants, method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output or 'send_lead_tuning-' + args.kind}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
