"""The measurement format: validation names the field, throughput over the common window."""

import json

import pytest

from sgdscale.errors import UserError
from sgdscale.runtime.measurement import (
    Measurement,
    WorkerRecord,
    load_measurement,
    measurement_from_json,
    save_measurement,
    window_throughput,
)


def _doc(**changes):
    doc = {
        "schema": "sgdscale.measurement/1",
        "config": {"model": "mlp", "strategy": "allreduce", "grouping": "buckets", "bucket_mb": 25.0,
                   "workers": 2, "batch_size": 8, "iterations": 2, "warmup": 1, "lr": 0.01, "threads": 1},
        "workers": [
            {"rank": 0, "iteration_start_s": [100.0, 100.5], "iteration_s": [0.5, 0.5]},
            {"rank": 1, "iteration_start_s": [100.0, 100.5], "iteration_s": [0.5, 0.5]},
        ],
        "throughput": 32.0,
        "iteration_s": {"mean": 0.5, "p50": 0.5, "p95": 0.5},
        "environment": {"host": "h", "torch": "2.13.0", "python": "3.11", "cpu_model": "x", "date": "2026-11-29"},
    }
    doc.update(changes)
    return doc


def test_round_trip(tmp_path):
    m = measurement_from_json(_doc())
    save_measurement(m, tmp_path / "m.json")
    again = load_measurement(tmp_path / "m.json")
    assert again == m
    assert json.loads((tmp_path / "m.json").read_text())["schema"] == "sgdscale.measurement/1"


def test_errors_name_the_field():
    bad = _doc()
    bad["workers"][1]["iteration_s"] = [0.5, -1.0]
    with pytest.raises(UserError, match=r"workers\.1"):
        measurement_from_json(bad)
    with pytest.raises(UserError, match="config.workers is 2"):
        measurement_from_json(_doc(workers=_doc()["workers"][:1]))
    ps = _doc()
    ps["config"] = {**ps["config"], "strategy": "ps-sync", "grouping": None}
    with pytest.raises(UserError, match="ps_count must be at least 1"):
        measurement_from_json(ps)
    with pytest.raises(UserError, match="not a measurement"):
        measurement_from_json({"schema": "sgdscale.profile/1"})


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_measurement(tmp_path / "nope.json")


def test_window_throughput_sync_and_async_tail():
    sync = [WorkerRecord(rank=r, iteration_start_s=[0.0, 1.0], iteration_s=[1.0, 1.0]) for r in range(2)]
    assert window_throughput(sync, 10) == pytest.approx(20.0)
    # Async: worker 1 is twice as fast and stops early; its idle tail must not dilute throughput,
    # and worker 0's slow iterations count only for the part inside the common window.
    fast = WorkerRecord(rank=1, iteration_start_s=[0.0, 0.5, 1.0, 1.5], iteration_s=[0.5] * 4)
    slow = WorkerRecord(rank=0, iteration_start_s=[0.0, 1.0, 2.0, 3.0], iteration_s=[1.0] * 4)
    # window [0, 2]: fast does 4 iterations (40 samples), slow 2 (20 samples) -> 30 samples/s
    assert window_throughput([slow, fast], 10) == pytest.approx(30.0)
    # a part of the window: [0.5, 1.5] holds 2 fast iterations (20 samples) and 1 slow (10 samples)
    assert window_throughput([slow, fast], 10, window=(0.5, 1.5)) == pytest.approx(30.0)
    # [0, 0.25]: a quarter of the first slow (2.5 samples) and half of the first fast (5 samples)
    assert window_throughput([slow, fast], 10, window=(0.0, 0.25)) == pytest.approx(30.0)


def test_measurement_is_frozen():
    m = measurement_from_json(_doc())
    assert isinstance(m, Measurement)
    with pytest.raises(Exception):
        m.throughput = 1.0


def test_train_reports_each_nodes_cpu_over_the_window():
    from sgdscale.commands.runtime import cpu_lines

    # environment.cpu of a real 2-worker sync PS run on the emulated cluster (values rounded)
    cpu = {"wall_s": 51.2, "cfs_period_us": 10000, "pinned": True, "other_load_cores": 0.33, "cpus": [],
           "nodes": [{"node": 0, "quota_cores": 0.38, "cpus": [0], "received_cores": 0.352,
                      "throttled_periods_fraction": 0.956, "user_cores": 0.316, "system_cores": 0.036},
                     {"node": 1, "quota_cores": 0.38, "cpus": [1], "received_cores": 0.371,
                      "throttled_periods_fraction": 0.988, "user_cores": 0.329, "system_cores": 0.042},
                     {"node": 2, "quota_cores": 0.38, "cpus": [0], "received_cores": 0.027,
                      "throttled_periods_fraction": 0.003}]}
    lines = cpu_lines(cpu, workers=2)
    assert lines[0] == "CPU over the measured window (51.2 s, CFS period 10 ms):"
    assert lines[1] == "  worker 0 on CPU 0: received 0.35 of 0.38 cores (user 0.32, kernel 0.04), throttled in 96% of periods"
    assert lines[3] == "  PS shard 0 on CPU 0: received 0.03 of 0.38 cores, throttled in 0% of periods"  # recorded before set 47
    assert lines[4] == "  the rest of the machine used 0.33 cores meanwhile"
    assert cpu_lines(None, workers=2) == []  # local runs have no quota to report
