"""The three coarse-grained models: sync all-reduce, sync parameter server, async parameter server.

See the package docstring (`sgdscale.coarse`) for the phases of each model and
`sgdscale.coarse.heuristics` for the overlap formulas.
"""

from __future__ import annotations

import numpy as np

from sgdscale import bottleneck as words
from sgdscale.bucket_copies import buffer_broadcast_s, copy_back_suffix_s, ddp_copies, finalized_s
from sgdscale.cluster import Cluster
from sgdscale.coarse import heuristics as hz
from sgdscale.coarse.mva import solve_mva
from sgdscale.coarse.phases import (
    head_max_means,
    optimizer_mean_s,
    pre_barrier_max,
    pre_barrier_one,
    pre_barrier_samples,
    shard_bytes,
    worker_scales,
)
from sgdscale.comm.cost import CommModel
from sgdscale.comm.interference import compute_while_sending, interference_of, overlap_end_s, ps_compute_slowdown
from sgdscale.comm.streams import collectives_at_once, shared_schedule_s
from sgdscale.comm.topology import LEVEL_INTRA, LEVEL_NIC, Topology
from sgdscale.grouping import group_gradients
from sgdscale import message_cpu, placement
from sgdscale.message_cpu import (messages_per_shard, pull_receive_tail_s, receives_pulls_as_they_arrive,
                                  with_message_cpu)
from sgdscale.profile import Profile
from sgdscale.result import Breakdown, Outcome
from sgdscale.strategy import Strategy



def _variable(profile: Profile, variability: bool) -> bool:
    """Whether per-iteration compute times vary (a cause of stragglers), as the fine method decides."""
    return variability and pre_barrier_samples(profile) is not None


def _backward_exposed_s(profile: Profile, cluster: Cluster, variability: bool, groups, comm_s,
                        interference=None, copy_back_s=None, slots: int = 1) -> float:
    """The WFBP recurrence (see `heuristics`) with each group's E[max] over workers.

    Communication ends at max_g (E[max_w head_g,w] + sum_{h>=g} c_h), where head_g,w is worker w's
    time from step start until group g is ready; exposed = that end - E[max_w pre_w]. A straggler's
    delay before a group is ready is then counted once, not once in compute and again in
    communication. Without variability this is exactly `heuristics.backward_exposed_exact_s`. With an
    active `interference` each term is a two-body overlap (`comm.interference.overlap_end_s`) and the
    result also holds what the slowed backward adds. `copy_back_s`: DDP's copies back from each group
    on (`bucket_copies.copy_back_suffix_s`), done after backward and each after its group's collective.
    `slots` collectives at once share the link (`comm.streams`): the last still ends where one stream
    ends it, but which group ends last, and so which copies come after it, moves.
    """
    if not groups:
        return 0.0
    heads, pre = head_max_means(profile, cluster, variability, groups)  # pre: E[max_w pre_w], summed alike
    copies = np.zeros(len(groups)) if copy_back_s is None else np.asarray(copy_back_s)
    ends, end = [], float("-inf")
    for head, comm in zip(heads, comm_s):  # each group's collective ends (one stream, launch order)
        end = max(end, head) + comm
        ends.append(end)
    costs, ends = np.asarray(comm_s, dtype=float), np.asarray(ends)
    if slots > 1:
        ends = shared_schedule_s(np.asarray(heads, dtype=float), ends - costs, ends, costs, slots)[1]
    if interference is not None:
        # compute and communication slow each other while they overlap (comm.interference); the copies
        # after the last collective are those the schedule without interference leaves there
        end = overlap_end_s(heads, pre, comm_s, interference)
        tail = float(np.max(ends + copies)) - float(np.max(ends)) if slots > 1 else copies[-1]
        return max(end + tail, pre + copies[0]) - pre
    return max(0.0, float(finalized_s(pre, ends, copies)) - pre)


