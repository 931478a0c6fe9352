"""One vocabulary and one bottleneck describer for both methods (sgdscale.bottleneck, issue 11)."""

from __future__ import annotations

import pytest

from sgdscale import bottleneck as words
from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel
from sgdscale.predict import predict
from sgdscale.profile import load_profile
from sgdscale.result import Breakdown
from sgdscale.strategy import Strategy

CATEGORIES = ("compute:", "communication:", "stragglers:", "contention:", "server update:")


@pytest.mark.parametrize("model, kind, bandwidth_bps, extra", [
    ("gpt2", "allreduce", 1e9, {}),
    ("resnet50", "allreduce", 10e9, {"gpus_per_node": 4}),
    ("gpt2", "ps-sync", 1e9, {"ps_count": 2}),
    ("gpt2", "ps-async", 1e9, {}),
    ("mlp", "ps-async", 10e9, {"ps_bandwidth_bps": 2e9}),
])
def test_both_methods_speak_one_vocabulary(model, kind, bandwidth_bps, extra):
    """Same utilization keys, same levels and a limited_by from one list, for every worker count."""
    cluster = Cluster(1, bandwidth_bps, **extra)
    prediction = predict(load_profile(model), cluster, Strategy(kind), CommModel.from_link(bandwidth_bps, 20e-6, "ring"),
                         [1, 8], iterations=20, warmup=5)
    by_count: dict[int, dict] = {}
    for r in prediction.results:
        by_count.setdefault(r.workers, {})[r.method] = r
        assert r.limited_by in words.LIMITS, r.limited_by
        assert r.bottleneck.startswith(CATEGORIES), r.bottleneck
        assert all(0.0 <= u <= 1.0 for u in r.utilization.values()), r.utilization
        for key in r.utilization:
            assert words.level_of(key) in words.LIMITS
    for workers, pair in by_count.items():
        fine, coarse = pair["fine"], pair["coarse"]
        assert set(fine.utilization) == set(coarse.utilization), (workers, fine.utilization, coarse.utilization)
        assert set(fine.levels) == set(coarse.levels), (workers, fine.levels, coarse.levels)
    if kind != "allreduce":
        shards = 2 if extra.get("ps_count") == 2 else 1
        expected = {words.COMPUTE, words.WORKER_NIC_OUT, words.WORKER_NIC_IN}
        for s in range(shards):
            expected |= {words.server_nic_in(s), words.server_nic_out(s), words.server_update(s)}
        assert set(by_count[8]["fine"].utilization) == expected


def _evidence(**kw):
    base = dict(workers=8, sync=True, step_s=1.0, breakdown=Breakdown(0.5, 0.3, 0.2), utilization={},
                levels={words.LEVEL_NIC: 0.3})
    base.update(kw)
    return words.Evidence(**base)


def test_describer_rules():
    assert words.describe(_evidence(workers=1, breakdown=Breakdown(1.0, 0.0, 0.0))) == (
        words.LEVEL_COMPUTE, "compute: a single worker does not communicate")
    limited, text = words.describe(_evidence(breakdown=Breakdown(0.97, 0.02, 0.01)))
    assert limited == "compute" and text.startswith("compute:")
    # a saturated shared resource names itself and its lever
    limited, text = words.describe(_evidence(utilization={words.server_nic_in(1): 0.93, words.server_update(0): 0.4},
                                             levels={words.LEVEL_SERVER_NIC: 0.9}))
    assert limited == words.LEVEL_SERVER_NIC and "server 1 NIC in is busy 93%" in text and "add parameter servers" in text
    # waiting with a cause and nothing at the servers to explain it: stragglers, with the cause
    limited, text = words.describe(_evidence(breakdown=Breakdown(0.5, 0.1, 0.4), compute_scale=(1, 1, 3, 1)))
    assert limited == "stragglers" and "worker 2 computes 3x slower" in text
    # the same wait that a server resource's busy time explains is queueing, not stragglers
    limited, text = words.describe(_evidence(breakdown=Breakdown(0.5, 0.1, 0.4), variable=True,
                                             utilization={words.server_nic_in(0): 0.6},
                                             levels={words.LEVEL_SERVER_NIC: 0.6, words.LEVEL_NIC: 0.1}))
    assert limited == words.LEVEL_SERVER_NIC and text.startswith("contention:") and "server 0 NIC in" in text
    # exposed communication: the busiest level and resource
    limited, text = words.describe(_evidence(utilization={words.WORKER_NIC_OUT: 0.3, words.COMPUTE: 0.5}))
    assert limited == words.LEVEL_NIC and "busiest: worker NIC out (30% busy)" in text
    # beside exposed communication, sync workers wait for each other; async ones queue behind messages
    split = dict(breakdown=Breakdown(0.5, 0.35, 0.15), utilization={words.WORKER_NIC_OUT: 0.3})
    assert "; waiting for other workers adds another 15%" in words.describe(_evidence(**split))[1]
    text = words.describe(_evidence(sync=False, **split))[1]
    assert "; queueing behind other workers' messages adds another 15%" in text and "waiting for" not in text


def test_levels_are_the_topology_levels():
    from sgdscale.comm import topology

    assert topology.LEVEL_NIC is words.LEVEL_NIC and topology.LEVEL_INTRA is words.LEVEL_INTRA


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_a_parameter_servers_single_worker_is_limited_by_its_pushes_and_pulls(kind):
    """One PS worker still sends every gradient to its server and waits for the reply: at 400 Mbit/s
    gpt2's 21 MB each way take most of its step, which is communication, not compute."""
    prediction = predict(load_profile("gpt2"), Cluster(1, 400e6), Strategy(kind), CommModel.from_link(400e6, 20e-6, "ring"),
                         [1], iterations=20, warmup=5)
    for result in prediction.results:
        assert result.breakdown.exposed_comm_s > result.breakdown.compute_s
        assert result.bottleneck.startswith("communication:"), (result.method, result.bottleneck)
        assert "does not communicate" not in result.bottleneck


def test_an_all_reduce_single_worker_does_not_communicate():
    prediction = predict(load_profile("gpt2"), Cluster(1, 400e6), Strategy("allreduce"),
                         CommModel.from_link(400e6, 20e-6, "ring"), [1], iterations=20, warmup=5)
    for result in prediction.results:
        assert result.bottleneck == "compute: a single worker does not communicate", result.method
