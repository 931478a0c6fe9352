"""A small real validation: profile, benchmark, predict and run each strategy on an emulated
cluster of 2 workers with shaped 200 Mbit/s links, and compare; and one replay case whose
bound (15%) is an accuracy check that can fail.

The bound on the real-compute cases (within a factor of 2 either way) is a smoke bound for a short CI run:
it catches a broken predictor or runtime, not a modelling error. The same real case measured in two runs
differs by up to 31% (benchmarks/results/accuracy/repeatability-run1-vs-run2.md; async PS most), and this
short one more: on 2026-12-07 its async PS case measured 689-951 samples/s over four runs and, once, low
enough that fine, which predicted the others -23% to -1%, came out +51%, past the 50% bound this test had.
The accuracy claims come from benchmarks/accuracy.py, which runs the full grid with longer runs.
"""

import dataclasses
import json
import os

import pytest

from sgdscale.runtime.measurement import load_measurement
from sgdscale.validation import Grid, ModelSpec, Validator, relative_error, runs_of, summarize

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root (netns, tc, cgroups)")

BOUND_FACTOR = 2.0  # predicted / measured within [1/2, 2]: a smoke bound (module docstring)
# Replay with slept compute on a communication-bound case repeats tightly (see the test), so this
# bound is an accuracy check, not a smoke bound.
REPLAY_BOUND = 0.08


def test_grid_cases_keys_and_summary():
    """Cases are the cross product (servers only for PS), keys are unique and readable, and the
    summary is the median and maximum of absolute errors per method and strategy."""
    grid = Grid(specs=[ModelSpec("mlp", 32, options=(("width", 256),))], workers=[2, 4],
                bandwidths_bps=[200e6, 1e9], strategies=["allreduce", "ps-async"], ps_count=2)
    cases = grid.cases()
    assert len(cases) == 8 and len({c.key for c in cases}) == 8
    assert {c.nodes for c in cases if c.strategy == "ps-async"} == {4, 6}
    assert "mlp-b32-width256-ps-async-ps2-w4-1000Mbit" in {c.key for c in cases}
    assert relative_error(110.0, 100.0) == pytest.approx(0.10)
    rows = [{"strategy": "allreduce", "error": {"fine": e, "coarse": -2 * e}} for e in (0.01, -0.05, 0.20)]
    summary = {(item["method"], item["strategy"]): item for item in summarize(rows)}
    assert summary["fine", "allreduce"]["median_abs_error"] == pytest.approx(0.05)
    assert summary["coarse", "all"]["max_abs_error"] == pytest.approx(0.40)


def test_a_case_is_scored_by_the_median_of_its_runs_with_its_band(tmp_path):
    grid = Grid(specs=[ModelSpec("mlp", 32)], workers=[2], bandwidths_bps=[1e9], strategies=["allreduce"], repeats=3)
    case = grid.cases()[0]
    runs = [{"round": r, "measured_throughput": m, "measured_iteration_s": {"mean": 1.0},
             "predicted_throughput": {"fine": f, "coarse": c}, "predicted_iteration_s": {}, "predicted_breakdown": {},
             "bottleneck": {}} for r, (m, f, c) in enumerate([(100.0, 110.0, 90.0), (80.0, 100.0, 95.0),
                                                               (120.0, 105.0, 97.0)])]
    row = Validator(grid, tmp_path, log=lambda text: None).case_row(case, runs)
    assert row["measured_band"] == [80.0, 100.0, 120.0]
    assert row["predicted_throughput"] == {"fine": 105.0, "coarse": 95.0}
    assert row["error"]["fine"] == pytest.approx(0.05) and row["error"]["coarse"] == pytest.approx(-0.05)
    assert runs_of(row) == runs
    # a row from before repeats is one run of round 0
    old = {"key": case.key, "measured_throughput": 50.0, "predicted_throughput": {"fine": 55.0}}
    assert runs_of(old) == [{"round": 0, "measured_throughput": 50.0, "predicted_throughput": {"fine": 55.0}}]