def _pull_receive_tail_s(profile: Profile, cluster: Cluster, strategy: Strategy, topology: Topology,
                         wire_s: float) -> float:
    """How long a worker still receives after its last pull arrived, its pulls spread over `wire_s`
    (`message_cpu.pull_receive_tail_s`); 0 where its pulls are charged to forward instead, its
    compute takes no CPU, or its messages cost none."""
    nic = topology.nic
    if not receives_pulls_as_they_arrive(profile, nic.worker_cpu_s_per_message, nic.worker_cpu_s_per_wakeup):
        return 0.0
    sizes = [float(g.bytes) for g in group_gradients(profile, strategy, topology, cluster.workers)]
    return pull_receive_tail_s(sizes, wire_s, nic.worker_cpu_s_per_message, nic.worker_cpu_s_per_wakeup)


def _step_samples(base: np.ndarray | float, extra_s: float, iterations: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(base, dtype=float) + extra_s, (iterations,)).copy()


# --------------------------------------------------------------------------- sync all-reduce

def solve_allreduce(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, *,
                    iterations: int, seed: int, variability: bool, heuristics: bool) -> Outcome:
    """step = E[max_i pre_i] + exposed all-reduce time + optimizer (slowest worker)."""
    n = cluster.workers
    scales = worker_scales(cluster)
    slow = float(scales.max())

    # The topology costs every collective (per level, slowest NIC pacing), as for the fine predictor.
    topology = Topology.of(cluster, comm, strategy)
    profile, copy_back_s_per_byte = ddp_copies(profile, strategy.grouping, topology.nic.copy_s_per_byte, n)
    pre_max = pre_barrier_max(profile, cluster, variability)  # with DDP's copies into buckets
    groups = group_gradients(profile, strategy, topology, n)
    sizes = [float(g.bytes) for g in groups]
    comm_s = [float(t) for t in topology.allreduce_times_s(sizes)]
    levels = topology.allreduce_busy_s(sizes)
    total_comm = float(sum(comm_s))
    if heuristics:
        exposed = _backward_exposed_s(profile, cluster, variability, groups, comm_s,
                                      interference_of(comm) if n > 1 else None,
                                      copy_back_suffix_s(sizes, copy_back_s_per_byte),
                                      collectives_at_once(profile, strategy.collectives_at_once) if n > 1 else 1)
    else:
        exposed = total_comm
    exposed += buffer_broadcast_s(profile, strategy.grouping, topology)  # DDP's, before every forward: overlaps nothing
    optimizer = slow * optimizer_mean_s(profile, variability)
    step_mean = pre_max.mean + exposed + optimizer

    if pre_max.values.size > 1:
        steps = pre_max.sample(iterations, np.random.default_rng(seed)) + exposed + optimizer
    else:
        steps = _step_samples(pre_max.values[0], exposed + optimizer, iterations)

    one = pre_barrier_one(profile, variability).mean
    compute = float(scales.mean()) * one + optimizer * float(scales.mean()) / slow
    wait = max(0.0, step_mean - compute - exposed)
    breakdown = Breakdown(compute_s=compute, exposed_comm_s=exposed, wait_s=wait)
    limited_by, bottleneck, utilization = words.describe_allreduce(
        workers=n, step_s=step_mean, breakdown=breakdown, levels=levels, topology=topology,
        grouping=strategy.grouping, sizes_bytes=sizes, comm_s=total_comm, compute_scale=cluster.compute_scale,
        variable=_variable(profile, variability))
    return Outcome(
        iteration_s=steps,
        throughput=n * profile.batch_size / step_mean,
        breakdown=breakdown,
        bottleneck=bottleneck,
        utilization=utilization,
        levels=levels,
        limited_by=limited_by,
    )


# --------------------------------------------------------------------------- parameter server

def _pushes_slowed(groups, scale: float, backward_s: float, worker_beta: float,
                   compute_slowdown: float) -> tuple[float, np.ndarray]:
    """What interference does to a mean worker's backward and pushes (`compute_while_sending`, as
    the fine method): (how much longer its backward takes, per group how much later its send ends
    on the worker's own uplink than without interference: its hand-over comes later). The models
    shift each group's ready time by the latter."""
    offsets = [scale * g.ready_s for g in groups]
    sends = [g.bytes * worker_beta for g in groups]
    order = sorted(range(len(groups)), key=offsets.__getitem__)
    compute = scale * backward_s
    _, plain, _ = compute_while_sending(0.0, offsets, order, sends, compute, 0.0, 1.0)
    _, slowed, end = compute_while_sending(0.0, offsets, order, sends, compute, 0.0, compute_slowdown)
    return end - compute, np.asarray(slowed) - np.asarray(plain)


