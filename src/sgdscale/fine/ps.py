"""The parameter-server simulation (sync and async): every worker's step, event by event.

Every worker's step is the DAG of its elementary operations (data + copy, forward per layer,
backward per layer, one push per gradient message, the server's update, one pull per message);
the simulator runs that DAG for every worker and iteration on shared resources:

- each worker's compute: one FIFO resource (data, forward layers, backward layers; the servers
  run the optimizer);
- NIC links, laid out by the topology (`sgdscale.comm.topology.Topology.ps_links`): with one
  device per node and dedicated servers every worker and every server shard has a full-duplex
  NIC, an uplink and a downlink; with several devices per node they share their node's NIC, and
  colocated shards use their node's NIC, local traffic the intra-node link. Rates come from the
  topology (a measured network file scales them all). A message from A to B is a flow over
  A's uplink and B's downlink; one connection (TCP stream) per (worker, shard) pair and direction
  sends its messages FIFO; concurrent connections share links max-min fairly, weighted: flows
  already leaving a node first, flows late into a busy node last (`sgdscale.comm.sharing`,
  `sgdscale.fine.links`); each message is delivered the NIC's latency alpha after its last byte left;
  while a dedicated shard's uplink sends, its downlink carries only part of its capacity (the
  acknowledgements of the pushes queue behind the replies: `sgdscale.comm.sharing.couple_duplex`);
- server shards: FIFO resources; applying a message costs its share of the profile's optimizer
  time, `optimizer_s * bytes / gradient_bytes`, per applied update (the workers run no optimizer),
  and its CPU per message; its CPU per byte moved runs beside the wire (`RECEIVE_OVERLAPS_TRANSFER`).
- receive before send (gloo's rendezvous): a point-to-point message only flows once its receiver
  has posted the receive, and that notice travels on the same FIFO connection as the data. A
  worker posts its pulls when its backward ends, so the notice to shard s arrives alpha after
  that, behind all its pushes to s already written: a shard's new parameters start towards worker
  w only after w's last push of the step has reached that shard and w's backward has ended.
  (Measured on the emulated cluster: without this rule, sync PS at 200 Mbit/s was predicted 30%
  too fast, because pulls overlapped pushes that in reality block them.) But gloo writes a push
  only once the shard has posted its receive: where the shard has not yet posted its receives of
  the step when w's backward ends, w's pushes wait unwritten and the notice goes first (sync PS;
  with unequal sharing early workers get there, and their pulls then overlap the others' pushes:
  `benchmarks/pair_duplex_model.py`; that w's own pushes and pulls then share one gloo pair,
  which does not move data both ways at once, `benchmarks/duplex.py`, changed its predictions by
  under 0.1%, so the pair is not modelled).
  The other direction has a rule too, in sync PS: a shard posts its receives for step k+1
  only once all its replies of step k have arrived, so a worker that got its parameters early cannot
  push step k+1 to that shard while the shard still replies to a slower worker. The runtime's server
  posts them once its replies' sends have completed (`sgdscale.runtime.ps`), and gloo completes a send
  once its last byte is in the socket, some tens of ms before the bytes arrive (netbench's `SendLead`;
  39-43 ms at 790 Mbit/s on the emulated cluster, `benchmarks/send_completion.py`); posting that early
  is modelled (`LinkNetwork.watch`, `POSTS_AHEAD_BY_SEND_LEAD`) but was held out on set 84 and not
  kept. Without the rule the simulation drifted, over some tens of steps, from serial push and pull
  phases into a pattern where early workers' pushes overlap late workers' pulls throughout: the
  predicted step shrank with the number of simulated iterations (densenet121 replay, 6 workers, 500
  Mbit/s: 7.16 s over 20 steps, 4.70 s over 200).

- interference (a network file's measured compute slowdown, `comm.interference.ps_compute_slowdown`):
  a worker's backward runs slower while its own uplink sends its pushes (`compute_while_sending`
  gives the slowed backward end and hand-over times; the sends keep their speed, as measured).

Strategies:
- ps-sync: a worker pushes each message as soon as backward completes its group; the shard, once
  it has all N copies, aggregates + updates, then sends the new parameters to all N workers;
  forward of layer l in the next iteration starts once l's parameters are back. No other barrier.
- ps-async: no aggregation: the shard applies each worker's message on arrival (FIFO) and sends
  that worker the fresh parameters; a worker's forward of layer l waits for the messages of its
  own previous push that hold l's tensors (the pull overlaps with forward, layer by layer).
(All-reduce has a closed form, `sgdscale.fine.allreduce`; the tests keep an event-driven oracle of
it.)

Speed (why the loop looks like this): workers are state machines, not one object per operation.
Forward layers whose parameters are back (or in flight with a known arrival) run in one go; the
whole backward is one event, its pushes queued ahead of time with their release times; a message
is handled when its last byte leaves (arrival = that + alpha, the same for all, so order is kept)
and shards compute their FIFO completion times on arrival, so a message costs about one heap
event. Link rates are recomputed only when a connection starts or stops moving, and while the
server NICs are what binds, `sgdscale.fine.hubs.StarNetwork` serves each server NIC as one
processor-sharing queue with a virtual clock (O(log k) per change instead of O(k)); it gives
the same answer as the general max-min network (tests check it).

Measurement: `warmup` steps per worker are simulated and discarded, then `iterations` steps are
reported (one worker step = data + forward + backward, ending when its backward ends); throughput,
breakdown and utilization are `sgdscale.fine.ps_accounting`'s, the timeline
`sgdscale.fine.ps_trace`'s.
"""

from __future__ import annotations

import heapq

