"""Measure this machine's CPU roofline: dense matmul FLOP/s (fp32, bf16) and stream-like copy
bandwidth, with 1 and 2 torch threads -> benchmarks/results/device/cpu_peak.json.

The catalog entry for this CPU (`src/sgdscale/data/devices.json`, docs/devices.md) comes from
here. Each figure is the best of `--repeats` timed runs of a few hundred milliseconds (peak =
best; the spread across runs is kept, since the 2-core VM is shared). Copy bandwidth counts
bytes read + bytes written (like STREAM's copy kernel) of a 128 MiB float32 array, far larger
than the caches. Takes the project's CPU lock (/tmp/sgdscale-cpu.lock) so profiling does not
overlap it.

    .venv/bin/python benchmarks/cpu_peak.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "device" / "cpu_peak.json"
sys.path.insert(0, str(ROOT / "benchmarks"))
from build_profiles import cpu_lock  # noqa: E402  (the project's one CPU lock)


def timed(fn, min_s: float = 0.3) -> float:
    """Seconds per call of fn, averaged over enough calls to last min_s."""
    fn()
    calls, start = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_s:
            return elapsed / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n", type=int, default=1024, help="matrix side")
    args = parser.parse_args()
    import torch

    n = args.n
    results: dict[str, dict] = {}
    with cpu_lock():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
                a = torch.randn(n, n).to(dtype)
                b = torch.randn(n, n).to(dtype)
                c = torch.empty(n, n, dtype=dtype)
                runs = [2 * n**3 / timed(lambda: torch.mm(a, b, out=c)) for _ in range(args.repeats)]
                results[f"matmul_{name}_{threads}t_flops"] = {"best": max(runs), "median": statistics.median(runs),
                                                               "min": min(runs), "runs": runs}
            src = torch.randn(32 * 1024 * 1024)  # 128 MiB
            dst = torch.empty_like(src)
            runs = [2 * src.numel() * 4 / timed(lambda: dst.copy_(src)) for _ in range(args.repeats)]
            results[f"copy_{threads}t_bps"] = {"best": max(runs), "median": statistics.median(runs),
                                               "min": min(runs), "runs": runs}
    from sgdscale.hostinfo import cpu_model

    report = {
        "what": "dense matmul FLOP/s (2*n^3 per n x n product) and copy bandwidth (read+write bytes/s)",
        "matrix_n": n, "copy_bytes": 2 * 128 * 1024 * 1024, "repeats": args.repeats,
        "cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "results": results,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    for key, value in results.items():
        unit = "GFLOP/s" if key.endswith("flops") else "GB/s"
        print(f"{key:24s} best {value['best'] / 1e9:8.2f} {unit}  median {value['median'] / 1e9:8.2f}  "
              f"min {value['min'] / 1e9:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
