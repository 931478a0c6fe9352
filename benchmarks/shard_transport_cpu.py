"""What does a byte of point-to-point transport cost a shard's CPU, moved the way a shard moves it?

netbench fits the CPU per byte of point-to-point transport from a round trip between two ranks
(rank 0 sends M, then receives M back; one direction busy at a time), and both PS methods charge
a shard that figure for every byte in and out. Held-out set 34's shards received 0.5-0.8 of that
charge (`benchmarks/shard_cpu_charge.py`). A shard moves bytes both ways at once: pushes come in
while replies leave. This measures, on a 3-node emulated cluster (gloo, the testbed's shaping and
quota), the CPU that rank 0 spends per byte it moves in each pattern:
- `round trip`: netbench's p2p op (rank 0 sends M to rank 1, then receives M from it);
- `in`: rank 1 sends M to rank 0;
- `out`: rank 0 sends M to rank 1;
- `in+out`: rank 1 sends M to rank 0 while rank 0 sends M to rank 2 (an async shard);
- `pair`: ranks 0 and 1 send M to each other at once;
- `ps round`: ranks 1 and 2 each push M to rank 0 as 4 messages, and rank 0 replies with the same
  messages to each as they are in (a synchronous shard's step with 2 workers);
- `round trip, busy`, `in, busy`, `out, busy` and `ps round, busy`: the same while a second
  process on rank 0's node spins throughout, so that the node uses its whole quota (throttled), as
  a shard's node does while it updates; `round trip, both busy`: ranks 0 and 1's nodes both spin.
  The rank's getrusage holds its transport alone.
CPU is each rank's process CPU (getrusage, all threads, gloo's included: what netbench reads; the
node's cgroup is not readable from inside its namespace, and holds only this process). Per
pattern, the slope over the sizes of the median CPU per repeat (`fit_alpha_beta`, as netbench fits
it) is the CPU per byte rank 0 moves. Patterns are interleaved per repeat.

    flock /tmp/sgdscale-cpu.lock .venv/bin/python benchmarks/shard_transport_cpu.py
        [--bandwidth-mbit 3500] [--quota 0.21] [--mbytes 4,16] [--repeats 6] [--tag NAME]

Raw output: benchmarks/results/shard_transport_cpu-<bandwidth>-q<quota>[-NAME].md.

What it showed (3500 Mbit/s at 0.21 and 0.45 cores, 1050 at 0.21; 8 repeats of 4 and 16 MB; the
three files kept):
- receiving costs two to three times sending: `in` 0.73-0.94 ns/B, `out` 0.28-0.33;
- a shard's own pattern costs a little less than netbench's round trip, in each run: `ps round`
  0.33-0.52 ns/B against `round trip` 0.40-0.58 (6-18% less);
- with the node saturated by a spinner, `ps round, busy` 0.30-0.45 (0.8-0.9 of idle), `round trip,
  busy` 0.35-0.45 (0.6-1.1 of idle): a hint that a throttled node pays less per byte, inside the
  run-to-run noise (set 34's files measured 0.51 and 0.66 at these settings, these runs 0.40-0.58);
- so neither the pattern nor the busy node accounts for set 34's shards receiving only 0.5-0.8 of
  their charge; the figure's own noise between runs is as large as the gap.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = "shard_transport_cpu:rank_target"
# The patterns, in the order they run, and the bytes rank 0 moves (in plus out) in each, in units of M.
MOVED_AT_SHARD = {"round trip": 2, "in": 1, "out": 1, "in+out": 2, "pair": 2, "ps round": 4,
                  "round trip, busy": 2, "in, busy": 1, "out, busy": 1, "round trip, both busy": 2,
                  "ps round, busy": 4}
PATTERNS = tuple(MOVED_AT_SHARD)


def _process_cpu_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Spinner:
    """A process on this rank's node (its cgroup and namespace, inherited) that spins until stopped,
    so that the node uses its whole quota while the rank moves bytes, as a shard's node does while
    it updates. The rank's own getrusage then holds only its transport."""

    def __init__(self) -> None:
        import subprocess

        self._process = subprocess.Popen(["sh", "-c", "while :; do :; done"])
        time.sleep(0.05)  # the spinner is running, and the node throttled, before the transfer starts

    def stop(self) -> None:
        self._process.kill()
        self._process.wait()