def test_network_benchmark_measures_incast_with_every_ps_case_senders(tmp_path):
    """Sharing is fitted from incast with 2 senders or more: a PS grid's benchmark adds its largest
    PS case's node count (workers + shards), so a 2-worker grid gets incast with 2 senders."""
    def validator(workers, strategies, ps_count=1):
        grid = Grid(specs=[ModelSpec("mlp", 32)], workers=workers, bandwidths_bps=[1e9], strategies=strategies,
                    ps_count=ps_count)
        return Validator(grid, tmp_path, log=lambda text: None)

    assert validator([2], ["allreduce"]).bench_runs() == [2]
    two = validator([2], ["allreduce", "ps-sync"])
    assert two.bench_counts() == [2] and two.bench_runs() == [2, 3]
    assert validator([3, 4], ["ps-async"], ps_count=2).bench_runs() == [3, 4, 6]
    # named by the process counts benchmarked, so a PS grid does not take an all-reduce grid's file
    # (fewer processes, fewer incast senders) from the same folder
    assert validator([2], ["allreduce"]).network_path(1e9).name == "1000Mbit-q0.2-n2.json"
    assert two.network_path(1e9).name == "1000Mbit-q0.2-n2-3.json"
    networks = tmp_path / "networks"
    networks.mkdir()
    (networks / "1000Mbit-q0.2-n2.json").write_text(json.dumps({"environment": {"processes": [2]}}))
    assert two.network_path(1e9).name == "1000Mbit-q0.2-n2-3.json"
    # a file from before files recorded their process counts serves the grid that made it
    (networks / "1000Mbit-q0.2-n2.json").write_text(json.dumps({"environment": {"bandwidth_bps": 1e9}}))
    assert two.network_path(1e9).name == "1000Mbit-q0.2-n2.json"


@pytest.mark.testbed
@needs_root
@pytest.mark.timeout(300)
def test_a_disturbed_network_benchmark_is_measured_again_and_said_so(tmp_path, monkeypatch):
    # No link here is disturbed on demand: a steadiness bound below any real spread makes the
    # ping-pong launch "unsteady" every time, so validation's benchmark measures it three times.
    from sgdscale import validation
    from sgdscale.hostinfo import wait_for_quiet_host
    from sgdscale.runtime import netbench

    monkeypatch.setattr(netbench, "P2P_STEADY_SPREAD", -1.0)
    monkeypatch.setattr(netbench, "wait_for_quiet_host", lambda limit: wait_for_quiet_host(limit, 0.2, 0.4))
    monkeypatch.setattr(validation, "network_bench_config",
                        lambda: netbench.bench_config([65536, 1 << 20], 3, 1, ["p2p", "allreduce"]))
    grid = Grid(specs=[ModelSpec("mlp", 32)], workers=[2], bandwidths_bps=[200e6], strategies=["allreduce"])
    logs = []
    path = Validator(grid, tmp_path, log=logs.append).ensure_network(200e6)
    launches = json.loads(path.read_text())["environment"]["launches"]
    assert [run["attempt"] for run in launches] == [1, 2, 3] and sum(bool(run.get("kept")) for run in launches) == 1
    assert any("measured again 2 time(s)" in line and "disturbed machine" in line for line in logs)


@pytest.mark.testbed
@needs_root
def test_each_strategy_runs_and_is_predicted_within_the_bound(tmp_path):
    spec = ModelSpec("mlp", batch_size=32, options=(("width", 256), ("depth", 3)))
    grid = Grid(specs=[spec], workers=[2], bandwidths_bps=[200e6], strategies=["allreduce", "ps-sync", "ps-async"],
                cpu_per_node_cores=0.3, iterations=8, warmup=3, profile_iterations=10)
    validator = Validator(grid, tmp_path, log=lambda text: None, predict_iterations=100)
    rows = validator.run()
    assert [row["strategy"] for row in rows] == ["allreduce", "ps-sync", "ps-async"]
    for case, row in zip(grid.cases(), rows):
        measurement = load_measurement(validator.measurement_path(case))
        assert measurement.config.workers == 2
        assert all(len(worker.iteration_s) == grid.iterations_for(case.strategy) for worker in measurement.workers)
        assert row["measured_throughput"] == pytest.approx(measurement.throughput)
        # every node's TCP and queue counters over the window: the losses a run met are on record
        network = measurement.environment.network
        assert len(network["nodes"]) == case.nodes and network["segments_out"] > 0
        for method in ("fine", "coarse"):
            error = relative_error(row["predicted_throughput"][method], row["measured_throughput"])
            assert 1 / BOUND_FACTOR <= 1 + error <= BOUND_FACTOR, f"{row['key']} {method}: predicted {error:+.0%} off"
    # a real case's runs time their own compute: it is also predicted at that speed (a diagnostic)
    assert {item["method"] for item in summarize(rows)} == {"fine", "coarse", "fine-nominal", "coarse-nominal",
                                                            "fine-budget", "coarse-budget",
                                                            "fine-run-speed", "coarse-run-speed"}
    # nominal figures with the grid's 0.3 cores (predict --cpu-per-node): the CPU only costs time
    for row in rows:
        assert row["predicted_throughput"]["coarse-budget"] <= row["predicted_throughput"]["coarse-nominal"] * (1 + 1e-9)
    assert all(run["reference_step_s"] > 0 for row in rows for run in row["runs"])


