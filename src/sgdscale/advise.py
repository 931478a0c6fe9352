"""`advise`: search the choices a user controls and rank them, answering the questions users ask.

The choices: strategy (sync all-reduce, sync PS, async PS), gradient grouping and bucket size
(MG-WFBP included), server count and placement (dedicated or colocated), the all-reduce scheme
on multi-device nodes (flat, hierarchical, tree, auto), and the worker count. Every candidate is
predicted with `sgdscale.predict.run_method` (coarse by default: milliseconds each), never with a
model of its own, so advice and `predict` cannot disagree.

**Efficiency** here is throughput / (N x one device's throughput without communication), the same
denominator for every strategy (a parameter server pays for its links even with one worker, so
`predict`'s per-strategy baseline would flatter it). For all-reduce it equals `predict`'s efficiency.

**Why it stays interactive.** A candidate is not predicted where a cheap upper bound on its
throughput already rules it out: compute (N devices at profiled speed) and, for parameter servers,
the bytes every worker step must push through the server NICs (dedicated: S x server NIC / gradient
bytes; colocated: the node NICs carry the (n-1)/n share that leaves a node) and through the worker
NICs. Bounds only ever skip candidates that cannot reach the shown ranks or targets, so answers are
what predicting everything would give (`tests/test_advise.py` checks this). Searches along worker
counts assume that efficiency, once below a target, does not recover at larger counts, and that
throughput grows with workers between two grid points (the brute-force tests check both on the
built-in profiles).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.topology import Topology
from sgdscale import inputs
from sgdscale.errors import UserError
from sgdscale.predict import run_method
from sgdscale.profile import Profile
from sgdscale.strategy import KINDS, MIB, Strategy
from sgdscale.units import format_bandwidth, format_seconds

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

    def strategy(self, algorithm: str) -> Strategy:
        return Strategy(kind=self.kind, grouping=self.grouping, bucket_bytes=(self.bucket_mib or 25.0) * MIB,
                        algorithm=algorithm, allreduce=self.allreduce, ps_placement=self.ps_placement)

    def label(self, gpus_per_node: int = 1) -> str:
        grouping = (f"buckets {self.bucket_mib or 25:g} MiB" if self.grouping == "buckets" else
                    {"mg-wfbp": "MG-WFBP merged groups", "per-tensor": "per-tensor", "per-layer": "per-layer",
                     "single": "one message after backward"}[self.grouping])
        if self.kind == "allreduce":
            scheme = f", {self.allreduce}" if gpus_per_node > 1 else ""
            return f"{KIND_LABELS[self.kind]}, {grouping}{scheme}"
        servers = ("colocated servers (one per node)" if self.ps_placement == "colocated"
                   else f"{self.ps_count} dedicated shard{'s' if self.ps_count > 1 else ''}")
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
                    out += [Config(kind, grouping, size, ps_count=s) for s in ps_counts if s <= tensors]
                    out.append(Config(kind, grouping, size, ps_placement="colocated"))
    if not out:
        raise UserError("no configuration to search: check --strategies and --groupings "
                        "(all-reduce groupings: " + ", ".join(ALLREDUCE_GROUPINGS) + "; PS: " +
                        ", ".join(PS_GROUPINGS) + ")")
    return out


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


class Advisor:
    """Predicts candidates on demand, caches every prediction and counts the search's cost."""

    def __init__(self, profile: Profile, cluster: Cluster, comm: CommModel, *, method: str = "coarse",
                 iterations: int = 100, warmup: int = 10, seed: int = 0, variability: bool = True,
                 price_per_node_hour: float | None = None) -> None:
        if not profile.layers:
            raise UserError("the profile has no layers; profile a model with `sgdscale profile MODEL -o FILE`")
        if method not in ("fine", "coarse"):
            raise UserError(f"unknown method '{method}'; choose coarse (fast, the default) or fine")
        self.profile, self.cluster, self.comm, self.method = profile, cluster, comm, method
        self.options = dict(iterations=iterations, warmup=warmup, seed=seed, variability=variability)
        self.price = price_per_node_hour
        self.gpus = cluster.gpus_per_node
        self.cache: dict[tuple, Point] = {}
        self.predictions = 0
        self.pruned = 0
        self.predict_s = 0.0
        self._base: dict[str, float] = {}
        self._shards: dict[Config, Any] = {}

    # ------------------------------------------------------------------ predictions

    def base_throughput(self, method: str | None = None) -> float:
        """One device without communication (samples/s): the denominator of efficiency."""
        method = method or self.method
        if method not in self._base:
            one = dataclasses.replace(self.cluster, workers=1, compute_scale=(), slow_links=())
            outcome = self._run(method, one, Strategy(), self.comm, self.options)
            self._base[method] = outcome.throughput
        return self._base[method]

    def _run(self, method, cluster, strategy, comm, options):
        began = time.perf_counter()
        options = dict(options)
        if method == "coarse":
            options.pop("warmup", None)
        outcome = run_method(method, self.profile, cluster, strategy, comm, **options)
        self.predict_s += time.perf_counter() - began
        self.predictions += 1
        return outcome

    def _comm_at(self, bandwidth_bps: float) -> tuple[Cluster, CommModel]:
        if bandwidth_bps == self.cluster.bandwidth_bps:
            return self.cluster, self.comm
        cluster = dataclasses.replace(self.cluster, bandwidth_bps=bandwidth_bps)
        return cluster, CommModel.from_link(bandwidth_bps, self.cluster.latency_s, self.comm.algorithm)

    def point(self, config: Config, workers: int, *, bandwidth_bps: float | None = None,
              method: str | None = None, iterations: int | None = None) -> Point:
        """The prediction of one candidate (cached)."""
        method = method or self.method
        bandwidth_bps = bandwidth_bps or self.cluster.bandwidth_bps
        options = dict(self.options)
        if iterations is not None:
            options["iterations"] = iterations
        key = (config, workers, bandwidth_bps, method, options["iterations"])
        if key in self.cache:
            return self.cache[key]
        cluster, comm = self._comm_at(bandwidth_bps)
        cluster = dataclasses.replace(cluster, workers=workers, ps_count=config.ps_count)
        outcome = self._run(method, cluster, config.strategy(self.comm.algorithm), comm, options)
        import numpy as np

        step_s = float(np.mean(outcome.iteration_s))
        b = outcome.breakdown
        found = Point(config=config, workers=workers, method=method, bandwidth_bps=bandwidth_bps,
                      throughput=float(outcome.throughput),
                      efficiency=float(outcome.throughput / (workers * self.base_throughput(method))),
                      step_s=step_s, compute_s=b.compute_s, exposed_comm_s=b.exposed_comm_s, wait_s=b.wait_s,
                      limited_by=outcome.limited_by, bottleneck=outcome.bottleneck,
                      nodes=config.nodes(workers, self.gpus), levels={k: float(v) for k, v in outcome.levels.items()},
                      iterations=options["iterations"])
        self.cache[key] = found
        return found

    def upper_bound(self, config: Config, workers: int, bandwidth_bps: float | None = None) -> float:
        """Samples/s no prediction of `config` can exceed (module docstring)."""
        bound = workers * self.base_throughput() * (1 + 1e-9)
        if config.kind == "allreduce":
            return bound
        # A server applies the update, so a worker's step may shed the optimizer (2% margin for the
        # sampled compute's spread around its mean).
        step = self.profile.step
        worker_s = self.profile.compute_s - step.optimizer_s
        if worker_s > 0:
            bound = workers * self.profile.batch_size / worker_s * 1.02
        cluster, comm = self._comm_at(bandwidth_bps or self.cluster.bandwidth_bps)
        cluster = dataclasses.replace(cluster, workers=workers, ps_count=config.ps_count)
        topology = Topology.of(cluster, comm, config.strategy(comm.algorithm))
        grad_bytes = max(self.profile.gradient_bytes, 1)
        batch = self.profile.batch_size
        nodes = cluster.nodes
        node_nic_Bps = sum(topology.node_nic_Bps(i) for i in range(nodes))
        if config.ps_placement == "colocated":
            if nodes == 1:
                return bound
            steps_per_s = node_nic_Bps / (grad_bytes * (nodes - 1) / nodes)
        else:
            busiest = float(self._shard_bytes(config).max())  # every worker step crosses the busiest shard's NIC
            steps_per_s = min(topology.server_nic_Bps / max(busiest, 1.0), node_nic_Bps / grad_bytes)
        return min(bound, steps_per_s * batch * (1 + 1e-6))

    def _shard_bytes(self, config: Config):
        if config not in self._shards:
            from sgdscale.coarse.phases import shard_bytes

            self._shards[config] = shard_bytes(self.profile, config.strategy(self.comm.algorithm), config.ps_count)
        return self._shards[config]

    # ------------------------------------------------------------------ questions

    def rank(self, configs: Sequence[Config], workers: int, top: int, bandwidth_bps: float | None = None) -> list[Point]:
        """The `top` best configurations at one worker count, best first (others may be pruned)."""
        ordered = sorted(configs, key=lambda c: -self.upper_bound(c, workers, bandwidth_bps))
        found: list[Point] = []
        for config in ordered:
            if len(found) >= top:
                kth = sorted((p.throughput for p in found), reverse=True)[top - 1]
                if self.upper_bound(config, workers, bandwidth_bps) < kth:
                    self.pruned += 1
                    continue
            found.append(self.point(config, workers, bandwidth_bps=bandwidth_bps))
        found.sort(key=lambda p: (-p.throughput, p.nodes))
        return found[:top]

    def max_workers(self, configs: Sequence[Config], counts: Sequence[int], target: float) -> list[dict[str, Any]]:
        """Per configuration, the most workers whose efficiency is >= target (None if not even the
        smallest count), searched along `counts` and refined by bisection to the next count."""
        out = []
        base = self.base_throughput()
        for config in configs:
            best: int | None = None
            failed: int | None = None
            for n in counts:
                if self.upper_bound(config, n) < target * n * base:
                    self.pruned += 1
                    failed = n
                    break
                if self.point(config, n).efficiency >= target:
                    best = n
                else:
                    failed = n
                    break
            if best is not None and failed is not None and failed - best > 1:
                low, high = best, failed  # low passes, high fails
                while high - low > 1:
                    mid = (low + high) // 2
                    ok = (self.upper_bound(config, mid) >= target * mid * base
                          and self.point(config, mid).efficiency >= target)
                    low, high = (mid, high) if ok else (low, mid)
                best = low
            out.append({"config": config, "max_workers": best,
                        "point": self.point(config, best) if best is not None else None})
        out.sort(key=lambda r: (-(r["max_workers"] or 0), -(r["point"].throughput if r["point"] else 0)))
        return out

    def bandwidth_for(self, configs: Sequence[Config], workers: int, target: float) -> dict[str, Any] | None:
        """The least NIC bandwidth (within 2%) at which some configuration reaches `target` samples/s
        with `workers` workers, or None when none can within 10 Tbit/s."""
        low_bps, high_bps = BANDWIDTH_RANGE_BPS
        best_bps, best_config = high_bps, None
        ranked = self._likely_best_first(configs, workers)  # a low best_bps early prunes the rest
        for config in ranked:
            if self.upper_bound(config, workers, best_bps) < target:
                self.pruned += 1
                continue
            if self.point(config, workers, bandwidth_bps=best_bps).throughput < target:
                continue
            low, high = self._bound_bracket(config, workers, target, low_bps, best_bps), best_bps
            if low == low_bps and self.point(config, workers, bandwidth_bps=low).throughput >= target:
                high = low  # low fails (by the bound, or assumed unless shown); high passes
            while high / low > BANDWIDTH_PRECISION:
                mid = math.sqrt(low * high)
                ok = (self.upper_bound(config, workers, mid) >= target
                      and self.point(config, workers, bandwidth_bps=mid).throughput >= target)
                low, high = (low, mid) if ok else (mid, high)
            if best_config is None or high < best_bps:
                best_bps, best_config = high, config
        if best_config is None:
            return None
        return {"workers": workers, "bandwidth_bps": best_bps, "config": best_config,
                "point": self.point(best_config, workers, bandwidth_bps=best_bps)}

    def _likely_best_first(self, configs: Sequence[Config], workers: int) -> list[Config]:
        """Configurations by their throughput at the cluster's bandwidth where already predicted,
        else by their upper bound there."""
        def key(config: Config) -> float:
            known = self.cache.get((config, workers, self.cluster.bandwidth_bps, self.method,
                                    self.options["iterations"]))
            return known.throughput if known is not None else self.upper_bound(config, workers)
        return sorted(configs, key=lambda c: -key(c))

    def _bound_bracket(self, config: Config, workers: int, target: float, low: float, high: float) -> float:
        """The largest bandwidth (within 1%) at which the upper bound alone says `target` is out of
        reach: the bisection's lower end, found without predicting anything."""
        if self.upper_bound(config, workers, low) >= target:
            return low
        while high / low > 1.01:
            mid = math.sqrt(low * high)
            low, high = (mid, high) if self.upper_bound(config, workers, mid) < target else (low, mid)
        return low

    def smallest_count(self, config: Config, counts: Sequence[int], target: float) -> Point | None:
        """The fewest workers at which `config` reaches `target` samples/s (grid, then bisection)."""
        previous = None
        for n in counts:
            if self.upper_bound(config, n) < target:
                self.pruned += 1
                previous = n
                continue
            if self.point(config, n).throughput >= target:
                if previous is None or n - previous <= 1:
                    return self.point(config, n)
                low, high = previous, n  # low fails, high passes
                while high - low > 1:
                    mid = (low + high) // 2
                    ok = self.upper_bound(config, mid) >= target and self.point(config, mid).throughput >= target
                    low, high = (low, mid) if ok else (mid, high)
                return self.point(config, high)
            previous = n
        return None

    def cheapest(self, configs: Sequence[Config], counts: Sequence[int], target: float | None) -> list[Point]:
        """Configurations ordered by price per hour for `target` samples/s (each at its fewest
        workers), or without a target by price per sample over the whole grid."""
        if target is not None:
            found: list[Point] = []
            for config in self._likely_best_first(configs, counts[-1]):
                # The fewest nodes the bound allows: if more than the cheapest so far, it cannot win
                # (it may still be the runner-up, so the two best stay exact).
                index = next((i for i, n in enumerate(counts) if self.upper_bound(config, n) >= target), None)
                fewest = counts[0] if index == 0 else (counts[index - 1] + 1 if index is not None else None)
                runner_nodes = sorted(p.nodes for p in found)[1] if len(found) > 1 else math.inf
                if fewest is None or config.nodes(fewest, self.gpus) > runner_nodes:
                    self.pruned += 1
                    continue
                point = self.smallest_count(config, counts, target)
                if point is not None:
                    found.append(point)
            found.sort(key=lambda p: (p.nodes, -p.throughput))
            return found
        points = [self.point(c, n) for c in configs for n in counts]
        points.sort(key=lambda p: (p.nodes / p.throughput, -p.throughput))
        return points

    def cost_per_hour(self, point: Point) -> float | None:
        return None if self.price is None else point.nodes * self.price


