"""The CPU quota replayed per node, on the kept real runs of earlier sets (fine method).

A profile times its phases back to back under the node's CFS quota, so each carries the quota's
throttling (c CPU-seconds timed at about c / q). A worker or shard that waits for the network
starts its next phase on a fresh period's budget and runs it at a full core's speed until that is
spent (`benchmarks/cfs_idle_speed.py` measures it). `sgdscale.cpu_quota.QuotaClock` replays each
node's budget where the profile was made under the nodes' quota (real-compute cases; a replay's
sleeps take no CPU), and optionally also charges a PS worker's own transport CPU (receiving its
pulls, sending its pushes) to its budget (`cpu_quota.WORKER_TRANSPORT_ON_BUDGET`). This re-predicts every kept real run of the named sets with the clock and
without it; nothing is rerun. Every set named here is a tuning set for it.

    .venv/bin/python benchmarks/quota_clock_tuning.py [--sets heldout10,...]
        [--strategies ps-sync,ps-async] [--output NAME]

Raw output: benchmarks/results/quota_clock_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.cpu_quota as cpu_quota

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(10, 38))


def replayed(on: bool, transport: bool = False):
    return lambda: mock.patch.multiple(cpu_quota, REPLAYED=on, WORKER_TRANSPORT_ON_BUDGET=transport)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--output", default="quota_clock_tuning")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    args = parser.parse_args(argv)
    variants = [("profiled times (before)", "profiled times", replayed(False)),
                ("quota replayed per node", "quota replayed", replayed(True)),
                ("replayed, worker transport on budget", "replayed with transport", replayed(True, True))]
    text = variant_table(argv, "quota_clock_tuning.py", "The CPU quota replayed per node (fine)",
                         "Error of the median prediction against the median measurement, per real case, with "
                         "compute taking its profiled (back-to-back, throttled) time, and with each node's CFS "
                         "budget replayed.", args.sets.split(","), set(args.strategies.split(",")), variants,
                         method="fine", kind="real")
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
