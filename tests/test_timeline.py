"""Timelines side by side: the measured timeline of a real run as a Chrome trace, and next to the
fine prediction of the same configuration, per worker and iteration (report/timeline.py)."""

from __future__ import annotations

import json

import pytest

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.profile import Layer, ParamTensor, Profile
from sgdscale.report.timeline import iteration_counts, measured_events, predicted_events, side_by_side
from sgdscale.runtime.measurement import measurement_from_json
from sgdscale.strategy import Strategy

TINY = {"width": 32, "depth": 2, "input_dim": 16}


def _toy_profile() -> Profile:
    return Profile(model="toy", batch_size=8, layers=[
        Layer(name=f"l{i}", forward_s=0.01, backward_s=0.02,
              params=[ParamTensor(name=f"w{i}", numel=250_000, bytes=1_000_000)]) for i in range(3)])


def _steps(events, process):
    return sorted((e for e in events if e.process == process and e.thread == "step"), key=lambda e: e.start_s)


@pytest.mark.parametrize("strategy", ["allreduce", "ps-sync", "ps-async"])
@pytest.mark.parametrize("variability", [False, True])
def test_predicted_timeline_has_every_worker_and_the_asked_iterations(strategy, variability):
    """Identical workers (simulated once) are still drawn one by one; steps renumbered from 0 at time 0."""
    events = predicted_events(_toy_profile(), Cluster(3, bandwidth_bps=1e9), Strategy(strategy),
                              CommModel.from_link(1e9, 1e-5), 7, variability=variability)
    assert iteration_counts(events) == {f"worker {w}": 7 for w in range(3)}
    for w in range(3):
        steps = _steps(events, f"worker {w}")
        assert [e.args["iteration"] for e in steps] == list(range(7))
        assert all(e.duration_s > 0 for e in steps)
        assert all(b.start_s >= a.start_s + a.duration_s - 1e-12 for a, b in zip(steps, steps[1:]))
    assert min(e.start_s for e in events) == pytest.approx(0.0, abs=1e-12)
    assert {e.args["iteration"] for e in events} == set(range(7))
    for w in range(3):  # one compute resource: its slices never overlap (waits included)
        row = sorted((e for e in events if e.process == f"worker {w}" and e.thread == "compute"),
                     key=lambda e: e.start_s)
        assert all(b.start_s >= a.start_s + a.duration_s - 1e-9 for a, b in zip(row, row[1:]))


def test_predicted_ps_timeline_draws_forward_after_the_wait_for_parameters():
    """A slow link: every step waits for its pulls; the layers that needed them start after the wait."""
    events = predicted_events(_toy_profile(), Cluster(2, bandwidth_bps=1e8), Strategy("ps-sync"),
                              CommModel.from_link(1e8, 1e-5), 3, variability=False)
    waits = [e for e in events if e.process == "worker 0" and e.name == "wait for parameters"]
    assert waits and all(w.duration_s > 0.01 for w in waits)
    for wait in waits:
        after = [e for e in events if e.process == "worker 0" and e.name.startswith("forward")
                 and e.args["iteration"] == wait.args["iteration"] and e.start_s >= wait.start_s]
        assert after and min(e.start_s for e in after) == pytest.approx(wait.start_s + wait.duration_s)


def _measurement(strategy="allreduce", grouping="per-layer"):
    """A measurement as the runtime writes it, with a traced server wait that began before the window."""
    ps = strategy != "allreduce"
    worker = lambda rank, t0: {  # noqa: E731
        "rank": rank, "iteration_start_s": [t0, t0 + 0.5], "iteration_s": [0.4, 0.45],
        "forward_s": [0.1, 0.1], "backward_s": [0.2, 0.25], "wait_s": [0.05, 0.0],
        **({} if ps else {"optimizer_s": [0.05, 0.1]}),
        "events": [{"name": "all-reduce 0", "thread": "all-reduce", "iteration": 0, "start_s": t0 + 0.2,
                    "duration_s": 0.1, "args": {"bytes": 4}}]}
    data = {
        "schema": "sgdscale.measurement/1",
        "config": {"model": "mlp", "strategy": strategy, "grouping": None if ps else grouping, "workers": 2,
                   "ps_count": 1 if ps else 0, "batch_size": 8, "iterations": 2, "warmup": 1, "lr": 0.1,
                   "threads": 1, "traced": True},
        "workers": [worker(0, 1000.0), worker(1, 1000.01)],
        "servers": [{"rank": 2, "shard": 0, "tensors": ["w"], "bytes": 4, "updates": 4, "busy_s": 0.1,
                     "wall_s": 1.0, "events": [{"name": "wait for gradients", "thread": "update", "iteration": 0,
                                                "start_s": 999.9, "duration_s": 0.15}]}] if ps else [],
        "throughput": 30.0, "iteration_s": {"mean": 0.43, "p50": 0.43, "p95": 0.45},
        "environment": {"host": "h", "torch": "t", "python": "p", "cpu_model": "c", "date": "d"},
    }
    return measurement_from_json(data)


