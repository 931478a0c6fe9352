"""Two-level topologies: hand-computed all-reduce and parameter-server steps, both methods.

The hand cases use 2 nodes x 2 devices, a 10 Gbit/s NIC (beta_e = 0.8 ns/B, alpha_e = 20 us) and an
80 Gbit/s intra-node link (beta_i = 0.1 ns/B, alpha_i = 5 us), and a deterministic profile whose
gradients are sent once after backward (grouping `single`), so a step is compute plus the
collective (or push + update + pull) with nothing hidden.
"""

from __future__ import annotations

import dataclasses
import numpy as np
import pytest

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.topology import LEVEL_INTRA, LEVEL_NIC, Topology
from sgdscale.errors import UserError
from sgdscale.predict import predict
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes
from sgdscale.strategy import Strategy

MB = 1_000_000
A_E, B_E = 20e-6, 8 / 10e9
A_I, B_I = 5e-6, 8 / 80e9


def toy(sizes_mb=(4, 4), forward_s=0.005, backward_s=0.01, optimizer_s=0.004, batch=32) -> Profile:
    layers = [Layer(name=f"l{i}", forward_s=forward_s, backward_s=backward_s,
                    params=[ParamTensor(name=f"l{i}.w", numel=int(s * MB) // 4, bytes=int(s * MB))])
              for i, s in enumerate(sizes_mb)]
    return Profile(model="toy", batch_size=batch, layers=layers, step=StepTimes(optimizer_s=optimizer_s))


def cluster(workers=4, gpus=2, **kw) -> Cluster:
    return Cluster(workers, bandwidth_bps=10e9, latency_s=A_E, gpus_per_node=gpus, intra_bandwidth_bps=80e9,
                   intra_latency_s=A_I, **kw)


def comm() -> CommModel:
    return CommModel.from_link(10e9, A_E)


def equal_sharing() -> CommModel:
    """`comm()` with flows sharing links exactly equally, no incumbents first (nor the typical
    sigma that comes with it, sgdscale.comm.sharing): what the hand-computed steps below assume."""
    return dataclasses.replace(comm(), newcomer_share_weight=1.0)


M = 8 * MB
HAND_ALLREDUCE_S = {
    # one ring over 4 devices, every step paced by the NIC: 2(N-1) alpha_e + 2(N-1)/N M beta_e
    "flat": 6 * A_E + 1.5 * M * B_E,
    # reduce-scatter + all-gather inside (G = 2), ring across n = 2 nodes
    "hierarchical": 2 * A_I + M * B_I + 2 * A_E + M * B_E,
    # chain reduce + broadcast inside, binary tree across 2 nodes (1 level)
    "tree": 2 * A_I + 2 * M * B_I + 2 * A_E + 2 * M * B_E,
}


@pytest.mark.parametrize("scheme", ["flat", "hierarchical", "tree", "auto"])
def test_hand_allreduce_two_nodes_two_devices(scheme):
    topology = Topology(cluster(), comm(), scheme)
    expected = HAND_ALLREDUCE_S["hierarchical" if scheme == "auto" else scheme]
    assert topology.allreduce_s(M) == pytest.approx(expected, rel=1e-12)
    line = topology.allreduce_linear()
    assert line.alpha_s + line.beta_s_per_byte * M == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("scheme", ["flat", "hierarchical", "tree", "auto"])
@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_hand_allreduce_step_both_methods(scheme, method):
    profile = toy()
    strategy = Strategy(kind="allreduce", grouping="single", allreduce=scheme)
    result = predict(profile, cluster(), strategy, comm(), [4], [method], iterations=5, warmup=1,
                     variability=False).results[0]
    step = 2 * 0.005 + 2 * 0.01 + HAND_ALLREDUCE_S["hierarchical" if scheme == "auto" else scheme] + 0.004
    assert result.iteration_s["mean"] == pytest.approx(step, rel=1e-9)
    assert result.throughput == pytest.approx(4 * 32 / step, rel=1e-9)
    assert result.limited_by == LEVEL_NIC  # the NIC's share of every scheme outweighs the intra-node link


def test_levels_split_the_collective():
    cost = Topology(cluster(), comm(), "hierarchical").allreduce_cost([M])
    assert cost.intra_s[0] == pytest.approx(2 * A_I + M * B_I)
    assert cost.nic_s[0] == pytest.approx(2 * A_E + M * B_E)
    flat = Topology(cluster(), comm(), "flat").allreduce_cost([M])
    assert flat.intra_s[0] == 0 and flat.nic_s[0] == pytest.approx(HAND_ALLREDUCE_S["flat"])



def test_a_flat_ring_keeps_both_levels_busy():
    """The flat ring's time is all NIC-paced, but its intra-node hops carry the same bytes at the
    same moments: the intra-node link is busy for the ring's time on that link alone."""
    busy = Topology(cluster(), comm(), "flat").allreduce_busy_s([M])
    assert busy[LEVEL_NIC] == pytest.approx(HAND_ALLREDUCE_S["flat"], rel=1e-12)
    assert busy[LEVEL_INTRA] == pytest.approx(6 * A_I + 1.5 * M * B_I, rel=1e-12)
    hierarchical = Topology(cluster(), comm(), "hierarchical")
    assert hierarchical.allreduce_busy_s([M]) == {LEVEL_INTRA: pytest.approx(2 * A_I + M * B_I),
                                                  LEVEL_NIC: pytest.approx(2 * A_E + M * B_E)}

def test_auto_takes_the_cheapest_per_message_and_tree_wins_small_messages_on_many_nodes():
    topology = Topology(cluster(workers=16, gpus=2), comm(), "auto")  # 8 nodes
    sizes = np.array([1_000.0, 64 * MB])
    cost = topology.allreduce_cost(sizes)
    each = {s: Topology(cluster(workers=16, gpus=2), comm(), s).allreduce_times_s(sizes)
            for s in ("flat", "hierarchical", "tree")}
    assert cost.scheme == ["tree", "hierarchical"]
    # small: tree 2*3 alpha_e across 8 nodes beats the ring's 2*7; large: the ring's bytes win
    assert cost.total_s[0] == pytest.approx(2 * A_I + 2 * 1000 * B_I + 6 * A_E + 3 * 2 * 1000 * B_E)
    np.testing.assert_allclose(cost.total_s, np.minimum.reduce([each[s] for s in each]))


@pytest.mark.parametrize("scheme", ["flat", "hierarchical"])
def test_one_node_never_touches_the_nic(scheme):
    """4 GPUs in one node: a ring over the intra-node link, whatever the NIC."""
    topology = Topology(cluster(workers=4, gpus=8), comm(), scheme)
    assert topology.nodes == 1 and topology.gpus == 4
    cost = topology.allreduce_cost([M])
    assert cost.nic_s[0] == 0
    assert cost.intra_s[0] == pytest.approx(2 * 3 * A_I + 2 * 3 / 4 * M * B_I)


def test_partial_last_node_and_worker_mapping():
    c = cluster(workers=12, gpus=8)
    assert c.nodes == 2 and c.node_of(7) == 0 and c.node_of(8) == 1
    assert Topology(c, comm()).gpus_on(1) == 4


def test_slow_nic_paces_the_inter_node_level_only():
    c = cluster(slow_links=((3, 1e9),))  # worker 3's node NIC is 1 Gbit/s
    assert c.worker_bandwidth_bps(2) == 1e9 and c.worker_bandwidth_bps(0) == 10e9
    cost = Topology(c, comm(), "hierarchical").allreduce_cost([M])
    assert cost.intra_s[0] == pytest.approx(2 * A_I + M * B_I)
    assert cost.nic_s[0] == pytest.approx(2 * A_E + M * 8e-9)


# ------------------------------------------------------------------ parameter servers

PRE_S = 2 * 0.005 + 2 * 0.01
UPDATE_S = 0.004 / 2  # each shard updates half the bytes


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_hand_colocated_ps_two_nodes_two_devices(method):
    """Shard s on node s holds 4 MB. Node i's NIC carries (N-G) x 4 MB into its shard and G x 4 MB
    out to the other shard: 8 MB each way at 1.25 GB/s = 6.4 ms; the local pushes cross the
    intra-node link (2 x 4 MB at 10 GB/s = 0.8 ms) and never touch the NIC."""
    strategy = Strategy(kind="ps-sync", grouping="single", ps_placement="colocated")
    result = predict(toy(), cluster(), strategy, equal_sharing(), [4], [method], iterations=20, warmup=2,
                     variability=False).results[0]
    transfer = A_E + 2 * 4 * MB * B_E
    step = PRE_S + transfer + UPDATE_S + transfer
    if method == "coarse":
        # coarse's early workers (1 - 2/3 with 2 shards: heuristics.late_share) run ahead into the
        # next step by more than their share of the pushes, which then leave before the late
        # workers' backward ends (heuristics.sync_ps_end_s); identical workers on equally shared
        # links in fine never part
        step -= (1 - 2 / 3) * 2 * 4 * MB * B_E
    # the simulated nodes settle at a phase offset after a transient step: the steady step is exact
    assert result.iteration_s["p50"] == pytest.approx(step, rel=1e-9)
    assert result.throughput == pytest.approx(4 * 32 / step, rel=0.01)


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_hand_dedicated_ps_shares_the_node_nic(method):
    """Two dedicated shards: each server NIC receives 4 devices x 4 MB, each node NIC sends its 2
    devices' 8 MB: 16 MB at 1.25 GB/s = 12.8 ms each way (twice the colocated case)."""
    strategy = Strategy(kind="ps-sync", grouping="single")
    result = predict(toy(), cluster(ps_count=2), strategy, equal_sharing(), [4], [method], iterations=20, warmup=2,
                     variability=False).results[0]
    transfer = A_E + 16 * MB * B_E
    step = PRE_S + transfer + UPDATE_S + transfer
    if method == "coarse":  # the early third's pushes leave ahead (as in the colocated case above)
        step -= (1 - 2 / 3) * 16 * MB * B_E
    assert result.iteration_s["p50"] == pytest.approx(step, rel=1e-9)
    assert result.throughput == pytest.approx(4 * 32 / step, rel=0.01)


def test_colocated_ps_rejects_a_server_count():
    with pytest.raises(UserError, match="one per node"):
        predict(toy(), cluster(ps_count=2), Strategy(kind="ps-sync", ps_placement="colocated"), comm(), [4])


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_colocated_beats_dedicated_when_the_server_nic_binds(kind):
    profile = toy(sizes_mb=(8, 8, 8, 8))
    out = {}
    for placement in ("dedicated", "colocated"):
        strategy = Strategy(kind=kind, grouping="per-layer", ps_placement=placement)
        res = predict(profile, cluster(workers=8, gpus=2), strategy, comm(), [8], iterations=8, warmup=2,
                      variability=False).results
        out[placement] = {r.method: r.throughput for r in res}
    for method in ("fine", "coarse"):
        assert out["colocated"][method] > 1.3 * out["dedicated"][method]


@pytest.mark.parametrize("scheme", ["flat", "hierarchical", "tree", "auto"])
def test_event_simulator_agrees_with_the_fast_all_reduce_on_two_levels(scheme):
    """The discrete-event engine and the vectorized recurrence ask the same topology."""
    from sgdscale.fine.allreduce import simulate_allreduce
    from des_oracle import simulate_des

    profile = toy(sizes_mb=(1, 3, 0.5, 6))
    strategy = Strategy(kind="allreduce", grouping="per-layer", allreduce=scheme)
    c = cluster(workers=6, gpus=4, compute_scale=(1, 1, 1.2, 1, 1, 1))
    fast = simulate_allreduce(profile, c, strategy, comm(), iterations=6, warmup=1, variability=False)
    slow = simulate_des(profile, c, strategy, comm(), iterations=6, warmup=1, variability=False)
    np.testing.assert_allclose(fast.iteration_s, slow.iteration_s, rtol=1e-9)
    assert fast.levels == pytest.approx(slow.levels)


def test_topology_answers_only_for_its_own_worker_count():
    topology = Topology(cluster(), comm())
    with pytest.raises(ValueError, match="4 workers"):
        topology.allreduce_times_s([1.0], 8)


def test_a_measured_network_scales_every_nic_and_stays_reachable():
    from sgdscale.comm.network import AlphaBeta, Network

    net = Network(p2p=AlphaBeta(alpha_s=1e-4, beta_s_per_byte=1.6e-9))  # 5 Gbit/s measured
    measured = CommModel.from_network(net)
    topology = Topology(cluster(ps_bandwidth_bps=20e9, slow_links=((1, 1e9),)), measured)
    assert topology.network is net
    assert topology.nic_factor == pytest.approx(0.5)
    assert topology.nic_Bps(3) == pytest.approx(5e9 / 8)  # nominal 10 Gbit/s, measured half
    assert topology.nic_Bps(0) == pytest.approx(0.5e9 / 8)  # worker 1's node: 1 Gbit/s nominal
    assert topology.server_nic_Bps == pytest.approx(10e9 / 8)
    assert Topology(cluster(), comm()).network is None
