"""B-Caffe per-tensor logs -> `sgdscale.profile/1`; OSU all-reduce tables -> `sgdscale.network/1`.

B-Caffe (a Caffe fork with MPI all-reduce across nodes, used for WFBP/MG-WFBP experiments) logs
one line per learnable tensor after the glog prefix: ``[id, floats, compute_us, comm_us(, comm2_us)]``.
What the numbers are, read from the logger that wrote them (see
benchmarks/public_data/bcaffe/README.md):
  compute_us  the wall time of the owning layer's ``Backward()`` call, timed around that call
              alone; weight and bias of one layer share it. It is a duration, not a timestamp (the
              values do not grow in backward order). Layers without parameters (ReLU, pooling,
              concat, LRN, loss) are not logged, so their backward time is missing.
  comm_us     the wall time of the tensor's reduction: GPU -> host copy, ``MPI_Allreduce``, scaling,
              copy back to the GPUs. In 4-column logs every tensor is reduced on its own; in
              5-column logs weight and bias were reduced together, the time is on the weight's line
              (the bias line says 0) and the 5th column is the same reduction timed in a later
              iteration.
The first block of lines (all zeros) is written at setup; the last block holding times is used.
Forward times are not logged: forward_s = ``forward_ratio`` x backward_s per layer (0.5 by
default, the assumption of the authors' own trace-driven simulator), recorded in the provenance.
Gradients are float32 (4 bytes per float). Tensors become ready in reverse id order (Caffe runs
backward over its layer list in reverse), each when its layer's backward ends.

OSU ``osu_allreduce`` output: ``size_bytes avg_latency_us`` per line (optionally ``workers,size``),
``#`` comments. Every line becomes a measured point; alpha-beta is fitted per worker count with
`fit_alpha_beta`. The point-to-point fit, which OSU's all-reduce test does not measure, is derived
from the 2-worker table assuming a ring all-reduce (2 steps of M/2 bytes each: t = 2 alpha + M beta),
so alpha_p2p = alpha_2 / 2 and beta_p2p = beta_2; the file's provenance says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sgdscale import __version__
from sgdscale.comm.network import NETWORK_SCHEMA, AlphaBeta, BenchPoint, Network, fit_alpha_beta
from sgdscale.errors import UserError
from sgdscale.inputs import describe
from sgdscale.profile import PROFILE_SCHEMA, Profile

FLOAT_BYTES = 4
LINE = re.compile(r"\[\s*([-+0-9.eE]+(?:\s*,\s*[-+0-9.eE]+){3,4})\s*\]\s*$")
OSU_LINE = re.compile(r"^\s*(?:(\d+)\s*,\s*)?(\d+)\s+([0-9.]+)\s*$")


@dataclass(frozen=True)
class BcaffeTensor:
    tensor_id: int
    floats: int
    compute_us: float
    comm_us: tuple[float, ...]  # measured reductions of the message this tensor ends (empty: merged)


@dataclass(frozen=True)
class BcaffeLog:
    workers: int
    tensors: list[BcaffeTensor]
    merged_layers: bool  # 5-column format: weight and bias reduced as one message


def _read(path: Path, what: str) -> list[str]:
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        raise UserError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read {what} {path}: {error}") from None


def _workers_from(path: Path, pattern: str, given: int | None, what: str, fix: str = "give --workers N") -> int:
    if given is not None:
        if given < 2:
            raise UserError(f"--workers must be at least 2 for {what}; got {given}")
        return given
    match = re.search(pattern, path.name)
    if not match:
        raise UserError(f"cannot tell the worker count of {path.name} from its name; {fix}")
    return int(match.group(1))


def parse_bcaffe_log(path: str | Path, workers: int | None = None) -> BcaffeLog:
    """The last block of measured per-tensor lines in a B-Caffe `tmp<N>comm.log`."""
    path = Path(path)
    lines = _read(path, "B-Caffe log")
    blocks: list[list[list[float]]] = []
    for line in lines:
        match = LINE.search(line)
        if not match:
            continue
        values = [float(v) for v in match.group(1).split(",")]
        if values[0] == 0 or not blocks:
            blocks.append([])
        blocks[-1].append(values)
    if not blocks:
        raise UserError(f"{path} holds no B-Caffe per-tensor lines ('[id, floats, compute_us, comm_us]'); "
                        "give a tmp<N>comm.log written by B-Caffe's DistManager")
    measured = [b for b in blocks if any(v[2] > 0 for v in b)]
    if not measured:
        raise UserError(f"{path}: every compute time is 0 (only the setup block was logged); "
                        "give a log written after at least one training iteration")
    block = measured[-1]
    widths = {len(v) for v in block}
    if len(widths) != 1:
        raise UserError(f"{path}: the last block mixes lines of {sorted(widths)} numbers; the log is damaged")
    if [int(v[0]) for v in block] != list(range(len(block))):
        raise UserError(f"{path}: tensor ids of the last block are not 0..{len(block) - 1} in order; the log is damaged")
    if any(v[1] <= 0 or v[2] < 0 for v in block):
        raise UserError(f"{path}: a tensor has no floats or a negative compute time; the log is damaged")
    merged = widths == {5}
    tensors = []
    for v in block:
        comm = tuple(c for c in v[3:] if c > 0)
        tensors.append(BcaffeTensor(int(v[0]), int(v[1]), v[2], comm))
    return BcaffeLog(_workers_from(path, r"(\d+)", workers, "a B-Caffe log"), tensors, merged)


def _layers(log: BcaffeLog) -> list[list[BcaffeTensor]]:
    """Consecutive tensors sharing one compute time belong to one layer (its weight and bias)."""
    layers: list[list[BcaffeTensor]] = []
    for tensor in log.tensors:
        if layers and layers[-1][0].compute_us == tensor.compute_us:
            layers[-1].append(tensor)
        else:
            layers.append([tensor])
    return layers


def bcaffe_profile(log: BcaffeLog, source: str, model: str = "googlenet", batch_size: int = 64,
                   forward_ratio: float = 0.5) -> Profile:
    """The profile of one worker's step from a parsed log (see the module docstring)."""
    if batch_size < 1:
        raise UserError(f"--batch-size must be at least 1; got {batch_size}")
    if not forward_ratio >= 0:
        raise UserError(f"--forward-ratio must be >= 0; got {forward_ratio}")
    layers = _layers(log)
    ready_s: dict[int, float] = {}
    elapsed = 0.0
    for group in reversed(layers):
        elapsed += group[0].compute_us * 1e-6
        for tensor in group:
            ready_s[tensor.tensor_id] = elapsed
    profile_layers = [{
        "name": f"layer{index:02d}",
        "forward_s": forward_ratio * group[0].compute_us * 1e-6,
        "backward_s": group[0].compute_us * 1e-6,
        "params": [{"name": f"param{t.tensor_id:03d}", "numel": t.floats, "bytes": t.floats * FLOAT_BYTES,
                    "grad_ready_s": ready_s[t.tensor_id]} for t in group],
    } for index, group in enumerate(layers)]
    comm = {f"param{t.tensor_id:03d}": [c * 1e-6 for c in t.comm_us] for t in log.tensors if t.comm_us}
    provenance = {
        "tool": f"sgdscale {__version__} (import bcaffe)",
        "source": source,
        "workers": log.workers,
        "forward_ratio": forward_ratio,
        "forward": f"not logged; forward_s = {forward_ratio} x backward_s per layer (assumed)",
        "backward": "B-Caffe compute_us: wall time of each parameter layer's Backward(); parameter-free layers "
                    "are not logged, so their backward time is missing",
        "reduction": "per-layer (weight and bias reduced as one message)" if log.merged_layers
                     else "per-tensor (one reduction per tensor)",
        "measured_reduction_s": comm,
        "batch_size": "not in the log; the MG-WFBP experiments ran GoogLeNet with 64 images per GPU",
    }
    return _validated(Profile, {
        "schema": PROFILE_SCHEMA, "model": model, "batch_size": batch_size,
        "device": "NVIDIA Tesla K80 GPUs, 10GbE cluster (B-Caffe logs)",
        "framework": {"name": "b-caffe", "version": ""}, "measured_iterations": 1,
        "provenance": provenance, "layers": profile_layers,
    }, "the B-Caffe log")


