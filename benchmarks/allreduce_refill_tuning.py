"""The node's CFS budget refilled during the wait for the all-reduce (fine), on the kept real runs.

`benchmarks/allreduce_step_parts.py` found, over every kept real-compute all-reduce run, the
optimizer after the wait running at 0.2-0.4x its profiled time where its CPU fits one period's
budget, and the forward after it faster than predicted: a worker that waits for the all-reduce
starts them on a refilled budget, at a core's speed, where the profile timed them back to back
under the quota. `sgdscale.cpu_quota.ALLREDUCE_REFILLED` replays that in the fine all-reduce method
(`cpu_quota.NodeBudgets`). This re-predicts every kept real all-reduce run of the named sets with
it and without it, from the profile as measured (fine) and at the run's own compute speed
(fine-run-speed: the model apart from the machine's drift between profile and run); nothing is
rerun. Every set named here is a tuning set for it.

    .venv/bin/python benchmarks/allreduce_refill_tuning.py [--sets heldout,heldout2,...] [--output NAME]

Raw output: benchmarks/results/allreduce_refill_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import json
import sys
from unittest import mock

from repredict_sets import HERE, held_out_sets, variant_table

from sgdscale.validation import runs_of

import sgdscale.cpu_quota as cpu_quota


def refilled(on: bool):
    return lambda: mock.patch.object(cpu_quota, "ALLREDUCE_REFILLED", on)


def recorded_at_run_speed(set_name: str) -> bool:
    """Whether every kept run of the set's real multi-worker all-reduce cases has its compute reference."""
    rows = json.loads((HERE / "results" / f"accuracy-{set_name}" / "results.json").read_text())["cases"]
    real = [row for row in rows if row.get("strategy") == "allreduce" and row.get("kind", "real") == "real"
            and row.get("workers", 2) > 1]
    return bool(real) and all(run.get("reference_step_s") for row in real for run in runs_of(row))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", help="comma-separated set names (default: every accuracy-heldout* with results)")
    parser.add_argument("--output", default="allreduce_refill_tuning")
    args = parser.parse_args(argv)
    names = held_out_sets(args.sets)
    with_reference = [name for name in names if recorded_at_run_speed(name)]
    variants = [("profiled times (before)", "profiled times", refilled(False)),
                ("budget refilled after the wait", "refilled", refilled(True))]
    text = "".join(variant_table(argv, "allreduce_refill_tuning.py", f"The CFS budget refilled after the wait ({method})",
                                 "Error of the median prediction against the median measurement, per real all-reduce "
                                 "case with two or more workers, with compute at its profiled (throttled) time and with "
                                 f"each node's budget replayed ({note}).", sets, {"allreduce"}, variants,
                                 method=method, kind="real", only=lambda case: case.workers > 1) + "\n"
                   for method, note, sets in (("fine", "from the profile as measured", names),
                                              ("fine-run-speed", "at the run's own compute speed; the sets whose "
                                               "runs recorded it", with_reference)))
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
