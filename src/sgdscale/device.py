"""The device catalog: peak dense FLOP/s per precision and memory bandwidth of one accelerator.

It feeds the roofline retargeting in `calibrate.py` (profile on one device, predict another).
The numbers live in `data/devices.json`; every row's source is in docs/devices.md. No torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from sgdscale.errors import UserError

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
BYTES_PER_ELEMENT = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}  # tf32 keeps fp32 storage


@dataclass(frozen=True)
class Device:
    """One device's roofline: peak dense FLOP/s per precision (None: no fast path) and bandwidth."""

    key: str
    name: str
    peak_flops: dict[str, float | None]
    memory_bytes_per_s: float

    def flops_for(self, precision: str) -> float:
        """Peak FLOP/s at `precision`; a UserError names the precisions this device has."""
        check_precision(precision)
        peak = self.peak_flops.get(precision)
        if peak is None:
            have = ", ".join(p for p in PRECISIONS if self.peak_flops.get(p))
            raise UserError(f"device {self.key} has no {precision} peak in the catalog (it has: {have}); "
                            f"choose one of those with --precision")
        return peak

    def roofline_s(self, flops: float, nbytes: float, precision: str) -> float:
        """Roofline time: max(compute at peak, memory traffic at peak bandwidth)."""
        return max(flops / self.flops_for(precision), nbytes / self.memory_bytes_per_s)


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise UserError(f"unknown precision '{precision}'; choose one of {', '.join(PRECISIONS)}")
    return precision


@lru_cache(maxsize=1)
def catalog() -> dict[str, Device]:
    """All devices of `data/devices.json`, by key."""
    data = json.loads((resources.files("sgdscale") / "data" / "devices.json").read_text())
    devices = {}
    for key, row in data["devices"].items():
        devices[key] = Device(key=key, name=row["name"],
                              peak_flops={p: row.get(f"{p}_flops") for p in PRECISIONS},
                              memory_bytes_per_s=float(row["memory_bytes_per_s"]))
    return devices


def get_device(key: str) -> Device:
    """The catalog entry for `key` (case-insensitive); a UserError lists the known devices."""
    devices = catalog()
    for known, device in devices.items():
        if known.lower() == str(key).strip().lower():
            return device
    raise UserError(f"unknown device '{key}'; known devices: {', '.join(devices)} (see docs/devices.md)")
