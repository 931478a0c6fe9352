"""Fine-grained sync all-reduce fast path: exact against the WFBP recurrence and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.fine import simulate
from sgdscale.fine.allreduce import simulate_allreduce
from sgdscale.variability import ComputeSampler
from sgdscale.grouping import group_gradients
from sgdscale.profile import IterationStats, Layer, ParamTensor, Profile, StepTimes
from sgdscale.strategy import Strategy
from sgdscale.wfbp import wfbp_iteration_s

HYPOTHESIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def profiles(draw, samples: bool = False):
    """Random profiles: 1-25 layers, some without parameters, optional per-layer samples."""
    count = draw(st.integers(1, 25))
    rows = draw(st.integers(2, 6)) if samples else 0
    time = st.floats(1e-5, 5e-2, allow_nan=False)
    layers = []
    for index in range(count):
        params = []
        for k in range(draw(st.integers(0, 3))):
            numel = draw(st.integers(1, 3_000_000))
            params.append(ParamTensor(name=f"l{index}.p{k}", numel=numel, bytes=4 * numel))
        layers.append(Layer(
            name=f"l{index}", forward_s=draw(time), backward_s=draw(time), params=params,
            forward_samples_s=[draw(time) for _ in range(rows)] if rows else None,
            backward_samples_s=[draw(time) for _ in range(rows)] if rows else None,
        ))
    step = StepTimes(data_s=draw(st.floats(0, 1e-2)), h2d_s=draw(st.floats(0, 1e-2)),
                     optimizer_s=draw(st.floats(0, 1e-2)))
    return Profile(model="synthetic", batch_size=draw(st.integers(1, 64)), layers=layers, step=step)


def layer_comm_times(profile: Profile, comm: CommModel, workers: int) -> list[float]:
    """t_c per layer for per-layer grouping: one all-reduce of the layer's gradients, 0 without any."""
    return [comm.allreduce_s(sum(t.bytes for t in layer.params), workers) if layer.params else 0.0
            for layer in profile.layers]


def recurrence_step(profile: Profile, comm: CommModel, workers: int) -> float:
    return wfbp_iteration_s(profile.forward_s, [layer.backward_s for layer in profile.layers],
                            layer_comm_times(profile, comm, workers), data_s=profile.step.data_s,
                            h2d_s=profile.step.h2d_s, optimizer_s=profile.step.optimizer_s)


@HYPOTHESIS
@given(profile=profiles(), workers=st.integers(2, 512), bandwidth=st.floats(1e8, 1e11),
       latency=st.floats(0, 1e-3), algorithm=st.sampled_from(["ring", "tree", "halving-doubling"]))
def test_deterministic_per_layer_equals_wfbp_recurrence(profile, workers, bandwidth, latency, algorithm):
    comm = CommModel.from_link(bandwidth, latency, algorithm)
    outcome = simulate(profile, Cluster(workers, bandwidth, latency), Strategy(grouping="per-layer",
                       algorithm=algorithm), comm, iterations=5, warmup=2, variability=False)
    expected = recurrence_step(profile, comm, workers)
    assert np.allclose(outcome.iteration_s, expected, rtol=1e-9, atol=0)
    assert outcome.throughput == pytest.approx(workers * profile.batch_size / expected, rel=1e-9)


@HYPOTHESIS
@given(profile=profiles(), workers=st.integers(2, 256), bandwidth=st.floats(1e8, 1e11))
def test_single_group_is_compute_plus_one_collective(profile, workers, bandwidth):
    comm = CommModel.from_link(bandwidth, 20e-6)
    outcome = simulate(profile, Cluster(workers, bandwidth), Strategy(grouping="single"), comm, iterations=3,
                       warmup=0, variability=False)
    collective = comm.allreduce_s(profile.gradient_bytes, workers) if profile.tensors else 0.0
    assert np.allclose(outcome.iteration_s, profile.compute_s + collective, rtol=1e-9, atol=0)
    assert outcome.breakdown.exposed_comm_s == pytest.approx(collective, rel=1e-9, abs=1e-15)


@HYPOTHESIS
@given(profile=profiles(), grouping=st.sampled_from(["per-tensor", "per-layer", "buckets", "single", "mg-wfbp"]))
def test_one_worker_is_the_profiled_step(profile, grouping):
    outcome = simulate(profile, Cluster(1), Strategy(grouping=grouping), CommModel.from_link(1e9, 1e-3),
                       iterations=4, warmup=1, variability=False)
    assert np.allclose(outcome.iteration_s, profile.compute_s, rtol=1e-9, atol=0)
    assert outcome.breakdown.exposed_comm_s == 0.0
    assert outcome.bottleneck.startswith("compute:")


