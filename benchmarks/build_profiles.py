"""Regenerate the built-in profiles (src/sgdscale/data/profiles/<model>.json) with the real profiler.

Each model is profiled while holding the shared CPU lock (/tmp/sgdscale-cpu.lock), one model at a
time, so other timing-sensitive work on this shared machine does not overlap a measurement.
Other work that does not take the lock (test suites) still competes for the 2 cores, so after
taking the lock the script waits (up to --quiet-wait-s, short: others queue on the lock meanwhile)
until the rest of the machine leaves at least one core free (--max-busy-cores), and records the busy cores seen before the measurement in the provenance.
Sizes are chosen so one model takes under about a minute on the 2-core VM with 1 thread.

Also writes benchmarks/results/profile_overhead_builtin.{json,md}: per model, the totals and the
gap between the sum of the instrumented parts and the uninstrumented step.

    .venv/bin/python benchmarks/build_profiles.py                 # all models
    .venv/bin/python benchmarks/build_profiles.py resnet18 gpt2   # some
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
import time
from pathlib import Path

from sgdscale.models import BUILTIN_MODELS

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "src" / "sgdscale" / "data" / "profiles"
RESULTS = ROOT / "benchmarks" / "results"
LOCK = "/tmp/sgdscale-cpu.lock"
MACHINE = "2-core x86_64 VM CPU, 1 thread"

# model -> (build_workload kwargs, batch size, warmup, iterations); the model and batch are the
# built-in name's (sgdscale.models), so `sgdscale train NAME` runs the model profiled here.
_RUNS = {"resnet18": (3, 20), "resnet50": (2, 12), "vgg16": (2, 10), "alexnet": (3, 20), "mobilenet_v2": (3, 20),
         "densenet121": (2, 12), "gpt2": (3, 20), "bert": (3, 20), "mlp": (5, 30), "cnn": (5, 30)}
CONFIGS: dict[str, tuple[dict, int, int, int]] = {
    name: (dict(BUILTIN_MODELS[name].options), BUILTIN_MODELS[name].batch_size, *runs) for name, runs in _RUNS.items()
}


@contextlib.contextmanager
def cpu_lock():
    with open(LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def busy_cores(interval_s: float = 1.0) -> float:
    """Cores busy over the last `interval_s` (from /proc/stat), whoever uses them."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]), idle

    total0, idle0 = sample()
    time.sleep(interval_s)
    total1, idle1 = sample()
    busy = 1.0 - (idle1 - idle0) / max(1, total1 - total0)
    return busy * (os.cpu_count() or 1)


def wait_for_quiet(max_busy: float, limit_s: float) -> float:
    """Wait until other processes use less than `max_busy` cores; return the last reading."""
    deadline = time.monotonic() + limit_s
    busy = busy_cores()
    while busy > max_busy and time.monotonic() < deadline:
        busy = busy_cores(2.0)
    return busy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(CONFIGS), help="models to (re)build")
    parser.add_argument("--max-busy-cores", type=float, default=0.9,
                        help="wait until the rest of the machine uses less than this many cores")
    parser.add_argument("--quiet-wait-s", type=float, default=60.0, help="give up waiting after this long")
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in CONFIGS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {list(CONFIGS)}")

    from sgdscale.profile import load_profile, save_profile
    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    summary_path = RESULTS / "profile_overhead_builtin.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    for model in args.models:
        kwargs, batch, warmup, iterations = CONFIGS[model]
        workload = build_workload(model, **kwargs)
        with cpu_lock():
            busy = wait_for_quiet(args.max_busy_cores, args.quiet_wait_s)
            if busy > args.max_busy_cores:
                print(f"{model}: machine still busy ({busy:.1f} cores) after {args.quiet_wait_s:.0f} s; "
                      "measuring anyway (recorded in the provenance)", file=sys.stderr)
            started = time.perf_counter()
            profile = profile_workload(
                workload, batch, warmup=warmup, iterations=iterations, threads=1, device="cpu",
                extra_provenance={
                    "machine": MACHINE,
                    "built_by": "benchmarks/build_profiles.py (under flock /tmp/sgdscale-cpu.lock)",
                    "build_options": kwargs,
                    "other_busy_cores_before": round(busy, 2),
                },
            )
            wall = time.perf_counter() - started
        path = PROFILES / f"{model}.json"
        save_profile(profile, path)
        path.chmod(0o644)  # package data: readable by everyone (the atomic writer creates 0600 files)
        loaded = load_profile(path)
        assert loaded == profile, f"{model}: round trip changed the profile"
        c = profile.provenance["consistency"]
        summary[model] = {
            "batch_size": batch,
            "input": profile.input,
            "iterations": iterations,
            "layers": len(profile.layers),
            "forward_s": profile.forward_s,
            "backward_s": profile.backward_s,
            "data_s": profile.step.data_s,
            "optimizer_s": profile.step.optimizer_s,
            "sum_of_parts_s": profile.compute_s,
            "uninstrumented_mean_s": c["uninstrumented_mean_s"],
            "uninstrumented_p50_s": c["uninstrumented_p50_s"],
            "gap_fraction": c["gap_fraction"],
            "params": profile.param_count,
            "gradient_bytes": profile.gradient_bytes,
            "profiling_wall_s": wall,
            "date_utc": profile.provenance["date_utc"],
            "other_busy_cores_before": round(busy, 2),
        }
        print(
            f"{model:13s} fwd {profile.forward_s * 1e3:8.1f} ms  bwd {profile.backward_s * 1e3:8.1f} ms  "
            f"parts {profile.compute_s * 1e3:8.1f} ms  plain {c['uninstrumented_mean_s'] * 1e3:8.1f} ms  "
            f"gap {c['gap_fraction']:+6.1%}  params {profile.param_count:>11,}  ({wall:.0f} s)",
            flush=True,
        )
        RESULTS.mkdir(parents=True, exist_ok=True)
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    write_markdown(summary)
    return 0


def write_markdown(summary: dict) -> None:
    lines = [
        "# Built-in profiles: totals and instrumentation gap",
        "",
        f"Generated by `benchmarks/build_profiles.py` on a {MACHINE}; raw numbers in",
        "`profile_overhead_builtin.json`. gap = (sum of instrumented parts - mean uninstrumented step)",
        "/ mean uninstrumented step; both kinds of step are interleaved in the same run.",
        "",
        "busy = cores other processes used just before the measurement (the lock does not stop test suites).",
        "",
        "| model | batch | input | forward | backward | optimizer | sum of parts | uninstrumented step | gap | params | gradients | busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, s in summary.items():
        shape = "x".join(str(d) for d in s["input"].get("batch_shape", [])) if isinstance(
            s["input"].get("batch_shape"), list) else ""
        lines.append(
            f"| {model} | {s['batch_size']} | {shape} | {s['forward_s'] * 1e3:.1f} ms | {s['backward_s'] * 1e3:.1f} ms | "
            f"{s['optimizer_s'] * 1e3:.1f} ms | {s['sum_of_parts_s'] * 1e3:.1f} ms | "
            f"{s['uninstrumented_mean_s'] * 1e3:.1f} ms | {s['gap_fraction']:+.1%} | {s['params']:,} | "
            f"{s['gradient_bytes'] / 1e6:.1f} MB | {s.get('other_busy_cores_before', '-')} |"
        )
    (RESULTS / "profile_overhead_builtin.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