# ---------------------------------------------------------------------- words


def _pct(a: float, b: float) -> str:
    change = abs(a / b - 1) * 100 if b > 0 else float("inf")
    return f"{change:.1f}%" if change < 10 else f"{change:.0f}%"


def _s(seconds: float) -> str:
    """Seconds with rounding dust (|t| < 1 ns) shown as 0."""
    return format_seconds(0.0 if abs(seconds) < 1e-9 else seconds)


def explain(winner: Point, runner: Point | None, gpus_per_node: int = 1, what: str = "faster") -> str:
    """Why `winner` beats `runner`, in words with numbers (the step's parts and what limits each)."""
    w_label = winner.config.label(gpus_per_node)
    if runner is None:
        return f"{w_label}: the only candidate; {winner.bottleneck}"
    r_label = runner.config.label(gpus_per_node)
    if what == "faster" and abs(winner.throughput - runner.throughput) <= 5e-4 * runner.throughput:
        head = (f"{w_label}: ties with {r_label} ({winner.throughput:,.0f} samples/s at {winner.workers} workers, "
                "within 0.05%; the same groups or the same bottleneck)")
    elif what == "faster":
        head = (f"{w_label}: {_pct(winner.throughput, runner.throughput)} "
                f"{'faster' if winner.throughput >= runner.throughput else 'slower'} than {r_label} "
                f"({winner.throughput:,.0f} vs {runner.throughput:,.0f} samples/s at {winner.workers} workers)")
    else:
        head = f"{w_label} over {r_label}: {what}"
    parts = []
    if abs(winner.step_s - runner.step_s) > 1e-12:
        parts.append(f"step {_s(winner.step_s)} vs {_s(runner.step_s)}")
    parts.append(f"exposed communication {_s(winner.exposed_comm_s)} vs {_s(runner.exposed_comm_s)} per step")
    if max(winner.wait_s, runner.wait_s) > 1e-9:
        parts.append(f"waiting {_s(winner.wait_s)} vs {_s(runner.wait_s)}")
    if winner.nodes != runner.nodes:
        parts.append(f"{winner.nodes} vs {runner.nodes} nodes")
    limit = runner.bottleneck.split(":", 1)[-1].strip() if ":" in runner.bottleneck else runner.bottleneck
    because = f"the runner-up is limited by {runner.limited_by or 'communication'} ({limit})"
    return f"{head}: {', '.join(parts)}; {because}"


