"""The general discrete-event simulator (parameter servers, all-reduce cross-check)."""

from __future__ import annotations

import dataclasses
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.fine.allreduce import simulate_allreduce
import sgdscale.comm.sharing as sharing
from sgdscale.comm.sharing import NEWCOMER_SHARE_WEIGHT
from sgdscale.fine.dag import nic_capacities_Bps, ps_plan, ps_sync_dag
import sgdscale.fine.ps as fine_ps
import sgdscale.fine.links as fine_links
from sgdscale.fine.ps import run_ps, simulate_ps
from sgdscale.fine.engine import run_dag
from sgdscale.fine.hubs import StarNetwork
from sgdscale.variability import ComputeSampler
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes, load_profile
from sgdscale.strategy import Strategy

from des_oracle import simulate_des

HYPOTHESIS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_profile(layers=6, samples=0, seed=0, optimizer_s=0.01, data_s=0.002, batch=8, paramless=True):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(layers):
        params = []
        if not (paramless and i % 3 == 2):
            for k in range(1 + i % 2):
                numel = int(rng.integers(1_000, 400_000))
                params.append(ParamTensor(name=f"l{i}.p{k}", numel=numel, bytes=4 * numel))
        f, b = float(rng.uniform(1e-3, 8e-3)), float(rng.uniform(2e-3, 1.5e-2))
        out.append(Layer(name=f"l{i}", forward_s=f, backward_s=b, params=params,
                         forward_samples_s=list(rng.uniform(0.5, 1.5, samples) * f) if samples else None,
                         backward_samples_s=list(rng.uniform(0.5, 1.5, samples) * b) if samples else None))
    return Profile(model="synthetic", batch_size=batch, layers=out,
                   step=StepTimes(data_s=data_s, h2d_s=0.0, optimizer_s=optimizer_s))


def comm_for(cluster):
    return CommModel.from_link(cluster.bandwidth_bps, cluster.latency_s)


# --- all-reduce: the DES runs the same DAG the fast path evaluates in closed form ----------------

@pytest.mark.parametrize("variability", [False, True])
@pytest.mark.parametrize("grouping", ["per-layer", "buckets", "per-tensor", "single"])
@pytest.mark.parametrize("workers,scales", [(1, ()), (4, ()), (5, (1.0, 1.3, 1.0, 0.8, 2.0))])
def test_allreduce_des_equals_fast_path(variability, grouping, workers, scales):
    profile = make_profile(layers=9, samples=5)
    cluster = Cluster(workers, bandwidth_bps=1e9, latency_s=5e-5, compute_scale=scales)
    strategy = Strategy(kind="allreduce", grouping=grouping, bucket_bytes=600_000, first_bucket_bytes=200_000)
    comm = comm_for(cluster)
    des = simulate_des(profile, cluster, strategy, comm, iterations=20, warmup=3, seed=7, variability=variability)
    fast = simulate_allreduce(profile, cluster, strategy, comm, iterations=20, warmup=3, seed=7,
                              variability=variability)
    np.testing.assert_allclose(des.iteration_s, fast.iteration_s, rtol=1e-9)
    assert des.throughput == pytest.approx(fast.throughput, rel=1e-9)
    assert des.breakdown.exposed_comm_s == pytest.approx(fast.breakdown.exposed_comm_s, rel=1e-9, abs=1e-12)


def test_allreduce_des_equals_fast_path_on_resnet50():
    profile = load_profile("resnet50")
    cluster = Cluster(16, bandwidth_bps=10e9, latency_s=2e-5)
    strategy = Strategy(kind="allreduce", grouping="per-layer")
    comm = comm_for(cluster)
    des = simulate_des(profile, cluster, strategy, comm, iterations=10, warmup=2, seed=3)
    fast = simulate_allreduce(profile, cluster, strategy, comm, iterations=10, warmup=2, seed=3)
    np.testing.assert_allclose(des.iteration_s, fast.iteration_s, rtol=1e-9)


# --- parameter servers ---------------------------------------------------------------------------

