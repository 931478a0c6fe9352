"""All-reduce beyond the largest measured size: the fitted line's slope (before set 54) or the slope
between the two largest measured sizes (now, `sgdscale.comm.cost.BEYOND_SLOPE`).

Validation's network benchmark times all-reduce from 1 kB to 16 MB; DDP's buckets are 25 MB, so a
model with many parameters (resnet50, 102 MB) all-reduces beyond that range and the methods
extrapolate. Held-out set 51 predicted resnet50 with 16 workers 6.3% too fast. Two parts:

1. Against measurement: the all-reduce times a later `sgdscale netbench` on the same cluster shape
   measured at 4-64 MB (`--reference`, made by
   `sgdscale netbench --emulate --workers 8,16 --bandwidth 600Mbit --cpu-quota 0.12 --pin-cpus
   --ops p2p,allreduce --min-size 4MB --max-size 64MB --points 5 --repeats 5 -o FILE`), beside what
   each of the set's network files (`--files`) gives for them under either slope.
2. On the kept all-reduce runs of the named sets (nothing rerun): each case's error under either
   slope (only cases with buckets beyond a file's largest size can move).

    .venv/bin/python benchmarks/allreduce_beyond_curve.py [--reference FILE] [--files GLOB]
        [--sets heldout18,...] [--method fine] [--repredict-from-reference] [--output NAME]

Raw output: benchmarks/results/allreduce_beyond_curve[-<method>].md, or NAME.md.
"""

from __future__ import annotations

import argparse
import glob
import sys
from unittest import mock

import numpy as np
from repredict_sets import HERE, variant_table

from sgdscale.comm import cost
from sgdscale.comm.network import load_network

SETS = ",".join(f"heldout{n}" for n in range(18, 54))
REFERENCE = HERE / "results" / "allreduce_beyond" / "600Mbit-q0.12-n8-16-4-64MB.json"
FILES = str(HERE / "results" / "accuracy-heldout51" / "networks" / "*.json")
SLOPES = {"fitted line": "fitted line (before set 54)", "largest two": "largest two sizes (now)"}


def slope(name: str):
    return mock.patch.object(cost, "BEYOND_SLOPE", name)


def against_measurement(reference_path: str, files: list[str]) -> list[str]:
    """Per file, worker count and reference size: the measured time (lower quartile of the repeats,
    as the curves take it) and the file's curve under either slope."""
    reference = load_network(reference_path)
    lines = ["## Against measurement", "", f"Reference: `{reference_path}`; times are each size's lower quartile "
             "of repeats (`CURVE_QUANTILE`); error = file's curve / measured - 1.", "",
             "| network file | workers | size (MB) | measured (s) | " + " | ".join(SLOPES.values()) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(SLOPES)]
    errors: dict[str, list[float]] = {name: [] for name in SLOPES}
    for path in files:
        models = {}
        for name in SLOPES:
            with slope(name):
                models[name] = cost.CommModel.from_network(load_network(path))
        for point in sorted((p for p in reference.points if p.op == "allreduce"), key=lambda p: (p.workers, p.bytes)):
            largest = max(models["fitted line"].measured_curves.get(point.workers, ((0.0,), ()))[0])
            if point.workers not in models["fitted line"].measured_curves or point.bytes <= largest:
                continue
            measured = float(np.quantile(point.samples_s, cost.CURVE_QUANTILE))
            cells = []
            for name in SLOPES:
                with slope(name):
                    predicted = models[name].allreduce_s(point.bytes, point.workers)
                errors[name].append(predicted / measured - 1)
                cells.append(f"{predicted:.3f} ({errors[name][-1]:+.1%})")
            lines.append(f"| {path.split('/')[-1]} | {point.workers} | {point.bytes / 1e6:.0f} | {measured:.3f} | "
                         + " | ".join(cells) + " |")
    lines += ["", "| slope | sizes beyond a file's range | median abs error | max abs error |", "|---|---:|---:|---:|"]
    for name, values in errors.items():
        if values:
            absolute = np.abs(values)
            lines.append(f"| {SLOPES[name]} | {len(values)} | {np.median(absolute):.1%} | {absolute.max():.1%} |")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=str(REFERENCE), help="network file measured beyond 16 MB ('' for none)")
    parser.add_argument("--files", default=FILES, help="glob of network files to extrapolate from")
    parser.add_argument("--sets", default=SETS, help="sets whose kept all-reduce runs to re-predict ('' for none)")
    parser.add_argument("--method", default="fine", choices=["fine", "coarse"])
    parser.add_argument("--output", help="results name (default allreduce_beyond_curve[-<method>])")
    parser.add_argument("--repredict-from-reference", action="store_true",
                        help="also re-predict the sets' kept runs from --reference in place of every round's file "
                             "(measured to its sizes: nothing extrapolated below its largest)")
    args = parser.parse_args(argv)
    lines = ["# All-reduce beyond the largest measured size", "",
             "Generated by `benchmarks/allreduce_beyond_curve.py " + " ".join(argv) + "`.", ""]
    if args.reference:
        lines += against_measurement(args.reference, sorted(glob.glob(args.files)))
    print("\n".join(lines), flush=True)
    if args.sets:
        variants = [(header, f"{args.method}, {header}", lambda name=name: slope(name))
                    for name, header in SLOPES.items()]
        if args.repredict_from_reference:
            import sgdscale.comm as comm_package

            own = comm_package.load_network
            variants.append(("the reference file, every round", f"{args.method}, from the reference file",
                             lambda: mock.patch.object(comm_package, "load_network", lambda _path: own(args.reference))))
        table = variant_table(argv, "allreduce_beyond_curve.py", "On the kept all-reduce runs",
                              "Error of the median prediction against the median measurement; nothing rerun.",
                              [s for s in args.sets.split(",") if (HERE / "grids" / f"{s}.json").exists()],
                              {"allreduce"}, variants, method=args.method)
        lines += ["", table.replace("# On the kept", "## On the kept", 1)]
    suffix = "" if args.method == "fine" else f"-{args.method}"
    (HERE / "results" / f"{args.output or 'allreduce_beyond_curve' + suffix}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
