"""Network benchmark: point-to-point and all-reduce time against message size, fitted to alpha-beta.

What is measured (gloo, CPU tensors, float32 payloads):
- p2p: rank 0 sends M bytes to rank 1, which sends them back; one sample is half the round trip.
  Ranks other than 0 and 1 only join the barriers.
- allreduce: `dist.all_reduce` of M bytes on all N ranks; one sample is the slowest rank's time
  from a common barrier to the end of its all-reduce.
- incast: ranks 1..N-1 each send M bytes to rank 0 at once (what parameter-server pushes do to a
  server); one sample is rank 0's time from the barrier until it has all (N-1)*M bytes. Many TCP
  flows converging on one shaped link reach less than one flow does, and this measures how much.
Each size gets `warmup` discarded repeats, then `repeats` kept ones; the fit (least squares,
`sgdscale.comm.network.fit_alpha_beta`) uses the median per size. The result is a
`sgdscale.network/1` file (`sgdscale.comm.network.Network`).

Where it runs:
- this machine (loopback): `run_netbench(workers=[2])`;
- the emulated cluster: pass a `Testbed` as `placement` (rank r on node r);
- a real cluster: write the rank config (`bench_config`), start the rank target with torchrun on
  every machine, then fit the ranks' result files with `collect_results`:

      sgdscale netbench --write-config nb.json --workers 4
      torchrun --nnodes 4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
          -m sgdscale.runtime.rank --target sgdscale.runtime.netbench:bench_rank \\
          --config nb.json --out nbresults
      sgdscale netbench --collect nbresults -o net.json     (on the machine running rank 0)
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sgdscale.comm.network import AlphaBeta, BenchPoint, Network, fit_alpha_beta
from sgdscale.errors import UserError

BENCH_TARGET = "sgdscale.runtime.netbench:bench_rank"
OPS = ("p2p", "allreduce", "incast")
ELEMENT_BYTES = 4  # float32


def message_sizes(min_bytes: float, max_bytes: float, points: int) -> list[int]:
    """`points` log-spaced sizes from min to max, each a whole number of float32 elements."""
    if min_bytes < ELEMENT_BYTES:
        raise UserError(f"smallest message must be at least {ELEMENT_BYTES} bytes, got {min_bytes:g}")
    if max_bytes < min_bytes:
        raise UserError(f"largest message ({max_bytes:g} B) is smaller than the smallest ({min_bytes:g} B)")
    if points < 2 and max_bytes > min_bytes:
        raise UserError("need at least 2 message sizes to fit alpha and beta (--points 2 or more)")
    if max_bytes == min_bytes:
        raise UserError("need two different message sizes to fit alpha and beta; make --max-size larger")
    ratio = (max_bytes / min_bytes) ** (1 / (points - 1))
    sizes = {max(1, round(min_bytes * ratio**k / ELEMENT_BYTES)) * ELEMENT_BYTES for k in range(points)}
    return sorted(sizes)


def bench_config(sizes: Sequence[int], repeats: int, warmup: int, ops: Sequence[str]) -> dict[str, Any]:
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {repeats}")
    if warmup < 0:
        raise UserError(f"--warmup must not be negative, got {warmup}")
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise UserError(f"unknown benchmark op(s) {', '.join(unknown) or '(none)'}; use p2p, allreduce, incast")
    return {"sizes": [int(s) for s in sizes], "repeats": int(repeats), "warmup": int(warmup), "ops": list(ops)}


def steps_per_rank(config: dict[str, Any], world_size: int) -> int:
    ops = [op for op in config["ops"] if op == "allreduce" or world_size >= 2]
    return len(ops) * len(config["sizes"]) * (config["repeats"] + config["warmup"])


def bench_rank(ctx) -> dict[str, Any]:
    """Rank target (run by `sgdscale.runtime.rank`): time every op and size; return this rank's samples."""
    import torch
    import torch.distributed as dist

    config = ctx.config
    rank, world = ctx.rank, ctx.world_size
    repeats, warmup = config["repeats"], config["warmup"]
    samples: dict[str, dict[str, list[float]]] = {}
    done = 0
    for op in config["ops"]:
        if op != "allreduce" and world < 2:
            continue
        samples[op] = {}
        for nbytes in config["sizes"]:
            tensor = torch.zeros(nbytes // ELEMENT_BYTES, dtype=torch.float32)
            kept: list[float] = []
            for repeat in range(warmup + repeats):
                dist.barrier()
                start = time.perf_counter()
                if op == "allreduce":
                    dist.all_reduce(tensor)
                    elapsed = time.perf_counter() - start
                elif op == "incast":
                    if rank == 0:
                        buffers = [torch.empty_like(tensor) for _ in range(1, world)]
                        for work in [dist.irecv(buf, src=src) for src, buf in zip(range(1, world), buffers)]:
                            work.wait()
                        elapsed = time.perf_counter() - start
                    else:
                        dist.send(tensor, dst=0)
                        elapsed = math.nan  # rank 0 times the arrival of everything
                elif rank == 0:
                    dist.send(tensor, dst=1)
                    dist.recv(tensor, src=1)
                    elapsed = (time.perf_counter() - start) / 2
                elif rank == 1:
                    dist.recv(tensor, src=0)
                    dist.send(tensor, dst=0)
                    elapsed = math.nan  # rank 0 times the round trip
                else:
                    elapsed = math.nan
                if repeat >= warmup:
                    kept.append(elapsed)
                done += 1
                ctx.report_progress(done)
            samples[op][str(nbytes)] = kept
    return {"rank": rank, "world_size": world, "samples": samples, "torch": torch.__version__,
            "host": platform.node()}


def points_from_results(results: Sequence[dict[str, Any]]) -> list[BenchPoint]:
    """Merge the ranks' samples of one run: p2p from rank 0, all-reduce = slowest rank per repeat."""
    if not results:
        raise UserError("no rank results to fit")
    world = int(results[0]["world_size"])
    by_rank = {int(r["rank"]): r["samples"] for r in results}
    if sorted(by_rank) != list(range(world)):
        raise UserError(f"expected results from ranks 0-{world - 1}, got ranks {sorted(by_rank)}")
    points: list[BenchPoint] = []
    for op in OPS:
        if op not in by_rank[0]:
            continue
        for size_text in by_rank[0][op]:
            if op in ("p2p", "incast"):
                kept = list(by_rank[0][op][size_text])
            else:
                per_rank = [by_rank[r][op][size_text] for r in range(world)]
                kept = [max(values) for values in zip(*per_rank)]
            points.append(BenchPoint(op=op, workers=world, bytes=int(size_text), samples_s=kept,
                                     median_s=statistics.median(kept)))
    return points


def fit_network(points: Sequence[BenchPoint], source: str, environment: dict[str, Any]) -> Network:
    """Fit alpha-beta for p2p (from the 2-rank run, or the smallest one), all-reduce per worker count,
    and incast per sender count (t against the total bytes received)."""
    incast: dict[str, AlphaBeta] = {}
    for world in sorted({p.workers for p in points if p.op == "incast"}):
        chosen = [p for p in points if p.op == "incast" and p.workers == world]
        incast[str(world - 1)] = fit_alpha_beta([p.bytes * (world - 1) for p in chosen], [p.median_s for p in chosen])
    p2p_points = [p for p in points if p.op == "p2p"]
    ar_points = [p for p in points if p.op == "allreduce"]
    allreduce: dict[str, AlphaBeta] = {}
    for workers in sorted({p.workers for p in ar_points}):
        chosen = [p for p in ar_points if p.workers == workers]
        allreduce[str(workers)] = fit_alpha_beta([p.bytes for p in chosen], [p.median_s for p in chosen])
    if p2p_points:
        smallest = min(p.workers for p in p2p_points)
        chosen = [p for p in p2p_points if p.workers == smallest]
        p2p = fit_alpha_beta([p.bytes for p in chosen], [p.median_s for p in chosen])
    elif "2" in allreduce:
        # Without a ping-pong, a 2-rank all-reduce moves ~M each way once: the closest stand-in.
        p2p = allreduce["2"]
        environment = {**environment, "p2p_from": "allreduce with 2 workers (no p2p measured)"}
    else:
        raise UserError("the network file needs point-to-point figures: include the p2p op "
                        "(--ops p2p,allreduce) or a 2-worker all-reduce")
    return Network(source=source, p2p=p2p, allreduce=allreduce, incast=incast, points=list(points),
                   environment=environment)


def estimate_run_s(config: dict[str, Any], workers: int, bandwidth_bps: float) -> float:
    """Rough upper bound on one run's wall time, for the launcher's timeout."""
    per_repeat = 0.0
    for nbytes in config["sizes"]:
        wire_s = nbytes * 8 / bandwidth_bps
        if "p2p" in config["ops"]:
            per_repeat += 2 * wire_s + 0.01
        if "allreduce" in config["ops"]:
            per_repeat += 2 * (workers - 1) / workers * wire_s * 2 + 0.01 * workers
        if "incast" in config["ops"]:
            per_repeat += (workers - 1) * wire_s + 0.01
    return per_repeat * (config["repeats"] + config["warmup"])


def run_netbench(
    workers: Sequence[int],
    config: dict[str, Any],
    *,
    placement=None,
    bandwidth_hint_bps: float = 1e9,
    on_progress: Callable[[int, int], None] | None = None,
    environment: dict[str, Any] | None = None,
    source: str = "",
) -> Network:
    """Run the benchmark once per worker count (p2p only in the first run) and fit the results.

    placement: None for local processes, or an emulated cluster with at least max(workers) nodes.
    on_progress(done, total) counts timed operations across all runs.
    """
    from sgdscale.runtime.launch import launch

    counts = sorted(set(workers))
    if not counts or counts[0] < 2:
        raise UserError(f"the network benchmark needs at least 2 processes per run, got {counts or 'none'}")
    runs = []
    for index, count in enumerate(counts):
        run_config = dict(config)
        if index > 0:
            run_config["ops"] = [op for op in config["ops"] if op != "p2p"]
            if not run_config["ops"]:
                continue
        runs.append((count, run_config))
    total = sum(steps_per_rank(c, n) for n, c in runs)
    done_before = 0
    points: list[BenchPoint] = []
    torch_version = None
    for count, run_config in runs:
        timeout_s = 60 + 3 * estimate_run_s(run_config, count, bandwidth_hint_bps)

        def progress(per_rank: list[int], base: int = done_before) -> None:
            if on_progress is not None:
                on_progress(base + min(per_rank), total)

        result = launch(BENCH_TARGET, run_config, count, placement=placement, timeout_s=timeout_s,
                        on_progress=progress)
        points += points_from_results(result.results)
        torch_version = result.results[0].get("torch")
        done_before += steps_per_rank(run_config, count)
        if on_progress is not None:
            on_progress(done_before, total)
    env = {"backend": "gloo", "torch": torch_version, "host": platform.node(),
           "python": platform.python_version(), "repeats": config["repeats"], "warmup": config["warmup"],
           "timing": "p2p: half round trip on rank 0; allreduce: slowest rank from a common barrier",
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(environment or {})}
    return fit_network(points, source=source, environment=env)


def collect_results(directory: str | Path, environment: dict[str, Any] | None = None) -> Network:
    """Fit the result-RANK.json files that torchrun ranks wrote into `directory` (real clusters)."""
    directory = Path(directory)
    files = sorted(directory.glob("result-*.json"))
    if not files:
        raise UserError(f"no result-*.json files in {directory}; run the ranks with --out {directory} first")
    try:
        results = [json.loads(path.read_text()) for path in files]
    except json.JSONDecodeError as error:
        raise UserError(f"a rank result in {directory} is not valid JSON: {error}") from None
    points = points_from_results(results)
    first = results[0]
    repeats = len(next(iter(next(iter(first["samples"].values())).values())))
    env = {"backend": "gloo", "torch": first.get("torch"), "hosts": sorted({r.get("host") for r in results}),
           "repeats": repeats, "mode": "cluster (torchrun)", **(environment or {})}
    return fit_network(points, source=f"netbench on {len(results)} ranks (torchrun), collected from {directory}",
                       environment=env)
