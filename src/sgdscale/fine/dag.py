"""The operations of parameter-server SGD: which messages exist, where they go, what waits on them.

`ps_plan` turns the profile, strategy and server count into messages: each gradient group of
`sgdscale.grouping.group_gradients` (per-tensor by default for a PS, or whatever
`strategy.grouping` says) is split by server shard, giving one push message per (group, shard)
that holds the group's tensors placed on that shard. A message is released when its group is
complete in backward, is aggregated/applied on its shard in `update_s` (the profile's optimizer
time in proportion to the message's bytes), and comes back as fresh parameters; forward of layer
l waits for every message holding one of l's tensors (`need[l]`).

Tensors go to shards by `sgdscale.placement.place_tensors`. `ps_sync_dag` spells out the whole
synchronous-PS DAG explicitly for `sgdscale.fine.engine` (small cases: every operation is an
object there). The simulation in `sgdscale.fine.ps` runs the same dependencies without
materialising them; a test checks that the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm import sharing
from sgdscale.comm.sharing import couple_duplex, pushes_yield, simulated_weight_sigma
from sgdscale.comm.topology import Topology
from sgdscale.fine.engine import Dag
from sgdscale.fine.events import EventQueue
from sgdscale.fine.links import LinkNetwork
from sgdscale.grouping import group_gradients, tensor_layers
from sgdscale.placement import place_tensors
from sgdscale.profile import Profile
from sgdscale.strategy import Strategy


# Whether a shard's CPU per message (`server_cpu_s_per_message`) counts in `PsPlan.receive_s`, the part
# of its transport CPU that may overlap the wire where `sgdscale.fine.ps.RECEIVE_OVERLAPS_TRANSFER` is on
# (it is off). Off: only the CPU per byte does, which runs as the bytes stream in; a message's own cost
# (the shard's Python loop, gloo's wake-up) runs once it is complete: the variant held out on set 75.
# On: the variant tried on sets 10-71 before (`benchmarks/receive_overlap_tuning.py`, `both`).
MESSAGE_CPU_OVERLAPS = False


@dataclass(frozen=True)
class PsPlan:
    """Messages of one worker's step, in release order (see module docstring)."""

    bytes: list[float]
    shard: list[int]
    ready_layer: list[int]
    ready_fraction: list[float]
    update_s: list[float]
    need: list[list[int]]  # per layer: messages its forward waits for
    shards: int
    post_rank: list[int]  # per message: its first tensor's index, the order a worker posts its pull receives
    receive_s: list[float]  # per message: the shard's CPU (wall s) that moves one worker's copy, in update_s

    @property
    def messages(self) -> int:
        return len(self.bytes)


def ps_plan(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel | Topology) -> PsPlan:
    topology = Topology.of(cluster, comm, strategy)
    shards = topology.ps_shards
    tensor_shard = place_tensors([t.bytes for t in profile.tensors], shards, strategy.placement)
    layer_of = tensor_layers(profile)
    groups = group_gradients(profile, strategy, topology, cluster.workers)
    total_bytes = profile.gradient_bytes
    optimizer_s = profile.step.optimizer_s
    sizes = [t.bytes for t in profile.tensors]
    out_bytes, out_shard, out_layer, out_fraction, out_update, out_post, out_receive = [], [], [], [], [], [], []
    need: list[list[int]] = [[] for _ in profile.layers]
    # The shard's CPU also moves every byte of an update's messages: in and out once per worker in
    # sync PS (N copies summed, N replies), once each way in async PS.
    moved = 2 * (cluster.workers if strategy.kind == "ps-sync" else 1)
    server_cpu_s = topology.nic.server_cpu_s_per_byte * moved
    server_message_s = topology.nic.server_cpu_s_per_message * moved  # each copy in, each reply out
    for group in groups:
        by_shard: dict[int, list[int]] = {}
        for i in group.tensors:
            by_shard.setdefault(tensor_shard[i], []).append(i)
        for s in sorted(by_shard):
            m = len(out_bytes)
            nbytes = float(sum(sizes[i] for i in by_shard[s]))
            out_bytes.append(nbytes)
            out_shard.append(s)
            out_layer.append(group.ready_layer)
            out_fraction.append(group.ready_fraction)
            out_post.append(min(by_shard[s]))
            out_update.append((optimizer_s * nbytes / total_bytes if total_bytes > 0 else 0.0)
                              + server_cpu_s * nbytes + server_message_s)
            out_receive.append(topology.nic.server_cpu_s_per_byte * nbytes
                               + (topology.nic.server_cpu_s_per_message if MESSAGE_CPU_OVERLAPS else 0.0))
            for layer in sorted({layer_of[i] for i in by_shard[s]}):
                need[layer].append(m)
    return PsPlan(out_bytes, out_shard, out_layer, out_fraction, out_update, need, shards, out_post, out_receive)


def nic_capacities_Bps(cluster: Cluster, comm: CommModel | Topology) -> tuple[list[float], float]:
    """(worker NIC bytes/s per worker, server NIC bytes/s), as the topology rates them."""
    topology = Topology.of(cluster, comm)
    return [topology.nic_Bps(w) for w in range(cluster.workers)], topology.server_nic_Bps