@pytest.mark.testbed
@needs_root
def test_an_interrupted_grid_resumes_without_rerunning(tmp_path):
    spec = ModelSpec("mlp", batch_size=16, options=(("width", 128), ("depth", 2)))
    grid = Grid(specs=[spec], workers=[2], bandwidths_bps=[200e6], strategies=["allreduce"],
                cpu_per_node_cores=0.3, iterations=5, warmup=2, profile_iterations=5)
    first = Validator(grid, tmp_path, log=lambda text: None, predict_iterations=50).run()
    again = Validator(grid, tmp_path, log=lambda text: None, predict_iterations=50)
    again.measure_case = None  # a rerun must not run anything: calling it would fail
    assert again.run() == first
    repredicted = again.run(repredict=True)
    assert repredicted[0]["measured_throughput"] == first[0]["measured_throughput"]


@pytest.mark.testbed
@needs_root
@pytest.mark.timeout(300)
def test_replay_case_is_predicted_within_8_percent(tmp_path):
    """The built-in gpt2 profile (21 MB of gradients, 181 ms of compute) replayed with slept
    compute by 2 workers over 300 Mbit/s links with DDP buckets: communication-bound (a ring
    all-reduce of 21 MB takes about 0.6 s), deterministic compute, the network measured by
    netbench as a user would. Both methods must be within 8% of the measured throughput (the
    issue's max target). Measured (benchmarks/replay_ci_case.py), five runs: +0.1% to +1.0%; before
    the replay fidelity fix and DDP's bucket copies +3.6% to +8.8% (up to +17% on a machine loaded by
    other work); at 0.45 cores per node +12%, +42%, +7% (gloo's CPU work is throttled), hence 1 core.
    Scored as validation scores every case, against the median of three interleaved runs: one run
    alone is exposed to the machine's own moves (a full-suite run at f909cee measured 17.63 samples/s,
    +21.9%, where four reruns of the test just after passed)."""
    spec = ModelSpec("gpt2", batch_size=8, kind="replay")
    grid = Grid(specs=[spec], workers=[2], bandwidths_bps=[300e6], strategies=["allreduce"],
                cpu_per_node_cores=1.0, iterations=8, warmup=3, repeats=3)
    validator = Validator(grid, tmp_path, log=lambda text: None, predict_iterations=50)
    [row] = validator.run()
    assert row["kind"] == "replay" and row["key"].startswith("replay-gpt2-b8-allreduce")
    measurement = load_measurement(validator.measurement_path(grid.cases()[0]))
    assert measurement.config.workload == "replay" and measurement.config.replay_compute == "sleep"
    # each run waited for a quiet host first and keeps what the hypervisor took just before it
    assert len(row["runs"]) == 3
    assert all(run["steal_before_cores"] is None or run["steal_before_cores"] >= 0 for run in row["runs"])
    for method in ("fine", "coarse"):
        assert abs(row["error"][method]) <= REPLAY_BOUND, (
            f"{method}: predicted {row['predicted_throughput'][method]:.2f} vs measured "
            f"{row['measured_throughput']:.2f} samples/s ({row['error'][method]:+.1%})")
    assert {(item["kind"], item["method"]) for item in summarize([row])} >= {("replay", "fine"), ("replay", "coarse")}
    assert {item["kind"] for item in summarize([row])} == {"replay"}
    again = Validator(grid, tmp_path, log=lambda text: None, predict_iterations=50)
    again.measure_case = None  # resuming must not rerun the case; --repredict only re-scores it
    [repredicted] = again.run(repredict=True)
    assert repredicted["kind"] == "replay" and repredicted["measured_throughput"] == row["measured_throughput"]


def test_summary_reports_real_and_replay_cases_apart():
    rows = [{"strategy": "allreduce", "error": {"fine": 0.30}},  # written before replay: a real case
            {"strategy": "allreduce", "kind": "replay", "error": {"fine": 0.02}}]
    summary = {(item["kind"], item["method"], item["strategy"]): item for item in summarize(rows)}
    assert summary["real", "fine", "all"]["max_abs_error"] == pytest.approx(0.30)
    assert summary["replay", "fine", "all"]["max_abs_error"] == pytest.approx(0.02)


def test_at_run_speed_scales_the_plain_step_to_the_runs_reference():
    """The profile's uninstrumented step less its batch creation becomes the run's reference step;
    every part scales by the same factor."""
    from sgdscale.profile import load_profile
    from sgdscale.validation import at_run_speed

    profile = load_profile("resnet18")
    plain = profile.iteration_s.p50 - profile.step.data_s
    scaled = at_run_speed(profile, 1.5 * plain)
    assert scaled.compute_s == pytest.approx(1.5 * profile.compute_s)
    assert scaled.layers[0].forward_s == pytest.approx(1.5 * profile.layers[0].forward_s)


