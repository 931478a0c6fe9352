"""Why coarse sync PS missed held-out set 14's alexnet replays (+23-28%): its pull tail.

Coarse kept S / (S + 1) of the busiest server NIC's pull after the push phase (one shard: half), the
median share the fine simulator left on resnet50, bert and mobilenet_v2. alexnet's gradients become
ready largest-first (fc 16, 67 and 151 MB, then small convolutions), so the shard can reply with the
151 MB tensor only near the end of the push phase: nearly the whole pull follows it. Coarse now sends
the replies in the order the shard applies messages (`sgdscale.coarse.heuristics.sync_pull_end_s`).
This prints, from set 14's network file, fine's step, coarse's, coarse's without any pull after its
pushes and updates, and one whole pull on the server NIC.

    .venv/bin/python benchmarks/coarse_pull_tail_heldout14.py
Raw output: benchmarks/results/coarse_pull_tail_heldout14.txt (with the fixed late half of the pull:
coarse_pull_tail_heldout14_before.txt, where the push/update end was a lower bound, not the flow
shop's recurrence).
"""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

from coarse_vs_fine_syncps import step_s

from sgdscale.cluster import Cluster
from sgdscale.coarse import heuristics
from sgdscale.comm import CommModel, load_network
from sgdscale.profile import load_profile

HERE = Path(__file__).resolve().parent


def main() -> int:
    network = load_network(HERE / "results" / "accuracy-heldout14" / "networks" / "1200Mbit-q0.33-n2-3.json")
    comm = CommModel.from_network(network)
    lines = ["model workers | fine step | coarse step | coarse without pull tail | one whole pull (server NIC)"]
    for name in ("alexnet", "mlp"):
        profile = load_profile(name)
        for workers in (2, 3):
            cluster = Cluster(workers, 1.2e9, network.p2p.alpha_s, 1)
            fine, coarse = step_s(profile, cluster, comm, "fine"), step_s(profile, cluster, comm, "coarse")
            with mock.patch.object(heuristics, "sync_pull_end_s", return_value=0.0):
                bare = step_s(profile, cluster, comm, "coarse")
            pull = workers * profile.gradient_bytes * network.p2p.beta_s_per_byte
            lines.append(f"{name} w{workers} | {fine:.2f} s | {coarse:.2f} s | {bare:.2f} s | {pull:.2f} s")
            print(lines[-1], flush=True)
    (HERE / "results" / "coarse_pull_tail_heldout14.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
