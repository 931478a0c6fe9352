"""Is a parameter server's link idle or slow? Its bytes sampled during real runs. (needs root and torch)

Set 40's async PS case with 6 workers moved 23% fewer bytes through the shard than its link
carries point to point, where the fine method has the shard's link busy 86% of the time. A link
that moves fewer bytes is either idle part of the time (the workers do not keep it fed: a
coordination effect the simulator should reproduce) or busy but slow (flows sharing it lose rate:
a transport effect the network file should carry). This tells the two apart: it runs the case on
the emulated cluster (`sgdscale train --replay --emulate`) while sampling the shard node's veth byte
counters (kernel statistics, both directions) every `--interval-ms`, and reports, over the
measured window, the rate per bin against the point-to-point rate of the network file: the share of
bins idle (< 20%), busy at full rate (>= 80%) and in between, and the mean rate of the busy bins.
Beside it, the fine and coarse predictions of the same case and the fine method's busy share of the
shard's NIC, predicted as the validator predicts a sleeping replay (`--repredict` puts today's
beside kept runs, in <output>-today.md).

    .venv/bin/python benchmarks/shard_link_use.py --network FILE [--profile gpt2] [--workers 3,6]
        [--strategy ps-async] [--bandwidth 400Mbit] [--quota 0.28] [--iterations 45] [--rounds 2]
        [--output shard_link_use] [--pool-set heldout40]
    .venv/bin/python benchmarks/shard_link_use.py --output NAME --report-only [--repredict] --pool-set heldout40
Writes benchmarks/results/<output>.{md,json} and each run's measurement and sampled counters in <output>/.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from repredict_sets import sleeping_replay_inputs

from sgdscale.runtime.measurement import common_window, measurement_from_json
from sgdscale.runtime.testbed import NAME_STEM

HERE = Path(__file__).resolve().parent
CLI = [sys.executable, "-m", "sgdscale.cli"]
NET = Path("/sys/class/net")
IDLE, FULL = 0.2, 0.8  # a bin's rate against the point-to-point rate


def find_veth(node: int, timeout_s: float = 120.0) -> str | None:
    """The host end of `node`'s veth of the one testbed running (names end in 'v<node>')."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        names = [p.name for p in NET.iterdir() if p.name.startswith(NAME_STEM) and p.name.endswith(f"v{node}")]
        if names:
            return names[0]
        time.sleep(0.05)
    return None


def tbf_drops(argv: list[str]) -> int | None:
    """Packets the tbf qdisc of `tc ... -s qdisc show dev X` dropped (its queue was full)."""
    done = subprocess.run(argv, capture_output=True, text=True)
    match = re.search(r"dropped (\d+)", done.stdout)
    return int(match.group(1)) if match else None


def sample(node: int, interval_s: float, rows: list[tuple[float, int, int]],
           drops: list[tuple[float, int | None, int | None]], stop: threading.Event) -> None:
    """(unix time, bytes into the node, bytes out of it): the host end's tx is what the node receives.
    Every second also the packets each direction's tbf dropped (into the node: the bridge end's qdisc;
    out of it: the node's own)."""
    veth = find_veth(node)
    if veth is None:
        return
    netns = veth[: -len(f"v{node}")] + f"n{node}"
    stats = NET / veth / "statistics"
    next_drops = 0.0
    while not stop.is_set():
        try:
            into = int((stats / "tx_bytes").read_text())
            out = int((stats / "rx_bytes").read_text())
        except OSError:  # the testbed is gone
            return
        now = time.time()
        rows.append((now, into, out))
        if now >= next_drops:
            drops.append((now, tbf_drops(["tc", "-s", "qdisc", "show", "dev", veth]),
                          tbf_drops(["tc", "-n", netns, "-s", "qdisc", "show", "dev", "eth0"])))
            next_drops = now + 1.0
        time.sleep(interval_s)


def dropped_in(drops: list[tuple[float, int | None, int | None]], start: float, end: float) -> tuple:
    """Packets dropped into and out of the node between the first and last drop sample inside the window."""
    inside = [d for d in drops if start <= d[0] <= end and d[1] is not None and d[2] is not None]
    if len(inside) < 2:
        return None, None
    return inside[-1][1] - inside[0][1], inside[-1][2] - inside[0][2]


def bins(rows: list[tuple[float, int, int]], start: float, end: float, column: int) -> list[float]:
    """Bytes per second between consecutive samples inside [start, end]."""
    rates = []
    for (t0, *a), (t1, *b) in zip(rows, rows[1:]):
        if t0 >= start and t1 <= end and t1 > t0:
            rates.append((b[column - 1] - a[column - 1]) / (t1 - t0))
    return rates


