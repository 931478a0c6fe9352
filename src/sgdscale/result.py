"""What a predictor returns (`Outcome`) and what `sgdscale predict` reports (`Prediction`).

Both methods (fine-grained simulation, coarse-grained model) return an `Outcome` for one worker
count; `predict.py` turns outcomes into `Result`s by adding speedup and efficiency against the
same method's one-worker outcome, and collects them into a `Prediction` (`sgdscale.prediction/1`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PREDICTION_SCHEMA = "sgdscale.prediction/1"


@dataclass(frozen=True)
class Breakdown:
    """Mean time per step of one worker, split into what it was doing.

    compute_s: forward, backward, optimizer, data. exposed_comm_s: communication not hidden behind
    compute. wait_s: idle at a barrier or for a busy server (other workers, stragglers, queueing).
    """

    compute_s: float
    exposed_comm_s: float
    wait_s: float


@dataclass(frozen=True)
class TimelineSpec:
    """What part of a fine simulation to keep as a timeline. `timeline=True` keeps the default (a
    few steady-state iterations of a few workers: enough to look at, small to write); a side-by-side
    comparison with a real run (report/timeline.py) asks for every worker and as many iterations as
    were measured."""

    iterations: int = 3
    all_workers: bool = False
    max_events: int | None = None  # None: the simulator's own cap


def timeline_spec(timeline: bool | TimelineSpec) -> TimelineSpec | None:
    """None for no timeline, the default spec for True, else the spec given."""
    if isinstance(timeline, TimelineSpec):
        return timeline
    return TimelineSpec() if timeline else None


@dataclass(frozen=True)
class TraceEvent:
    """One interval of a predicted timeline (Chrome trace 'X' event, in seconds)."""

    name: str
    start_s: float
    duration_s: float
    process: str  # e.g. "worker 0", "server 1"
    thread: str  # e.g. "compute", "comm", "nic out"
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """One method's answer for one cluster size."""

    iteration_s: np.ndarray  # per-step times of a worker (steady state, warm-up excluded)
    throughput: float  # samples/s over the whole cluster
    breakdown: Breakdown
    bottleneck: str  # what limits throughput, in words a user understands
    utilization: dict[str, float] = field(default_factory=dict)  # resource -> busy fraction
    timeline: list[TraceEvent] | None = None
    levels: dict[str, float] = field(default_factory=dict)  # network level -> busy seconds per step
    limited_by: str = ""  # "compute", "stragglers" or a level of `levels` (sgdscale.bottleneck.describe)