def test_ps_sync_one_worker_infinite_bandwidth_is_step_plus_exposed_update():
    # Two layers; backward: layer 1 then layer 0. Layer 0's gradient is last: its update (0.1 s)
    # is exposed; layer 1's update (0.3 s) hides behind layer 0's backward (0.5 s).
    layers = [
        Layer(name="a", forward_s=0.02, backward_s=0.5, params=[ParamTensor(name="a.w", numel=250, bytes=1000)]),
        Layer(name="b", forward_s=0.03, backward_s=0.2, params=[ParamTensor(name="b.w", numel=750, bytes=3000)]),
    ]
    profile = Profile(model="two", batch_size=4, layers=layers, step=StepTimes(data_s=0.05, optimizer_s=0.4))
    cluster = Cluster(1, bandwidth_bps=1e18, latency_s=0.0)
    out = simulate_des(profile, cluster, Strategy(kind="ps-sync", grouping="per-tensor"), comm_for(cluster),
                       iterations=5, warmup=1, variability=False)
    # The next step's data (0.05 s) overlaps the 0.1 s wait for layer 0's parameters.
    expected = 0.1 + 0.02 + 0.03 + 0.5 + 0.2
    np.testing.assert_allclose(out.iteration_s, expected, rtol=1e-9)
    assert out.throughput == pytest.approx(4 / expected, rel=1e-9)
    assert out.breakdown.compute_s == pytest.approx(0.05 + 0.05 + 0.7)
    assert out.breakdown.exposed_comm_s == pytest.approx(expected - 0.8, rel=1e-6)
    assert out.breakdown.wait_s == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_one_worker_sync_and_async_agree(kind):
    profile = make_profile(layers=7)
    cluster = Cluster(1, bandwidth_bps=2e9, latency_s=1e-4)
    out = {k: simulate_des(profile, cluster, Strategy(kind=k, grouping="per-tensor"), comm_for(cluster),
                           iterations=8, warmup=2, variability=False) for k in ("ps-sync", "ps-async")}
    np.testing.assert_allclose(out["ps-sync"].iteration_s, out["ps-async"].iteration_s, rtol=1e-12)


@pytest.mark.parametrize("sigma,newcomer,pushes_equal", [(0.0, 1.0, "never"), (0.3, 1.0, "never"), (1.0, 1.0, "never"),
                                                         (0.0, 0.1, "never"), (0.3, 0.1, "never"), (0.0, 0.1, "sync"),
                                                         (0.3, 0.1, "sync")])
@pytest.mark.parametrize("variability", [False, True])
@pytest.mark.parametrize("shards,grouping", [(1, "per-tensor"), (2, "per-tensor"), (2, "buckets"), (3, "per-layer")])
@pytest.mark.parametrize("passes_on", [False, True])
def test_ps_sync_fast_loop_equals_explicit_dag(sigma, newcomer, pushes_equal, variability, shards, grouping, passes_on,
                                               monkeypatch):
    """The process-oriented loop runs exactly the DAG that dag.ps_sync_dag spells out op by op,
    with equal and with unequal (weighted) link sharing, and with incumbents first (everywhere: the
    DAG does not tell a busy shard's uplink apart, which test_engine_links checks on its own; with
    the pushes exempt, sharing.PUSHES_SHARE_EQUALLY; and with the incumbency passed on,
    links.INCUMBENCY_PASSES_ON)."""
    monkeypatch.setattr(fine_links, "INCUMBENCY_PASSES_ON", passes_on)
    profile = make_profile(layers=5, samples=4, seed=3)
    cluster = Cluster(3, bandwidth_bps=4e8, latency_s=3e-5, ps_count=shards, ps_bandwidth_bps=6e8,
                      compute_scale=(1.0, 1.7, 0.9))
    strategy = Strategy(kind="ps-sync", grouping=grouping, bucket_bytes=500_000, first_bucket_bytes=100_000)
    comm = dataclasses.replace(comm_for(cluster), share_weight_sigma=sigma, newcomer_share_weight=newcomer)
    steps = 6
    sampler = ComputeSampler(profile, cluster, seed=11, variability=variability)
    rows = np.array([sampler.draw_rows() for _ in range(steps)]).reshape(steps, cluster.workers)
    scale = sampler.scale
    fwd = sampler.forward_table_s[rows] * scale[None, :, None]
    bwd = sampler.backward_table_s[rows] * scale[None, :, None]
    pre = (sampler.data_table_s[rows] + sampler.h2d_table_s[rows]) * scale[None, :]
    with mock.patch.object(sharing, "PUSHES_SHARE_EQUALLY", pushes_equal):
        dag, net, resources, step_end = ps_sync_dag(profile, cluster, strategy, comm, steps, fwd, bwd, pre, seed=5)
        explicit = run_dag(dag, resources, network=net)
        plan = ps_plan(profile, cluster, strategy, comm)
        with mock.patch.object(fine_ps, "BUSY_SHARD_SHARES_EQUALLY", False):
            fast = run_ps(profile, cluster, comm, plan, sampler, rows, True, 0, seed=5)
    for w in range(cluster.workers):
        want = [explicit.finish_s[step_end[k][w]] for k in range(steps)]
        np.testing.assert_allclose(fast.ends[w], want, rtol=1e-9)


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_a_receive_notice_waits_for_the_end_of_backward(kind):
    """The worker posts its pull receives when its backward ends. Here its only gradient (layer b,
    first in backward) is pushed and updated long before that, but the new value still leaves only
    when the notice arrives (end of backward + 1 ms) and lands 1 ms later, after the next step's
    0.5 ms forward of the parameter-free layer a: forward of b waits 1.5 ms."""
    layers = [Layer(name="a", forward_s=0.0005, backward_s=0.2, params=[]),
              Layer(name="b", forward_s=0.01, backward_s=0.01, params=[ParamTensor(name="b.w", numel=25, bytes=100)])]
    profile = Profile(model="two", batch_size=4, layers=layers, step=StepTimes())
    cluster = Cluster(1, bandwidth_bps=1e12, latency_s=1e-3)
    out = simulate_des(profile, cluster, Strategy(kind=kind, grouping="per-tensor"), comm_for(cluster),
                       iterations=4, warmup=1, variability=False)
    np.testing.assert_allclose(out.iteration_s, 0.002 + 0.01 + 0.21, rtol=1e-6)


