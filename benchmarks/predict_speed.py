"""How long a fine-grained prediction takes, on one core.

Sweeps (sync all-reduce with per-iteration variability, the fast vectorized path):
- workers 1..1,024 on the built-in resnet50 profile (161 gradient tensors), grouping buckets and
  per-tensor (161 collectives per step), 100 iterations after 10 warm-up;
- layers 10..2,000 (synthetic profiles, one tensor per layer, per-tensor grouping), 1,024 workers;
- iterations 10..1,000 at 1,024 workers on resnet50;
once the parameter-server event simulation (sgdscale.fine.ps) for sync and async PS with 64 workers x
100 iterations; the async-PS curve (resnet50, 1 server, 10 Gbit/s, per-tensor) against workers
(64, 256, 1,024) and iterations (10, 100, 300), with the predicted throughput, all through the same
`sgdscale.fine.simulate` entry point as `sgdscale predict`; and the interpreter's floor for an
event simulation: one heap push, one pop and one handler call per event.

Run it alone on the machine, single-threaded:
    flock /tmp/sgdscale-cpu.lock env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
        .venv/bin/python benchmarks/predict_speed.py
Writes benchmarks/results/predict_speed.json (raw timings) and predict_speed.md (tables + the
cProfile of the hot path).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import cProfile  # noqa: E402
import io  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from sgdscale.cluster import Cluster  # noqa: E402
from sgdscale.comm.cost import CommModel  # noqa: E402
from sgdscale.fine import simulate  # noqa: E402
from sgdscale.jsonio import write_json_atomic  # noqa: E402
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes, load_profile  # noqa: E402
from sgdscale.strategy import Strategy  # noqa: E402

RESULTS = Path(__file__).parent / "results"
REPEATS = 3
COMM = CommModel.from_link(10e9, 20e-6)


def synthetic(layers: int, samples: int = 12, seed: int = 0) -> Profile:
    """A profile with `layers` layers, one 1 MB gradient each, and per-layer samples."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(layers):
        f = rng.uniform(2e-5, 5e-4, samples)
        b = 2 * f * rng.uniform(0.8, 1.3, samples)
        out.append(Layer(name=f"l{i}", forward_s=float(f.mean()), backward_s=float(b.mean()),
                         forward_samples_s=list(f), backward_samples_s=list(b),
                         params=[ParamTensor(name=f"l{i}.w", numel=250_000, bytes=1_000_000)]))
    return Profile(model=f"synthetic-{layers}", batch_size=32, layers=out, step=StepTimes(optimizer_s=1e-3))


def timed(profile: Profile, workers: int, strategy: Strategy, iterations: int, warmup: int = 10) -> dict:
    """Best and median wall time of REPEATS runs (best = least disturbed by anything else)."""
    times, cpu = [], []
    for repeat in range(REPEATS):
        began, began_cpu = time.perf_counter(), time.process_time()
        outcome = simulate(profile, Cluster(workers), strategy, COMM, iterations=iterations, warmup=warmup,
                           seed=repeat, variability=True)
        times.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    return {
        "model": profile.model, "layers": len(profile.layers), "tensors": len(profile.tensors),
        "workers": workers, "strategy": strategy.kind, "grouping": strategy.grouping, "iterations": iterations,
        "warmup": warmup, "best_s": min(times), "median_s": statistics.median(times), "runs_s": times,
        "cpu_s": cpu, "predicted_step_s": float(np.mean(outcome.iteration_s)),
    }


ASYNC_WORKERS = (64, 256, 1024)
ASYNC_ITERATIONS = (10, 100, 300)


