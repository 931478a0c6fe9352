"""Which gradients travel together, and when each group is complete.

Every predictor that overlaps communication with backward needs the same answer: the gradient
groups in launch order, their bytes, and the point of the backward pass at which each group's
last gradient is ready. That point is stated in the model's own terms, as `ready_layer` (the
layer, in forward order, whose backward completes the group) plus `ready_fraction` (how far into
that layer's backward), so the answer holds for any sampled per-layer times: with sampled
backward times t_b, a group is ready `sum(t_b[ready_layer+1:]) + ready_fraction *
t_b[ready_layer]` after backward starts.

When gradients become ready. Backward runs layer L-1 down to 0. Without measured hook times every
gradient of a layer is ready at the end of that layer's backward (fraction 1). With the profile's
`grad_ready_s` (time since backward start, measured with post-accumulate-grad hooks) a tensor is
placed at that moment of the mean backward timeline, which may fall inside another layer's
window when the real autograd order differs from reverse forward order (residual shortcuts).

Groupings (Strategy.grouping):
- per-tensor, per-layer: one group per tensor / per layer with parameters, launched as they
  become ready.
- buckets: PyTorch DDP. Tensors in gradient-ready order (DDP rebuilds its buckets after the first
  iteration in the order gradients arrived; with no hook times that is reverse parameter order),
  the first bucket closed once it reaches `first_bucket_bytes`, later ones at `bucket_bytes`
  (`compute_bucket_assignment_by_size`); a bucket launches when all its tensors are ready and
  collectives are issued in bucket order.
- single: everything in one group after backward (no overlap; SyncEASGD in the MG-WFBP papers).
- mg-wfbp: the MG-WFBP merge (sgdscale.wfbp.mgwfbp_merge) over the layers with parameters,
  using the all-reduce cost line A + B*M of `comm` for `workers`; per-layer when workers == 1
  and for a parameter server (the merge reasons about all-reduce costs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdscale.comm.cost import CommModel
from sgdscale.profile import Profile
from sgdscale.strategy import Strategy
from sgdscale.wfbp import mgwfbp_merge


@dataclass(frozen=True)
class GradGroup:
    """One collective's worth of gradients.

    tensors: indices into `profile.tensors` (forward order). ready_layer / ready_fraction: the
    group is complete `ready_fraction` of the way through the backward of layer `ready_layer`
    (1.0 = at its end). ready_s: that moment on the profile's mean backward timeline (seconds
    since backward start), for reports and ordering.
    """

    tensors: tuple[int, ...]
    bytes: int
    ready_layer: int
    ready_fraction: float = 1.0
    ready_s: float = 0.0


@dataclass(frozen=True)
class _ReadyPoint:
    layer: int
    fraction: float
    time_s: float


def backward_window_starts(profile: Profile) -> np.ndarray:
    """Mean time from backward start until each layer's backward starts (forward-order index)."""
    t_b = np.array([layer.backward_s for layer in profile.layers], dtype=float)
    after = np.concatenate([np.cumsum(t_b[::-1])[::-1][1:], [0.0]])  # sum of t_b[l+1:]
    return after


def backward_done_s(backward_s: np.ndarray) -> np.ndarray:
    """(rows, layers) sampled backward times -> time from backward start until layer l's backward
    ends, sum(t_b[l:]) (backward runs the last layer first); column 0 is the whole backward."""
    return np.cumsum(backward_s[:, ::-1], axis=1)[:, ::-1]


def ready_offsets_s(backward_s: np.ndarray, ready_layer, ready_fraction) -> np.ndarray:
    """(rows, groups): time from backward start until each group (given by its `ready_layer` and
    `ready_fraction`, see `GradGroup`) is complete, for every row of sampled backward times.
    The one place every predictor turns a group's ready point into seconds."""
    if not len(ready_layer):
        return np.zeros((backward_s.shape[0], 0))
    layer = np.asarray(ready_layer, dtype=np.intp)
    fraction = np.asarray(ready_fraction, dtype=float)
    return backward_done_s(backward_s)[:, layer] - (1.0 - fraction) * backward_s[:, layer]


def tensor_layers(profile: Profile) -> list[int]:
    """Layer index (forward order) of every tensor in `profile.tensors`."""
    return [index for index, layer in enumerate(profile.layers) for _ in layer.params]


def _ready_points(profile: Profile) -> list[_ReadyPoint]:
    """When each tensor's gradient is ready, as (layer, fraction) on the backward timeline."""
    t_b = np.array([layer.backward_s for layer in profile.layers], dtype=float)
    starts = backward_window_starts(profile)
    total = float(t_b.sum())
    points = []
    for layer_index, layer in enumerate(profile.layers):
        for tensor in layer.params:
            if tensor.grad_ready_s is None:
                points.append(_ReadyPoint(layer_index, 1.0, float(starts[layer_index] + t_b[layer_index])))
                continue
            moment = min(float(tensor.grad_ready_s), total)
            own_end = float(starts[layer_index] + t_b[layer_index])
            if abs(moment - own_end) <= 1e-9 * max(total, 1e-12):
                # at the end of its own layer (the profiler's usual case, up to rounding)
                points.append(_ReadyPoint(layer_index, 1.0, own_end))
            else:
                points.append(_locate(moment, starts, t_b))
    return points


