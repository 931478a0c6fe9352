"""`sgdscale profile`: measure one training step of a real model; `sgdscale show`: summarise a
profile layer by layer. torch is imported only inside `profile`, so `show` works without it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from sgdscale.commands.calibration import apply_calibration, calibration_line, calibration_options
from sgdscale.errors import UserError
from sgdscale.profile import Profile, builtin_profile_names, load_profile, save_profile
from sgdscale.units import format_bytes, format_seconds, parse_key_values


def profile_table(profile: Profile) -> Table:
    """Per-layer times, parameters and gradient bytes, with totals."""
    table = Table(
        title=f"{profile.model}: batch {profile.batch_size} on {profile.device or 'unknown device'}",
        show_footer=True,
    )
    table.add_column("#", justify="right")
    # fold, never cut: two layers cut to the same "layer1.0.co…" could not be told apart
    table.add_column("layer", footer="total", overflow="fold")
    table.add_column("forward", justify="right", footer=format_seconds(profile.forward_s))
    table.add_column("backward", justify="right", footer=format_seconds(profile.backward_s))
    table.add_column("params", justify="right", footer=f"{profile.param_count:,}")
    table.add_column("gradient", justify="right", footer=format_bytes(profile.gradient_bytes))
    table.add_column("tensors", justify="right", footer=str(len(profile.tensors)))
    counted = profile.has_counts
    if counted:
        total = sum(l.forward_flops + l.backward_flops for l in profile.layers)
        table.add_column("GFLOP f+b", justify="right", footer=f"{total / 1e9:.3g}")
    for index, layer in enumerate(profile.layers):
        table.add_row(
            str(index),
            layer.name,
            format_seconds(layer.forward_s),
            format_seconds(layer.backward_s),
            f"{sum(t.numel for t in layer.params):,}",
            format_bytes(sum(t.bytes for t in layer.params)),
            str(len(layer.params)),
            *([f"{(layer.forward_flops + layer.backward_flops) / 1e9:.3g}"] if counted else []),
        )
    return table


def model_line(profile: Profile) -> str:
    """Which model exactly, with its options and batch, and whether it is the built-in one."""
    from sgdscale.models import describe_model

    return describe_model(profile.model, profile.input, profile.batch_size)


def profile_summary_lines(profile: Profile) -> list[str]:
    step = profile.step
    lines = [
        f"model: {model_line(profile)}",
        f"step outside forward/backward: data {format_seconds(step.data_s)}, "
        f"host-to-device {format_seconds(step.h2d_s)}, optimizer {format_seconds(step.optimizer_s)}",
        f"sum of parts: {format_seconds(profile.compute_s)} per step "
        f"({profile.param_count:,} parameters, {format_bytes(profile.gradient_bytes)} of gradients)",
    ]
    if profile.iteration_s is not None:
        stats = profile.iteration_s
        lines.append(
            f"measured step (uninstrumented): mean {format_seconds(stats.mean)}, p50 {format_seconds(stats.p50)}, "
            f"p95 {format_seconds(stats.p95)} over {len(stats.samples)} iterations"
        )
        gap = (profile.compute_s - stats.mean) / stats.mean
        lines.append(f"sum of parts vs measured step: {gap:+.1%}")
    if profile.framework.name != "unknown":
        lines.append(
            f"measured with {profile.framework.name} {profile.framework.version}, "
            f"{profile.measured_iterations} iterations"
        )
    return lines


@click.command("show")
@click.argument("profile", required=False)
@click.option("--list", "list_builtin", is_flag=True, help="List the built-in profiles.")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the (calibrated) profile JSON here.")
@calibration_options
def show(profile: str | None, list_builtin: bool, output: Path | None, **calibration: str | int | None) -> None:
    """Summarise PROFILE (a file or a built-in profile name): per-layer forward and backward
    time, parameters, gradient bytes, counted flops, and totals. With calibration options, show
    (and with -o save) the profile moved to another device."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:  # a file or pipe: room for the table
        console = Console(width=120)
    if list_builtin or profile is None:
        for name in builtin_profile_names():
            console.print(name)
        return
    measured = load_profile(profile)
    loaded = apply_calibration(measured, **calibration)
    console.print(profile_table(loaded))
    for line in profile_summary_lines(loaded):
        console.print(line)
    note = calibration_line(measured, loaded)
    if note:
        console.print(note, highlight=False, soft_wrap=True)
    if output is not None:
        _check_output(output)
        save_profile(loaded, output)
        console.print(f"wrote {output}")


def _check_output(path: Path) -> None:
    """Fail before minutes of profiling, not after, when the output cannot be written."""
    from sgdscale.inputs import check_output_path

    check_output_path(path, "-o")


