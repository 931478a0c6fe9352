"""A `torch.profiler` Chrome trace of a few training steps -> `sgdscale.profile/1`.

Record the trace like this (CPU; ``with_stack`` is what makes the profiler emit the
``nn.Module: <Class>_<k>`` events that tell which layer ran when)::

    with torch.profiler.profile(activities=[ProfilerActivity.CPU], with_stack=True, with_modules=True,
                                schedule=torch.profiler.schedule(wait=0, warmup=1, active=5),
                                on_trace_ready=lambda p: p.export_chrome_trace("trace.json")) as prof:
        for batch in loader:
            ...one training step...
            prof.step()

and write the model-info file from the same model (`modelinfo`).

What is read, per ``ProfilerStep#N`` (one training step each; every traced step is a sample):
  forward      parameter-owning modules' ``nn.Module`` events, attributed as sgdscale's own
               profiler does with its hooks: layer i gets the time from its start to the next
               layer's start, the first layer also the time before it since the root module started,
               and the last layer everything up to the first backward op (the loss).
  backward     ``autograd::engine::evaluate_function: torch::autograd::AccumulateGrad`` events:
               their end is when a gradient is ready. Each one is tied to its layer through the
               backward op that ran just before it (its producer), whose ``Sequence number`` names the
               forward op that created it, which lies inside one module's event. Layers are then
               ordered by their last gradient, each charged the time since the previous layer's last
               gradient, the tail after the last gradient going to the first layer (as the profiler
               does). Within one module, gradients are matched to tensors in reverse registration
               order (bias before weight for Linear); they land microseconds apart.
  optimizer    ``Optimizer.*`` annotations (zero_grad and step).
  data         the rest of the step (data loading, Python between the parts), so the parts add up
               to each ``ProfilerStep`` exactly.
  iteration_s  the ``ProfilerStep`` durations. These include the profiler's own overhead, which
               ``with_stack`` raises; ``provenance`` says so.

Only CPU-side timing is read: a trace with GPU kernels is refused, because the CPU events of a GPU
step measure kernel launches, not the work. Holistic Trace Analysis (HTA) was considered and not
used: it analyses GPU kernel time per rank (temporal breakdown, communication/computation overlap)
from multi-rank GPU traces, and attributes neither CPU ops to modules nor gradients to tensors,
which is all this import needs; the Chrome trace is plain JSON, read here with the standard library.
"""

from __future__ import annotations

import bisect
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sgdscale import __version__
from sgdscale.errors import UserError
from sgdscale.inputs import describe
from sgdscale.importing.modelinfo import HOW_TO_WRITE, ModelInfo
from sgdscale.profile import PROFILE_SCHEMA, IterationStats, Profile

STEP = re.compile(r"^ProfilerStep#(\d+)$")
MODULE = re.compile(r"^nn\.Module: (.+)_(\d+)$")
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
INNER_ACCUMULATE = "torch::autograd::AccumulateGrad"
ACCUMULATE = BACKWARD_PREFIX + INNER_ACCUMULATE
RECORD_HINT = ("record it with torch.profiler.profile(with_stack=True, with_modules=True, schedule=...) "
               "and call prof.step() after every training step")
US = 1e-6


@dataclass
class _Event:
    name: str
    ts: float
    end: float
    tid: Any
    cat: str
    args: dict[str, Any]


@dataclass
class _Step:
    forward: list[float]
    backward: list[float]
    ready: dict[int, float] = field(default_factory=dict)  # tensor index -> seconds after backward start
    optimizer_s: float = 0.0
    data_s: float = 0.0
    duration_s: float = 0.0
    calls: list[int] = field(default_factory=list)  # layer indexes in forward call order


def _load_events(path: Path) -> tuple[dict[str, Any], list[_Event]]:
    from sgdscale.jsonio import read_json_file

    try:
        data = read_json_file(path, what="Chrome trace", missing=f"trace file {path} does not exist")
    except UserError as error:
        if not path.exists():
            raise
        raise UserError(f"{error}; give the file written by prof.export_chrome_trace()") from None
    raw = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise UserError(f"{path} is not a Chrome trace (no \"traceEvents\" list); "
                        "give the file written by prof.export_chrome_trace()")
    events = []
    for e in raw:
        if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) \
                and isinstance(e.get("dur"), (int, float)) and isinstance(e.get("name"), str):
            events.append(_Event(e["name"], float(e["ts"]), float(e["ts"]) + float(e["dur"]), e.get("tid"),
                                 str(e.get("cat", "")), e.get("args") or {}))
    return (data if isinstance(data, dict) else {}), events


