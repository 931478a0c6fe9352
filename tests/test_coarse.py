"""Coarse-grained model: exact E[max], phase arithmetic, bounds and monotonicity."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sgdscale.cluster import Cluster
from sgdscale.coarse import solve
from sgdscale.coarse.heuristics import (
    backward_exposed_exact_s,
    backward_exposed_s,
    flow_shop_s,
    late_share,
    sync_ps_end_s,
    sync_pull_end_s,
)
from sgdscale.coarse.phases import max_distribution, shard_bytes
from sgdscale.comm.cost import CommModel
from sgdscale.profile import IterationStats, Layer, ParamTensor, Profile, StepTimes, load_profile
from sgdscale.strategy import Strategy

MB = 1_000_000


def make_profile(sizes_mb=(1, 4, 16, 2), forward_s=0.01, backward_s=0.02, optimizer_s=0.004, data_s=0.002,
                 samples=None, iteration_samples=None, batch=32) -> Profile:
    layers = []
    rng = np.random.default_rng(1)
    for i, size in enumerate(sizes_mb):
        params = [ParamTensor(name=f"l{i}.w", numel=int(size * MB) // 4, bytes=int(size * MB))] if size else []
        extra = {}
        if samples:
            extra = {"forward_samples_s": list(forward_s * rng.lognormal(0, 0.2, samples)),
                     "backward_samples_s": list(backward_s * rng.lognormal(0, 0.2, samples))}
        layers.append(Layer(name=f"l{i}", forward_s=forward_s, backward_s=backward_s, params=params, **extra))
    stats = None
    if iteration_samples is not None:
        arr = np.asarray(iteration_samples, dtype=float)
        stats = IterationStats(mean=float(arr.mean()), p50=float(np.median(arr)), p95=float(np.percentile(arr, 95)),
                               samples=list(arr))
    return Profile(model="toy", batch_size=batch, layers=layers,
                   step=StepTimes(data_s=data_s, optimizer_s=optimizer_s), iteration_s=stats)


def comm_for(bandwidth_bps=10e9, latency_s=20e-6):
    return CommModel.from_link(bandwidth_bps, latency_s)


# ----------------------------------------------------------------------------- E[max]

def brute_force_expected_max(samples, scales):
    """Enumerate every combination of samples (one per worker), each equally likely."""
    total = 0.0
    combos = list(itertools.product(samples, repeat=len(scales)))
    for combo in combos:
        total += max(s * x for s, x in zip(scales, combo))
    return total / len(combos)


@pytest.mark.parametrize("samples, scales", [
    ([1.0, 2.0, 3.0], [1, 1, 1]),
    ([0.5, 0.5, 2.0, 1.0], [1, 1]),  # ties
    ([1.0, 4.0], [1, 1, 1, 1, 1]),
    ([1.0, 2.0, 3.0], [1.0, 1.5, 1.0]),  # heterogeneous workers
    ([0.3, 0.1, 0.7], [2.0, 0.5]),
])
def test_expected_max_equals_brute_force(samples, scales):
    dist = max_distribution(np.array(samples), scales)
    assert dist.probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert dist.mean == pytest.approx(brute_force_expected_max(samples, scales), rel=1e-12)


def test_expected_max_formula_and_monte_carlo():
    rng = np.random.default_rng(0)
    samples = rng.lognormal(0, 0.3, 40)
    n = 16
    x = np.sort(samples)
    f = np.arange(len(x) + 1) / len(x)
    formula = float(np.sum(x * (f[1:] ** n - f[:-1] ** n)))
    dist = max_distribution(samples, [1.0] * n)
    assert dist.mean == pytest.approx(formula, rel=1e-12)
    draws = rng.choice(samples, size=(200_000, n)).max(axis=1)
    assert dist.mean == pytest.approx(draws.mean(), rel=0.01)
    # Sampling from the max distribution reproduces its mean too (seeded, loose).
    assert dist.sample(100_000, rng).mean() == pytest.approx(dist.mean, rel=0.01)


def test_expected_max_grows_with_workers():
    samples = np.random.default_rng(3).lognormal(0, 0.3, 30)
    means = [max_distribution(samples, [1.0] * n).mean for n in (1, 2, 4, 8, 64)]
    assert means[0] == pytest.approx(samples.mean())
    assert all(b >= a for a, b in zip(means, means[1:]))
    assert means[-1] <= samples.max() + 1e-12


# ----------------------------------------------------------------------------- sync all-reduce

@pytest.mark.parametrize("variability", [False, True])
def test_allreduce_one_worker_equals_profile_step(variability):
    profile = make_profile(samples=20 if variability else None)
    outcome = solve(profile, Cluster(1), Strategy("allreduce"), comm_for(), variability=variability)
    if variability:
        # One worker: E[max] of one = the mean of the sampled rows (data + forward + backward) + optimizer.
        rows = sum(np.array(l.forward_samples_s[:20]) + np.array(l.backward_samples_s[:20]) for l in profile.layers)
        expected = float(rows.mean()) + profile.step.data_s + profile.step.optimizer_s
    else:
        expected = profile.compute_s
    assert profile.batch_size / outcome.throughput == pytest.approx(expected, rel=1e-12)
    assert outcome.breakdown.exposed_comm_s == 0.0


@pytest.mark.parametrize("workers", [2, 3, 8, 64])
@pytest.mark.parametrize("heuristics", [False, True])
def test_deterministic_single_group_is_forward_backward_collective(workers, heuristics):
    profile = make_profile()
    comm = comm_for(1e9)
    outcome = solve(profile, Cluster(workers, bandwidth_bps=1e9), Strategy("allreduce", grouping="single"), comm,
                    variability=False, heuristics=heuristics)
    expected = profile.compute_s + comm.allreduce_s(profile.gradient_bytes, workers)
    step = profile.batch_size * workers / outcome.throughput
    assert step == pytest.approx(expected, rel=1e-12)
    assert np.allclose(outcome.iteration_s, expected, rtol=1e-12)
    assert outcome.breakdown.exposed_comm_s == pytest.approx(comm.allreduce_s(profile.gradient_bytes, workers))
    assert outcome.breakdown.wait_s == pytest.approx(0.0, abs=1e-12)


def test_no_heuristics_sums_every_group():
    profile = make_profile()
    comm = comm_for(1e9)
    outcome = solve(profile, Cluster(4, bandwidth_bps=1e9), Strategy("allreduce", grouping="per-layer"), comm,
                    variability=False, heuristics=False)
    groups = sum(comm.allreduce_s(size * MB, 4) for size in (1, 4, 16, 2))
    assert outcome.breakdown.exposed_comm_s == pytest.approx(groups, rel=1e-12)


def test_heuristic_lower_bounds_wfbp_and_is_exact_at_extremes():
    ready = [0.02, 0.04, 0.06, 0.08]
    for comm_s in ([0.001] * 4, [0.05, 0.05, 0.05, 0.05], [0.001, 0.05, 0.001, 0.002]):
        heur = backward_exposed_s(comm_s, ready, 0.08)
        exact = backward_exposed_exact_s(comm_s, ready, 0.08)
        assert heur <= exact + 1e-15
    # compute-bound: only the last group shows; communication-bound: everything after r_1
    assert backward_exposed_s([0.001] * 4, ready, 0.08) == pytest.approx(0.001)
    assert backward_exposed_s([0.05] * 4, ready, 0.08) == pytest.approx(0.02 + 0.2 - 0.08)
    assert backward_exposed_exact_s([0.05] * 4, ready, 0.08) == pytest.approx(0.02 + 0.2 - 0.08)


def test_heuristics_only_help_and_straggler_wait_appears():
    profile = make_profile(samples=30)
    cluster = Cluster(16, bandwidth_bps=10e9)
    strat = Strategy("allreduce", grouping="per-layer")
    with_h = solve(profile, cluster, strat, comm_for(), seed=1)
    without = solve(profile, cluster, strat, comm_for(), seed=1, heuristics=False)
    assert with_h.throughput >= without.throughput
    assert with_h.breakdown.wait_s > 0  # the slowest of 16 workers is slower than the mean
    assert len(with_h.iteration_s) == 100
    again = solve(profile, cluster, strat, comm_for(), seed=1)
    assert np.array_equal(again.iteration_s, with_h.iteration_s)  # seeded


def test_whole_step_samples_feed_variability():
    profile = make_profile(iteration_samples=[0.1, 0.12, 0.2, 0.11])
    det = solve(profile, Cluster(8), Strategy("allreduce"), comm_for(), variability=False)
    var = solve(profile, Cluster(8), Strategy("allreduce"), comm_for(), variability=True)
    assert var.throughput < det.throughput


def test_heterogeneous_worker_slows_sync_step():
    profile = make_profile()
    fast = solve(profile, Cluster(4), Strategy("allreduce"), comm_for(), variability=False)
    slow = solve(profile, Cluster(4, compute_scale=(1, 1, 1, 2.0)), Strategy("allreduce"), comm_for(),
                 variability=False)
    assert slow.throughput < fast.throughput
    assert "straggler" in slow.bottleneck


def test_slow_link_slows_allreduce():
    profile = make_profile(sizes_mb=(40, 40))
    base = solve(profile, Cluster(4, bandwidth_bps=1e9), Strategy("allreduce"), comm_for(1e9), variability=False)
    slow = solve(profile, Cluster(4, bandwidth_bps=1e9, slow_links=((2, 0.5e9),)), Strategy("allreduce"),
                 comm_for(1e9), variability=False)
    assert slow.throughput < base.throughput


# ----------------------------------------------------------------------------- parameter server

def test_ps_sync_phase_arithmetic():
    profile = make_profile(sizes_mb=(10, 20, 30, 40), optimizer_s=0.01)
    workers, bps = 4, 1e9
    comm = comm_for(bps, 50e-6)
    outcome = solve(profile, Cluster(workers, bandwidth_bps=bps, ps_count=2), Strategy("ps-sync"), comm,
                    variability=False, heuristics=False)
    shards = shard_bytes(profile, Strategy("ps-sync"), 2)  # round-robin: 40 MB and 60 MB
    assert list(shards) == [40 * MB, 60 * MB]
    push = 50e-6 + workers * 60 * MB * 8 / bps
    update = 0.01 * 0.6
    expected = profile.step.data_s + profile.forward_s + profile.backward_s + 2 * push + update
    assert profile.batch_size * workers / outcome.throughput == pytest.approx(expected, rel=1e-12)
    assert outcome.utilization["server 1 NIC in"] > outcome.utilization["server 0 NIC in"]
    assert "server 1 NIC" in outcome.bottleneck


def test_sync_pull_tail_is_the_late_workers_share():
    """One message: every reply waits for it; early workers' replies then go first, late workers' after
    their push. All of the pull follows a lone worker; S / (S + 1) of the workers are late with S shards."""
    assert late_share(1, 1) == 1.0 and late_share(4, 1) == 0.5 and late_share(8, 4) == pytest.approx(0.8)
    # messages applied at 1 and 2 s (2 and 6 s of replies), late workers' push done at 3 s: early
    # replies 1-2 s and 2-5 s (half each), then the late workers' 4 s: 9 s
    assert sync_pull_end_s(3.0, [1.0, 2.0], [2.0, 6.0], 0.5) == pytest.approx(9.0)
    # all late: both messages' replies after the push, 8 s of them
    assert sync_pull_end_s(3.0, [1.0, 2.0], [2.0, 6.0], 1.0) == pytest.approx(11.0)
    # nobody late and the big message applied first: its replies overlap the push phase
    assert sync_pull_end_s(3.0, [1.0, 2.0], [6.0, 2.0], 0.0) == pytest.approx(9.0)
    assert sync_pull_end_s(1.0, [1.0], [0.5], 0.5, own_pull_s=3.0) == 4.0  # the worker's own NIC binds


def test_flow_shop_is_the_fifo_recurrence():
    """done[k][g] = max(done[k][g-1], done[k-1][g]) + s_k[g]; a big early message holds back the rest."""
    pushed, updated = flow_shop_s([0.0, 0.1, 0.2], [[1.0, 0.1, 0.1], [0.5, 0.0, 0.0]])
    assert pushed == pytest.approx([1.0, 1.1, 1.2])
    assert updated == pytest.approx([1.5, 1.5, 1.5])


def test_sync_ps_end_in_one_round_is_the_one_step_form():
    """Without the early workers' lead (one round) the two-class end is the exact flow shop of the
    pushes and updates followed by the replies in the order the shard applies messages."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        g = int(rng.integers(1, 6))
        ready, push, update, pull = (rng.uniform(0.0, 2.0, g) for _ in range(4))
        ready.sort()
        late, own = float(rng.uniform(0.0, 1.0)), float(rng.uniform(0.0, 1.0))
        pushed, updated = flow_shop_s(ready, [push, update])
        one_step = max(updated[-1], sync_pull_end_s(pushed[-1], updated, pull, late, own))
        assert sync_ps_end_s(ready, push, update, pull, late, own, rounds=1) == pytest.approx(one_step)