def async_run(profile: Profile, workers: int, iterations: int, repeats: int) -> dict:
    """Wall time of async PS (1 server, per-tensor) through `simulate`, with what it predicted."""
    times, cpu, outcome = [], [], None
    for repeat in range(repeats):
        began, began_cpu = time.perf_counter(), time.process_time()
        outcome = simulate(profile, Cluster(workers, ps_count=1), Strategy(kind="ps-async", grouping="per-tensor"),
                           COMM, iterations=iterations, warmup=10, seed=repeat)
        times.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    messages = workers * (iterations + 10) * 2 * len(profile.tensors)
    return {"model": profile.model, "workers": workers, "strategy": "ps-async", "ps_count": 1,
            "grouping": "per-tensor", "iterations": iterations, "warmup": 10, "best_s": min(times),
            "median_s": statistics.median(times), "runs_s": times, "cpu_s": cpu, "messages": messages,
            "us_per_message": 1e6 * min(cpu) / messages, "throughput": outcome.throughput,
            "predicted_step_s": float(np.mean(outcome.iteration_s))}


def async_curve(profile: Profile) -> list[dict]:
    """Async PS against workers (100 iterations) and iterations (64 workers)."""
    out = []
    cases = [(w, 100) for w in ASYNC_WORKERS] + [(64, i) for i in ASYNC_ITERATIONS if i != 100]
    for workers, iterations in cases:
        out.append(async_run(profile, workers, iterations, REPEATS if workers * iterations <= 6400 else 1))
        r = out[-1]
        print("async", workers, iterations, f"{r['best_s']:.2f} s", f"{r['us_per_message']:.2f} us/message",
              f"{r['throughput']:.1f}/s", flush=True)
    return out


def event_floor_us(events: int = 2_000_000, heap_size: int = 1000) -> float:
    """CPU microseconds per event of the barest event loop: pop, dispatch to a call, push."""
    import heapq
    import itertools

    def handler(a: int, b: int, now: float) -> None:
        return None

    heap: list = []
    seq = itertools.count()
    for i in range(heap_size):
        heapq.heappush(heap, (i * 1e-3, next(seq), 0, i, 0))
    began = time.process_time()
    for _ in range(events):
        now, _, kind, a, b = heapq.heappop(heap)
        if kind == 0:
            handler(a, b, now)
        heapq.heappush(heap, (now + 1.0, next(seq), 0, a, b))
    return 1e6 * (time.process_time() - began) / events


def hot_path_profile(profile: Profile) -> str:
    stats_out = io.StringIO()
    profiler = cProfile.Profile()
    profiler.enable()
    simulate(profile, Cluster(1024), Strategy(grouping="per-tensor"), COMM, iterations=100, warmup=10)
    profiler.disable()
    pstats.Stats(profiler, stream=stats_out).sort_stats("tottime").print_stats(10)
    return stats_out.getvalue()


