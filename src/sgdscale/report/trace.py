"""Timelines (predicted, measured, or both: report/timeline.py) as Chrome Trace Event JSON, which ui.perfetto.dev and chrome://tracing open.

Format (Trace Event Format, JSON object form): `{"traceEvents": [...], "displayTimeUnit": "ms"}`.
Each interval is a complete event `ph: "X"` with `ts`/`dur` in microseconds; each process name
(e.g. "worker 0", "server 1") gets a `pid`, each thread name within it (e.g. "compute", "comm") a
`tid`, both labelled by metadata events (`ph: "M"`, `process_name` / `thread_name`) and ordered by
`*_sort_index` so workers appear in numeric order. The same layout as PyTorch's own (Kineto)
traces, so a predicted and a measured step can be opened side by side.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from sgdscale.jsonio import write_json_atomic
from sgdscale.result import TraceEvent


def _natural_key(name: str) -> list[Any]:
    """'worker 10' after 'worker 9': split digits out and compare them as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _jsonable(value: Any) -> Any:
    """Numpy scalars and arrays, tuples and non-finite floats made JSON-safe."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def chrome_trace(events: Iterable[TraceEvent], metadata: dict[str, Any] | None = None,
                 process_key: Callable[[str], Any] = _natural_key) -> dict[str, Any]:
    """The trace as a JSON-ready dict (see the module docstring); processes in `process_key` order."""
    events = list(events)
    processes = sorted({e.process for e in events}, key=process_key)
    pid = {name: index + 1 for index, name in enumerate(processes)}
    threads: dict[str, list[str]] = {name: [] for name in processes}
    for e in events:
        if e.thread not in threads[e.process]:
            threads[e.process].append(e.thread)
    tid: dict[tuple[str, str], int] = {}
    out: list[dict[str, Any]] = []
    for process in processes:
        p = pid[process]
        out.append({"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": process}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": p, "tid": 0, "args": {"sort_index": p}})
        for index, thread in enumerate(sorted(threads[process], key=_natural_key)):
            tid[(process, thread)] = index + 1
            out.append({"ph": "M", "name": "thread_name", "pid": p, "tid": index + 1, "args": {"name": thread}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": p, "tid": index + 1,
                        "args": {"sort_index": index + 1}})
    intervals = []
    for e in events:
        if not (math.isfinite(e.start_s) and math.isfinite(e.duration_s)):
            raise ValueError(f"trace event {e.name!r} has a non-finite time")
        if e.duration_s < 0:
            raise ValueError(f"trace event {e.name!r} has a negative duration ({e.duration_s} s)")
        record = {
            "ph": "X",
            "name": e.name,
            "cat": e.thread,
            "pid": pid[e.process],
            "tid": tid[(e.process, e.thread)],
            "ts": e.start_s * 1e6,
            "dur": e.duration_s * 1e6,
        }
        if e.args:
            record["args"] = _jsonable(e.args)
        intervals.append(record)
    # Shift so the trace starts at 0 (a negative ts is legal but confuses viewers); sort by time,
    # longer first at equal start so enclosing slices precede the slices they contain.
    origin = min((r["ts"] for r in intervals), default=0.0)
    if origin < 0:
        for r in intervals:
            r["ts"] -= origin
    intervals.sort(key=lambda r: (r["ts"], -r["dur"], r["pid"], r["tid"]))
    trace: dict[str, Any] = {"traceEvents": out + intervals, "displayTimeUnit": "ms"}
    if metadata:
        trace["otherData"] = _jsonable(metadata)
    return trace


def drawn_workers(events: Iterable[TraceEvent]) -> list[str]:
    """The worker processes a timeline holds (a predictor draws a few workers, not all), in order."""
    return sorted({e.process for e in events if e.process.startswith("worker ")}, key=_natural_key)


def write_chrome_trace(events: list[TraceEvent], path: str | os.PathLike[str],
                       metadata: dict[str, Any] | None = None, process_key: Callable[[str], Any] = _natural_key) -> None:
    """Write a timeline to `path` (open it in ui.perfetto.dev); written whole or not at all."""
    write_json_atomic(path, chrome_trace(events, metadata, process_key))
