"""The cluster a prediction is for: N workers on nodes of G devices, their links, servers, slow nodes.

This is the description a user gives; `sgdscale.comm.topology.Topology` turns it (with a measured
network, if any) into link rates and costs, so no predictor reads a bandwidth from here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from sgdscale.comm.framing import DEFAULT_MTU_BYTES, payload_fraction
from sgdscale.errors import UserError


@dataclass(frozen=True)
class Cluster:
    """N identical-by-default workers (devices) on nodes of `gpus_per_node` devices each; nodes
    sit on a non-blocking switch, each node has one full-duplex NIC shared by its devices.

    - `workers` counts devices, not nodes: nodes = ceil(workers / gpus_per_node), filled in order
      (worker w lives on node w // gpus_per_node; the last node may be partly filled).
    - `intra_bandwidth_bps` / `intra_latency_s`: the link between devices of one node (NVLink,
      PCIe or shared memory); unused with one device per node. The default is PCIe 3.0 x16.

    - `compute_scale`: per-worker multiplier of profiled compute time (1.0 = as profiled,
      2.0 = a node twice as slow); empty means all 1.0.
    - `slow_links`: (worker index, bandwidth_bps) pairs for workers whose NIC is slower; with
      several devices per node it is that worker's node NIC (the slowest entry of a node wins).
    - `ps_count` server shards, each on its own node with a NIC of `ps_bandwidth_bps`
      (default: the workers' bandwidth).
    - `framing` and `mtu_bytes`: what the nominal rates count besides payload
      (`sgdscale.comm.framing`); a measured network file already contains it.
    """

    workers: int
    bandwidth_bps: float = 10e9
    latency_s: float = 20e-6
    ps_count: int = 1
    ps_bandwidth_bps: float | None = None
    compute_scale: tuple[float, ...] = ()
    slow_links: tuple[tuple[int, float], ...] = ()
    gpus_per_node: int = 1
    intra_bandwidth_bps: float = 128e9
    intra_latency_s: float = 5e-6
    framing: str = "ethernet"
    mtu_bytes: int = DEFAULT_MTU_BYTES

    def __post_init__(self) -> None:
        payload_fraction(self.framing, self.mtu_bytes)  # one clear error for an unknown framing or bad MTU
        if not isinstance(self.workers, int) or self.workers < 1:
            raise UserError(f"workers must be a whole number >= 1, got {self.workers}")
        if not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise UserError(f"devices per node must be a whole number >= 1, got {self.gpus_per_node} "
                            "(e.g. --gpus-per-node 8)")
        if not self.intra_bandwidth_bps > 0:
            raise UserError(f"intra-node bandwidth must be positive, got {self.intra_bandwidth_bps} bit/s "
                            "(e.g. --intra-bandwidth 300GB/s)")
        if not self.intra_latency_s >= 0:
            raise UserError(f"intra-node latency must not be negative, got {self.intra_latency_s} s "
                            "(e.g. --intra-latency 5us)")
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
    def payload_fraction(self) -> float:
        """Payload bytes per byte of a nominal rate (`sgdscale.comm.framing`)."""
        return payload_fraction(self.framing, self.mtu_bytes)

    @property
    def payload_bps(self) -> float:
        """The NIC's nominal rate less framing: the gradient bits per second it can move."""
        return self.bandwidth_bps * self.payload_fraction

    @property
    def server_bandwidth_bps(self) -> float:
        return self.ps_bandwidth_bps or self.bandwidth_bps

    def worker_scale(self, worker: int) -> float:
        return self.compute_scale[worker] if self.compute_scale else 1.0

    def worker_bandwidth_bps(self, worker: int) -> float:
        """The NIC bandwidth worker `worker` gets: its node's NIC (the slowest override on the node)."""
        if self.gpus_per_node == 1:
            for index, bps in self.slow_links:
                if index == worker:
                    return bps
            return self.bandwidth_bps
        return self.node_bandwidth_bps(worker // self.gpus_per_node)

    def node_bandwidth_bps(self, node: int) -> float:
        g = self.gpus_per_node
        return min([self.bandwidth_bps] + [bps for w, bps in self.slow_links if w // g == node])

    @property
    def nodes(self) -> int:
        return math.ceil(self.workers / self.gpus_per_node)

    @property
    def devices_per_node(self) -> int:
        """Devices on a full node (fewer than gpus_per_node when everything fits on one node)."""
        return min(self.workers, self.gpus_per_node)

    def node_of(self, worker: int) -> int:
        return worker // self.gpus_per_node

    @property
    def homogeneous(self) -> bool:
        """True when every worker is alike, so one worker's simulation stands for all."""
        return all(s == 1.0 for s in self.compute_scale) and not self.slow_links

    @property
    def per_worker(self) -> bool:
        """True when options name individual workers (compute scales, slow links): they describe
        this cluster size only (`one_cluster_size`)."""
        return bool(self.compute_scale or self.slow_links)

    def with_workers(self, workers: int) -> Cluster:
        """The same cluster with another worker count (per-worker options must then be absent)."""
        if self.per_worker and workers != self.workers:
            one_cluster_size([self.workers, workers], "per-worker --compute-scale or --slow-link")
        return dataclasses.replace(self, workers=workers)


def one_cluster_size(counts: list[int], what: str) -> None:
    """The rule for every command: options that name individual workers or nodes (`what`) describe
    one cluster, so they fix the worker count; a range or list of counts is a user error."""
    if len(set(counts)) != 1:
        raise UserError(f"{what} describes one cluster, so it fixes the worker count; give a single count "
                        "(--workers N or --nodes N), not a range or list")
