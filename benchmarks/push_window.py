"""Does a run's TCP state set how full its shard's link runs in PS? The same cases, run again and again.

Fine predicts one-shard async PS within a few per cent where the runs keep the shard's link ~80% busy, and
12-18% too slow where they keep it 90-97% busy (set 78's resnet50 replay, sets 80 and 81's real compute;
`shard_flows.py`). Which runs do which was not explained by the model, the worker count or the tensors
(`shard_flows-*.md`). A push's acknowledgements leave the shard behind the replies queued in its uplink's
shaper (tbf, up to 50 ms of line rate), so a push flow moves at most its congestion window per that round
trip; under Reno the window stops growing at the slow-start threshold the flow's first loss set, which
with so long a round trip it barely raises again. This runs each case `--runs` times, interleaved, with
`shard_flows.py` sampling every connection's bytes and its sender's TCP state, and reports per run the
throughput, the link's use each way and what each push flow's window lets through (window over round trip,
as a share of the link), beside the fine method's prediction of the case.

`--cases mobilenet_v2-replay-sync-w7` does the same for a sync PS case whose three runs in set 79 settled
at two levels (70.3 against 76.6 and 76.8 samples/s).

With `--link-queue acks-first` the emulated links send acknowledgements ahead of the data queued in their
shapers (`runtime/testbed.py`): a push's round trip no longer holds the shard's queued replies, which
tells whether that is what holds the link.

    .venv/bin/python benchmarks/push_window.py [--cases bert-replay-w4,resnet50-replay-w4,gpt2-real-w5]
        [--runs 3] [--link-queue fifo|acks-first] [--report-only]

Raw output: benchmarks/results/push_window.md (push_window-acks-first.md), and each run's
results/shard_flows-push_window-<case>[-acks-first]-r<k>.md with its samples in the folder of that name.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import shard_flows  # noqa: E402  (a sibling benchmark)

SET78, SET79, SET80 = "results/accuracy-heldout78", "results/accuracy-heldout79", "results/accuracy-heldout80"
# name: (network file, profile fine predicts from, nominal bandwidth, `sgdscale train` arguments)
CASES = {
    "bert-replay-w4": (f"{SET78}/networks/600Mbit-q0.25-n4-5.json", f"{SET78}/profiles/replay-bert-b8.json", "600Mbit",
                       [f"{SET78}/profiles/replay-bert-b8.json", "--replay", "--workers", "4", "--strategy", "ps-async",
                        "--ps", "1", "--emulate", "--bandwidth", "600Mbit", "--cpu-quota", "0.25", "--iterations", "30"]),
    "resnet50-replay-w4": (f"{SET78}/networks/600Mbit-q0.25-n4-5.json", f"{SET78}/profiles/replay-resnet50-b16.json",
                           "600Mbit",
                           [f"{SET78}/profiles/replay-resnet50-b16.json", "--replay", "--workers", "4", "--strategy",
                            "ps-async", "--ps", "1", "--emulate", "--bandwidth", "600Mbit", "--cpu-quota", "0.25",
                            "--iterations", "25"]),
    "gpt2-real-w5": (f"{SET80}/networks/660Mbit-q0.32-n5-6.json",
                     f"{SET80}/profiles/gpt2-b4-s64-layers2-hidden128-vocab2048-q0.32.json", "660Mbit",
                     ["gpt2", "--batch-size", "4", "--seq-len", "64", "--option", "layers=2", "--option", "hidden=128",
                      "--option", "vocab=2048", "--workers", "5", "--strategy", "ps-async", "--ps", "1", "--emulate",
                      "--bandwidth", "660Mbit", "--cpu-quota", "0.32", "--iterations", "150"]),
    # sync PS, for how its runs settle: set 79's mobilenet_v2 replay with 7 workers (runs 70.3, 76.6, 76.8 samples/s)
    "mobilenet_v2-replay-sync-w7": (f"{SET79}/networks/940Mbit-q0.24-n7-8.json",
                                    f"{SET79}/profiles/replay-mobilenet_v2-b16.json", "940Mbit",
                                    [f"{SET79}/profiles/replay-mobilenet_v2-b16.json", "--replay", "--workers", "7",
                                     "--strategy", "ps-sync", "--ps", "1", "--emulate", "--bandwidth", "940Mbit",
                                     "--cpu-quota", "0.24", "--iterations", "40"]),
}
DEFAULT_CASES = ("bert-replay-w4", "resnet50-replay-w4", "gpt2-real-w5")
SKIP_S = 5.0


def lone_push(times: np.ndarray, pushes: np.ndarray, link_Bps: float) -> tuple[float, float]:
    """(share of the link one push moves while no other moves, share of the time no push moves), over
    `shard_flows`' 20 ms windows."""
    rate = shard_flows.window_rates(times, pushes, link_Bps)
    moving = (rate > shard_flows.MOVING).sum(axis=0)
    return float(rate.sum(axis=0)[moving == 1].mean()), float((moving == 0).mean())