def ps_sync_dag(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel | Topology, steps: int,
                forward_s: np.ndarray, backward_s: np.ndarray, pre_s: np.ndarray, seed: int = 0,
                early_notice: bool = True, half_duplex_pairs: bool = False
                ) -> tuple[Dag, LinkNetwork, int, list[list[int]]]:
    """The explicit synchronous-PS DAG of `steps` iterations (small cases only; one device per
    node and dedicated servers, the layout the fast simulator is checked against).

    forward_s/backward_s: (steps, workers, layers); pre_s: (steps, workers) data + copy.
    Resources: worker w's compute is w; shard s is N + s. Returns (dag, network, resources,
    step_end_ops[k][w]) where the step-end op is each worker's last backward task.
    Variants the fast loop does not run (`benchmarks/pair_duplex_model.py`): `early_notice=False`
    keeps every notice behind the worker's pushes; `half_duplex_pairs` (one shard only) sends a
    worker's pushes and pulls over one shared link, as one gloo pair does.
    """
    n, layers = cluster.workers, len(profile.layers)
    plan = ps_plan(profile, cluster, strategy, comm)
    topology = Topology.of(cluster, comm, strategy)
    worker_Bps, server_Bps = nic_capacities_Bps(cluster, topology)
    shards = plan.shards
    if half_duplex_pairs and shards != 1:
        raise ValueError("half-duplex pairs need one shard (a worker's pair is then its NIC)")
    queue = EventQueue()
    # One network for both directions: links 0..n-1 worker up, n..2n-1 worker down,
    # 2n..2n+S-1 server up, 2n+S..2n+2S-1 server down.
    caps = worker_Bps + worker_Bps + [server_Bps] * (2 * shards)
    # The same weights as the fast loop's two networks: pushes are connections 0..nS-1, pulls nS...
    newcomer = topology.nic.newcomer_share_weight
    sigma = simulated_weight_sigma(topology.nic.share_weight_sigma, newcomer)
    net = LinkNetwork(queue, caps, topology.alpha_s, weight_sigma=sigma, seed=seed, newcomer_weight=newcomer,
                      late_joiner_weight=sharing.LATE_JOINER_WEIGHT)
    yields = pushes_yield(True, n, shards)  # the fast loop's rule for sync pushes
    push = [[net.add_connection(w, 2 * n + shards + s, yields) for s in range(shards)] for w in range(n)]
    pull = [[net.add_connection(2 * n + s, w if half_duplex_pairs else n + w) for w in range(n)]
            for s in range(shards)]
    couple_duplex(net, net, {2 * n + s: 2 * n + shards + s for s in range(shards)})  # as the fast loop
    dag = Dag()
    pulled: list[list[int]] = [[-1] * plan.messages for _ in range(n)]  # last pull op per (worker, msg)
    last_op = [-1] * n
    step_end: list[list[int]] = []
    # Shard s posts its receives of step k once all its replies of step k-1 have been delivered.
    replies: list[list[int]] = [[] for _ in range(shards)]
    for k in range(steps):
        ends = []
        pushes: list[list[int]] = [[] for _ in range(plan.messages)]
        for w in range(n):
            prev = [last_op[w]] if last_op[w] >= 0 else []
            op = dag.add(pre_s[k, w], resource=w, preds=prev, name=f"data w{w} k{k}")
            for layer in range(layers):
                deps = [op] + [pulled[w][m] for m in plan.need[layer] if pulled[w][m] >= 0]
                op = dag.add(forward_s[k, w, layer], resource=w, preds=deps, name=f"fwd w{w} l{layer} k{k}")
            forward_end = op
            layer_done = {}
            for layer in range(layers - 1, -1, -1):
                op = dag.add(backward_s[k, w, layer], resource=w, preds=[op], name=f"bwd w{w} l{layer} k{k}")
                layer_done[layer] = op
            # A message leaves when its group is complete (fraction of a layer: a delay after the
            # previous layer's end).
            for m in range(plan.messages):
                layer, fraction = plan.ready_layer[m], plan.ready_fraction[m]
                if fraction >= 1.0:
                    ready = layer_done[layer]
                else:
                    before = layer_done[layer + 1] if layer + 1 < layers else forward_end
                    ready = dag.add(fraction * backward_s[k, w, layer], resource=-1, preds=[before])
                pushes[m].append(dag.add(conn=push[w][plan.shard[m]], nbytes=plan.bytes[m],
                                         preds=[ready, *replies[plan.shard[m]]], tag=k))
            last_op[w] = op
            ends.append(op)
        # Receive before send (gloo): worker w posts its receives when its backward ends; the notice
        # to shard s arrives alpha later, behind w's pushes to s already written, unless s has not
        # posted its receives of step k by then (w's pushes wait, unwritten): then it goes first.
        notice = [[[dag.add_choice(ends[w], topology.alpha_s, replies[s] if early_notice and k > 0 else [],
                                   [pushes[m][w] for m in range(plan.messages) if plan.shard[m] == s],
                                   name=f"notice w{w} s{s} k{k}")]
                   for s in range(shards)] for w in range(n)]
        replies = [[] for _ in range(shards)]
        for m in range(plan.messages):
            update = dag.add(plan.update_s[m], resource=n + plan.shard[m], preds=pushes[m], name=f"update m{m} k{k}")
            for w in range(n):
                pulled[w][m] = dag.add(conn=pull[plan.shard[m]][w], nbytes=plan.bytes[m],
                                       preds=[update, *notice[w][plan.shard[m]]], tag=k)
                replies[plan.shard[m]].append(pulled[w][m])
        step_end.append(ends)
    return dag, net, n + shards, step_end