def test_sync_ps_end_lets_the_early_workers_push_their_next_step_first():
    """Hand-worked: two messages ready at 1 and 2 s, 1 s of pushes and of replies each (all copies),
    no update, half of the workers late. One step: pushes end at 3 s, the late replies follow, end
    4.5 s, and the early workers had their last reply at 3.5 s: 1 s ahead. With that lead their next
    gradients are ready at 0 and 1 s: pushes end at 2.5 s, replies at 4.0 s, the lead stays 1 s."""
    args = ([1.0, 2.0], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0], 0.5)
    assert sync_ps_end_s(*args, rounds=1) == pytest.approx(4.5)
    assert sync_ps_end_s(*args) == pytest.approx(4.0)
    # every worker late: no class runs ahead, the one-step form stands
    assert sync_ps_end_s([1.0, 2.0], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0], 1.0) == pytest.approx(
        sync_ps_end_s([1.0, 2.0], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0], 1.0, rounds=1))


def test_coarse_sync_ps_pull_follows_the_largest_late_message():
    """alexnet's 151 MB fc gradient is summed only near the end of the push phase, so nearly all of the
    pull follows it (held-out set 14: a fixed half of it made coarse 23-28% too fast)."""
    profile = load_profile("alexnet")
    cluster = Cluster(2, bandwidth_bps=1e9)
    strategy = Strategy("ps-sync")
    out = solve(profile, cluster, strategy, comm_for(1e9), variability=False)
    pull_s = 2 * profile.gradient_bytes * 8 / 1e9
    pushed_s = profile.step.data_s + profile.forward_s + pull_s  # the push phase starts in backward
    assert cluster.workers * profile.batch_size / out.throughput > pushed_s + 0.75 * pull_s


