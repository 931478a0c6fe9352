"""Can a tiny probe tell how fast the CPU is right now? (needs torch)

The machine's CPU speed moves by 14-34% between windows of seconds (`benchmarks/vm_speed.py`), and
with it any CPU-bound run. A run could be scored at the speed it had if something cheap measured
that speed beside it. This tries such a probe: while the real cnn trains step after step on one
pinned core (one thread, as a validation node computes), a second process on the same core wakes
every `--every-ms` and times a fixed small piece of work (`python`: an integer loop; `matmul`: a
64 x 64 float32 product, 20 times), costing well under 1% of the core. Per window of `--window-s`
seconds: the cnn's steps per second, and the probe's median time per piece. A probe that tracks
the CPU's speed gives a strong negative correlation (slow pieces, few steps); the same probe on
the other core says whether that core's speed would do instead. With `--quota CORES` (root) the
cnn runs under a CFS quota as a validation node does (10 ms period), so its core idles in between.

    .venv/bin/python benchmarks/speed_probe.py [--windows 30] [--window-s 4] [--every-ms 50] [--quota 0.45]

Raw output: benchmarks/results/<output>.md and .json (speed_probe by default).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sgdscale.runtime.testbed import CFS_PERIOD_US, CGROUP_CPU_ROOT, NAME_STEM

OUT = Path(__file__).resolve().parent / "results"
PROBES = ("python", "matmul")


def cnn_child(seconds: float) -> None:
    """Train the cnn for `seconds`; print each step's end time (monotonic) as JSON."""
    import torch

    from sgdscale.profiling.zoo import build_workload
    torch.set_num_threads(1)
    torch.manual_seed(0)
    workload = build_workload("cnn", image_size=32, seq_len=None, seed=0)
    inputs, targets = workload.make_batch(16)
    optimizer = torch.optim.SGD(workload.module.parameters(), lr=0.01, momentum=0.9)
    ends, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        optimizer.zero_grad()
        workload.loss_fn(workload.module(inputs), targets).backward()
        optimizer.step()
        ends.append(time.monotonic())
    print(json.dumps(ends))


def probe_child(kind: str, seconds: float, every_s: float) -> None:
    """Every `every_s`, time one piece of `kind`; print [(start, duration)] (monotonic) as JSON."""
    if kind == "matmul":
        import torch
        torch.set_num_threads(1)
        a, b = torch.randn(64, 64), torch.randn(64, 64)

        def piece() -> None:
            for _ in range(20):
                torch.mm(a, b)
    else:
        def piece() -> None:
            total = 0
            for i in range(2000):
                total += i * i
    samples, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.monotonic()
        piece()
        samples.append((start, time.monotonic() - start))
        time.sleep(max(0.0, every_s - (time.monotonic() - start)))
    print(json.dumps(samples))


def spawn(cpu: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, __file__, *args],
                            stdout=subprocess.PIPE, text=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=30)
    parser.add_argument("--window-s", type=float, default=4.0)
    parser.add_argument("--every-ms", type=float, default=50.0)
    parser.add_argument("--quota", type=float, help="the cnn's CPU quota in cores (default: none)")
    parser.add_argument("--output", default="speed_probe")
    parser.add_argument("--cnn", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--probe", choices=PROBES, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cnn:
        cnn_child(args.cnn)
        return 0
    if args.probe:
        probe_child(args.probe, args.seconds, args.every_ms / 1000)
        return 0
    cpus = sorted(os.sched_getaffinity(0))[:2]
    seconds = args.windows * args.window_s + 3.0  # the cnn's first 3 s are its warm-up
    group = CGROUP_CPU_ROOT / f"{NAME_STEM}{os.getpid()}-probe"
    try:
        procs = {"cnn": spawn(cpus[1], "--cnn", str(seconds))}
        if args.quota:
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(int(args.quota * CFS_PERIOD_US)))
            (group / "tasks").write_text(str(procs["cnn"].pid))
        for kind in PROBES:  # they outlast the cnn, which spends its first seconds importing torch
            for cpu, where in ((cpus[1], "same core"), (cpus[0], "other core")):
                procs[f"{kind}, {where}"] = spawn(cpu, "--probe", kind, "--seconds", str(seconds + 10),
                                                  "--every-ms", str(args.every_ms))
        data = {name: json.loads(proc.communicate()[0]) for name, proc in procs.items()}
    finally:
        if group.exists():
            group.rmdir()
    begin = data["cnn"][0] + 3.0
    edges = [begin + k * args.window_s for k in range(args.windows + 1)]
    rates = [sum(edges[k] <= t < edges[k + 1] for t in data["cnn"]) / args.window_s for k in range(args.windows)]
    command = " ".join(["benchmarks/speed_probe.py", *argv])
    lines = ["# Can a tiny probe tell how fast the CPU is right now?", "",
             f"Generated by `{command}`. The real cnn (batch 16, 32 px, one thread) trains on one pinned core"
             f"{f' under a quota of {args.quota:g} cores' if args.quota else ''}; "
             f"probes wake every {args.every_ms:g} ms on the same core and on the other one. {args.windows} windows "
             f"of {args.window_s:g} s.", "",
             f"cnn steps per second per window: {', '.join(f'{r:.1f}' for r in rates)} "
             f"(spread {(max(rates) - min(rates)) / statistics.median(rates):.1%}).", "",
             "| probe | median piece (ms) | spread of window medians | correlation with the cnn's rate (log-log) | "
             "slope (log-log) | cnn's spread with the probe taken out by that slope | probe's share of the core |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name in procs:
        if name == "cnn":
            continue
        samples = data[name]
        medians = [statistics.median([d for s, d in samples if edges[k] <= s < edges[k + 1]])
                   for k in range(args.windows)]
        log_rates, log_medians = [math.log(r) for r in rates], [math.log(m) for m in medians]
        fit = statistics.linear_regression(log_medians, log_rates)
        # in-sample: how much of the cnn's spread the probe could explain at best
        adjusted = [r * (m / statistics.median(medians)) ** -fit.slope for r, m in zip(rates, medians)]
        share = sum(d for s, d in samples if edges[0] <= s < edges[-1]) / (edges[-1] - edges[0])
        lines.append(f"| {name} | {statistics.median(medians) * 1e3:.3f} | "
                     f"{(max(medians) - min(medians)) / statistics.median(medians):.1%} | "
                     f"{statistics.correlation(log_rates, log_medians):+.2f} | {fit.slope:+.2f} | "
                     f"{(max(adjusted) - min(adjusted)) / statistics.median(adjusted):.1%} | {share:.2%} |")
    text = "\n".join(lines) + "\n"
    OUT.mkdir(exist_ok=True)
    (OUT / f"{args.output}.md").write_text(text)
    (OUT / f"{args.output}.json").write_text(json.dumps({"command": command, "rates": rates, **data}))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
