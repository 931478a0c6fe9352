"""Which server shard holds each parameter tensor: the one rule the fine simulation, the coarse
model and the real parameter server (`sgdscale.runtime.ps`) share.

`round-robin` (TensorFlow's replica_device_setter default) puts tensor i (forward order, i.e.
`module.parameters()` order) on shard i mod S; for layers with a weight and a bias this sends every
weight to the even shards when S is even. `size` assigns tensors largest first to the shard with
the fewest bytes so far (greedy balance; ties to the lower tensor index and the lower shard).
"""

from __future__ import annotations

from collections.abc import Sequence

PLACEMENTS = ("round-robin", "size")
# Where balancing by size takes at least this share off round-robin's busiest shard, `predict` says
# so and `advise` tries both (round-robin over three shards puts nearly every byte of most CNNs on
# one: a convolution and its BatchNorm pair come in threes).
BALANCE_GAIN = 0.05


def place_tensors(sizes_bytes: Sequence[int], shards: int, placement: str = "round-robin") -> list[int]:
    """Shard index of every tensor (see the module docstring)."""
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}")
    if placement == "round-robin" or shards == 1:
        return [i % shards for i in range(len(sizes_bytes))]
    load = [0] * shards
    shard_of = [0] * len(sizes_bytes)
    for i in sorted(range(len(sizes_bytes)), key=lambda i: (-sizes_bytes[i], i)):
        s = min(range(shards), key=lambda s: (load[s], s))
        shard_of[i] = s
        load[s] += sizes_bytes[i]
    return shard_of


def shard_bytes(sizes_bytes: Sequence[int], shards: int, placement: str = "round-robin") -> list[int]:
    """Bytes of parameters on each shard."""
    load = [0] * shards
    for size, shard in zip(sizes_bytes, place_tensors(sizes_bytes, shards, placement)):
        load[shard] += size
    return load


def balance_gain(sizes_bytes: Sequence[int], shards: int) -> float:
    """The share of round-robin's busiest shard's bytes that balancing by size takes off (0 to 1)."""
    if shards < 2 or not sizes_bytes:
        return 0.0
    round_robin = max(shard_bytes(sizes_bytes, shards, "round-robin"))
    if round_robin <= 0:
        return 0.0
    return 1.0 - max(shard_bytes(sizes_bytes, shards, "size")) / round_robin


def lopsided_note(sizes_bytes: Sequence[int], shards: int) -> str | None:
    """A note for a round-robin placement whose busiest shard balancing by size would lighten."""
    if balance_gain(sizes_bytes, shards) < BALANCE_GAIN:
        return None
    round_robin = shard_bytes(sizes_bytes, shards, "round-robin")
    busiest = max(range(shards), key=lambda s: round_robin[s])
    balanced = max(shard_bytes(sizes_bytes, shards, "size"))
    return (f"round-robin puts {round_robin[busiest] / 1e6:.2f} of {sum(sizes_bytes) / 1e6:.2f} MB of parameters "
            f"on shard {busiest} of {shards}; --placement size would put at most {balanced / 1e6:.2f} MB on one "
            f"(round-robin is TensorFlow's default and sgdscale train's)")