@pytest.mark.parametrize("model, workers, bandwidth_bps, low, high", [
    ("resnet50", 8, 1e9, -0.07, 0.07), ("mobilenet_v2", 3, 10e9, -0.07, 0.07), ("alexnet", 2, 1e9, -0.07, 0.07),
    ("bert", 4, 1e9, -0.05, 0.05), ("gpt2", 3, 1e9, -0.05, 0.05), ("gpt2", 16, 10e9, -0.08, 0.0),
    ("gpt2", 16, 1e9, -0.13, -0.05)])
def test_coarse_sync_ps_follows_the_fine_simulation(model, workers, bandwidth_bps, low, high):
    """Coarse sync PS (replies in the order the shard applies messages, the late workers' after their
    push) lands within 7% of fine: a whole pull after the push phase made it 13-20% slower, a fixed
    late half of the pull 25% faster on alexnet. Where the largest gradient is ready last (the
    embeddings of bert and gpt2) the one-step form was 7-15% slower than fine; with the early workers'
    lead into the next step (`heuristics.sync_ps_end_s`) bert and gpt2 with 3-4 workers are within
    3% (were -7% and -8%), gpt2 with 16 workers at 10 Gbit/s -6% (was -15%); gpt2 with 16 workers at
    1 Gbit/s stays 11% slower (was 13%): fine overlaps more than two classes of workers do there
    (benchmarks/coarse_vs_fine_syncps.py)."""
    import dataclasses

    from sgdscale.fine.ps import simulate_ps

    profile = load_profile(model)
    comm = dataclasses.replace(CommModel.from_link(bandwidth_bps, 50e-6), share_weight_sigma=0.2)
    cluster = Cluster(workers, bandwidth_bps, 50e-6, 1)
    fine = simulate_ps(profile, cluster, Strategy("ps-sync"), comm, iterations=60, warmup=10, variability=False)
    coarse = solve(profile, cluster, Strategy("ps-sync"), comm, variability=False)
    assert low <= coarse.throughput / fine.throughput - 1 <= high


