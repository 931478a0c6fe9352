"""How much does per-layer instrumentation distort the step it measures?

For each model, profile it REPEATS times (each run interleaves instrumented and uninstrumented
steps) and report the gap between the sum of the instrumented parts and the uninstrumented step:
mean-based (`gap_fraction`, what `sgdscale show` prints) and the median over adjacent step pairs
(`paired_median_gap_fraction`, robust to a busy neighbour). Each run holds the shared CPU lock.

    .venv/bin/python benchmarks/profile_overhead.py                 # default models, 3 repeats
    .venv/bin/python benchmarks/profile_overhead.py --repeats 5 gpt2 resnet50

Writes benchmarks/results/profile_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_profiles import CONFIGS, MACHINE, RESULTS, cpu_lock, wait_for_quiet  # noqa: E402

DEFAULT_MODELS = ["cnn", "mlp", "gpt2", "bert", "resnet18", "mobilenet_v2", "densenet121", "resnet50", "alexnet"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=10, help="measured steps per run (and as many plain)")
    args = parser.parse_args()

    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    results = {}
    for model in args.models:
        kwargs, batch, warmup, _ = CONFIGS[model]
        runs = []
        for _ in range(args.repeats):
            workload = build_workload(model, **kwargs)
            with cpu_lock():
                wait_for_quiet(0.9, 60.0)
                profile = profile_workload(workload, batch, warmup=warmup, iterations=args.iterations, threads=1)
            c = profile.provenance["consistency"]
            runs.append({
                "instrumented_sum_s": c["instrumented_sum_s"],
                "uninstrumented_mean_s": c["uninstrumented_mean_s"],
                "gap_fraction": c["gap_fraction"],
                "paired_median_gap_fraction": c["paired_median_gap_fraction"],
            })
        hooks = len(profile.layers) + len(profile.tensors)
        results[model] = {
            "batch_size": batch,
            "build_options": kwargs,
            "hook_calls_per_step": hooks,
            "runs": runs,
            "median_gap_fraction": statistics.median(r["gap_fraction"] for r in runs),
            "median_paired_gap_fraction": statistics.median(r["paired_median_gap_fraction"] for r in runs),
            "max_abs_gap_fraction": max(abs(r["gap_fraction"]) for r in runs),
        }
        r = results[model]
        print(f"{model:13s} step {runs[-1]['uninstrumented_mean_s'] * 1e3:8.1f} ms  hooks/step {hooks:4d}  "
              f"gap median {r['median_gap_fraction']:+6.1%} (max |gap| {r['max_abs_gap_fraction']:.1%})  "
              f"paired median {r['median_paired_gap_fraction']:+6.1%}", flush=True)

    RESULTS.mkdir(parents=True, exist_ok=True)
    meta = {"machine": MACHINE, "repeats": args.repeats, "iterations": args.iterations}
    (RESULTS / "profile_overhead.json").write_text(json.dumps({"meta": meta, "models": results}, indent=1) + "\n")
    lines = [
        "# Instrumentation overhead of the per-layer profiler",
        "",
        f"`benchmarks/profile_overhead.py` on a {MACHINE}: {args.repeats} runs per model, each with "
        f"{args.iterations} instrumented steps interleaved with {args.iterations} uninstrumented ones.",
        "gap = (sum of instrumented parts - uninstrumented step) / uninstrumented step. Raw runs in",
        "`profile_overhead.json`.",
        "",
        "| model | batch | uninstrumented step | hook calls/step | median gap | max abs gap | median paired gap |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, r in results.items():
        step = statistics.median(x["uninstrumented_mean_s"] for x in r["runs"])
        lines.append(f"| {model} | {r['batch_size']} | {step * 1e3:.1f} ms | {r['hook_calls_per_step']} | "
                     f"{r['median_gap_fraction']:+.1%} | {r['max_abs_gap_fraction']:.1%} | "
                     f"{r['median_paired_gap_fraction']:+.1%} |")
    (RESULTS / "profile_overhead.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
