"""`sgdscale testbed check|cleanup` (the emulated cluster) and `sgdscale netbench` (network benchmark)."""

from __future__ import annotations

import os
import sys
import time

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sgdscale.errors import UserError
from sgdscale.units import format_bandwidth, format_bytes, format_seconds, parse_bandwidth_bps, parse_size_bytes, parse_workers

_BUSY = (
    "import json, time\n"
    "wall = time.perf_counter(); cpu = time.process_time()\n"
    "while time.perf_counter() - wall < {seconds}: pass\n"
    "print(json.dumps({{'cpu_s': time.process_time() - cpu, 'wall_s': time.perf_counter() - wall}}))\n"
)


def parse_cpu_quota(text: str | None, nodes: int) -> list[float]:
    """'0.45' (every node) or '0.5,0.5,0.25' (one per node); default: 90 % of the cores, split evenly."""
    cores = os.cpu_count() or 1
    if text is None or text == "auto":
        return [round(0.9 * cores / nodes, 3)] * nodes
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"cannot read CPU quota '{text}' (cores per node, e.g. 0.45 or 0.5,0.5,0.25)") from None
    if any(v <= 0 for v in values):
        raise UserError(f"CPU quotas must be positive numbers of cores, got '{text}'")
    if len(values) == 1:
        return values * nodes
    if len(values) != nodes:
        raise UserError(f"got {len(values)} CPU quotas for {nodes} nodes; give one for all or one per node")
    return values


@click.group("testbed")
def testbed_group() -> None:
    """The emulated cluster: network namespaces on a bridge, tbf-shaped veth links, CPU quotas.

    \b
    Needs root, iproute2 (ip, tc), the tbf qdisc and the cgroup-v1 cpu controller.
      sgdscale testbed check                 build 2 nodes, measure links and quota, tear down
      sgdscale testbed cleanup               remove what a crashed run left behind
    """


@testbed_group.command("check")
@click.option("--bandwidth", "bandwidths", multiple=True, default=("100Mbit", "1Gbit"), show_default=True,
              help="Link rate(s) to build and measure (repeat the option for several).")
@click.option("--cpu-quota", default="0.5", show_default=True, help="Cores per node for the quota check.")
def testbed_check(bandwidths: tuple[str, ...], cpu_quota: str) -> None:
    """Build a 2-node emulated cluster per rate, time a TCP transfer each way and a busy loop
    under the CPU quota, tear it down and print the figures.

    \b
    Example:
      sgdscale testbed check --bandwidth 200Mbit --cpu-quota 0.45
    """
    import json

    from sgdscale.runtime.testbed import Testbed

    console = Console()
    quotas = parse_cpu_quota(cpu_quota, 2)
    table = Table(title="emulated 2-node cluster")
    table.add_column("link")
    table.add_column("direction")
    table.add_column("transfer", justify="right")
    table.add_column("measured", justify="right")
    table.add_column("of nominal", justify="right")
    problems = []
    quota_line = ""
    for index, text in enumerate(bandwidths):
        rate = parse_bandwidth_bps(text)
        with Testbed(2, rate, quotas) as bed:
            for src, dst in ((0, 1), (1, 0)):
                result = bed.measure_bandwidth(src, dst, nbytes=max(1 << 20, int(rate / 8 * 0.8)))
                ratio = result.bps / rate
                table.add_row(format_bandwidth(rate), f"node {src} -> node {dst}", format_bytes(result.nbytes),
                              format_bandwidth(result.bps), f"{ratio:.1%}")
                if not 0.8 <= ratio <= 1.1:
                    problems.append(f"{format_bandwidth(rate)} link measured {format_bandwidth(result.bps)}")
            if index == 0:
                run = bed.run_on_node(0, [sys.executable, "-c", _BUSY.format(seconds=1.0)], timeout_s=30)
                if run.returncode != 0:
                    raise UserError(f"the CPU quota check failed on node 0: {run.stderr.strip()}")
                busy = json.loads(run.stdout)
                share = busy["cpu_s"] / busy["wall_s"]
                quota_line = (f"CPU quota {quotas[0]:g} cores: a busy loop got {busy['cpu_s']:.3f} s of CPU "
                              f"in {busy['wall_s']:.3f} s wall = {share:.3f} cores")
                if abs(share - quotas[0]) > 0.15 * quotas[0]:
                    problems.append(f"quota {quotas[0]:g} cores gave {share:.3f} cores")
    console.print(table)
    console.print(quota_line)
    console.print("TCP goodput is ~95.6 % of the link rate at MTU 1500 (headers count against the rate).")
    if problems:
        raise UserError("emulated cluster built, but: " + "; ".join(problems)
                        + " (is the machine busy? try again under `flock /tmp/sgdscale-cpu.lock`)")
    console.print("OK: built, measured and removed the emulated cluster")


