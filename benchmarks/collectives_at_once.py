"""What modelling gloo's two collective threads moves on the kept all-reduce runs (nothing rerun).

Both all-reduce models took DDP's buckets as one stream in launch order; gloo runs a process group's
collectives on two threads, so two buckets share the link and the bucket that ends last (whose copy
back into the gradients comes after every all-reduce) need not be the last launched
(`sgdscale.comm.streams`; found on one traced run of held-out set 59,
`benchmarks/results/allreduce_replay_gap/`). This re-predicts every kept all-reduce run of the named
sets both ways. These sets are tuning sets for the change; its held-out test is a set run after it.

    .venv/bin/python benchmarks/collectives_at_once.py [--sets heldout18,...] [--method fine] [--output NAME]

Raw output: benchmarks/results/collectives_at_once[-<method>].md, or NAME.md.
"""

from __future__ import annotations

import argparse
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

from sgdscale.comm import streams

SETS = ",".join(f"heldout{n}" for n in range(18, 61))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--method", default="fine")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    variants = [("one stream (before)", "one stream", lambda: mock.patch.object(streams, "GLOO_THREADS", 1)),
                ("gloo's two threads (now)", "two threads", lambda: mock.patch.object(streams, "GLOO_THREADS", 2))]
    sets = [s for s in args.sets.split(",") if (HERE / "grids" / f"{s}.json").exists()
            and (HERE / "results" / f"accuracy-{s}" / "results.json").exists()]
    table = variant_table(argv, "collectives_at_once.py", "One stream or gloo's two threads, on the kept all-reduce runs",
                          "Error of the median prediction against the median measurement; nothing rerun.",
                          sets, {"allreduce"}, variants, method=args.method)
    suffix = "" if args.method == "fine" else f"-{args.method}"
    (HERE / "results" / f"{args.output or 'collectives_at_once' + suffix}.md").write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
