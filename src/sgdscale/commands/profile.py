"""`sgdscale show`: read a profile and summarise it layer by layer."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from sgdscale.profile import Profile, builtin_profile_names, load_profile
from sgdscale.units import format_bytes, format_seconds


def profile_table(profile: Profile) -> Table:
    """Per-layer times, parameters and gradient bytes, with totals."""
    table = Table(
        title=f"{profile.model}: batch {profile.batch_size} on {profile.device or 'unknown device'}",
        show_footer=True,
    )
    table.add_column("#", justify="right")
    table.add_column("layer", footer="total")
    table.add_column("forward", justify="right", footer=format_seconds(profile.forward_s))
    table.add_column("backward", justify="right", footer=format_seconds(profile.backward_s))
    table.add_column("params", justify="right", footer=f"{profile.param_count:,}")
    table.add_column("gradient", justify="right", footer=format_bytes(profile.gradient_bytes))
    table.add_column("tensors", justify="right", footer=str(len(profile.tensors)))
    for index, layer in enumerate(profile.layers):
        table.add_row(
            str(index),
            layer.name,
            format_seconds(layer.forward_s),
            format_seconds(layer.backward_s),
            f"{sum(t.numel for t in layer.params):,}",
            format_bytes(sum(t.bytes for t in layer.params)),
            str(len(layer.params)),
        )
    return table


def profile_summary_lines(profile: Profile) -> list[str]:
    step = profile.step
    lines = [
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
def show(profile: str | None, list_builtin: bool) -> None:
    """Summarise PROFILE (a file or a built-in profile name): per-layer forward and backward
    time, parameters, gradient bytes, and totals."""
    console = Console()
    if list_builtin or profile is None:
        for name in builtin_profile_names():
            console.print(name)
        return
    loaded = load_profile(profile)
    console.print(profile_table(loaded))
    for line in profile_summary_lines(loaded):
        console.print(line)


def register(app: click.Group) -> None:
    app.add_command(show)
