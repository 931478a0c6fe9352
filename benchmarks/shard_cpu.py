"""Does the parameter-server shard's CPU bind? Its CPU per worker step, and a run with a bigger shard.

The fine method charges a shard, per byte it moves, the CPU cost `sgdscale netbench` measured on
a plain point-to-point ping-pong (`server_cpu_s_per_byte`, in and out once per worker step in async
PS), plus the profile's optimizer time. Part 1 reads the kept async and sync PS runs of the named
sets (nothing rerun): the CPU the shard's cgroup actually received per worker step, against that
charge, and how often its quota throttled it. Part 2 (`--run`) reruns one case on the emulated
cluster with the shard's quota raised (workers' unchanged), interleaved with the case as it was:
if the shard's CPU binds, the bigger shard runs faster.

    .venv/bin/python benchmarks/shard_cpu.py [--sets heldout18,heldout19,heldout20,heldout21]
        [--run] [--profile P | --model resnet18] [--bandwidth-mbit 1400 --quota 0.46] [--shard-quotas 0.46,0.92]
        [--rounds 2] [--tag NAME]
Raw output: benchmarks/results/shard_cpu.md (with --tag, shard_cpu-NAME.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SET20 = HERE / "results" / "accuracy-heldout20"


def kept_rows(sets: list[str]) -> list[str]:
    from sgdscale.comm import load_network
    from sgdscale.comm.cost import CommModel
    from sgdscale.profile import load_profile

    lines = ["| set | case | tensors | gradient MB | shard CPU per worker step (ms, median of rounds) | "
             "model's charge (ms CPU) | ratio | shard throttled (share of periods) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for set_name in sets:
        folder = HERE / "results" / f"accuracy-{set_name}"
        results = json.loads((folder / "results.json").read_text())
        for case in results["cases"]:
            if not case["key"].startswith("replay-") or "-ps-" not in case["key"] or "-ps1-" not in case["key"]:
                continue
            runs = [json.loads(p.read_text()) for p in sorted((folder / "measurements").glob(case["key"] + "*.json"))]
            runs = [r for r in runs if (r["environment"].get("cpu") or {}).get("nodes")]
            if not runs:
                continue
            config = runs[0]["config"]
            profile = load_profile(str(folder / "profiles" / (case["key"].split("-ps-")[0] + ".json")))
            nbytes = profile.gradient_bytes
            network = next((folder / "networks").glob(f"{int(config['bandwidth_bps'] / 1e6)}Mbit-*.json"))
            comm = CommModel.from_network(load_network(str(network)))
            moved = 2 * (config["workers"] if config["strategy"] == "ps-sync" else 1)
            quota = config["cpu_quota"]
            charge = (comm.server_cpu_s_per_byte * moved * nbytes + profile.step.optimizer_s) * quota
            used, throttled = [], []
            for run in runs:
                shard = run["environment"]["cpu"]["nodes"][-1]
                worker_steps_per_s = run["throughput"] / config["batch_size"]
                used.append(shard["received_cores"] / worker_steps_per_s)
                throttled.append(shard["throttled_periods_fraction"])
            cpu = statistics.median(used)
            model = charge / (config["workers"] if config["strategy"] == "ps-sync" else 1)  # a sync update serves N
            lines.append(f"| {set_name} | {case['key']} | {len(profile.tensors)} | {nbytes / 1e6:.1f} | {1e3 * cpu:.1f} | "
                         f"{1e3 * model:.1f} | {cpu / model:.2f} | {statistics.median(throttled):.2f} |")
            print(lines[-1], flush=True)
    return lines


def rerun(profile: str, bandwidth_bps: float, quota: float, shard_quotas: list[float], workers: int,
          rounds: int, model: str | None = None) -> list[str]:
    """`model`: a real model at validate's settings instead of the profile's replay."""
    from sgdscale.commands.validate import DEFAULT_SPECS
    from sgdscale.runtime.testbed import Testbed
    from sgdscale.runtime.train import TrainConfig, replay_config, run_training

    lines = ["| round | shard quota (cores) | measured (samples/s) | shard received (cores) | shard throttled |",
             "|---:|---:|---:|---:|---:|"]
    for round_index in range(rounds):
        for shard_quota in shard_quotas:
            if model is None:
                config = replay_config(profile, workers=workers, strategy="ps-async", ps_count=1, iterations=45,
                                       warmup=3)
            else:
                spec = dict(DEFAULT_SPECS[model])
                options = dict(spec.pop("options", ()))
                config = TrainConfig(model=model, workers=workers, strategy="ps-async", ps_count=1, iterations=45,
                                     warmup=3, model_options=options, **spec)
            config.bandwidth_bps, config.cpu_quota = bandwidth_bps, quota
            quotas = [quota] * workers + [shard_quota]
            with Testbed(config.world_size, bandwidth_bps, quotas, pin_cpus=True) as testbed:
                measurement = run_training(config, testbed, timeout_s=600)
            shard = measurement.environment.cpu["nodes"][-1]
            lines.append(f"| {round_index + 1} | {shard_quota:g} | {measurement.throughput:.1f} | "
                         f"{shard['received_cores']:.2f} | {shard['throttled_periods_fraction']:.2f} |")
            print(lines[-1], flush=True)
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout18,heldout19,heldout20,heldout21")
    parser.add_argument("--run", action="store_true", help="also rerun one async case with a bigger shard")
    parser.add_argument("--profile", default=str(SET20 / "profiles" / "replay-mobilenet_v2-b16.json"))
    parser.add_argument("--model", default=None, help="rerun a real model (validate's settings) instead of the replay")
    parser.add_argument("--bandwidth-mbit", type=float, default=1400)
    parser.add_argument("--quota", type=float, default=0.46, help="cores per worker node")
    parser.add_argument("--shard-quotas", default="0.46,0.92")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tag", default=None, help="write results/shard_cpu-TAG.md")
    args = parser.parse_args(argv)
    lines = ["# Does the parameter-server shard's CPU bind?", "",
             "Generated by `benchmarks/shard_cpu.py " + " ".join(argv) + "`.", "",
             "## The shard's CPU in the kept runs (one shard; nothing rerun)", "",
             "CPU seconds the shard's cgroup received per worker step (sync: per shard step over N), against "
             "what the fine method charges it: (netbench's point-to-point CPU per byte x bytes moved + the "
             "profile's optimizer time) x the quota, in CPU seconds.", ""]
    lines += kept_rows(args.sets.split(","))
    if args.run:
        what = f"{args.model} (real compute)" if args.model else Path(args.profile).name
        lines += ["", f"## {what}, async PS, {args.workers} workers, {args.bandwidth_mbit:g} Mbit/s, "
                  f"{args.quota:g} cores per worker, the shard's quota varied (interleaved)", ""]
        lines += rerun(args.profile, args.bandwidth_mbit * 1e6, args.quota,
                       [float(q) for q in args.shard_quotas.split(",")], args.workers, args.rounds, args.model)
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / (f"shard_cpu-{args.tag}.md" if args.tag else "shard_cpu.md")).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