def test_measured_timeline_lays_the_phases_end_to_end_from_each_iteration_start():
    m = _measurement()
    events = measured_events(m)
    steps = _steps(events, "worker 1")
    assert [(round(e.start_s, 9), e.duration_s) for e in steps] == [(0.01, 0.4), (0.51, 0.45)]
    compute = sorted((e for e in events if e.process == "worker 1" and e.thread == "compute"), key=lambda e: e.start_s)
    # iteration 1 has no wait: forward, backward, optimizer
    assert [e.name for e in compute] == ["forward", "backward", "wait for all-reduce", "optimizer",
                                         "forward", "backward", "optimizer"]
    assert compute[-1].start_s + compute[-1].duration_s == pytest.approx(0.51 + 0.45)
    recorded = [e for e in events if e.process == "worker 0" and e.thread == "all-reduce"]
    assert [(e.start_s, e.duration_s, e.args) for e in recorded] == [(pytest.approx(0.2), 0.1,
                                                                       {"iteration": 0, "bytes": 4})]


def test_measured_ps_timeline_keeps_server_events_and_clips_them_to_the_window():
    events = measured_events(_measurement("ps-sync"))
    names = [e.name for e in events if e.process == "worker 0" and e.thread == "compute"]
    assert names[:3] == ["forward (with pull waits)", "backward", "post pull receives"]
    (wait,) = [e for e in events if e.process == "server 0"]
    assert wait.start_s == 0.0 and wait.duration_s == pytest.approx(0.05)
    assert wait.args["clipped_s"] == pytest.approx(0.1)


def test_side_by_side_tags_each_side_and_orders_worker_pairs(tmp_path):
    from sgdscale.report.timeline import write_side_by_side

    m = _measurement()
    predicted = predicted_events(_toy_profile(), Cluster(2, bandwidth_bps=1e9), Strategy("allreduce"),
                                 CommModel.from_link(1e9, 1e-5), 2, variability=False)
    both = side_by_side(measured_events(m), predicted)
    assert iteration_counts(both) == {"worker 0 · measured": 2, "worker 1 · measured": 2,
                                      "worker 0 · predicted": 2, "worker 1 · predicted": 2}
    path = tmp_path / "c.json"
    write_side_by_side(m, predicted, path, prediction={"method": "fine"})
    data = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    assert [names[p] for p in sorted(names)] == [
        "worker 0 · measured", "worker 0 · predicted", "worker 1 · measured", "worker 1 · predicted",
        "network · predicted"]
    assert data["otherData"]["predicted"] == {"method": "fine"}
    assert data["otherData"]["measured"]["config"]["traced"] is True


# ------------------------------------------------------------------------- real runs


def _check_measured_trace(m, path):
    """The written trace has, per worker and iteration, one step slice at the measured start and of
    the measured length; its phases tile the step; recorded events lie inside the run."""
    data = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    intervals = [e for e in data["traceEvents"] if e["ph"] == "X"]
    origin = min(w.iteration_start_s[0] for w in m.workers)
    for worker in m.workers:
        process = f"worker {worker.rank}"
        steps = sorted((e for e in intervals if names[e["pid"]] == process and e["cat"] == "step"),
                       key=lambda e: e["ts"])
        assert len(steps) == len(worker.iteration_s)
        for k, e in enumerate(steps):
            assert e["args"]["iteration"] == k
            assert e["ts"] == pytest.approx((worker.iteration_start_s[k] - origin) * 1e6, abs=0.01)
            assert e["dur"] == pytest.approx(worker.iteration_s[k] * 1e6, rel=1e-9)
            phases = [p for p in intervals if names[p["pid"]] == process and p["cat"] == "compute"
                      and p["args"]["iteration"] == k]
            assert phases and sum(p["dur"] for p in phases) <= e["dur"] * (1 + 1e-9)
            assert min(p["ts"] for p in phases) == pytest.approx(e["ts"], abs=0.01)
        recorded = [e for e in intervals if names[e["pid"]] == process and e["cat"] not in ("step", "compute")]
        assert recorded, f"a traced run timestamps {process}'s communication"
    return names, intervals


