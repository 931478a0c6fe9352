"""Chrome-trace timelines: valid JSON a viewer accepts, names mapped to ids, times in microseconds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgdscale.report.trace import chrome_trace, write_chrome_trace
from sgdscale.result import TraceEvent


def sample_events():
    return [
        TraceEvent("backward conv1", 0.010, 0.004, "worker 10", "compute", {"iteration": np.int64(3)}),
        TraceEvent("forward conv1", 0.000, 0.010, "worker 10", "compute"),
        TraceEvent("all-reduce bucket 0", 0.012, 0.006, "worker 2", "comm", {"bytes": 1048576}),
        TraceEvent("forward conv1", 0.001, 0.009, "worker 2", "compute"),
        TraceEvent("push", 0.0125, 0.0, "server 0", "nic in", {"ratio": float("inf")}),
    ]


def test_written_trace_is_valid_and_complete(tmp_path):
    path = tmp_path / "out" / "trace.json"
    write_chrome_trace(sample_events(), path, metadata={"model": "toy", "workers": np.int32(2)})
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ms"
    assert data["otherData"] == {"model": "toy", "workers": 2}
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == 5
    for e in complete:
        assert e["ts"] >= 0 and e["dur"] >= 0
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
    # seconds -> microseconds
    bucket = next(e for e in complete if e["name"] == "all-reduce bucket 0")
    assert bucket["ts"] == pytest.approx(12000) and bucket["dur"] == pytest.approx(6000)
    assert bucket["args"] == {"bytes": 1048576}
    # sorted by start time
    starts = [e["ts"] for e in complete]
    assert starts == sorted(starts)
    # every pid/tid used is labelled, and the labels map back to the original names
    process_names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                    if e["ph"] == "M" and e["name"] == "thread_name"}
    for original, written in zip(sorted(sample_events(), key=lambda e: e.start_s),
                                 sorted(complete, key=lambda e: e["ts"])):
        assert process_names[written["pid"]] == original.process
        assert thread_names[(written["pid"], written["tid"])] == original.thread
    # natural order of processes: server 0, worker 2, worker 10
    assert [process_names[p] for p in sorted(process_names)] == ["server 0", "worker 2", "worker 10"]
    # no temporary files left behind
    assert [p.name for p in path.parent.iterdir()] == ["trace.json"]


def test_negative_start_is_shifted_and_bad_durations_rejected():
    trace = chrome_trace([TraceEvent("a", -0.5, 1.0, "worker 0", "compute")])
    assert trace["traceEvents"][-1]["ts"] == 0.0
    with pytest.raises(ValueError):
        chrome_trace([TraceEvent("a", 0.0, -1.0, "worker 0", "compute")])
    with pytest.raises(ValueError):
        chrome_trace([TraceEvent("a", float("nan"), 1.0, "worker 0", "compute")])


def test_empty_timeline_is_still_a_trace():
    assert chrome_trace([]) == {"traceEvents": [], "displayTimeUnit": "ms"}


def test_fine_timeline_round_trips(tmp_path):
    """A real predicted timeline (fine all-reduce) writes and every interval survives."""
    fine = pytest.importorskip("sgdscale.fine")
    from sgdscale.cluster import Cluster
    from sgdscale.comm.cost import CommModel
    from sgdscale.profile import Layer, ParamTensor, Profile
    from sgdscale.strategy import Strategy

    profile = Profile(model="toy", batch_size=8, layers=[
        Layer(name=f"l{i}", forward_s=0.01, backward_s=0.02,
              params=[ParamTensor(name=f"w{i}", numel=250_000, bytes=1_000_000)]) for i in range(3)])
    outcome = fine.simulate(profile, Cluster(2, bandwidth_bps=1e9), Strategy("allreduce", grouping="per-layer"),
                            CommModel.from_link(1e9, 1e-5), iterations=2, warmup=0, timeline=True)
    assert outcome.timeline
    path = tmp_path / "fine.json"
    write_chrome_trace(outcome.timeline, path)
    data = json.loads(path.read_text())
    assert sum(e["ph"] == "X" for e in data["traceEvents"]) == len(outcome.timeline)
