"""Where a run's step goes against its prediction: phase by phase, from a `--trace-compare` file.

`sgdscale train ... --trace-compare FILE` writes the measured and the predicted (fine) timeline of
one run side by side. This prints, per worker (measured and predicted), the median over iterations
(the first two dropped) of when each phase starts and ends, from the iteration's start: forward,
backward, every DDP bucket's all-reduce, the optimizer. The gaps between the two (the last bucket
launched later than the predicted backward end; backward returning after the last all-reduce) are
how `sgdscale.bucket_copies` was found.

    .venv/bin/python benchmarks/trace_phases.py RUN.cmp.json [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys


def phases(trace: dict, pid: int) -> dict[str, tuple[float, float]]:
    """Median (start, end) in ms from the iteration's start of every phase of process `pid`."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["pid"] == pid]
    iterations = sorted((e for e in events if e["name"].startswith("iteration")), key=lambda e: e["ts"])
    rows: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for iteration in iterations[2:]:
        t0, t1 = iteration["ts"], iteration["ts"] + iteration["dur"]
        spans: dict[str, list[float]] = {}
        for e in events:
            if t0 <= e["ts"] < t1 and not e["name"].startswith("iteration"):
                name = e["name"].split()[0] if e["name"].startswith(("forward ", "backward ")) else e["name"]
                span = spans.setdefault(name, [float("inf"), float("-inf")])
                span[0], span[1] = min(span[0], e["ts"] - t0), max(span[1], e["ts"] + e["dur"] - t0)
        for name, (start, end) in spans.items():
            rows[name].append((start / 1e3, end / 1e3))
        rows["step"].append((0.0, iteration["dur"] / 1e3))
    return {name: (statistics.median(s for s, _ in v), statistics.median(e for _, e in v)) for name, v in rows.items()}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--workers", type=int, default=1, help="how many workers to print")
    args = parser.parse_args(argv)
    trace = json.loads(open(args.trace).read())
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e["name"] == "process_name"}
    for pid in sorted(names)[:2 * args.workers]:
        print(names[pid])
        for name, (start, end) in sorted(phases(trace, pid).items(), key=lambda kv: kv[1]):
            print(f"  {name:32s} {start:8.1f} .. {end:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
