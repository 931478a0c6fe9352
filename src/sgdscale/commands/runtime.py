"""`sgdscale train`: real data-parallel SGD on torch.distributed (gloo), measured per iteration."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from sgdscale.errors import UserError
from sgdscale.units import format_seconds, parse_bandwidth_bps, parse_key_values, parse_time_s

EPILOG = """\b
Examples:
  sgdscale train mlp --workers 2 -o mlp.json
  sgdscale train resnet18 --image-size 32 --batch-size 16 --strategy ps-sync --ps 1
  sgdscale train resnet18 --grouping per-layer --iterations 30 --warmup 5
  sgdscale train gpt2 --seq-len 64 --strategy ps-async --ps 2
  sgdscale train resnet50 --replay --workers 8 --emulate --bandwidth 1Gbit --cpu-quota 0.2
  sgdscale train my-profile.json --replay --replay-compute spin --strategy ps-sync

\b
Replay (--replay): MODEL is a profile file or a built-in profile name (sgdscale show --list).
Each profiled layer becomes a module with parameters of exactly the profiled sizes that spends
exactly its profiled forward and backward time; gradients become ready in the profiled order
(per-tensor grad_ready_s where the profile has it). Communication is fully real. Memory is
parameters + gradients only, so 8-16 resnet50 or gpt2 replay workers fit one machine.
  --replay-compute sleep  (default) sleep out each duration: the CPU stays free for
                          communication; isolates the network and coordination model.
  --replay-compute spin   burn calibrated CPU work: takes the node's CPU quota like real
                          compute, so compute/communication interference shows.
The optimizer is not run: its profiled time is spent instead (same sleep/spin). The batch is
the profiled one.

\b
Strategies and what they run:
  allreduce   DDP-style synchronous SGD. --grouping buckets: torch DDP (--bucket-mb, MiB;
              default 25 with a 1 MiB first bucket); per-tensor / per-layer: one async
              all-reduce per tensor / per module, started the moment its gradients are ready;
              single: one all-reduce of all gradients after backward (no overlap).
  ps-sync     parameter server on gloo send/recv: S shard ranks (--ps), tensors round-robin
              (or --placement size); workers push each gradient as soon as it is ready,
              shards average all N, update and send back; a layer's forward waits for its pull.
  ps-async    same, but each shard applies every worker's gradient on arrival and replies at
              once; no barrier. Throughput counts all workers' samples.
The first --warmup iterations are not measured (DDP uses its final buckets from the 3rd on).
One thread per rank (--threads). Throughput is over the window where all workers run.

\b
On a real multi-node cluster (one rank per node), write the run's config and start the
rank entry point with torchrun on every node; rank 0 writes the measurement:
  sgdscale train resnet50 --workers 4 --write-config run.json
  torchrun --nnodes 4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST0:29500 \\
      -m sgdscale.runtime.rank --target sgdscale.runtime.train:train_rank \\
      --config run.json --out results/
  # results/result-0.json (on rank 0's node) is the sgdscale.measurement/1 file.
