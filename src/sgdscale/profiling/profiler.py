"""Measure one training step of a real PyTorch model, layer by layer -> `Profile`.

What a "layer" is. A layer is a module that owns trainable parameters directly
(``parameters(recurse=False)``), in the order of its first call in the forward pass. A parameter
shared by several modules (GPT-2's tied embedding/LM head) belongs to the first of them to run; a
module whose only parameters are shared that way stays a layer with ``params: []``. Modules whose
parameters were not used in the forward pass come last with zero times.

How time is attributed (so the parts add up exactly to the instrumented step):
  forward_s[i]   time from layer i's forward-pre-hook to the next layer's pre-hook (the last
                 segment runs to the end of the loss computation; the time before the first
                 pre-hook goes to the first layer). The parameter-free work between layers (ReLU,
                 pooling, residual adds, attention softmax) is thus charged to the layer that runs
                 just before it. A module called several times collects every segment it starts.
  backward_s[i]  layers sorted by the time their *last* gradient became ready
                 (``param.register_post_accumulate_grad_hook``; full backward hooks break on
                 torchvision's in-place residual adds); each layer gets the time since the previous
                 layer's last gradient (the first since backward start). The tail after the last
                 gradient (autograd teardown) goes to the first layer in forward order, which is
                 the last to finish backward.
  grad_ready_s   per parameter tensor, time from backward start to its gradient being accumulated.
  step           data_s = synthetic batch creation; h2d_s = copy to the device (0 on the CPU,
                 where the no-op copy's microseconds stay in data_s);
                 optimizer_s = ``zero_grad(set_to_none=True)`` + ``SGD(momentum=0.9).step()``;
                 buffer_sync_s = DDP's local work with the buffers before a forward (`buffer_sync_s`);
                 ddp_overhead_s = what DDP adds to a step in a one-process group (`ddp_overhead_s`).
The same number of *uninstrumented* steps (no hooks at all) are interleaved with the instrumented
ones; their wall times are `iteration_s`, and ``provenance.consistency`` records how far the sum
of the instrumented parts is from them (hook overhead plus noise). All reported times are means
over the measured iterations, so the sums hold exactly; the per-iteration samples are kept.
Timestamps: ``time.perf_counter()`` on the CPU. On CUDA each timestamp records a CUDA event
on the current stream instead (no synchronization inside the step, so the hooks do not stall the
GPU's queue); after the step one ``synchronize()`` resolves the events to seconds since the
step's first event. Host-side work (batch creation) is timed by the events too: the step starts
on an idle GPU, so an event recorded after host work completes when the host reaches it.
Precision: ``fp32`` (default), ``bf16``/``fp16`` (the whole model and the floating inputs cast
to that type: pure low-precision training, not autocast), ``tf32`` (CUDA only: fp32 storage,
TF32 matmuls and convolutions).
Counted work: flops and bytes per layer from one extra untimed step (``counting.py``).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from sgdscale import __version__
from sgdscale.errors import UserError
from sgdscale.hostinfo import cpu_model, cpu_quota
from sgdscale.profile import (
    PROFILE_SCHEMA,
    Framework,
    IterationStats,
    Layer,
    ParamTensor,
    Profile,
    StepTimes,
)
from sgdscale.profiling._torch_compat import import_torch
from sgdscale.profiling.counting import METHOD as COUNT_METHOD
from sgdscale.profiling.counting import StepCounts, count_step
from sgdscale.profiling.zoo import Workload
from sgdscale.window import MAX_WINDOW_FACTOR, window_steps

torch = import_torch()
from torch import nn  # noqa: E402

__all__ = ["profile_workload", "LEARNING_RATE", "MOMENTUM"]

LEARNING_RATE = 1e-3
MOMENTUM = 0.9

METHOD = (
    "Per-layer times from forward-pre-hooks on every module that owns trainable parameters directly "
    "(forward: from a layer's pre-hook to the next one's, the last to the end of the loss) and "
    "post-accumulate-grad hooks on every parameter (backward: layers in order of their last gradient "
    "becoming ready, each charged the time since the previous layer's last gradient; the tail after the "
    "last gradient goes to the first layer). Parameter-free work is charged to the layer that runs just "
    "before it. data_s = synthetic batch creation, h2d_s = host-to-device copy, optimizer_s = "
    "zero_grad + SGD(momentum) step. Times are means over the measured iterations; iteration_s comes from "
    "the same number of uninstrumented steps (no hooks) interleaved with the instrumented ones."
)


@dataclass
class _Layer:
    name: str
    module: nn.Module
    params: list[tuple[str, Any]] = field(default_factory=list)  # (name, parameter)


@dataclass
class _Iteration:
    """Raw timestamps of one instrumented step."""

    t0: float = 0.0
    t_data: float = 0.0
    t_h2d: float = 0.0
    t_fwd: float = 0.0
    t_loss: float = 0.0
    t_bwd: float = 0.0
    t_end: float = 0.0
    calls: list[tuple[float, int]] = field(default_factory=list)  # (pre-hook time, layer index)
    ready: dict[int, float] = field(default_factory=dict)  # parameter index -> grad ready time


class _HostClock:
    """perf_counter timestamps; nothing to resolve."""

    def __call__(self) -> float:
        return time.perf_counter()

    def resolve(self, record: _Iteration) -> None:
        return None


class _EventClock:
    """CUDA-event timestamps: a call records an event and returns its index (as a float);
    `resolve` synchronizes once and turns the record's indices into seconds."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __call__(self) -> float:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.events.append(event)
        return float(len(self.events) - 1)

    def resolve(self, record: _Iteration) -> None:
        torch.cuda.synchronize()
        first = self.events[0]
        seconds = [first.elapsed_time(event) / 1e3 for event in self.events]  # elapsed_time is in ms

        def at(index: float) -> float:
            return seconds[int(index)]

        for name in ("t0", "t_data", "t_h2d", "t_fwd", "t_loss", "t_bwd", "t_end"):
            setattr(record, name, at(getattr(record, name)))
        record.calls = [(at(t), i) for t, i in record.calls]
        record.ready = {k: at(t) for k, t in record.ready.items()}
        self.events = []


