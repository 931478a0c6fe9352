"""Does where the testbed puts its nodes on the machine's cores change a PS worker's compute?

The testbed pins every node to one core (`sgdscale.runtime.testbed.pack_cpus`); on this 2-core
machine a PS run of 2 workers and one shard puts worker 0 and the shard on CPU 0 and worker 1 alone
on CPU 1; with 3 workers, workers 0 and 2 share CPU 0 and worker 1 shares CPU 1 with the shard. A
profile times the model on one node alone. Real PS workers' backward, against its profile, ran
1.13x (sync) and 1.09x (async) longer with 2 workers than with 3 on held-out sets 19-45, where the
fine method predicts the same (`benchmarks/backward_by_workers.py`). This runs one real case under
several layouts, interleaved over rounds (the order rotates), each round after a fresh profile on
node 0 alone, and reports per worker its backward and forward compute against the profile, and the
run's throughput:

- `2w-shard-beside-w0-cpu0`: 2 workers as validation places them (worker 0 and the shard on CPU 0);
- `2w-workers-together-cpu0`: both workers on CPU 0, the shard alone on CPU 1 (validation's layout
  for held-out set 46 only, mirrored);
- `2w-shard-beside-w1-cpu1`: the first layout mirrored (worker 0 alone on CPU 0);
- `3w-shard-beside-w1-cpu1`: 3 workers as validation places them.

    .venv/bin/python benchmarks/core_layout.py [--model bert] [--strategies ps-sync,ps-async]
        [--bandwidth-mbit 620] [--quota 0.36] [--rounds 3] [--name NAME]
    .venv/bin/python benchmarks/core_layout.py --report NAME   (the tables again, from the kept JSON)

Raw output: benchmarks/results/core_layout/NAME.{json,md}; measurements and profiles beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from unittest import mock

from sgdscale.commands.validate import model_spec
from sgdscale.runtime import testbed as testbed_module
from sgdscale.runtime.measurement import save_measurement
from sgdscale.validation import Case, Grid, Validator

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "core_layout"

# layout name -> (workers, CPU of each node: workers first, then the shard)
LAYOUTS = {
    "2w-shard-beside-w0-cpu0": (2, [(0,), (1,), (0,)]),
    "2w-workers-together-cpu0": (2, [(0,), (0,), (1,)]),
    "2w-shard-beside-w1-cpu1": (2, [(0,), (1,), (1,)]),
    "3w-shard-beside-w1-cpu1": (3, [(0,), (1,), (0,), (1,)]),
}


def run_layouts(args) -> dict:
    spec = model_spec(args.model, None)
    grid = Grid(specs=[spec], workers=[2, 3], bandwidths_bps=[args.bandwidth_mbit * 1e6], strategies=args.strategies,
                cpu_per_node_cores=args.quota, repeats=args.rounds, min_window_s=args.window_s)
    folder = OUT / args.name
    validator = Validator(grid, folder, log=lambda text: print(text, flush=True))
    runs = []
    names = list(LAYOUTS)
    for round_index in range(args.rounds):
        profile_path = validator.ensure_profile(spec, round_index)
        profile = json.loads(Path(profile_path).read_text())
        profiled = {part: sum(layer[f"{part}_s"] for layer in profile["layers"]) for part in ("forward", "backward")}
        order = names[round_index % len(names):] + names[:round_index % len(names)]
        for strategy in args.strategies:
            for layout in order:
                workers, cpus = LAYOUTS[layout]
                case = Case(spec, workers, args.bandwidth_mbit * 1e6, strategy, 1)
                patch = mock.patch.object(testbed_module, "pack_cpus", lambda quotas, available, *_, cpus=cpus: cpus)
                print(f"round {round_index + 1}: {strategy} {layout}", flush=True)
                with patch:
                    measurement = validator.measure_case(case)
                save_measurement(measurement, folder / "measurements" / f"{strategy}-{layout}-r{round_index}.json")
                warmup = measurement.config.warmup
                nodes = measurement.environment.cpu["nodes"]
                per_worker = []
                for rank, worker in enumerate(measurement.workers):
                    backward = worker.backward_s[warmup:]
                    forward = [c - b for c, b in zip(worker.compute_s[warmup:], backward)]
                    per_worker.append({"rank": rank, "cpus": nodes[rank]["cpus"],
                                       "backward_over_profile": statistics.median(backward) / profiled["backward"],
                                       "forward_over_profile": statistics.median(forward) / profiled["forward"],
                                       "received_cores": nodes[rank]["received_cores"]})
                runs.append({"round": round_index, "strategy": strategy, "layout": layout,
                             "shard_cpus": nodes[workers]["cpus"], "throughput": measurement.throughput,
                             "workers": per_worker})
                (folder / "runs.json").write_text(json.dumps(runs, indent=1))
    return {"args": vars(args), "runs": runs}


def report(kept: dict, argv: list[str]) -> str:
    runs = kept["runs"]
    lines = ["# Where the nodes sit on the cores, and a PS worker's compute", "",
             f"Generated by `benchmarks/core_layout.py {' '.join(argv)}`. Model {kept['args']['model']}, "
             f"{kept['args']['bandwidth_mbit']:g} Mbit/s, {kept['args']['quota']:g} cores per node, "
             f"{kept['args']['rounds']} interleaved rounds, a fresh profile on node 0 alone before each. Per worker: "
             "median backward and forward compute over its measured steps, over the round's profile.", "",
             "| strategy | layout | round | shard CPU | worker: CPU, backward / profile, forward / profile | "
             "throughput (samples/s) |", "|---|---|---:|---|---|---:|"]
    for run in runs:
        cells = "; ".join(f"w{w['rank']} cpu{w['cpus'][0]} {w['backward_over_profile']:.2f} {w['forward_over_profile']:.2f}"
                          for w in run["workers"])
        lines.append(f"| {run['strategy']} | {run['layout']} | {run['round'] + 1} | {run['shard_cpus'][0]} | {cells} | "
                     f"{run['throughput']:.1f} |")
    lines += ["", "| strategy | layout | backward / profile: workers with the shard's core | alone on a core | "
              "sharing a core with a worker | all, median | forward / profile, all |", "|---|---|---|---|---|---:|---:|"]
    for strategy in dict.fromkeys(r["strategy"] for r in runs):
        for layout in LAYOUTS:
            mine = [r for r in runs if r["strategy"] == strategy and r["layout"] == layout]
            if not mine:
                continue
            groups: dict[str, list[float]] = {"shard": [], "alone": [], "worker": []}
            everything, forwards = [], []
            for run in mine:
                worker_cpus = [w["cpus"][0] for w in run["workers"]]
                for w in run["workers"]:
                    cpu = w["cpus"][0]
                    key = ("shard" if cpu == run["shard_cpus"][0]
                           else "alone" if worker_cpus.count(cpu) == 1 else "worker")
                    groups[key].append(w["backward_over_profile"])
                    everything.append(w["backward_over_profile"])
                    forwards.append(w["forward_over_profile"])

            def cell(values: list[float]) -> str:
                return f"{statistics.median(values):.2f} ({len(values)})" if values else "-"

            lines.append(f"| {strategy} | {layout} | {cell(groups['shard'])} | {cell(groups['alone'])} | "
                         f"{cell(groups['worker'])} | {statistics.median(everything):.2f} | "
                         f"{statistics.median(forwards):.2f} |")
    baseline = next(iter(LAYOUTS))
    lines += ["", f"Throughput per round, and over the same round's `{baseline}` run:", "",
              "| strategy | layout | samples/s per round | median | over the baseline, per round |", "|---|---|---|---:|---|"]
    for strategy in dict.fromkeys(r["strategy"] for r in runs):
        base = {r["round"]: r["throughput"] for r in runs if r["strategy"] == strategy and r["layout"] == baseline}
        for layout in LAYOUTS:
            mine = sorted((r["round"], r["throughput"]) for r in runs if r["strategy"] == strategy and r["layout"] == layout)
            if not mine:
                continue
            ratios = ", ".join(f"{t / base[k]:.2f}" for k, t in mine if k in base)
            lines.append(f"| {strategy} | {layout} | {', '.join(f'{t:.1f}' for _, t in mine)} | "
                         f"{statistics.median(t for _, t in mine):.1f} | {ratios} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--bandwidth-mbit", type=float, default=620)
    parser.add_argument("--quota", type=float, default=0.36)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=20)
    parser.add_argument("--name", default="bert")
    parser.add_argument("--report", metavar="NAME")
    args = parser.parse_args(argv)
    args.strategies = args.strategies.split(",")
    if args.report:
        kept = json.loads((OUT / args.report / "core_layout.json").read_text())
        name = args.report
    else:
        kept = run_layouts(args)
        name = args.name
        (OUT / name / "core_layout.json").write_text(json.dumps(kept, indent=1))
    text = report(kept, argv)
    (OUT / name / "core_layout.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
