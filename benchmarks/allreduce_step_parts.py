"""Where a real all-reduce step's time goes, measured against the fine method's prediction, over
every kept real-compute run of the named sets; and what the node's CFS budget, refilled while a
worker waits for the all-reduce, would move.

Held-out set 72 predicted real gpt2, bert and mobilenet_v2 3-6% too slow and cnn 12% too fast, and
its runs' CPU per step did not say why (`cpu_per_step-heldout72.md`). This reads each kept run's
measured phases (median over its measured steps, then over workers; DDP, as the runtime times them):
forward (zero_grad, the batch, DDP's buffer broadcast, forward and loss), backward (DDP waits there
for the last bucket, so it holds the exposed all-reduce and DDP's copies), optimizer, step; and the
same parts of the fine method's predicted timeline of the run's own profile and network file
(worker 0, as `sgdscale validate` predicted it): data, broadcast and forward; backward and the wait
for the all-reduce; optimizer; step. Nothing is rerun.

The refill. Under a CFS quota of q cores and period P a profile times its phases back to back, so a
phase of c CPU-seconds is timed at about c / q; a worker that waits for the all-reduce starts its
optimizer, and the next step's forward, on a fresh period's budget (q x P of CPU at a core's speed;
`sgdscale.cpu_quota`). The "refilled" column re-predicts each run with that replayed on the node's
budget (`cpu_quota.QuotaClock`: backward runs throttled to its end, the node then idles through the
predicted wait, the optimizer and the next data and forward run on the clock; averaged over 16
phases of the period): the recorded fine prediction's step less the time that saves. The wait's own
transport CPU is not charged here (the gloo threads' share of the budget), so this is the most the
refill can move. Predictions are the fine method's as `sgdscale validate` makes them, re-predicted
without its own replay of the refill (`cpu_quota.ALLREDUCE_REFILLED` off, as every set but 73
recorded them; they agree with the recorded ones there).

    .venv/bin/python benchmarks/allreduce_step_parts.py [--sets heldout,heldout2,...] [--output allreduce_step_parts]

Default: every set with kept runs (`accuracy-heldout*`). Raw output: benchmarks/results/<output>.{md,json}.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from unittest import mock

from repredict_sets import HERE, current, held_out_sets, kept_cases

import sgdscale.cpu_quota as cpu_quota
from sgdscale.cpu_quota import QuotaClock
from sgdscale.report.timeline import predicted_events
from sgdscale.validation import at_run_speed

PREDICTED_STEPS = 12
PHASES = 16  # where in the CFS period the wait ends, evenly spread
FORWARD_NAMES = ("data", "h2d", "broadcast", "forward")
PARTS = ("forward", "backward", "optimizer", "step")


def measured_parts_ms(validator, case, round_index: int) -> tuple[dict[str, float], float | None]:
    """Median over measured steps, then over workers, of each phase the runtime times (ms); and the
    run's compute reference (`sgdscale.validation.reference_step_s`, seconds; None without one)."""
    suffix = f"-r{round_index}" if round_index else ""
    measurement = json.loads((validator.out_dir / "measurements" / f"{case.key}{suffix}.json").read_text())
    warmup = measurement["config"]["warmup"]
    fields = {"forward": "forward_s", "backward": "backward_s", "optimizer": "optimizer_s", "step": "iteration_s"}
    parts = {part: 1e3 * statistics.median(statistics.median(worker[field][warmup:])
                                           for worker in measurement["workers"])
             for part, field in fields.items()}
    references = [statistics.median(w["extra"]["reference_step_s"]) for w in measurement["workers"]
                  if (w.get("extra") or {}).get("reference_step_s")]
    return parts, (statistics.median(references) if references else None)


def predicted_parts(profile, cluster, strategy, comm, variability: bool) -> tuple[dict[str, float], dict]:
    """Median per step of worker 0's predicted parts (ms), and its compute events per step."""
    per_step: dict[int, list] = collections.defaultdict(list)
    for event in predicted_events(profile, cluster, strategy, comm, PREDICTED_STEPS, variability=variability):
        if event.process.startswith("worker 0"):
            per_step[event.args.get("iteration")].append(event)
    sums: dict[str, list[float]] = collections.defaultdict(list)
    for events in per_step.values():
        kinds = collections.Counter()
        for event in events:
            kind = event.name.split(" ")[0]
            if event.thread == "step":
                kinds["step"] += event.duration_s
            elif kind in FORWARD_NAMES:
                kinds["forward"] += event.duration_s
            elif kind in ("backward", "wait"):
                kinds["backward"] += event.duration_s
            elif kind == "optimizer":
                kinds["optimizer"] += event.duration_s
        for part in PARTS:
            sums[part].append(1e3 * kinds[part])
    return {part: statistics.median(values) for part, values in sums.items()}, per_step


