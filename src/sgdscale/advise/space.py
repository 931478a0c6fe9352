"""The search space of `sgdscale advise`: one configuration (everything but the worker count),
the combinations that make sense for a profile and node shape, and one predicted point."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sgdscale.errors import UserError
from sgdscale.placement import BALANCE_GAIN, balance_gain
from sgdscale.profile import Profile
from sgdscale.strategy import KINDS, MIB, Strategy

ADVICE_SCHEMA = "sgdscale.advice/1"
STRATEGY_KINDS = KINDS
KIND_LABELS = {"allreduce": "sync all-reduce", "ps-sync": "sync PS", "ps-async": "async PS"}
DEFAULT_BUCKETS_MIB = (25.0,)
BUCKET_QUESTION_MIB = (0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0)
DEFAULT_PS_COUNTS = (1, 2, 4, 8)
ALLREDUCE_GROUPINGS = ("buckets", "mg-wfbp", "per-layer", "per-tensor", "single")
PS_GROUPINGS = ("per-tensor", "buckets")
BANDWIDTH_RANGE_BPS = (1e6, 1e13)  # the bandwidth search's bracket: 1 Mbit/s .. 10 Tbit/s
BANDWIDTH_PRECISION = 1.02  # the bandwidth answer is within 2% above the exact need
FINE_MESSAGE_BUDGET = 3_000_000  # fine parameter-server confirmations cut iterations to stay near this



@dataclass(frozen=True)
class Config:
    """One choice of everything but the worker count."""

    kind: str
    grouping: str
    bucket_mib: float | None = None  # only for grouping == "buckets"
    ps_count: int = 1  # dedicated shards; colocated = one per node
    ps_placement: str = "dedicated"
    allreduce: str = "flat"
    placement: str = "round-robin"  # which shard holds each tensor (`sgdscale.placement`)

    def strategy(self, algorithm: str) -> Strategy:
        return Strategy(kind=self.kind, grouping=self.grouping, bucket_bytes=(self.bucket_mib or 25.0) * MIB,
                        algorithm=algorithm, allreduce=self.allreduce, ps_placement=self.ps_placement,
                        placement=self.placement)

    def label(self, gpus_per_node: int = 1) -> str:
        grouping = (f"buckets {self.bucket_mib or 25:g} MiB" if self.grouping == "buckets" else
                    {"mg-wfbp": "MG-WFBP merged groups", "per-tensor": "per-tensor", "per-layer": "per-layer",
                     "single": "one message after backward"}[self.grouping])
        if self.kind == "allreduce":
            scheme = f", {self.allreduce}" if gpus_per_node > 1 else ""
            return f"{KIND_LABELS[self.kind]}, {grouping}{scheme}"
        servers = ("colocated servers (one per node)" if self.ps_placement == "colocated"
                   else f"{self.ps_count} dedicated shard{'s' if self.ps_count > 1 else ''}")
        if self.placement == "size":
            servers += " (tensors balanced by size)"
        return f"{KIND_LABELS[self.kind]}, {servers}, {grouping}"

    def nodes(self, workers: int, gpus_per_node: int) -> int:
        """Nodes to rent: the workers' nodes plus dedicated server nodes."""
        extra = self.ps_count if self.kind != "allreduce" and self.ps_placement == "dedicated" else 0
        return math.ceil(workers / gpus_per_node) + extra

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def candidates(profile: Profile, gpus_per_node: int, *, kinds: Sequence[str] = KINDS,
               bucket_sizes_mib: Sequence[float] = DEFAULT_BUCKETS_MIB, ps_counts: Sequence[int] = DEFAULT_PS_COUNTS,
               groupings: Sequence[str] | None = None) -> list[Config]:
    """The search space: every combination that makes sense for this profile and node shape."""
    tensors = max(len(profile.tensors), 1)
    schemes = ("flat", "hierarchical", "tree", "auto") if gpus_per_node > 1 else ("flat",)
    out: list[Config] = []
    for kind in kinds:
        allowed = ALLREDUCE_GROUPINGS if kind == "allreduce" else PS_GROUPINGS
        chosen = [g for g in (groupings or allowed) if g in allowed]
        for grouping in chosen:
            sizes = list(bucket_sizes_mib) if grouping == "buckets" else [None]
            for size in sizes:
                if kind == "allreduce":
                    out += [Config(kind, grouping, size, allreduce=scheme) for scheme in schemes]
                else:
                    for s in ps_counts:
                        if s <= tensors:
                            out.append(Config(kind, grouping, size, ps_count=s))
                            if balancing_helps(profile, s):
                                out.append(Config(kind, grouping, size, ps_count=s, placement="size"))
                    out.append(Config(kind, grouping, size, ps_placement="colocated"))
    if not out:
        raise UserError("no configuration to search: check --strategies and --groupings "
                        "(all-reduce groupings: " + ", ".join(ALLREDUCE_GROUPINGS) + "; PS: " +
                        ", ".join(PS_GROUPINGS) + ")")
    return out


def balancing_helps(profile: Profile, shards: int) -> bool:
    """Whether dedicated shards are tried with tensors balanced by size too (`placement.BALANCE_GAIN`)."""
    return balance_gain([t.bytes for t in profile.tensors], shards) >= BALANCE_GAIN


@dataclass
class Point:
    """One predicted (configuration, worker count, bandwidth, method)."""

    config: Config
    workers: int
    method: str
    bandwidth_bps: float
    throughput: float  # samples/s, whole cluster
    efficiency: float  # vs N x one device without communication
    step_s: float
    compute_s: float
    exposed_comm_s: float
    wait_s: float
    limited_by: str
    bottleneck: str
    nodes: int
    levels: dict[str, float] = field(default_factory=dict)
    iterations: int = 0

    def to_json(self, gpus_per_node: int) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["config"] = self.config.to_json()
        data["label"] = self.config.label(gpus_per_node)
        return data
