"""`sgdscale predict`: throughput, speedup and bottleneck of data-parallel SGD for N workers."""

from __future__ import annotations

import os

import click

from sgdscale.cluster import one_cluster_size
from sgdscale import inputs
from sgdscale.commands.calibration import apply_calibration, calibration_line, calibration_options
from sgdscale.comm.framing import FRAMINGS
from sgdscale.errors import UserError
from sgdscale.jsonio import all_or_nothing
from sgdscale.report.progress import DelayedProgress

DEFAULT_WORKERS = "1,2,4,8,16,32,64"


def _parse_scales(text: str) -> tuple[float, ...]:
    try:
        scales = tuple(float(part) for part in text.split(","))
    except ValueError:
        raise UserError(f"cannot read --compute-scale '{text}'; give one factor per worker, e.g. 1,1,1,2") from None
    for scale in scales:
        inputs.check(scale, "--compute-scale factor", inputs.SCALE, "1 = as profiled, 2 = twice as slow")
    return scales


def _parse_slow_link(text: str) -> tuple[int, float]:
    from sgdscale.units import parse_bandwidth_bps

    worker, sep, bandwidth = text.partition(":")
    if not sep or not worker.strip().isdigit():
        raise UserError(f"cannot read --slow-link '{text}'; use WORKER:BANDWIDTH, e.g. 3:1Gbit")
    return int(worker), parse_bandwidth_bps(bandwidth, "--slow-link bandwidth")


def _worker_counts(workers: str | None, scales: tuple[float, ...], links: tuple[tuple[int, float], ...]) -> list[int]:
    """Worker counts to predict; per-worker options fix the cluster to exactly one count."""
    from sgdscale.units import parse_workers

    if not scales and not links:
        return parse_workers(DEFAULT_WORKERS if workers is None else workers)
    what = "--compute-scale" if scales else "--slow-link"
    if workers is None:
        if not scales:
            raise UserError("--slow-link describes one cluster; give its size with --workers N")
        return [len(scales)]
    counts = parse_workers(workers)
    one_cluster_size(counts, what)
    if scales and counts[0] != len(scales):
        raise UserError(f"--compute-scale gives {len(scales)} factors but --workers says {counts[0]}; "
                        "give one factor per worker")
    return counts


