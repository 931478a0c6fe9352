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
