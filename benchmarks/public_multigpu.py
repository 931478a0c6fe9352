"""Reproduce published multi-GPU data-parallel throughput with sgdscale; report every case's error.

Reads benchmarks/public_data/multigpu.json (every number there has its source: title, URL,
table). For each case: take sgdscale's built-in profile of the same model (its layer structure,
parameter tensors and gradient ready order; measured on this project's CPU), calibrate it to the
published ONE-device throughput at the published per-device batch (`calibrate.to_throughput`,
what `sgdscale predict --device-throughput N/s --batch-size B` does), and predict the
multi-device throughput on the case's network (flat cluster: every worker its own link of the
stated bandwidth; see each case's `assumed`). Prints one line per (case, device count) with the
error = predicted / published - 1, with per-iteration variability off (deterministic; GPU steps
vary far less than this CPU's) and on (the CPU profile's relative spread, as a pessimistic bound),
and writes benchmarks/results/public_multigpu/{results.json,summary.md}.

Extending it: add a case to the JSON (same fields). Multi-GPU nodes: give `gpus_per_node`,
`intra_bandwidth`, `intra_latency` (and `allreduce`: flat/hierarchical/tree/auto, or
`ps_placement`) and the case runs on sgdscale's two-level topology (`--gpus-per-node`); a case
with `folded_gpus_per_node` is modelled one worker per node instead, calibrated to the node's
published throughput.

    .venv/bin/python benchmarks/public_multigpu.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "public_data" / "multigpu.json"
OUT = ROOT / "benchmarks" / "results" / "public_multigpu"


def cluster_for(case: dict, workers: int):
    """The flat cluster, strategy and cost model of a case."""
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel
    from sgdscale.strategy import MIB, Strategy
    from sgdscale.units import parse_bandwidth_bps, parse_time_s

    bandwidth = parse_bandwidth_bps(case["bandwidth"])  # a number (bit/s) or text such as 25Gbit
    latency = parse_time_s(case["latency"])
    ps = case.get("ps_per_node", 0) * workers if case["strategy"].startswith("ps") else 1
    topology = {}
    if "gpus_per_node" in case:  # multi-GPU nodes: intra-node link + one NIC per node (sgdscale.comm.topology)
        topology = {"gpus_per_node": case["gpus_per_node"],
                    "intra_bandwidth_bps": parse_bandwidth_bps(case["intra_bandwidth"]),
                    "intra_latency_s": parse_time_s(case["intra_latency"])}
    cluster = Cluster(1, bandwidth, latency, max(ps, 1), **topology)
    strategy = Strategy(kind=case["strategy"], grouping=case.get("grouping"),
                        bucket_bytes=case.get("bucket_mb", 25) * MIB, allreduce=case.get("allreduce", "flat"),
                        ps_placement=case.get("ps_placement", "dedicated"))
    return cluster, strategy, CommModel.from_link(bandwidth, latency, strategy.algorithm)


def implied_bandwidth_bps(profile, case: dict, count: int, published: float) -> float | None:
    """The link bandwidth at which the deterministic prediction equals the published throughput
    (bisection in log space between 10 Mbit/s and 100 Tbit/s); None when no bandwidth does, and
    for parameter-server cases, whose discrete-event predictions take seconds each."""
    from sgdscale.predict import predict

    if case["strategy"] != "allreduce":
        return None

    def throughput(bps: float) -> float:
        cluster, strategy, comm = cluster_for({**case, "bandwidth": bps}, count)
        return predict(profile, cluster, strategy, comm, [count], ["fine"], iterations=20, warmup=2,
                       variability=False).results[0].throughput

    low, high = 1e7, 1e14
    if not throughput(low) <= published <= throughput(high):
        return None
    for _ in range(30):
        middle = (low * high) ** 0.5
        low, high = (middle, high) if throughput(middle) < published else (low, middle)
    return (low * high) ** 0.5


def calibrated(case: dict) -> tuple:
    """(profile calibrated to the published one-worker speed, batch per worker, that speed, the published
    throughput per worker count, whether a worker is a whole node)."""
    from sgdscale.calibrate import to_throughput
    from sgdscale.profile import load_profile

    per_node = "folded_gpus_per_node" in case
    if per_node:
        batch = case["batch_per_gpu"] * case["folded_gpus_per_node"]
        one, measured = case["one_node_samples_per_s"], case["measured_nodes"]
    else:
        batch = case["batch_per_gpu"]
        one = case["one_gpu_samples_per_s"]
        measured = case.get("measured") or {n: e * int(n) * one for n, e in case["measured_efficiency"].items()}
    return to_throughput(load_profile(case["model"]), one, batch), batch, one, measured, per_node


def predicted(profile, case: dict, count: int, variability: bool):
    """The fine method's prediction of one case at `count` workers."""
    from sgdscale.predict import predict

    cluster, strategy, comm = cluster_for(case, count)
    steps = 50 if case["strategy"] == "allreduce" else 20  # the PS simulation costs ~1 ms per message
    return predict(profile, cluster, strategy, comm, [count], ["fine"], iterations=steps, warmup=5,
                   variability=variability).results[0]


