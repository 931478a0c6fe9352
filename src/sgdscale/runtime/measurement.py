"""The Measurement (`sgdscale.measurement/1`): one real distributed run, the ground truth that
predictions are checked against. See docs/design.md, "Data formats".

Times: `iteration_start_s` are Unix times (time.time(), one clock shared by all ranks on one
machine or in namespaces of one machine; on a real cluster only as good as the nodes' clock sync);
durations come from a monotonic clock. Only measured iterations are stored; the first `warmup`
iterations of every worker are dropped (DDP switches to its rebuilt buckets at the third).

A traced run (`sgdscale train --trace`, `RunConfig.traced`) also keeps, per rank, `events`: the
intervals it timestamped inside each measured step (DDP bucket all-reduces, pull waits, server
updates, ...), in Unix seconds on the same clock as `iteration_start_s`; report/timeline.py turns
a measurement into a Chrome trace. Untraced runs keep none and record nothing extra.

Throughput is over the window in which every worker was running measured iterations: from the
latest first-measured-iteration start to the earliest last-measured-iteration end, counting each
iteration's samples in proportion to its overlap with the window. For synchronous strategies this
is the usual N*B/step; for async it avoids counting the tail where a faster worker already stopped.
"""

from __future__ import annotations

import os
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sgdscale.errors import UserError
from sgdscale.inputs import describe
from sgdscale.jsonio import write_json_atomic
from sgdscale.placement import PLACEMENTS
from sgdscale.strategy import GROUPINGS as ALL_GROUPINGS
from sgdscale.strategy import KINDS

MEASUREMENT_SCHEMA = "sgdscale.measurement/1"
# The names are the predictor's (sgdscale.strategy, sgdscale.placement); the runtime has no MG-WFBP.
STRATEGIES = KINDS
GROUPINGS = tuple(g for g in ALL_GROUPINGS if g != "mg-wfbp")
PS_PLACEMENTS = PLACEMENTS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunConfig(_Strict):
    """What was run (echoed so a measurement file stands on its own)."""

    model: str
    strategy: Literal[STRATEGIES]
    grouping: Literal[GROUPINGS] | None = None
    bucket_mb: float | None = Field(default=None, gt=0, description="MiB, as DDP's bucket_cap_mb")
    first_bucket_mb: float | None = Field(default=None, gt=0, description="MiB")
    workers: int = Field(ge=1)
    ps_count: int = Field(default=0, ge=0)
    ps_placement: Literal[PS_PLACEMENTS] | None = None
    batch_size: int = Field(ge=1, description="per worker")
    iterations: int = Field(ge=1, description="measured iterations per worker")
    warmup: int = Field(ge=0)
    image_size: int | None = None
    seq_len: int | None = None
    model_options: dict[str, Any] = Field(default_factory=dict)
    lr: float = Field(gt=0)
    bandwidth_bps: float | None = Field(default=None, gt=0)
    cpu_quota: float | None = Field(default=None, gt=0)
    threads: int = Field(ge=1)
    workload: Literal["real", "replay"] = Field(
        default="real", description="replay: a module built from a profile (runtime/replay.py)")
    replay_compute: Literal["sleep", "spin"] | None = None
    traced: bool | None = Field(default=None, description="ranks timestamped events inside the steps (--trace)")

    @model_validator(mode="after")
    def _consistent(self) -> RunConfig:
        if self.strategy == "allreduce":
            if self.grouping is None:
                raise ValueError("grouping is required for the allreduce strategy")
            if self.ps_count:
                raise ValueError("ps_count must be 0 for allreduce")
        elif self.ps_count < 1:
            raise ValueError(f"ps_count must be at least 1 for {self.strategy}")
        return self


class TimedEvent(_Strict):
    """One interval a rank timestamped in a traced run (see the module docstring)."""

    name: str
    thread: str = Field(description="the timeline row it belongs to, e.g. all-reduce, push, update")
    iteration: int = Field(ge=0, description="measured iteration (warm-up excluded)")
    start_s: float = Field(description="Unix time")
    duration_s: float = Field(ge=0)
    args: dict[str, Any] = Field(default_factory=dict)


class WorkerRecord(_Strict):
    """Measured iterations of one worker; phase lists are per iteration when known."""

    rank: int = Field(ge=0)
    iteration_start_s: list[float]
    iteration_s: list[float]
    compute_s: list[float] | None = Field(default=None, description="forward + backward, no waiting")
    wait_s: list[float] | None = Field(default=None, description="waiting for communication")
    forward_s: list[float] | None = None
    backward_s: list[float] | None = Field(default=None, description="includes exposed all-reduce for DDP")
    optimizer_s: list[float] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    events: list[TimedEvent] | None = None

    @model_validator(mode="after")
    def _lengths(self) -> WorkerRecord:
        n = len(self.iteration_s)
        for name in ("iteration_start_s", "compute_s", "wait_s", "forward_s", "backward_s", "optimizer_s"):
            values = getattr(self, name)
            if values is not None and len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries but iteration_s has {n}")
        if any(v <= 0 for v in self.iteration_s):
            raise ValueError("iteration_s holds a non-positive time")
        return self