@pytest.mark.parametrize("model, workers", [("resnet18", 3), ("resnet50", 4), ("mobilenet_v2", 4),
                                             ("densenet121", 3)])
def test_coarse_counts_late_workers_over_the_shards_that_hold_bytes(model, workers):
    """Round-robin over three shards puts nearly every byte of these CNNs on one shard (their tensors come
    in threes: a convolution and its BatchNorm pair). A worker's link then carries little more than that
    shard's bytes, as with one shard, so its notice is late there as often as with one shard: coarse
    counts the shards as the worker's bytes over the busiest shard's (`LATE_SHARE_SHARDS = "bytes"`).
    Counting every shard (S / (S + 1) = 3/4 late) made coarse 13-19% slower than fine here and 14% too
    slow on sets 68 and 75 (benchmarks/coarse_late_share_shards.py); with the bytes 1-7%."""
    import dataclasses

    import sgdscale.coarse.models as coarse_models
    from sgdscale.fine.ps import simulate_ps

    profile = load_profile(model)
    strategy = Strategy("ps-sync")
    comm = dataclasses.replace(CommModel.from_link(1e9, 50e-6), share_weight_sigma=0.2)
    cluster = Cluster(workers, 1e9, 50e-6, 3)
    costs = coarse_models._ServerCosts(profile, cluster, strategy, comm)
    assert costs.bytes.max() > 0.98 * costs.total_bytes
    assert coarse_models._late_share_shards(costs) == pytest.approx(1.0, abs=0.02)
    fine = simulate_ps(profile, cluster, strategy, comm, iterations=60, warmup=10, variability=False)
    coarse = solve(profile, cluster, strategy, comm, variability=False)
    assert abs(coarse.throughput / fine.throughput - 1) <= 0.08
    balanced = coarse_models._ServerCosts(load_profile("resnet50"), Cluster(4, 1e9, 50e-6, 2), strategy, comm)
    assert coarse_models._late_share_shards(balanced) == pytest.approx(2.0, rel=0.03)  # 51.7 and 50.5 MB


