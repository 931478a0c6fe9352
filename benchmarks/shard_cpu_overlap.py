"""Does a PS shard's transport CPU run while its bytes move, or after? Sampled in real runs. (needs root and torch)

Both PS methods charge a shard the measured CPU per byte for every copy in and every reply out,
in series with the wire: the receive CPU once the last copy has arrived, the replies' before they
leave. From the measured files that makes every sync PS replay with two or three shards of sets
68-71 but one too slow in fine (-4.7% to -19.3%); charging it beside the wire fixes those (7.7% ->
3.7% over 19 multi-shard cases) and moves the one-shard cases of sets 40-63 from 4.1% to 5.1%
(`receive_overlap_tuning.py`). Which is real was never measured. This runs sync PS replays on the
emulated cluster with one and with several shards and samples, every `--interval-ms`, each shard
node's veth byte counters (both directions) and its cgroup's CPU (cpuacct user and kernel time,
cpu.stat throttled time). Over each run's measured window it reports where the shard's CPU went:
the share spent in bins in which pushes arrive, replies leave, both, or neither (a bin's direction
is busy at >= 20% of the network file's point-to-point rate), the CPU per byte it spent against the
file's, and the share of the window the shard was throttled. Beside it, fine's and coarse's
predictions of the same case from the given network file (fine charges the CPU in series: its
receive CPU falls in `neither` for in-bytes, its send CPU before the replies move).

    .venv/bin/python benchmarks/shard_cpu_overlap.py --network FILE [--profile bert] [--workers 4]
        [--shards 1,3] [--bandwidth 850Mbit] [--quota 0.22] [--iterations 45] [--rounds 2]
        [--interval-ms 5] [--output shard_cpu_overlap]
    .venv/bin/python benchmarks/shard_cpu_overlap.py --output NAME --report-only
Writes benchmarks/results/<output>.{md,json} and each run's measurement and samples in <output>/.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import threading
import time
from pathlib import Path

from repredict_sets import sleeping_replay_predictions
from shard_link_use import NET, find_veth, measured_or_kept, train_while_sampling

from sgdscale.runtime.measurement import common_window, measurement_from_json
from sgdscale.runtime.testbed import CGROUP_CPU_ROOT, CGROUP_CPUACCT_ROOT

HERE = Path(__file__).resolve().parent
BUSY = 0.2  # a bin's direction is busy at this share of the point-to-point rate or more
CLASSES = ("pushes only", "both", "replies only", "neither")
COLUMNS = ("unix_s", "bytes_into_node", "bytes_out_of_node", "cpu_user_ns", "cpu_sys_ns", "throttled_ns")


def read_int(path: Path) -> int:
    return int(path.read_text().split()[0])


def throttled_ns(path: Path) -> int:
    for line in path.read_text().splitlines():
        key, value = line.split()
        if key == "throttled_time":
            return int(value)
    return 0


def sample(nodes: list[int], interval_s: float, rows: dict[int, list[tuple]], stop: threading.Event) -> None:
    """Per node: (unix time, bytes in, bytes out, user ns, kernel ns, throttled ns). The host veth's tx is
    what the node receives; the node's cgroups are found by the veth's prefix."""
    veths = {node: find_veth(node) for node in nodes}
    if any(v is None for v in veths.values()):
        return
    files = {}
    for node, veth in veths.items():
        group = veth[: -len(f"v{node}")] + f"-node{node}"
        stats = NET / veth / "statistics"
        files[node] = (stats / "tx_bytes", stats / "rx_bytes", CGROUP_CPUACCT_ROOT / group / "cpuacct.usage_user",
                       CGROUP_CPUACCT_ROOT / group / "cpuacct.usage_sys", CGROUP_CPU_ROOT / group / "cpu.stat")
    while not stop.is_set():
        try:
            for node, (into, out, user, kernel, stat) in files.items():
                rows[node].append((time.time(), read_int(into), read_int(out), read_int(user), read_int(kernel),
                                   throttled_ns(stat)))
        except (OSError, ValueError):  # the testbed is gone
            return
        time.sleep(interval_s)


def where_cpu_went(rows: list[tuple], start: float, end: float, p2p_bps: float) -> dict:
    """The node's CPU over the window, split by what its link did in the same bin."""
    full = p2p_bps / 8
    cpu_s = dict.fromkeys(CLASSES, 0.0)
    time_s = dict.fromkeys(CLASSES, 0.0)
    throttled_s = 0.0
    moved = [0, 0]
    cpu_user = cpu_sys = 0.0
    for a, b in zip(rows, rows[1:]):
        if a[0] < start or b[0] > end or b[0] <= a[0]:
            continue
        dt = b[0] - a[0]
        into, out = (b[1] - a[1]), (b[2] - a[2])
        user, kernel = (b[3] - a[3]) / 1e9, (b[4] - a[4]) / 1e9
        busy_in, busy_out = into / dt >= BUSY * full, out / dt >= BUSY * full
        label = CLASSES[0] if busy_in and not busy_out else CLASSES[1] if busy_in else \
            CLASSES[2] if busy_out else CLASSES[3]
        cpu_s[label] += user + kernel
        time_s[label] += dt
        throttled_s += (b[5] - a[5]) / 1e9
        moved[0] += into
        moved[1] += out
        cpu_user += user
        cpu_sys += kernel
    window = sum(time_s.values()) or 1.0
    total_cpu = sum(cpu_s.values()) or 1e-12
    return {"window_s": window, "cpu_s": total_cpu, "cpu_user_s": cpu_user, "cpu_sys_s": cpu_sys,
            "cpu_share": {k: v / total_cpu for k, v in cpu_s.items()},
            "time_share": {k: v / window for k, v in time_s.items()},
            "cores_in": {k: (cpu_s[k] / time_s[k] if time_s[k] else None) for k in CLASSES},
            "bytes_in": moved[0], "bytes_out": moved[1],
            "ns_per_byte": total_cpu * 1e9 / max(1, moved[0] + moved[1]),
            "throttled_share": throttled_s / window}


