"""Real distributed training runs: `run_training(config)` launches the ranks and returns a
Measurement; `train_rank` is what every rank runs.

Rank 0 (a worker in every strategy) gathers every rank's record at the end and assembles the
whole `sgdscale.measurement/1` document, so a torchrun launch on a real cluster leaves the
measurement in rank 0's result file without any help from this process.
"""

from __future__ import annotations

import datetime
import socket
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from sgdscale.errors import UserError
from sgdscale.hostinfo import cpu_model
from sgdscale.runtime.launch import Placement, launch
from sgdscale.runtime.measurement import (
    GROUPINGS,
    PS_PLACEMENTS,
    STRATEGIES,
    Measurement,
    RunConfig,
    ServerRecord,
    WorkerRecord,
    iteration_stats,
    measurement_from_json,
    window_throughput,
)

TARGET = "sgdscale.runtime.train:train_rank"


@dataclass
class TrainConfig:
    """Everything a run needs; JSON-able, sent to every rank."""

    model: str
    workers: int = 2
    strategy: str = "allreduce"
    ps_count: int = 0
    ps_placement: str = "round-robin"  # or "size"; see runtime/ps.py
    grouping: str | None = None  # allreduce only; default "buckets"
    bucket_mb: float | None = None  # None: DDP default (25 MiB, 1 MiB first bucket)
    batch_size: int = 32
    iterations: int = 20
    warmup: int = 3
    image_size: int | None = None
    seq_len: int | None = None
    model_options: dict[str, Any] = field(default_factory=dict)
    lr: float = 0.01
    seed: int = 0
    threads: int = 1
    batch_pool: int = 2
    bandwidth_bps: float | None = None  # echoed into the measurement (set by the emulated cluster)
    cpu_quota: float | None = None  # likewise
    fault: dict[str, Any] | None = None  # test hook, see worker.maybe_fault
    return_params: bool = False  # PS workers return their final parameters (numerics tests)
    replay: dict[str, Any] | None = None  # a profile's JSON: run its replay module (runtime/replay.py)
    replay_compute: str | None = None  # replay only: "sleep" (default) or "spin"
    trace: bool = False  # ranks timestamp events inside their steps (runtime/worker.EventRecorder)
    reference_steps: int = 0  # local steps of the plain model around the window (runtime/worker.ComputeReference)

    @property
    def world_size(self) -> int:
        return self.workers + (self.ps_count if self.strategy != "allreduce" else 0)


def replay_config(profile: str, compute: str = "sleep", **options: Any) -> TrainConfig:
    """A TrainConfig that replays `profile` (a profile file or built-in profile name): the model is
    named after it and the batch is the profiled one. UserError if there is no such profile."""
    from pathlib import Path

    from sgdscale.profile import load_profile

    try:
        loaded = load_profile(profile)
    except UserError as error:
        raise UserError(f"--replay takes a profile: {error} (or make one with `sgdscale profile MODEL -o FILE`)") from None
    name = profile if not Path(profile).is_file() else Path(profile).stem
    return TrainConfig(model=name, batch_size=loaded.batch_size, replay=loaded.to_json(), replay_compute=compute,
                       **options)


