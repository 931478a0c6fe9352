"""The real profiler on small real models: layer order, parameter accounting, gradient order,
sums against the uninstrumented step, and the shipped built-in profiles."""

from __future__ import annotations

import json
import statistics

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from sgdscale.errors import UserError  # noqa: E402
from sgdscale.profile import builtin_profile_names, load_profile, profile_from_json, save_profile  # noqa: E402
from sgdscale.profiling.profiler import profile_workload  # noqa: E402
from sgdscale.profiling.zoo import Workload, build_workload, known_models  # noqa: E402


def _quick(workload: Workload, batch_size: int = 4, iterations: int = 3):
    return profile_workload(workload, batch_size, warmup=1, iterations=iterations, threads=1)


def _tensor_workload(module: nn.Module, in_features: int, name: str = "custom") -> Workload:
    return Workload(
        name=name,
        module=module,
        make_batch=lambda b: (torch.randn(b, in_features), torch.zeros(b)),
        loss_fn=lambda out, _y: out.pow(2).mean(),
        input_desc={"in_features": in_features},
    )


class _CalledOutOfOrder(nn.Module):
    """Registration order differs from call order: the profile must follow the call order."""

    def __init__(self) -> None:
        super().__init__()
        self.last = nn.Linear(8, 2)
        self.first = nn.Linear(16, 8)
        self.middle_free = nn.ReLU()

    def forward(self, x):
        return self.last(self.middle_free(self.first(x)))


