"""A PS message's CPU as it is paid in a step (one at a time) instead of in a burst, on kept real runs.

The network files of every set hold netbench's burst figure (`CpuCost.message_s`, 28-49 us per
message). `benchmarks/message_spacing_cpu.py` measured a message sent or received between compute
slices, as a PS step sends and receives them, at several times that on the same testbed, and
`benchmarks/worker_cpu_threads.py` found real cnn PS workers spending that much more CPU per step than
their profiles. This re-predicts every kept real PS run of the named sets with each network file's
`message_s` replaced by a flat figure, or with a wake-up cost added for a message that leaves alone
(`sgdscale.message_cpu.wakeup_weights`), by the fine method; nothing is rerun. Every set named here
is a tuning set for the figure chosen.

    .venv/bin/python benchmarks/message_cpu_spaced_tuning.py [--sets heldout10,...] [--message-us 150] [--wakeup-us 70,140]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.comm as comm_package

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(10, 38))


def message_cpu(**update: float):
    """A context in which every loaded network file's CPU cost has `update` (none: as kept)."""
    if not update:
        return contextlib.nullcontext
    load = comm_package.load_network

    def loaded(path):
        network = load(path)
        if network.cpu is None:
            return network
        return network.model_copy(update={"cpu": network.cpu.model_copy(update=update)})

    return lambda: mock.patch.object(comm_package, "load_network", loaded)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--message-us", default="", help="flat CPU per message, replacing the burst figure")
    parser.add_argument("--wakeup-us", default="70,140", help="CPU a message alone costs on top of the burst figure")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--output", default="message_cpu_spaced_tuning")
    args = parser.parse_args(argv)
    variants = [("as in the file", "as in the file", message_cpu())]
    variants += [(f"{us:g} us", f"{us:g} us per message", message_cpu(message_s=us * 1e-6))
                 for us in (float(x) for x in args.message_us.split(",") if x)]
    variants += [(f"+{us:g} us alone", f"burst + {us:g} us per wake-up", message_cpu(message_wakeup_s=us * 1e-6))
                 for us in (float(x) for x in args.wakeup_us.split(",") if x)]
    text = variant_table(argv, "message_cpu_spaced_tuning.py", "A PS message's CPU, paid one at a time (fine)",
                         "Error of the median prediction against the median measurement, per real PS case, with "
                         "each set's network file's CPU per message as measured (a burst) and replaced.",
                         args.sets.split(","), set(args.strategies.split(",")), variants, method="fine", kind="real")
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
