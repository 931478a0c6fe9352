"""Does a newcomer that yielded keep yielding once the flow it yielded to has gone? Outcast, on the testbed.

Flows out of one node favour the one already moving: a newcomer gets about a fifth of the link while
both move (`benchmarks/head_start.py`, `sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT`). With three flows
the rule needs one more answer: B starts while A moves (B yields), A ends, B runs alone a while, then C
starts. Does B now hold the link against C, as any flow that was there first (the incumbency passed
on), or do B and C share it equally (B yielded for its whole burst, C yields too)? This measures it
with plain TCP sockets from node 0 to nodes 1-3: A (`--a-mb`) from t=0, B (`--mb`) from `--b-ms`, C
(`--mb`) from `--c-ms`, after A has ended; and the same without A (B the first flow: head_start.py's
case; C then starts A's line time earlier, so that B has as many bytes left when it does). Every flow's finish is CLOCK_MONOTONIC on one host. The link never idles from t=0 until B ends,
so B's finish t_B against the time all of A's and B's bytes take at line rate, T_AB, gives C's weight
while B and C both moved:

    w = (t_B - t_C) / (T_AB - t_C) - 1      (0: B keeps the link; 1: equal sharing)

T_AB is the measured line time of one flow times (A + B) / B (without A: B's start plus that line time).

    .venv/bin/python benchmarks/incumbent_handover.py [--bandwidth-mbit 600] [--quota 0.25] [--mb 35]
        [--a-mb 10] [--b-ms 30] [--c-ms 500] [--repeats 5]

Raw output: benchmarks/results/incumbent_handover.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from head_start import RECEIVER, SENDER

HERE = Path(__file__).resolve().parent


def flows(bed, plan: list[tuple[int, float, int]], port: int) -> dict[int, float]:
    """Send each (id, start offset s, bytes) from node 0 to node 1 + id; finish times after the common start."""
    start = time.monotonic() + 1.0
    receivers = {ident: bed.popen(1 + ident, [sys.executable, "-c", RECEIVER, str(port), "1"], stdout=-1, stderr=-1,
                                  text=True) for ident, _, _ in plan}
    targets = [[bed.address(1 + ident), port, ident, start + offset, nbytes] for ident, offset, nbytes in plan]
    sender = bed.popen(0, [sys.executable, "-c", SENDER, json.dumps(targets)], stdout=-1, stderr=-1, text=True)
    _, err = sender.communicate(timeout=120)
    if sender.returncode:
        raise RuntimeError(err)
    done = {}
    for ident, r in receivers.items():
        out, err = r.communicate(timeout=120)
        if r.returncode:
            raise RuntimeError(err)
        done[ident] = json.loads(out.strip().splitlines()[-1])[str(ident)] - start
    return done


def main(argv: list[str]) -> int:
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth-mbit", type=float, default=600)
    parser.add_argument("--quota", type=float, default=0.25)
    parser.add_argument("--mb", type=float, default=35.0, help="bytes of B and of C, MB")
    parser.add_argument("--a-mb", type=float, default=10.0, help="bytes of A, MB")
    parser.add_argument("--b-ms", type=float, default=30.0, help="when B starts, ms after A")
    parser.add_argument("--c-ms", type=float, default=500.0, help="when C starts, ms after A (after A ends)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    nbytes, a_bytes = int(args.mb * 1e6), int(args.a_mb * 1e6)
    b_s, c_s = args.b_ms / 1e3, args.c_ms / 1e3
    rows = []
    port = 6300
    with Testbed(4, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as bed:
        line = statistics.median(flows(bed, [(0, 0.0, nbytes)], port + k)[0] for k in range(3))
        port += 3
        for repeat in range(args.repeats):
            for with_a in (True, False):
                port += 1
                # without A, C starts A's line time earlier, so that B has as many bytes left
                c_at = c_s if with_a else c_s - line * a_bytes / nbytes
                plan = ([(0, 0.0, a_bytes)] if with_a else []) + [(1, b_s, nbytes), (2, c_at, nbytes)]
                done = flows(bed, plan, port)
                a_end = done.get(0)
                t_ab = line * (a_bytes + nbytes) / nbytes if with_a else b_s + line
                weight = (done[1] - c_at) / (t_ab - c_at) - 1 if done[1] > c_at else None
                rows.append({"repeat": repeat, "with_a": with_a, "a_done_s": a_end, "b_done_s": done[1],
                             "c_done_s": done[2], "t_ab_s": t_ab, "c_weight": weight})
                print(f"{'A, B, C' if with_a else 'B, C'}: A done {a_end if a_end is None else round(a_end * 1e3)} ms, "
                      f"B {done[1] * 1e3:.0f} ms, C {done[2] * 1e3:.0f} ms, C's weight {weight}", flush=True)
    (HERE / "results" / "incumbent_handover.json").write_text(json.dumps({"args": vars(args), "line_s": line,
                                                                          "rows": rows}, indent=1) + "\n")
    lines = ["# Does a newcomer keep yielding once the flow it yielded to has gone?", "",
             f"Generated by `benchmarks/incumbent_handover.py {' '.join(argv)}`. From one node at {args.bandwidth_mbit:g} "
             f"Mbit/s, {args.quota:g} cores per node (the testbed's TCP and tbf queue): A {args.a_mb:g} MB from 0, B "
             f"{args.mb:g} MB from {args.b_ms:g} ms (a newcomer to A), C {args.mb:g} MB from {args.c_ms:g} ms (after A "
             f"ended), and the same without A (C starting A's line time earlier). One {args.mb:g} MB flow alone: {line * 1e3:.1f} ms (median of 3). C's "
             "weight against B while both moved: w = (t_B - t_C) / (T_AB - t_C) - 1 (0: B keeps the link; 1: equal "
             "sharing; the model's newcomer weight is 0.22).", "",
             "| flows | A done (ms, runs) | B done (ms, runs) | C done (ms, runs) | C's weight (runs) | median |",
             "|---|---|---|---|---|---:|"]
    for with_a in (True, False):
        mine = [r for r in rows if r["with_a"] == with_a]
        weights = [r["c_weight"] for r in mine if r["c_weight"] is not None]

        def ms(key: str) -> str:
            return ", ".join("-" if r[key] is None else f"{r[key] * 1e3:.0f}" for r in mine)

        lines.append(f"| {'A, B, C' if with_a else 'B, C'} | {ms('a_done_s')} | {ms('b_done_s')} | {ms('c_done_s')} | "
                     f"{', '.join(f'{w:.2f}' for w in weights) or '-'} | "
                     f"{f'{statistics.median(weights):.2f}' if weights else '- (B ended before C started)'} |")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / "incumbent_handover.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