def _match_modules(info: ModelInfo, instances: set[tuple[str, int]], path: Path) -> dict[tuple[str, int], int]:
    """Trace module instance (class, k) -> layer index: the profiler numbers each class's instances
    in the order it first calls them, which is the model-info's forward order of called modules."""
    layer_of = {id(m): li for li, m in enumerate(info.layers)}
    by_class: dict[str, list[Any]] = {}
    for module in info.modules:
        if module.called:
            by_class.setdefault(module.cls, []).append(module)
    mapping: dict[tuple[str, int], int] = {}
    for cls in {m.cls for m in info.layers}:
        listed = by_class.get(cls, [])
        seen = sorted(k for c, k in instances if c == cls)
        if len(seen) != len(listed):
            raise UserError(
                f"model-info does not match the trace {path.name}: it lists {len(listed)} called {cls} "
                f"module{'s' if len(listed) != 1 else ''}, the trace calls {len(seen)}; "
                f"{HOW_TO_WRITE} (the same model, configuration and forward pass as traced)")
        mapping.update({(cls, k): layer_of[id(m)] for k, m in zip(seen, listed) if id(m) in layer_of})
    return mapping


def import_kineto(path: str | Path, info: ModelInfo, batch_size: int, model: str | None = None) -> Profile:
    """Read the trace at `path` and build the profile of one step of `info`'s model."""
    path = Path(path)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch size must be a positive integer (samples per step in the trace); got {batch_size!r}")
    meta, events = _load_events(path)
    steps = sorted((e for e in events if STEP.match(e.name)), key=lambda e: e.ts)
    if not steps:
        raise UserError(f"{path} has no ProfilerStep#N events, so its training steps cannot be told apart; "
                        + RECORD_HINT)
    if any(e.cat in ("kernel", "gpu_memcpy", "gpu_memset") for e in events):
        raise UserError(f"{path} holds GPU kernels: this importer reads CPU-side times only, which on a GPU "
                        "measure kernel launches, not the work; profile with `sgdscale profile --device cuda` instead")
    modules = [e for e in events if MODULE.match(e.name)]
    if not modules:
        raise UserError(f"{path} has no 'nn.Module: ...' events (the trace was recorded without with_stack=True); "
                        + RECORD_HINT)
    instances = {(m.group(1), int(m.group(2))) for m in (MODULE.match(e.name) for e in modules) if m}
    mapping = _match_modules(info, instances, path)
    info_layers = info.layers
    tensor_layer = [li for li, mod in enumerate(info_layers) for _ in mod.params]
    tensor_shapes = [list(t.shape) for mod in info_layers for t in mod.params]
    first_tensor = [sum(len(m.params) for m in info_layers[:li]) for li in range(len(info_layers))]
    n_layers, n_tensors = len(info_layers), len(tensor_layer)

    by_start = sorted(events, key=lambda e: e.ts)
    starts = [e.ts for e in by_start]
    parsed: list[_Step] = []
    for step in steps:
        lo = bisect.bisect_left(starts, step.ts)
        hi = bisect.bisect_right(starts, step.end)
        inside = [e for e in by_start[lo:hi] if e.end <= step.end + 1e-3]
        parsed.append(_read_step(step, inside, mapping, tensor_layer, tensor_shapes, first_tensor, n_layers, n_tensors,
                                 path))

    order = list(dict.fromkeys(li for s in parsed for li in s.calls))
    order += [li for li in range(n_layers) if li not in order]
    layers = []
    for li in order:
        module = info_layers[li]
        fwd = [s.forward[li] for s in parsed]
        bwd = [s.backward[li] for s in parsed]
        params = []
        for offset, tensor in enumerate(module.params):
            ready = [s.ready[first_tensor[li] + offset] for s in parsed if first_tensor[li] + offset in s.ready]
            entry: dict[str, Any] = {"name": tensor.name, "numel": tensor.numel, "bytes": tensor.bytes}
            if ready:
                entry["grad_ready_s"] = statistics.fmean(ready)
            params.append(entry)
        layers.append({"name": module.name, "forward_s": statistics.fmean(fwd), "backward_s": statistics.fmean(bwd),
                       "params": params, "forward_samples_s": fwd, "backward_samples_s": bwd})
    durations = [s.duration_s for s in parsed]
    ordered = sorted(durations)
    iteration = IterationStats(mean=statistics.fmean(durations), p50=statistics.median(durations),
                               p95=ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
                               samples=durations)
    provenance = {
        "tool": f"sgdscale {__version__} (import kineto)",
        "source": path.name,
        "steps": [int(STEP.match(s.name).group(1)) for s in steps],  # type: ignore[union-attr]
        "trace_meta": {k: meta[k] for k in ("schemaVersion", "with_stack", "with_modules", "host_name",
                                           "displayTimeUnit") if k in meta},
        "model_info_order": info.order,
        "method": "Imported from a torch.profiler Chrome trace: forward from nn.Module events (segments between "
                  "parameter-owning modules' starts), backward from AccumulateGrad events (layers in order of "
                  "their last gradient, each charged the time since the previous one), optimizer from "
                  "Optimizer.* annotations, data = rest of each ProfilerStep. Times include the profiler's "
                  "overhead (with_stack adds Python-level tracing).",
    }
    try:
        return Profile.model_validate({
            "schema": PROFILE_SCHEMA,
            "model": model or info.model,
            "batch_size": batch_size,
            "device": "cpu (from a torch.profiler trace)",
            "framework": {"name": "pytorch", "version": str(meta.get("torch_version", ""))},
            "measured_iterations": len(parsed),
            "provenance": provenance,
            "layers": layers,
            "step": {"data_s": statistics.fmean(s.data_s for s in parsed),
                     "optimizer_s": statistics.fmean(s.optimizer_s for s in parsed)},
            "iteration_s": iteration,
        })
    except ValidationError as error:  # e.g. tensor names repeated in a hand-written model-info
        raise UserError(describe(error, "the imported profile is invalid", HOW_TO_WRITE)) from None