def _locate(moment: float, starts: np.ndarray, t_b: np.ndarray) -> _ReadyPoint:
    """The layer whose backward window (in reverse forward order) holds `moment`."""
    # Windows are [starts[l], starts[l] + t_b[l]]; starts decrease with l. Search from the last
    # layer (first to run) to find the first window that ends at or after the moment.
    ends = starts + t_b
    for layer in range(len(t_b) - 1, -1, -1):
        if ends[layer] >= moment:
            if t_b[layer] > 0:
                fraction = min(max((moment - starts[layer]) / t_b[layer], 0.0), 1.0)
            else:
                fraction = 1.0
            return _ReadyPoint(layer, fraction, float(starts[layer] + fraction * t_b[layer]))
    return _ReadyPoint(0, 1.0, float(ends[0]))


def tensor_ready_points(profile: Profile) -> list[tuple[int, float]]:
    """(ready_layer, ready_fraction) of every tensor, in `profile.tensors` order."""
    return [(p.layer, p.fraction) for p in _ready_points(profile)]


def _make_group(members: list[int], points: list[_ReadyPoint], sizes: list[int]) -> GradGroup:
    last = max(members, key=lambda i: (points[i].time_s, -points[i].layer, points[i].fraction))
    return GradGroup(
        tensors=tuple(sorted(members)),
        bytes=int(sum(sizes[i] for i in members)),
        ready_layer=points[last].layer,
        ready_fraction=points[last].fraction,
        ready_s=points[last].time_s,
    )


def _ready_order(points: list[_ReadyPoint]) -> list[int]:
    """Tensor indices by ready time; ties (same layer end) in reverse parameter order, like DDP."""
    return sorted(range(len(points)), key=lambda i: (points[i].time_s, -i))


def group_gradients(profile: Profile, strategy: Strategy, comm: CommModel, workers: int) -> list[GradGroup]:
    """The gradient groups of one step, in launch order (see the module docstring)."""
    tensors = profile.tensors
    if not tensors:
        return []
    sizes = [t.bytes for t in tensors]
    points = _ready_points(profile)
    layer_of = tensor_layers(profile)
    grouping = strategy.grouping
    if grouping == "mg-wfbp" and (strategy.uses_servers or workers <= 1 or comm.allreduce_linear(workers) is None):
        grouping = "per-layer"

    if grouping == "single":
        t_b_total = profile.backward_s
        return [GradGroup(tuple(range(len(tensors))), int(sum(sizes)), 0, 1.0, float(t_b_total))]

    if grouping == "per-tensor":
        groups = [_make_group([i], points, sizes) for i in range(len(tensors))]
        return sorted(groups, key=lambda g: (g.ready_s, -g.tensors[0]))

    if grouping == "per-layer":
        return _per_layer(points, sizes, layer_of)

    if grouping == "buckets":
        limits = [float(strategy.first_bucket_bytes), float(strategy.bucket_bytes)]
        groups, bucket, filled = [], [], 0
        for index in _ready_order(points):
            bucket.append(index)
            filled += sizes[index]
            if filled >= limits[min(len(groups), 1)]:
                groups.append(_make_group(bucket, points, sizes))
                bucket, filled = [], 0
        if bucket:
            groups.append(_make_group(bucket, points, sizes))
        return groups

    if grouping == "mg-wfbp":
        return _mgwfbp(profile, points, sizes, layer_of, comm, workers)

    raise ValueError(f"unknown grouping {grouping!r}")


def _per_layer(points: list[_ReadyPoint], sizes: list[int], layer_of: list[int]) -> list[GradGroup]:
    by_layer: dict[int, list[int]] = {}
    for index, layer in enumerate(layer_of):
        by_layer.setdefault(layer, []).append(index)
    groups = [_make_group(members, points, sizes) for members in by_layer.values()]
    return sorted(groups, key=lambda g: (g.ready_s, -g.tensors[0]))


def _mgwfbp(profile: Profile, points: list[_ReadyPoint], sizes: list[int], layer_of: list[int],
            comm: CommModel, workers: int) -> list[GradGroup]:
    """MG-WFBP over the per-layer groups: each unit is a layer with parameters, its backward time
    the time from the previous unit's readiness to its own (so parameter-free layers count)."""
    units = _per_layer(points, sizes, layer_of)[::-1]  # forward order: last to become ready first
    ready = np.array([unit.ready_s for unit in units])
    # unit u's "backward" ends at ready[u]; it starts where unit u+1's ended (0 for the last unit)
    previous = np.concatenate([ready[1:], [0.0]])
    t_b = np.maximum(ready - previous, 0.0)
    linear = comm.allreduce_linear(workers)
    assert linear is not None
    merged = mgwfbp_merge(t_b, [unit.bytes for unit in units], linear.alpha_s, linear.beta_s_per_byte)
    groups = []
    for members in merged:
        indices = [i for unit in members for i in units[unit].tensors]
        groups.append(_make_group(indices, points, sizes))
    return groups
