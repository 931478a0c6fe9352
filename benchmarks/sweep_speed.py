"""Sweep throughput in predictions per second: in this process (one core), a local pool of 2
processes, and a Dask LocalCluster of 2 worker processes (one thread each).

The grid: resnet50, workers 1-256:x2 (9 counts), 3 bandwidths, all-reduce (buckets 5/25 MiB,
per-tensor, mg-wfbp) and sync/async PS (per-tensor, 1/4 shards), coarse method: a prediction is
one row. Each run writes a fresh Parquet file. The machine's load average is recorded (2 shared
cores). Writes benchmarks/results/sweep_speed.{json,txt}.
    env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sweep_speed.py
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from sgdscale import sweep  # noqa: E402
from sgdscale.jsonio import write_json_atomic  # noqa: E402

RESULTS = Path(__file__).parent / "results"
REPEATS = int(os.environ.get("REPEATS", "2"))
GRID = {"profile": "resnet50", "workers": "1-256:x2", "bandwidth": ["1Gbit", "10Gbit", "100Gbit"],
        "strategy": ["allreduce", "ps-sync", "ps-async"], "grouping": ["buckets", "per-tensor", "mg-wfbp"],
        "bucket_mb": [5, 25], "ps": [1, 4]}


def timed(tasks, **how) -> dict:
    runs, loads = [], []
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as tmp:
            loads.append(os.getloadavg()[0])
            stats = sweep.run_sweep(tasks, f"{tmp}/s.parquet", **how)
            runs.append(stats.wall_s)
    rows = stats.predictions
    return {"rows": rows, "tasks": len(tasks), "best_s": min(runs), "median_s": statistics.median(runs), "runs_s": runs,
            "best_predictions_per_s": rows / min(runs), "median_predictions_per_s": rows / statistics.median(runs),
            "load_avg_1min": loads}


def main() -> int:
    from distributed import LocalCluster

    tasks = sweep.expand(GRID)
    results = {"one core (in process)": timed(tasks, jobs=1), "local pool, 2 processes": timed(tasks, jobs=2)}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        results["Dask LocalCluster, 2 workers"] = timed(tasks, scheduler=cluster.scheduler_address)
    lines = [f"sweep speed: resnet50, {len(tasks)} tasks, {results['one core (in process)']['rows']} predictions "
             f"(coarse), Parquet output; best/median of {REPEATS}", ""]
    for name, r in results.items():
        lines.append(f"{name:<32} best {r['best_predictions_per_s']:7.1f} predictions/s ({r['best_s']:.2f} s), "
                     f"median {r['median_predictions_per_s']:7.1f} /s; load {min(r['load_avg_1min']):.1f}-"
                     f"{max(r['load_avg_1min']):.1f}")
    print("\n".join(lines))
    environment = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "grid": GRID, "repeats": REPEATS}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS / "sweep_speed.json", {"environment": environment, "results": results})
    (RESULTS / "sweep_speed.txt").write_text("\n".join(lines + ["", repr(environment), ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