import numpy as np

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.interference import compute_while_sending, ps_compute_slowdown
from sgdscale.comm import sharing
from sgdscale.comm.sharing import couple_duplex, pushes_yield, receive_share_while_sending, simulated_weight_sigma
from sgdscale.comm.topology import Topology
from sgdscale import cpu_quota
from sgdscale.cpu_quota import node_clocks, profiled_quota
from sgdscale.fine import check_step_counts
from sgdscale.fine.dag import PsPlan, ps_plan
from sgdscale.fine.events import PULL_KINDS, PUSH_KINDS, EventQueue, Kind
from sgdscale.fine.hubs import StarNetwork
from sgdscale.fine.links import LinkNetwork
from sgdscale.fine.ps_accounting import outcome, reference_blocked
from sgdscale.fine.ps_trace import PsTrace
from sgdscale.grouping import ready_offsets_s
from sgdscale import message_cpu
from sgdscale.message_cpu import WAKEUP_SPACING_S, receives_pulls_as_they_arrive, with_message_cpu
from sgdscale.profile import Profile
from sgdscale.result import Outcome, TimelineSpec, timeline_spec
from sgdscale.strategy import Strategy
from sgdscale.variability import ComputeSampler


# Whether a sync shard posts its next receives the network file's send lead before its replies arrive
# (`CommModel.send_lead_s`, measured by netbench) instead of once they have. The lead is real: gloo
# completes a send once its last byte is in the socket, 39-43 ms before the bytes arrive at 790 Mbit/s
# on the emulated cluster (`benchmarks/send_completion.py`), and a traced real step shows the shard
# posting 59 ms before its last worker has its parameters (`benchmarks/shard_post_lead.py`).
# Modelled (`LinkNetwork.watch`), held out on set 84 and not kept: there fine was 6.7% / 8.4% with it
# and 6.6% / 8.4% without (`benchmarks/results/send_lead-heldout84.md`); on the kept runs of sets 40-83
# a lead of 40 ms moved 36 real-compute cases from 5.7% to 4.9% in the median and 54 replays from 3.2%
# to 3.6% (`send_lead_tuning-{real,replay}.md`). What else keeps the runs' first workers ahead is not found.
POSTS_AHEAD_BY_SEND_LEAD = False


def simulate_ps(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel | Topology, *,
                iterations: int = 100, warmup: int = 10, seed: int = 0, variability: bool = True,
                timeline: bool | TimelineSpec = False) -> Outcome:
    """Simulate `warmup + iterations` steps of every worker (see the module docstring)."""
    check_step_counts(iterations, warmup)
    if not strategy.uses_servers:
        raise ValueError(f"simulate_ps runs parameter servers, not '{strategy.kind}'")
    topology = Topology.of(cluster, comm, strategy)
    profile = with_message_cpu(profile, topology.nic.worker_cpu_s_per_message, topology.nic.worker_cpu_s_per_wakeup,
                               pulls=not message_cpu.PULLS_RECEIVED_AS_THEY_ARRIVE)
    plan = ps_plan(profile, cluster, strategy, topology)
    sampler = ComputeSampler(profile, cluster, seed=seed, variability=variability)
    total = warmup + iterations
    rows = np.array([sampler.draw_rows() for _ in range(total)], dtype=np.intp).reshape(total, cluster.workers)
    sim = run_ps(profile, cluster, topology, plan, sampler, rows, strategy.kind == "ps-sync", warmup,
                 trace=timeline_spec(timeline), seed=seed)
    reference = reference_blocked(profile, cluster, strategy, topology, plan)
    return outcome(sim, reference, strategy)


def run_ps(profile: Profile, cluster: Cluster, comm: CommModel | Topology, plan: PsPlan, sampler: ComputeSampler,
           rows: np.ndarray, sync: bool, warmup: int, trace: TimelineSpec | None = None, star: bool = True,
           seed: int = 0, posted_order: bool | None = None) -> PsRun:
    """Run a parameter-server simulation, with the star shortcut for the server NICs where it holds
    (`star=False`: the general max-min network throughout, for tests). `posted_order`: send held
    replies as `in_notice_order` does (None: as `POSTED_ORDER` says)."""
    sim = PsRun(profile, cluster, Topology.of(cluster, comm), plan, sampler, rows, sync, warmup, trace=trace,
                star=star, seed=seed, posted_order=posted_order)
    sim.run()
    return sim


# A shard whose CPU paces its writes does not let the replies already leaving keep its uplink:
# flows that take turns at a CPU share equally. Measured with plain TCP out of one node at 0.23
# cores, 2400 Mbit/s, 47 MB per flow (`benchmarks/head_start.py`): with the node idle a flow 10 ms
# late gets 0.14 of the link's weight; with a spinning process on the node the two flows finish
# together (0.96 of each other). The simulation takes a shard's CPU to pace its writes while its
# update queue is busy, where moving bytes at line rate both ways would take at least
# CPU_PACED_TRANSPORT_SHARE of its CPU: an update running beside the transport takes the rest.
BUSY_SHARD_SHARES_EQUALLY = True
CPU_PACED_TRANSPORT_SHARE = 0.5


def cpu_paces_shard_writes(server_cpu_s_per_byte: float, link_Bps: float) -> bool:
    """Whether a busy shard's CPU, not its link, paces its replies (see CPU_PACED_TRANSPORT_SHARE):
    `server_cpu_s_per_byte` is wall seconds of the shard's CPU budget per byte moved."""
    return BUSY_SHARD_SHARES_EQUALLY and 2.0 * server_cpu_s_per_byte * link_Bps >= CPU_PACED_TRANSPORT_SHARE


