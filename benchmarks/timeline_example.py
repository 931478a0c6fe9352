"""An example of timelines side by side (`sgdscale validate --trace-dir`), summarized in numbers.

Runs, on the emulated cluster (root), the built-in gpt2 profile replayed with slept compute by 2
workers over 300 Mbit/s links, with DDP buckets and with a synchronous parameter server (1 shard),
0.6 cores per node, 10 measured steps, the network measured by netbench as validate always does;
then reads each side-by-side trace back and prints, per worker and iteration, the measured and
predicted step, and per row and kind of slice (forward, all-reduce bucket, wait for parameters,
update, ...) how many there are and how long they take per iteration on each side.

    flock /tmp/sgdscale-cpu.lock nice -n 19 env PYTHONPATH=src .venv/bin/python benchmarks/timeline_example.py
With --repredict, the kept runs are re-predicted and their traces rewritten (after a model change).
Writes benchmarks/results/timeline_example/ (validate's folder: results.json, measurements,
network file, traces/*.trace.json) and benchmarks/results/timeline_example.txt.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "results" / "timeline_example"
COMMAND = ["validate", "--workload", "replay", "--models", "gpt2", "--workers", "2", "--bandwidth", "300Mbit",
           "--strategies", "allreduce,ps-sync", "--cpu-per-node", "0.6", "--repeats", "1", "--iterations", "10",
           "--trace-dir", str(OUT / "traces"), "-o", str(OUT)]


def kind(name: str) -> str:
    """'forward blocks.0.attn' -> 'forward', 'update tensor 3' -> 'update tensor'; DDP buckets keep their index."""
    if name.startswith(("forward", "backward")):
        return name.split()[0]
    if name.startswith("bucket"):
        return name
    return re.sub(r"( msg| tensor)? \d+$", lambda m: m.group(1) or "", name)


def summarize(path: Path) -> list[str]:
    data = json.loads(path.read_text())
    names = {e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"}
    by = defaultdict(list)
    for e in data["traceEvents"]:
        if e["ph"] == "X":
            by[names[e["pid"]], e["cat"]].append(e)
    lines = [f"## {path.name}", "", f"iterations per process: {data['otherData']['iterations']}", "",
             "| worker | side | step per iteration (ms) | median | last step ends at (ms) |", "|---|---|---|---|---|"]
    for process in sorted({p for p, _ in by}, key=lambda p: (p.split(" · ")[0], p)):
        steps = sorted(by[process, "step"], key=lambda e: e["ts"])
        if not steps:
            continue
        worker, _, side = process.partition(" · ")
        durations = [e["dur"] / 1e3 for e in steps]
        lines.append(f"| {worker} | {side} | {', '.join(f'{d:.0f}' for d in durations)} | "
                     f"{statistics.median(durations):.0f} | {(steps[-1]['ts'] + steps[-1]['dur']) / 1e3:.0f} |")
    lines += ["", "What each row holds, per iteration (ms; forward/backward: the phase on the measured side, the sum "
              "of its layers on the predicted side):", "",
              "| process | row | kind | events | median duration | total per iteration |", "|---|---|---|---|---|---|"]
    iterations = max(data["otherData"]["iterations"].values())
    kinds = defaultdict(list)
    for (process, row), events in by.items():
        if row == "step":
            continue
        for e in events:
            kinds[process, row, kind(e["name"])].append(e["dur"] / 1e3)
    for (process, row, name), durations in sorted(kinds.items()):
        lines.append(f"| {process} | {row} | {name} | {len(durations)} | {statistics.median(durations):.2f} | "
                     f"{sum(durations) / iterations:.1f} |")
    lines.append("")
    lines += last_collective(by, names)
    return lines


def last_collective(by: dict, names: dict) -> list[str]:
    """All-reduce: when each iteration's last collective began after the step began, and how long the
    step went on after it ended (worker 0 measured; the predicted stream against worker 0 predicted)."""
    out = []
    for side, process, rows in (("measured", "worker 0 · measured", ("all-reduce",)),
                                ("predicted", "network · predicted",  # one stream, or gloo's threads
                                 ("all-reduce stream", "all-reduce thread 1", "all-reduce thread 2"))):
        steps = {e["args"]["iteration"]: e for e in by.get((f"worker 0 · {side}", "step"), [])}
        last: dict[int, dict] = {}
        for e in (e for row in rows for e in by.get((process, row), [])):
            k = e["args"]["iteration"]
            if k not in last or e["ts"] > last[k]["ts"]:
                last[k] = e
        if not last:
            continue
        launch = [(last[k]["ts"] - steps[k]["ts"]) / 1e3 for k in sorted(last)]
        after = [(steps[k]["ts"] + steps[k]["dur"] - last[k]["ts"] - last[k]["dur"]) / 1e3 for k in sorted(last)]
        out.append(f"{side}: the last collective began {min(launch):.0f}-{max(launch):.0f} ms after worker 0's step "
                   f"began (median {statistics.median(launch):.0f}); the step ended {min(after):.0f}-{max(after):.0f} "
                   f"ms after it completed (median {statistics.median(after):.0f})")
    return out + [""] if out else []


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    command = COMMAND + [arg for arg in sys.argv[1:] if arg == "--repredict"]
    done = subprocess.run([sys.executable, "-m", "sgdscale.cli", *command], capture_output=True, text=True)
    with open(OUT / "validate-output.txt", "a") as log:  # a rerun resumes (runs nothing new): keep both
        log.write(f"$ sgdscale {' '.join(command)}\n{done.stdout}{done.stderr}\n")
    if done.returncode != 0:
        sys.exit(f"validate failed:\n{done.stderr[-3000:]}")
    lines = ["# timelines side by side: example (sgdscale " + " ".join(COMMAND) + ")", ""]
    for path in sorted((OUT / "traces").glob("*.trace.json")):
        lines += summarize(path)
    text = "\n".join(lines)
    print(text)
    (HERE / "results" / "timeline_example.txt").write_text(text)


if __name__ == "__main__":
    main()