class _SharedAndUnused(nn.Module):
    """One Linear called twice, a parameter-free module, and a Linear never called."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(12, 32)
        self.shared = nn.Linear(32, 32)
        self.act = nn.Tanh()
        self.out = nn.Linear(32, 3)
        self.unused = nn.Linear(5, 5)

    def forward(self, x):
        x = self.act(self.shared(self.inp(x)))
        x = self.act(self.shared(x))
        return self.out(x)


# ----------------------------------------------------------------------------- structure


def test_layers_follow_forward_call_order_not_registration_order():
    profile = _quick(_tensor_workload(_CalledOutOfOrder(), 16))
    assert [layer.name for layer in profile.layers] == ["first", "last"]


def test_sequential_layers_in_forward_order_and_gradients_ready_in_reverse():
    workload = build_workload("mlp", width=64, depth=4, input_dim=32)
    profile = _quick(workload, batch_size=16, iterations=4)
    assert [layer.name for layer in profile.layers] == ["0", "2", "4", "6", "8"]
    # Each layer's last gradient is ready strictly after the next layer's (backward = reverse order).
    last_ready = [max(t.grad_ready_s for t in layer.params) for layer in profile.layers]
    assert last_ready == sorted(last_ready, reverse=True)
    assert profile.provenance["backward_order_is_reverse_forward"] is True
    # grad_ready_s equals the cumulative backward time in backward order (same attribution).
    cumulative = 0.0
    for layer, ready in zip(reversed(profile.layers[1:]), reversed(last_ready[1:])):
        cumulative += layer.backward_s
        assert ready == pytest.approx(cumulative, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize(
    ("model", "kwargs"),
    [
        ("mlp", {"width": 64, "depth": 2}),
        ("cnn", {"width": 8, "image_size": 16}),
        ("resnet18", {"image_size": 32}),
        ("gpt2", {"layers": 2, "hidden": 32, "heads": 2, "vocab": 100, "seq_len": 16}),
        ("bert", {"layers": 2, "hidden": 32, "heads": 2, "vocab": 100, "seq_len": 16}),
    ],
)
def test_parameter_accounting_matches_the_module(model, kwargs):
    workload = build_workload(model, **kwargs)
    params = list(workload.module.parameters())
    profile = _quick(workload, batch_size=4, iterations=2)
    assert profile.param_count == sum(p.numel() for p in params)
    assert profile.gradient_bytes == sum(p.numel() * p.element_size() for p in params)
    names = {name for name, _ in workload.module.named_parameters()}
    assert {t.name for t in profile.tensors} == names
    assert all(t.grad_ready_s is not None for t in profile.tensors)
    # Every iteration leaves a sample per layer, and the parts add up to each instrumented step.
    for layer in profile.layers:
        assert len(layer.forward_samples_s) == len(layer.backward_samples_s) == 2
    assert len(profile.iteration_s.samples) == 2


def test_tied_weight_counted_once_and_owned_by_the_first_user():
    workload = build_workload("gpt2", layers=1, hidden=32, heads=2, vocab=50, seq_len=8)
    profile = _quick(workload, iterations=2)
    by_name = {layer.name: layer for layer in profile.layers}
    assert [t.name for t in by_name["wte"].params] == ["wte.weight"]
    assert by_name["lm_head"].params == []  # its weight is the embedding's
    assert profile.layers[0].name == "wte" and profile.layers[-1].name == "lm_head"
    # The tied weight's gradient is ready last: it also collects the embedding's backward.
    wte = by_name["wte"].params[0].grad_ready_s
    assert wte == max(t.grad_ready_s for t in profile.tensors)


def test_shared_module_param_free_module_and_unused_parameters():
    module = _SharedAndUnused()
    profile = _quick(_tensor_workload(module, 12))
    assert [layer.name for layer in profile.layers] == ["inp", "shared", "out", "unused"]
    assert profile.param_count == sum(p.numel() for p in module.parameters())
    unused = profile.layers[-1]
    assert unused.forward_s == 0 and unused.backward_s == 0
    assert all(t.grad_ready_s is None for t in unused.params)
    # The shared layer runs twice, so it must cost more forward time than the input layer would
    # for the same shape alone; at least it is charged something.
    assert profile.layers[1].forward_s > 0


def test_profiling_leaves_the_module_clean_and_threads_restored():
    before = torch.get_num_threads()
    workload = build_workload("mlp", width=32, depth=2)
    profile_workload(workload, 4, warmup=0, iterations=2, threads=1)
    assert torch.get_num_threads() == before
    for module in workload.module.modules():
        assert not module._forward_pre_hooks
    for p in workload.module.parameters():
        assert not getattr(p, "_post_accumulate_grad_hooks", None)
        assert p.grad is None
    # and it still trains
    x, y = workload.make_batch(4)
    workload.loss_fn(workload.module(x), y).backward()


def test_provenance_says_how_and_where():
    profile = _quick(build_workload("cnn", width=4, image_size=8), iterations=2)
    prov = profile.provenance
    for key in ("tool", "torch", "host_cpu", "threads", "date_utc", "method", "consistency"):
        assert key in prov, key
    assert prov["threads"] == 1
    assert prov["date_utc"].endswith("Z")
    assert set(prov["consistency"]) >= {"instrumented_sum_s", "uninstrumented_mean_s", "gap_fraction"}
    assert profile.framework.name == "pytorch"
    assert profile.input["batch_shape"] == [4, 3, 8, 8]
    assert profile.step.h2d_s == 0.0  # CPU: nothing to copy
    # the batch norms' statistics, which DDP broadcasts before every forward
    module = build_workload("cnn", width=4, image_size=8).module
    assert profile.buffer_bytes == sum(b.numel() * b.element_size() for b in module.buffers()) > 0
    # and DDP's local work with them (re-collect, flatten per dtype, copy back): timed, far under a step
    assert 0 < profile.buffer_sync_s < profile.iteration_s.mean


def test_buffer_sync_is_zero_without_buffers_and_grows_with_buffer_tensors():
    """DDP's local work with the buffers goes per tensor: a model with 40 batch norms (120 buffer
    tensors) costs more than one with 2 (6), and a model without buffers costs nothing."""
    from sgdscale.profiling.profiler import buffer_sync_s

    cpu = torch.device("cpu")
    assert buffer_sync_s(nn.Linear(4, 4), 20, cpu) == 0.0
    few = min(buffer_sync_s(nn.Sequential(*[nn.BatchNorm1d(4) for _ in range(2)]), 200, cpu) for _ in range(3))
    many = min(buffer_sync_s(nn.Sequential(*[nn.BatchNorm1d(4) for _ in range(40)]), 200, cpu) for _ in range(3))
    assert many > 5 * few > 0


def test_ddp_overhead_is_measured_in_a_one_process_group_left_behind_closed():
    """What DDP adds to a step (hooks on every gradient, bucket copies): measured against the plain
    module, positive for a model of 80 small tensors, far under its step; no process group remains."""
    import torch.distributed as dist

    profile = _quick(build_workload("mlp", width=8, depth=40), iterations=10)
    assert profile.ddp_overhead_s is not None
    assert 0 < profile.ddp_overhead_s < profile.iteration_s.mean
    assert not dist.is_initialized()


def test_round_trip_save_load(tmp_path):
    profile = _quick(build_workload("mlp", width=32, depth=2), iterations=3)
    path = tmp_path / "p.json"
    save_profile(profile, path)
    loaded = load_profile(path)
    assert loaded == profile
    assert loaded.compute_s == pytest.approx(profile.compute_s)
    assert profile_from_json(json.loads(path.read_text())) == profile


# ----------------------------------------------------------------------------- consistency


def test_sum_of_parts_within_10_percent_of_uninstrumented_step():
    """Hooks must not distort the step: the instrumented parts sum to the plain step within 10%.

    A ~50-100 ms step keeps timer noise small. On a shared 2-core box a neighbour can still disturb
    a step, so the check uses the median over adjacent (instrumented, plain) step pairs and allows
    up to three runs; the 10% bound itself never widens."""
    gaps = []
    for _ in range(3):
        workload = build_workload("resnet18", image_size=48)
        profile = profile_workload(workload, 8, warmup=2, iterations=8, threads=1)
        c = profile.provenance["consistency"]
        # The instrumented mean is exactly the sum of the reported parts.
        assert c["instrumented_sum_s"] == pytest.approx(profile.compute_s, rel=1e-9)
        gaps.append(c["paired_median_gap_fraction"])
        if abs(gaps[-1]) <= 0.10:
            break
    assert min(abs(g) for g in gaps) <= 0.10, f"paired median gaps {gaps}"


# ----------------------------------------------------------------------------- errors


def test_a_minimum_window_measures_more_steps_where_they_are_short():
    """A profile of 2 steps of a tiny mlp (well under a millisecond each) with a 0.05 s minimum
    window measures more of them, at most 10x the 2 asked for; the profile says how many and why."""
    workload = build_workload("mlp", width=8, depth=1)
    plain = profile_workload(workload, 4, warmup=1, iterations=2, threads=1)
    assert "measured_iterations" not in plain.provenance
    windowed = profile_workload(workload, 4, warmup=1, iterations=2, threads=1, min_window_s=0.05)
    assert windowed.provenance["min_window_s"] == 0.05
    assert 2 < windowed.provenance["measured_iterations"] <= 20
    assert len(windowed.layers[0].forward_samples_s) == windowed.provenance["measured_iterations"]


def test_zero_batch_size_and_bad_counts_are_user_errors():
    workload = build_workload("mlp", width=8, depth=1)
    for kwargs in ({"batch_size": 0}, {"batch_size": 4, "iterations": 0}, {"batch_size": 4, "threads": 0},
                   {"batch_size": 4, "min_window_s": -1.0}, {"batch_size": 4, "min_window_s": float("nan")}):
        with pytest.raises(UserError):
            profile_workload(workload, **kwargs)


def test_cuda_without_gpu_is_a_user_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # no GPU, also on a machine that has one
    with pytest.raises(UserError, match="no CUDA GPU"):
        profile_workload(build_workload("mlp", width=8, depth=1), 4, device="cuda")


def test_rejected_input_shape_names_the_shape():
    workload = _tensor_workload(nn.Linear(10, 2), 7, name="pkg:factory")
    with pytest.raises(UserError, match=r"rejected an input of shape \[4, 7\]") as info:
        _quick(workload)
    assert "--input-shape" in str(info.value)


def test_zoo_errors():
    with pytest.raises(UserError, match="resnet50"):  # lists the known models
        build_workload("resnet5O")
    with pytest.raises(UserError, match="at least 63x63"):
        build_workload("alexnet", image_size=32)
    with pytest.raises(UserError, match="does not take option"):
        build_workload("mlp", heads=2)
    with pytest.raises(UserError, match="--input-shape"):
        build_workload("torch.nn:Identity")
    assert set(known_models()) >= {"resnet18", "resnet50", "vgg16", "alexnet", "mobilenet_v2",
                                   "densenet121", "gpt2", "bert", "mlp", "cnn"}


def test_user_model_with_input_shape_and_classes():
    workload = build_workload("torch.nn:Flatten", input_shape="3x4x4", num_classes=48)
    x, y = workload.make_batch(5)
    assert x.shape == (5, 3, 4, 4) and y.dtype == torch.long
    # Flatten has no parameters: nothing to train, which is a clear error.
    with pytest.raises(UserError, match="no trainable parameters"):
        _quick(workload)


# ----------------------------------------------------------------------------- built-ins


@pytest.mark.parametrize("name", builtin_profile_names())
def test_builtin_profiles_load_and_are_consistent(name):
    profile = load_profile(name)
    assert profile.model == name
    assert profile.param_count > 0 and profile.forward_s > 0 and profile.backward_s > 0
    assert profile.provenance["machine"].startswith("2-core x86_64 VM CPU, 1 thread")
    assert abs(profile.provenance["consistency"]["gap_fraction"]) <= 0.10
    assert statistics.fmean(profile.iteration_s.samples) == pytest.approx(profile.iteration_s.mean)
    assert len({layer.name for layer in profile.layers}) == len(profile.layers)


def test_builtin_profiles_cover_the_zoo():
    assert set(builtin_profile_names()) >= set(known_models())


def test_builtin_param_counts_match_the_zoo_models():
    for name in ("resnet50", "gpt2", "mlp"):
        profile = load_profile(name)
        options = dict(profile.provenance.get("build_options", {}))
        workload = build_workload(name, **options)
        assert profile.param_count == sum(p.numel() for p in workload.module.parameters()), name


def test_counts_match_flop_counter_and_hand_computed_linear():
    from torch.utils.flop_counter import FlopCounterMode

    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    profile = _quick(_tensor_workload(module, 16), batch_size=8)
    first, second = profile.layers
    # forward of Linear(16->32) on 8 samples: 2*8*16*32 flops; its backward only needs the weight
    # gradient (the input does not require grad): the same again. Linear(32->4) also passes the
    # gradient to its input: twice its forward.
    assert first.forward_flops == 2 * 8 * 16 * 32 and first.backward_flops == 2 * 8 * 16 * 32
    assert second.forward_flops == 2 * 8 * 32 * 4 and second.backward_flops == 2 * (2 * 8 * 32 * 4)
    # bytes: at least the matmul's input, weight and output, read or written once
    assert first.forward_bytes >= 4 * (8 * 16 + 16 * 32 + 8 * 32)
    assert profile.step.optimizer_bytes >= 3 * 4 * profile.param_count  # param, grad, momentum
    x = torch.randn(8, 16)
    with FlopCounterMode(display=False) as counter:
        module(x).pow(2).mean().backward()
    assert sum(l.forward_flops + l.backward_flops for l in profile.layers) == counter.get_total_flops()
    assert profile.precision == "fp32" and "flop_counter" in profile.provenance["counting"]


def test_bf16_profile_casts_the_model_and_halves_gradient_bytes():
    profile = profile_workload(build_workload("mlp", width=64, depth=2), 4, warmup=0, iterations=2, precision="bf16")
    assert profile.precision == "bf16"
    assert all(t.bytes == 2 * t.numel for t in profile.tensors)
    with pytest.raises(UserError, match="tf32 exists only on CUDA"):
        profile_workload(build_workload("mlp", width=64, depth=2), 4, warmup=0, iterations=1, precision="tf32")
