"""The calibration options every profile-reading command shares (`--device-throughput`,
`--step-time`, `--batch-size`, `--target-device`, `--precision`, `--from-device`), parsed at
the edge and applied by `sgdscale.calibrate.calibrate`, so each command moves a profile the
same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from sgdscale.device import catalog
from sgdscale.profile import Profile

HELP = {
    "device_throughput": "Measured samples/s of ONE target device (e.g. 253/s): every compute time is scaled "
                         "by one factor so a step takes batch/throughput; layer sizes and ready order stay.",
    "step_time": "Measured time of one training step on the target device (e.g. 120ms); same scaling.",
    "batch_size": "Samples per device per step on the target (with --device-throughput/--step-time).",
    "target_device": "Move the profile to a catalog device by roofline: per layer and direction, model time = "
                     "max(flops/peak FLOP/s, bytes/memory bandwidth) on each device; measured time x "
                     "model(target)/model(source); data loading stays. Needs counted flops/bytes in the profile. "
                     "A model, not a measurement: it ignores caches, kernel fusion, launch overheads and "
                     "how far real kernels stay below peak (measured error and limits: docs/devices.md). "
                     "Devices: " + " ".join(catalog()) + ".",
    "precision": "Compute precision on the target device: fp32, tf32, fp16, bf16 [default: the profile's].",
    "from_device": "Catalog device the profile was measured on [default: the profile's device_key].",
}


def calibration_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the shared calibration options to a click command (as keyword arguments)."""
    for name, flag, metavar in reversed([
        ("device_throughput", "--device-throughput", "N/s"),
        ("step_time", "--step-time", "TIME"),
        ("batch_size", "--batch-size", "N"),
        ("target_device", "--target-device", "DEVICE"),
        ("precision", "--precision", "PREC"),
        ("from_device", "--from-device", "DEVICE"),
    ]):
        kind = int if name == "batch_size" else str
        command = click.option(flag, name, type=kind, default=None, metavar=metavar, help=HELP[name])(command)
    return command


def apply_calibration(profile: Profile, device_throughput: str | None, step_time: str | None,
                      batch_size: int | None, target_device: str | None, precision: str | None,
                      from_device: str | None) -> Profile:
    """Parse the options' units and calibrate the profile (unchanged when none is given)."""
    from sgdscale.calibrate import calibrate
    from sgdscale.units import parse_rate_per_s, parse_time_s

    rate = parse_rate_per_s(device_throughput, "--device-throughput") if device_throughput is not None else None
    step = parse_time_s(step_time, "--step-time") if step_time is not None else None
    return calibrate(profile, target_device=target_device, precision=precision, from_device=from_device,
                     step_time_s=step, samples_per_s=rate, batch_size=batch_size)


def calibration_line(original: Profile, calibrated: Profile) -> str | None:
    """One line saying what calibration did, or None when nothing changed."""
    steps = calibrated.provenance.get("calibration", [])[len(original.provenance.get("calibration", [])):]
    if not steps:
        return None
    from sgdscale.units import format_seconds

    parts = []
    for step in steps:
        if step["kind"] == "roofline":
            parts.append(f"roofline {step['from']} ({step['from_precision']}) -> {step['to']} ({step['to_precision']}), "
                         f"layer ratios {step['layer_ratio_min']:.3g}-{step['layer_ratio_max']:.3g}")
        else:
            parts.append(f"scaled x{step['factor']:.3g} to a {format_seconds(step['step_s'])} step at batch {step['batch_size']}")
    return (f"calibrated profile: {'; then '.join(parts)}: step {format_seconds(original.compute_s)} -> "
            f"{format_seconds(calibrated.compute_s)} ({calibrated.batch_size / calibrated.compute_s:.4g} samples/s per device)")
