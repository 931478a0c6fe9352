"""Gradient grouping: DDP buckets, per-layer/per-tensor order, single, MG-WFBP; and the WFBP recurrence."""

from __future__ import annotations

import numpy as np
import pytest

from sgdscale.comm.cost import CommModel
from sgdscale.grouping import group_gradients, tensor_ready_points
from sgdscale.profile import Layer, ParamTensor, Profile
from sgdscale.strategy import MIB, Strategy
from sgdscale.wfbp import backward_starts, comm_starts, mgwfbp_merge, wfbp_backward_comm_s, wfbp_iteration_s

COMM = CommModel.from_link(10e9, 20e-6)


def linear_stack(count: int = 8, width: int = 512) -> Profile:
    """count x nn.Linear(width, width): weight then bias per layer, like model.parameters()."""
    layers = [
        Layer(name=f"fc{i}", forward_s=1e-3, backward_s=2e-3, params=[
            ParamTensor(name=f"fc{i}.weight", numel=width * width, bytes=4 * width * width),
            ParamTensor(name=f"fc{i}.bias", numel=width, bytes=4 * width),
        ])
        for i in range(count)
    ]
    return Profile(model="linear-stack", batch_size=8, layers=layers)


def test_ddp_buckets_of_eight_linear_512_with_1mib_cap():
    """docs/reference/ecosystem.md §4: DDP with 8 x Linear(512) and a 1 MB cap builds buckets of 1,050,624 B."""
    groups = group_gradients(linear_stack(), Strategy(grouping="buckets", bucket_bytes=MIB), COMM, 4)
    assert [g.bytes for g in groups] == [1_050_624] * 8
    # reverse parameter order: layer 7's (weight, bias) first
    assert [g.tensors for g in groups] == [(2 * i, 2 * i + 1) for i in range(7, -1, -1)]
    assert [g.ready_layer for g in groups] == list(range(7, -1, -1))


def test_ddp_default_buckets_first_one_mib_then_25_mib():
    groups = group_gradients(linear_stack(), Strategy(grouping="buckets"), COMM, 4)
    assert [g.bytes for g in groups] == [1_050_624, 7 * 1_050_624]
    assert groups[-1].ready_layer == 0


def test_every_grouping_covers_every_tensor_once():
    profile = linear_stack()
    for grouping in ("per-tensor", "per-layer", "buckets", "single", "mg-wfbp"):
        groups = group_gradients(profile, Strategy(grouping=grouping), COMM, 8)
        members = sorted(i for g in groups for i in g.tensors)
        assert members == list(range(16)), grouping
        assert sum(g.bytes for g in groups) == profile.gradient_bytes


def test_per_tensor_and_per_layer_follow_backward_order():
    profile = linear_stack(4)
    per_tensor = group_gradients(profile, Strategy(grouping="per-tensor"), COMM, 2)
    assert [g.tensors[0] for g in per_tensor] == [7, 6, 5, 4, 3, 2, 1, 0]
    per_layer = group_gradients(profile, Strategy(grouping="per-layer"), COMM, 2)
    assert [g.ready_layer for g in per_layer] == [3, 2, 1, 0]
    single = group_gradients(profile, Strategy(grouping="single"), COMM, 2)
    assert len(single) == 1 and single[0].ready_layer == 0 and single[0].ready_fraction == 1.0


def test_layers_without_parameters_make_no_group():
    layers = [
        Layer(name="relu0", forward_s=1e-3, backward_s=1e-3),
        Layer(name="fc", forward_s=1e-3, backward_s=1e-3, params=[ParamTensor(name="w", numel=10, bytes=40)]),
        Layer(name="relu1", forward_s=1e-3, backward_s=1e-3),
    ]
    profile = Profile(model="m", batch_size=1, layers=layers)
    for grouping in ("per-tensor", "per-layer", "buckets", "mg-wfbp"):
        groups = group_gradients(profile, Strategy(grouping=grouping), COMM, 4)
        assert [(g.tensors, g.ready_layer) for g in groups] == [((0,), 1)], grouping
    empty = Profile(model="m", batch_size=1, layers=[layers[0]])
    assert group_gradients(empty, Strategy(), COMM, 4) == []


