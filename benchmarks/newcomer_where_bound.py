"""Incumbents first only where the sender's link binds: tried, held out on set 27, not adopted.

The fine method lets a message that starts out of a node whose link is already busy (a newcomer)
take `NEWCOMER_SHARE_WEIGHT` (0.22) of the weight of the flows already leaving it, as TCP flows out
of one host do (`benchmarks/head_start.py`), and the weight holds on every link the message crosses.
A push from a fast worker NIC into a slow server NIC then loses that NIC to the other workers'
pushes although its own NIC has room: with 2 async workers, 12 equal tensors and server NICs 4x
slower than the workers', 4 shards run 16% slower than 3 (CI's property test
`test_throughput_non_decreasing_in_server_count`, since replaced, found it). The tried rule reduces a newcomer's
weight only where its sender's link is what binds it (a first max-min filling at the bursts'
weights finds that; `WhereBound` here, the general network only). It was committed (dd5ae45) and
held-out set 27, the first with two server shards, ran with it: there the kept rule (every newcomer
yields) predicts the real runs better, so it was not kept.

This re-predicts every kept parameter-server run of the named sets, from its own round's profile,
with the set's network file (fine) and from nominal figures (fine-nominal): the kept rule and the
tried one, both in the general network, and the kept rule as `sgdscale predict` runs it (with the
star shortcut); then the server-count case and issue 7's convoy. Every kept run of sets 18-26 had
one server shard, where a worker's pushes leave on one connection and no push is a newcomer.
Measurements are untouched; nothing is rerun.

    .venv/bin/python benchmarks/newcomer_where_bound.py [--sets heldout18,...,heldout26] [--strategies ps-async,ps-sync]
        [--output newcomer_where_bound] [--no-synthetic]

Raw output: benchmarks/results/<output>.md (`--sets heldout27 --no-synthetic --output
newcomer_where_bound_heldout27`: set 27, two server shards). The files written at dd5ae45 (where the
tried rule lived in `LinkNetwork`, deciding by which link fixed the newcomer in the filling) were
replaced by this script's output; ties aside, the two implementations decide alike.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from unittest import mock

from repredict_sets import HERE, variant_table
from unmeasured_newcomer import _section, convoy_table

from sgdscale.fine import hubs, links, ps

SETS = ",".join(f"heldout{n}" for n in range(18, 27))


class WhereBound(links.LinkNetwork):
    """`LinkNetwork` with the tried rule: a newcomer's weight drops only while its sender's link is
    what binds it. Its messages start at their bursts' weights; each reallocation fills once at
    those weights, finds the newcomers bound by their sender's link (saturated, and no connection
    on it with a larger rate per unit of weight), and fills again with theirs reduced."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.burst_w: dict[int, float] = {}  # newcomer connection -> its burst's weight

    def _head_arrived(self, conn: int, now: float) -> None:
        self.burst_w.pop(conn, None)
        moving = conn in self.active
        super()._head_arrived(conn, now)
        if self.newcomers_yield and not moving and conn in self.active:
            full = self.burst_weight(conn, self.c_tag[conn])
            if self.c_w[conn] < full:  # the kept rule reduced it: a newcomer
                self.burst_w[conn] = full

    def reallocate(self, now: float) -> None:
        newcomers = [c for c in self.active if c in self.burst_w]
        for c in newcomers:
            self.c_w[c] = self.burst_w[c]
        super().reallocate(now)
        yielding = [c for c in newcomers if self._bound_by_sender(c)]
        if yielding:
            for c in yielding:
                self.c_w[c] = self.burst_w[c] * self.newcomer_weight
            super().reallocate(now)

    def _bound_by_sender(self, conn: int) -> bool:
        up = self.c_up[conn]
        on = [c for c in self.active if self.c_up[c] == up or self.c_down[c] == up]
        if sum(self.c_rate[c] for c in on) < self.cap[up] * (1 - 1e-9):
            return False
        return self.c_rate[conn] / self.c_w[conn] >= max(self.c_rate[c] / self.c_w[c] for c in on) * (1 - 1e-9)


