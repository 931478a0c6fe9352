"""The models as they are now, scored on the held-out sets they have not been changed on.

`where_it_stands.py` scores each held-out set by the model it was held out for, so its medians over
sets 18-63 mix some twenty versions of the predictors. A user asks what today's code does. This
pools, per strategy, the cases of the held-out sets whose recorded predictions (results.json, made
when the set ran, before anything was looked at) are the ones the current code makes: for those sets
no model change was made since, so they are held out for the model as it is now. Which sets those are
is the constant CURRENT below, checked by re-predicting every kept run with the current code
(`--verify`; `benchmarks/repredict_sets.py` does the same and keeps a table): a set stays in only if
every case's recorded and current prediction agree within 0.05% for every method reported.

Per strategy and method (a measured network file; nominal bandwidth and latency; nominal plus the
CPU budget), over cases (not set medians): the median and max absolute error against the median
of the case's runs, the mean signed error, how many predictions fall inside the runs' band (min..max),
against the issue's targets (fine: median <= 3%, max <= 8%; coarse: median <= 6%), replay and
real compute apart too; and the spread of the same cases' runs ((max - min) / median).

    .venv/bin/python benchmarks/current_model.py [--verify] [--output current_model]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
METHODS = ("fine", "coarse", "fine-nominal", "coarse-nominal", "fine-budget", "coarse-budget")
TARGETS = {"fine": (0.03, 0.08), "coarse": (0.06, None)}  # (median, max) of the absolute error
# Per strategy, the held-out sets run on the current predictors (see the module docstring), and the
# first set whose nominal and budget columns are today's too:
# - all-reduce: both all-reduce models changed before set 61 (gloo's two collective threads,
#   `sgdscale.comm.streams`); sets 61, 62, 64 and 65 ran with it.
# - parameter servers: the fine and coarse PS predictors given a network file have not changed since
#   set 39 was run (held out for pulls received as they arrive, not kept); sets 52 and 53 ran with a
#   sharing sigma taken at the bursts' size, taken back after set 53, so they are left out. Nominal
#   rates count framing since set 44; the budget path's interference since set 48. Set 49 was held out
#   for other typical CPU figures in the budget path (not kept): its budget columns are not today's.
# - sets 64 (two server shards; all-reduce with 7 workers) and 65 (all-reduce) ran with no predictor change.
# - coarse async PS changed before set 66 (the shard's replies take turns: `SERVICE_CV2` in
#   sgdscale.coarse.models), so its coarse columns count from set 66 (`coarse_from`); fine's from 40.
#   Set 67 (async PS) ran with no predictor change since, and set 68 (two and three server shards).
# - coarse async PS with several shards changed after set 68 (the worker at its shards in parallel:
#   `SHARDS_IN_PARALLEL`), so set 68's coarse async columns (all its cases have two or three shards)
#   are not today's (`coarse_except`); one shard is unchanged, so sets 66 and 67 still count.
#   Set 69 (async PS with two and three shards) was held out for that change, which it kept; set 70
#   (two and three shards) ran with no predictor change since.
# - set 71 (sync PS with two and three shards) was held out for a coarse sync PS pipeline per shard
#   (`SHARD_PIPELINES`), not kept: its recorded coarse columns are that variant's (`coarse_except`);
#   fine is today's.
# - set 73 (real all-reduce) was held out for the fine all-reduce method's CFS budget refilled after the
#   wait (`cpu_quota.ALLREDUCE_REFILLED`), not kept: its real cases' recorded fine columns are that
#   variant's (`real_fine_except`: per kind of case, real or replay, and per method, here the fine
#   method given the network file only); the rest are today's. Set 74 (real all-reduce) ran with no
#   predictor change since.
# - set 75 (sync PS, one to three shards) was held out for the fine PS method's shard spending its
#   transport CPU per byte beside the wire (`sgdscale.fine.ps.RECEIVE_OVERLAPS_TRANSFER`,
#   `SEND_OVERLAPS_TRANSFER`), not kept: its recorded fine column from a measured file is that variant's
#   (from nominal figures, with or without the CPU budget, the variant predicts the same), its coarse
#   columns today's; its fine columns are all out since set 76's change (below).
# - set 76 (sync PS, two and three shards) was held out for sync PS pushes sharing equally where there
#   are at least as many workers as shards (`sgdscale.comm.sharing.PUSHES_SHARE_EQUALLY`), kept: the
#   fine sync PS predictions of every earlier set with several shards changed (`fine_except`: their
#   fine columns from a measured file, nominal figures and the budget; coarse and one shard unchanged).
# - set 77 (sync PS, two and three shards) was held out for coarse counting the shards of its share of
#   late workers by bytes (`sgdscale.coarse.models.LATE_SHARE_SHARDS`), kept: the coarse sync PS
#   predictions of earlier sets with several shards changed (`coarse_except`: every coarse column;
#   fine and one shard unchanged).
# - set 78 (sync and async PS, one to four shards) was held out for the fine PS method's shard spending
#   its CPU per byte beside the wire while its pushes slow as it replies (`RECEIVE_OVERLAPS_TRANSFER`,
#   `sgdscale.comm.sharing.RECEIVE_SHARE_WHILE_SENDING`), kept: every fine PS prediction of earlier sets
#   changed, from a measured file, nominal figures and the budget alike (`fine_from`: 78); coarse unchanged.
# - set 79 (sync and async PS replays, one to three shards, 3-7 workers): no predictor change since set 78.
# - set 80 (sync and async PS, real compute, one and two shards, 3-5 workers): no predictor change since set 78.
# - set 84 (sync PS, real compute and a replay, one and two shards) was held out for a sync shard posting its
#   next receives the network file's send lead before its replies arrive (`sgdscale.fine.ps.POSTS_AHEAD_BY_SEND_LEAD`),
#   not kept: its recorded fine columns from a measured file are that variant's (`real_fine_except`,
#   `replay_fine_except`); from nominal figures and the budget (no lead there) and coarse they are today's.
# - set 85 (sync and async PS, real compute and a replay, one and two shards) was held out for late joiners into
#   a busy node (`sgdscale.comm.sharing.LATE_JOINER_WEIGHT`), kept: every fine PS prediction of earlier sets
#   changed, from a measured file, nominal figures and the budget alike (`fine_from`: 85); coarse unchanged.
# - set 86 (sync and async PS, real compute and replays, one and two shards): no predictor change since set 85.
CURRENT = {
    "allreduce": {"sets": (61, 62, 64, 65, 72, 73, 74), "nominal_from": 61, "budget_from": 61, "real_fine_except": (73,)},
    "ps-sync": {"sets": (40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 55, 57, 60, 63, 64, 68, 70, 71, 75, 76, 77, 78, 79, 80, 82, 83,
                         84, 85, 86),
                "nominal_from": 44, "budget_from": 48, "budget_except": (49,), "coarse_except": (64, 68, 70, 71, 75, 76),
                "fine_from": 85},
    "ps-async": {"sets": (40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 55, 57, 60, 63, 64, 66, 67, 68, 69, 70, 78, 79, 80, 81, 83,
                          85, 86),
                 "nominal_from": 44, "budget_from": 48, "budget_except": (49,), "coarse_from": 66, "coarse_except": (68,),
                 "fine_from": 85},
}
AGREE = 0.0005  # recorded and current predictions agree within 0.05%


def cases_of(strategy: str) -> list[tuple[int, dict]]:
    out = []
    for n in CURRENT[strategy]["sets"]:
        data = json.loads((HERE / "results" / f"accuracy-heldout{n}" / "results.json").read_text())
        out += [(n, c) for c in data["cases"] if c["strategy"] == strategy]
    return out


def methods_of(strategy: str, set_number: int, kind: str) -> tuple[str, ...]:
    """The methods whose recorded predictions on this set's cases of this kind (real, replay) are today's."""
    spec = CURRENT[strategy]
    return tuple(m for m in METHODS
                 if set_number >= spec.get(f"{m.split('-')[0]}_from", 0)
                 and set_number not in spec.get(f"{m.split('-')[0]}_except", ())
                 and set_number not in spec.get(f"{kind}_{m}_except", ())
                 and (not m.endswith(("-nominal", "-budget"))
                      or (m.endswith("-nominal") and set_number >= spec["nominal_from"])
                      or (m.endswith("-budget") and set_number >= spec["budget_from"]
                          and set_number not in spec.get("budget_except", ()))))


def verify(only_sets: set[int] | None = None) -> list[str]:
    """Re-predict every kept run of the CURRENT sets (or of `only_sets` among them) with today's code;
    the lines that disagree."""
    sys.path.insert(0, str(HERE))
    from repredict_sets import current, kept_cases

    problems = []
    for strategy, spec in CURRENT.items():
        for n in spec["sets"]:
            if only_sets is not None and n not in only_sets:
                continue
            for _, validator, case, runs, _ in kept_cases([f"heldout{n}"], {strategy}):
                methods = list(methods_of(strategy, n, case.spec.kind))
                now = [current(validator, case, run.get("round", 0), methods) for run in runs]
                for m in methods:
                    for run, latest in zip(runs, now):
                        recorded = run["predicted_throughput"][m]
                        if abs(latest[m] / recorded - 1) > AGREE:
                            problems.append(f"set {n} {case.key} round {run.get('round', 0)} {m}: "
                                            f"recorded {recorded:.3f}, now {latest[m]:.3f}")
                print(f"checked set {n} {case.key}", flush=True)
    return problems


def spread(case: dict) -> float | None:
    runs = [r["measured_throughput"] for r in case.get("runs", [])]
    return (max(runs) - min(runs)) / statistics.median(runs) if len(runs) > 1 else None


def inside_band(case: dict, method: str) -> bool:
    runs = [r["measured_throughput"] for r in case.get("runs", [])]
    predicted = case["predicted_throughput"][method]
    return bool(runs) and min(runs) <= predicted <= max(runs)


def summary_row(label: str, method: str, picked: list[tuple[int, dict]]) -> str:
    errors = [c["error"][method] for _, c in picked]
    absolute = [abs(e) for e in errors]
    median, worst = statistics.median(absolute), max(absolute)
    target = TARGETS.get(method.split("-")[0]) if method in ("fine", "coarse") else None
    verdict = ""
    if target is not None:
        met = median <= target[0] and (target[1] is None or worst <= target[1])
        verdict = ("met" if met else "missed") + f" (median <= {target[0]:.0%}" + (
            f", max <= {target[1]:.0%})" if target[1] else ")")
    inside = sum(inside_band(c, method) for _, c in picked)
    sets = sorted({n for n, _ in picked})
    return (f"| {label} | {method} | {len(sets)} | {len(picked)} | {median:.1%} | {worst:.1%} | "
            f"{statistics.mean(errors):+.1%} | {inside}/{len(picked)} | {verdict} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verify", action="store_true", help="re-predict every kept run first (minutes)")
    parser.add_argument("--verify-sets", help="with --verify: only these sets, comma-separated (e.g. 73)")
    parser.add_argument("--output", default="current_model")
    args = parser.parse_args(argv)
    lines = ["# The models as they are now, on the held-out sets they were not changed on", "",
             f"Generated by `benchmarks/current_model.py {' '.join(argv)}`. Cases pooled over the sets named per "
             "strategy (`CURRENT` in the script: the sets whose recorded predictions today's code repeats); error = "
             "(predicted - median measured) / median measured; band = the runs' min..max.", ""]
    if args.verify:
        only = {int(n) for n in args.verify_sets.split(",")} if args.verify_sets else None
        problems = verify(only)
        lines += [("Verified: every kept run of these sets" if only is None else
                   f"Verified (sets {args.verify_sets} only): every kept run") + " re-predicted with today's code agrees with its recorded "
                  f"prediction within {AGREE:.2%}" if not problems else "Verification FAILED:", ""]
        lines += [f"- {p}" for p in problems]
        if problems:
            print("\n".join(lines))
            return 1
    lines += ["| strategy (sets) | method | sets | cases | median abs error | max abs error | mean signed | "
              "inside the runs' band | target |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    kinds_rows = []
    spreads_rows = []
    for strategy in CURRENT:
        picked = cases_of(strategy)
        label = f"{strategy} ({', '.join(map(str, CURRENT[strategy]['sets']))})"
        for method in METHODS:
            have = [(n, c) for n, c in picked if method in methods_of(strategy, n, c["kind"]) and method in c["error"]]
            if have:
                lines.append(summary_row(label, method, have))
        for kind in ("replay", "real"):
            of_kind = [(n, c) for n, c in picked if c["kind"] == kind]
            for method in ("fine", "coarse"):
                have = [(n, c) for n, c in of_kind if method in methods_of(strategy, n, kind)]
                if have:
                    kinds_rows.append(summary_row(f"{strategy}, {kind}", method, have))
        values = [s for _, c in picked if (s := spread(c)) is not None]
        spreads_rows.append(f"| {strategy} | {len(values)} | {statistics.median(values):.1%} | {max(values):.1%} |")
    lines += ["", "Replay and real compute apart:", "",
              "| strategy, kind | method | sets | cases | median abs error | max abs error | mean signed | "
              "inside the runs' band | target |", "|---|---|---:|---:|---:|---:|---:|---:|---|", *kinds_rows]
    lines += ["", "The same cases' runs (repeatability; target: median <= 3%, max <= 8%):", "",
              "| strategy | cases | median spread | max spread |", "|---|---:|---:|---:|", *spreads_rows]
    lines += ["", "Every case:", "", "| set | case | kind | measured (samples/s) | runs' spread | "
              + " | ".join(METHODS) + " |", "|---|---|---|---:|---:|" + "---:|" * len(METHODS)]
    for strategy in CURRENT:
        for n, c in cases_of(strategy):
            s = spread(c)
            cells = [f"{c['error'][m]:+.1%}" if m in methods_of(strategy, n, c["kind"]) and m in c["error"] else "-"
                     for m in METHODS]
            lines.append(f"| {n} | {c['key']} | {c['kind']} | {c['measured_throughput']:.2f} | "
                         f"{'-' if s is None else f'{s:.1%}'} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