def _notices_ahead_of_pushes(sigma):
    """How many receive notices of the explicit DAG went ahead of their worker's pushes."""
    profile = make_profile(layers=5, samples=4, seed=3)
    cluster = Cluster(3, bandwidth_bps=4e8, latency_s=3e-5, ps_count=1, ps_bandwidth_bps=6e8,
                      compute_scale=(1.0, 1.7, 0.9))
    strategy = Strategy(kind="ps-sync", grouping="per-tensor")
    comm = dataclasses.replace(comm_for(cluster), share_weight_sigma=sigma, newcomer_share_weight=1.0)
    sampler = ComputeSampler(profile, cluster, seed=11, variability=False)
    rows = np.zeros((6, 3), dtype=int)
    fwd = sampler.forward_table_s[rows] * sampler.scale[None, :, None]
    bwd = sampler.backward_table_s[rows] * sampler.scale[None, :, None]
    pre = (sampler.data_table_s[rows] + sampler.h2d_table_s[rows]) * sampler.scale[None, :]
    dag, net, resources, _ = ps_sync_dag(profile, cluster, strategy, comm, 6, fwd, bwd, pre, seed=5)
    run = run_dag(dag, resources, network=net)
    pushes_done = {}
    for op in range(len(dag)):
        if dag.conn[op] >= 0 and dag.conn[op] < 3:  # a push of worker dag.conn[op] (one shard)
            key = (dag.conn[op], dag.tag[op])
            pushes_done[key] = max(pushes_done.get(key, 0.0), run.finish_s[op])
    ahead = 0
    for op, name in enumerate(dag.name):
        if name.startswith("notice"):
            w, k = int(name.split()[1][1:]), int(name.split()[3][1:])
            ahead += run.finish_s[op] < pushes_done[(w, k)]
    return ahead


def test_a_notice_goes_ahead_of_pushes_only_when_the_shard_has_not_posted():
    """Equal sharing (no incumbents first, no late joiners last): every worker gets its parameters at
    once, the shard has posted before anyone ends backward, every notice follows the pushes. Unequal
    sharing: some workers start early, end backward before the shard posts, and their notices overtake
    their waiting pushes."""
    with mock.patch.object(sharing, "LATE_JOINER_WEIGHT", 1.0):
        assert _notices_ahead_of_pushes(0.0) == 0
    assert _notices_ahead_of_pushes(1.0) > 0


EQUAL_TENSORS = Profile(
    model="equal", batch_size=8, step=StepTimes(data_s=0.001, optimizer_s=0.004),
    layers=[Layer(name=f"l{i}", forward_s=0.002 + 0.001 * (i % 3), backward_s=0.004 + 0.001 * (i % 2),
                  params=[ParamTensor(name=f"l{i}.w", numel=100_000, bytes=400_000)]) for i in range(12)])


def _throughput(kind, workers, bandwidth, shards, server_bw=None, profile=None, iterations=15, warmup=3):
    profile = profile or make_profile(layers=6, optimizer_s=0.004)
    cluster = Cluster(workers, bandwidth_bps=bandwidth, latency_s=2e-5, ps_count=shards, ps_bandwidth_bps=server_bw)
    return simulate_des(profile, cluster, Strategy(kind=kind, grouping="per-tensor"), comm_for(cluster),
                        iterations=iterations, warmup=warmup, variability=False).throughput


@HYPOTHESIS
@given(workers=st.integers(1, 6), shards=st.integers(1, 3), bw=st.floats(1e8, 5e9), factor=st.floats(2.0, 8.0),
       kind=st.sampled_from(["ps-sync", "ps-async"]))
def test_twice_the_bandwidth_or_more_never_costs_throughput(workers, shards, bw, factor, kind):
    """Doubling the bandwidth (or more) never loses throughput.

    A smaller step up can: messages finishing earlier reorder who waits for whom at a shared server
    NIC, and the steady phase pattern changes. `benchmarks/bandwidth_monotonicity.py` (1-6 workers,
    1-3 shards, 40 bandwidths 0.1-5 Gbit/s) finds losses up to 2.4% for sync PS and 15.3% for async
    PS over this test's 15-step window (7.7% over 60; CI's hypothesis run found async, 3 workers, one
    shard, 427 -> 480 Mbit/s: -2.3%), and over every step of 2x or more a gain of at least 7.4%.
    """
    slow = _throughput(kind, workers, bw, shards)
    fast = _throughput(kind, workers, bw * factor, shards)
    assert fast >= slow


