"""Count the work of one training step, layer by layer: floating-point operations and bytes of
memory traffic, charged to layers exactly as the profiler charges time.

How it counts (one extra, untimed step, so the counting never disturbs the times):
- flops: `torch.utils.flop_counter`'s formulas (matrix multiplies, convolutions, attention and
  their backward), the same numbers `FlopCounterMode` reports; element-wise operators count 0
  flops, so for them only the bytes matter (as in a roofline).
- bytes: every ATen operator reads its tensor inputs and writes its outputs once: the sum of
  their sizes (numel x element size). View operators (no data moved) count nothing. This is the
  traffic of an unfused execution with no cache reuse between operators: an upper bound for
  fused kernels (cuDNN, torch.compile) and for small tensors that stay in cache.
- charging: forward work between layer i's forward-pre-hook and the next pre-hook goes to layer
  i (work before the first pre-hook to the first layer called); backward work goes to the layer
  whose gradient-ready hook ends it, the tail after the last gradient to layer 0; zero_grad +
  optimizer step are counted apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from sgdscale.profiling._torch_compat import import_torch

torch = import_torch()
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402
from torch.utils.flop_counter import flop_registry  # noqa: E402

METHOD = (
    "flops: torch.utils.flop_counter formulas (matmul, convolution, attention, and their backward; "
    "element-wise operators count 0); bytes: per ATen operator, tensor inputs read + outputs written "
    "(numel x element size), views excluded: unfused traffic without cache reuse, an upper bound. "
    "Charged to layers like the times (forward: pre-hook segments; backward: gradient-ready segments, tail "
    "to the first layer), counted in one extra untimed step."
)


@dataclass
class Counts:
    flops: float = 0.0
    bytes: float = 0.0

    def add(self, other: Counts) -> None:
        self.flops += other.flops
        self.bytes += other.bytes


def _nbytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tree_leaves(value) if isinstance(t, torch.Tensor))


class _Counter(TorchDispatchMode):
    """Accumulates flops and bytes of every operator into `pending` until someone takes them."""

    def __init__(self) -> None:
        super().__init__()
        self.pending = Counts()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        if packet in flop_registry:
            self.pending.flops += float(flop_registry[packet](*args, **kwargs, out_val=out))
        if not func.is_view:
            self.pending.bytes += _nbytes((args, kwargs)) + _nbytes(out)
        return out

    def take(self) -> Counts:
        taken, self.pending = self.pending, Counts()
        return taken


@dataclass
class StepCounts:
    forward: list[Counts]
    backward: list[Counts]
    optimizer: Counts = field(default_factory=Counts)


def count_step(modules: list[Any], params: list[Any], param_layer: list[int], run_forward: Callable[[], Any],
               optimizer: Any) -> StepCounts:
    """Count one step: `run_forward()` returns the loss; hooks on `modules` (one per layer, forward
    order) and `params` (layer of each in `param_layer`) charge the work to layers."""
    n = len(modules)
    counts = StepCounts([Counts() for _ in range(n)], [Counts() for _ in range(n)])
    counter = _Counter()
    state: dict[str, Any] = {"layer": None}

    def pre_hook_for(index: int) -> Callable[..., None]:
        def hook(_module: Any, _args: Any) -> None:
            taken = counter.take()
            counts.forward[state["layer"] if state["layer"] is not None else index].add(taken)
            state["layer"] = index

        return hook

    def grad_hook_for(index: int) -> Callable[[Any], None]:
        def hook(_param: Any) -> None:
            counts.backward[param_layer[index]].add(counter.take())

        return hook

    handles = [m.register_forward_pre_hook(pre_hook_for(i)) for i, m in enumerate(modules)]
    handles += [p.register_post_accumulate_grad_hook(grad_hook_for(i)) for i, p in enumerate(params)]
    try:
        optimizer.zero_grad(set_to_none=True)
        with counter:
            loss = run_forward()
            counts.forward[state["layer"] if state["layer"] is not None else 0].add(counter.take())
            loss.backward()
            counts.backward[0].add(counter.take())
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            counts.optimizer.add(counter.take())
    finally:
        for handle in handles:
            handle.remove()
    return counts