def _read_step(step: _Event, inside: list[_Event], mapping: dict[tuple[str, int], int], tensor_layer: list[int],
               tensor_shapes: list[list[int]], first_tensor: list[int], n_layers: int, n_tensors: int,
               path: Path) -> _Step:
    label = step.name
    backward_ops = [e for e in inside if e.name.startswith(BACKWARD_PREFIX)]
    if not backward_ops:
        raise UserError(f"{path}: {label} has no backward (autograd::engine) events; trace whole training steps "
                        "(forward, loss.backward(), optimizer step) between prof.step() calls")
    bwd_start = min(e.ts for e in backward_ops)
    bwd_end = max(e.end for e in backward_ops)
    module_events = [(e, MODULE.match(e.name)) for e in inside if e.ts < bwd_start and MODULE.match(e.name)]
    if not module_events:
        raise UserError(f"{path}: {label} has no nn.Module events before its backward; " + RECORD_HINT)
    fwd_start = min(e.ts for e, _ in module_events)
    calls = sorted(((e.ts, mapping[(m.group(1), int(m.group(2)))], e) for e, m in module_events
                    if (m.group(1), int(m.group(2))) in mapping), key=lambda c: c[0])
    if not calls:
        raise UserError(f"{path}: {label} calls none of the model-info's modules; {HOW_TO_WRITE}")
    result = _Step(forward=[0.0] * n_layers, backward=[0.0] * n_layers, calls=[li for _, li, _ in calls])
    result.forward[calls[0][1]] += (calls[0][0] - fwd_start) * US
    for (t, li, _), (t_next, _, _) in zip(calls, calls[1:]):
        result.forward[li] += (t_next - t) * US
    result.forward[calls[-1][1]] += (bwd_start - calls[-1][0]) * US

    # Gradients: each AccumulateGrad -> its producer -> forward op (same sequence number) -> module.
    forward_by_seq: dict[Any, list[_Event]] = {}
    for e in inside:
        if e.ts < bwd_start and e.cat == "cpu_op" and "Sequence number" in e.args:
            forward_by_seq.setdefault(e.args["Sequence number"], []).append(e)
    module_spans = sorted(((e.ts, e.end, li, e.tid) for _, li, e in calls), key=lambda s: s[0])
    accumulates = sorted((e for e in backward_ops if e.name == ACCUMULATE), key=lambda e: e.end)
    if len(accumulates) != n_tensors:
        raise UserError(
            f"model-info does not match the trace {path.name}: {label} accumulates {len(accumulates)} gradients but "
            f"the model-info lists {n_tensors} parameter tensors; {HOW_TO_WRITE} (the same model as traced)")
    producers = sorted((e for e in backward_ops if e.name != ACCUMULATE), key=lambda e: e.end)
    producer_ends = [e.end for e in producers]
    inner = sorted((e for e in inside if e.name == INNER_ACCUMULATE), key=lambda e: e.ts)
    inner_starts = [e.ts for e in inner]
    per_layer: dict[int, list[tuple[float, Any]]] = {}
    for acc in accumulates:
        layer = None
        i = bisect.bisect_right(producer_ends, acc.ts + 1e-3) - 1
        while i >= 0 and layer is None:
            layer = _owner(producers[i], forward_by_seq, module_spans)
            i -= 1
        if layer is None:
            raise UserError(f"{path}: a gradient in {label} cannot be traced back to a module (its backward op has "
                            "no Sequence number linking it to a forward op); " + RECORD_HINT)
        j = bisect.bisect_left(inner_starts, acc.ts)
        shape = None
        if j < len(inner) and inner[j].end <= acc.end + 1e-3:
            dims = inner[j].args.get("Input Dims")
            shape = list(dims[0]) if isinstance(dims, list) and dims and isinstance(dims[0], list) else None
        per_layer.setdefault(layer, []).append(((acc.end - bwd_start) * US, shape))
    for li, grads in per_layer.items():
        shapes = tensor_shapes[first_tensor[li]:first_tensor[li] + tensor_layer.count(li)]
        if len(grads) != len(shapes):
            raise UserError(
                f"model-info does not match the trace {path.name}: in {label}, {len(grads)} gradients come from the "
                f"module it lists as #{li} with {len(shapes)} tensors; {HOW_TO_WRITE} (in forward call order)")
        for offset, t in _assign(grads, shapes, label, li, path):
            result.ready[first_tensor[li] + offset] = t
    last = {li: max(t for t, _ in grads) for li, grads in per_layer.items()}
    previous = 0.0
    for li in sorted(last, key=last.get):  # type: ignore[arg-type]
        result.backward[li] += last[li] - previous
        previous = last[li]
    # The tail after the last gradient (autograd teardown) goes to the first layer in forward order.
    result.backward[result.calls[0]] += max(0.0, (bwd_end - bwd_start) * US - previous)
    optimizer = [e for e in inside if e.cat == "user_annotation" and e.name.startswith("Optimizer.")]
    result.optimizer_s = sum(e.end - e.ts for e in optimizer) * US
    result.duration_s = (step.end - step.ts) * US
    parts = sum(result.forward) + sum(result.backward) + result.optimizer_s
    result.data_s = max(0.0, result.duration_s - parts)
    return result


