"""Where a real run's extra CPU per step goes: every thread of every node, over the measured window.

Held-out sets 35 and 37 found the workers of real runs spending 1.3-1.4x their profile's CPU per
step (`benchmarks/cpu_per_step.py`), in every strategy and even for cnn, whose PS workers move only
0.38 MB a step. That file counts a node's cgroup as a whole. This samples, while a case runs on the
emulated cluster, the CPU time (`/proc/PID/task/TID/schedstat`, ns) of every thread of every process
in each node's cgroup, and splits each worker node's CPU per measured step into: the rank's main
thread (forward, backward, optimizer, DDP's hooks and copies, the PS client's calls), its other
threads (gloo's and autograd's), and any other process in the node. Cases are set 37's (3200
Mbit/s, 0.40 cores per node, 2 workers), plus one worker (no communication at all), interleaved per
round. The profile's CPU per step is its step x quota (a profile runs back to back, throttled).

    .venv/bin/python benchmarks/worker_cpu_threads.py [--models cnn,mlp] [--rounds 2] [--cases ps-sync:2,...]

Raw output: benchmarks/results/worker_cpu_threads.md (+ .json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

from profile_vs_run import MODELS, profile_step

from sgdscale.runtime.testbed import Testbed, _cgroup_pids  # the testbed's own reader of a node's processes
from sgdscale.runtime.train import TrainConfig, run_training

OUT = Path(__file__).resolve().parent / "results"
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_times(bed: Testbed) -> dict[tuple[int, int, int], tuple[str, float, float]]:
    """(node, pid, tid) -> (thread name, CPU seconds so far, of them in the kernel) for every thread in
    every node cgroup: schedstat's exact total, and /proc's stime (sampled at the clock tick)."""
    seen = {}
    for node in range(bed.nodes):
        for pid in _cgroup_pids(bed.cgroup(node)):
            task_dir = Path(f"/proc/{pid}/task")
            try:
                tids = [int(t) for t in (p.name for p in task_dir.iterdir())]
            except OSError:
                continue
            for tid in tids:
                try:
                    ns = int((task_dir / str(tid) / "schedstat").read_text().split()[0])
                    name = (task_dir / str(tid) / "comm").read_text().strip()
                    stat = (task_dir / str(tid) / "stat").read_text().rsplit(")", 1)[1].split()
                    stime = int(stat[12])  # field 15 of proc(5): ticks in the kernel
                except (OSError, ValueError, IndexError):
                    continue
                seen[(node, pid, tid)] = (name, ns / 1e9, stime / TICKS_PER_S)
    return seen


class Sampler(threading.Thread):
    """Samples `thread_times` every `interval_s` until stopped (a thread that ended keeps its last value)."""

    def __init__(self, bed: Testbed, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.bed, self.interval_s = bed, interval_s
        self.samples: list[tuple[float, dict]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.samples.append((time.time(), thread_times(self.bed)))
            self.stop_event.wait(self.interval_s)

    def at(self, when: float) -> dict[tuple[int, int, int], tuple[str, float]]:
        """Every thread's CPU at `when`, interpolated between the two samples around it."""
        times = [t for t, _ in self.samples]
        i = max(1, min(len(times) - 1, next((k for k, t in enumerate(times) if t >= when), len(times) - 1)))
        (t0, a), (t1, b) = self.samples[i - 1], self.samples[i]
        w = 0.0 if t1 <= t0 else min(1.0, max(0.0, (when - t0) / (t1 - t0)))
        return {key: (b[key][0], *(a.get(key, (None, 0.0, 0.0))[i] * (1 - w) + b[key][i] * w for i in (1, 2)))
                for key in b}


def run_case(model: str, strategy: str, workers: int, quota: float, bandwidth_bps: float, iterations: int) -> dict:
    config = TrainConfig(**MODELS[model][1], workers=workers, strategy=strategy,
                         ps_count=0 if strategy == "allreduce" else 1, iterations=iterations, warmup=3,
                         bandwidth_bps=bandwidth_bps, cpu_quota=quota, reference_steps=6)
    with Testbed(config.world_size, bandwidth_bps, quota, pin_cpus=True) as bed:
        sampler = Sampler(bed)
        sampler.start()
        try:
            measurement = run_training(config, placement=bed, timeout_s=900)
        finally:
            sampler.stop_event.set()
            sampler.join()
    records = measurement.workers
    start = max(w.iteration_start_s[0] for w in records)
    end = min(w.iteration_start_s[-1] + w.iteration_s[-1] for w in records)
    before, after = sampler.at(start), sampler.at(end)
    nodes = []
    for node in range(config.world_size):
        worker = next((w for w in records if w.rank == node), None)
        steps = (sum(1 for s, d in zip(worker.iteration_start_s, worker.iteration_s) if s >= start and s + d <= end)
                 if worker else None)
        rank_pid = min((pid for (n, pid, tid) in after if n == node and pid == tid and after[(n, pid, tid)][0]
                        .startswith("python")), default=None)
        parts: dict[str, float] = {}
        kernel: dict[str, float] = {}
        for key, (name, cpu_s, kernel_s) in after.items():
            n, pid, tid = key
            if n != node:
                continue
            _, cpu_before, kernel_before = before.get(key, (None, 0.0, 0.0))
            label = ("main" if tid == pid == rank_pid else f"thread {name}" if pid == rank_pid
                     else f"process {name}")
            parts[label] = parts.get(label, 0.0) + cpu_s - cpu_before
            kernel[label] = kernel.get(label, 0.0) + kernel_s - kernel_before
        nodes.append({"node": node, "role": "worker" if worker else "server", "steps": steps, "cpu_s": parts,
                      "kernel_s": kernel})
    return {"model": model, "strategy": strategy, "workers": workers, "window_s": end - start,
            "step_s": statistics.median(statistics.median(w.iteration_s) for w in records),
            "nodes": nodes, "other_load_cores": (measurement.environment.cpu or {}).get("other_load_cores")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,mlp")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quota", type=float, default=0.40, help="cores per node")
    parser.add_argument("--cases", default="allreduce:1,allreduce:2,ps-sync:2,ps-async:2",
                        help="strategy:workers, comma-separated")
    parser.add_argument("--bandwidth-mbit", type=float, default=3200)
    parser.add_argument("--output", default="worker_cpu_threads")
    args = parser.parse_args(argv)
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases.split(",")]
    iterations = {"cnn": 60, "mlp": 150, "bert": 60}
    rows = []
    for r in range(args.rounds):
        for model in args.models.split(","):
            profile = profile_step(model, args.quota)
            rows.append({"round": r + 1, "model": model, "profile": profile})
            print(f"round {r + 1} {model} profile step {profile['step_s'] * 1e3:.1f} ms", flush=True)
            for strategy, workers in cases:
                case = run_case(model, strategy, workers, args.quota, args.bandwidth_mbit * 1e6, iterations[model])
                case["round"] = r + 1
                case["profile_cpu_per_step_s"] = profile["step_s"] * args.quota
                rows.append(case)
                print(json.dumps(case), flush=True)
    (OUT / f"{args.output}.json").write_text(json.dumps(rows, indent=1))
    print(report(rows, argv, args.quota, args.bandwidth_mbit, args.output))
    return 0