For PS strategies the world size is workers + ps (ranks >= workers are the shards).
"""


@click.command("train", epilog=EPILOG)
@click.argument("model")
@click.option("--workers", "-n", type=int, default=2, show_default=True, help="Worker processes.")
@click.option("--strategy", default="allreduce", show_default=True,
              help="allreduce | ps-sync | ps-async.")
@click.option("--ps", "ps_count", type=int, default=None, help="Parameter-server shards (PS strategies; default 1).")
@click.option("--placement", "--ps-placement", "ps_placement", default="round-robin", show_default=True,
              help="Tensors on server shards: round-robin | size, as predict's --placement "
                   "(--ps-placement: its old name here; predict's --ps-placement is dedicated | colocated).")
@click.option("--grouping", default=None, help="allreduce: buckets (default) | single | per-layer | per-tensor.")
@click.option("--bucket-mb", type=float, default=None, help="DDP bucket cap in MiB (grouping buckets; default 25).")
@click.option("--batch-size", "-b", type=int, default=None,
              help="Samples per worker per step [default: the built-in model's, as its shipped profile "
                   "(mlp 64, resnet50 16, ...); 8 for your own model; a replay uses the profiled batch].")
@click.option("--iterations", "-i", type=int, default=20, show_default=True, help="Measured iterations per worker.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Unmeasured iterations first.")
@click.option("--image-size", type=int, default=None, help="Image side in pixels (image models).")
@click.option("--seq-len", type=int, default=None, help="Sequence length (gpt2, bert).")
@click.option("--option", "model_options", multiple=True, metavar="KEY=VALUE",
              help="Model option, e.g. --option width=512 for mlp (repeatable).")
@click.option("--lr", type=float, default=0.01, show_default=True, help="SGD learning rate.")
@click.option("--threads", type=int, default=1, show_default=True, help="torch threads per rank.")
@click.option("--timeout", default="300s", show_default=True, help="Stop the run after this long (e.g. 90s).")
@click.option("--port", type=int, default=None, help="Rendezvous port (default: a free one).")
@click.option("--emulate", is_flag=True,
              help="Run every rank on its own node of an emulated cluster (network namespace, tbf-shaped "
                   "link, CPU quota; needs root).")
@click.option("--bandwidth", default="1Gbit", show_default=True, help="Node link rate with --emulate.")
@click.option("--cpu-quota", type=float, default=None,
              help="CPU cores per node with --emulate [default: this machine's cores / nodes, at most 1].")
@click.option("--replay", is_flag=True,
              help="MODEL is a profile (file or built-in name): run a module that replays its layer sizes, "
                   "times and gradient order with real communication (see below).")
@click.option("--replay-compute", default=None,
              help="Replay: sleep (default: leaves the CPU to communication) | spin (burns the CPU quota "
                   "like real compute).")
@click.option("--pin-cpus/--no-pin-cpus", default=True, show_default=True,
              help="With --emulate, also pin each node to its own core(s), so nodes never queue on one core.")
@click.option("--link-queue", type=click.Choice(["fifo", "acks-first"]), default="fifo", show_default=True,
              help="With --emulate, how each shaped link queues: one FIFO (acknowledgements wait behind data, "
                   "up to 50 ms; the validated cluster) or acknowledgements first (an experiment).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), default=None, help="Write the measurement JSON here.")
@click.option("--write-config", type=click.Path(dir_okay=False), default=None,
              help="Only write the rank config (for torchrun on a real cluster) and exit.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None, metavar="FILE.json",
              help="Write the measured timeline (Chrome trace, open in ui.perfetto.dev): every worker's phases "
                   "per iteration, its all-reduces or pushes and waits, the servers' updates.")
@click.option("--trace-compare", "compare_path", type=click.Path(dir_okay=False), default=None, metavar="FILE.json",
              help="Write the measured and the predicted (fine) timeline of this run side by side, per worker, "
                   "both from iteration 0 at time 0.")
@click.option("--trace-profile", default=None, metavar="PROFILE",
              help="--trace-compare: the profile to predict from [default with --replay: the replayed one].")
@click.option("--trace-network", default=None, metavar="FILE",
              help="--trace-compare: the measured network (sgdscale netbench) to predict with [default with "
                   "--emulate: the nominal --bandwidth].")
def train(model, workers, strategy, ps_count, ps_placement, grouping, bucket_mb, batch_size, iterations,
          warmup, image_size, seq_len, model_options, lr, threads, timeout, port, emulate, bandwidth, cpu_quota,
          replay, replay_compute, pin_cpus, link_queue, output, write_config, trace_path, compare_path,
          trace_profile, trace_network) -> None:
    """Train MODEL with real data-parallel SGD and measure every iteration of every worker (the
    ground truth for `sgdscale predict`): on local processes, or with --emulate on an emulated
    cluster with one shaped network namespace and CPU quota per node.

    \b
    Examples:
      sgdscale train mlp --workers 2 --strategy allreduce -o m.json
      sgdscale train gpt2 --workers 4 --strategy ps-async --ps 1 --emulate --bandwidth 200Mbit
      sgdscale train resnet50 --replay --workers 8 --emulate --bandwidth 1Gbit --cpu-quota 0.2
    """
    from sgdscale.interrupts import preload_torch

    preload_torch()  # with Ctrl-C/SIGTERM held: an interrupted torch import aborts (interrupts.py)
    from dataclasses import asdict

    from sgdscale.jsonio import write_json_atomic
    from sgdscale.runtime.train import TrainConfig, count_tensors, replay_config, run_training, validate

    if strategy.startswith("ps") and ps_count is None:
        ps_count = 1
    options = dict(
        workers=workers, strategy=strategy, ps_count=ps_count or 0, ps_placement=ps_placement,
        grouping=grouping, bucket_mb=bucket_mb, iterations=iterations, warmup=warmup,
        image_size=image_size, seq_len=seq_len, model_options=parse_key_values(model_options), lr=lr,
        threads=threads,
    )
    if replay:
        if batch_size is not None:
            raise UserError("a replay runs the profiled batch: drop --batch-size (profile with the batch you want)")
        config = validate(replay_config(model, replay_compute or "sleep", **options))
    else:
        if replay_compute is not None:
            raise UserError("--replay-compute applies to replay runs only: add --replay")
        from sgdscale.models import default_batch

        config = validate(TrainConfig(model=model, batch_size=batch_size or default_batch(model), **options))
    if (trace_profile or trace_network) and not compare_path:
        raise UserError("--trace-profile/--trace-network say how to predict for --trace-compare FILE: add it")
    config.trace = bool(trace_path or compare_path)
    compare = (compare_inputs(model if replay else None, trace_profile, trace_network,
                              parse_bandwidth_bps(bandwidth) if emulate else None) if compare_path else None)
    timeout_s = parse_time_s(timeout, "timeout")
    if timeout_s <= 0:
        raise UserError("--timeout must be positive, e.g. 300s")
    console = Console(stderr=True)
    if write_config:
        count_tensors(config)  # validates the model name and options
        write_json_atomic(write_config, asdict(config))
        console.print(f"wrote {write_config}: world size {config.world_size} "
                      f"({config.workers} workers{f' + {config.ps_count} shards' if config.strategy != 'allreduce' else ''})")
        return

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    label = f"{'replay ' if replay else ''}{model}: {strategy}, {workers} workers" + (f", {config.ps_count} PS" if config.ps_count else "")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("iterations"), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(label, total=config.warmup + config.iterations)

        def on_progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        if emulate:
            import os

            from sgdscale.runtime.testbed import Testbed

            quota = cpu_quota or min(1.0, (os.cpu_count() or 1) / config.world_size)
            config.bandwidth_bps, config.cpu_quota = parse_bandwidth_bps(bandwidth), quota
            with Testbed(config.world_size, config.bandwidth_bps, quota, pin_cpus=pin_cpus,
                         link_queue=link_queue) as testbed:
                measurement = run_training(config, testbed, timeout_s=timeout_s, on_progress=on_progress)
        else:
            measurement = run_training(config, port=port, timeout_s=timeout_s, on_progress=on_progress)
    out = Console()
    out.print(measurement_table(measurement))
    stats = measurement.iteration_s
    out.print(
        f"throughput {measurement.throughput:,.1f} samples/s (whole cluster, {config.workers} x batch "
        f"{config.batch_size}); step mean {format_seconds(stats.mean)}, p50 {format_seconds(stats.p50)}, "
        f"p95 {format_seconds(stats.p95)}"
    )
    out.print(f"ran: {ran_line(config)}", highlight=False, soft_wrap=True)
    for line in cpu_lines(measurement.environment.cpu, config.workers) + network_lines(measurement.environment.network):
        out.print(line, highlight=False, soft_wrap=True)
    if output:
        from sgdscale.runtime.measurement import save_measurement

        # Written last, so a Ctrl-C while the table prints leaves no file beside exit status 130.
        save_measurement(measurement, output)
        out.print(f"measurement written to {output}")
    if trace_path:
        from sgdscale.report.timeline import write_measured_trace

        write_measured_trace(measurement, trace_path)
        out.print(f"measured timeline written to {trace_path} (open it in ui.perfetto.dev)")
    if compare_path:
        write_comparison(measurement, compare, compare_path)
        out.print(f"measured and predicted timelines written side by side to {compare_path}")


def compare_inputs(replayed: str | None, profile_arg: str | None, network_arg: str | None,
                   emulated_bps: float | None) -> dict:
    """What `--trace-compare` predicts from, loaded before the run so a bad file costs no run."""
    from sgdscale.comm import load_network
    from sgdscale.profile import load_profile

    source = profile_arg or replayed
    if source is None:
        raise UserError("--trace-compare needs a profile of the model to predict from: --trace-profile FILE "
                        "(make one with `sgdscale profile MODEL -o FILE`)")
    network = load_network(network_arg) if network_arg else None
    if network is None and emulated_bps is None:
        raise UserError("--trace-compare on local processes needs the network they share: --trace-network FILE "
                        "(measure it with `sgdscale netbench`), or run on the emulated cluster (--emulate)")
    return {"profile": load_profile(source), "profile_source": source, "network": network,
            "network_source": network_arg, "bandwidth_bps": emulated_bps}


def write_comparison(measurement, compare: dict, path: str) -> None:
    """The prediction of the run's own configuration, side by side with what it measured."""
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel
    from sgdscale.report.timeline import predicted_events, run_strategy, write_side_by_side

    cfg = measurement.config
    network = compare["network"]
    if network is not None:
        comm = CommModel.from_network(network)
        bandwidth_bps = compare["bandwidth_bps"] or 8.0 / network.p2p.beta_s_per_byte
        cluster = Cluster(cfg.workers, bandwidth_bps, network.p2p.alpha_s, max(1, cfg.ps_count))
    else:
        from sgdscale.runtime.testbed import LINK_FRAMING  # an emulated cluster's rate is tc's

        cluster = Cluster(cfg.workers, compare["bandwidth_bps"], ps_count=max(1, cfg.ps_count), framing=LINK_FRAMING)
        comm = CommModel.from_link(cluster.payload_bps, cluster.latency_s)
    replay = cfg.workload == "replay"
    if replay and cfg.replay_compute == "sleep":
        comm = comm.for_sleeping_workers()  # as validation predicts such a run
    # A replay spends the profiled means, so it is predicted without per-iteration variability.
    predicted = predicted_events(compare["profile"], cluster, run_strategy(cfg), comm, cfg.iterations,
                                 variability=not replay)
    write_side_by_side(measurement, predicted, path, prediction={
        "method": "fine", "profile": compare["profile_source"],
        "network": compare["network_source"] or f"nominal {cluster.bandwidth_bps:g} bit/s",
        "variability": not replay})


