"""Rank-side pieces shared by the strategies: building the model and data, timing iterations,
injected faults (for tests of the launcher), the per-worker record, and the event recorder of a
traced run."""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from sgdscale.profiling.profiler import MOMENTUM
from sgdscale.profiling.zoo import Workload, build_workload


@dataclass
class Setup:
    workload: Workload
    batches: list[tuple[torch.Tensor, torch.Tensor]]
    replay: Any = None  # runtime.replay.Replay for a replay run (the optimizer time to spend)

    def batch(self, iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[iteration % len(self.batches)]


def build(config: dict[str, Any], worker_index: int | None) -> Setup:
    """The model (same seed on every rank, so identical initial weights) and, for a worker, a small
    pool of synthetic batches of its own, generated before timing starts: the run measures the
    training step, not random-number generation (synthetic data has no loading cost to model).
    A replay run (`config["replay"]` holds a profile) builds the profile's replay module instead."""
    if config.get("replay"):
        from sgdscale.runtime.replay import build_replay, replay_batch, replay_loss

        replay = build_replay(config["replay"], config.get("replay_compute", "sleep"),
                              calibrate=worker_index is not None)
        workload = Workload(name=config["model"], module=replay.module, make_batch=replay_batch, loss_fn=replay_loss)
        return Setup(workload=workload, batches=[replay_batch(1)], replay=replay)
    workload = build_workload(
        config["model"], image_size=config.get("image_size"), seq_len=config.get("seq_len"),
        seed=config.get("seed", 0), **config.get("model_options", {}),
    )
    batches = []
    if worker_index is not None:
        pool = config.get("batch_pool", 2)
        for index in range((worker_index + 1) * pool):  # skip the other workers' batches
            batch = workload.make_batch(config["batch_size"])
            if index >= worker_index * pool:
                batches.append(batch)
    return Setup(workload=workload, batches=batches)


def maybe_fault(config: dict[str, Any], rank: int, iteration: int) -> None:
    """Test hook: {"fault": {"rank": 1, "iteration": 2, "kind": "exit"|"hang"|"raise"}}."""
    fault = config.get("fault")
    if not fault or fault.get("rank") != rank or fault.get("iteration") != iteration:
        return
    kind = fault.get("kind", "exit")
    if kind == "exit":
        os._exit(3)
    if kind == "hang":
        while True:
            time.sleep(1)
    raise RuntimeError(f"injected fault at iteration {iteration}")


@dataclass
class IterationLog:
    """Per-iteration wall-clock start (Unix time) and phase durations (monotonic clock)."""

    starts: list[float] = field(default_factory=list)
    totals: list[float] = field(default_factory=list)
    phases: dict[str, list[float]] = field(default_factory=dict)

    def add(self, start_unix: float, total_s: float, **phases: float | None) -> None:
        self.starts.append(start_unix)
        self.totals.append(total_s)
        for name, value in phases.items():
            if value is not None:
                self.phases.setdefault(name, []).append(value)

    def record(self, rank: int, warmup: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The WorkerRecord JSON, dropping the warm-up iterations."""
        out: dict[str, Any] = {
            "rank": rank,
            "iteration_start_s": self.starts[warmup:],
            "iteration_s": self.totals[warmup:],
        }
        for name, values in self.phases.items():
            if len(values) == len(self.totals):
                out[name] = values[warmup:]
        if extra:
            out["extra"] = extra
        return out


class EventRecorder:
    """Intervals a rank timestamps inside its steps, only in a traced run (`config["trace"]`).

    The strategies install their traced hooks only when a recorder exists, so an untraced run
    executes none of this. Times are perf_counter() values converted to Unix time with the pair
    taken at the start of the current iteration (`begin`), the same pair `IterationLog` stores, so
    an event and the phases of its iteration sit on one clock. `add` may be called from gloo's
    threads (future callbacks): appending a tuple to a list is atomic under the GIL."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, int, float, float, dict[str, Any] | None]] = []
        self.iteration = 0
        self.offset_s = time.time() - time.perf_counter()

    def begin(self, iteration: int, start_unix: float, start_perf: float) -> None:
        self.iteration = iteration
        self.offset_s = start_unix - start_perf

    def add(self, thread: str, name: str, start_perf: float, end_perf: float, args: dict[str, Any] | None = None,
            iteration: int | None = None) -> None:
        self.rows.append((thread, name, self.iteration if iteration is None else iteration,
                          start_perf + self.offset_s, end_perf - start_perf, args))

    def record(self, warmup: int) -> list[dict[str, Any]]:
        """The `events` of a WorkerRecord/ServerRecord: warm-up dropped, iterations renumbered."""
        return [{"name": name, "thread": thread, "iteration": iteration - warmup, "start_s": start_s,
                 "duration_s": max(duration_s, 0.0), **({"args": args} if args else {})}
                for thread, name, iteration, start_s, duration_s, args in self.rows if iteration >= warmup]


class ComputeReference:
    """The run's own compute reference: steps of a private copy of the plain model (no communication,
    no DDP, SGD with momentum as profiled), timed on the rank's node just before and just after the
    measured window (`config["reference_steps"]`, half each side; 0: none). The machine's speed
    drifts by 20-35% within minutes (`benchmarks/profile_vs_run.py`), more than a profile taken
    beforehand can follow, so validation also predicts from the profile scaled to this step
    (`sgdscale.validation.at_run_speed`). On held-out set 30 that did not lower the error: the drift
    of back-to-back compute is not what moves a real run (README). Not for replays: their compute is
    the profile."""

    def __init__(self, setup: Setup, config: dict[str, Any]) -> None:
        steps = 0 if setup.replay is not None else int(config.get("reference_steps") or 0)
        self.before, self.after = (steps + 1) // 2, steps // 2
        self.seconds: list[float] = []
        if steps:
            self.module = copy.deepcopy(setup.workload.module)  # before any hook is registered on it
            self.optimizer = torch.optim.SGD(self.module.parameters(), lr=config["lr"], momentum=MOMENTUM)
            self.loss_fn = setup.workload.loss_fn
            self.batch = setup.batch(0)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            began = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            self.loss_fn(self.module(self.batch[0]), self.batch[1]).backward()
            self.optimizer.step()
            self.seconds.append(time.perf_counter() - began)

    def record(self, extra: dict[str, Any]) -> None:
        if self.seconds:
            extra["reference_step_s"] = self.seconds


def recorder_for(config: dict[str, Any]) -> EventRecorder | None:
    """An EventRecorder for a traced run, None otherwise (then nothing is timestamped)."""
    return EventRecorder() if config.get("trace") else None


def clock() -> tuple[float, float]:
    return time.time(), time.perf_counter()
