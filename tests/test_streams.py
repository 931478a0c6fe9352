"""Collectives sharing the link (sgdscale.comm.streams): gloo's two threads, NCCL's one stream."""

import numpy as np
import pytest

from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel
from sgdscale.comm.streams import collectives_at_once, shared_schedule_s
from sgdscale.errors import UserError
from sgdscale.predict import predict
from sgdscale.calibrate import retarget, to_throughput
from sgdscale.device import get_device
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes, load_profile
from sgdscale.strategy import Strategy
from sgdscale.validation import at_run_speed


def one_stream(ready, costs):
    """Starts and ends of collectives run one after another in launch order, without interference."""
    starts, ends, end = np.empty(len(costs)), np.empty(len(costs)), -np.inf
    for g, (r, c) in enumerate(zip(ready, costs)):
        starts[g] = max(end, r)
        ends[g] = end = starts[g] + c
    return starts, ends


def time_stepped(ready, costs, slots, dt=1e-4):
    """Processor sharing stepped in time: an independent oracle (no work clock, no event algebra)."""
    left = list(costs)
    started, ends = [False] * len(costs), [None] * len(costs)
    t = 0.0
    while any(e is None for e in ends):
        running = [g for g in range(len(costs)) if started[g] and ends[g] is None]
        for g in range(len(costs)):  # admit in launch order while a thread is free
            if not started[g] and len(running) < slots and ready[g] <= t and all(started[:g]):
                started[g] = True
                running.append(g)
        for g in running:
            left[g] -= dt / len(running)
            if left[g] <= 1e-12:
                ends[g] = t + dt
        t += dt
    return np.array(ends)


def test_the_traced_vgg16_buckets_end_in_the_order_the_run_showed():
    """Set 59's traced vgg16 replay (benchmarks/results/allreduce_replay_gap/): the buckets' launch
    times as measured, each all-reduce's cost as the network file predicted it (ms)."""
    ready = np.array([296.1, 347.1, 806.4, 956.2, 1130.2, 1266.5])
    costs = np.array([154.07, 626.97, 3832.5, 265.24, 265.29, 20.98])
    starts, ends = one_stream(ready, costs)
    shared_starts, shared_ends, threads = shared_schedule_s(ready, starts, ends, costs, 2)
    # measured: 598.7, 1579.6, 5634.4, 2134.9, 2690.5, 2773.5 ms; the 411 MB bucket (index 2) ends last
    assert list(np.argsort(shared_ends)) == [0, 1, 3, 4, 5, 2]
    assert shared_ends.max() == pytest.approx(ends[-1])  # the link did the same work at the same pace
    assert shared_starts[3] == pytest.approx(shared_ends[1])  # the fourth waited for a thread
    assert shared_ends[3] - shared_starts[3] == pytest.approx(2 * costs[3])  # at half the link
    assert set(threads.tolist()) == {0, 1} and threads[2] != threads[3]


@pytest.mark.parametrize("seed", range(6))
def test_sharing_matches_a_time_stepped_simulation(seed):
    rng = np.random.default_rng(seed)
    n = 7
    ready = np.cumsum(rng.uniform(0.0, 0.05, n))
    costs = rng.uniform(0.005, 0.08, n)
    starts, ends = one_stream(ready, costs)
    for slots in (2, 3):
        shared = shared_schedule_s(ready, starts, ends, costs, slots)[1]
        np.testing.assert_allclose(shared, time_stepped(ready, costs, slots), atol=3e-4 * n)


def test_one_slot_a_lone_collective_and_idle_gaps_change_nothing():
    ready = np.array([0.0, 1.0, 2.0])
    costs = np.array([0.5, 0.5, 0.5])  # each done before the next is ready: never two at once
    starts, ends = one_stream(ready, costs)
    for slots in (1, 2):
        s, e, _ = shared_schedule_s(ready, starts, ends, costs, slots)
        np.testing.assert_allclose(s, starts)
        np.testing.assert_allclose(e, ends)
    s, e, _ = shared_schedule_s(ready[:1], starts[:1], ends[:1], costs[:1], 2)
    assert e[0] == ends[0]