def shares(rates: list[float], p2p_bps: float) -> dict:
    full = p2p_bps / 8
    busy = [r for r in rates if r >= IDLE * full]
    return {"mean_of_p2p": statistics.fmean(rates) / full if rates else None,
            "idle": sum(r < IDLE * full for r in rates) / len(rates),
            "full": sum(r >= FULL * full for r in rates) / len(rates),
            "between": sum(IDLE * full <= r < FULL * full for r in rates) / len(rates),
            "busy_mean_of_p2p": statistics.fmean(busy) / full if busy else None,
            "bins": len(rates)}


PHASES = ("pushes only", "both", "replies only", "neither")


def phase(busy_in: bool, busy_out: bool) -> str:
    return PHASES[0] if busy_in and not busy_out else PHASES[1] if busy_in else PHASES[2] if busy_out else PHASES[3]


def phase_shares(into: list[float], out: list[float], p2p_bps: float) -> dict[str, float]:
    """Share of the bins in which only pushes arrive, both directions move, only replies leave, or neither."""
    full = p2p_bps / 8
    counts = dict.fromkeys(PHASES, 0)
    for a, b in zip(into, out):
        counts[phase(a >= IDLE * full, b >= IDLE * full)] += 1
    return {k: v / max(1, len(into)) for k, v in counts.items()}


def predicted_phase_shares(trace: dict) -> dict[str, float]:
    """The same shares in the fine method's timeline: the shard's link is busy in while any worker's
    `nic up` slice runs (one shard: every push goes to it), out while any `nic down` slice runs."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans: dict[str, list[tuple[float, float]]] = {"nic up": [], "nic down": []}
    for e in events:
        name = threads.get((e.get("pid"), e.get("tid")))
        if e.get("ph") == "X" and name in spans:
            spans[name].append((e["ts"], e["ts"] + e["dur"]))
    edges = sorted({t for v in spans.values() for span in v for t in span})
    shares = dict.fromkeys(PHASES, 0.0)
    for t0, t1 in zip(edges, edges[1:]):
        mid = (t0 + t1) / 2
        shares[phase(any(a <= mid < b for a, b in spans["nic up"]),
                     any(a <= mid < b for a, b in spans["nic down"]))] += t1 - t0
    total = sum(shares.values()) or 1.0
    return {k: v / total for k, v in shares.items()}


def predict(args: argparse.Namespace | dict, workers: int) -> dict:
    """fine's and coarse's samples/s, fine's busy share of the shard's NIC and its timeline's phases, as
    the validator predicts a sleeping replay from the measured file (`repredict_sets.sleeping_replay_inputs`).
    Reports made before 2026-12-07 kept predictions from `sgdscale predict --network --cpu-per-node`,
    which charged the sleeping workers the file's interference and CPU per message (`--repredict`)."""
    from sgdscale.predict import predict as predict_case
    from sgdscale.report.trace import chrome_trace
    from sgdscale.validation import PREDICT_ITERATIONS

    a = vars(args) if isinstance(args, argparse.Namespace) else args
    network = Path(a["network"]) if Path(a["network"]).exists() else HERE / a["network"]
    profile, strategy, sources = sleeping_replay_inputs(a["profile"], workers, 1, a["strategy"], a["bandwidth"],
                                                        str(network))
    cluster, comm = sources[""]
    made = predict_case(profile, cluster, strategy, comm, [workers], methods=("fine", "coarse"),
                        iterations=PREDICT_ITERATIONS, variability=False, timeline=True)
    fine = next(r for r in made.results if r.method == "fine")
    coarse = next(r for r in made.results if r.method == "coarse")
    return {"fine": fine.throughput, "coarse": coarse.throughput,
            "fine_in": fine.utilization.get("server 0 NIC in"),
            "fine_out": fine.utilization.get("server 0 NIC out"),
            "fine_phases": predicted_phase_shares(chrome_trace(fine.timeline or []))}


def train_while_sampling(args: argparse.Namespace, workers: int, shards: int, out: Path, sampler, *sampler_args) -> dict:
    """Run the replay case on the testbed (measurement kept at `out`) while `sampler(*sampler_args,
    stop)` samples in a thread until the run ends; the run's measurement."""
    stop = threading.Event()
    thread = threading.Thread(target=sampler, args=(*sampler_args, stop), daemon=True)
    thread.start()
    done = subprocess.run(CLI + ["train", args.profile, "--replay", "--workers", str(workers),
                                 "--strategy", args.strategy, "--ps", str(shards), "--emulate",
                                 "--bandwidth", args.bandwidth, "--cpu-quota", str(args.quota),
                                 "--iterations", str(args.iterations), "--timeout", "900s",
                                 "-o", str(out)], capture_output=True, text=True)
    stop.set()
    thread.join()
    if done.returncode != 0:
        sys.exit(f"train failed:\n{done.stderr}")
    return json.loads(out.read_text())