def test_grad_ready_times_place_tensors_on_the_backward_timeline():
    """A tensor whose hook fired inside another layer's window belongs to that window; DDP buckets
    follow the measured ready order (DDP rebuilds its buckets in gradient-arrival order)."""
    # backward windows (mean): layer 2 [0, 1 ms], layer 1 [1, 3 ms], layer 0 [3, 4 ms]
    layers = [
        Layer(name="a", forward_s=1e-3, backward_s=1e-3,
              params=[ParamTensor(name="a.w", numel=1, bytes=4, grad_ready_s=4e-3)]),
        Layer(name="b", forward_s=1e-3, backward_s=2e-3,
              params=[ParamTensor(name="b.w", numel=1, bytes=4, grad_ready_s=3.5e-3),  # late: in a's window
                      ParamTensor(name="b.b", numel=1, bytes=4, grad_ready_s=2e-3)]),  # halfway through b
        Layer(name="c", forward_s=1e-3, backward_s=1e-3,
              params=[ParamTensor(name="c.w", numel=1, bytes=4, grad_ready_s=1e-3)]),
    ]
    profile = Profile(model="m", batch_size=1, layers=layers)
    points = tensor_ready_points(profile)
    assert points[0] == (0, 1.0)
    assert points[1][0] == 0 and points[1][1] == pytest.approx(0.5)
    assert points[2][0] == 1 and points[2][1] == pytest.approx(0.5)
    assert points[3] == (2, 1.0)
    per_tensor = group_gradients(profile, Strategy(grouping="per-tensor"), COMM, 2)
    assert [g.tensors[0] for g in per_tensor] == [3, 2, 1, 0]
    per_layer = group_gradients(profile, Strategy(grouping="per-layer"), COMM, 2)
    layer_b = next(g for g in per_layer if g.tensors == (1, 2))
    assert (layer_b.ready_layer, layer_b.ready_fraction) == (0, pytest.approx(0.5))
    buckets = group_gradients(profile, Strategy(grouping="buckets", first_bucket_bytes=8, bucket_bytes=8), COMM, 2)
    assert [g.tensors for g in buckets] == [(2, 3), (0, 1)]


def test_wfbp_recurrence_by_hand():
    t_b, t_c = [1.0, 1.0, 1.0], [2.0, 0.5, 0.5]
    assert list(backward_starts(t_b)) == [2.0, 1.0, 0.0]
    # tau_c[2] = 1; tau_c[1] = max(1 + 0.5, 1 + 1) = 2; tau_c[0] = max(2 + 0.5, 2 + 1) = 3
    assert list(comm_starts(t_b, t_c)) == [3.0, 2.0, 1.0]
    assert wfbp_backward_comm_s(t_b, t_c) == 5.0
    assert wfbp_iteration_s(1.5, t_b, t_c, data_s=0.25, optimizer_s=0.25) == 7.0


def many_small_layers(count: int = 30) -> Profile:
    layers = [
        Layer(name=f"l{i}", forward_s=1e-4, backward_s=2e-4,
              params=[ParamTensor(name=f"l{i}.w", numel=1000, bytes=4000)])
        for i in range(count)
    ]
    return Profile(model="small", batch_size=1, layers=layers)


def test_mgwfbp_merges_small_tensors_when_startup_dominates():
    profile = many_small_layers()
    slow_start = CommModel.from_link(10e9, 1e-3)  # 1 ms per hop: startup >> backward per layer
    groups = group_gradients(profile, Strategy(grouping="mg-wfbp"), slow_start, 8)
    assert len(groups) < len(profile.layers) / 2
    assert sorted(i for g in groups for i in g.tensors) == list(range(30))
    # and it beats per-layer WFBP in the model it optimizes
    linear = slow_start.allreduce_linear(8)

    def backward_comm(groups):
        t_c = np.zeros(len(profile.layers))
        for g in groups:
            t_c[g.ready_layer] = linear.time_s(g.bytes)
        return wfbp_backward_comm_s([layer.backward_s for layer in profile.layers], t_c)

    per_layer = group_gradients(profile, Strategy(grouping="per-layer"), slow_start, 8)
    assert backward_comm(groups) < 0.5 * backward_comm(per_layer)


def test_mgwfbp_keeps_per_layer_without_startup_cost_and_for_one_worker():
    profile = many_small_layers()
    free_start = CommModel.from_link(10e9, 0.0)
    per_layer = group_gradients(profile, Strategy(grouping="per-layer"), free_start, 8)
    assert group_gradients(profile, Strategy(grouping="mg-wfbp"), free_start, 8) == per_layer
    slow_start = CommModel.from_link(10e9, 1e-3)
    assert group_gradients(profile, Strategy(grouping="mg-wfbp"), slow_start, 1) == \
        group_gradients(profile, Strategy(grouping="per-layer"), slow_start, 1)


def test_mgwfbp_merge_rule_on_a_hidden_schedule_keeps_groups():
    """Communication fully hidden behind the next layer's backward: nothing to gain, no merge."""
    groups = mgwfbp_merge(t_b=[1.0] * 5, nbytes=[10.0] * 5, alpha_s=0.01, beta_s_per_byte=0.001)
    assert groups == [[4], [3], [2], [1], [0]]
    # communication of each layer takes longer than the next backward: merge everything
    merged = mgwfbp_merge(t_b=[0.1] * 5, nbytes=[10.0] * 5, alpha_s=1.0, beta_s_per_byte=0.001)
    assert merged == [[4, 3, 2, 1, 0]]
