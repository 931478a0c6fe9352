"""The cluster a prediction is for: N workers, their NICs, parameter servers, slow nodes."""

from __future__ import annotations

from dataclasses import dataclass

from sgdscale.errors import UserError


@dataclass(frozen=True)
class Cluster:
    """N identical-by-default workers on a non-blocking switch, each NIC full duplex.

    - `compute_scale`: per-worker multiplier of profiled compute time (1.0 = as profiled,
      2.0 = a node twice as slow); empty means all 1.0.
    - `slow_links`: (worker index, bandwidth_bps) pairs for workers whose NIC is slower.
    - `ps_count` server shards, each on its own node with a NIC of `ps_bandwidth_bps`
      (default: the workers' bandwidth).
    """

    workers: int
    bandwidth_bps: float = 10e9
    latency_s: float = 20e-6
    ps_count: int = 1
    ps_bandwidth_bps: float | None = None
    compute_scale: tuple[float, ...] = ()
    slow_links: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.workers, int) or self.workers < 1:
            raise UserError(f"workers must be a whole number >= 1, got {self.workers}")
        if not self.bandwidth_bps > 0:
            raise UserError(f"bandwidth must be positive, got {self.bandwidth_bps} bit/s (e.g. --bandwidth 10Gbit)")
        if not self.latency_s >= 0:
            raise UserError(f"latency must not be negative, got {self.latency_s} s (e.g. --latency 20us)")
        if self.ps_count < 1:
            raise UserError(f"parameter-server count must be at least 1, got {self.ps_count}")
        if self.ps_bandwidth_bps is not None and not self.ps_bandwidth_bps > 0:
            raise UserError(f"server bandwidth must be positive, got {self.ps_bandwidth_bps} bit/s")
        if self.compute_scale:
            if len(self.compute_scale) != self.workers:
                raise UserError(
                    f"got {len(self.compute_scale)} per-worker compute scales for {self.workers} workers; "
                    "give one per worker"
                )
            if any(not s > 0 for s in self.compute_scale):
                raise UserError("per-worker compute scales must be positive (1.0 = as profiled, 2.0 = twice as slow)")
        for worker, bps in self.slow_links:
            if not 0 <= worker < self.workers:
                raise UserError(f"slow link names worker {worker}, but workers are numbered 0..{self.workers - 1}")
            if not bps > 0:
                raise UserError(f"slow link bandwidth must be positive, got {bps} bit/s")

    @property
    def server_bandwidth_bps(self) -> float:
        return self.ps_bandwidth_bps or self.bandwidth_bps

    def worker_scale(self, worker: int) -> float:
        return self.compute_scale[worker] if self.compute_scale else 1.0

    def worker_bandwidth_bps(self, worker: int) -> float:
        for index, bps in self.slow_links:
            if index == worker:
                return bps
        return self.bandwidth_bps

    @property
    def homogeneous(self) -> bool:
        """True when every worker is alike, so one worker's simulation stands for all."""
        return all(s == 1.0 for s in self.compute_scale) and not self.slow_links

    def with_workers(self, workers: int) -> Cluster:
        """The same cluster with another worker count (per-worker options must then be absent)."""
        if self.compute_scale or self.slow_links:
            if workers != self.workers:
                raise UserError("per-worker compute scales or slow links fix the worker count; give one count")
        return Cluster(workers, self.bandwidth_bps, self.latency_s, self.ps_count, self.ps_bandwidth_bps,
                       self.compute_scale, self.slow_links)