def validate(config: TrainConfig) -> TrainConfig:
    """Check the options and fill defaults; UserError with the fix otherwise."""
    from sgdscale.runtime.replay import COMPUTE_MODES

    if config.replay is not None:
        config.replay_compute = config.replay_compute or "sleep"
        if config.replay_compute not in COMPUTE_MODES:
            raise UserError(f"unknown replay compute '{config.replay_compute}'; use one of: {', '.join(COMPUTE_MODES)}")
        if config.image_size or config.seq_len or config.model_options:
            raise UserError("a replay runs the profile as measured: drop --image-size/--seq-len/--option "
                            "(profile the model with them instead)")
    elif config.replay_compute is not None:
        raise UserError("--replay-compute applies to replay runs only: add --replay")
    if config.strategy not in STRATEGIES:
        raise UserError(f"unknown strategy '{config.strategy}'; use one of: {', '.join(STRATEGIES)}")
    if config.workers < 1:
        raise UserError(f"--workers must be at least 1, got {config.workers}")
    if config.strategy == "allreduce":
        if config.ps_count:
            raise UserError("--ps applies to the ps-sync and ps-async strategies, not allreduce")
        config.grouping = config.grouping or "buckets"
        if config.grouping not in GROUPINGS:
            raise UserError(f"unknown grouping '{config.grouping}'; use one of: {', '.join(GROUPINGS)}")
        if config.bucket_mb is not None:
            if config.grouping != "buckets":
                raise UserError("--bucket-mb applies to --grouping buckets only")
            if not config.bucket_mb > 0:
                raise UserError(f"--bucket-mb must be positive, got {config.bucket_mb}")
    else:
        if config.ps_count < 1:
            raise UserError(f"{config.strategy} needs at least one parameter-server shard: pass --ps 1 or more")
        if config.ps_placement not in PS_PLACEMENTS:
            raise UserError(f"unknown PS placement '{config.ps_placement}'; use one of: {', '.join(PS_PLACEMENTS)}")
        if config.grouping is not None or config.bucket_mb is not None:
            raise UserError("--grouping/--bucket-mb apply to the allreduce strategy; a parameter server "
                            "pushes every gradient tensor as soon as it is ready")
    for name in ("batch_size", "iterations", "threads", "batch_pool"):
        if getattr(config, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(config, name)}")
    if config.warmup < 0:
        raise UserError(f"--warmup must not be negative, got {config.warmup}")
    if not config.lr > 0:
        raise UserError(f"--lr must be positive, got {config.lr}")
    if config.bandwidth_bps is not None and not config.bandwidth_bps > 0:
        raise UserError(f"bandwidth must be positive, got {config.bandwidth_bps} bit/s")
    if config.cpu_quota is not None and not config.cpu_quota > 0:
        raise UserError(f"CPU quota must be positive, got {config.cpu_quota}")
    return config


def count_tensors(config: TrainConfig) -> int:
    """Build the model here once: checks the model name/options early and counts its tensors."""
    if config.replay is not None:
        from sgdscale.profile import profile_from_json

        return len(profile_from_json(config.replay, "replay profile").tensors)
    from sgdscale.profiling.zoo import build_workload

    workload = build_workload(config.model, image_size=config.image_size, seq_len=config.seq_len,
                              seed=config.seed, **config.model_options)
    return sum(1 for p in workload.module.parameters() if p.requires_grad)


def run_training(
    config: TrainConfig,
    placement: Placement | None = None,
    *,
    port: int | None = None,
    timeout_s: float = 300.0,
    on_progress: Callable[[int, int], None] | None = None,
    on_spawn: Callable[[list[int]], None] | None = None,
) -> Measurement:
    """Run real distributed SGD and return its Measurement.

    `placement` puts ranks on emulated cluster nodes (runtime/testbed.py); None runs them as local
    processes. `on_progress(done, total)` gets the iterations completed by the slowest worker;
    `on_spawn(pids)` the rank processes' pids once started.
    Raises UserError on bad options and on failed, hung or unlaunchable runs.
    """
    config = validate(config)
    tensors = count_tensors(config)
    if config.strategy != "allreduce" and config.ps_count > tensors:
        raise UserError(
            f"--ps {config.ps_count} is more shards than {config.model} has parameter tensors ({tensors}); "
            f"use at most {tensors}"
        )
    total = config.warmup + config.iterations
    snapshots: list[Any] = []  # CPU accounting when the window opens and when it closes
    network_snapshots: list[Any] = []  # the nodes' TCP and queue counters, right after
    snapshot = getattr(placement, "cpu_snapshot", None)
    network_snapshot = getattr(placement, "network_snapshot", None)

    def progress(per_rank: list[int]) -> None:
        slowest = min(per_rank[: config.workers])
        if snapshot is not None and len(snapshots) < 2 and slowest >= (config.warmup, total)[len(snapshots)]:
            snapshots.append(snapshot())
            if network_snapshot is not None:
                network_snapshots.append(network_snapshot())
        if on_progress is not None:
            on_progress(slowest, total)

    result = launch(TARGET, asdict(config), config.world_size, placement=placement, port=port,
                    timeout_s=timeout_s, on_progress=progress, on_spawn=on_spawn, threads=config.threads)
    measurement = measurement_from_json(result.results[0], "rank 0's measurement")
    if len(snapshots) == 2:
        update = {"cpu": placement.cpu_report(*snapshots)}
        if len(network_snapshots) == 2:
            update["network"] = placement.network_report(*network_snapshots)
        measurement = measurement.model_copy(
            update={"environment": measurement.environment.model_copy(update=update)})
    return measurement