@pytest.mark.parametrize("newcomer", [1.0, NEWCOMER_SHARE_WEIGHT])
@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
@pytest.mark.parametrize("workers", [4, 6])
def test_each_server_shard_adds_throughput_where_the_server_nics_bind(workers, kind, newcomer):
    """Server NICs 4x slower than the workers' and busy (4 or 6 workers), equal tensors placed
    round-robin (a shard's load ceil(T/S) never grows with S): each shard added, 1 to 4, raises the
    steady-state throughput by 10% or more, with equal sharing and with incumbents first.

    Not a law of the model with 2-4 workers, where the servers idle part of the time and the phase
    pattern decides (`benchmarks/newcomer_where_bound.py`, its scan): under incumbents first, 2
    async workers at 799 Mbit/s run 16% slower with 4 shards than with 3 (89.8 -> 75.4 samples/s; a
    newcomer's weight holds on every link it crosses, so a push that starts while its worker's other
    pushes move loses a slow server NIC to the other worker's pushes), and CI's hypothesis run of
    the law this test replaced found 3 shards 4.3% below 2; equal sharing loses up to 3.5% (sync, 3
    workers, 3 -> 4 shards). A rule that reduces the weight only where the sender's link binds
    removes the first; held out on set 27, it predicted the real two-shard runs worse (fine PS 3.7%
    -> 6.6% median error) and was not kept.
    """
    def throughput(servers):
        cluster = Cluster(workers, bandwidth_bps=1e9, latency_s=2e-5, ps_count=servers, ps_bandwidth_bps=1e9 / 4)
        comm = dataclasses.replace(comm_for(cluster), newcomer_share_weight=newcomer)
        return simulate_des(EQUAL_TENSORS, cluster, Strategy(kind=kind, grouping="per-tensor"), comm,
                            iterations=30, warmup=100, variability=False).throughput

    rates = [throughput(servers) for servers in (1, 2, 3, 4)]
    assert all(more >= 1.1 * fewer for fewer, more in zip(rates, rates[1:])), rates


def test_pulls_wait_for_the_workers_last_push_to_that_shard():
    """gloo sends only into a posted receive, and a worker's receive notice queues behind its own
    pushes: with one shard and a slow worker NIC, no parameter comes back before every gradient
    has gone out, so a step costs compute + all pushes + the pull forward needs first at least."""
    bandwidth = 1e8
    one = _throughput("ps-sync", 1, bandwidth, 1, server_bw=1e15, profile=EQUAL_TENSORS)
    compute = EQUAL_TENSORS.forward_s + EQUAL_TENSORS.backward_s + EQUAL_TENSORS.step.data_s
    all_pushes = EQUAL_TENSORS.gradient_bytes * 8 / bandwidth
    first_pull = EQUAL_TENSORS.tensors[0].bytes * 8 / bandwidth
    assert EQUAL_TENSORS.batch_size / one >= compute - EQUAL_TENSORS.backward_s + all_pushes + first_pull
    # A second shard lets the pulls of the first begin while pushes to the second still go out.
    two = _throughput("ps-sync", 1, bandwidth, 2, server_bw=1e15, profile=EQUAL_TENSORS)
    assert two > one


@HYPOTHESIS
@given(workers=st.integers(1, 24), shards=st.integers(1, 3), bw=st.floats(1e8, 1e10), server_bw=st.floats(1e8, 1e10),
       optimizer_s=st.floats(0.0, 0.05), newcomer=st.sampled_from([1.0, 0.1]))
@example(workers=23, shards=3, bw=909313727.0, server_bw=1196671061.0, optimizer_s=0.03125, newcomer=0.1)
def test_ps_async_never_beats_the_bottleneck_bound(workers, shards, bw, server_bw, optimizer_s, newcomer):
    """A steady-state bound, so the window starts once the shards' queues have filled: with 5 warm-up
    steps and 25 measured, 23 workers on three shards (the example) came out 3% above it, 0.6% with
    20 and 40."""
    profile = make_profile(layers=6, optimizer_s=optimizer_s)
    cluster = Cluster(workers, bandwidth_bps=bw, latency_s=2e-5, ps_count=shards, ps_bandwidth_bps=server_bw)
    strategy = Strategy(kind="ps-async", grouping="per-tensor")
    comm = dataclasses.replace(comm_for(cluster), newcomer_share_weight=newcomer)
    out = simulate_des(profile, cluster, strategy, comm, iterations=60, warmup=20, variability=False)
    plan = ps_plan(profile, cluster, strategy, comm)
    worker_Bps, server_Bps = nic_capacities_Bps(cluster, comm)
    demand = []  # seconds of each server resource per worker step
    for s in range(shards):
        nbytes = sum(b for b, sh in zip(plan.bytes, plan.shard) if sh == s)
        demand += [sum(u for u, sh in zip(plan.update_s, plan.shard) if sh == s), nbytes / server_Bps]
    d_max = max(demand)
    compute = profile.compute_s - profile.step.optimizer_s  # the workers run no optimizer with a PS
    # Each worker steps at most once per compute time (communication overlaps at best); the
    # busiest server resource serves at most 1/D_max steps per second. (N/(D+Z) is not a bound
    # here: pushes and pulls overlap with compute.)
    bound = profile.batch_size * min(workers / compute, 1.0 / d_max if d_max > 0 else float("inf"))
    assert out.throughput <= bound * 1.02


