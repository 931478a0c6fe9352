"""Incumbents first only where the sender's link binds: before and after, on the kept PS runs.

The fine method lets a message that starts out of a node whose link is already busy (a newcomer)
take `NEWCOMER_SHARE_WEIGHT` (0.22) of the weight of the flows already leaving it, as TCP flows out
of one host do (`benchmarks/head_start.py`). Before, a newcomer carried that weight onto every link
it crossed, also where its sender's link had room: a push from a fast worker NIC into a slow server
NIC then lost that NIC to the other workers' pushes, and with 2 async workers, 12 equal tensors and
server NICs 4x slower than the workers', 4 shards ran 16% slower than 3 (CI's property test
`test_throughput_non_decreasing_in_server_count` found it). Now the weight drops only where the
sender's link is what binds the newcomer (a first max-min filling at the bursts' weights finds it).

This re-predicts every kept parameter-server run of the named sets, from its own round's profile,
with the set's network file (fine) and from nominal figures (fine-nominal), before and now (both
in the general network, and now as `sgdscale predict` runs it, with the star shortcut); then the
server-count case and issue 7's convoy (whose pulls leave a saturated server NIC: unchanged).
Every kept run so far had one server shard, where a worker's pushes leave on one connection and
no push is ever a newcomer: the change can only show on the kept runs through pulls whose
worker's NIC, not the server's, binds.
Measurements are untouched; nothing is rerun.

    .venv/bin/python benchmarks/newcomer_where_bound.py [--sets heldout18,...,heldout26] [--strategies ps-async,ps-sync]
        [--output newcomer_where_bound] [--no-synthetic]

Raw output: benchmarks/results/<output>.md (`--sets heldout27 --no-synthetic --output
newcomer_where_bound_heldout27`: the set held out for the change, two server shards).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from repredict_sets import HERE, variant_table
from unmeasured_newcomer import _section, convoy_table

from sgdscale.fine import hubs, links

SETS = ",".join(f"heldout{n}" for n in range(18, 27))


@contextlib.contextmanager
def general(every_newcomer_yields: bool = False):
    """The general network throughout (the star shortcut, which decides at a message's start, off);
    `every_newcomer_yields`: the rule as it was, its first filling told that every connection is
    bound by its sender's link. Async runs are sensitive to event order, so the star shortcut and
    the general network can settle into different patterns (`unmeasured_newcomer.md`: up to 7 points
    on the same inputs): the rule's effect is general against general."""
    fill = links.LinkNetwork._fill

    def everyone_bound_by_sender(self):
        rates, _, conns_on = fill(self)
        return rates, {c: self.c_up[c] for c in rates}, conns_on
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(hubs.StarNetwork, "applies", staticmethod(lambda *a, **k: False)))
        if every_newcomer_yields:
            stack.enter_context(mock.patch.object(links.LinkNetwork, "_fill", everyone_bound_by_sender))
        yield


def before():
    return general(every_newcomer_yields=True)


def server_count_table() -> str:
    """Async PS, 2 workers, 12 tensors of 400 kB (tests/test_fine_des.py's EQUAL_TENSORS), worker NICs
    at 798.6 Mbit/s, server NICs at a quarter of that, nominal figures, variability off, 300 steps
    after 300 of warm-up: throughput by server count, which should not fall as shards are added."""
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel
    from sgdscale.fine.ps import simulate_ps
    from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes
    from sgdscale.strategy import Strategy

    profile = Profile(model="equal", batch_size=8, step=StepTimes(data_s=0.001, optimizer_s=0.004),
                      layers=[Layer(name=f"l{i}", forward_s=0.002 + 0.001 * (i % 3),
                                    backward_s=0.004 + 0.001 * (i % 2),
                                    params=[ParamTensor(name=f"l{i}.w", numel=100_000, bytes=400_000)])
                              for i in range(12)])
    bw = 798607784.5281649  # where the property test's scan found the largest loss
    shards = (1, 2, 3, 4, 6)
    rows = ["| rule | " + " | ".join(f"{s} shards" for s in shards) + " |", "|---|" + "---:|" * len(shards)]
    for label, in_place in (("before (general network)", before), ("now (general network)", general),
                            ("now (star shortcut)", contextlib.nullcontext)):
        cells = []
        for s in shards:
            cluster = Cluster(2, bandwidth_bps=bw, latency_s=2e-5, ps_count=s, ps_bandwidth_bps=bw / 4)
            with in_place():
                out = simulate_ps(profile, cluster, Strategy(kind="ps-async", grouping="per-tensor"),
                                  CommModel.from_link(bw, 2e-5), iterations=300, warmup=300, variability=False)
            cells.append(f"{out.throughput:.1f}")
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    return _section("More shards (samples/s)", server_count_table.__doc__, rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--strategies", default="ps-async,ps-sync")
    parser.add_argument("--output", default="newcomer_where_bound")
    parser.add_argument("--no-synthetic", action="store_true", help="only the kept runs' tables")
    args = parser.parse_args(argv)
    text = ""
    for method, source in (("fine", "the set's network file"), ("fine-nominal", "nominal figures")):
        text += variant_table(argv, "newcomer_where_bound.py",
                              f"Newcomers yield everywhere (before) or only where their sender's link binds (now): "
                              f"{method}",
                              f"Error of the median prediction against the median measurement (kept runs, their own "
                              f"rounds' profiles), from {source}.", args.sets.split(","),
                              set(args.strategies.split(",")),
                              [("before (general network)", f"{method}, before, general network", before),
                               ("now (general network)", f"{method}, now, general network", general),
                               ("now (star shortcut, as predict runs)", f"{method}, now, star shortcut",
                                contextlib.nullcontext)],
                              method=method) + "\n"
    if not args.no_synthetic:
        text += server_count_table() + convoy_table((("before (general network)", {}, before),
                                                     ("now (general network)", {}, general),
                                                     ("now (star shortcut)", {}, contextlib.nullcontext)))
        print(text[text.rindex("## More shards"):])
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
