"""Where a step's time goes, measured and in the fine simulation, for one case run with --trace-compare.

Runs one case on the emulated cluster with `sgdscale train --trace-compare` (the measured and the
fine method's predicted timeline side by side) and sums, per step of worker 0 (median over the
measured steps), its parts: the step, the waits for parameters (pulls) inside forward, forward
compute (forward less those waits), backward, and the wait for the previous step's pushes to
leave. A part the prediction misses shows where the model and the run part ways.

    .venv/bin/python benchmarks/step_parts.py --tag NAME --profile P.json --network N.json
        --bandwidth-mbit 1700 --quota 0.43 --strategy ps-async [--workers 2] [--report-only] -- TRAIN ARGS
        (e.g. resnet18 -b 4 --image-size 32; --report-only: report again from the kept trace of --tag)
Raw output: benchmarks/results/step_parts/NAME.md and NAME.trace.json.gz (open in ui.perfetto.dev).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

import trace_compare_case

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "step_parts"


def spans_by_process(trace: dict) -> dict[str, list[dict]]:
    """The trace's complete events ("X") per process name ("worker 0 · measured", "server 0 · predicted", ...)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    out: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e["pid"] in names:
            out[names[e["pid"]]].append(e)
    return out


def parts(trace: dict, process: str) -> dict[str, float]:
    """Median per step (ms) of each part of `process`'s steps (steps 3 on)."""
    mine = spans_by_process(trace)[process]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"].startswith("iteration "))[3:]
    per_step: dict[str, list[float]] = defaultdict(list)
    for start, end in spans:
        inside = [e for e in mine if start <= e["ts"] < end]

        def total(prefix: str) -> float:
            return sum(e["dur"] for e in inside if e["name"].startswith(prefix)) / 1e3

        forward, pulls, pushes = total("forward"), total("wait for parameters"), total("wait for pushes")
        # the runtime's "forward (with pull waits)" also spans the wait for the previous pushes before it
        measured_forward = any(e["name"].startswith("forward (with pull waits)") for e in inside)
        per_step["step"].append((end - start) / 1e3)
        per_step["wait for the previous pushes"].append(pushes)
        per_step["waits for parameters"].append(pulls)
        per_step["forward compute"].append(forward - pulls - pushes if measured_forward else forward)
        per_step["backward"].append(total("backward"))
    return {name: statistics.median(values) for name, values in per_step.items()}


def parameters_in(iterations: list[tuple[float, float]], waits: list[tuple[float, float]], backward_end: float) -> float:
    """When a worker had its next step's parameters in hand: the end of the last wait for parameters
    (over 0.2 ms) in the step after `backward_end`, or that step's start where it did not wait."""
    start, end = next((a, b) for a, b in iterations if a >= backward_end - 1e3)
    return max([b for a, b in waits if start <= a < end and b - a > 200], default=start)


def shard_parts(trace: dict, side: str, workers: int) -> dict[str, float] | None:
    """Sync PS, one shard: median per step (ms) of how far apart the workers' backward ends lie, of
    when shard 0's first update starts after the first of them and its last update ends after the last
    (steps 5 on), and of when the step's last push is in: measured, the end of the shard's last wait
    for a worker's gradient; predicted, the end of the last push transfer. Then, worker by worker in
    order, how far its backward end lies after the first, and when it had the next step's parameters
    in hand after the shard's last update ended (`parameters_in`). None where the shard has no update
    events."""
    by_process = spans_by_process(trace)

    def of(process: str, prefix: str) -> list[tuple[float, float]]:
        return sorted((e["ts"], e["ts"] + e["dur"]) for e in by_process[process] if e["name"].startswith(prefix))

    updates = of(f"server 0 · {side}", "update")
    if not updates:
        return None
    pushes_in = (of("server 0 · measured", "wait") if side == "measured"
                 else sorted(p for w in range(workers) for p in of(f"worker {w} · predicted", "push")))
    backward_ends = []  # per worker, the end of each step's backward
    for w in range(workers):
        backward = of(f"worker {w} · {side}", "backward")
        backward_ends.append([max(b for a, b in backward if start <= a < end)
                              for start, end in of(f"worker {w} · {side}", "iteration")
                              if any(start <= a < end for a, _ in backward)])
    iterations = [of(f"worker {w} · {side}", "iteration") for w in range(workers)]
    waits = [of(f"worker {w} · {side}", "wait for parameters") for w in range(workers)]
    per_step = len(updates) // len(backward_ends[0])
    rows = defaultdict(list)
    for k in range(5, min(len(e) for e in backward_ends) - 2):
        first, last = updates[k * per_step][0], updates[(k + 1) * per_step - 1][1]
        ends = [max(b for b in mine if b <= last) for mine in backward_ends]
        rows["workers' backward ends, first to last"].append((max(ends) - min(ends)) / 1e3)
        rows["shard's first update after the first backward end"].append((first - min(ends)) / 1e3)
        rows["shard's last update after the last backward end"].append((last - max(ends)) / 1e3)
        rows["shard's first to last update"].append((last - first) / 1e3)
        last_in = max(b for a, b in pushes_in if first - 1e6 <= a and b <= last)  # within a second before
        rows["the step's last push in, after the last backward end"].append((last_in - max(ends)) / 1e3)
        rows["the shard's last update end, after the last push in"].append((last - last_in) / 1e3)
        for rank, end in enumerate(sorted(ends)[1:], start=2):
            rows[f"worker {rank} of {workers} by backward end, after the first"].append((end - min(ends)) / 1e3)
        in_hand = sorted(parameters_in(iterations[w], waits[w], ends[w]) for w in range(workers))
        for rank, done in enumerate(in_hand, start=1):
            rows[f"worker {rank} of {workers} by parameters in, after the shard's last update end"].append(
                (done - last) / 1e3)
    return {name: statistics.median(values) for name, values in rows.items()}


def main(argv: list[str]) -> int:
    args, train_args = trace_compare_case.parse(argv, __doc__.splitlines()[0], 45)
    throughput, trace = trace_compare_case.run(args, train_args, OUT / args.tag)
    measured, predicted = parts(trace, "worker 0 · measured"), parts(trace, "worker 0 · predicted")
    lines = ["# Where a step's time goes: measured and predicted (fine), worker 0", "",
             "Generated by `benchmarks/step_parts.py " + " ".join(argv) + f"`. Measured throughput {throughput:.1f} "
             "samples/s. Median per step (steps 3 on), ms. Trace: " + f"`{args.tag}.trace.json.gz`.", "",
             "| part | measured (ms) | predicted (ms) |", "|---|---:|---:|"]
    for name in measured:
        lines.append(f"| {name} | {measured[name]:.1f} | {predicted.get(name, 0.0):.1f} |")
    if args.strategy == "ps-sync" and args.ps == 1:
        shard = {side: shard_parts(trace, side, args.workers) for side in ("measured", "predicted")}
        if shard["measured"] and shard["predicted"]:
            lines += ["", "The shard's side of a step (sync PS; median per step from step 5, ms):", "",
                      "| part | measured (ms) | predicted (ms) |", "|---|---:|---:|"]
            lines += [f"| {name} | {value:.1f} | {shard['predicted'][name]:.1f} |" for name, value in shard["measured"].items()]
    text = "\n".join(lines) + "\n"
    print(text)
    (OUT / f"{args.tag}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
