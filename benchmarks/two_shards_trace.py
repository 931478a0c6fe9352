"""Do a worker's pushes to two server shards end together? Real traced runs against the fine method.

Held-out set 64 ran async PS with two shards and fine predicted resnet50 (5 workers, 1150 Mbit/s,
0.22 cores) 11% too slow. In fine's timeline a worker's push stream to one shard often lasts far
longer than the same bytes to the other (the message that starts while the worker's link already
carries its other shard's push is a newcomer, `NEWCOMER_SHARE_WEIGHT`, on every link it crosses),
and the worker's next forward waits for the later shard. This reads the side-by-side traces that
`sgdscale validate --trace-dir` writes (each run's measured timeline beside fine's prediction of
it) and measures, per worker and step and for each shard: the push span, from the worker's first
push to that shard to the shard's receipt of the last one (measured: the end of the shard's last
"wait for gradients" of that worker and step; predicted: the end of the last `push msg` slice to
it), and how far the two shards' spans differ, as a share of the longer one. Also, per step, where
the time goes after backward: how long after backward ends each shard (the first and the last to
finish) has the worker's last push, and how long after it the next forward ends (push drain, pulls
and forward together; replay compute is a sleep, so the same in both). And whether which of a
worker's two shards is the slower one persists from step to step: of the variance of
log(span to shard 0 / span to shard 1) over worker-steps, the share between workers (each worker's
mean apart; 0: no worker keeps a slower shard), and its lag-1 autocorrelation within a worker's
steps. The fine method draws each connection's sharing weight afresh every step
(`sgdscale.fine.links.LinkNetwork.burst_weight`), so its timeline has neither.

    .venv/bin/python benchmarks/two_shards_trace.py --traces benchmarks/results/two_shards_trace/traces
        [--output two_shards_trace]

Raw output: benchmarks/results/<output>.md; the traces and the runs' measurements stay beside it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SIDES = ("measured", "predicted")


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def spans(trace: dict) -> dict[str, dict]:
    """Per side: {(worker, iteration): {"push": {shard: [first start, last arrival]}, "wait": s, "step": s,
    "backward_end": t, "forward_end": t}} (seconds on the trace's clock)."""
    events = trace["traceEvents"]
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    thread = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    out: dict[str, dict] = {side: defaultdict(lambda: {"push": defaultdict(lambda: [float("inf"), float("-inf")]),
                                                        "wait": 0.0, "step": None, "backward_end": None,
                                                        "forward_end": None}) for side in SIDES}
    for e in events:
        if e.get("ph") != "X":
            continue
        name, _, side = process[e["pid"]].partition(" · ")
        kind, index = name.split(" ")[0], int(name.split(" ")[1])
        row, args = thread[(e["pid"], e["tid"])], e.get("args", {})
        k = args.get("iteration")
        start, end = e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6
        if kind == "worker":
            rec = out[side][index, k]
            if row == "step":
                rec["step"] = e["dur"] / 1e6
            elif row == "compute" and e["name"].startswith("backward"):
                rec["backward_end"] = max(rec["backward_end"] or end, end)
            elif row == "compute" and e["name"].startswith("forward"):
                rec["forward_end"] = max(rec["forward_end"] or end, end)
            elif e["name"] == "wait for parameters":
                rec["wait"] += e["dur"] / 1e6
            elif side == "measured" and row == "push":  # the moment a push was posted
                span = rec["push"][args["shard"]]
                span[0] = min(span[0], start)
            elif side == "predicted" and row == "nic up" and e["name"].startswith("push"):
                span = rec["push"][args["shard"]]
                span[0], span[1] = min(span[0], start), max(span[1], end)
        elif kind == "server" and side == "measured" and e["name"] == "wait for gradients":
            span = out[side][args["worker"], k]["push"][index]
            span[1] = max(span[1], end)
    return out


def persistence(records: dict) -> tuple[float, float]:
    """(share of the variance of log(span0 / span1) between workers, its lag-1 autocorrelation within
    a worker's steps) over the worker-steps with both shards' spans."""
    by_worker: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (w, k), r in records.items():
        if len(r["push"]) == 2 and all(a < b < float("inf") for a, b in r["push"].values()):
            (a0, b0), (a1, b1) = r["push"][0], r["push"][1]
            by_worker[w].append((k, math.log((b0 - a0) / (b1 - a1))))
    values = [v for steps in by_worker.values() for _, v in steps]
    mean, variance = statistics.fmean(values), statistics.pvariance(values)
    within = [v - statistics.fmean(x for _, x in steps) for steps in by_worker.values() for _, v in steps]
    lagged = [(a - mean) * (b - mean) for steps in by_worker.values()
              for (_, a), (_, b) in zip(sorted(steps), sorted(steps)[1:])]
    return 1 - statistics.fmean(x * x for x in within) / variance, statistics.fmean(lagged) / variance


def summary(records: dict) -> dict:
    """Medians over worker-steps with both shards' spans: each shard's span, the gap between them
    as a share of the longer, and how often it exceeds a quarter; the step; the wait for parameters."""
    keys = [key for key, r in records.items() if len(r["push"]) == 2 and r["step"] and r["backward_end"]
            and all(a < b < float("inf") for a, b in r["push"].values())]
    rows = [records[key] for key in keys]
    lengths = [sorted(b - a for a, b in r["push"].values()) for r in rows]
    gaps = [(hi - lo) / hi for lo, hi in lengths]
    drains = [sorted(b - r["backward_end"] for _, b in r["push"].values()) for r in rows]
    after = [records[w, k + 1]["forward_end"] - records[w, k]["backward_end"] for w, k in keys
             if (w, k + 1) in records and records[w, k + 1]["forward_end"]]
    return {"steps": len(rows), "short_s": statistics.median(lo for lo, _ in lengths),
            "first_drain_s": statistics.median(lo for lo, _ in drains),
            "last_drain_s": statistics.median(hi for _, hi in drains), "after_s": statistics.median(after),
            "long_s": statistics.median(hi for _, hi in lengths), "gap": statistics.median(gaps),
            "gap_over_quarter": sum(g > 0.25 for g in gaps) / len(gaps),
            "step_s": statistics.median(r["step"] for r in rows),
            "wait_s": statistics.median(r["wait"] for r in rows), "persistence": persistence(records)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", required=True, help="folder of side-by-side traces (sgdscale validate --trace-dir)")
    parser.add_argument("--output", default="two_shards_trace")
    args = parser.parse_args(argv)
    paths = sorted(p for p in Path(args.traces).iterdir() if p.name.endswith((".trace.json", ".trace.json.gz")))
    if not paths:
        sys.exit(f"no traces in {args.traces}")
    lines = ["# Do a worker's pushes to two server shards end together?", "",
             f"Generated by `benchmarks/two_shards_trace.py {' '.join(argv)}`. Per worker and step, each shard's push "
             "span (first push posted to that shard -> the shard has the last one; predicted: the fine method's "
             "`push msg` slices), medians over the run's worker-steps: the shorter and the longer of the two shards' "
             "spans, the gap between them as a share of the longer, the share of worker-steps where that gap is "
             "over 25%, the step and the forward's wait for parameters; after backward ends, when the first and the "
             "last shard has the worker's last push, and when the next forward ends; whether a worker's slower shard "
             "stays the slower: the share of the variance of log(span0 / span1) between workers and its lag-1 "
             "autocorrelation over a worker's steps.", "",
             "| run | side | worker-steps | shorter span (ms) | longer span (ms) | gap / longer | gap > 25% | step (ms) | "
             "wait for parameters (ms) | after backward: first shard has all (ms) | last shard has all (ms) | "
             "next forward ends (ms) | between-worker share | lag-1 autocorrelation |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for path in paths:
        both = spans(load(path))
        for side in SIDES:
            s = summary(both[side])
            lines.append(f"| {path.name.split('.trace')[0]} | {side} | {s['steps']} | {s['short_s'] * 1e3:.0f} | "
                         f"{s['long_s'] * 1e3:.0f} | {s['gap']:.0%} | {s['gap_over_quarter']:.0%} | "
                         f"{s['step_s'] * 1e3:.0f} | {s['wait_s'] * 1e3:.0f} | {s['first_drain_s'] * 1e3:.0f} | "
                         f"{s['last_drain_s'] * 1e3:.0f} | {s['after_s'] * 1e3:.0f} | {s['persistence'][0]:.2f} | "
                         f"{s['persistence'][1]:+.2f} |")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