def ran_line(config) -> str:
    """The model exactly as run (built-in defaults plus the given options) and the strategy."""
    from sgdscale.models import describe_model, resolved_options

    if config.replay is not None:
        what = f"a replay of the profile {config.model} ({config.replay_compute} compute), batch {config.batch_size} per worker"
    else:
        options = resolved_options(config.model, {"image_size": config.image_size, "seq_len": config.seq_len,
                                                  **config.model_options})
        what = describe_model(config.model, options, config.batch_size)
    plan = config.strategy + (f" with {config.ps_count} server shard{'s' if config.ps_count > 1 else ''}"
                              if config.strategy != "allreduce" else f", grouping {config.grouping or 'buckets'}")
    return f"{what}; {config.workers} workers, {plan}"


def cpu_lines(cpu: dict | None, workers: int) -> list[str]:
    """What each node of the emulated cluster got of its CPU quota over the measured window (the
    evidence a noisy run leaves; `Testbed.cpu_report`), one line per node (node k runs rank k: the
    workers, then the shards); nothing for local runs."""
    if not cpu or not cpu.get("nodes"):
        return []
    lines = [f"CPU over the measured window ({cpu['wall_s']:.1f} s, CFS period {cpu['cfs_period_us'] / 1000:g} ms):"]
    for node in cpu["nodes"]:
        where = f" on CPU {','.join(map(str, node['cpus']))}" if node.get("cpus") else ""
        quota = f" of {node['quota_cores']:.2f}" if node.get("quota_cores") else ""
        got = "received ? cores" if node.get("received_cores") is None else f"received {node['received_cores']:.2f}{quota} cores"
        split = (f" (user {node['user_cores']:.2f}, kernel {node['system_cores']:.2f})"
                 if "user_cores" in node and "system_cores" in node else "")
        k = node["node"]
        role = f"worker {k}" if k < workers else f"PS shard {k - workers}"
        lines.append(f"  {role}{where}: {got}{split}, throttled in "
                     f"{100 * node['throttled_periods_fraction']:.0f}% of periods")
    if cpu.get("other_load_cores") is not None:
        lines.append(f"  the rest of the machine used {cpu['other_load_cores']:.2f} cores meanwhile")
    return lines


