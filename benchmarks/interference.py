"""Does the interference model close the held-out gap? (needs root and torch, about 5-8 minutes)

The held-out evidence in small: a compute-bound conv net whose ~19 MB of gradients are mostly one
fully connected layer (ready early in backward), 2 workers, 1 Gbit/s links, 0.45 cores per node.
Each of `REPEATS` interleaved rounds
1. profiles the model on one emulated node at that quota,
2. benchmarks the shaped network (p2p, all-reduce, and `--ops overlap`: interference and CPU cost),
3. predicts 2 workers with both methods: nominal figures, the measured network without the
   interference model, and with it,
4. runs the real DDP training on 2 emulated nodes, and on 1 node (the same run's compute alone:
   how far the real step without communication is from the profile).
Every round's raw files (profile, network, measurement) and the table go to
benchmarks/results/interference/ (`results.json`, `output.txt`).

    PYTHONPATH=src .venv/bin/python benchmarks/interference.py [--repeats 3] [--out DIR]
    PYTHONPATH=src .venv/bin/python benchmarks/interference.py --rescore [--out DIR]   (summary only)
    (on a shared machine: flock /tmp/sgdscale-cpu.lock ...)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL = "cnn"
OPTIONS = {"width": 64, "num_classes": 18750}  # 256 x 18,750 classifier: 19.2 MB of its 19.6 MB of gradients
BATCH = 32
WORKERS = 2
BANDWIDTH_BPS = 1e9
CORES = 0.45


def predict_all(profile_path: Path, network_path: Path) -> dict[str, dict[str, float]]:
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel, load_network
    from sgdscale.comm.interference import node_model
    from sgdscale.predict import predict
    from sgdscale.profile import load_profile
    from sgdscale.strategy import Strategy

    profile = load_profile(profile_path)
    network = load_network(network_path)
    out: dict[str, dict[str, float]] = {}
    variants = {
        "nominal": (CommModel.from_link(BANDWIDTH_BPS, 20e-6), None, False),
        "measured": (CommModel.from_network(network), network, False),
        "measured+interference": (CommModel.from_network(network), network, True),
    }
    for name, (comm, net, interference) in variants.items():
        comm, _ = node_model(comm, network=net, link_bps=BANDWIDTH_BPS, cpu_cores=CORES, interference=interference)
        prediction = predict(profile, Cluster(WORKERS, BANDWIDTH_BPS), Strategy(), comm, [1, WORKERS])
        for r in prediction.results:
            out.setdefault(name, {})[f"{r.method}_{r.workers}w_step_s"] = r.iteration_s["mean"]
            if r.workers == WORKERS:
                out[name][f"{r.method}_throughput"] = r.throughput
    return out


def one_round(index: int, out_dir: Path) -> dict:
    from sgdscale.jsonio import write_json_atomic
    from sgdscale.runtime.measurement import save_measurement
    from sgdscale.runtime.netbench import bench_config, message_sizes, run_netbench
    from sgdscale.runtime.testbed import Testbed
    from sgdscale.runtime.train import TrainConfig, run_training

    profile_path = out_dir / f"profile-{index}.json"
    network_path = out_dir / f"network-{index}.json"
    argv = [sys.executable, "-m", "sgdscale.cli", "profile", MODEL, "-o", str(profile_path), "--threads", "1",
            "--iterations", "10", "--batch-size", str(BATCH),
            *[arg for k, v in OPTIONS.items() for arg in ("--option", f"{k}={v}")]]
    with Testbed(1, BANDWIDTH_BPS, CORES) as bed:
        done = bed.run_on_node(0, argv, timeout_s=900, env={"OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"profiling failed: {done.stderr[-2000:]}")
    config = bench_config(message_sizes(1e3, 32e6, 7), repeats=5, warmup=1, ops=["p2p", "allreduce", "overlap"])
    config["overlap_bytes"] = 19_200_000  # about the model's gradients
    with Testbed(WORKERS, BANDWIDTH_BPS, CORES) as bed:
        network = run_netbench([WORKERS], config, placement=bed, bandwidth_hint_bps=BANDWIDTH_BPS,
                               source=f"emulated, {BANDWIDTH_BPS / 1e6:g} Mbit/s, {CORES:g} cores",
                               environment={"bandwidth_bps": BANDWIDTH_BPS, "cpu_quota_cores": [CORES] * WORKERS})
    write_json_atomic(network_path, network.to_json())
    measured = {}
    for workers in (1, WORKERS):
        train = TrainConfig(model=MODEL, workers=workers, batch_size=BATCH, iterations=20, warmup=3,
                            model_options=dict(OPTIONS), bandwidth_bps=BANDWIDTH_BPS, cpu_quota=CORES)
        with Testbed(workers, BANDWIDTH_BPS, CORES) as bed:
            measured[workers] = run_training(train, placement=bed, timeout_s=900)
        save_measurement(measured[workers], out_dir / f"measurement-{index}-{workers}w.json")
    measurement = measured[WORKERS]
    itf = network.interference
    return {
        "round": index,
        "measured_throughput": measurement.throughput,
        "measured_step_s": measurement.iteration_s.model_dump(),
        "measured_1w_step_s": measured[1].iteration_s.model_dump(),
        # cores each node received, CFS throttling and the machine's other load over the window
        "cpu_received": {f"{w}w": getattr(measured[w].environment, "cpu", None) for w in measured},
        "profile_step_s": json.loads(profile_path.read_text())["iteration_s"]["mean"],
        "interference": None if itf is None else {"compute_slowdown": itf.compute_slowdown,
                                                   "comm_slowdown": itf.comm_slowdown},
        "cpu": None if network.cpu is None else network.cpu.model_dump(),
        "p2p_bps": 8 / network.p2p.beta_s_per_byte,
        "allreduce_beta_s_per_byte": network.allreduce[str(WORKERS)].beta_s_per_byte,
        "predicted": predict_all(profile_path, network_path),
    }


def summarize(rounds: list[dict]) -> list[str]:
    """Throughput errors over rounds, and the time the second worker adds to a step, real vs predicted:
    the latter compares real 2- and 1-worker runs of the same round, so the profile's own error
    (the same model profiled twice differs by up to 40% on a busy machine) cancels."""
    summary = ["", "median over rounds of the throughput error (min..max):"]
    for variant in rounds[0]["predicted"]:
        for method in ("fine", "coarse"):
            errors = [(r["predicted"][variant][f"{method}_throughput"] - r["measured_throughput"])
                      / r["measured_throughput"] for r in rounds]
            summary.append(f"  {variant:>22} {method:>6}: {statistics.median(errors):+.1%} "
                           f"({min(errors):+.1%} .. {max(errors):+.1%})")
    measured = [r["measured_throughput"] for r in rounds]
    summary.append(f"measured throughput {min(measured):.1f} .. {max(measured):.1f} samples/s "
                   f"(spread {(max(measured) - min(measured)) / statistics.median(measured):.0%} of the median)")
    summary += ["", f"time the step gains from 1 to {WORKERS} workers (ms): real | predicted (fine) nominal, "
                    "measured, measured+interference"]
    for r in rounds:
        real = (r["measured_step_s"]["mean"] - r["measured_1w_step_s"]["mean"]) * 1e3
        predicted = [(v[f"fine_{WORKERS}w_step_s"] - v["fine_1w_step_s"]) * 1e3 for v in r["predicted"].values()]
        summary.append(f"  round {r['round']}: {real:6.0f} | " + " ".join(f"{p:6.0f}" for p in predicted))
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "interference")
    parser.add_argument("--rescore", action="store_true", help="Only summarize OUT/results.json again (no runs).")
    args = parser.parse_args()
    if args.rescore:
        summary = summarize(json.loads((args.out / "results.json").read_text()))
        print("\n".join(summary))
        (args.out / "summary.txt").write_text("\n".join(summary) + "\n")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rounds = []
    lines = [f"{MODEL} {OPTIONS}, batch {BATCH}, {WORKERS} workers, {BANDWIDTH_BPS / 1e6:g} Mbit/s, {CORES:g} cores "
             f"per node; {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"]
    for index in range(args.repeats):
        row = one_round(index, args.out)
        rounds.append(row)
        (args.out / "results.json").write_text(json.dumps(rounds, indent=1))
        text = (f"round {index}: measured {row['measured_throughput']:.1f} samples/s "
                f"(step {row['measured_step_s']['mean'] * 1e3:.0f} ms; 1 worker {row['measured_1w_step_s']['mean'] * 1e3:.0f} ms; "
                f"profile step {row['profile_step_s'] * 1e3:.0f} ms); "
                f"interference {row['interference']}; p2p {row['p2p_bps'] / 1e6:.0f} Mbit/s")
        for variant, values in row["predicted"].items():
            for method in ("fine", "coarse"):
                predicted = values[f"{method}_throughput"]
                error = (predicted - row["measured_throughput"]) / row["measured_throughput"]
                text += (f"\n  {variant:>22} {method:>6}: {predicted:7.1f} samples/s "
                         f"(step {values[f'{method}_{WORKERS}w_step_s'] * 1e3:.0f} ms) error {error:+.1%}")
        print(text, flush=True)
        lines.append(text)
    summary = summarize(rounds)
    print("\n".join(summary))
    (args.out / "output.txt").write_text("\n".join(lines + summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
