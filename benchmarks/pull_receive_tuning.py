"""Where a PS worker's CPU receives its pulls, on the kept real PS runs of earlier sets (fine method).

A PS worker pays CPU for every message it sends and receives (`sgdscale.message_cpu`: netbench's
per-message figure and a share of a wake-up). Until now the fine method added a pull's share to the
forward of the layer that needs it, in series after the pull's last byte. But a worker posts its
pull receives when its backward ends, and its forward waits for its first layer, whose reply comes
back last: its CPU receives the pulls while it waits, and where the wire spaces them out (bert's
34 tensors, 2.7 MB, at 1.9 Gbit/s) most of that CPU hides in the wait. Set 38's real bert sync PS
workers computed 111-125 ms a step (forward and backward less their waits) where the model charged
126-141 ms, and were predicted 12-14% too slow (`benchmarks/results/accuracy-heldout38/`).
`sgdscale.message_cpu.PULLS_RECEIVED_AS_THEY_ARRIVE` (off since set 39) receives each pull on the worker's CPU as it
arrives, one after another. This re-predicts every kept real PS run of the named sets with the
pulls charged to forward ("forward", as before) and as received ("as received"), each with the
network files as they are and with the testbed's typical wake-up (70 us,
`comm.interference.TYPICAL_CPU_S_PER_WAKEUP`) where a file has none (files before set 38); nothing
is rerun. Every set named here is a tuning set for the change.

    .venv/bin/python benchmarks/pull_receive_tuning.py [--sets heldout10,...] [--strategies ps-sync,ps-async]
        [--method fine-run-speed]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.comm as comm_package
import sgdscale.message_cpu as message_cpu
from sgdscale.comm.interference import TYPICAL_CPU_S_PER_WAKEUP

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(10, 39))


def variant(received: bool, typical_wakeup: bool):
    """A context with the pulls charged to forward or as received, and each network file's wake-up
    as measured or, where it has none, the testbed's typical one."""
    load = comm_package.load_network

    def loaded(path):
        network = load(path)
        if network.cpu is None or network.cpu.message_wakeup_s:
            return network
        return network.model_copy(update={"cpu": network.cpu.model_copy(
            update={"message_wakeup_s": TYPICAL_CPU_S_PER_WAKEUP})})

    @contextlib.contextmanager
    def in_place():
        with mock.patch.object(message_cpu, "PULLS_RECEIVED_AS_THEY_ARRIVE", received), \
                (mock.patch.object(comm_package, "load_network", loaded) if typical_wakeup
                 else contextlib.nullcontext()):
            yield

    return in_place


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--method", default="fine", help="fine, or fine-run-speed: the profile at each run's "
                        "own compute reference (sets 30 on), which takes the machine's drift out")
    parser.add_argument("--output", default="pull_receive_tuning")
    args = parser.parse_args(argv)
    variants = [("forward", "pulls in forward (as before)", variant(False, False)),
                ("as received", "pulls as received", variant(True, False)),
                ("forward, wake-up", "pulls in forward, 70 us wake-up where unmeasured", variant(False, True)),
                ("as received, wake-up", "pulls as received, 70 us wake-up where unmeasured", variant(True, True))]
    text = variant_table(argv, "pull_receive_tuning.py", "Where a PS worker receives its pulls (fine)",
                         "Error of the median prediction against the median measurement, per real PS case.",
                         args.sets.split(","), set(args.strategies.split(",")), variants, method=args.method, kind="real")
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
