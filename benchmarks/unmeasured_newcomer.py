"""Nominal figures and the incumbents-first rule: a prediction from nominal figures lets the flows
already leaving a node keep its link.

The fine method lets a message that starts out of a node whose link is already busy take only
`NEWCOMER_SHARE_WEIGHT` (0.22) of the weight of the flows already moving (`sgdscale.comm.sharing`,
measured with TCP by `benchmarks/head_start.py`). It used to apply only where the network file
measured link sharing; a prediction from nominal bandwidth and latency shared every link equally,
and identical async workers then settled into lock step: every kept async PS run of sets 19-25 was
predicted 6-51% too slow from nominal figures. Now every prediction carries the rule, and where no
sigma was measured the fine method draws burst weights with a tie-breaking sigma
(`TIE_BREAK_SIGMA`), because with exactly equal weights deterministic inputs make messages end and
start at the same instants and the rule then hinges on which the simulation handles first.

This re-predicts every kept parameter-server run of the named sets, from its own round's profile,
with fine-nominal: as before (equal sharing), as now, as now without the star shortcut (the
general network), with the rule but no tie-breaker (star shortcut and general network), and with
a 5x larger tie-breaker. Measurements are untouched; nothing is rerun.

    .venv/bin/python benchmarks/unmeasured_newcomer.py [--sets heldout18,...,heldout25] [--strategies ps-async,ps-sync]
        [--files-without-fit heldout18,heldout23]

Sets 18 and 23 have network files without a sharing fit (set 18's from 2, 4 and 5 processes; set
23's, whose incast said nothing); their predictions from those files move too, and a second table
shows them before and now.

Raw output: benchmarks/results/unmeasured_newcomer.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from unittest import mock

import repredict_sets
from repredict_sets import HERE, variant_table

from sgdscale.comm import CommModel
from sgdscale.comm import sharing
from sgdscale.comm.sharing import NEWCOMER_SHARE_WEIGHT, TIE_BREAK_SIGMA
from sgdscale.fine import hubs

SETS = ",".join(f"heldout{n}" for n in range(18, 26))


def _nominal(**fields):
    """A stand-in for CommModel in `repredict_sets` whose from_link sets `fields` (the rest unchanged)."""
    class Nominal:
        @staticmethod
        def from_link(*args, **kwargs) -> CommModel:
            return dataclasses.replace(CommModel.from_link(*args, **kwargs), **fields)
    return Nominal


@contextlib.contextmanager
def variant(star: bool = True, tie_sigma: float | None = None, **fields):
    with contextlib.ExitStack() as stack:
        if fields:
            stack.enter_context(mock.patch.object(repredict_sets, "CommModel", _nominal(**fields)))
        if tie_sigma is not None:
            stack.enter_context(mock.patch.object(sharing, "TIE_BREAK_SIGMA", tie_sigma))
        if not star:
            stack.enter_context(mock.patch.object(hubs.StarNetwork, "applies", staticmethod(lambda *a, **k: False)))
        yield


def _file_rule_off():
    """CommModel.from_network as before: no incumbents first where the file measured no sigma."""
    original = CommModel.from_network.__func__

    def from_network(cls, network, *args, **kwargs):
        comm = original(cls, network, *args, **kwargs)
        return comm if comm.share_weight_sigma > 0 else dataclasses.replace(comm, newcomer_share_weight=1.0)
    return mock.patch.object(CommModel, "from_network", classmethod(from_network))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--strategies", default="ps-async,ps-sync")
    parser.add_argument("--output", default="unmeasured_newcomer")
    parser.add_argument("--files-without-fit", default="heldout18,heldout23",
                        help="sets whose network files have no sharing fit, re-predicted from them too ('' to skip)")
    args = parser.parse_args(argv)
    rule = f"newcomer {NEWCOMER_SHARE_WEIGHT:g}"
    variants = [("equal sharing (before)", "fine-nominal, equal sharing (before)", lambda: variant(newcomer_share_weight=1.0)),
                (f"{rule}, tie sigma {TIE_BREAK_SIGMA:g} (now)", f"fine-nominal, {rule}, tie sigma {TIE_BREAK_SIGMA:g} (now)",
                 variant),
                ("now, general network", "fine-nominal now, no star shortcut", lambda: variant(star=False)),
                (f"{rule}, no tie-breaker", f"fine-nominal, {rule}, no tie-breaker", lambda: variant(tie_sigma=0.0)),
                (f"{rule}, no tie-breaker, general network", f"fine-nominal, {rule}, no tie-breaker, no star shortcut",
                 lambda: variant(star=False, tie_sigma=0.0)),
                (f"{rule}, tie sigma 0.05", f"fine-nominal, {rule}, tie sigma 0.05", lambda: variant(tie_sigma=0.05))]
    text = variant_table(argv, "unmeasured_newcomer.py", "Nominal figures: equal sharing against incumbents first, fine method, PS cases",
                         "Error of the median prediction against the median measurement (kept runs, their own "
                         "rounds' profiles); nominal bandwidth and default latency.", args.sets.split(","),
                         set(args.strategies.split(",")), variants, method="fine-nominal")
    if args.files_without_fit:  # the predictions from network files: only those without a sharing fit move
        text += "\n" + variant_table(
            argv, "unmeasured_newcomer.py", "Network files without a sharing fit (sets " + args.files_without_fit + ")",
            "Error of the median prediction against the median measurement, fine method with the set's network file; "
            "only files without a sharing fit (sigma) change.", args.files_without_fit.split(","),
            set(args.strategies.split(",")), [("before", "fine, file without sharing fit, before", _file_rule_off),
                                              ("now", "fine, file without sharing fit, now", contextlib.nullcontext)])
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
