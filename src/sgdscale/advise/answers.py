"""The answers of `sgdscale advise` and why the winner wins, in words with numbers."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sgdscale.advise.advisor import Advisor
from sgdscale.advise.space import (
    ADVICE_SCHEMA, BUCKET_QUESTION_MIB, DEFAULT_BUCKETS_MIB, DEFAULT_PS_COUNTS, FINE_MESSAGE_BUDGET, Config, Point,
    candidates,
)
from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.errors import UserError
from sgdscale.profile import Profile
from sgdscale.strategy import KINDS
from sgdscale.units import format_seconds


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
           measured_network: bool = False, range_source: str | None = None) -> Advice:
    """Search and answer (see the module docstring); `counts` is the worker grid, ascending.
    `range_source` (`sgdscale.heldout_ranges.network_source`) gives every answer's point the 80%
    range `predict` states for it [default: measured with a measured network, else nominal]."""
    check(counts, target_efficiency, target_throughput, price_per_node_hour, top, confirm, confirm_top,
          measured_network, cluster)
    began = time.perf_counter()
    advisor = Advisor(profile, cluster, comm, method=method, iterations=iterations, warmup=warmup, seed=seed,
                      variability=variability, price_per_node_hour=price_per_node_hour)
    gpus = cluster.gpus_per_node
    configs = candidates(profile, gpus, kinds=kinds, ps_counts=ps_counts,
                         bucket_sizes_mib=bucket_sizes_mib or DEFAULT_BUCKETS_MIB, groupings=groupings)
    counts = sorted(set(counts))
    source = range_source or ("measured" if measured_network else "nominal")
    answers: dict[str, Any] = {}

    def pj(point: Point | None, answer: bool = False) -> dict[str, Any] | None:
        """A point as JSON; an answer's point also re-predicted with the fine method under --confirm."""
        if point is None:
            return None
        data = point.to_json(gpus)
        data["likely_range"] = advisor.likely_range(point, source)
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
              "step_s": profile.compute_s, "optimizer_s": profile.step.optimizer_s,
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
