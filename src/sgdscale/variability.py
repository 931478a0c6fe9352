"""Per-iteration, per-worker compute times drawn from the profile's own measurements.

The profile is a set of S measured iterations. Each row of the sampler's tables is one of them:
per-layer forward and backward times plus data, host-to-device and optimizer times. For every
iteration of every worker the sampler draws one row (uniformly, seeded), so a slow iteration stays
slow across all its layers (one cause, such as a cache-cold step or an OS hiccup, slows the whole
step), and scales it by the worker's speed factor `cluster.worker_scale(w)`.

Where the rows come from, best first:
1. per-layer `forward_samples_s` / `backward_samples_s` (S = the shortest sample list; layers
   without samples keep their mean; data/h2d/optimizer keep their means);
2. otherwise the whole-step samples `iteration_s.samples`: row i is the mean profile scaled by
   samples[i] / mean(samples) (the layer-wise shape is unknown, the step-to-step spread is not);
3. otherwise, or with variability off, one row of means (deterministic).

Everything is vectorized over workers: one draw for 1,024 workers is a gather of 1,024 rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdscale.cluster import Cluster
from sgdscale.profile import Profile


@dataclass(frozen=True)
class ComputeDraw:
    """One iteration's compute times for every worker (seconds).

    forward_s, backward_s: (workers, layers), layers in forward order. data_s, h2d_s,
    optimizer_s: (workers,). Arrays may be read-only broadcast views (identical workers).
    """

    forward_s: np.ndarray
    backward_s: np.ndarray
    data_s: np.ndarray
    h2d_s: np.ndarray
    optimizer_s: np.ndarray


class ComputeSampler:
    """Seeded, reproducible compute times for `cluster.workers` workers (see module docstring).

    Low-level API for vectorized predictors: the tables `forward_table_s` / `backward_table_s`
    (rows, layers) and `data_table_s` / `h2d_table_s` / `optimizer_table_s` (rows,), the per-worker
    factor `scale` (workers,), and `draw_rows()` -> (workers,) row indices for one iteration; worker
    w's time is table[row[w]] * scale[w]. `draw()` materializes that.
    """

    def __init__(self, profile: Profile, cluster: Cluster, *, seed: int = 0, variability: bool = True) -> None:
        self.workers = cluster.workers
        self.layers = len(profile.layers)
        self.scale = np.array([cluster.worker_scale(w) for w in range(self.workers)], dtype=float)
        self.homogeneous = bool(np.all(self.scale == 1.0))
        self._rng = np.random.default_rng(seed)
        self.source = "mean"
        mean_f = np.array([layer.forward_s for layer in profile.layers], dtype=float)
        mean_b = np.array([layer.backward_s for layer in profile.layers], dtype=float)
        step = profile.step
        fwd, bwd = mean_f[None, :], mean_b[None, :]
        factors = np.ones(1)
        if variability:
            per_layer = _per_layer_tables(profile, mean_f, mean_b)
            if per_layer is not None:
                fwd, bwd = per_layer
                factors = np.ones(fwd.shape[0])
                self.source = "per-layer samples"
            elif profile.iteration_s is not None and len(profile.iteration_s.samples) >= 2:
                samples = np.array(profile.iteration_s.samples, dtype=float)
                factors = samples / samples.mean()
                fwd, bwd = factors[:, None] * mean_f[None, :], factors[:, None] * mean_b[None, :]
                self.source = "whole-step samples"
        self.forward_table_s = np.ascontiguousarray(fwd)
        self.backward_table_s = np.ascontiguousarray(bwd)
        self.data_table_s = factors * step.data_s
        self.h2d_table_s = factors * step.h2d_s
        self.optimizer_table_s = factors * step.optimizer_s
        self.rows = self.forward_table_s.shape[0]
        self._zero_rows = np.zeros(self.workers, dtype=np.intp)

    @property
    def variable(self) -> bool:
        """True when draws differ between iterations (more than one measured row to pick)."""
        return self.rows > 1

    @property
    def identical_workers(self) -> bool:
        """True when every worker has the same times in every iteration: simulate one, not N."""
        return not self.variable and self.homogeneous

    def draw_rows(self) -> np.ndarray:
        """Row index per worker for one iteration (all zeros when deterministic; no RNG use)."""
        if not self.variable:
            return self._zero_rows
        return self._rng.integers(0, self.rows, size=self.workers)

    def draw(self) -> ComputeDraw:
        """Every worker's compute times for one iteration."""
        rows = self.draw_rows()
        if self.identical_workers:
            shape = (self.workers, self.layers)
            return ComputeDraw(
                forward_s=np.broadcast_to(self.forward_table_s[0], shape),
                backward_s=np.broadcast_to(self.backward_table_s[0], shape),
                data_s=np.broadcast_to(self.data_table_s[0], (self.workers,)),
                h2d_s=np.broadcast_to(self.h2d_table_s[0], (self.workers,)),
                optimizer_s=np.broadcast_to(self.optimizer_table_s[0], (self.workers,)),
            )
        scale = self.scale
        return ComputeDraw(
            forward_s=self.forward_table_s[rows] * scale[:, None],
            backward_s=self.backward_table_s[rows] * scale[:, None],
            data_s=self.data_table_s[rows] * scale,
            h2d_s=self.h2d_table_s[rows] * scale,
            optimizer_s=self.optimizer_table_s[rows] * scale,
        )


def _per_layer_tables(profile: Profile, mean_f: np.ndarray, mean_b: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(rows, layers) forward and backward tables from per-layer samples, or None without any."""
    lengths = [
        len(samples)
        for layer in profile.layers
        for samples in (layer.forward_samples_s, layer.backward_samples_s)
        if samples
    ]
    if not lengths or min(lengths) < 2:
        return None
    rows = min(lengths)
    fwd = np.repeat(mean_f[None, :], rows, axis=0)
    bwd = np.repeat(mean_b[None, :], rows, axis=0)
    for index, layer in enumerate(profile.layers):
        if layer.forward_samples_s:
            fwd[:, index] = layer.forward_samples_s[:rows]
        if layer.backward_samples_s:
            bwd[:, index] = layer.backward_samples_s[:rows]
    return fwd, bwd
