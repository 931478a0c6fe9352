"""How many async workers push and pull at once through one shard, in a traced run and in fine's timeline. (no runs)

Set 78's async resnet50 replay (4 workers, one shard, 600 Mbit/s) kept the shard's link ~98% busy both
ways where fine keeps it 80% busy. This reads a traced run's side-by-side file (`sgdscale train ...
--trace-compare FILE`, measured and predicted timelines) and reports, over the measured window (the
first 20 s of each side left out):
- how many workers are pushing (from the first to the last of their step's gradients to arrive at the
  shard: the shard's "wait for gradients" ends) and how many pulling (from that last arrival, which is
  when the worker's receive notices reach the shard behind its pushes, to the end of the worker's last
  wait for parameters in its next forward), as shares of the time; fine's the same from its `nic up` and
  `nic down` slices;
- for every two measured pushes that overlap 0.3 s or more, the earlier-started one's share of the bytes
  that arrived from the two while both moved (0.5: equal sharing; 1: the first keeps the link). Fine
  shares a shard's downlink equally among pushes (flows into one node; `sgdscale.comm.sharing`).

    .venv/bin/python benchmarks/async_link_concurrency.py --trace FILE.json[.gz] --profile PROFILE.json
        [--keep KEPT.json.gz] [--output async_link_concurrency]
    .venv/bin/python benchmarks/async_link_concurrency.py --trace KEPT.json.gz [--output NAME]

Raw output: benchmarks/results/<output>.md. Kept: `results/async_link_concurrency-resnet50-w4-600Mbit/`:
`kept.json.gz` (what `--keep` keeps of the 56 MB side-by-side file) and `measurement-summary.json`
(10.62 samples/s; the measurement less its per-event trace), from
    .venv/bin/python -m sgdscale.cli train benchmarks/results/accuracy-heldout78/profiles/replay-resnet50-b16.json \\
        --replay --workers 4 --strategy ps-async --ps 1 --emulate --bandwidth 600Mbit --cpu-quota 0.25 \\
        --iterations 45 -o measurement.json --trace-compare compare.json \\
        --trace-network benchmarks/results/accuracy-heldout78/networks/600Mbit-q0.25-n4-5.json
and `results/async_link_concurrency-gpt2-real-w5-660Mbit/` (set 80's async gpt2, real compute, 112.98
samples/s; reported with `--skip-s 5 --min-overlap-s 0.01`: its pushes last some 60 ms), from
    .venv/bin/python -m sgdscale.cli train gpt2 --batch-size 4 --seq-len 64 --option layers=2 \\
        --option hidden=128 --option vocab=2048 --workers 5 --strategy ps-async --ps 1 --emulate \\
        --bandwidth 660Mbit --cpu-quota 0.32 --iterations 150 -o measurement.json --trace-compare compare.json \\
        --trace-profile benchmarks/results/accuracy-heldout80/profiles/gpt2-b4-s64-layers2-hidden128-vocab2048-q0.32.json \\
        --trace-network benchmarks/results/accuracy-heldout80/networks/660Mbit-q0.32-n5-6.json
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SKIP_S = 20.0  # left out at the start of each side (warm-up)
GRID_S = 0.005
MIN_OVERLAP_S = 0.3


def load(path: str):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def extract(data, sizes: list[int]) -> dict:
    """What this report reads from a side-by-side file, small enough to keep: per (worker, iteration)
    each gradient's arrival at the shard (seconds, bytes), the ends of the worker's waits for parameters,
    and fine's push (`nic up`) and pull (`nic down`) spans."""
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    measured = {pid: int(n.split()[1]) for pid, n in names.items() if n.startswith("worker") and "measured" in n}
    predicted = {pid: int(n.split()[1]) for pid, n in names.items() if n.startswith("worker") and "predicted" in n}
    shard = next(pid for pid, n in names.items() if n == "server 0 · measured")
    out = {"arrivals": [], "parameter_waits": [], "predicted": []}
    spans = collections.defaultdict(lambda: [float("inf"), float("-inf")])
    for e in events:
        if e.get("ph") != "X":
            continue
        end = round((e["ts"] + e["dur"]) / 1e6, 6)
        if e["pid"] == shard and e["name"] == "wait for gradients":
            a = e["args"]
            out["arrivals"].append([a["worker"], a["iteration"], end, sizes[a["tensor"]]])
        elif e["pid"] in measured and e["name"] == "wait for parameters":
            out["parameter_waits"].append([measured[e["pid"]], e["args"]["iteration"], end])
        elif e["pid"] in predicted and threads.get((e["pid"], e["tid"])) in ("nic up", "nic down"):
            span = spans[(predicted[e["pid"]], e["args"].get("iteration"), threads[(e["pid"], e["tid"])])]
            span[0], span[1] = min(span[0], round(e["ts"] / 1e6, 6)), max(span[1], end)
    out["predicted"] = [[w, k, role, a, b] for (w, k, role), (a, b) in spans.items()]
    return out


def concurrency(spans: list[tuple[float, float]], start: float, end: float) -> np.ndarray:
    grid = np.arange(start, end, GRID_S)
    count = np.zeros(len(grid), dtype=int)
    for a, b in spans:
        count[(grid >= a) & (grid < b)] += 1
    return count


