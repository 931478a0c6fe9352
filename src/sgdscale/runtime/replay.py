"""Replay: a module built from a profile, so any profile (a built-in resnet50 or vgg16 as much as
one measured elsewhere, on a GPU say) runs on the real distributed runtime.

Every profiled layer becomes one module that owns parameters of exactly the profiled sizes
(float32 zeros; the values do not matter, the bytes on the wire do) and spends exactly its
profiled forward time; in backward, each parameter's gradient becomes ready at its profiled time
(`grad_ready_s` where the profile has it, else when its layer's backward ends), in the profiled
order, so DDP's buckets, the manual groupings and the parameter server see the real ready order.
The module also owns one buffer of the profile's `buffer_bytes` (the model's batch-norm
statistics), which DDP broadcasts before every forward as it does the real model's; DDP's local
work with the real model's many buffer tensors (`Profile.buffer_sync_s`), which one buffer does not
cause, is spent before every forward under DDP with more than one worker
(`Replay.spend_buffer_sync_before`).
Communication is fully real: gloo, real bytes, shaped links.

How the time is spent (`compute`):
- `sleep` (the default for validation): the worker sleeps out each duration, leaving the CPU to
  gloo's threads. This isolates the network and coordination model from compute/communication
  interference, and is deterministic: what the predictor is told is what the worker does.
- `spin`: the worker burns a calibrated amount of CPU work (chunks of `sum(range(256))`, counted
  against a rate measured on the node at start-up), so under a CPU quota the time is taken from
  the node's quota like real compute, and communication that competes for the CPU stretches it.
  This exposes the interference that `sleep` hides.
Sleep overshoot (a wake-up some tens of microseconds late: timer slack) is credited to the next
duration, so it does not accumulate over hundreds of tensors; only within a step, and at most
`MAX_CREDIT_S` (a wake-up much later than that is the node being preempted, which real compute
suffers too, and crediting it to a later step would hide a straggler from its peers). The replay's
own work inside a duration (allocating a gradient: a fresh 8 MB tensor takes 2-7 ms of page faults
on this VM, more than the profiled gap of a tensor that becomes ready with its layer's other
tensors) is credited in full: the real backward did that allocation inside its profiled time, and
capping it made backward 3-5 % longer than profiled (`benchmarks/replay_fidelity.py`). The
replay's own machinery (a module call and an autograd node per layer and tensor, some 10-50 us
each) is measured at start-up on a copy with 1-element tensors, forward and backward apart, and
taken off every duration of its phase, so a step costs the profiled time, not the profiled time
plus the replay's overhead. The framework's time (autograd's bookkeeping of the real tensors,
DDP's hooks and bucket copies, a PS worker's sends) is not taken off: it is real cost of the
distributed system.

Memory: parameters plus gradients only (no activations: the tensor passed between layers has one
element); a gradient is allocated inside its node's time budget and handed to autograd without a
copy. From the second step on, a worker's gradient is the previous step's storage again (a new
tensor over it, which autograd adopts as freely), as a GPU's caching allocator hands back the same
blocks: allocated fresh, every tensor over 32 MB is a new mapping whose pages fault in again each
step (glibc), and under a small CPU quota that costs more than the profiled time, which already
holds the allocation at the profiling device's speed. vgg16's 411 MB fc6 gradient took 1.05 s at
0.15 cores against 0.26 s profiled for its layer's backward (`benchmarks/gradient_allocation.py`); a replay worker of vgg16 or alexnet
stepped 39-49% slower than its profile at 0.15 cores, against 0.2-0.4% with the storage kept
(`benchmarks/replay_fidelity.py --memory both`, raw `replay_fidelity-q0.15.txt`); the other
built-in profiles (no tensor over 32 MB) stepped -1.0% to +2.0% from theirs with fresh gradients
(median of 2; one gpt2 run +4.4%) and -0.6% to +0.6% kept (`replay_fidelity-q0.15-others.txt`).
Held-out set 57's vgg16 replays ran 9-11% slower than predicted.
The optimizer is not run: the profiled `optimizer_s` is spent instead, by a worker after its
step and by a parameter-server shard per tensor in place of its update (a real SGD update of
553 MB of vgg16 gradients would add CPU time and memory traffic the profile does not contain).
Data loading and host-to-device time (`step.data_s`, `step.h2d_s`) are spent at the start of
forward.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor, nn

from sgdscale.profile import Profile, profile_from_json

COMPUTE_MODES = ("sleep", "spin")
SPIN_CHUNK = 256  # sum(range(256)) takes about 2-3 us: fine enough for 0.1 ms layers
CALIBRATION_S = 0.3  # spans 30 CFS periods of 10 ms, so a CPU quota's duty cycle averages out
MAX_CREDIT_S = 0.005  # most sleep overshoot credited to the next duration (see the module docstring)


def _spin_chunk() -> int:
    return sum(range(SPIN_CHUNK))


def calibrate_spin_rate(duration_s: float = CALIBRATION_S) -> float:
    """Spin chunks per wall-clock second on this node now (under its CPU quota, if any)."""
    _spin_chunk()
    chunks = 0
    start = time.perf_counter()
    end = start + duration_s
    while True:
        for _ in range(64):
            _spin_chunk()
        chunks += 64
        now = time.perf_counter()
        if now >= end:
            return chunks / (now - start)


class Spender:
    """Spends a duration by sleeping or by calibrated CPU work (see the module docstring)."""

    def __init__(self, mode: str, spin_rate: float | None = None) -> None:
        if mode not in COMPUTE_MODES:
            raise ValueError(f"unknown replay compute {mode!r}")
        if mode == "spin" and not spin_rate:
            raise ValueError("spin needs a calibrated rate")
        self.mode = mode
        self.spin_rate = spin_rate
        self.debt_s = 0.0  # time spent beyond earlier budgets of this step, not yet credited
        self.overhead_s = {"forward": 0.0, "backward": 0.0}  # the replay's own cost per duration (calibrate_overhead)
        self.idle = False  # while measuring that overhead: spend nothing

    def spend(self, budget_s: float, started: float, phase: str = "backward") -> None:
        """Make the time since `started` (a perf_counter value) equal `budget_s`, less the replay's
        own overhead per duration of `phase` and less what earlier durations of the step overran."""
        if self.idle:
            return
        budget_s = max(0.0, budget_s - self.overhead_s[phase])
        if self.mode == "sleep":
            target = started + budget_s - self.debt_s
            remaining = target - time.perf_counter()
            if remaining > 0:
                time.sleep(remaining)
                self.debt_s = min(MAX_CREDIT_S, max(0.0, time.perf_counter() - target))  # a late wake-up
            else:
                self.debt_s = -remaining  # own work (a gradient's allocation) overran: credited in full
            return
        remaining = budget_s - (time.perf_counter() - started)
        chunks = int(remaining * self.spin_rate)
        for _ in range(chunks):
            _spin_chunk()


class _Grad(torch.autograd.Function):
    """Identity on the 1-element activation; its backward makes one parameter's gradient ready
    after `gap_s` (the time since the previous gradient in the profile)."""

    @staticmethod
    def forward(ctx, x: Tensor, param: Tensor, gap_s: float, spender: Spender,  # type: ignore[override]
                kept: list[Tensor | None] | None) -> Tensor:
        ctx.param, ctx.gap_s, ctx.spender, ctx.kept = param, gap_s, spender, kept
        return x.clone()

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        started = time.perf_counter()
        kept = ctx.kept
        if kept is None:
            grad = torch.zeros_like(ctx.param)  # fresh: autograd adopts it as .grad without copying
        else:  # the storage of this parameter's previous gradient (module docstring, Memory)
            if kept[0] is None:
                kept[0] = torch.zeros_like(ctx.param)
            grad = kept[0].view_as(ctx.param)  # a tensor nothing else holds: adopted without a copy too
        ctx.spender.spend(ctx.gap_s, started)
        return grad_out, grad, None, None, None


class _Tail(torch.autograd.Function):
    """Start of the chain: its backward spends the backward time after the last gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, anchor: Tensor, tail_s: float, spender: Spender) -> Tensor:  # type: ignore[override]
        ctx.tail_s, ctx.spender = tail_s, spender
        return x.clone()

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        started = time.perf_counter()
        ctx.spender.spend(ctx.tail_s, started)
        return None, torch.zeros(1), None, None