def _assign(grads: list[tuple[float, Any]], shapes: list[list[int]], label: str, layer: int,
            path: Path) -> list[tuple[int, float]]:
    """Match one module's accumulated gradients to its tensors: by shape where the trace recorded
    shapes (record_shapes=True) and it tells them apart, else in reverse registration order."""
    free = list(range(len(shapes)))[::-1]
    pairs: list[tuple[int, float]] = []
    pending = []
    for t, shape in sorted(grads, key=lambda g: g[0]):
        candidates = [i for i in free if shape is not None and shapes[i] == shape]
        if shape is not None and not candidates and shape not in shapes:
            raise UserError(f"model-info does not match the trace {path.name}: in {label} a gradient of shape {shape} "
                            f"comes from the module it lists as #{layer}, whose tensors have shapes {shapes}; "
                            + HOW_TO_WRITE)
        if len(candidates) == 1:
            free.remove(candidates[0])
            pairs.append((candidates[0], t))
        else:
            pending.append(t)
    pairs += list(zip(free, pending))
    return pairs


def _owner(producer: _Event, forward_by_seq: dict[Any, list[_Event]],
           spans: list[tuple[float, float, int, Any]]) -> int | None:
    """The innermost parameter-owning module whose forward event contains the op that created
    `producer`'s autograd node, or None."""
    seq = producer.args.get("Sequence number")
    best: tuple[float, int] | None = None
    for op in forward_by_seq.get(seq, ()):
        for start, end, li, tid in spans:
            if start <= op.ts and op.end <= end + 1e-3 and tid == op.tid and (best is None or start > best[0]):
                best = (start, li)
    return None if best is None else best[1]