def test_server_nic_bottleneck_is_named():
    profile = make_profile(layers=6, optimizer_s=1e-4)
    cluster = Cluster(16, bandwidth_bps=10e9, latency_s=2e-5, ps_bandwidth_bps=1e9)
    out = simulate_des(profile, cluster, Strategy(kind="ps-async", grouping="per-tensor"), comm_for(cluster),
                       iterations=20, warmup=3, variability=False)
    assert "server 0 NIC" in out.bottleneck
    # Receive-before-send makes the two directions of the server NIC take turns: together busy.
    assert out.utilization["server 0 NIC in"] + out.utilization["server 0 NIC out"] > 0.85
    assert 0.0 <= out.utilization["worker compute"] <= 1.0


def test_compute_bound_case_is_named():
    profile = make_profile(layers=6, optimizer_s=1e-5)
    cluster = Cluster(2, bandwidth_bps=100e9, latency_s=1e-6, ps_count=2)
    out = simulate_des(profile, cluster, Strategy(kind="ps-async", grouping="per-layer"), comm_for(cluster),
                       iterations=20, warmup=3, variability=False)
    assert out.bottleneck.startswith("compute:")
    assert out.utilization["worker compute"] > 0.95


def test_stragglers_slow_sync_but_not_async():
    profile = make_profile(layers=6, optimizer_s=1e-4)
    scales = (1.0, 1.0, 1.0, 3.0)
    cluster = Cluster(4, bandwidth_bps=100e9, latency_s=1e-6, compute_scale=scales)
    sync = simulate_des(profile, cluster, Strategy(kind="ps-sync", grouping="per-tensor"), comm_for(cluster),
                        iterations=20, warmup=3, variability=False)
    asyn = simulate_des(profile, cluster, Strategy(kind="ps-async", grouping="per-tensor"), comm_for(cluster),
                        iterations=20, warmup=3, variability=False)
    assert asyn.throughput > 1.5 * sync.throughput
    assert "straggler" in sync.bottleneck
    assert sync.breakdown.wait_s > sync.breakdown.exposed_comm_s


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async", "allreduce"])
def test_seeded_reproducibility(kind):
    profile = make_profile(layers=6, samples=6)
    cluster = Cluster(5, bandwidth_bps=1e9, latency_s=2e-5, ps_count=2)
    run = lambda seed: simulate_des(profile, cluster, Strategy(kind=kind, grouping="per-tensor"), comm_for(cluster),
                                    iterations=10, warmup=2, seed=seed)
    a, b, c = run(1), run(1), run(2)
    np.testing.assert_array_equal(a.iteration_s, b.iteration_s)
    assert a.throughput == b.throughput and a.utilization == b.utilization
    assert not np.array_equal(a.iteration_s, c.iteration_s)


def test_timeline_is_capped_and_well_formed():
    profile = make_profile(layers=6)
    cluster = Cluster(8, bandwidth_bps=1e9, latency_s=2e-5)
    out = simulate_des(profile, cluster, Strategy(kind="ps-sync", grouping="per-tensor"), comm_for(cluster),
                       iterations=10, warmup=2, timeline=True)
    assert out.timeline
    processes = {e.process for e in out.timeline}
    assert processes <= {"worker 0", "worker 1", "worker 2", "server 0"}
    assert {e.thread for e in out.timeline} >= {"compute", "nic up", "nic down", "update"}
    assert all(e.duration_s >= 0 for e in out.timeline)
    assert {e.args["iteration"] for e in out.timeline} <= {2, 3, 4}


def test_measured_network_bandwidth_scales_every_nic():
    cluster = Cluster(2, bandwidth_bps=10e9, ps_bandwidth_bps=40e9, slow_links=((1, 1e9),))
    comm = CommModel.from_link(5e9, 1e-5)  # e.g. fitted from a network file: half the nominal
    workers, server = nic_capacities_Bps(cluster, comm)
    assert workers == pytest.approx([5e9 / 8, 0.5e9 / 8])
    assert server == pytest.approx(20e9 / 8)
    assert nic_capacities_Bps(cluster, CommModel.from_link(10e9, 1e-5))[0][0] == 10e9 / 8


@pytest.mark.parametrize("sigma,newcomer,late,pushes_equal", [
    (0.0, 1.0, 1.0, "never"), (0.13, 1.0, 1.0, "never"), (0.13, 0.1, 1.0, "never"), (0.13, 0.1, 1.0, "sync"),
    (0.0, 1.0, 0.5, "never"), (0.13, 0.1, 0.5, "sync")])
