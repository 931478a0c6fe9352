"""Would a steady CPU per byte predict the held-out runs better than each round's own?

Since set 45 every round of a held-out set has its own network file, and each run is predicted from
its round's. A file's point-to-point CPU per byte moves 26% between rounds in the median (up to 84%,
`network_file_spread.md`), and `netbench_cpu_samples.md` shows why: one benchmark's estimate holds
within 8% over its own repeats, but moves 40% between benchmarks. Over the PS replays of sets 45-71
the rounds' moves of a fine prediction do not follow the rounds' moves of the runs (correlation
printed below). This re-predicts the kept PS runs of those sets with each file's CPU per byte (both
the point-to-point and the all-reduce figure) replaced by the mean over the set's rounds of the same
cluster shape: in hindsight, as a benchmark that averaged over several launches would measure it.
Nothing is rerun.

    .venv/bin/python benchmarks/pooled_cpu_per_byte.py [--first 45] [--last 71] [--method fine]
        [--output pooled_cpu_per_byte]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import re
import statistics
import sys
from pathlib import Path
from unittest import mock

import numpy as np
from network_file_spread import per_round_sets, replays_with_round_files
from repredict_sets import variant_table

import sgdscale.comm as comm_package
from sgdscale.comm import network as network_module

HERE = Path(__file__).resolve().parent
CPU_KEYS = ("p2p_s_per_byte", "allreduce_s_per_byte")


def shape_of(path: Path) -> tuple[str, str]:
    """A file's folder and cluster shape: its name without the round suffix (-r1, -r2)."""
    return str(path.parent), re.sub(r"-r\d+$", "", path.stem)


@functools.cache
def pooled_cpu(folder: str, shape: str) -> dict[str, float]:
    """The mean over every round's file of one shape of each CPU-per-byte figure."""
    values: dict[str, list[float]] = {}
    for path in Path(folder).glob(f"{shape}*.json"):
        if shape_of(path)[1] != shape:
            continue
        cpu = json.loads(path.read_text()).get("cpu") or {}
        for key in CPU_KEYS:
            if cpu.get(key):
                values.setdefault(key, []).append(cpu[key])
    return {key: statistics.mean(v) for key, v in values.items()}


@functools.cache
def with_pooled_cpu(path: str):
    network = network_module.load_network(path)
    if network.cpu is None:
        return network
    pooled = pooled_cpu(*shape_of(Path(path)))
    return network.model_copy(update={"cpu": network.cpu.model_copy(update=pooled)})


def round_correlations(first: int, last: int) -> list[str]:
    """Over the PS replays with a file per round: how the rounds' moves of the file's CPU per byte,
    of the fine prediction and of the runs go together (deviations of logs from the case's mean)."""
    cpu, fine, runs = [], [], []
    for _, folder, case in replays_with_round_files(first, last):
        kept = case["runs"]
        per_byte = [(json.loads((folder / "networks" / r["network"]).read_text()).get("cpu") or {})
                    .get("p2p_s_per_byte") for r in kept]
        if not case["strategy"].startswith("ps") or None in per_byte:
            continue
        for out, values in ((cpu, per_byte), (fine, [r["predicted_throughput"]["fine"] for r in kept]),
                            (runs, [r["measured_throughput"] for r in kept])):
            logs = [math.log(v) for v in values]
            out += [x - statistics.mean(logs) for x in logs]
    return [f"Over {len(runs)} runs of the PS replays of sets {first}-{last} (each against its case's mean, "
            "in logs): correlation of the round's CPU per byte with the run "
            f"{np.corrcoef(cpu, runs)[0, 1]:+.2f}, of the recorded fine prediction with the run "
            f"{np.corrcoef(fine, runs)[0, 1]:+.2f}, of the CPU per byte with the fine prediction "
            f"{np.corrcoef(cpu, fine)[0, 1]:+.2f}; rms move of the runs {np.std(runs):.1%}, of the fine "
            f"predictions {np.std(fine):.1%}.", ""]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=45)
    parser.add_argument("--last", type=int, default=71)
    parser.add_argument("--method", default="fine")
    parser.add_argument("--output", default="pooled_cpu_per_byte")
    args = parser.parse_args(argv)
    sets = [f"heldout{n}" for n in per_round_sets(args.first, args.last)]
    variants = [("each round's file", "as is", contextlib.nullcontext),
                ("CPU per byte pooled over rounds", "pooled",
                 lambda: mock.patch.object(comm_package, "load_network", lambda path: with_pooled_cpu(str(path))))]
    text = variant_table(argv, "pooled_cpu_per_byte.py", "PS runs re-predicted with the CPU per byte pooled over rounds",
                         f"Method {args.method}, from the measured files; sets {', '.join(sets)}. Error of the median "
                         "prediction over a case's runs against their median measurement.",
                         sets, {"ps-sync", "ps-async"}, variants, method=args.method)
    lines = text.splitlines()
    lines[4:4] = round_correlations(args.first, args.last)
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
