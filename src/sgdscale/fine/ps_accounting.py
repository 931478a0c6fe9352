"""What a parameter-server simulation measured: throughput, breakdown, utilization, bottleneck.

Throughput: the sum over workers of batch * measured steps / (its last step end - its warm-up end).

Breakdown (mean per worker step): compute_s = the worker's busy compute time; blocked = step -
compute is time its forward waited for parameters; exposed_comm_s = the part of that the worker
would see alone (`reference_blocked`: latency, transfer and update not hidden
behind compute), per step min(blocked, that); wait_s = the rest: queueing behind other workers at
server NICs and shards, and in sync PS waiting for the slowest worker's gradients (stragglers).

Utilization is measured over the window in which every worker is past its warm-up and none has
finished: worker compute (mean), each shard's update work, each server NIC (bytes carried /
capacity), and the busiest worker NIC out/in, under the names both methods use; the limiting
resource and its sentence come from the shared describer (`sgdscale.bottleneck`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sgdscale import bottleneck as words
from sgdscale.cluster import Cluster
from sgdscale.comm.topology import LEVEL_NIC, Topology
from sgdscale.profile import Profile
from sgdscale.result import Breakdown, Outcome
from sgdscale.strategy import Strategy
from sgdscale.variability import ComputeSampler

if TYPE_CHECKING:
    from sgdscale.fine.dag import PsPlan
    from sgdscale.fine.ps import PsRun


def utilization(run: PsRun) -> dict[str, float]:
    """Busy fractions over the window in which every worker is past its warm-up and none has finished."""
    start = run.snapshots.get("start")
    stop = run.snapshots.get("first_done")
    if start is None or stop is None or stop[0] <= start[0]:
        start, stop = (0.0, [0.0] * run.n, [0.0] * run.plan.shards, [0.0] * len(run.push_net.cap),
                       [0.0] * len(run.pull_net.cap)), run.snapshots["end"]
    span = stop[0] - start[0]
    if span <= 0:
        return {}
    n, shards = run.n, run.plan.shards
    d = [[(b - a) for a, b in zip(x, y)] for x, y in zip(start[1:], stop[1:])]
    compute, shard, push, pull = d
    links = run.links
    pcap, qcap = links.push_caps_Bps, links.pull_caps_Bps
    out = {words.COMPUTE: float(np.mean(compute)) / span}
    for s in range(shards):
        up, down = links.server_up[s], links.server_down[s]
        out[words.server_update(s)] = shard[s] / span
        out[words.server_nic_out(s)] = pull[up] / (qcap[up] * span)
        out[words.server_nic_in(s)] = push[down] / (pcap[down] * span)
    # A NIC shared by a node's devices counts once per device here; its utilization is the node's.
    up_util = [push[links.worker_up[w]] / (pcap[links.worker_up[w]] * span) for w in range(n)]
    down_util = [pull[links.worker_down[w]] / (qcap[links.worker_down[w]] * span) for w in range(n)]
    out[words.WORKER_NIC_OUT] = max(up_util, default=0.0)  # the busiest worker's, as both methods report
    out[words.WORKER_NIC_IN] = max(down_util, default=0.0)
    run.worker_nic = [(w, up_util[w], down_util[w]) for w in range(n)]
    return {k: min(v, 1.0) for k, v in out.items()}


def outcome(run: PsRun, reference: list[float], strategy: Strategy) -> Outcome:
    """The run's `Outcome`; `reference` is each worker's blocked time alone (`reference_blocked`)."""
    n, warmup = run.n, run.warmup
    batch = run.profile.batch_size
    steps, compute, exposed, wait = [], [], [], []
    throughput = 0.0
    for w in range(n):
        e = run.ends[w]
        starts = [0.0] + e[:-1]
        measured = [e[k] - starts[k] for k in range(warmup, len(e))]
        steps.extend(measured)
        window = e[-1] - (e[warmup - 1] if warmup > 0 else 0.0)
        throughput += batch * len(measured) / window if window > 0 else float("inf")
        for c, blk in zip(run.step_compute[w], run.step_blocked[w]):
            x = min(blk, reference[w])
            compute.append(c)
            exposed.append(x)
            wait.append(blk - x)
    breakdown = Breakdown(compute_s=float(np.mean(compute)), exposed_comm_s=float(np.mean(exposed)),
                          wait_s=float(np.mean(wait)))
    util = utilization(run)
    step_mean = float(np.mean(steps))
    limited_by, bottleneck = _describe(run, util, breakdown, step_mean)
    return Outcome(
        iteration_s=np.asarray(steps, dtype=float),
        throughput=float(throughput),
        breakdown=breakdown,
        bottleneck=bottleneck,
        utilization=util,
        timeline=run.trace,
        levels=_levels(run, util, step_mean),
        limited_by=limited_by,
    )


def _levels(run: PsRun, util: dict[str, float], step_s: float) -> dict[str, float]:
    """Busy seconds per step of each level's busiest link or resource (one direction)."""
    nic = max((max(up, down) for _, up, down in getattr(run, "worker_nic", [])), default=0.0)
    server_nic = max((v for k, v in util.items() if k.startswith("server ") and "NIC" in k), default=0.0)
    update = max((v for k, v in util.items() if k.endswith(" update")), default=0.0)
    return {LEVEL_NIC: nic * step_s, words.LEVEL_SERVER_NIC: server_nic * step_s,
            words.LEVEL_SERVER_UPDATE: update * step_s}


def _describe(run: PsRun, util: dict[str, float], b: Breakdown, step_s: float) -> tuple[str, str]:
    """(limited_by, sentence) from the shared describer (sgdscale.bottleneck)."""
    return words.describe(words.Evidence(
        workers=run.n, sync=run.sync, step_s=step_s, breakdown=b, utilization=util,
        levels=_levels(run, util, step_s), communication=words.ps_words(float(run.profile.gradient_bytes)),
        compute_scale=run.cluster.compute_scale, variable=run.sampler.variable))


def reference_blocked(profile: Profile, cluster: Cluster, strategy: Strategy, topology: Topology,
                      plan: PsPlan) -> list[float]:
    """Per worker: blocked time per step with the servers and links to itself (mean compute): one
    worker on its own NIC (its node's, not shared) and the run's shards on dedicated server NICs
    (colocated shards: NICs like the node's). A worker's blocked time up to this is exposed
    communication, the rest waiting."""
    from sgdscale.fine.ps import run_ps  # the same simulation, one worker
    memo: dict[tuple[float, float], float] = {}
    out = []
    server_bps = cluster.server_bandwidth_bps if topology.ps_placement == "dedicated" else cluster.bandwidth_bps
    for w in range(cluster.workers):
        key = (cluster.worker_scale(w), cluster.worker_bandwidth_bps(w))
        if key not in memo:
            solo = Cluster(1, bandwidth_bps=key[1], latency_s=cluster.latency_s, ps_count=plan.shards,
                           ps_bandwidth_bps=server_bps, compute_scale=(key[0],))
            # Same messages as the real run (grouping may depend on N), one worker; a measured
            # network's scaling of every NIC carries over.
            solo_topology = Topology(solo, topology.nic, nic_factor=topology.nic_factor)
            sampler = ComputeSampler(profile, solo, seed=0, variability=False)
            steps = 4
            rows = np.zeros((steps, 1), dtype=np.intp)
            solo_run = run_ps(profile, solo, solo_topology, plan, sampler, rows, strategy.kind == "ps-sync", 1)
            memo[key] = float(np.mean(solo_run.step_blocked[0])) if solo_run.step_blocked[0] else 0.0
        out.append(memo[key])
    return out
