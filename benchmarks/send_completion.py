"""How far ahead of its bytes' arrival does a gloo send complete? Real gloo pairs, on the testbed.

A sync PS shard posts its receives for the next step once its replies' sends have completed
(`sgdscale.runtime.ps`), and a gloo send completes once its last byte is in the socket
(`gloo/transport/tcp/pair.cc`: `Pair::write` -> `writeComplete`), whose buffer gloo sizes to the largest
message the pair has sent (`Pair::send` sets SO_SNDBUF to it, at most 32 MB; Linux caps that at
`net.core.wmem_max` and doubles it). So a shard may start its next step while up to that buffer of
each reply is still to cross the link, and workers that already have their parameters then push while
the others still receive: the pattern the traced real sync steps show
(`results/step_parts/mlp-real-sync-w4-790Mbit-heldout83.md`: the shard posts 59 ms before the last
worker has its parameters).

Node 0 (rank 0) sends each case's messages to node 1 (rank 1) with `isend`, in order, and waits for all
of them; node 1 has posted the matching `irecv`s first (the receive-before-send rendezvous, as a worker
posts its pulls before the shard replies). Each round starts at a barrier. The lead is node 1's
completion time minus node 0's (one host's CLOCK_MONOTONIC); times the rate the messages moved at, it
is what the socket still held when the sends completed, against 2 x min(largest message, wmem_max).
Each case runs in its own process group (gloo's pair keeps the largest size it has set).

    .venv/bin/python benchmarks/send_completion.py [--bandwidth-mbit 790] [--quota 0.31] [--rounds 8]
        [--repeats 2] [--tag NAME]

Raw output: benchmarks/results/send_completion.{md,json} (with --tag, send_completion-NAME.*).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WMEM_MAX = Path("/proc/sys/net/core/wmem_max")

# name -> message sizes in bytes, in send order (a shard's replies to one worker, in update order)
CASES = {
    "4 x 1 MiB (mlp's weights)": [1048576] * 4,
    "16 x 1 MiB": [1048576] * 16,
    "5.12 MB, then 136 x 64 KiB (mobilenet_v2's classifier first)": [5120000] + [65536] * 136,
    "214 x 64 KiB": [65536] * 214,
}

PAIR = r"""
import json, sys, time
import torch, torch.distributed as dist
rank, addr, port, sizes, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=2)
bufs = [torch.ones(n // 4, dtype=torch.float32) for n in sizes]
out = []
for r in range(rounds):
    dist.barrier()
    if rank == 1:
        works = [dist.irecv(b, src=0, tag=i) for i, b in enumerate(bufs)]
        for w in works:
            w.wait()
        out.append(time.monotonic())
    else:
        time.sleep(0.05)  # the receiver's notices are in
        t0 = time.monotonic()
        works = [dist.isend(b, dst=1, tag=i) for i, b in enumerate(bufs)]
        for w in works:
            w.wait()
        out.append([t0, time.monotonic()])
    time.sleep(0.3)
dist.barrier()
print(json.dumps(out), flush=True)
"""


def run_case(bed, sizes: list[int], rounds: int, port: int) -> list[dict]:
    procs = [bed.popen(rank, [sys.executable, "-c", PAIR, str(rank), bed.address(0), str(port), json.dumps(sizes),
                              str(rounds)], env={"GLOO_SOCKET_IFNAME": bed.socket_ifname()}, stdout=-1, stderr=-1, text=True)
             for rank in (0, 1)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode:
            raise RuntimeError(err[-2000:])
        outs.append(json.loads(out.strip().splitlines()[-1]))
    total = sum(sizes)
    rows = []
    for (t0, sent), received in zip(outs[0], outs[1]):
        rate = total / (received - t0)
        lead = received - sent
        rows.append({"start": t0, "sent": sent, "received": received, "rate_Bps": rate, "lead_s": lead,
                     "held_bytes": lead * rate})
    return rows


def main(argv: list[str]) -> int:
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth-mbit", type=float, default=790)
    parser.add_argument("--quota", type=float, default=0.31)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="process groups per case, interleaved")
    parser.add_argument("--tag", default=None)
    args = parser.parse_args(argv)
    output = f"send_completion-{args.tag}" if args.tag else "send_completion"
    wmem_max = int(WMEM_MAX.read_text())
    results = []
    port = 29700
    with Testbed(2, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as bed:
        for repeat in range(args.repeats):
            for name, sizes in CASES.items():
                port += 1
                rows = run_case(bed, sizes, args.rounds, port)[1:]  # the first round opens the pair's window
                results.append({"case": name, "repeat": repeat, "rows": rows})
                held = statistics.median(r["held_bytes"] for r in rows)
                print(f"{name}: held {held / 1e6:.2f} MB when the sends completed (lead "
                      f"{statistics.median(r['lead_s'] for r in rows) * 1e3:.0f} ms)", flush=True)
    (HERE / "results" / f"{output}.json").write_text(
        json.dumps({"args": vars(args), "wmem_max": wmem_max, "results": results}, indent=1) + "\n")
    lines = ["# How far ahead of its bytes' arrival a gloo send completes", "",
             f"Generated by `benchmarks/send_completion.py {' '.join(argv)}`. Two testbed nodes, {args.bandwidth_mbit:g} "
             f"Mbit/s, {args.quota:g} cores each; net.core.wmem_max {wmem_max} bytes. Each case: {args.repeats} process "
             f"groups (interleaved with the other cases), {args.rounds} rounds each, the first left out. Held: the lead "
             "(receiver done minus sender done) times the rate the round's bytes moved at.", "",
             "| messages sent in order | largest (bytes) | 2 x min(largest, wmem_max) (MB) | held when the sends completed (MB, median; min-max) | lead (ms, median) | rate (MB/s, median) |",
             "|---|---:|---:|---|---:|---:|"]
    for name, sizes in CASES.items():
        rows = [r for res in results if res["case"] == name for r in res["rows"]]
        held = [r["held_bytes"] / 1e6 for r in rows]
        lines.append(f"| {name} | {max(sizes)} | {2 * min(max(sizes), wmem_max) / 1e6:.2f} | {statistics.median(held):.2f}; "
                     f"{min(held):.2f}-{max(held):.2f} | {statistics.median(r['lead_s'] for r in rows) * 1e3:.0f} | "
                     f"{statistics.median(r['rate_Bps'] for r in rows) / 1e6:.1f} |")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
