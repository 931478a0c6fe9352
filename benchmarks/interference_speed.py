"""Speed of the fine sync all-reduce predictor with and without the interference model.

resnet50 (built-in profile), 1,024 workers at 10 Gbit/s, 100 steps + 10 warm-up, DDP buckets and
per-tensor groups; best of 15. Run it from the branch and from main to compare:

    PYTHONPATH=src .venv/bin/python benchmarks/interference_speed.py            # no interference
    PYTHONPATH=src .venv/bin/python benchmarks/interference_speed.py itf        # kc=1.5, km=1.3
"""
import sys, time
from sgdscale.profile import load_profile
from sgdscale.cluster import Cluster
from sgdscale.strategy import Strategy
from sgdscale.comm.cost import CommModel
from sgdscale.fine import simulate
p = load_profile("resnet50")
comm = CommModel.from_link(10e9, 20e-6)
extra = sys.argv[1:]
if extra:
    from sgdscale.comm.interference import Interference, with_interference
    comm = with_interference(comm, Interference(1.5, 1.3))
for grouping in ("buckets", "per-tensor"):
    times = []
    for _ in range(15):
        began = time.perf_counter()
        simulate(p, Cluster(1024, 10e9), Strategy(grouping=grouping), comm)
        times.append(time.perf_counter() - began)
    best = min(times)
    print(f"{grouping}: {best * 1e3:.1f} ms (best of 15)")