def _spec_overrides(spec, workers: str | None, gpus: int, scales: tuple[float, ...],
                    links: tuple[tuple[int, float], ...]) -> tuple[tuple[float, ...], tuple[tuple[int, float], ...]]:
    """A cluster file's slow nodes and NICs as per-worker scales and links (one cluster size)."""
    from sgdscale.units import parse_workers

    if workers is None:
        raise UserError("the cluster file names slow nodes or NICs, so it describes one cluster size; "
                        "give one --nodes (or --workers) count")
    one_cluster_size(parse_workers(workers), "the cluster file's slow nodes or NICs")
    total = parse_workers(workers)[0]
    nodes = -(-total // gpus)
    spec.check_nodes(nodes)
    if spec.slow_nodes and not scales:
        per_node = {entry.node: entry.compute_scale for entry in spec.slow_nodes}
        scales = tuple(per_node.get(w // gpus, 1.0) for w in range(total))
    links = links + tuple((entry.node * gpus, entry.bandwidth) for entry in spec.slow_nics)
    return scales, links


def resolve_cluster(*, workers: str | None, nodes: str | None, gpus_per_node: int | None,
                    intra_bandwidth: str | None, intra_latency: str | None, cluster_file: str | None,
                    bandwidth: str | None, latency: str | None, ps_count: int, ps_bandwidth: str | None,
                    algorithm: str, network_file: str | None, compute_scale: str | None = None,
                    slow_links: tuple[str, ...] = (), cpu_per_node: float | None = None,
                    interference: bool = True, framing: str | None = None, mtu: int | None = None):
    """The cluster options of `predict` (shared with `advise` and `sweep`) as (worker counts,
    Cluster with `workers` set for per-worker options or 1, the NIC's cost model with the node's
    CPU bound and interference applied, notes saying what was applied)."""
    from sgdscale.cluster import Cluster
    from sgdscale.clusters import load_cluster
    from sgdscale.comm import CommModel, load_network
    from sgdscale.comm.framing import DEFAULT_MTU_BYTES, payload_fraction
    from sgdscale.units import parse_bandwidth_bps, parse_time_s, parse_workers

    spec = load_cluster(cluster_file) if cluster_file else None
    gpus = gpus_per_node if gpus_per_node is not None else (spec.gpus_per_node if spec else 1)
    inputs.check(gpus, "--gpus-per-node", inputs.GPUS_PER_NODE, "e.g. --gpus-per-node 8")
    if nodes is not None and workers is not None:
        raise UserError("give --workers (total devices) or --nodes, not both")
    if nodes is None and workers is None and spec is not None and spec.nodes is not None:
        nodes = str(spec.nodes)
    if nodes is not None:
        workers = ",".join(str(n * gpus) for n in parse_workers(nodes))
    scales = _parse_scales(compute_scale) if compute_scale else ()
    links = tuple(_parse_slow_link(text) for text in slow_links)
    if spec is not None and (spec.slow_nodes or spec.slow_nics):
        scales, links = _spec_overrides(spec, workers, gpus, scales, links)
    counts = _worker_counts(workers, scales, links)
    if cpu_per_node is not None:
        inputs.check(cpu_per_node, "--cpu-per-node", inputs.CORES, "e.g. --cpu-per-node 0.45")
    network = None
    nic_bps = spec.nic.bandwidth_bps if spec else 10e9
    nic_latency_s = spec.nic.latency_s if spec else 20e-6
    framing = framing or (spec.nic.framing if spec else "ethernet")
    mtu = mtu if mtu is not None else (spec.nic.mtu if spec else DEFAULT_MTU_BYTES)
    payload = payload_fraction(framing, mtu)
    if network_file:
        # The measured network is the NIC: its fits cost every message; --bandwidth, if given, is
        # the nominal rate that slow-NIC overrides are relative to (sgdscale.comm.topology).
        network = load_network(network_file)
        if bandwidth and not (links or ps_bandwidth):
            raise UserError("--bandwidth is not used with --network: the measured network costs every message "
                            "(--bandwidth only sets the nominal rate --slow-link and --ps-bandwidth are relative "
                            "to); drop --bandwidth, or drop --network to predict at a nominal rate")
        comm = CommModel.from_network(network, algorithm)
        bandwidth_bps = (parse_bandwidth_bps(bandwidth, "--bandwidth") if bandwidth
                         else 8.0 / network.p2p.beta_s_per_byte)
        latency_s = parse_time_s(latency, "--latency", inputs.LATENCY_S) if latency else network.p2p.alpha_s
    else:
        bandwidth_bps = parse_bandwidth_bps(bandwidth, "--bandwidth") if bandwidth else nic_bps
        latency_s = parse_time_s(latency, "--latency", inputs.LATENCY_S) if latency else nic_latency_s
        comm = CommModel.from_link(bandwidth_bps * payload, latency_s, algorithm)
    from sgdscale.comm.interference import node_model

    if network is not None:  # the payload rate of the link: the file's nominal rate less framing, else its fit
        nominal_bps = (network.environment or {}).get("bandwidth_bps")
        link_bps = float(nominal_bps) * payload if nominal_bps else 8.0 / network.p2p.beta_s_per_byte
    else:
        link_bps = bandwidth_bps * payload
    comm, notes = node_model(comm, network=network, link_bps=link_bps, cpu_cores=cpu_per_node,
                             interference=interference)
    if ps_bandwidth:
        ps_bps = parse_bandwidth_bps(ps_bandwidth, "--ps-bandwidth")
    else:
        ps_bps = spec.servers.bandwidth if spec else None
    if spec is not None and ps_count == 1:
        ps_count = spec.servers.count
    intra_bps = parse_bandwidth_bps(intra_bandwidth, "--intra-bandwidth") if intra_bandwidth else (
        spec.intra.bandwidth_bps if spec else 128e9)
    intra_s = parse_time_s(intra_latency, "--intra-latency", inputs.LATENCY_S) if intra_latency else (
        spec.intra.latency_s if spec else 5e-6)
    cluster = Cluster(counts[0] if (scales or links) else 1, bandwidth_bps, latency_s, ps_count, ps_bps, scales,
                      links, gpus_per_node=gpus, intra_bandwidth_bps=intra_bps, intra_latency_s=intra_s,
                      framing=framing, mtu_bytes=mtu)
    return counts, cluster, comm, notes


@click.command("predict")
@click.argument("profile")
@click.option("--workers", "-n", metavar="COUNTS", default=None,
              help=f"Worker counts: 8, 1,2,4 or a range 1-64 / 1-64:x2 (doubling). [default: {DEFAULT_WORKERS}]")
@click.option("--strategy", default="allreduce", show_default=True, help="allreduce, ps-sync or ps-async.")
@click.option("--nodes", default=None, metavar="COUNTS",
              help="Node counts instead of --workers (workers = nodes x --gpus-per-node), e.g. 4 or 1-16:x2.")
@click.option("--gpus-per-node", type=int, default=None,
              help="Devices per node sharing one NIC; --workers fills nodes of this many. [default: 1]")
@click.option("--intra-bandwidth", default=None,
              help="Link between devices of a node, e.g. 300GB/s (NVLink 3), 16GB/s (PCIe 3.0 x16). [default: 16GB/s]")
@click.option("--intra-latency", default=None, help="Intra-node link latency, e.g. 2us. [default: 5us]")
@click.option("--cluster", "cluster_file", default=None, metavar="FILE|PRESET",
              help="Hardware from a cluster file (sgdscale.cluster/1) or a preset: dgx-a100, p4d.24xlarge, "
                   "8xV100-pcie, cpu-ethernet (docs/clusters.md). Flags override it.")
@click.option("--bandwidth", default=None, help="NIC bandwidth per node, e.g. 10Gbit, 200Mbit. [default: 10Gbit]")
@click.option("--latency", default=None, help="One-way NIC latency, e.g. 20us. [default: 20us]")
@click.option("--framing", type=click.Choice(list(FRAMINGS)), default=None,
              help="What --bandwidth counts besides gradient bytes: ethernet (a NIC's line rate; TCP/IP headers "
                   "and Ethernet framing take 5.9% at MTU 1500), tc (a rate shaped by Linux tc, as on "
                   "sgdscale's emulated cluster: 4.4%) or none (already payload: InfiniBand, EFA). Unused with "
                   "--network, which measured it. [default: ethernet]")
@click.option("--mtu", type=int, default=None, metavar="BYTES",
              help="Ethernet MTU: 1500, or 9000 for jumbo frames (1.0% framing). [default: 1500]")
@click.option("--ps", "ps_count", type=int, default=1, show_default=True, help="Parameter-server shards (ps-*).")
@click.option("--ps-bandwidth", default=None, help="Server NIC bandwidth. [default: the workers' bandwidth]")
@click.option("--placement", default="round-robin", show_default=True,
              help="Tensors on server shards: round-robin or size.")
@click.option("--grouping", default=None,
              help="Gradient groups: per-tensor, per-layer, buckets (PyTorch DDP), single, mg-wfbp. "
                   "[default: buckets for allreduce, per-tensor for parameter servers]")
@click.option("--bucket-mb", type=float, default=25.0, show_default=True, help="DDP bucket cap in MiB.")
@click.option("--algorithm", default="ring", show_default=True,
              help="All-reduce algorithm of a flat collective and of the inter-node step: ring, tree, halving-doubling.")
@click.option("--allreduce", "allreduce_scheme", default="flat", show_default=True,
              help="All-reduce on multi-device nodes: flat (one collective over all devices), hierarchical "
                   "(inside, across nodes, inside), tree (across nodes) or auto (cheapest per message, as NCCL).")
@click.option("--ps-placement", default="dedicated", show_default=True,
              help="Parameter servers on dedicated nodes, or colocated: one per worker node (BytePS-style).")
@click.option("--collectives-at-once", type=int, default=None, metavar="N",
              help="All-reduces of a worker that share the link at once: 2 as gloo runs them (two threads), "
                   "1 as NCCL does (one stream). [default: 2 for a profile measured on a CPU, else 1]")
@click.option("--method", default="both", show_default=True, help="fine (simulation), coarse (queueing model) or both.")
@click.option("--iterations", type=int, default=100, show_default=True, help="Simulated steps reported.")
@click.option("--warmup", type=int, default=10, show_default=True, help="Simulated steps discarded first.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the per-iteration variability.")
@click.option("--no-variability", is_flag=True, help="Use mean layer times (deterministic).")
@click.option("--network", "network_file", default=None, metavar="FILE",
              help="Measured network (sgdscale.network/1 from `sgdscale netbench`) instead of --bandwidth/--latency.")
@click.option("--cpu-per-node", type=float, default=None, metavar="CORES",
              help="CPU budget of a node (e.g. 0.45): links run at most at CORES / CPU cost per byte. "
                   "[default: the quota the network file was measured at]")
@click.option("--no-interference", is_flag=True,
              help="Leave out the measured compute/communication interference of the network file.")
@click.option("--compute-scale", default=None, metavar="F,F,...",
              help="Per-worker slowdown factors, one per worker (e.g. 1,1,1,2: worker 3 twice as slow).")
@click.option("--slow-link", "slow_links", multiple=True, metavar="WORKER:BANDWIDTH",
              help="A worker with a slower NIC, e.g. 3:1Gbit (repeatable); on multi-device nodes its node's NIC.")
@calibration_options
@click.option("--json", "json_path", default=None, metavar="FILE", help="Write the prediction (sgdscale.prediction/1).")
@click.option("--plot", "plot_path", default=None, metavar="FILE.png",
              help="Plot two panels: throughput vs workers (each method, with ideal linear scaling) and the "
                   "per-step breakdown (compute, exposed communication, wait) of the fine method, each bar "
                   "labelled with what limits it.")
@click.option("--trace", "trace_path", default=None, metavar="FILE.json",
              help="Predicted timeline (Chrome trace; open in ui.perfetto.dev) for the largest worker count.")
@all_or_nothing()  # --json, --plot and --trace all appear, or none does
def predict_command(profile: str, workers: str | None, strategy: str, nodes: str | None, gpus_per_node: int | None,
                    intra_bandwidth: str | None, intra_latency: str | None, cluster_file: str | None,
                    bandwidth: str | None, latency: str | None, framing: str | None, mtu: int | None,
                    ps_count: int, ps_bandwidth: str | None, placement: str, grouping: str | None, bucket_mb: float,
                    algorithm: str, allreduce_scheme: str, ps_placement: str, collectives_at_once: int | None,
                    method: str, iterations: int, warmup: int, seed: int, no_variability: bool,
                    network_file: str | None, cpu_per_node: float | None, no_interference: bool,
                    compute_scale: str | None, slow_links: tuple[str, ...],
                    json_path: str | None, plot_path: str | None, trace_path: str | None,
                    **calibration: str | int | None) -> None:
    """Predict throughput, speedup and what holds training back, for PROFILE (a profile file from
    `sgdscale profile`, or a built-in name such as resnet50; see `sgdscale show --list`).

    Each throughput comes with its 80% range: where 80% of real runs measured against predictions
    of the same kind in the project's held-out validation (none, with the reason, for clusters
    unlike any it ran: GPUs, more workers or other link rates than it covered).

    \b
    Examples:
      sgdscale predict resnet50 --workers 1-64:x2 --bandwidth 10Gbit
      sgdscale predict r50.json --workers 16 --grouping mg-wfbp --bandwidth 1Gbit
      sgdscale predict gpt2 --strategy ps-sync --ps 2 --workers 1-32:x2 --json out.json
      sgdscale predict resnet50 --workers 4 --compute-scale 1,1,1,2 --trace r50.trace.json
      sgdscale predict resnet50 --network net.json --plot r50.png
      sgdscale predict resnet50 --nodes 1-8:x2 --gpus-per-node 8 --intra-bandwidth 300GB/s --bandwidth 25Gbit
      sgdscale predict resnet50 --cluster dgx-a100 --nodes 4 --allreduce auto
      sgdscale predict resnet50 --device-throughput 2470/s --batch-size 256 --cluster dgx-a100 --nodes 1-4:x2
      sgdscale predict resnet50 --target-device A100 --precision bf16 --workers 8
      sgdscale predict cnn --network net.json --cpu-per-node 0.45 --workers 2,4   (CPU-bound links)
    """
    from rich.console import Console

    from sgdscale.predict import predict
    from sgdscale.profile import load_profile
    from sgdscale.report.table import FULL_WIDTH
    from sgdscale.strategy import MIB, Strategy

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:  # a file or pipe: room for the full table
        console = Console(width=FULL_WIDTH)
    err = Console(stderr=True)
    methods = {"fine": ["fine"], "coarse": ["coarse"], "both": ["fine", "coarse"]}.get(method)
    if methods is None:
        raise UserError(f"unknown method '{method}'; choose fine, coarse or both")
    inputs.check_predict_options(bucket_mb=bucket_mb, ps_count=ps_count, strategy=strategy, iterations=iterations,
                                 warmup=warmup, seed=seed)
    inputs.check_outputs({"--json": json_path, "--plot": plot_path, "--trace": trace_path})
    if trace_path and "fine" not in methods:
        raise UserError("--trace draws the fine method's simulated timeline; add --method fine (or both)")
    plan = Strategy(kind=strategy, grouping=grouping, bucket_bytes=bucket_mb * MIB, algorithm=algorithm,
                    placement=placement, allreduce=allreduce_scheme, ps_placement=ps_placement,
                    collectives_at_once=collectives_at_once)

    counts, cluster, comm, notes = resolve_cluster(
        workers=workers, nodes=nodes, gpus_per_node=gpus_per_node, intra_bandwidth=intra_bandwidth,
        intra_latency=intra_latency, cluster_file=cluster_file, bandwidth=bandwidth, latency=latency,
        ps_count=ps_count, ps_bandwidth=ps_bandwidth, algorithm=algorithm, network_file=network_file,
        compute_scale=compute_scale, slow_links=slow_links, cpu_per_node=cpu_per_node,
        interference=not no_interference, framing=framing, mtu=mtu)
    if plan.uses_servers and "fine" in methods and comm.share_weight_sigma == 0.0 and max(counts) > 1:
        from sgdscale.comm.sharing import UNMEASURED_SHARING_NOTE

        notes.append(UNMEASURED_SHARING_NOTE)
    measured = load_profile(profile)
    loaded = apply_calibration(measured, **calibration)
    if plan.uses_servers and plan.ps_placement == "dedicated" and plan.placement == "round-robin":
        from sgdscale.placement import lopsided_note

        lopsided = lopsided_note([t.bytes for t in loaded.tensors], cluster.ps_count)
        if lopsided:
            notes.append(lopsided)
    from sgdscale.clusters import device_note

    mismatch = device_note(cluster_file, loaded)
    if mismatch:
        notes.insert(0, mismatch)
    if plan.kind == "allreduce" and plan.grouping == "buckets" and max(counts) > 1:
        from sgdscale.bucket_copies import buffers_note, copies_note, ddp_overhead_note

        notes.append(copies_note(loaded, comm.copy_s_per_byte))
        from sgdscale.comm.streams import streams_note

        notes.append(streams_note(loaded, plan.collectives_at_once))
        notes.append(buffers_note(loaded))
        overhead = ddp_overhead_note(loaded)
        if overhead:
            notes.append(overhead)
    if plan.kind == "allreduce" and getattr(comm, "measured_curves", None) and max(counts) > 1:
        from sgdscale.grouping import group_gradients

        largest = max((group.bytes for group in group_gradients(loaded, plan, comm, max(counts))), default=0)
        beyond = comm.beyond_measured_note(largest, [n for n in counts if n > 1])
        if beyond:
            notes.append(beyond)

    with DelayedProgress(err) as report:
        prediction = predict(loaded, cluster, plan, comm, counts, methods, iterations=iterations, warmup=warmup,
                             seed=seed, variability=not no_variability, timeline=bool(trace_path),
                             profile_source=profile, progress=report)

    from sgdscale.heldout_ranges import attach, network_source

    attach(prediction, network_source(network_file, cpu_per_node))

    from sgdscale.report.table import (TABLE_WIDTH, bottleneck_lines, header_line, prediction_lines, prediction_table,
                                       range_lines, remark_lines)

    note = calibration_line(measured, loaded)
    if note:
        console.print(note, highlight=False, soft_wrap=True)
    console.print(header_line(prediction), highlight=False, soft_wrap=True)
    narrow = console.width < TABLE_WIDTH
    if narrow:
        for line in prediction_lines(prediction):
            console.print(line, highlight=False)
    else:
        console.print(prediction_table(prediction, console.width))
    for line in range_lines(prediction):
        console.print(line, highlight=False, soft_wrap=True)
    console.print("What limits it:" if narrow else "What limits it (breakdown columns are per worker and step):",
                  highlight=False)
    for line in bottleneck_lines(prediction):
        console.print(line, highlight=False, soft_wrap=True)
    for line in remark_lines(prediction):
        console.print(line, highlight=False, soft_wrap=True)
    for note in notes:
        console.print(f"note: {note}", highlight=False, soft_wrap=True)
    if json_path:
        from sgdscale.jsonio import write_json_atomic

        write_json_atomic(json_path, prediction.to_json())
        console.print(f"prediction written to {json_path}")
    if plot_path:
        from sgdscale.report.plot import plot_prediction

        plot_prediction(prediction, plot_path)
        console.print(f"plot written to {plot_path}")
    if trace_path:
        from sgdscale.report.trace import write_chrome_trace

        traced = [r for r in prediction.results if r.timeline]
        if not traced:
            raise UserError("no method produced a timeline for this strategy; try --method fine")
        chosen = max(traced, key=lambda r: (r.workers, r.method == "fine"))
        from sgdscale.report.trace import drawn_workers

        drawn = drawn_workers(chosen.timeline)
        write_chrome_trace(chosen.timeline, trace_path,
                           {"model": loaded.model, "workers": chosen.workers, "workers_drawn": drawn,
                            "method": chosen.method, "strategy": plan.kind, "grouping": plan.grouping})
        console.print(f"timeline written to {trace_path} (open it in ui.perfetto.dev): {chosen.method} prediction "
                      f"for {chosen.workers} workers; {drawn_line(drawn, chosen.workers)}",
                      highlight=False, soft_wrap=True)


def drawn_line(drawn: list[str], workers: int) -> str:
    """Which workers the timeline holds, said plainly (it draws a few, not all)."""
    if len(drawn) == 1 and "alike" in drawn[0]:
        return f"it draws {drawn[0]}"
    return f"it draws {len(drawn)} of the {workers} workers ({', '.join(drawn)})"


def register(app: click.Group) -> None:
    app.add_command(predict_command)
