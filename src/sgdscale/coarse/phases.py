"""Inputs of the coarse model, read from the profile: compute distributions, E[max], shard loads.

Compute before the barrier ("pre" = data + host-to-device + forward + backward) is the random part
of a step. Its per-iteration samples are the rows of `sgdscale.variability.ComputeSampler`, which
the fine method draws from too (per-layer samples summed per iteration; else the mean profile
scaled by the whole-step samples' shape; else deterministic), so both methods read the
measurements alike. Each worker i runs `cluster.worker_scale(i)` times slower; workers are
independent. Gradient groups and tensor placement are the shared rules of `sgdscale.grouping` and
`sgdscale.placement`; this package imports nothing of the fine method.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdscale import placement
from sgdscale.cluster import Cluster
from sgdscale.grouping import GradGroup
from sgdscale.profile import Profile
from sgdscale.strategy import Strategy
from sgdscale.variability import ComputeSampler


def pre_barrier_mean_s(profile: Profile) -> float:
    """Mean data + copy + forward + backward of one step (everything before gradients are all out)."""
    return profile.step.data_s + profile.step.h2d_s + profile.forward_s + profile.backward_s


def pre_barrier_samples(profile: Profile) -> np.ndarray | None:
    """Per-iteration samples of data + copy + forward + backward, or None when none were measured.

    The rows are those of `sgdscale.variability.ComputeSampler`, so coarse and fine read the
    same measured iterations the same way.
    """
    sampler = ComputeSampler(profile, Cluster(1), variability=True)
    if not sampler.variable:
        return None
    return (sampler.data_table_s + sampler.h2d_table_s + sampler.forward_table_s.sum(axis=1)
            + sampler.backward_table_s.sum(axis=1))


def optimizer_mean_s(profile: Profile, variability: bool) -> float:
    """Mean optimizer time over the sampler's rows (whole-step samples rescale it too)."""
    sampler = ComputeSampler(profile, Cluster(1), variability=variability)
    return float(sampler.optimizer_table_s.mean())


@dataclass(frozen=True)
class Discrete:
    """A finite distribution: sorted support points and their probabilities."""

    values: np.ndarray
    probs: np.ndarray

    @property
    def mean(self) -> float:
        return float(np.dot(self.values, self.probs))

    def sample(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """Inverse-CDF draws."""
        cdf = np.cumsum(self.probs)
        index = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
        return self.values[np.minimum(index, len(self.values) - 1)]


def max_distribution(samples: np.ndarray, scales: list[float] | np.ndarray) -> Discrete:
    """Exact distribution of max_i(scale_i * X_i) for independent X_i ~ empirical(samples).

    CDF of the max is the product of the workers' CDFs, G(t) = prod_i F(t / s_i), evaluated on the
    union of the scaled support points; for identical workers this is E[max] = sum_i x_(i) *
    (F_i^N - F_{i-1}^N) with F_i = i/n. Workers with the same scale share one CDF raised to their
    count, so the cost is O(n * distinct scales), not O(n * N).
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    distinct, counts = np.unique(np.asarray(scales, dtype=float), return_counts=True)
    support = np.unique(np.concatenate([s * x for s in distinct]))
    cdf = np.ones_like(support)
    for scale, count in zip(distinct, counts):
        # Compare support / scale with x rather than support with scale * x: exact for scale 1.
        f = np.searchsorted(scale * x, support, side="right") / n
        cdf = cdf * f ** int(count)
    probs = np.diff(cdf, prepend=0.0)
    return Discrete(support, probs)


def worker_scales(cluster: Cluster) -> np.ndarray:
    return np.array([cluster.worker_scale(i) for i in range(cluster.workers)], dtype=float)


def head_max(profile: Profile, cluster: Cluster, variability: bool, group: GradGroup) -> Discrete:
    """Distribution over the slowest worker of the time from step start until `group` is ready
    (data + copy + forward + backward down to the group's ready point), row by row like the
    fine predictor, so a straggler's delay is counted once whether it hits forward or backward."""
    sampler = ComputeSampler(profile, Cluster(1), variability=variability)
    bwd = sampler.backward_table_s
    partial = bwd[:, group.ready_layer + 1:].sum(axis=1) + group.ready_fraction * bwd[:, group.ready_layer]
    rows = sampler.data_table_s + sampler.h2d_table_s + sampler.forward_table_s.sum(axis=1) + partial
    return max_distribution(rows, worker_scales(cluster))


def head_max_means(profile: Profile, cluster: Cluster, variability: bool,
                   groups: list[GradGroup]) -> tuple[list[float], float]:
    """(E[`head_max`] of every group, E[`pre_barrier_max`]), all from one table of the sampler's rows.

    Backward suffix sums serve every group at once (O(rows x layers), not per group), and identical
    workers take E[max] by sorting each column: with F_i = i / rows, E[max of N] = sum_i x_(i) (F_i^N -
    F_{i-1}^N). Workers of different speeds take `max_distribution` per column. The pre-barrier
    column is summed like the last group's (layer 0, fraction 1), so where both coincide they agree
    to the bit and one worker's exposed communication is exactly 0.
    """
    sampler = ComputeSampler(profile, Cluster(1), variability=variability)
    bwd = sampler.backward_table_s
    before = sampler.data_table_s + sampler.h2d_table_s + sampler.forward_table_s.sum(axis=1)
    rows = bwd.shape[0]
    suffix = np.zeros((rows, bwd.shape[1] + 1))
    suffix[:, :-1] = np.cumsum(bwd[:, ::-1], axis=1)[:, ::-1]  # suffix[:, l] = backward of layers l..end
    table = np.column_stack([before + (suffix[:, g.ready_layer + 1] + g.ready_fraction * bwd[:, g.ready_layer])
                             for g in groups] + [before + suffix[:, 0]])
    scales = worker_scales(cluster)
    if np.all(scales == scales[0]):
        f = np.arange(rows + 1) / rows
        weights = np.diff(f ** len(scales))
        means = scales[0] * (weights @ np.sort(table, axis=0))
    else:
        means = np.array([max_distribution(table[:, k], scales).mean for k in range(table.shape[1])])
    return means[:-1].tolist(), float(means[-1])


def pre_barrier_max(profile: Profile, cluster: Cluster, variability: bool) -> Discrete:
    """Distribution of the slowest worker's pre-barrier compute (a point mass without variability)."""
    return head_max(profile, cluster, variability, GradGroup((), 0, 0, 1.0, profile.backward_s))


def pre_barrier_one(profile: Profile, variability: bool) -> Discrete:
    """Distribution of one as-profiled worker's pre-barrier compute."""
    samples = pre_barrier_samples(profile) if variability else None
    if samples is None:
        return Discrete(np.array([pre_barrier_mean_s(profile)]), np.array([1.0]))
    values, counts = np.unique(samples, return_counts=True)
    return Discrete(values, counts / counts.sum())


def shard_bytes(profile: Profile, strategy: Strategy, shards: int) -> np.ndarray:
    """Bytes of parameters on each server shard (`sgdscale.placement`)."""
    return np.array(placement.shard_bytes([t.bytes for t in profile.tensors], shards, strategy.placement), dtype=float)
