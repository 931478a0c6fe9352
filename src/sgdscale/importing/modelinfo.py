"""The model-info file (`sgdscale.model-info/1`): a model's parameter-owning modules and tensors.

A torch.profiler trace says when modules ran and when gradients were accumulated, but not which
parameter tensors a module owns or how big they are. This small file supplies that, written from
the same model that was traced (`sgdscale import model-info MODEL -o info.json`, or one line of
Python: ``sgdscale.importing.modelinfo.write_model_info(module, "info.json")``).

`modules` lists the model's modules in forward call order when an example batch was run through
the model (else registration order), each with its class name, because the profiler names module
instances ``nn.Module: <Class>_<k>``, numbering each class's instances in the order it first calls
them: listing every called instance of a class, with or without parameters, is what lets the
importer match the two. `owns_params` marks the layers (modules owning trainable parameters
directly, as in `sgdscale profile`); a parameter shared by several modules belongs to the first
(GPT-2's tied LM head stays a layer with no tensors). Modules never called are listed last with
``called: false``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sgdscale.errors import UserError
from sgdscale.jsonio import write_json_atomic

MODEL_INFO_SCHEMA = "sgdscale.model-info/1"
HOW_TO_WRITE = "write it from the traced model with `sgdscale import model-info MODEL -o info.json`"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class TensorInfo(_Strict):
    name: str
    shape: list[int]
    numel: int = Field(ge=0)
    bytes: int = Field(ge=0)


class ModuleInfo(_Strict):
    name: str
    cls: str = Field(alias="class")
    owns_params: bool = True
    called: bool = True
    params: list[TensorInfo] = Field(default_factory=list)


class ModelInfo(_Strict):
    schema_: str = Field(default=MODEL_INFO_SCHEMA, alias="schema")
    model: str
    order: str = Field(description="'forward' (call order measured) or 'registration'")
    modules: list[ModuleInfo] = Field(min_length=1)

    @property
    def layers(self) -> list[ModuleInfo]:
        """The modules that become profile layers, in listed order."""
        return [m for m in self.modules if m.owns_params]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def load_model_info(path: str | Path) -> ModelInfo:
    """Read and validate a model-info file; every failure is one UserError saying how to fix it."""
    path = Path(path)
    from sgdscale.jsonio import read_json_file

    try:
        data = read_json_file(path, what="model-info file", missing=f"model-info file {path} does not exist")
    except UserError as error:
        raise UserError(f"{error}; {HOW_TO_WRITE}") from None
    if not isinstance(data, dict) or data.get("schema") != MODEL_INFO_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise UserError(f"{path}: not a model-info file (schema {found!r}, expected \"{MODEL_INFO_SCHEMA}\"); {HOW_TO_WRITE}")
    try:
        return ModelInfo.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{path}: invalid model-info ({where}: {first['msg']}); {HOW_TO_WRITE}") from None


def model_info_from_module(module: Any, name: str, example: Any = None) -> ModelInfo:
    """Describe `module` (an nn.Module). With `example` (a callable running one forward pass, e.g.
    ``lambda: model(x)``) the modules are listed in forward call order, as the profiler meets them;
    without it, in registration order (the same for most models)."""
    everything = list(module.named_modules())
    order = "registration"
    called = list(range(len(everything)))
    if example is not None:
        seen_calls: list[int] = []
        ids = {id(m): i for i, (_, m) in enumerate(everything)}

        def hook(m: Any, _args: Any) -> None:
            if ids[id(m)] not in seen_calls:
                seen_calls.append(ids[id(m)])

        handles = [m.register_forward_pre_hook(hook) for _, m in everything]
        try:
            example()
        finally:
            for h in handles:
                h.remove()
        called, order = seen_calls, "forward"
    listed = called + [i for i in range(len(everything)) if i not in called]
    assigned: set[int] = set()
    modules = []
    for i in listed:
        module_name, m = everything[i]
        owns = any(p.requires_grad for p in m.parameters(recurse=False))
        if not owns and i not in called:
            continue
        tensors = []
        for pname, p in m.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in assigned:
                assigned.add(id(p))
                full = f"{module_name}.{pname}" if module_name else pname
                tensors.append(TensorInfo(name=full, shape=list(p.shape), numel=p.numel(),
                                          bytes=p.numel() * p.element_size()))
        modules.append(ModuleInfo(name=module_name or type(m).__name__, cls=type(m).__name__, owns_params=owns,
                                  called=i in called, params=tensors))
    if not any(m.params for m in modules):
        raise UserError(f"model {name} has no trainable parameters: there is nothing to communicate")
    return ModelInfo(model=name, order=order, modules=modules)


def write_model_info(module: Any, path: str | Path, name: str | None = None, example: Any = None) -> ModelInfo:
    """`model_info_from_module`, written atomically to `path` (the one-liner for user models)."""
    info = model_info_from_module(module, name or type(module).__name__, example)
    write_json_atomic(path, info.to_json())
    return info
