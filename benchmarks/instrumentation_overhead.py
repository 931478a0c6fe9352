"""What progress reporting costs inside the measured window, before and after the mmap counter.

Two measurements:
1. per call: the old report (write the count to a temporary file, rename it over progress-R)
   against the new one (a store into the mmap'd counter), 3,000 calls each, in this process;
   divided by a step time this is the fraction of the window the report costs.
2. end to end: the same short real run (DDP, 2 local workers, a small MLP with steps of a few
   ms, so a per-iteration cost shows most) with progress reporting `file` (the old code),
   `mmap` (today's) and `off`, interleaved, several repeats; median throughput and spread.

Run under the shared CPU lock so other work disturbs it less:
    flock /tmp/sgdscale-cpu.lock env PYTHONPATH=src .venv/bin/python benchmarks/instrumentation_overhead.py [--repeats 5]
Writes benchmarks/results/instrumentation_overhead.{json,txt}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
VARIANTS = ("file", "mmap", "off")


# ----------------------------------------------------------------------------- rank targets


def _old_report(ctx, iterations_done: int) -> None:
    """The report as it was before the mmap counter (runtime/rank.py before this change)."""
    path = ctx.out_dir / f"progress-{ctx.rank}"
    tmp = ctx.out_dir / f".progress-{ctx.rank}.tmp"
    tmp.write_text(str(iterations_done))
    os.replace(tmp, path)


def train_file(ctx):
    from sgdscale.runtime.train import train_rank

    ctx.report_progress = lambda done: _old_report(ctx, done)
    return train_rank(ctx)


def train_mmap(ctx):
    from sgdscale.runtime.train import train_rank

    return train_rank(ctx)


def train_off(ctx):
    from sgdscale.runtime.train import train_rank

    ctx.report_progress = lambda done: None
    return train_rank(ctx)


# ----------------------------------------------------------------------------- driver


def per_call_us(calls: int = 3000) -> dict[str, float]:
    from sgdscale.runtime.rank import RankContext

    out = {}
    with tempfile.TemporaryDirectory() as folder:
        ctx = RankContext(rank=0, world_size=1, config={}, out_dir=Path(folder))
        for name, report in (("file", lambda i: _old_report(ctx, i)), ("mmap", ctx.report_progress)):
            samples = []
            for _ in range(5):
                start = time.perf_counter()
                for i in range(calls):
                    report(i)
                samples.append((time.perf_counter() - start) / calls * 1e6)
            out[name] = statistics.median(samples)
    return out


def end_to_end(repeats: int, iterations: int) -> list[dict]:
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.measurement import measurement_from_json
    from sgdscale.runtime.train import TrainConfig, validate

    config = validate(TrainConfig(model="mlp", workers=2, batch_size=16, iterations=iterations, warmup=5,
                                  model_options={"width": 256, "depth": 3, "input_dim": 256}))
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    rows = []
    for repeat in range(repeats):
        for variant in VARIANTS:
            result = launch(f"instrumentation_overhead:train_{variant}", asdict(config), config.world_size,
                            timeout_s=300, env=env)
            m = measurement_from_json(result.results[0])
            rows.append({"repeat": repeat, "variant": variant, "throughput": m.throughput,
                         "step_mean_s": m.iteration_s.mean})
            print(f"repeat {repeat} {variant:4s}: {m.throughput:8.1f} samples/s, step mean "
                  f"{m.iteration_s.mean * 1e3:.2f} ms", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    from sgdscale.jsonio import write_json_atomic

    lines = []
    calls = per_call_us()
    rows = end_to_end(args.repeats, args.iterations)
    steps = statistics.median(r["step_mean_s"] for r in rows)
    lines.append(f"per report call: old file write+rename {calls['file']:.2f} us, mmap store {calls['mmap']:.3f} us")
    lines.append(f"as a fraction of the median step here ({steps * 1e3:.2f} ms): old {calls['file'] * 1e-6 / steps:.3%}, "
                 f"mmap {calls['mmap'] * 1e-6 / steps:.4%}")
    off = {r["repeat"]: r["throughput"] for r in rows if r["variant"] == "off"}
    summary = {}
    for variant in VARIANTS:
        values = [r["throughput"] for r in rows if r["variant"] == variant]
        paired = [1 - r["throughput"] / off[r["repeat"]] for r in rows if r["variant"] == variant]
        summary[variant] = {"median_throughput": statistics.median(values), "min": min(values), "max": max(values),
                            "median_overhead_vs_off": statistics.median(paired),
                            "overhead_vs_off_range": [min(paired), max(paired)]}
        lines.append(f"{variant:4s}: throughput median {statistics.median(values):.1f} samples/s "
                     f"(range {min(values):.1f}-{max(values):.1f}); overhead vs off in the same repeat: median "
                     f"{statistics.median(paired):+.2%}, range {min(paired):+.2%} .. {max(paired):+.2%}")
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    write_json_atomic(RESULTS / "instrumentation_overhead.json",
                      {"per_call_us": calls, "runs": rows, "summary": summary, "argv": sys.argv[1:],
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    (RESULTS / "instrumentation_overhead.txt").write_text(
        "\n".join(f"repeat {r['repeat']} {r['variant']}: {r['throughput']:.1f} samples/s, step mean "
                  f"{r['step_mean_s'] * 1e3:.2f} ms" for r in rows) + "\n" + text + "\n")


if __name__ == "__main__":
    main()