def report(rows: list[dict], argv: list[str], quota: float, bandwidth_mbit: float, output: str) -> str:
    lines = [f"# A worker node's CPU per measured step, by thread ({quota:g} cores per node, {bandwidth_mbit:g} Mbit/s)",
             "", f"Generated by `benchmarks/worker_cpu_threads.py {' '.join(argv)}`. Per worker node (median over "
             "worker nodes), ms of CPU per measured step: the rank's main thread, its other threads, other processes "
             "in the node, their total, and the total against the same round's profile step x quota; 'in the kernel': "
             "the part of the main thread's and the other threads' CPU that /proc's clock-tick sampling (stime) puts "
             "in the kernel (system calls, and softirq work the kernel charges to the thread it interrupts).", "",
             "| round | model | strategy | workers | profile CPU/step | main | main in the kernel | other threads | "
             "other threads in the kernel | other processes | total | total / profile | main / profile | "
             "server node CPU/step |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratios: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    threads: dict[str, list[float]] = {}
    for case in rows:
        if "strategy" not in case:
            continue
        per_node = []
        for node in case["nodes"]:
            if node["role"] != "worker" or not node["steps"]:
                continue
            parts = node["cpu_s"]
            kernel = node.get("kernel_s", {})
            main = parts.get("main", 0.0) / node["steps"]
            main_kernel = kernel.get("main", float("nan")) / node["steps"]
            other_threads = sum(v for k, v in parts.items() if k.startswith("thread ")) / node["steps"]
            threads_kernel = (sum(v for k, v in kernel.items() if k.startswith("thread ")) if kernel
                              else float("nan")) / node["steps"]
            others = sum(v for k, v in parts.items() if k.startswith("process ")) / node["steps"]
            per_node.append((main, other_threads, others, main_kernel, threads_kernel))
            for k, v in parts.items():
                if k != "main":
                    threads.setdefault(f"{case['model']} {case['strategy']} w{case['workers']}: {k}", []).append(
                        v / node["steps"] * 1e3)
        main, other_threads, others, main_kernel, threads_kernel = (statistics.median(x) for x in zip(*per_node))
        total = main + other_threads + others
        profile = case["profile_cpu_per_step_s"]
        steps = statistics.median(n["steps"] for n in case["nodes"] if n["steps"])
        server = [sum(n["cpu_s"].values()) / steps * 1e3 for n in case["nodes"] if n["role"] == "server"]
        ratios.setdefault((case["model"], case["strategy"], case["workers"]), []).append((total / profile, main / profile))
        lines.append(f"| {case['round']} | {case['model']} | {case['strategy']} | {case['workers']} | {profile * 1e3:.1f} | "
                     f"{main * 1e3:.1f} | {main_kernel * 1e3:.1f} | {other_threads * 1e3:.1f} | {threads_kernel * 1e3:.1f} | "
                     f"{others * 1e3:.1f} | {total * 1e3:.1f} | "
                     f"{total / profile:.2f} | {main / profile:.2f} | "
                     f"{', '.join(f'{s:.1f}' for s in server) or '-'} |")
    lines += ["", "| model | strategy | workers | total / profile (median, min-max) | main / profile |",
              "|---|---|---:|---|---|"]
    for (model, strategy, workers), values in ratios.items():
        tot, main = zip(*values)
        lines.append(f"| {model} | {strategy} | {workers} | {statistics.median(tot):.2f} ({min(tot):.2f}-{max(tot):.2f}) | "
                     f"{statistics.median(main):.2f} ({min(main):.2f}-{max(main):.2f}) |")
    lines += ["", "Threads other than main (ms of CPU per step, every worker node and round):", ""]
    lines += [f"- {k}: {', '.join(f'{v:.2f}' for v in vs)}" for k, vs in sorted(threads.items())]
    text = "\n".join(lines) + "\n"
    (OUT / f"{output}.md").write_text(text)
    return text


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
