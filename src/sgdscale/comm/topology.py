"""The topology: the one owner of every link's rate and of every cost built on it.

A cluster is nodes x devices per node (`Cluster.gpus_per_node`); the devices of a node are joined
by an intra-node link (NVLink, PCIe, shared memory: alpha_i, beta_i) and share one NIC
(alpha_e, beta_e) to a non-blocking switch. Predictors never read a bandwidth from the cluster or
rescale a cost model themselves: they ask the `Topology` for NIC capacities, per-byte costs,
collective times (split per level) and the parameter-server link layout.

**The NIC's costs** come from `nic` (a `CommModel`): `CommModel.from_link` for a nominal link (its payload rate:
the nominal rate less framing, `sgdscale.comm.framing`), or `CommModel.from_network` for a measured
one (`sgdscale netbench`: its p2p fit, its whole-collective fits and curves per node count).
Per-node NIC overrides (slow links) and server NICs are nominal rates; every NIC is scaled by payload
rate / nominal rate, `nic_factor` (the measured network's, else the framing's payload fraction), so
a slow link keeps its ratio to the others. This is the only place that
reconciles a measured network with nominal rates.

**All-reduce of M bytes over N = n nodes x G devices** (`Strategy.allreduce`), alpha-beta-gamma
per level (gamma: reduction cost per byte):

- `flat`: one collective over all N devices with `Strategy.algorithm` (ring, tree,
  halving-doubling), ranks node-major. Every step runs in lock step, so it is paced by the slowest
  link a step uses: alpha = max(alpha_i, alpha_e), beta = max(beta_i, beta_e). A node-major ring
  crosses each NIC with one flow per direction, so the NIC carries 2(N-1)/N*M per direction (more
  than hierarchical's 2(n-1)/n*M when G > 1). On a single node only the intra-node link is used.
  With G = 1 this is exactly the pre-topology model, measured fits and curves included.
- `hierarchical` (Horovod's hierarchical all-reduce; NCCL's ring does the same bytes over NVLink):
  ring reduce-scatter inside the node, (G-1)(alpha_i + M/G*beta_i) + (G-1)/G*M*gamma; all-reduce
  of the node's M bytes across the n nodes with `Strategy.algorithm` on the NIC (the G devices'
  shard all-reduces share the NIC, together moving the same bytes as one of M); all-gather inside,
  (G-1)(alpha_i + M/G*beta_i). The inter-node step uses the measured fit/curve for n workers when
  the network file has one.
- `tree` (NCCL's tree, simplified): a chain reduce to one device and a chain broadcast inside the
  node, pipelined: 2(G-1)*alpha_i + 2M*beta_i + M*gamma; a binary tree across nodes,
  2*ceil(log2 n)*alpha_e + ceil(log2 n)*(2*beta_e + gamma)*M (not pipelined, not double: it wins
  for small messages and latency-bound sizes, as NCCL's tree does, and loses for large ones).
- `auto`: per message, the cheapest of the three, which is how NCCL decides: it models each
  algorithm's time for the size (src/graph/tuning.cc, `ncclTopoGetAlgoTime`: latency + bytes /
  bandwidth per algorithm and protocol) and takes the minimum. Simplified here: no protocols
  (LL/LL128/Simple), channels, CollNet/NVLS or NCCL's measured correction tables.

**Parameter servers** (`Strategy.ps_placement`): `dedicated` puts each of the S shards on its own
node with a NIC of `Cluster.server_bandwidth_bps`; `colocated` (BytePS-style) puts one shard on
each worker node (S = n): a worker's push to its own node's shard crosses the intra-node link and
never touches the NIC; the shard's NIC is the node's NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sgdscale.bottleneck import LEVEL_INTRA, LEVEL_NIC
from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.network import AlphaBeta

AUTO_LINE_BYTES = 25 * 1024 * 1024  # DDP's bucket cap: the size MG-WFBP merges towards


@dataclass(frozen=True)
class CollectiveCost:
    """Seconds of each all-reduce, split by level, and the scheme that ran it."""

    intra_s: np.ndarray
    nic_s: np.ndarray
    scheme: list[str]

    @property
    def total_s(self) -> np.ndarray:
        return self.intra_s + self.nic_s


@dataclass(frozen=True)
class PsLinks:
    """The links of a parameter-server run and which connection uses which (see `Topology.ps_links`).

    Push network: `push_caps_Bps`, and `push_pair(w, s)` = (up link, down link) of worker w's
    connection to shard s. Pull network likewise. `hubs_*`: the server-side links (where a star
    shortcut may apply). `worker_up[w]`/`worker_down[w]`, `server_up[s]`/`server_down[s]`: link
    indices for utilization. `shared_nics`: True when devices share a NIC or servers are
    colocated (the general max-min network is then used).
    """

    push_caps_Bps: list[float]
    pull_caps_Bps: list[float]
    push_pairs: list[list[tuple[int, int]]]  # [w][s]
    pull_pairs: list[list[tuple[int, int]]]  # [s][w]
    hubs_push: set[int]
    hubs_pull: set[int]
    worker_up: list[int]
    worker_down: list[int]
    server_up: list[int]
    server_down: list[int]
    shared_nics: bool


class Topology:
    """Link rates and costs of one cluster size (module docstring)."""

    def __init__(self, cluster: Cluster, nic: CommModel, scheme: str = "flat", ps_placement: str = "dedicated",
                 nic_factor: float | None = None) -> None:
        self.cluster = cluster
        self.workers = cluster.workers
        self.gpus = cluster.devices_per_node
        self.nodes = cluster.nodes
        self.scheme = scheme
        self.ps_placement = ps_placement
        self.nic = nic
        self.algorithm = nic.algorithm
        self.gamma_s_per_byte = nic.gamma_s_per_byte
        if nic_factor is None:
            nominal_Bps = cluster.bandwidth_bps / 8.0
            nic_factor = (1.0 / nic.p2p.beta_s_per_byte) / nominal_Bps
            if abs(nic_factor - 1.0) < 1e-9:
                nic_factor = 1.0
        self.nic_factor = nic_factor
        self.alpha_s = nic.p2p.alpha_s
        self.intra = AlphaBeta(alpha_s=cluster.intra_latency_s, beta_s_per_byte=8.0 / cluster.intra_bandwidth_bps)
        self.inter = self._slowest_nic_model()

    @classmethod
    def of(cls, cluster: Cluster, comm: CommModel | Topology, strategy=None) -> Topology:
        """The topology of `cluster`: `comm` is the NIC's cost model (or already a topology)."""
        if isinstance(comm, Topology):
            if comm.cluster == cluster:
                return comm
            comm = comm.nic
        scheme = getattr(strategy, "allreduce", "flat")
        placement = getattr(strategy, "ps_placement", "dedicated")
        return cls(cluster, comm, scheme, placement)

    @property
    def network(self):
        """The measured network file (`sgdscale.network/1`) behind the NIC costs, or None: where
        per-network factors measured with it (e.g. interference, CPU cost per byte) are read."""
        return self.nic.network

    # ---------------------------------------------------------------- links

    def nic_Bps(self, worker: int) -> float:
        """Bytes/s of the NIC worker `worker` uses (its node's)."""
        return self.cluster.worker_bandwidth_bps(worker) / 8.0 * self.nic_factor

    def node_nic_Bps(self, node: int) -> float:
        return self.cluster.node_bandwidth_bps(node) / 8.0 * self.nic_factor

    @property
    def server_nic_Bps(self) -> float:
        return self.cluster.server_bandwidth_bps / 8.0 * self.nic_factor

    def nic_beta_s_per_byte(self, bandwidth_bps: float) -> float:
        """Seconds per byte on a NIC of nominal `bandwidth_bps` (measured network: rescaled)."""
        return self.nic.p2p.beta_s_per_byte * self.cluster.bandwidth_bps / bandwidth_bps

    @property
    def slowest_nic_bps(self) -> float:
        return min(self.cluster.node_bandwidth_bps(i) for i in range(self.nodes)) if self.cluster.slow_links \
            else self.cluster.bandwidth_bps

    def _slowest_nic_model(self) -> CommModel:
        """The NIC model paced by the slowest NIC: ring and tree move every byte through every
        node's NIC in lock step, so the slowest one sets the per-byte cost; latency is unchanged."""
        if not self.cluster.slow_links:
            return self.nic
        slowdown = self.cluster.bandwidth_bps / self.slowest_nic_bps
        if slowdown <= 1.0:
            return self.nic
        return self.nic.with_bandwidth_scaled(slowdown)

    # ---------------------------------------------------------------- collectives

    def _flat_multi(self) -> CommModel:
        ab = AlphaBeta(alpha_s=max(self.intra.alpha_s, self.inter.p2p.alpha_s),
                       beta_s_per_byte=max(self.intra.beta_s_per_byte, self.inter.p2p.beta_s_per_byte))
        return CommModel(ab, self.algorithm, self.gamma_s_per_byte)

    def _parts(self, scheme: str, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(intra-node seconds, NIC seconds) of each all-reduce under one scheme."""
        n, g, zero = self.nodes, self.gpus, np.zeros_like(sizes)
        if g == 1:
            if scheme == "tree":
                return zero, CommModel(self.inter.p2p, "tree", self.gamma_s_per_byte).allreduce_times_s(sizes, n)
            return zero, self.inter.allreduce_times_s(sizes, n)
        ai, bi, gamma = self.intra.alpha_s, self.intra.beta_s_per_byte, self.gamma_s_per_byte
        if scheme == "flat":
            if n == 1:  # every device on one node: the NIC is never used
                return CommModel(self.intra, self.algorithm, gamma).allreduce_times_s(sizes, self.workers), zero
            total = self._flat_multi().allreduce_times_s(sizes, self.workers)
            if self.inter.p2p.beta_s_per_byte >= bi:
                return zero, total
            return total, zero
        if scheme == "hierarchical":
            intra = 2 * (g - 1) * ai + (2 * (g - 1) / g * bi + (g - 1) / g * gamma) * sizes
            return intra, self.inter.allreduce_times_s(sizes, n)
        if scheme == "tree":
            intra = 2 * (g - 1) * ai + (2 * bi + gamma) * sizes
            nic = CommModel(self.inter.p2p, "tree", gamma).allreduce_times_s(sizes, n)
            return intra, nic
        raise ValueError(f"unknown all-reduce scheme {scheme!r}")

    def allreduce_cost(self, sizes_bytes: np.ndarray | list[float]) -> CollectiveCost:
        """Each message's all-reduce over all workers, per level, with the configured scheme."""
        sizes = np.asarray(sizes_bytes, dtype=float)
        if self.workers <= 1:
            zero = np.zeros_like(sizes)
            return CollectiveCost(zero, zero.copy(), ["none"] * len(sizes))
        if self.scheme != "auto":
            intra, nic = self._parts(self.scheme, sizes)
            return CollectiveCost(intra, nic, [self.scheme] * len(sizes))
        options = ("flat", "hierarchical", "tree")
        parts = [self._parts(s, sizes) for s in options]
        totals = np.stack([i + e for i, e in parts])
        best = np.argmin(totals, axis=0)
        pick = np.arange(len(sizes))
        intra = np.stack([i for i, _ in parts])[best, pick]
        nic = np.stack([e for _, e in parts])[best, pick]
        return CollectiveCost(intra, nic, [options[b] for b in best])

    def allreduce_busy_s(self, sizes_bytes: np.ndarray | list[float]) -> dict[str, float]:
        """Seconds per step each level (intra-node link, NIC) is busy with these all-reduces.

        Mostly the cost's split by level; but a flat collective over several multi-device nodes
        keeps both levels busy at once (its ring crosses the NICs and the intra-node links in the
        same steps, paced by the slower), so the faster level is busy for the time the same
        collective would take on it alone, not zero."""
        sizes = np.asarray(sizes_bytes, dtype=float)
        cost = self.allreduce_cost(sizes)
        intra, nic = cost.intra_s.copy(), cost.nic_s.copy()
        flat = np.array([scheme == "flat" for scheme in cost.scheme], dtype=bool)
        if self.gpus > 1 and self.nodes > 1 and flat.any():
            gamma = self.gamma_s_per_byte
            on_intra = CommModel(self.intra, self.algorithm, gamma).allreduce_times_s(sizes, self.workers)
            on_nic = CommModel(self.inter.p2p, self.algorithm, gamma).allreduce_times_s(sizes, self.workers)
            intra = np.where(flat, np.minimum(on_intra, cost.total_s), intra)
            nic = np.where(flat, np.minimum(on_nic, cost.total_s), nic)
        return {LEVEL_INTRA: float(intra.sum()), LEVEL_NIC: float(nic.sum())}

    def allreduce_times_s(self, sizes_bytes: np.ndarray | list[float], workers: int | None = None) -> np.ndarray:
        """Total all-reduce time of each message size (zeros for one worker)."""
        self._check_workers(workers)
        return self.allreduce_cost(sizes_bytes).total_s

    def allreduce_linear(self, workers: int | None = None) -> AlphaBeta | None:
        """t = A + B*M of the scheme (MG-WFBP plans with it); None for one worker.

        `auto` uses the line of the scheme cheapest at `AUTO_LINE_BYTES` (DDP's bucket cap)."""
        self._check_workers(workers)
        if self.workers <= 1:
            return None
        scheme = self.scheme
        if scheme == "auto":
            probe = np.array([AUTO_LINE_BYTES], dtype=float)
            scheme = self.allreduce_cost(probe).scheme[0]
        if self.gpus == 1 and scheme != "tree":
            return self.inter.allreduce_linear(self.nodes)
        zero, one = np.array([0.0]), np.array([1.0])
        a = sum(float(x[0]) for x in self._parts(scheme, zero))
        b = sum(float(x[0]) for x in self._parts(scheme, one)) - a
        if b <= 0:
            return None
        return AlphaBeta(alpha_s=a, beta_s_per_byte=b)

    def allreduce_s(self, nbytes: float) -> float:
        return float(self.allreduce_times_s([nbytes])[0])

    def _check_workers(self, workers: int | None) -> None:
        if workers is not None and workers != self.workers:
            raise ValueError(f"this topology is for {self.workers} workers, asked about {workers}")

    def describe_allreduce(self) -> str:
        """The network an all-reduce crosses, in words (for bottleneck texts)."""
        from sgdscale.units import format_bandwidth

        if self.gpus == 1 and self.scheme in ("flat", "hierarchical") and self.workers in self.nic.measured_allreduce:
            return "the measured all-reduce"
        slow = self.slowest_nic_bps
        nic = f"a {format_bandwidth(slow * self.nic_factor)} NIC" if self.nic_factor != 1.0 \
            else f"a {format_bandwidth(slow)}"
        if self.gpus == 1:
            text = f"{nic} {self.algorithm}" if self.scheme != "tree" else f"{nic} tree"
            if self.cluster.slow_links and slow < self.cluster.bandwidth_bps:
                text += " (paced by the slowest link)"
            return text
        return (f"{self.nodes} nodes x {self.gpus} devices ({self.scheme}; "
                f"{format_bandwidth(self.cluster.intra_bandwidth_bps)} inside a node, "
                f"{format_bandwidth(slow)} NIC per node)")

    # ---------------------------------------------------------------- parameter servers

    @property
    def ps_shards(self) -> int:
        """Server shards: the cluster's count on dedicated nodes, one per node when colocated."""
        return self.nodes if self.ps_placement == "colocated" else self.cluster.ps_count

    def ps_links(self, shards: int) -> PsLinks:
        """Links and connections of a parameter-server run with `shards` shards.

        One device per node and dedicated servers: one link per worker NIC direction (as before
        topologies existed). Otherwise one link per node NIC direction, shared by the node's
        devices; colocated shard s lives on node s, its NIC is node s's NIC, and a worker's
        connection to its own node's shard runs over that node's intra-node link (one link per
        node and direction)."""
        n, nodes = self.workers, self.nodes
        if self.gpus == 1 and self.ps_placement == "dedicated":
            worker = [self.nic_Bps(w) for w in range(n)]
            server = [self.server_nic_Bps] * shards
            return PsLinks(
                worker + server, server + worker,
                [[(w, n + s) for s in range(shards)] for w in range(n)],
                [[(s, shards + w) for w in range(n)] for s in range(shards)],
                set(range(n, n + shards)), set(range(shards)),
                list(range(n)), [shards + w for w in range(n)], list(range(shards)), [n + s for s in range(shards)],
                False)
        node_caps = [self.node_nic_Bps(i) for i in range(nodes)]
        intra_Bps = self.cluster.intra_bandwidth_bps / 8.0
        node_of = [self.cluster.node_of(w) for w in range(n)]
        if self.ps_placement == "dedicated":
            # push: node up 0..nodes-1, server down nodes..nodes+S-1; pull: server up 0..S-1, node down S..
            server = [self.server_nic_Bps] * shards
            push_pairs = [[(node_of[w], nodes + s) for s in range(shards)] for w in range(n)]
            pull_pairs = [[(s, shards + node_of[w]) for w in range(n)] for s in range(shards)]
            return PsLinks(node_caps + server, server + node_caps, push_pairs, pull_pairs,
                           set(range(nodes, nodes + shards)), set(range(shards)),
                           node_of, [shards + i for i in node_of], list(range(shards)),
                           [nodes + s for s in range(shards)], True)
        if shards != nodes:
            raise ValueError(f"colocated servers need one shard per node ({nodes}), got {shards}")
        # Both networks: NIC up 0..nodes-1, NIC down nodes..2*nodes-1, intra out 2n.., intra in 3n..
        caps = node_caps + node_caps + [intra_Bps] * (2 * nodes)

        def pair(src_node: int, dst_node: int) -> tuple[int, int]:
            if src_node == dst_node:
                return 2 * nodes + src_node, 3 * nodes + src_node
            return src_node, nodes + dst_node

        push_pairs = [[pair(node_of[w], s) for s in range(shards)] for w in range(n)]
        pull_pairs = [[pair(s, node_of[w]) for w in range(n)] for s in range(shards)]
        return PsLinks(list(caps), list(caps), push_pairs, pull_pairs, set(range(nodes, 2 * nodes)),
                       set(range(nodes)), node_of, [nodes + i for i in node_of], list(range(nodes)),
                       [nodes + s for s in range(nodes)], True)

    def ps_transfer_s(self, shard_bytes: np.ndarray, total_bytes: float) -> tuple[np.ndarray, float, float]:
        """One direction of a synchronous PS step, all workers at once, as the busiest links see it:
        (per shard: its NIC's seconds, busiest worker-side NIC's seconds, busiest intra-node link's seconds).

        Dedicated: shard s's NIC carries N*b_s; a node's NIC carries its G devices' B bytes.
        Colocated (shard s on node s, G devices per node): node i's NIC carries, into its shard,
        (N - G_i)*b_i from remote devices, and out of its devices, G_i*(B - b_i) to remote shards
        (the pull mirrors it); its intra-node link carries G_i*b_i."""
        n = self.workers
        if self.ps_placement == "dedicated":
            server = n * shard_bytes * self.nic_beta_s_per_byte(self.cluster.server_bandwidth_bps)
            worker = max(self.nic_beta_s_per_byte(self.cluster.node_bandwidth_bps(i)) * self.gpus_on(i)
                         for i in range(self.nodes)) * total_bytes
            return server, float(worker), 0.0
        server = np.zeros_like(shard_bytes)
        worker, intra = 0.0, 0.0
        for i in range(self.nodes):
            g = self.gpus_on(i)
            beta = self.nic_beta_s_per_byte(self.cluster.node_bandwidth_bps(i))
            server[i] = (n - g) * shard_bytes[i] * beta
            worker = max(worker, g * (total_bytes - shard_bytes[i]) * beta)
            intra = max(intra, g * shard_bytes[i] * self.intra.beta_s_per_byte)
        return server, float(worker), float(intra)

    def gpus_on(self, node: int) -> int:
        return min(self.gpus, self.workers - node * self.cluster.gpus_per_node)