@testbed_group.command("cleanup")
@click.option("--all", "everything", is_flag=True,
              help="Also remove testbeds whose owner process is still alive.")
def testbed_cleanup(everything: bool) -> None:
    """Remove namespaces, links, cgroups and processes left by crashed emulated-cluster runs
    (those whose owner process is dead; --all: every one)."""
    from sgdscale.runtime.testbed import preflight, sweep_leftovers

    preflight()
    swept = sweep_leftovers(only_dead=not everything)
    if swept:
        click.echo(f"removed {len(swept)} leftover testbed(s): {', '.join(swept)}")
    else:
        click.echo("nothing to clean up")


def network_table(network) -> Table:
    table = Table(title="measured points (median of repeats)",
                  caption="effective bandwidth = message bits / median time (all-reduce: algorithm bandwidth)")
    for name in ("op", "workers", "message", "median", "min", "max", "effective bandwidth"):
        table.add_column(name, justify="left" if name == "op" else "right")
    for point in network.points:
        bandwidth = point.bytes * 8 / point.median_s if point.median_s > 0 else float("inf")
        table.add_row(point.op, str(point.workers), format_bytes(point.bytes), format_seconds(point.median_s),
                      format_seconds(min(point.samples_s)), format_seconds(max(point.samples_s)),
                      format_bandwidth(bandwidth))
    return table


def fits_table(network) -> Table:
    table = Table(title="alpha-beta fits: t(M) = alpha + beta * M")
    for name in ("op", "workers", "alpha", "beta", "1/beta"):
        table.add_column(name, justify="left" if name == "op" else "right")
    rows = [("p2p", "2", network.p2p)] + [("allreduce", n, fit) for n, fit in network.allreduce.items()]
    rows += [(f"incast ({n} senders)", str(int(n) + 1), fit) for n, fit in network.incast.items()]
    for op, workers, fit in rows:
        table.add_row(op, workers, format_seconds(fit.alpha_s), f"{fit.beta_s_per_byte * 1e9:.4g} ns/B",
                      format_bandwidth(8 / fit.beta_s_per_byte))
    return table