# ---------------------------------------------------------------------- the whole advice


@dataclass
class Advice:
    """Every answer `sgdscale advise` prints, and the search's cost."""

    inputs: dict[str, Any]
    answers: dict[str, Any]
    search: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"schema": ADVICE_SCHEMA, "inputs": self.inputs, "answers": self.answers, "search": self.search}


def advise(profile: Profile, cluster: Cluster, comm: CommModel, counts: Sequence[int], *,
           method: str = "coarse", confirm: str | None = None, confirm_top: int = 3, top: int = 3,
           target_efficiency: float | None = None, target_throughput: float | None = None,
           price_per_node_hour: float | None = None, best_bucket: bool = False,
           kinds: Sequence[str] = KINDS, ps_counts: Sequence[int] = DEFAULT_PS_COUNTS,
           bucket_sizes_mib: Sequence[float] | None = None, groupings: Sequence[str] | None = None,
           iterations: int = 100, warmup: int = 10, seed: int = 0, variability: bool = True,
           measured_network: bool = False) -> Advice:
    """Search and answer (see the module docstring); `counts` is the worker grid, ascending."""
    check(counts, target_efficiency, target_throughput, price_per_node_hour, top, confirm, confirm_top,
          measured_network, cluster)
    began = time.perf_counter()
    advisor = Advisor(profile, cluster, comm, method=method, iterations=iterations, warmup=warmup, seed=seed,
                      variability=variability, price_per_node_hour=price_per_node_hour)
    gpus = cluster.gpus_per_node
    configs = candidates(profile, gpus, kinds=kinds, ps_counts=ps_counts,
                         bucket_sizes_mib=bucket_sizes_mib or DEFAULT_BUCKETS_MIB, groupings=groupings)
    counts = sorted(set(counts))
    answers: dict[str, Any] = {}

    def pj(point: Point | None, answer: bool = False) -> dict[str, Any] | None:
        """A point as JSON; an answer's point also re-predicted with the fine method under --confirm."""
        if point is None:
            return None
        data = point.to_json(gpus)
        if answer and confirm == "fine" and point.method != "fine":
            fine = _confirm(advisor, [point])[0]
            data["fine"] = {"throughput": fine.throughput, "efficiency": fine.efficiency,
                            "limited_by": fine.limited_by, "iterations": fine.iterations}
        cost = advisor.cost_per_hour(point)
        if cost is not None:
            data["cost_per_hour"] = cost
            data["cost_per_million_samples"] = cost / (point.throughput * 3600) * 1e6
        return data

    ranking = []
    for n in counts:
        best = advisor.rank(configs, n, max(top, 2))
        if confirm == "fine":
            best = _confirm(advisor, best[:confirm_top]) + best[confirm_top:]
        ranking.append({"workers": n, "ranked": [pj(p) for p in best[:top]],
                        "why": explain(best[0], best[1] if len(best) > 1 else None, gpus)})
    answers["ranking"] = ranking

    if target_efficiency is not None:
        rows = advisor.max_workers(configs, counts, target_efficiency)
        winner, runner = rows[0], (rows[1] if len(rows) > 1 else None)
        why = None
        if winner["point"] is not None:
            if runner is not None and runner["point"] is not None:
                at_n = advisor.point(runner["config"], winner["max_workers"])
                why = explain(winner["point"], at_n, gpus,
                              what=f"efficient to {winner['max_workers']} workers vs {runner['max_workers']}; at "
                                   f"{winner['max_workers']} workers its efficiency is {winner['point'].efficiency:.0%} "
                                   f"vs {at_n.efficiency:.0%}")
            else:
                why = explain(winner["point"], None, gpus)
        answers["max_workers"] = {
            "target_efficiency": target_efficiency, "searched": [counts[0], counts[-1]],
            "max_workers": winner["max_workers"], "best": pj(winner["point"], True), "why": why,
            "per_config": [{"label": r["config"].label(gpus), "max_workers": r["max_workers"],
                            "efficiency": r["point"].efficiency if r["point"] else None} for r in rows],
        }

    if target_throughput is not None:
        per_count = []
        base = advisor.base_throughput()
        for n in counts:
            if n * base < target_throughput:
                continue
            found = advisor.bandwidth_for(configs, n, target_throughput)
            if found is not None:
                per_count.append(found)
        best = min(per_count, key=lambda r: (r["bandwidth_bps"], r["workers"])) if per_count else None
        fewest = min(per_count, key=lambda r: r["workers"]) if per_count else None
        answers["bandwidth"] = {
            "target_throughput": target_throughput,
            "reachable": best is not None,
            "why_not": None if best else (
                f"{counts[-1]} workers reach at most {counts[-1] * base:,.0f} samples/s even with no communication; "
                f"add workers (--workers up to {math.ceil(target_throughput / base)} or more)"
                if counts[-1] * base < target_throughput else "no configuration reaches it within 10 Tbit/s"),
            "least_bandwidth": None if best is None else {
                "workers": best["workers"], "bandwidth_bps": best["bandwidth_bps"], "point": pj(best["point"], True)},
            "fewest_workers": None if fewest is None else {
                "workers": fewest["workers"], "bandwidth_bps": fewest["bandwidth_bps"], "point": pj(fewest["point"], True)},
            "per_workers": [{"workers": r["workers"], "bandwidth_bps": r["bandwidth_bps"], "point": pj(r["point"])}
                            for r in per_count],
        }

    if price_per_node_hour is not None:
        order = advisor.cheapest(configs, counts, target_throughput)
        answers["cheapest"] = {
            "price_per_node_hour": price_per_node_hour, "target_throughput": target_throughput,
            "best": pj(order[0], True) if order else None,
            "runner_up": pj(order[1]) if len(order) > 1 else None,
            "why": (_explain_cost(order[0], order[1] if len(order) > 1 else None, advisor, gpus, target_throughput)
                    if order else None),
            "why_not": None if order else f"no configuration reaches {target_throughput:,.0f} samples/s with up to "
                                          f"{counts[-1]} workers; add workers or bandwidth",
        }

    if best_bucket:
        sizes = bucket_sizes_mib or BUCKET_QUESTION_MIB
        rows = []
        schemes = ("flat", "hierarchical", "tree", "auto") if gpus > 1 else ("flat",)
        for n in counts:
            options = [Config("allreduce", "buckets", s, allreduce=sc) for s in sizes for sc in schemes]
            merged = [Config("allreduce", "mg-wfbp", allreduce=sc) for sc in schemes]
            pts = sorted((advisor.point(c, n) for c in options), key=lambda p: -p.throughput)
            mg = max((advisor.point(c, n) for c in merged), key=lambda p: p.throughput)
            default = next((p for p in pts if p.config.bucket_mib == 25.0), None)
            rows.append({"workers": n, "best": pj(pts[0]), "bucket_mib": pts[0].config.bucket_mib,
                         "vs_default_25mib": (pts[0].throughput / default.throughput - 1) if default else None,
                         "mg_wfbp": pj(mg), "why": explain(pts[0], pts[1] if len(pts) > 1 else None, gpus),
                         "sizes": [{"bucket_mib": p.config.bucket_mib, "allreduce": p.config.allreduce,
                                    "throughput": p.throughput} for p in pts]})
        answers["bucket"] = rows

    wall_s = time.perf_counter() - began
    search = {"configurations": len(configs), "worker_counts": len(counts), "predictions": advisor.predictions,
              "pruned_by_bound": advisor.pruned, "predict_s": advisor.predict_s, "wall_s": wall_s,
              "method": method, "confirm": confirm}
    inputs = {"model": profile.model, "batch_size": profile.batch_size, "gradient_bytes": profile.gradient_bytes,
              "bandwidth_bps": cluster.bandwidth_bps, "latency_s": cluster.latency_s,
              "gpus_per_node": gpus, "intra_bandwidth_bps": cluster.intra_bandwidth_bps,
              "worker_counts": counts, "single_device_throughput": advisor.base_throughput(),
              "iterations": iterations, "seed": seed, "variability": variability}
    return Advice(inputs=inputs, answers=answers, search=search)