@pytest.mark.parametrize("workers, bandwidth_bps", [(2, 1e9), (3, 1e9), (5, 3e8), (8, 10e9)])
def test_coarse_sync_ps_shard_is_a_pipeline_of_its_own(workers, bandwidth_bps, monkeypatch):
    """A shard's pipeline carries only its own messages: with three shards, shard 0 holding the 8 MB
    gradient that is ready last, the step is no shorter than with that shard alone (one shard, the
    other shards' tensors gone); one pipeline costing each message its share of the busiest shard's
    time hid that gradient's pushes behind backward (bert's embedding: +18% and +21% on held-out sets
    28 and 70). A model whose every byte sits on one of three shards is predicted as with one shard
    (densenet121's round-robin placement: 31.5 of 31.9 MB on one; set 68 -14.0% with S / (S + 1) late).
    The variant `benchmarks/coarse_shard_pipelines.py` measures (held out on set 71, not kept); the one
    pipeline as shipped fails the first check."""
    import sgdscale.coarse.models as coarse_models

    monkeypatch.setattr(coarse_models, "SHARD_PIPELINES", True)
    comm = comm_for(bandwidth_bps, 50e-6)
    strategy = Strategy("ps-sync")

    def step_s(sizes_mb, shards):  # the optimizer's time is 1 ms per 2 MB of parameters
        profile = make_profile(sizes_mb=sizes_mb, optimizer_s=0.0005 * sum(sizes_mb))
        out = solve(profile, Cluster(workers, bandwidth_bps=bandwidth_bps, ps_count=shards), strategy, comm,
                    variability=False)
        return workers * profile.batch_size / out.throughput

    assert step_s((8, 1, 1, 1, 1, 1), 3) >= step_s((8, 0, 0, 1, 0, 0), 1) * (1 - 1e-9)
    assert step_s((8, 0, 0, 0), 3) == pytest.approx(step_s((8, 0, 0, 0), 1), rel=1e-9)


