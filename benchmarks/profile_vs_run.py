"""A profile's step against a one-worker run of the same model on the same node, interleaved.

Held-out set 28's real cnn cases (batch 16, 32 px, 0.27 cores per node) were predicted 8-32% too
fast in every strategy, and nothing in the network file moved them (`benchmarks/network_parts.py`,
`results/network_parts_heldout28.md`). A one-worker run has no communication at all, so the fine
and coarse methods predict it as the profile's step (data + forward + backward + optimizer): what a
one-worker run misses is the compute reference, not the network or coordination model. Each round
profiles the model on one emulated node (the validation's command: `sgdscale profile MODEL --threads
1 --iterations 20`) and then runs it with one worker (the validation's TrainConfig, warm-up 3,
`--iterations` measured steps), and, with `--workers N`, an N-worker all-reduce run after it. Per
run it records the step, the cores the node received and the CPU time it spent per step (received
cores x window / steps), so a run that spends more CPU per step than its profile shows apart from
one that received less of its quota.

    .venv/bin/python benchmarks/profile_vs_run.py [--model cnn] [--quota 0.27] [--rounds 4] [--workers 2]

Raw output: benchmarks/results/profile_vs_run_<model>.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from sgdscale.runtime.testbed import Testbed
from sgdscale.runtime.train import TrainConfig, run_training

OUT = Path(__file__).parent / "results"
MODELS = {  # name: (profile CLI arguments, TrainConfig keyword arguments), as `sgdscale validate` runs them
    "cnn": (["--batch-size", "16", "--image-size", "32"], dict(model="cnn", batch_size=16, image_size=32)),
    "mlp": (["--batch-size", "32", "--option", "width=512", "--option", "depth=4"],
            dict(model="mlp", batch_size=32, model_options={"width": 512, "depth": 4})),
    "bert": (["--batch-size", "4", "--seq-len", "64", "--option", "layers=2", "--option", "hidden=128",
              "--option", "vocab=2048"],
             dict(model="bert", batch_size=4, seq_len=64, model_options={"layers": 2, "hidden": 128, "vocab": 2048})),
}


def profile_step(model: str, quota: float) -> dict:
    """Profile on one pinned node under `quota`: the uninstrumented step and the sum of its parts (s)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.json"
        argv = [sys.executable, "-m", "sgdscale.cli", "profile", model, "-o", str(path), "--threads", "1",
                "--iterations", "20", *MODELS[model][0]]
        with Testbed(1, 1e9, quota, pin_cpus=True) as bed:
            done = bed.run_on_node(0, argv, timeout_s=900, env={"OMP_NUM_THREADS": "1"})
        if done.returncode != 0:
            raise SystemExit(done.stderr[-2000:])
        profile = json.loads(path.read_text())
    layers = profile["layers"]
    parts = (sum(l["forward_s"] + l["backward_s"] for l in layers) + profile["step"]["data_s"]
             + profile["step"]["optimizer_s"])
    return {"step_s": profile["iteration_s"]["p50"], "parts_s": parts,
            "samples_s": profile["iteration_s"]["samples"]}