def _explain_cost(best: Point, runner: Point | None, advisor: Advisor, gpus: int, target: float | None) -> str:
    price = advisor.price or 0.0
    if runner is None:
        return explain(best, None, gpus)
    per_million = lambda p: p.nodes * price / (p.throughput * 3600) * 1e6  # noqa: E731
    what = (f"${best.nodes * price:,.2f}/h ({best.nodes} nodes, {best.workers} workers, {best.throughput:,.0f} "
            f"samples/s) vs ${runner.nodes * price:,.2f}/h ({runner.nodes} nodes, {runner.workers} workers, "
            f"{runner.throughput:,.0f} samples/s); ${per_million(best):,.3f} vs ${per_million(runner):,.3f} "
            "per million samples")
    return explain(best, runner, gpus, what=what)


def _confirm(advisor: Advisor, points: list[Point]) -> list[Point]:
    """Re-predict the top few with the fine method and re-rank them by its throughput. Parameter
    servers in the discrete-event engine cost about 2-3 us per message, so their iterations are cut to
    stay near `FINE_MESSAGE_BUDGET` messages (the point records the iterations used)."""
    from sgdscale.grouping import group_gradients

    confirmed = []
    for p in points:
        iterations = advisor.options["iterations"]
        if p.config.kind != "allreduce":
            groups = len(group_gradients(advisor.profile, p.config.strategy(advisor.comm.algorithm),
                                         advisor.comm, p.workers))
            per_step = 2 * groups * p.workers * (p.config.ps_count if p.config.ps_placement == "dedicated" else 1)
            affordable = FINE_MESSAGE_BUDGET // max(per_step, 1) - advisor.options["warmup"]
            iterations = max(5, min(iterations, affordable))
        confirmed.append(advisor.point(p.config, p.workers, bandwidth_bps=p.bandwidth_bps, method="fine",
                                       iterations=iterations))
    confirmed.sort(key=lambda p: -p.throughput)
    return confirmed