@pytest.mark.dist
@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy, extra", [("allreduce", {}), ("allreduce", {"grouping": "per-layer"}),
                                             ("ps-sync", {"ps_count": 1}), ("ps-async", {"ps_count": 1})])
def test_real_traced_run_writes_its_measured_timeline(tmp_path, strategy, extra):
    from sgdscale.report.timeline import write_measured_trace
    from sgdscale.runtime.train import TrainConfig, run_training

    m = run_training(TrainConfig(model="mlp", workers=2, batch_size=8, iterations=5, warmup=2,
                                 model_options=dict(TINY), strategy=strategy, trace=True, **extra), timeout_s=120)
    assert m.config.traced is True
    path = tmp_path / "m.json"
    write_measured_trace(m, path)
    names, intervals = _check_measured_trace(m, path)
    for worker in m.workers:
        process = f"worker {worker.rank}"
        if strategy == "allreduce":
            # every bucket/group all-reduce of iteration k launched and completed inside iteration k
            collectives = [e for e in intervals if names[e["pid"]] == process and e["cat"] == "all-reduce"]
            groups = 1 if not extra else 3  # DDP: one bucket of 7.7 kB; per-layer: 3 linear layers
            assert len(collectives) == groups * 5
            steps = {e["args"]["iteration"]: e for e in intervals if names[e["pid"]] == process and e["cat"] == "step"}
            for c in collectives:
                step = steps[c["args"]["iteration"]]
                assert step["ts"] - 0.01 <= c["ts"] and c["ts"] + c["dur"] <= step["ts"] + step["dur"] + 0.01
        else:
            pushes = [e for e in intervals if names[e["pid"]] == process and e["cat"] == "push"]
            assert len(pushes) == 6 * 5  # 6 tensors per step
    if strategy.startswith("ps"):
        updates = [e for e in intervals if names[e["pid"]] == "server 0" and e["name"].startswith("update")]
        assert len(updates) == 6 * 5 * (2 if strategy == "ps-async" else 1)  # async: each worker's gradient
        # the server's wait for each worker's gradient of each tensor (sync: worker by worker; async:
        # in the row of the thread that serves that worker)
        receives = [e for e in intervals if names[e["pid"]] == "server 0" and e["name"].startswith("wait for")]
        assert sorted((e["args"]["worker"], e["args"]["tensor"], e["args"]["iteration"]) for e in receives) == sorted(
            (w, i, k) for w in range(2) for i in range(6) for k in range(5))
        if strategy == "ps-async":
            assert {e["cat"] for e in receives} == {"from worker 0", "from worker 1"}


