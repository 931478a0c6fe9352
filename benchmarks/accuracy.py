"""Accuracy benchmark: predicted vs measured throughput on the emulated cluster (needs root, torch).

Runs `sgdscale validate` over one named set of grids from benchmarks/grids/ (see its README):
`tuning` (the grid the model fixes were found on) or `heldout` (committed before its first run,
never used to change a model). Everything it produces stays in benchmarks/results/accuracy-<set>/:
results.json (every case with every run), the profiles and network files it used, validation.png
and the printed tables (output.txt). Rerun to resume an interrupted set; pass --repredict to
recompute every prediction from the kept profiles, network files and measurements after a
change to the predictors (no runs repeated). Then `benchmarks/repeatability.py` on the same
folder reports how far the repeated measurements of each case spread.

    .venv/bin/python benchmarks/accuracy.py heldout [--repredict]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def commands(set_name: str, out: Path) -> list[list[str]]:
    spec = json.loads((HERE / "grids" / f"{set_name}.json").read_text())
    runs = []
    for grid in spec["grids"]:
        args = ["validate", "--workload", grid["workload"], "--models", ",".join(grid["models"]),
                "--workers", ",".join(map(str, grid["workers"])), "--bandwidth", ",".join(grid["bandwidth"]),
                "--strategies", ",".join(grid["strategies"]), "--cpu-per-node", str(spec["cpu_per_node"]),
                "--repeats", str(spec["repeats"]), "-o", str(out),
                # sets committed before validation's minimum window measured exactly --iterations
                "--min-window", str(spec.get("min_window_s", 0)),
                # sets committed before validation benchmarked the network every round measured it once
                "--network-per-round" if spec.get("network_per_round") else "--network-once"]
        if "ps" in grid:  # server shards of the PS strategies (default 1)
            args += ["--ps", str(grid["ps"])]
        runs.append(args)
    return runs


def too_many_cores(set_name: str, cores: int) -> list[str]:
    """The grids of a set whose largest cluster asks for more CPU than the machine has: checked before
    the first run, since `validate` refuses such a case only when its command comes up, and a set then
    stops part way (set 79's first start: eight nodes at 0.27 cores, after one case had run)."""
    spec = json.loads((HERE / "grids" / f"{set_name}.json").read_text())
    out = []
    for grid in spec["grids"]:
        shards = grid.get("ps", 1) if any(s.startswith("ps") for s in grid["strategies"]) else 0
        nodes = max(grid["workers"]) + shards
        if nodes * spec["cpu_per_node"] > cores + 1e-9:
            out.append(f"{','.join(grid['models'])} with {nodes} nodes x {spec['cpu_per_node']:g} cores = "
                       f"{nodes * spec['cpu_per_node']:g} of this machine's {cores}")
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {p.stem for p in (HERE / "grids").glob("*.json")}:
        sys.exit(__doc__)
    set_name, extra = argv[0], argv[1:]
    over = too_many_cores(set_name, os.cpu_count() or 1)
    if over:
        sys.exit(f"error: {set_name} asks for more CPU than this machine has, so its runs would stop part way: "
                 + "; ".join(over) + ". Lower cpu_per_node or the grid's workers before its first run.")
    out = HERE / "results" / f"accuracy-{set_name}"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "output.txt", "a") as log:
        for args in commands(set_name, out):
            command = [sys.executable, "-m", "sgdscale.cli", *args, *extra]
            log.write("$ sgdscale " + " ".join(command[3:]) + "\n")
            log.flush()
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"})
            log.write(done.stdout)
            sys.stdout.write(done.stdout)
            if done.returncode != 0:
                return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
