"""Synchronous all-reduce SGD, one worker per rank, with the gradient groupings the predictor knows.

- `buckets`: torch DistributedDataParallel itself. `bucket_mb=None` keeps DDP's defaults (25 MiB
  buckets, 1 MiB first bucket); an explicit `bucket_mb` makes every bucket, the first included,
  that size (DDP's own rule). DDP starts with one bucket and uses the buckets rebuilt in
  gradient-ready order from the third iteration on (measured with torch 2.13), so keep warmup >= 2.
  Rank 0 records the rebuilt buckets (`extra.ddp_bucket_bytes`, `ddp_bucket_param_indices`;
  bucket 0 holds the first-ready gradients, i.e. the last layers). Exposed all-reduce time ends
  up inside `backward_s` (DDP waits for the last bucket at the end of backward), so `compute_s`
  is not separable and not recorded.
- `per-tensor` / `per-layer`: manual wait-free backpropagation. A post-accumulate-grad hook on
  every parameter starts an async all-reduce as soon as its tensor (per-tensor) or all tensors of
  its module (per-layer, "module" = the module that directly owns the parameter) are ready; gloo
  runs them in issue order. After backward we wait for the rest (`wait_s`), average, step.
- `single`: no overlap: after backward, one all-reduce of all gradients flattened into one buffer.

Traced runs (`config["trace"]`, worker.EventRecorder): DDP gets a comm hook that does what its
built-in all-reduce does (average into the bucket) and timestamps each bucket's all-reduce from
launch to completion (the future's callback, on gloo's thread); the manual groupings timestamp each
group's all-reduce the same way. Untraced runs install neither (DDP keeps its C++ hook).

Every grouping applies SGD with momentum (`sgdscale.profiling.profiler.MOMENTUM`, the optimizer the profiles
time) with learning rate `lr` to averaged gradients.
On NCCL (`ctx.device` a GPU) the model and batches live on that GPU and every timestamp follows a
`torch.cuda.synchronize()`, so a phase's time includes the kernels it launched.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.nn.parallel import DistributedDataParallel

from sgdscale.profiling.profiler import MOMENTUM
from sgdscale.runtime.rank import RankContext
from sgdscale.runtime.worker import (
    ComputeReference,
    EventRecorder,
    IterationLog,
    Setup,
    clock,
    maybe_fault,
    recorder_for,
)


class ManualAllReduce:
    """All-reduce gradients by group (per-tensor, per-layer or single) and average them."""

    def __init__(self, module: torch.nn.Module, grouping: str, world_size: int,
                 recorder: EventRecorder | None = None) -> None:
        self.world_size = world_size
        self.recorder = recorder
        if recorder is not None:  # chosen once, not tested per group
            self._start = self._start_traced
        self.grouping = grouping
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if grouping == "per-tensor":
            groups = [[p] for _, p in named]
        elif grouping == "per-layer":
            by_owner: dict[str, list[torch.nn.Parameter]] = {}
            for name, p in named:
                by_owner.setdefault(name.rpartition(".")[0], []).append(p)
            groups = list(by_owner.values())
        elif grouping == "single":
            groups = [[p for _, p in named]]
        else:
            raise ValueError(f"unknown grouping {grouping!r}")
        self.groups = groups
        self.pending: list[tuple[Any, list[torch.nn.Parameter], torch.Tensor]] = []
        self.ready = [0] * len(groups)
        if grouping != "single":
            for index, group in enumerate(groups):
                for p in group:
                    p.register_post_accumulate_grad_hook(self._hook(index))

    def _hook(self, index: int):
        def hook(_param: torch.Tensor) -> None:
            self.ready[index] += 1
            if self.ready[index] == len(self.groups[index]):
                self._start(self.groups[index])

        return hook

    def _start(self, group: list[torch.nn.Parameter]) -> None:
        grads = [p.grad for p in group]
        flat = grads[0] if len(grads) == 1 else _flatten_dense_tensors(grads)
        self.pending.append((dist.all_reduce(flat, async_op=True), group, flat))

    def _start_traced(self, group: list[torch.nn.Parameter]) -> None:
        start = time.perf_counter()
        self._start_untraced(group)
        work = self.pending[-1][0]
        size = sum(p.grad.numel() * p.grad.element_size() for p in group)
        name = f"all-reduce {len(self.pending) - 1}"
        work.get_future().add_done_callback(
            lambda _f: self.recorder.add("all-reduce", name, start, time.perf_counter(), {"bytes": size}))

    _start_untraced = _start

    def finish(self) -> None:
        """Wait for every group's all-reduce and leave averaged gradients in `.grad`."""
        if self.grouping == "single":
            self._start(self.groups[0])
        elif len(self.pending) != len(self.groups):
            raise RuntimeError(
                f"only {len(self.pending)} of {len(self.groups)} gradient groups became ready in backward "
                "(the model has parameters unused in forward; use --grouping buckets)"
            )
        for work, group, flat in self.pending:
            work.wait()
            if len(group) == 1:
                flat.div_(self.world_size)
            else:
                for p, reduced in zip(group, _unflatten_dense_tensors(flat, [p.grad for p in group])):
                    p.grad.copy_(reduced).div_(self.world_size)
        self.pending.clear()
        self.ready = [0] * len(self.groups)


