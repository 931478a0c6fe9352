"""Does a flow get less of a shared link when its receiver is sending? Plain TCP, on the testbed.

In the traced real sync PS steps (`results/step_parts/mlp-real-sync-w4-790Mbit-heldout83.md`, set 82's
bert) the workers come in two bunches that hold from step to step: the same two workers get the shard's
replies first, the other two get theirs ~70 ms later. The late ones are still pushing to the shard while
the replies go out. A suspect: a worker that sends on its uplink queues its acknowledgements of the
shard's reply behind its own pushes in its shaper, the reply's round trip grows, and among TCP flows
sharing the shard's uplink the one with the longer round trip gets less (Reno's share goes as
1/RTT). `benchmarks/duplex_flows.py` measured a receiving node that sends at 0.96-0.98 of its rate
alone, but there its incoming flow had its link to itself: a longer round trip costs a lone flow
little. This measures it where flows compete.

Node 0 sends `--mb` MB to node 1 and `--mb` MB to node 2 at the same instant. One of them, the busy
receiver (node 2 and node 1 take turns from repeat to repeat, so any order between them cancels out),
has been sending `--out-mb` MB since `--lead-ms` earlier: to node 0 (condition `sender`: a PS worker
pushing to its shard while the shard replies), to node 3 (`other`), or to node 0 beside node 3, which
sends as much to node 0 (`incast`: two workers pushing to their shard, whose downlink is then their
bottleneck); in the control (`idle`) nobody else sends. Node 0's two connections have moved data until
`--gap-ms` before their flows start, as a PS step's connections have (TCP keeps its window over a gap
shorter than its retransmission timeout); `--cold` opens them fresh instead (slow start). From the
first finish t1 and one flow's time alone L, the busy receiver's flow's weight while both moved is

    w = t1 / L - 1      (1: equal sharing; 0: the idle receiver's flow takes the link)

when the idle receiver's flow finishes first (1 / (t1 / L - 1) when the busy one does), as
`benchmarks/head_start.py` computes a newcomer's with its head start 0.

    .venv/bin/python benchmarks/busy_receiver.py [--bandwidth-mbit 790] [--quota 0.31] [--mb 4,20]
        [--out-mb 150] [--lead-ms 200] [--gap-ms 150 | --cold] [--conditions idle,sender,other,incast] [--repeats 5] [--tag NAME]

Raw output: benchmarks/results/busy_receiver.{md,json} (with --tag, busy_receiver-NAME.*).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from head_start import RECEIVER

HERE = Path(__file__).resolve().parent

# As head_start's SENDER, but each (host, port, id, warm_until, start_at, nbytes) connection first
# sends for as long as it can until warm_until (a connection that has been moving data, as a PS
# worker's are from step to step, not one in slow start), then pauses until start_at, then sends nbytes.
SENDER = r"""
import json, socket, sys, threading, time
targets = json.loads(sys.argv[1])
socks = []
for host, port, ident, warm_until, start_at, nbytes in targets:
    deadline = time.monotonic() + 10
    while True:
        try:
            s = socket.create_connection((host, port), timeout=30); break
        except OSError:
            if time.monotonic() > deadline: raise
            time.sleep(0.01)
    socks.append((s, ident, warm_until, start_at, nbytes))
chunk = b"\0" * (1 << 16)
def send(s, ident, warm_until, start_at, nbytes):
    s.sendall(bytes([ident]))
    while time.monotonic() < warm_until:
        s.sendall(chunk)
    time.sleep(max(0.0, start_at - time.monotonic())); left = nbytes
    while left > 0:
        n = min(left, len(chunk)); s.sendall(chunk[:n]); left -= n
    s.shutdown(socket.SHUT_WR); s.recv(1); s.close()
