"""How much of a link does a TCP flow that started first keep? Incast and outcast, on the testbed.

When this was written the fine method gave a flow that starts on a link busy since before it a tenth
of the weight of the flows already moving, whatever the head start, let flows that start together
share equally, and treated a shard's outgoing link (pulls: one sender, several receivers) like its
incoming one (pushes: several senders, one receiver). What this measured set it since: 0.22, on the
sender's link only (`sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT`). With flows of 35-280 MB at 600
Mbit/s (`--mb`) the weight stays 0.31-0.33: a newcomer's handicap does not fade over its flow. This
measures both on the emulated cluster with plain TCP sockets: two flows of M bytes each, the
second starting `head start` after the first, either from two nodes into one (incast) or from one
node to two (outcast). From the first flow's finish t1 (both clocks CLOCK_MONOTONIC on one host),
the line time L of one flow alone and the head start d, the newcomer's weight while both moved is

    w = (t1 - d) / (L - d) - 1      (0: the first flow keeps the link; 1: equal sharing)

    .venv/bin/python benchmarks/head_start.py [--bandwidth-mbit 1400] [--quota 0.46] [--mb 35]
        [--head-starts-ms 0,2,10,30,80] [--repeats 3] [--directions incast,outcast] [--busy-sender] [--tag NAME]

`--busy-sender` runs a process that spins on the sending node (node 0 for outcast, both senders'
nodes for incast) throughout, in the node's cgroup: the flows then compete for the node's CPU quota
with other work, as a parameter-server shard's replies compete with its updates.
Raw output: benchmarks/results/head_start.md (with --tag, head_start-NAME.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Receives `count` connections on PORT; prints, per connection, the id its sender sent first and
# CLOCK_MONOTONIC when its last byte arrived.
RECEIVER = r"""
import json, socket, sys, threading, time
port, count = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", port)); srv.listen(count)
done = {}
def drain(conn):
    ident = conn.recv(1)[0]
    buf = bytearray(1 << 20)
    while conn.recv_into(buf):
        pass
    done[ident] = time.monotonic()
    conn.close()
threads = []
for _ in range(count):
    conn, _ = srv.accept()
    t = threading.Thread(target=drain, args=(conn,)); t.start(); threads.append(t)
for t in threads:
    t.join()
print(json.dumps({str(k): v for k, v in done.items()}), flush=True)
"""

# Connects to each (host, port, id, start_at, nbytes) target, then sends nbytes on each from its start time.
SENDER = r"""
import json, socket, sys, threading, time
targets = json.loads(sys.argv[1])
socks = []
for host, port, ident, start_at, nbytes in targets:
    deadline = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((host, port), timeout=30); break
        except OSError:
            if time.monotonic() > deadline: raise
            time.sleep(0.01)
    socks.append((s, ident, start_at, nbytes))
chunk = b"\0" * (1 << 16)
def send(s, ident, start_at, nbytes):
    time.sleep(max(0.0, start_at - time.monotonic()))
    s.sendall(bytes([ident])); left = nbytes
    while left > 0:
        n = min(left, len(chunk)); s.sendall(chunk[:n]); left -= n
    s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
