"""Sweep plots: an efficiency heatmap over workers x bandwidth per strategy, and throughput curves
per grouping. Where a cell has several rows (other groupings, bucket sizes, server counts,
latencies, schemes) it shows the best of them, and the title says so: the question a heatmap answers
is "how well can this strategy do here"."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from sgdscale.report.plot import _pyplot, _save
from sgdscale.units import format_bandwidth

KIND_LABELS = {"allreduce": "sync all-reduce", "ps-sync": "sync PS", "ps-async": "async PS"}


def _best(rows: Sequence[dict[str, Any]], key) -> dict[tuple, dict[str, Any]]:
    best: dict[tuple, dict[str, Any]] = {}
    for row in rows:
        k = key(row)
        if k not in best or row["throughput"] > best[k]["throughput"]:
            best[k] = row
    return best


def plot_sweep(rows: Sequence[dict[str, Any]], prefix: str) -> list[str]:
    """Write PREFIX-heatmap.png and PREFIX-curves.png; returns their paths."""
    if not rows:
        return []
    plt = _pyplot()
    model = rows[0]["model"]
    method = "/".join(sorted({r["method"] for r in rows}))
    strategies = [k for k in KIND_LABELS if any(r["strategy"] == k for r in rows)]
    workers = sorted({r["workers"] for r in rows})
    bandwidths = sorted({r["bandwidth_bps"] for r in rows})
    paths = []

    # Heatmap: efficiency, workers (x) by bandwidth (y), one panel per strategy.
    best = _best(rows, lambda r: (r["strategy"], r["workers"], r["bandwidth_bps"]))
    fig, axes = plt.subplots(1, len(strategies), figsize=(4.2 * len(strategies) + 1.2, 0.45 * len(bandwidths) + 2.6),
                             squeeze=False)
    image = None
    for ax, kind in zip(axes[0], strategies):
        grid = [[best.get((kind, n, bw), {}).get("efficiency", float("nan")) for n in workers] for bw in bandwidths]
        image = ax.imshow(grid, origin="lower", aspect="auto", vmin=0.0, vmax=1.0, cmap="viridis")
        for y, line in enumerate(grid):
            for x, value in enumerate(line):
                if value == value:  # not NaN
                    ax.text(x, y, f"{value:.0%}", ha="center", va="center", fontsize=7,
                            color="white" if value < 0.55 else "black")
        ax.set_xticks(range(len(workers)), [str(n) for n in workers], fontsize=8)
        ax.set_yticks(range(len(bandwidths)), [format_bandwidth(b) if ax is axes[0][0] else "" for b in bandwidths],
                      fontsize=8)
        ax.set_xlabel("workers")
        ax.set_title(KIND_LABELS[kind])
    axes[0][0].set_ylabel("NIC bandwidth")
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), label="efficiency (speedup / workers)")
    fig.suptitle(f"{model}: efficiency, best over the other swept choices ({method})", fontsize=10)
    path = f"{prefix}-heatmap.png"
    _save(fig, path)
    plt.close(fig)
    paths.append(path)

    # Curves: throughput vs workers, one line per (strategy, grouping), one panel per bandwidth.
    shown = bandwidths if len(bandwidths) <= 4 else [bandwidths[i * (len(bandwidths) - 1) // 3] for i in range(4)]
    fig, axes = plt.subplots(1, len(shown), figsize=(4.6 * len(shown), 4.2), squeeze=False, sharey=True)
    lines = _best(rows, lambda r: (r["bandwidth_bps"], r["strategy"], r["grouping"], r["workers"]))
    series: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for (bw, kind, grouping, n), row in lines.items():
        series[(bw, kind, grouping)].append(row)
    ranged_any = False
    for ax, bw in zip(axes[0], shown):
        for (b, kind, grouping), points in sorted(series.items()):
            if b != bw:
                continue
            points.sort(key=lambda r: r["workers"])
            drawn = ax.plot([r["workers"] for r in points], [r["throughput"] for r in points], marker="o",
                            markersize=3, label=f"{KIND_LABELS[kind]}, {grouping}")
            ranged = [r for r in points if r.get("likely_low") is not None and r.get("likely_high") is not None]
            if ranged:  # the 80% range predict states, where the held-out record covers the point
                ranged_any = True
                ax.errorbar([r["workers"] for r in ranged], [r["throughput"] for r in ranged],
                            yerr=[[r["throughput"] - r["likely_low"] for r in ranged],
                                  [r["likely_high"] - r["throughput"] for r in ranged]],
                            fmt="none", ecolor=drawn[0].get_color(), elinewidth=1, capsize=3, alpha=0.7)
        if len(workers) > 1 and workers[-1] / workers[0] >= 8:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        ax.set_xticks(workers, [str(n) for n in workers], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("workers")
        ax.set_title(f"NIC {format_bandwidth(bw)}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("throughput (samples/s, whole cluster)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"{model}: throughput per grouping, best over the other swept choices ({method})"
                 + ("; bars: 80% range from held-out runs" if ranged_any else ""), fontsize=10)
    fig.tight_layout()
    path = f"{prefix}-curves.png"
    _save(fig, path)
    plt.close(fig)
    paths.append(path)
    return paths