@dataclass
class Result:
    workers: int
    method: str  # "fine" | "coarse"
    throughput: float
    iteration_s: dict[str, float]  # mean, p50, p95
    speedup: float
    efficiency: float
    breakdown: Breakdown
    bottleneck: str
    utilization: dict[str, float] = field(default_factory=dict)
    levels: dict[str, float] = field(default_factory=dict)  # level -> busy seconds per step
    limited_by: str = ""  # compute, stragglers, NIC, intra-node link, server NIC, server update
    predict_time_s: float = 0.0  # how long the predictor took
    # How far held-out runs fell from such predictions (sgdscale.heldout_ranges): {low, high
    # samples/s, coverage, cases, ...}, or {reason} where the held-out sets did not cover the case
    likely_range: dict[str, Any] | None = None
    timeline: list[TraceEvent] | None = field(default=None, repr=False)

    @classmethod
    def from_outcome(cls, workers: int, method: str, outcome: Outcome, single_worker_throughput: float,
                     predict_time_s: float = 0.0) -> Result:
        steps = np.asarray(outcome.iteration_s, dtype=float)
        speedup = outcome.throughput / single_worker_throughput if single_worker_throughput > 0 else float("nan")
        return cls(
            workers=workers,
            method=method,
            throughput=float(outcome.throughput),
            iteration_s={
                "mean": float(steps.mean()),
                "p50": float(np.percentile(steps, 50)),
                "p95": float(np.percentile(steps, 95)),
            },
            speedup=float(speedup),
            efficiency=float(speedup / workers),
            breakdown=outcome.breakdown,
            bottleneck=outcome.bottleneck,
            utilization=dict(outcome.utilization),
            levels={"compute": float(outcome.breakdown.compute_s), **outcome.levels},
            limited_by=outcome.limited_by,
            predict_time_s=predict_time_s,
            timeline=outcome.timeline,
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("timeline")
        return data


DISAGREEMENT = 0.10  # fine and coarse further apart than this get a remark


def disagreements(results: list[Result], threshold: float = DISAGREEMENT) -> list[dict[str, Any]]:
    """Worker counts where fine and coarse throughputs differ by more than `threshold` (the larger
    over the smaller, minus 1), each with a remark saying what that means."""
    out = []
    by_count: dict[int, dict[str, Result]] = {}
    for r in results:
        by_count.setdefault(r.workers, {})[r.method] = r
    for workers, pair in sorted(by_count.items()):
        if "fine" not in pair or "coarse" not in pair:
            continue
        fine, coarse = pair["fine"].throughput, pair["coarse"].throughput
        low, high = min(fine, coarse), max(fine, coarse)
        if not low > 0 or not np.isfinite(high):
            continue
        gap = high / low - 1.0
        if gap <= threshold:
            continue
        out.append({
            "workers": workers, "fine": fine, "coarse": coarse, "difference": gap,
            "remark": (f"at {workers} workers fine and coarse differ by {gap:.0%} ({fine:,.1f} vs {coarse:,.1f} "
                       "samples/s): the methods simplify different things (fine simulates every message with "
                       "per-iteration variability and shared links; coarse adds phases with overlap heuristics "
                       "and queueing formulas), so here the answer depends on those simplifications; read the "
                       "two as a range and check with a measured network (--network) or real runs "
                       "(sgdscale validate)"),
        })
    return out


# Where a server's link limits async PS, fine keeps it 76-80% busy, and was 12-20% too slow on the runs
# that filled it more: the kept one-shard runs on the emulated cluster kept it 76-96% busy each way
# (benchmarks/results/push_window.md, shard_flows-*.md); over every kept async PS run, up to 99%
# (fine's busy fraction times the run's speed over fine's: benchmarks/results/server_link_ceiling.md). What the
# runs do that fine does not is not known, so a prediction does not move its number; it says what the
# cluster would do with that link busy all the time (this fill), the most to expect
# (benchmarks/server_link_ceiling.py: none of the 461 kept runs of the 153 async PS cases where it is
# stated above it; at 0.96, the busiest the push_window runs reached, 8 would be).
SERVER_LINK_CEILING_FILL = 1.0


def server_link_ceilings(results: list[Result], strategy_kind: str,
                         fill: float = SERVER_LINK_CEILING_FILL) -> list[dict[str, Any]]:
    """Per worker count where a server NIC limits async PS (the fine result where there is one): the
    throughput at which its busiest server NIC would be `fill` busy, with a remark saying so."""
    from sgdscale.bottleneck import LEVEL_SERVER_NIC, level_of  # it imports this module

    if strategy_kind != "ps-async":
        return []
    chosen: dict[int, Result] = {}
    for r in results:
        if r.limited_by == LEVEL_SERVER_NIC and (r.workers not in chosen or r.method == "fine"):
            chosen[r.workers] = r
    out = []
    for workers, r in sorted(chosen.items()):
        busy = max((v for k, v in r.utilization.items() if level_of(k) == LEVEL_SERVER_NIC), default=0.0)
        if not 0 < busy < fill:
            continue
        ceiling = r.throughput * fill / busy
        out.append({
            "workers": workers, "method": r.method, "server_nic_busy": busy, "fill": fill, "throughput": ceiling,
            "remark": (f"at {workers} workers a server's NIC limits async PS and {r.method} keeps it {busy:.0%} "
                       f"busy, where real async runs have kept such a link up to 99% busy; {fill:.0%} busy it "
                       f"would train {ceiling:,.1f} samples/s: take that as the most to expect (README, "
                       "'The same cases again')"),
        })
    return out


@dataclass
class Prediction:
    inputs: dict[str, Any]
    results: list[Result]

    def disagreements(self) -> list[dict[str, Any]]:
        return disagreements(self.results)

    def server_link_ceilings(self) -> list[dict[str, Any]]:
        return server_link_ceilings(self.results, self.inputs.get("strategy", {}).get("kind", ""))

    def to_json(self) -> dict[str, Any]:
        return {"schema": PREDICTION_SCHEMA, "inputs": self.inputs, "results": [r.to_json() for r in self.results],
                "disagreements": self.disagreements(), "server_link_ceilings": self.server_link_ceilings()}
