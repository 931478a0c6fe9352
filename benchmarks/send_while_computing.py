"""Does a PS worker's push slow while the worker computes, and its compute while it pushes? (root, torch)

A parameter-server worker pushes each gradient while its backward still computes, on the same CPU
quota. The prediction methods slow the worker's backward by netbench's compute slowdown and its
pushes by netbench's communication slowdown while both run (`compute_while_sending` in
`sgdscale.comm.interference`), both measured by netbench on an all-reduce. This measures the PS
pattern itself on the emulated cluster, two nodes (rank 0 a worker, rank 1 a shard), M bytes sent
as `--chunks` tensors with gloo:
- `push`: rank 0 sends M to rank 1 (timed from a barrier to rank 1's last receive);
- `push+compute`: the same while rank 0 runs netbench's compute loop (a convolution and a matrix
  product per unit) in a second thread; the loop's time per unit is recorded against the loop alone;
- `pull`, `pull+compute`: rank 1 sends M to rank 0 (a worker receiving its parameters), alone and
  while rank 0 computes;
- `push+pull`: both directions at once (async PS: replies flow while pushes arrive);
- `push+pull+compute`: both, with rank 0 computing.
- `compute`: the loop alone for as long as a push takes (the baseline of the compute slowdown).
Modes are interleaved per repeat.

    .venv/bin/python benchmarks/send_while_computing.py [--bandwidth 1700Mbit] [--cpu-quota 0.43]
        [--mbytes 47] [--chunks 62] [--repeats 6]
Writes benchmarks/results/send_while_computing/<bandwidth>-q<quota>-<M>MB-chunks<k>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = "send_while_computing:rank_target"
MODES = ("compute", "push", "push+compute", "pull", "pull+compute", "push+pull", "push+pull+compute")


def rank_target(ctx) -> dict:
    import torch
    import torch.distributed as dist

    from sgdscale.runtime.netbench import _compute_unit

    config, rank = ctx.config, ctx.rank
    chunks = config["chunks"]
    out_parts = torch.ones(config["bytes"] // 4, dtype=torch.float32).chunk(chunks)
    in_parts = torch.ones(config["bytes"] // 4, dtype=torch.float32).chunk(chunks)
    unit = _compute_unit()
    for _ in range(3):
        unit()
    rows: dict[str, list] = {m: [] for m in MODES}
    units: dict[str, list] = {m: [] for m in MODES}
    for repeat in range(config["warmup"] + config["repeats"]):
        for mode in MODES:
            stop, count = threading.Event(), [0, 0.0]

            def loop() -> None:
                t0 = time.perf_counter()
                while not stop.is_set():
                    unit()
                    count[0] += 1
                count[1] = time.perf_counter() - t0

            dist.barrier()
            start = time.perf_counter()
            thread = None
            if rank == 0 and mode.endswith("compute"):
                thread = threading.Thread(target=loop, daemon=True)
                thread.start()
            push, pull = "push" in mode, "pull" in mode
            if rank == 0:
                works = [dist.isend(part, dst=1) for part in out_parts] if push else []
                works += [dist.irecv(part, src=1) for part in in_parts] if pull else []
            else:
                works = [dist.irecv(part, src=0) for part in in_parts] if push else []
                works += [dist.isend(part, dst=0) for part in out_parts] if pull else []
            if mode == "compute":
                time.sleep(config["bytes"] * 8 / config["rate_bps"])
            for work in works:
                work.wait()
            end = time.perf_counter()
            if thread is not None:
                stop.set()
                thread.join()
            if repeat >= config["warmup"]:
                rows[mode].append([start, end])
                if thread is not None and count[0]:
                    units[mode].append(count[1] / count[0])
    return {"rank": rank, "times": rows, "unit_s": units}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bandwidth", default="1700Mbit")
    parser.add_argument("--cpu-quota", type=float, default=0.43)
    parser.add_argument("--mbytes", type=float, default=47)
    parser.add_argument("--chunks", type=int, default=62)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    args = parser.parse_args(argv)
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed
    from sgdscale.units import parse_bandwidth_bps

    rate = parse_bandwidth_bps(args.bandwidth)
    nbytes = int(args.mbytes * 1e6) // 4 * 4
    config = {"bytes": nbytes, "repeats": args.repeats, "warmup": args.warmup, "chunks": args.chunks, "rate_bps": rate}
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    with Testbed(2, rate, args.cpu_quota, pin_cpus=True) as bed:
        result = launch(TARGET, config, 2, placement=bed, timeout_s=900, env=env)
    by_rank = {r["rank"]: r for r in result.results}
    durations = {mode: [max(by_rank[r]["times"][mode][i][1] for r in by_rank)
                        - min(by_rank[r]["times"][mode][i][0] for r in by_rank) for i in range(args.repeats)]
                 for mode in MODES}
    alone_unit = statistics.median(by_rank[0]["unit_s"]["compute"])
    push = statistics.median(durations["push"])
    wire_s = nbytes * 8 / rate
    lines = [f"# A PS worker's push while it computes: {args.bandwidth}, {args.cpu_quota} cores per node, "
             f"{nbytes / 1e6:.0f} MB in {args.chunks} tensors", "",
             f"Generated by `benchmarks/send_while_computing.py {' '.join(argv)}`. Wire time at the nominal rate: "
             f"{wire_s * 1e3:.0f} ms. Transfer: from a barrier to the last byte received on both ranks "
             f"({args.repeats} repeats, interleaved). Compute: netbench's loop on the worker, "
             f"{alone_unit * 1e3:.2f} ms per unit alone (mode `compute`, median).", "",
             "| mode | transfer median (ms) | min-max (ms) | / push | compute per unit (ms, median) | compute slowdown |",
             "|---|---:|---|---:|---:|---:|"]
    for mode in MODES[1:]:
        d = durations[mode]
        per_unit = by_rank[0]["unit_s"][mode]
        unit_cells = (f"{statistics.median(per_unit) * 1e3:.2f} | {statistics.median(per_unit) / alone_unit:.2f}"
                      if per_unit else "- | -")
        lines.append(f"| {mode} | {statistics.median(d) * 1e3:.0f} | {min(d) * 1e3:.0f}-{max(d) * 1e3:.0f} | "
                     f"{statistics.median(d) / push:.2f} | {unit_cells} |")
    out = HERE / "results" / "send_while_computing"
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.bandwidth}-q{args.cpu_quota}-{args.mbytes:g}MB-chunks{args.chunks}"
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "durations_s": durations,
                                                  "unit_s": by_rank[0]["unit_s"]},
                                                 indent=1) + "\n")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
