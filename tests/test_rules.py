"""Rules that several parts share live in one place: placement, ready offsets, option parsing,
the one-cluster-size rule, the method layering."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from sgdscale.cluster import Cluster, one_cluster_size
from sgdscale.coarse.phases import shard_bytes as coarse_shard_bytes
from sgdscale.comm.cost import CommModel
from sgdscale.errors import UserError
from sgdscale.fine.dag import ps_plan
from sgdscale.grouping import group_gradients, ready_offsets_s
from sgdscale.placement import balance_gain, lopsided_note, place_tensors, shard_bytes
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy
from sgdscale.units import parse_key_values

SRC = Path(__file__).resolve().parent.parent / "src" / "sgdscale"


def test_round_robin_and_size_placement():
    assert place_tensors([5, 1, 1, 9], 2, "round-robin") == [0, 1, 0, 1]
    # Largest first onto the least-loaded shard, ties to the lower index and the lower shard.
    assert place_tensors([5, 1, 1, 9], 2, "size") == [1, 1, 1, 0]  # 9 -> 0, then 5, 1, 1 -> 1
    assert place_tensors([3, 3, 3], 3, "size") == [0, 1, 2]
    assert shard_bytes([5, 1, 1, 9], 2, "size") == [9, 7]
    with pytest.raises(ValueError, match="placement"):
        place_tensors([1], 2, "random")


@pytest.mark.parametrize("placement", ["round-robin", "size"])
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_both_methods_put_the_same_bytes_on_each_shard(placement, shards):
    profile = load_profile("resnet50")
    cluster = Cluster(4, bandwidth_bps=1e9, ps_count=shards)
    strategy = Strategy(kind="ps-sync", placement=placement)
    plan = ps_plan(profile, cluster, strategy, CommModel.from_link(1e9, 1e-5))
    fine = [sum(b for b, s in zip(plan.bytes, plan.shard) if s == shard) for shard in range(shards)]
    np.testing.assert_allclose(fine, coarse_shard_bytes(profile, strategy, shards))


def test_a_lopsided_round_robin_is_named_and_balancing_measured():
    """Round-robin over three shards puts a convolution's weight and its BatchNorm pair on shards 0, 1
    and 2, so every convolution lands on shard 0; balancing by size takes half off it. Two
    shards alternate them, and nothing is said."""
    sizes = [900, 10, 10] * 4  # 3.6 kB of "convolutions", 80 B of BatchNorm vectors
    assert shard_bytes(sizes, 3) == [3600, 40, 40]
    assert shard_bytes(sizes, 3, "size") == [1800, 940, 940] and balance_gain(sizes, 3) == pytest.approx(0.5)
    note = lopsided_note(sizes, 3)
    assert note is not None and "on shard 0 of 3" in note and "--placement size" in note
    assert lopsided_note(sizes, 2) is None and balance_gain(sizes, 1) == 0.0 and lopsided_note([], 3) is None


def test_ready_offsets_are_the_backward_time_up_to_each_group():
    backward = np.array([[1.0, 2.0, 4.0], [2.0, 2.0, 2.0]])  # layers in forward order; backward runs 2, 1, 0
    # Group ready at the end of layer 1 (after layers 2 and 1), half-way into layer 0, at the end of 0.
    offsets = ready_offsets_s(backward, [1, 0, 0], [1.0, 0.5, 1.0])
    np.testing.assert_allclose(offsets, [[6.0, 6.5, 7.0], [4.0, 5.0, 6.0]])
    assert ready_offsets_s(backward, [], []).shape == (2, 0)


def test_a_parameter_server_with_mg_wfbp_pushes_per_layer_in_both_methods():
    profile = load_profile("resnet50")
    comm = CommModel.from_link(1e9, 1e-4)
    ps = group_gradients(profile, Strategy(kind="ps-async", grouping="mg-wfbp"), comm, 8)
    per_layer = group_gradients(profile, Strategy(kind="ps-async", grouping="per-layer"), comm, 8)
    assert ps == per_layer


def test_key_value_options():
    assert parse_key_values(("layers=6", "width = 512", "hidden-size=1.5", "act=gelu")) == {
        "layers": 6, "width": 512, "hidden_size": 1.5, "act": "gelu"}
    for bad in ("layers", "=3"):
        with pytest.raises(UserError, match="KEY=VALUE"):
            parse_key_values((bad,))


def test_per_worker_options_fix_one_cluster_size():
    one_cluster_size([4], "--compute-scale")
    with pytest.raises(UserError, match="--compute-scale describes one cluster"):
        one_cluster_size([2, 4], "--compute-scale")
    cluster = Cluster(2, compute_scale=(1.0, 2.0))
    assert cluster.per_worker and cluster.with_workers(2) == cluster
    with pytest.raises(UserError, match="fixes the worker count"):
        cluster.with_workers(4)
    assert not Cluster(2).per_worker


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_the_coarse_method_imports_nothing_of_the_fine_one():
    for path in (SRC / "coarse").glob("*.py"):
        assert not any(name.startswith("sgdscale.fine") for name in _imports(path)), path.name


def test_the_prediction_core_imports_no_runtime_and_no_torch():
    top = ("predict.py", "profile.py", "cluster.py", "strategy.py", "grouping.py", "placement.py",
           "variability.py", "wfbp.py", "result.py", "units.py", "sweep.py")
    core = [*(SRC / name for name in top), *(SRC / "fine").glob("*.py"), *(SRC / "coarse").glob("*.py"),
            *(SRC / "comm").glob("*.py"), *(SRC / "advise").glob("*.py")]
    for path in core:
        for name in _imports(path):
            assert not name.startswith(("torch", "sgdscale.runtime", "sgdscale.profiling")), (path.name, name)


def test_every_network_model_implements_the_protocol():
    from sgdscale.fine.events import EventQueue, NetworkModel
    from sgdscale.fine.hubs import StarNetwork
    from sgdscale.fine.links import LinkNetwork

    for cls in (LinkNetwork, StarNetwork):
        assert isinstance(cls(EventQueue(), [1.0, 2.0], 0.0), NetworkModel)
