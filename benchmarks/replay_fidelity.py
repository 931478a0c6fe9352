"""How exactly a replay reproduces its profile: one replay worker's measured step against the
profile's step (data + forward + backward + optimizer), for sleep and spin compute, as a local
process and on one emulated node under a 0.45-core CPU quota (needs root). The worker is a rank
process like any other, but steps the replay module alone (no DDP, no communication), so the
difference is the replay's own error: its per-layer overhead, wake-up delays, and for spin, the
machine's load against the start-up calibration.

    flock /tmp/sgdscale-cpu.lock env PYTHONPATH=src .venv/bin/python benchmarks/replay_fidelity.py [--repeats 3]
        [--profiles vgg16 --quota 0.15 --computes sleep --memory both --no-local --output NAME]

`--memory both` runs each step's gradients newly mapped (as replays ran before held-out set 57) and
reusing the previous step's storage (`sgdscale.runtime.replay`, Memory; since), interleaved.
Writes benchmarks/results/<output>.{json,txt} (default replay_fidelity).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def fidelity_rank(ctx):
    """Rank target: build the replay, time warm-up + measured steps (forward, backward, optimizer)."""
    from sgdscale.runtime.replay import build_replay, replay_batch

    replay = build_replay(ctx.config["profile"], ctx.config["compute"],
                          keep_gradients=ctx.config.get("keep_gradients", True))
    x, _ = replay_batch(1)
    steps = []
    for _ in range(ctx.config["warmup"] + ctx.config["iterations"]):
        for p in replay.module.parameters():
            p.grad = None
        start = time.perf_counter()
        replay.module(x).sum().backward()
        replay.optimizer_step()
        steps.append(time.perf_counter() - start)
    return {"steps_s": steps[ctx.config["warmup"]:], "spin_rate": replay.spin_rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", default="gpt2,resnet50")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--quota", type=float, default=0.45)
    parser.add_argument("--computes", default="sleep,spin", help="replay compute modes to run")
    parser.add_argument("--memory", default="kept",
                        help="kept (freed gradients reused, as replays run since held-out set 57), fresh (each "
                             "step's gradients newly mapped, as before), or both")
    parser.add_argument("--no-local", action="store_true", help="only the emulated node under --quota")
    parser.add_argument("--output", default="replay_fidelity")
    args = parser.parse_args()
    memories = {"kept": [True], "fresh": [False], "both": [False, True]}[args.memory]
    # (compute, keep_gradients, label): the label names the memory only where both are run
    variants = [(c, k, c + ("" if len(memories) == 1 else (" kept" if k else " fresh")))
                for c in args.computes.split(",") for k in memories]

    from sgdscale.jsonio import write_json_atomic
    from sgdscale.profile import load_profile
    from sgdscale.runtime.testbed import Testbed
    from sgdscale.runtime.launch import launch

    conditions = ([] if args.no_local else ["local"]) + ([f"quota {args.quota:g}"] if os.geteuid() == 0 else [])
    rows, lines = [], []
    for name in args.profiles.split(","):
        profile = load_profile(name)
        for repeat in range(args.repeats):
            for condition in conditions:
                for compute, keep, label in variants:
                    config = {"profile": profile.to_json(), "compute": compute, "iterations": args.iterations,
                              "warmup": 2, "keep_gradients": keep}
                    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
                    if condition == "local":
                        result = launch("replay_fidelity:fidelity_rank", config, 1, timeout_s=600, env=env)
                    else:
                        with Testbed(1, 1e9, args.quota, pin_cpus=True) as testbed:  # as validation runs nodes
                            result = launch("replay_fidelity:fidelity_rank", config, 1, placement=testbed,
                                            timeout_s=600, env=env)
                    steps = result.results[0]["steps_s"]
                    step = statistics.median(steps)
                    row = {"profile": name, "condition": condition, "compute": label, "repeat": repeat,
                           "profile_step_s": profile.compute_s, "measured_step_median_s": step,
                           "steps_s": steps, "error": step / profile.compute_s - 1}
                    rows.append(row)
                    line = (f"{name:9s} {condition:11s} {label:5s} repeat {repeat}: step median {step * 1e3:7.1f} ms "
                            f"(min {min(steps) * 1e3:.1f}, max {max(steps) * 1e3:.1f}) vs profile "
                            f"{profile.compute_s * 1e3:.1f} ms: {row['error']:+.1%}")
                    print(line, flush=True)
                    lines.append(line)
    lines.append("")
    for name in args.profiles.split(","):
        for condition in conditions:
            for _, _, compute in variants:
                errors = [r["error"] for r in rows
                          if (r["profile"], r["condition"], r["compute"]) == (name, condition, compute)]
                lines.append(f"{name:9s} {condition:11s} {compute:5s}: median {statistics.median(errors):+.1%}, "
                             f"range {min(errors):+.1%} .. {max(errors):+.1%} over {len(errors)} runs")
    print("\n".join(lines[-len(args.profiles.split(",")) * len(conditions) * len(variants):]))
    RESULTS.mkdir(exist_ok=True)
    write_json_atomic(RESULTS / f"{args.output}.json", {"rows": rows, "argv": sys.argv[1:],
                                                         "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    (RESULTS / f"{args.output}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