@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
@pytest.mark.parametrize("workers,shards,server_bw", [(12, 1, 1e9), (12, 2, 1e9), (12, 3, 2e9), (3, 2, 1e10),
                                                     (6, 2, 1e8)])
def test_star_shortcut_equals_general_network(kind, workers, shards, server_bw, sigma, newcomer, late, pushes_equal):
    """The virtual-time star shortcut (with its fallback) changes nothing but speed, with equal or
    weighted sharing (CommModel.share_weight_sigma), with the flows already moving first
    (CommModel.newcomer_share_weight), with late joiners last (sharing.LATE_JOINER_WEIGHT) and with sync
    pushes exempt from the first rule (sharing.PUSHES_SHARE_EQUALLY)."""
    profile = make_profile(layers=8, samples=4, optimizer_s=0.002)
    cluster = Cluster(workers, bandwidth_bps=1e9, latency_s=3e-5, ps_count=shards, ps_bandwidth_bps=server_bw)
    strategy = Strategy(kind=kind, grouping="per-tensor")
    comm = dataclasses.replace(comm_for(cluster), share_weight_sigma=sigma, newcomer_share_weight=newcomer)
    plan = ps_plan(profile, cluster, strategy, comm)
    ends = []
    for star in (True, False):
        sampler = ComputeSampler(profile, cluster, seed=5)
        rows = np.array([sampler.draw_rows() for _ in range(12)]).reshape(12, workers)
        with mock.patch.object(sharing, "PUSHES_SHARE_EQUALLY", pushes_equal), \
                mock.patch.object(sharing, "LATE_JOINER_WEIGHT", late):
            sim = run_ps(profile, cluster, comm, plan, sampler, rows, kind == "ps-sync", 2, star=star)
        # Weighted sharing keeps the shortcut, except on server NICs faster than the workers'.
        equal = sigma == 0.0 and newcomer == 1.0 and late == 1.0
        assert (type(sim.push_net) is StarNetwork) == (star and (equal or server_bw <= 1e9))
        ends.append(np.array(sim.ends))
    np.testing.assert_allclose(ends[0], ends[1], rtol=1e-9)


# Big tensors each followed by two 512-byte ones (a conv weight, then its BatchNorm's weight and
# bias, whose gradients are ready 2 us before the conv's): round-robin over three shards puts every
# big tensor on shard 0, the small ones on shards 1 and 2.
BIG_THEN_TWO_SMALL = Profile(
    model="big-small-small", batch_size=8, step=StepTimes(data_s=0.001, optimizer_s=0.004),
    layers=[Layer(name=f"l{i}", forward_s=0.002, backward_s=0.004,
                  params=[ParamTensor(name=f"l{i}.w", numel=1_000_000, bytes=4_000_000,
                                      grad_ready_s=0.004 * (7 - i) + 0.003),
                          *(ParamTensor(name=f"l{i}.bn_{k}", numel=128, bytes=512,
                                        grad_ready_s=0.004 * (7 - i) + 0.003 - 2e-6) for k in "wb")])
            for i in range(8)])


@pytest.mark.parametrize("pushes_equal,passes_on,three_over_one", [("never", False, (0.0, 0.95)),
                                                                   ("never", True, (0.98, 1.02)),
                                                                   ("sync", True, (0.98, 1.02))])
def test_shards_holding_only_small_tensors_change_nothing_once_sync_pushes_share_equally(pushes_equal, passes_on,
                                                                                         three_over_one):
    """Two more shards that hold 1 kB per layer leave a sync PS step as it was with one shard where
    a worker's pushes share equally (sharing.PUSHES_SHARE_EQUALLY "sync"), or where a push that
    yielded takes its weight back once the pushes it yielded to have gone (links.INCUMBENCY_PASSES_ON).
    With neither, a big push that starts beside a small one to another shard keeps the newcomer's
    weight at shard 0's downlink long after the small one is through, and the step slows (>5% here)."""
    def throughput(shards):
        cluster = Cluster(3, bandwidth_bps=6e8, latency_s=5e-5, ps_count=shards)
        comm = dataclasses.replace(comm_for(cluster), newcomer_share_weight=NEWCOMER_SHARE_WEIGHT)
        with mock.patch.object(sharing, "PUSHES_SHARE_EQUALLY", pushes_equal), \
                mock.patch.object(fine_links, "INCUMBENCY_PASSES_ON", passes_on):
            return simulate_ps(BIG_THEN_TWO_SMALL, cluster, Strategy(kind="ps-sync", grouping="per-tensor"), comm,
                               iterations=30, warmup=10, variability=False).throughput

    low, high = three_over_one
    assert low <= throughput(3) / throughput(1) <= high


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
@pytest.mark.parametrize("workers", [2, 4])
def test_nominal_figures_with_deterministic_compute_do_not_hinge_on_event_order(kind, workers):
    """Nominal figures carry the incumbents-first rule with no measured sigma; replay-like compute
    (no variability, equal tensors) makes messages end and start at the same instants. The
    unmeasured sigma (sgdscale.comm.sharing.UNMEASURED_WEIGHT_SIGMA) keeps the star shortcut and the
    general network, which handle such ties in different orders, on one answer."""
    cluster = Cluster(workers, bandwidth_bps=1e9, latency_s=3e-5, ps_count=1)
    strategy = Strategy(kind=kind, grouping="per-tensor")
    comm = comm_for(cluster)
    assert comm.share_weight_sigma == 0.0 and comm.newcomer_share_weight < 1.0
    plan = ps_plan(EQUAL_TENSORS, cluster, strategy, comm)
    ends = []
    for star in (True, False):
        sampler = ComputeSampler(EQUAL_TENSORS, cluster, seed=5, variability=False)
        rows = np.zeros((30, workers), dtype=int)
        sim = run_ps(EQUAL_TENSORS, cluster, comm, plan, sampler, rows, kind == "ps-sync", 2, star=star)
        assert (type(sim.push_net) is StarNetwork) == star
        ends.append(np.array(sim.ends))
    np.testing.assert_allclose(ends[0], ends[1], rtol=1e-9)


