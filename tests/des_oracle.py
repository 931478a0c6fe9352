"""Test oracles: synchronous all-reduce run event by event, the DAG `sgdscale.fine.allreduce`
evaluates in closed form.

One communication stream; group g's collective starts when every worker produced it and the
previous collective is done, and lasts the topology's all-reduce time; a worker's optimizer follows
its backward and the last collective. `simulate_des` runs this for all-reduce and the library's
parameter-server simulation otherwise, so the tests can ask one event-driven simulator for every
strategy and compare it with the fast paths.
"""

from __future__ import annotations

import heapq

import numpy as np

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.topology import Topology
from sgdscale.fine import check_step_counts
from sgdscale.bottleneck import describe_allreduce
from sgdscale.fine.allreduce import collective_times_s
from sgdscale.fine.events import EventQueue, Kind
from sgdscale.fine.ps import simulate_ps
from sgdscale.grouping import group_gradients, ready_offsets_s
from sgdscale.profile import Profile
from sgdscale.result import Breakdown, Outcome
from sgdscale.strategy import Strategy
from sgdscale.variability import ComputeSampler

_GROUP_READY, _COLL_END, _STEP_END = int(Kind.GROUP_READY), int(Kind.COLLECTIVE_END), int(Kind.STEP_END)


def simulate_des(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, *, iterations: int = 100,
                 warmup: int = 10, seed: int = 0, variability: bool = True, timeline: bool = False) -> Outcome:
    """Every strategy event by event: all-reduce here, parameter servers in `sgdscale.fine.ps`."""
    check_step_counts(iterations, warmup)
    if strategy.kind == "allreduce":
        return _simulate_allreduce(profile, cluster, strategy, comm, iterations, warmup, seed, variability, timeline)
    return simulate_ps(profile, cluster, strategy, comm, iterations=iterations, warmup=warmup, seed=seed,
                       variability=variability, timeline=timeline)


def _simulate_allreduce(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, iterations: int,
                        warmup: int, seed: int, variability: bool, timeline: bool) -> Outcome:
    n = cluster.workers
    topology = Topology.of(cluster, comm, strategy)
    groups = group_gradients(profile, strategy, topology, n)
    cost_arr, levels = collective_times_s(groups, topology)
    costs = cost_arr.tolist()
    G = len(groups)
    sampler = ComputeSampler(profile, cluster, seed=seed, variability=variability)
    total = warmup + iterations
    rows = [sampler.draw_rows().tolist() if sampler.variable else [0] * n for _ in range(total)]
    tb = sampler.backward_table_s
    offsets = ready_offsets_s(tb, [g.ready_layer for g in groups], [g.ready_fraction for g in groups]).tolist()
    pre_t = (sampler.data_table_s + sampler.h2d_table_s).tolist()
    fwd_t = sampler.forward_table_s.sum(axis=1).tolist()
    bwd_t = tb.sum(axis=1).tolist()
    opt_t = sampler.optimizer_table_s.tolist()
    scale = [float(x) for x in sampler.scale]

    q = EventQueue()
    heap, seq = q.heap, q.seq
    it = [0] * n
    bwd_end = [0.0] * n
    opt = [0.0] * n
    comp = [0.0] * n
    ready_count = [0] * G
    launched = 0  # next group to launch on the stream
    stream_busy = False
    comm_end = 0.0
    step_end_max = [0.0] * total
    done_count = [0] * total
    compute_mean = [0.0] * total
    exposed = [0.0] * total

    def start(w: int, k: int, now: float) -> None:
        it[w] = k
        r = rows[k][w]
        sc = scale[w]
        t_b0 = now + (pre_t[r] + fwd_t[r]) * sc
        bwd_end[w] = t_b0 + bwd_t[r] * sc
        opt[w] = opt_t[r] * sc
        comp[w] = (pre_t[r] + fwd_t[r] + bwd_t[r] + opt_t[r]) * sc
        if G:
            off = offsets[r]
            for g in range(G):
                heapq.heappush(heap, (t_b0 + off[g] * sc, next(seq), _GROUP_READY, w, g))
        else:
            heapq.heappush(heap, (bwd_end[w] + opt[w], next(seq), _STEP_END, w, 0))

    for w in range(n):
        start(w, 0, 0.0)
    now = 0.0
    while heap:
        now, _, kind, a, b = heapq.heappop(heap)
        if kind == _GROUP_READY:
            ready_count[b] += 1
            if ready_count[b] == n and not stream_busy and launched == b:
                stream_busy = True
                heapq.heappush(heap, (now + costs[b], next(seq), _COLL_END, b, 0))
        elif kind == _COLL_END:
            g = a
            ready_count[g] = 0
            launched = g + 1
            stream_busy = False
            if launched < G:
                if ready_count[launched] == n:
                    stream_busy = True
                    heapq.heappush(heap, (now + costs[launched], next(seq), _COLL_END, launched, 0))
            else:
                launched = 0
                comm_end = now
                exposed[it[0]] = max(comm_end - max(bwd_end), 0.0)
                for w in range(n):
                    heapq.heappush(heap, (max(bwd_end[w], now) + opt[w], next(seq), _STEP_END, w, 0))
        elif kind == _STEP_END:
            w = a
            k = it[w]
            if now > step_end_max[k]:
                step_end_max[k] = now
            done_count[k] += 1
            if done_count[k] == 1:
                compute_mean[k] = 0.0
            compute_mean[k] += comp[w] / n
            if k + 1 < total:
                start(w, k + 1, now)
    prev = [0.0] + step_end_max[:-1]
    steps = np.array([step_end_max[k] - prev[k] for k in range(warmup, total)])
    step_mean = float(steps.mean())
    comp_m = float(np.mean(compute_mean[warmup:]))
    exp_m = float(np.mean(exposed[warmup:]))
    breakdown = Breakdown(compute_s=comp_m, exposed_comm_s=exp_m, wait_s=max(step_mean - comp_m - exp_m, 0.0))
    limited_by, bottleneck, util = describe_allreduce(
        workers=n, step_s=step_mean, breakdown=breakdown, levels=levels, topology=topology,
        grouping=strategy.grouping, sizes_bytes=[g.bytes for g in groups], comm_s=float(sum(costs)),
        compute_scale=cluster.compute_scale, variable=sampler.variable)
    return Outcome(
        iteration_s=steps,
        throughput=n * profile.batch_size / step_mean if step_mean > 0 else float("inf"),
        breakdown=breakdown,
        bottleneck=bottleneck,
        utilization=util,
        timeline=[] if timeline else None,
        levels=levels,
        limited_by=limited_by,
    )