def test_size_placement_balances_shards():
    profile = make_profile(sizes_mb=(10, 20, 30, 40))
    assert sorted(shard_bytes(profile, Strategy("ps-sync", placement="size"), 2)) == [50 * MB, 50 * MB]


def test_ps_async_one_worker_has_no_queueing():
    profile = make_profile(sizes_mb=(10, 20), optimizer_s=0.01)
    comm = comm_for(1e9, 0.0)
    out = solve(profile, Cluster(1, bandwidth_bps=1e9), Strategy("ps-async"), comm, variability=False,
                heuristics=False)
    transfer = 30 * MB * 8 / 1e9
    expected = profile.step.data_s + profile.forward_s + profile.backward_s + 2 * transfer + 0.01
    assert profile.batch_size / out.throughput == pytest.approx(expected, rel=1e-12)


def test_ps_async_worker_waits_at_its_shards_together():
    """With two shards a lone worker's cycle holds its busiest shard's push, update and reply once,
    not every shard's one after another (the runtime sends to all shards at once); its own NIC,
    four times faster here, does not bind."""
    profile = make_profile(sizes_mb=(6, 6, 6, 6), optimizer_s=0.01)
    comm = comm_for(4e9, 0.0)
    cluster = Cluster(1, bandwidth_bps=4e9, ps_count=2, ps_bandwidth_bps=1e9)
    out = solve(profile, cluster, Strategy("ps-async"), comm, variability=False, heuristics=False)
    busiest = 12 * MB * 8 / 1e9  # round-robin: 12 MB on each shard
    expected = profile.step.data_s + profile.forward_s + profile.backward_s + 2 * busiest + 0.01 / 2
    assert profile.batch_size / out.throughput == pytest.approx(expected, rel=1e-12)
    assert out.utilization["server 0 NIC in"] == pytest.approx(out.utilization["server 1 NIC in"], rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(workers=st.integers(1, 64), bandwidth=st.floats(1e8, 1e11), heuristics=st.booleans())
def test_ps_async_balanced_shards_never_slow_training(workers, bandwidth, heuristics):
    profile = make_profile(sizes_mb=(6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6), optimizer_s=0.006)
    out = [solve(profile, Cluster(workers, bandwidth_bps=bandwidth, ps_count=shards), Strategy("ps-async"),
                 comm_for(bandwidth), variability=False, heuristics=heuristics).throughput for shards in (1, 2, 3, 4)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(out, out[1:]))


@settings(max_examples=40, deadline=None)
@given(workers=st.integers(1, 200), shards=st.integers(1, 4), bandwidth=st.floats(1e8, 1e11),
       server_factor=st.floats(0.5, 4.0), heuristics=st.booleans())
def test_ps_async_never_beats_bottleneck_bound(workers, shards, bandwidth, server_factor, heuristics):
    profile = make_profile(sizes_mb=(5, 0, 12, 3), optimizer_s=0.003)
    cluster = Cluster(workers, bandwidth_bps=bandwidth, ps_count=shards, ps_bandwidth_bps=bandwidth * server_factor)
    comm = comm_for(bandwidth)
    out = solve(profile, cluster, Strategy("ps-async"), comm, variability=False, heuristics=heuristics)
    shard = shard_bytes(profile, Strategy("ps-async"), shards)
    beta_server = 8 / (bandwidth * server_factor)
    d_max = max(float(shard.max()) * beta_server, profile.step.optimizer_s * float(shard.max()) / profile.gradient_bytes)
    steps_per_s = out.throughput / profile.batch_size
    assert steps_per_s <= 1 / d_max * (1 + 1e-9)
    assert steps_per_s <= workers / (profile.forward_s + profile.backward_s + profile.step.data_s) * (1 + 1e-9)
    assert all(0 <= u <= 1 + 1e-9 for u in out.utilization.values())


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["allreduce", "ps-sync", "ps-async"]), workers=st.integers(1, 64),
       low=st.floats(1e8, 5e10), factor=st.floats(1.0, 10.0), heuristics=st.booleans(),
       grouping=st.sampled_from(["per-layer", "buckets", "single", "per-tensor"]))
