"""Measured timelines of real runs, and measured next to predicted, as Chrome traces (report/trace.py).

Torch-free: a measured timeline is made from a `sgdscale.measurement/1` file alone, a predicted one
by the fine simulator.

Measured (`measured_events`), per worker: a `step` row with one slice `iteration k` per measured
iteration (k = 0 is the first after warm-up, as in the measurement); a `compute` row with the
phases the runtime times in every run, laid end to end from the iteration's start (all-reduce:
forward, backward, wait for all-reduce, optimizer; with DDP buckets the exposed all-reduce is inside
backward, where DDP waits for it; parameter server: forward, which holds the pull waits, backward,
post pull receives); and the rows of the events a traced run timestamped (`all-reduce`: each DDP
bucket's or manual group's collective, launch to completion, on that worker; `wait`: pull and push
waits; `push`: the moment each push was posted). Per server shard: its waits for gradients and its
updates. Time 0 is the earliest first measured iteration of any worker; a server's wait that began
before it is clipped there.

Predicted (`predicted_events`): the fine simulation's timeline of every worker for as many
steady-state iterations, renumbered from 0 and starting at time 0, with the same `step` row.

Side by side (`side_by_side`): both, each process named "worker 0 · measured", "worker 0 ·
predicted", ..., ordered so each worker's pair is adjacent (then servers, then the predicted
all-reduces: one stream, or a track per gloo thread). Both start at 0, so iteration k of a worker is the k-th slice of both `step` rows
and any drift between them is the prediction's error accumulating.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import Any

from sgdscale.report.trace import write_chrome_trace
from sgdscale.result import TimelineSpec, TraceEvent

MEASURED, PREDICTED = "measured", "predicted"
SEPARATOR = " · "
PREDICTED_MAX_EVENTS = 200_000  # a side-by-side of 16 resnet50 workers x 20 steps fits; more is cut short
PREDICT_WARMUP = 10  # simulated steps before the traced ones (as predict's default)


def measured_events(measurement: Any) -> list[TraceEvent]:
    """The measurement's timeline (module docstring); `measurement` is a runtime.measurement.Measurement."""
    workers = measurement.workers
    origin = min(w.iteration_start_s[0] for w in workers)
    ps = measurement.config.strategy != "allreduce"
    buckets = measurement.config.grouping == "buckets"
    events: list[TraceEvent] = []
    for worker in workers:
        process = f"worker {worker.rank}"
        for k, (start, total) in enumerate(zip(worker.iteration_start_s, worker.iteration_s)):
            t = start - origin
            events.append(TraceEvent(f"iteration {k}", t, total, process, "step", {"iteration": k, "step_s": total}))
            for name, duration in _phases(worker, k, ps, buckets):
                if duration > 0:
                    events.append(TraceEvent(name, t, duration, process, "compute", {"iteration": k}))
                t += duration
        events += _recorded(worker.events, process, origin)
    for server in measurement.servers:
        events += _recorded(server.events, f"server {server.shard}", origin)
    return events


def _phases(worker: Any, k: int, ps: bool, buckets: bool) -> list[tuple[str, float]]:
    """The timed phases of iteration k in the order the runtime runs them (runtime/ddp.py, ps.py)."""
    def at(values: list[float] | None) -> float:
        return values[k] if values is not None else 0.0

    forward, backward = at(worker.forward_s), at(worker.backward_s)
    if ps:
        return [("forward (with pull waits)", forward), ("backward", backward),
                ("post pull receives", max(worker.iteration_s[k] - forward - backward, 0.0))]
    return [("forward", forward), ("backward + exposed all-reduce" if buckets else "backward", backward),
            ("wait for all-reduce", at(worker.wait_s)), ("optimizer", at(worker.optimizer_s))]


def _recorded(recorded: list[Any] | None, process: str, origin: float) -> list[TraceEvent]:
    events = []
    for e in recorded or []:
        start, duration = e.start_s - origin, e.duration_s
        args = {"iteration": e.iteration, **e.args}
        if start < 0:  # began before the first measured iteration: keep the part inside the window
            duration, start, args["clipped_s"] = max(duration + start, 0.0), 0.0, -start
        events.append(TraceEvent(e.name, start, duration, process, e.thread, args))
    return events


