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
1. profiles the model once on a single emulated node under the same CPU quota as the cluster nodes
   (cached per model; a replay case copies its profile instead),
2. benchmarks the shaped network once per bandwidth (p2p and all-reduce for every worker count in
   the grid; cached),
3. predicts with both methods from that profile and network file,
4. runs the real training on an emulated cluster of workers (+ server shards) and
5. records predicted, measured and the relative error.

Each finished case is appended to `results.json` at once, so an interrupted grid resumes where it
stopped. Every node gets the same CPU quota (`cpu_per_node_cores`), so one profile per model serves
every cluster size.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sgdscale.errors import UserError
from sgdscale.jsonio import write_json_atomic
from sgdscale.units import format_bandwidth

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
    cases_filter: Callable[[Case], bool] | None = field(default=None, repr=False)

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


def relative_error(predicted: float, measured: float) -> float:
    """Signed (predicted - measured) / measured; positive means the prediction is too optimistic."""
    return (predicted - measured) / measured


def case_kind(row: dict[str, Any]) -> str:
    """`real` or `replay` (rows written before replay existed are real runs)."""
    return row.get("kind", "real")


def summarize(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median and maximum absolute error per kind of case, method and strategy, and per kind and
    method overall: real and replay cases are never pooled."""
    rows = list(rows)
    summary = []
    for kind in sorted({case_kind(r) for r in rows}):
        for method in ("fine", "coarse"):
            for strategy in sorted({r["strategy"] for r in rows if case_kind(r) == kind}) + ["all"]:
                errors = [abs(r["error"][method]) for r in rows
                          if case_kind(r) == kind and method in r["error"]
                          and (strategy == "all" or r["strategy"] == strategy)]
                if errors:
                    summary.append({"kind": kind, "method": method, "strategy": strategy, "cases": len(errors),
                                    "median_abs_error": statistics.median(errors), "max_abs_error": max(errors)})
    return summary


class Validator:
    """Runs a grid case by case with caching and resume; see the module docstring."""

    def __init__(self, grid: Grid, out_dir: Path, *, log: Callable[[str], None] = print,
                 predict_iterations: int = 200) -> None:
        self.grid = grid
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
    def profile_path(self, spec: ModelSpec) -> Path:
        if spec.kind == "replay":  # the input profile; no quota involved
            return self.out_dir / "profiles" / f"{spec.label.removesuffix('-spin')}.json"
        return self.out_dir / "profiles" / f"{spec.label}-q{self.grid.cpu_per_node_cores:g}.json"

    def bench_counts(self) -> list[int]:
        """Process counts the network benchmark runs: every all-reduce size of the grid (2 at least)."""
        return sorted({max(2, n) for n in self.grid.workers})

    def network_path(self, bandwidth_bps: float) -> Path:
        counts = "-".join(str(n) for n in self.bench_counts())
        return self.out_dir / "networks" / f"{bandwidth_bps / 1e6:g}Mbit-q{self.grid.cpu_per_node_cores:g}-n{counts}.json"

    def ensure_profile(self, spec: ModelSpec) -> Path:
        """Profile on one emulated node with the cluster's per-node CPU quota (one core's share);
        a replay case's profile is its input: kept as given, so the folder holds what was run."""
        from sgdscale.runtime.testbed import Testbed

        path = self.profile_path(spec)
        if path.exists():
            return path
        if spec.kind == "replay":
            from sgdscale.profile import load_profile, save_profile

            save_profile(load_profile(spec.model), path)
            return path
        self.log(f"profiling {spec.label} on one node at {self.grid.cpu_per_node_cores:g} cores")
        argv = [sys.executable, "-m", "sgdscale.cli", "profile", spec.model, "-o", str(path), "--threads", "1",
                "--iterations", str(self.grid.profile_iterations), *spec.cli_args()]
        with Testbed(1, 1e9, self.grid.cpu_per_node_cores) as testbed:
            done = testbed.run_on_node(0, argv, timeout_s=1800, env={"OMP_NUM_THREADS": "1"})
        if done.returncode != 0 or not path.exists():
            raise UserError(f"profiling {spec.label} failed:\n{done.stderr.strip()[-2000:]}")
        return path

    def ensure_network(self, bandwidth_bps: float) -> Path:
        """Benchmark p2p and all-reduce for every worker count of the grid on the shaped links."""
        from sgdscale.runtime.netbench import bench_config, message_sizes, run_netbench
        from sgdscale.runtime.testbed import Testbed

        path = self.network_path(bandwidth_bps)
        if path.exists():
            return path
        counts = self.bench_counts()
        self.log(f"benchmarking the network at {format_bandwidth(bandwidth_bps)} for {counts} processes")
        config = bench_config(message_sizes(1e3, 16e6, 9), repeats=5, warmup=1, ops=["p2p", "allreduce"])
        with Testbed(max(counts), bandwidth_bps, self.grid.cpu_per_node_cores) as testbed:
            network = run_netbench(counts, config, placement=testbed, bandwidth_hint_bps=bandwidth_bps,
                                   source=f"emulated cluster, tbf {format_bandwidth(bandwidth_bps)}, "
                                          f"{self.grid.cpu_per_node_cores:g} cores per node",
                                   environment={"bandwidth_bps": bandwidth_bps,
                                                "cpu_quota_cores": self.grid.cpu_per_node_cores})
        write_json_atomic(path, network.to_json())
        return path

    # ---------------------------------------------------------------- one case
    def predict_case(self, case: Case) -> dict[str, Any]:
        from sgdscale.cluster import Cluster
        from sgdscale.comm import CommModel, load_network
        from sgdscale.predict import predict
        from sgdscale.profile import load_profile
        from sgdscale.strategy import Strategy

        profile = load_profile(self.ensure_profile(case.spec))
        network = load_network(self.ensure_network(case.bandwidth_bps))
        comm = CommModel.from_network(network)
        cluster = Cluster(case.workers, case.bandwidth_bps, network.p2p.alpha_s, max(1, case.ps_count))
        strategy = Strategy(kind=case.strategy)
        prediction = predict(profile, cluster, strategy, comm, [case.workers], methods=("fine", "coarse"),
                             iterations=self.predict_iterations, variability=case.spec.kind != "replay")
        return {r.method: r for r in prediction.results if r.workers == case.workers}

    def measure_case(self, case: Case) -> Any:
        from sgdscale.runtime.testbed import Testbed
        from sgdscale.runtime.train import TrainConfig, replay_config, run_training

        common = dict(workers=case.workers, strategy=case.strategy, ps_count=case.ps_count,
                      iterations=self.grid.iterations, warmup=self.grid.warmup,
                      bandwidth_bps=case.bandwidth_bps, cpu_quota=self.grid.cpu_per_node_cores)
        if case.spec.kind == "replay":
            config = replay_config(str(self.profile_path(case.spec)), case.spec.replay_compute, **common)
            config.model = case.spec.name
        else:
            config = TrainConfig(
                model=case.spec.model, batch_size=case.spec.batch_size, image_size=case.spec.image_size,
                seq_len=case.spec.seq_len, model_options=dict(case.spec.options), **common,
            )
        with Testbed(case.nodes, case.bandwidth_bps, self.grid.cpu_per_node_cores) as testbed:
            return run_training(config, placement=testbed, timeout_s=1800)

    def measurement_path(self, case: Case) -> Path:
        return self.out_dir / "measurements" / f"{case.key}.json"

    def run_case(self, case: Case) -> dict[str, Any]:
        from sgdscale.runtime.measurement import save_measurement

        self.ensure_profile(case.spec)  # before the run, so a failing profile costs no run
        self.ensure_network(case.bandwidth_bps)
        started = time.time()
        measurement = self.measure_case(case)
        save_measurement(measurement, self.measurement_path(case))
        row = {
            "key": case.key,
            "kind": case.spec.kind,
            "model": case.spec.label,
            "workers": case.workers,
            "bandwidth_bps": case.bandwidth_bps,
            "strategy": case.strategy,
            "ps_count": case.ps_count,
            "measured_throughput": measurement.throughput,
            "measured_iteration_s": measurement.iteration_s.model_dump(),
            "run_wall_s": time.time() - started,
        }
        return self.with_prediction(case, row)

    def with_prediction(self, case: Case, row: dict[str, Any]) -> dict[str, Any]:
        """`row` with the predicted fields (re)computed from the cached profile and network."""
        predicted = self.predict_case(case)
        measured = row["measured_throughput"]
        return {
            **row,
            "predicted_throughput": {m: r.throughput for m, r in predicted.items()},
            "predicted_iteration_s": {m: r.iteration_s for m, r in predicted.items()},
            "predicted_breakdown": {m: asdict(r.breakdown) for m, r in predicted.items()},
            "bottleneck": {m: r.bottleneck for m, r in predicted.items()},
            "error": {m: relative_error(r.throughput, measured) for m, r in predicted.items()},
        }

    # ---------------------------------------------------------------- the grid
    def save(self) -> None:
        write_json_atomic(self.results_path, {
            "schema": VALIDATION_SCHEMA,
            "grid": {"cpu_per_node_cores": self.grid.cpu_per_node_cores, "iterations": self.grid.iterations,
                     "warmup": self.grid.warmup, "ps_count": self.grid.ps_count},
            "cases": self.rows,
            "summary": summarize(self.rows),
        })

    def run(self, on_case: Callable[[Case, int, int], None] | None = None,
            on_row: Callable[[dict[str, Any]], None] | None = None, repredict: bool = False,
            ) -> list[dict[str, Any]]:
        """Run the cases not yet in results.json; with `repredict`, also recompute the predictions
        of the finished ones (after a change to the predictors) without rerunning them."""
        done = {row["key"]: index for index, row in enumerate(self.rows)}
        cases = self.grid.cases()
        for index, case in enumerate(cases):
            if on_case is not None:
                on_case(case, index, len(cases))
            if case.key in done:
                if repredict:
                    self.rows[done[case.key]] = self.with_prediction(case, self.rows[done[case.key]])
                    self.save()
                continue
            row = self.run_case(case)
            self.rows.append(row)
            self.save()
            if on_row is not None:
                on_row(row)
        return self.rows