@HYPOTHESIS
@given(profile=profiles(samples=True), workers=st.integers(2, 64),
       grouping=st.sampled_from(["per-tensor", "per-layer", "buckets", "single", "mg-wfbp"]),
       low=st.floats(1e8, 5e9), factor=st.floats(1.0, 20.0), seed=st.integers(0, 3))
def test_throughput_never_drops_with_more_bandwidth(profile, workers, grouping, low, factor, seed):
    """Same seed, same draws; a faster network shortens every collective, never a step."""
    results = []
    for bandwidth in (low, low * factor):
        comm = CommModel.from_link(bandwidth, 20e-6)
        strategy = Strategy(grouping=grouping if grouping != "mg-wfbp" else "per-layer")
        results.append(simulate(profile, Cluster(workers, bandwidth), strategy, comm, iterations=8, warmup=2,
                                seed=seed, variability=True).throughput)
    assert results[1] >= results[0] * (1 - 1e-12)


@HYPOTHESIS
@given(profile=profiles(samples=True), workers=st.integers(2, 64), bandwidth=st.floats(1e8, 1e11),
       grouping=st.sampled_from(["per-tensor", "per-layer", "buckets", "single", "mg-wfbp"]),
       variability=st.booleans())
def test_step_at_least_critical_path_and_comm_stream_busy_time(profile, workers, bandwidth, grouping, variability):
    comm = CommModel.from_link(bandwidth, 20e-6)
    strategy = Strategy(grouping=grouping)
    outcome = simulate(profile, Cluster(workers, bandwidth), strategy, comm, iterations=10, warmup=2, seed=1,
                       variability=variability)
    groups = group_gradients(profile, strategy, comm, workers)
    busy = sum(comm.allreduce_s(g.bytes, workers) for g in groups)
    # every step holds the whole comm chain: it starts after all workers began the step
    assert np.all(outcome.iteration_s >= busy * (1 - 1e-9))
    mean = float(np.mean(outcome.iteration_s))
    b = outcome.breakdown
    if not variability:
        assert np.all(outcome.iteration_s >= profile.compute_s * (1 - 1e-9))
    if groups:  # with no gradient nothing makes the workers wait for each other: over a few steps the
        # latest one's progress (the cluster's step) can fall below their mean compute (found by hypothesis:
        # one parameter-less layer, 2 workers, variability on: 62.5 ms against 64.1 ms)
        assert mean >= b.compute_s * (1 - 1e-6)
    assert b.compute_s + b.exposed_comm_s + b.wait_s == pytest.approx(mean, rel=1e-6)
    assert 0 <= outcome.utilization["worker NIC out"] <= 1 + 1e-9
    assert 0 < outcome.utilization["worker compute"] <= 1 + 1e-6


def test_heterogeneous_workers_run_at_the_slowest_pace():
    """Deterministic, per-layer: the slowest worker is last at every barrier, so the step is the
    WFBP recurrence of the slowest worker's (scaled) times."""
    layers = [Layer(name=f"l{i}", forward_s=2e-3, backward_s=4e-3,
                    params=[ParamTensor(name=f"l{i}.w", numel=250_000, bytes=1_000_000)]) for i in range(10)]
    profile = Profile(model="m", batch_size=32, layers=layers, step=StepTimes(data_s=1e-3, optimizer_s=2e-3))
    slow = Profile(model="m", batch_size=32, step=StepTimes(data_s=2e-3, optimizer_s=4e-3), layers=[
        layer.model_copy(update={"forward_s": 2 * layer.forward_s, "backward_s": 2 * layer.backward_s})
        for layer in layers])
    comm = CommModel.from_link(10e9, 20e-6)
    cluster = Cluster(4, compute_scale=(1.0, 1.0, 1.0, 2.0))
    outcome = simulate(profile, cluster, Strategy(grouping="per-layer"), comm, iterations=5, variability=False)
    assert np.allclose(outcome.iteration_s, recurrence_step(slow, comm, 4), rtol=1e-9)
    assert outcome.breakdown.wait_s > 0
    assert outcome.bottleneck.startswith("stragglers") and "worker 3" in outcome.bottleneck