# The order in which a shard sends the replies it held for a worker's receive notices. gloo's own
# order (`in_notice_order`) is measured and modelled, but not used: on the kept PS runs of sets
# 10-32 it made the fine method's async predictions faster where they were already too fast
# (median error 9.2% -> 11.1%, mean +11.1% -> +13.0%; sync 5.0% -> 4.7%;
# `benchmarks/reply_order_tuning.py`). What it leaves out is how often real async workers run
# close together, their pulls sharing the shard's uplink behind their pushes' backlog (31 of 38
# forwards in `benchmarks/shard_cpu_phase.py`), where the simulated ones drift apart and stay
# there. The busy-shard rule (BUSY_SHARD_SHARES_EQUALLY) now keeps simulated 2-worker replays
# together where the shard's CPU paces its writes; tried again with it on (sets 10-34), gloo's
# order still made async worse (8.8% -> 9.7%; `benchmarks/results/reply_order_tuning-with-busy-shard.md`).
POSTED_ORDER = False

# Whether a shard's transport CPU overlaps the transfer it serves. On: each copy's receive CPU for its
# bytes (`PsPlan.receive_s`) runs on the shard's FIFO as the copy comes in (starting no earlier than the
# copy's bytes at the shard's downlink rate before its arrival), and a reply starts leaving as the shard
# starts writing it (its CPU, up to its seconds on the uplink, overlaps its sending). Off: all of it is
# charged in series with the wire, after the message's last copy (until set 78). Measured
# (`benchmarks/shard_cpu_overlap.py`, each shard node's cgroup CPU and veth bytes sampled every 5 ms in
# real sync PS replays, bert, 4 workers, 850 Mbit/s, 0.22 cores, 3 rounds,
# `results/shard_cpu_overlap-bert-w4-850Mbit.md`): with one shard and with three, 94-100% of a shard's
# CPU ran in bins in which its link moved bytes, at 0.06-0.10 of its 0.22 cores while pushes arrived.
# Yet in series predicted better where one shard serves: held out alone on set 75 (sync PS replays,
# three with several shards, two with one) it went from 1.6% / 13.0% to 5.8% / 9.5% (one shard +1.3% and
# +0.6% -> +3.1% and +6.7%), and was not kept. What the series charge stood for there is the shard's
# pushes slowing while it replies (`sgdscale.comm.sharing.RECEIVE_SHARE_WHILE_SENDING`, measured after
# set 77): one shard's link moves both ways at once for a quarter of a sync step, a busiest shard among
# several balanced ones hardly ever. The two together were held out on set 78 and kept (fine 1.3% / 17.4%
# against 4.3% / 15.2% in series; `benchmarks/results/duplex-heldout78.md`).
RECEIVE_OVERLAPS_TRANSFER = True
SEND_OVERLAPS_TRANSFER = True
# Between the two: each copy's receive CPU runs on the shard's FIFO when the copy has arrived, in
# series with its own transfer but not held back until the message's last copy (sync PS). Also worse
# on sets 10-36's sync PS (5.1% -> 5.3%, mean +1.3% -> +2.4%; results/receive_on_arrival_tuning.md).
RECEIVE_ON_ARRIVAL = False

# Whether a worker's pushes leave at its share of the shard's downlink (N workers pushing to one shard
# at once) rather than at its own uplink's rate, with the backward's slowdown while they leave scaled
# by that share: the CPU a byte costs is spent as the byte flows, so a flow slowed by sharing spreads
# the same CPU over more time, part of it after backward. Real PS workers' backward, against its
# profile, ran 1.13x (sync) and 1.09x (async) longer with 2 workers than with 3 on sets 19-45, where
# the fine method predicts the same (`benchmarks/backward_by_workers.py`). Modelled, not used: it moved
# the predicted 2-over-3 backward from 1.00 to 1.01 (`--sends-at-fair-share`,
# results/backward_by_workers-fair-share.md); the runs' difference came from where the testbed puts
# its nodes on the cores (`benchmarks/core_layout.py`).
SENDS_AT_FAIR_SHARE = False


def fair_share_sends(send_s: list[list[float]], compute_slowdown: float, plan: PsPlan, links, push_caps: list[float],
                     n: int) -> tuple[list[list[float]], list[float]]:
    """(send seconds per worker and message, backward slowdown per worker) with each push at the
    worker's share of its shard's downlink (SENDS_AT_FAIR_SHARE)."""
    out, slowdowns = [], []
    for w in range(n):
        seconds, weighted, total = [], 0.0, 0.0
        for m in range(plan.messages):
            up, down = links.push_pairs[w][plan.shard[m]]
            share = min(1.0, push_caps[down] / n / push_caps[up])
            seconds.append(send_s[w][m] / share)
            weighted += plan.bytes[m] * share
            total += plan.bytes[m]
        out.append(seconds)
        slowdowns.append(1.0 + (compute_slowdown - 1.0) * (weighted / total if total > 0 else 1.0))
    return out, slowdowns


def in_update_order(replies: list[tuple], notice_s: float, post_rank: list[int], update_s: list[float],
                    messages: int) -> list[tuple]:
    """Held replies `(bytes, ready, token, step)` in the order the shard updated them (forward's
    first layer last), as the explicit DAG spells out (`dag.ps_sync_dag`)."""
    return replies


