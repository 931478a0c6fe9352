"""What charging DDP's buffer broadcast moves on the kept real-compute all-reduce runs.

Profiles made before `sgdscale profile` recorded `buffer_bytes` say 0, so re-predicting the kept
runs of sets 1-13 (`benchmarks/repredict_sets.py`) would charge nothing. Their runs did broadcast:
every real model trained with DDP's default `broadcast_buffers=True`. This re-predicts them with
each round's profile given the model's buffer bytes, counted on the model as the grid built it
(batch-norm statistics: mobilenet_v2 137 kB, resnet18 39 kB; mlp, gpt2, bert none). Replays of
those sets ran modules without buffers, and their saved profiles say 0: unchanged. These sets are
tuning sets for the change (it was found on set 13).

    .venv/bin/python benchmarks/repredict_buffer_broadcast.py
    .venv/bin/python benchmarks/repredict_buffer_broadcast.py --without heldout16
Raw output: benchmarks/results/repredict_buffer_broadcast.md. `--without SET` does the reverse on a set
whose profiles have the field (held-out set 16): every profile's buffer bytes set to 0, i.e. what
the change moved there ('now' is then the prediction without the broadcast); raw output
benchmarks/results/repredict_<SET>_without_buffer_broadcast.md.
"""

from __future__ import annotations

import functools
import sys
from unittest import mock

from repredict_sets import main as repredict

from sgdscale.validation import Validator

SETS = "heldout,heldout6,heldout7,heldout8,heldout9,heldout13"


@functools.cache
def buffer_bytes(model: str, image_size: int | None, seq_len: int | None, options: tuple) -> int:
    from sgdscale.profiling.zoo import build_workload

    module = build_workload(model, image_size=image_size, seq_len=seq_len, **dict(options)).module
    return sum(b.numel() * b.element_size() for b in module.buffers())


def main(argv: list[str]) -> int:
    original = Validator.case_inputs
    without = argv[1] if argv[:1] == ["--without"] and len(argv) == 2 else None

    def patched(self, case, round_index=0):
        profile, cluster, strategy, comm, variability = original(self, case, round_index)
        spec = case.spec
        if without:
            profile = profile.model_copy(update={"buffer_bytes": 0})
        elif spec.kind == "real" and not profile.buffer_bytes:
            nbytes = buffer_bytes(spec.model, spec.image_size, spec.seq_len, spec.options)
            profile = profile.model_copy(update={"buffer_bytes": nbytes})
        return profile, cluster, strategy, comm, variability

    methods = "fine,coarse" if without else "fine,coarse,fine-nominal,coarse-nominal"
    output = f"repredict_{without}_without_buffer_broadcast" if without else "repredict_buffer_broadcast"
    with mock.patch.object(Validator, "case_inputs", patched):
        return repredict(["--methods", methods, "--strategies", "allreduce", "--sets", without or SETS,
                          "--output", output])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