def check(counts: Sequence[int], target_efficiency: float | None, target_throughput: float | None,
          price: float | None, top: int, confirm: str | None, confirm_top: int, measured_network: bool,
          cluster: Cluster) -> None:
    """Every mistake in the questions, as one UserError, before any work."""
    if not counts:
        raise UserError("give at least one worker count (e.g. --workers 1-1024:x2)")
    if target_efficiency is not None and not 0 < target_efficiency <= 1:
        raise UserError(f"--target-efficiency must be in (0, 1], got {target_efficiency:g} (e.g. 0.8 for 80%)")
    if target_throughput is not None and not target_throughput > 0:
        raise UserError(f"--target-throughput must be positive samples/s, got {target_throughput:g} (e.g. 2000/s)")
    if price is not None and not price > 0:
        raise UserError(f"--price-per-node-hour must be positive, got {price:g} (e.g. 3.2)")
    if top < 1:
        raise UserError(f"--top must be at least 1, got {top}")
    if confirm not in (None, "fine"):
        raise UserError(f"--confirm takes 'fine' (re-predict the top few with the fine method), got '{confirm}'")
    if confirm_top < 1:
        raise UserError(f"--confirm-top must be at least 1, got {confirm_top}")
    if target_throughput is not None and measured_network:
        raise UserError("--target-throughput searches a nominal NIC bandwidth, which a measured --network fixes; "
                        "drop --network and give --latency")
    if cluster.per_worker:
        raise UserError("advise searches worker counts, and per-worker --compute-scale/--slow-link fix one; "
                        "use `sgdscale predict` for one heterogeneous cluster")


