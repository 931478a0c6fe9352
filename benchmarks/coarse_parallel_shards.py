"""Coarse async PS with several shards: the worker at every shard at once, or one after another?

The coarse async model is a closed queueing network solved by MVA. With S shards it had one set of
stations per shard (pushes in, update, replies out), and a worker cycled through them in series:
it queued at shard 0's link, then at shard 1's. The runtime sends each tensor to its shard as
backward makes it ready, round-robin over the shards, so a worker's pushes and the replies to them
move to and from every shard at once: it waits at all of them together. Every held-out case with
two or three balanced shards came out too slow in coarse (set 64's resnet50 async -27.0%, set 68's
bert -20% to -25% per run, sets 27 and 28 -9% to -27%). Now (`sgdscale.coarse.models.SHARDS_IN_PARALLEL`)
each kind of station is one parallel visit whose time is its busiest shard's, and the rest of the
worker's own transfer goes to its delay station. This re-predicts every kept async PS run of the
named sets, coarse, from its own round's profile and the set's network file (and from nominal
figures, and with the CPU budget), both ways. One shard: nothing changes.

    .venv/bin/python benchmarks/coarse_parallel_shards.py [--sets heldout27,heldout28,heldout64,...]
        [--output coarse_parallel_shards]
    .venv/bin/python benchmarks/coarse_parallel_shards.py --sets heldout18,...,heldout56 --factors-out NAME
        (the change's own effect per kept case, for benchmarks/heldout_ranges.py --factors)

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from repredict_sets import HERE, coarse_variant_tables, write_change_factors

from sgdscale.coarse import models

SETS = "heldout27,heldout28,heldout64,repeat64-two-shards,heldout68"


def in_series():
    return mock.patch.object(models, "SHARDS_IN_PARALLEL", False)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--output", default="coarse_parallel_shards")
    parser.add_argument("--factors-out", default=None, metavar="NAME",
                        help="instead, write results/NAME.json: per set and case, the coarse async predictions "
                             "(measured file, nominal, budget) in parallel over in series")
    args = parser.parse_args(argv)
    if args.factors_out:
        write_change_factors(f"benchmarks/coarse_parallel_shards.py {' '.join(argv)}",
                             "per held-out set and case: the coarse async prediction with the shards visited in "
                             "parallel (SHARDS_IN_PARALLEL as shipped) over in series (median over the kept runs), "
                             "per validation variant", args.sets.split(","), {"ps-async"}, args.factors_out, in_series)
        return 0
    text = coarse_variant_tables(argv, "coarse_parallel_shards.py",
                                 "Coarse async PS: shards in series (before) or in parallel (now)",
                                 "kept async PS runs, their own rounds' profiles", args.sets.split(","), {"ps-async"},
                                 [("in series (before)", "in series", in_series),
                                  ("in parallel (now)", "in parallel", contextlib.nullcontext)])
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
