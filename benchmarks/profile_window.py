"""Does a longer profile steady the profile? (root, torch)

Validation profiles each real model on one emulated node right before each round, over 20
instrumented steps (and 20 plain ones). For a short step that is a short window: mlp (batch 32,
width 512, depth 4) at 0.40 cores, about 20 ms a step, is profiled in under a second, and set 36's
and its repeat's mlp profiles gave 18.3-33.8 ms of forward and backward where the runs an hour
apart moved 3%. This profiles each model on one node under the quota, interleaving the plain
20-step profile with `sgdscale profile --min-window SECONDS` (round r profiles every window once
before round r+1, so a slow spell of the machine hits both alike), and reports each window's
forward + backward and optimizer time per round, median and spread = (max - min) / median.

    .venv/bin/python benchmarks/profile_window.py [--models mlp,mobilenet_v2] [--quota 0.4]
        [--windows 0,20] [--rounds 6] [--name NAME]

Raw output: benchmarks/results/profile_window/NAME.{json,md}.
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
from repeatability import spread

from sgdscale.profile import load_profile
from sgdscale.runtime.testbed import Testbed

OUT = Path(__file__).resolve().parent / "results" / "profile_window"


def profile_once(testbed: Testbed, model: str, window_s: float, folder: Path) -> dict[str, float]:
    out = folder / f"{model}-{window_s:g}.json"
    argv = [sys.executable, "-m", "sgdscale.cli", "profile", model, "-o", str(out), "--threads", "1",
            "--iterations", "20", "--min-window", f"{window_s:g}", *MODEL_ARGS[model]]
    done = testbed.run_on_node(0, argv, timeout_s=900, env={"OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"profiling {model} failed:\n{done.stderr[-2000:]}")
    profile = load_profile(out)
    return {"compute_ms": (profile.forward_s + profile.backward_s) * 1e3,
            "optimizer_ms": profile.step.optimizer_s * 1e3,
            "measured_iterations": profile.provenance.get("measured_iterations", 20)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,mobilenet_v2")
    parser.add_argument("--quota", type=float, default=0.4)
    parser.add_argument("--windows", default="0,20", help="minimum windows in seconds, one profile each per round")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--name", default=None)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    windows = [float(w) for w in args.windows.split(",")]
    name = args.name or f"{'-'.join(models)}-q{args.quota:g}"
    results = {m: {str(w): [] for w in windows} for m in models}
    began = time.time()
    with tempfile.TemporaryDirectory() as tmp, Testbed(1, 1e9, args.quota, pin_cpus=True) as testbed:
        for round_index in range(args.rounds):
            for model in models:
                for window in windows:
                    got = profile_once(testbed, model, window, Path(tmp))
                    results[model][str(window)].append(got)
                    print(f"round {round_index + 1}/{args.rounds}, {model}, window {window:g} s: "
                          f"{got['compute_ms']:.1f} ms forward + backward, {got['optimizer_ms']:.1f} ms optimizer, "
                          f"{got['measured_iterations']} steps", flush=True)
    lines = [f"# Profile window: {name}", "",
             f"`benchmarks/profile_window.py {' '.join(argv)}` ({time.time() - began:.0f} s in all; one node at "
             f"{args.quota:g} cores; profiles interleaved by round). Spread = (max - min) / median.", "",
             "| model | minimum window | steps measured | forward + backward per run (ms) | median | spread "
             "| optimizer spread |", "|---|---:|---:|---|---:|---:|---:|"]
    for model in models:
        for window in windows:
            runs = results[model][str(window)]
            compute = [r["compute_ms"] for r in runs]
            steps = sorted({r["measured_iterations"] for r in runs})
            lines.append(f"| {model} | {window:g} s | {', '.join(map(str, steps))} | "
                         f"{', '.join(f'{c:.1f}' for c in compute)} | {statistics.median(compute):.1f} | "
                         f"{spread(compute):.1%} | {spread([r['optimizer_ms'] for r in runs]):.1%} |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1) + "\n")
    (OUT / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
