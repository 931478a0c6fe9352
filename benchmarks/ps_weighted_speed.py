"""How long the parameter-server simulation takes with weighted link sharing, before and after
weighted star mode (sgdscale.fine.hubs.StarNetwork with `weight_sigma`).

Before it, a run with `CommModel.share_weight_sigma` > 0 fell back to the general max-min network
(sgdscale.fine.links.LinkNetwork, progressive filling over every active connection at each change);
after it, such a run keeps the per-hub virtual clock. Cases: resnet50 (161 tensors, per-tensor
grouping), 10 Gbit/s, 8 / 64 / 256 workers, async PS with 1 server and sync PS with 1 and 2 servers,
sigma 0 and 0.13, 30 iterations after 10 warm-up, `REPEATS` seeds. Every run is a fresh child process
on one source tree; the trees alternate run by run so load on the (shared) machine hits both alike.
CPU time of the `simulate` call is the figure (wall time is kept too); the predicted throughput shows
that both trees predict the same.

    git archive <commit before> src | tar -x -C /tmp/before     # the source tree to compare with
    flock /tmp/sgdscale-cpu.lock nice -n 19 env PYTHONPATH=src .venv/bin/python \\
        benchmarks/ps_weighted_speed.py --before-src /tmp/before/src
Writes benchmarks/results/ps_weighted_speed.json (raw) and ps_weighted_speed.md (table);
`--server-gbps 40` (server NICs faster than the workers' 10 Gbit/s, where weighted star mode must
leave for the general network while few connections share a hub) writes ps_weighted_speed_server40.*.
`--newcomer W` (0.1, later 0.22) instead compares this tree with itself: sigma 0.13 with equal sharing among started
flows (before) and with the flows already moving first (after, `CommModel.newcomer_share_weight`, as
network files with link sharing measured now give), and writes ps_weighted_speed_newcomer.*.
`--sigmas 0 --output NAME` with `--before-src` of the tree before set 26's change times nominal
figures (sigma 0) with equal sharing (before) against the incumbents-first rule and the sigma the
fine method simulates where none was measured (after): ps_weighted_speed_nominal_rule.* for the
first form (0.01), ps_weighted_speed_nominal_rule_kept.* for the form kept (0.17).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
SRC = Path(__file__).resolve().parent.parent / "src"
REPEATS = 3
ITERATIONS, WARMUP = 30, 10
WORKERS = (8, 64, 256)
SIGMAS = (0.0, 0.13)
KINDS = (("ps-async", 1), ("ps-sync", 1), ("ps-sync", 2))


def child(case: dict) -> dict:
    """One timed `simulate` call in this process (whatever sgdscale PYTHONPATH names)."""
    import dataclasses

    import sgdscale
    from sgdscale.cluster import Cluster
    from sgdscale.comm.cost import CommModel
    from sgdscale.fine import simulate
    from sgdscale.profile import load_profile
    from sgdscale.strategy import Strategy

    profile = load_profile("resnet50")
    comm = dataclasses.replace(CommModel.from_link(10e9, 20e-6), share_weight_sigma=case["sigma"])
    if "newcomer" in case:
        comm = dataclasses.replace(comm, newcomer_share_weight=case["newcomer"])
    began, began_cpu = time.perf_counter(), time.process_time()
    cluster = Cluster(case["workers"], ps_count=case["servers"], ps_bandwidth_bps=case.get("server_bps"))
    outcome = simulate(profile, cluster,
                       Strategy(kind=case["kind"], grouping="per-tensor"), comm,
                       iterations=ITERATIONS, warmup=WARMUP, seed=case["seed"])
    return {"cpu_s": time.process_time() - began_cpu, "wall_s": time.perf_counter() - began,
            "throughput": outcome.throughput, "sgdscale": sgdscale.__file__}


def run_child(src: Path, case: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(case)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before-src", type=Path, help="src/ of the tree to compare with")
    parser.add_argument("--server-gbps", type=float, help="server NIC bandwidth (default: the workers' 10)")
    parser.add_argument("--newcomer", type=float, help="compare this tree with itself, this newcomer weight after")
    parser.add_argument("--sigmas", help="comma-separated sigmas (default 0,0.13; with --newcomer 0.13)")
    parser.add_argument("--output", help="results name (default from the options)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if (args.before_src is None) == (args.newcomer is None):
        parser.error("give --before-src or --newcomer")
    server_bps = args.server_gbps * 1e9 if args.server_gbps else None
    out_name = f"ps_weighted_speed_server{args.server_gbps:g}" if args.server_gbps else "ps_weighted_speed"
    trees = {"before": SRC if args.before_src is None else args.before_src.resolve(), "after": SRC}
    newcomer = {} if args.newcomer is None else {"before": 1.0, "after": args.newcomer}
    sigmas = SIGMAS if args.newcomer is None else (0.13,)
    if args.sigmas:
        sigmas = tuple(float(x) for x in args.sigmas.split(","))
    out_name = "ps_weighted_speed_newcomer" if args.newcomer is not None else out_name
    out_name = args.output or out_name
    rows = []
    for kind, servers in KINDS:
        for workers in WORKERS:
            for sigma in sigmas:
                runs: dict[str, list[dict]] = {name: [] for name in trees}
                for seed in range(REPEATS):
                    for name, src in trees.items():
                        case = {"kind": kind, "servers": servers, "workers": workers, "sigma": sigma, "seed": seed,
                                "server_bps": server_bps}
                        if newcomer:
                            case["newcomer"] = newcomer[name]
                        runs[name].append(run_child(src, case))
                row = {"kind": kind, "servers": servers, "workers": workers, "sigma": sigma,
                       "iterations": ITERATIONS, "warmup": WARMUP, "runs": runs}
                rows.append(row)
                cpu = {name: sorted(r["cpu_s"] for r in rs) for name, rs in runs.items()}
                print(kind, servers, workers, sigma, {n: [round(x, 3) for x in c] for n, c in cpu.items()},
                      flush=True)
    environment = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
                   "trees": {label: str(src) for label, src in trees.items()}, "repeats": REPEATS,
                   "newcomer_weight": newcomer or None,
                   "worker_bps": 10e9, "server_bps": server_bps or 10e9,
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "load_average_at_end": list(os.getloadavg())}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{out_name}.json").write_text(json.dumps({"environment": environment, "results": rows},
                                                               indent=1) + "\n")
    (RESULTS / f"{out_name}.md").write_text(markdown(rows, environment))
    return 0


def markdown(rows: list[dict], environment: dict) -> str:
    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f})"

    title = ("weighted star, equal sharing among started flows (before) vs the flows already moving first (after, "
             f"newcomer weight {environment['newcomer_weight']['after']:g})" if environment.get("newcomer_weight")
             else "LinkNetwork fallback (before) vs weighted star (after)")
    lines = [f"# PS simulation CPU time, weighted sharing: {title}",
             "", f"resnet50, per-tensor, workers {environment['worker_bps'] / 1e9:g} Gbit/s, servers "
             f"{environment['server_bps'] / 1e9:g} Gbit/s, {ITERATIONS} iterations + {WARMUP} warm-up, "
             f"{environment['repeats']} seeds per cell; CPU seconds of one `simulate` call, median (min-max). "
             f"Load average at the end: {environment['load_average_at_end']}.", "",
             "| strategy | servers | workers | sigma | before | after | before / after (medians) | "
             "throughput before | after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        b = [x["cpu_s"] for x in r["runs"]["before"]]
        a = [x["cpu_s"] for x in r["runs"]["after"]]
        tb = statistics.mean(x["throughput"] for x in r["runs"]["before"])
        ta = statistics.mean(x["throughput"] for x in r["runs"]["after"])
        lines.append(f"| {r['kind']} | {r['servers']} | {r['workers']} | {r['sigma']} | {spread(b)} | {spread(a)} | "
                     f"{statistics.median(b) / statistics.median(a):.2f}x | {tb:.3f}/s | {ta:.3f}/s |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        sys.exit(0)
    sys.exit(main())