@click.command("profile")
@click.argument("model")
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Write the profile JSON here (atomically).")
@click.option("--json", "as_json", is_flag=True, help="Print the profile JSON to stdout instead of the table.")
@click.option("--batch-size", "-b", type=int, default=None,
              help="Samples per step (per worker). [default: the built-in model's, as its shipped profile "
                   "(mlp 64, resnet50 16, ...); 8 for your own model]")
@click.option("--image-size", type=int, help="Image side in pixels for image models (default 64; cnn 32).")
@click.option("--seq-len", type=int, help="Sequence length for gpt2/bert (default 64).")
@click.option("--input-shape", help="One sample's shape for a user model, without the batch, e.g. 3x32x32.")
@click.option("--num-classes", type=int, help="Classes of the classifier / generic loss.")
@click.option("--option", "extra", multiple=True, metavar="KEY=VALUE",
              help="Model option, repeatable: layers, hidden, heads, vocab, dropout (gpt2/bert), "
              "width, depth, input_dim (mlp), width (cnn).")
@click.option("--warmup", type=int, default=3, show_default=True, help="Unmeasured steps first.")
@click.option("--iterations", "-n", type=int, default=10, show_default=True,
              help="Measured steps (as many uninstrumented steps are interleaved).")
@click.option("--min-window", "min_window_s", type=float, default=0.0, show_default=True, metavar="SECONDS",
              help="Measure at least this long (instrumented and plain steps together, by the warm-up's "
                   "step), up to 10x --iterations: on a shared machine whose speed drifts, a longer "
                   "window gives a steadier profile.")
@click.option("--threads", type=int, default=1, show_default=True, help="torch intra-op threads.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="cuda: times with CUDA events (no synchronization inside the step).")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16", "tf32"]), default="fp32", show_default=True,
              help="Train in this precision (bf16/fp16: model and inputs cast; tf32: CUDA only).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for weights and synthetic batches.")
def profile_command(
    model: str,
    output: Path | None,
    as_json: bool,
    batch_size: int | None,
    image_size: int | None,
    seq_len: int | None,
    input_shape: str | None,
    num_classes: int | None,
    extra: tuple[str, ...],
    warmup: int,
    iterations: int,
    min_window_s: float,
    threads: int,
    device: str,
    precision: str,
    seed: int,
) -> None:
    """Measure one training step of MODEL layer by layer with real PyTorch and write a profile.

    MODEL is a built-in name (resnet18 resnet50 vgg16 alexnet mobilenet_v2 densenet121 gpt2 bert mlp
    cnn; random weights, synthetic data, nothing downloaded) or your own 'package.module:factory'
    (factory() returns an nn.Module; give --input-shape or a factory.make_batch).

    \b
    Examples:
      sgdscale profile resnet50 -o r50.json --batch-size 16 --image-size 96
      sgdscale profile gpt2 -o gpt2.json --option layers=6 --option hidden=384 --seq-len 128
      sgdscale profile mymodels.nets:small_net --input-shape 3x32x32 --num-classes 10 -o net.json
    """
    from sgdscale.interrupts import preload_torch

    preload_torch()  # with Ctrl-C/SIGTERM held: an interrupted torch import aborts (interrupts.py)
    if output is None and not as_json:
        raise UserError("say where to write the profile: -o FILE (or --json to print it)")
    from sgdscale.models import default_batch

    if batch_size is None:
        batch_size = default_batch(model)
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1; got {batch_size}")
    if iterations < 1:
        raise UserError(f"--iterations must be at least 1; got {iterations}")
    if warmup < 0:
        raise UserError(f"--warmup must be >= 0; got {warmup}")
    if threads < 1:
        raise UserError(f"--threads must be at least 1; got {threads}")
    if not min_window_s >= 0:
        raise UserError(f"--min-window must be >= 0 seconds; got {min_window_s}")
    if output is not None:
        _check_output(output)
    options = parse_key_values(extra)
    if input_shape is not None:
        options["input_shape"] = input_shape
    if num_classes is not None:
        options["num_classes"] = num_classes

    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    workload = build_workload(model, image_size=image_size, seq_len=seq_len, seed=seed, **options)
    result = profile_workload(
        workload, batch_size, warmup=warmup, iterations=iterations, threads=threads, device=device,
        precision=precision, progress=True, extra_provenance={"command": "sgdscale profile " + model, "seed": seed},
        min_window_s=min_window_s,
    )
    if output is not None:
        try:
            save_profile(result, output)
        except OSError as error:
            raise UserError(f"cannot write {output}: {error.strerror}") from None
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=1))
        return
    console = Console()
    console.print(profile_table(result))
    for line in profile_summary_lines(result):
        console.print(line)
    console.print(f"profiled: {model_line(result)}", highlight=False, soft_wrap=True)
    console.print(f"wrote {output}")


def register(app: click.Group) -> None:
    app.add_command(show)
    app.add_command(profile_command)