def run_step(model: str, quota: float, workers: int, iterations: int, bandwidth_bps: float) -> dict:
    config = TrainConfig(**MODELS[model][1], workers=workers, strategy="allreduce", iterations=iterations,
                         warmup=3, bandwidth_bps=bandwidth_bps, cpu_quota=quota)
    with Testbed(config.world_size, bandwidth_bps, quota, pin_cpus=True) as bed:
        measurement = run_training(config, placement=bed, timeout_s=900)
    cpu = measurement.environment.cpu or {}
    steps = [statistics.median(w.iteration_s) for w in measurement.workers]
    nodes = cpu.get("nodes", [])
    return {"throughput": measurement.throughput, "step_s": statistics.median(steps),
            "received_cores": [n["received_cores"] for n in nodes],
            "cpu_per_step_s": [n["received_cores"] * cpu["wall_s"] / iterations for n in nodes],
            "throttled_periods_fraction": [n["throttled_periods_fraction"] for n in nodes],
            "other_load_cores": cpu.get("other_load_cores")}


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn", choices=sorted(MODELS))
    parser.add_argument("--quota", type=float, default=0.27, help="cores per node")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=15, help="measured steps per run (validation's 15)")
    parser.add_argument("--workers", type=int, default=2, help="also an all-reduce run with this many (0: none)")
    parser.add_argument("--bandwidth-mbit", type=float, default=340)
    args = parser.parse_args(argv)
    rounds = []
    for r in range(args.rounds):
        entry = {"profile": profile_step(args.model, args.quota),
                 "one worker": run_step(args.model, args.quota, 1, args.iterations, args.bandwidth_mbit * 1e6)}
        if args.workers > 1:
            entry[f"{args.workers} workers"] = run_step(args.model, args.quota, args.workers, args.iterations,
                                                        args.bandwidth_mbit * 1e6)
        rounds.append(entry)
        print(f"round {r + 1}: profile step {entry['profile']['step_s'] * 1e3:.1f} ms, one worker "
              f"{entry['one worker']['step_s'] * 1e3:.1f} ms", file=sys.stderr)
    lines = [f"# A profile's step against a one-worker run: {args.model}, {args.quota:g} cores per node",
             "", f"Generated by `benchmarks/profile_vs_run.py {' '.join(argv)}`. Interleaved per round: profile "
             "(one node), one-worker run, then the multi-worker all-reduce run. Steps are medians in ms; CPU "
             "per step = cores received x window / steps. A one-worker run is predicted as the profile's step "
             "(error = predicted / measured - 1, both per round).", "",
             "| round | profile step (ms) | profile parts (ms) | 1 worker step (ms) | 1 worker CPU/step (ms) "
             "| 1 worker error | N workers samples/s | N workers CPU/step per node (ms) |",
             "|---:|---:|---:|---:|---:|---:|---:|---|"]
    errors = []
    for r, entry in enumerate(rounds):
        p, one = entry["profile"], entry["one worker"]
        error = one["step_s"] / p["step_s"] - 1  # predicted throughput / measured - 1
        errors.append(error)
        multi = entry.get(f"{args.workers} workers")
        lines.append(f"| {r + 1} | {p['step_s'] * 1e3:.1f} | {p['parts_s'] * 1e3:.1f} | {one['step_s'] * 1e3:.1f} "
                     f"| {one['cpu_per_step_s'][0] * 1e3:.1f} | {error:+.1%} | "
                     + (f"{multi['throughput']:.1f} | " + ", ".join(f"{c * 1e3:.1f}" for c in multi["cpu_per_step_s"])
                        if multi else "- | -") + " |")
    profile_steps = [e["profile"]["step_s"] for e in rounds]
    one_steps = [e["one worker"]["step_s"] for e in rounds]
    lines += ["", f"- profile step: median {statistics.median(profile_steps) * 1e3:.1f} ms, spread "
              f"{spread(profile_steps):.1%}; one-worker step: median {statistics.median(one_steps) * 1e3:.1f} ms, "
              f"spread {spread(one_steps):.1%}",
              f"- one worker predicted from its own round's profile: median error {statistics.median(errors):+.1%}, "
              f"range {min(errors):+.1%}..{max(errors):+.1%}"]
    if args.workers > 1:
        multi = [e[f"{args.workers} workers"]["throughput"] for e in rounds]
        lines.append(f"- {args.workers} workers: median {statistics.median(multi):.1f} samples/s, spread {spread(multi):.1%}")
    text = "\n".join(lines) + "\n"
    print(text)
    stem = OUT / f"profile_vs_run_{args.model}"
    stem.with_suffix(".md").write_text(text)
    stem.with_suffix(".json").write_text(json.dumps({"args": vars(args), "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