class _ServerCosts:
    """Per-shard bytes and per-byte costs shared by the sync and async PS models."""

    def __init__(self, profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel | Topology) -> None:
        self.topology = topology = Topology.of(cluster, comm, strategy)
        self.shards = topology.ps_shards
        self.bytes = shard_bytes(profile, strategy, self.shards)
        self.total_bytes = float(profile.gradient_bytes)
        self.fraction = self.bytes / self.total_bytes if self.total_bytes > 0 else np.zeros(self.shards)
        self.server_beta = topology.nic_beta_s_per_byte(cluster.server_bandwidth_bps)
        self.worker_betas = np.array([topology.nic_beta_s_per_byte(cluster.worker_bandwidth_bps(i))
                                      for i in range(cluster.workers)])
        self.alpha = topology.alpha_s if self.total_bytes > 0 else 0.0
        self.gamma = topology.gamma_s_per_byte
        self.update_s = profile.step.optimizer_s * self.fraction  # one shard's share of one update
        # what moving a worker's bytes and messages in and out costs the shard's CPU budget (async: once each way)
        self.server_cpu_s = 2.0 * self.bytes * self.topology.nic.server_cpu_s_per_byte
        if topology.nic.server_cpu_s_per_message > 0:
            self.server_cpu_s = self.server_cpu_s + 2.0 * topology.nic.server_cpu_s_per_message * messages_per_shard(
                profile, strategy, topology, self.shards, cluster.workers)

    def async_nic_demands(self) -> tuple[np.ndarray, float]:
        """(per shard: seconds of its NIC per worker visit, one direction; a worker's mean own-NIC
        seconds per step, one direction). Dedicated: b_s on the server NIC, B on the worker's NIC,
        which its node's G devices share (G x). Colocated: only the (N - G_s)/N of visits from
        other nodes cross shard s's NIC, and a worker's NIC carries its node's G devices' bytes
        to the other nodes' shards."""
        t = self.topology
        n, cluster = t.workers, t.cluster
        share = np.array([t.gpus_on(cluster.node_of(w)) for w in range(n)], dtype=float)
        if t.ps_placement == "dedicated":
            return self.bytes * self.server_beta, float((self.worker_betas * share).mean()) * self.total_bytes
        remote = np.array([(n - t.gpus_on(s)) / n for s in range(self.shards)])
        betas = np.array([t.nic_beta_s_per_byte(cluster.node_bandwidth_bps(s)) for s in range(self.shards)])
        own = np.array([self.total_bytes - self.bytes[cluster.node_of(w)] for w in range(n)])
        return self.bytes * betas * remote, float((self.worker_betas * share * own).mean())


# A variant for sync PS with several shards (off: held out on set 71, not kept; below): each shard
# its own pipeline. A shard's NIC receives only the messages placed on it (round-robin by tensor),
# as backward makes them ready, and replies to them once they are applied; the shards work side by
# side. The one pipeline over all messages, each costing its bytes' share of the busiest shard's
# time, spreads that shard's load over the whole backward: where the busiest shard holds a gradient
# that is ready last (bert's 8.4 MB embedding with three shards: 8.5 of 21.4 MB on shard 0) its
# pushes and replies hid behind backward in the model and not in the runs (held-out sets 28 and 70:
# coarse +18.3% and +21.0%). Every shard's pipeline runs `heuristics.sync_ps_end_s` on its own
# messages at the slower of its NIC's rate and the worker's link, with the one-shard share of late
# workers (`heuristics.late_share`: a worker is late at a shard when its notice reaches that shard
# after the shard posted its receives; S / (S + 1) stood for "late at any of S shards" in the one
# pipeline that stood for them all: with it densenet121's three shards, whose round-robin placement
# puts 31.5 of 31.9 MB on one, came out -14.0% on set 68 where one shard's model has 1/2); the
# worker's own link, which carries every shard's messages one after another, bounds the step too
# (its last push, then its whole pull). A tuning look on the kept runs of sets 27, 28, 64, 68 and 70
# (`benchmarks/coarse_shard_pipelines.py`): 15 cases, 8.0% -> 3.3% in the median from the measured
# network files. Held out on set 71 and **not kept** (its rule: a lower median from the measured
# files): 9.8% against the one pipeline's 5.0% (every case too slow per shard, -8% to -15%, where
# the measured files made fine 8-19% too slow too); bert with three shards was again +21.4% with the
# one pipeline and -15.2% per shard. So the one pipeline stands; this stays for
# `benchmarks/coarse_shard_pipelines.py`. One shard: the single pipeline either way.
SHARD_PIPELINES = False