def predict(args: argparse.Namespace | dict, shards: int) -> dict:
    """fine's and coarse's samples/s as the validator predicts a sleeping replay. Reports made before
    2026-12-07 kept predictions from `sgdscale predict --network --cpu-per-node`, which charged the
    sleeping workers the file's interference and CPU per message (`--repredict`)."""
    a = vars(args) if isinstance(args, argparse.Namespace) else args
    network = Path(a["network"]) if Path(a["network"]).exists() else HERE / a["network"]
    return sleeping_replay_predictions(a["profile"], a["workers"], shards, a["strategy"], a["bandwidth"], str(network))


def run_case(args: argparse.Namespace, shards: int, out: Path) -> dict:
    nodes = list(range(args.workers, args.workers + shards))
    rows: dict[int, list[tuple]] = {node: [] for node in nodes}
    measurement = train_while_sampling(args, args.workers, shards, out, sample, nodes, args.interval_ms / 1e3, rows)
    with gzip.open(out.with_suffix(".samples.json.gz"), "wt") as f:
        json.dump({"columns": COLUMNS, "nodes": {str(k): v for k, v in rows.items()}}, f)
    start, end = common_window(measurement_from_json(measurement, str(out)).workers)
    return {"throughput": measurement["throughput"], "start": start, "end": end,
            "samples": {str(k): len(v) for k, v in rows.items()},
            "shards": {str(k): where_cpu_went(v, start, end, args.p2p_bps) for k, v in rows.items()}}


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def report(record: dict, argv: list[str]) -> str:
    args = record["args"]
    lines = [f"# Where a PS shard's CPU goes against its link ({args['strategy']}, {args['profile']} replay, "
             f"{args['workers']} workers, {args['bandwidth']}, {args['quota']} cores per node)", "",
             f"Generated by `benchmarks/shard_cpu_overlap.py {' '.join(argv)}`. Each shard node's veth counters and "
             f"cgroup CPU (cpuacct user + kernel) sampled every {args['interval_ms']:g} ms over each run's measured "
             f"window; a bin's direction is busy when it moves >= {BUSY:.0%} of the network file's point-to-point rate "
             f"({args['p2p_bps'] / 8e6:.1f} MB/s). `CPU in ...`: the share of the shard's CPU spent in such bins "
             f"(`time`: the share of the window they make up). The file's CPU per byte is what fine and coarse "
             f"charge, in series with the wire. Interleaved: every round runs each shard count once.", "",
             "| shards | round | shard | measured (samples/s) | fine | coarse | CPU in pushes only (time) | CPU in both "
             "(time) | CPU in replies only (time) | CPU in neither (time) | cores while pushes arrive / both / replies "
             "/ neither | the shard's CPU per byte moved (ns; file's transport charge) | kernel share | throttled |",
             "|---:|---:|---:|---:|---:|---:|---|---|---|---|---|---:|---:|---:|"]
    for shards, entries in record["runs"].items():
        p = record["predicted"][shards]
        for i, e in enumerate(entries):
            for node, s in e["shards"].items():
                cells = [f"{pct(s['cpu_share'][k])} ({pct(s['time_share'][k])})" for k in CLASSES]
                cores = " / ".join("-" if s["cores_in"][k] is None else f"{s['cores_in'][k]:.3f}" for k in CLASSES)
                lines.append(f"| {shards} | {i + 1} | node {node} | {e['throughput']:.2f} | {p['fine']:.2f} | "
                             f"{p['coarse']:.2f} | " + " | ".join(cells) + f" | {cores} | {s['ns_per_byte']:.2f} "
                             f"({record['file_ns_per_byte']:.2f}) | {s['cpu_sys_s'] / s['cpu_s']:.0%} | "
                             f"{s['throttled_share']:.0%} |")
    lines += ["", "Per shard count, over rounds and shards: the measured median, fine's and coarse's error against it, "
              "and the median shares of the shards' CPU by what their link did.", "",
              "| shards | runs | measured: median (min-max) | fine | coarse | CPU while pushes arrive (only or both) | "
              "CPU while only replies leave | CPU with the link idle |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for shards, entries in record["runs"].items():
        measured = [e["throughput"] for e in entries]
        median = statistics.median(measured)
        p = record["predicted"][shards]
        every = [s for e in entries for s in e["shards"].values()]
        arriving = statistics.median(s["cpu_share"]["pushes only"] + s["cpu_share"]["both"] for s in every)
        replies = statistics.median(s["cpu_share"]["replies only"] for s in every)
        idle = statistics.median(s["cpu_share"]["neither"] for s in every)
        lines.append(f"| {shards} | {len(entries)} | {median:.2f} ({min(measured):.2f}-{max(measured):.2f}) | "
                     f"{p['fine'] / median - 1:+.1%} | {p['coarse'] / median - 1:+.1%} | {arriving:.0%} | "
                     f"{replies:.0%} | {idle:.0%} |")
    return "\n".join(lines) + "\n"


def measure(args: argparse.Namespace, out: Path) -> dict:
    counts = [int(k) for k in args.shards.split(",")]
    network = json.loads(Path(args.network).read_text())
    args.p2p_bps = 8 / network["p2p"]["beta_s_per_byte"]
    record = {"args": vars(args), "file_ns_per_byte": (network.get("cpu") or {}).get("p2p_s_per_byte", 0.0) * 1e9,
              "predicted": {str(k): predict(args, k) for k in counts}, "runs": {str(k): [] for k in counts}}
    out.mkdir(parents=True, exist_ok=True)
    for rnd in range(args.rounds):
        for k in counts:
            case = run_case(args, k, out / f"ps{k}-r{rnd + 1}.json")
            print(f"round {rnd + 1}, {k} shards: {case['throughput']:.2f} samples/s, samples {case['samples']}",
                  flush=True)
            record["runs"][str(k)].append(case)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", help="the measured network file of this cluster (not with --report-only)")
    parser.add_argument("--profile", default="bert")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--shards", default="1,3")
    parser.add_argument("--strategy", default="ps-sync")
    parser.add_argument("--bandwidth", default="850Mbit")
    parser.add_argument("--quota", type=float, default=0.22)
    parser.add_argument("--iterations", type=int, default=45)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--interval-ms", type=float, default=5.0)
    parser.add_argument("--output", default="shard_cpu_overlap")
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
    text = report(record, argv)
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
