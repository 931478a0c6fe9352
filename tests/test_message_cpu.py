"""A parameter server's messages cost CPU on both ends (sgdscale.message_cpu): measured per message
by netbench, charged to a worker's forward and backward and to the shard's updates."""

from __future__ import annotations

from unittest import mock

import pytest

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.network import AlphaBeta, CpuCost, Network
from sgdscale.message_cpu import messages_per_shard, with_message_cpu
from sgdscale.predict import predict
from sgdscale.profile import load_profile
from sgdscale.runtime.netbench import message_cpu_from_results
from sgdscale.strategy import Strategy


def network(message_s: float | None, cores: float | None) -> Network:
    cpu = CpuCost(message_s=message_s, cores=cores) if message_s else None
    return Network(p2p=AlphaBeta(alpha_s=1e-4, beta_s_per_byte=8e-10), allreduce={}, points=[], cpu=cpu)


def test_per_message_cost_is_the_measured_cpu_over_the_cores():
    comm = CommModel.from_network(network(28e-6, 0.28))
    assert comm.server_cpu_s_per_message == pytest.approx(1e-4)
    assert comm.worker_cpu_s_per_message == pytest.approx(1e-4)
    unshaped = CommModel.from_network(network(28e-6, None))  # no budget measured: nothing to charge against
    assert unshaped.server_cpu_s_per_message == 0.0 and unshaped.worker_cpu_s_per_message == 0.0


def test_netbench_takes_the_median_of_both_ranks_and_directions():
    results = [{"rank": 0, "message_cpu_s": {"send": [1e-5, 3e-5], "receive": [2e-5, 9e-5]}},
               {"rank": 1, "message_cpu_s": {"send": [4e-5], "receive": [5e-5]}}, {"rank": 2}]
    assert message_cpu_from_results(results) == pytest.approx(3.5e-5)
    assert message_cpu_from_results([{"rank": 0}, {"rank": 1}]) is None


def test_worker_charge_adds_one_message_per_tensor_to_forward_and_backward():
    profile = load_profile("mobilenet_v2")
    charged = with_message_cpu(profile, 1e-4)
    tensors = len(profile.tensors)
    assert sum(layer.forward_s for layer in charged.layers) == pytest.approx(
        sum(layer.forward_s for layer in profile.layers) + tensors * 1e-4)
    assert sum(layer.backward_s for layer in charged.layers) == pytest.approx(
        sum(layer.backward_s for layer in profile.layers) + tensors * 1e-4)
    # the k-th gradient to become ready waits for k pushes' calls before it goes out
    before = sorted(t.grad_ready_s for t in profile.tensors)
    after = sorted(t.grad_ready_s for t in charged.tensors)
    assert [b - a for a, b in zip(before, after)] == pytest.approx([1e-4 * (k + 1) for k in range(tensors)])
    assert with_message_cpu(profile, 0.0) is profile
    assert with_message_cpu(profile, 1e-4) is charged  # cached for sweeps


def test_messages_per_shard_split_groups_by_shard():
    profile = load_profile("mobilenet_v2")
    comm = CommModel.from_network(network(None, None))
    one = messages_per_shard(profile, Strategy(kind="ps-sync"), comm, 1, 2)
    two = messages_per_shard(profile, Strategy(kind="ps-sync"), comm, 2, 2)
    assert one.tolist() == [158.0] and two.sum() == 158.0 and min(two) > 0


def _throughput(profile, kind: str, comm: CommModel, method: str, workers: int) -> float:
    cluster = Cluster(workers, bandwidth_bps=100e9, latency_s=1e-5)
    result = predict(profile, cluster, Strategy(kind=kind), comm, [workers], methods=(method,), iterations=40,
                     warmup=5, variability=False)
    return result.results[0].throughput


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_async_shard_bound_by_its_messages(method):
    """densenet121 (364 tensors) with 16 async workers on a 100 Gbit/s network: a shard that spends
    2 ms per message in or out serves 1 / (2 * 364 * 2 ms) worker steps a second, whatever the bytes."""
    profile = load_profile("densenet121")
    per_message = 2e-3
    busy = CommModel.from_network(network(per_message * 0.5, 0.5))
    bound = profile.batch_size / (2 * len(profile.tensors) * per_message)
    with_cpu = _throughput(profile, "ps-async", busy, method, 16)
    assert bound * 0.9 <= with_cpu <= bound * 1.001
    assert _throughput(profile, "ps-async", CommModel.from_network(network(None, None)), method, 16) > 2 * with_cpu


