"""`sgdscale validate`: predicted vs measured throughput over a grid of real runs."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sgdscale.errors import UserError
from sgdscale.units import format_bandwidth, parse_bandwidth_bps, parse_workers

# Per-model settings for the grid: sized so a step takes a few hundred ms on a 0.2-core node and
# the three models span compute-bound (cnn) to communication-bound (mlp) with a transformer between.
DEFAULT_SPECS = {
    "mlp": dict(batch_size=32, options=(("width", 512), ("depth", 4))),
    "cnn": dict(batch_size=16, image_size=32),
    "gpt2": dict(batch_size=4, seq_len=64, options=(("layers", 2), ("hidden", 128), ("vocab", 2048))),
    "bert": dict(batch_size=4, seq_len=64, options=(("layers", 2), ("hidden", 128), ("vocab", 2048))),
    "resnet18": dict(batch_size=4, image_size=32),
    "mobilenet_v2": dict(batch_size=4, image_size=32),
    "densenet121": dict(batch_size=4, image_size=32),  # 364 tensors: the most messages per PS step
}


def replay_spec(name: str, batch_size: int | None, compute: str):
    """A replay case's model: a built-in profile name or a profile file, at its profiled batch."""
    from sgdscale.profile import load_profile
    from sgdscale.runtime.replay import COMPUTE_MODES
    from sgdscale.validation import ModelSpec

    if batch_size:
        raise UserError("--batch-size does not apply to --workload replay: a replay runs the profiled batch")
    if compute not in COMPUTE_MODES:
        raise UserError(f"unknown --replay-compute '{compute}'; use one of: {', '.join(COMPUTE_MODES)}")
    try:
        profile = load_profile(name)
    except UserError as error:
        raise UserError(f"--workload replay takes profiles in --models: {error}") from None
    return ModelSpec(model=name, batch_size=profile.batch_size, kind="replay", replay_compute=compute)


def model_spec(name: str, batch_size: int | None):
    from sgdscale.validation import ModelSpec

    if name not in DEFAULT_SPECS:
        raise UserError(f"validate knows settings for: {', '.join(DEFAULT_SPECS)}; got '{name}'")
    settings = dict(DEFAULT_SPECS[name])
    if batch_size:
        settings["batch_size"] = batch_size
    return ModelSpec(model=name, **settings)


def results_table(rows: list[dict]) -> Table:
    from sgdscale.validation import case_kind

    table = Table(title="predicted vs measured throughput (samples/s)")
    for column in ("kind", "model", "strategy", "workers", "bandwidth", "measured", "band", "fine", "err", "coarse",
                   "err"):
        table.add_column(column, justify="left" if column in ("kind", "model", "strategy") else "right")
    for row in sorted(rows, key=case_kind):
        pred, err = row["predicted_throughput"], row["error"]
        low, median, high = row.get("measured_band") or [row["measured_throughput"]] * 3
        band = f"{(low - median) / median:+.0%}..{(high - median) / median:+.0%} ({len(row.get('runs', [0]))} runs)"
        table.add_row(
            case_kind(row), row["model"], row["strategy"], str(row["workers"]), format_bandwidth(row["bandwidth_bps"]),
            f"{row['measured_throughput']:.1f}", band,
            f"{pred.get('fine', float('nan')):.1f}", f"{err.get('fine', float('nan')):+.1%}",
            f"{pred.get('coarse', float('nan')):.1f}", f"{err.get('coarse', float('nan')):+.1%}",
        )
    return table


def summary_table(summary: list[dict]) -> Table:
    table = Table(title="absolute error of predicted throughput (real and replay cases apart)")
    for column in ("kind", "method", "strategy", "cases", "median", "max"):
        table.add_column(column, justify="left" if column in ("kind", "method", "strategy") else "right")
    for item in summary:
        table.add_row(item.get("kind", "real"), item["method"], item["strategy"], str(item["cases"]),
                      f"{item['median_abs_error']:.1%}", f"{item['max_abs_error']:.1%}")
    return table


