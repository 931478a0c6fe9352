"""DDP's own work outside the gradient collectives: bucket copies and the buffer broadcast.

PyTorch DDP (`gradient_as_bucket_view=False`, its default) copies every gradient into its bucket
the moment it is ready (scaled by 1/world, on the backward's own thread, so backward runs that much
longer and later gradients become ready later), and when backward finishes copies each reduced
bucket back into the gradients, bucket by bucket in launch order, each once its collective is done
(so after the last collective one bucket's copy is still to come). Neither is in a single-process
profile. Measured on held-out set 12 (a replay of bert, 21 MB in two buckets, 4 workers,
850 Mbit/s, 0.35 cores; `benchmarks/results/ddp_copies/`): the last bucket was launched 4.7 ms
later than the profile's backward end and backward returned 5.3 ms after the last collective,
10 of the 14.6 ms by which the prediction was short.

The cost per byte copied comes from the network file (`sgdscale netbench` times a copy of each
all-reduce's tensor right after it, under the node's CPU budget: `Network.bucket_copy`), else from the
profile's own optimizer (its measured seconds per byte of memory traffic, two bytes of traffic per
byte copied), else it is 0. Both fine and coarse all-reduce models apply it with `grouping`
"buckets" (DDP); the manual groupings of the runtime copy differently and are left as they were.

DDP also broadcasts the module's buffers (batch-norm statistics; `Profile.buffer_bytes`) from rank 0
before every training forward (`broadcast_buffers=True`, its default): one coalesced broadcast that
overlaps nothing and holds every worker's forward until it is done. gloo broadcasts along a
binomial tree, ceil(log2 N) rounds of one message each. Around it DDP works locally: it re-collects
the module's buffers, flattens them into one tensor per dtype and copies the values back into every
buffer. Measured on set 13's cluster (`benchmarks/ddp_buffer_sync.py`: mobilenet_v2, 137 kB of
buffers, 3 workers, 1.1 Gbit/s, 0.42 cores): 4.6 ms of forward, 5.5 ms of a 207 ms step. The local
work goes per tensor more than per byte: on set 16's cluster (0.48 cores,
`benchmarks/buffer_broadcast_parts.py`) DDP's whole `_sync_buffers` took 3.2 ms for mobilenet_v2's
156 buffer tensors and 0.9 ms for resnet18's 60, where one broadcast of as many bytes took 0.44 and
0.20 ms; inside a training step, after a compute phase has spent the node's quota, 5.2 and 2.4 ms
(`benchmarks/step_anatomy.py`). So the profiler times that local work on the model itself
(`Profile.buffer_sync_s`); a profile without it falls back to two copies of the bytes at the
network's copy rate (under 0.1 ms for mobilenet_v2).

The rest of DDP's work per step (the reducer's hook on every gradient, its bucket bookkeeping and
finalization) costs little CPU but, under a CPU quota, more of a step: real cnn (batch 16, 0.27
cores), paired steps in one process with and without DDP in a one-process group, 12.4 ms of a 76 ms
step for 1.0-1.6 ms of CPU (`benchmarks/step_anatomy.py --workers 1`). The profiler records it
(`Profile.ddp_overhead_s`), but the models do not charge it: charged before the last gradient
(beyond the copies and the buffers' local work), it was held out on set 29 and did not lower the
fine method's median error (4.6% -> 4.7%; max 15.8% -> 13.2%), the rule written before the set ran
(`benchmarks/ddp_overhead_heldout.py` keeps the tried form). `ddp_overhead_note` says so.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from sgdscale.profile import Profile
from sgdscale.units import format_bytes

if TYPE_CHECKING:
    from sgdscale.comm.topology import Topology


def ddp_copies(profile: Profile, grouping: str | None, measured_s_per_byte: float | None,
               workers: int) -> tuple[Profile, float]:
    """(the profile with the copies into buckets in its backward, seconds per byte of the copies back)
    for DDP buckets with more than one worker; the profile unchanged and 0 otherwise."""
    if grouping != "buckets" or workers <= 1:
        return profile, 0.0
    s_per_byte = copy_s_per_byte(profile, measured_s_per_byte)
    return with_copy_in(profile, s_per_byte), s_per_byte


def copy_s_per_byte(profile: Profile, measured_s_per_byte: float | None) -> float:
    """Seconds one gradient byte costs to copy on a worker: measured, else from the profile's
    optimizer (seconds per byte of traffic x 2: read and write), else 0."""
    if measured_s_per_byte is not None:
        return measured_s_per_byte
    step = profile.step
    if step.optimizer_bytes and step.optimizer_s > 0:
        return 2.0 * step.optimizer_s / step.optimizer_bytes
    return 0.0


def with_copy_in(profile: Profile, s_per_byte: float) -> Profile:
    """The profile with each gradient's copy into its bucket added to backward: every layer's backward
    (and its samples) grows by the copies of its own tensors, and every tensor becomes ready after its
    own copy and every copy before it."""
    if s_per_byte <= 0:
        return profile
    # Kept on the (immutable) profile beside its cached properties: a sweep or an advice predicts one
    # profile thousands of times, and rebuilding the layers costs 1-3 ms (densenet121: 3.3 ms).
    cache = profile.__dict__.setdefault("_with_copy_in", {})
    if s_per_byte not in cache:
        cache[s_per_byte] = _with_copy_in(profile, s_per_byte)
    return cache[s_per_byte]


def _with_copy_in(profile: Profile, s_per_byte: float) -> Profile:
    order = sorted(((t.grad_ready_s, li, ti) for li, layer in enumerate(profile.layers)
                    for ti, t in enumerate(layer.params) if t.grad_ready_s is not None))
    shifted: dict[tuple[int, int], float] = {}
    done_bytes = 0
    for ready_s, li, ti in order:
        done_bytes += profile.layers[li].params[ti].bytes
        shifted[li, ti] = ready_s + s_per_byte * done_bytes
    layers = []
    for li, layer in enumerate(profile.layers):
        extra_s = s_per_byte * sum(t.bytes for t in layer.params)
        params = [t.model_copy(update={"grad_ready_s": shifted[li, ti]}) if (li, ti) in shifted else t
                  for ti, t in enumerate(layer.params)]
        update = {"backward_s": layer.backward_s + extra_s, "params": params}
        if layer.backward_samples_s:
            update["backward_samples_s"] = [s + extra_s for s in layer.backward_samples_s]
        layers.append(layer.model_copy(update=update))
    return profile.with_layers(layers)


def copies_note(profile: Profile, measured_s_per_byte: float | None) -> str:
    """What a prediction with DDP buckets charged for the copies, in words, for `sgdscale predict`."""
    s_per_byte = copy_s_per_byte(profile, measured_s_per_byte)
    if s_per_byte <= 0:
        return ("DDP's bucket copies cost nothing here: neither a network file (sgdscale netbench) nor the "
                "profile's optimizer counts say what copying a gradient byte costs")
    rate = format_bytes(1.0 / s_per_byte)
    if measured_s_per_byte is not None:
        return f"DDP's bucket copies at {rate}/s per worker (measured by netbench right after an all-reduce)"
    return (f"DDP's bucket copies at {rate}/s per worker, from the profile's optimizer memory rate (netbench measures "
            "it under the node's load: on the emulated testbed at 0.42 cores, about 3 GB/s)")


def ddp_overhead_note(profile: Profile) -> str | None:
    """What the profile measured for DDP's own step work and that it is not charged, for `sgdscale predict`."""
    if profile.ddp_overhead_s is None:
        return None
    return (f"the profile measured DDP adding {profile.ddp_overhead_s * 1e3:.2f} ms to a step in a one-process group "
            "(the reducer's hooks, copies and buffer work); beyond the copies and buffers charged above it is not "
            "charged (held out on set 29, not kept: see the README), so with a small step under a CPU quota the "
            "prediction may be that much fast")