def in_notice_order(replies: list[tuple], notice_s: float, post_rank: list[int], update_s: list[float],
                    messages: int) -> list[tuple]:
    """Held replies to one worker in the order gloo sends them once the worker's receive notices
    arrive at `notice_s`.

    gloo keeps one FIFO of writes per pair: a send waits for the peer's notice and is written when
    both are there. The worker posts its receives in parameter order, so replies the shard had in
    hand when the notices came go out in that order (forward's), later ones as the shard finishes
    them (in the order gradients arrived: forward's first layer last). "In hand": the shard had
    begun the update (it ends within the notices' handling, which runs beside it). Measured on set
    32's resnet50 replay (async, `benchmarks/async_pull_overlap.py`): where the shard kept up (its
    updates of the step ended within 10 ms of the worker posting its receives) forward waited only
    for its last layers; where they ended 88-119 ms after, forward waited for the first layer
    behind the whole pull.
    """
    def begun(reply: tuple) -> bool:
        return reply[1] - update_s[reply[2] % messages] <= notice_s

    in_hand = sorted((r for r in replies if begun(r)), key=lambda r: post_rank[r[2] % messages])
    return in_hand + [r for r in replies if not begun(r)]


class StepTables:
    """Per (measured row, worker scale): the numbers one worker-step needs, as Python floats."""

    def __init__(self, sampler: ComputeSampler, plan: PsPlan) -> None:
        self.sampler = sampler
        self.offsets = ready_offsets_s(sampler.backward_table_s, plan.ready_layer, plan.ready_fraction)
        self.cache: dict[tuple[int, float], tuple] = {}

    def get(self, row: int, scale: float) -> tuple:
        key = (row, scale)
        tab = self.cache.get(key)
        if tab is None:
            s = self.sampler
            fwd = s.forward_table_s[row] * scale
            cf = np.concatenate([[0.0], np.cumsum(fwd)]).tolist()
            pre = float((s.data_table_s[row] + s.h2d_table_s[row]) * scale)
            bwd = float(s.backward_table_s[row].sum() * scale)
            rel = (self.offsets[row] * scale).tolist()
            order = sorted(range(len(rel)), key=rel.__getitem__)  # messages in hand-over order
            tab = (pre, cf, bwd, rel, row, scale, order)
            self.cache[key] = tab
        return tab


