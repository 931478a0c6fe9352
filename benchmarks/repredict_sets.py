"""What a model change moves on the kept runs of the validation sets, without touching them.

For every case of the named sets (benchmarks/grids/) whose strategy is selected, re-predicts every
kept run from its own round's profile and the set's network file with the current code, as
`sgdscale validate` would, and prints the recorded error (the prediction made when the set ran, in
results.json) beside the current one. results.json is not rewritten: a held-out set keeps the
figures of the model it was held out for, and this shows what later changes did on it (which makes
it a tuning set for them). Coarse predictions take milliseconds; fine ones seconds each.

    .venv/bin/python benchmarks/repredict_sets.py [--methods coarse,coarse-nominal] [--strategies ps-sync]
        [--sets heldout2,...] [--output repredict_sets]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel
from sgdscale.commands.validate import model_spec, replay_spec
from sgdscale.predict import predict
from sgdscale.units import parse_bandwidth_bps
from sgdscale.validation import Grid, Validator, runs_of

HERE = Path(__file__).resolve().parent
SETS = ("heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8")


def grids_of(set_name: str) -> list[Grid]:
    """The set's grids as `benchmarks/accuracy.py` hands them to `sgdscale validate`."""
    spec = json.loads((HERE / "grids" / f"{set_name}.json").read_text())
    return [Grid(specs=[replay_spec(m, None, "sleep") if g["workload"] == "replay" else model_spec(m, None)
                        for m in g["models"]],
                 workers=g["workers"], bandwidths_bps=[parse_bandwidth_bps(b) for b in g["bandwidth"]],
                 strategies=g["strategies"], cpu_per_node_cores=spec["cpu_per_node"], repeats=spec["repeats"])
            for g in spec["grids"]]


def kept_cases(set_names, strategies):
    """Every kept case of the named sets whose strategy is selected, as (set name, validator, case,
    its runs, the median measured throughput): what a re-prediction needs, nothing rerun."""
    for set_name in set_names:
        folder = HERE / "results" / f"accuracy-{set_name}"
        rows = {row["key"]: row for row in json.loads((folder / "results.json").read_text())["cases"]}
        for grid in grids_of(set_name):
            validator = Validator(grid, folder, log=lambda text: None)
            for case in grid.cases():
                if case.strategy in strategies and case.key in rows:
                    runs = runs_of(rows[case.key])
                    yield set_name, validator, case, runs, statistics.median(run["measured_throughput"] for run in runs)


def error_summary(named_errors: dict[str, list[float]]) -> list[str]:
    """Markdown rows: per named list of relative errors, the case count, median and max absolute
    error and the mean signed error."""
    lines = ["", "| predictions | cases | median abs error | max abs error | mean signed |", "|---|---:|---:|---:|---:|"]
    for name, values in named_errors.items():
        absolute = [abs(v) for v in values]
        lines.append(f"| {name} | {len(values)} | {statistics.median(absolute):.1%} | {max(absolute):.1%} | "
                     f"{statistics.mean(values):+.1%} |")
    return lines


def current(validator: Validator, case, round_index: int, methods: list[str]) -> dict[str, float]:
    """The current predictions of one run (measured network file; nominal figures), as predict_case."""
    profile, cluster, strategy, comm, variability = validator.case_inputs(case, round_index)
    out: dict[str, float] = {}
    base = sorted({m.removesuffix("-nominal") for m in methods})
    if any(not m.endswith("-nominal") for m in methods):
        result = predict(profile, cluster, strategy, comm, [case.workers], methods=tuple(base),
                         iterations=validator.predict_iterations, variability=variability)
        out.update({r.method: r.throughput for r in result.results})
    if any(m.endswith("-nominal") for m in methods):
        nominal_cluster = Cluster(case.workers, case.bandwidth_bps, ps_count=max(1, case.ps_count))
        result = predict(profile, nominal_cluster, strategy, CommModel.from_link(case.bandwidth_bps, nominal_cluster.latency_s),
                         [case.workers], methods=tuple(base), iterations=validator.predict_iterations,
                         variability=variability)
        out.update({f"{r.method}-nominal": r.throughput for r in result.results})
    return {m: out[m] for m in methods}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="coarse,coarse-nominal")
    parser.add_argument("--strategies", default="ps-sync")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--output", default="repredict_sets")
    args = parser.parse_args(argv)
    methods = args.methods.split(",")
    strategies = set(args.strategies.split(","))
    lines = [f"# Recorded against current predictions: {', '.join(methods)}; {', '.join(sorted(strategies))}", "",
             f"Generated by `benchmarks/repredict_sets.py {' '.join(argv)}`. Error of the median prediction against the "
             "median measurement; 'recorded' is results.json (the model the set was run with), 'now' the current code "
             "on the same kept runs, profiles and network files.", "",
             "| set | case | measured (samples/s) | " + " | ".join(f"{m}: recorded | {m}: now" for m in methods) + " |",
             "|---|---|---:|" + "---:|---:|" * len(methods)]
    per_set: dict[str, dict[str, list[float]]] = {
        name: {f"{m} {w}": [] for m in methods for w in ("recorded", "now")} for name in args.sets.split(",")}
    for set_name, validator, case, runs, measured in kept_cases(args.sets.split(","), strategies):
        errors = per_set[set_name]
        now = [current(validator, case, run.get("round", 0), methods) for run in runs]
        cells = []
        for m in methods:
            recorded = statistics.median(run["predicted_throughput"][m] for run in runs) / measured - 1
            latest = statistics.median(p[m] for p in now) / measured - 1
            errors[f"{m} recorded"].append(recorded)
            errors[f"{m} now"].append(latest)
            cells += [f"{recorded:+.1%}", f"{latest:+.1%}"]
        lines.append(f"| {set_name} | {case.key} | {measured:.2f} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    lines += ["", "| set | " + " | ".join(f"{m}: recorded | {m}: now" for m in methods) + " |",
              "|---|" + "---|---|" * len(methods)]
    everything: dict[str, list[float]] = {}
    for set_name, errors in list(per_set.items()) + [("all", None)]:
        if errors is None:
            errors = everything
        else:
            for key, values in errors.items():
                everything.setdefault(key, []).extend(values)
        if not next(iter(errors.values()), []):
            continue
        cells = []
        for key in errors:
            absolute = [abs(v) for v in errors[key]]
            cells.append(f"{statistics.median(absolute):.1%} / {max(absolute):.1%} ({len(absolute)})")
        lines.append(f"| {set_name} | " + " | ".join(cells) + " |")
    print("\n".join(lines[-len(per_set) - 3:]))
    (HERE / "results" / f"{args.output}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
