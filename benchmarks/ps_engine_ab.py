"""A/B speed of the parameter-server simulation: this tree against another git revision.

Both run the same exact cases (resnet50, per-tensor messages, 32 workers, 20 iterations + 5 warm-up,
async and sync PS, 1 and 2 shards), alternately in fresh processes, `ROUNDS` times; the best CPU
time of each (least disturbed by the other work on a shared machine) is compared, and the predicted
throughputs are compared (identical where no model changed in between). Used to check that
splitting the engine (one hub network and one `on_done` hot path instead of a star and a hybrid
copy) cost no speed, and what later model changes cost.

    python benchmarks/ps_engine_ab.py [REVISION] [--output NAME]   # default: the revision before the split
Writes benchmarks/results/NAME.{json,md} (default ps_engine_ab).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ROUNDS = 5
CASES = [("ps-async", 1), ("ps-async", 2), ("ps-sync", 1), ("ps-sync", 2)]
BEFORE = "12dd0de"  # main before the engine split (fine/des.py, fine/links.py), with the sync-PS receive rule

CHILD = """
import json, sys, time
from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy
try:
    from sgdscale.fine.ps import simulate_ps as simulate
except ImportError:
    from sgdscale.fine.des import simulate_des as simulate
kind, shards = sys.argv[1], int(sys.argv[2])
profile = load_profile("resnet50")
began = time.process_time()
out = simulate(profile, Cluster(32, ps_count=shards), Strategy(kind=kind, grouping="per-tensor"),
               CommModel.from_link(10e9, 20e-6), iterations=20, warmup=5)
print(json.dumps({"cpu_s": time.process_time() - began, "throughput": out.throughput}))
"""


def run(src: Path, kind: str, shards: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", CHILD, kind, str(shards)], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", nargs="?", default=BEFORE, help="the revision to compare with (default: before the split)")
    parser.add_argument("--output", default="ps_engine_ab", help="results/NAME.{json,md}")
    args = parser.parse_args()
    revision, output = args.revision, args.output
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        trees = {revision: Path(tmp) / "src", "this tree": ROOT / "src"}
        runs: dict[str, dict[str, list[dict]]] = {name: {} for name in trees}
        for _ in range(ROUNDS):
            for kind, shards in CASES:
                for name, src in trees.items():
                    runs[name].setdefault(f"{kind} {shards}", []).append(run(src, kind, shards))
    rows = []
    for kind, shards in CASES:
        key = f"{kind} {shards}"
        a, b = runs[revision][key], runs["this tree"][key]
        best_a, best_b = min(r["cpu_s"] for r in a), min(r["cpu_s"] for r in b)
        same = {r["throughput"] for r in a} == {r["throughput"] for r in b}
        rows.append({"case": key, "before_best_cpu_s": best_a, "after_best_cpu_s": best_b,
                     "after_over_before": best_b / best_a, "identical_throughput": same,
                     "before_runs": a, "after_runs": b})
        print(key, f"{best_a:.3f} s -> {best_b:.3f} s ({best_b / best_a - 1:+.1%})", "identical" if same else "DIFFER")
    RESULTS.mkdir(parents=True, exist_ok=True)
    environment = {"revision": revision, "rounds": ROUNDS, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "load_average_at_end": list(os.getloadavg()), "python": sys.version.split()[0]}
    (RESULTS / f"{output}.json").write_text(json.dumps({"environment": environment, "results": rows}, indent=1))
    title = ("before and after the engine split" if revision == BEFORE else f"{revision} against this tree")
    lines = [f"# Parameter-server simulation speed, {title}", "",
             f"`benchmarks/ps_engine_ab.py {' '.join(sys.argv[1:])}`: resnet50, per-tensor, 32 workers, 20 iterations + 5 warm-up; "
             f"best CPU time of {ROUNDS} alternating runs each (load average at the end: "
             f"{', '.join(f'{x:.1f}' for x in environment['load_average_at_end'])}).", "",
             f"| case | {revision} | this tree | change | same prediction |", "|---|---:|---:|---:|---|"]
    lines += [f"| {r['case']} | {r['before_best_cpu_s']:.3f} s | {r['after_best_cpu_s']:.3f} s | "
              f"{r['after_over_before'] - 1:+.1%} | {'yes' if r['identical_throughput'] else 'NO'} |" for r in rows]
    (RESULTS / f"{output}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
