"""Coarse against fine on held-out set 12's sync-PS replay cases, from the set's own inputs.

Set 12's replays put coarse sync PS 8-11% too fast where fine was within 2-6%. This predicts each
case (bert and resnet18 replays, 3 and 4 workers, one shard) from the set's profiles and network
file with both methods, no variability, with and without the server's measured CPU cost per byte,
and prints coarse's step against fine's: how much of the gap the server's CPU accounts for.

    .venv/bin/python benchmarks/coarse_vs_fine_heldout12.py
Raw output: benchmarks/results/coarse_vs_fine_heldout12.txt.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from coarse_vs_fine_syncps import step_s

from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel, load_network
from sgdscale.profile import load_profile

HERE = Path(__file__).resolve().parent
SET = HERE / "results" / "accuracy-heldout12"


def main() -> int:
    network = load_network(SET / "networks" / "850Mbit-q0.35-n3-4.json")
    measured = CommModel.from_network(network)
    free_server = dataclasses.replace(measured, server_cpu_s_per_byte=0.0)
    lines = ["case | fine step | coarse step | coarse/fine - 1 | same, server CPU free"]
    for name in ("bert-b8", "resnet18-b16"):
        profile = load_profile(SET / "profiles" / f"replay-{name}.json")
        for workers in (3, 4):
            cluster = Cluster(workers, 850e6, network.p2p.alpha_s, 1)
            fine, coarse = (step_s(profile, cluster, measured, m) for m in ("fine", "coarse"))
            fine_free, coarse_free = (step_s(profile, cluster, free_server, m) for m in ("fine", "coarse"))
            lines.append(f"{name} w{workers} | {fine:.3f} s | {coarse:.3f} s | {coarse / fine - 1:+.1%} | "
                         f"{coarse_free / fine_free - 1:+.1%}")
            print(lines[-1], flush=True)
    (HERE / "results" / "coarse_vs_fine_heldout12.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