def rank_target(ctx) -> dict:
    import torch
    import torch.distributed as dist

    config, rank = ctx.config, ctx.rank
    torch.set_num_threads(1)
    rows: dict[str, dict[str, list[list[float]]]] = {p: {} for p in PATTERNS}
    for nbytes in config["sizes"]:
        tensor = torch.ones(nbytes // 4, dtype=torch.float32)
        inbox = torch.ones_like(tensor)  # touched once: no page faults inside the timed window
        for pattern in PATTERNS:
            rows[pattern][str(nbytes)] = []
        for repeat in range(config["warmup"] + config["repeats"]):
            for pattern in PATTERNS:
                dist.barrier()
                busy = (_Spinner() if rank == 0 and pattern.endswith(", busy")
                        or rank == 1 and pattern.endswith("both busy") else None)
                cpu, start = _process_cpu_s(), time.perf_counter()
                works = []
                base = pattern.split(",")[0]
                if base == "round trip":
                    if rank == 0:
                        dist.send(tensor, dst=1)
                        dist.recv(inbox, src=1)
                    elif rank == 1:
                        dist.recv(inbox, src=0)
                        dist.send(tensor, dst=0)
                elif base == "in":
                    if rank == 0:
                        works.append(dist.irecv(inbox, src=1))
                    elif rank == 1:
                        works.append(dist.isend(tensor, dst=0))
                elif base == "out":
                    if rank == 0:
                        works.append(dist.isend(tensor, dst=1))
                    elif rank == 1:
                        works.append(dist.irecv(inbox, src=0))
                elif base == "in+out":
                    if rank == 0:
                        works += [dist.irecv(inbox, src=1), dist.isend(tensor, dst=2)]
                    elif rank == 1:
                        works.append(dist.isend(tensor, dst=0))
                    elif rank == 2:
                        works.append(dist.irecv(inbox, src=0))
                elif base == "ps round":
                    parts = config["parts"]
                    if rank == 0:
                        recvs = [[dist.irecv(part, src=w, tag=k) for k, part in enumerate(inbox.chunk(parts))]
                                 for w in (1, 2)]
                        for k in range(parts):
                            for w in (1, 2):
                                recvs[w - 1][k].wait()
                            works += [dist.isend(tensor.chunk(parts)[k], dst=w, tag=k) for w in (1, 2)]
                    else:
                        works += [dist.isend(part, dst=0, tag=k) for k, part in enumerate(tensor.chunk(parts))]
                        works += [dist.irecv(part, src=0, tag=k) for k, part in enumerate(inbox.chunk(parts))]
                elif base == "pair" and rank in (0, 1):
                    works += [dist.isend(tensor, dst=1 - rank), dist.irecv(inbox, src=1 - rank)]
                for work in works:
                    work.wait()
                wall = time.perf_counter() - start
                used = _process_cpu_s() - cpu
                if busy is not None:
                    busy.stop()
                if repeat >= config["warmup"]:
                    rows[pattern][str(nbytes)].append([used, wall])
    return {"rank": rank, "rows": rows}


def main(argv: list[str]) -> int:
    from sgdscale.comm.network import fit_alpha_beta
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth-mbit", type=float, default=3500)
    parser.add_argument("--quota", type=float, default=0.21)
    parser.add_argument("--mbytes", default="4,16")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--tag", default=None)
    args = parser.parse_args(argv)
    sizes = [int(float(m) * 1e6) // 4 * 4 for m in args.mbytes.split(",")]
    config = {"sizes": sizes, "repeats": args.repeats, "warmup": args.warmup, "parts": 4}
    with Testbed(3, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as bed:
        result = launch(TARGET, config, 3, placement=bed, timeout_s=1800, env={"PYTHONPATH": str(HERE)})
    by_rank = {int(r["rank"]): r["rows"] for r in result.results}
    lines = ["# A shard's CPU per byte of point-to-point transport, by pattern", "",
             f"Generated by `benchmarks/shard_transport_cpu.py {' '.join(argv)}`. 3 nodes, "
             f"{args.bandwidth_mbit:g} Mbit/s, {args.quota:g} cores per node (pinned), gloo; sizes "
             f"{', '.join(f'{s / 1e6:g} MB' for s in sizes)}; {args.repeats} repeats after {args.warmup} warm-up, "
             "patterns interleaved. CPU per byte: the slope over the sizes of the median CPU per repeat, over the "
             "bytes rank 0 moves (in plus out), ns of CPU per byte (getrusage of each rank's process, netbench's "
             "reading). Rank 1 and 2 columns divide their CPU by the same bytes (rank 0's), to show where the work "
             "landed.", "",
             "| pattern | rank 0 (ns/B) | rank 1 | rank 2 | wall at largest size (ms, runs) | rank 0 CPU at largest size (ms, runs) |",
             "|---|---:|---:|---:|---|---|"]
    for pattern in PATTERNS:
        moved = [MOVED_AT_SHARD[pattern] * s for s in sizes]

        def per_byte(rank: int, column: int) -> str:
            values = [statistics.median(r[column] for r in by_rank[rank][pattern][str(s)]) for s in sizes]
            return f"{fit_alpha_beta(moved, values).beta_s_per_byte * 1e9:.2f}"

        largest = by_rank[0][pattern][str(sizes[-1])]
        lines.append(f"| {pattern} | {per_byte(0, 0)} | {per_byte(1, 0)} | {per_byte(2, 0)} | "
                     + ", ".join(f"{r[1] * 1e3:.0f}" for r in largest) + " | "
                     + ", ".join(f"{r[0] * 1e3:.1f}" for r in largest) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    name = f"shard_transport_cpu-{args.bandwidth_mbit:g}Mbit-q{args.quota:g}" + (f"-{args.tag}" if args.tag else "")
    (HERE / "results" / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