def main() -> int:
    resnet = load_profile("resnet50")
    rows: dict[str, list[dict]] = {"workers": [], "layers": [], "iterations": [], "des": []}
    for grouping in ("buckets", "per-tensor"):
        for workers in (1, 4, 16, 64, 256, 1024):
            rows["workers"].append(timed(resnet, workers, Strategy(grouping=grouping), 100))
            print(rows["workers"][-1]["grouping"], workers, f"{rows['workers'][-1]['best_s']:.4f} s", flush=True)
    for layers in (10, 100, 500, 2000):
        rows["layers"].append(timed(synthetic(layers), 1024, Strategy(grouping="per-tensor"), 100))
        print("layers", layers, f"{rows['layers'][-1]['best_s']:.4f} s", flush=True)
    for iterations in (10, 100, 1000):
        rows["iterations"].append(timed(resnet, 1024, Strategy(grouping="per-tensor"), iterations))
        print("iterations", iterations, f"{rows['iterations'][-1]['best_s']:.4f} s", flush=True)
    rows["streams"] = []  # what gloo's two collective threads (sgdscale.comm.streams) cost, in the same run
    for grouping in ("buckets", "per-tensor"):
        for workers in (4, 1024):
            for slots in (1, 2):
                row = timed(resnet, workers, Strategy(grouping=grouping, collectives_at_once=slots), 100)
                rows["streams"].append({**row, "collectives_at_once": slots})
                print("streams", grouping, workers, slots, f"{row['best_s']:.4f} s", flush=True)
    des_error = None
    for kind in ("ps-async", "ps-sync"):
        for shards in (1, 2):
            for grouping in ("per-tensor", "buckets"):
                began, began_cpu = time.perf_counter(), time.process_time()
                outcome = simulate(resnet, Cluster(64, ps_count=shards), Strategy(kind=kind, grouping=grouping),
                                   COMM, iterations=100, warmup=10)
                elapsed, cpu = time.perf_counter() - began, time.process_time() - began_cpu
                rows["des"].append({"model": resnet.model, "workers": 64, "strategy": kind, "ps_count": shards,
                                    "grouping": grouping, "iterations": 100, "warmup": 10, "best_s": elapsed,
                                    "median_s": elapsed, "runs_s": [elapsed], "cpu_s": [cpu],
                                    "predicted_step_s": float(np.mean(outcome.iteration_s))})
                print(kind, shards, grouping, f"{elapsed:.3f} s wall, {cpu:.3f} s CPU", flush=True)
    rows["async"] = async_curve(resnet)
    rows["event_floor_us"] = [event_floor_us() for _ in range(REPEATS)]
    print("event floor", rows["event_floor_us"], flush=True)
    profile_text = hot_path_profile(resnet)
    environment = {
        "python": sys.version.split()[0], "numpy": np.__version__, "platform": platform.platform(),
        "processor": platform.processor(), "cpu_count": os.cpu_count(),
        "threads": {var: os.environ.get(var) for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")},
        "repeats": REPEATS, "comm": "ring all-reduce, 10 Gbit/s, 20 us",
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average_at_end": list(os.getloadavg()),  # other work on the machine inflates wall times
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS / "predict_speed.json", {"environment": environment, "results": rows,
                                                        "des_error": des_error, "hot_path_cprofile": profile_text})
    (RESULTS / "predict_speed.md").write_text(markdown(rows, environment, des_error, profile_text))
    return 0


def markdown(rows: dict[str, list[dict]], environment: dict, des_error: str | None, profile_text: str) -> str:
    def table(items: list[dict], key: str, label: str) -> list[str]:
        """`key`/`label` name the swept quantity; it is bold in its column."""
        lines = ["| model | layers | grouping | workers | iterations | best | median | CPU (best) |",
                 "|---|---:|---|---:|---:|---:|---:|---:|"]
        for r in items:
            cells = {name: str(r[name]) for name in ("layers", "workers", "iterations")}
            cells[key] = f"**{cells[key]}**"
            cpu = f"{min(r['cpu_s']) * 1e3:.1f} ms" if r.get("cpu_s") else ""
            lines.append(f"| {r['model']} | {cells['layers']} | {r.get('grouping', r['strategy'])} | "
                         f"{cells['workers']} | {cells['iterations']} | {r['best_s'] * 1e3:.1f} ms | "
                         f"{r['median_s'] * 1e3:.1f} ms | {cpu} |")
        return lines

    out = ["# Fine-grained prediction speed", "",
           "Generated by `benchmarks/predict_speed.py` (one thread). "
           f"Load average at the end of the run: {', '.join(f'{x:.1f}' for x in environment.get('load_average_at_end', []))} "
           "(the machine is shared: wall times are inflated by the other work, CPU times less so). "
           f"Python {environment['python']}, numpy {environment['numpy']}, {environment['platform']}; "
           f"best and median of {environment['repeats']} runs; each run simulates warm-up + iterations steps "
           "with per-iteration variability (sync all-reduce: the vectorized exact path).", "",
           "## Workers (resnet50, 161 gradient tensors, 100 iterations + 10 warm-up)", ""]
    out += table(rows["workers"], "workers", "workers")
    out += ["", "## Layers (synthetic, one tensor per layer, per-tensor grouping, 1,024 workers)", ""]
    out += table(rows["layers"], "layers", "layers")
    out += ["", "## Iterations (resnet50, per-tensor grouping, 1,024 workers)", ""]
    out += table(rows["iterations"], "iterations", "iterations")
    if rows.get("streams"):
        out += ["", "## One stream or gloo's two threads (resnet50, 100 iterations + 10 warm-up; the same run)", "",
                "Two all-reduces at once (`sgdscale.comm.streams`, the default for a CPU profile) re-time each "
                "iteration's collectives in a Python loop wherever one is ready while another runs; "
                "`collectives_at_once=1` is one stream (NCCL's).", "",
                "| grouping | workers | one stream: CPU (best) | two threads: CPU (best) |", "|---|---:|---:|---:|"]
        by_key = {(r["grouping"], r["workers"], r["collectives_at_once"]): min(r["cpu_s"]) for r in rows["streams"]}
        for grouping, workers in dict.fromkeys((g, w) for g, w, _ in by_key):
            out.append(f"| {grouping} | {workers} | {by_key[grouping, workers, 1] * 1e3:.1f} ms | "
                       f"{by_key[grouping, workers, 2] * 1e3:.1f} ms |")
    out += ["", "## Parameter-server simulation, exact (resnet50, 64 workers, 100 iterations + 10 warm-up)", ""]
    if rows["des"]:
        out += ["| strategy | shards | grouping | workers | iterations | time | CPU |", "|---|---:|---|---:|---:|---:|---:|"]
        out += [f"| {r['strategy']} | {r.get('ps_count', 2)} | {r.get('grouping', 'buckets')} | {r['workers']} | "
                f"{r['iterations']} | {r['best_s']:.3f} s | "
                f"{min(r['cpu_s']):.3f} s |" if "cpu_s" in r else
                f"| {r['strategy']} | {r.get('ps_count', 2)} | {r.get('grouping', 'buckets')} | {r['workers']} | "
                f"{r['iterations']} | {r['best_s']:.3f} s | |" for r in rows["des"]]
    else:
        out.append(f"not measured: {des_error}")
    if rows.get("async"):
        out += ["", "## Asynchronous PS against workers and iterations (resnet50, 1 server, 10 Gbit/s, per-tensor, "
                "10 warm-up)", "",
                "Every iteration of every worker is simulated (two messages per gradient tensor per step: push and "
                "pull). CPU time per message is the run's CPU time over its messages.", "",
                "| workers | iterations | time (best) | median | CPU (best) | CPU per message | messages | "
                "predicted throughput |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows["async"]:
            out.append(f"| {r['workers']} | {r['iterations']} | {r['best_s']:.2f} s | {r['median_s']:.2f} s | "
                       f"{min(r['cpu_s']):.2f} s | {r['us_per_message']:.2f} us | {r['messages']:,} | "
                       f"{r['throughput']:.1f}/s |")
    if rows.get("event_floor_us"):
        floor = rows["event_floor_us"]
        out += ["", f"Interpreter floor, one heap pop + handler call + heap push per event (heap of 1,000): "
                f"{min(floor):.2f} us (best of {len(floor)}: {', '.join(f'{x:.2f}' for x in floor)})."]
    out += ["", "## Hot path (cProfile, resnet50 per-tensor, 1,024 workers, 110 steps)", "", "```",
            profile_text.strip(), "```", ""]
    return "\n".join(out)


def rewrite_markdown() -> int:
    """Regenerate predict_speed.md from the stored JSON (no new measurements)."""
    import json

    data = json.loads((RESULTS / "predict_speed.json").read_text())
    (RESULTS / "predict_speed.md").write_text(
        markdown(data["results"], data["environment"], data["des_error"], data["hot_path_cprofile"]))
    return 0


if __name__ == "__main__":
    sys.exit(rewrite_markdown() if "--markdown-only" in sys.argv else main())
