"""A sync shard's pushes slowed only once it has been replying a while: a tuning look. (no runs)

The fine method gives a dedicated shard's downlink 0.86 of its capacity whenever its uplink carries
replies (`sgdscale.comm.sharing.RECEIVE_SHARE_WHILE_SENDING`, the median over 15 real sync PS replays).
The same samples, binned by how long the shard's uplink had been sending (`results/shard_duplex_rate.md`),
show the slowdown growing with it: the pushes came in at 0.99 of their rate alone in the first 50 ms of a
spell of replies, 0.96 at 50-100 ms, 0.86 at 100-200 ms, 0.74 at 200-400 ms and 0.87-0.91 after. In set
82's bert (real compute, 5 workers, one shard; `results/step_parts/bert-real-sync-w5-580Mbit-heldout82.md`)
fine's shard starts replying 29 ms after the first backward end and the pushes it then slows arrive 17 ms
later than the run's, whose shard starts at 59 ms: most of a sync step's pushes meet the start of a spell.

This re-predicts the kept sync PS runs of the named sets with the share ramped: `early` of the capacity
from the moment the uplink starts sending, `late` once it has sent for `ramp` seconds without a pause.
The switch to `late` is taken at the downlink's first reallocation after the ramp (the network recomputes
its rates whenever a flow starts or ends, every few milliseconds in a PS step), so this is a look, not the
model. A check column runs the same patch with no ramp at 0.86 and must equal the model as it stands.
Every set named is a tuning set for any change that comes of it.

    .venv/bin/python benchmarks/duplex_ramp_tuning.py [--sets heldout40,...,heldout82] [--kind real|replay|all]
        [--output duplex_ramp_tuning]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from unittest import mock

from repredict_sets import HERE, variant_table

import sgdscale.fine.ps as fine_ps

DEFAULT_SETS = ",".join(f"heldout{n}" for n in range(40, 83))


def ramped(ramp_s: float, early: float, late: float):
    """A context manager factory: `couple_duplex` in `sgdscale.fine.ps` with the ramped share."""
    @contextlib.contextmanager
    def in_place():
        def couple(sending, receiving, up_to_down: dict[int, int], share: float | None = None) -> None:
            if not up_to_down:
                return
            full = {down: receiving.cap[down] for down in up_to_down.values()}
            sending_since: dict[int, float] = {}  # per downlink: when its node's uplink began sending
            listening, reallocate = sending.on_busy, receiving.reallocate

            def on_busy(link: int, busy: bool, now: float) -> None:
                down = up_to_down.get(link)
                if down is not None:
                    if busy:
                        sending_since[down] = now
                    else:
                        sending_since.pop(down, None)
                    receiving.set_capacity(down, full[down] * (early if busy else 1.0), now)
                if listening is not None:
                    listening(link, busy, now)

            def reallocate_ramped(now: float) -> None:
                for down, since in sending_since.items():
                    if now - since >= ramp_s:
                        receiving.cap[down] = full[down] * late
                reallocate(now)

            sending.on_busy, receiving.reallocate = on_busy, reallocate_ramped
        with mock.patch.object(fine_ps, "couple_duplex", couple):
            yield
    return in_place


VARIANTS = [
    ("as the model stands", "as the model stands", contextlib.nullcontext),
    ("0.86 throughout (check)", "0.86 throughout, through the patch (check)", ramped(0.0, 0.86, 0.86)),
    ("1.0, then 0.86 after 0.1 s", "1.0, then 0.86 after 0.1 s", ramped(0.1, 1.0, 0.86)),
    ("0.98, then 0.80 after 0.1 s", "0.98, then 0.80 after 0.1 s", ramped(0.1, 0.98, 0.80)),
]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=DEFAULT_SETS)
    parser.add_argument("--kind", default="real", choices=("real", "replay", "all"))
    parser.add_argument("--output", default="duplex_ramp_tuning")
    args = parser.parse_args(argv)
    sets = [name for name in args.sets.split(",") if (HERE / "results" / f"accuracy-{name}" / "results.json").exists()]
    text = variant_table(argv, "duplex_ramp_tuning.py", "A sync shard's pushes slowed once it has replied a while "
                         "(tuning look)", f"Error of the median prediction against the median measurement, per sync "
                         f"PS case ({args.kind}).", sets, {"ps-sync"}, VARIANTS, method="fine", kind=args.kind)
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
