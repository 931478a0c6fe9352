"""The ranges `sgdscale predict` states, made from the held-out record, and how often later sets
fell inside them.

Each held-out set's results.json holds every case as predicted by the model it was held out for and
as measured (median of its rounds). `sgdscale.heldout_ranges.build` turns the ratios measured /
predicted of sets FIRST-LAST into 80% ranges per strategy, method, network source and kind;
`--write-data` stores them as the package's data file (src/sgdscale/data/heldout_ranges.json).
`--check A-B` scores later sets against those ranges, the stated (widened) ones and the plain
percentiles: the share of their cases whose measured median lay inside, per method and network
source, and every case outside.

    .venv/bin/python benchmarks/heldout_ranges.py --calibrate 18-41 --write-data --output heldout_ranges
    .venv/bin/python benchmarks/heldout_ranges.py --calibrate 18-35 --check 36-41 --output heldout_ranges-split

Sets predicted before nominal rates counted framing (up to 43) take `--framing-factors
benchmarks/results/link_payload-18-31-factors.json,benchmarks/results/link_payload-32-43-factors.json`: their recorded nominal and budget predictions times
the framing's own effect on each (benchmarks/link_payload.py), the rest of their model unchanged.
Sets whose budget predictions lacked the interference the budget implies (up to 47) also take
benchmarks/budget_interference.py's factors (`--factors-out`); several files multiply.

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from sgdscale import heldout_ranges as hr  # noqa: E402


def set_range(text: str) -> list[int]:
    """ "18-45,47-50" -> [18, ..., 45, 47, ..., 50]."""
    numbers: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        numbers += range(int(first), int(last or first) + 1)
    return sorted(set(numbers))


def load_sets(numbers: list[int], factors: dict | None = None) -> dict[int, list[dict]]:
    """Each set's cases as recorded; with `factors` (`hr.merged_factors` of the factor files), the
    recorded predictions of the sets they name times each later change's own effect on them."""
    sets = {}
    for n in numbers:
        path = HERE / "results" / f"accuracy-heldout{n}" / "results.json"
        if path.exists():
            sets[n] = json.loads(path.read_text())["cases"]
    return hr.with_factors(sets, factors or {})


def bins_table(data: dict) -> list[str]:
    lines = ["Widening per source (leave one set out): " + "; ".join(
                 f"{source} x{w['factor']:.2f} (plain ranges held {w['plain_inside']:.0%} of {w['scored']} left-out "
                 f"predictions, widened {w['inside']:.0%})" for source, w in data["widening"].items()), "",
             "| strategy | method | source | kind | cases | 10th pct | median | 90th pct | stated range |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for b in data["bins"]:
        kind = b["kind"] + (" (both kinds pooled)" if b["pooled_kinds"] else "")
        lines.append(f"| {b['strategy']} | {b['method']} | {b['source']} | {kind} | {b['cases']} | "
                     f"{b['plain_low']:.3f} | {b['median']:.3f} | {b['plain_high']:.3f} | "
                     f"{b['low']:.3f}..{b['high']:.3f} |")
    return lines


def coverage_lines(rows: list[dict]) -> list[str]:
    scored = [r for r in rows if r["inside"] is not None]
    lines = [f"Cases x (method, source) scored: {len(scored)}; inside: "
             f"{sum(r['inside'] for r in scored)} ({sum(r['inside'] for r in scored) / max(len(scored), 1):.0%}).", "",
             "| method | source | kind | strategy | inside / scored |", "|---|---|---|---|---:|"]
    groups: dict[tuple, list[bool]] = defaultdict(list)
    for r in scored:
        groups[(r["method"], r["source"], r["kind"], r["strategy"])].append(r["inside"])
        groups[(r["method"], r["source"], "all", "all")].append(r["inside"])
    for key in sorted(groups):
        inside = groups[key]
        lines.append(f"| {' | '.join(key)} | {sum(inside)} / {len(inside)} ({sum(inside) / len(inside):.0%}) |")
    outside = [r for r in scored if not r["inside"]]
    lines += ["", "Outside (measured / predicted against the range):", "",
              "| case | method | source | measured / predicted | range |", "|---|---|---|---:|---|"]
    for r in outside:
        lines.append(f"| {r['key']} | {r['method']} | {r['source']} | {r['ratio']:.3f} | "
                     f"{r['low']:.3f}..{r['high']:.3f} |")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibrate", default="18-41", help="held-out sets the ranges are made from (A-B, or several: 18-45,47-50)")
    parser.add_argument("--check", default=None, help="later held-out sets scored against the ranges (A-B)")
    parser.add_argument("--write-data", action="store_true", help="store the ranges as the package's data file")
    parser.add_argument("--factors", "--framing-factors", dest="factors", default=None, metavar="FILE[,FILE]",
                        help="factor files, multiplied together: benchmarks/link_payload.py's (count framing in sets "
                             "predicted before it was) and benchmarks/budget_interference.py's (the budget path's "
                             "interference, in sets predicted before it had it)")
    parser.add_argument("--output", default="heldout_ranges")
    args = parser.parse_args(argv)
    factor_files = [path for path in (args.factors or "").split(",") if path]
    factors = hr.merged_factors(json.loads(Path(path).read_text())["sets"] for path in factor_files)
    calibration = load_sets(set_range(args.calibrate), factors)
    command = f"benchmarks/heldout_ranges.py {' '.join(argv)}".strip()
    data = hr.build(calibration, generated_by=command, factor_files=factor_files)
    lines = [f"# 80% ranges from held-out sets {args.calibrate}", "", f"Generated by `{command}`.",
             "Ratio = measured / predicted throughput of each case (median of its rounds), each set predicted by "
             "the model it was held out for. A range is the 10th..90th percentile of a bin's ratios.", "",
             f"Envelope: {json.dumps(data['envelope'])}", ""] + bins_table(data)
    if args.check:
        checked = load_sets(set_range(args.check), factors)
        found = ", ".join(map(str, sorted(checked))) or "none"
        cases = [c for n in sorted(checked) for c in checked[n]]
        for plain, title in ((False, "the stated (widened) ranges"), (True, "the plain 10th..90th percentiles")):
            lines += ["", f"## Sets {args.check} against {title} (sets found: {found})", ""]
            lines += coverage_lines(hr.coverage(hr.Ranges(data), cases, plain=plain))
    report = HERE / "results" / f"{args.output}.md"
    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.write_data:
        hr.DATA_FILE.write_text(json.dumps(data, indent=1) + "\n")
        print(f"data file written: {hr.DATA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
