"""How many shards coarse's share of late workers counts, on the kept sync-PS runs with several shards.

Coarse sync PS takes S / (S + 1) of the workers as late with S shards (`sgdscale.coarse.heuristics.
late_share`, read off the fine simulator on round-robin placements that spread the bytes evenly). A
worker's notice travels behind its own pushes, which its NIC sends to every shard in turn, so the
more of its bytes go elsewhere the later its notice reaches the busiest shard. Round-robin over three
shards puts nearly every byte of resnet18, resnet50, mobilenet_v2 and densenet121 on one shard (their
tensors come in threes: a convolution and its BatchNorm pair), where a worker's link carries little
more than that shard's bytes, as with one shard. Variants (`sgdscale.coarse.models.LATE_SHARE_SHARDS`):
`count`, S shards (before); `bytes`, the worker's bytes over the busiest shard's (S when balanced,
about 1 when one shard holds nearly everything). Re-predicts every kept sync-PS run with several
shards of the named sets (measured network file, nominal figures, the nodes' CPU budget); nothing is
rerun. Every set named here is a tuning set for it. Then coarse against fine on the built-in
profiles with two and three shards (1 Gbit/s, sharing sigma 0.2, no variability), as
`benchmarks/coarse_vs_fine_syncps.py` compares them.

    .venv/bin/python benchmarks/coarse_late_share_shards.py [--sets heldout27,...] [--output NAME]

Raw output: benchmarks/results/coarse_late_share_shards.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from unittest import mock

from coarse_vs_fine_syncps import LATENCY_S, step_s
from repredict_sets import HERE, coarse_variant_tables

from sgdscale.cluster import Cluster
from sgdscale.coarse import models
from sgdscale.comm import CommModel
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy

DEFAULT_SETS = "heldout27,heldout28,heldout64,heldout68,heldout70,heldout71,heldout75,heldout76"


def counting(how: str):
    return lambda: mock.patch.object(models, "LATE_SHARE_SHARDS", how)


VARIANTS = [("S shards (before)", "count", counting("count")),
            ("bytes over the busiest shard's", "bytes", counting("bytes"))]


def against_fine(models_: tuple[str, ...] = ("resnet18", "resnet50", "mobilenet_v2", "densenet121", "gpt2", "bert"),
                 layouts: tuple[tuple[int, int], ...] = ((3, 3), (4, 3), (3, 2), (5, 2))) -> list[str]:
    """Coarse / fine - 1 under each variant, with each layout's bytes per shard (round-robin)."""
    lines = ["# Coarse against fine, several shards (1 Gbit/s, sharing sigma 0.2, no variability)", "",
             "| model | workers | shards | MB per shard | " + " | ".join(h for h, _, _ in VARIANTS) + " |",
             "|---|---:|---:|---|" + "---:|" * len(VARIANTS)]
    gaps: dict[str, list[float]] = {name: [] for _, name, _ in VARIANTS}
    comm = dataclasses.replace(CommModel.from_link(1e9, LATENCY_S), share_weight_sigma=0.2)
    for model in models_:
        profile = load_profile(model)
        for workers, shards in layouts:
            cluster = Cluster(workers, 1e9, LATENCY_S, shards)
            fine = step_s(profile, cluster, comm, "fine")
            row = []
            for _, name, in_place in VARIANTS:
                with in_place():
                    gaps[name].append(fine / step_s(profile, cluster, comm, "coarse") - 1)
                row.append(f"{gaps[name][-1]:+.1%}")
            on_shard = models.shard_bytes(profile, Strategy(kind="ps-sync"), shards) / 1e6
            lines.append(f"| {model} | {workers} | {shards} | " + ", ".join(f"{b:.2f}" for b in on_shard)
                         + " | " + " | ".join(row) + " |")
            print(lines[-1], flush=True)
    lines += ["", "| variant | cases | median abs coarse/fine - 1 | max | mean signed |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {len(v)} | {statistics.median(abs(g) for g in v):.1%} | {max(abs(g) for g in v):.1%} | "
              f"{statistics.mean(v):+.1%} |" for name, v in gaps.items()]
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--output", default="coarse_late_share_shards")
    parser.add_argument("--no-fine", action="store_true", help="only the kept runs")
    args = parser.parse_args(argv)
    text = coarse_variant_tables(argv, "coarse_late_share_shards.py", "Late workers counted over shards or bytes",
                                 "kept sync-PS runs with several shards", args.sets.split(","), {"ps-sync"},
                                 VARIANTS, only=lambda case: case.ps_count > 1)
    if not args.no_fine:
        text += "\n".join(against_fine()) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
