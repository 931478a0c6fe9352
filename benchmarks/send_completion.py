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

Node 0 (rank 0) sends each case's messages to `--receivers` nodes (ranks 1..N) with `isend`, message by
message to each in turn as a shard sends an update's replies, and notes when each receiver's last send
completed (a waiting thread per receiver: gloo's `Work.is_completed` does not report a send until it is
waited on); the receivers have posted the matching `irecv`s first (the receive-before-send rendezvous,
as a worker posts its pulls before the shard replies) and note when each message was in. Each round
starts at a barrier; one host's CLOCK_MONOTONIC. Per connection: what it still had to receive when its
sends completed (by each message's arrival) and how long before its last byte. Over all: what was still
to arrive when the last send completed, and how long before the last byte arrived: how far ahead of its
last worker's parameters a sync shard posts its next receives. Each case runs in its own process group
(gloo's pair keeps the largest size it has set).

With 4 receivers at 730 Mbit/s (`--receivers 4 --bandwidth-mbit 730 --rounds 6 --tag
4receivers-730Mbit`) the last byte arrived 26-55 ms after the last send completed (medians per mix),
about what one connection alone leads by (34-43 ms), not each connection's buffer over its share of the
link: the lead in time is what holds, as `LinkNetwork.watch` models it (`fine.ps.POSTS_AHEAD_BY_SEND_LEAD`).
The one-receiver results (`send_completion.md`, `-300Mbit`, `-q0.95`) are from the script before
`--receivers` (commit 01b27f1), whose held column is the lead times the rate the round's bytes moved at.

    .venv/bin/python benchmarks/send_completion.py [--bandwidth-mbit 790] [--quota 0.31] [--rounds 8]
        [--repeats 2] [--receivers 1] [--tag NAME]

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
import json, sys, threading, time
import torch, torch.distributed as dist
rank, addr, port, sizes, rounds, world = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]),
                                          int(sys.argv[5]), int(sys.argv[6]))
dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
bufs = [torch.ones(n // 4, dtype=torch.float32) for n in sizes]
out = []
for r in range(rounds):
    dist.barrier()
    if rank > 0:
        works = [dist.irecv(b, src=0, tag=i) for i, b in enumerate(bufs)]
        arrived = []
        for w in works:  # a pair completes its receives in order
            w.wait()
            arrived.append(time.monotonic())
        out.append(arrived)
    else:
        time.sleep(0.05)  # the receivers' notices are in
        t0 = time.monotonic()
        # message by message to every receiver, as a shard sends each update's replies
        works = {dst: [] for dst in range(1, world)}
        for i, b in enumerate(bufs):
            for dst in works:
                works[dst].append(dist.isend(b, dst=dst, tag=i))
        sent = {}

        def done(dst):  # a thread per receiver: when its last send completed (wait releases the GIL)
            for w in works[dst]:
                w.wait()
            sent[dst] = time.monotonic()

        threads = [threading.Thread(target=done, args=(dst,)) for dst in works]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.append([t0, [sent[dst] for dst in sorted(sent)]])
    time.sleep(0.3)
dist.barrier()
print(json.dumps(out), flush=True)
"""


def run_case(bed, sizes: list[int], rounds: int, port: int, receivers: int = 1) -> list[dict]:
    """One process group of 1 + `receivers` ranks on as many nodes; per round: when rank 0 started, and
    per receiver when its sends completed, when its bytes were all in, and what it still had to receive
    then (`held_bytes`: the bytes of its messages that arrived after, by each message's arrival)."""
    world = receivers + 1
    procs = [bed.popen(rank, [sys.executable, "-c", PAIR, str(rank), bed.address(0), str(port), json.dumps(sizes),
                              str(rounds), str(world)], env={"GLOO_SOCKET_IFNAME": bed.socket_ifname()},
                       stdout=-1, stderr=-1, text=True)
             for rank in range(world)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        if p.returncode:
            raise RuntimeError(err[-2000:])
        outs.append(json.loads(out.strip().splitlines()[-1]))
    total = sum(sizes)
    rows = []
    for r, (t0, sent) in enumerate(outs[0]):
        per = []
        for k, arrived in enumerate(o[r] for o in outs[1:]):
            held = sum(n for n, t in zip(sizes, arrived) if t > sent[k])
            per.append({"sent": sent[k], "received": arrived[-1], "lead_s": arrived[-1] - sent[k],
                        "held_bytes": held, "rate_Bps": total / (arrived[-1] - t0)})
        all_sent, last_in = max(p["sent"] for p in per), max(p["received"] for p in per)
        held_all = sum(n for o in outs[1:] for n, t in zip(sizes, o[r]) if t > all_sent)
        rows.append({"start": t0, "sent": all_sent, "received": last_in, "receivers": per,
                     "lead_s": last_in - all_sent, "rate_Bps": total * receivers / (last_in - t0),
                     "held_bytes": held_all})
    return rows


def main(argv: list[str]) -> int:
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth-mbit", type=float, default=790)
    parser.add_argument("--quota", type=float, default=0.31)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="process groups per case, interleaved")
    parser.add_argument("--receivers", type=int, default=1,
                        help="nodes node 0 sends every case to at once (a sync shard replies to its workers so)")
    parser.add_argument("--tag", default=None)
    args = parser.parse_args(argv)
    output = f"send_completion-{args.tag}" if args.tag else "send_completion"
    wmem_max = int(WMEM_MAX.read_text())
    results = []
    port = 29700
    with Testbed(1 + args.receivers, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as bed:
        for repeat in range(args.repeats):
            for name, sizes in CASES.items():
                port += 1
                rows = run_case(bed, sizes, args.rounds, port, args.receivers)[1:]  # the first round opens the windows
                results.append({"case": name, "repeat": repeat, "rows": rows})
                print(f"{name}: {statistics.median(r['held_bytes'] for r in rows) / 1e6:.2f} MB still to arrive when "
                      f"the last send completed (the last byte in "
                      f"{statistics.median(r['lead_s'] for r in rows) * 1e3:.0f} ms)", flush=True)
    (HERE / "results" / f"{output}.json").write_text(
        json.dumps({"args": vars(args), "wmem_max": wmem_max, "results": results}, indent=1) + "\n")
    receivers = args.receivers
    lines = ["# How far ahead of its bytes' arrival a gloo send completes", "",
             f"Generated by `benchmarks/send_completion.py {' '.join(argv)}`. {1 + receivers} testbed nodes, "
             f"{args.bandwidth_mbit:g} Mbit/s, {args.quota:g} cores each; node 0 sends each case to {receivers} "
             f"node(s) at once, message by message; net.core.wmem_max {wmem_max} bytes. Each case: {args.repeats} "
             f"process groups (interleaved with the other cases), {args.rounds} rounds each, the first left out. "
             "Per connection, held: the bytes of its messages that arrived after its sends had completed (by each "
             "message's arrival); lead: its last byte in, after its sends completed. All connections: what was "
             "still to arrive when the last send completed, and the last byte in after it (when a sync shard "
             "posts its next receives, and when its last worker has its parameters). Medians over rounds; "
             "min-max.", "",
             "| messages sent in order | largest (bytes) | 2 x min(largest, wmem_max) (MB) | per connection: held (MB) | "
             "per connection: lead (ms) | all: held (MB) | all: last byte in after (ms) | rate, all (MB/s) |",
             "|---|---:|---:|---|---|---|---|---:|"]

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}; {min(values):.2f}-{max(values):.2f}"

    for name, sizes in CASES.items():
        rows = [r for res in results if res["case"] == name for r in res["rows"]]
        per = [p for r in rows for p in r["receivers"]]
        lines.append(f"| {name} | {max(sizes)} | {2 * min(max(sizes), wmem_max) / 1e6:.2f} | "
                     f"{spread([p['held_bytes'] / 1e6 for p in per])} | "
                     f"{statistics.median(p['lead_s'] for p in per) * 1e3:.0f} | "
                     f"{spread([r['held_bytes'] / 1e6 for r in rows])} | "
                     f"{statistics.median(r['lead_s'] for r in rows) * 1e3:.0f} | "
                     f"{statistics.median(r['rate_Bps'] for r in rows) / 1e6:.1f} |")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
