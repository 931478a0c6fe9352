"""How much the coarse model's overlap heuristics matter: coarse with and without heuristics against
the fine-grained predictor (`sgdscale.fine.simulate`), over a grid of built-in profiles, bandwidths,
worker counts and strategies.

For each case it records the throughput of fine, coarse (heuristics on) and coarse (heuristics
off) and the relative differences (coarse - fine) / fine. Strategies whose fine simulator is not in
this build (the parameter-server engine) are listed as skipped.

Writes benchmarks/results/coarse_heuristics.json (raw cases) and coarse_heuristics.md (tables).
Accuracy only, no timing claims, so it needs no CPU lock.

    .venv/bin/python benchmarks/coarse_heuristics.py            # full grid
    .venv/bin/python benchmarks/coarse_heuristics.py --quick    # a small grid (smoke run)
    .venv/bin/python benchmarks/coarse_heuristics.py --strategies ps-sync,ps-async --output coarse_heuristics_ps
    .venv/bin/python benchmarks/coarse_heuristics.py --strategies ps-async [--plain-mva] --output ...
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import time
from pathlib import Path
from unittest import mock

from rich.progress import Progress

from sgdscale.cluster import Cluster
import sgdscale.coarse.models as coarse_models
from sgdscale.coarse import solve
from sgdscale.comm.cost import CommModel
from sgdscale.errors import UserError
from sgdscale.fine import simulate
from sgdscale.jsonio import write_json_atomic
from sgdscale.profile import builtin_profile_names, load_profile
from sgdscale.strategy import Strategy

RESULTS = Path(__file__).resolve().parent / "results"

STRATEGIES = {
    "allreduce/buckets": Strategy("allreduce", grouping="buckets"),
    "allreduce/per-layer": Strategy("allreduce", grouping="per-layer"),
    "allreduce/single": Strategy("allreduce", grouping="single"),
    "ps-sync": Strategy("ps-sync", grouping="per-layer"),
    "ps-async": Strategy("ps-async", grouping="per-layer"),
}


def run(quick: bool, strategies: dict[str, Strategy] = STRATEGIES) -> dict:
    models = ["resnet50", "mobilenet_v2", "gpt2"] if quick else builtin_profile_names()
    bandwidths = [1e9, 10e9] if quick else [1e9, 10e9, 40e9]
    workers = [2, 8] if quick else [2, 4, 8, 16, 32]
    variabilities = [False, True]
    latency_s = 20e-6
    cases, skipped = [], {}
    total = len(models) * len(bandwidths) * len(workers) * len(strategies) * len(variabilities)
    with Progress() as progress:
        task = progress.add_task("coarse vs fine", total=total)
        for model in models:
            profile = load_profile(model)
            for bps in bandwidths:
                comm = CommModel.from_link(bps, latency_s)
                for n in workers:
                    cluster = Cluster(n, bandwidth_bps=bps, latency_s=latency_s, ps_count=1)
                    for label, strategy in strategies.items():
                        for variability in variabilities:
                            progress.advance(task)
                            if label in skipped:
                                continue
                            try:
                                began = time.perf_counter()
                                fine = simulate(profile, cluster, strategy, comm, iterations=60, warmup=10,
                                                seed=0, variability=variability)
                                fine_s = time.perf_counter() - began
                            except UserError as error:
                                skipped[label] = str(error)
                                continue
                            began = time.perf_counter()
                            on = solve(profile, cluster, strategy, comm, seed=0, variability=variability)
                            coarse_s = time.perf_counter() - began
                            off = solve(profile, cluster, strategy, comm, seed=0, variability=variability,
                                        heuristics=False)
                            cases.append({
                                "model": model, "bandwidth_bps": bps, "workers": n, "strategy": label,
                                "variability": variability,
                                "fine": fine.throughput, "coarse_heuristics": on.throughput,
                                "coarse_plain": off.throughput,
                                "rel_diff_heuristics": (on.throughput - fine.throughput) / fine.throughput,
                                "rel_diff_plain": (off.throughput - fine.throughput) / fine.throughput,
                                "fine_time_s": fine_s, "coarse_time_s": coarse_s,
                            })
    return {
        "benchmark": "coarse_heuristics",
        "quick": quick,
        "machine": platform.platform(),
        "grid": {"models": models, "bandwidths_bps": bandwidths, "workers": workers,
                 "strategies": list(strategies), "latency_s": latency_s, "fine_iterations": 60,
                 "fine_warmup": 10, "variability": variabilities},
        "skipped": skipped,
        "cases": cases,
    }


def _stats(values: list[float]) -> tuple[float, float, float]:
    mags = [abs(v) for v in values]
    return statistics.mean(mags), statistics.median(mags), max(mags)


def markdown(data: dict) -> str:
    lines = [
        "# Coarse model: effect of the overlap heuristics",
        "",
        "Relative throughput difference of the coarse model against the fine-grained predictor,",
        "(coarse - fine) / fine, with heuristics (`heuristics=True`, the default) and without",
        f"(phases strictly in sequence). Raw cases: `{data['grid'].get('output', 'coarse_heuristics')}.json`; produced by",
        "`benchmarks/coarse_heuristics.py`" + (" --quick" if data["quick"] else "")
        + "".join(f" --{k.replace('_', '-')}" + ("" if v is True else f" {v}")
                  for k, v in data["grid"].get("options", {}).items() if v not in (None, False)) + ".",
        "",
        f"Grid: models {', '.join(data['grid']['models'])}; bandwidths "
        f"{', '.join(f'{b / 1e9:g} Gbit/s' for b in data['grid']['bandwidths_bps'])}; workers "
        f"{', '.join(map(str, data['grid']['workers']))}; latency {data['grid']['latency_s'] * 1e6:g} us; "
        "variability off and on.",
        "",
        "| strategy | variability | cases | mean abs diff, heuristics | median | max | "
        "mean abs diff, no heuristics | median | max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label in data["grid"]["strategies"]:
        for variability in (False, True):
            rows = [c for c in data["cases"] if c["strategy"] == label and c["variability"] == variability]
            if not rows:
                continue
            h = _stats([c["rel_diff_heuristics"] for c in rows])
            p = _stats([c["rel_diff_plain"] for c in rows])
            lines.append(f"| {label} | {'on' if variability else 'off'} | {len(rows)} | "
                         + " | ".join(f"{100 * v:.1f}%" for v in h) + " | "
                         + " | ".join(f"{100 * v:.1f}%" for v in p) + " |")
    if data["skipped"]:
        lines += ["", "Skipped (no fine-grained simulator in this build):", ""]
        lines += [f"- {label}: {reason}" for label, reason in data["skipped"].items()]
    worst = sorted(data["cases"], key=lambda c: -abs(c["rel_diff_heuristics"]))[:10]
    lines += ["", "Largest differences with heuristics:", "",
              "| model | strategy | Gbit/s | workers | variability | fine (samples/s) | coarse+h | coarse | "
              "diff+h | diff |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for c in worst:
        lines.append(
            f"| {c['model']} | {c['strategy']} | {c['bandwidth_bps'] / 1e9:g} | {c['workers']} | "
            f"{'on' if c['variability'] else 'off'} | {c['fine']:.1f} | {c['coarse_heuristics']:.1f} | "
            f"{c['coarse_plain']:.1f} | {100 * c['rel_diff_heuristics']:+.1f}% | {100 * c['rel_diff_plain']:+.1f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small grid (smoke run)")
    parser.add_argument("--strategies", help=f"comma-separated subset of {', '.join(STRATEGIES)}")
    parser.add_argument("--output", default="coarse_heuristics", help="results name")
    parser.add_argument("--plain-mva", action="store_true",
                        help="async PS by the plain MVA (every shard station's service cv2 1), as before set 66")
    args = parser.parse_args()
    chosen = {k: STRATEGIES[k] for k in args.strategies.split(",")} if args.strategies else STRATEGIES
    plain = dict.fromkeys(coarse_models.SERVICE_CV2, 1.0)
    with mock.patch.dict(coarse_models.SERVICE_CV2, plain) if args.plain_mva else contextlib.nullcontext():
        data = run(args.quick, chosen)
    if args.strategies or args.output != "coarse_heuristics" or args.plain_mva:
        data["grid"]["output"] = args.output
        data["grid"]["options"] = {"strategies": args.strategies, "output": args.output, "plain_mva": args.plain_mva}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_json_atomic(RESULTS / f"{args.output}.json", data)
    text = markdown(data)
    tmp = RESULTS / f".{args.output}.md.tmp"
    tmp.write_text(text)
    tmp.replace(RESULTS / f"{args.output}.md")
    print(text)


if __name__ == "__main__":
    main()