class ReplayLayer(nn.Module):
    """One profiled layer: owns its parameters (p0, p1, ... in profile order) and spends its forward."""

    def __init__(self, numels: list[int], forward_s: float, chain: list[tuple[int, float]], spender: Spender,
                 keep_gradients: bool = True) -> None:
        super().__init__()
        self.forward_s = forward_s
        self.spender = spender
        self.chain = chain  # (parameter index, gap_s) in forward order = reverse of gradient-ready order
        for index, numel in enumerate(numels):
            self.register_parameter(f"p{index}", nn.Parameter(torch.zeros(numel)))
        # per parameter, the storage its gradients reuse (None: a fresh gradient every step)
        self.kept: list[list[Tensor | None] | None] = [[None] if keep_gradients else None for _ in numels]

    def forward(self, x: Tensor) -> Tensor:
        started = time.perf_counter()
        self.spender.spend(self.forward_s, started, "forward")
        for index, gap_s in self.chain:
            x = _Grad.apply(x, getattr(self, f"p{index}"), gap_s, self.spender, self.kept[index])
        return x


class ReplayModule(nn.Module):
    """The whole profiled model: `layers.I.pK` is tensor K of profiled layer I."""

    def __init__(self, profile: Profile, spender: Spender, keep_gradients: bool = True) -> None:
        super().__init__()
        self.spender = spender
        self.profile = profile
        self.profile_names: list[str] = []  # profiled tensor name of each parameter, in parameters() order
        self.ready_order: list[int] = []  # parameters() indices in the order backward makes them ready
        ready_s = gradient_ready_times(profile)
        first_index: list[int] = []
        count = 0
        for layer in profile.layers:
            first_index.append(count)
            count += len(layer.params)
        chains: list[list[tuple[int, float]]] = [[] for _ in profile.layers]
        previous = 0.0
        for layer_index in reversed(range(len(profile.layers))):
            layer = profile.layers[layer_index]
            own = sorted(range(len(layer.params)), key=lambda k: (ready_s[first_index[layer_index] + k], -k))
            for k in own:
                ready = max(previous, ready_s[first_index[layer_index] + k])
                chains[layer_index].insert(0, (k, ready - previous))
                previous = ready
                self.ready_order.append(first_index[layer_index] + k)
        self.tail_s = max(0.0, profile.backward_s - previous)
        self.backward_budget_s = previous + self.tail_s
        self.lead_s = profile.step.data_s + profile.step.h2d_s
        layers = []
        for index, layer in enumerate(profile.layers):
            forward_s = layer.forward_s + (self.lead_s if index == 0 else 0.0)
            layers.append(ReplayLayer([t.numel for t in layer.params], forward_s, chains[index], spender,
                                      keep_gradients))
            self.profile_names += [t.name for t in layer.params]
        self.layers = nn.ModuleList(layers)
        if profile.buffer_bytes:  # as many buffer bytes as the model (DDP broadcasts them before every forward)
            self.register_buffer("profiled_buffers", torch.zeros(profile.buffer_bytes, dtype=torch.uint8))
        self.forward_budget_s = sum(layer.forward_s for layer in layers)

    def forward(self, x: Tensor) -> Tensor:
        self.spender.debt_s = 0.0  # a new step: no credit from the last one
        anchor = torch.zeros(1, requires_grad=True)  # puts the tail node in the graph
        x = _Tail.apply(x, anchor, self.tail_s, self.spender)
        for layer in self.layers:
            x = layer(x)
        return x


