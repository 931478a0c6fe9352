"""When a shard's transport CPU runs, on the kept PS runs of earlier sets (fine method).

Both PS methods charge a shard the measured CPU per byte for every byte in and out. The fine
method charges every copy's receive CPU once the message's last copy has arrived (in sync PS all N
copies' worth, after the last one), and the replies' CPU before they leave: in series with the
wire. Held-out sets 34 and 36 ran sync PS 19-34% faster than predicted where the shard's CPU binds;
set 36's shards spent what they are charged (`benchmarks/shard_cpu_charge.py`), so the timing is
the suspect. Variants (`sgdscale.fine.ps`): `arrival`, each copy's receive CPU charged when it has
arrived (RECEIVE_ON_ARRIVAL); `receive`, charged while it arrives, overlapping its transfer
(RECEIVE_OVERLAPS_TRANSFER); `both`, also each reply's CPU beside its sending
(SEND_OVERLAPS_TRANSFER); `series`, none (as before set 78); `bytes`, both but only the CPU per byte, the
CPU per message in series (fine_dag.MESSAGE_CPU_OVERLAPS off: held out on set 75, not kept; the others
overlap the message's CPU too where they overlap); `duplex`, `bytes` with a shard's pushes at 0.86 of its
downlink while its uplink sends (sgdscale.comm.sharing.RECEIVE_SHARE_WHILE_SENDING: the change held out on
set 78); `duplex-message`, `duplex` with each copy's CPU per message charged as it arrives too. Every
variant but the last two keeps the directions independent. This re-predicts every kept PS run of the
named sets under each; nothing is rerun. Every set named here is a tuning set for any of them.

    .venv/bin/python benchmarks/receive_overlap_tuning.py [--sets heldout10,...] [--kind real|replay]
        [--strategies ps-sync] [--variants series,arrival,receive,both,bytes,duplex,duplex-message] [--output NAME]

Raw output: benchmarks/results/receive_overlap_tuning.md (or --output NAME).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.comm.sharing as sharing
import sgdscale.fine.dag as fine_dag
import sgdscale.fine.ps as fine_ps

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(10, 37))


def rules(arrival: bool, receive: bool, send: bool, message: bool = True, duplex: float = 1.0):
    @contextmanager
    def patched():
        with mock.patch.multiple(fine_ps, RECEIVE_ON_ARRIVAL=arrival, RECEIVE_OVERLAPS_TRANSFER=receive,
                                 SEND_OVERLAPS_TRANSFER=send), \
                mock.patch.object(sharing, "RECEIVE_SHARE_WHILE_SENDING", duplex), \
                mock.patch.object(fine_dag, "MESSAGE_CPU_OVERLAPS", message):
            yield
    return patched


VARIANTS = {
    "series": ("transport CPU in series (before)", "in series", rules(False, False, False)),
    "arrival": ("each copy received on arrival", "receive on arrival", rules(True, False, False)),
    "receive": ("receive overlaps", "receive overlaps", rules(False, True, False)),
    "both": ("receive and send overlap", "both overlap", rules(False, True, True)),
    "bytes": ("the bytes' CPU overlaps both ways, the message's in series (held out on set 75)", "bytes overlap",
              rules(False, True, True, message=False)),
    "duplex": ("the bytes' CPU beside the wire, a shard's pushes at 0.86 of its downlink while it replies "
               "(held out on set 78)", "bytes overlap, duplex 0.86", rules(False, True, True, message=False,
                                                                              duplex=0.86)),
    "duplex-message": ("as `duplex` (the model since set 78), and each copy's CPU per message as it arrives "
                       "(fine_dag.MESSAGE_CPU_OVERLAPS on; set 82's trace: 9 ms of the last update)",
                       "duplex, message on arrival", rules(False, True, True, message=True, duplex=0.86)),
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="all", choices=("all", "real", "replay"))
    parser.add_argument("--output", default="receive_overlap_tuning")
    parser.add_argument("--strategies", default="ps-sync,ps-async")
    parser.add_argument("--variants", default="series,both,bytes", help=f"of {','.join(VARIANTS)}")
    args = parser.parse_args(argv)
    variants = [VARIANTS[name] for name in args.variants.split(",")]
    text = variant_table(argv, "receive_overlap_tuning.py", "A shard receives each copy as it comes in (fine)",
                         "Error of the median prediction against the median measurement, per case, with "
                         "every copy's receive CPU charged after the last copy arrives, and with each copy's "
                         "charged as it arrives.", args.sets.split(","), set(args.strategies.split(",")), variants,
                         method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