def network_notes(network) -> list[str]:
    """One line per measured effect beyond the fits (interference, CPU cost, sharing, outcast, send lead).

    Printed as whole lines, not as a table caption: a caption wraps to the table's width, which
    moves with the figures and splits a line where a reader (or a grep) looks for it."""
    itf, cpu = network.interference, network.cpu
    notes = []
    if itf is not None:
        notes.append(f"interference ({itf.workers} workers, {format_bytes(itf.bytes)} all-reduce): compute "
                     f"{itf.compute_slowdown:.2f}x slower while it runs, the all-reduce {itf.comm_slowdown:.2f}x "
                     f"slower while compute runs")
    if cpu is not None:
        for what, value in (("all-reduce, per byte sent", cpu.allreduce_s_per_byte),
                            ("point to point, per byte", cpu.p2p_s_per_byte)):
            if value:
                budget = f" -> CPU-bound rate {format_bandwidth(8 * cpu.cores / value)} at {cpu.cores:g} cores" \
                    if cpu.cores else ""
                notes.append(f"CPU cost of transport ({what}): {value * 1e9:.3g} ns/B{budget}")
        if cpu.message_s:
            notes.append(f"CPU cost of a point-to-point message apart from its bytes: {format_seconds(cpu.message_s)}"
                         + (f" ({format_seconds(cpu.message_s / cpu.cores)} of a node at {cpu.cores:g} cores)"
                            if cpu.cores else ""))
        if cpu.message_wakeup_s:
            notes.append(f"a message alone, after compute, costs {format_seconds(cpu.message_wakeup_s)} more "
                         "(gloo's thread wakes for it alone)")
    if network.sharing is not None:
        notes.append(sharing_line(network.sharing))
    if network.outcast is not None:
        out = network.outcast
        notes.append(f"flows out of one node ({format_bytes(out.bytes)} each): a flow started while another leaves "
                     f"gets weight {out.newcomer_weight:.2f} of the link (1: equal sharing); started together, the "
                     f"first done at {out.first_second_together:.2f} of the second's time")
    if network.send_lead is not None:
        lead = network.send_lead
        notes.append(f"a send of {format_bytes(lead.bytes)} completes {format_seconds(lead.lead_s)} before its bytes "
                     "arrive (what the sender's socket and the queues on the way hold then; recorded, not used)")
    notes += launch_lines(network.environment.get("launches") or [])
    return notes


def launch_lines(launches: list[dict]) -> list[str]:
    """One line per benchmark launch on an emulated cluster, or per launch of a worker count measured
    again because its ping-pong times were unsteady (`sgdscale.runtime.netbench.P2P_STEADY_SPREAD`)."""
    from sgdscale.runtime.netbench import P2P_STEADY_SPREAD

    lines = []
    retried = {run["processes"] for run in launches if run.get("attempt", 1) > 1}
    for run in launches:
        if "other_load_cores" not in run and run["processes"] not in retried:
            continue
        text = f"{run['processes']} processes"
        if run["processes"] in retried:
            text += f", attempt {run['attempt']}" + (" (kept)" if run.get("kept") else "")
        if run.get("p2p_spread") is not None:
            text += f": largest ping-pong message's time spread {run['p2p_spread']:.1%} over its repeats" + (
                f" (over {P2P_STEADY_SPREAD:.0%}: a disturbed machine)" if run["p2p_spread"] > P2P_STEADY_SPREAD else "")
        if run.get("other_load_cores") is not None:
            text += (f"; meanwhile ({format_seconds(run['wall_s'])}) the rest of the machine used "
                     f"{run['other_load_cores']:.2f} cores, {run['steal_cores']:.2f} of them taken by the hypervisor (steal)")
        if run.get("steal_before_retry_cores") is not None:
            text += f"; before the next attempt the hypervisor took {run['steal_before_retry_cores']:.2f} cores"
        lines.append(text)
    return lines


def sharing_line(sharing) -> str:
    """The link-sharing fit in one line: sigma, and what it was fitted to."""
    measured = ", ".join(f"{sharing.first_last[k]:.3f} with {k} senders ({sharing.repeats.get(k, '?')} repeats)"
                         for k in sorted(sharing.first_last, key=int))
    sizes = ", ".join(format_bytes(b) for b in sharing.bytes)
    return (f"link sharing: weight sigma {sharing.weight_sigma:.3f} (weighted max-min); first / last sender "
            f"done, median: {measured}; messages {sizes}")


@click.command("netbench")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the sgdscale.network/1 file here.")
@click.option("--workers", default="2", show_default=True,
              help="Process counts for the all-reduce (e.g. 2,4); p2p always uses ranks 0 and 1.")
