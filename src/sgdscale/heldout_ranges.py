"""How far real runs fell from predictions like this one: ranges from the held-out record.

Every held-out validation set (benchmarks/grids/heldoutN.json, committed before its first run) was
predicted by the model as it stood, then measured. The ratio measured / predicted throughput of
each of its cases is an out-of-sample error, so the spread of those ratios says how far a new
prediction of the same kind may be off. Sets predicted before a later change to the nominal or
budget path (nominal rates counting framing; the budget's interference) have those predictions
scaled by the change's own effect on each case (`with_factors`). A bin is one (strategy, method, network source, kind):
source `measured` (a netbench network file), `nominal` (bandwidth and latency only) or `budget`
(nominal with --cpu-per-node); kind `real` (real training) or `replay` (a profile replayed with
sleeps). Its plain range is the 10th..90th percentile of the ratios; a bin of fewer than MIN_CASES
cases pools both kinds. Cases of one set err together, so the plain ranges cover fewer than 80% of
a new set's cases; the stated range (`low`, `high`) is the plain one stretched on a log scale by
the factor per source under which, cross-validated by whole sets, 80% were inside.

The ranges hold for what the sets covered (CPU training on an emulated cluster of identical
nodes, one device each: worker counts, link rates and server shard counts in `envelope`, default
groupings); outside it a prediction gets no range and says why. `benchmarks/heldout_ranges.py` makes the data file from
the kept results and checks how often later sets fell inside.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

SCHEMA = "sgdscale.heldout_ranges/1"
DATA_FILE = Path(__file__).parent / "data" / "heldout_ranges.json"
QUANTILES = (0.10, 0.90)  # an 80% range
MIN_CASES = 20
SOURCES = ("measured", "nominal", "budget")
KINDS = ("real", "replay")
STRATEGIES = ("allreduce", "ps-sync", "ps-async")
METHODS = ("fine", "coarse")


def variant(method: str, source: str) -> str:
    """The key a validation case stores this prediction under (`fine`, `coarse-nominal`, ...)."""
    return method if source == "measured" else f"{method}-{source}"


def case_ratios(case: dict[str, Any]) -> dict[tuple[str, str], float]:
    """(method, source) -> measured / predicted throughput of one validation case."""
    measured = case.get("measured_throughput")
    out = {}
    for method in METHODS:
        for source in SOURCES:
            predicted = case.get("predicted_throughput", {}).get(variant(method, source))
            if measured and predicted and predicted > 0:
                out[(method, source)] = measured / predicted
    return out


def plain_bins(cases: Iterable[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    """(strategy, method, source, kind) -> the plain percentile range of the cases' ratios."""
    ratios: dict[tuple[str, str, str, str], list[float]] = {}
    for case in cases:
        for (method, source), ratio in case_ratios(case).items():
            ratios.setdefault((case["strategy"], method, source, case["kind"]), []).append(ratio)
    bins = {}
    for strategy in STRATEGIES:
        for method in METHODS:
            for source in SOURCES:
                for kind in KINDS:
                    own = ratios.get((strategy, method, source, kind), [])
                    pooled = len(own) < MIN_CASES
                    values = own if not pooled else [r for k in KINDS for r in ratios.get((strategy, method, source, k), [])]
                    if len(values) < MIN_CASES:
                        continue
                    low, median, high = np.quantile(values, (QUANTILES[0], 0.5, QUANTILES[1]))
                    bins[(strategy, method, source, kind)] = {
                        "strategy": strategy, "method": method, "source": source, "kind": kind,
                        "cases": len(values), "pooled_kinds": pooled,
                        "plain_low": float(low), "median": float(median), "plain_high": float(high)}
    return bins


def widened(entry: dict[str, Any], factor: float) -> tuple[float, float]:
    """A plain range stretched `factor` times on a log scale around its median."""
    median = entry["median"]
    return median * (entry["plain_low"] / median) ** factor, median * (entry["plain_high"] / median) ** factor


WIDENING_GRID = tuple(round(1.0 + 0.05 * i, 2) for i in range(61))  # 1.0 .. 4.0


