"""Profile here, predict there: pure transforms of a Profile to another device's speed.

Every command that takes a profile applies these in one place (`calibrate`), so the layer
structure, parameter sizes and gradient ready order the predictors read stay the profile's own;
only compute times change. No torch.

Two ways to move a profile:
- **Measured speed** (`to_step_time`): one number measured on the target device (samples/s of
  one device, or one step's time) rescales every compute time by the same factor. Exact for the
  total by construction; keeps the profile's per-layer proportions, which is right only when the
  target spends its time across layers as the profiling device did.
- **Roofline** (`retarget`): per layer and direction, time on a device is modelled as
  max(flops / peak FLOP/s, bytes / memory bandwidth) at the chosen precision; the measured time is
  multiplied by model(target) / model(source). Needs counted flops and bytes in the profile and
  catalog entries for both devices (`device.py`). Limits in docs/devices.md.
"""

from __future__ import annotations

import bisect
from typing import Any

from sgdscale.device import BYTES_PER_ELEMENT, Device, catalog, check_precision, get_device
from sgdscale.errors import UserError
from sgdscale.profile import Profile, profile_from_json


def _scale_layer(layer: dict[str, Any], forward: float, backward: float) -> None:
    layer["forward_s"] *= forward
    layer["backward_s"] *= backward
    if layer.get("forward_samples_s") is not None:
        layer["forward_samples_s"] = [s * forward for s in layer["forward_samples_s"]]
    if layer.get("backward_samples_s") is not None:
        layer["backward_samples_s"] = [s * backward for s in layer["backward_samples_s"]]


def _scale_iteration(data: dict[str, Any], factor: float) -> None:
    stats = data.get("iteration_s")
    if stats:
        for key in ("mean", "p50", "p95"):
            stats[key] *= factor
        stats["samples"] = [s * factor for s in stats.get("samples", [])]


def _note(data: dict[str, Any], entry: dict[str, Any]) -> None:
    data.setdefault("provenance", {}).setdefault("calibration", []).append(entry)


def to_step_time(profile: Profile, step_s: float, batch_size: int | None = None, *,
                 same_device: bool = False) -> Profile:
    """Scale every compute time by one factor so that one step (data + forward + backward +
    optimizer, the predictors' one-worker step) takes `step_s`; optionally at a new batch size.
    `same_device`: the speed is the profiled device's own (validation's run speed), not another
    device's, so what follows from the device (gloo's threads on a CPU, `comm.streams`) stays."""
    if not step_s > 0:
        raise UserError(f"the target step time must be positive, got {step_s:g} s")
    if batch_size is not None and batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {batch_size}")
    factor = step_s / profile.compute_s
    data = profile.to_json()
    for layer in data["layers"]:
        _scale_layer(layer, factor, factor)
        for tensor in layer["params"]:
            if tensor.get("grad_ready_s") is not None:
                tensor["grad_ready_s"] *= factor
    for key in ("data_s", "h2d_s", "optimizer_s"):
        data["step"][key] = data["step"].get(key, 0.0) * factor
    _scale_iteration(data, factor)
    if batch_size is not None and batch_size != profile.batch_size:
        # Counted work scales with the batch (exact for flops of per-sample operators; the
        # weights' share of the bytes does not, so bytes are approximate after this).
        grow = batch_size / profile.batch_size
        for layer in data["layers"]:
            for key in ("forward_flops", "backward_flops", "forward_bytes", "backward_bytes"):
                if layer.get(key) is not None:
                    layer[key] *= grow
        data["batch_size"] = batch_size
    _note(data, {"kind": "step_time", "factor": factor, "step_s": step_s, "batch_size": data["batch_size"],
                 "compute_s_before": profile.compute_s, **({"same_device": True} if same_device else {})})
    return profile_from_json(data, "calibrated profile")


def to_throughput(profile: Profile, samples_per_s: float, batch_size: int | None = None) -> Profile:
    """Scale so one device trains `samples_per_s` samples/s at the (new) batch size."""
    if not samples_per_s > 0:
        raise UserError(f"--device-throughput must be positive, got {samples_per_s:g}/s")
    batch = batch_size or profile.batch_size
    return to_step_time(profile, batch / samples_per_s, batch_size)


def _ready_map(profile: Profile, backward_ratio: list[float]) -> dict[str, float]:
    """New grad_ready_s per tensor: backward time is cut into segments that end at each layer's
    last gradient (how the profiler charges backward time); each segment stretches by its
    layer's ratio and tensors inside keep their relative position, so the ready order is kept."""
    last = []
    for index, layer in enumerate(profile.layers):
        ready = [t.grad_ready_s for t in layer.params if t.grad_ready_s is not None]
        if ready:
            last.append((max(ready), index))
    if not last:
        return {}
    last.sort()
    old_ends = [end for end, _ in last]
    new_ends, new_start, old_start = [], 0.0, 0.0
    for end, index in last:
        new_start += (end - old_start) * backward_ratio[index]
        new_ends.append(new_start)
        old_start = end
    mapped = {}
    for tensor in profile.tensors:
        t = tensor.grad_ready_s
        if t is None:
            continue
        k = min(bisect.bisect_left(old_ends, t), len(old_ends) - 1)
        old_a = old_ends[k - 1] if k else 0.0
        new_a = new_ends[k - 1] if k else 0.0
        span = old_ends[k] - old_a
        position = (t - old_a) / span if span > 0 else 1.0
        mapped[tensor.name] = new_a + position * (new_ends[k] - new_a)
    return mapped


