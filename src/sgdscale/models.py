"""What each built-in model name means: one definition for profile, train, predict and the shipped
profiles (no torch).

A name means one model everywhere: `sgdscale profile mlp`, `sgdscale train mlp` and the shipped
profile `mlp` that `sgdscale predict mlp` reads are built with the options and the batch below
(`benchmarks/build_profiles.py` measured the shipped profiles with exactly these). Options given
on the command line change the model, and every output says which model it ran or predicted
(`describe_model`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BuiltinModel:
    """A built-in name: the `build_workload` options and the per-worker batch it stands for."""

    batch_size: int
    options: dict[str, Any] = field(default_factory=dict)


_TRANSFORMER = {"seq_len": 64, "layers": 4, "hidden": 256, "heads": 4, "vocab": 8192, "dropout": 0.1}

BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "resnet18": BuiltinModel(16, {"image_size": 64, "num_classes": 1000}),
    "resnet50": BuiltinModel(16, {"image_size": 64, "num_classes": 1000}),
    "vgg16": BuiltinModel(8, {"image_size": 64, "num_classes": 1000}),
    "alexnet": BuiltinModel(32, {"image_size": 96, "num_classes": 1000}),
    "mobilenet_v2": BuiltinModel(16, {"image_size": 64, "num_classes": 1000}),
    "densenet121": BuiltinModel(16, {"image_size": 64, "num_classes": 1000}),
    "gpt2": BuiltinModel(8, dict(_TRANSFORMER)),
    "bert": BuiltinModel(8, dict(_TRANSFORMER)),
    "mlp": BuiltinModel(64, {"width": 2048, "depth": 4, "num_classes": 10}),
    "cnn": BuiltinModel(32, {"image_size": 32, "width": 32, "num_classes": 10}),
}

USER_MODEL_BATCH = 8  # a 'package.module:factory' model without a batch given


def default_option(model: str, key: str, fallback: Any) -> Any:
    """The built-in model's option `key`, else `fallback` (user models, options a model lacks)."""
    spec = BUILTIN_MODELS.get(model)
    return spec.options.get(key, fallback) if spec else fallback


def default_batch(model: str) -> int:
    """The batch a built-in name stands for (the shipped profile's); `USER_MODEL_BATCH` otherwise."""
    spec = BUILTIN_MODELS.get(model)
    return spec.batch_size if spec else USER_MODEL_BATCH


def resolved_options(model: str, options: dict[str, Any]) -> dict[str, Any]:
    """The options the model is built with: the built-in ones, overridden by `options` (None = unset).
    mlp's input_dim defaults to its width, as the zoo builds it."""
    spec = BUILTIN_MODELS.get(model)
    resolved = dict(spec.options) if spec else {}
    resolved.update({k: v for k, v in options.items() if v is not None})
    if model == "mlp":
        resolved.setdefault("input_dim", resolved.get("width"))
    return resolved


def describe_model(model: str, options: dict[str, Any], batch_size: int | None = None) -> str:
    """'mlp (width 2048, depth 4, input_dim 2048, num_classes 10), batch 64 per worker', and whether
    that is the model a built-in profile of the same name describes."""
    shown = {k: v for k, v in options.items() if k not in ("batch_shape", "channels") and v is not None}
    text = model + (" (" + ", ".join(f"{k} {v}" for k, v in shown.items()) + ")" if shown else "")
    if batch_size is not None:
        text += f", batch {batch_size} per worker"
    spec = BUILTIN_MODELS.get(model)
    if spec is None:
        return text
    built = resolved_options(model, {})
    differs = [f"{k} {options[k]} vs {built[k]}" for k in built if k in options and options[k] != built[k]]
    if batch_size is not None and batch_size != spec.batch_size:
        differs.append(f"batch {batch_size} vs {spec.batch_size}")
    if differs:
        text += f"; not the built-in profile '{model}' ({', '.join(differs)})"
    else:
        text += f"; the model of the built-in profile '{model}'"
    return text
