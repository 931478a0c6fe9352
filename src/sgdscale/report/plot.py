"""PNG plots of predictions and of prediction-vs-measurement validation (matplotlib, Agg backend)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sgdscale.jsonio import atomic_output
from sgdscale.result import Prediction
from sgdscale.units import format_bandwidth, format_seconds

_METHOD_STYLE = {"fine": {"marker": "o", "color": "tab:blue"}, "coarse": {"marker": "s", "color": "tab:orange"}}
_STRATEGY_MARKERS = {"allreduce": "o", "ps-sync": "s", "ps-async": "^"}
_METHOD_COLORS = {"fine": "tab:blue", "coarse": "tab:orange"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | os.PathLike[str]) -> None:
    """Render through `atomic_output`: never a half-written PNG."""
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


def _title(inputs: dict[str, Any]) -> str:
    profile = inputs.get("profile", {}) or {}
    cluster = inputs.get("cluster", {}) or {}
    strategy = inputs.get("strategy", {}) or {}
    parts = []
    model = profile.get("model") or profile.get("source")
    if model:
        batch = profile.get("batch_size")
        parts.append(f"{model} (batch {batch}/worker)" if batch else str(model))
    kind = strategy.get("kind")
    if kind:
        detail = strategy.get("grouping", "")
        if kind.startswith("ps"):
            detail = f"{cluster.get('ps_count', 1)} server(s)"
        parts.append(f"{kind}, {detail}" if detail else kind)
    if cluster.get("bandwidth_bps"):
        link = format_bandwidth(cluster["bandwidth_bps"])
        if cluster.get("latency_s") is not None:
            link += f", {format_seconds(cluster['latency_s'])} latency"
        parts.append(link)
    return " | ".join(parts) or "sgdscale prediction"


def plot_prediction(prediction: Prediction, path: str | os.PathLike[str]) -> None:
    """Throughput vs workers per method (with ideal linear scaling and, where stated, the 80% range
    of held-out runs as error bars), and the per-step breakdown.

    The breakdown panel shows the fine method's compute / exposed communication / wait per worker
    count (the coarse one when fine is absent), each bar labelled with what limits it (`limited_by`,
    as in the table and the JSON); worker counts where the methods differ by more than 10% are
    marked on the throughput panel, as the table's remarks say.
    """
    plt = _pyplot()
    fig = prediction_figure(prediction)
    try:
        _save(fig, path)
    finally:
        plt.close(fig)


def prediction_figure(prediction: Prediction):
    """The figure `plot_prediction` saves (two panels: throughput, per-step breakdown)."""
    plt = _pyplot()
    results = sorted(prediction.results, key=lambda r: (r.method, r.workers))
    methods = list(dict.fromkeys(r.method for r in results))
    breakdown_method = "fine" if "fine" in methods else (methods[0] if methods else None)
    fig, (ax_tp, ax_bd) = plt.subplots(1, 2, figsize=(12, 4.8))
    for method in methods:
        rows = [r for r in results if r.method == method]
        style = _METHOD_STYLE.get(method, {"marker": "D"})
        ax_tp.plot([r.workers for r in rows], [r.throughput for r in rows], label=f"{method}-grained",
                   linewidth=1.8, **style)
        ranged = [r for r in rows if r.likely_range and "low" in r.likely_range]
        if ranged:  # the 80% range held-out runs gave such predictions (sgdscale.heldout_ranges)
            ax_tp.errorbar([r.workers for r in ranged], [r.throughput for r in ranged],
                           yerr=[[r.throughput - r.likely_range["low"] for r in ranged],
                                 [r.likely_range["high"] - r.throughput for r in ranged]],
                           fmt="none", ecolor=style.get("color"), capsize=4, alpha=0.6,
                           label=f"{method}: 80% range of held-out runs")
    if results:
        # Ideal: the one-worker throughput times N (the same baseline as the results' speedup).
        reference = [r for r in results if r.method == breakdown_method]
        base = next((r.throughput / r.speedup for r in reference if r.speedup and r.speedup > 0), None)
        counts = sorted({r.workers for r in results})
        if base:
            ax_tp.plot(counts, [base * n for n in counts], "k--", linewidth=1, label="ideal (linear)")
        if len(counts) > 1 and counts[-1] / counts[0] >= 8:
            ax_tp.set_xscale("log", base=2)
            ax_tp.set_yscale("log")
        ax_tp.set_xticks(counts, [str(c) for c in counts])
    ax_tp.set_xlabel("workers")
    ax_tp.set_ylabel("throughput (samples/s, whole cluster)")
    ax_tp.set_title("throughput")
    ax_tp.grid(True, which="both", alpha=0.3)
    for gap in prediction.disagreements():
        ax_tp.annotate(f"methods differ {gap['difference']:.0%}", (gap["workers"], max(gap["fine"], gap["coarse"])),
                       textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7, color="tab:red")
    if results:
        ax_tp.legend()

    if breakdown_method is not None:
        rows = [r for r in results if r.method == breakdown_method]
        labels = [str(r.workers) for r in rows]
        scale, unit = (1e3, "ms")
        steps = [r.breakdown for r in rows]
        if steps and max(b.compute_s + b.exposed_comm_s + b.wait_s for b in steps) >= 2.0:
            scale, unit = (1.0, "s")
        compute = [b.compute_s * scale for b in steps]
        comm = [b.exposed_comm_s * scale for b in steps]
        wait = [b.wait_s * scale for b in steps]
        positions = range(len(rows))
        ax_bd.bar(positions, compute, label="compute", color="tab:green")
        ax_bd.bar(positions, comm, bottom=compute, label="exposed communication", color="tab:red")
        ax_bd.bar(positions, wait, bottom=[c + m for c, m in zip(compute, comm)], label="wait (barrier/queue)",
                  color="tab:gray")
        for x, r, top in zip(positions, rows, (c + m + w for c, m, w in zip(compute, comm, wait))):
            ax_bd.text(x, top, r.limited_by or "-", ha="center", va="bottom", fontsize=7, rotation=90)
        ax_bd.set_xticks(list(positions), labels)
        ax_bd.set_title(f"per-step breakdown ({breakdown_method}-grained)")
        ax_bd.legend(loc="upper left", fontsize="small")
    ax_bd.set_xlabel("workers")
    ax_bd.set_ylabel(f"time per step of one worker ({unit if breakdown_method else 's'})")
    ax_bd.grid(True, axis="y", alpha=0.3)
    fig.suptitle(_title(prediction.inputs))
    fig.tight_layout()
    return fig


def plot_validation(cases: Sequence[dict[str, Any]], path: str | os.PathLike[str], *,
                    title: str = "predicted vs measured throughput") -> None:
    """Scatter of predicted vs measured (samples/s) with y = x and a ±10% band.

    `cases`: dicts with `predicted`, `measured` (samples/s), `method` (fine|coarse), `strategy`
    (allreduce|ps-sync|ps-async), an optional `band` (min, median, max measured over repeated runs,
    drawn as a horizontal bar) and an optional `label` (annotated next to the point).
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    values = [float(c[k]) for c in cases for k in ("predicted", "measured") if c.get(k) is not None]
    positive = [v for v in values if v > 0]
    low = min(positive) if positive else 1.0
    high = max(positive) if positive else 10.0
    low, high = low / 1.3, high * 1.3
    line = [low, high]
    ax.plot(line, line, "k-", linewidth=1, label="y = x")
    ax.fill_between(line, [v * 0.9 for v in line], [v * 1.1 for v in line], color="gray", alpha=0.2,
                    label="±10%")
    seen: set[tuple[str, str]] = set()
    for case in cases:
        method, strategy = str(case.get("method", "")), str(case.get("strategy", ""))
        key = (method, strategy)
        if case.get("band"):  # the measured band (min..max of repeated runs) as a horizontal bar
            low_m, mid_m, high_m = (float(v) for v in case["band"])
            ax.errorbar(mid_m, float(case["predicted"]), xerr=[[mid_m - low_m], [high_m - mid_m]], fmt="none",
                        ecolor=_METHOD_COLORS.get(method, "tab:purple"), elinewidth=0.8, alpha=0.6, zorder=2)
        ax.scatter(float(case["measured"]), float(case["predicted"]), marker=_STRATEGY_MARKERS.get(strategy, "D"),
                   color=_METHOD_COLORS.get(method, "tab:purple"), edgecolors="black", linewidths=0.5, s=46,
                   label=f"{method}, {strategy}" if key not in seen else None, zorder=3)
        seen.add(key)
        if case.get("label"):
            ax.annotate(str(case["label"]), (float(case["measured"]), float(case["predicted"])),
                        textcoords="offset points", xytext=(4, 4), fontsize=7)
    if high / low > 20:
        from matplotlib.ticker import NullFormatter

        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(NullFormatter())  # minor labels collide on a log axis
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("measured throughput (samples/s)")
    ax.set_ylabel("predicted throughput (samples/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    try:
        _save(fig, path)
    finally:
        plt.close(fig)
