"""Real distributed runs on this machine (local processes, loopback): every strategy and grouping
for a few models, 2 workers. Ground-truth numbers, not predictions.

Run under the shared CPU lock so other work does not distort the timings:
    flock /tmp/sgdscale-cpu.lock .venv/bin/python benchmarks/runtime_local.py
Writes benchmarks/results/runtime_local.json (summary) and one measurement per run under
benchmarks/results/runtime_local/.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from sgdscale.jsonio import write_json_atomic
from sgdscale.runtime.measurement import save_measurement
from sgdscale.runtime.train import TrainConfig, run_training

RESULTS = Path(__file__).parent / "results"
MODELS = {
    "mlp": dict(model="mlp", batch_size=32),  # 4.2 M parameters, 16.8 MB of gradients
    "resnet18-32px": dict(model="resnet18", image_size=32, batch_size=16),  # 11.7 M parameters
}
STRATEGIES = [
    ("allreduce", dict(grouping="buckets")),
    ("allreduce", dict(grouping="single")),
    ("allreduce", dict(grouping="per-layer")),
    ("allreduce", dict(grouping="per-tensor")),
    ("ps-sync", dict(ps_count=1)),
    ("ps-async", dict(ps_count=1)),
]


def main(selected: list[str]) -> None:
    rows = []
    for label, model in MODELS.items():
        if selected and label not in selected:
            continue
        for workers in (1, 2):
            for strategy, extra in STRATEGIES:
                if workers == 1 and (strategy != "allreduce" or extra["grouping"] != "buckets"):
                    continue
                config = TrainConfig(workers=workers, strategy=strategy, iterations=20, warmup=3, **model, **extra)
                started = time.time()
                m = run_training(config, timeout_s=600)
                name = f"{label}-{workers}w-{strategy}-{extra.get('grouping', 'ps%d' % extra.get('ps_count', 0))}"
                save_measurement(m, RESULTS / "runtime_local" / f"{name}.json")
                compute = [sum(w.compute_s) / len(w.compute_s) for w in m.workers if w.compute_s]
                row = {
                    "run": name, "throughput": m.throughput, "step_mean_s": m.iteration_s.mean,
                    "step_p50_s": m.iteration_s.p50, "step_p95_s": m.iteration_s.p95,
                    "compute_mean_s": sum(compute) / len(compute) if compute else None,
                    "wall_s": time.time() - started,
                    # other processes on this shared 2-core machine distort timings; keep the evidence
                    "loadavg_1min_after": os.getloadavg()[0],
                }
                rows.append(row)
                print(f"{name:45s} {row['throughput']:8.1f} samples/s  step p50 {row['step_p50_s'] * 1e3:7.1f} ms"
                      f"  p95 {row['step_p95_s'] * 1e3:7.1f} ms"
                      + (f"  compute {row['compute_mean_s'] * 1e3:6.1f} ms" if compute else "")
                      + f"  load {row['loadavg_1min_after']:.1f}", flush=True)
    write_json_atomic(RESULTS / "runtime_local.json", {"environment": m.environment.model_dump(), "runs": rows})


if __name__ == "__main__":
    main(sys.argv[1:])