@contextlib.contextmanager
def general(where_bound: bool = False):
    """The general network throughout (the star shortcut off); `where_bound`: with the tried rule.
    Async runs are sensitive to event order, so the star shortcut and the general network can
    settle into different patterns (`unmeasured_newcomer.md`: up to 7 points on the same inputs):
    the rules are compared general against general."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(hubs.StarNetwork, "applies", staticmethod(lambda *a, **k: False)))
        if where_bound:
            stack.enter_context(mock.patch.object(ps, "LinkNetwork", WhereBound))
        yield


def tried():
    return general(where_bound=True)


def shard_scan_table() -> str:
    """The largest loss of steady-state throughput from one more shard, over 2-4 workers, 1-3 -> 2-4
    shards and 28 bandwidths from 100 Mbit/s (x1.13 each), the profile above, server NICs as fast as
    the workers' or a quarter of that, nominal figures, variability off, 30 steps after 100 of
    warm-up: where each rule's model breaks the law that more shards never slow training."""
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel
    from sgdscale.fine.ps import simulate_ps
    from sgdscale.strategy import Strategy

    profile = _equal_tensors()
    rules = (("kept: every newcomer yields", {}, contextlib.nullcontext),
             ("tried: only where bound", {}, tried),
             ("equal sharing (newcomer weight 1)", {"newcomer_share_weight": 1.0}, contextlib.nullcontext))
    rows = ["| strategy | server NIC / worker NIC | rule | largest loss | where (workers, shards, Mbit/s) |",
            "|---|---:|---|---:|---|"]
    for kind in ("ps-sync", "ps-async"):
        for ratio in (1.0, 0.25):
            for label, fields, in_place in rules:
                worst = (0.0, "none")
                for workers in (2, 3, 4):
                    for shards in (1, 2, 3):
                        for bw in (1e8 * 1.13 ** i for i in range(28)):
                            out = []
                            for servers in (shards, shards + 1):
                                cluster = Cluster(workers, bandwidth_bps=bw, latency_s=2e-5, ps_count=servers,
                                                  ps_bandwidth_bps=bw * ratio)
                                comm = dataclasses.replace(CommModel.from_link(bw, 2e-5), **fields)
                                with in_place():
                                    out.append(simulate_ps(profile, cluster, Strategy(kind=kind, grouping="per-tensor"),
                                                           comm, iterations=30, warmup=100,
                                                           variability=False).throughput)
                            loss = 1 - out[1] / out[0]
                            if loss > worst[0]:
                                worst = (loss, f"{workers}, {shards} -> {shards + 1}, {bw / 1e6:.0f}")
                rows.append(f"| {kind} | {ratio:g} | {label} | {worst[0]:.1%} | {worst[1]} |")
                print(rows[-1], flush=True)
    return _section("Where more shards run slower (steady state)", shard_scan_table.__doc__, rows)


def _equal_tensors():
    """tests/test_fine_des.py's EQUAL_TENSORS: 12 layers, one 400 kB tensor each."""
    from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes

    return Profile(model="equal", batch_size=8, step=StepTimes(data_s=0.001, optimizer_s=0.004),
                   layers=[Layer(name=f"l{i}", forward_s=0.002 + 0.001 * (i % 3),
                                 backward_s=0.004 + 0.001 * (i % 2),
                                 params=[ParamTensor(name=f"l{i}.w", numel=100_000, bytes=400_000)])
                           for i in range(12)])


def server_count_table() -> str:
    """Async PS, 2 workers, 12 tensors of 400 kB (tests/test_fine_des.py's EQUAL_TENSORS), worker NICs
    at 798.6 Mbit/s, server NICs at a quarter of that, nominal figures, variability off, 300 steps
    after 300 of warm-up: throughput by server count, which should not fall as shards are added."""
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel
    from sgdscale.fine.ps import simulate_ps
    from sgdscale.strategy import Strategy

    profile = _equal_tensors()
    bw = 798607784.5281649  # where the property test's scan found the largest loss
    shards = (1, 2, 3, 4, 6)
    rows = ["| rule | " + " | ".join(f"{s} shards" for s in shards) + " |", "|---|" + "---:|" * len(shards)]
    for label, in_place in (("kept: every newcomer yields (general network)", general),
                            ("tried: only where bound (general network)", tried),
                            ("kept (star shortcut, as predict runs)", contextlib.nullcontext)):
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
                              f"Every newcomer yields (kept) or only where its sender's link binds it (tried): {method}",
                              f"Error of the median prediction against the median measurement (kept runs, their own "
                              f"rounds' profiles), from {source}.", args.sets.split(","),
                              set(args.strategies.split(",")),
                              [("kept (general network)", f"{method}, kept, general network", general),
                               ("tried (general network)", f"{method}, tried, general network", tried),
                               ("kept (star shortcut, as predict runs)", f"{method}, kept, star shortcut",
                                contextlib.nullcontext)],
                              method=method) + "\n"
    if not args.no_synthetic:
        text += server_count_table() + shard_scan_table() + convoy_table((("kept (general network)", {}, general),
                                                     ("tried (general network)", {}, tried),
                                                     ("kept (star shortcut)", {}, contextlib.nullcontext)))
        print(text[text.rindex("## More shards"):])
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