def network_lines(network: dict | None) -> list[str]:
    """The cluster's TCP losses over the measured window (`Testbed.network_report`), the evidence a
    run whose flows lost packets leaves; nothing for local runs."""
    if not network:
        return []
    sent = network["segments_out"]
    share = f" ({network['retransmitted_segments'] / sent:.2%} of {sent:,} sent)" if sent else ""
    return [f"TCP over the measured window: {network['retransmitted_segments']:,} segments retransmitted{share}, "
            f"{network['timeouts']} retransmission timeouts; the links' queues dropped "
            f"{network['dropped_in'] + network['dropped_out']:,} packets"]


def measurement_table(measurement) -> Table:
    """Per-worker iteration statistics (and per-shard load for PS runs)."""
    import numpy as np

    cfg = measurement.config
    table = Table(title=f"{cfg.model}{' (replay, ' + cfg.replay_compute + ')' if cfg.workload == 'replay' else ''} {cfg.strategy}"
                  + (f" ({cfg.grouping})" if cfg.grouping else f" ({cfg.ps_count} shards)")
                  + f": {cfg.iterations} measured iterations, batch {cfg.batch_size} per worker")
    for name in ("rank", "step mean", "step p50", "step p95", "compute mean", "wait mean", "samples/s"):
        table.add_column(name, justify="right")
    for worker in measurement.workers:
        steps = np.asarray(worker.iteration_s)
        compute = format_seconds(float(np.mean(worker.compute_s))) if worker.compute_s else "-"
        wait = format_seconds(float(np.mean(worker.wait_s))) if worker.wait_s else "-"
        table.add_row(
            str(worker.rank), format_seconds(float(steps.mean())), format_seconds(float(np.percentile(steps, 50))),
            format_seconds(float(np.percentile(steps, 95))), compute, wait, f"{cfg.batch_size / steps.mean():,.1f}",
        )
    for server in measurement.servers:
        table.add_row(f"PS {server.rank}", "-", "-", "-", f"busy {format_seconds(server.busy_s)}",
                      f"{len(server.tensors)} tensors", "-")
    return table


def register(app: click.Group) -> None:
    app.add_command(train)