@click.option("--min-size", default="1kB", show_default=True, help="Smallest message.")
@click.option("--max-size", default="16MB", show_default=True, help="Largest message.")
@click.option("--points", default=8, show_default=True, help="Log-spaced message sizes from min to max.")
@click.option("--repeats", default=5, show_default=True, help="Timed repeats per size (median is fitted).")
@click.option("--warmup", default=1, show_default=True, help="Discarded repeats per size.")
@click.option("--ops", default="p2p,allreduce,incast", show_default=True,
              help="Which operations: p2p (also how long before its bytes arrive a send completes), allreduce, "
                   "incast (N-1 senders into one node; with 3 or more "
                   "processes it fits how unequally flows share a link), outcast (one node sending to two, the "
                   "second flow started later: how much of the link a newcomer gets; 3 or more processes), "
                   "overlap (compute/communication interference, with the most workers).")
@click.option("--overlap-size", default=None, help="All-reduce size for --ops overlap. [default: --max-size]")
@click.option("--emulate", is_flag=True, help="Run each rank on its own node of an emulated cluster.")
@click.option("--bandwidth", default="1Gbit", show_default=True, help="Node link rate with --emulate.")
@click.option("--cpu-quota", default=None,
              help="Cores per node with --emulate (one value or one per node); default: 90 percent of the cores, split evenly.")
@click.option("--pin-cpus/--no-pin-cpus", default=False, show_default=True,
              help="With --emulate, also pin each node to its own core(s), as `train` and `validate` do.")
@click.option("--write-config", type=click.Path(dir_okay=False),
              help="Only write the rank config for a real cluster (torchrun) and exit.")
@click.option("--collect", type=click.Path(file_okay=False),
              help="Fit the result-*.json files torchrun ranks wrote to this directory.")
