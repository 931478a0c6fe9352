"""Does a real PS worker's backward take longer, against its profile and against the fine method's
prediction, with 2 workers than with 3?

Real sync PS on the held-out sets since set 30 scaled better from 2 to 3 workers than predicted in
14 of 15 model pairs. This reads every kept real-compute run of the named sets (PS strategies) and
takes, per run, the median over its measured steps and workers of the backward pass (as the
runtime timed it: the gradient hooks' pushes included), over the backward its round's profile
measured on one node alone, and over the backward the fine method predicts for that run (its own
profile and network file, as `sgdscale validate` predicted it: the compute events named backward in
the predicted timeline of every worker, interference included). Per (set, model, strategy) with
both 2 and 3 workers: the medians of its runs and the ratio 2 over 3, and how the pair's throughput
scaled from 2 to 3 workers, measured over the fine method's as recorded. Nothing is rerun.

A second table takes every part of the step the same way (forward compute, backward, the waits, the
step; measured over predicted, per strategy and worker count): where the prediction's step time
goes against the run's. `--sends-at-fair-share` predicts with `fine.ps.SENDS_AT_FAIR_SHARE` on.

    .venv/bin/python benchmarks/backward_by_workers.py [--sets 19-45] [--sends-at-fair-share]
        [--output backward_by_workers]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys

from repredict_sets import HERE, kept_cases

import sgdscale.fine.ps as fine_ps
from sgdscale.report.timeline import predicted_events

PREDICTED_STEPS = 30


PARTS = ("forward", "backward", "rest", "step")


def measured_parts_s(validator, case, round_index: int) -> dict[str, float]:
    """Median over the run's measured steps (after warm-up) and workers of each part: forward
    compute (pull waits taken out), backward (its pushes' isend calls in), the rest of the step
    (waits for pulls and for the previous pushes, posting the pulls), the step."""
    suffix = f"-r{round_index}" if round_index else ""
    measurement = json.loads((validator.out_dir / "measurements" / f"{case.key}{suffix}.json").read_text())
    warmup = measurement["config"]["warmup"]
    parts: dict[str, list[float]] = {part: [] for part in PARTS}
    for worker in measurement["workers"]:
        steps = list(zip(worker["iteration_s"], worker["compute_s"], worker["backward_s"]))[warmup:]
        parts["forward"].append(statistics.median(c - b for _, c, b in steps))
        parts["backward"].append(statistics.median(b for _, _, b in steps))
        parts["rest"].append(statistics.median(i - c for i, c, _ in steps))
        parts["step"].append(statistics.median(i for i, _, _ in steps))
    return {part: statistics.median(values) for part, values in parts.items()}


def predicted_parts_s(profile, cluster, strategy, comm, variability: bool) -> dict[str, float]:
    """The same parts of the fine method's predicted timeline (every worker, PREDICTED_STEPS steps):
    its compute events named forward (and data) and backward, the rest of each step."""
    sums: dict[str, dict[tuple, float]] = {part: collections.defaultdict(float) for part in PARTS}
    for event in predicted_events(profile, cluster, strategy, comm, PREDICTED_STEPS, variability=variability):
        key, kind = (event.process, event.args.get("iteration")), event.name.split(" ")[0]
        if event.thread == "compute" and kind in ("forward", "data", "backward"):
            sums["backward" if kind == "backward" else "forward"][key] += event.duration_s
        elif event.thread == "step" and event.process.startswith("worker"):
            sums["step"][key] += event.duration_s
    per_step = {part: [sums[part].get(key, 0.0) for key in sums["step"]] for part in ("forward", "backward", "step")}
    per_step["rest"] = [s - f - b for s, f, b in zip(per_step["step"], per_step["forward"], per_step["backward"])]
    return {part: statistics.median(per_step[part]) for part in PARTS}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="19-45")
    parser.add_argument("--sends-at-fair-share", action="store_true")
    parser.add_argument("--output", default="backward_by_workers")
    args = parser.parse_args(argv)
    fine_ps.SENDS_AT_FAIR_SHARE = args.sends_at_fair_share
    low, _, high = args.sets.partition("-")
    names = [f"heldout{n}" for n in range(int(low), int(high or low) + 1)
             if (HERE / "results" / f"accuracy-heldout{n}" / "results.json").is_file()]
    # (set, model, strategy) -> workers -> [(measured / profiled, predicted / profiled)] of backward
    ratios: dict[tuple, dict[int, list[tuple[float, float]]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    # (strategy, workers) -> part -> per run, measured over predicted (the rest: its difference over the step)
    parts: dict[tuple, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    # (set, model, strategy) -> workers -> (measured, recorded fine prediction) throughput, medians of the runs
    throughputs: dict[tuple, dict[int, tuple[float, float]]] = collections.defaultdict(dict)
    for name, validator, case, runs, measured_throughput in kept_cases(names, {"ps-sync", "ps-async"}):
        if case.spec.kind != "real" or case.workers not in (2, 3):
            continue
        throughputs[(name, case.spec.label, case.strategy)][case.workers] = (
            measured_throughput, statistics.median(run["predicted_throughput"]["fine"] for run in runs))
        for run in runs:
            round_index = run.get("round", 0)
            profile, cluster, strategy, comm, variability = validator.case_inputs(case, round_index, run.get("network"))
            profiled = {"forward": sum(layer.forward_s for layer in profile.layers),
                        "backward": sum(layer.backward_s for layer in profile.layers)}
            measured = measured_parts_s(validator, case, round_index)
            predicted = predicted_parts_s(profile, cluster, strategy, comm, variability)
            ratios[(name, case.spec.label, case.strategy)][case.workers].append(
                (measured["backward"] / profiled["backward"], predicted["backward"] / profiled["backward"]))
            mine = parts[case.strategy, case.workers]
            for part in ("forward", "backward"):
                mine[f"{part}: measured / profiled"].append(measured[part] / profiled[part])
                mine[f"{part}: predicted / profiled"].append(predicted[part] / profiled[part])
                mine[f"{part}: measured / predicted"].append(measured[part] / predicted[part])
            mine["rest: measured - predicted, of the measured step"].append(
                (measured["rest"] - predicted["rest"]) / measured["step"])
            mine["step: measured / predicted"].append(measured["step"] / predicted["step"])
    lines = ["# A real PS worker's backward against its profile and the fine prediction, 2 workers against 3", "",
             f"Generated by `benchmarks/backward_by_workers.py {' '.join(argv)}`. Per run: median backward "
             "(measured: steps after warm-up, all workers; predicted: the fine method's timeline of the run's "
             "profile and network file, all workers) over the round's profiled backward; per pair, the median "
             "of its runs with 2 workers and with 3.", "",
             "| set | model | strategy | measured, 2 | predicted, 2 | measured, 3 | predicted, 3 | "
             "measured 2 over 3 | predicted 2 over 3 | throughput 3 over 2, measured / predicted |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    by_strategy: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for (name, label, strategy), per in ratios.items():
        if 2 not in per or 3 not in per:
            continue
        cells = {w: [statistics.median(r[i] for r in per[w]) for i in (0, 1)] for w in (2, 3)}
        measured_two_over_three = cells[2][0] / cells[3][0]
        predicted_two_over_three = cells[2][1] / cells[3][1]
        summary = by_strategy[strategy]
        summary["measured 2 over 3"].append(measured_two_over_three)
        summary["predicted 2 over 3"].append(predicted_two_over_three)
        for w in (2, 3):
            summary[f"measured / predicted, {w} workers"].append(cells[w][0] / cells[w][1])
        (measured_2, predicted_2), (measured_3, predicted_3) = (throughputs[(name, label, strategy)][w] for w in (2, 3))
        scaling = (measured_3 / measured_2) / (predicted_3 / predicted_2)
        summary["throughput 3 over 2, measured / predicted (fine, as recorded)"].append(scaling)
        lines.append(f"| {name} | {label} | {strategy} | {cells[2][0]:.2f} | {cells[2][1]:.2f} | {cells[3][0]:.2f} | "
                     f"{cells[3][1]:.2f} | {measured_two_over_three:.2f} | {predicted_two_over_three:.2f} | "
                     f"{scaling:.2f} |")
    lines += ["", "| strategy | ratio | pairs | median | above 1.03 | below 0.97 |", "|---|---|---:|---:|---:|---:|"]
    for strategy, named in sorted(by_strategy.items()):
        for what, values in named.items():
            lines.append(f"| {strategy} | {what} | {len(values)} | {statistics.median(values):.3f} | "
                         f"{sum(v > 1.03 for v in values)} | {sum(v < 0.97 for v in values)} |")
    lines += ["", "Where the step's time goes, every run above (and those of pairs with one worker count only): "
              "per strategy and worker count, the median over runs.", "",
              "| part | " + " | ".join(f"{strategy}, {workers} workers" for strategy, workers in sorted(parts)) + " |",
              "|---|" + "---:|" * len(parts)]
    for what in next(iter(parts.values())):
        lines.append(f"| {what} | " + " | ".join(
            f"{statistics.median(parts[key][what]):.3f} ({len(parts[key][what])})" for key in sorted(parts)) + " |")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
