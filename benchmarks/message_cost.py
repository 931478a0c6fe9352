"""CPU cost of one gloo point-to-point message on an emulated node (needs root and torch).

Rank 0 isends K messages back to back to rank 1, which irecvs them; each rank reports its process
CPU time (all threads, gloo's included) and wall time per message, at 0.2 and 1.0 cores per node.
Used to test whether per-message work explains the gap between profiled and measured compute in
the parameter-server runs (it does not: see benchmarks/results/message_cost.txt).

    .venv/bin/python benchmarks/message_cost.py

With `--profile NAME` it measures instead what a model's gradients cost as many messages against the
same bytes as one (held-out set 20: mobilenet_v2's 158 tensors ran its async PS replays 16-21%
slower than the same bytes in 8 tensors, `benchmarks/async_stagger.py`). Node 0 sends node 1 the
profile's gradients the way a parameter-server worker pushes them (one isend per tensor, node 1 has
posted one irecv per tensor, `sgdscale.runtime.ps`) and then as one message, interleaved,
`--repeats` times; node 1 acknowledges the last byte. Extra time per message = (many - one) /
(tensors - 1). Raw output: benchmarks/results/message_cost_<profile>.md.

    .venv/bin/python benchmarks/message_cost.py --profile mobilenet_v2 [--bandwidth-mbit 1400]
        [--quota 0.46] [--repeats 15]
"""

from __future__ import annotations

import argparse
import statistics
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


def many_vs_one(ctx) -> dict:
    """Rank target: per repeat, the gradients tensor by tensor, then as one message (wall and CPU)."""
    import torch
    import torch.distributed as dist

    tensors = [torch.zeros(max(1, b // 4)) for b in ctx.config["sizes"]]
    whole = torch.zeros(sum(t.numel() for t in tensors))
    done = torch.zeros(1)
    out: dict[str, list[float]] = {"many_s": [], "one_s": [], "many_cpu_s": [], "one_cpu_s": []}
    for repeat in range(ctx.config["repeats"] + 2):  # 2 warm-up rounds
        for kind in ("many", "one"):
            parts = tensors if kind == "many" else [whole]
            if ctx.rank == 1:
                works = [dist.irecv(t, src=0, tag=i) for i, t in enumerate(parts)]
            dist.barrier()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            if ctx.rank == 0:
                works = [dist.isend(t, dst=1, tag=i) for i, t in enumerate(parts)]
            for work in works:
                work.wait()
            if ctx.rank == 0:  # stop when the receiver has the last byte
                dist.recv(done, src=1, tag=len(parts))
            else:
                dist.send(done, dst=0, tag=len(parts))
            if repeat >= 2:
                out[f"{kind}_s"].append(time.perf_counter() - wall0)
                out[f"{kind}_cpu_s"].append(time.process_time() - cpu0)
    return {"rank": ctx.rank, "out": out}


def profile_main(argv: list[str]) -> int:
    from sgdscale.profile import load_profile
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description="many messages against one, a profile's gradients")
    parser.add_argument("--profile", required=True)
    parser.add_argument("--bandwidth-mbit", type=float, default=1400)
    parser.add_argument("--quota", type=float, default=0.46)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    profile = load_profile(args.profile)
    sizes = [int(p.bytes) for layer in profile.layers for p in layer.params]
    with Testbed(2, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as testbed:
        result = launch("message_cost:many_vs_one", {"sizes": sizes, "repeats": args.repeats}, 2, placement=testbed,
                        env={"PYTHONPATH": str(HERE)}, timeout_s=600)
    sender, receiver = (next(r["out"] for r in result.results if r["rank"] == k) for k in (0, 1))

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:.1f} ms ({min(values) * 1e3:.1f}-{max(values) * 1e3:.1f})"

    many, one = statistics.median(sender["many_s"]), statistics.median(sender["one_s"])
    line_ms = sum(sizes) / (args.bandwidth_mbit * 1e6 / 8) * 1e3
    lines = [f"# {profile.model}'s gradients as {len(sizes)} messages or as one", "",
             "Generated by `benchmarks/message_cost.py " + " ".join(argv) + f"`. Two nodes of the emulated cluster, "
             f"{args.bandwidth_mbit:g} Mbit/s, {args.quota:g} cores each, pinned; {sum(sizes) / 1e6:.1f} MB "
             f"({line_ms:.1f} ms at line rate); {args.repeats} interleaved repeats, median (min-max).", "",
             "| sent as | wall time | sender CPU | receiver CPU |", "|---|---|---|---|"]
    for kind, label in (("many", f"{len(sizes)} messages"), ("one", "one message")):
        lines.append(f"| {label} | {cell(sender[f'{kind}_s'])} | {cell(sender[f'{kind}_cpu_s'])} | "
                     f"{cell(receiver[f'{kind}_cpu_s'])} |")
    lines += ["", f"Extra wall time per message: {(many - one) / (len(sizes) - 1) * 1e3:.3f} ms "
              f"(({many * 1e3:.1f} - {one * 1e3:.1f}) ms / {len(sizes) - 1})."]
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"message_cost_{args.profile}.md").write_text(text)
    sys.stdout.write(text)
    return 0


def main() -> int:
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed

    if len(sys.argv) > 1:
        return profile_main(sys.argv[1:])
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