def netbench(output, workers, min_size, max_size, points, repeats, warmup, ops, overlap_size, emulate, bandwidth,
             cpu_quota, pin_cpus, write_config, collect) -> None:
    """Measure point-to-point and all-reduce time against message size (gloo), fit alpha-beta,
    and write a network file for `sgdscale predict --network FILE`.

    \b
    On this machine (loopback):
      sgdscale netbench -o local.json
    On an emulated cluster, 4 nodes at 200 Mbit/s with 0.45 cores each (root):
      sgdscale netbench --emulate --workers 2,4 --bandwidth 200Mbit --cpu-quota 0.45 -o emu.json
    With compute/communication interference and the CPU cost per byte (docs/interference.md):
      sgdscale netbench --emulate --workers 2 --bandwidth 1Gbit --cpu-quota 0.45 --ops p2p,allreduce,overlap -o emu.json
    On a real cluster with torchrun (see sgdscale/runtime/netbench.py):
      sgdscale netbench --write-config nb.json --workers 4
      torchrun --nnodes 4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m sgdscale.runtime.rank --target sgdscale.runtime.netbench:bench_rank --config nb.json --out res
      sgdscale netbench --collect res -o cluster.json
    Time-sensitive: on a shared machine run it under `flock /tmp/sgdscale-cpu.lock`. Here or with
    --emulate, a launch whose largest ping-pong repeats unsteadily (times spreading over 10%: a disturbed
    machine) is measured again, up to twice, once the hypervisor takes under 0.05 cores; the file records
    every attempt.
    """
    from sgdscale.interrupts import preload_torch

    preload_torch()  # with Ctrl-C/SIGTERM held: an interrupted torch import aborts (interrupts.py)
    from sgdscale.jsonio import write_json_atomic
    from sgdscale.runtime import netbench as nb

    console = Console()
    if collect:
        network = nb.collect_results(collect)
        _show_and_write(console, network, output)
        return
    counts = parse_workers(workers)
    if counts[0] < 2:
        raise UserError(f"the network benchmark needs at least 2 processes, got --workers {workers}")
    sizes = nb.message_sizes(parse_size_bytes(min_size, "--min-size"), parse_size_bytes(max_size, "--max-size"),
                             points)
    config = nb.bench_config(sizes, repeats, warmup, [op.strip() for op in ops.split(",") if op.strip()])
    if "p2p" not in config["ops"] and not ("allreduce" in config["ops"] and 2 in counts):
        # said before measuring: the fit needs it, and a benchmark can run for minutes first
        raise UserError(f"a network file needs point-to-point figures: add p2p to --ops (--ops p2p,{ops}) "
                        "or measure a 2-process all-reduce (--workers 2,...)")
    if overlap_size is not None:
        config["overlap_bytes"] = max(nb.ELEMENT_BYTES, round(parse_size_bytes(overlap_size, "--overlap-size")
                                                              / nb.ELEMENT_BYTES) * nb.ELEMENT_BYTES)
    if write_config:
        write_json_atomic(write_config, config)
        console.print(f"wrote rank config {write_config} ({len(sizes)} sizes, {format_bytes(sizes[0])} to "
                      f"{format_bytes(sizes[-1])}); run it with torchrun as shown in `sgdscale netbench --help`")
        return
    if not output:
        raise UserError("say where to write the network file with -o FILE (e.g. -o net.json)")
    rate = parse_bandwidth_bps(bandwidth)
    environment: dict = {}
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("netbench", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        started = time.time()
        if emulate:
            from sgdscale.runtime.testbed import CFS_PERIOD_US, Testbed

            nodes = max(counts)
            quotas = parse_cpu_quota(cpu_quota, nodes)
            environment = {"mode": "emulated", "nodes": nodes, "bandwidth_bps": rate, "cpu_quota_cores": quotas,
                           "cfs_period_s": CFS_PERIOD_US / 1e6, "pin_cpus": pin_cpus}
            progress.update(task, description=f"netbench on {nodes} emulated nodes at {format_bandwidth(rate)}")
            with Testbed(nodes, rate, quotas, pin_cpus=pin_cpus) as bed:
                environment["tbf"] = {"burst_bytes": bed.tbf.burst_bytes, "limit_bytes": bed.tbf.limit_bytes}
                environment["tcp_congestion_control"] = bed.tcp_congestion_control
                source = (f"netbench on an emulated cluster: {nodes} nodes, {format_bandwidth(rate)} tbf links, "
                          f"{', '.join(f'{q:g}' for q in quotas)} cores")
                network = nb.run_netbench(counts, config, placement=bed, bandwidth_hint_bps=rate,
                                          on_progress=on_progress, environment=environment, source=source)
        else:
            if cpu_quota is not None:
                raise UserError("--cpu-quota only applies with --emulate")
            if pin_cpus:
                raise UserError("--pin-cpus only applies with --emulate")
            environment = {"mode": "local (loopback)", "processes": counts}
            progress.update(task, description="netbench on this machine (loopback)")
            network = nb.run_netbench(counts, config, on_progress=on_progress, environment=environment,
                                      source=f"netbench on this machine (loopback), {', '.join(map(str, counts))} processes")
    _show_and_write(console, network, output)
    console.print(f"took {format_seconds(time.time() - started)}")


def _show_and_write(console: Console, network, output: str | None) -> None:
    from sgdscale.jsonio import write_json_atomic

    console.print(network_table(network))
    console.print(fits_table(network))
    for note in network_notes(network):
        console.print(note, highlight=False, soft_wrap=True)
    if network.sharing is None and any(point.op == "incast" for point in network.points):
        from sgdscale.comm.sharing import UNMEASURED_SHARING_NOTE

        console.print("note: link sharing was not measured (incast needs 2 senders, i.e. a count of 3 or more in "
                      f"--workers); with this file {UNMEASURED_SHARING_NOTE}", highlight=False, soft_wrap=True)
    if network.bucket_copy is not None:
        rate = 1.0 / network.bucket_copy.beta_s_per_byte if network.bucket_copy.beta_s_per_byte > 0 else float("inf")
        console.print(f"copy right after an all-reduce (DDP's bucket copies): {format_bytes(rate)}/s per node",
                      highlight=False, soft_wrap=True)
    if output:
        write_json_atomic(output, network.to_json())
        console.print(f"wrote {output}")


def register(app: click.Group) -> None:
    app.add_command(testbed_group)
    app.add_command(netbench)
