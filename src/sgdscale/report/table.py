"""The `sgdscale predict` table: one row per (worker count, method), every number with its unit."""

from __future__ import annotations

from rich import box
from rich.table import Table

from sgdscale.result import Prediction
from sgdscale.units import format_bandwidth, format_bytes, format_seconds

MIB = 1024 * 1024


def header_line(prediction: Prediction) -> str:
    """The inputs in one line: model, batch, network, strategy, grouping, method settings."""
    inputs = prediction.inputs
    profile, cluster, strategy, comm = inputs["profile"], inputs["cluster"], inputs["strategy"], inputs["comm"]
    kind = strategy["kind"]
    network = f"{format_bandwidth(cluster['bandwidth_bps'])}, latency {format_seconds(cluster['latency_s'])}"
    if kind == "allreduce":  # a parameter server runs no collective: naming one would mislead
        network += f", {comm['algorithm']} all-reduce"
    if kind != "allreduce" and comm.get("share_weight_sigma"):  # flows share server links unequally
        network += f", links shared unequally (measured, sigma {comm['share_weight_sigma']:.2f})"
        if comm.get("newcomer_share_weight", 1.0) < 1.0:  # sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT
            network += f", flows already leaving a node first (a newcomer weighs {comm['newcomer_share_weight']:g})"
    if kind != "allreduce" and comm.get("late_joiner_weight", 1.0) < 1.0:  # sgdscale.comm.sharing.LATE_JOINER_WEIGHT
        network += f", a late joiner into a busy node weighs {comm['late_joiner_weight']:g} (fine)"
    if kind == "allreduce" and comm.get("measured_allreduce_workers"):
        network += f" (measured fits for {','.join(map(str, comm['measured_allreduce_workers']))} workers)"
    if kind == "allreduce":
        grouping = strategy["grouping"]
        if grouping == "buckets":
            grouping += (f" {strategy['bucket_bytes'] / MIB:g} MiB (first {strategy['first_bucket_bytes'] / MIB:g} MiB)")
        plan = f"sync all-reduce, grouping {grouping}"
    else:
        servers = cluster["ps_count"]
        plan = (f"{kind} with {servers} server{'s' if servers > 1 else ''} at "
                f"{format_bandwidth(cluster['ps_bandwidth_bps'])}, placement {strategy['placement']}")
    extras = []
    if cluster.get("compute_scale"):
        extras.append("compute scales " + ",".join(f"{s:g}" for s in cluster["compute_scale"]))
    for worker, bps in cluster.get("slow_links", []):
        extras.append(f"worker {worker} link {format_bandwidth(bps)}")
    variability = "on" if inputs["variability"] else "off"
    if cluster.get("gpus_per_node", 1) > 1:
        network = (f"nodes of {cluster['gpus_per_node']} devices, {format_bandwidth(cluster['intra_bandwidth_bps'])} "
                   f"inside a node (latency {format_seconds(cluster['intra_latency_s'])}), NIC per node {network}, "
                   f"{strategy.get('allreduce', 'flat')} scheme" + (
                       f", servers {strategy['ps_placement']}" if kind != "allreduce" else ""))
    elif kind != "allreduce" and strategy.get("ps_placement") == "colocated":
        network += ", servers colocated"
    from sgdscale.models import describe_model

    model = describe_model(profile["model"], profile.get("input") or {}, profile["batch_size"])
    source = profile.get("source")
    if source and source != profile["model"]:
        model += f"; profile {source}"
    return (f"{model} | "
            f"{format_bytes(profile['gradient_bytes'])} of gradients, profiled step {format_seconds(profile['step_s'])} | "
            f"{network} | {plan}" + (" | " + "; ".join(extras) if extras else "") +
            f" | {inputs['iterations']} iterations after {inputs['warmup']} warm-up, variability {variability}, "
            f"seed {inputs['seed']}")


FULL_WIDTH = 130  # narrower consoles get the compact table (no step mean, p95 and compute columns)
TABLE_WIDTH = 80  # narrower still: one line per result (`prediction_lines`), as a table would cut its cells