@pytest.mark.dist
@pytest.mark.timeout(240)
def test_cli_train_trace_compare_and_the_validate_trace(tmp_path, capsys):
    """`train --trace --trace-compare` on local processes (network measured by netbench here, profile
    of the same tiny model): both files; the side by side has both sides with the same iterations.
    The validator's per-run trace, from its cached profile and network, has the same shape."""
    from sgdscale.cli import main
    from sgdscale.profile import save_profile
    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload
    from sgdscale.runtime.measurement import load_measurement
    from sgdscale.validation import Grid, ModelSpec, Validator

    net, prof = tmp_path / "net.json", tmp_path / "tiny.json"
    assert main(["netbench", "-o", str(net), "--max-size", "64kB", "--points", "3", "--repeats", "3"]) == 0
    save_profile(profile_workload(build_workload("mlp", **TINY), 8, warmup=1, iterations=5), prof)
    args = ["train", "mlp", "--batch-size", "8", "--iterations", "4", "--warmup", "2", "--timeout", "120s",
            *[x for k, v in TINY.items() for x in ("--option", f"{k}={v}")]]
    measured, compare, out = tmp_path / "m.trace.json", tmp_path / "c.trace.json", tmp_path / "m.json"
    assert main([*args, "-o", str(out), "--trace", str(measured), "--trace-compare", str(compare),
                 "--trace-profile", str(prof), "--trace-network", str(net)]) == 0
    m = load_measurement(out)
    _check_measured_trace(m, measured)
    data = json.loads(compare.read_text())
    counts = data["otherData"]["iterations"]
    assert counts == {f"worker {w} · {side}": 4 for w in range(2) for side in ("measured", "predicted")}
    assert data["otherData"]["predicted"]["network"] == str(net)

    # the validator writes the same kind of file per run, from its cached inputs
    grid = Grid(specs=[ModelSpec("mlp", 8, options=tuple(TINY.items()))], workers=[2], bandwidths_bps=[1e9],
                strategies=["allreduce"], repeats=1)
    validator = Validator(grid, tmp_path / "val", log=lambda text: None, trace_dir=tmp_path / "traces")
    case = grid.cases()[0]
    for cached, source in ((validator.profile_path(case.spec), prof), (validator.network_path(1e9), net)):
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(source.read_bytes())
    validator.write_trace(case, 0, m)
    data = json.loads(validator.trace_path(case).read_text())
    assert data["otherData"]["iterations"] == counts

    # user errors: one line, exit 2, before any run
    capsys.readouterr()
    assert main([*args, "--trace-compare", str(tmp_path / "x.json"), "--trace-profile", str(prof)]) == 2
    assert "--trace-network" in capsys.readouterr().err
    assert main([*args, "--trace-compare", str(tmp_path / "x.json")]) == 2
    assert "--trace-profile" in capsys.readouterr().err
    assert main([*args, "--trace-network", str(net)]) == 2
    assert not (tmp_path / "x.json").exists()


@pytest.mark.dist
@pytest.mark.timeout(120)
def test_untraced_run_records_no_events():
    from sgdscale.runtime.train import TrainConfig, run_training

    m = run_training(TrainConfig(model="mlp", workers=2, batch_size=8, iterations=2, warmup=1,
                                 model_options=dict(TINY), strategy="ps-sync", ps_count=1), timeout_s=90)
    assert m.config.traced is None and "traced" not in m.to_json()["config"]
    assert all(w.events is None for w in m.workers) and all(s.events is None for s in m.servers)
    assert len(measured_events(m)) > 0  # phases alone still make a timeline


@pytest.mark.parametrize("compute", ["sleep", "spin"])
def test_trace_compare_predicts_a_replay_with_the_network_model_validation_scores_it_with(monkeypatch, compute):
    """A replay whose layers sleep leaves its workers' CPU to gloo: the side by side predicts it as
    the validator does (no worker interference, CPU per message or wake-up; the shard's own costs
    kept), and a spinning replay, like real compute, pays them all."""
    from types import SimpleNamespace

    from sgdscale.commands import runtime
    from sgdscale.comm.network import load_network
    from sgdscale.report import timeline

    network = load_network("benchmarks/results/accuracy-heldout71/networks/850Mbit-q0.22-n4-7.json")
    full = CommModel.from_network(network)
    assert full.interference is not None and full.worker_cpu_s_per_message > 0 and full.worker_cpu_s_per_wakeup > 0
    seen = {}
    monkeypatch.setattr(timeline, "predicted_events", lambda *a, **k: seen.setdefault("comm", a[3]) and [])
    monkeypatch.setattr(timeline, "write_side_by_side", lambda *a, **k: None)
    config = SimpleNamespace(workers=2, ps_count=1, strategy="ps-sync", ps_placement=None, workload="replay",
                             replay_compute=compute, iterations=3)
    runtime.write_comparison(SimpleNamespace(config=config), {"network": network, "bandwidth_bps": 850e6,
                                                              "profile": None, "profile_source": "bert",
                                                              "network_source": "net.json"}, "x.json")
    comm = seen["comm"]
    if compute == "sleep":
        assert comm == full.for_sleeping_workers()
        assert (comm.interference, comm.worker_cpu_s_per_message, comm.worker_cpu_s_per_wakeup) == (None, 0.0, 0.0)
        assert (comm.server_cpu_s_per_byte, comm.server_cpu_s_per_message) == (full.server_cpu_s_per_byte,
                                                                                full.server_cpu_s_per_message)
    else:
        assert comm == full
