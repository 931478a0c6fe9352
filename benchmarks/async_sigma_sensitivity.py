"""How the fine method's PS answer depends on the link-sharing sigma, on kept runs (async by default).

The fine simulator shares a server's link between flows with random log-normal weights (sigma from
the network file's incast fit, `Sharing`). With sigma 0 identical async workers settle into lock
step; any sigma breaks it. This re-predicts the kept async-PS runs of the named sets with the file's
sigma as shipped (the file's fit over all its incast sizes), with the sigma fitted at the incast size
nearest the bursts (the change held out on sets 52 and 53, taken back; needs a file with sizes fitted
apart, `Sharing.sigma_by_bytes`), with the 1-5 MB incast sizes only (validation's sizes but for the
16 MB that sets 52 and 53 added), with those sizes pooled over every round's file of the set (15
repeats a size where a set benchmarked its network before each of 3 rounds: is a steadier sigma a
better one?), with each sender count's own sigma, and with sigma fixed
at 0, 0.05 and 0.1 (or `--sigmas`; coarse, which has no sigma, for reference), and prints fine /
coarse errors against the median measurement, and each mode's median absolute fine error.

    .venv/bin/python benchmarks/async_sigma_sensitivity.py [--sets heldout12,heldout15]
        [--strategies ps-async,ps-sync] [--sigmas 0,0.05,0.1] [--modes shipped,small,pooled] [--output NAME]
Raw output: benchmarks/results/<output>.md (async_sigma_sensitivity by default).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path
from unittest import mock

from repredict_sets import current, kept_cases

from sgdscale.comm.network import load_network, sharing_from_points
from sgdscale.validation import Validator

HERE = Path(__file__).resolve().parent
FIXED_SIGMAS = "0,0.05,0.1"
AS_SHIPPED = "as shipped (the file's sigma over all its incast sizes)"
NEAREST_BURSTS = "the size nearest the bursts (sets 52-53's change, taken back)"
SMALL_SIZES = "the 1-5 MB incast only (validation's sizes but for sets 52-53)"
POOLED_ROUNDS = "the 1-5 MB incast pooled over the set's rounds"
MODES = {"shipped": AS_SHIPPED, "nearest": NEAREST_BURSTS, "small": SMALL_SIZES, "pooled": POOLED_ROUNDS,
         "senders": "per sender count"}


def small_incast(points):
    return [p for p in points if p.op == "incast" and p.bytes <= 5e6]


def pooled_sigma(validator: Validator, network) -> float:
    """The sharing sigma fitted to the 1-5 MB incast of every network file of the set that ran the
    same processes (one per round: the file and its -r1, -r2 siblings)."""
    stem = validator.ensure_network(network.environment.get("bandwidth_bps", 0.0), 0).stem
    points = [p for path in sorted((validator.out_dir / "networks").glob(f"{stem}*.json"))
              if path.stem == stem or path.stem.removeprefix(stem).startswith("-r")
              for p in small_incast(load_network(path).points)]
    pooled = sharing_from_points([p for p in network.points if p.op != "incast"] + points, network.p2p)
    return pooled.weight_sigma if pooled else 0.0


def errors(sets: list[str], mode, strategies: set[str]) -> list[tuple[str, float, float]]:
    original = Validator.case_inputs

    def patched(self, case, round_index=0):
        profile, cluster, strategy, comm, variability = original(self, case, round_index)
        if mode == AS_SHIPPED:
            return profile, cluster, strategy, comm, variability
        network = comm.network
        sharing = network.sharing if network is not None else None
        if mode == NEAREST_BURSTS and sharing is not None and sharing.sigma_by_bytes:
            burst = profile.gradient_bytes / cluster.ps_count  # a worker's gradients for one shard
            size = min(sharing.sigma_by_bytes, key=lambda text: abs(math.log(int(text) / burst)))
            comm = dataclasses.replace(comm, share_weight_sigma=float(sharing.sigma_by_bytes[size]))
        elif mode == SMALL_SIZES and network is not None:
            small = sharing_from_points([p for p in network.points if p.op != "incast"] + small_incast(network.points),
                                        network.p2p)
            comm = dataclasses.replace(comm, share_weight_sigma=small.weight_sigma if small else 0.0)
        elif mode == POOLED_ROUNDS and network is not None:
            comm = dataclasses.replace(comm, share_weight_sigma=pooled_sigma(self, network))
        elif mode == "per sender count" and sharing is not None and str(case.workers) in sharing.sigma_by_senders:
            comm = dataclasses.replace(comm, share_weight_sigma=float(sharing.sigma_by_senders[str(case.workers)]))
        elif isinstance(mode, float):
            comm = dataclasses.replace(comm, share_weight_sigma=mode)
        return profile, cluster, strategy, comm, variability

    out = []
    with mock.patch.object(Validator, "case_inputs", patched):
        for _set, validator, case, runs, measured in kept_cases(sets, strategies):
            predicted = [current(validator, case, run.get("round", 0), ["fine", "coarse"]) for run in runs]
            out.append((case.key, *(statistics.median(p[m] for p in predicted) / measured - 1 for m in ("fine", "coarse"))))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout12,heldout15")
    parser.add_argument("--strategies", default="ps-async", help="comma-separated: ps-async, ps-sync")
    parser.add_argument("--sigmas", default=FIXED_SIGMAS, help="fixed sigmas to try besides the file's")
    parser.add_argument("--modes", default="shipped,nearest,small,senders",
                        help=f"sigmas taken from the files: {', '.join(MODES)}")
    parser.add_argument("--output", default="async_sigma_sensitivity")
    args = parser.parse_args(argv)
    modes = (*(MODES[name] for name in args.modes.split(",") if name),
             *(float(v) for v in args.sigmas.split(",") if v))
    strategies = set(args.strategies.split(","))
    table = {mode: errors(args.sets.split(","), mode, strategies) for mode in modes}
    keys = [row[0] for row in table[modes[0]]]
    lines = ["# Fine PS against the link-sharing sigma, on kept runs", "",
             "Generated by `benchmarks/async_sigma_sensitivity.py " + " ".join(argv) + "`. Error of the median "
             "prediction against the median measurement, fine / coarse.", "",
             "| case | " + " | ".join(f"sigma: {m}" for m in modes) + " |", "|---|" + "---|" * len(modes)]
    for i, key in enumerate(keys):
        lines.append(f"| {key} | " + " | ".join(f"{table[m][i][1]:+.1%} / {table[m][i][2]:+.1%}" for m in modes) + " |")
    lines += ["", "| sigma | fine: median abs error | max |", "|---|---:|---:|"]
    for m in modes:
        fine = [abs(row[1]) for row in table[m]]
        lines.append(f"| {m} | {statistics.median(fine):.1%} | {max(fine):.1%} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