def measured_spans(kept: dict):
    """(pushes, pulls, per-push arrival curves): spans in seconds per (worker, iteration)."""
    arrivals = collections.defaultdict(list)
    for w, k, t, nbytes in kept["arrivals"]:
        arrivals[(w, k)].append((t, nbytes))
    waits = collections.defaultdict(list)
    for w, k, t in kept["parameter_waits"]:
        waits[(w, k)].append(t)
    curves = {k: sorted(v) for k, v in arrivals.items()}
    pushes = {k: (v[0][0], v[-1][0]) for k, v in curves.items()}
    pulls = {(w, k): (pushes[(w, k)][1], max(waits[(w, k + 1)])) for (w, k) in pushes if (w, k + 1) in waits}
    return pushes, pulls, curves


def earlier_shares(curves: dict, min_overlap_s: float = MIN_OVERLAP_S) -> list[float]:
    def arrived(curve, t):
        return sum(b for tt, b in curve if tt <= t)

    shares = []
    keys = list(curves)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            ca, cb = curves[a], curves[b]
            lo, hi = max(ca[0][0], cb[0][0]), min(ca[-1][0], cb[-1][0])
            if hi - lo < min_overlap_s:
                continue
            ra, rb = arrived(ca, hi) - arrived(ca, lo), arrived(cb, hi) - arrived(cb, lo)
            first, second = (ra, rb) if ca[0][0] < cb[0][0] else (rb, ra)
            if first + second > 0:
                shares.append(first / (first + second))
    return shares


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True,
                        help="a `sgdscale train --trace-compare` file (one shard), or what --keep kept of one")
    parser.add_argument("--profile", help="the replayed profile (the tensors' bytes; for a side-by-side file)")
    parser.add_argument("--keep", help="write what the report reads from the side-by-side file here (.json.gz)")
    parser.add_argument("--output", default="async_link_concurrency")
    parser.add_argument("--skip-s", type=float, default=SKIP_S, help="left out at the start of each side (s)")
    parser.add_argument("--min-overlap-s", type=float, default=MIN_OVERLAP_S,
                        help="two pushes count as overlapping from this long together (s)")
    args = parser.parse_args(argv)
    data = load(args.trace)
    if isinstance(data, dict) and "arrivals" in data:
        kept = data
    else:
        if not args.profile:
            parser.error("a side-by-side file needs --profile (the tensors' bytes)")
        profile = json.loads(Path(args.profile).read_text())
        kept = extract(data, [q["bytes"] for layer in profile["layers"] for q in layer["params"]])
        if args.keep:
            with gzip.open(args.keep, "wt") as f:
                json.dump(kept, f, separators=(",", ":"))

    pushes, pulls, curves = measured_spans(kept)
    predicted = {(w, k, role): (a, b) for w, k, role, a, b in kept["predicted"]}

    def window(spans: dict, by_worker) -> tuple[float, float]:
        workers = sorted({by_worker(k) for k in spans})
        start = max(min(v[0] for k, v in spans.items() if by_worker(k) == w) for w in workers) + args.skip_s
        end = min(max(v[1] for k, v in spans.items() if by_worker(k) == w) for w in workers)
        return start, end

    rows = []
    m_start, m_end = window({**{("push",) + k: v for k, v in pushes.items()},
                             **{("pull",) + k: v for k, v in pulls.items()}}, lambda k: k[1])
    p_start, p_end = window(predicted, lambda k: k[0])
    sides = (("measured", list(pushes.values()), list(pulls.values()), m_start, m_end),
             ("fine", [v for k, v in predicted.items() if k[2] == "nic up"],
              [v for k, v in predicted.items() if k[2] == "nic down"], p_start, p_end))
    bins = len({k[0] for k in pushes}) + 1  # 0..workers at once
    for side, push_spans, pull_spans, start, end in sides:
        push_n, pull_n = concurrency(push_spans, start, end), concurrency(pull_spans, start, end)
        rows.append((side, end - start, np.bincount(push_n, minlength=bins)[:bins] / len(push_n),
                     np.bincount(pull_n, minlength=bins)[:bins] / len(pull_n),
                     float(np.median([b - a for a, b in push_spans])), float(np.median([b - a for a, b in pull_spans]))))
    shares = earlier_shares(curves, args.min_overlap_s)
    lines = ["# Async workers pushing and pulling at once through one shard: a traced run against fine's timeline", "",
             f"Generated by `benchmarks/async_link_concurrency.py {' '.join(argv)}`. Share of the window with 0-{bins - 1} workers "
             "pushing (first to last gradient arrival at the shard) and pulling (that last arrival to the end of the "
             "worker's last wait for parameters in its next forward); fine's from its `nic up` / `nic down` slices. "
             f"The first {args.skip_s:g} s of each side left out.", "",
             f"| side | window (s) | pushing {' / '.join(map(str, range(bins)))} | pulling {' / '.join(map(str, range(bins)))} "
             "| a push's span (median, s) | "
             "a pull's span (median, s) |", "|---|---:|---|---|---:|---:|"]
    for side, seconds, push_share, pull_share, push_span, pull_span in rows:
        lines.append(f"| {side} | {seconds:.0f} | {' / '.join(f'{x:.0%}' for x in push_share)} | "
                     f"{' / '.join(f'{x:.0%}' for x in pull_share)} | {push_span:.2f} | {pull_span:.2f} |")
    if shares:
        q1, med, q3 = np.percentile(shares, [25, 50, 75])
        lines += ["", f"Two measured pushes overlapping {args.min_overlap_s:g} s or more ({len(shares)} pairs): the "
                  f"earlier-started one took {med:.2f} of the bytes the two brought in while both moved (quartiles "
                  f"{q1:.2f}-{q3:.2f}; 0.5: equal sharing, as fine shares a shard's downlink)."]
    else:
        lines += ["", f"No two measured pushes overlapped {args.min_overlap_s:g} s or more."]
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