@pytest.mark.parametrize("method", ["fine", "coarse"])
@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_one_worker_steps_longer_by_its_own_messages(method, kind):
    """One worker, a fast network, a cheap shard: its step grows by its pushes and pulls (2 per tensor)
    at the worker's per-message cost, within what the shard's own share adds, where the pulls are
    charged to forward (as used); received as they arrive (PULLS_RECEIVED_AS_THEY_ARRIVE), by its
    pushes and what the pulls' spacing (the shard's own per-message CPU paces its replies) does not hide."""
    import sgdscale.message_cpu as message_cpu

    profile = load_profile("mobilenet_v2")
    free = CommModel.from_network(network(None, None))
    charged = CommModel.from_network(network(20e-6, 0.5))  # 40 us of a node per message
    worker_s = 2 * len(profile.tensors) * 40e-6

    def grown_s() -> float:
        return (profile.batch_size / _throughput(profile, kind, charged, method, 1)
                - profile.batch_size / _throughput(profile, kind, free, method, 1))

    assert not message_cpu.PULLS_RECEIVED_AS_THEY_ARRIVE  # as used: pulls in forward
    assert worker_s * 0.95 <= grown_s() <= 2 * worker_s
    with mock.patch.object(message_cpu, "PULLS_RECEIVED_AS_THEY_ARRIVE", True):
        assert worker_s / 2 * 1.2 <= grown_s() <= worker_s * 0.8  # some of the pulls' CPU hides, not all


def test_pull_receive_tail_is_what_the_wire_spacing_does_not_hide():
    from sgdscale.message_cpu import pull_receive_tail_s

    ms = 1e-3
    # four equal pulls over 4 ms (arriving at 1, 2, 3, 4 ms), 0.5 ms each to receive: only the last shows
    assert pull_receive_tail_s([1, 1, 1, 1], 4 * ms, 0.5 * ms, 0.0) == pytest.approx(0.5 * ms)
    # all at once: every one of them, and only the first pays a whole wake-up
    assert pull_receive_tail_s([1, 1, 1, 1], 0.0, 0.5 * ms, 1 * ms) == pytest.approx(3 * ms)
    # 1 ms apart, half a wake-up each after the first: done at 2.5, 3.5, 4.5, 5.5 ms
    assert pull_receive_tail_s([1, 1, 1, 1], 4 * ms, 0.5 * ms, 1 * ms) == pytest.approx(1.5 * ms)
    assert pull_receive_tail_s([], 4 * ms, 0.5 * ms, 1 * ms) == 0.0
    assert pull_receive_tail_s([1, 1], 4 * ms, 0.0, 0.0) == 0.0


def test_a_slow_wire_hides_a_workers_pull_cpu_in_both_methods():
    """bert-like many tensors on a slow link: the pulls come in spaced by the wire, so receiving them
    as they arrive adds less than charging them to forward, and the two methods agree on how much."""
    import sgdscale.message_cpu as message_cpu

    profile = load_profile("gpt2")
    charged = CommModel.from_network(network(20e-6, 0.5))
    cluster = Cluster(1, bandwidth_bps=200e6, latency_s=1e-5)

    def step_s(method: str) -> float:
        result = predict(profile, cluster, Strategy(kind="ps-sync"), charged, [1], methods=(method,),
                         iterations=20, warmup=3, variability=False)
        return profile.batch_size / result.results[0].throughput

    in_forward = {m: step_s(m) for m in ("fine", "coarse")}
    with mock.patch.object(message_cpu, "PULLS_RECEIVED_AS_THEY_ARRIVE", True):
        received = {m: step_s(m) for m in ("fine", "coarse")}
    pulls_s = len(profile.tensors) * 40e-6
    for m in ("fine", "coarse"):
        assert in_forward[m] - received[m] >= 0.8 * pulls_s
    assert received["fine"] == pytest.approx(received["coarse"], rel=0.05)


def test_a_cpu_budget_given_to_predict_rescales_the_per_message_cost_and_says_so():
    from sgdscale.comm.interference import node_model

    measured = network(28e-6, 0.28)
    comm, notes = node_model(CommModel.from_network(measured), network=measured, link_bps=1e9, cpu_cores=0.56)
    assert comm.worker_cpu_s_per_message == pytest.approx(5e-5) and comm.server_cpu_s_per_message == pytest.approx(5e-5)
    assert any("28 us of CPU each" in note and "50 us of a node at 0.56 cores" in note for note in notes)
    comm, notes = node_model(CommModel.from_network(measured), network=measured, link_bps=1e9)
    assert comm.worker_cpu_s_per_message == pytest.approx(1e-4)


def test_a_worker_computing_on_an_accelerator_pays_nothing_on_its_compute():
    profile = load_profile("mobilenet_v2")
    on_gpu = profile.model_copy(update={"device": "cuda: NVIDIA H200"})
    assert with_message_cpu(on_gpu, 1e-4) is on_gpu
    assert with_message_cpu(profile, 1e-4) is not profile  # 'cpu: ...'