def calibrate_overhead(module: ReplayModule, spender: Spender, passes: int = 7, refine_passes: int = 3) -> dict[str, float]:
    """The replay's own cost per duration (seconds), forward and backward apart.

    First a pass of the same layer and tensor structure with 1-element tensors and nothing spent
    (median over `passes`, per duration of the phase: forward one per layer, backward one per
    tensor and the tail). That misses what sleeping costs the code that runs after a wake-up (cold
    caches: 19 us per forward layer against 11 us measured idle, resnet50), so the estimate is then
    corrected on the real module: one warm pass and `refine_passes` measured, each phase's least
    excess over its profiled time (noise only adds time) spread over its durations."""
    profile = module.profile
    tiny_layers = [layer.model_copy(update={"params": [t.model_copy(update={"numel": 1, "bytes": 4})
                                                       for t in layer.params]}) for layer in profile.layers]
    tiny = ReplayModule(profile.with_layers(tiny_layers), spender)
    spender.idle = True
    try:
        forward, backward = _time_passes(tiny, passes, statistics.median)
    finally:
        spender.idle = False
    durations = {"forward": len(tiny.layers), "backward": len(tiny.ready_order) + 1}
    overhead = {"forward": forward / durations["forward"], "backward": backward / durations["backward"]}
    if refine_passes:
        spender.overhead_s = overhead
        _time_passes(module, 1, min)
        forward, backward = _time_passes(module, refine_passes, min)
        for phase, spent_s, budget_s in (("forward", forward, module.forward_budget_s),
                                         ("backward", backward, module.backward_budget_s)):
            overhead[phase] = max(0.0, overhead[phase] + (spent_s - budget_s) / durations[phase])
    return overhead