def range_line(rows: list[dict]) -> str | None:
    """How many cases measured inside the 80% range `predict` states for them (sgdscale.heldout_ranges)."""
    from sgdscale.heldout_ranges import SOURCE_WORDS, coverage, describe_sets, shipped

    ranges = shipped()
    scored = [r for r in coverage(ranges, rows) if r["inside"] is not None]
    parts = []
    for source in ("measured", "nominal", "budget"):
        counts = [f"{method} {sum(r['inside'] for r in mine)}/{len(mine)}" for method in ("fine", "coarse")
                  if (mine := [r for r in scored if r["source"] == source and r["method"] == method])]
        if counts:
            parts.append(f"from {SOURCE_WORDS[source]} {', '.join(counts)}")
    if not parts:
        return None
    return (f"measured inside the 80% range `sgdscale predict` states (made from held-out sets "
            f"{describe_sets(ranges.data['sets'])}): "
            + "; ".join(parts))


@click.command("validate")
@click.option("--models", default="mlp,cnn,gpt2", show_default=True,
              help=f"Comma-separated models (known: {', '.join(DEFAULT_SPECS)}); with --workload replay, "
                   "profiles: built-in names (sgdscale show --list) or files.")
@click.option("--workload", default="real", show_default=True,
              help="real: train the models (profiled first under the node quota) | replay: replay the profiles "
                   "(runtime/replay.py: profiled sizes, order and times, real communication; no profiling).")
@click.option("--replay-compute", default="sleep", show_default=True,
              help="Replay: sleep (isolates the network and coordination model) | spin (burns the node's CPU "
                   "quota like real compute).")
@click.option("--workers", "workers_text", default="2,4", show_default=True, help="Worker counts, e.g. 2,4,8.")
@click.option("--bandwidth", "bandwidth_text", default="200Mbit,1Gbit", show_default=True,
              help="Comma-separated NIC rates of the emulated nodes.")
@click.option("--strategies", default="allreduce,ps-sync,ps-async", show_default=True)
@click.option("--ps", "ps_count", type=int, default=1, show_default=True, help="Server shards for PS strategies.")
@click.option("--batch-size", type=int, default=None, help="Override every model's per-worker batch.")
@click.option("--cpu-per-node", type=float, default=0.2, show_default=True,
              help="CPU cores per emulated node (all nodes together must fit this machine's cores).")
@click.option("--iterations", type=int, default=15, show_default=True,
              help="Measured iterations per real run (async PS: 3x, its workers' phases wander).")
@click.option("--min-window", "min_window_s", type=float, default=20.0, show_default=True,
              help="Seconds the measured window lasts at least, by the profile's one-worker step: more "
                   "iterations where a step is short (up to 10x --iterations), so that a few seconds of the "
                   "machine's drift do not set the result. 0: exactly --iterations.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Unmeasured iterations per real run.")
@click.option("--repeats", type=int, default=3, show_default=True,
              help="Rounds over the whole grid: each case is measured this many times, interleaved with the "
                   "other cases, and scored by its median, with its band (min..max) shown.")
@click.option("--network-per-round/--network-once", default=True, show_default=True,
              help="Benchmark the network again before every round, beside that round's profiles: what a "
                   "message and a byte of transport cost the CPU moves by up to 2x over hours on a shared "
                   "machine, and the PS predictions charge it. --network-once: one file for all rounds.")
@click.option("--pin-cpus/--no-pin-cpus", default=True, show_default=True,
              help="Pin each emulated node to its own core(s) besides its CPU quota.")
@click.option("--repredict", is_flag=True,
              help="Recompute the predictions of finished cases from their cached inputs (after a model change).")
@click.option("--trace-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Trace every run and write its measured timeline side by side with the fine prediction "
                   "(Chrome trace, ui.perfetto.dev), one CASE[-rN].trace.json per run; with --repredict, "
                   "rewrite them from the kept measurements.")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("validation-out"), show_default=True,
              help="Folder for results.json, cached profiles and network files, and the plot.")