def predicted_events(profile: Any, cluster: Any, strategy: Any, comm: Any, iterations: int, *,
                     variability: bool = True, seed: int = 0) -> list[TraceEvent]:
    """The fine method's timeline of every worker for `iterations` steady-state steps (module docstring)."""
    from sgdscale.predict import run_method

    outcome = run_method("fine", profile, cluster, strategy, comm, iterations=iterations, warmup=PREDICT_WARMUP,
                         seed=seed, variability=variability,
                         timeline=TimelineSpec(iterations, all_workers=True, max_events=PREDICTED_MAX_EVENTS))
    raw = outcome.timeline or []
    origin = min((e.start_s for e in raw if e.args.get("iteration") == PREDICT_WARMUP), default=0.0)
    events = []
    spans: dict[tuple[str, int], list[float]] = defaultdict(lambda: [float("inf"), float("-inf")])
    for e in raw:
        k = int(e.args.get("iteration", PREDICT_WARMUP)) - PREDICT_WARMUP
        start, duration = e.start_s - origin, e.duration_s
        if start < 0:
            duration, start = max(duration + start, 0.0), 0.0
        events.append(TraceEvent(e.name, start, duration, e.process, e.thread, {**e.args, "iteration": k}))
        if e.process.startswith("worker") and e.thread == "compute":
            span = spans[e.process, k]
            span[0], span[1] = min(span[0], start), max(span[1], start + duration)
    for (process, k), (lo, hi) in spans.items():
        events.append(TraceEvent(f"iteration {k}", lo, hi - lo, process, "step", {"iteration": k, "step_s": hi - lo}))
    return events


def run_strategy(config: Any) -> Any:
    """The Strategy that predicts a run of `config` (a measurement's RunConfig): its grouping, DDP
    bucket caps and server placement."""
    from sgdscale.strategy import MIB, Strategy

    if config.strategy == "allreduce":
        buckets = {} if config.bucket_mb is None else {"bucket_bytes": config.bucket_mb * MIB}
        if config.first_bucket_mb is not None:
            buckets["first_bucket_bytes"] = config.first_bucket_mb * MIB
        return Strategy(kind="allreduce", grouping=config.grouping, **buckets)
    return Strategy(kind=config.strategy, placement=config.ps_placement or "round-robin")


def side_by_side(measured: list[TraceEvent], predicted: list[TraceEvent]) -> list[TraceEvent]:
    """Both timelines in one, each process tagged with its side (module docstring)."""
    out = []
    for side, events in ((MEASURED, measured), (PREDICTED, predicted)):
        out += [TraceEvent(e.name, e.start_s, e.duration_s, f"{e.process}{SEPARATOR}{side}", e.thread, e.args)
                for e in events]
    return out


def process_order(name: str) -> tuple[int, int, int, str]:
    """Workers by index (measured before predicted), then servers, then anything else."""
    base, _, side = name.partition(SEPARATOR)
    match = re.match(r"(worker|server) (\d+)", base)
    kind = {"worker": 0, "server": 1}.get(match.group(1), 2) if match else 2
    return kind, int(match.group(2)) if match else 0, 1 if side == PREDICTED else 0, name


def iteration_counts(events: list[TraceEvent]) -> dict[str, int]:
    """Iterations per process in a timeline (its `step` row): what a side-by-side must match."""
    counts: dict[str, int] = defaultdict(int)
    for e in events:
        if e.thread == "step":
            counts[e.process] += 1
    return dict(counts)


def write_measured_trace(measurement: Any, path: str | os.PathLike[str]) -> None:
    """The measured timeline of a run as a Chrome trace (open it in ui.perfetto.dev)."""
    write_chrome_trace(measured_events(measurement), path, metadata=_describe(measurement), process_key=process_order)


def write_side_by_side(measurement: Any, predicted: list[TraceEvent], path: str | os.PathLike[str],
                       prediction: dict[str, Any] | None = None) -> None:
    """Measured and predicted timelines of one configuration in one Chrome trace; `prediction`
    says how the predicted side was made (profile, network, method)."""
    events = side_by_side(measured_events(measurement), predicted)
    metadata = {MEASURED: _describe(measurement), PREDICTED: prediction or {},
                "iterations": iteration_counts(events)}
    write_chrome_trace(events, path, metadata=metadata, process_key=process_order)


def _describe(measurement: Any) -> dict[str, Any]:
    return {"config": measurement.config.model_dump(mode="json", exclude_none=True),
            "throughput": measurement.throughput, "iteration_s": measurement.iteration_s.model_dump()}
