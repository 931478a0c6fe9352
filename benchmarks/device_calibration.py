"""How well does roofline retargeting predict a profile measured on another "device"?

No GPU is available here, so the two device changes this machine can make stand in:
- 1 thread -> 2 threads (fp32): catalog vm-cpu-1t -> vm-cpu-2t;
- fp32 -> bf16 (1 thread; the model and inputs cast to bfloat16, which this CPU runs with AMX):
  vm-cpu-1t fp32 -> vm-cpu-1t bf16.
For each model and repeat, the script profiles the source and the target configuration
back to back (under the project CPU lock, after waiting up to a minute for the rest of the
machine to leave a core free; the busy cores seen are recorded per row), retargets the source profile with
`sgdscale.calibrate.retarget`, and compares it with the measured target profile:
- step error: predicted vs measured one-device step (sum of the profile's parts), in %;
- layer error: median and worst |error| over layers of (forward + backward) time, for layers
  taking at least 2% of the measured step;
- and the same two for the naive alternatives: uniform scaling by the ideal speed-up (2x for two
  threads, peak-FLOP ratio for bf16), and, for the layer shape only, uniform scaling to the
  measured step (what --device-throughput/--step-time do: exact total, source proportions).
Raw profiles and every number go to benchmarks/results/device_calibration/.

    .venv/bin/python benchmarks/device_calibration.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from build_profiles import busy_cores, cpu_lock, wait_for_quiet  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "device_calibration"

# name -> (zoo model, build options, batch size, iterations)
MODELS = {
    "cnn": ("cnn", {"image_size": 32, "width": 32}, 32, 8),
    "mlp": ("mlp", {"width": 1024, "depth": 4}, 64, 8),
    "gpt2-small": ("gpt2", {"layers": 2, "hidden": 256, "heads": 4, "vocab": 4096}, 8, 6),
    "resnet18": ("resnet18", {"image_size": 64}, 8, 4),
}
CASES = {
    "2threads": {"source": ("fp32", 1), "target": ("fp32", 2), "from": "vm-cpu-1t", "to": "vm-cpu-2t",
                 "ideal_factor": 0.5},
    "bf16": {"source": ("fp32", 1), "target": ("bf16", 1), "from": "vm-cpu-1t", "to": "vm-cpu-1t",
             "ideal_factor": 157e9 / 1082e9},
}


def layer_times(profile) -> list[float]:
    return [layer.forward_s + layer.backward_s for layer in profile.layers]


def layer_errors(predicted, measured) -> tuple[float, float]:
    """(median, max) |relative error| of per-layer forward+backward time over big layers."""
    step = measured.compute_s
    errors = [abs(p - m) / m for p, m in zip(layer_times(predicted), layer_times(measured)) if m >= 0.02 * step]
    return (statistics.median(errors), max(errors)) if errors else (0.0, 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    args = parser.parse_args()

    from sgdscale.calibrate import retarget, to_step_time
    from sgdscale.device import get_device
    from sgdscale.profile import load_profile, save_profile
    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    (OUT / "profiles").mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models:
        model, options, batch, iterations = MODELS[name]
        for repeat in range(args.repeats):
            measured = {}
            with cpu_lock():
                busy_before = wait_for_quiet(0.9, 60.0)
                for precision, threads in (("fp32", 1), ("fp32", 2), ("bf16", 1)):
                    path = OUT / "profiles" / f"{name}-{precision}-{threads}t-r{repeat}.json"
                    workload = build_workload(model, seed=0, **options)
                    profile = profile_workload(workload, batch, warmup=2, iterations=iterations, threads=threads,
                                               precision=precision, extra_provenance={"repeat": repeat})
                    save_profile(profile, path)
                    measured[(precision, threads)] = load_profile(path)
                busy_after = busy_cores(0.5)
            for case, spec in CASES.items():
                source, target = measured[spec["source"]], measured[spec["target"]]
                predicted = retarget(source, get_device(spec["to"]), spec["target"][0], get_device(spec["from"]),
                                     spec["source"][0])
                ideal = to_step_time(source, source.compute_s * spec["ideal_factor"])
                shape_only = to_step_time(source, target.compute_s)
                row = {
                    "model": name, "case": case, "repeat": repeat,
                    "source_step_s": source.compute_s, "measured_step_s": target.compute_s,
                    "roofline_step_s": predicted.compute_s, "ideal_step_s": ideal.compute_s,
                    "roofline_step_error": predicted.compute_s / target.compute_s - 1,
                    "ideal_step_error": ideal.compute_s / target.compute_s - 1,
                    "roofline_layer_error_median": layer_errors(predicted, target)[0],
                    "roofline_layer_error_max": layer_errors(predicted, target)[1],
                    "uniform_layer_error_median": layer_errors(shape_only, target)[0],
                    "uniform_layer_error_max": layer_errors(shape_only, target)[1],
                    "load_average_1m": target.provenance.get("load_average_1m"),
                    "other_busy_cores_before": round(busy_before, 2),
                    "busy_cores_after": round(busy_after, 2),
                }
                rows.append(row)
                print(f"{name:10s} {case:8s} r{repeat}  source {source.compute_s * 1e3:7.1f} ms  measured "
                      f"{target.compute_s * 1e3:7.1f} ms  roofline {predicted.compute_s * 1e3:7.1f} ms "
                      f"({row['roofline_step_error']:+6.1%})  ideal {ideal.compute_s * 1e3:7.1f} ms "
                      f"({row['ideal_step_error']:+6.1%})  layers: roofline median {row['roofline_layer_error_median']:.1%} "
                      f"max {row['roofline_layer_error_max']:.1%}, uniform median {row['uniform_layer_error_median']:.1%} "
                      f"max {row['uniform_layer_error_max']:.1%}  busy before {busy_before:.2f}", flush=True)
                (OUT / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    write_summary(rows)
    return 0


def write_summary(rows: list[dict]) -> None:
    lines = ["# Device calibration on this CPU: predicted vs measured one-device step", "",
             "Generated by `benchmarks/device_calibration.py`; every row in `results.json`, profiles in `profiles/`.",
             "Step error = predicted / measured - 1 (sum of the profile's parts). Over repeats: median [min, max].", "",
             "| model | case | measured step | roofline step error | ideal-ratio step error | roofline layer error (median / max) | uniform-scaling layer error (median / max) |",
             "|---|---|---|---|---|---|---|"]

    def span(values: list[float], pct: bool = True) -> str:
        f = (lambda v: f"{v:+.1%}") if pct else (lambda v: f"{v * 1e3:.1f} ms")
        return f"{f(statistics.median(values))} [{f(min(values))}, {f(max(values))}]"

    keys = sorted({(r["model"], r["case"]) for r in rows}, key=lambda k: (k[1], k[0]))
    for model, case in keys:
        rs = [r for r in rows if r["model"] == model and r["case"] == case]
        lines.append(
            f"| {model} | {case} | {span([r['measured_step_s'] for r in rs], pct=False)} | "
            f"{span([r['roofline_step_error'] for r in rs])} | {span([r['ideal_step_error'] for r in rs])} | "
            f"{statistics.median(r['roofline_layer_error_median'] for r in rs):.1%} / "
            f"{max(r['roofline_layer_error_max'] for r in rs):.1%} | "
            f"{statistics.median(r['uniform_layer_error_median'] for r in rs):.1%} / "
            f"{max(r['uniform_layer_error_max'] for r in rs):.1%} |")
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