def refill_saving_s(per_step: dict, quota_cores: float, period_s: float) -> float:
    """Mean seconds a step saves when the optimizer after the wait, and the next step's data and forward,
    run on the node's CFS budget instead of at their throttled (profiled) speed (module docstring)."""
    steps = sorted(per_step)
    savings = []
    for this, after in zip(steps, steps[1:]):
        compute = [e for e in per_step[this] if e.thread == "compute"]
        backward_end = max(e.start_s + e.duration_s for e in compute if e.name.startswith("backward"))
        optimizer = next((e for e in compute if e.name == "optimizer"), None)
        optimizer_start = optimizer.start_s if optimizer else backward_end
        optimizer_s = optimizer.duration_s if optimizer else 0.0
        following = sorted((e for e in per_step[after]
                            if e.thread == "compute" and e.name.split(" ")[0] in FORWARD_NAMES),
                           key=lambda e: e.start_s)
        if not following:
            continue
        predicted_end = max(e.start_s + e.duration_s for e in following)
        for phase in range(PHASES):
            clock = QuotaClock(quota_cores, period_s, phase / PHASES * period_s)
            clock.run(backward_end - 5 * period_s, 5 * period_s)  # throttled through backward's end
            t = clock.run(optimizer_start, optimizer_s)
            for event in following:
                if event.name.startswith("broadcast"):  # a wait for rank 0's tree: idle, not compute
                    t += event.duration_s
                else:
                    t = clock.run(t, event.duration_s)
            savings.append(max(predicted_end - t, 0.0))
    return statistics.mean(savings) if savings else 0.0


def main(argv: list[str]) -> int:
    with mock.patch.object(cpu_quota, "ALLREDUCE_REFILLED", False):  # the model the sets recorded
        return parts_table(argv)


