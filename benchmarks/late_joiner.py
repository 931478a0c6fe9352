"""Does a gloo push that joins a busy node late get its share of the link? (needs root and torch)

In held-out set 41's sync PS run with 3 workers, the worker that reached the shard 131 ms after the
other two took 910 ms to move a 5.1 MB tensor while the other two filled the shard's downlink: about
a sixth of the link, where the fine method shares a node's incoming link equally. Two plain TCP
flows into one node shared about equally (`benchmarks/head_start.py`), so this repeats the pattern
with gloo, as the parameter server uses it: `--senders` ranks each send M bytes to rank 0 over
their (reused) gloo pairs, all but the last from a common barrier, the last `--late-ms` later; rank
0 polls its posted receives and notes when each sender's bytes were in. Between repeats the
connections sit idle for `--idle-s` (a PS worker's connection idles between its steps' pushes; TCP
restarts an idle connection from a small window) or, in the `busy` mode, are kept warm with one
transfer right before the barrier. Reported per mode: each sender's finish from the barrier and the
late sender's finish against processor sharing (equal shares while all move, at the rate one sender
alone measured), and the late sender's weight: what it would weigh against each early flow's 1 for its
first message to be in when it was, the link shared weighted max-min (`late_weight`; an upper bound
where the early flows end before that message does). That weight is the fine method's
`comm.sharing.LATE_JOINER_WEIGHT` (idle pairs, the median of the three configurations run:
`late_joiner-730Mbit-q0.31-5senders`, `-3senders-60ms-30MB`, and `-250Mbit-q0.28`, which predates the
weight column: `--weights-of results/late_joiner-250Mbit-q0.28.json` fits it from the kept finish times).

    .venv/bin/python benchmarks/late_joiner.py [--bandwidth 250Mbit] [--cpu-quota 0.28] [--senders 3]
        [--mbytes 14] [--first-mbytes 5.12] [--late-ms 130] [--idle-s 2] [--repeats 4] [--no-slow-start-after-idle] [--tag NAME]
    .venv/bin/python benchmarks/late_joiner.py --weights-of results/late_joiner-TAG.json   (no runs)
Raw output: benchmarks/results/late_joiner-<tag>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from incast_fairness import completion_times

HERE = Path(__file__).resolve().parent
TARGET = "late_joiner:rank_target"
MODES = ("alone", "idle", "warm")  # one sender; all after an idle gap; all with the pairs just used


def rank_target(ctx) -> dict:
    import torch
    import torch.distributed as dist

    config, rank = ctx.config, ctx.rank
    senders = list(range(1, config["senders"] + 1))
    late = senders[-1]
    tensor = torch.ones(config["bytes"] // 4, dtype=torch.float32)
    parts = [tensor[: config["first_bytes"] // 4], tensor[config["first_bytes"] // 4:]]  # two messages, as tensors
    inboxes = {src: [torch.empty_like(p) for p in parts] for src in senders} if rank == 0 else {}
    small = torch.ones(1024, dtype=torch.float32)
    small_in = {src: torch.empty_like(small) for src in senders} if rank == 0 else {}
    rows: dict[str, list] = {m: [] for m in MODES}
    for repeat in range(config["warmup"] + config["repeats"]):
        for mode in MODES:
            active = [1] if mode == "alone" else senders
            if mode == "warm":  # every pair moves a few KB right before, so no connection is idle
                works = ([dist.irecv(small_in[s], src=s) for s in senders] if rank == 0 else
                         [dist.isend(small, dst=0)])
                for work in works:
                    work.wait()
            else:
                time.sleep(config["idle_s"])
            dist.barrier()
            start = time.perf_counter()
            finish: dict[str, float] = {}
            if rank == 0:
                finish = completion_times({f"{s}.{k}": dist.irecv(inboxes[s][k], src=s)
                                           for s in active for k in (0, 1)}, start)
            elif rank in active:
                if rank == late and mode != "alone":
                    time.sleep(config["late_s"])
                for work in [dist.isend(p, dst=0) for p in parts]:
                    work.wait()
            if repeat >= config["warmup"] and rank == 0:
                rows[mode].append(finish)
    return {"rank": rank, "rows": rows}


def fair_finish_s(senders: int, late_s: float, alone_s: float) -> float:
    """When the late flow finishes under equal sharing: senders - 1 flows of M from 0, one from late_s."""
    rate = 1.0 / alone_s  # one M per alone_s
    early = senders - 1
    left = max(0.0, 1.0 - late_s * rate / early)  # each early flow's share of M still to move at late_s
    t1 = late_s + senders * left / rate  # the early flows finish together
    moved = (t1 - late_s) * rate / senders
    return t1 + (1.0 - moved) / rate


def late_first_s(weight: float, early: int, late_s: float, rate_Bps: float, nbytes: float, first_bytes: float) -> float:
    """When the late flow's first `first_bytes` are in, if the receiver's link (`rate_Bps`) is shared weighted
    max-min: `early` flows of `nbytes` from 0 with weight 1, the late one from `late_s` with `weight`."""
    left = [max(0.0, nbytes - late_s * rate_Bps / early)] * early  # what each early flow has left at late_s
    t, need = late_s, float(first_bytes)
    while True:
        moving = [x for x in left if x > 0.0]
        total_weight = len(moving) + weight
        late_rate, early_rate = rate_Bps * weight / total_weight, rate_Bps / total_weight
        until_late = need / late_rate
        until_early = min(moving) / early_rate if moving else math.inf
        if until_late <= until_early:
            return t + until_late
        left = [max(0.0, x - early_rate * until_early) for x in left]
        need -= late_rate * until_early
        t += until_early


def late_weight(measured_s: float, **flows) -> float:
    """The largest weight of the late flow against the early ones' 1 that has its first message in no sooner
    than `measured_s` under `late_first_s`'s sharing (bisection, 0.01-4). Where the early flows end before
    that message does, every smaller weight fits too (the link is full either way): an upper bound."""
    low, high = 0.01, 4.0
    for _ in range(50):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if late_first_s(mid, **flows) >= measured_s else (low, mid)
    return math.sqrt(low * high)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth", default="250Mbit")
    parser.add_argument("--cpu-quota", type=float, default=0.28)
    parser.add_argument("--senders", type=int, default=3)
    parser.add_argument("--mbytes", type=float, default=14.0)
    parser.add_argument("--first-mbytes", type=float, default=5.12)
    parser.add_argument("--late-ms", type=float, default=130.0)
    parser.add_argument("--idle-s", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--no-slow-start-after-idle", action="store_true",
                        help="set net.ipv4.tcp_slow_start_after_idle=0 on every node (Linux restarts an idle "
                             "connection from a small window by default)")
    parser.add_argument("--tag", default="250Mbit-q0.28")
    parser.add_argument("--weights-of", metavar="JSON",
                        help="no runs: print the late sender's weights from a kept results JSON (one made before "
                             "the weight column, too)")
    args = parser.parse_args(argv)
    if args.weights_of:
        kept = json.loads(Path(args.weights_of).read_text())
        a = kept["args"]
        first = int(a["first_mbytes"] * 1e6) // 4 * 4
        nbytes = int(a["mbytes"] * 1e6) // 4 * 4
        flows = dict(early=a["senders"] - 1, late_s=a["late_ms"] / 1e3, rate_Bps=nbytes / kept["alone_s"],
                     nbytes=nbytes, first_bytes=first)
        for mode in ("idle", "warm"):
            fitted = [late_weight(f[f"{a['senders']}.0"], **flows) for f in kept["rows"][mode]]
            print(f"{mode}: the late sender's weight {statistics.median(fitted):.2f} "
                  f"({min(fitted):.2f}-{max(fitted):.2f}) over {len(fitted)} repeats")
        return 0
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed
    from sgdscale.units import parse_bandwidth_bps

    first_bytes = int(args.first_mbytes * 1e6) // 4 * 4
    config = {"bytes": int(args.mbytes * 1e6) // 4 * 4, "first_bytes": first_bytes, "senders": args.senders,
              "late_s": args.late_ms / 1e3, "idle_s": args.idle_s, "repeats": args.repeats, "warmup": args.warmup}
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    world = args.senders + 1
    with Testbed(world, parse_bandwidth_bps(args.bandwidth), args.cpu_quota, pin_cpus=True) as bed:
        if args.no_slow_start_after_idle:  # per network namespace: every node keeps its window while idle
            for node in range(world):
                subprocess.run(["ip", "netns", "exec", bed.netns(node), "sysctl", "-qw",
                                "net.ipv4.tcp_slow_start_after_idle=0"], check=True)
        result = launch(TARGET, config, world, placement=bed, timeout_s=600, env=env)
    rows = next(r["rows"] for r in result.results if r["rank"] == 0)
    alone = statistics.median(f["1.1"] for f in rows["alone"])
    rate = config["bytes"] / alone  # bytes/s of one sender alone
    # equal sharing: the late sender's first message moves at rate / senders while the others still move
    fair_first = config["late_s"] + first_bytes * args.senders / rate
    fair = fair_finish_s(args.senders, config["late_s"], alone)
    lines = [f"# A late gloo sender into a busy node: {args.senders} senders, {args.mbytes:g} MB each "
             f"({args.first_mbytes:g} MB first), the last {args.late_ms:g} ms late; {args.bandwidth}, "
             f"{args.cpu_quota} cores per node", "",
             f"Generated by `benchmarks/late_joiner.py {' '.join(argv)}`. Each sender sends two messages, the "
             f"first {args.first_mbytes:g} MB (as a sync PS worker's first big tensor); when each was in at rank 0, "
             f"from the common barrier, median (min-max) of {args.repeats}. One sender alone: {alone * 1e3:.0f} ms "
             f"for all {args.mbytes:g} MB. Equal sharing (processor sharing at that rate) has the late sender's "
             f"first message in at {fair_first * 1e3:.0f} ms and all of it at {fair * 1e3:.0f} ms. `idle`: the pairs "
             f"idle {args.idle_s:g} s before; `warm`: each pair just moved 4 KB. TCP slow start after idle: "
             f"{'off' if args.no_slow_start_after_idle else 'on (the kernel default)'}. The late one's weight: what it "
             "would weigh against each early flow's 1 for its first message to be in when it was, the receiver's "
             "link shared weighted max-min at the rate alone (`late_weight`; per repeat, median (min-max)).", "",
             "| mode | message | " + " | ".join(f"sender {s}{' (late)' if s == args.senders else ''}" for s in
                                                range(1, args.senders + 1)) + " | late one / equal sharing | late one's weight |",
             "|---|---|" + "---:|" * (args.senders + 1) + "---|"]
    flows = dict(early=args.senders - 1, late_s=config["late_s"], rate_Bps=rate, nbytes=config["bytes"],
                 first_bytes=first_bytes)
    weights = {}
    for mode in ("idle", "warm"):
        for k, label, expected in ((0, "first", fair_first), (1, "all", fair)):
            cells = []
            for s in range(1, args.senders + 1):
                values = [f[f"{s}.{k}"] for f in rows[mode]]
                cells.append(f"{statistics.median(values) * 1e3:.0f} ({min(values) * 1e3:.0f}-{max(values) * 1e3:.0f}) ms")
            late = statistics.median(f[f"{args.senders}.{k}"] for f in rows[mode])
            weight = "-"
            if k == 0:  # the late flow's weight while the early ones move, from each repeat's first message
                fitted = [late_weight(f[f"{args.senders}.0"], **flows) for f in rows[mode]]
                weights[mode] = fitted
                weight = f"{statistics.median(fitted):.2f} ({min(fitted):.2f}-{max(fitted):.2f})"
            lines.append(f"| {mode} | {label} | " + " | ".join(cells) + f" | {late / expected:.2f} | {weight} |")
    out = HERE / "results" / f"late_joiner-{args.tag}"  # the tag may hold dots: no with_suffix
    Path(f"{out}.json").write_text(json.dumps({"args": vars(args), "rows": rows, "alone_s": alone,
                                                    "fair_late_s": fair,
                                                    "fair_late_first_s": fair_first, "late_weights": weights}, indent=1) + "\n")
    Path(f"{out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