def test_a_slow_link_paces_the_ring():
    layers = [Layer(name=f"l{i}", forward_s=1e-3, backward_s=2e-3,
                    params=[ParamTensor(name=f"l{i}.w", numel=2_500_000, bytes=10_000_000)]) for i in range(6)]
    profile = Profile(model="m", batch_size=8, layers=layers)
    comm = CommModel.from_link(10e9, 20e-6)
    with_slow = simulate(profile, Cluster(8, 10e9, slow_links=((5, 1e9),)), Strategy(), comm, variability=False)
    all_slow = simulate(profile, Cluster(8, 1e9), Strategy(), CommModel.from_link(1e9, 20e-6), variability=False)
    assert np.allclose(with_slow.iteration_s, all_slow.iteration_s, rtol=1e-9)
    assert "communication" in with_slow.bottleneck and "slowest link" in with_slow.bottleneck


def noisy_profile(layers: int = 40, rows: int = 12, seed: int = 0) -> Profile:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(layers):
        f = rng.uniform(1e-4, 1e-3, rows)
        b = 2 * f * rng.uniform(0.8, 1.2, rows)
        out.append(Layer(name=f"l{i}", forward_s=float(f.mean()), backward_s=float(b.mean()),
                         forward_samples_s=list(f), backward_samples_s=list(b),
                         params=[ParamTensor(name=f"l{i}.w", numel=100_000, bytes=400_000)]))
    return Profile(model="noisy", batch_size=16, layers=out, step=StepTimes(optimizer_s=1e-3))


def test_variability_is_seeded_and_stragglers_cost_time():
    profile = noisy_profile()
    fast = CommModel.from_link(100e9, 1e-6)
    run = lambda workers, seed, var: simulate(profile, Cluster(workers, 100e9, 1e-6), Strategy(), fast,  # noqa: E731
                                              iterations=50, seed=seed, variability=var)
    first, again, other = run(4, 3, True), run(4, 3, True), run(4, 4, True)
    assert np.array_equal(first.iteration_s, again.iteration_s)
    assert not np.array_equal(first.iteration_s, other.iteration_s)
    # 64 workers almost surely draw the slowest of the 12 measured iterations every step
    first = run(64, 3, True)
    # the expected maximum over 64 workers exceeds the mean: more workers, longer steps
    assert np.mean(first.iteration_s) > np.mean(run(2, 3, True).iteration_s) > np.mean(run(1, 3, True).iteration_s) * 0.99
    assert first.breakdown.wait_s > 0
    deterministic = run(64, 3, False)
    assert np.ptp(deterministic.iteration_s) < 1e-12


def test_sampler_keeps_a_slow_iteration_slow_and_scales_workers():
    layers = [Layer(name=f"l{i}", forward_s=2.0, backward_s=2.0, forward_samples_s=[1.0, 3.0],
                    backward_samples_s=[1.0, 3.0]) for i in range(5)]
    profile = Profile(model="m", batch_size=1, layers=layers)
    sampler = ComputeSampler(profile, Cluster(1000, compute_scale=tuple([1.0] * 999 + [2.0])), seed=0)
    draw = sampler.draw()
    assert draw.forward_s.shape == (1000, 5)
    # within one worker-iteration every layer comes from the same measured iteration
    ratio = draw.forward_s / draw.forward_s[:, :1]
    assert np.allclose(ratio, 1.0)
    assert set(np.unique(draw.forward_s[:999])) == {1.0, 3.0}
    assert draw.forward_s[999, 0] in (2.0, 6.0)
    fixed = ComputeSampler(profile, Cluster(8), variability=False)
    assert fixed.identical_workers and np.all(fixed.draw().backward_s == 2.0)


def test_whole_step_samples_give_variability_without_per_layer_samples():
    layers = [Layer(name=f"l{i}", forward_s=1e-3, backward_s=2e-3) for i in range(4)]
    profile = Profile(model="m", batch_size=1, layers=layers,
                      iteration_s=IterationStats(mean=0.012, p50=0.012, p95=0.02, samples=[0.01, 0.01, 0.016]))
    sampler = ComputeSampler(profile, Cluster(4), seed=0)
    assert sampler.source == "whole-step samples" and sampler.variable
    totals = sampler.forward_table_s.sum(axis=1) + sampler.backward_table_s.sum(axis=1)
    assert np.allclose(totals / totals.mean(), np.array([0.01, 0.01, 0.016]) / 0.012)