def buffers_note(profile: Profile) -> str:
    """What a prediction with DDP buckets charged for the buffer broadcast, in words, for `sgdscale predict`."""
    if profile.buffer_bytes > 0:
        local = (f"and DDP's local work with them, {profile.buffer_sync_s * 1e3:.2f} ms as profiled"
                 if profile.buffer_sync_s is not None else
                 "and DDP's local work with them as two copies of the bytes (the profile did not time it)")
        return (f"DDP broadcasts the model's {format_bytes(profile.buffer_bytes)} of buffers (batch-norm statistics) "
                f"from rank 0 before every forward: charged as a tree broadcast that overlaps nothing, {local}")
    return ("no DDP buffer broadcast charged: the profile records no buffers (a profile made before sgdscale "
            "recorded them, or an imported one, says 0; re-profile a model with batch norm to include it)")


def copy_back_suffix_s(group_bytes: list[float] | np.ndarray, s_per_byte: float) -> np.ndarray:
    """For each group g (launch order), the copies back of groups g..last (seconds)."""
    copies = np.asarray(group_bytes, dtype=float) * s_per_byte
    return np.cumsum(copies[::-1])[::-1] if copies.size else copies


def finalized_s(backward_end_s, comm_ends_s: np.ndarray, suffix_s: np.ndarray):
    """When DDP's finalization is done: bucket g is copied back once its collective has ended and the
    copy of g-1 is done, all after backward; the latest path is either backward's end then every copy,
    or some collective's end then the copies from its bucket on."""
    if not suffix_s.size:
        return backward_end_s
    return np.maximum(np.asarray(backward_end_s) + suffix_s[0], float(np.max(comm_ends_s + suffix_s)))


def buffer_broadcast_s(profile: Profile, grouping: str | None, topology: Topology) -> float:
    """Seconds DDP's buffer broadcast holds every worker before forward (module doc): ceil(log2 N)
    tree rounds of alpha + bytes x beta on the slowest NIC, and DDP's local work with the buffers
    (`buffer_local_s`); 0 without DDP buckets, with one worker, or without buffers."""
    nbytes, workers = profile.buffer_bytes, topology.cluster.workers
    if grouping != "buckets" or workers <= 1 or nbytes <= 0:
        return 0.0
    beta_s_per_byte = topology.nic_beta_s_per_byte(topology.slowest_nic_bps)
    local_s = buffer_local_s(profile, topology.nic.copy_s_per_byte)
    return math.ceil(math.log2(workers)) * (topology.alpha_s + nbytes * beta_s_per_byte) + local_s


def buffer_local_s(profile: Profile, measured_copy_s_per_byte: float | None) -> float:
    """DDP's local work with the buffers per forward: as the profiler timed it, else two copies of the
    bytes (into the flat tensor and back) at the copy rate."""
    if profile.buffer_sync_s is not None:
        return profile.buffer_sync_s
    return 2.0 * profile.buffer_bytes * copy_s_per_byte(profile, measured_copy_s_per_byte)
