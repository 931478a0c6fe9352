"""Two gloo all-reduces at once against one after another: does the link do the same work at the same pace?

Both all-reduce models let up to two of a worker's collectives share the link, as gloo's two threads
run DDP's buckets (`sgdscale.comm.streams`): within the busy periods one stream would have, each gets
half the link, so the pair ends when one after another would have ended them, and the small one,
launched second, ends after about twice its time alone. Set 59's traced vgg16 run showed the six
buckets take 3.3% longer than one after another. This times it on its own, on the emulated cluster:
per repeat (interleaved, each after a barrier), a large and a small all-reduce alone, the two one
after another, and the two launched together (the small one `--lag-ms` after the large one, as DDP
launches a later bucket), recording when each finished (its future's callback, on gloo's thread). It
reports the medians over ranks and repeats: the pair's span at once against the sum of the two alone
(the model: equal), and the small one's time at once against twice its time alone (the model: equal
while both run).

    .venv/bin/python benchmarks/concurrent_allreduce.py [--workers 3] [--bandwidth-mbit 870] [--quota 0.26]
        [--large-mb 40] [--small-mb 10] [--lag-ms 20] [--repeats 12]
Raw output: benchmarks/results/concurrent_allreduce.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WARMUP = 2


def rank(ctx) -> dict:
    """Rank target: per repeat the large and the small all-reduce alone, one after another, and at once."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    cfg = ctx.config
    large = torch.ones(int(cfg["large_bytes"]) // 4)
    small = torch.ones(int(cfg["small_bytes"]) // 4)
    lag_s = cfg["lag_ms"] / 1e3
    times: dict[str, list[float]] = {}

    def keep(name: str, value: float, repeat: int) -> None:
        if repeat >= WARMUP:
            times.setdefault(name, []).append(value)

    for repeat in range(WARMUP + cfg["repeats"]):
        for name, tensor in (("large alone", large), ("small alone", small)):
            dist.barrier()
            began = time.perf_counter()
            dist.all_reduce(tensor)
            keep(name, time.perf_counter() - began, repeat)
        dist.barrier()
        began = time.perf_counter()
        dist.all_reduce(large)
        dist.all_reduce(small)
        keep("one after another", time.perf_counter() - began, repeat)
        dist.barrier()
        ends: dict[str, float] = {}
        began = time.perf_counter()
        first = dist.all_reduce(large, async_op=True)
        first.get_future().then(lambda _: ends.__setitem__("large", time.perf_counter()))
        time.sleep(lag_s)
        small_began = time.perf_counter()
        second = dist.all_reduce(small, async_op=True)
        second.get_future().then(lambda _: ends.__setitem__("small", time.perf_counter()))
        first.wait()
        second.wait()
        while len(ends) < 2:  # the callbacks run on gloo's threads, right after the work completes
            time.sleep(0.0005)
        keep("at once: span", max(ends.values()) - began, repeat)
        keep("at once: large", ends["large"] - began, repeat)
        keep("at once: small", ends["small"] - small_began, repeat)
        keep("at once: small ended first", float(ends["small"] < ends["large"]), repeat)
    return {"rank": ctx.rank, "times": times}


def main(argv: list[str]) -> int:
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--bandwidth-mbit", type=float, default=870)
    parser.add_argument("--quota", type=float, default=0.26)
    parser.add_argument("--large-mb", type=float, default=40)
    parser.add_argument("--small-mb", type=float, default=10)
    parser.add_argument("--lag-ms", type=float, default=20)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--output", default="concurrent_allreduce")
    args = parser.parse_args(argv)
    config = {"large_bytes": args.large_mb * 1e6, "small_bytes": args.small_mb * 1e6, "lag_ms": args.lag_ms,
              "repeats": args.repeats}
    with Testbed(args.workers, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True) as testbed:
        result = launch("concurrent_allreduce:rank", config, args.workers, placement=testbed,
                        env={"PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}, timeout_s=1200)

    def median(key: str) -> float:
        return statistics.median(s for r in result.results for s in r["times"][key])

    large, small = median("large alone"), median("small alone")
    serial, span = median("one after another"), median("at once: span")
    small_at_once = median("at once: small")
    first_share = statistics.mean(s for r in result.results for s in r["times"]["at once: small ended first"])
    lines = [f"# Two gloo all-reduces at once against one after another ({args.workers} workers, "
             f"{args.bandwidth_mbit:g} Mbit/s, {args.quota:g} cores per node, pinned)", "",
             "Generated by `benchmarks/concurrent_allreduce.py " + " ".join(argv) + f"`. {args.repeats} repeats "
             f"after {WARMUP} warm-up, each measurement after a barrier; medians over ranks and repeats.", "",
             "| measurement | ms | per-rank medians, ms |", "|---|---:|---|"]
    for key in result.results[0]["times"]:
        if key.endswith("ended first"):
            continue
        per_rank = [statistics.median(r["times"][key]) for r in result.results]
        lines.append(f"| {key} | {median(key) * 1e3:.1f} | " + ", ".join(f"{s * 1e3:.1f}" for s in per_rank) + " |")
    lines += ["",
              f"- The pair at once took {span * 1e3:.1f} ms from the large one's launch to the last end, against "
              f"{(large + small) * 1e3:.1f} ms for the two alone added ({span / (large + small) - 1:+.1%}) and "
              f"{serial * 1e3:.1f} ms one after another in one timing ({span / serial - 1:+.1%}). The model: the "
              "same as the two alone added.",
              f"- The small one, launched {args.lag_ms:g} ms after the large one, took {small_at_once * 1e3:.1f} ms "
              f"at once against {small * 1e3:.1f} ms alone ({small_at_once / small:.2f}x; the model: 2x while both "
              f"run); it ended first in {first_share:.0%} of the repeats (the model: always, while the large one "
              "has more than its work left)."]
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