def _clock(device: Any) -> _HostClock | _EventClock:
    return _EventClock() if device.type == "cuda" else _HostClock()


PRECISION_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _catalog_key(device: Any) -> str | None:
    """The device catalog key of a CUDA GPU from its name (e.g. 'NVIDIA A100-SXM4-80GB' -> A100)."""
    if device.type != "cuda":
        return None
    from sgdscale.device import catalog

    name = torch.cuda.get_device_name(device).upper()
    matches = [key for key in catalog() if not key.startswith("vm-") and key.upper() in name]
    return max(matches, key=len) if matches else None


def _resolve_device(device: str) -> Any:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UserError(f"unknown device '{device}'; use cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(
            f"--device {device} requested but this torch ({torch.__version__}) sees no CUDA GPU; use --device cpu"
        )
    return torch.device(device)


def _to(value: Any, device: Any, dtype: Any = None) -> Any:
    """Move tensors to `device`; floating ones also to `dtype` (when given)."""
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device, dtype)
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device, dtype) for k, v in value.items()}
    return value


def _call(module: nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return module(**inputs)
    if isinstance(inputs, tuple):
        return module(*inputs)
    return module(inputs)


def _shape(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (tuple, list)):
        return [_shape(v) for v in value]
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return type(value).__name__


def _discover_layers(workload: Workload, inputs: Any, targets: Any, shape_hint: str) -> list[_Layer]:
    """Run one forward+backward with hooks on every parameter-owning module to find forward order."""
    module = workload.module
    owners = [
        (name, m)
        for name, m in module.named_modules()
        if any(p.requires_grad for p in m.parameters(recurse=False))
    ]
    order: list[int] = []
    seen: set[int] = set()

    def hook_for(index: int) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: Any) -> None:
            if index not in seen:
                seen.add(index)
                order.append(index)

        return hook

    handles = [m.register_forward_pre_hook(hook_for(i)) for i, (_, m) in enumerate(owners)]
    try:
        try:
            loss = workload.loss_fn(_call(module, inputs), targets)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise UserError(
                    f"the loss of model {workload.name} is not a scalar tensor "
                    f"(got {type(loss).__name__} {_shape(loss)}); the loss function must return one number"
                )
            loss.backward()
        except UserError:
            raise
        except (RuntimeError, ValueError, IndexError, TypeError, AssertionError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserError(
                f"model {workload.name} rejected an input of shape {_shape(inputs)}: {first} "
                f"({shape_hint})"
            ) from None
    finally:
        for handle in handles:
            handle.remove()
    module.zero_grad(set_to_none=True)

    called = [owners[i] for i in order] + [o for i, o in enumerate(owners) if i not in seen]
    param_names = {id(p): n for n, p in module.named_parameters()}
    assigned: set[int] = set()
    layers = []
    for name, m in called:
        layer = _Layer(name or type(m).__name__, m)
        for p in m.parameters(recurse=False):
            if p.requires_grad and id(p) not in assigned:
                assigned.add(id(p))
                layer.params.append((param_names[id(p)], p))
        layers.append(layer)
    return layers


def _stats(samples: list[float]) -> IterationStats:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * (len(ordered) - 1))))]
    return IterationStats(
        mean=statistics.fmean(samples), p50=statistics.median(samples), p95=p95, samples=list(samples)
    )