# How many shards the share of late workers counts (`heuristics.late_share`, module doc "Sync PS pull
# tail"): "count", every shard (before); "bytes", the worker's bytes over the busiest shard's (S where
# the placement balances the shards, about 1 where one shard holds nearly everything, as round-robin
# over three shards does for most CNNs). A worker's notice reaches the busiest shard behind all the
# pushes its link sends first, to every shard, so what counts is how much of its link's load goes
# elsewhere. Tuning look (benchmarks/coarse_late_share_shards.py: kept sync-PS runs with several
# shards of sets 27-76, measured files): 27 cases 8.0% -> 5.7% in the median; against fine on
# built-ins with two and three shards 9.6% -> 2.8%. Held out on set 77 and kept (3.1% / 8.7% against
# 7.6% / 21.5% counting every shard, on the same runs).
LATE_SHARE_SHARDS = "bytes"


def _late_share_shards(costs: _ServerCosts) -> float:
    """The shard count `heuristics.late_share` takes (`LATE_SHARE_SHARDS`)."""
    if LATE_SHARE_SHARDS == "count":
        return float(costs.shards)
    if LATE_SHARE_SHARDS != "bytes":
        raise ValueError(f"unknown LATE_SHARE_SHARDS {LATE_SHARE_SHARDS!r}")
    busiest = float(costs.bytes.max(initial=0.0))
    return costs.total_bytes / busiest if busiest > 0 else float(costs.shards)


def _shard_pipeline_late_share(workers: int, shards: int) -> float:
    """The share of late workers in one shard's own pipeline: one shard's (comment above); `shards`
    is there for `benchmarks/coarse_shard_pipelines.py`, which compares S / (S + 1)."""
    return hz.late_share(workers, 1)


def _sync_ps_end_by_shard_s(profile: Profile, strategy: Strategy, groups, ready: list[float],
                            costs: _ServerCosts, shard_nic_s: np.ndarray, worker_link_s: float,
                            update_per_shard: np.ndarray, workers: int) -> float:
    """When a sync PS step's last reply has left, with every shard its own pipeline (`SHARD_PIPELINES`)."""
    tensor_shard = placement.place_tensors([t.bytes for t in profile.tensors], costs.shards, strategy.placement)
    tensors = profile.tensors
    on_shard = np.zeros((len(groups), costs.shards))  # bytes of group g placed on shard s
    for g, group in enumerate(groups):
        for t in group.tensors:
            on_shard[g, tensor_shard[t]] += tensors[t].bytes
    worker_per_byte = worker_link_s / costs.total_bytes
    late = _shard_pipeline_late_share(workers, costs.shards)
    end = 0.0
    for s in range(costs.shards):
        mine = [g for g in range(len(groups)) if on_shard[g, s] > 0]
        if not mine or costs.bytes[s] <= 0:
            continue
        sizes = [float(on_shard[g, s]) for g in mine]
        shard_per_byte = float(shard_nic_s[s]) / costs.bytes[s]
        per_byte = max(shard_per_byte, worker_per_byte)
        end = max(end, hz.sync_ps_end_s([ready[g] for g in mine], [per_byte * b for b in sizes],
                                         hz.split_by_bytes(float(update_per_shard[s]), sizes),
                                         hz.split_by_bytes(float(shard_nic_s[s]), sizes), late, worker_link_s,
                                         with_lead=shard_per_byte >= worker_per_byte))
    # the worker's own link: every push in turn (WFBP), then its whole pull
    own = hz.split_by_bytes(worker_link_s, [float(g.bytes) for g in groups])
    pushed = hz.flow_shop_s(ready, [own])[0][-1] if groups else 0.0
    return max(end, pushed + worker_link_s)


