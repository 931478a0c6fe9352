"""How fast pushes come into a PS shard while it sends replies, against while it does not. (no runs)

A shard's link is full duplex, and both PS methods let pushes in at the downlink's full rate whatever
its uplink does. Read off the kept samples of `benchmarks/shard_cpu_overlap.py` (each shard node's
veth byte counters every 5 ms in real sync PS replays on the emulated cluster), per run and shard:
the incoming rate in bins where pushes arrive and no reply leaves, and in bins where replies leave
at the same time (a direction counts as moving at >= 20% of the network file's point-to-point rate;
only bins whose neighbours move the same way, so a bin holds no start or end of a burst), and the
outgoing rate likewise; the summary counts each run's busiest shard, the one that binds its step. Where the shard sends, the acknowledgements of the pushes it receives queue
behind its replies on its own uplink's shaper, and the pushes slow; the replies do not.

    .venv/bin/python benchmarks/shard_duplex_rate.py [--runs shard_cpu_overlap-bert-w4-850Mbit,...]
        [--min-bins 50] [--output shard_duplex_rate]

Raw output: benchmarks/results/<output>.{md,json}.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RUNS = ("shard_cpu_overlap-bert-w4-850Mbit", "shard_cpu_overlap-mobilenet_v2-w4-640Mbit",
        "shard_cpu_overlap-resnet18-w3-640Mbit")
BUSY = 0.2  # of the point-to-point rate, as shard_cpu_overlap.py counts a direction busy
AGE_EDGES_S = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, float("inf"))  # how long the shard has been sending
MIN_AGE_BINS = 5  # a run's share in an age band counts from this many bins


def interior(moving: np.ndarray) -> np.ndarray:
    """Bins that move and whose neighbours move too."""
    inner = moving.copy()
    inner[1:-1] &= moving[:-2] & moving[2:]
    inner[0] = inner[-1] = False
    return inner


def rates(rows: list[list[float]], p2p_Bps: float) -> dict:
    """Mean incoming and outgoing MB/s of one shard node, alone and while the other direction moves."""
    a = np.asarray(rows, dtype=float)
    dt = np.diff(a[:, 0])
    into, out = np.diff(a[:, 1]) / dt, np.diff(a[:, 2]) / dt
    moving_in, moving_out = into > BUSY * p2p_Bps, out > BUSY * p2p_Bps
    inner_in, inner_out = interior(moving_in), interior(moving_out)

    def mean(x: np.ndarray, mask: np.ndarray) -> float | None:
        return float(x[mask].mean() / 1e6) if mask.any() else None

    sending_s = np.zeros(len(dt))  # per bin: how long the uplink has been sending, through this bin
    spell = 0.0
    for k, moving in enumerate(moving_out):
        spell = spell + dt[k] if moving else 0.0
        sending_s[k] = spell
    alone = mean(into, inner_in & ~moving_out)
    by_age = []
    for lo, hi in zip(AGE_EDGES_S, AGE_EDGES_S[1:]):
        band = inner_in & moving_out & (sending_s > lo) & (sending_s <= hi)
        by_age.append(mean(into, band) / alone if alone and band.sum() >= MIN_AGE_BINS else None)
    return {"in_alone": alone, "in_while_sending": mean(into, inner_in & moving_out),
            "out_alone": mean(out, inner_out & ~moving_in), "out_while_receiving": mean(out, inner_out & moving_in),
            "bins_both": int((inner_in & moving_out).sum()), "bins": int(len(dt)), "in_share_by_sending_s": by_age}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=",".join(RUNS), help="kept shard_cpu_overlap outputs")
    parser.add_argument("--min-bins", type=int, default=50,
                        help="a shard counts where it received while sending in at least this many bins")
    parser.add_argument("--output", default="shard_duplex_rate")
    args = parser.parse_args(argv)
    rows, ratios_in, ratios_out = [], [], []
    for name in args.runs.split(","):
        record = json.loads((HERE / "results" / f"{name}.json").read_text())
        p2p_Bps = record["args"]["p2p_bps"] / 8
        for shards, runs in record["runs"].items():
            for i, run in enumerate(runs):
                path = HERE / "results" / name / f"ps{shards}-r{i + 1}.samples.json.gz"
                nodes = json.loads(gzip.open(path).read())["nodes"]
                busiest = max(nodes, key=lambda k: nodes[k][-1][1] - nodes[k][0][1])  # most bytes in
                for node, samples in nodes.items():
                    r = rates(samples, p2p_Bps)
                    counted = (node == busiest and r["bins_both"] >= args.min_bins and r["in_alone"] is not None
                               and r["in_while_sending"] is not None)
                    if counted:
                        ratios_in.append(r["in_while_sending"] / r["in_alone"])
                        ratios_out.append(r["out_while_receiving"] / r["out_alone"])
                    rows.append({"runs": name, "shards": int(shards), "round": i + 1, "node": node,
                                 "throughput": run["throughput"], "counted": bool(counted), **r})
    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    lines = ["# A shard's incoming and outgoing rate, alone and both ways at once (kept samples)", "",
             f"Generated by `benchmarks/shard_duplex_rate.py {' '.join(argv)}`. Mean MB/s over 5 ms bins inside a "
             f"burst (the bin and its neighbours moving >= {BUSY:.0%} of the point-to-point rate that way); "
             f"`counted`: the run's busiest shard (most bytes in), where it received while sending in >= "
             f"{args.min_bins} such bins (the shard that binds the step; a lightly loaded shard's replies are short "
             f"bursts).", "",
             "| runs | shards | round | node | samples/s | in, alone | in, while sending | out, alone | "
             "out, while receiving | bins both ways | counted |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['runs'].removeprefix('shard_cpu_overlap-')} | {r['shards']} | {r['round']} | {r['node']} | "
                     f"{r['throughput']:.2f} | {fmt(r['in_alone'])} | {fmt(r['in_while_sending'])} | "
                     f"{fmt(r['out_alone'])} | {fmt(r['out_while_receiving'])} | {r['bins_both']} | "
                     f"{'yes' if r['counted'] else 'no'} |")
    summary = {"shards_counted": len(ratios_in), "in_ratio_median": statistics.median(ratios_in),
               "in_ratio_min": min(ratios_in), "in_ratio_max": max(ratios_in),
               "out_ratio_median": statistics.median(ratios_out)}
    lines += ["", f"Over the {len(ratios_in)} counted runs' busiest shards: pushes come in at {summary['in_ratio_median']:.2f} "
              f"(median; {summary['in_ratio_min']:.2f}-{summary['in_ratio_max']:.2f}) of their rate alone while the "
              f"shard sends replies; replies leave at {summary['out_ratio_median']:.2f} of theirs while pushes come in."]
    counted = [r for r in rows if r["counted"]]
    bands = [f"{lo:g}-{hi:g} s" if hi != float("inf") else f"> {lo:g} s" for lo, hi in zip(AGE_EDGES_S, AGE_EDGES_S[1:])]
    lines += ["", "Pushes in while the shard sends, by how long its uplink has been sending (the counted runs: their "
              f"rate in such bins over their rate alone; a run counts in a band from {MIN_AGE_BINS} bins):", "",
              "| since the shard began sending | runs | median | runs' shares |", "|---|---:|---:|---|"]
    for i, band in enumerate(bands):
        shares = [r["in_share_by_sending_s"][i] for r in counted if r["in_share_by_sending_s"][i] is not None]
        lines.append(f"| {band} | {len(shares)} | {statistics.median(shares):.2f} | {', '.join(f'{x:.2f}' for x in shares)} |"
                     if shares else f"| {band} | 0 | - | - |")
    (HERE / "results" / f"{args.output}.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
