"""Which CPU charge makes a PS prediction what it is, on the kept runs of earlier sets (fine or coarse).

The PS methods charge CPU in four places: the shard's per byte moved (`server_cpu_s_per_byte`),
per message at shard and worker (`sgdscale.message_cpu`), and a worker's backward slowed while its
uplink sends (`comm.interference`). This re-predicts every kept real PS run of the named sets as
the model stands and with each of them removed in turn (and all of them), to show which one
carries a miss. A diagnosis, not a change: nothing here is a model anyone should use.

    .venv/bin/python benchmarks/ps_cpu_ablation.py [--sets heldout36,heldout37] [--kind real|replay|all]
        [--method fine|coarse] [--output NAME]

Raw output: benchmarks/results/ps_cpu_ablation.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

from sgdscale.comm import CommModel

ABLATIONS = {
    "as the model stands": {},
    "no shard CPU per byte": {"server_cpu_s_per_byte": 0.0},
    "no CPU per message": {"server_cpu_s_per_message": 0.0, "worker_cpu_s_per_message": 0.0},
    "no shard CPU per message": {"server_cpu_s_per_message": 0.0},
    "no worker CPU per message": {"worker_cpu_s_per_message": 0.0, "worker_cpu_s_per_wakeup": 0.0},
    "no wake-up (burst CPU per message only)": {"worker_cpu_s_per_wakeup": 0.0},
    "no interference": {"interference": None},
    "no CPU charge at all": {"server_cpu_s_per_byte": 0.0, "server_cpu_s_per_message": 0.0,
                             "worker_cpu_s_per_message": 0.0, "interference": None},
}


def without(fields: dict):
    original = CommModel.from_network.__func__

    def from_network(cls, network, *args, **kwargs):
        return dataclasses.replace(original(cls, network, *args, **kwargs), **fields)

    return lambda: mock.patch.object(CommModel, "from_network", classmethod(from_network))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="heldout36,heldout37")
    parser.add_argument("--kind", default="real", choices=("real", "replay", "all"))
    parser.add_argument("--method", default="fine", choices=("fine", "coarse"))
    parser.add_argument("--output", default="ps_cpu_ablation")
    args = parser.parse_args(argv)
    variants = [(name, name, without(fields)) for name, fields in ABLATIONS.items()]
    text = variant_table(argv, "ps_cpu_ablation.py", f"Which CPU charge carries a PS miss ({args.method})",
                         f"Error of the median prediction against the median measurement, per PS case ({args.kind}), "
                         "as the model stands and with each CPU charge removed.", args.sets.split(","),
                         {"ps-sync", "ps-async"}, variants, method=args.method, kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
