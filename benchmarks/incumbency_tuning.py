"""A newcomer's yield ends with its incumbents, and async shards barely slow while they reply: kept PS runs (fine).

Two measured changes to how the fine method shares a PS shard's links, looked for after set 78's async
resnet50 replay (its runs kept the shard's link busy ~98% both ways, fine -17.4%), re-predicted on every
kept PS run of the named sets (nothing is rerun; every set named is a tuning set for them). Neither was
kept: on the async runs of sets 27-78 each made fine worse (`results/incumbency_tuning-async-27-78.md`):
`passes`: a reply that started while others were leaving its shard takes its full weight back once
they have ended, and holds the link against later ones (`sgdscale.fine.links.INCUMBENCY_PASSES_ON`;
measured: `benchmarks/incumbent_handover.py`); `async`: that, and an async shard's pushes at 0.97 of
its downlink while it replies instead of sync PS's 0.86 (`sgdscale.comm.sharing.RECEIVE_SHARE_WHILE_SENDING_ASYNC`;
0.97-0.99 measured in `results/shard_duplex_rate-resnet50-async.md`, 0.96-0.98 by `benchmarks/duplex_flows.py`);
`share`: the async share alone; `before`: neither (as set 78 ran).

    .venv/bin/python benchmarks/incumbency_tuning.py [--sets heldout27,...] [--strategies ps-sync,ps-async]
        [--variants before,share,passes,async] [--output NAME]

Raw output: benchmarks/results/incumbency_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.comm.sharing as sharing
import sgdscale.fine.links as fine_links

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(27, 79))


def rules(passes_on: bool, async_share: float | None):
    @contextmanager
    def patched():
        with mock.patch.object(fine_links, "INCUMBENCY_PASSES_ON", passes_on), \
                mock.patch.object(sharing, "RECEIVE_SHARE_WHILE_SENDING_ASYNC", async_share):
            yield
    return patched


VARIANTS = {
    "before": ("a newcomer yields for its whole burst; async shards' pushes at 0.86 while they reply (set 78)",
               "before", rules(False, None)),
    "share": ("async shards' pushes at 0.97 while they reply", "async 0.97", rules(False, 0.97)),
    "passes": ("incumbency passes on; async at 0.86", "passes on", rules(True, None)),
    "async": ("incumbency passes on; async shards' pushes at 0.97 while they reply", "passes on, async 0.97",
              rules(True, 0.97)),
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="all", choices=("all", "real", "replay"))
    parser.add_argument("--output", default="incumbency_tuning")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--variants", default="before,share,passes,async", help=f"of {','.join(VARIANTS)}")
    args = parser.parse_args(argv)
    variants = [VARIANTS[name] for name in args.variants.split(",")]
    text = variant_table(argv, "incumbency_tuning.py", "Incumbency passes on; async shards barely slow (fine)",
                         "Error of the median prediction against the median measurement, per case, under each "
                         "variant.", args.sets.split(","), set(args.strategies.split(",")), variants,
                         method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
