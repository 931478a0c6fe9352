"""DDP's own step work (`Profile.ddp_overhead_s`) charged or not, on the kept all-reduce runs of a set.

A one-worker training run steps 5-18% slower than the profile taken just before it (real cnn, 0.27
cores; `benchmarks/profile_vs_run.py`), and paired steps in one process put the gap in DDP itself:
12.4 ms of a 76 ms step for 1.0-1.6 ms of CPU (`benchmarks/step_anatomy.py --workers 1`). Since held
out set 29 the profiler measures it and both all-reduce models charge what it leaves after the
bucket copies and the buffers' local work (`sgdscale.bucket_copies.ddp_rest_s`). This re-predicts
every kept all-reduce run of the named sets with that charge and without it (the profiles made
before set 29 have no measurement, so there both columns agree). Nothing is rerun.

    .venv/bin/python benchmarks/ddp_overhead_heldout.py [--sets heldout29] [--method fine] [--output NAME]

Raw output: benchmarks/results/ddp_overhead_<sets>[-<method>].md, or NAME.md. Decided before set 29
ran: the charge is kept if on that set's real all-reduce cases it lowers fine's median error
without raising its max.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

from sgdscale import bucket_copies


def without_ddp_rest():
    """Both models as before set 29: nothing charged for DDP's work beyond its copies and buffers."""
    return mock.patch.object(bucket_copies, "ddp_rest_s", lambda profile, measured: 0.0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="heldout29")
    parser.add_argument("--method", default="fine", choices=["fine", "coarse"])
    parser.add_argument("--output", help="results name (default ddp_overhead_<sets>[-<method>])")
    args = parser.parse_args(argv)
    variants = [("without DDP's own work", f"{args.method}, without", without_ddp_rest),
                ("with it (now)", f"{args.method}, with", contextlib.nullcontext)]
    text = variant_table(argv, "ddp_overhead_heldout.py", "DDP's own step work charged or not, on the kept runs",
                         "Error of the median prediction against the median measurement; nothing rerun.",
                         args.sets.split(","), {"allreduce"}, variants, method=args.method)
    suffix = "" if args.method == "fine" else f"-{args.method}"
    name = args.output or f"ddp_overhead_{args.sets.replace(',', '_')}{suffix}"
    (HERE / "results" / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
