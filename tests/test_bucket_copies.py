"""DDP's bucket copies (sgdscale.bucket_copies): copies into buckets lengthen backward, copies back
follow each bucket's collective, and both predictors add them only for DDP buckets."""

import numpy as np
import pytest

from sgdscale.bucket_copies import copy_back_suffix_s, copy_s_per_byte, ddp_copies, finalized_s, with_copy_in
from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel
from sgdscale.predict import predict
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes, load_profile
from sgdscale.strategy import Strategy


def _profile() -> Profile:
    """Two layers; layer b (last in forward) is ready first: b.weight at 10 ms, a.weight at 30 ms."""
    layers = [Layer(name="a", forward_s=0.01, backward_s=0.02,
                    params=[ParamTensor(name="a.weight", numel=250_000, bytes=1_000_000, grad_ready_s=0.03)]),
              Layer(name="b", forward_s=0.01, backward_s=0.01, backward_samples_s=[0.01, 0.012],
                    params=[ParamTensor(name="b.weight", numel=500_000, bytes=2_000_000, grad_ready_s=0.01)])]
    return Profile(model="t", batch_size=1, layers=layers,
                   step=StepTimes(optimizer_s=0.004, optimizer_bytes=40_000_000))


def test_copy_cost_is_measured_else_the_profiles_memory_rate_else_free():
    profile = _profile()
    assert copy_s_per_byte(profile, 3e-10) == 3e-10
    assert copy_s_per_byte(profile, None) == pytest.approx(2 * 0.004 / 40e6)  # read + write per byte
    assert copy_s_per_byte(profile.model_copy(update={"step": StepTimes(optimizer_s=0.004)}), None) == 0.0


def test_copy_in_lengthens_backward_and_delays_later_gradients():
    s = 1e-9  # 1 ms per MB
    shifted = with_copy_in(_profile(), s)
    assert shifted.backward_s == pytest.approx(0.03 + 0.003)  # derived values recomputed, not carried over
    a, b = shifted.layers
    assert b.params[0].grad_ready_s == pytest.approx(0.01 + 0.002)  # after its own copy
    assert a.params[0].grad_ready_s == pytest.approx(0.03 + 0.003)  # after every copy so far
    assert b.backward_samples_s == pytest.approx([0.012, 0.014])
    assert with_copy_in(_profile(), 0.0) is not None and with_copy_in(_profile(), 0.0).backward_s == 0.03


def test_copies_back_follow_each_collective_and_backward():
    suffix = copy_back_suffix_s([2e6, 1e6], 1e-9)
    assert suffix == pytest.approx([0.003, 0.001])
    # communication-bound: the last collective ends at 0.5 s, then only its own copy is left
    assert finalized_s(np.array([0.1]), np.array([0.2, 0.5]), suffix) == pytest.approx([0.501])
    # compute-bound: backward ends after every collective, then every copy
    assert finalized_s(np.array([0.6]), np.array([0.2, 0.5]), suffix) == pytest.approx([0.603])


def test_only_ddp_buckets_with_several_workers_copy():
    profile = _profile()
    assert ddp_copies(profile, "per-tensor", 1e-9, 4) == (profile, 0.0)
    assert ddp_copies(profile, "buckets", 1e-9, 1) == (profile, 0.0)
    changed, per_byte = ddp_copies(profile, "buckets", 1e-9, 4)
    assert per_byte == 1e-9 and changed.backward_s > profile.backward_s


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_both_methods_charge_the_copies_of_a_communication_bound_step(method):
    """bert (21 MB) at 850 Mbit/s with 4 workers, no variability: the copies add, per step, the copies
    into the buckets that precede the last bucket's launch and the last bucket's copy back."""
    profile = load_profile("bert")
    cluster = Cluster(4, 850e6)
    base = CommModel.from_link(850e6, 50e-6)
    per_byte = 2e-10
    steps = {}
    for copy in (0.0, per_byte):
        comm = CommModel(base.p2p, copy_s_per_byte=copy)
        result = predict(profile, cluster, Strategy(kind="allreduce"), comm, [4], methods=(method,), variability=False)
        steps[copy] = result.results[0].iteration_s["mean"]
    added = steps[per_byte] - steps[0.0]
    # at least the last bucket's copy back, at most every byte copied twice
    assert per_byte * 1e6 < added <= 2 * per_byte * profile.gradient_bytes * 1.001


