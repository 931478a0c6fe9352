"""Async PS with identical workers: lock step or out of phase? Real replays against both methods.
(needs root and torch)

A synthetic profile (equal layers, one tensor each) is replayed with asynchronous SGD on one
parameter server of the emulated cluster, so compute is exact sleeps and the network is the only
source of difference between workers. Each case runs `--rounds` times (interleaved). The fine
method is asked three ways, because the deterministic simulation of identical workers has more
than one steady state: identical workers (they stay in lock step, the "convoy"), workers 0.01% to
0.05% apart in speed (`--compute-scale`, which lets them drift out of phase), and the coarse
method (a queueing model that assumes no phase locking). The network file is measured on the same
cluster first (`sgdscale netbench`).

    .venv/bin/python benchmarks/async_convoy.py [--workers 4,6] [--rounds 3] [--bandwidth 100Mbit]
        [--cpu-quota 0.25]
Writes benchmarks/results/async_convoy/{profile.json,network.json,results.json,report.md} and
the measurements.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "async_convoy"
CLI = [sys.executable, "-m", "sgdscale.cli"]


def synthetic_profile(tensor_mb: float, layers: int, layer_ms: float) -> dict:
    numel = int(tensor_mb * 1e6 / 4)
    step_s = 2 * layers * layer_ms / 1e3
    return {"schema": "sgdscale.profile/1", "model": f"synthetic-{layers}x{tensor_mb:g}MB", "batch_size": 8,
            "device": "synthetic (replay experiment)",
            "provenance": {"how": "synthetic: equal layers, for the async-PS convoy experiment"},
            "layers": [{"name": f"layer{i}", "forward_s": layer_ms / 1e3, "backward_s": layer_ms / 1e3,
                        "params": [{"name": f"layer{i}.weight", "numel": numel, "bytes": numel * 4}]}
                       for i in range(layers)],
            "step": {"data_s": 0.0, "h2d_s": 0.0, "optimizer_s": 0.0},
            "iteration_s": {"mean": step_s, "p50": step_s, "p95": step_s}}


def run(args: list[str]) -> str:
    done = subprocess.run(CLI + args, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"sgdscale {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def predict(profile: Path, network: Path, workers: int, method: str, scale: str | None) -> float:
    out = OUT / "prediction.json"
    extra = ["--compute-scale", scale] if scale else []
    run(["predict", str(profile), "--strategy", "ps-async", "--ps", "1", "--workers", str(workers), "--network",
         str(network), "--no-variability", "--iterations", "400", "--method", method, "--json", str(out), *extra])
    doc = json.loads(out.read_text())
    out.unlink()
    return next(r["throughput"] for r in doc["results"] if r["method"] == method)


def predict_shared(profile: Path, network: Path, workers: int, sigma: float) -> float:
    """The fine method with links shared unequally (weight sigma), from the same network file."""
    import dataclasses

    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel, load_network
    from sgdscale.predict import predict as predict_api
    from sgdscale.profile import load_profile
    from sgdscale.strategy import Strategy

    net = load_network(network)
    comm = dataclasses.replace(CommModel.from_network(net), share_weight_sigma=sigma)
    cluster = Cluster(workers, 8.0 / net.p2p.beta_s_per_byte, net.p2p.alpha_s, 1)
    result = predict_api(load_profile(profile), cluster, Strategy(kind="ps-async"), comm, [workers], ["fine"],
                         iterations=400, variability=False)
    return result.results[0].throughput


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="4,6")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bandwidth", default="100Mbit")
    parser.add_argument("--cpu-quota", default="0.25")
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--sigma", default="0.13,0.02",
                        help="link-sharing sigmas to predict with as well (the network file here has no "
                             "incast measurement; netbench measured 0.17-0.29 at 800 Mbit/s)")
    args = parser.parse_args(argv)
    sigmas = [float(x) for x in args.sigma.split(",") if x]
    counts = [int(w) for w in args.workers.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    profile = OUT / "profile.json"
    profile.write_text(json.dumps(synthetic_profile(1.25, 4, 10.0), indent=1) + "\n")
    network = OUT / "network.json"
    if not network.exists():
        run(["netbench", "--emulate", "--bandwidth", args.bandwidth, "--cpu-quota", args.cpu_quota,
             "--workers", "2", "--ops", "p2p", "-o", str(network)])  # a parameter server only talks point to point
    measured: dict[int, list[dict]] = {w: [] for w in counts}
    for r in range(args.rounds):
        for w in counts:
            path = OUT / f"measured-w{w}-r{r + 1}.json"
            if not path.exists():
                run(["train", str(profile), "--replay", "--workers", str(w), "--strategy", "ps-async", "--ps", "1",
                     "--emulate", "--bandwidth", args.bandwidth, "--cpu-quota", args.cpu_quota,
                     "--iterations", str(args.iterations), "--warmup", "3", "-o", str(path)])
            m = json.loads(path.read_text())
            steps = [s for worker in m["workers"] for s in worker["iteration_s"]]
            measured[w].append({"round": r + 1, "throughput": m["throughput"], "step_min_s": min(steps),
                                "step_max_s": max(steps)})
            print(f"{w} workers, round {r + 1}: {m['throughput']:.1f} samples/s", flush=True)
    rows = []
    for w in counts:
        tp = [m["throughput"] for m in measured[w]]
        median = statistics.median(tp)
        apart = ",".join(f"{1 + 1e-4 * i:.4f}" for i in range(w))
        pred = {"fine, identical workers": predict(profile, network, w, "fine", None),
                "fine, 0.01-0.05% apart": predict(profile, network, w, "fine", apart),
                "coarse": predict(profile, network, w, "coarse", None),
                **{f"fine, sharing sigma {x:g}": predict_shared(profile, network, w, x) for x in sigmas}}
        rows.append({"workers": w, "measured": measured[w], "measured_median": median,
                     "band": [min(tp), max(tp)], "predicted": pred,
                     "error": {k: v / median - 1 for k, v in pred.items()}})
    (OUT / "results.json").write_text(json.dumps({"bandwidth": args.bandwidth, "cpu_quota": args.cpu_quota,
                                                   "rows": rows}, indent=1) + "\n")
    lines = ["# Async PS with identical workers: measured vs the fine method's steady states and the coarse method",
             "", f"Generated by `benchmarks/async_convoy.py {' '.join(argv)}`: a synthetic profile (4 layers x "
             f"1.25 MB, 10 ms forward and backward per layer) replayed with async PS, one server, "
             f"{args.bandwidth}, {args.cpu_quota} cores per node, {args.rounds} interleaved rounds; "
             "predictions from the network file measured on the same cluster, 400 simulated steps; the sigma "
             "columns share links unequally with that weight spread (the file has no incast measurement).", "",
             "| workers | measured: median (min-max) samples/s | " + " | ".join(rows[0]["predicted"]) + " |",
             "|---:|---|" + "---:|" * len(rows[0]["predicted"])]
    for row in rows:
        p, e = row["predicted"], row["error"]
        cells = [f"{p[k]:.1f} ({100 * e[k]:+.0f}%)" for k in p]
        lines.append(f"| {row['workers']} | {row['measured_median']:.1f} ({row['band'][0]:.1f}-{row['band'][1]:.1f}) | "
                     + " | ".join(cells) + " |")
    (OUT / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