def test_throughput_non_decreasing_in_bandwidth(kind, workers, low, factor, heuristics, grouping):
    profile = make_profile(sizes_mb=(1, 4, 16, 2, 0, 8))
    strategy = Strategy(kind, grouping=grouping)
    results = []
    for bps in (low, low * factor):
        out = solve(profile, Cluster(workers, bandwidth_bps=bps, ps_count=2), strategy, comm_for(bps),
                    variability=False, heuristics=heuristics)
        results.append(out.throughput)
    assert results[1] >= results[0] * (1 - 1e-9)


def test_async_saturated_server_named():
    profile = make_profile(sizes_mb=(50, 50))
    out = solve(profile, Cluster(64, bandwidth_bps=1e9), Strategy("ps-async"), comm_for(1e9))
    assert out.bottleneck.startswith("communication: server 0 NIC")
    assert "add parameter servers" in out.bottleneck
    assert out.utilization["server 0 NIC in"] > 0.95


def test_async_heuristic_not_slower_and_consistent():
    profile = make_profile(sizes_mb=(8, 8, 8, 8))
    for n in (1, 4, 16):
        cluster = Cluster(n, bandwidth_bps=5e9)
        h = solve(profile, cluster, Strategy("ps-async"), comm_for(5e9), variability=False)
        plain = solve(profile, cluster, Strategy("ps-async"), comm_for(5e9), variability=False, heuristics=False)
        assert h.throughput >= plain.throughput * (1 - 1e-9)
        cycle = n * profile.batch_size / h.throughput
        assert np.allclose(h.iteration_s, cycle)
        b = h.breakdown
        assert b.compute_s + b.exposed_comm_s + b.wait_s == pytest.approx(cycle, rel=1e-9)


def test_profile_without_parameters():
    profile = make_profile(sizes_mb=(0, 0))
    for kind in ("allreduce", "ps-sync", "ps-async"):
        out = solve(profile, Cluster(8), Strategy(kind), comm_for(), variability=False)
        assert out.throughput == pytest.approx(8 * profile.batch_size / (profile.step.data_s + profile.forward_s
                                                                           + profile.backward_s
                                                                           + (profile.step.optimizer_s
                                                                              if kind == "allreduce" else 0)))


# ----------------------------------------------------------------------------- against the fine predictor