def predict_case(case: dict) -> list[dict]:
    profile, batch, one, measured, per_node = calibrated(case)
    rows = []
    for count_text, published in measured.items():
        count = int(count_text)
        cluster, _, _ = cluster_for(case, count)
        row = {"case": case["id"], "source": case["source"], "model": case["model"], "precision": case["precision"],
               "strategy": case["strategy"], "topology": (f"{case['gpus_per_node']} GPUs/node, {case.get('allreduce') or case.get('ps_placement')}"
                                                          if "gpus_per_node" in case else "flat"),
               "workers": count, "unit": "nodes" if per_node else "GPUs", "batch_per_worker": batch,
               "one_worker_samples_per_s": one, "published_samples_per_s": published,
               "published_efficiency": published / (count * one)}
        for variability in (False, True):
            result = predicted(profile, case, count, variability)
            key = "var" if variability else "det"
            row[f"predicted_samples_per_s_{key}"] = result.throughput
            row[f"predicted_efficiency_{key}"] = result.throughput / (count * one)
            row[f"error_{key}"] = result.throughput / published - 1
            row[f"bottleneck_{key}"] = result.bottleneck
        row["assumed_bandwidth_bps"] = cluster.bandwidth_bps
        row["implied_bandwidth_bps"] = implied_bandwidth_bps(profile, case, count, published)
        rows.append(row)
    return rows


def predict_device_case(case: dict) -> dict:
    """Calibrate to the published speed on one device, move by roofline to the other, compare."""
    from sgdscale.calibrate import retarget, to_throughput
    from sgdscale.device import get_device
    from sgdscale.profile import load_profile

    source, target = case["from"], case["to"]
    measured_there = to_throughput(load_profile(case["model"]), source["samples_per_s"], source["batch"])
    at_target_batch = to_throughput(measured_there, source["samples_per_s"], target["batch"])  # same speed per sample
    moved = retarget(at_target_batch, get_device(target["device"]), target["precision"], get_device(source["device"]),
                     source["precision"])
    predicted = target["batch"] / moved.compute_s
    naive = source["samples_per_s"]  # "the new device is as fast as the old one"
    return {"case": case["id"], "source": case["source"], "model": case["model"],
            "from": f"{source['device']} {source['precision']}", "to": f"{target['device']} {target['precision']}",
            "from_samples_per_s": source["samples_per_s"], "published_samples_per_s": target["samples_per_s"],
            "predicted_samples_per_s": predicted, "error": predicted / target["samples_per_s"] - 1,
            "published_speedup": target["samples_per_s"] / naive, "predicted_speedup": predicted / naive}


def implied(row: dict) -> str:
    bps = row["implied_bandwidth_bps"]
    if bps is None:
        return "not computed (PS)" if row["strategy"] != "allreduce" else "no bandwidth"
    return f"{bps / 8e9:.3g} GB/s"


def main() -> int:
    data = json.loads(DATA.read_text())
    rows = []
    for case in data["cases"]:
        for row in predict_case(case):
            rows.append(row)
            print(f"{row['case']:28s} {row['workers']:4d} {row['unit']:5s} published {row['published_samples_per_s']:9.0f}/s "
                  f"(eff {row['published_efficiency']:5.1%})  predicted {row['predicted_samples_per_s_det']:9.0f}/s "
                  f"(eff {row['predicted_efficiency_det']:5.1%}, error {row['error_det']:+6.1%}); with CPU-profile "
                  f"variability {row['predicted_samples_per_s_var']:9.0f}/s (error {row['error_var']:+6.1%}); "
                  f"matches at {implied(row)} (assumed {row['assumed_bandwidth_bps'] / 8e9:.3g} GB/s)", flush=True)
    device_rows = []
    for case in data.get("device_cases", []):
        row = predict_device_case(case)
        device_rows.append(row)
        print(f"{row['case']:30s} {row['from']:11s} -> {row['to']:11s} published {row['published_samples_per_s']:7.0f}/s "
              f"(x{row['published_speedup']:.2f})  roofline {row['predicted_samples_per_s']:7.0f}/s "
              f"(x{row['predicted_speedup']:.2f}, error {row['error']:+6.1%})", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps({"multigpu": rows, "device": device_rows}, indent=1) + "\n")
    errors = [abs(r["error_det"]) for r in rows]
    lines = ["# Published multi-GPU throughput vs sgdscale", "",
             "Generated by `benchmarks/public_multigpu.py` from `benchmarks/public_data/multigpu.json` (sources there and "
             "in docs/public-validation.md). One-device throughput calibrated to the published figure; error = "
             "predicted / published - 1.", "",
             "| case | devices | published | predicted (no variability) | error | predicted (CPU variability) | error | "
             "link assumed | link that would match |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['workers']} {r['unit']} | {r['published_samples_per_s']:.0f}/s "
                     f"({r['published_efficiency']:.0%}) | {r['predicted_samples_per_s_det']:.0f}/s "
                     f"({r['predicted_efficiency_det']:.0%}) | {r['error_det']:+.1%} | "
                     f"{r['predicted_samples_per_s_var']:.0f}/s | {r['error_var']:+.1%} | "
                     f"{r['assumed_bandwidth_bps'] / 8e9:.3g} GB/s | {implied(r)} |")
    lines += ["", f"|error| without variability over {len(rows)} cases: median {statistics.median(errors):.1%}, "
              f"max {max(errors):.1%}."]
    print(lines[-1])
    if device_rows:
        device_errors = [abs(r["error"]) for r in device_rows]
        lines += ["", "## One device to another (roofline, --target-device)", "",
                  "| case | from | to | published | predicted | error | published speed-up | predicted speed-up |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in device_rows:
            lines.append(f"| {r['case']} | {r['from']} ({r['from_samples_per_s']:g}/s) | {r['to']} | "
                         f"{r['published_samples_per_s']:g}/s | {r['predicted_samples_per_s']:.0f}/s | {r['error']:+.1%} | "
                         f"x{r['published_speedup']:.2f} | x{r['predicted_speedup']:.2f} |")
        lines += ["", f"|error| over {len(device_rows)} device moves: median {statistics.median(device_errors):.1%}, "
                  f"max {max(device_errors):.1%}."]
        print(lines[-1])
    (OUT / "summary.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
