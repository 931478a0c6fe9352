"""Coarse sync PS with several shards: one pipeline over all messages, or one per shard?

The coarse sync PS model runs pushes, updates and replies as one pipeline (`heuristics.sync_ps_end_s`)
in which each message costs its bytes' share of the busiest shard's NIC time. With several shards
that spreads the busiest shard's load over every message in the step, so where that shard holds a
gradient ready last in backward (bert's 8.4 MB word embedding, 8.5 of 21.4 MB on shard 0 of three)
its pushes and replies hide behind backward in the model; in the runtime that shard receives the
embedding's copies only after backward and replies to them after that. Bert with three shards came
out +18.3% (held-out set 28) and +21.0% (set 70) too fast in coarse. With
`sgdscale.coarse.models.SHARD_PIPELINES` each shard is its own pipeline over the messages placed on
it, and the worker's own link (every shard's messages in turn) bounds the step too. This re-predicts
every kept sync PS run with two or more shards of the named sets, coarse, from its own round's
profile and the set's network file (and from nominal figures, and with the CPU budget), both ways.
One shard: nothing changes.

    .venv/bin/python benchmarks/coarse_shard_pipelines.py [--sets heldout27,heldout28,...]
        [--output coarse_shard_pipelines]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from repredict_sets import HERE, coarse_variant_tables

from sgdscale.coarse import heuristics as hz
from sgdscale.coarse import models

SETS = "heldout27,heldout28,heldout64,heldout68,heldout70"


def one_pipeline():  # as shipped
    return mock.patch.object(models, "SHARD_PIPELINES", False)


def per_shard():
    return mock.patch.object(models, "SHARD_PIPELINES", True)


@contextlib.contextmanager
def per_shard_late_of_all_shards():
    """The per-shard pipelines with the share of late workers the one pipeline had, S / (S + 1)."""
    with per_shard(), mock.patch.object(models, "_shard_pipeline_late_share", hz.late_share):
        yield


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=SETS)
    parser.add_argument("--output", default="coarse_shard_pipelines")
    args = parser.parse_args(argv)
    text = coarse_variant_tables(argv, "coarse_shard_pipelines.py",
                                 "Coarse sync PS with several shards: one pipeline (as shipped) or one per shard",
                                 "kept sync PS runs with two or more shards, their own rounds' profiles",
                                 args.sets.split(","), {"ps-sync"},
                                 [("one pipeline (as shipped)", "one pipeline", one_pipeline),
                                  ("per shard, late S/(S+1)", "per shard, late S/(S+1)", per_shard_late_of_all_shards),
                                  ("per shard", "per shard", per_shard)],
                                 only=lambda case: case.ps_count > 1)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