SPELL_S = 10.0  # how the pushes' link use moves within a run: over spells this long
PIPELINED = 0.90  # a spell whose pushes keep the link at least this busy


def spells(times: np.ndarray, pushes: np.ndarray, link_Bps: float) -> list[float]:
    """The pushes' link use over each whole `SPELL_S` spell of the run's middle."""
    return shard_flows.window_rates(times, pushes, link_Bps, SPELL_S).sum(axis=0).tolist()


def run_summary(name: str, workers: int, link_Bps: float) -> dict:
    """One kept run's figures, from its samples and measurement."""
    folder = HERE / "results" / f"shard_flows-{name}"
    used = shard_flows.read_samples(folder / "samples.json.gz")
    windows = shard_flows.read_windows(folder / "samples.json.gz")
    times, pulls, pushes = shard_flows.series(used, workers, SKIP_S)
    rows = shard_flows.window_rows(windows, link_Bps, *shard_flows.middle_s(used, SKIP_S))
    push = [r for r in rows if r["direction"] == "push"]
    thresholds = [r["ssthresh_bytes"] for r in push]
    measurement = json.loads((folder / "measurement.json").read_text())
    alone, idle = lone_push(times, pushes, link_Bps)
    return {"name": name, "throughput": measurement["throughput"], "push_use": shard_flows.link_use(times, pushes, link_Bps),
            "lone_push_share": alone, "no_push_time": idle, "spells": spells(times, pushes, link_Bps),
            "pull_use": shard_flows.link_use(times, pulls, link_Bps),
            "push_capacity": [r["capacity"] for r in push], "push_rtt_s": [r["rtt_s"] for r in push],
            "push_ssthresh_bytes": thresholds,
            "pull_capacity": [r["capacity"] for r in rows if r["direction"] == "pull"]}