threads = [threading.Thread(target=send, args=t) for t in socks]
for t in threads: t.start()
for t in threads: t.join()
"""


def trial(bed, direction: str, nbytes: int, head_start_s: float, port: int) -> tuple[float, float, float]:
    """(start, first flow's finish, second flow's finish), CLOCK_MONOTONIC seconds."""
    start = time.monotonic() + 1.0
    if direction == "incast":  # nodes 1 and 2 send to node 0
        receivers = [bed.popen(0, [sys.executable, "-c", RECEIVER, str(port), "2"], stdout=-1, stderr=-1, text=True)]
        senders = [bed.popen(1 + k, [sys.executable, "-c", SENDER,
                                     json.dumps([[bed.address(0), port, k, start + k * head_start_s, nbytes]])],
                             stdout=-1, stderr=-1, text=True) for k in (0, 1)]
    else:  # node 0 sends to nodes 1 and 2
        receivers = [bed.popen(1 + k, [sys.executable, "-c", RECEIVER, str(port), "1"], stdout=-1, stderr=-1, text=True)
                     for k in (0, 1)]
        senders = [bed.popen(0, [sys.executable, "-c", SENDER,
                                 json.dumps([[bed.address(1 + k), port, k, start + k * head_start_s, nbytes]
                                             for k in (0, 1)])],
                             stdout=-1, stderr=-1, text=True)]
    for s in senders:
        _, err = s.communicate(timeout=120)
        if s.returncode:
            raise RuntimeError(err)
    done: dict[str, float] = {}
    for r in receivers:
        out, err = r.communicate(timeout=120)
        if r.returncode:
            raise RuntimeError(err)
        done.update(json.loads(out.strip().splitlines()[-1]))
    return start, done["0"], done["1"]


def alone(bed, nbytes: int, port: int) -> float:
    receiver = bed.popen(0, [sys.executable, "-c", RECEIVER, str(port), "1"], stdout=-1, stderr=-1, text=True)
    start = time.monotonic() + 1.0
    sender = bed.popen(1, [sys.executable, "-c", SENDER, json.dumps([[bed.address(0), port, 0, start, nbytes]])],
                       stdout=-1, stderr=-1, text=True)
    sender.communicate(timeout=120)
    out, _ = receiver.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])["0"] - start


def main(argv: list[str]) -> int:
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth-mbit", type=float, default=1400)
    parser.add_argument("--quota", type=float, default=0.46)
    parser.add_argument("--mb", type=float, default=35.0, help="bytes per flow, MB")
    parser.add_argument("--head-starts-ms", default="0,2,10,30,80")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--directions", default="incast,outcast")
    parser.add_argument("--busy-sender", action="store_true", help="spin a process on each sending node")
    parser.add_argument("--tag", default=None)
    args = parser.parse_args(argv)
    nbytes = int(args.mb * 1e6)
    head_starts = [float(h) / 1e3 for h in args.head_starts_ms.split(",")]
    directions = args.directions.split(",")
    rows = []
    port = 6100
    with Testbed(3, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as bed:
        spinners = [bed.popen(node, [sys.executable, "-c", "while True: pass"]) for node in (0, 1, 2)
                    if args.busy_sender and (node == 0 and "outcast" in directions or node > 0 and "incast" in directions)]
        try:
            line = statistics.median(alone(bed, nbytes, port + k) for k in range(3))
            port += 3
            for repeat in range(args.repeats):
                for direction in directions:
                    for d in head_starts:
                        port += 1
                        start, first, second = trial(bed, direction, nbytes, d, port)
                        t1, t2 = first - start, second - start
                        weight = (t1 - d) / (line - d) - 1 if d > 0 else None
                        rows.append((direction, d, repeat, t1, t2, weight))
                        print(f"{direction} head start {d * 1e3:g} ms: first {t1 * 1e3:.1f} ms, second {t2 * 1e3:.1f} ms"
                              + (f", newcomer weight {weight:.2f}" if weight is not None else ""), flush=True)
        finally:
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
    lines = ["# How much of a link does the flow that started first keep?", "",
             "Generated by `benchmarks/head_start.py " + " ".join(argv) + f"`. Two TCP flows of {args.mb:g} MB, the second "
             f"starting a head start after the first; {args.bandwidth_mbit:g} Mbit/s, {args.quota:g} cores per node, "
             f"the testbed's TCP and tbf queue{'; a spinning process on each sending node' if args.busy_sender else ''}. One flow alone: {line * 1e3:.1f} ms (median of 3). Newcomer weight "
             "w = (t1 - d) / (L - d) - 1 (0: the first flow keeps the link, 1: equal sharing); for a head start of 0, "
             "the first flow's finish over the second's (1: they finish together).", "",
             "| direction | head start (ms) | first flow done (ms, runs) | second flow done (ms, runs) | newcomer weight (median) | first / second done (head start 0) |",
             "|---|---:|---|---|---:|---:|"]
    for direction in directions:
        for d in head_starts:
            mine = [r for r in rows if r[0] == direction and r[1] == d]
            firsts = ", ".join(f"{r[3] * 1e3:.0f}" for r in mine)
            seconds = ", ".join(f"{r[4] * 1e3:.0f}" for r in mine)
            weights = [r[5] for r in mine if r[5] is not None]
            ratio = statistics.median(min(r[3], r[4]) / max(r[3], r[4]) for r in mine)
            lines.append(f"| {direction} | {d * 1e3:g} | {firsts} | {seconds} | "
                         f"{statistics.median(weights):.2f} | " if weights else
                         f"| {direction} | {d * 1e3:g} | {firsts} | {seconds} | - | ")
            lines[-1] += f"{ratio:.2f} |" if d == 0 else "- |"
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / (f"head_start-{args.tag}.md" if args.tag else "head_start.md")).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
