"""What a parameter server's messages cost the CPU of the nodes that send and receive them.

Every push and pull is a gloo isend or irecv of one tensor (the runtime's PS and the default PS
grouping: one message per tensor and shard). Apart from its bytes (`server_cpu_s_per_byte`), a
message costs CPU for the call, gloo's bookkeeping and the socket work: `sgdscale netbench` measures
it on ranks 0 and 1 as a burst of tiny isends and irecvs (`CpuCost.message_s`: 28 us per message on
this machine, alone and under a 0.28-core quota alike). Under a CPU budget of c cores each message
takes message_s / c of the node's wall time (`CommModel.worker_cpu_s_per_message`,
`server_cpu_s_per_message`).

Why it matters: a many-tensor model's PS workers spend more CPU per step than their profile
(mobilenet_v2, 158 tensors, 0.34 cores: 49-57 ms against 38-41 ms; `benchmarks/cpu_per_step.py`),
and 316 messages per step at 28 us are 8.8 ms of it, about as much as its 14 MB cost a worker per
byte pushed and pulled (0.29 ns per byte: 8.1 ms).

Alone, a message costs more: netbench's burst shares gloo's wake-ups, but in a step a worker's
pushes leave one at a time as backward makes gradients ready, each waking gloo's thread on caches the
compute has cooled. `benchmarks/message_spacing_cpu.py` (0.40 cores): a sender's CPU per message 43 us
in a burst, 64 us 0.5 ms apart, 113 us 2 ms apart; a receiver's 43 -> 117 us. In real cnn PS runs
gloo's thread spent 3.2-13.3 ms a step on 28 messages of 0.76 MB in all, 110-480 us a message
(`benchmarks/worker_cpu_threads.py`). netbench measures the extra as
`CpuCost.message_wakeup_s` (messages alone, after compute); a worker's k-th push pays
message_s + wakeup_s * min(1, gap_k / WAKEUP_SPACING_S) (`wakeup_weights`), its pull the same.

Where it goes:
- a worker: each tensor's push runs on backward's thread right after the tensor is ready (the
  gradient hook calls isend), so its layer's backward grows by one message and every later tensor
  becomes ready that much later; each tensor's pull is charged to the forward of its layer, which
  grows by one message (`with_message_cpu`). (PULLS_RECEIVED_AS_THEY_ARRIVE, off: receive the pulls
  one after another on the worker's CPU as they arrive, so what their spacing on the wire hides
  costs the step nothing; the fine method's chain, `pull_receive_tail_s` in the coarse ones.)
  Where a worker's compute takes no CPU it is left out: a profile measured on an accelerator (its `device` not a CPU; the host's CPU sends while the
  device computes), and a replay that sleeps (validation passes a zero `worker_cpu_s_per_message`).
- a shard: each message it receives or sends, N copies in and N replies out per message in sync PS,
  one each way in async PS, adds to its update of that message (`fine.dag.ps_plan`, the coarse
  server station).
"""

from __future__ import annotations

import numpy as np

from sgdscale.grouping import group_gradients
from sgdscale.placement import place_tensors
from sgdscale.profile import Profile
from sgdscale.strategy import Strategy

# Where a worker's CPU receives its pulls; modelled, measured, not used. On: as each pull arrives,
# one after another (the fine method's chain, `fine.ps.PsRun.pull_cpu`; the coarse methods'
# `pull_receive_tail_s`): a worker posts its pull receives when its backward ends and its forward
# waits for its first layer, whose reply comes back last, so its CPU receives the pulls while it
# waits, and only what the wire's spacing does not hide delays it. Off: each pull's CPU is added to
# the forward of the layer that needs it, in series after the last byte (`with_message_cpu`). Set
# 38's real bert sync PS workers computed 111-125 ms a step where the series charge made 126-141 ms
# (`benchmarks/ps_step_split.py`). On the kept real PS runs of sets 10-38 it left the fine method's
# median as it was (8.4%) and moved its bias from +2.1% to +4.5%; at the runs' own compute speed
# (sets 30-38) 9.3% -> 8.9%, bias -3.4% -> 0.0% (`benchmarks/pull_receive_tuning.py`). Held-out set
# 39 was to decide it by the fine method's median: 10.1% off, 10.2% on (max 19.7% -> 26.2%; coarse
# 13.2% -> 10.0%), so by the rule written before the set ran it is off.
PULLS_RECEIVED_AS_THEY_ARRIVE = False

# How far apart two messages must leave for the second to pay a whole wake-up of its own: the CPU per
# message rises from netbench's burst figure to its spaced one over 0-2 ms of compute between
# messages (benchmarks/message_spacing_cpu.py: sender 43 -> 64 -> 74 -> 113 us at 0, 0.5, 1, 2 ms).
WAKEUP_SPACING_S = 2.0e-3


def with_message_cpu(profile: Profile, s_per_message: float, s_per_wakeup: float = 0.0,
                     pulls: bool = True) -> Profile:
    """The profile with one message's CPU added per tensor to its layer's backward (the push, which
    also makes every later tensor ready later) and, with `pulls`, forward (the pull); unchanged for
    0. `s_per_wakeup`: what a message costs on top when it comes alone, a gap after the previous one
    (`wakeup_weights`); pulls are taken to come back spaced as the pushes left. Without `pulls` the
    caller charges the pulls where they are received (`pull_cpu_s`)."""
    if (s_per_message <= 0 and s_per_wakeup <= 0) or not computes_on_cpu(profile):
        return profile
    # Cached on the (immutable) profile like bucket_copies.with_copy_in: sweeps predict it thousands of times.
    cache = profile.__dict__.setdefault("_with_message_cpu", {})
    key = (s_per_message, s_per_wakeup, pulls)
    if key not in cache:
        cache[key] = _with_message_cpu(profile, s_per_message, s_per_wakeup, pulls)
    return cache[key]