def solve_ps_sync(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, *,
                  iterations: int, seed: int, variability: bool, heuristics: bool) -> Outcome:
    """step = E[max_i pre_i] + push + server update + pull (each phase a barrier; with heuristics,
    pushes and updates a pipeline that starts during backward, and the replies in the order the shard
    applies messages, a late worker's after its own last push, the early workers a lead ahead into
    the next step: `heuristics.sync_ps_end_s`).

    push: every worker sends all its gradients; the phase lasts as long as the busiest NIC: a shard's
    down-link receiving N * bytes_on_shard, or a worker's up-link sending all bytes. Each shard sums
    the N gradients (gamma per byte) and updates once (its share of the profiled optimizer time).
    pull mirrors push on the up-links. One latency per phase (messages are pipelined).
    """
    n = cluster.workers
    scales = worker_scales(cluster)
    nic = Topology.of(cluster, comm, strategy).nic
    profile = with_message_cpu(profile, nic.worker_cpu_s_per_message, nic.worker_cpu_s_per_wakeup,
                               pulls=not message_cpu.PULLS_RECEIVED_AS_THEY_ARRIVE)
    costs = _ServerCosts(profile, cluster, strategy, comm)
    pre_max = pre_barrier_max(profile, cluster, variability)

    # per shard, per direction; the busiest worker-side NIC; the busiest intra-node link
    shard_nic_s, worker_nic_s, intra_s = costs.topology.ps_transfer_s(costs.bytes, costs.total_bytes)
    transfer = max(float(shard_nic_s.max(initial=0.0)), worker_nic_s, intra_s)
    push = costs.alpha + transfer if costs.total_bytes > 0 else 0.0
    pull = push
    # the worker's CPU receiving its pulls, beyond what their spacing on the wire hides
    receive_tail = _pull_receive_tail_s(profile, cluster, strategy, costs.topology, transfer)
    # Each shard sums N gradients (gamma), updates once, and its CPU moves every byte of the N pushes
    # and N replies (server_cpu_s is one worker's push and pull): as the fine plan charges it.
    update_per_shard = costs.update_s + (n - 1) * costs.gamma * costs.bytes + n * costs.server_cpu_s
    update = float(update_per_shard.max(initial=0.0))

    slowed_s = 0.0  # what interference adds to the slowest worker's backward
    if heuristics and costs.total_bytes > 0:
        # Pushes and updates flow as a pipeline that starts during backward; the replies follow the
        # order in which messages are applied on the shard, a late worker's after its own last push
        # (heuristics, "Sync PS pull tail"), and a late worker's own links carry its whole pull.
        groups = group_gradients(profile, strategy, costs.topology, n)
        sizes = [float(g.bytes) for g in groups]
        ready, _ = head_max_means(profile, cluster, variability, groups)
        slowdown = ps_compute_slowdown(comm)
        if slowdown is not None:  # backward slowed while the worker sends its pushes (comm.interference)
            slowed_s, later = _pushes_slowed(groups, float(scales.max()), profile.backward_s,
                                             float(costs.worker_betas.max()), slowdown)
            ready = list(np.asarray(ready) + later)
        server_pull = hz.split_by_bytes(float(shard_nic_s.max(initial=0.0)), sizes)
        # the early workers' lead shortens the step only where the shard's NIC binds, not a worker's own link
        server_binds = float(shard_nic_s.max(initial=0.0)) >= max(worker_nic_s, intra_s)
        if SHARD_PIPELINES and costs.shards > 1:
            end = _sync_ps_end_by_shard_s(profile, strategy, groups, ready, costs, shard_nic_s,
                                          max(worker_nic_s, intra_s), update_per_shard, n)
        else:
            end = hz.sync_ps_end_s(ready, hz.split_by_bytes(transfer, sizes), hz.split_by_bytes(update, sizes),
                                   server_pull, hz.late_share(n, _late_share_shards(costs)), max(worker_nic_s, intra_s),
                                   with_lead=server_binds)
        extra = max(0.0, end + 2 * costs.alpha - (pre_max.mean + slowed_s))
        serial = push + pull + update
        update_part = extra * update / serial if serial > 0 else 0.0
        exposed = extra - update_part + receive_tail
        extra += receive_tail
    else:
        exposed, update_part = push + pull + receive_tail, update
        extra = exposed + update_part
    extra += slowed_s  # the slowed backward is compute: it comes before the rest in every step
    step_mean = pre_max.mean + extra

    if pre_max.values.size > 1:
        steps = pre_max.sample(iterations, np.random.default_rng(seed)) + extra
    else:
        steps = _step_samples(pre_max.values[0], extra, iterations)

    compute = float(scales.mean()) * pre_barrier_one(profile, variability).mean + slowed_s
    wait = max(0.0, step_mean - compute - exposed)
    utilization = {words.COMPUTE: compute / step_mean, words.WORKER_NIC_OUT: worker_nic_s / step_mean,
                   words.WORKER_NIC_IN: worker_nic_s / step_mean}
    for s in range(costs.shards):
        utilization[words.server_nic_in(s)] = shard_nic_s[s] / step_mean
        utilization[words.server_update(s)] = update_per_shard[s] / step_mean
        utilization[words.server_nic_out(s)] = shard_nic_s[s] / step_mean
    # busy seconds per step of each level's busiest link, one direction (push and pull mirror)
    levels = {LEVEL_NIC: worker_nic_s, words.LEVEL_SERVER_NIC: float(shard_nic_s.max(initial=0.0)),
              words.LEVEL_SERVER_UPDATE: update}
    if intra_s > 0:
        levels[LEVEL_INTRA] = intra_s
    breakdown = Breakdown(compute_s=compute, exposed_comm_s=exposed, wait_s=wait)
    limited_by, bottleneck = words.describe(words.Evidence(
        workers=n, sync=True, step_s=step_mean, breakdown=breakdown,
        utilization={k: min(float(v), 1.0) for k, v in utilization.items()}, levels=levels,
        communication=words.ps_words(costs.total_bytes), compute_scale=cluster.compute_scale,
        variable=_variable(profile, variability)))
    return Outcome(
        iteration_s=steps,
        throughput=n * profile.batch_size / step_mean,
        breakdown=breakdown,
        bottleneck=bottleneck,
        utilization=utilization,
        levels=levels,
        limited_by=limited_by,
    )


