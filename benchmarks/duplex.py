"""Is a shaped NIC really full duplex under TCP? (needs root and torch)

A parameter server receives pushes and sends pulls on one NIC at the same time, and both
prediction methods treat the two directions as independent links (full duplex). This measures,
on the emulated cluster, how long moving M bytes takes
- `in`: ranks 1..k each send M to rank 0 (rank 0's downlink alone; k = `--peers`);
- `out`: rank 0 sends M to each of ranks k+1..2k (rank 0's uplink alone);
- `in+out`: both at once (rank 0's two directions busy together, different peers);
- `pair`: rank 0 and rank 1 send M to each other at once (one gloo connection, both ways);
- `in|out`: `out` moves busy-factor x M per peer from the barrier, `in` starts `--stagger` s later
  and is timed from its start (a transfer that starts while the other direction is already busy);
- `out|in`: the same with the directions swapped.
Each time runs from a common barrier to the last byte received (clocks: perf_counter, one
machine). Full duplex means `in+out` and `pair` take as long as `in` alone. Modes are interleaved
per repeat.

    .venv/bin/python benchmarks/duplex.py [--bandwidth 600Mbit] [--cpu-quota 0.22] [--mbytes 16]
        [--repeats 8]
Writes benchmarks/results/duplex/<bandwidth>-q<quota>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = "duplex:rank_target"
MODES = ("in", "out", "in+out", "pair", "in|out", "out|in")
REPORTED = MODES + ("in|out early", "out|in early")  # the early direction of a staggered mode, timed too


def rank_target(ctx) -> dict:
    import torch
    import torch.distributed as dist

    config, rank = ctx.config, ctx.rank
    k = config["peers"]
    senders, receivers = range(1, k + 1), range(k + 1, 2 * k + 1)
    tensor = torch.zeros(config["bytes"] // 4, dtype=torch.float32)
    inbox = torch.empty_like(tensor)
    inboxes = {src: torch.empty_like(tensor) for src in senders} if rank == 0 else {}
    # Staggered modes: every buffer allocated and touched once here. A fresh buffer costs page
    # faults as data lands in it, CPU time that a node under a quota pays inside the timed window.
    big = torch.ones(tensor.numel() * config["busy_factor"], dtype=torch.float32)
    buffers = {"M": tensor, "big": big,
               "M in": {src: torch.ones_like(tensor) for src in (*senders, 0)},
               "big in": {src: torch.ones_like(big) for src in (*senders, 0)}}
    rows: dict[str, list[list[float]]] = {m: [] for m in REPORTED}
    for repeat in range(config["warmup"] + config["repeats"]):
        for mode in MODES:
            dist.barrier()
            start = time.perf_counter()
            works, received = [], False
            if mode in ("in", "in+out") and rank in senders:
                works.append(dist.isend(tensor, dst=0))
            if mode in ("in", "in+out") and rank == 0:
                works += [dist.irecv(inboxes[src], src=src) for src in senders]
                received = True
            if mode in ("out", "in+out") and rank == 0:
                works += [dist.isend(tensor, dst=dst) for dst in receivers]
            if mode in ("out", "in+out") and rank in receivers:
                works.append(dist.irecv(inbox, src=0))
                received = True
            if mode in ("in|out", "out|in"):  # one direction starts `stagger_s` after the other
                late = mode.split("|")[0]
                late_end, early_end = _staggered(dist, rank, senders, receivers, late, buffers,
                                                 config["stagger_s"], config["chunks"])
                if repeat >= config["warmup"]:
                    rows[mode].append([start + config["stagger_s"], late_end])
                    rows[f"{mode} early"].append([start, early_end])
                continue
            if mode == "pair" and rank in (0, 1):
                works += [dist.isend(tensor, dst=1 - rank), dist.irecv(inbox, src=1 - rank)]
                received = True
            for work in works:
                work.wait()
            end = time.perf_counter()
            if repeat >= config["warmup"]:
                rows[mode].append([start, end if received else None])
    return {"rank": rank, "times": rows}


def _staggered(dist, rank, senders, receivers, late, buffers, stagger_s, chunks=1):
    """The other direction moves busy_factor x M per peer from the barrier on; the `late` one moves
    M per peer from stagger_s later, each transfer as `chunks` messages (a parameter server's
    tensors). Returns when the late and the early transfer were in at this rank (None where it
    receives neither)."""
    size = {"in": buffers["M"] if late == "in" else buffers["big"],
            "out": buffers["M"] if late == "out" else buffers["big"]}
    inbox = {"in": buffers["M in"] if late == "in" else buffers["big in"],
             "out": buffers["M in"] if late == "out" else buffers["big in"]}
    start = time.perf_counter()
    recvs = {"in": [], "out": []}  # every receive is posted at once: gloo sends only into a posted one
    if rank == 0:
        recvs["in"] = [dist.irecv(part, src=src) for src in senders for part in inbox["in"][src].chunk(chunks)]
    if rank in receivers:
        recvs["out"] = [dist.irecv(part, src=0) for part in inbox["out"][0].chunk(chunks)]

    def sends(direction):
        if direction == "in" and rank in senders:
            return [dist.isend(part, dst=0) for part in size["in"].chunk(chunks)]
        if direction == "out" and rank == 0:
            return [dist.isend(part, dst=dst) for dst in receivers for part in size["out"].chunk(chunks)]
        return []

    early = "out" if late == "in" else "in"
    works = sends(early)
    time.sleep(max(0.0, start + stagger_s - time.perf_counter()))
    works += sends(late)
    for work in recvs[late]:
        work.wait()
    late_end = time.perf_counter()
    for work in recvs[early]:
        work.wait()
    early_end = time.perf_counter()
    for work in works:
        work.wait()
    return (late_end if recvs[late] else None), (early_end if recvs[early] else None)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bandwidth", default="600Mbit")
    parser.add_argument("--cpu-quota", type=float, default=0.22)
    parser.add_argument("--mbytes", type=float, default=16)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--peers", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--chunks", type=int, default=1,
                        help="in|out, out|in: each transfer as this many messages (as a server's tensors)")
    parser.add_argument("--no-pin", action="store_true",
                        help="do not pin nodes to CPUs (pinned, nodes 0 and 2 share a core of two)")
    parser.add_argument("--stagger", type=float, default=0.1,
                        help="in|out, out|in: seconds the late direction starts after the other")
    parser.add_argument("--busy-factor", type=int, default=4,
                        help="in|out, out|in: the early direction moves this many x M per peer")
    args = parser.parse_args(argv)
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed
    from sgdscale.units import parse_bandwidth_bps

    rate = parse_bandwidth_bps(args.bandwidth)
    nbytes = int(args.mbytes * 1e6) // 4 * 4
    config = {"bytes": nbytes, "repeats": args.repeats, "warmup": args.warmup, "peers": args.peers,
              "stagger_s": args.stagger, "busy_factor": args.busy_factor, "chunks": args.chunks}
    world = 2 * args.peers + 1
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    with Testbed(world, rate, args.cpu_quota, pin_cpus=not args.no_pin) as bed:
        result = launch(TARGET, config, world, placement=bed, timeout_s=900, env=env)
    by_rank = {r["rank"]: r["times"] for r in result.results}
    durations: dict[str, list[float]] = {}
    for mode in REPORTED:
        for i in range(args.repeats):
            start = min(by_rank[r][mode][i][0] for r in by_rank)
            ends = [by_rank[r][mode][i][1] for r in by_rank if by_rank[r][mode][i][1] is not None]
            durations.setdefault(mode, []).append(max(ends) - start)
    wire_s = args.peers * nbytes * 8 / rate
    alone = statistics.median(durations["in"])
    lines = [f"# Full duplex? {args.bandwidth}, {args.cpu_quota} cores per node, {nbytes / 1e6:.0f} MB, "
             f"{args.peers} peer(s) each way",
             "", f"Generated by `benchmarks/duplex.py {' '.join(argv)}`. Wire time at the nominal rate: "
             f"{wire_s:.3f} s (k x M one way). Full duplex: `in+out` takes as long as `in`; `pair` is one "
             "pair both ways, 1 x M each. `in|out`, `out|in`: the late direction, from its start; their "
             f"`early` rows: the other direction ({args.busy_factor} x M per peer, from the barrier), "
             f"against {args.busy_factor} x `in`.", "",
             "| mode | median | min-max | / in |", "|---|---:|---|---:|"]
    for mode in REPORTED:
        d = durations[mode]
        base = alone * (args.busy_factor if mode.endswith("early") else 1)
        lines.append(f"| {mode} | {statistics.median(d):.3f} s | {min(d):.3f}-{max(d):.3f} s | "
                     f"{statistics.median(d) / base:.2f} |")
    out = HERE / "results" / "duplex"
    out.mkdir(parents=True, exist_ok=True)
    stem = (f"{args.bandwidth}-q{args.cpu_quota}-peers{args.peers}-{args.mbytes:g}MB-stagger{args.stagger:g}s"
            + (f"-chunks{args.chunks}" if args.chunks > 1 else "") + ("-unpinned" if args.no_pin else ""))
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "durations_s": durations}, indent=1) + "\n")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