def retarget(profile: Profile, target: Device, precision: str, source: Device,
             source_precision: str) -> Profile:
    """Move `profile` from `source` at `source_precision` to `target` at `precision` by the
    per-layer roofline ratio (see the module docstring). Data and host-to-device times stay."""
    check_precision(precision)
    check_precision(source_precision)
    if not profile.has_counts:
        raise UserError(
            "this profile has no counted flops/bytes per layer, so it cannot be moved by roofline; "
            "re-profile it with `sgdscale profile`, or give a measured speed instead "
            "(--device-throughput N/s or --step-time T)")
    shrink = BYTES_PER_ELEMENT[precision] / BYTES_PER_ELEMENT[source_precision]

    def model(device: Device, flops: float, nbytes: float, prec: str) -> float:
        return device.roofline_s(flops, nbytes, prec)

    pairs = []  # (source model s, target model s) per layer and direction
    for layer in profile.layers:
        for flops, nbytes in ((layer.forward_flops, layer.forward_bytes), (layer.backward_flops, layer.backward_bytes)):
            pairs.append((model(source, flops, nbytes, source_precision), model(target, flops, nbytes * shrink, precision)))
    total_source = sum(s for s, _ in pairs)
    fallback = sum(t for _, t in pairs) / total_source if total_source > 0 else 1.0
    ratios = [t / s if s > 0 else fallback for s, t in pairs]
    forward_ratio, backward_ratio = ratios[0::2], ratios[1::2]

    ready = _ready_map(profile, backward_ratio)
    data = profile.to_json()
    for index, layer in enumerate(data["layers"]):
        _scale_layer(layer, forward_ratio[index], backward_ratio[index])
        for key in ("forward_bytes", "backward_bytes"):
            layer[key] *= shrink
        for tensor in layer["params"]:
            if tensor["name"] in ready:
                tensor["grad_ready_s"] = ready[tensor["name"]]
    # The optimizer streams fp32 weights, gradients and momentum: memory-bound, no precision change.
    step = profile.step
    if step.optimizer_bytes:
        optimizer_ratio = (model(target, step.optimizer_flops or 0.0, step.optimizer_bytes, "fp32")
                           / model(source, step.optimizer_flops or 0.0, step.optimizer_bytes, "fp32"))
    else:
        optimizer_ratio = source.memory_bytes_per_s / target.memory_bytes_per_s
    data["step"]["optimizer_s"] = step.optimizer_s * optimizer_ratio
    new_compute = (step.data_s + step.h2d_s + data["step"]["optimizer_s"]
                   + sum(l["forward_s"] + l["backward_s"] for l in data["layers"]))
    _scale_iteration(data, new_compute / profile.compute_s)
    data["device"] = f"{target.name} ({precision}), retargeted by roofline from: {profile.device or source.name}"
    data["device_key"] = target.key
    data["precision"] = precision
    _note(data, {"kind": "roofline", "from": source.key, "from_precision": source_precision, "to": target.key,
                 "to_precision": precision, "compute_s_before": profile.compute_s, "compute_s_after": new_compute,
                 "layer_ratio_min": min(ratios), "layer_ratio_max": max(ratios),
                 "optimizer_ratio": optimizer_ratio})
    return profile_from_json(data, "retargeted profile")


def calibrate(profile: Profile, *, target_device: str | None = None, precision: str | None = None,
              from_device: str | None = None, step_time_s: float | None = None,
              samples_per_s: float | None = None, batch_size: int | None = None) -> Profile:
    """All calibration options of the CLI, in order: roofline retarget (shape), then a measured
    speed (total). With no option the profile comes back unchanged."""
    if step_time_s is not None and samples_per_s is not None:
        raise UserError("give either --device-throughput or --step-time, not both (they say the same thing)")
    if batch_size is not None and step_time_s is None and samples_per_s is None:
        raise UserError("--batch-size needs a measured speed at that batch: add --device-throughput N/s "
                        "or --step-time T")
    if precision is not None and target_device is None:
        raise UserError("--precision applies to --target-device; add --target-device DEVICE "
                        f"(known: {', '.join(catalog())})")
    if target_device is not None:
        key = from_device or profile.device_key
        if key is None:
            raise UserError("the profile does not say which catalog device measured it; add --from-device DEVICE "
                            f"(known: {', '.join(catalog())})")
        source = get_device(key)
        target = get_device(target_device)
        source_precision = profile.precision or "fp32"
        profile = retarget(profile, target, precision or source_precision, source, source_precision)
    elif from_device is not None:
        raise UserError("--from-device only matters with --target-device; add --target-device DEVICE")
    if samples_per_s is not None:
        profile = to_throughput(profile, samples_per_s, batch_size)
    elif step_time_s is not None:
        profile = to_step_time(profile, step_time_s, batch_size)
    return profile