def _classifier_profile(optimizer_s: float) -> Profile:
    """Forward 0.2 s; backward: the 1 MB classifier (ready 0.2 s in), then 0.4 s of a 100 kB body."""
    return Profile(model="two", batch_size=10, step=StepTimes(data_s=0.0, h2d_s=0.0, optimizer_s=optimizer_s), layers=[
        Layer(name="body", forward_s=0.1, backward_s=0.4, params=[ParamTensor(name="w0", numel=25_000, bytes=100_000)]),
        Layer(name="fc", forward_s=0.1, backward_s=0.2, params=[ParamTensor(name="w1", numel=250_000, bytes=1_000_000)]),
    ])


def _steps(profile: Profile, kind: str, posted: bool) -> list[float]:
    cluster = Cluster(1, 8 / 3e-7, ps_count=1, latency_s=0.0)  # 0.3 s per MB
    strategy = Strategy(kind=kind, grouping="per-layer")
    comm = CommModel.from_link(8 / 3e-7, 0.0)
    plan = ps_plan(profile, cluster, strategy, comm)
    sampler = ComputeSampler(profile, cluster, seed=0, variability=False)
    rows = np.array([sampler.draw_rows() for _ in range(8)]).reshape(8, 1)
    run = run_ps(profile, cluster, comm, plan, sampler, rows, kind == "ps-sync", 2, posted_order=posted)
    return list(np.diff(run.ends[0][2:]))


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_posted_order_sends_the_replies_in_hand_in_forward_order(kind):
    """The classifier's push leaves at 0.4 (0.3 s), the body's at 0.8 (0.03 s); the notice follows it
    at 0.83, with both updates done. In update order the classifier's reply goes first (0.83-1.13),
    the body's after (to 1.16), and forward starts at 1.16: a 1.16 s step. In posted order
    (`fine.ps.in_notice_order`) the body's goes first (0.83-0.86), its forward runs 0.86-0.96 while
    the classifier's arrives (1.16), whose forward ends at 1.26: backward ends 0.6 s later, a 1.06 s step."""
    profile = _classifier_profile(0.0)
    assert _steps(profile, kind, posted=False) == pytest.approx([1.16] * 5)
    assert _steps(profile, kind, posted=True) == pytest.approx([1.06] * 5)


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_posted_order_leaves_a_reply_the_shard_had_not_begun_behind(kind):
    """With 1.1 s of optimizer (1 s for the classifier's update, 0.1 s for the body's), the shard is
    still on the classifier when the notice comes: the body's update has not begun, so its reply
    follows the classifier's in both orders, and forward waits for both alike."""
    profile = _classifier_profile(1.1)
    assert _steps(profile, kind, posted=True) == pytest.approx(_steps(profile, kind, posted=False))
    assert _steps(profile, kind, posted=False)[0] > 1.5  # the slow shard binds


