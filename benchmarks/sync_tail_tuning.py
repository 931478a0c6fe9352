"""The tail of a real sync PS step in fine: the duplex share and the shard's CPU, apart and together. (no runs)

Held-out set 82's bert (5 workers, one shard; `results/step_parts/bert-real-sync-w5-580Mbit-heldout82.md`)
ends its step 25 ms later in fine than in the run after the last worker's backward: 17 ms of pushes
coming in later (18% longer, about what sync PS's duplex share of 0.86 makes of pushes that arrive while
the shard replies, `sgdscale.comm.sharing.RECEIVE_SHARE_WHILE_SENDING`) and 9 ms of the shard's transport
CPU charged to its last update. This re-predicts the kept real sync PS runs of the named sets with the
duplex share at 1.0 (sync's pushes at full rate while the shard replies), without the shard's CPU
(per byte and per message), and with both. A tuning look: every set named is a tuning set for any
change that comes of it.

    .venv/bin/python benchmarks/sync_tail_tuning.py [--sets heldout40,...,heldout82] [--kind real]
        [--output sync_tail_tuning]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from async_fill_variants import full_rate_pushes
from ps_cpu_ablation import without
from repredict_sets import HERE, variant_table

SHARD_CPU = {"server_cpu_s_per_byte": 0.0, "server_cpu_s_per_message": 0.0}
DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(40, 83))


def both():
    stack = contextlib.ExitStack()
    stack.enter_context(full_rate_pushes())
    stack.enter_context(without(SHARD_CPU)())
    return stack


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="real", choices=("real", "replay", "all"))
    parser.add_argument("--output", default="sync_tail_tuning")
    args = parser.parse_args(argv)
    sets = [name for name in args.sets.split(",") if (HERE / "results" / f"accuracy-{name}" / "results.json").exists()]
    variants = [("as the model stands", "as the model stands", contextlib.nullcontext),
                ("duplex share 1.0", "duplex share 1.0", full_rate_pushes),
                ("no shard CPU", "no shard CPU", without(SHARD_CPU)),
                ("both", "duplex share 1.0 and no shard CPU", both)]
    text = variant_table(argv, "sync_tail_tuning.py", "The tail of a real sync PS step in fine (tuning look)",
                         f"Error of the median prediction against the median measurement, per sync PS case ({args.kind}).",
                         sets, {"ps-sync"}, variants, method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