def parts_table(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", help="comma-separated set names (default: every accuracy-heldout* with results)")
    parser.add_argument("--output", default="allreduce_step_parts")
    args = parser.parse_args(argv)
    names = held_out_sets(args.sets)
    rows = []
    for name, validator, case, runs, _ in kept_cases(names, {"allreduce"}):
        if case.spec.kind != "real" or case.workers < 2:
            continue
        for run in runs:
            round_index = run.get("round", 0)
            try:
                measured, reference_s = measured_parts_ms(validator, case, round_index)
            except FileNotFoundError:
                continue
            profile, cluster, strategy, comm, variability = validator.case_inputs(case, round_index, run.get("network"))
            predicted, per_step = predicted_parts(profile, cluster, strategy, comm, variability)
            quota = getattr(comm, "node_quota", None)
            profiled_quota = (profile.provenance or {}).get("cpu_quota_cores")
            if quota is None or profiled_quota is None:
                continue
            cores, period_s = quota
            _, flat = predicted_parts(profile, cluster, strategy, comm, False) if variability else (None, per_step)
            saving_s = refill_saving_s(flat, cores, period_s)
            predicted_fine = current(validator, case, round_index, ["fine"])["fine"]
            samples_per_step = case.workers * profile.batch_size
            refilled = samples_per_step / (samples_per_step / predicted_fine - saving_s)
            at_speed = {}
            if reference_s is not None:
                # the same at the run's own compute speed: the model apart from the machine's drift
                _, flat_at_speed = predicted_parts(at_run_speed(profile, reference_s), cluster, strategy, comm, False)
                predicted_at_speed = current(validator, case, round_index, ["fine-run-speed"], reference_s)["fine-run-speed"]
                at_speed_saving_s = refill_saving_s(flat_at_speed, cores, period_s)
                at_speed = {"profile_over_run_speed": predicted_fine / predicted_at_speed,
                            "error_run_speed": predicted_at_speed / run["measured_throughput"] - 1,
                            "error_run_speed_refilled": samples_per_step / (
                                samples_per_step / predicted_at_speed - at_speed_saving_s) / run["measured_throughput"] - 1}
            rows.append({"set": name, "case": case.key, "model": case.spec.label.split("-")[0], "round": round_index,
                         "workers": case.workers, "quota_cores": cores, "period_ms": 1e3 * period_s,
                         "measured_ms": measured, "predicted_ms": predicted,
                         "profiled_optimizer_ms": 1e3 * profile.step.optimizer_s,
                         "optimizer_fits_one_budget": profile.step.optimizer_s <= period_s,  # its CPU (x quota) within quota x period
                         "refill_saving_ms": 1e3 * saving_s,
                         "error": predicted_fine / run["measured_throughput"] - 1,
                         "error_refilled": refilled / run["measured_throughput"] - 1, **at_speed})
            print(f"{name} {case.key} r{round_index}: error {rows[-1]['error']:+.1%}, "
                  f"refilled {rows[-1]['error_refilled']:+.1%}", file=sys.stderr)
    (HERE / "results" / f"{args.output}.json").write_text(json.dumps(rows, indent=1) + "\n")
    text = report(rows, argv)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    print(text)
    return 0


def _median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def _by_model(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    """The rows per model, in name order, then all of them."""
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for row in rows:
        groups[row["model"]].append(row)
    return sorted(groups.items()) + [("all", rows)]


def _quartiles(values) -> str:
    values = sorted(values)
    if len(values) < 2:
        return "-"
    low, _, high = statistics.quantiles(values, n=4)
    return f"{low:.3f}-{high:.3f}"


def report(rows: list[dict], argv: list[str]) -> str:
    lines = ["# A real all-reduce step's parts, measured against the fine prediction", "",
             f"Generated by `benchmarks/allreduce_step_parts.py {' '.join(argv)}`. Per case: medians over its kept "
             "runs of measured minus predicted (ms) for each part (forward: data, DDP's buffer broadcast, forward, "
             "loss; backward: with the wait for the all-reduce), the measured optimizer over the profiled one, the "
             "fine method's error (re-predicted without the refill, as every set but 73 recorded it) and with the optimizer and next forward replayed on a refilled CFS "
             "budget (`refilled`; the saving in ms).", "",
             "| set | case | quota (cores) | step measured (ms) | forward | backward + wait | optimizer | step | "
             "optimizer measured / profiled | error | saving (ms) | error, refilled |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by_case: dict[tuple, list[dict]] = collections.defaultdict(list)
    for row in rows:
        by_case[(row["set"], row["case"])].append(row)

    def gap(group, part):
        return _median(r["measured_ms"][part] - r["predicted_ms"][part] for r in group)

    for (name, key), group in by_case.items():
        lines.append(f"| {name} | {key} | {group[0]['quota_cores']:.2f} | "
                     f"{_median(r['measured_ms']['step'] for r in group):.0f} | "
                     + " | ".join(f"{gap(group, part):+.1f}" for part in PARTS) + " | "
                     f"{_median(r['measured_ms']['optimizer'] / r['profiled_optimizer_ms'] for r in group):.2f} | "
                     f"{_median(r['error'] for r in group):+.1%} | {_median(r['refill_saving_ms'] for r in group):.1f} | "
                     f"{_median(r['error_refilled'] for r in group):+.1%} |")
    lines += ["", "Per model, every run: medians of measured minus predicted (ms), of the optimizer's measured over "
              "profiled time, and of the fine method's error (absolute and signed) without and with the refill.", "",
              "| model | runs | forward | backward + wait | optimizer | step | optimizer measured / profiled | "
              "abs error | abs error, refilled | signed error | signed, refilled |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for model, group in _by_model(rows):
        lines.append(f"| {model} | {len(group)} | " + " | ".join(f"{gap(group, part):+.1f}" for part in PARTS) + " | "
                     f"{_median(r['measured_ms']['optimizer'] / r['profiled_optimizer_ms'] for r in group):.2f} | "
                     f"{_median(abs(r['error']) for r in group):.1%} | {_median(abs(r['error_refilled']) for r in group):.1%} | "
                     f"{_median(r['error'] for r in group):+.1%} | {_median(r['error_refilled'] for r in group):+.1%} |")
    with_reference = [r for r in rows if "error_run_speed" in r]
    lines += ["", "At the run's own compute speed (`fine-run-speed`: the profile scaled to the plain steps each run "
              "timed on its nodes around its window; runs since that reference was recorded): the model's error apart "
              "from the machine's drift between profile and run, without and with the refill; and the fine "
              "prediction from the profile over the one at the run's speed (above 1: the run's compute was slower than "
              "its profile's).", "",
              "| model | runs | abs error | abs error, refilled | signed error | signed, refilled | "
              "profile over run speed: median | quartiles |",
              "|---|---:|---:|---:|---:|---:|---:|---|"]
    for model, group in _by_model(with_reference):
        lines.append(f"| {model} | {len(group)} | {_median(abs(r['error_run_speed']) for r in group):.1%} | "
                     f"{_median(abs(r['error_run_speed_refilled']) for r in group):.1%} | "
                     f"{_median(r['error_run_speed'] for r in group):+.1%} | "
                     f"{_median(r['error_run_speed_refilled'] for r in group):+.1%} | "
                     f"{_median(r['profile_over_run_speed'] for r in group):.3f} | {_quartiles(r['profile_over_run_speed'] for r in group)} |")
    fits = [r for r in rows if r["optimizer_fits_one_budget"]]
    spills = [r for r in rows if not r["optimizer_fits_one_budget"]]
    lines += ["", "The optimizer after the wait, measured over profiled, by whether its CPU (profiled time x quota) "
              "fits one period's budget (quota x period): on a refilled budget such an optimizer runs at a core's "
              "speed, about quota x its profiled time; a longer one saves at most one budget.", "",
              "| optimizer's CPU | runs | measured / profiled: median | quartiles | quota (median) |",
              "|---|---:|---:|---|---:|"]
    for label, group in (("fits one budget", fits), ("spans several", spills)):
        ratios = [r["measured_ms"]["optimizer"] / r["profiled_optimizer_ms"] for r in group]
        if ratios:
            lines.append(f"| {label} | {len(group)} | {_median(ratios):.2f} | {_quartiles(ratios)} | "
                         f"{_median(r['quota_cores'] for r in group):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