def test_predict_says_what_the_copies_cost(capsys):
    from sgdscale.bucket_copies import copies_note
    from sgdscale.cli import main

    assert "measured by netbench" in copies_note(_profile(), 5e-10)
    assert "optimizer memory rate" in copies_note(_profile(), None)
    assert "cost nothing" in copies_note(_profile().model_copy(update={"step": StepTimes(optimizer_s=0.004)}), None)
    assert main(["predict", "gpt2", "--workers", "4", "--method", "coarse"]) == 0
    assert "DDP's bucket copies at" in " ".join(capsys.readouterr().out.split())
    assert main(["predict", "gpt2", "--workers", "4", "--method", "coarse", "--strategy", "ps-sync"]) == 0
    assert "bucket copies" not in capsys.readouterr().out


def test_buffer_broadcast_is_a_tree_of_messages_and_two_copies():
    """ceil(log2 N) rounds of alpha + bytes x beta, and the copies into and out of the flat tensor; only
    with DDP buckets, several workers and buffers."""
    from sgdscale.bucket_copies import buffer_broadcast_s
    from sgdscale.comm.topology import Topology

    profile = _profile().model_copy(update={"buffer_bytes": 100_000})
    comm = CommModel(CommModel.from_link(1e9, 1e-4).p2p, copy_s_per_byte=1e-9)

    def cost(workers, grouping="buckets", prof=profile):
        return buffer_broadcast_s(prof, grouping, Topology.of(Cluster(workers, 1e9, 1e-4), comm, Strategy("allreduce")))

    one_round = 1e-4 + 100_000 * 8 / 1e9
    assert cost(2) == pytest.approx(one_round + 2e-4)
    assert cost(3) == pytest.approx(2 * one_round + 2e-4) == cost(4)
    assert cost(5) == pytest.approx(3 * one_round + 2e-4)
    assert cost(1) == cost(4, "per-tensor") == cost(4, prof=_profile()) == 0.0
    # a profile that timed DDP's local work with its buffers is charged that instead of the two copies
    timed = profile.model_copy(update={"buffer_sync_s": 3e-3})
    assert cost(3, prof=timed) == pytest.approx(2 * one_round + 3e-3)
    assert cost(1, prof=timed) == cost(4, "per-tensor", prof=timed) == 0.0


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_both_methods_hold_every_forward_for_the_buffer_broadcast(method):
    """Identical workers, no variability: the step grows by exactly the broadcast, counted as exposed
    communication; fine's timeline shows it before forward."""
    from sgdscale.bucket_copies import buffer_broadcast_s
    from sgdscale.comm.topology import Topology

    profile = load_profile("mobilenet_v2")
    assert profile.buffer_bytes > 0  # its batch norms' statistics
    cluster, comm = Cluster(3, 1e9), CommModel.from_link(1e9, 50e-6)
    steps, exposed = {}, {}
    for nbytes in (0, profile.buffer_bytes):
        result = predict(profile.model_copy(update={"buffer_bytes": nbytes}), cluster, Strategy(kind="allreduce"),
                         comm, [3], methods=(method,), variability=False, timeline=method == "fine")
        steps[nbytes] = result.results[0].iteration_s["mean"]
        exposed[nbytes] = result.results[0].breakdown.exposed_comm_s
        if nbytes and method == "fine":
            assert any(e.name == "broadcast buffers" for e in result.results[0].timeline)
    broadcast = buffer_broadcast_s(profile, "buckets", Topology.of(cluster, comm, Strategy(kind="allreduce")))
    assert broadcast > 0
    assert steps[profile.buffer_bytes] - steps[0] == pytest.approx(broadcast, rel=1e-6)
    assert exposed[profile.buffer_bytes] - exposed[0] == pytest.approx(broadcast, rel=1e-6)


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_ddps_measured_step_work_is_reported_not_charged(method):
    """Held out on set 29, charging the profile's `ddp_overhead_s` was not kept: predictions ignore it
    and `sgdscale predict` says what was measured."""
    from sgdscale.bucket_copies import ddp_overhead_note

    profile = load_profile("cnn")
    measured = profile.model_copy(update={"ddp_overhead_s": 0.012})
    comm = CommModel.from_link(1e9, 20e-6)

    def step(prof):
        result = predict(prof, Cluster(2, 1e9), Strategy(kind="allreduce"), comm, [2], methods=(method,),
                         variability=False)
        return result.results[0].iteration_s["mean"]

    assert step(measured) == step(profile)
    assert ddp_overhead_note(profile) is None
    assert "12.00 ms" in ddp_overhead_note(measured) and "not charged" in ddp_overhead_note(measured)
