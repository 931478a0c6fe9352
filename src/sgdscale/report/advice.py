"""The `sgdscale advise` printout: a ranking table per worker count, then each answer with its why."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich import box
from rich.table import Table

from sgdscale.advise import Advice
from sgdscale.units import format_bandwidth, format_bytes, format_seconds


def print_advice(console, advice: Advice) -> None:
    inputs, answers, search = advice.inputs, advice.answers, advice.search
    nodes = (f", nodes of {inputs['gpus_per_node']} devices ({format_bandwidth(inputs['intra_bandwidth_bps'])} inside)"
             if inputs["gpus_per_node"] > 1 else "")
    console.print(f"{inputs['model']}: batch {inputs['batch_size']} per worker, "
                  f"{format_bytes(inputs['gradient_bytes'])} of gradients, one device alone "
                  f"{inputs['single_device_throughput']:,.1f} samples/s | NIC {format_bandwidth(inputs['bandwidth_bps'])}, "
                  f"latency {format_seconds(inputs['latency_s'])}{nodes} | efficiency = samples/s / (N x one device "
                  f"without communication)", highlight=False, soft_wrap=True)
    table = Table(title="Best configurations per worker count", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    for name, justify in (("workers", "right"), ("best configuration", "left"), ("samples/s", "right"),
                          ("80% range", "right"), ("effic.", "right"), ("limited by", "left"),
                          ("runner-up", "left"), ("margin", "right")):
        table.add_column(name, justify=justify)
    for row in answers["ranking"]:
        best = row["ranked"][0]
        runner = row["ranked"][1] if len(row["ranked"]) > 1 else None
        margin = f"+{(best['throughput'] / runner['throughput'] - 1) * 100:.1f}%" if runner else "-"
        name = best["label"] + (f" [{best['method']}]" if best["method"] == "fine" else "")
        table.add_row(str(row["workers"]), name, f"{best['throughput']:,.1f}", range_cell(best),
                      f"{best['efficiency']:.0%}", best["limited_by"] or "-", runner["label"] if runner else "-",
                      margin)
    console.print(table)
    for line in [*range_notes(answers["ranking"]), *above_one_notes(inputs, answers["ranking"])]:
        console.print(line, highlight=False, soft_wrap=True)
    console.print("Why the winner wins (per worker count):", highlight=False)
    for row in answers["ranking"]:
        console.print(f"  {row['workers']:>5} workers: {row['why']}", highlight=False, soft_wrap=True)
    if "bucket" in answers:
        table = Table(title="Best DDP bucket size", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for name in ("workers", "bucket", "samples/s", "vs 25 MiB", "MG-WFBP samples/s"):
            table.add_column(name, justify="right")
        for row in answers["bucket"]:
            vs = row["vs_default_25mib"]
            table.add_row(str(row["workers"]), f"{row['bucket_mib']:g} MiB ({row['best']['config']['allreduce']})",
                          f"{row['best']['throughput']:,.1f}", "-" if vs is None else f"{vs * 100:+.1f}%",
                          f"{row['mg_wfbp']['throughput']:,.1f}")
        console.print(table)
    if "bandwidth" in answers and answers["bandwidth"]["per_workers"]:
        table = Table(title=f"NIC bandwidth needed for {answers['bandwidth']['target_throughput']:,.0f} samples/s",
                      title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for name, justify in (("workers", "right"), ("bandwidth", "right"), ("configuration", "left"),
                              ("samples/s", "right"), ("effic.", "right")):
            table.add_column(name, justify=justify)
        for row in answers["bandwidth"]["per_workers"]:
            p = row["point"]
            table.add_row(str(row["workers"]), format_bandwidth(row["bandwidth_bps"]), p["label"],
                          f"{p['throughput']:,.1f}", f"{p['efficiency']:.0%}")
        console.print(table)
    for line in summary_lines(advice):
        console.print(line, highlight=False, soft_wrap=True)
    confirm = f", top {search['confirm']}-confirmed" if search.get("confirm") else ""
    console.print(f"search: {search['configurations']} configurations x {search['worker_counts']} worker counts, "
                  f"{search['predictions']} predictions ({search['method']}{confirm}), {search['pruned_by_bound']} "
                  f"skipped by upper bounds, {search['wall_s']:.2f} s", highlight=False)


def above_one_notes(inputs: dict[str, Any], ranking: list[dict[str, Any]]) -> list[str]:
    """Why a parameter server's efficiency can pass 100%: its shards run the optimizer step that the
    denominator (one device alone) includes, so each worker's step is shorter than the profile's."""
    over = [row for row in ranking if row["ranked"] and row["ranked"][0]["efficiency"] > 1.0
            and row["ranked"][0]["config"]["kind"] != "allreduce"]
    if not over or not inputs.get("optimizer_s"):
        return []
    counts = ", ".join(str(row["workers"]) for row in over)
    return [f"efficiency above 100% at {counts} worker{'s' if len(over) > 1 or over[0]['workers'] > 1 else ''}: "
            f"parameter-server shards run the optimizer step ({format_seconds(inputs['optimizer_s'])} of the "
            f"{format_seconds(inputs['step_s'])} profiled step), so the workers skip it; colocated servers assume "
            "their node has CPU to spare for it beside the worker (the models do not charge it to the worker's node)"]


def range_cell(point: dict[str, Any]) -> str:
    """A point's 80% range as `low-high` (samples/s), or `-` where the held-out record gives none."""
    likely = point.get("likely_range") or {}
    return f"{likely['low']:,.1f}-{likely['high']:,.1f}" if "low" in likely else "-"


def range_notes(ranking: list[dict[str, Any]]) -> list[str]:
    """Where the ranges come from, and why winners have none (each reason once)."""
    ranged = [row["ranked"][0]["likely_range"] for row in ranking if "low" in row["ranked"][0].get("likely_range", {})]
    reasons = sorted({row["ranked"][0]["likely_range"]["reason"] for row in ranking
                      if "reason" in row["ranked"][0].get("likely_range", {})})
    lines = []
    if ranged:
        first = ranged[0]
        lines.append(f"80% range: where 80% of real runs fell against predictions like these in held-out validation "
                     f"(sets {first['sets']}, from {first['source']} network figures); it is "
                     "the range of one prediction, not of the margin between two configurations")
    if reasons:
        lines.append("no 80% range for " + "; ".join(reasons))
    return lines


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
