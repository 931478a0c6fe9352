"""Nominal figures and the incumbents-first rule: a prediction from nominal figures lets the flows
already leaving a node keep its link.

The fine method lets a message that starts out of a node whose link is already busy take only
`NEWCOMER_SHARE_WEIGHT` (0.22) of the weight of the flows already moving (`sgdscale.comm.sharing`,
measured with TCP by `benchmarks/head_start.py`). It used to apply only where the network file
measured link sharing; a prediction from nominal bandwidth and latency shared every link equally,
and identical async workers then settled into lock step: every kept async PS run of sets 19-25 was
predicted 6-51% too slow from nominal figures. Now every prediction carries the rule, and where no
sigma was measured the fine method draws burst weights with the typical measured sigma
(`UNMEASURED_WEIGHT_SIGMA`, 0.17): with exactly equal weights deterministic inputs make messages end
and start at the same instants and the rule then hinges on which the simulation handles first, and
near-equal weights (a tie-breaking 0.01, the form held-out set 26 ran with) meet the rule's
per-message incumbency badly.

This re-predicts every kept parameter-server run of the named sets, from its own round's profile,
with fine-nominal: as before (equal sharing), as now, as now without the star shortcut (the
general network), with set 26's tie-breaker, and with the rule but no sigma at all (star shortcut
and general network). Then two synthetic cases: issue 7's convoy and async resnet50 at 10 Gbit/s.
Measurements are untouched; nothing is rerun.

    .venv/bin/python benchmarks/unmeasured_newcomer.py [--sets heldout18,...,heldout26] [--strategies ps-async,ps-sync]
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
from sgdscale.comm.sharing import NEWCOMER_SHARE_WEIGHT, UNMEASURED_WEIGHT_SIGMA
from sgdscale.fine import hubs

SETS = ",".join(f"heldout{n}" for n in range(18, 27))


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
            stack.enter_context(mock.patch.object(sharing, "UNMEASURED_WEIGHT_SIGMA", tie_sigma))
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


def convoy_table(forms=None) -> str:
    """Issue 7's convoy case from nominal figures: 4 tensors of 25 MB, batch 32, 10 ms of forward and
    of backward per layer, 32 async workers, one server, 1 Gbit/s, variability off. The server's NIC
    bounds it at 125 MB/s / 100 MB per direction x 32 = 40 samples/s (full duplex).

    `forms`: (row label, CommModel fields, context manager factory) per row; by default equal
    sharing (before this benchmark's change) and now."""
    from sgdscale.cluster import Cluster
    from sgdscale.predict import predict
    from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes
    from sgdscale.strategy import Strategy

    numel = 25_000_000 // 4
    profile = Profile(model="convoy", batch_size=32, step=StepTimes(data_s=0.0, optimizer_s=0.004),
                      layers=[Layer(name=f"l{i}", forward_s=0.01, backward_s=0.01,
                                    params=[ParamTensor(name=f"l{i}.w", numel=numel, bytes=4 * numel)])
                              for i in range(4)])
    cluster = Cluster(32, bandwidth_bps=1e9, latency_s=20e-6, ps_count=1)
    rows = ["| prediction | fine (samples/s) | coarse (samples/s) |", "|---|---:|---:|"]
    forms = forms or (("equal sharing (before)", {"newcomer_share_weight": 1.0}, contextlib.nullcontext),
                      ("now", {}, contextlib.nullcontext))
    for label, fields, in_place in forms:
        comm = dataclasses.replace(CommModel.from_link(1e9, 20e-6), **fields)
        with in_place():
            result = predict(profile, cluster, Strategy(kind="ps-async", grouping="per-tensor"), comm, [32],
                             methods=("fine", "coarse"), iterations=200, warmup=20, variability=False)
        by = {r.method: r.throughput for r in result.results}
        rows.append(f"| {label} | {by['fine']:.1f} | {by['coarse']:.1f} |")
    return _section("The convoy case of issue 7 (nominal figures, variability off)", convoy_table.__doc__, rows)


def resnet50_table() -> str:
    """Async resnet50 (161 tensors) from nominal figures, 10 Gbit/s, one server, 8 and 16 workers, 200
    steps after 10 of warm-up, two seeds: where near-equal weights meet the per-message incumbency."""
    from sgdscale.cluster import Cluster
    from sgdscale.coarse import solve
    from sgdscale.fine import simulate
    from sgdscale.profile import load_profile
    from sgdscale.strategy import Strategy

    profile, strategy = load_profile("resnet50"), Strategy(kind="ps-async", grouping="per-tensor")
    base = CommModel.from_link(10e9, 20e-6)
    forms = (("equal sharing (before)", dataclasses.replace(base, newcomer_share_weight=1.0), None),
             ("rule, sigma 0.01 (set 26's form)", base, 0.01),
             (f"rule, sigma {UNMEASURED_WEIGHT_SIGMA:g} (now)", base, None))
    rows = ["| workers | coarse | " + " | ".join(f"fine, {label}, seeds 0 / 1" for label, _, _ in forms) + " |",
            "|---:|---:|" + "---|" * len(forms)]
    for workers in (8, 16):
        cluster = Cluster(workers, ps_count=1)
        cells = []
        for _, comm, sigma in forms:
            with variant(tie_sigma=sigma):
                runs = [simulate(profile, cluster, strategy, comm, iterations=200, warmup=10, seed=seed).throughput
                        for seed in (0, 1)]
            cells.append(" / ".join(f"{x:.1f}" for x in runs))
        coarse = solve(profile, cluster, strategy, base, seed=0, variability=True).throughput
        rows.append(f"| {workers} | {coarse:.1f} | " + " | ".join(cells) + " |")
    return _section("Async resnet50 at 10 Gbit/s (nominal figures; samples/s)", resnet50_table.__doc__, rows)


def _section(title: str, doc: str, rows: list[str]) -> str:
    """A Markdown section: the title, the docstring's first paragraph on one line, the table rows."""
    return f"\n## {title}\n\n" + doc.split("\n\n")[0].replace("\n    ", " ") + "\n\n" + "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--strategies", default="ps-async,ps-sync")
    parser.add_argument("--output", default="unmeasured_newcomer")
    parser.add_argument("--files-without-fit", default="heldout18,heldout23",
                        help="sets whose network files have no sharing fit, re-predicted from them too ('' to skip)")
    args = parser.parse_args(argv)
    rule = f"newcomer {NEWCOMER_SHARE_WEIGHT:g}"
    variants = [("equal sharing (before)", "fine-nominal, equal sharing (before)",
                 lambda: variant(newcomer_share_weight=1.0)),
                (f"{rule}, sigma {UNMEASURED_WEIGHT_SIGMA:g} (now)",
                 f"fine-nominal, {rule}, sigma {UNMEASURED_WEIGHT_SIGMA:g} (now)", variant),
                ("now, general network", "fine-nominal now, no star shortcut", lambda: variant(star=False)),
                (f"{rule}, sigma 0.01 (set 26's form)", f"fine-nominal, {rule}, sigma 0.01 (set 26's form)",
                 lambda: variant(tie_sigma=0.01)),
                (f"{rule}, sigma 0", f"fine-nominal, {rule}, sigma 0", lambda: variant(tie_sigma=0.0)),
                (f"{rule}, sigma 0, general network", f"fine-nominal, {rule}, sigma 0, no star shortcut",
                 lambda: variant(star=False, tie_sigma=0.0))]
    text = variant_table(argv, "unmeasured_newcomer.py",
                         "Nominal figures: equal sharing against incumbents first, fine method, PS cases",
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
    text += convoy_table() + resnet50_table()
    print(text[text.rindex("## The convoy"):])
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
