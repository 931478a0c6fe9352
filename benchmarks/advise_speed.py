"""How long `sgdscale advise` takes: resnet50 over 1-1,024 workers (doubling), coarse method.

One run per question set (the ranking alone, each question, all together), repeated REPEATS times;
best and median wall time, predictions made and candidates skipped by bounds, and the machine's
load average, since this 2-core machine is shared. One thread.
    env OMP_NUM_THREADS=1 .venv/bin/python benchmarks/advise_speed.py
Writes benchmarks/results/advise_speed.{json,txt}.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from sgdscale.advise import advise  # noqa: E402
from sgdscale.cluster import Cluster  # noqa: E402
from sgdscale.comm.cost import CommModel  # noqa: E402
from sgdscale.jsonio import write_json_atomic  # noqa: E402
from sgdscale.profile import load_profile  # noqa: E402

RESULTS = Path(__file__).parent / "results"
REPEATS = int(os.environ.get("REPEATS", "3"))
COUNTS = [2 ** i for i in range(11)]  # 1..1,024
QUESTIONS = {
    "ranking only": {},
    "--target-efficiency 0.8": {"target_efficiency": 0.8},
    "--target-throughput 2000/s": {"target_throughput": 2000.0},
    "--price-per-node-hour 3.2 --target-throughput 2000/s": {"price_per_node_hour": 3.2, "target_throughput": 2000.0},
    "--best-bucket": {"best_bucket": True},
    "all of the above": {"target_efficiency": 0.8, "target_throughput": 2000.0, "price_per_node_hour": 3.2,
                         "best_bucket": True},
}


def main() -> int:
    profile = load_profile("resnet50")
    cluster = Cluster(1, 10e9, 20e-6)
    comm = CommModel.from_link(10e9, 20e-6)
    rows = []
    lines = [f"advise speed: resnet50, workers 1-1024:x2, 10 Gbit/s, 20 us, coarse; {REPEATS} repeats", ""]
    for name, kwargs in QUESTIONS.items():
        times, loads = [], []
        for _ in range(REPEATS):
            loads.append(os.getloadavg()[0])
            began = time.perf_counter()
            advice = advise(profile, cluster, comm, COUNTS, **kwargs)
            times.append(time.perf_counter() - began)
        row = {"question": name, "best_s": min(times), "median_s": statistics.median(times), "runs_s": times,
               "predictions": advice.search["predictions"], "pruned_by_bound": advice.search["pruned_by_bound"],
               "configurations": advice.search["configurations"], "load_avg_1min": loads}
        rows.append(row)
        line = (f"{name:<55} best {row['best_s']:6.2f} s  median {row['median_s']:6.2f} s  "
                f"{row['predictions']:4d} predictions, {row['pruned_by_bound']:4d} skipped by bounds  "
                f"load {min(loads):.1f}-{max(loads):.1f}")
        print(line, flush=True)
        lines.append(line)
    environment = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
                   "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "repeats": REPEATS}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS / "advise_speed.json", {"environment": environment, "results": rows})
    (RESULTS / "advise_speed.txt").write_text("\n".join(lines + ["", repr(environment), ""]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
