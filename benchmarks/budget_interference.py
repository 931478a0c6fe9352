"""Does a prediction from nominal figures and a CPU budget lack the interference? (a tuning look)

`sgdscale predict --cpu-per-node CORES` without a network file (validation's `fine-budget` and
`coarse-budget`) caps the link at the CPU's rate and charges each PS message's CPU, but slows
nothing where compute and communication overlap: the interference model comes only from a network
file (`sgdscale.comm.interference.node_model`). Yet the budget is what makes them interfere here.
This re-predicts every kept run of the named sets from its own round's profile, with the nominal
figures and the set's budget, three ways: without interference (as validation did up to set 47);
with the interference the round's network file measured (what the budget path could know at best);
and with the interference derived from the budget and the link alone (`derived_interference`, what
`predict --cpu-per-node` does now). Beside them, the prediction from the measured network file, as
validation makes it. Nothing is rerun.

    .venv/bin/python benchmarks/budget_interference.py [--sets heldout18,...] [--method fine]
        [--strategies allreduce,ps-sync,ps-async] [--kind real] [--output NAME] [--factors-out NAME] [--budget-only]

Raw output: benchmarks/results/budget_interference.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from repredict_sets import HERE, error_summary, kept_cases

from sgdscale.comm.interference import interference_of, with_interference
from sgdscale.predict import predict

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(18, 47))  # the testbed's loss-based TCP since set 18


def predictions(validator, case, round_index: int, method: str, budget_only: bool = False) -> dict[str, float]:
    """{variant: throughput} of one kept run (`budget_only`: the budget path without and with the
    derived interference only)."""
    profile, cluster, strategy, measured_comm, variability = validator.case_inputs(case, round_index)
    nominal_cluster, models = validator.nominal_models(case)
    budget = models["budget"]
    comms = {"budget, no interference": with_interference(budget, None),
             "budget + measured interference": with_interference(budget, interference_of(measured_comm)),
             "budget (derived interference)": budget}
    if budget_only:
        del comms["budget + measured interference"]
    out = {}
    for label, comm in comms.items():
        result = predict(profile, nominal_cluster, strategy, comm, [case.workers], methods=(method,),
                         iterations=validator.predict_iterations, variability=variability)
        out[label] = next(r.throughput for r in result.results if r.workers == case.workers)
    if budget_only:
        return out
    result = predict(profile, cluster, strategy, measured_comm, [case.workers], methods=(method,),
                     iterations=validator.predict_iterations, variability=variability)
    out["measured network"] = next(r.throughput for r in result.results if r.workers == case.workers)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--method", default="fine", choices=("fine", "coarse"))
    parser.add_argument("--strategies", default="allreduce,ps-sync,ps-async")
    parser.add_argument("--kind", default="real", choices=("real", "replay", "all"),
                        help="real compute (default: a replay's sleeps spend no CPU, so no interference), replay, all")
    parser.add_argument("--output", default="budget_interference")
    parser.add_argument("--factors-out", default=None, metavar="NAME",
                        help="also write results/NAME.json: per set and case, the budget prediction with the derived "
                             "interference over the one without (benchmarks/heldout_ranges.py --factors)")
    parser.add_argument("--budget-only", action="store_true",
                        help="only the budget path without and with the derived interference (half the time)")
    args = parser.parse_args(argv)
    factors: dict[str, dict[str, dict[str, float]]] = {}
    lines: list[str] = []
    errors: dict[str, list[float]] = {}
    columns: list[str] | None = None
    for set_name, validator, case, runs, measured in kept_cases(args.sets.split(","), set(args.strategies.split(","))):
        if not validator.grid.cpu_per_node_cores or args.kind not in ("all", case.spec.kind):
            continue
        made = [predictions(validator, case, run.get("round", 0), args.method, args.budget_only) for run in runs]
        factors.setdefault(set_name.removeprefix("heldout"), {})[case.key] = {f"{args.method}-budget": (
            statistics.median(p["budget (derived interference)"] for p in made)
            / statistics.median(p["budget, no interference"] for p in made))}
        if columns is None:
            columns = list(made[0])
            lines += [f"# The budget path with and without interference ({args.method})", "",
                      f"Generated by `benchmarks/budget_interference.py {' '.join(argv)}`. Error of the median "
                      "prediction against the median measurement, per case: nominal figures with the set's CPU budget "
                      "(`--cpu-per-node`) without interference, with the round's measured interference, with the "
                      "interference derived from the budget and the link (as the code stands), and from the measured "
                      "network file.", "",
                      "| set | case | cores | measured (samples/s) | " + " | ".join(columns) + " |",
                      "|---|---|---:|---:|" + "---:|" * len(columns)]
        row = []
        for column in columns:
            error = statistics.median(p[column] for p in made) / measured - 1
            row.append(f"{error:+.1%}")
            for group in ("all", case.strategy, case.spec.kind):
                errors.setdefault(f"{group}: {column}", []).append(error)
        lines.append(f"| {set_name} | {case.key} | {validator.grid.cpu_per_node_cores} | {measured:.1f} | "
                     + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    lines += error_summary(dict(sorted(errors.items())))
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    if args.factors_out:
        (HERE / "results" / f"{args.factors_out}.json").write_text(json.dumps({
            "generated_by": f"benchmarks/budget_interference.py {' '.join(argv)}",
            "meaning": "per held-out set and case: the budget prediction with the interference derived from the budget "
                       "over the same without it (median over the kept runs), per validation variant",
            "sets": factors}, indent=1) + "\n")
    print("\n".join(lines[-len(errors) - 2:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
