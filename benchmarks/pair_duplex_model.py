"""Sync PS: would a half-duplex gloo pair explain the remaining error? (experiment, no torch needed)

On held-out sets 2-4 both methods predict sync PS 12-15% too slow. Two measured facts bear on it:
gloo writes a worker's receive notice ahead of pushes that still wait for the server (so the
server's replies need not wait for all of that worker's pushes), and one gloo pair does not move
data both ways at once (`benchmarks/duplex.py`: 2.00x one way). The product model takes neither
into account exactly: its pulls follow all of a worker's pushes. This script re-predicts the kept
sync-PS replay cases of the held-out sets with the explicit DAG (`sgdscale.fine.dag`'s
construction) in four variants:

- `current`: pulls after the worker's pushes and its end of backward (the product's rule);
- `early`: the notice goes first where the shard has not posted its receives when backward ends,
  links full duplex;
- `early+half`: the same, and each worker's pair with the (single) shard is half duplex: its
  pushes and pulls share one link (processor sharing, the same total time as taking turns);
- `half`: the product's rule with half-duplex pairs.

One shard only (then a worker's pair is its NIC). Each case uses its own network file (and the
`sharing` it carries, if any). This is an experiment on retired data, not validation: any model
change it suggests needs a new held-out set.

    .venv/bin/python benchmarks/pair_duplex_model.py [--steps 60]
Writes benchmarks/results/pair_duplex_model.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel, load_network
from sgdscale.comm.topology import Topology
from sgdscale.fine.dag import nic_capacities_Bps, ps_plan
from sgdscale.fine.engine import Dag, run_dag
from sgdscale.fine.events import EventQueue
from sgdscale.fine.links import LinkNetwork
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy
from sgdscale.variability import ComputeSampler

HERE = Path(__file__).resolve().parent
SETS = ("accuracy-heldout", "accuracy-heldout2", "accuracy-heldout3", "accuracy-heldout4")
VARIANTS = ("current", "early", "early+half", "half")


def build(profile, cluster, strategy, comm, steps, early: bool, half: bool):
    """The sync-PS DAG of `steps` steps (one shard), with the notice and pair rules chosen."""
    n, layers = cluster.workers, len(profile.layers)
    plan = ps_plan(profile, cluster, strategy, comm)
    topology = Topology.of(cluster, comm, strategy)
    worker_Bps, server_Bps = nic_capacities_Bps(cluster, topology)
    assert plan.shards == 1, "one shard: a worker's pair is its NIC"
    sampler = ComputeSampler(profile, cluster, seed=0, variability=False)
    rows = np.zeros((steps, n), dtype=int)
    fwd = sampler.forward_table_s[rows] * sampler.scale[None, :, None]
    bwd = sampler.backward_table_s[rows] * sampler.scale[None, :, None]
    pre = (sampler.data_table_s[rows] + sampler.h2d_table_s[rows]) * sampler.scale[None, :]
    queue = EventQueue()
    caps = worker_Bps + worker_Bps + [server_Bps] * 2  # worker up, worker down, server up, server down
    net = LinkNetwork(queue, caps, topology.alpha_s, weight_sigma=topology.nic.share_weight_sigma)
    push = [net.add_connection(w, 2 * n + 1) for w in range(n)]
    pull = [net.add_connection(2 * n, w if half else n + w) for w in range(n)]  # half: one link both ways
    dag = Dag()
    pulled = [[-1] * plan.messages for _ in range(n)]
    last_op = [-1] * n
    step_end, replies = [], []
    alpha = topology.alpha_s
    for k in range(steps):
        ends, pushes = [], [[] for _ in range(plan.messages)]
        for w in range(n):
            op = dag.add(pre[k, w], resource=w, preds=[last_op[w]] if last_op[w] >= 0 else [])
            for layer in range(layers):
                deps = [op] + [pulled[w][m] for m in plan.need[layer] if pulled[w][m] >= 0]
                op = dag.add(fwd[k, w, layer], resource=w, preds=deps)
            forward_end, done = op, {}
            for layer in range(layers - 1, -1, -1):
                op = dag.add(bwd[k, w, layer], resource=w, preds=[op])
                done[layer] = op
            for m in range(plan.messages):
                layer, fraction = plan.ready_layer[m], plan.ready_fraction[m]
                if fraction >= 1.0:
                    ready = done[layer]
                else:
                    before = done[layer + 1] if layer + 1 < layers else forward_end
                    ready = dag.add(fraction * bwd[k, w, layer], resource=-1, preds=[before])
                pushes[m].append(dag.add(conn=push[w], nbytes=plan.bytes[m], preds=[ready, *replies], tag=k))
            last_op[w] = op
            ends.append(op)
        notice = []
        for w in range(n):
            own = [pushes[m][w] for m in range(plan.messages)]
            if early:  # goes first unless the shard has posted (all replies of k-1 in)
                notice.append([dag.add_choice(ends[w], alpha, list(replies), own)])
            else:
                notice.append([dag.add(alpha, resource=-1, preds=[ends[w]]), *own])
        replies = []
        for m in range(plan.messages):
            update = dag.add(plan.update_s[m], resource=n, preds=pushes[m])
            for w in range(n):
                pulled[w][m] = dag.add(conn=pull[w], nbytes=plan.bytes[m], preds=[update, *notice[w]], tag=k)
                replies.append(pulled[w][m])
        step_end.append(ends)
    return dag, net, n + 1, step_end


def throughput(profile, cluster, strategy, comm, steps: int, variant: str) -> float:
    dag, net, resources, step_end = build(profile, cluster, strategy, comm, steps,
                                          early="early" in variant, half="half" in variant)
    finish = run_dag(dag, resources, network=net).finish_s
    warm = steps // 3
    ends = np.array([[finish[step_end[k][w]] for w in range(cluster.workers)] for k in range(steps)])
    step_s = (ends[-1] - ends[warm]).mean() / (steps - 1 - warm)
    return cluster.workers * profile.batch_size / step_s


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--sigma", type=float, default=None,
                        help="sharing sigma for network files without a measured one (sets 1-3)")
    args = parser.parse_args(argv)
    rows = []
    lines = ["# Sync PS with a half-duplex gloo pair: re-predicted kept replay cases (experiment)", "",
             f"Generated by `benchmarks/pair_duplex_model.py {' '.join(argv)}` (explicit DAG, one shard, "
             "no variability, each case's own network file; sets without a measured sharing sigma use "
             f"{args.sigma if args.sigma is not None else 0}). Error = predicted / measured median - 1.", "",
             "| set | case | measured | " + " | ".join(VARIANTS) + " |", "|---|---|---:|" + "---:|" * len(VARIANTS)]
    for name in SETS:
        folder = HERE / "results" / name
        cases = json.loads((folder / "results.json").read_text())["cases"]
        for case in cases:
            if case["kind"] != "replay" or case["strategy"] != "ps-sync":
                continue
            nets = sorted((folder / "networks").glob("*.json"))
            network = next(load_network(p) for p in nets  # file names end in -n<worker counts>
                           if case["workers"] in [int(x) for x in p.stem.split("-n")[-1].split("-")])
            comm = dataclasses.replace(CommModel.from_network(network), interference=None)
            if network.sharing is None and args.sigma is not None:
                comm = dataclasses.replace(comm, share_weight_sigma=args.sigma)
            cluster = Cluster(case["workers"], case["bandwidth_bps"], network.p2p.alpha_s, 1)
            profile = load_profile(folder / "profiles" / f"{case['model']}.json")
            measured = case["measured_throughput"]
            got = {v: throughput(profile, cluster, Strategy(kind="ps-sync"), comm, args.steps, v) for v in VARIANTS}
            rows.append({"set": name, "case": case["key"], "measured": measured, "predicted": got,
                         "sigma": comm.share_weight_sigma})
            lines.append(f"| {name.removeprefix('accuracy-')} | {case['key']} | {measured:.1f} | " +
                         " | ".join(f"{got[v] / measured - 1:+.1%}" for v in VARIANTS) + " |")
            print(lines[-1], flush=True)
    for v in VARIANTS:
        errors = [abs(r["predicted"][v] / r["measured"] - 1) for r in rows]
        lines.append(f"\n{v}: median {np.median(errors):.1%}, max {max(errors):.1%} over {len(errors)} cases")
    out = HERE / "results"
    stem = "pair_duplex_model" + (f"-sigma{args.sigma:g}" if args.sigma is not None else "")
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(VARIANTS):]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
