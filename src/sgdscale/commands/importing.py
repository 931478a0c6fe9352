"""`sgdscale import ...`: profiles and network files from measurements made by other tools.

  kineto      a torch.profiler Chrome trace (+ model-info) -> sgdscale.profile/1
  model-info  the parameter tensors of a model, for `import kineto` (needs torch)
  bcaffe      a B-Caffe per-tensor log (tmp<N>comm.log) -> sgdscale.profile/1
  osu         OSU MPI_Allreduce latency tables -> sgdscale.network/1
Outputs are written atomically: a bad input leaves no file behind.
"""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from sgdscale.errors import UserError
from sgdscale.jsonio import write_json_atomic
from sgdscale.units import format_bytes, format_seconds


def _write(path: Path, data: dict) -> None:
    if path.is_dir():
        raise UserError(f"output {path} is a directory; give a file name, e.g. -o {path / 'out.json'}")
    try:
        write_json_atomic(path, data)
    except OSError as error:
        raise UserError(f"cannot write {path}: {error.strerror}") from None


def _summary(profile, output: Path) -> None:
    console = Console()
    console.print(
        f"{profile.model}: {len(profile.layers)} layers, {len(profile.tensors)} tensors, "
        f"{format_bytes(profile.gradient_bytes)} of gradients; forward {format_seconds(profile.forward_s)}, "
        f"backward {format_seconds(profile.backward_s)}, optimizer {format_seconds(profile.step.optimizer_s)}, "
        f"other {format_seconds(profile.step.data_s)} per step over {profile.measured_iterations} step(s)")
    console.print(f"wrote {output}")


@click.group("import")
def import_group() -> None:
    """Make a profile or network file from measurements another tool already made."""


@import_group.command("kineto")
@click.argument("trace", type=click.Path(path_type=Path))
@click.option("--model-info", "model_info", type=click.Path(path_type=Path), required=True,
              help="Parameter tensors of the traced model (from `sgdscale import model-info`).")
@click.option("--batch-size", "-b", type=int, required=True, help="Samples per traced step.")
@click.option("--model", help="Model name for the profile (default: the model-info's).")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Profile JSON to write.")
def kineto_command(trace: Path, model_info: Path, batch_size: int, model: str | None, output: Path) -> None:
    """Turn a torch.profiler Chrome TRACE of a few training steps into a profile.

    \b
    Record with torch.profiler.profile(with_stack=True, with_modules=True, schedule=...) and
    prof.step() after each step; CPU traces only.
    Example:
      sgdscale import model-info cnn -o cnn.info.json
      sgdscale import kineto trace.json --model-info cnn.info.json --batch-size 32 -o cnn.json
    """
    from sgdscale.importing.kineto import import_kineto
    from sgdscale.importing.modelinfo import load_model_info

    profile = import_kineto(trace, load_model_info(model_info), batch_size, model)
    _write(output, profile.to_json())
    _summary(profile, output)


@import_group.command("model-info")
@click.argument("model")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Model-info JSON to write.")
@click.option("--image-size", type=int, help="Image side for image models (as for `sgdscale profile`).")
@click.option("--seq-len", type=int, help="Sequence length for gpt2/bert.")
@click.option("--input-shape", help="One sample's shape for a user model, e.g. 3x32x32.")
@click.option("--option", "extra", multiple=True, metavar="KEY=VALUE", help="Model option, as for `sgdscale profile`.")
def model_info_command(model: str, output: Path, image_size: int | None, seq_len: int | None,
                       input_shape: str | None, extra: tuple[str, ...]) -> None:
    """Write the parameter tensors of MODEL (built-in name or package.module:factory), in forward
    call order (one forward pass of a 2-sample batch), for `sgdscale import kineto`."""
    from sgdscale.units import parse_key_values
    from sgdscale.importing.modelinfo import model_info_from_module
    from sgdscale.profiling.zoo import build_workload

    options = parse_key_values(extra)
    if input_shape is not None:
        options["input_shape"] = input_shape
    workload = build_workload(model, image_size=image_size, seq_len=seq_len, **options)
    inputs, _ = workload.make_batch(2)

    def forward() -> None:
        from sgdscale.profiling.profiler import _call

        _call(workload.module, inputs)

    info = model_info_from_module(workload.module, workload.name, forward)
    _write(output, info.to_json())
    Console().print(f"{info.model}: {len(info.modules)} parameter-owning modules, "
                    f"{sum(len(m.params) for m in info.modules)} tensors; wrote {output}")


@import_group.command("bcaffe")
@click.argument("log", type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Profile JSON to write.")
@click.option("--workers", type=int, help="Workers the log was taken on (default: the number in its name).")
@click.option("--model", default="googlenet", show_default=True, help="Model name for the profile.")
@click.option("--batch-size", "-b", type=int, default=64, show_default=True,
              help="Samples per worker per step (not in the log).")
@click.option("--forward-ratio", type=float, default=0.5, show_default=True,
              help="Forward time as a fraction of each layer's backward (not in the log).")
def bcaffe_command(log: Path, output: Path, workers: int | None, model: str, batch_size: int,
                   forward_ratio: float) -> None:
    """Turn a B-Caffe per-tensor LOG (tmp<N>comm.log) into a profile; the measured reductions
    are kept in its provenance."""
    from sgdscale.importing.bcaffe import bcaffe_profile, parse_bcaffe_log

    profile = bcaffe_profile(parse_bcaffe_log(log, workers), log.name, model, batch_size, forward_ratio)
    _write(output, profile.to_json())
    _summary(profile, output)


@import_group.command("osu")
@click.argument("tables", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="Network JSON to write.")
def osu_command(tables: tuple[Path, ...], output: Path) -> None:
    """Turn OSU MPI_Allreduce latency TABLES (one per worker count, e.g. allreduce2.log
    allreduce4.log) into a network file for `sgdscale predict --network`."""
    from sgdscale.importing.bcaffe import osu_network

    network = osu_network(list(tables))
    _write(output, network.to_json())
    console = Console()
    for n, fit in network.allreduce.items():
        console.print(f"all-reduce, {n} workers: alpha {format_seconds(fit.alpha_s)}, "
                      f"{8 / fit.beta_s_per_byte / 1e9:.2f} Gbit/s effective")
    console.print(f"point-to-point (derived): alpha {format_seconds(network.p2p.alpha_s)}, "
                  f"{8 / network.p2p.beta_s_per_byte / 1e9:.2f} Gbit/s; wrote {output}")


def register(app: click.Group) -> None:
    app.add_command(import_group)