# How an async shard serves the workers it finds at each station, as the MVA's service variability
# (squared coefficient of variation; 1: the plain MVA, which a processor-sharing station obeys whatever
# its service times; 0: fixed service, first come first served). Pushes into a shard from several
# nodes share its link equally (measured: 0.99-1.00, `sgdscale.comm.sharing`); its updates interleave
# the workers' threads tensor by tensor under the shard's lock (`sgdscale.runtime.ps`): both share.
# Its replies leave one node, where a flow that starts while another is leaving gets 0.22 of the link
# (NEWCOMER_SHARE_WEIGHT): they take turns, and a reply of fixed bytes at a fixed rate takes a fixed
# time, so an arriving worker waits for half of the reply in service, not all of it. Plain MVA let
# the pulls meet as if at random: on held-out sets 40-64 coarse was too slow by 7.1% in the mean
# (median error 7.3%), 2.4% with this (4.2%), `benchmarks/coarse_async_service.py` (a tuning look);
# held out on set 66 (9.8% against the plain MVA's 15.1%; two workers, who take turns at every
# station, stay 18-21% too slow) and set 67 (1.1% against 7.3%, 3-5 workers).
SERVICE_CV2 = {"push": 1.0, "update": 1.0, "pull": 0.0}

# A worker's pushes go to every shard at once (the runtime sends each tensor to its shard as backward
# makes it ready, round-robin over the shards, and the shards reply as they apply them), so with S
# shards a worker waits at all of them together, not at one after another: each kind of station
# (pushes in, updates, replies out) is one parallel visit whose time is its busiest shard's, and the
# rest of the worker's own transfer is its own NIC's (the delay station). Visiting the shards in
# series, as the MVA does with one station per shard, added the queueing at every shard: every async
# replay of held-out sets 27, 28, 64 and 68 (and set 64's rerun) whose shards split the bytes evenly
# came out too slow (2-25%, eight of ten by 7.6% or more). In parallel their 15 kept async cases go
# from 19.4% to 6.1% in the median (mean -9.6% -> -3.6%; `benchmarks/coarse_parallel_shards.py`, a
# tuning look); held out on set 69 (two and three shards: 5.1% against 10.6% in series, max 12.0%
# against 23.2%; kept) and tested again on set 70 (7.9% against 15.5%). One shard: unchanged.
SHARDS_IN_PARALLEL = True