def run_case(args: argparse.Namespace, workers: int, out: Path) -> dict:
    rows: list[tuple[float, int, int]] = []
    drops: list[tuple[float, int | None, int | None]] = []
    measurement = train_while_sampling(args, workers, 1, out, sample, workers, args.interval_ms / 1e3, rows, drops)
    with gzip.open(out.with_suffix(".link.json.gz"), "wt") as f:
        json.dump({"columns": ["unix_s", "bytes_into_node", "bytes_out_of_node"], "rows": rows,
                   "drops": {"columns": ["unix_s", "into_node", "out_of_node"], "rows": drops}}, f)
    start, end = common_window(measurement_from_json(measurement, str(out)).workers)
    dropped_into, dropped_out = dropped_in(drops, start, end)
    cpu = measurement["environment"].get("cpu", {})
    return {"throughput": measurement["throughput"], "window_s": end - start,
            "samples": len(rows), "into": bins(rows, start, end, 1), "out": bins(rows, start, end, 2),
            "dropped_into": dropped_into, "dropped_out": dropped_out,
            "other_load_cores": cpu.get("other_load_cores"),
            "shard_cores": cpu["nodes"][-1]["received_cores"] if cpu.get("nodes") else None}


def report(record: dict, argv: list[str], pool_set: str | None) -> str:
    """The Markdown report of a record (this script's JSON), with the runs of `pool_set`'s same cases
    pooled in where given (its results.json: the validation set this case came from)."""
    args, p2p_bps = record["args"], record["p2p_bps"]
    lines = [f"# Is the shard's link idle or slow? ({args['strategy']}, {args['profile']} replay, {args['bandwidth']}, "
             f"{args['quota']} cores per node)", "",
             f"Generated by `benchmarks/shard_link_use.py {' '.join(argv)}`. The shard node's veth "
             f"counters sampled every {args['interval_ms']:g} ms over each run's measured window; a bin's rate "
             f"against the network file's point-to-point rate ({p2p_bps / 8e6:.1f} MB/s): idle < {IDLE:.0%}, "
             f"full >= {FULL:.0%}. `in`: pushes arriving at the shard; `out`: its replies. Fine's busy share: "
             f"`predict --json`'s utilization of the shard's NIC.", "",
             "| workers | round | measured (samples/s) | fine | coarse | direction | mean rate / p2p | idle bins | "
             "full-rate bins | between | busy bins' mean / p2p | fine's busy share | tbf drops | shard cores | "
             "other load (cores) |",
             "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w, entries in record["runs"].items():
        p = record["predicted"][w]
        for i, e in enumerate(entries):
            for direction in ("in", "out"):
                s = e[direction]
                lines.append(f"| {w} | {i + 1} | {e['throughput']:.2f} | {p['fine']:.2f} | {p['coarse']:.2f} | "
                             f"{direction} | {s['mean_of_p2p']:.0%} | {s['idle']:.0%} | {s['full']:.0%} | "
                             f"{s['between']:.0%} | {s['busy_mean_of_p2p']:.0%} | {p['fine_' + direction]:.0%} | "
                             f"{e['dropped_' + ('into' if direction == 'in' else 'out')]} | "
                             f"{e['shard_cores']:.3f} | {e['other_load_cores']:.2f} |")
    if all("phases" in e for entries in record["runs"].values() for e in entries):
        lines += ["", "How the two directions overlap: the share of the window (measured: of the 20 ms bins; fine: of "
                  "its timeline, `predict --trace`) in which only pushes arrive, both directions move, only replies "
                  "leave, or neither.", "",
                  "| workers | run | " + " | ".join(PHASES) + " |", "|---:|---|" + "---:|" * len(PHASES)]
        for w, entries in record["runs"].items():
            for i, e in enumerate(entries):
                lines.append(f"| {w} | measured, round {i + 1} | " + " | ".join(f"{e['phases'][k]:.0%}" for k in PHASES) + " |")
            fine_phases = record["predicted"][w].get("fine_phases")
            if fine_phases:
                lines.append(f"| {w} | fine | " + " | ".join(f"{fine_phases[k]:.0%}" for k in PHASES) + " |")
    if pool_set:
        kept = json.loads((HERE / "results" / f"accuracy-{pool_set}" / "results.json").read_text())["cases"]
        lines += ["", f"Pooled with the runs of {pool_set} (`--pool-set {pool_set}`; its network file is the one "
                  "predicted with here): the errors against the median of all runs.", "",
                  f"| workers | {pool_set}'s runs | these runs | all: median | range (of the median) | fine | coarse |",
                  "|---:|---|---|---:|---|---:|---:|"]
        for w, entries in record["runs"].items():
            key = f"-{args['strategy']}-ps1-w{w}-{args['bandwidth']}"
            case = next((c for c in kept if c["key"].endswith(key) and args["profile"] in c["key"]), None)
            if case is None:
                continue
            theirs = [r["measured_throughput"] for r in case["runs"]]
            ours = [e["throughput"] for e in entries]
            pooled = theirs + ours
            median = statistics.median(pooled)
            p = record["predicted"][w]
            lines.append(f"| {w} | {', '.join(f'{t:.2f}' for t in theirs)} | {', '.join(f'{t:.2f}' for t in ours)} | "
                         f"{median:.2f} | {min(pooled):.2f}-{max(pooled):.2f} ({(max(pooled) - min(pooled)) / median:.1%}) | "
                         f"{p['fine'] / median - 1:+.1%} | {p['coarse'] / median - 1:+.1%} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", help="the measured network file of this cluster (not with --report-only)")
    parser.add_argument("--profile", default="gpt2")
    parser.add_argument("--workers", default="3,6")
    parser.add_argument("--strategy", default="ps-async")
    parser.add_argument("--bandwidth", default="400Mbit")
    parser.add_argument("--quota", type=float, default=0.28)
    parser.add_argument("--iterations", type=int, default=45)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--output", default="shard_link_use")
    parser.add_argument("--pool-set", help="a validation set (e.g. heldout40) whose runs of these cases to pool in")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from <output>.json, no runs")
    parser.add_argument("--repredict", action="store_true",
                        help="with --report-only: today's predictions beside the kept runs, in <output>-today.md")
    args = parser.parse_args()
    if args.repredict and not args.report_only:
        parser.error("--repredict re-predicts kept runs: give --report-only too")
    out = HERE / "results" / args.output
    record, argv = measured_or_kept(args, out, measure)
    if args.repredict:  # the kept runs beside today's predictions, in a file of their own
        record["predicted"] = {k: predict(record["args"], int(k)) for k in record["runs"]}
        argv, out = argv + ["--report-only", "--repredict"], out.with_name(out.name + "-today")
    text = report(record, argv, args.pool_set)
    out.with_suffix(".md").write_text(text)
    print(text)


def measured_or_kept(args: argparse.Namespace, out: Path, measure) -> tuple[dict, list[str]]:
    """The record to report and the arguments it was made with: with `--report-only` the one kept in
    <out>.json; otherwise `measure(args, out)`'s, kept there first."""
    if args.report_only:
        record = json.loads(out.with_suffix(".json").read_text())
        return record, record.get("argv", [])
    if not args.network:
        sys.exit("give --network (the network file sgdscale netbench measured on this cluster)")
    record = measure(args, out)
    record["argv"] = sys.argv[1:]
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    return record, record["argv"]


def measure(args: argparse.Namespace, out: Path) -> dict:
    """Every run, interleaved round by round, as the record the report is made from."""
    counts = [int(w) for w in args.workers.split(",")]
    p2p_bps = 1 / json.loads(Path(args.network).read_text())["p2p"]["beta_s_per_byte"] * 8
    record = {"args": vars(args), "p2p_bps": p2p_bps, "predicted": {str(w): predict(args, w) for w in counts},
              "runs": {str(w): [] for w in counts}}
    out.mkdir(parents=True, exist_ok=True)
    for rnd in range(args.rounds):
        for w in counts:
            case = run_case(args, w, out / f"w{w}-r{rnd + 1}.json")
            print(f"round {rnd + 1}, {w} workers: {case['throughput']:.2f} samples/s, "
                  f"{case['samples']} samples, window {case['window_s']:.1f} s, tbf drops into / out of the "
                  f"shard {case['dropped_into']} / {case['dropped_out']}, other load {case['other_load_cores']}",
                  flush=True)
            entry = {k: case[k] for k in ("throughput", "window_s", "dropped_into", "dropped_out",
                                          "other_load_cores", "shard_cores")}
            entry["in"], entry["out"] = shares(case["into"], p2p_bps), shares(case["out"], p2p_bps)
            entry["phases"] = phase_shares(case["into"], case["out"], p2p_bps)
            record["runs"][str(w)].append(entry)
    return record


if __name__ == "__main__":
    main()
