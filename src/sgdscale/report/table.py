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
    network = (f"{format_bandwidth(cluster['bandwidth_bps'])}, latency {format_seconds(cluster['latency_s'])}, "
               f"{comm['algorithm']} all-reduce")
    if comm.get("measured_allreduce_workers"):
        network += f" (measured fits for {','.join(map(str, comm['measured_allreduce_workers']))} workers)"
    kind = strategy["kind"]
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
    return (f"{profile['model']}: batch {profile['batch_size']} per worker, "
            f"{format_bytes(profile['gradient_bytes'])} of gradients, profiled step {format_seconds(profile['step_s'])} | "
            f"{network} | {plan}" + (" | " + "; ".join(extras) if extras else "") +
            f" | {inputs['iterations']} iterations after {inputs['warmup']} warm-up, variability {variability}, "
            f"seed {inputs['seed']}")


def prediction_table(prediction: Prediction) -> Table:
    """Numbers only; the bottleneck sentences follow the table (`bottleneck_lines`), so the table
    stays readable in a 100-column terminal."""
    table = Table(title="Predicted data-parallel training speed", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)
    table.add_column("workers", justify="right")
    table.add_column("method")
    table.add_column("samples/s", justify="right")
    table.add_column("step mean", justify="right")
    table.add_column("step p95", justify="right")
    table.add_column("speedup", justify="right")
    table.add_column("effic.", justify="right")
    table.add_column("compute", justify="right")
    table.add_column("exposed comm", justify="right")
    table.add_column("wait", justify="right")
    table.add_column("limited by", min_width=15)
    for result in prediction.results:
        b = result.breakdown
        table.add_row(
            str(result.workers),
            result.method,
            f"{result.throughput:,.1f}",
            format_seconds(result.iteration_s["mean"]),
            format_seconds(result.iteration_s["p95"]),
            f"{result.speedup:.2f}x",
            f"{result.efficiency:.0%}",
            _seconds(b.compute_s),
            _seconds(b.exposed_comm_s),
            _seconds(b.wait_s),
            result.limited_by or "-",
        )
    return table


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
