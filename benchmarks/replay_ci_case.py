"""The CI replay accuracy case (tests/test_validation.py::test_replay_case_is_predicted_within_8_percent)
run several times, each from scratch (its own network benchmark), to show the error it gives and
how much it moves. Needs root.

    flock /tmp/sgdscale-cpu.lock env PYTHONPATH=src .venv/bin/python benchmarks/replay_ci_case.py [--runs 3]
Writes benchmarks/results/replay_ci_case.{json,txt} (and each run's folder under replay_ci_case/).
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from sgdscale.jsonio import write_json_atomic
from sgdscale.validation import Grid, ModelSpec, Validator

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quota", type=float, default=1.0, help="CPU cores per node (the test uses 1.0)")
    args = parser.parse_args()
    folder = RESULTS / "replay_ci_case"
    shutil.rmtree(folder, ignore_errors=True)
    rows, lines = [], []
    for run in range(args.runs):
        grid = Grid(specs=[ModelSpec("gpt2", batch_size=8, kind="replay")], workers=[2], bandwidths_bps=[300e6],
                    strategies=["allreduce"], cpu_per_node_cores=args.quota, iterations=8, warmup=3)
        started = time.time()
        [row] = Validator(grid, folder / f"run{run}", log=lambda text: None, predict_iterations=50).run()
        rows.append(row)
        line = (f"run {run}: measured {row['measured_throughput']:.2f} samples/s (step mean "
                f"{row['measured_iteration_s']['mean'] * 1e3:.0f} ms); fine {row['predicted_throughput']['fine']:.2f} "
                f"({row['error']['fine']:+.1%}), coarse {row['predicted_throughput']['coarse']:.2f} "
                f"({row['error']['coarse']:+.1%}); {time.time() - started:.0f} s")
        print(line, flush=True)
        lines.append(line)
    write_json_atomic(RESULTS / "replay_ci_case.json", {"rows": rows})
    (RESULTS / "replay_ci_case.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
