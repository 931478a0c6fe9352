"""`sgdscale sweep`: predictions over a grid (sgdscale.sweep), streamed to Parquet or CSV, resumable."""

from __future__ import annotations

import click

from sgdscale.comm.framing import FRAMINGS
from sgdscale.errors import UserError

# CLI option -> spec key; each takes a comma-separated list (workers/nodes take predict's COUNTS syntax).
GRID_OPTIONS = {
    "workers": "workers", "nodes": "nodes", "gpus_per_node": "gpus_per_node", "bandwidth": "bandwidth",
    "latency": "latency", "intra_bandwidth": "intra_bandwidth", "intra_latency": "intra_latency",
    "strategy": "strategy", "grouping": "grouping", "bucket_mb": "bucket_mb", "ps": "ps",
    "ps_placement": "ps_placement", "placement": "placement", "allreduce": "allreduce", "algorithm": "algorithm",
    "framing": "framing",
    "mtu": "mtu", "method": "method",
    "iterations": "iterations", "warmup": "warmup", "seed": "seed",
}


@click.command("sweep")
@click.argument("profile", required=False)
@click.option("--spec", "spec_path", default=None, metavar="FILE.yaml|FILE.json",
              help="The grid as a YAML/JSON mapping (keys as the options, with underscores); options override it.")
@click.option("--workers", "-n", default=None, metavar="COUNTS", help="Worker counts, e.g. 1-64:x2. [default: 1-64:x2]")
@click.option("--nodes", default=None, metavar="COUNTS", help="Node counts instead of --workers (x --gpus-per-node).")
@click.option("--gpus-per-node", default=None, metavar="G,...", help="Devices per node, e.g. 1,8. [default: 1]")
@click.option("--bandwidth", default=None, metavar="BW,...", help="NIC bandwidths, e.g. 1Gbit,10Gbit,100Gbit.")
@click.option("--latency", default=None, metavar="T,...", help="NIC latencies, e.g. 5us,50us. [default: 20us]")
@click.option("--intra-bandwidth", default=None, help="Intra-node link, e.g. 300GB/s (one value).")
@click.option("--intra-latency", default=None, help="Intra-node latency, e.g. 2us (one value).")
@click.option("--strategy", default=None, metavar="S,...", help="allreduce, ps-sync, ps-async. [default: allreduce]")
@click.option("--grouping", default=None, metavar="G,...",
              help="per-tensor, per-layer, buckets, single, mg-wfbp. [default: each strategy's default]")
@click.option("--bucket-mb", default=None, metavar="MIB,...", help="DDP bucket caps in MiB. [default: 25]")
@click.option("--ps", default=None, metavar="S,...", help="Server shard counts (parameter servers). [default: 1]")
@click.option("--ps-placement", default=None, metavar="P,...", help="dedicated, colocated. [default: dedicated]")
@click.option("--placement", default=None, metavar="P,...",
              help="Tensors on server shards: round-robin, size. [default: round-robin]")
@click.option("--allreduce", default=None, metavar="A,...", help="flat, hierarchical, tree, auto (multi-device nodes).")
@click.option("--algorithm", default=None, help="ring, tree or halving-doubling (one value). [default: ring]")
@click.option("--framing", type=click.Choice(list(FRAMINGS)), default=None,
              help="What --bandwidth counts, as for predict: ethernet (line rate; TCP/IP headers and framing take "
                   "5.9% at MTU 1500), tc (a Linux tc shaped rate), none (already payload, e.g. InfiniBand). "
                   "[default: ethernet]")
@click.option("--mtu", type=int, default=None, metavar="BYTES", help="Ethernet MTU (9000: jumbo frames). [default: 1500]")
@click.option("--method", default=None, metavar="M,...", help="coarse, fine. [default: coarse]")
@click.option("--iterations", type=int, default=None, help="Simulated steps reported. [default: 100]")
@click.option("--warmup", type=int, default=None, help="Simulated steps discarded first. [default: 10]")
@click.option("--seed", type=int, default=None, help="Seed of the per-iteration variability. [default: 0]")
@click.option("--no-variability", is_flag=True, help="Use mean layer times (deterministic).")
@click.option("--output", "-o", required=True, metavar="FILE.parquet|FILE.csv",
              help="Rows stream here as tasks finish; rerun the same command to resume an interrupted sweep.")