def _time_passes(module: ReplayModule, passes: int, reduce: Callable[[list[float]], float]) -> tuple[float, float]:
    """Forward and backward wall time (seconds) of `passes` passes of the module alone, each phase's
    times reduced to one (median, min)."""
    x, _ = replay_batch(1)
    forward, backward = [], []
    for _ in range(passes):
        module.zero_grad(set_to_none=True)
        start = time.perf_counter()
        y = module(x)
        middle = time.perf_counter()
        y.sum().backward()
        forward.append(middle - start)
        backward.append(time.perf_counter() - middle)
    module.zero_grad(set_to_none=True)
    return reduce(forward), reduce(backward)


def gradient_ready_times(profile: Profile) -> list[float]:
    """When each tensor's gradient is ready (seconds after backward starts), forward order:
    the profiled `grad_ready_s`, or else the end of its layer's backward."""
    times: list[float] = []
    after = [0.0] * (len(profile.layers) + 1)  # backward time of the layers from i on
    for i in reversed(range(len(profile.layers))):
        after[i] = after[i + 1] + profile.layers[i].backward_s
    for i, layer in enumerate(profile.layers):
        times += [t.grad_ready_s if t.grad_ready_s is not None else after[i] for t in layer.params]
    return times


@dataclass
class Replay:
    """What a replay worker needs besides the module: the optimizer time to spend."""

    profile: Profile
    module: ReplayModule
    spender: Spender

    def optimizer_step(self) -> None:
        self.spender.spend(self.profile.step.optimizer_s, time.perf_counter())

    def spend_buffer_sync_before(self, net: nn.Module) -> None:
        """Spend the profiled `buffer_sync_s` ahead of every forward of `net` (the DDP wrapper: before
        its buffer broadcast), as DDP's local work with the real model's buffers takes it there."""
        seconds = self.profile.buffer_sync_s
        if seconds and self.profile.buffer_bytes:
            net.register_forward_pre_hook(
                lambda _module, _args: self.spender.spend(seconds, time.perf_counter(), "forward"))

    @property
    def spin_rate(self) -> float | None:
        return self.spender.spin_rate

    def record(self) -> dict[str, float]:
        """What the worker measured at start-up, for its record's `extra`."""
        out = {"replay_overhead_per_forward_s": self.spender.overhead_s["forward"],
               "replay_overhead_per_backward_s": self.spender.overhead_s["backward"]}
        if self.spender.spin_rate:
            out["replay_spin_chunks_per_s"] = self.spender.spin_rate
        return out


def build_replay(profile_json: dict[str, Any], compute: str, calibrate: bool = True,
                 keep_gradients: bool = True) -> Replay:
    """The replay of a profile (already validated JSON). `calibrate=False` (server shards, which
    never run the module's compute in the measured loop, only spend the optimizer's time) skips the
    overhead calibration; spinning still measures its rate. `keep_gradients=False`
    (`benchmarks/replay_fidelity.py`'s comparison) makes every step's gradients fresh, as replays did
    before held-out set 57."""
    profile = profile_from_json(profile_json, "replay profile")
    rate = calibrate_spin_rate() if compute == "spin" else None
    spender = Spender(compute if rate or compute == "sleep" else "sleep", rate)
    module = ReplayModule(profile, spender, keep_gradients=keep_gradients)
    if calibrate:
        spender.overhead_s = calibrate_overhead(module, spender)
    return Replay(profile=profile, module=module, spender=spender)


def replay_loss(outputs: Tensor, _targets: Tensor) -> Tensor:
    return outputs.sum()


def replay_batch(_batch_size: int) -> tuple[Tensor, Tensor]:
    """The 1-element activation every replay layer passes on (and an unused target)."""
    return torch.zeros(1), torch.zeros(1)