def leave_one_set_out(sets: dict[int, Sequence[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per network source: the smallest widening under which, with each set's ranges made from the
    other sets only, at least the nominal share of each set's cases lay inside (pooled over sets).

    Cases of one set err together (one cluster, one day's machine), so the plain percentiles of
    cases from many sets are too narrow for a new set; cross-validating by whole sets says by how
    much."""
    target = QUANTILES[1] - QUANTILES[0]
    held: dict[str, list[tuple[float, dict[str, Any]]]] = {source: [] for source in SOURCES}
    for number, cases in sets.items():
        bins = plain_bins(c for other, rest in sets.items() if other != number for c in rest)
        for case in cases:
            for (method, source), ratio in case_ratios(case).items():
                entry = bins.get((case["strategy"], method, source, case["kind"]))
                if entry is not None:
                    held[source].append((ratio, entry))
    out = {}
    for source, items in held.items():
        if not items:
            continue
        for factor in WIDENING_GRID:
            inside = sum(low <= ratio <= high for ratio, entry in items for low, high in [widened(entry, factor)])
            if inside / len(items) >= target:
                break
        plain = sum(e["plain_low"] <= r <= e["plain_high"] for r, e in items) / len(items)
        out[source] = {"factor": factor, "scored": len(items), "plain_inside": plain,
                       "inside": inside / len(items)}
    return out


def merged_factors(files) -> dict[str, dict[str, dict[str, float]]]:
    """Per set, case and variant, the product of every file's factor (each file: set -> case -> variant)."""
    merged: dict[str, dict[str, dict[str, float]]] = {}
    for sets in files:
        for number, cases in sets.items():
            for key, variants in cases.items():
                into = merged.setdefault(number, {}).setdefault(key, {})
                for variant, factor in variants.items():
                    into[variant] = into.get(variant, 1.0) * factor
    return merged


def with_factors(sets: dict[int, Sequence[dict[str, Any]]],
                 factors: dict[str, dict[str, dict[str, float]]]) -> dict[int, list[dict[str, Any]]]:
    """The sets with each named case's recorded predictions times its factor per variant (`merged_factors`):
    a later change's own effect on sets predicted before it (benchmarks/link_payload.py: framing;
    benchmarks/budget_interference.py: the budget's interference), the rest of the model each set was
    held out for unchanged."""
    out = {}
    for number, cases in sets.items():
        out[number] = []
        for case in cases:
            scale = factors.get(str(number), {}).get(case["key"], {})
            predicted = {v: t * scale.get(v, 1.0) for v, t in case.get("predicted_throughput", {}).items()}
            out[number].append({**case, "predicted_throughput": predicted})
    return out


def build(sets: dict[int, Sequence[dict[str, Any]]], generated_by: str,
          factor_files: Sequence[str] = ()) -> dict[str, Any]:
    """The data file's content from the cases of each held-out set (set number -> cases): each
    bin's plain percentiles, and `low`/`high` widened by its source's leave-one-set-out factor.
    `factor_files` names the factor files already applied to `sets` (`with_factors`), for the record."""
    cases = [c for number in sorted(sets) for c in sets[number]]
    widening = leave_one_set_out(sets)
    bins = []
    for entry in plain_bins(cases).values():
        low, high = widened(entry, widening.get(entry["source"], {}).get("factor", 1.0))
        bins.append({**entry, "low": low, "high": high})
    return {
        "schema": SCHEMA,
        "generated_by": generated_by,
        "factor_files": list(factor_files),
        "sets": sorted(sets),
        "quantiles": list(QUANTILES),
        "min_cases": MIN_CASES,
        "widening": widening,
        "envelope": {
            # Per strategy: all-reduce ran 16 workers where no parameter server ran more than 8.
            "workers": {strategy: [min(c["workers"] for c in own), max(c["workers"] for c in own)]
                        for strategy in STRATEGIES if (own := [c for c in cases if c["strategy"] == strategy])},
            "bandwidth_bps": [min(c["bandwidth_bps"] for c in cases), max(c["bandwidth_bps"] for c in cases)],
            "ps_count": sorted({c.get("ps_count", 1) or 1 for c in cases if c["strategy"] != "allreduce"}),
        },
        "bins": bins,
    }


@dataclass(frozen=True)
class Ranges:
    """The data file, looked up by bin."""

    data: dict[str, Any]

    @classmethod
    def load(cls, path: Path = DATA_FILE) -> Ranges:
        data = json.loads(Path(path).read_text())
        if data.get("schema") != SCHEMA:
            raise ValueError(f"{path}: not a {SCHEMA} file")
        return cls(data)

    def bin(self, strategy: str, method: str, source: str, kind: str = "real") -> dict[str, Any] | None:
        for entry in self.data["bins"]:
            if (entry["strategy"], entry["method"], entry["source"], entry["kind"]) == (strategy, method, source, kind):
                return entry
        return None

    def outside(self, inputs: dict[str, Any], workers: int) -> str | None:
        """Why a prediction lies outside what the held-out sets covered, or None."""
        envelope = self.data["envelope"]
        cluster, strategy, profile = inputs["cluster"], inputs["strategy"], inputs["profile"]
        low_b, high_b = envelope["bandwidth_bps"]
        default_grouping = "buckets" if strategy["kind"] == "allreduce" else "per-tensor"
        if strategy["kind"] not in envelope["workers"]:
            return f"strategy {strategy['kind']} (held-out sets ran {', '.join(envelope['workers'])})"
        low_w, high_w = envelope["workers"][strategy["kind"]]
        if not low_w <= workers <= high_w:
            what = "all-reduce" if strategy["kind"] == "allreduce" else "parameter-server"
            return f"{workers} worker{'s' if workers != 1 else ''} (held-out {what} sets ran {low_w}-{high_w})"
        if not low_b * 0.999 <= cluster["bandwidth_bps"] <= high_b * 1.001:
            return (f"a {cluster['bandwidth_bps'] / 1e6:,.0f} Mbit/s link (held-out sets ran "
                    f"{low_b / 1e6:,.0f}-{high_b / 1e6:,.0f} Mbit/s)")
        if not str(profile.get("device", "cpu")).startswith("cpu"):
            return "a GPU profile (held-out sets trained on CPUs)"
        if profile.get("calibration"):
            return "a profile scaled to another device's speed (held-out sets used profiles as measured)"
        if cluster.get("gpus_per_node", 1) > 1:
            return "multi-device nodes (held-out sets ran one device per node)"
        if cluster.get("compute_scale") or cluster.get("slow_links"):
            return "slow workers or links (held-out sets ran identical nodes)"
        if strategy["kind"] != "allreduce" and cluster.get("ps_count", 1) not in envelope["ps_count"]:
            return f"{cluster['ps_count']} server shards (held-out sets ran {envelope['ps_count']})"
        if strategy.get("grouping") != default_grouping:
            return f"grouping {strategy.get('grouping')} (held-out sets ran {default_grouping})"
        if strategy.get("allreduce", "flat") != "flat" or strategy.get("ps_placement", "dedicated") != "dedicated":
            return "a hierarchical all-reduce or colocated servers (held-out sets ran neither)"
        return None


def describe_sets(numbers: Sequence[int]) -> str:
    """Set numbers as runs of consecutive ones: [18, 19, 20, 22] -> "18-20, 22"."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


@lru_cache(maxsize=1)
def shipped() -> Ranges:
    return Ranges.load()


SOURCE_WORDS = {"measured": "a measured network file", "nominal": "nominal bandwidth and latency",
                "budget": "nominal figures with the nodes' CPU budget"}


def network_source(network_file: str | None, cpu_per_node: float | None) -> str:
    """Which held-out predictions a prediction resembles: from a measured network file, from a
    nominal link with a CPU budget, or from a nominal link alone."""
    if network_file:
        return "measured"
    return "budget" if cpu_per_node is not None else "nominal"


def likely_range(inputs: dict[str, Any], workers: int, method: str, throughput: float, source: str,
                 ranges: Ranges | None = None) -> dict[str, Any]:
    """The range of a result: {low, high (samples/s), cases, sets, ...} or {reason} where none applies."""
    ranges = ranges or shipped()
    reason = ranges.outside(inputs, workers)
    entry = None if reason else ranges.bin(inputs["strategy"]["kind"], method, source)
    if entry is None:
        return {"reason": reason or f"too few held-out cases predicted from a {source} network"}
    return {"low": throughput * entry["low"], "high": throughput * entry["high"],
            "coverage": QUANTILES[1] - QUANTILES[0], "cases": entry["cases"], "source": source,
            "kinds": "real and replay" if entry["pooled_kinds"] else entry["kind"],
            "sets": describe_sets(ranges.data["sets"])}


def median_bias_note(method: str = "fine", ranges: Ranges | None = None) -> str:
    """How far real runs fell from `method`'s predictions in the median, per network source and
    strategy, in words (real-compute cases): the bias a nominal prediction carries, from the data."""
    ranges = ranges or shipped()
    parts = []
    for source in ("nominal", "budget", "measured"):
        medians = [entry["median"] for kind in STRATEGIES if (entry := ranges.bin(kind, method, source, "real"))]
        if len(medians) == len(STRATEGIES):
            parts.append(f"{'/'.join(f'{m:.2f}' for m in medians)} from {SOURCE_WORDS[source]}")
    return (f"in held-out validation (sets {describe_sets(ranges.data['sets'])}, real compute) runs measured, in the median, these "
            f"multiples of the {method} method's prediction (all-reduce/sync PS/async PS): {'; '.join(parts)}")


def attach(prediction, source: str, ranges: Ranges | None = None) -> None:
    """Give every result of `prediction` its `likely_range`."""
    for result in prediction.results:
        result.likely_range = likely_range(prediction.inputs, result.workers, result.method, result.throughput,
                                           source, ranges)


def coverage(ranges: Ranges, cases: Iterable[dict[str, Any]], plain: bool = False) -> list[dict[str, Any]]:
    """For later held-out cases: per (case, method, source) whether its measured median lay inside
    the range the predictor states (`plain`: the unwidened percentiles; None where none applies)."""
    rows = []
    for case in cases:
        for (method, source), ratio in case_ratios(case).items():
            entry = ranges.bin(case["strategy"], method, source, case["kind"])
            low, high = (None, None) if entry is None else (
                (entry["plain_low"], entry["plain_high"]) if plain else (entry["low"], entry["high"]))
            rows.append({"key": case["key"], "strategy": case["strategy"], "kind": case["kind"], "method": method,
                         "source": source, "ratio": ratio, "inside": None if entry is None else bool(low <= ratio <= high),
                         "low": low, "high": high})
    return rows