def parse_throughput(text: str) -> float:
    """'2000/s', '2000', '2k/s', '2000 samples/s' -> samples/s."""
    import re

    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmM]?)\s*(?:samples)?\s*(?:/\s*s)?\s*",
                         str(text))
    if not match:
        raise UserError(f"cannot read --target-throughput '{text}'; give samples per second, e.g. 2000/s or 2k/s")
    value = float(match.group(1)) * {"": 1, "k": 1e3, "K": 1e3, "m": 1e6, "M": 1e6}[match.group(2)]
    return inputs.check(value, "--target-throughput", inputs.SAMPLES_PER_S, "e.g. 2000/s", shown=text)


def parse_list(text: str | None, what: str, cast=float, example: str = "") -> list | None:
    if text is None:
        return None
    try:
        values = [cast(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise UserError(f"cannot read {what} '{text}' (e.g. {example})") from None
    if not values:
        raise UserError(f"{what} is empty (e.g. {example})")
    return values


def _fine(point: dict[str, Any]) -> str:
    fine = point.get("fine")
    if not fine:
        return ""
    return (f"; fine method: {fine['throughput']:,.0f} samples/s, efficiency {fine['efficiency']:.0%}, limited by "
            f"{fine['limited_by']} ({fine['iterations']} steps)")


def summary_lines(advice: Advice) -> Iterable[str]:
    """The answers as sentences (tables are in sgdscale.commands.advise)."""
    a = advice.answers
    if "max_workers" in a:
        m = a["max_workers"]
        if m["max_workers"] is None:
            yield (f"Most workers at >= {m['target_efficiency']:.0%} efficiency: none in "
                   f"{m['searched'][0]}-{m['searched'][1]} workers reach it")
        else:
            b = m["best"]
            edge = (" (the largest count searched: give larger --workers to look further)"
                    if m["max_workers"] == m["searched"][1] else "")
            yield (f"Most workers at >= {m['target_efficiency']:.0%} efficiency: {m['max_workers']} workers with "
                   f"{b['label']} ({b['throughput']:,.0f} samples/s, efficiency {b['efficiency']:.0%}, limited by "
                   f"{b['limited_by']}{_fine(b)}){edge}")
            yield f"  why: {m['why']}"
    if "bandwidth" in a:
        bw = a["bandwidth"]
        if not bw["reachable"]:
            yield f"Bandwidth for {bw['target_throughput']:,.0f} samples/s: not reachable: {bw['why_not']}"
        else:
            for key, title in (("least_bandwidth", "least bandwidth"), ("fewest_workers", "fewest workers")):
                r = bw[key]
                p = r["point"]
                yield (f"Bandwidth for {bw['target_throughput']:,.0f} samples/s ({title}): "
                       f"{format_bandwidth(r['bandwidth_bps'])} per NIC (within 2%) with {r['workers']} workers, {p['label']} "
                       f"({p['throughput']:,.0f} samples/s, efficiency {p['efficiency']:.0%}, limited by "
                       f"{p['limited_by']}{_fine(p)})")
    if "cheapest" in a:
        c = a["cheapest"]
        if c["best"] is None:
            yield f"Cheapest: {c['why_not']}"
        else:
            b = c["best"]
            goal = (f"for {c['target_throughput']:,.0f} samples/s" if c["target_throughput"] is not None
                    else "per sample")
            yield (f"Cheapest {goal} at ${c['price_per_node_hour']:g} per node-hour: {b['workers']} workers on "
                   f"{b['nodes']} nodes, {b['label']}: ${b['cost_per_hour']:,.2f}/h, {b['throughput']:,.0f} samples/s "
                   f"(efficiency {b['efficiency']:.0%}, ${b['cost_per_million_samples']:,.3f} per million samples, "
                   f"limited by {b['limited_by']}{_fine(b)})")
            yield f"  why: {c['why']}"