def test_a_cpu_budget_without_a_measured_message_cost_takes_the_typical_one_and_says_so():
    from sgdscale.comm.interference import TYPICAL_CPU_S_PER_MESSAGE, node_model

    nominal = CommModel.from_link(1e9, 1e-4)
    comm, notes = node_model(nominal, link_bps=1e9, cpu_cores=0.5)
    assert comm.server_cpu_s_per_message == pytest.approx(TYPICAL_CPU_S_PER_MESSAGE / 0.5)
    assert any("typical figure" in note and "parameter-server messages" in note for note in notes)
    comm, notes = node_model(nominal, link_bps=1e9)  # no budget: nothing to charge against
    assert comm.server_cpu_s_per_message == 0.0 and comm.worker_cpu_s_per_message == 0.0


def test_a_message_pays_a_wakeup_in_proportion_to_its_gap_up_to_the_spacing():
    from sgdscale.message_cpu import WAKEUP_SPACING_S, wakeup_weights

    gaps = [0.0, 0.25 * WAKEUP_SPACING_S, 1.5 * WAKEUP_SPACING_S, 0.05 * WAKEUP_SPACING_S]
    ready = [sum(gaps[:k + 1]) for k in range(len(gaps))]
    assert wakeup_weights(ready) == pytest.approx([1.0, 0.25, 1.0, 0.05])  # the first always wakes
    assert wakeup_weights([]) == []


def test_wakeups_are_charged_by_the_gaps_between_gradients_becoming_ready():
    from sgdscale.message_cpu import wakeup_weights

    profile = load_profile("mobilenet_v2")
    burst, wake = 1e-5, 2e-4
    charged = with_message_cpu(profile, burst, wake)
    order = sorted(t.grad_ready_s for t in profile.tensors)
    weights = wakeup_weights(order)
    # 158 tensors, many ready together: far fewer than 158 whole wake-ups, but at least one
    assert 1.0 <= sum(weights) < 0.5 * len(order)
    added = len(order) * burst + wake * sum(weights)
    assert sum(layer.backward_s for layer in charged.layers) == pytest.approx(
        sum(layer.backward_s for layer in profile.layers) + added)
    assert sum(layer.forward_s for layer in charged.layers) == pytest.approx(
        sum(layer.forward_s for layer in profile.layers) + added)  # pulls come back spaced as pushes left
    after = sorted(t.grad_ready_s for t in charged.tensors)
    paid = [sum(burst + wake * w for w in weights[:k + 1]) for k in range(len(order))]
    assert [b - a for a, b in zip(order, after)] == pytest.approx(paid)
    assert with_message_cpu(profile, burst) is not charged and with_message_cpu(profile, burst, wake) is charged


def test_netbench_wakeup_is_the_alone_median_over_the_burst_median_never_negative():
    from sgdscale.runtime.netbench import message_wakeup_from_results

    results = [{"rank": 0, "message_cpu_s": {"send": [3e-5], "receive": [3e-5], "send_alone": [1e-4, 1.2e-4],
                                             "receive_alone": [9e-5]}},
               {"rank": 1, "message_cpu_s": {"send": [3e-5], "receive": [3e-5], "receive_alone": [1.1e-4]}}]
    assert message_cpu_from_results(results) == pytest.approx(3e-5)  # the burst figure ignores the alone samples
    assert message_wakeup_from_results(results) == pytest.approx(1.05e-4 - 3e-5)
    cheaper = [{"rank": 0, "message_cpu_s": {"send": [5e-5], "send_alone": [4e-5]}}]
    assert message_wakeup_from_results(cheaper) == 0.0
    assert message_wakeup_from_results([{"rank": 0, "message_cpu_s": {"send": [5e-5]}}]) is None  # older files


def test_wakeup_cost_is_the_measured_cpu_over_the_cores_and_only_the_workers_pay_it():
    from sgdscale.comm.interference import TYPICAL_CPU_S_PER_WAKEUP, node_model

    measured = Network(p2p=AlphaBeta(alpha_s=1e-4, beta_s_per_byte=8e-10), allreduce={}, points=[],
                       cpu=CpuCost(message_s=30e-6, message_wakeup_s=80e-6, cores=0.4))
    comm = CommModel.from_network(measured)
    assert comm.worker_cpu_s_per_wakeup == pytest.approx(2e-4)
    assert comm.server_cpu_s_per_message == pytest.approx(75e-6)
    assert CommModel.from_network(network(28e-6, 0.28)).worker_cpu_s_per_wakeup == 0.0  # not measured: none
    budget, notes = node_model(CommModel.from_link(1e9, 1e-4), link_bps=1e9, cpu_cores=0.5)
    assert budget.worker_cpu_s_per_wakeup == pytest.approx(TYPICAL_CPU_S_PER_WAKEUP / 0.5)
    assert any("more when it leaves alone" in note for note in notes)
    rescaled, _ = node_model(comm, network=measured, link_bps=1e9, cpu_cores=0.8)
    assert rescaled.worker_cpu_s_per_wakeup == pytest.approx(1e-4)
