"""Where a real DDP backward's extra time goes: compute before the last bucket, its all-reduce, DDP's finish.

`benchmarks/allreduce_step_parts.py` found backward with DDP's wait for the last bucket 6-18 ms
longer than the fine method predicts in most kept real all-reduce runs (set 73: 12-20 ms in four
of five cases), and `benchmarks/throttled_collective.py` that an all-reduce started right after
throttled compute is not slower at DDP's bucket sizes. The untraced runs cannot split backward from
the wait. This does, on traced runs (`sgdscale train --trace`: DDP's comm hook timestamps every
bucket's all-reduce from launch to completion), per model and round, every step interleaved:

1. a fresh profile on one node under the quota, as validation makes it (`sgdscale profile`);
2. a traced run with one worker (DDP in a one-process group: its hooks, copies and finish, no peer);
3. a traced run with `--workers` workers on the shaped links.

Per worker, median over iterations (the first two dropped): forward (iteration start to backward
start: data, DDP's buffer broadcast, forward, loss); backward compute (backward start to the last
bucket's launch, when the reducer has the last gradient); the last bucket's all-reduce (from the
latest worker's launch to its completion); DDP's finish (that completion to backward's return: the
copies back into the gradients); the optimizer. Against the profile: forward + data, backward, and
the profile's `ddp_overhead_s` (what DDP added to a step in its one-process check, not charged).

    .venv/bin/python benchmarks/ddp_backward_parts.py [--models cnn,mobilenet_v2,gpt2,bert]
        [--workers 3] [--bandwidth 460Mbit] [--quota 0.33] [--rounds 2] [--iterations 40] [--name NAME]
Raw output: benchmarks/results/ddp_backward_parts/NAME.{md,json}; traces and profiles beside them.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ("forward", "backward compute", "last all-reduce", "DDP finish", "optimizer")


def model_args(model: str) -> list[str]:
    """The model's batch and options as validation's grids run it."""
    from sgdscale.commands.validate import model_spec

    return model_spec(model, None).cli_args()


def profile(model: str, quota: float, out: Path) -> dict:
    """A fresh profile on one pinned node under the quota, as validation makes it."""
    from sgdscale.runtime.testbed import Testbed

    argv = [sys.executable, "-m", "sgdscale.cli", "profile", model, "-o", str(out), "--threads", "1",
            "--iterations", "20", "--min-window", "10", *model_args(model)]
    with Testbed(1, 1e9, quota, pin_cpus=True) as testbed:
        done = testbed.run_on_node(0, argv, timeout_s=900, env={"OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"profiling {model} failed:\n{done.stderr[-2000:]}")
    return json.loads(out.read_text())


def traced_run(model: str, workers: int, bandwidth: str, quota: float, iterations: int, trace: Path) -> None:
    argv = [sys.executable, "-m", "sgdscale.cli", "train", model, *model_args(model), "--workers", str(workers),
            "--emulate", "--bandwidth", bandwidth, "--cpu-quota", str(quota), "--iterations", str(iterations),
            "--warmup", "5", "--trace", str(trace), "-o", str(trace.with_suffix(".measurement.json"))]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the traced run of {model} with {workers} workers failed:\n{done.stderr[-2000:]}")


def trace_parts(trace: dict) -> dict[int, dict[str, float]]:
    """Per worker (pid), the median ms of each part over iterations (the first two dropped)."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    by_pid: dict[int, list[dict]] = {}
    for e in events:
        by_pid.setdefault(e["pid"], []).append(e)
    iterations = {pid: sorted((e for e in evs if e["name"].startswith("iteration")), key=lambda e: e["ts"])[2:]
                  for pid, evs in by_pid.items()}
    count = min(len(v) for v in iterations.values() if v)
    per_iteration: dict[int, list[dict[str, float]]] = {pid: [] for pid in iterations}
    for k in range(count):
        spans = {}
        for pid, its in iterations.items():
            t0, t1 = its[k]["ts"], its[k]["ts"] + its[k]["dur"]
            inside = [e for e in by_pid[pid] if t0 <= e["ts"] < t1]
            first = {name: min((e for e in inside if e["name"].split()[0] == name), key=lambda e: e["ts"], default=None)
                     for name in ("backward", "optimizer")}
            buckets = [e for e in inside if e["name"].startswith("bucket")]
            if first["backward"] is None or first["optimizer"] is None or not buckets:
                continue
            last = max(buckets, key=lambda e: e["ts"])
            spans[pid] = (t0, first["backward"]["ts"], last["ts"], last["ts"] + last["dur"], first["optimizer"]["ts"],
                          first["optimizer"]["ts"] + first["optimizer"]["dur"])
        if not spans:
            continue
        latest_launch = max(s[2] for s in spans.values())
        for pid, (t0, backward, launch, done, optimizer, end) in spans.items():
            per_iteration[pid].append({"forward": backward - t0, "backward compute": launch - backward,
                                       "last all-reduce": done - latest_launch, "DDP finish": optimizer - done,
                                       "optimizer": end - optimizer})
    return {pid: {part: statistics.median(row[part] for row in rows) / 1e3 for part in PARTS}
            for pid, rows in per_iteration.items() if rows}