def prediction_table(prediction: Prediction, width: int | None = None) -> Table:
    """Numbers only; the bottleneck sentences follow the table (`bottleneck_lines`). Below
    `FULL_WIDTH` columns the step mean, p95 and compute columns are left out (all are in --json) and
    columns are one space apart, so the table fits an 80-column terminal without cut headers."""
    compact = width is not None and width < FULL_WIDTH
    title = "Predicted data-parallel training speed" + (" (step times and compute: --json)" if compact else "")
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=0 if compact else (0, 1), show_edge=not compact)  # compact: one space between
    columns = [("workers", "right"), ("method", "left"), ("samples/s", "right"), ("80% range", "right"),
               ("step mean", "right"),
               ("step p95", "right"), ("speedup", "right"), ("effic.", "right"), ("compute", "right"),
               ("exposed comm", "right"), ("wait", "right"), ("limited by", "left")]
    skip = {"step mean", "step p95", "compute"} if compact else set()
    for name, justify in columns:
        if name not in skip:
            table.add_column(name, justify=justify, min_width=None if compact or name != "limited by" else 15)
    for result in prediction.results:
        b = result.breakdown
        cells = {
            "workers": str(result.workers),
            "method": result.method,
            "samples/s": f"{result.throughput:,.1f}",
            "80% range": _range(result.likely_range),
            "step mean": format_seconds(result.iteration_s["mean"]),
            "step p95": format_seconds(result.iteration_s["p95"]),
            "speedup": f"{result.speedup:.2f}x",
            "effic.": f"{result.efficiency:.0%}",
            "compute": _seconds(b.compute_s),
            "exposed comm": _seconds(b.exposed_comm_s),
            "wait": _seconds(b.wait_s),
            "limited by": result.limited_by or "-",
        }
        table.add_row(*(cells[name] for name, _ in columns if name not in skip))
    return table


def prediction_lines(prediction: Prediction) -> list[str]:
    """The compact table's numbers as one sentence per result, for consoles under `TABLE_WIDTH`
    columns, where a table's cells would be cut to a character or two; the lines wrap instead."""
    lines = ["Predicted data-parallel training speed (per worker and step; step times and compute: --json):"]
    for result in prediction.results:
        b = result.breakdown
        likely = _range(result.likely_range)
        lines.append(f"{result.workers} workers, {result.method}: {result.throughput:,.1f} samples/s"
                     + ("" if likely == "-" else f" (80% range {likely})")
                     + f", speedup {result.speedup:.2f}x, efficiency {result.efficiency:.0%}, exposed comm "
                     f"{_seconds(b.exposed_comm_s)}, wait {_seconds(b.wait_s)}, limited by {result.limited_by or '-'}")
    return lines


def _range(likely: dict | None) -> str:
    if not likely or "low" not in likely:
        return "-"
    return f"{likely['low']:,.1f}-{likely['high']:,.1f}"


def range_lines(prediction: Prediction) -> list[str]:
    """What the 80% range column means, and why a result has none (sgdscale.heldout_ranges)."""
    from sgdscale.heldout_ranges import SOURCE_WORDS

    ranged = [r.likely_range for r in prediction.results if r.likely_range and "low" in r.likely_range]
    lines = []
    if ranged:
        first = ranged[0]
        cases = "/".join(str(n) for n in dict.fromkeys(r["cases"] for r in ranged))
        lines.append(f"80% range: where 80% of real runs measured, in held-out validation (sets {first['sets']}: CPU "
                     f"training on an emulated cluster, {first['kinds']} cases), against predictions of the same "
                     f"strategy and method from {SOURCE_WORDS[first['source']]} ({cases} cases; README, "
                     "'How far off a prediction may be')")
    reasons = list(dict.fromkeys(r.likely_range["reason"] for r in prediction.results
                                 if r.likely_range and "reason" in r.likely_range))
    if reasons:
        lines.append("80% range: none where held-out validation ran nothing alike: " + "; ".join(reasons))
    return lines


def remark_lines(prediction: Prediction) -> list[str]:
    """One line per worker count where the two methods disagree by more than 10%, and one where a server's
    NIC limits async PS below the fill runs have reached (`sgdscale.result.server_link_ceilings`)."""
    return [f"remark: {d['remark']}" for d in prediction.disagreements() + prediction.server_link_ceilings()]


def _seconds(value: float) -> str:
    """Seconds, with rounding dust (|t| < 1 ns, e.g. from subtracting equal sums) shown as 0."""
    return format_seconds(0.0 if abs(value) < 1e-9 else value)


def bottleneck_lines(prediction: Prediction) -> list[str]:
    """'N workers, method: what limits it' for every result; on multi-device nodes followed by
    the seconds per step each level is busy (compute, intra-node link, NIC, servers)."""
    gpus = prediction.inputs.get("cluster", {}).get("gpus_per_node", 1)
    lines = []
    for r in prediction.results:
        line = f"{r.workers:>5} workers, {r.method:<6}: {r.bottleneck}"
        if gpus > 1 and r.levels:
            nodes = -(-r.workers // gpus)
            busy = ", ".join(f"{name} {_seconds(seconds)}" for name, seconds in r.levels.items())
            line += f" [{nodes} node{'s' if nodes > 1 else ''}; busy per step: {busy}]"
        lines.append(line)
    return lines
