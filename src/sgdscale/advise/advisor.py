"""Predict candidates on demand, cache every prediction, and prune what a cheap bound rules out
(see `sgdscale.advise`)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

from sgdscale.advise.space import BANDWIDTH_PRECISION, BANDWIDTH_RANGE_BPS, Config, Point
from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.topology import Topology
from sgdscale.errors import UserError
from sgdscale.predict import run_method
from sgdscale.profile import Profile
from sgdscale.strategy import Strategy


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
        return cluster, CommModel.from_link(cluster.payload_bps, self.cluster.latency_s, self.comm.algorithm)

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

    def likely_range(self, point: Point, source: str) -> dict[str, Any]:
        """The 80% range `predict` states for this point (`sgdscale.heldout_ranges`), or why none."""
        from sgdscale.heldout_ranges import likely_range
        from sgdscale.predict import describe_inputs

        cluster, comm = self._comm_at(point.bandwidth_bps)
        cluster = dataclasses.replace(cluster, workers=point.workers, ps_count=point.config.ps_count)
        inputs = describe_inputs(self.profile, cluster, point.config.strategy(self.comm.algorithm), comm,
                                 [point.workers], [point.method], **self.options)
        return likely_range(inputs, point.workers, point.method, point.throughput, source)

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