def profiled(profile_json: dict) -> dict[str, float]:
    layers = profile_json["layers"]
    step = profile_json["step"]
    return {"forward": (step["data_s"] + sum(layer["forward_s"] for layer in layers)) * 1e3,
            "backward compute": sum(layer["backward_s"] for layer in layers) * 1e3,
            "optimizer": step["optimizer_s"] * 1e3,
            "ddp_overhead": (profile_json.get("ddp_overhead_s") or 0.0) * 1e3}


def render(rows: list[dict], args: argparse.Namespace, argv: list[str]) -> str:
    lines = [f"# A real DDP step's backward, split ({args.workers} workers and one, {args.bandwidth}, "
             f"{args.quota:g} cores per node, pinned)", "",
             "Generated by `benchmarks/ddp_backward_parts.py " + " ".join(argv) + "`. ms; per row the median over "
             "the run's workers of each worker's median over iterations (range over workers in brackets); "
             "`profile` is the fresh profile made just before the runs of that round. Backward compute: "
             "backward's start to the last bucket's launch; last all-reduce: from the latest worker's launch; "
             "DDP finish: that all-reduce's completion to backward's return.", "",
             "| round | model | run | forward | backward compute | last all-reduce | DDP finish | optimizer | "
             "backward compute / profiled | profile's ddp_overhead |", "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        p = row["profile"]
        lines.append(f"| {row['round']} | {row['model']} | profile | {p['forward']:.1f} | {p['backward compute']:.1f} "
                     f"| - | - | {p['optimizer']:.1f} | 1.00 | {p['ddp_overhead']:.1f} |")
        for label, workers in (("1 worker", "w1"), (f"{args.workers} workers", "wN")):
            per = list(row[workers].values())
            cells = []
            for part in PARTS:
                values = [w[part] for w in per]
                cells.append(f"{statistics.median(values):.1f}" + (f" ({min(values):.1f}-{max(values):.1f})"
                                                                   if len(values) > 1 else ""))
            ratio = statistics.median(w["backward compute"] for w in per) / p["backward compute"]
            lines.append(f"| {row['round']} | {row['model']} | {label} | " + " | ".join(cells) + f" | {ratio:.2f} | |")
    lines += ["", "Medians over rounds of backward compute over profiled:", "",
              "| model | 1 worker | " + f"{args.workers} workers |", "|---|---:|---:|"]
    for model in dict.fromkeys(row["model"] for row in rows):
        ratios = {w: [statistics.median(x["backward compute"] for x in row[w].values()) / row["profile"]["backward compute"]
                      for row in rows if row["model"] == model] for w in ("w1", "wN")}
        lines.append(f"| {model} | {statistics.median(ratios['w1']):.2f} | {statistics.median(ratios['wN']):.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,mobilenet_v2,gpt2,bert")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--bandwidth", default="460Mbit")
    parser.add_argument("--quota", type=float, default=0.33)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--name", default="w3-460Mbit-q0.33")
    args = parser.parse_args(argv)
    folder = HERE / "results" / "ddp_backward_parts" / args.name
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for round_index in range(args.rounds):
        for model in args.models.split(","):
            print(f"round {round_index + 1}: {model}", flush=True)
            stem = folder / f"{model}-r{round_index + 1}"
            row = {"round": round_index + 1, "model": model,
                   "profile": profiled(profile(model, args.quota, stem.with_suffix(".profile.json")))}
            for key, workers in (("w1", 1), ("wN", args.workers)):
                trace = Path(f"{stem}-w{workers}.trace.json")
                traced_run(model, workers, args.bandwidth, args.quota, args.iterations, trace)
                row[key] = {str(pid): parts for pid, parts in trace_parts(json.loads(trace.read_text())).items()}
            rows.append(row)
            (folder.parent / f"{args.name}.json").write_text(json.dumps({"argv": argv, "rows": rows}, indent=1) + "\n")
    text = render(rows, args, argv)
    print(text)
    (folder.parent / f"{args.name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