def test_timeline_is_capped_and_consistent():
    profile = noisy_profile(layers=10)
    outcome = simulate_allreduce(profile, Cluster(16), Strategy(grouping="per-layer"), CommModel.from_link(1e9, 2e-5),
                                 iterations=20, warmup=2, timeline=True)
    events = outcome.timeline
    assert events and len(events) <= 5000
    assert {e.process for e in events} >= {"worker 0", "network"}
    comm = sorted((e for e in events if e.process == "network"), key=lambda e: e.start_s)
    for before, after in zip(comm, comm[1:]):
        assert after.start_s >= before.start_s + before.duration_s - 1e-12  # one stream
    assert all(e.duration_s >= 0 for e in events)
    assert len(outcome.iteration_s) == 20


def test_bottleneck_words():
    profile = noisy_profile()
    comm_bound = simulate(profile, Cluster(16, 1e8), Strategy(), CommModel.from_link(1e8, 2e-5), variability=False)
    assert comm_bound.bottleneck.startswith("communication:") and "100 Mbit/s ring" in comm_bound.bottleneck
    hidden = simulate(profile, Cluster(16, 1e12), Strategy(grouping="per-layer"), CommModel.from_link(1e12, 1e-7),
                      variability=False)
    assert hidden.bottleneck.startswith("compute:")
    latency_bound = simulate(profile, Cluster(64, 1e11, 5e-3), Strategy(grouping="per-tensor"),
                             CommModel.from_link(1e11, 5e-3), variability=False)
    assert "startup" in latency_bound.bottleneck


def test_large_cluster_runs_quickly_enough_to_sweep():
    """Not a timing assertion: a smoke test that 1,024 workers with per-tensor groups complete."""
    profile = noisy_profile(layers=160)
    outcome = simulate(profile, Cluster(1024), Strategy(grouping="per-tensor"), CommModel.from_link(10e9, 2e-5),
                       iterations=20, warmup=2)
    assert np.isfinite(outcome.throughput) and outcome.throughput > 0


def brute_force_steps(profile, cluster, strategy, comm, iterations, warmup, seed):
    """The same model written naively: loops over workers, groups and layers, no shortcuts."""
    groups = group_gradients(profile, strategy, comm, cluster.workers)
    costs = [comm.allreduce_s(g.bytes, cluster.workers) for g in groups]
    sampler = ComputeSampler(profile, cluster, seed=seed, variability=True)
    start = [0.0] * cluster.workers
    previous, steps = 0.0, []
    for k in range(warmup + iterations):
        draw = sampler.draw()
        ready_at = [[0.0] * len(groups) for _ in range(cluster.workers)]
        backward_end = []
        for w in range(cluster.workers):
            t = start[w] + draw.data_s[w] + draw.h2d_s[w] + sum(draw.forward_s[w])
            layer_end = {}
            for layer in range(len(profile.layers) - 1, -1, -1):
                layer_start = t
                t += draw.backward_s[w][layer]
                layer_end[layer] = (layer_start, t)
            backward_end.append(t)
            for g, group in enumerate(groups):
                s0, s1 = layer_end[group.ready_layer]
                ready_at[w][g] = s0 + group.ready_fraction * (s1 - s0)
        free = float("-inf")
        for g in range(len(groups)):
            free = max(free, max(ready_at[w][g] for w in range(cluster.workers))) + costs[g]
        ends = [max(backward_end[w], free) + draw.optimizer_s[w] for w in range(cluster.workers)]
        if k >= warmup:
            steps.append(max(ends) - previous)
        previous, start = max(ends), ends
    return np.array(steps)


@pytest.mark.parametrize("workers, scales", [(48, None), (7, None), (40, (1.0, 1.5) * 20), (5, (1, 2, 1, 3, 1))])
def test_vectorized_path_equals_brute_force(workers, scales):
    profile = noisy_profile(layers=12, rows=3)
    cluster = Cluster(workers, 1e9, compute_scale=tuple(float(s) for s in scales) if scales else ())
    comm = CommModel.from_link(1e9, 20e-6)
    for grouping in ("per-tensor", "buckets"):
        strategy = Strategy(grouping=grouping, bucket_bytes=1_000_000, first_bucket_bytes=500_000)
        fast = simulate(profile, cluster, strategy, comm, iterations=15, warmup=3, seed=5)
        slow = brute_force_steps(profile, cluster, strategy, comm, 15, 3, 5)
        assert np.allclose(fast.iteration_s, slow, rtol=1e-12)