def receives_pulls_as_they_arrive(profile: Profile, s_per_message: float, s_per_wakeup: float) -> bool:
    """Whether a prediction receives a worker's pulls as they arrive (PULLS_RECEIVED_AS_THEY_ARRIVE)
    rather than in forward: only where the worker's compute takes CPU and its messages cost some."""
    return (PULLS_RECEIVED_AS_THEY_ARRIVE and computes_on_cpu(profile)
            and (s_per_message > 0 or s_per_wakeup > 0))


def pull_cpu_s(s_per_message: float, s_per_wakeup: float, gap_s: float | None) -> float:
    """A worker's CPU (wall seconds of its budget) for receiving one pull `gap_s` after its previous
    one arrived (None: the first of a step): the message, and its share of a wake-up (`wakeup_weights`)."""
    weight = 1.0 if gap_s is None else min(1.0, max(0.0, gap_s) / WAKEUP_SPACING_S)
    return s_per_message + s_per_wakeup * weight


def pull_receive_tail_s(sizes: list[float], wire_s: float, s_per_message: float, s_per_wakeup: float) -> float:
    """How long after its last pull arrives a worker is still receiving (the coarse methods' form of
    the fine one's chain, `fine.ps.PULLS_RECEIVED_AS_THEY_ARRIVE`): pulls of these sizes arrive over
    `wire_s`, spaced by their bytes, and each is received on the worker's CPU (`pull_cpu_s`, by its
    gap after the previous one) once it has arrived and the previous one is received."""
    total = float(sum(sizes))
    if not sizes or (s_per_message <= 0 and s_per_wakeup <= 0):
        return 0.0
    arrival, done, previous = 0.0, 0.0, None
    for size in sizes:
        arrival += wire_s * size / total if total > 0 else 0.0
        cost = pull_cpu_s(s_per_message, s_per_wakeup, None if previous is None else arrival - previous)
        done = max(done, arrival) + cost
        previous = arrival
    return done - arrival


def wakeup_weights(ready_s: list[float]) -> list[float]:
    """Per message, in the order the messages leave, how much of a wake-up it pays: min(1, gap /
    WAKEUP_SPACING_S) after the previous message (the first pays a whole one). Messages close
    together share gloo's wake-ups, as in netbench's burst; one alone pays its own."""
    weights, previous = [], None
    for ready in ready_s:
        weights.append(1.0 if previous is None else min(1.0, max(0.0, ready - previous) / WAKEUP_SPACING_S))
        previous = ready
    return weights


def computes_on_cpu(profile: Profile) -> bool:
    """Whether the profile's compute ran on the CPU (its device says so, or says nothing)."""
    return not profile.device or profile.device.lower().startswith("cpu")


def _with_message_cpu(profile: Profile, s_per_message: float, s_per_wakeup: float, pulls: bool) -> Profile:
    order = sorted((t.grad_ready_s, li, ti) for li, layer in enumerate(profile.layers)
                   for ti, t in enumerate(layer.params) if t.grad_ready_s is not None)
    weights = wakeup_weights([ready for ready, _, _ in order])
    cost = {(li, ti): s_per_message + s_per_wakeup * w for (_, li, ti), w in zip(order, weights)}
    shifted, paid = {}, 0.0
    for ready_s, li, ti in order:
        paid += cost[li, ti]
        shifted[li, ti] = ready_s + paid
    layers = []
    for li, layer in enumerate(profile.layers):
        extra_s = sum(cost.get((li, ti), s_per_message + s_per_wakeup) for ti in range(len(layer.params)))
        if extra_s == 0:
            layers.append(layer)
            continue
        params = [t.model_copy(update={"grad_ready_s": shifted[li, ti]}) if (li, ti) in shifted else t
                  for ti, t in enumerate(layer.params)]
        update = {"backward_s": layer.backward_s + extra_s, "params": params}
        keys = ["backward_samples_s"]
        if pulls:
            update["forward_s"] = layer.forward_s + extra_s
            keys.append("forward_samples_s")
        for key in keys:
            if getattr(layer, key):
                update[key] = [s + extra_s for s in getattr(layer, key)]
        layers.append(layer.model_copy(update=update))
    return profile.with_layers(layers)


def messages_per_shard(profile: Profile, strategy: Strategy, comm, shards: int, workers: int) -> np.ndarray:
    """One worker's push messages per step on each shard: each gradient group splits into one
    message per shard holding its tensors (as `fine.dag.ps_plan` builds them)."""
    # Cached on the profile: grouping 364 tensors costs 1-3 ms, as much as the rest of a coarse PS
    # prediction. A parameter server's groups depend on neither the network nor the worker count
    # (`group_gradients` uses them only for all-reduce's mg-wfbp), so the key is (strategy, shards).
    cache = profile.__dict__.setdefault("_messages_per_shard", {})
    key = (strategy, shards)
    if key not in cache:
        tensor_shard = place_tensors([t.bytes for t in profile.tensors], shards, strategy.placement)
        counts = np.zeros(shards)
        for group in group_gradients(profile, strategy, comm, workers):
            for shard in {tensor_shard[i] for i in group.tensors}:
                counts[shard] += 1
        counts.flags.writeable = False  # shared by every later call
        cache[key] = counts
    return cache[key]
