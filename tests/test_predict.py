"""predict(): speedup against the same method's one-worker outcome, inputs echoed, user errors."""

from __future__ import annotations

import numpy as np
import pytest

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.errors import UserError
from sgdscale.predict import predict
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes, load_profile
from sgdscale.result import PREDICTION_SCHEMA
from sgdscale.strategy import Strategy


def small_profile() -> Profile:
    layers = [Layer(name=f"l{i}", forward_s=1e-3, backward_s=2e-3,
                    params=[ParamTensor(name=f"l{i}.w", numel=250_000, bytes=1_000_000)]) for i in range(8)]
    return Profile(model="small", batch_size=16, layers=layers, step=StepTimes(data_s=1e-3, optimizer_s=1e-3))


def test_speedup_and_efficiency_against_one_worker():
    profile = small_profile()
    comm = CommModel.from_link(1e9, 20e-6)
    calls = []
    prediction = predict(profile, Cluster(1, 1e9), Strategy(), comm, [8, 1, 4, 2], methods=("fine",),
                         variability=False, progress=lambda done, total, label: calls.append((done, total)))
    assert [r.workers for r in prediction.results] == [1, 2, 4, 8]
    one = prediction.results[0]
    assert one.speedup == pytest.approx(1.0) and one.efficiency == pytest.approx(1.0)
    assert one.iteration_s["mean"] == pytest.approx(profile.compute_s)
    for result in prediction.results:
        assert result.speedup == pytest.approx(result.throughput / one.throughput)
        assert result.efficiency == pytest.approx(result.speedup / result.workers)
        assert result.predict_time_s > 0
    assert calls[-1] == (4, 4)


def test_both_methods_and_json_schema():
    prediction = predict(small_profile(), Cluster(1), Strategy(), CommModel.from_link(10e9, 20e-6), [1, 4],
                         iterations=20, warmup=2)
    assert {(r.workers, r.method) for r in prediction.results} == {(1, "fine"), (1, "coarse"), (4, "fine"),
                                                                   (4, "coarse")}
    data = prediction.to_json()
    assert data["schema"] == PREDICTION_SCHEMA
    assert data["inputs"]["profile"]["model"] == "small"
    assert data["inputs"]["cluster"]["bandwidth_bps"] == 10e9
    for result in data["results"]:
        assert set(result) >= {"workers", "method", "throughput", "iteration_s", "speedup", "efficiency",
                               "breakdown", "bottleneck"}
        assert set(result["iteration_s"]) == {"mean", "p50", "p95"}
        assert set(result["breakdown"]) == {"compute_s", "exposed_comm_s", "wait_s"}


def test_heterogeneous_cluster_baseline_is_a_nominal_worker():
    profile = small_profile()
    cluster = Cluster(4, 10e9, compute_scale=(1.0, 1.0, 1.0, 2.0))
    prediction = predict(profile, cluster, Strategy(), CommModel.from_link(10e9, 20e-6), [4], methods=("fine",),
                         variability=False)
    (result,) = prediction.results
    # the slow worker doubles the step: a speedup of at most 4 / 2
    assert result.speedup <= 2.0 + 1e-9
    assert "stragglers" in result.bottleneck


def test_user_errors():
    profile, comm = small_profile(), CommModel.from_link(10e9, 20e-6)
    with pytest.raises(UserError, match="not a range"):
        predict(profile, Cluster(4, compute_scale=(1, 1, 1, 2)), Strategy(), comm, [1, 2, 4])
    with pytest.raises(UserError, match="PS count larger than the tensors can use"):
        predict(profile, Cluster(1, ps_count=9), Strategy(kind="ps-sync"), comm, [2])
    with pytest.raises(UserError, match="at least one worker count"):
        predict(profile, Cluster(1), Strategy(), comm, [])
    with pytest.raises(UserError, match=">= 1"):
        predict(profile, Cluster(1), Strategy(), comm, [0, 2])
    with pytest.raises(UserError, match="unknown method"):
        predict(profile, Cluster(1), Strategy(), comm, [2], methods=("exact",))
    with pytest.raises(UserError, match="iterations"):
        predict(profile, Cluster(1), Strategy(), comm, [2], iterations=0)


def test_builtin_resnet50_sweep():
    profile = load_profile("resnet50")
    prediction = predict(profile, Cluster(1), Strategy(), CommModel.from_link(10e9, 20e-6), [1, 8, 64],
                         methods=("fine",), iterations=30)
    throughputs = [r.throughput for r in prediction.results]
    assert throughputs == sorted(throughputs)
    assert all(np.isfinite(t) for t in throughputs)