def solve_ps_async(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, *,
                   iterations: int, seed: int, variability: bool, heuristics: bool) -> Outcome:
    """Closed queueing network solved by MVA: workers are customers, server resources are queues.

    Stations (demand per worker cycle), named in the shared vocabulary (sgdscale.bottleneck): per
    shard s, `server s NIC in` (push) b_s * beta_server; `server s update` optimizer_s * b_s / B;
    `server s NIC out` (pull) b_s * beta_server. With several shards a worker is at all of them at
    once (`SHARDS_IN_PARALLEL`), so each kind is one station, its busiest shard's; the other shards'
    utilizations follow from the throughput. The delay station (never shared) holds the worker's
    compute (data + copy + forward + backward, mean over workers' speed factors), two message
    latencies, and the part of its own NIC transfer that the server stations do not already account
    for: max(0, B * beta_worker - max_s b_s * beta_server) per direction (a push streams through the
    worker's up-link and the shards' down-links at once). Workers are one class: per-worker speed
    factors and slow links enter as means. The reply stations serve in turn in a fixed time
    (`SERVICE_CV2`: the MVA's residual correction).
    """
    n = cluster.workers
    scales = worker_scales(cluster)
    nic = Topology.of(cluster, comm, strategy).nic
    profile = with_message_cpu(profile, nic.worker_cpu_s_per_message, nic.worker_cpu_s_per_wakeup,
                               pulls=not message_cpu.PULLS_RECEIVED_AS_THEY_ARRIVE)
    costs = _ServerCosts(profile, cluster, strategy, comm)
    one = pre_barrier_one(profile, variability)
    compute = float(scales.mean()) * one.mean
    # the pipeline heuristic's message groups (heuristics only), and what interference does to them
    groups = group_gradients(profile, strategy, costs.topology, n) if heuristics and costs.total_bytes > 0 else []
    slowdown = ps_compute_slowdown(comm) if groups else None
    later, slowed_s = np.zeros(len(groups)), 0.0
    if slowdown is not None:  # backward slowed while the worker sends its pushes (comm.interference)
        slowed_s, later = _pushes_slowed(groups, float(scales.mean()), profile.backward_s,
                                         float(costs.worker_betas.mean()), slowdown)
        compute += slowed_s

    nic, worker_nic = costs.async_nic_demands()
    per_shard = {"push": (words.server_nic_in, nic),  # kind -> (its station's name for shard s, demand per shard)
                 "update": (words.server_update, costs.update_s + costs.server_cpu_s),
                 "pull": (words.server_nic_out, nic)}
    parallel = SHARDS_IN_PARALLEL and costs.shards > 1
    names, demands, kinds = [], [], []
    for s in range(costs.shards):
        for kind, (name, demand) in per_shard.items():
            if not parallel or s == int(np.argmax(demand)):  # in parallel: the busiest shard stands for all
                names.append(name(s))
                demands.append(float(demand[s]))
                kinds.append(kind)
    demands_arr = np.array(demands)
    service_cv2 = np.array([SERVICE_CV2[kind] for kind in kinds])
    stage_masks = [np.array([k == kind for k in kinds]) for kind in ("push", "update", "pull")]
    server_wire = float(nic.max() if parallel else nic.sum())  # a worker's bytes through the shards' NICs, one way
    own_excess = max(0.0, worker_nic - server_wire)  # per direction
    # the worker's CPU receiving its pulls, beyond what their spacing on the wire hides
    receive_tail = _pull_receive_tail_s(profile, cluster, strategy, costs.topology, max(worker_nic, server_wire))
    think0 = compute + 2 * (costs.alpha + own_excess) + receive_tail

    def solve(think: float):
        return solve_mva(demands_arr, think, n, service_cv2)

    hidden = 0.0
    if heuristics and costs.total_bytes > 0:
        sizes = [float(g.bytes) for g in groups]
        scale = float(scales.mean())
        head = scale * (profile.step.data_s + profile.step.h2d_s + profile.forward_s)
        ready = [head + scale * g.ready_s + delay for g, delay in zip(groups, later)]
        head_first, head_last = ready[0], ready[-1]
        offsets = [r - ready[0] for r in ready]

        def hidden_for(think: float) -> float:
            """Serial cycle minus the pipelined one, for the queueing seen at this think time."""
            result, _ = solve(think)
            push, update, pull = (float(result.response_times[m].sum()) for m in stage_masks)
            stages = [hz.split_by_bytes(t, sizes) for t in (push + own_excess, update)]
            pushed = hz.pipeline_end_s(head_first, head_last, stages, offsets)  # the pull follows (gloo)
            end = max(compute, pushed + pull + own_excess + 2 * costs.alpha + receive_tail)
            return max(0.0, think0 + float(result.response_times.sum()) - end)

        # hidden(h) - h is strictly decreasing in h (queueing grows by less than the think time
        # shrinks), so bisection finds the unique fixed point.
        low, high = 0.0, min(think0, scale * (profile.forward_s + profile.backward_s) + slowed_s)
        if hidden_for(think0 - high) >= high:
            hidden = high
        else:
            for _ in range(100):
                mid = 0.5 * (low + high)
                if hidden_for(think0 - mid) > mid:
                    low = mid
                else:
                    high = mid
                if high - low <= 1e-13 * max(think0, 1e-30):
                    break
            hidden = 0.5 * (low + high)
    result, method = solve(think0 - hidden)
    x = result.throughput  # worker steps per second, whole cluster
    cycle = n / x
    stations = dict(zip(names, (float(u) for u in result.utilizations)))  # the MVA's own stations
    util = ({name(s): float(x * demand[s]) for s in range(costs.shards) for name, demand in per_shard.values()}
            if parallel else stations)  # every shard's, in shard order

    if variability and pre_barrier_samples(profile) is not None:
        rng = np.random.default_rng(seed)
        draws = one.sample(iterations, rng) * scales[rng.integers(0, n, iterations)]
        steps = draws + (cycle - compute + slowed_s)
    else:
        steps = _step_samples(cycle, 0.0, iterations)

    # Split the non-compute part of the cycle into transfer (own NIC, latencies, NIC service) and
    # waiting (queueing, server update) in proportion to their no-overlap sizes.
    nic = np.array(["NIC" in k for k in names], dtype=bool)
    transfer0 = 2 * (costs.alpha + own_excess) + float(demands_arr[nic].sum())
    wait0 = float(result.response_times.sum()) - float(demands_arr[nic].sum())
    extra = max(0.0, cycle - compute)
    exposed = extra * transfer0 / (transfer0 + wait0) if transfer0 + wait0 > 0 else 0.0
    wait = extra - exposed
    utilization = {words.COMPUTE: compute / cycle, words.WORKER_NIC_OUT: worker_nic / cycle,
                   words.WORKER_NIC_IN: worker_nic / cycle, **util}
    busy = {kind: max((u * cycle for name, u in stations.items() if kinds[names.index(name)] == kind), default=0.0)
            for kind in ("push", "update", "pull")}
    levels = {LEVEL_NIC: worker_nic, words.LEVEL_SERVER_NIC: max(busy["push"], busy["pull"]),
              words.LEVEL_SERVER_UPDATE: busy["update"]}
    breakdown = Breakdown(compute_s=compute, exposed_comm_s=exposed, wait_s=wait)
    limited_by, bottleneck = words.describe(words.Evidence(
        workers=n, sync=False, step_s=cycle, breakdown=breakdown,
        utilization={k: min(float(v), 1.0) for k, v in utilization.items()}, levels=levels,
        communication=words.ps_words(costs.total_bytes), compute_scale=cluster.compute_scale,
        variable=_variable(profile, variability), note="" if method == "exact" else "(approximate MVA)"))
    return Outcome(
        iteration_s=steps,
        throughput=x * profile.batch_size,
        breakdown=breakdown,
        bottleneck=bottleneck,
        utilization=utilization,
        levels=levels,
        limited_by=limited_by,
    )
