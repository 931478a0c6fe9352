"""Does compute run faster on a quota node that has been idle? (root, torch)

A profile times a model's steps back to back on one node under the cluster's CPU quota, so every
phase meets the quota's throttling: a phase of c CPU-seconds takes about c / quota of wall time.
In a run a worker or a shard also waits (for the network, for the other workers), and the CFS
quota (`runtime.testbed.CFS_PERIOD_US`, 10 ms; quota x 10 ms of CPU per period) is refilled at every
period boundary whether it was used or not: a short phase after a wait can run at a full core's
speed. This trains a model on one node under the quota, each step preceded by a sleep of IDLE ms
(0 = back to back, as a profile), interleaving the idle settings by round, and reports per setting
the mean wall time of forward + backward and of the optimizer step, and their CPU time
(`time.thread_time`), beside what the predictors' CFS replay (`sgdscale.cpu_quota.QuotaClock`)
gives for the same loop: the measured CPU of each phase, the measured sleeps, period boundaries
every 10 ms, quota x period of CPU per period.

    .venv/bin/python benchmarks/cfs_idle_speed.py [--models mlp,cnn] [--quota 0.4]
        [--idle-ms 0,5,20,50] [--steps 60] [--rounds 4] [--name NAME]
    .venv/bin/python benchmarks/cfs_idle_speed.py --report NAME   (the tables again, from the kept JSON)

Raw output: benchmarks/results/cfs_idle_speed/NAME.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from core_sharing import MODEL_ARGS

from sgdscale.cpu_quota import QuotaClock
from sgdscale.runtime.testbed import CFS_PERIOD_US, Testbed

OUT = Path(__file__).resolve().parent / "results" / "cfs_idle_speed"
WARMUP_STEPS = 5


def on_node(model: str, model_args: list[str], idle_ms: list[float], steps: int, rounds: int) -> dict:
    """Runs on the node: every step's phases as (sleep_s, forward+backward wall and CPU, optimizer wall and CPU)."""
    import torch

    from sgdscale.profiling.zoo import build_workload

    torch.set_num_threads(1)
    options = dict(zip(model_args[::2], model_args[1::2]))
    extra = {}
    for flag, value in options.items():
        if flag == "--image-size":
            extra["image_size"] = int(value)
    batch = int(options.get("--batch-size", 16))
    model_options = {k: int(v) for k, v in (o.split("=") for f, o in zip(model_args[::2], model_args[1::2])
                                            if f == "--option")}
    workload = build_workload(model, **extra, **model_options)
    optimizer = torch.optim.SGD(workload.module.parameters(), lr=1e-3, momentum=0.9)
    x, y = workload.make_batch(batch)

    def step(idle_s: float) -> dict[str, float]:
        if idle_s:
            time.sleep(idle_s)
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        optimizer.zero_grad(set_to_none=True)
        workload.loss_fn(workload.module(x), y).backward()
        wall1, cpu1 = time.perf_counter(), time.thread_time()
        optimizer.step()
        wall2, cpu2 = time.perf_counter(), time.thread_time()
        return {"idle_s": idle_s, "compute_wall_s": wall1 - wall0, "compute_cpu_s": cpu1 - cpu0,
                "optimizer_wall_s": wall2 - wall1, "optimizer_cpu_s": cpu2 - cpu1}

    for _ in range(WARMUP_STEPS):
        step(0.0)
    records: dict[str, list] = {f"{i:g}": [] for i in idle_ms}
    for _ in range(rounds):
        for idle in idle_ms:
            records[f"{idle:g}"].extend(step(idle / 1e3) for _ in range(steps))
    return records


