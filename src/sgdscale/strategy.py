"""How the workers coordinate: sync/async, all-reduce or parameter server, gradient grouping."""

from __future__ import annotations

from dataclasses import dataclass

from sgdscale.comm.cost import ALGORITHMS
from sgdscale.errors import UserError
from sgdscale.placement import PLACEMENTS

KINDS = ("allreduce", "ps-sync", "ps-async")
GROUPINGS = ("per-tensor", "per-layer", "buckets", "single", "mg-wfbp")
ALLREDUCE_SCHEMES = ("flat", "hierarchical", "tree", "auto")  # see sgdscale.comm.topology
PS_PLACEMENTS = ("dedicated", "colocated")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Strategy:
    """One way of running data-parallel SGD.

    `bucket_bytes` and `first_bucket_bytes` follow PyTorch DDP (`bucket_cap_mb` is in MiB; the first
    bucket is capped at 1 MiB). `placement` puts parameter tensors on server shards round-robin in
    forward order (TensorFlow's default) or greedily by size. `grouping` defaults to what the real
    systems do: DDP buckets for all-reduce, one message per tensor for a parameter server.

    On nodes of several devices: `allreduce` is how a collective uses the two levels (flat over all
    devices, hierarchical, tree across nodes, or auto = the cheapest per message, as NCCL picks);
    `algorithm` is the algorithm of a flat collective and of the inter-node step of a hierarchical
    one. `ps_placement`: dedicated server nodes, or one server per worker node (colocated,
    BytePS-style). `sgdscale.comm.topology` has the cost of each. `collectives_at_once`: how many
    all-reduces of a worker share the link at once; None is the library's own (gloo's two threads for a
    CPU profile, NCCL's one stream otherwise; `sgdscale.comm.streams`).
    """

    kind: str = "allreduce"
    grouping: str | None = None
    bucket_bytes: float = 25 * MIB
    first_bucket_bytes: float = 1 * MIB
    algorithm: str = "ring"
    placement: str = "round-robin"
    allreduce: str = "flat"
    ps_placement: str = "dedicated"
    collectives_at_once: int | None = None

    def __post_init__(self) -> None:
        if self.grouping is None:
            object.__setattr__(self, "grouping", "per-tensor" if self.kind.startswith("ps") else "buckets")
        for value, allowed, what in (
            (self.kind, KINDS, "strategy"),
            (self.grouping, GROUPINGS, "grouping"),
            (self.algorithm, ALGORITHMS, "all-reduce algorithm"),
            (self.placement, PLACEMENTS, "placement"),
            (self.allreduce, ALLREDUCE_SCHEMES, "all-reduce scheme (--allreduce)"),
            (self.ps_placement, PS_PLACEMENTS, "server placement (--ps-placement)"),
        ):
            if value not in allowed:
                raise UserError(f"unknown {what} '{value}'; choose one of: {', '.join(allowed)}")
        if not self.bucket_bytes > 0 or not self.first_bucket_bytes > 0:
            raise UserError("bucket sizes must be positive (e.g. --bucket-mb 25)")
        if self.collectives_at_once is not None and (isinstance(self.collectives_at_once, bool)
                                                     or not isinstance(self.collectives_at_once, int)
                                                     or self.collectives_at_once < 1):
            raise UserError(f"collectives at once must be a whole number >= 1 (e.g. --collectives-at-once 1), "
                            f"got {self.collectives_at_once!r}")

    @property
    def synchronous(self) -> bool:
        return self.kind != "ps-async"

    @property
    def uses_servers(self) -> bool:
        return self.kind.startswith("ps")