def test_at_run_speed_when_batch_creation_outlasts_the_plain_step():
    """A tiny model's profile under a quota can hold a mean batch creation longer than its median
    plain step (a CFS throttle met while making a batch): the plain step is then the profile's
    compute less its batch creation, never a negative step (it failed CI once)."""
    from sgdscale.profile import load_profile
    from sgdscale.validation import at_run_speed

    profile = load_profile("mlp")
    odd = profile.model_copy(update={"step": profile.step.model_copy(
        update={"data_s": profile.iteration_s.p50 + 0.005})})
    plain = odd.compute_s - odd.step.data_s
    scaled = at_run_speed(odd, 2.0 * plain)
    assert scaled.compute_s == pytest.approx(2.0 * odd.compute_s)


def test_validate_has_real_settings_for_every_model_it_names():
    """Held-out set 33 first named real densenet121, which validate then refused at its start."""
    from sgdscale.commands.validate import model_spec
    from sgdscale.errors import UserError

    spec = model_spec("densenet121", None)
    assert (spec.model, spec.batch_size, spec.image_size) == ("densenet121", 4, 32)
    with pytest.raises(UserError, match="densenet121"):  # the message lists it among the known ones
        model_spec("vgg11", None)


def test_short_steps_get_a_window_of_at_least_min_window_seconds():
    """A run measures `iterations` steps (3x for async PS), more where those would last under
    `min_window_s` by the profile's step, at most MAX_WINDOW_FACTOR x `iterations`; 0 keeps the count."""
    from sgdscale.window import MAX_WINDOW_FACTOR

    fixed = Grid(specs=[ModelSpec("mlp", 32)], workers=[2], bandwidths_bps=[1e9], strategies=["allreduce"],
                 iterations=15)
    assert fixed.iterations_for("allreduce", 0.01) == 15 and fixed.iterations_for("ps-async", 0.01) == 45
    grid = dataclasses.replace(fixed, min_window_s=20.0)
    assert grid.iterations_for("allreduce", 1.0) == 20  # 15 steps of 1 s last 15 s: 20 steps
    assert grid.iterations_for("ps-async", 1.0) == 45  # 45 s already
    assert grid.iterations_for("allreduce", 2.0) == 15
    assert grid.iterations_for("allreduce", 0.13) == 15 * MAX_WINDOW_FACTOR  # 154 wanted, capped at 150
    assert grid.iterations_for("allreduce", 0.2) == 100
    assert grid.iterations_for("allreduce", None) == 15  # no profile step known



def test_network_per_round_paths_and_the_run_keeps_its_file(tmp_path):
    """A grid that benchmarks every round names round r's file -rR; a kept set without such files
    keeps reading its one file, and a set that has them is read per round whatever the flag."""
    from sgdscale.commands.validate import model_spec

    def make(per_round):
        grid = Grid(specs=[model_spec("mlp", None)], workers=[2], bandwidths_bps=[1e9], strategies=["allreduce"],
                    network_per_round=per_round)
        return Validator(grid, tmp_path, log=lambda text: None)

    once, every = make(False), make(True)
    base = once.network_path(1e9)
    assert once.network_path(1e9, 1) == base == every.network_path(1e9, 0)
    assert every.network_path(1e9, 2).name == base.stem + "-r2.json"
    base.parent.mkdir(parents=True)
    (base.parent / (base.stem + "-r1.json")).write_text("{}")
    assert once.network_path(1e9, 1).name == base.stem + "-r1.json"  # read where it exists
    assert once.network_path(1e9, 2) == base


def test_budget_predictions_charge_interference_to_real_compute_only(tmp_path):
    """Validation's budget columns (`predict --cpu-per-node`, no network file) carry the interference
    the budget implies for real compute; a replay's sleeps take no CPU, so it gets none (nor message CPU)."""
    from sgdscale.comm.interference import derived_interference
    from sgdscale.validation import Case

    grid = Grid(specs=[], workers=[2], bandwidths_bps=[1e9], strategies=["allreduce"], cpu_per_node_cores=0.3)
    validator = Validator(grid, tmp_path, log=lambda text: None)
    real = Case(ModelSpec("cnn", 16, image_size=32), 2, 1e9, "ps-sync", 1)
    cluster, models = validator.nominal_models(real)
    assert models["budget"].interference == derived_interference(cluster.payload_bps, 0.3)
    assert models["nominal"].interference is None
    replay = Case(ModelSpec("resnet50", 16, kind="replay"), 2, 1e9, "ps-sync", 1)
    _, models = validator.nominal_models(replay)
    assert models["budget"].interference is None and models["budget"].worker_cpu_s_per_message == 0.0
    assert models["budget"].server_cpu_s_per_message > 0.0  # the shard still computes