def fine_of(case: str, workers: int, link_Bps: float) -> tuple[float, float, float]:
    """The fine method's (samples/s, push link use, pull link use) for the case, as `shard_flows` predicts it."""
    network, profile, bandwidth, train = CASES[case]
    from sgdscale.units import parse_bandwidth_bps
    times, pulls, pushes, throughput = shard_flows.fine_series(
        str(HERE / profile), str(HERE / network), workers, parse_bandwidth_bps(bandwidth),
        train[train.index("--strategy") + 1], SKIP_S, 0.002, replay="--replay" in train)
    return throughput, shard_flows.link_use(times, pushes, link_Bps), shard_flows.link_use(times, pulls, link_Bps)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(DEFAULT_CASES), help="which to run: " + ", ".join(CASES)
                        + " (the report shows every case with kept runs)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--link-queue", choices=("fifo", "acks-first"), default="fifo",
                        help="how the emulated links queue (`sgdscale train --link-queue`)")
    parser.add_argument("--report-only", action="store_true", help="report the kept runs again, run nothing")
    args = parser.parse_args(argv)
    cases = args.cases.split(",")
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    suffix = "" if args.link_queue == "fifo" else f"-{args.link_queue}"
    if not args.report_only:
        for k in range(args.runs):  # interleaved: round k of every case, then round k + 1
            for case in cases:
                network, _, _, train = CASES[case]
                subprocess.run([sys.executable, str(HERE / "shard_flows.py"), "--name", f"push_window-{case}{suffix}-r{k}",
                                "--network-file", network, "--", *train, "--link-queue", args.link_queue],
                               cwd=HERE, check=True)
    lines = [f"# PS with one shard: each run's TCP state and how full it keeps the link ({args.link_queue} "
             "link queues)", "",
             f"Generated by `benchmarks/push_window.py {' '.join(argv)}`. Every run sampled by `shard_flows.py` "
             f"(bytes where they arrive; each sending end's congestion window, slow-start threshold and round trip "
             f"from its tcp_info) over the run's middle (the first and last {SKIP_S:g} s left out). A push flow's "
             "capacity: its window over its round trip while it sends, as a share of the link (median over time; "
             "here the median over the workers, and their sum: what the pushes could move if all sent at once). "
             "Slow-start threshold: where its first loss left the window's growth, the median over the workers.",
             "A lone push: the share of the link one push moves in the 20 ms windows where no other moves. "
             f"Spells: the pushes' link use over each whole {SPELL_S:g} s of the middle; how many were at least "
             f"{PIPELINED:.0%} busy, and their median.", "",
             "| case | run | samples/s | fine | fine's error | link use, pushes / pulls (fine) | "
             f"{SPELL_S:g} s spells at {PIPELINED:.0%}+ | a lone push's share of the link | time with no push moving | push flows' "
             "capacity, median (sum) | push round trip (median) | pushes' slow-start threshold (median) |",
             "|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    pooled = []
    for case in CASES:
        network, _, _, train = CASES[case]
        workers = int(train[train.index("--workers") + 1])
        link_Bps = 1.0 / json.loads((HERE / network).read_text())["p2p"]["beta_s_per_byte"]
        names = sorted(p.name.removeprefix("shard_flows-") for p in
                       (HERE / "results").glob(f"shard_flows-push_window-{case}{suffix}-r[0-9]*") if p.is_dir())
        if not names:
            continue
        fine, fine_push, fine_pull = fine_of(case, workers, link_Bps)
        for name in names:
            r = run_summary(name, workers, link_Bps)
            thresholds = [t for t in r["push_ssthresh_bytes"] if t is not None]
            threshold = (f"{statistics.median(thresholds) / 1e6:.2f} MB" if len(thresholds) == len(r["push_ssthresh_bytes"])
                         else f"none in {len(r['push_ssthresh_bytes']) - len(thresholds)} of {len(r['push_ssthresh_bytes'])}")
            lines.append(f"| {case} | {name.rsplit('-', 1)[1]} | {r['throughput']:.1f} | {fine:.1f} | "
                         f"{fine / r['throughput'] - 1:+.1%} | {r['push_use']:.0%} / {r['pull_use']:.0%} "
                         f"({fine_push:.0%} / {fine_pull:.0%}) | "
                         + (f"{np.mean(np.array(r['spells']) >= PIPELINED):.0%} of {len(r['spells'])}, median "
                            f"{np.median(r['spells']):.0%}" if r["spells"] else "-")
                         + f" | {r['lone_push_share']:.2f} | {r['no_push_time']:.0%} | "
                         f"{statistics.median(r['push_capacity']):.2f} "
                         f"({sum(r['push_capacity']):.2f}) | {statistics.median(r['push_rtt_s']) * 1e3:.0f} ms | {threshold} |")
            pooled.append((r["throughput"], statistics.median(r["push_capacity"]), sum(r["push_capacity"]), case))
            print(lines[-1], flush=True)
    if pooled:
        lines += ["", "Each case's runs by throughput, with their push flows' capacity (median over the workers, sum): "
                  + "; ".join(f"{case}: " + " < ".join(f"{t:.1f} ({m:.2f}, {total:.2f})" for t, m, total, k in sorted(pooled)
                                                        if k == case)
                              for case in dict.fromkeys(p[3] for p in pooled)) + "."]
    text = "\n".join(lines) + "\n"
    out = HERE / "results" / f"push_window{suffix}.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