def run_worker(ctx: RankContext, setup: Setup) -> dict[str, Any]:
    config = ctx.config
    module = setup.workload.module
    loss_fn = setup.workload.loss_fn
    grouping = config["grouping"]
    manual: ManualAllReduce | None = None
    on_gpu = ctx.device.startswith("cuda")
    if on_gpu:
        module.to(ctx.device)
        setup.batches[:] = [(x.to(ctx.device), y.to(ctx.device)) for x, y in setup.batches]

    def now() -> float:
        if on_gpu:
            torch.cuda.synchronize()
        return time.perf_counter()

    recorder = recorder_for(config)
    reference = ComputeReference(setup, config)  # a copy of the plain model, before DDP hooks it
    if grouping == "buckets":
        kwargs: dict[str, Any] = {} if config.get("bucket_mb") is None else {"bucket_cap_mb": config["bucket_mb"]}
        if on_gpu:
            kwargs["device_ids"] = [torch.device(ctx.device)]
        net: torch.nn.Module = DistributedDataParallel(module, **kwargs)
        if setup.replay is not None and ctx.world_size > 1:
            setup.replay.spend_buffer_sync_before(net)
        if recorder is not None:
            net.register_comm_hook(None, traced_allreduce_hook(recorder, ctx.world_size))
    else:
        for p in module.parameters():  # same seed gives the same weights; make sure anyway
            dist.broadcast(p.data, src=0)
        manual = ManualAllReduce(module, grouping, ctx.world_size, recorder)
        net = module
    # The profile timed SGD with momentum (profiling.profiler): train with the same update.
    optimizer = torch.optim.SGD(net.parameters(), lr=config["lr"], momentum=MOMENTUM)
    # A replay spends the profiled optimizer time instead of updating (see runtime/replay.py).
    optimizer_step = setup.replay.optimizer_step if setup.replay is not None else optimizer.step
    total = config["warmup"] + config["iterations"]
    log = IterationLog()
    extra: dict[str, Any] = {}
    reference.run(reference.before)
    dist.barrier()
    for iteration in range(total):
        maybe_fault(config, ctx.rank, iteration)
        start_unix, t0 = clock()
        if recorder is not None:
            recorder.begin(iteration, start_unix, t0)
        optimizer.zero_grad(set_to_none=True)
        inputs, targets = setup.batch(iteration)
        loss = loss_fn(net(inputs), targets)
        t1 = now()
        loss.backward()
        t2 = now()
        if manual is not None:
            manual.finish()
        t3 = now()
        optimizer_step()
        t4 = now()
        wait = t3 - t2 if manual is not None else None
        log.add(
            start_unix, t4 - t0, forward_s=t1 - t0, backward_s=t2 - t1, optimizer_s=t4 - t3, wait_s=wait,
            compute_s=(t2 - t0) if manual is not None else None,
        )
        ctx.report_progress(iteration + 1)
        if iteration == total - 1 and grouping == "buckets" and ctx.rank == 0:
            extra.update(_ddp_buckets(net))
    reference.run(reference.after)
    reference.record(extra)
    extra["backend"] = ctx.backend
    if manual is not None:
        extra["groups"] = len(manual.groups)
    if setup.replay is not None:
        extra.update(setup.replay.record())
    if config.get("return_params"):
        extra["params"] = [p.detach().flatten().tolist() for p in module.parameters()]
    record = log.record(ctx.rank, config["warmup"], extra)
    if recorder is not None:
        record["events"] = recorder.record(config["warmup"])
    return record


def traced_allreduce_hook(recorder: EventRecorder, world_size: int):
    """A DDP comm hook: average the bucket with one all-reduce, as DDP's built-in hook does, and
    timestamp it from launch to completion (see the module docstring)."""

    def hook(_state, bucket):  # unannotated: DDP rejects string annotations (from __future__)
        start = time.perf_counter()
        tensor = bucket.buffer().div_(world_size)
        name, size = f"bucket {bucket.index()}", tensor.numel() * tensor.element_size()

        def done(future: torch.futures.Future) -> torch.Tensor:
            recorder.add("all-reduce", name, start, time.perf_counter(), {"bytes": size})
            return future.value()[0]

        return dist.all_reduce(tensor, async_op=True).get_future().then(done)

    return hook


def _ddp_buckets(ddp: torch.nn.Module) -> dict[str, Any]:
    """DDP's rebuilt buckets (bytes, parameter indices), from its private logging data."""
    try:
        data = ddp._get_ddp_logging_data()
    except Exception:
        return {}
    out: dict[str, Any] = {}
    for key, name in (("rebuilt_bucket_sizes", "ddp_bucket_bytes"), ("bucket_sizes", "ddp_initial_bucket_bytes")):
        if data.get(key):
            out[name] = [int(s) for s in str(data[key]).replace(",", " ").split()]
    indices = data.get("rebuilt_per_bucket_param_indices")
    if indices:
        out["ddp_bucket_param_indices"] = [[int(i) for i in part.split()] for part in str(indices).split(",")]
    return out