@pytest.mark.parametrize("workers", [1, 2, 5, 16])
@pytest.mark.parametrize("compute_scale", [None, "mixed"])
def test_fine_and_coarse_agree_when_nothing_to_overlap(workers, compute_scale):
    """single grouping (one all-reduce after backward), no variability: both are the same sum."""
    from sgdscale.fine import simulate

    profile = make_profile(sizes_mb=(3, 0, 7, 1))
    scales = tuple(1.0 + 0.25 * (i % 3) for i in range(workers)) if compute_scale else ()
    cluster = Cluster(workers, bandwidth_bps=2e9, latency_s=30e-6, compute_scale=scales)
    strategy = Strategy("allreduce", grouping="single")
    comm = comm_for(2e9, 30e-6)
    fine = simulate(profile, cluster, strategy, comm, iterations=5, warmup=2, variability=False)
    for heuristics in (False, True):
        coarse = solve(profile, cluster, strategy, comm, variability=False, heuristics=heuristics)
        assert coarse.throughput == pytest.approx(fine.throughput, rel=1e-9)


def test_fine_and_coarse_close_with_variability():
    """With stragglers the exact E[max] and the simulated mean of maxima agree within sampling noise."""
    from sgdscale.fine import simulate

    profile = make_profile(samples=40)
    cluster = Cluster(8, bandwidth_bps=10e9)
    strategy = Strategy("allreduce", grouping="single")
    fine = simulate(profile, cluster, strategy, comm_for(), iterations=400, warmup=5)
    coarse = solve(profile, cluster, strategy, comm_for())
    assert coarse.throughput == pytest.approx(fine.throughput, rel=0.03)


def test_pipeline_bound_special_cases():
    from sgdscale.coarse.heuristics import pipeline_end_s

    ready = [0.02, 0.05, 0.08]
    comm_s = [0.03, 0.01, 0.02]
    # one stage: the backward-overlap formula (measured from backward start, B = 0.08)
    assert pipeline_end_s(ready[0], ready[-1], [comm_s]) - 0.08 == pytest.approx(
        backward_exposed_s(comm_s, ready, 0.08))
    # one message: the plain sum of its stages
    assert pipeline_end_s(1.0, 1.0, [[0.2], [0.1], [0.3]]) == pytest.approx(1.6)
    # full-duplex push and pull of many small messages cost about max(push, pull), not the sum
    end = pipeline_end_s(0.0, 0.0, [[0.01] * 100, [0.0] * 100, [0.01] * 100])
    assert end == pytest.approx(1.01)
    assert pipeline_end_s(0.0, 0.0, [[], []]) == 0.0


def test_pipeline_does_not_split_one_big_message():
    from sgdscale.coarse.heuristics import pipeline_end_s

    # three messages, the middle one dominant: its push and pull cannot overlap each other
    stages = [[0.01, 1.0, 0.01], [0.0, 0.0, 0.0], [0.01, 1.0, 0.01]]
    assert pipeline_end_s(0.0, 0.2, stages, [0.0, 0.1, 0.2]) >= 0.1 + 2.0


@pytest.mark.parametrize("scales", [None, (1.0, 1.0, 1.5, 2.0)])
def test_head_max_means_match_head_max_per_group(scales):
    """The one-table E[max] of every group's ready time equals `head_max` group by group, for
    identical workers (sorted columns) and for workers of different speeds (`max_distribution`)."""
    from sgdscale.coarse.phases import head_max, head_max_means, pre_barrier_max
    from sgdscale.grouping import group_gradients

    profile = make_profile(samples=20)
    cluster = Cluster(4, bandwidth_bps=1e9, compute_scale=scales)
    groups = group_gradients(profile, Strategy("allreduce", grouping="per-tensor"), None, 4)
    heads, pre = head_max_means(profile, cluster, True, groups)
    assert heads == pytest.approx([head_max(profile, cluster, True, g).mean for g in groups], rel=1e-12)
    assert pre == pytest.approx(pre_barrier_max(profile, cluster, True).mean, rel=1e-12)