def validate(models: str, workload: str, replay_compute: str, workers_text: str, bandwidth_text: str,
             strategies: str, ps_count: int, batch_size: int | None, cpu_per_node: float, iterations: int,
             min_window_s: float, warmup: int, repeats: int, network_per_round: bool, pin_cpus: bool, repredict: bool,
             trace_dir: Path | None, out_dir: Path) -> None:
    """Check predictions against real distributed training on an emulated cluster (needs root
    and torch).

    For every model x bandwidth x strategy x worker count: profile the model on one emulated node
    under the same CPU quota, benchmark the shaped network, predict (fine and coarse), run the real
    training (one network namespace, tbf-shaped link and CPU quota per node), and report predicted,
    measured and error. Finished cases are saved at once; rerun the same command to resume.

    With --workload replay, --models are profiles and each run replays its profile (no
    profiling step): big built-in profiles with 8-16 workers fit this machine. Replay and real
    cases are reported apart.

    \b
    Examples:
      sgdscale validate --models mlp,gpt2 --workers 2,4 --bandwidth 200Mbit -o val/
      sgdscale validate --workload replay --models resnet50,gpt2 --workers 4,8,16 --cpu-per-node 0.1 \
          --bandwidth 1Gbit --strategies allreduce -o val/
      sgdscale validate --models mlp --workers 2 --bandwidth 200Mbit --repeats 1 --trace-dir val/traces -o val/
    """
    from sgdscale.interrupts import preload_torch

    preload_torch()  # with Ctrl-C/SIGTERM held: an interrupted torch import aborts (interrupts.py)
    from sgdscale.strategy import KINDS
    from sgdscale.validation import Grid, Validator, summarize

    if workload not in ("real", "replay"):
        raise UserError(f"unknown --workload '{workload}'; use real or replay")
    names = [name.strip() for name in models.split(",") if name.strip()]
    if workload == "replay":
        specs = [replay_spec(name, batch_size, replay_compute) for name in names]
    else:
        specs = [model_spec(name, batch_size) for name in names]
    kinds = [s.strip() for s in strategies.split(",") if s.strip()]
    for kind in kinds:
        if kind not in KINDS:
            raise UserError(f"unknown strategy '{kind}'; choose from {', '.join(KINDS)}")
    if ps_count < 1:
        raise UserError(f"--ps must be at least 1, got {ps_count}")
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {repeats}")
    if min_window_s < 0:
        raise UserError(f"--min-window must be 0 or more seconds, got {min_window_s:g}")
    grid = Grid(specs=specs, workers=parse_workers(workers_text),
                bandwidths_bps=[parse_bandwidth_bps(b) for b in bandwidth_text.split(",")],
                strategies=kinds, ps_count=ps_count, cpu_per_node_cores=cpu_per_node,
                iterations=iterations, warmup=warmup, repeats=repeats, pin_cpus=pin_cpus,
                min_window_s=min_window_s, network_per_round=network_per_round)
    console = Console(stderr=True)
    validator = Validator(grid, out_dir, log=lambda text: console.log(text), trace_dir=trace_dir)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("validation", total=len(grid.cases()) * repeats)

        def on_case(case, index, total):
            progress.update(task, completed=index, description=f"{case.key}")

        def on_row(row):
            fine, coarse = row["error"].get("fine", float("nan")), row["error"].get("coarse", float("nan"))
            last = row["runs"][-1]["measured_throughput"]
            console.log(f"{row['key']} run {len(row['runs'])}: measured {last:.1f} samples/s "
                        f"(median so far {row['measured_throughput']:.1f}), fine {fine:+.1%}, coarse {coarse:+.1%}")

        rows = validator.run(on_case=on_case, on_row=on_row, repredict=repredict)
        progress.update(task, completed=len(grid.cases()) * repeats)
    out = Console()
    wanted = {case.key for case in grid.cases()}
    shown = [row for row in rows if row["key"] in wanted]
    out.print(results_table(shown))
    out.print(summary_table(summarize(shown)))
    line = range_line(shown)
    if line:
        out.print(line, highlight=False, soft_wrap=True)
    from sgdscale.report.plot import plot_validation

    # The plot shows every case in the results file (earlier grids written to the same folder too).
    points = [{"predicted": row["predicted_throughput"][m], "measured": row["measured_throughput"], "method": m,
               "strategy": row["strategy"], "band": row.get("measured_band")}
              for row in rows for m in ("fine", "coarse") if m in row["predicted_throughput"]]
    plot_validation(points, out_dir / "validation.png", title=f"predicted vs measured throughput ({len(rows)} cases)")
    out.print(f"results: {out_dir / 'results.json'}; plot: {out_dir / 'validation.png'}"
              + (f"; timelines: {trace_dir}/*.trace.json (ui.perfetto.dev)" if trace_dir else ""))


def register(app: click.Group) -> None:
    app.add_command(validate)