def test_a_busy_shard_shares_its_uplink_only_where_its_cpu_paces_the_writes():
    """The rule (fine.ps.cpu_paces_shard_writes) applies where moving bytes at line rate both ways
    takes at least CPU_PACED_TRANSPORT_SHARE of the shard's CPU: at 100 MB/s, 2.5 ns of the shard's
    wall time per byte makes 0.5 exactly; nominal figures (no CPU cost) never apply it."""
    assert fine_ps.cpu_paces_shard_writes(2.5e-9, 1e8)
    assert not fine_ps.cpu_paces_shard_writes(2.4e-9, 1e8)
    assert not fine_ps.cpu_paces_shard_writes(0.0, 1e8)
    with mock.patch.object(fine_ps, "BUSY_SHARD_SHARES_EQUALLY", False):
        assert not fine_ps.cpu_paces_shard_writes(1e-6, 1e8)
    profile = _classifier_profile(0.1)
    cluster = Cluster(2, 8e8, ps_count=1, latency_s=0.0)  # 100 MB/s links
    strategy = Strategy(kind="ps-async", grouping="per-layer")
    sampler = ComputeSampler(profile, cluster, seed=0, variability=False)
    rows = np.array([sampler.draw_rows() for _ in range(4)]).reshape(4, 2)
    for cpu_s_per_byte, applies in ((3e-9, True), (1e-9, False)):
        comm = dataclasses.replace(CommModel.from_link(8e8, 0.0), server_cpu_s_per_byte=cpu_s_per_byte)
        plan = ps_plan(profile, cluster, strategy, comm)
        run = run_ps(profile, cluster, comm, plan, sampler, rows, False, 1)
        assert (run.pull_net.sender_busy_until is not None) == applies


@pytest.mark.parametrize("arrival, receive, send, step_s", [(False, False, False, 0.05), (True, False, False, 0.05),
                                                           (False, True, False, 0.045), (False, True, True, 0.04)])
def test_transport_cpu_in_series_or_overlapping_the_transfer(arrival, receive, send, step_s):
    """One worker, async PS, one 1 MB tensor over 100 MB/s links (10 ms each way), a shard that
    spends 5 ns of wall time per byte moved (5 ms to receive it, 5 ms to send the reply): in series
    the step is 10 + 10 ms compute + 10 ms push + 10 ms of transport CPU + 10 ms pull, and the same
    with the receive charged on arrival (one copy: its last); the receive overlapping the push saves
    its 5 ms, the send overlapping the pull saves the other 5 ms (fine_ps.RECEIVE_ON_ARRIVAL,
    RECEIVE_OVERLAPS_TRANSFER, SEND_OVERLAPS_TRANSFER)."""
    layers = [Layer(name="b", forward_s=0.01, backward_s=0.01, params=[ParamTensor(name="b.w", numel=250_000, bytes=1_000_000)])]
    profile = Profile(model="one", batch_size=4, layers=layers, step=StepTimes())
    cluster = Cluster(1, bandwidth_bps=8e8, latency_s=0.0, ps_count=1)
    comm = dataclasses.replace(CommModel.from_link(8e8, 0.0), server_cpu_s_per_byte=5e-9)
    with mock.patch.multiple(fine_ps, RECEIVE_ON_ARRIVAL=arrival, RECEIVE_OVERLAPS_TRANSFER=receive,
                             SEND_OVERLAPS_TRANSFER=send):
        out = simulate_ps(profile, cluster, Strategy(kind="ps-async"), comm, iterations=5, warmup=2,
                          variability=False)
    np.testing.assert_allclose(out.iteration_s, step_s, rtol=1e-6)


def test_a_send_lead_lets_the_first_workers_push_while_the_last_still_receive(monkeypatch):
    """A sync shard posts its next step's receives once its replies' sends have completed, which gloo
    does `CommModel.send_lead_s` before their bytes arrive (measured by netbench; 0: on arrival, the
    rule before). Three workers pull four 1 MB tensors each through one shard's link: with a lead, the
    workers that have their parameters first push their next step while the shard still replies to
    the others, and steps are shorter. Modelled, not used (`fine_ps.POSTS_AHEAD_BY_SEND_LEAD`, set 84).
    The explicit DAG (`ps_sync_dag`) spells out the rule without a lead only."""
    monkeypatch.setattr(fine_ps, "POSTS_AHEAD_BY_SEND_LEAD", True)
    profile = Profile(model="big tensors", batch_size=32, step=StepTimes(data_s=0.001, optimizer_s=0.002),
                      layers=[Layer(name=f"l{i}", forward_s=0.001, backward_s=0.003,
                                    params=[ParamTensor(name=f"l{i}.w", numel=262_144, bytes=1_048_576)])
                              for i in range(4)])
    cluster = Cluster(3, bandwidth_bps=790e6, latency_s=1e-4)

    def throughput(lead_s):
        comm = dataclasses.replace(comm_for(cluster), share_weight_sigma=0.2, send_lead_s=lead_s)
        return simulate_ps(profile, cluster, Strategy("ps-sync"), comm, iterations=40, warmup=5, variability=False,
                           seed=3).throughput

    on_arrival, early = throughput(0.0), throughput(0.04)
    assert early > 1.04 * on_arrival, (on_arrival, early)  # 447 -> 479 samples/s
    assert throughput(1e-6) == pytest.approx(on_arrival, rel=0.01)  # a lead of nothing changes next to nothing
    monkeypatch.setattr(fine_ps, "POSTS_AHEAD_BY_SEND_LEAD", False)
    assert throughput(0.04) == on_arrival  # as the model stands: a file's lead is recorded, not used