def test_gloo_runs_two_at_once_on_cpus_nccl_one():
    cpu = load_profile("resnet50")
    assert cpu.device.startswith("cpu") and collectives_at_once(cpu) == 2
    assert collectives_at_once(cpu, override=1) == 1
    assert collectives_at_once(cpu.model_copy(update={"device": "A100"})) == 1
    assert collectives_at_once(retarget(cpu, get_device("A100"), "fp32", get_device("vm-cpu-1t"), "fp32")) == 1
    assert collectives_at_once(to_throughput(cpu, 1000.0)) == 1  # scaled to a GPU's measured speed
    assert collectives_at_once(at_run_speed(cpu, 0.5)) == 2  # validation: the same CPU at a run's speed
    with pytest.raises(UserError, match="collectives at once"):
        Strategy(collectives_at_once=0)


def _big_bucket_first() -> Profile:
    """Layer b (last in forward) is ready first and holds 100 MB; layer a, ready last, holds 1 MB."""
    layers = [Layer(name="a", forward_s=0.01, backward_s=0.02,
                    params=[ParamTensor(name="a.weight", numel=250_000, bytes=1_000_000, grad_ready_s=0.03)]),
              Layer(name="b", forward_s=0.01, backward_s=0.01,
                    params=[ParamTensor(name="b.weight", numel=25_000_000, bytes=100_000_000, grad_ready_s=0.01)])]
    return Profile(model="t", batch_size=1, layers=layers, device="cpu: test", step=StepTimes(optimizer_s=0.004))


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_the_big_bucket_ends_last_so_its_copy_back_is_exposed(method):
    """Communication-bound, no variability: one stream ends with the 1 MB bucket (12 ms at 1 Gbit/s),
    behind which the 100 MB bucket's 10 ms copy back hides; on two threads the 1 MB bucket finishes
    beside the 100 MB one, which ends last (when one stream would have ended), so its copy back comes
    after every all-reduce."""
    per_byte = 1e-10
    comm = CommModel(CommModel.from_link(1e9, 50e-6).p2p, copy_s_per_byte=per_byte)
    steps = {}
    for slots in (1, 2):
        result = predict(_big_bucket_first(), Cluster(4, 1e9), Strategy(collectives_at_once=slots), comm, [4],
                         methods=(method,), variability=False)
        steps[slots] = result.results[0].iteration_s["mean"]
    assert steps[2] - steps[1] == pytest.approx(100_000_000 * per_byte, rel=1e-6)
    default = predict(_big_bucket_first(), Cluster(4, 1e9), Strategy(), comm, [4], methods=(method,),
                      variability=False)
    assert default.results[0].iteration_s["mean"] == pytest.approx(steps[2])  # a CPU profile: gloo's two


def test_the_timeline_draws_each_thread_on_its_own_track_without_overlap():
    """vgg16 (six buckets, one of 411 MB) at 1 Gbit/s: on each "all-reduce thread" track the slices follow
    one another (a viewer nests overlapping slices wrongly), and never more than two run at once."""
    from sgdscale.fine import simulate

    outcome = simulate(load_profile("vgg16"), Cluster(3, 1e9), Strategy(), CommModel.from_link(1e9, 50e-6),
                       iterations=3, warmup=1, variability=False, timeline=True)
    collectives = [e for e in outcome.timeline if e.process == "network"]
    tracks = {e.thread for e in collectives}
    assert tracks == {"all-reduce thread 1", "all-reduce thread 2"}
    for track in tracks:
        slices = sorted((e.start_s, e.start_s + e.duration_s) for e in collectives if e.thread == track)
        assert all(end <= next_start + 1e-9 for (_, end), (next_start, _) in zip(slices, slices[1:]))
    edges = sorted([(e.start_s, 1) for e in collectives] + [(e.start_s + e.duration_s, -1) for e in collectives])
    assert max(np.cumsum([step for _, step in edges])) == 2