# ----------------------------------------------------------------------------- rank side


def train_rank(ctx) -> dict[str, Any]:
    """Run this rank's part (worker or server shard); rank 0 returns the whole measurement."""
    import torch.distributed as dist

    from sgdscale.runtime import ddp, ps
    from sgdscale.runtime.worker import build

    config = ctx.config
    is_worker = ctx.rank < config["workers"]
    setup = build(config, ctx.rank if is_worker else None)
    if config["strategy"] == "allreduce":
        record = ddp.run_worker(ctx, setup)
    elif is_worker:
        record = ps.run_worker(ctx, setup)
    else:
        record = ps.run_server(ctx, setup)
    if is_worker:  # peak memory of this worker process (replay's claim: parameters + gradients only)
        import resource

        record.setdefault("extra", {})["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    gathered: list[Any] | None = [None] * ctx.world_size if ctx.rank == 0 else None
    dist.gather_object(record, gathered, dst=0)
    if ctx.rank != 0:
        return {"rank": ctx.rank}
    return assemble(config, gathered).to_json()


def assemble(config: dict[str, Any], records: list[dict[str, Any]]) -> Measurement:
    workers = [WorkerRecord.model_validate(r) for r in records[: config["workers"]]]
    servers = [ServerRecord.model_validate(r) for r in records[config["workers"]:]]
    run = RunConfig(
        model=config["model"], strategy=config["strategy"], grouping=config.get("grouping"),
        bucket_mb=config.get("bucket_mb") if config["strategy"] == "allreduce" else None,
        first_bucket_mb=_first_bucket_mb(config),
        workers=config["workers"], ps_count=config["ps_count"] if config["strategy"] != "allreduce" else 0,
        ps_placement=config.get("ps_placement") if config["strategy"] != "allreduce" else None,
        batch_size=config["batch_size"], iterations=config["iterations"], warmup=config["warmup"],
        image_size=config.get("image_size"), seq_len=config.get("seq_len"),
        model_options=config.get("model_options") or {}, lr=config["lr"],
        bandwidth_bps=config.get("bandwidth_bps"), cpu_quota=config.get("cpu_quota"), threads=config["threads"],
        workload="replay" if config.get("replay") else "real", replay_compute=config.get("replay_compute"),
        traced=True if config.get("trace") else None,
    )
    if run.strategy == "allreduce" and run.grouping == "buckets" and run.bucket_mb is None:
        run = run.model_copy(update={"bucket_mb": 25.0})
    all_steps = [t for w in workers for t in w.iteration_s]
    return Measurement(
        config=run,
        workers=workers,
        servers=servers,
        throughput=window_throughput(workers, config["batch_size"]),
        iteration_s=iteration_stats(all_steps),
        environment=environment(),
    )


def _first_bucket_mb(config: dict[str, Any]) -> float | None:
    if config["strategy"] != "allreduce" or config.get("grouping") != "buckets":
        return None
    if config.get("bucket_mb") is None:
        return 1.0  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = 1 MiB when the cap is defaulted
    return float(config["bucket_mb"])  # DDP uses the given cap for the first bucket too


def environment() -> dict[str, str]:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return {
        "host": socket.gethostname(),
        "torch": torch_version,
        "python": sys.version.split()[0],
        "cpu_model": cpu_model(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