def profile_workload(
    workload: Workload,
    batch_size: int,
    warmup: int = 3,
    iterations: int = 10,
    threads: int | None = 1,
    device: str = "cpu",
    progress: bool = False,
    extra_provenance: dict[str, Any] | None = None,
    precision: str = "fp32",
    min_window_s: float = 0.0,
) -> Profile:
    """Profile `iterations` training steps of `workload` (after `warmup` unmeasured ones) with
    `threads` intra-op threads (None: leave torch's setting) at `precision` and return the Profile.
    `min_window_s`: measure more steps where `iterations` of them (and as many plain ones) would
    last less, by the warm-up's median step, up to MAX_WINDOW_FACTOR x `iterations`."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch size must be a positive integer; got {batch_size!r}")
    if warmup < 0:
        raise UserError(f"warmup must be >= 0 iterations; got {warmup}")
    if iterations < 1:
        raise UserError(f"iterations must be >= 1; got {iterations}")
    if threads is not None and threads < 1:
        raise UserError(f"threads must be >= 1; got {threads}")
    if not min_window_s >= 0:
        raise UserError(f"the minimum window must be >= 0 seconds; got {min_window_s}")
    if not any(p.requires_grad for p in workload.module.parameters()):
        raise UserError(
            f"model {workload.name} has no trainable parameters: there is nothing to train or communicate"
        )
    if precision not in PRECISION_DTYPES:
        raise UserError(f"unknown precision '{precision}'; choose one of {', '.join(PRECISION_DTYPES)}")
    dev = _resolve_device(device)
    if precision == "tf32" and dev.type != "cuda":
        raise UserError("tf32 exists only on CUDA GPUs (Ampere and later); on the CPU use fp32 or bf16")
    now = _clock(dev)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    dtype = getattr(torch, PRECISION_DTYPES[precision])
    module = workload.module.to(dev, dtype).train()
    previous_tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    try:
        extra = {"warmup_iterations": warmup, **(extra_provenance or {})}
        return _run(workload, module, batch_size, warmup, iterations, dev, now, progress, extra, precision, dtype,
                    min_window_s)
    finally:
        torch.set_num_threads(previous_threads)
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous_tf32


def _run(
    workload: Workload,
    module: nn.Module,
    batch_size: int,
    warmup: int,
    iterations: int,
    dev: Any,
    now: _HostClock | _EventClock,
    progress: bool,
    extra_provenance: dict[str, Any] | None,
    precision: str,
    dtype: Any,
    min_window_s: float = 0.0,
) -> Profile:
    hint = (
        "check the batch size, --image-size / --seq-len, or --input-shape for a user model"
        if ":" not in workload.name
        else "check --input-shape (one sample, without the batch dimension) or the factory's make_batch"
    )
    try:
        inputs, targets = workload.make_batch(batch_size)
    except UserError:
        raise
    except Exception as error:
        raise UserError(f"could not make a batch of {batch_size} for model {workload.name}: {error}") from None
    batch_shape = _shape(inputs)
    layers = _discover_layers(workload, _to(inputs, dev, dtype), _to(targets, dev), hint)
    params = [p for layer in layers for _, p in layer.params]
    param_layer = [li for li, layer in enumerate(layers) for _ in layer.params]
    optimizer = torch.optim.SGD(params, lr=LEARNING_RATE, momentum=MOMENTUM)

    current: list[_Iteration] = []

    def pre_hook_for(index: int) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: Any) -> None:
            current[-1].calls.append((now(), index))

        return hook

    def grad_hook_for(index: int) -> Callable[[Any], None]:
        def hook(_param: Any) -> None:
            current[-1].ready[index] = now()

        return hook

    def step(record: _Iteration | None) -> float:
        handles = []
        if record is not None:
            current.append(record)
            handles = [layer.module.register_forward_pre_hook(pre_hook_for(i)) for i, layer in enumerate(layers)]
            handles += [p.register_post_accumulate_grad_hook(grad_hook_for(i)) for i, p in enumerate(params)]
        try:
            rec = record or _Iteration()
            rec.t0 = now()
            x, y = workload.make_batch(batch_size)
            rec.t_data = now()
            x, y = _to(x, dev, dtype), _to(y, dev)
            rec.t_h2d = now()
            optimizer.zero_grad(set_to_none=True)
            rec.t_fwd = now()
            loss = workload.loss_fn(_call(module, x), y)
            rec.t_loss = now()
            loss.backward()
            rec.t_bwd = now()
            optimizer.step()
            rec.t_end = now()
            now.resolve(rec)
            return rec.t_end - rec.t0
        finally:
            for handle in handles:
                handle.remove()

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    bar = Progress(
        TextColumn(f"profiling {workload.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not (progress and console.is_terminal),
    )
    records: list[_Iteration] = []
    plain: list[float] = []
    ddp_pairs = max(10, iterations) if dev.type == "cpu" else 0  # ddp_overhead_s measures on the CPU only
    with bar:
        task = bar.add_task("steps", total=warmup + 2 * iterations + 2 * (ddp_pairs + 2))
        warm = []
        for _ in range(warmup if warmup or not min_window_s else 1):
            warm.append(step(None))
            bar.advance(task)
        if min_window_s > 0:
            # instrumented and plain steps together make the window; why: sgdscale.window (mlp's
            # 20-step profiles at 0.40 cores, half a second, gave 18.3-33.8 ms of forward and
            # backward where its runs moved 3%)
            iterations = window_steps(iterations, 2.0 * statistics.median(warm), min_window_s,
                                      MAX_WINDOW_FACTOR * iterations)
            bar.update(task, total=len(warm) + 2 * iterations + 2 * (ddp_pairs + 2))
            if extra_provenance is not None:
                extra_provenance.update(min_window_s=min_window_s, measured_iterations=iterations)
        # Interleave instrumented and plain steps so drift on a shared machine hits both alike.
        for i in range(iterations):
            for instrumented in ((True, False) if i % 2 == 0 else (False, True)):
                if instrumented:
                    record = _Iteration()
                    step(record)
                    records.append(record)
                else:
                    plain.append(step(None))
                bar.advance(task)
        ddp_overhead = ddp_overhead_s(module, workload, batch_size, ddp_pairs, dev, dtype,
                                      advance=lambda: bar.advance(task))
    optimizer.zero_grad(set_to_none=True)

    def run_forward() -> Any:
        x, y = workload.make_batch(batch_size)
        return workload.loss_fn(_call(module, _to(x, dev, dtype)), _to(y, dev))

    counts = count_step([layer.module for layer in layers], params, param_layer, run_forward, optimizer)
    buffer_sync = buffer_sync_s(module, max(20, iterations), dev)
    return _build_profile(workload, layers, param_layer, records, plain, batch_size, batch_shape, dev,
                          extra_provenance, counts, precision, buffer_sync, ddp_overhead)


def buffer_sync_s(module: nn.Module, repeats: int, dev: Any) -> float:
    """Mean seconds of the local work DDP does with `module`'s buffers before every training forward
    (`DistributedDataParallel._sync_buffers`: re-collect the named buffers, flatten them into one
    tensor per dtype for `_broadcast_coalesced`, copy the broadcast values back into each buffer),
    without the broadcast itself, `repeats` times back to back. It is per tensor more than per byte
    (mobilenet_v2's 156 buffer tensors, 137 kB: about 3 ms of a 5 ms broadcast at 0.48 cores,
    `benchmarks/buffer_broadcast_parts.py`), so the network's copy rate does not give it. The mean of a
    back-to-back loop holds a CPU quota's throttling as the step after a compute phase meets it."""
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    if not any(True for _ in module.buffers()):
        return 0.0
    began = time.perf_counter()
    with torch.no_grad():
        for _ in range(repeats):
            named = [(buffer, name) for name, buffer in module.named_buffers()]
            by_dtype: dict[Any, list[Any]] = {}
            for buffer, _name in named:
                by_dtype.setdefault(buffer.dtype, []).append(buffer)
            for tensors in by_dtype.values():
                flat = _flatten_dense_tensors(tensors)
                for tensor, value in zip(tensors, _unflatten_dense_tensors(flat, tensors)):
                    tensor.copy_(value)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    return (time.perf_counter() - began) / repeats


