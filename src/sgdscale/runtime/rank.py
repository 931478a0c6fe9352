"""One rank's process: join the process group, run a target function, write its result.

Backend (`pick_backend`): NCCL for all-reduce training when this host has a CUDA GPU for each of
its ranks (the model and batches then live on `cuda:LOCAL_RANK`); gloo otherwise, and always for
the parameter server, whose point-to-point messages carry CPU tensors.

Started by `sgdscale.runtime.launch` as

    python -m sgdscale.runtime.rank --target MODULE:FUNCTION --config CFG.json --out DIR \
        --rank R --world-size N --init-method tcp://ADDR:PORT

or by torchrun on a real cluster, where --rank/--world-size/--init-method are left out and come
from the environment torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; init "env://"):

    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \
        -m sgdscale.runtime.rank --target sgdscale.runtime.train:train_rank --config CFG.json --out DIR

The target is called as `function(ctx: RankContext)` and returns something JSON-able, written to
DIR/result-R.json. Progress (iterations done) goes to DIR/progress-R for the launcher's bar and
its hung-rank report: an 8-byte native-order counter in a memory-mapped file, so reporting is a
store into shared memory, not a system call (the old write-and-rename per iteration cost 1.9-6.9 %
of the measured window; benchmarks/instrumentation_overhead.py).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import mmap
import os
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from sgdscale.jsonio import write_json_atomic


PROGRESS_BYTES = 8


class ProgressCounter:
    """This rank's progress counter: DIR/progress-R mapped into memory (see the module docstring).
    The launcher reads the file; the page cache makes the store visible without a write()."""

    def __init__(self, path: Path) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as handle:  # created full size, then renamed: never seen short
            handle.write(bytes(PROGRESS_BYTES))
        os.replace(tmp, path)
        with open(path, "r+b") as handle:
            self._map = mmap.mmap(handle.fileno(), PROGRESS_BYTES)
        self._view = memoryview(self._map).cast("q")  # one aligned 8-byte store per update

    def set(self, value: int) -> None:
        self._view[0] = value


def run_threads(target: Callable[[int], None], count: int, name: str = "rank-thread") -> None:
    """Run target(0), ..., target(count - 1), one thread each, wait for all, and re-raise the first
    error here: an exception in a thread would otherwise only be printed, and the rank would go on."""
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            target(index)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(i,), name=f"{name}-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@dataclass
class RankContext:
    rank: int
    world_size: int
    config: dict[str, Any]
    out_dir: Path | None
    backend: str = "gloo"
    device: str = "cpu"
    _progress: ProgressCounter | None = field(default=None, repr=False)

    def report_progress(self, iterations_done: int) -> None:
        """Tell the launcher how far this rank got (a store into shared memory: no system call)."""
        if self.out_dir is None:
            return
        if self._progress is None:
            self._progress = ProgressCounter(self.out_dir / f"progress-{self.rank}")
        self._progress.set(iterations_done)


def pick_backend(config: dict[str, Any], world_size: int, cuda_devices: int, nccl_available: bool) -> tuple[str, str]:
    """(backend, device) for this rank: NCCL on a GPU per rank for all-reduce, else gloo on CPU.

    Ranks on one host are LOCAL_WORLD_SIZE (torchrun) or all of them (local launch); with fewer
    GPUs than ranks NCCL cannot run (two ranks on one GPU), so gloo stays."""
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    wanted = config.get("device", "auto")
    if (config.get("strategy") == "allreduce" and wanted in ("auto", "cuda") and nccl_available
            and cuda_devices >= local_ranks > 0):
        return "nccl", f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    if wanted == "cuda":
        raise ValueError(f"device cuda asked for, but this host has {cuda_devices} CUDA GPU(s) for "
                         f"{local_ranks} rank(s) (NCCL {'available' if nccl_available else 'missing'})")
    return "gloo", "cpu"


def resolve_target(spec: str):
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ValueError(f"target must be 'module:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), function_name)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="python -m sgdscale.runtime.rank", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True, help="module:function to run on this rank")
    parser.add_argument("--config", required=True, help="JSON file with the target's config")
    parser.add_argument("--out", help="directory for result-RANK.json and progress files")
    parser.add_argument("--rank", type=int, help="default: $RANK (torchrun)")
    parser.add_argument("--world-size", type=int, help="default: $WORLD_SIZE (torchrun)")
    parser.add_argument("--init-method", help="default: env:// (MASTER_ADDR/MASTER_PORT, torchrun)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="collective timeout")
    args = parser.parse_args(argv)
    launcher = os.environ.get("SGDSCALE_LAUNCHER_PID")  # launch.LAUNCHER_PID_ENV; unset under torchrun
    if launcher:
        from sgdscale.runtime.reaper import set_parent_death_signal

        set_parent_death_signal(int(launcher))  # a rank never outlives a launcher killed outright

    rank = args.rank if args.rank is not None else int(os.environ["RANK"])
    world_size = args.world_size if args.world_size is not None else int(os.environ["WORLD_SIZE"])
    init_method = args.init_method or "env://"
    config = json.loads(Path(args.config).read_text())
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    target = resolve_target(args.target)
    if "LOCAL_RANK" not in os.environ and "LOCAL_WORLD_SIZE" not in os.environ:
        os.environ["LOCAL_RANK"] = str(rank)  # local launch: every rank on this host
    backend, device = pick_backend(config, world_size, torch.cuda.device_count() if torch.cuda.is_available() else 0,
                                   dist.is_nccl_available())
    if backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        backend, init_method=init_method, rank=rank, world_size=world_size,
        timeout=datetime.timedelta(seconds=args.timeout_s),
    )
    try:
        ctx = RankContext(rank=rank, world_size=world_size, config=config, out_dir=out_dir, backend=backend,
                          device=device)
        result = target(ctx)
        if out_dir is not None:
            write_json_atomic(out_dir / f"result-{rank}.json", result)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        # Skip interpreter teardown: gloo's destructors can block on peers that are gone.
        os._exit(1)
    # Leave together, then skip interpreter teardown. Letting Python tear down gloo's threads and
    # DDP's reducer aborted a rank now and then under load ("terminate called without an active
    # exception", SIGABRT after its peer had exited cleanly); destroy_process_group did not prevent
    # it. The result is already written, and the kernel closes the sockets.
    try:
        dist.barrier()
    except Exception:  # a peer already left; the result is written, nothing else to do
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
