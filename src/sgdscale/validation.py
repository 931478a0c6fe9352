"""Validation: every prediction checked against a real distributed run on the emulated cluster.

Two kinds of case, reported apart (`kind` in every row, and per kind in the summary):
- `real`: the model itself trains (real compute); end to end, and noisy on a shared 2-core
  machine because the compute inherits the node's speed under its CPU quota.
- `replay`: a module built from a profile (runtime/replay.py) trains: the profiled parameter sizes,
  gradient-ready order and compute times, with real communication. The profile is the input (a
  built-in one such as resnet50, or a file), so there is no profiling step, and compute is slept
  (default) or spun, so this checks the network and coordination model on big models with many
  workers. Predicted without per-iteration variability, since the replay spends the profiled means.

For each case (model, workers, bandwidth, strategy) the grid
1. profiles the model on a single emulated node under the same CPU quota as the cluster nodes,
   once per round, right before that model's runs of the round (the node's speed drifts over
   minutes, so a profile taken long before a run misjudges it); a replay case copies its input
   profile instead,
2. benchmarks the shaped network once per bandwidth (p2p, all-reduce and incast for every worker
   count in the grid; cached),
3. predicts with both methods from that round's profile and the network file,
4. runs the real training on an emulated cluster of workers (+ server shards) and
5. records predicted, measured and the relative error.

With `repeats` R, the whole grid runs R rounds, so each case is measured R times interleaved with
the other cases (a slow spell of the machine then hits different cases, not one case R times).
A case is scored by the median of its runs' predictions against the median of its measurements,
and keeps its band (min, median, max): an error inside the band cannot be told from noise.

With `trace_dir`, every run is traced (`sgdscale train --trace`) and its measured timeline is
written next to the fine prediction from the measured network (report/timeline.py), one
`TRACE_DIR/<case>[-rN].trace.json` per run; `--repredict` rewrites them from the kept measurements.

Each finished run is saved to `results.json` at once, so an interrupted grid resumes where it
stopped. Every node gets the same CPU quota (`cpu_per_node_cores`), so one profile per model and
round serves every cluster size. Nodes are pinned to cores (`pin_cpus`; see runtime/testbed.py) and
each run records the CPU its nodes really received and the machine's other load.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sgdscale.errors import UserError
from sgdscale.hostinfo import QUIET_STEAL_CORES, wait_for_quiet_host
from sgdscale.jsonio import write_json_atomic
from sgdscale.units import format_bandwidth
from sgdscale.window import MAX_WINDOW_FACTOR, window_steps

VALIDATION_SCHEMA = "sgdscale.validation/1"


@dataclass(frozen=True)
class ModelSpec:
    """A model as the grid runs it: name, per-worker batch, input size and zoo options; or, with
    `kind="replay"`, a profile (built-in name or file) replayed with `replay_compute`."""

    model: str
    batch_size: int
    image_size: int | None = None
    seq_len: int | None = None
    options: tuple[tuple[str, int | float | str], ...] = ()
    kind: str = "real"  # or "replay"
    replay_compute: str = "sleep"

    @property
    def name(self) -> str:
        return Path(self.model).stem if self.kind == "replay" else self.model

    @property
    def label(self) -> str:
        if self.kind == "replay":
            return f"replay-{self.name}-b{self.batch_size}" + ("-spin" if self.replay_compute == "spin" else "")
        parts = [self.model, f"b{self.batch_size}"]
        if self.image_size:
            parts.append(f"i{self.image_size}")
        if self.seq_len:
            parts.append(f"s{self.seq_len}")
        parts += [f"{k}{v}" for k, v in self.options]
        return "-".join(parts)

    def cli_args(self) -> list[str]:
        args = ["--batch-size", str(self.batch_size)]
        if self.image_size:
            args += ["--image-size", str(self.image_size)]
        if self.seq_len:
            args += ["--seq-len", str(self.seq_len)]
        for key, value in self.options:
            args += ["--option", f"{key}={value}"]
        return args


@dataclass(frozen=True)
class Case:
    spec: ModelSpec
    workers: int
    bandwidth_bps: float
    strategy: str
    ps_count: int = 0

    @property
    def nodes(self) -> int:
        return self.workers + self.ps_count

    @property
    def key(self) -> str:
        ps = f"-ps{self.ps_count}" if self.ps_count else ""
        return f"{self.spec.label}-{self.strategy}{ps}-w{self.workers}-{self.bandwidth_bps / 1e6:g}Mbit"


# Async PS workers drift in and out of bunched phases, so a short window catches a different mix
# from run to run: the same replay case spread 27.7% over 15 measured steps and 8.4% over 45
# (4 interleaved runs each, benchmarks/window_length.py, benchmarks/results/window_length/).
ASYNC_WINDOW_FACTOR = 3
# Where a step is short, a fixed number of steps is a short window, and the machine's speed moves
# within seconds: real cnn (2 workers, all-reduce, 0.40 cores, 0.13 s steps) spread 55.1% over 6
# interleaved runs of 15 steps and 13.1% over 150 (benchmarks/window_length.py --real, raw
# benchmarks/results/window_length/cnn-real-allreduce-w2-2800Mbit-q0.4.md). `Grid.min_window_s`
# lengthens such windows (and the profiles' too), up to sgdscale.window.MAX_WINDOW_FACTOR times the
# fixed count.


@dataclass
class Grid:
    specs: list[ModelSpec]
    workers: list[int]
    bandwidths_bps: list[float]
    strategies: list[str]
    ps_count: int = 1
    cpu_per_node_cores: float = 0.2
    iterations: int = 15
    warmup: int = 3
    profile_iterations: int = 20
    repeats: int = 1
    pin_cpus: bool = True
    min_window_s: float = 0.0  # measured window at least this long by the profile's step (0: fixed count)
    network_per_round: bool = False  # benchmark the network again before every round (`Validator.network_path`)
    cases_filter: Callable[[Case], bool] | None = field(default=None, repr=False)

    def iterations_for(self, strategy: str, step_s: float | None = None) -> int:
        """Measured steps of a run: `iterations`, times ASYNC_WINDOW_FACTOR for async PS; more where
        that many steps of `step_s` (the profile's one-worker step) last under `min_window_s`, up to
        MAX_WINDOW_FACTOR x `iterations`."""
        steps = self.iterations * (ASYNC_WINDOW_FACTOR if strategy == "ps-async" else 1)
        return window_steps(steps, step_s, self.min_window_s, self.iterations * MAX_WINDOW_FACTOR)

    def cases(self) -> list[Case]:
        cases = []
        for spec in self.specs:
            for bandwidth in self.bandwidths_bps:
                for strategy in self.strategies:
                    for workers in self.workers:
                        ps = self.ps_count if strategy.startswith("ps") else 0
                        case = Case(spec, workers, bandwidth, strategy, ps)
                        if self.cases_filter is None or self.cases_filter(case):
                            cases.append(case)
        return cases


# Steps the fine method simulates per prediction of a case (its own sampling noise: benchmarks/prediction_noise.py).
PREDICT_ITERATIONS = 200


def sleeps(case: Case) -> bool:
    """A replay whose layers sleep: they take no CPU from gloo, nor gloo from them, so its workers
    pay no interference and no per-message CPU (the shard still does)."""
    return case.spec.kind == "replay" and case.spec.replay_compute == "sleep"


def relative_error(predicted: float, measured: float) -> float:
    """Signed (predicted - measured) / measured; positive means the prediction is too optimistic."""
    return (predicted - measured) / measured


def case_kind(row: dict[str, Any]) -> str:
    """`real` or `replay` (rows written before replay existed are real runs)."""
    return row.get("kind", "real")


REFERENCE_STEPS = 6  # a real run's own compute reference: 3 plain steps before its window, 3 after
RUN_SPEED_METHODS = ("fine-run-speed", "coarse-run-speed")
# Since set 33: nominal figures plus the grid's CPU budget, as `sgdscale predict --cpu-per-node` makes
# them without a network file (the testbed's typical CPU costs, `comm.interference.node_model`).
BUDGET_METHODS = ("fine-budget", "coarse-budget")


def reference_step_s(measurement: Any) -> float | None:
    """The run's compute reference (`runtime.worker.ComputeReference`): the median over workers of
    each worker's median plain step, or None for a run without one (replays, older runs)."""
    per_worker = [statistics.median(w.extra["reference_step_s"]) for w in measurement.workers
                  if w.extra and w.extra.get("reference_step_s")]
    return statistics.median(per_worker) if per_worker else None


def at_run_speed(profile: Any, reference_step_s: float) -> Any:
    """`profile` with every compute time scaled by one factor, so that its plain step (the profile's
    uninstrumented step less its batch creation, which the reference steps skip) takes the run's
    reference step."""
    from sgdscale.calibrate import to_step_time

    plain_s = (profile.iteration_s.p50 if profile.iteration_s else profile.compute_s) - profile.step.data_s
    if not plain_s > 0:  # a step of a few ms whose batch creation met a throttled CFS period (mean above p50)
        plain_s = profile.compute_s - profile.step.data_s
    if not plain_s > 0:
        return profile
    return to_step_time(profile, profile.compute_s * reference_step_s / plain_s, same_device=True)


def summarize(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and maximum absolute error per kind of case, method and strategy, and per kind and
    method overall: real and replay cases are never pooled."""
    rows = list(rows)
    summary = []
    for kind in sorted({case_kind(r) for r in rows}):
        of_kind = [r for r in rows if case_kind(r) == kind]
        for method in ("fine", "coarse", "fine-nominal", "coarse-nominal", *BUDGET_METHODS, *RUN_SPEED_METHODS):
            for strategy in sorted({r["strategy"] for r in of_kind}) + ["all"]:
                errors = [abs(r["error"][method]) for r in of_kind
                          if method in r["error"] and (strategy == "all" or r["strategy"] == strategy)]
                if errors:
                    summary.append({"kind": kind, "method": method, "strategy": strategy, "cases": len(errors),
                                    "median_abs_error": statistics.median(errors), "max_abs_error": max(errors)})
    return summary


def network_bench_config(ops: Sequence[str] = ("p2p", "allreduce", "incast", "outcast", "overlap")) -> dict[str, Any]:
    """What `Validator.ensure_network` measures. overlap: how compute and a collective slow each other
    on these nodes (comm/interference.py); incast: how unequally flows into one node share its link
    (comm/network.py, `Sharing`), on the 1-5 MB sizes only (1.4 and 4.8 MB): bandwidth-bound, and 27%
    of the bytes of all nine sizes (benchmarks/link_sharing.py measures what it adds; sets 52 and 53
    ran 16 MB too, for a change taken back); outcast: how flows out of one node share it (`Outcast`,
    16 MB)."""
    from sgdscale.runtime.netbench import bench_config, message_sizes

    sizes = message_sizes(1e3, 16e6, 9)
    config = bench_config(sizes, repeats=5, warmup=1, ops=list(ops))
    if "incast" in ops:
        config["incast_sizes"] = [s for s in sizes if 1e6 <= s <= 5e6]
    return config


class Validator:
    """Runs a grid case by case with caching and resume; see the module docstring."""

    def __init__(self, grid: Grid, out_dir: Path, *, log: Callable[[str], None] = print,
                 predict_iterations: int = PREDICT_ITERATIONS, trace_dir: Path | None = None) -> None:
        self.grid = grid
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.out_dir = Path(out_dir)
        self.log = log
        self.predict_iterations = predict_iterations
        self.results_path = self.out_dir / "results.json"
        self.rows: list[dict[str, Any]] = []
        if self.results_path.exists():
            data = json.loads(self.results_path.read_text())
            if data.get("schema") != VALIDATION_SCHEMA:
                raise UserError(f"{self.results_path} is not a validation result; choose another output folder")
            self.rows = data["cases"]

    # ---------------------------------------------------------------- cached inputs
    def profile_path(self, spec: ModelSpec, round_index: int = 0) -> Path:
        if spec.kind == "replay":  # the input profile: one for every round, no quota involved
            return self.out_dir / "profiles" / f"{spec.label.removesuffix('-spin')}.json"
        suffix = f"-r{round_index}" if round_index else ""
        return self.out_dir / "profiles" / f"{spec.label}-q{self.grid.cpu_per_node_cores:g}{suffix}.json"

    def bench_counts(self) -> list[int]:
        """Worker counts the network file serves (its name): every all-reduce size of the grid (2 at least)."""
        return sorted({max(2, n) for n in self.grid.workers})

    def bench_runs(self) -> list[int]:
        """Process counts the network benchmark runs: `bench_counts`, and with parameter servers in the
        grid its largest PS case's nodes too, so incast runs with as many senders as that case has
        workers. Link sharing is fitted from incast with 2 senders or more: a 2-worker grid measured
        with 2 processes got none, and the fine method, sharing equally, settled into lock step
        (held-out set 8, resnet18 with 2 workers: sync PS -21%, async PS -44%; with the sharing
        measured on the same testbed with 3 processes, +4% and +3-9%)."""
        counts = set(self.bench_counts())
        if any(strategy.startswith("ps") for strategy in self.grid.strategies):
            counts.add(max(self.grid.workers) + self.grid.ps_count)
        return sorted(counts)

    def network_path(self, bandwidth_bps: float, round_index: int = 0) -> Path:
        """The grid's network file, named by the process counts it was benchmarked with (`bench_runs`);
        round r's own (`-rR`) where the grid benchmarks the network before every round or the file
        exists. The CPU a message and a byte of transport cost moved 39-111 us and 0.30-0.77 ns
        between sets hours apart (`benchmarks/message_cpu_drift.py`), and both PS methods charge
        them, so a file is only as good as it is close to the runs it predicts.

        Grids of one set share the folder, so a PS grid must not take an all-reduce grid's file: that
        one ran fewer processes, and its incast fewer senders than the PS cases have workers (set 17's
        sync-PS grid took its all-reduce grid's file). A file made before files recorded their
        process counts (`environment["processes"]`) is named by the worker counts alone and still
        serves the grid that made it, so kept sets re-predict from what they ran with."""
        folder, stem = self.out_dir / "networks", f"{bandwidth_bps / 1e6:g}Mbit-q{self.grid.cpu_per_node_cores:g}"
        path = folder / f"{stem}-n{'-'.join(str(n) for n in self.bench_runs())}.json"
        legacy = folder / f"{stem}-n{'-'.join(str(n) for n in self.bench_counts())}.json"
        if not path.exists() and legacy.exists() and "processes" not in json.loads(legacy.read_text()).get(
                "environment", {}):
            return legacy
        if round_index:
            own = path.with_name(f"{path.stem}-r{round_index}.json")
            if self.grid.network_per_round or own.exists():
                return own
        return path

    def ensure_profile(self, spec: ModelSpec, round_index: int = 0) -> Path:
        """Profile on one emulated node with the cluster's per-node CPU quota (one core's share);
        a replay case's profile is its input: kept as given, so the folder holds what was run."""
        from sgdscale.runtime.testbed import Testbed

        path = self.profile_path(spec, round_index)
        if path.exists():
            return path
        if spec.kind == "replay":
            from sgdscale.profile import load_profile, save_profile

            save_profile(load_profile(spec.model), path)
            return path
        self.log(f"profiling {spec.label} on one node at {self.grid.cpu_per_node_cores:g} cores"
                 + (f" (round {round_index + 1})" if round_index else ""))
        argv = [sys.executable, "-m", "sgdscale.cli", "profile", spec.model, "-o", str(path), "--threads", "1",
                "--iterations", str(self.grid.profile_iterations), "--min-window", str(self.grid.min_window_s),
                *spec.cli_args()]
        with Testbed(1, 1e9, self.grid.cpu_per_node_cores, pin_cpus=self.grid.pin_cpus) as testbed:
            done = testbed.run_on_node(0, argv, timeout_s=1800, env={"OMP_NUM_THREADS": "1"})
        if done.returncode != 0 or not path.exists():
            raise UserError(f"profiling {spec.label} failed:\n{done.stderr.strip()[-2000:]}")
        return path

    def ensure_network(self, bandwidth_bps: float, round_index: int = 0) -> Path:
        """Benchmark p2p, all-reduce and incast for every worker count of the grid on the shaped links
        (for round `round_index` where the grid benchmarks every round: `network_path`)."""
        from sgdscale.runtime.netbench import run_netbench
        from sgdscale.runtime.testbed import CFS_PERIOD_US, Testbed

        path = self.network_path(bandwidth_bps, round_index)
        if path.exists():
            return path
        counts = self.bench_runs()
        self.log(f"benchmarking the network at {format_bandwidth(bandwidth_bps)} for {counts} processes"
                 + (f" (round {round_index + 1})" if round_index else ""))
        config = network_bench_config()
        with Testbed(max(counts), bandwidth_bps, self.grid.cpu_per_node_cores,
                     pin_cpus=self.grid.pin_cpus) as testbed:
            network = run_netbench(counts, config, placement=testbed, bandwidth_hint_bps=bandwidth_bps,
                                   source=f"emulated cluster, tbf {format_bandwidth(bandwidth_bps)}, "
                                          f"{self.grid.cpu_per_node_cores:g} cores per node",
                                   environment={"bandwidth_bps": bandwidth_bps,
                                                "cpu_quota_cores": self.grid.cpu_per_node_cores,
                                                "cfs_period_s": CFS_PERIOD_US / 1e6,
                                                "processes": counts,
                                                "tcp_congestion_control": testbed.tcp_congestion_control})
        write_json_atomic(path, network.to_json())
        retried = [run for run in network.environment.get("launches", []) if run.get("attempt", 1) > 1]
        if retried:
            kept = next(run for run in network.environment["launches"] if run.get("kept") and run.get("p2p_spread") is not None)
            self.log(f"the network benchmark was measured again {len(retried)} time(s): its ping-pong spread over "
                     f"the steadiness bound (a disturbed machine); kept the attempt whose spread was {kept['p2p_spread']:.1%}")
        return path

    # ---------------------------------------------------------------- one case
    def predict_case(self, case: Case, round_index: int = 0, reference_step_s: float | None = None,
                     network_name: str | None = None) -> dict[str, Any]:
        """Both methods' results given the measured network file ("fine", "coarse") and given only
        the nominal bandwidth and default latency ("fine-nominal", "coarse-nominal"), as a user
        without a network benchmark would predict, and with the grid's CPU budget added to those
        ("fine-budget", "coarse-budget"), as `sgdscale predict --cpu-per-node` would. Given the run's own compute reference (a real
        case's `reference_step_s`), also from the measured network with the profile scaled to the
        run's compute speed ("fine-run-speed", "coarse-run-speed"): a diagnostic, not a prediction
        anyone could make beforehand, that tells the model's error from the machine's drift.
        `network_name`: the file in networks/ the run recorded (default: the round's, `network_path`)."""
        from sgdscale.predict import predict

        profile, cluster, strategy, comm, variability = self.case_inputs(case, round_index, network_name)
        prediction = predict(profile, cluster, strategy, comm, [case.workers], methods=("fine", "coarse"),
                             iterations=self.predict_iterations, variability=variability)
        results = {r.method: r for r in prediction.results if r.workers == case.workers}
        if reference_step_s:
            at_speed = predict(at_run_speed(profile, reference_step_s), cluster, strategy, comm, [case.workers],
                               methods=("fine", "coarse"), iterations=self.predict_iterations,
                               variability=variability)
            results.update({f"{r.method}-run-speed": r for r in at_speed.results if r.workers == case.workers})
        nominal_cluster, models = self.nominal_models(case)
        for label, model in models.items():
            made = predict(profile, nominal_cluster, strategy, model, [case.workers], methods=("fine", "coarse"),
                           iterations=self.predict_iterations, variability=variability)
            results.update({f"{r.method}-{label}": r for r in made.results if r.workers == case.workers})
        return results

    def nominal_models(self, case: Case) -> tuple[Any, dict[str, Any]]:
        """The cluster and cost models of a prediction made without a network file: from the nominal
        bandwidth and default latency ("nominal"), and with the grid's CPU budget added ("budget",
        as `sgdscale predict --cpu-per-node` charges it; only where the grid has a quota). The
        testbed's rates are tc's, so its framing is `tc` (`sgdscale predict --framing tc`)."""
        from sgdscale.cluster import Cluster
        from sgdscale.comm import CommModel
        from sgdscale.comm.interference import node_model
        from sgdscale.runtime.testbed import LINK_FRAMING

        cluster = Cluster(case.workers, case.bandwidth_bps, ps_count=max(1, case.ps_count), framing=LINK_FRAMING)
        payload_bps = cluster.payload_bps
        nominal = CommModel.from_link(payload_bps, cluster.latency_s)
        models = {"nominal": nominal}
        if self.grid.cpu_per_node_cores:
            budget, _ = node_model(nominal, network=None, link_bps=payload_bps,
                                   cpu_cores=self.grid.cpu_per_node_cores)
            if sleeps(case):
                budget = budget.for_sleeping_workers()
            models["budget"] = budget
        return cluster, models

    def case_inputs(self, case: Case, round_index: int = 0, network_name: str | None = None
                    ) -> tuple[Any, Any, Any, Any, bool]:
        """(profile, cluster, strategy, comm, variability) of the prediction from the measured network
        (the file `network_name` in networks/, else the round's)."""
        from sgdscale.cluster import Cluster
        from sgdscale.comm import CommModel, load_network
        from sgdscale.profile import load_profile
        from sgdscale.strategy import Strategy

        profile = load_profile(self.ensure_profile(case.spec, round_index))
        if case.spec.kind == "real" and self.grid.cpu_per_node_cores and "cpu_quota_cores" not in profile.provenance:
            # made on a node under the grid's quota before profiles recorded it (sgdscale.cpu_quota)
            profile = profile.model_copy(update={"provenance": {**profile.provenance,
                                                                "cpu_quota_cores": self.grid.cpu_per_node_cores}})
        network = load_network(self.out_dir / "networks" / network_name if network_name
                               else self.ensure_network(case.bandwidth_bps, round_index))
        comm = CommModel.from_network(network)
        if sleeps(case):
            comm = comm.for_sleeping_workers()
        cluster = Cluster(case.workers, case.bandwidth_bps, network.p2p.alpha_s, max(1, case.ps_count))
        variability = case.spec.kind != "replay"  # a replay spends the profiled means
        return profile, cluster, Strategy(kind=case.strategy), comm, variability

    def trace_path(self, case: Case, round_index: int = 0) -> Path:
        suffix = f"-r{round_index}" if round_index else ""
        return self.trace_dir / f"{case.key}{suffix}.trace.json"

    def write_trace(self, case: Case, round_index: int, measurement: Any) -> None:
        """The run's measured timeline beside the fine prediction from the measured network."""
        from sgdscale.report.timeline import predicted_events, write_side_by_side

        profile, cluster, strategy, comm, variability = self.case_inputs(case, round_index)
        predicted = predicted_events(profile, cluster, strategy, comm, measurement.config.iterations,
                                     variability=variability)
        write_side_by_side(measurement, predicted, self.trace_path(case, round_index), prediction={
            "method": "fine", "profile": str(self.profile_path(case.spec, round_index)),
            "network": str(self.network_path(case.bandwidth_bps, round_index)), "variability": variability})

    def window_steps(self, case: Case) -> int:
        """Measured steps of every run of `case`: by round 0's profile, so that all rounds measure
        the same window."""
        from sgdscale.profile import load_profile

        step_s = load_profile(self.profile_path(case.spec, 0)).compute_s if self.grid.min_window_s > 0 else None
        return self.grid.iterations_for(case.strategy, step_s)

    def measure_case(self, case: Case) -> Any:
        from sgdscale.runtime.testbed import Testbed
        from sgdscale.runtime.train import TrainConfig, replay_config, run_training

        common = dict(workers=case.workers, strategy=case.strategy, ps_count=case.ps_count,
                      iterations=self.window_steps(case), warmup=self.grid.warmup,
                      bandwidth_bps=case.bandwidth_bps, cpu_quota=self.grid.cpu_per_node_cores,
                      trace=self.trace_dir is not None,
                      reference_steps=REFERENCE_STEPS if case.spec.kind == "real" else 0)
        if case.spec.kind == "replay":
            config = replay_config(str(self.profile_path(case.spec)), case.spec.replay_compute, **common)
            config.model = case.spec.name
        else:
            config = TrainConfig(
                model=case.spec.model, batch_size=case.spec.batch_size, image_size=case.spec.image_size,
                seq_len=case.spec.seq_len, model_options=dict(case.spec.options), **common,
            )
        with Testbed(case.nodes, case.bandwidth_bps, self.grid.cpu_per_node_cores,
                     pin_cpus=self.grid.pin_cpus) as testbed:
            return run_training(config, placement=testbed, timeout_s=1800)

    def measurement_path(self, case: Case, round_index: int = 0) -> Path:
        suffix = f"-r{round_index}" if round_index else ""
        return self.out_dir / "measurements" / f"{case.key}{suffix}.json"

    def run_case(self, case: Case, round_index: int = 0) -> dict[str, Any]:
        """One measured run of `case` in round `round_index`, with its own prediction."""
        from sgdscale.runtime.measurement import save_measurement

        self.ensure_profile(case.spec, round_index)  # before the run, so a failing profile costs no run
        network = self.ensure_network(case.bandwidth_bps, round_index)
        # a run beside a spell of steal measures the host, not the case: wait for it to pass (at most a minute)
        steal_before = wait_for_quiet_host(QUIET_STEAL_CORES)
        if steal_before is not None and steal_before >= QUIET_STEAL_CORES:
            self.log(f"the hypervisor still takes {steal_before:.2f} cores of this machine after a minute; measuring anyway")
        started = time.time()
        measurement = self.measure_case(case)
        save_measurement(measurement, self.measurement_path(case, round_index))
        if self.trace_dir is not None:
            self.write_trace(case, round_index, measurement)
        run = {
            "round": round_index,
            "reference_step_s": reference_step_s(measurement),
            "measured_throughput": measurement.throughput,
            "measured_iteration_s": measurement.iteration_s.model_dump(),
            "run_wall_s": time.time() - started,
            "cpu": measurement.environment.cpu,
            "tcp": measurement.environment.network,  # retransmissions, timeouts and queue drops
            "network": network.name,
            "steal_before_cores": steal_before,  # what the hypervisor took just before the run
        }
        return self.predict_run(case, run)

    def predict_run(self, case: Case, run: dict[str, Any]) -> dict[str, Any]:
        """`run` with its predictions (re)computed from its round's profile and the network file."""
        predicted = self.predict_case(case, run.get("round", 0), run.get("reference_step_s"), run.get("network"))
        return {
            **run,
            "predicted_throughput": {m: r.throughput for m, r in predicted.items()},
            "predicted_iteration_s": {m: r.iteration_s for m, r in predicted.items()},
            "predicted_breakdown": {m: asdict(r.breakdown) for m, r in predicted.items()},
            "bottleneck": {m: r.bottleneck for m, r in predicted.items()},
        }

    def case_row(self, case: Case, runs: list[dict[str, Any]]) -> dict[str, Any]:
        """A case scored from its runs: median prediction vs median measurement, with the band."""
        measured = [run["measured_throughput"] for run in runs]
        median = statistics.median(measured)
        methods = list(runs[0]["predicted_throughput"])
        predicted = {m: statistics.median(run["predicted_throughput"][m] for run in runs) for m in methods}
        # breakdown and bottleneck of the run whose measurement is nearest the median
        middle = min(runs, key=lambda run: abs(run["measured_throughput"] - median))
        return {
            "key": case.key,
            "kind": case.spec.kind,
            "model": case.spec.label,
            "workers": case.workers,
            "bandwidth_bps": case.bandwidth_bps,
            "strategy": case.strategy,
            "ps_count": case.ps_count,
            "measured_throughput": median,
            "measured_band": [min(measured), median, max(measured)],
            "measured_iteration_s": middle["measured_iteration_s"],
            "predicted_throughput": predicted,
            "predicted_iteration_s": middle["predicted_iteration_s"],
            "predicted_breakdown": middle["predicted_breakdown"],
            "bottleneck": middle["bottleneck"],
            "error": {m: relative_error(predicted[m], median) for m in methods},
            "runs": runs,
        }

    # ---------------------------------------------------------------- the grid
    def save(self) -> None:
        write_json_atomic(self.results_path, {
            "schema": VALIDATION_SCHEMA,
            "grid": {"cpu_per_node_cores": self.grid.cpu_per_node_cores, "iterations": self.grid.iterations,
                     "async_iterations": self.grid.iterations_for("ps-async"),
                     "min_window_s": self.grid.min_window_s, "warmup": self.grid.warmup,
                     "ps_count": self.grid.ps_count, "repeats": self.grid.repeats, "pin_cpus": self.grid.pin_cpus},
            "cases": self.rows,
            "summary": summarize(self.rows),
        })

    def run(self, on_case: Callable[[Case, int, int], None] | None = None,
            on_row: Callable[[dict[str, Any]], None] | None = None, repredict: bool = False,
            ) -> list[dict[str, Any]]:
        """Run the runs not yet in results.json, round by round; with `repredict`, also recompute
        the predictions of the finished ones (after a change to the predictors) without rerunning."""
        cases = self.grid.cases()
        index_of = {row["key"]: index for index, row in enumerate(self.rows)}
        if repredict:
            for case in cases:
                if case.key in index_of:
                    runs = [self.predict_run(case, run) for run in runs_of(self.rows[index_of[case.key]])]
                    self.rows[index_of[case.key]] = self.case_row(case, runs)
                    if self.trace_dir is not None:
                        self.retrace(case, runs)
            self.save()
        total = len(cases) * self.grid.repeats
        for round_index in range(self.grid.repeats):
            for position, case in enumerate(cases):
                if on_case is not None:
                    on_case(case, round_index * len(cases) + position, total)
                runs = runs_of(self.rows[index_of[case.key]]) if case.key in index_of else []
                if any(run.get("round", 0) == round_index for run in runs):
                    continue
                runs = sorted(runs + [self.run_case(case, round_index)], key=lambda run: run.get("round", 0))
                row = self.case_row(case, runs)
                if case.key in index_of:
                    self.rows[index_of[case.key]] = row
                else:
                    index_of[case.key] = len(self.rows)
                    self.rows.append(row)
                self.save()
                if on_row is not None:
                    on_row(row)
        return self.rows


    def retrace(self, case: Case, runs: list[dict[str, Any]]) -> None:
        """Rewrite the traces of kept runs (untraced runs give their phases only)."""
        from sgdscale.runtime.measurement import load_measurement

        for run in runs:
            path = self.measurement_path(case, run.get("round", 0))
            if path.exists():
                self.write_trace(case, run.get("round", 0), load_measurement(path))


def runs_of(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A case's runs; a row written before repeats existed is its own single run."""
    if "runs" in row:
        return row["runs"]
    keep = ("measured_throughput", "measured_iteration_s", "run_wall_s", "predicted_throughput",
            "predicted_iteration_s", "predicted_breakdown", "bottleneck")
    return [{"round": 0, **{key: row[key] for key in keep if key in row}}]