def _validated(model, data: dict, source: str):
    """`model` from imported data; a value out of bounds (sgdscale.inputs) is one line naming it."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise UserError(describe(error, f"{source}: the imported {model.__name__.lower()} is invalid",
                                 "check the log for a damaged line")) from None


def parse_osu_allreduce(path: str | Path, workers: int | None = None) -> tuple[int, list[BenchPoint]]:
    """(worker count, one measured point per message size) from one `osu_allreduce` output."""
    path = Path(path)
    points: list[BenchPoint] = []
    found_workers: set[int] = set()
    for number, line in enumerate(_read(path, "OSU all-reduce table"), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = OSU_LINE.match(line)
        if not match:
            raise UserError(f"{path}, line {number}: expected 'size_bytes avg_latency_us', got {line.strip()!r}")
        if match.group(1):
            found_workers.add(int(match.group(1)))
        latency_s = float(match.group(3)) * 1e-6
        points.append((int(match.group(2)), latency_s))  # type: ignore[arg-type]
    if len(points) < 2:
        raise UserError(f"{path} holds fewer than two measured sizes; give the output of osu_allreduce")
    if len(found_workers) > 1:
        raise UserError(f"{path} mixes worker counts {sorted(found_workers)}; give one table per worker count")
    n = found_workers.pop() if found_workers else _workers_from(path, r"(\d+)", workers, "an OSU table",
                                                              "name it allreduce<N>.log or write each size as 'N,size'")
    if workers is not None and workers != n:
        raise UserError(f"{path} says {n} workers but --workers {workers} was given")
    return n, [BenchPoint(op="allreduce", workers=n, bytes=b, samples_s=[t], median_s=t) for b, t in points]


def osu_network(paths: list[str | Path]) -> Network:
    """A network file from OSU all-reduce tables, one per worker count (one must be for 2 workers)."""
    tables: dict[int, list[BenchPoint]] = {}
    for path in paths:
        n, points = parse_osu_allreduce(path)
        if n in tables:
            raise UserError(f"two OSU tables for {n} workers ({Path(path).name}); give one per worker count")
        tables[n] = points
    fits = {str(n): fit_alpha_beta([p.bytes for p in pts], [p.median_s for p in pts]) for n, pts in sorted(tables.items())}
    if "2" not in fits:
        raise UserError("the point-to-point cost is derived from the 2-worker all-reduce table; include allreduce2.log")
    two = fits["2"]
    p2p = AlphaBeta(alpha_s=two.alpha_s / 2, beta_s_per_byte=two.beta_s_per_byte)
    return _validated(Network, {
        "schema": NETWORK_SCHEMA,
        "source": "OSU MPI_Allreduce latency tables: " + ", ".join(Path(p).name for p in paths),
        "p2p": p2p, "allreduce": fits,
        "points": [p for n in sorted(tables) for p in tables[n]],
        "environment": {
            "tool": f"sgdscale {__version__} (import osu)",
            "p2p": "not measured by OSU's all-reduce test; derived from the 2-worker fit assuming a ring "
                   "all-reduce (t = 2 alpha + M beta): alpha_p2p = alpha_2 / 2, beta_p2p = beta_2",
            "samples": "each point is OSU's average latency over its iterations (one number per size)",
        },
    }, "the OSU tables")