class PsRun:
    """One simulation's state and event loop; what it leaves behind (step ends, per-step compute and
    blocked time, snapshots, the networks) is read by `sgdscale.fine.ps_accounting`."""

    def __init__(self, profile: Profile, cluster: Cluster, topology: Topology, plan: PsPlan,
                 sampler: ComputeSampler, rows: np.ndarray, sync: bool, warmup: int,
                 trace: TimelineSpec | None = None, star: bool = True, seed: int = 0, posted_order: bool | None = None) -> None:
        self.profile, self.cluster, self.plan, self.sampler = profile, cluster, plan, sampler
        self.rows = rows.tolist()
        self.total = rows.shape[0]
        self.sync, self.warmup = sync, warmup
        posted = POSTED_ORDER if posted_order is None else posted_order
        self.reply_order = in_notice_order if posted else in_update_order
        self.n = cluster.workers
        self.tables = StepTables(sampler, plan)
        n, shards = self.n, plan.shards
        # The topology lays out the links (sgdscale.comm.topology.Topology.ps_links): one device per
        # node and dedicated servers give push links 0..n-1 worker uplinks, n..n+S-1 server
        # downlinks; pull links 0..S-1 server uplinks, S..S+n-1 worker downlinks.
        self.links = links = topology.ps_links(shards)
        self.q = EventQueue()
        alpha = self.alpha_s = topology.alpha_s  # per-message latency
        push_caps, pull_caps = links.push_caps_Bps, links.pull_caps_Bps
        push_pairs = [links.push_pairs[w][s] for w in range(n) for s in range(shards)]
        pull_pairs = [links.pull_pairs[s][w] for s in range(shards) for w in range(n)]

        # NICs shared by several devices or colocated servers are not stars: general network.
        newcomer = topology.nic.newcomer_share_weight
        sigma = simulated_weight_sigma(topology.nic.share_weight_sigma, newcomer)
        late = sharing.LATE_JOINER_WEIGHT
        star = star and not links.shared_nics and not (sync and POSTS_AHEAD_BY_SEND_LEAD
                                                                   and topology.nic.send_lead_s > 0.0)
        # Interference (comm.interference): a worker's backward slows while its own uplink sends its pushes.
        self.compute_slowdown = ps_compute_slowdown(topology.nic)

        def network(caps, pairs, kinds, hubs, key_offset, yields=True):
            if star and StarNetwork.applies(caps, pairs, hubs, weighted=sigma > 0.0 or newcomer < 1.0 or late < 1.0):
                net = StarNetwork(self.q, caps, alpha, kinds, shared=hubs, weight_sigma=sigma, seed=seed,
                                  key_offset=key_offset, newcomer_weight=newcomer, late_joiner_weight=late)
            else:
                net = LinkNetwork(self.q, caps, alpha, kinds, weight_sigma=sigma, seed=seed, key_offset=key_offset,
                                  newcomer_weight=newcomer, late_joiner_weight=late)
            conns = [net.add_connection(up, down, yields) for up, down in pairs]
            return net, conns

        self.push_net, conns = network(push_caps, push_pairs, PUSH_KINDS, links.hubs_push, 0,
                                       pushes_yield(sync, n, shards, links.shared_nics))
        self.push_conn = [conns[w * shards:(w + 1) * shards] for w in range(n)]
        self.pull_net, conns = network(pull_caps, pull_pairs, PULL_KINDS, links.hubs_pull, n * shards)
        self.pull_conn = [conns[s * n:(s + 1) * n] for s in range(shards)]
        if not links.shared_nics:  # a shard's pushes slow while it replies (sharing.receive_share_while_sending)
            couple_duplex(self.pull_net, self.push_net,
                          {links.pull_pairs[s][0][0]: links.push_pairs[0][s][1] for s in range(shards)},
                          receive_share_while_sending(sync))
        # Each shard's uplink, told until when the shard's CPU is busy updating (a busy shard's
        # replies share its link equally: LinkNetwork.sender_busy_until).
        self.shard_uplinks = [sorted({up for up, _ in links.pull_pairs[s]}) for s in range(shards)]
        if any(cpu_paces_shard_writes(topology.nic.server_cpu_s_per_byte, pull_caps[up])
               for ups in self.shard_uplinks for up in ups):
            self.pull_net.sender_busy_until = [0.0] * len(pull_caps)
        # per worker and message: seconds its own uplink needs to send it (compute_while_sending)
        self.send_s = [[plan.bytes[m] / push_caps[links.push_pairs[w][plan.shard[m]][0]] for m in range(plan.messages)]
                       for w in range(n)]
        self.worker_slowdown = [self.compute_slowdown] * n
        if SENDS_AT_FAIR_SHARE and self.compute_slowdown is not None:
            self.send_s, self.worker_slowdown = fair_share_sends(self.send_s, self.compute_slowdown, plan, links,
                                                                 push_caps, n)
        # per message: the shard's receive CPU of one copy that can run while the copy still arrives
        # (RECEIVE_OVERLAPS_TRANSFER), at most the copy's seconds on the shard's downlink
        self.receive_lead_s = [min(plan.receive_s[m], plan.bytes[m] / push_caps[links.push_pairs[0][plan.shard[m]][1]])
                               if RECEIVE_OVERLAPS_TRANSFER else 0.0 for m in range(plan.messages)]
        # per message: how much earlier than the update's end its replies leave (SEND_OVERLAPS_TRANSFER):
        # each reply's CPU, up to its seconds on the shard's uplink, times the replies (N in sync PS)
        replies = n if sync else 1
        self.send_lead_s = [replies * min(plan.receive_s[m],
                                          plan.bytes[m] / pull_caps[links.pull_pairs[plan.shard[m]][0][0]])
                            if SEND_OVERLAPS_TRANSFER else 0.0 for m in range(plan.messages)]
        # Per node, its CPU quota replayed (sgdscale.cpu_quota; None: compute takes its profiled time)
        quota = profiled_quota(profile, topology.nic)
        if cluster.gpus_per_node > 1 or topology.ps_placement != "dedicated":
            quota = None  # nodes that several workers or a worker and a shard share: not modelled
        self.worker_clocks = node_clocks(quota, n)
        # per layer: wall seconds of the worker's budget to receive the pulls it first needs there,
        # and per step to send its pushes (cpu_quota.WORKER_TRANSPORT_ON_BUDGET)
        byte_s = topology.nic.server_cpu_s_per_byte if quota is not None and cpu_quota.WORKER_TRANSPORT_ON_BUDGET else 0.0
        first_need = [0.0] * len(profile.layers)
        seen: set[int] = set()
        for j, messages in enumerate(plan.need):
            for m in messages:
                if m not in seen:
                    seen.add(m)
                    first_need[j] += plan.bytes[m] * byte_s
        self.receive_budget_s = first_need if byte_s else None
        self.send_budget_s = sum(plan.bytes) * byte_s
        self.shard_clocks = node_clocks(quota, shards, first_node=n)
        # (message_s, wakeup_s): a worker's CPU per pull received, where it receives them as they
        # arrive (message_cpu.PULLS_RECEIVED_AS_THEY_ARRIVE; None: charged to forward, or nothing to charge)
        costs = (topology.nic.worker_cpu_s_per_message, topology.nic.worker_cpu_s_per_wakeup)
        self.pull_cpu = costs if receives_pulls_as_they_arrive(profile, *costs) else None
        self.write_lead_s = topology.nic.send_lead_s  # a send completes this long before its bytes arrive
        self.recorder = PsTrace(self, trace) if trace else None
        self.snapshots: dict[str, tuple] = {}

    @property
    def trace(self) -> list | None:
        return self.recorder.events if self.recorder is not None else None

    # The main loop is one long function on purpose: local variables are much faster in CPython.
    def run(self) -> None:
        n, total, warmup, sync = self.n, self.total, self.warmup, self.sync
        plan = self.plan
        M = plan.messages
        L = len(self.profile.layers)
        need, post_rank, reply_order = plan.need, plan.post_rank, self.reply_order
        msg_bytes, msg_shard, msg_update = plan.bytes, plan.shard, plan.update_s
        msg_receive = plan.receive_s if RECEIVE_OVERLAPS_TRANSFER or RECEIVE_ON_ARRIVAL else None
        receive_lead, send_lead = self.receive_lead_s, self.send_lead_s
        rows = self.rows
        scale = [float(x) for x in self.sampler.scale]
        get_tab = self.tables.get
        push_net, pull_net = self.push_net, self.pull_net
        busy_until, shard_up = pull_net.sender_busy_until, self.shard_uplinks
        push_send, pull_send = push_net.send, pull_net.send
        push_done, pull_done = push_net.on_done, pull_net.on_done
        push_conn, pull_conn = self.push_conn, self.pull_conn
        heap = self.q.heap
        seq = self.q.seq
        heappush, heappop = heapq.heappush, heapq.heappop
        rec = self.recorder
        wclocks, sclocks = self.worker_clocks, self.shard_clocks
        receive_budget, send_budget = self.receive_budget_s, self.send_budget_s
        trace_workers = rec.workers if rec is not None else set()
        trace_iters = rec.iterations if rec is not None else set()
        PUSH_DONE, PUSH_RELEASE = int(Kind.PUSH_DONE), int(Kind.PUSH_RELEASE)
        PULL_DONE, PULL_RELEASE = int(Kind.PULL_DONE), int(Kind.PULL_RELEASE)
        STEP_END = int(Kind.STEP_END)
        PULL_WATCH = int(Kind.PULL_WATCH)

        # Worker state.
        it = [0] * n  # current iteration
        nxt = [0] * n  # next forward layer
        tab = [None] * n
        waiting = [False] * n
        wait_since = [0.0] * n
        blocked = [0.0] * n  # blocked time in the current step
        have = [[-1] * M for _ in range(n)]  # iteration whose update of message m the worker holds
        have_t = [[0.0] * M for _ in range(n)]  # when it arrives (may be up to alpha ahead)
        busy = [0.0] * n  # compute busy time scheduled so far
        cend = [0.0] * n  # end of the compute scheduled last
        step_start = [0.0] * n
        ends: list[list[float]] = [[] for _ in range(n)]
        step_compute: list[list[float]] = [[] for _ in range(n)]
        step_blocked: list[list[float]] = [[] for _ in range(n)]
        # Shards.
        shards = plan.shards
        sfree = [0.0] * shards
        sbusy = [0.0] * shards
        arrivals = [[0] * M, [0] * M]
        past_warmup = 0 if warmup > 0 else n
        finished = 0
        snapshot = self._snapshot
        state = (busy, cend, sfree, sbusy)
        if warmup == 0:
            self.snapshots["start"] = snapshot(0.0, *state)
        last_release = [[0.0] * shards for _ in range(n)]
        # Receive-before-send: per (worker, shard), pushes of the worker's current step that have
        # arrived, the step whose receive notice has arrived (and when), and pulls held until then.
        per_shard = [0] * shards
        for m in range(M):
            per_shard[msg_shard[m]] += 1
        pushed = [[0] * shards for _ in range(n)]
        notice_k = [[-1] * shards for _ in range(n)]
        notice_t = [[0.0] * shards for _ in range(n)]
        held: list[list[list[tuple]]] = [[[] for _ in range(shards)] for _ in range(n)]
        early_notice = [[-1] * shards for _ in range(n)]  # the step whose notice went ahead of its pushes
        bwd_end = [0.0] * n  # when the worker's backward of its current step ends (it posts its pulls)
        step_bwd = [0.0] * n  # how long it took (longer than the profile's under interference)
        # Interference: up_free[w], when w's uplink has sent what it was handed (compute_while_sending).
        kc, send_s, up_free = self.compute_slowdown, self.send_s, [0.0] * n
        kc_of = self.worker_slowdown
        alpha_s = self.alpha_s
        # Sync PS, the shard's side of receive-before-send: the last step whose replies shard s has
        # all sent (its receives for the next step are posted then; `posted_t` is when that notice
        # reaches the workers), the replies of the step after it delivered so far, and pushes held
        # until the shard posts their receives: (worker, message, release, step).
        replies_of_step = [n * c for c in per_shard]
        posted_k = [-1] * shards
        posted_t = [0.0] * shards
        replies_done = [0] * shards
        held_push: list[list[tuple]] = [[] for _ in range(shards)]
        write_lead_s = self.write_lead_s
        on_write = sync and POSTS_AHEAD_BY_SEND_LEAD and write_lead_s > 0.0
        handed = [0] * shards  # replies of the step handed to their connections (on_write)
        written_t = [0.0] * shards  # when the latest of them was written
        pending = [0] * shards  # connections whose latest reply is not yet written
        post_step = [-1] * shards  # the step whose replies are all handed, not yet all written
        conn_shard = {}
        for s, conns in enumerate(pull_conn):
            for c in conns:
                conn_shard[c] = s
        watches = pull_net.watches

        def post(s: int, k: int, t: float, lnow: float) -> None:
            """Shard s posts its receives of step k + 1 at t: pushes held for them go."""
            posted_k[s] = k
            posted_t[s] = t
            waiting_pushes = held_push[s]
            if waiting_pushes:
                held_push[s] = []
                for w2, m2, release, k2 in waiting_pushes:
                    if release < t:  # (held in release order: FIFO is kept)
                        release = t
                    if release > last_release[w2][s]:
                        last_release[w2][s] = release
                    push_send(push_conn[w2][s], msg_bytes[m2], release, lnow, w2 * M + m2, k2)

        def handed_over(s: int, conn: int, k: int, lnow: float) -> None:
            """A reply of step k went to `conn` (on_write): watch for it to be written."""
            if conn not in watches:
                pending[s] += 1
            handed[s] += 1
            if handed[s] == replies_of_step[s]:
                handed[s] = 0
                post_step[s] = k
            pull_net.watch(conn, write_lead_s, conn, lnow)

        def on_written(conn: int, t: float) -> None:
            """Shard s has written all it has handed to connection `conn` (the rest is in the socket)."""
            s = conn_shard[conn]
            pending[s] -= 1
            if t > written_t[s]:
                written_t[s] = t
            if pending[s] == 0 and post_step[s] >= 0:
                k, post_step[s] = post_step[s], -1
                t, written_t[s] = written_t[s], 0.0
                post(s, k, t, t)

        pull_net.on_watch = on_written
        pull_net.kind_watch = PULL_WATCH

        if rec is not None:
            rec.install_flows()
        # Pulls received on the worker's CPU as they arrive (message_cpu.PULLS_RECEIVED_AS_THEY_ARRIVE): when its
        # receiving is done, and when its previous pull arrived (a wake-up's share by the gap).
        pull_cpu = self.pull_cpu
        pull_message_s, pull_wakeup_s = pull_cpu if pull_cpu is not None else (0.0, 0.0)
        received_until = [0.0] * n
        last_arrival = [float("-inf")] * n

        def advance(w: int, t: float, extra: float, lnow: float) -> None:
            """Run worker w's forward from layer nxt[w], starting at its time t (>= the loop's time
            lnow), as far as the parameters it holds allow; start backward at the end.

            Parameters already handed over may still be in flight (arrival up to alpha ahead):
            forward then waits for them inside the chunk, which is exact because their arrival
            times are final."""
            cf = tab[w][1]
            k = it[w]
            j0 = nxt[w]
            j = j0
            t0 = t
            clock = wclocks[w] if wclocks is not None else None
            t = t + extra if clock is None else clock.run(t, extra)
            comp = t - t0
            if k > 0:
                hv = have[w]
                ht = have_t[w]
                kk = k - 1
                while j < L:
                    r = 0.0
                    ok = True
                    for m in need[j]:
                        if hv[m] < kk:
                            ok = False
                            break
                        if ht[m] > r:
                            r = ht[m]
                    if not ok:
                        break
                    if r > t:
                        blocked[w] += r - t
                        t = r
                    if clock is None:
                        t += cf[j + 1] - cf[j]
                    else:
                        if receive_budget is not None and receive_budget[j] > 0.0:  # as the pulls came in
                            received = clock.run(r - receive_budget[j], receive_budget[j])
                            if received > t:
                                blocked[w] += received - t
                                t = received
                        began = t
                        t = clock.run(t, cf[j + 1] - cf[j])
                        comp += t - began
                    j += 1
            else:
                began = t
                t = t + cf[L] - cf[j] if clock is None else clock.run(t, cf[L] - cf[j])
                comp += t - began
                j = L
            if clock is None:
                comp = extra + cf[j] - cf[j0]
            nxt[w] = j
            if j == L:
                _, _, bwd, rel, _, _, order = tab[w]
                if kc is None:
                    t_end = t + bwd
                    handed = None
                else:  # backward slowed while the worker's own uplink sends (comm.interference)
                    handed, sent, t_end = compute_while_sending(t, rel, order, send_s[w], bwd, up_free[w],
                                                                kc_of[w])
                    if order:
                        up_free[w] = sent[order[-1]]
                if clock is not None:  # the same work on the node's CPU budget: hand-overs move with it
                    marks = clock.run_marks(t, (list(rel) if handed is None else [h - t for h in handed])
                                            + [t_end - t])
                    t_end = marks.pop()
                    handed = marks
                    if send_budget:  # the pushes leave after backward hands them over
                        clock.run(t_end, send_budget)
                bwd_end[w] = t_end
                step_bwd[w] = t_end - t
            if rec is not None and w in trace_workers and k in trace_iters and (comp > 0 or j == L):
                rec.compute(w, k, t0, extra, j0, j, have_t[w] if k > 0 else None, need,
                            step_bwd[w] if j == L else None)
            if j == L:
                busy[w] += comp + t_end - t
                cend[w] = t_end
                lr = last_release[w]
                pc = push_conn[w]
                base = w * M
                for m in range(M):
                    s = msg_shard[m]
                    release = t + rel[m] if handed is None else handed[m]
                    if release < lr[s]:
                        release = lr[s]
                    lr[s] = release
                    if sync and k > 0:
                        if posted_k[s] < k - 1:  # shard s still replies step k-1 to someone
                            held_push[s].append((w, m, release, k))
                            continue
                        if release < posted_t[s]:
                            release = lr[s] = posted_t[s]
                    push_send(pc[s], msg_bytes[m], release, lnow, base + m, k)
                heappush(heap, (t_end, next(seq), STEP_END, w, 0))
            else:
                busy[w] += comp
                cend[w] = t
                waiting[w] = True
                wait_since[w] = t

        def on_pull(token: int, k: int, arrival: float, lnow: float) -> None:
            """Fresh parameters of message m (update of iteration k) reach worker w at `arrival`."""
            w, m = divmod(token, M)
            have[w][m] = k
            if pull_cpu is None:
                have_t[w][m] = arrival
            else:  # received on w's CPU after the pulls before it (arrival order: on_pull's call order);
                # its cost is message_cpu.pull_cpu_s, inlined in the event loop
                gap = arrival - last_arrival[w]
                last_arrival[w] = arrival
                start = received_until[w] if received_until[w] > arrival else arrival
                done = start + pull_message_s + (pull_wakeup_s if gap >= WAKEUP_SPACING_S
                                                 else pull_wakeup_s * gap / WAKEUP_SPACING_S)
                received_until[w] = have_t[w][m] = done
                busy[w] += done - start
            if sync and not on_write:
                s = msg_shard[m]
                replies_done[s] += 1
                if replies_done[s] == replies_of_step[s]:  # shard s posts its receives of step k+1
                    replies_done[s] = 0
                    post(s, k, arrival, lnow)
            if waiting[w]:
                j = nxt[w]
                if m in need[j]:
                    kk = it[w] - 1
                    hv = have[w]
                    for x in need[j]:
                        if hv[x] < kk:
                            return
                    waiting[w] = False
                    t = wait_since[w]
                    if rec is not None and w in trace_workers and it[w] in trace_iters:
                        rec.wait(w, it[w], t, max(t, max(have_t[w][x] for x in need[j])))
                    advance(w, t, 0.0, lnow)

        def on_push(token: int, k: int, arrival: float, lnow: float) -> None:
            """Worker w's gradient message m of iteration k reaches its shard at `arrival`."""
            w, m = divmod(token, M)
            s = msg_shard[m]
            notice = None
            pw = pushed[w]
            count = pw[s] + 1
            if count < per_shard[s]:
                pw[s] = count
            else:  # w's last push of step k to s: its notice follows (unless it went first),
                pw[s] = 0  # and not before w posted it, when its backward ended; it is handled
                if early_notice[w][s] != k:  # once this message's update has begun (in_notice_order)
                    nt = bwd_end[w] + alpha_s
                    notice = nt if nt > arrival else arrival
            if msg_receive is not None:  # this copy's receive CPU, as it comes in (RECEIVE_ON_ARRIVAL, ..._OVERLAPS_...)
                r = msg_receive[m]
                st = sfree[s]
                if st < arrival - receive_lead[m]:
                    st = arrival - receive_lead[m]
                sfree[s] = st + r
                sbusy[s] += r
            if sync:
                arr = arrivals[k & 1]
                arr[m] += 1
                if arr[m] < n:
                    if notice is not None:
                        notice_in(w, s, k, notice, lnow)
                    return
                arr[m] = 0
            u = msg_update[m]
            if msg_receive is not None:
                u -= msg_receive[m] * (n if sync else 1)
            st = sfree[s]
            if st < arrival:
                st = arrival
            if sclocks is None:
                en = st + u
            else:
                en = sclocks[s].run(st, u)
                u = en - st
            sfree[s] = en
            if busy_until is not None:
                for link in shard_up[s]:
                    if en > busy_until[link]:
                        busy_until[link] = en
            sbusy[s] += u
            if rec is not None and k in trace_iters:
                rec.update(s, m, k, st, u, None if sync else w)
            nb = msg_bytes[m]
            ready = en - send_lead[m]  # the replies' CPU overlaps their sending (0 unless SEND_OVERLAPS_TRANSFER)
            pcs = pull_conn[s]
            if sync:
                for w2 in range(n):  # a pull leaves once w2's receive notice of step k is in
                    if notice_k[w2][s] == k:
                        nt = notice_t[w2][s]
                        pull_send(pcs[w2], nb, ready if ready > nt else nt, lnow, w2 * M + m, k)
                        if on_write:
                            handed_over(s, pcs[w2], k, lnow)
                    else:
                        held[w2][s].append((nb, ready, w2 * M + m, k))
            elif notice_k[w][s] == k:
                nt = notice_t[w][s]
                pull_send(pcs[w], nb, ready if ready > nt else nt, lnow, token, k)
            else:
                held[w][s].append((nb, ready, token, k))
            if notice is not None:
                notice_in(w, s, k, notice, lnow)

        def notice_in(w: int, s: int, k: int, nt: float, lnow: float) -> None:
            """Worker w's receive notices of step k reach shard s at nt: its held replies leave."""
            notice_k[w][s] = k
            notice_t[w][s] = nt
            waiting_pulls = held[w][s]
            if waiting_pulls:  # all of step k (w's earlier steps' pulls were released before)
                held[w][s] = []
                conn = pull_conn[s][w]
                for nb, ready, tok, kk in reply_order(waiting_pulls, nt, post_rank, msg_update, M):
                    pull_send(conn, nb, ready if ready > nt else nt, lnow, tok, kk)
                    if on_write:
                        handed_over(s, conn, kk, lnow)

        push_net.deliver = on_push
        pull_net.deliver = on_pull

        def start_step(w: int, k: int, now: float) -> None:
            it[w] = k
            nxt[w] = 0
            tab[w] = get_tab(rows[k][w], scale[w])
            step_start[w] = now
            blocked[w] = 0.0
            advance(w, now, tab[w][0], now)

        for w in range(n):
            start_step(w, 0, 0.0)

        now = 0.0
        while True:
            if push_net.dirty or pull_net.dirty:
                if not heap or heap[0][0] > now:
                    if push_net.dirty:
                        push_net.reallocate(now)
                    if pull_net.dirty:
                        pull_net.reallocate(now)
            if not heap:
                break
            now, _, kind, a, b = heappop(heap)
            if kind == PUSH_DONE:
                push_done(a, b, now)
            elif kind == PULL_DONE:
                pull_done(a, b, now)
            elif kind == PUSH_RELEASE:
                push_net.on_release(a, now)
            elif kind == PULL_RELEASE:
                pull_net.on_release(a, now)
            elif kind == PULL_WATCH:
                pull_net.on_watch_event(a, b, now)
            elif kind == STEP_END:
                w = a
                k = it[w]
                ends[w].append(now)
                if sync and k > 0:
                    # w posts its pull receives now. Where shard s has not yet posted its receives
                    # of step k (so w's pushes to s wait, unwritten), w's notice is the first thing
                    # on the connection: it arrives alpha later, ahead of those pushes.
                    nw, tw = notice_k[w], notice_t[w]
                    for s in range(shards):
                        if (posted_k[s] < k - 1 or posted_t[s] > now) and nw[s] < k:
                            nw[s] = k
                            tw[s] = now + alpha_s
                            early_notice[w][s] = k
                if k >= warmup:
                    t = tab[w]
                    step_compute[w].append(t[0] + t[1][L] + step_bwd[w])
                    step_blocked[w].append(blocked[w])
                if k + 1 == warmup:
                    past_warmup += 1
                    if past_warmup == n:
                        self.snapshots["start"] = snapshot(now, *state)
                if k + 1 < total:
                    start_step(w, k + 1, now)
                else:
                    finished += 1
                    if finished == 1:
                        self.snapshots["first_done"] = snapshot(now, *state)
        self.end_s = now
        self.snapshots["end"] = snapshot(now, *state)
        self.ends, self.step_compute, self.step_blocked = ends, step_compute, step_blocked

    def _snapshot(self, now: float, busy, cend, sfree, sbusy) -> tuple:
        """Busy compute per worker and per shard and bytes per link up to `now` (for utilization)."""
        compute = [b - max(0.0, e - now) for b, e in zip(busy, cend)]
        shard = [b - max(0.0, f - now) for b, f in zip(sbusy, sfree)]
        push = [self.push_net.bytes_carried(i, now) for i in range(len(self.push_net.cap))]
        pull = [self.pull_net.bytes_carried(i, now) for i in range(len(self.pull_net.cap))]
        return now, compute, shard, push, pull
