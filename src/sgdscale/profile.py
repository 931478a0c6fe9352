"""The Profile: one training step of one worker, measured on one machine (`sgdscale.profile/1`).

It is the contract between profiling (which needs torch) and prediction (which never imports
torch): every predictor reads only this. See docs/design.md, "Data formats".
"""

from __future__ import annotations

import json
import os
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sgdscale.errors import UserError
from sgdscale.jsonio import write_json_atomic

PROFILE_SCHEMA = "sgdscale.profile/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ParamTensor(_Strict):
    """One parameter tensor; its gradient is what gets communicated."""

    name: str
    numel: int = Field(ge=0)
    bytes: int = Field(ge=0)
    grad_ready_s: float | None = Field(
        default=None, ge=0, description="time from backward start until this gradient is ready"
    )


class Layer(_Strict):
    """One layer (a leaf module holding parameters, or a parameter-free block), in forward order."""

    name: str
    forward_s: float = Field(ge=0)
    backward_s: float = Field(ge=0)
    params: list[ParamTensor] = Field(default_factory=list)
    forward_samples_s: list[float] | None = None
    backward_samples_s: list[float] | None = None
    # Counted work (optional; older profiles lack them and still load): floating-point
    # operations (matmul/conv/attention, as torch.utils.flop_counter counts them) and bytes of
    # memory traffic (every operator's tensor inputs read + outputs written), charged to layers
    # exactly like the times are. They let `calibrate.retarget` move a profile between devices.
    forward_flops: float | None = Field(default=None, ge=0)
    backward_flops: float | None = Field(default=None, ge=0)
    forward_bytes: float | None = Field(default=None, ge=0)
    backward_bytes: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _samples_non_negative(self) -> Layer:
        for field in ("forward_samples_s", "backward_samples_s"):
            samples = getattr(self, field)
            if samples is not None and any(s < 0 for s in samples):
                raise ValueError(f"{field} holds a negative time")
        return self


class StepTimes(_Strict):
    """Per-step times outside forward and backward (0 where not applicable)."""

    data_s: float = Field(default=0.0, ge=0)
    h2d_s: float = Field(default=0.0, ge=0)
    optimizer_s: float = Field(default=0.0, ge=0)
    optimizer_flops: float | None = Field(default=None, ge=0)
    optimizer_bytes: float | None = Field(default=None, ge=0)


class IterationStats(_Strict):
    """Whole-step wall time measured without per-layer instrumentation."""

    mean: float = Field(gt=0)
    p50: float = Field(gt=0)
    p95: float = Field(gt=0)
    samples: list[float] = Field(default_factory=list)


class Framework(_Strict):
    name: str
    version: str


class Profile(_Strict):
    """One worker's training step, layer by layer."""

    schema_: Literal["sgdscale.profile/1"] = Field(default=PROFILE_SCHEMA, alias="schema")
    model: str
    batch_size: int = Field(gt=0, description="samples per worker per step")
    device: str = ""
    framework: Framework = Framework(name="unknown", version="")
    measured_iterations: int = Field(default=0, ge=0)
    provenance: dict[str, Any] = Field(default_factory=dict)
    input: dict[str, Any] = Field(default_factory=dict, description="input shape and options")
    layers: list[Layer] = Field(min_length=1)
    step: StepTimes = StepTimes()
    iteration_s: IterationStats | None = None
    precision: str | None = Field(default=None, description="compute precision measured: fp32, tf32, fp16, bf16")
    device_key: str | None = Field(default=None, description="device catalog key of the measuring device")

    @model_validator(mode="after")
    def _unique_tensor_names(self) -> Profile:
        seen: set[str] = set()
        for layer in self.layers:
            for tensor in layer.params:
                if tensor.name in seen:
                    raise ValueError(f"parameter tensor '{tensor.name}' appears twice")
                seen.add(tensor.name)
        return self

    # Derived quantities (cached: profiles are immutable and predictors read them often).
    @cached_property
    def tensors(self) -> list[ParamTensor]:
        """All parameter tensors in forward order."""
        return [t for layer in self.layers for t in layer.params]

    @cached_property
    def forward_s(self) -> float:
        return sum(layer.forward_s for layer in self.layers)

    @cached_property
    def backward_s(self) -> float:
        return sum(layer.backward_s for layer in self.layers)

    @cached_property
    def compute_s(self) -> float:
        """One step's compute on one worker: data, copy, forward, backward, optimizer."""
        return self.step.data_s + self.step.h2d_s + self.forward_s + self.backward_s + self.step.optimizer_s

    @cached_property
    def has_counts(self) -> bool:
        """Whether every layer carries counted flops and bytes (needed to retarget a device)."""
        return all(
            None not in (layer.forward_flops, layer.backward_flops, layer.forward_bytes, layer.backward_bytes)
            for layer in self.layers
        )

    @cached_property
    def param_count(self) -> int:
        return sum(t.numel for t in self.tensors)

    @cached_property
    def gradient_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def _describe(error: ValidationError) -> str:
    lines = []
    for item in error.errors()[:8]:
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        lines.append(f"  {where}: {item['msg']}")
    more = len(error.errors()) - 8
    if more > 0:
        lines.append(f"  ... and {more} more")
    return "\n".join(lines)


def profile_from_json(data: Any, source: str = "profile") -> Profile:
    """Validate parsed JSON as a Profile; errors name the field and the problem."""
    if not isinstance(data, dict):
        raise UserError(f"{source}: not a profile (expected a JSON object with \"schema\": \"{PROFILE_SCHEMA}\")")
    schema = data.get("schema")
    if schema != PROFILE_SCHEMA:
        raise UserError(
            f"{source}: unsupported schema {schema!r}; this sgdscale reads \"{PROFILE_SCHEMA}\" "
            f"(make one with `sgdscale profile MODEL -o FILE`)"
        )
    try:
        return Profile.model_validate(data)
    except ValidationError as error:
        raise UserError(f"{source}: invalid profile:\n{_describe(error)}") from None


def builtin_profile_names() -> list[str]:
    folder = resources.files("sgdscale") / "data" / "profiles"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_profile(name_or_path: str | os.PathLike[str]) -> Profile:
    """Load a profile file, or a built-in profile by name (e.g. 'resnet50')."""
    path = Path(name_or_path)
    if path.is_file():
        source, text = str(path), None
        try:
            text = path.read_text()
        except OSError as error:
            raise UserError(f"cannot read profile {path}: {error.strerror}") from None
    else:
        name = str(name_or_path)
        if name not in builtin_profile_names():
            if path.suffix == ".json" or os.sep in name:
                raise UserError(f"profile file {path} does not exist")
            raise UserError(
                f"no profile file or built-in profile named '{name}'; built-in profiles: "
                + ", ".join(builtin_profile_names())
            )
        source = f"built-in profile '{name}'"
        text = (resources.files("sgdscale") / "data" / "profiles" / f"{name}.json").read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise UserError(f"{source}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    return profile_from_json(data, source)


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    write_json_atomic(path, profile.to_json())