threads = [threading.Thread(target=send, args=t) for t in socks]
for t in threads: t.start()
for t in threads: t.join()
"""

CONDITIONS = {"idle": "idle (control)", "sender": "sends to node 0 (a worker pushing to its shard)",
              "other": "sends to node 3", "incast": "sends to node 0 beside node 3 (two workers pushing to their shard)"}


def run(bed, commands: list[tuple[int, list[str]]]) -> list:
    """Start each (node, script and its arguments) on its node."""
    return [bed.popen(node, [sys.executable, "-c", *args], stdout=-1, stderr=-1, text=True) for node, args in commands]


def finish(procs, timeout_s: float = 180) -> dict[str, float]:
    done: dict[str, float] = {}
    for p in procs:
        out, err = p.communicate(timeout=timeout_s)
        if p.returncode:
            raise RuntimeError(err)
        lines = out.strip().splitlines()
        if lines:
            done.update(json.loads(lines[-1]))
    return done


def trial(bed, condition: str, busy: int, nbytes: int, out_bytes: int, lead_s: float, gap_s: float | None,
          port: int) -> tuple[float, float]:
    """(idle receiver's flow, busy receiver's flow) times from their start, s; node `busy` (1 or 2) is the
    one that sends meanwhile (in the control it only names which flow is which). gap_s: node 0's
    connections move data until this long before their start (None: fresh connections)."""
    start = time.monotonic() + 1.5
    warm_until = 0.0 if gap_s is None else start - gap_s
    idle = 3 - busy
    receivers = [(1, [RECEIVER, str(port), "1"]), (2, [RECEIVER, str(port), "1"])]
    senders = [(0, [SENDER, json.dumps([[bed.address(node), port, node, warm_until, start, nbytes] for node in (1, 2)])])]
    if condition != "idle":
        sink = 3 if condition == "other" else 0
        pushers = (busy, 3) if condition == "incast" else (busy,)
        receivers.append((sink, [RECEIVER, str(port + 1), str(len(pushers))]))
        senders += [(node, [SENDER, json.dumps([[bed.address(sink), port + 1, 10 + node, 0.0, start - lead_s, out_bytes]])])
                    for node in pushers]
    rprocs = run(bed, receivers)
    sprocs = run(bed, senders)
    finish(sprocs)
    done = finish(rprocs)
    if condition != "idle" and done[str(10 + busy)] < max(done["1"], done["2"]):
        raise RuntimeError("the busy receiver's own flow ended before node 0's flows: raise --out-mb")
    return done[str(idle)] - start, done[str(busy)] - start


def alone(bed, nbytes: int, gap_s: float | None, port: int) -> float:
    start = time.monotonic() + 1.5
    warm_until = 0.0 if gap_s is None else start - gap_s
    rprocs = run(bed, [(1, [RECEIVER, str(port), "1"])])
    finish(run(bed, [(0, [SENDER, json.dumps([[bed.address(1), port, 1, warm_until, start, nbytes]])])]))
    return finish(rprocs)["1"] - start


def main(argv: list[str]) -> int:
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth-mbit", type=float, default=790)
    parser.add_argument("--quota", type=float, default=0.31)
    parser.add_argument("--mb", default="4,20", help="MB per flow of node 0's two, comma-separated sizes")
    parser.add_argument("--out-mb", type=float, default=150.0, help="what node 2 sends meanwhile, MB")
    parser.add_argument("--lead-ms", type=float, default=200.0, help="node 2 starts sending this long before")
    parser.add_argument("--gap-ms", type=float, default=150.0,
                        help="node 0's connections move data until this long before their flows start (below TCP's "
                             "retransmission timeout, so they keep their window, as a PS step's connections do)")
    parser.add_argument("--cold", action="store_true", help="fresh connections instead (slow start)")
    parser.add_argument("--conditions", default="idle,sender,other,incast")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tag", default=None)
    args = parser.parse_args(argv)
    sizes = [float(m) for m in args.mb.split(",")]
    conditions = args.conditions.split(",")
    unknown = set(conditions) - set(CONDITIONS)
    if unknown:
        parser.error(f"unknown condition(s) {sorted(unknown)}; choose from {sorted(CONDITIONS)}")
    gap_s = None if args.cold else args.gap_ms / 1e3
    rows = []
    lines_s: dict[float, float] = {}
    port = 6700
    with Testbed(4, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as bed:
        for mb in sizes:
            lines_s[mb] = statistics.median(alone(bed, int(mb * 1e6), gap_s, port + k) for k in range(3))
            port += 3
        for repeat in range(args.repeats):
            for mb in sizes:
                for condition in conditions:  # interleaved: each repeat runs every size and condition once
                    port += 2
                    busy = 2 - repeat % 2  # nodes 1 and 2 take turns, so an order between them cancels out
                    t_idle, t_busy = trial(bed, condition, busy, int(mb * 1e6), int(args.out_mb * 1e6),
                                           args.lead_ms / 1e3, gap_s, port)
                    first = min(t_idle, t_busy)
                    weight = first / lines_s[mb] - 1
                    if t_busy < t_idle:
                        weight = 1 / weight if weight > 0 else float("inf")  # the busy one finished first
                    rows.append({"repeat": repeat, "mb": mb, "condition": condition, "busy_node": busy,
                                 "idle_s": t_idle, "busy_s": t_busy, "busy_weight": weight})
                    print(f"{mb:g} MB, node {busy} {condition}: to the idle receiver {t_idle * 1e3:.0f} ms, to node "
                          f"{busy} {t_busy * 1e3:.0f} ms, its weight {weight:.2f}", flush=True)
    name = f"busy_receiver-{args.tag}" if args.tag else "busy_receiver"
    (HERE / "results" / f"{name}.json").write_text(
        json.dumps({"args": vars(args), "line_s": {str(k): v for k, v in lines_s.items()}, "rows": rows}, indent=1) + "\n")
    lines = ["# A flow's share of its sender's link when its receiver is sending", "",
             f"Generated by `benchmarks/busy_receiver.py {' '.join(argv)}`. Node 0 sends the same bytes to nodes 1 and 2 "
             f"at one instant; the busy receiver (node 2 in even repeats, node 1 in odd ones) meanwhile sends "
             f"{args.out_mb:g} MB, starting {args.lead_ms:g} ms before, to the node named (the control: nobody else "
             "sends). "
             + ("Fresh connections. " if args.cold else f"Node 0's connections moved data until {args.gap_ms:g} ms before. ")
             + f"{args.bandwidth_mbit:g} Mbit/s, {args.quota:g} cores per node, "
             "plain TCP, the testbed's tbf queues. Times from the flows' start, ms; the busy receiver's weight "
             "w = t1 / L - 1 from the first finish t1 and one flow's time alone L (above 1: its flow was ahead; "
             "1 / (t1 / L - 1) then).", ""]
    for mb in sizes:
        lines.append(f"- {mb:g} MB alone: {lines_s[mb] * 1e3:.0f} ms (median of 3)")
    lines += ["", "| MB per flow | the busy receiver | to the idle receiver (runs) | to the busy receiver (runs) | its weight (median; runs) |",
              "|---:|---|---|---|---|"]
    for mb in sizes:
        for condition in conditions:
            mine = [r for r in rows if r["mb"] == mb and r["condition"] == condition]
            weights = [r["busy_weight"] for r in mine]
            idle = ", ".join(f"{r['idle_s'] * 1e3:.0f}" for r in mine)
            busy = ", ".join(f"{r['busy_s'] * 1e3:.0f}" for r in mine)
            each = ", ".join(f"{w:.2f}" for w in weights)
            lines.append(f"| {mb:g} | {CONDITIONS[condition]} | {idle} | {busy} | {statistics.median(weights):.2f}; {each} |")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
