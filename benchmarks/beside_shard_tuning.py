"""Would telling the predictor which worker shares the shard's core mend the PS misses? (a tuning look)

On this 2-core machine the testbed puts one PS worker on the shard's core (`runtime.testbed.pack_cpus`:
worker 0 with 2 workers, worker 1 with 3). That worker carries part of the shard's network work in
its kernel time, charged to its quota (held-out set 47: 1.56x the kernel time of the other workers
of the same run, backward 1.11x, forward 0.98x; `benchmarks/kernel_time.py`). A prediction knows
nothing of it: its cluster has dedicated server nodes. This re-predicts every kept real-compute PS
run of the named sets (fine method, measured network file) with that worker's compute scaled by a
factor (`Cluster.compute_scale`, as a user describes a slow node), to see whether the error moves
the way a cause would move it. A look at sets the factor was not measured on, not a change: a
change would describe the layout in validation, and needs a held-out set of its own.

    .venv/bin/python benchmarks/beside_shard_tuning.py [--sets heldout19,...] [--factors 1.04,1.07,1.10]
        [--method fine] [--output NAME]

Raw output: benchmarks/results/beside_shard_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

from sgdscale.runtime.testbed import pack_cpus
from sgdscale.validation import Validator

DEFAULT_SETS = ",".join(f"heldout{k}" for k in range(19, 46))  # the layout of sets 18-45 (46 ran another)


def beside_the_shard(workers: int, shards: int, cpus: tuple[int, ...] = (0, 1)) -> list[int]:
    """The workers the testbed pins to a shard's core (nodes: the workers, then the shards)."""
    layout = pack_cpus([1.0 / (workers + shards)] * (workers + shards), list(cpus))
    shard_cpus = {c for cores in layout[workers:] for c in cores}
    return [w for w in range(workers) if shard_cpus & set(layout[w])]


def slowed(factor: float):
    """A context manager: predictions with the worker(s) beside the shard computing `factor` x slower."""
    original = Validator.case_inputs

    def case_inputs(self, case, *args, **kwargs):
        profile, cluster, strategy, comm, variability = original(self, case, *args, **kwargs)
        near = beside_the_shard(cluster.workers, cluster.ps_count)
        scales = tuple(factor if w in near else 1.0 for w in range(cluster.workers))
        return profile, dataclasses.replace(cluster, compute_scale=scales), strategy, comm, variability

    return lambda: mock.patch.object(Validator, "case_inputs", case_inputs) if factor != 1.0 else contextlib.nullcontext()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--factors", default="1.04,1.07,1.10")
    parser.add_argument("--method", default="fine", choices=("fine", "coarse"))
    parser.add_argument("--output", default="beside_shard_tuning")
    args = parser.parse_args(argv)
    factors = [1.0] + [float(f) for f in args.factors.split(",")]
    variants = [("as the model stands" if f == 1.0 else f"beside the shard x{f:g}",) * 2 + (slowed(f),)
                for f in factors]
    text = variant_table(argv, "beside_shard_tuning.py", f"The worker beside the shard slowed ({args.method})",
                         "Error of the median prediction against the median measurement, per real-compute PS case, "
                         "with the worker the testbed pins to the shard's core computing each factor slower.",
                         args.sets.split(","), {"ps-sync", "ps-async"}, variants, method=args.method, kind="real")
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
