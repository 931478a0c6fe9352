"""Where a traced async parameter-server run spends its time: pushing and pulling, bunched or spread.

Reads a measurement written by `sgdscale train ... --strategy ps-async --trace T.json -o M.json`
(M.json, or M.json.gz) and, per worker step, takes
- the push: from the worker's first gradient posted to the server's last one received, and
- the pull: from that last gradient received to the worker's last real wait for parameters
  (waits under 1 ms are layers whose parameters were already in),
then prints the share of the run in each state (k workers pushing, j pulling: bunched runs sit in
"all pushing, none pulling" and the reverse, spread runs in between), how busy each server-link
direction was, and with --flows every push and pull against its concurrency (processor sharing
of an R-byte/s link makes a flow with c concurrent flows take c x bytes / R).

    .venv/bin/python benchmarks/async_phases.py M.json [--rate-mbps 83.6] [--flows]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np


def load(path: str) -> dict:
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)


def worker_steps(measurement: dict) -> list[tuple[int, int, float, float, float]]:
    """(worker, step, push start, last gradient in, parameters in), seconds from the first step."""
    arrived: dict[tuple[int, int], float] = {}
    for e in measurement["servers"][0]["events"]:
        if e["name"] == "wait for gradients":
            key = (e["args"]["worker"], e["iteration"])
            arrived[key] = max(arrived.get(key, 0.0), e["start_s"] + e["duration_s"])
    t0 = min(w["iteration_start_s"][0] for w in measurement["workers"])
    rows = []
    for w, worker in enumerate(measurement["workers"]):
        first_push: dict[int, float] = {}
        params_in: dict[int, float] = {}
        for e in worker["events"]:
            k = e["iteration"]
            if e["name"].startswith("push"):
                first_push[k] = min(first_push.get(k, e["start_s"]), e["start_s"])
            if e["name"] == "wait for parameters" and e["duration_s"] > 1e-3:
                params_in[k] = max(params_in.get(k, 0.0), e["start_s"] + e["duration_s"])
        for k, start in sorted(first_push.items()):
            if (w, k) in arrived and k + 1 in params_in:
                rows.append((w, k, start - t0, arrived[w, k] - t0, params_in[k + 1] - t0))
    return rows


def union_s(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("measurement")
    parser.add_argument("--rate-mbps", type=float, default=83.6, help="link rate, MB/s (netbench's p2p)")
    parser.add_argument("--flows", action="store_true", help="every push and pull against its concurrency")
    args = parser.parse_args(argv)
    m = load(args.measurement)
    workers = len(m["workers"])
    rows = worker_steps(m)
    pushes = [(a, b) for _, _, a, b, _ in rows]
    pulls = [(b, c) for _, _, _, b, c in rows]
    lo, hi = min(a for a, _ in pushes), max(c for _, c in pulls)
    ts = np.arange(lo, hi, 0.005)
    n_push = np.array([sum(a <= t < b for a, b in pushes) for t in ts])
    n_pull = np.array([sum(a <= t < b for a, b in pulls) for t in ts])
    print(f"{args.measurement}: {len(rows)} worker steps over {hi - lo:.2f} s; server link busy: "
          f"in {union_s(pushes):.2f} s, out {union_s(pulls):.2f} s")
    print("share of the run, rows: workers pushing, columns: workers pulling")
    print("      " + " ".join(f"{j:>5d}" for j in range(workers + 1)))
    for i in range(workers + 1):
        print(f"{i:>5d} " + " ".join(f"{np.mean((n_push == i) & (n_pull == j)):5.2f}" for j in range(workers + 1)))
    if args.flows:
        push_bytes = sum(e["args"]["bytes"] for e in m["workers"][0]["events"]
                         if e["name"].startswith("push") and e["iteration"] == 0)
        alone = push_bytes / (args.rate_mbps * 1e6)
        print(f"flow: worker step, duration / alone ({alone:.3f} s), mean flows in its direction, in the other")
        for (w, k, a, b, c) in sorted(rows, key=lambda r: r[2]):
            for name, (s, e), same, other in (("push", (a, b), pushes, pulls), ("pull", (b, c), pulls, pushes)):
                grid = np.linspace(s, e, 50)
                conc = np.mean([sum(x <= t < y for x, y in same) for t in grid])
                rev = np.mean([sum(x <= t < y for x, y in other) for t in grid])
                print(f"  {name} w{w} k{k:<3d} {(e - s) / alone:5.2f}  {conc:4.2f}  {rev:4.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
