"""Accuracy benchmark: predicted vs measured throughput on the emulated cluster (needs root, torch).

Runs `sgdscale validate` over the standard grid (3 models with clearly different
compute/communication ratios, one a transformer; 2 bandwidths; the 3 strategies; 2 and 4 workers;
plus 8-worker all-reduce and PS cases) and keeps everything it produced in
benchmarks/results/accuracy/: results.json (every case), the profiles and network files it used,
validation.png and the printed tables (output.txt). Rerun it to resume an interrupted grid;
delete the folder to start over; pass --repredict to recompute every prediction from the kept
profiles, network files and measurements after a change to the predictors (no runs repeated).

    .venv/bin/python benchmarks/accuracy.py [--repredict]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).parent / "results" / "accuracy"
GRIDS = [
    ["--models", "mlp,cnn,gpt2", "--workers", "2,4", "--bandwidth", "200Mbit,1Gbit",
     "--strategies", "allreduce,ps-sync,ps-async"],
    ["--models", "mlp,gpt2", "--workers", "8", "--bandwidth", "200Mbit", "--strategies", "allreduce,ps-sync"],
]


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "output.txt", "w") as log:
        for grid in GRIDS:
            command = [sys.executable, "-m", "sgdscale.cli", "validate", *grid, "-o", str(OUT), *sys.argv[1:]]
            log.write("$ sgdscale " + " ".join(command[3:]) + "\n")
            log.flush()
            done = subprocess.run(command, stdout=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "160"})
            log.write(done.stdout)
            sys.stdout.write(done.stdout)
            if done.returncode != 0:
                return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