def simulated(records: list[dict], quota: float) -> tuple[float, float]:
    """Mean simulated wall of forward+backward and of the optimizer, from the measured CPU of each phase."""
    clock = QuotaClock(quota, CFS_PERIOD_US / 1e6)  # the loop starts at a period boundary
    now, compute, optimizer = 0.0, [], []
    for r in records:
        began = now + r["idle_s"]
        now = clock.run(began, r["compute_cpu_s"] / quota)
        compute.append(now - began)
        began, now = now, clock.run(now, r["optimizer_cpu_s"] / quota)
        optimizer.append(now - began)
    return statistics.fmean(compute), statistics.fmean(optimizer)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--on-node":
        model, args_json, idle_json, steps, rounds = argv[1:6]
        print(json.dumps(on_node(model, json.loads(args_json), json.loads(idle_json), int(steps), int(rounds))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,cnn")
    parser.add_argument("--quota", type=float, default=0.4)
    parser.add_argument("--idle-ms", default="0,5,20,50")
    parser.add_argument("--steps", type=int, default=60, help="steps per idle setting per round")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--name", default=None)
    parser.add_argument("--report", default=None, metavar="NAME", help="rewrite NAME.md from NAME.json; no runs")
    args = parser.parse_args(argv)
    if args.report:
        kept = json.loads((OUT / f"{args.report}.json").read_text())
        write_report(args.report, argparse.Namespace(**kept["args"]), kept["results"], kept.get("command", ""),
                     kept.get("seconds", 0.0))
        return 0
    models, idle_ms = args.models.split(","), [float(i) for i in args.idle_ms.split(",")]
    name = args.name or f"{'-'.join(models)}-q{args.quota:g}"
    began = time.time()
    results = {}
    with tempfile.TemporaryDirectory(), Testbed(1, 1e9, args.quota, pin_cpus=True) as testbed:
        for model in models:
            node_argv = [sys.executable, str(Path(__file__).resolve()), "--on-node", model,
                         json.dumps(MODEL_ARGS[model]), json.dumps(idle_ms), str(args.steps), str(args.rounds)]
            done = testbed.run_on_node(0, node_argv, timeout_s=1800, env={"OMP_NUM_THREADS": "1"})
            if done.returncode != 0:
                raise SystemExit(f"{model} failed on the node:\n{done.stderr[-2000:]}")
            results[model] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{model}: done", flush=True)
    seconds = time.time() - began
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps({"args": vars(args), "results": results, "command": " ".join(argv),
                                                  "seconds": seconds}) + "\n")
    write_report(name, args, results, " ".join(argv), seconds)
    return 0


def write_report(name: str, args: argparse.Namespace, results: dict, command: str, seconds: float) -> None:
    models, idle_ms = args.models.split(","), [float(i) for i in args.idle_ms.split(",")]
    lines = [f"# Compute speed after idle on a quota node: {name}", "",
             f"`benchmarks/cfs_idle_speed.py {command}` ({seconds:.0f} s in all; one node at "
             f"{args.quota:g} cores, CFS period {CFS_PERIOD_US / 1e3:g} ms; idle settings interleaved by round, "
             f"{args.steps} steps each per round, {args.rounds} rounds). Means per step, ms. 'As profiled' is the CPU "
             "divided by the quota, what a profile's back-to-back steps take; 'CFS simulation' replays the measured "
             "CPU of every phase and the sleeps against the quota's 10 ms periods.", "",
             "| model | idle before each step | forward+backward CPU | wall measured | per round | CPU / quota "
             "| CFS simulation | optimizer CPU | wall measured | CPU / quota | CFS simulation |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for model in models:
        # the simulation replays the loop in the order it ran: every setting's records, round by round
        for idle in idle_ms:
            recs = results[model][f"{idle:g}"]
            sim_compute, sim_opt = simulated(recs, args.quota)
            cpu_c = statistics.fmean(r["compute_cpu_s"] for r in recs)
            cpu_o = statistics.fmean(r["optimizer_cpu_s"] for r in recs)
            wall_c = statistics.fmean(r["compute_wall_s"] for r in recs)
            wall_o = statistics.fmean(r["optimizer_wall_s"] for r in recs)
            per_round = [statistics.fmean(r["compute_wall_s"] for r in recs[i * args.steps:(i + 1) * args.steps])
                         for i in range(args.rounds)]
            lines.append(f"| {model} | {idle:g} ms | {cpu_c * 1e3:.2f} | {wall_c * 1e3:.2f} | "
                         f"{', '.join(f'{w * 1e3:.1f}' for w in per_round)} | {cpu_c / args.quota * 1e3:.2f} "
                         f"| {sim_compute * 1e3:.2f} | {cpu_o * 1e3:.2f} | {wall_o * 1e3:.2f} "
                         f"| {cpu_o / args.quota * 1e3:.2f} | {sim_opt * 1e3:.2f} |")
    (OUT / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
