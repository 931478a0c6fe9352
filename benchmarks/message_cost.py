"""CPU cost of one gloo point-to-point message on an emulated node (needs root and torch).

Rank 0 isends K messages back to back to rank 1, which irecvs them; each rank reports its process
CPU time (all threads, gloo's included) and wall time per message, at 0.2 and 1.0 cores per node.
Used to test whether per-message work explains the gap between profiled and measured compute in
the parameter-server runs (it does not: see benchmarks/results/message_cost.txt).

    .venv/bin/python benchmarks/message_cost.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIG = {"messages": 200, "sizes": [4096, 65536]}


def rank(ctx) -> dict:
    """Rank target: time K isends (rank 0) or irecvs (rank 1) per message size."""
    import torch
    import torch.distributed as dist

    count = ctx.config["messages"]
    out = {}
    for nbytes in ctx.config["sizes"]:
        payload = torch.zeros(nbytes // 4)
        buffers = [torch.zeros_like(payload) for _ in range(count)]
        dist.barrier()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if ctx.rank == 0:
            works = [dist.isend(payload, dst=1, tag=i) for i in range(count)]
        else:
            works = [dist.irecv(buffers[i], src=0, tag=i) for i in range(count)]
        for work in works:
            work.wait()
        cpu1, wall1 = time.process_time(), time.perf_counter()
        out[str(nbytes)] = {"cpu_per_message_ms": (cpu1 - cpu0) / count * 1e3,
                            "wall_per_message_ms": (wall1 - wall0) / count * 1e3}
    return {"rank": ctx.rank, "out": out}


def main() -> int:
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed

    lines = [f"{CONFIG['messages']} messages per size, 2 emulated nodes at 1 Gbit/s"]
    for quota in (0.2, 1.0):
        with Testbed(2, 1e9, quota) as testbed:
            result = launch("message_cost:rank", CONFIG, 2, placement=testbed, env={"PYTHONPATH": str(HERE)},
                            timeout_s=120)
        for record in result.results:
            role = "sender" if record["rank"] == 0 else "receiver"
            for size, figures in record["out"].items():
                lines.append(f"quota {quota:g} cores, {role}, {int(size):,} B: CPU {figures['cpu_per_message_ms']:.3f} ms, "
                             f"wall {figures['wall_per_message_ms']:.3f} ms per message")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / "message_cost.txt").write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
