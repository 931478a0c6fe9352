"""The per-message CPU charge (sgdscale.message_cpu) on the kept PS runs of earlier sets.

Network files made before the charge existed carry no per-message CPU (`CpuCost.message_s`), so
the current code charges nothing on them. This re-predicts every kept PS run of the named sets
with the file's own cores and per-message CPU where it measured one, else `--message-us` (default
28 us: what `sgdscale netbench` measured on this machine, alone and under 0.28 cores, on
2026-12-02), against no charge. Sets run before the charge are tuning sets for it: the figures on
them do not show it works on new cases; held-out set 31, committed with it, is scored the same way.
Nothing is rerun.

    .venv/bin/python benchmarks/message_cpu_tuning.py [--sets heldout25,...] [--method fine] [--message-us 28]

Raw output: benchmarks/results/message_cpu_tuning[-<method>].md (or --output NAME).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

from sgdscale.comm.cost import CommModel

DEFAULT_SETS = ("heldout18,heldout19,heldout20,heldout21,heldout22,heldout23,heldout24,heldout25,heldout26,"
                "heldout27,heldout28,heldout30")
ORIGINAL = CommModel.from_network.__func__


def per_message(unmeasured_s: float):
    """A context manager under which every network file's model charges its own measured CPU per
    message, or `unmeasured_s` where it has none, over the cores the file was measured at (0: no charge)."""
    def from_network(cls, network, *args, **kwargs):
        comm = ORIGINAL(cls, network, *args, **kwargs)
        cpu = network.cpu
        message_s = (cpu.message_s if cpu is not None and cpu.message_s else unmeasured_s) if unmeasured_s > 0 else 0.0
        wall_s = message_s / cpu.cores if cpu is not None and cpu.cores and message_s > 0 else 0.0
        return dataclasses.replace(comm, server_cpu_s_per_message=wall_s, worker_cpu_s_per_message=wall_s)

    return lambda: mock.patch.object(CommModel, "from_network", classmethod(from_network))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--method", default="fine", choices=("fine", "coarse"))
    parser.add_argument("--message-us", type=float, default=28.0,
                        help="CPU per message where a network file measured none, microseconds")
    parser.add_argument("--kind", default="all", choices=("all", "real", "replay"))
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    variants = [("not charged", "not charged", per_message(0.0)),
                (f"charged (measured, else {args.message_us:g} us)", "charged", per_message(args.message_us * 1e-6))]
    text = variant_table(argv, "message_cpu_tuning.py", f"Per-message CPU on the kept PS runs ({args.method})",
                         "Error of the median prediction against the median measurement, per case; the "
                         "worker's charge is left out for sleep replays, as validation does.",
                         args.sets.split(","), {"ps-sync", "ps-async"}, variants, method=args.method, kind=args.kind)
    name = args.output or "message_cpu_tuning" + ("" if args.method == "fine" else f"-{args.method}")
    (HERE / "results" / f"{name}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
