"""How much of a shaped link's nominal rate carries payload, and what counting it does to predictions.

A nominal rate counts frames, not gradient bytes: TCP/IP headers and framing take the rest
(`sgdscale.comm.framing`; tc's tbf on the emulated cluster counts 1514 B per 1448 B of payload,
95.6%). Two parts, nothing rerun:

1. Every network file the held-out sets measured (`benchmarks/results/accuracy-heldout*/networks/`):
   the point-to-point fit's payload rate (8 / beta) over the shaped rate, beside what the node's CPU
   allows (cores / CPU seconds per byte): where the CPU allows far more than the link, the ratio is
   the link's payload fraction.
2. `--repredict SETS`: every kept run of those sets predicted from nominal figures (and with the CPU
   budget), as `sgdscale validate` makes them, with the rate taken as payload (`--framing none`, the
   model before framing was counted) and with tc's framing (`--framing tc`, what validation uses
   now), against the median measurement. The framing constant comes from header sizes, not from
   these runs; the sets are still not held out for it once this has been looked at. Per case, the
   ratio of the two (median) predictions is the framing's own effect; <output>-factors.json keeps
   it, and `benchmarks/heldout_ranges.py --framing-factors` applies it to the predictions recorded
   when those sets ran (each set keeps the model it was held out for, framing counted).

    .venv/bin/python benchmarks/link_payload.py [--repredict heldout36,...] [--methods fine,coarse]
        [--first-round-only] [--output link_payload]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
from unittest import mock

from repredict_sets import HERE, error_summary, kept_cases

from sgdscale.comm.framing import payload_fraction
from sgdscale.predict import predict

CPU_HEADROOM = 1.5  # a file counts as link-bound when its CPU allows at least this many times the shaped rate
STRATEGIES = {"allreduce", "ps-sync", "ps-async"}


def network_rows() -> list[dict]:
    """One row per kept network file with a shaped rate: its payload ratio and CPU headroom."""
    rows = []
    for path in sorted(HERE.glob("results/accuracy-heldout*/networks/*.json"),
                       key=lambda p: (int(p.parent.parent.name.removeprefix("accuracy-heldout") or 1), p.name)):
        data = json.loads(path.read_text())
        nominal = (data.get("environment") or {}).get("bandwidth_bps")
        if not nominal:
            continue
        payload_bps = 8.0 / data["p2p"]["beta_s_per_byte"]
        cpu = data.get("cpu") or {}
        cores = cpu.get("cores") or (data.get("environment") or {}).get("cpu_quota_cores")
        per_byte = cpu.get("p2p_s_per_byte")
        cpu_bps = 8.0 * cores / per_byte if cores and per_byte else None
        rows.append({"file": str(path.relative_to(HERE / "results")), "nominal_bps": nominal,
                     "payload_bps": payload_bps, "ratio": payload_bps / nominal, "cpu_bps": cpu_bps,
                     "link_bound": cpu_bps is not None and cpu_bps >= CPU_HEADROOM * nominal})
    return rows


def network_lines(rows: list[dict]) -> list[str]:
    tc = payload_fraction("tc")
    lines = [f"## 1. Payload rate of the kept network files (tc's framing at MTU 1500: {tc:.1%})", "",
             "| file | shaped (Mbit/s) | p2p payload (Mbit/s) | payload / shaped | CPU allows (Mbit/s) | link-bound |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        cpu = f"{r['cpu_bps'] / 1e6:,.0f}" if r["cpu_bps"] else "not measured"
        lines.append(f"| {r['file']} | {r['nominal_bps'] / 1e6:,.0f} | {r['payload_bps'] / 1e6:,.1f} | "
                     f"{r['ratio']:.1%} | {cpu} | {'yes' if r['link_bound'] else 'no'} |")
    bound = [r["ratio"] for r in rows if r["link_bound"]]
    rest = [r["ratio"] for r in rows if not r["link_bound"]]
    lines += [""]
    if bound:
        lines.append(f"Link-bound files (CPU allows >= {CPU_HEADROOM:g}x the shaped rate): {len(bound)}, payload / "
                     f"shaped median {statistics.median(bound):.1%}, range {min(bound):.1%}-{max(bound):.1%}, "
                     f"quartiles {statistics.quantiles(bound, n=4)[0]:.1%}-{statistics.quantiles(bound, n=4)[2]:.1%} "
                     f"(tc's framing: {tc:.1%}).")
    if rest:
        lines.append(f"The others (CPU-bound or not measured): {len(rest)}, median {statistics.median(rest):.1%}, "
                     f"range {min(rest):.1%}-{max(rest):.1%}.")
    return lines


def repredict_lines(set_names: list[str], methods: tuple[str, ...],
                    factors: dict[str, dict[str, dict[str, float]]], first_round_only: bool = False) -> list[str]:
    """Nominal and budget predictions of every kept run, framing none vs tc (module docstring);
    fills `factors` (set number -> case key -> validation variant -> tc / none)."""
    import sgdscale.runtime.testbed as testbed

    variants = {"payload = rate": "none", "tc framing": "tc"}
    columns = [f"{m} {source}: {name}" for m in methods for source in ("nominal", "budget") for name in variants]
    lines = ["## 2. Kept runs predicted from nominal figures, the rate as payload vs tc's framing", "",
             ("Error of the prediction from each case's first round's profile" if first_round_only else
              "Error of the median prediction over the case's runs (each from its round's profile)")
             + " against the median measurement (positive: predicted too fast).", "",
             "| set | case | measured (samples/s) | " + " | ".join(columns) + " |",
             "|---|---|---:|" + "---:|" * len(columns)]
    errors: dict[str, list[float]] = {c: [] for c in columns}
    by_kind: dict[str, list[float]] = {}
    for set_name, validator, case, runs, measured in kept_cases(set_names, STRATEGIES):
        per_column: dict[str, list[float]] = {c: [] for c in columns}
        made: dict[str, dict[str, float]] = {}  # profile content -> column -> throughput (nominal needs no network)
        for run in runs[:1] if first_round_only else runs:
            round_index = run.get("round", 0)
            content = hashlib.sha1(validator.ensure_profile(case.spec, round_index).read_bytes()).hexdigest()
            if content not in made:
                made[content] = {}
                profile, _, strategy, _, variability = validator.case_inputs(case, round_index)
                for name, framing in variants.items():
                    with mock.patch.object(testbed, "LINK_FRAMING", framing):
                        cluster, models = validator.nominal_models(case)
                    for source, comm in models.items():
                        result = predict(profile, cluster, strategy, comm, [case.workers], methods=methods,
                                         iterations=validator.predict_iterations, variability=variability)
                        made[content].update({f"{r.method} {source}: {name}": r.throughput for r in result.results})
            for column, throughput in made[content].items():
                per_column[column].append(throughput)
        for method in methods:
            for source in ("nominal", "budget"):
                before, after = (per_column[f"{method} {source}: {name}"] for name in variants)
                if before and after:
                    factors.setdefault(set_name.removeprefix("heldout"), {}).setdefault(case.key, {})[
                        f"{method}-{source}"] = statistics.median(after) / statistics.median(before)
        cells = []
        for column in columns:
            if per_column[column]:
                error = statistics.median(per_column[column]) / measured - 1
                errors[column].append(error)
                by_kind.setdefault(f"{case.spec.kind} {case.strategy} {column}", []).append(error)
                cells.append(f"{error:+.1%}")
            else:
                cells.append("-")
        lines.append(f"| {set_name} | {case.key} | {measured:.2f} | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    lines += error_summary({c: v for c, v in errors.items() if v})
    lines += error_summary(dict(sorted(by_kind.items())))
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repredict", default="", help="comma-separated set names (e.g. heldout36,heldout37)")
    parser.add_argument("--methods", default="fine,coarse")
    parser.add_argument("--first-round-only", action="store_true",
                        help="predict each case from its first round's profile only (3x faster for real cases)")
    parser.add_argument("--output", default="link_payload")
    args = parser.parse_args(argv)
    lines = ["# What a shaped link's nominal rate carries as payload", "",
             f"Generated by `benchmarks/link_payload.py {' '.join(argv)}`.", ""]
    lines += network_lines(network_rows())
    print("\n".join(lines), flush=True)
    if args.repredict:
        factors: dict[str, dict[str, dict[str, float]]] = {}
        lines += [""] + repredict_lines(args.repredict.split(","), tuple(args.methods.split(",")), factors,
                                        args.first_round_only)
        (HERE / "results" / f"{args.output}-factors.json").write_text(json.dumps(
            {"generated_by": f"benchmarks/link_payload.py {' '.join(argv)}",
             "meaning": "per held-out set and case: prediction with tc's framing / with the rate as payload, "
                        "per validation variant (same model otherwise)", "sets": factors}, indent=1) + "\n")
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    print(text[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
