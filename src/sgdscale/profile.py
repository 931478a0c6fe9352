"""The Profile: one training step of one worker, measured on one machine (`sgdscale.profile/1`).

It is the contract between profiling (which needs torch) and prediction (which never imports
torch): every predictor reads only this. See docs/design.md, "Data formats".
"""

from __future__ import annotations

import os
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sgdscale.errors import UserError
from sgdscale.inputs import BYTES, BatchSize, ByteCount, ElementCount, Seconds, WorkCount, describe
from sgdscale.jsonio import parse_json_text, read_json_file, write_json_atomic

PROFILE_SCHEMA = "sgdscale.profile/1"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ParamTensor(_Strict):
    """One parameter tensor; its gradient is what gets communicated."""

    name: str
    numel: ElementCount
    bytes: ByteCount
    grad_ready_s: Seconds | None = Field(
        default=None, description="time from backward start until this gradient is ready"
    )


class Layer(_Strict):
    """One layer (a leaf module holding parameters, or a parameter-free block), in forward order."""

    name: str
    forward_s: Seconds
    backward_s: Seconds
    params: list[ParamTensor] = Field(default_factory=list)
    forward_samples_s: list[Seconds] | None = Field(default=None, min_length=1)
    backward_samples_s: list[Seconds] | None = Field(default=None, min_length=1)
    # Counted work (optional; older profiles lack them and still load): floating-point
    # operations (matmul/conv/attention, as torch.utils.flop_counter counts them) and bytes of
    # memory traffic (every operator's tensor inputs read + outputs written), charged to layers
    # exactly like the times are. They let `calibrate.retarget` move a profile between devices.
    forward_flops: WorkCount | None = None
    backward_flops: WorkCount | None = None
    forward_bytes: WorkCount | None = None
    backward_bytes: WorkCount | None = None


class StepTimes(_Strict):
    """Per-step times outside forward and backward (0 where not applicable)."""

    data_s: Seconds = 0.0
    h2d_s: Seconds = 0.0
    optimizer_s: Seconds = 0.0
    optimizer_flops: WorkCount | None = None
    optimizer_bytes: WorkCount | None = None


class IterationStats(_Strict):
    """Whole-step wall time measured without per-layer instrumentation."""

    mean: Seconds = Field(gt=0)
    p50: Seconds = Field(gt=0)
    p95: Seconds = Field(gt=0)
    samples: list[Seconds] = Field(default_factory=list)


class Framework(_Strict):
    name: str
    version: str


class Profile(_Strict):
    """One worker's training step, layer by layer."""

    schema_: Literal["sgdscale.profile/1"] = Field(default=PROFILE_SCHEMA, alias="schema")
    model: str
    batch_size: BatchSize = Field(description="samples per worker per step")
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
    buffer_bytes: ByteCount = Field(default=0, description="bytes of the module's buffers (batch-norm statistics), "
                                    "which DDP broadcasts from rank 0 before every training forward")
    buffer_sync_s: Seconds | None = Field(
        default=None, description="DDP's local work with the buffers before every training forward (re-collecting "
        "them, flattening them into one tensor per dtype, copying the broadcast values back), timed on the "
        "profiling node; None: not measured (a profile made before sgdscale measured it, or an imported one)")
    ddp_overhead_s: Seconds | None = Field(
        default=None, description="what wrapping the model in PyTorch DDP adds to a training step with nothing to "
        "talk to (one process, world size 1: the reducer's hooks and bucket copies, the buffer work), the median "
        "of paired steps with and without DDP on the profiling node; recorded, not charged by the models "
        "(sgdscale.bucket_copies); None: not measured (older, imported or GPU profiles)")

    @model_validator(mode="after")
    def _unique_tensor_names(self) -> Profile:
        seen: set[str] = set()
        for layer in self.layers:
            for tensor in layer.params:
                if tensor.name in seen:
                    raise ValueError(f"parameter tensor '{tensor.name}' appears twice")
                seen.add(tensor.name)
        # Not through the cached properties: a model_copy would carry their values over.
        step = self.step.data_s + self.step.h2d_s + self.step.optimizer_s
        if not step + sum(layer.forward_s + layer.backward_s for layer in self.layers) > 0:
            raise ValueError("every time in the profile is 0, but a training step takes time")
        gradient_bytes = sum(t.bytes for layer in self.layers for t in layer.params)
        if gradient_bytes > BYTES.high:
            raise ValueError(f"the gradients add up to {gradient_bytes:.3g} bytes (allowed: {BYTES.text()})")
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

    def with_layers(self, layers: list[Layer]) -> Profile:
        """A copy with other layers (same tensors' names), its derived quantities recomputed: a plain
        model_copy would carry the cached ones over."""
        copied = self.model_copy(update={"layers": layers})
        for name in [key for key in copied.__dict__ if key not in type(self).model_fields]:
            del copied.__dict__[name]
        return copied

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


PROFILE_FIX = "fix that value, or re-profile with `sgdscale profile MODEL -o FILE`"


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
        raise UserError(describe(error, f"{source}: invalid profile", PROFILE_FIX)) from None


def builtin_profile_names() -> list[str]:
    folder = resources.files("sgdscale") / "data" / "profiles"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_profile(name_or_path: str | os.PathLike[str]) -> Profile:
    """Load a profile file, or a built-in profile by name (e.g. 'resnet50')."""
    path = Path(name_or_path)
    if path.exists():
        data = read_json_file(path, what="profile file", missing=f"profile file {path} does not exist")
        return profile_from_json(data, str(path))
    name = str(name_or_path)
    if name not in builtin_profile_names():
        if path.suffix == ".json" or os.sep in name:
            raise UserError(f"profile file {path} does not exist")
        raise UserError(
            f"no profile file or built-in profile named '{name}'; built-in profiles: "
            + ", ".join(builtin_profile_names())
        )
    source = f"built-in profile '{name}'"
    text = (resources.files("sgdscale") / "data" / "profiles" / f"{name}.json").read_bytes()
    return profile_from_json(parse_json_text(text, source, "profile"), source)


def save_profile(profile: Profile, path: str | os.PathLike[str]) -> None:
    write_json_atomic(path, profile.to_json())