class ServerRecord(_Strict):
    """One parameter-server shard: what it held and how busy it was."""

    rank: int = Field(ge=0)
    shard: int = Field(ge=0)
    tensors: list[str]
    bytes: int = Field(ge=0)
    updates: int = Field(ge=0, description="gradient tensors applied (per tensor, per worker push)")
    busy_s: float = Field(ge=0, description="time spent averaging/applying updates and copying replies")
    wall_s: float = Field(ge=0)
    events: list[TimedEvent] | None = None


class Stats(_Strict):
    mean: float = Field(gt=0)
    p50: float = Field(gt=0)
    p95: float = Field(gt=0)


class Environment(_Strict):
    host: str
    torch: str
    python: str
    cpu_model: str
    date: str
    # On the emulated cluster, from the launcher's view of the measured window (within its polling
    # interval): each node's quota, pinned CPUs, the cores it really received and how often CFS
    # throttled it, its user and kernel time, each CPU's softirq time, and the CPU the rest of the
    # machine used meanwhile (Testbed.cpu_report).
    cpu: dict[str, Any] | None = None
    # Over the same window, each node's TCP segments sent and retransmitted, retransmission timeouts
    # and the packets its links' queues dropped, with their totals (Testbed.network_report).
    network: dict[str, Any] | None = None


class Measurement(_Strict):
    schema_: Literal["sgdscale.measurement/1"] = Field(default=MEASUREMENT_SCHEMA, alias="schema")
    config: RunConfig
    workers: list[WorkerRecord]
    servers: list[ServerRecord] = Field(default_factory=list)
    throughput: float = Field(gt=0, description="samples/s, whole cluster, over the measured window")
    iteration_s: Stats
    environment: Environment

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _matches_config(self) -> Measurement:
        if len(self.workers) != self.config.workers:
            raise ValueError(f"workers has {len(self.workers)} records but config.workers is {self.config.workers}")
        for record in self.workers:
            if len(record.iteration_s) != self.config.iterations:
                raise ValueError(
                    f"worker rank {record.rank} has {len(record.iteration_s)} iterations, "
                    f"config.iterations is {self.config.iterations}"
                )
        if len(self.servers) != self.config.ps_count:
            raise ValueError(f"servers has {len(self.servers)} records but config.ps_count is {self.config.ps_count}")
        return self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def iteration_stats(times: list[float]) -> Stats:
    values = np.asarray(times, dtype=float)
    return Stats(mean=float(values.mean()), p50=float(np.percentile(values, 50)), p95=float(np.percentile(values, 95)))


def common_window(workers: list[WorkerRecord]) -> tuple[float, float]:
    """(start, end), unix seconds: from the last worker's first measured iteration to the first
    worker's last one's end, the window in which every worker was measuring."""
    return (max(w.iteration_start_s[0] for w in workers),
            min(w.iteration_start_s[-1] + w.iteration_s[-1] for w in workers))


def window_throughput(workers: list[WorkerRecord], batch_size: int,
                      window: tuple[float, float] | None = None) -> float:
    """Samples/s while every worker was in its measured iterations (see module docstring), or over
    `window` (start, end), a part of it, counted the same way."""
    lo, hi = window or common_window(workers)
    if hi <= lo:  # no common window (should not happen): whole span instead
        total = sum(len(w.iteration_s) for w in workers) * batch_size
        span = (max(w.iteration_start_s[-1] + w.iteration_s[-1] for w in workers)
                - min(w.iteration_start_s[0] for w in workers))
        return total / span
    samples = 0.0
    for worker in workers:
        for start, length in zip(worker.iteration_start_s, worker.iteration_s):
            overlap = min(hi, start + length) - max(lo, start)
            if overlap > 0:
                samples += batch_size * overlap / length
    return samples / (hi - lo)


def measurement_from_json(data: Any, source: str = "measurement") -> Measurement:
    """Validate parsed JSON as a Measurement; errors name the field and the problem."""
    if not isinstance(data, dict) or data.get("schema") != MEASUREMENT_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UserError(
            f"{source}: not a measurement (schema {found!r}; expected \"{MEASUREMENT_SCHEMA}\", "
            "made by `sgdscale train MODEL -o FILE`)"
        )
    try:
        return Measurement.model_validate(data)
    except ValidationError as error:
        raise UserError(describe(error, f"{source}: invalid measurement",
                                 "run it again with `sgdscale train ... -o FILE`")) from None


def load_measurement(path: str | os.PathLike[str]) -> Measurement:
    from sgdscale.jsonio import read_json_file

    data = read_json_file(path, what="measurement file", missing=f"measurement file {path} does not exist")
    return measurement_from_json(data, str(path))


def save_measurement(measurement: Measurement, path: str | os.PathLike[str]) -> None:
    write_json_atomic(path, measurement.to_json())