@click.option("--jobs", "-j", type=int, default=None, help="Local worker processes. [default: all cores]")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run on a Dask distributed cluster, e.g. tcp://10.0.0.1:8786, instead of local processes.")
@click.option("--plot", "plot_prefix", default=None, metavar="PREFIX",
              help="Write PREFIX-heatmap.png (efficiency, workers x bandwidth, per strategy) and "
                   "PREFIX-curves.png (throughput vs workers per grouping).")
def sweep_command(profile: str | None, spec_path: str | None, output: str, jobs: int | None, scheduler: str | None,
                  plot_prefix: str | None, no_variability: bool, **options) -> None:
    """Predict every point of a grid for PROFILE (or the spec's `profile`): workers x bandwidth x
    latency x strategy x grouping x bucket size x server count (x devices per node, server placement,
    tensor placement, scheme, method). Each row is what `sgdscale predict` gives for that point, with
    the 80% range predict states for it (likely_low..likely_high, samples/s; likely_note says why a row
    has none).

    \b
    Examples:
      sgdscale sweep resnet50 --workers 1-256:x2 --bandwidth 1Gbit,10Gbit,100Gbit \\
          --strategy allreduce,ps-sync,ps-async --ps 1,4 -o r50.parquet --plot r50
      sgdscale sweep --spec grid.yaml -o grid.csv --scheduler tcp://127.0.0.1:8786
    """
    from sgdscale.sweep import Store, check_tasks, expand, load_spec, run_sweep

    spec = load_spec(spec_path) if spec_path else {}
    if profile is not None:
        spec["profile"] = profile
    for option, key in GRID_OPTIONS.items():
        if options.get(option) is not None:
            spec[key] = options[option]
    if no_variability:
        spec["variability"] = False
    if spec.get("profile") is None:
        raise UserError("give a PROFILE (file or built-in name such as resnet50) or a --spec with `profile:`")
    if options.get("workers") is not None and options.get("nodes") is not None:
        raise UserError("give --workers (total devices) or --nodes, not both")
    if jobs is not None and jobs < 1:
        raise UserError(f"--jobs must be at least 1, got {jobs}")
    from sgdscale.inputs import check_outputs

    check_outputs({"--output": output, **({"--plot": f"{plot_prefix}-heatmap.png"} if plot_prefix else {})})
    tasks = expand(spec)
    check_tasks(tasks)  # every bad input fails here, before a file is touched
    Store(output).read()  # an unreadable or foreign output file fails here too

    from rich.console import Console

    err = Console(stderr=True)
    with _bar(err, len(tasks)) as report:
        try:
            stats = run_sweep(tasks, output, jobs=jobs, scheduler=scheduler, progress=report)
        except KeyboardInterrupt:
            click.echo(f"finished tasks are in {output}: rerun the same command to resume", err=True)
            raise
    click.echo(f"{stats.tasks} tasks ({stats.reused} already in {output}, {stats.computed} computed, "
               f"{stats.predictions} predictions) in {stats.wall_s:.2f} s; {stats.rows} rows in {output}")
    if plot_prefix:
        from sgdscale.report.sweep_plot import plot_sweep
        from sgdscale.sweep import read_rows

        keys = {t["key"] for t in tasks}
        for path in plot_sweep([r for r in read_rows(output) if r["task"] in keys], plot_prefix):
            click.echo(f"plot written to {path}")


class _bar:
    """A progress bar on stderr (a terminal only)."""

    def __init__(self, console, total: int) -> None:
        self.console, self.total, self.bar, self.task = console, total, None, None

    def __enter__(self):
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"),
                                TimeRemainingColumn(), console=self.console, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total)
        return self.report

    def report(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def register(app: click.Group) -> None:
    app.add_command(sweep_command)