def ddp_overhead_s(module: nn.Module, workload: Workload, batch_size: int, pairs: int, dev: Any,
                   dtype: Any, advance: Callable[[], None] = lambda: None) -> float | None:
    """Median of what DDP adds to a training step of `module` with nothing to talk to: `pairs` pairs of
    steps, one of a copy of the module as it is and one of another copy wrapped in
    `DistributedDataParallel` in a one-process gloo group, back to back (alternating which goes
    first), each with its own SGD(momentum). DDP's reducer hooks every gradient, copies it into its
    bucket and back, and DDP re-collects and flattens the buffers before every forward: under a CPU
    quota that work costs a step far more than its CPU time (cnn, 0.27 cores: 12.4 ms of a 76 ms
    step for 1.0-1.6 ms of CPU; `benchmarks/step_anatomy.py`), and a single-process profile holds
    none of it. Recorded, not charged by the models (`sgdscale.bucket_copies`: held out on set 29).
    None on a GPU, where torch.distributed is unavailable or already in use, or where DDP refuses the
    model (parameters its forward leaves unused)."""
    import copy
    import tempfile

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    if dev.type != "cpu" or not dist.is_available() or dist.is_initialized():
        return None
    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group("gloo", store=dist.FileStore(f"{folder}/store", 1), rank=0, world_size=1)
        try:
            plain_module = copy.deepcopy(module)
            wrapped = DistributedDataParallel(copy.deepcopy(module))
            nets = {"plain": plain_module, "ddp": wrapped}
            optimizers = {name: torch.optim.SGD(net.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
                          for name, net in nets.items()}
            x, y = workload.make_batch(batch_size)
            x, y = _to(x, dev, dtype), _to(y, dev)

            def step(name: str) -> float:
                began = time.perf_counter()
                optimizers[name].zero_grad(set_to_none=True)
                workload.loss_fn(_call(nets[name], x), y).backward()
                optimizers[name].step()
                seconds = time.perf_counter() - began
                advance()
                return seconds

            try:
                for name in ("plain", "ddp", "plain", "ddp"):  # warm-up: the reducer builds its buckets
                    step(name)
            except RuntimeError:  # DDP refuses a model whose forward leaves parameters unused
                return None
            added = []
            for i in range(pairs):
                order = ("plain", "ddp") if i % 2 == 0 else ("ddp", "plain")
                times = {name: step(name) for name in order}
                added.append(times["ddp"] - times["plain"])
        finally:
            dist.destroy_process_group()
    return max(0.0, float(statistics.median(added)))


def _build_profile(
    workload: Workload,
    layers: list[_Layer],
    param_layer: list[int],
    records: list[_Iteration],
    plain: list[float],
    batch_size: int,
    batch_shape: Any,
    dev: Any,
    extra_provenance: dict[str, Any] | None,
    counts: StepCounts,
    precision: str,
    buffer_sync: float = 0.0,
    ddp_overhead: float | None = None,
) -> Profile:
    n_layers = len(layers)
    n_params = len(param_layer)
    forward = [[0.0] * len(records) for _ in range(n_layers)]
    backward = [[0.0] * len(records) for _ in range(n_layers)]
    ready_sums = [0.0] * n_params
    ready_counts = [0] * n_params
    backward_orders: list[tuple[int, ...]] = []
    for k, rec in enumerate(records):
        # Forward: segments between consecutive pre-hooks, charged to the layer that starts them.
        calls = rec.calls
        if calls:
            forward[calls[0][1]][k] += calls[0][0] - rec.t_fwd
            for (t, index), (t_next, _) in zip(calls, calls[1:]):
                forward[index][k] += t_next - t
            forward[calls[-1][1]][k] += rec.t_loss - calls[-1][0]
        else:
            forward[0][k] += rec.t_loss - rec.t_fwd
        # Backward: layers in order of their last gradient becoming ready.
        last_ready: dict[int, float] = {}
        for p_index, t in rec.ready.items():
            layer = param_layer[p_index]
            last_ready[layer] = max(last_ready.get(layer, t), t)
            ready_sums[p_index] += t - rec.t_loss
            ready_counts[p_index] += 1
        order = sorted(last_ready, key=lambda li: last_ready[li])
        backward_orders.append(tuple(order))
        previous = rec.t_loss
        for li in order:
            backward[li][k] += last_ready[li] - previous
            previous = last_ready[li]
        backward[0][k] += rec.t_bwd - previous

    def mean(values: list[float]) -> float:
        return max(0.0, statistics.fmean(values)) if values else 0.0

    profile_layers = []
    p_index = 0
    for li, layer in enumerate(layers):
        tensors = []
        for name, p in layer.params:
            ready = ready_sums[p_index] / ready_counts[p_index] if ready_counts[p_index] else None
            tensors.append(
                ParamTensor(name=name, numel=p.numel(), bytes=p.numel() * p.element_size(), grad_ready_s=ready)
            )
            p_index += 1
        profile_layers.append(
            Layer(
                name=layer.name,
                forward_s=mean(forward[li]),
                backward_s=mean(backward[li]),
                params=tensors,
                forward_samples_s=[max(0.0, v) for v in forward[li]],
                backward_samples_s=[max(0.0, v) for v in backward[li]],
                forward_flops=counts.forward[li].flops,
                backward_flops=counts.backward[li].flops,
                forward_bytes=counts.forward[li].bytes,
                backward_bytes=counts.backward[li].bytes,
            )
        )
    on_cpu = dev.type == "cpu"  # .to("cpu") is a no-op: its microseconds stay with the data time
    step = StepTimes(
        data_s=mean([(r.t_h2d if on_cpu else r.t_data) - r.t0 for r in records]),
        h2d_s=0.0 if on_cpu else mean([r.t_h2d - r.t_data for r in records]),
        optimizer_s=mean([(r.t_fwd - r.t_h2d) + (r.t_end - r.t_bwd) for r in records]),
        optimizer_flops=counts.optimizer.flops,
        optimizer_bytes=counts.optimizer.bytes,
    )
    instrumented = [r.t_end - r.t0 for r in records]
    iteration = _stats(plain)
    typical_order = max(set(backward_orders), key=backward_orders.count) if backward_orders else ()
    in_order = set(typical_order)
    reverse_forward = tuple(li for li in reversed(range(n_layers)) if li in in_order)
    cpu = cpu_model()
    threads = torch.get_num_threads()
    if dev.type == "cuda":
        device_text = f"{torch.cuda.get_device_name(dev)} (CUDA), host {cpu}"
    else:
        device_text = f"cpu: {cpu}, {threads} thread{'s' if threads != 1 else ''}"
    instrumented_mean = statistics.fmean(instrumented)
    provenance: dict[str, Any] = {
        "tool": f"sgdscale {__version__}",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "host_cpu": cpu,
        "machine": platform.machine(),
        "threads": threads,
        "load_average_1m": round(os.getloadavg()[0], 2),  # high = measured on a busy machine
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "method": METHOD,
        "counting": COUNT_METHOD,
        "timing": "CUDA events, resolved after each step" if dev.type == "cuda" else "time.perf_counter",
        "optimizer": f"SGD(lr={LEARNING_RATE}, momentum={MOMENTUM})",
        "consistency": {
            "instrumented_sum_s": instrumented_mean,
            "uninstrumented_mean_s": iteration.mean,
            "uninstrumented_p50_s": iteration.p50,
            "gap_fraction": (instrumented_mean - iteration.mean) / iteration.mean,
            # Robust to a busy neighbour: instrumented and plain steps run in adjacent pairs.
            "paired_median_gap_fraction": statistics.median(i / p for i, p in zip(instrumented, plain)) - 1.0,
            "how": "gap_fraction: mean of the instrumented steps' parts (which sum exactly to each instrumented "
            "step) vs mean wall time of the interleaved uninstrumented steps; paired_median_gap_fraction: "
            "median over adjacent (instrumented, uninstrumented) step pairs of their ratio, minus 1",
        },
        "backward_order_is_reverse_forward": typical_order == reverse_forward,
        "backward_order_stable": len(set(backward_orders)) <= 1,
    }
    quota = cpu_quota()
    if quota is not None and dev.type == "cpu":  # times carry the quota's throttling (sgdscale.cpu_quota)
        provenance["cpu_quota_cores"], provenance["cfs_period_s"] = quota
    if extra_provenance:
        provenance.update(extra_provenance)
    return Profile.model_validate(
        {
            "schema": PROFILE_SCHEMA,
            "model": workload.name,
            "batch_size": batch_size,
            "device": device_text,
            "framework": Framework(name="pytorch", version=torch.__version__),
            "measured_iterations": len(records),
            "provenance": provenance,
            "input": {**workload.input_desc, "batch_shape": batch_shape},
            "layers": profile_layers,
            "step": step,
            "iteration_s": iteration,
            "precision": precision,
            "device_key": _catalog_key(dev),
            "buffer_bytes": sum(b.numel() * b.element_size() for b in workload.module.buffers()),
            "buffer_sync_s": buffer_sync,
            "ddp_overhead_s": ddp_overhead,
        }
    )
