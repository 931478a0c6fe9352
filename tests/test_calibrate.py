"""Device calibration: the catalog, measured-speed scaling and roofline retargeting of a profile,
hand-computed; the shared CLI options and their errors. No torch."""

from __future__ import annotations

import json

import pytest

from sgdscale.calibrate import calibrate, retarget, to_step_time, to_throughput
from sgdscale.cli import main
from sgdscale.device import PRECISIONS, Device, catalog, get_device
from sgdscale.errors import UserError
from sgdscale.profile import load_profile, profile_from_json, save_profile
from sgdscale.units import parse_rate_per_s


def make_profile(**extra):
    """Two layers; the second (forward order) finishes backward first, as in real backward."""
    data = {
        "schema": "sgdscale.profile/1", "model": "toy", "batch_size": 10,
        "layers": [
            {"name": "a", "forward_s": 1.0, "backward_s": 2.0, "forward_samples_s": [0.5, 1.5],
             "params": [{"name": "a.w", "numel": 10, "bytes": 40, "grad_ready_s": 6.0}],
             "forward_flops": 2e9, "backward_flops": 2e9, "forward_bytes": 1e8, "backward_bytes": 1e8},
            {"name": "b", "forward_s": 3.0, "backward_s": 4.0,
             "params": [{"name": "b.w", "numel": 5, "bytes": 20, "grad_ready_s": 2.0},
                        {"name": "b.b", "numel": 1, "bytes": 4, "grad_ready_s": 4.0}],
             "forward_flops": 1e7, "backward_flops": 1e7, "forward_bytes": 1e9, "backward_bytes": 1e9},
        ],
        "step": {"data_s": 0.5, "h2d_s": 0.0, "optimizer_s": 0.5},
        "iteration_s": {"mean": 11.0, "p50": 11.0, "p95": 12.0, "samples": [10.0, 12.0]},
        **extra,
    }
    return profile_from_json(data)


SLOW = Device("slow", "slow", {"fp32": 1e9, "tf32": None, "fp16": None, "bf16": 2e9}, 1e9)
FAST = Device("fast", "fast", {"fp32": 4e9, "tf32": None, "fp16": None, "bf16": 8e9}, 2e9)


def test_catalog_has_the_devices_with_datasheet_numbers():
    devices = catalog()
    for key in ("K80", "P100", "V100", "T4", "A10", "A100", "H100", "H200", "L4", "vm-cpu-1t", "vm-cpu-2t"):
        assert key in devices
        assert devices[key].memory_bytes_per_s > 0 and devices[key].flops_for("fp32") > 0
    assert devices["A100"].flops_for("bf16") == 312e12 and devices["A100"].flops_for("tf32") == 156e12
    assert devices["H200"].memory_bytes_per_s == 4.8e12 and devices["V100"].flops_for("fp16") == 125e12
    assert get_device("a100") is devices["A100"]  # case-insensitive


def test_unknown_device_and_missing_precision_say_what_exists():
    with pytest.raises(UserError, match="known devices: K80, P100, V100"):
        get_device("B200")
    with pytest.raises(UserError, match=r"V100 has no bf16 .*it has: fp32, fp16"):
        get_device("V100").flops_for("bf16")
    with pytest.raises(UserError, match="unknown precision 'fp8'"):
        get_device("H100").flops_for("fp8")
    assert PRECISIONS == ("fp32", "tf32", "fp16", "bf16")


def test_step_time_scales_every_compute_time_by_one_factor():
    profile = make_profile()
    assert profile.compute_s == pytest.approx(11.0)
    scaled = to_step_time(profile, 22.0)
    assert scaled.compute_s == pytest.approx(22.0)
    assert [l.forward_s for l in scaled.layers] == pytest.approx([2.0, 6.0])
    assert [l.backward_s for l in scaled.layers] == pytest.approx([4.0, 8.0])
    assert scaled.layers[0].forward_samples_s == pytest.approx([1.0, 3.0])
    assert [t.grad_ready_s for t in scaled.tensors] == pytest.approx([12.0, 4.0, 8.0])
    assert scaled.step.data_s == pytest.approx(1.0) and scaled.step.optimizer_s == pytest.approx(1.0)
    assert scaled.iteration_s.mean == pytest.approx(22.0) and scaled.iteration_s.samples == pytest.approx([20.0, 24.0])
    # structure untouched
    assert [t.bytes for t in scaled.tensors] == [t.bytes for t in profile.tensors]
    assert scaled.provenance["calibration"][0]["factor"] == pytest.approx(2.0)


def test_throughput_sets_the_step_from_the_batch():
    assert to_throughput(make_profile(), 100.0).compute_s == pytest.approx(0.1)  # 10 samples at 100/s
    bigger = to_throughput(make_profile(), 100.0, batch_size=40)
    assert bigger.batch_size == 40 and bigger.compute_s == pytest.approx(0.4)
    assert bigger.layers[0].forward_flops == pytest.approx(8e9)  # counts follow the batch


def test_roofline_ratio_per_layer_hand_computed():
    # layer a: slow max(2e9/1e9, 1e8/1e9) = 2 s, fast max(0.5, 0.05) = 0.5 s -> x0.25 (compute-bound)
    # layer b: slow max(0.01, 1) = 1 s, fast max(0.0025, 0.5) = 0.5 s -> x0.5 (memory-bound)
    moved = retarget(make_profile(), FAST, "fp32", SLOW, "fp32")
    assert [l.forward_s for l in moved.layers] == pytest.approx([0.25, 1.5])
    assert [l.backward_s for l in moved.layers] == pytest.approx([0.5, 2.0])
    assert moved.layers[0].forward_samples_s == pytest.approx([0.125, 0.375])
    assert moved.step.optimizer_s == pytest.approx(0.25)  # no optimizer bytes: bandwidth ratio 1/2
    assert moved.step.data_s == pytest.approx(0.5)  # host work stays
    assert moved.compute_s == pytest.approx(0.5 + 0.25 + 1.5 + 0.5 + 2.0 + 0.25)
    assert moved.device_key == "fast" and moved.precision == "fp32"
    assert [t.bytes for t in moved.tensors] == [t.bytes for t in make_profile().tensors]


def test_roofline_keeps_the_gradient_ready_order():
    # backward segments: b ends at 4 (ratio 0.5 -> 2), a ends at 6 (ratio 0.25: 2 s -> 0.5, ends 2.5)
    moved = retarget(make_profile(), FAST, "fp32", SLOW, "fp32")
    ready = {t.name: t.grad_ready_s for t in moved.tensors}
    assert ready == pytest.approx({"b.w": 1.0, "b.b": 2.0, "a.w": 2.5})


def test_lower_precision_uses_its_peak_and_halves_the_traffic():
    # layer a fp32 -> bf16 on FAST: max(2e9/8e9, 0.5e8/2e9) = 0.25 s vs slow fp32 2 s -> x0.125
    # layer b: max(1e7/8e9, 0.5e9/2e9) = 0.25 s vs 1 s -> x0.25
    moved = retarget(make_profile(), FAST, "bf16", SLOW, "fp32")
    assert [l.forward_s for l in moved.layers] == pytest.approx([0.125, 0.75])
    assert moved.layers[1].forward_bytes == pytest.approx(5e8)
    with pytest.raises(UserError, match="has no tf32"):
        retarget(make_profile(), FAST, "tf32", SLOW, "fp32")


def test_layer_without_work_takes_the_profile_wide_ratio():
    data = make_profile().to_json()
    data["layers"].append({"name": "free", "forward_s": 1.0, "backward_s": 1.0, "params": [], "forward_flops": 0,
                           "backward_flops": 0, "forward_bytes": 0, "backward_bytes": 0})
    moved = retarget(profile_from_json(data), FAST, "fp32", SLOW, "fp32")
    # total model time slow: 2+2+1+1 = 6 s, fast: 0.5+0.5+0.5+0.5 = 2 s -> 1/3
    assert moved.layers[2].forward_s == pytest.approx(1 / 3)


def test_profile_without_counts_cannot_be_retargeted_but_can_be_scaled():
    data = make_profile().to_json()
    for layer in data["layers"]:
        for key in ("forward_flops", "backward_flops", "forward_bytes", "backward_bytes"):
            del layer[key]
    old = profile_from_json(data)
    assert not old.has_counts
    with pytest.raises(UserError, match="no counted flops/bytes.*--device-throughput"):
        retarget(old, FAST, "fp32", SLOW, "fp32")
    assert to_step_time(old, 1.0).compute_s == pytest.approx(1.0)


def test_count_fields_round_trip(tmp_path):
    profile = make_profile(precision="bf16", device_key="A100")
    data = profile.to_json()
    data["step"]["optimizer_bytes"] = 123.0
    profile = profile_from_json(data)
    path = tmp_path / "p.json"
    save_profile(profile, path)
    loaded = load_profile(path)
    assert loaded == profile and loaded.has_counts
    assert loaded.layers[1].backward_bytes == 1e9 and loaded.step.optimizer_bytes == 123.0
    assert loaded.precision == "bf16" and loaded.device_key == "A100"


def test_builtin_profiles_carry_counts_and_their_device():
    profile = load_profile("resnet50")
    assert profile.has_counts and profile.device_key == "vm-cpu-1t" and profile.precision == "fp32"
    total = sum(l.forward_flops + l.backward_flops for l in profile.layers)
    # ResNet-50 at 64x64: about 4.1 GMAC x (64/224)^2 per image forward, x2 flops per MAC, x3 with
    # backward, 16 images: 32 GFLOP (the first conv has no input gradient, a little less)
    assert 30e9 < total < 33e9


@pytest.mark.parametrize("kwargs, message", [
    ({"step_time_s": 1.0, "samples_per_s": 2.0}, "either --device-throughput or --step-time"),
    ({"batch_size": 32}, "--batch-size needs a measured speed"),
    ({"precision": "bf16"}, "--precision applies to --target-device"),
    ({"from_device": "V100"}, "--from-device only matters with --target-device"),
    ({"target_device": "A100"}, "does not say which catalog device"),
    ({"step_time_s": 1.0, "batch_size": 0}, "--batch-size must be at least 1"),
])
def test_calibration_mistakes_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        calibrate(make_profile(), **kwargs)


def test_retarget_then_pin_the_total():
    both = calibrate(make_profile(), target_device="A100", from_device="V100", step_time_s=3.0)
    assert both.compute_s == pytest.approx(3.0) and both.device_key == "A100"
    assert [c["kind"] for c in both.provenance["calibration"]] == ["roofline", "step_time"]


def test_rates_parse_at_the_edge():
    assert parse_rate_per_s("253/s") == 253 and parse_rate_per_s("1.2k/s") == 1200
    assert parse_rate_per_s("2470 img/s") == 2470 and parse_rate_per_s("253") == 253
    for bad, message in (("120ms", "looks like a time"), ("-3/s", "must be positive"), ("fast", "cannot read")):
        with pytest.raises(UserError, match=message):
            parse_rate_per_s(bad)


def test_predict_with_device_throughput_predicts_that_throughput(tmp_path, capsys):
    out = tmp_path / "p.json"
    code = main(["predict", "resnet50", "--workers", "1", "--device-throughput", "253/s", "--batch-size", "32",
                 "--method", "fine", "--no-variability", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "calibrated profile: scaled" in text and "batch 32" in text
    data = json.loads(out.read_text())
    assert data["results"][0]["throughput"] == pytest.approx(253.0, rel=1e-6)
    (step,) = data["inputs"]["profile"]["calibration"]  # the JSON says how the profile was moved
    assert step["kind"] == "step_time" and step["batch_size"] == 32 and step["step_s"] == pytest.approx(32 / 253)


@pytest.mark.parametrize("args, message", [
    (["--target-device", "B200"], "unknown device 'B200'; known devices: K80"),
    (["--target-device", "V100", "--precision", "bf16"], "V100 has no bf16"),
    (["--device-throughput", "fast"], "cannot read --device-throughput"),
    (["--step-time", "-1ms"], "--step-time must not be negative"),
    (["--batch-size", "64"], "--batch-size needs a measured speed"),
])
def test_predict_calibration_errors_exit_2(capsys, args, message):
    code = main(["predict", "resnet50", "--workers", "2", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err, err


def test_show_writes_the_retargeted_profile(tmp_path, capsys):
    out = tmp_path / "a100.json"
    code = main(["show", "resnet50", "--target-device", "A100", "--precision", "bf16", "-o", str(out)])
    text = capsys.readouterr().out
    assert code == 0 and "roofline vm-cpu-1t (fp32) -> A100 (bf16)" in text
    moved = load_profile(out)
    original = load_profile("resnet50")
    assert moved.device_key == "A100" and moved.precision == "bf16"
    assert [t.name for t in moved.tensors] == [t.name for t in original.tensors]
    assert moved.gradient_bytes == original.gradient_bytes
    assert 0 < moved.compute_s < original.compute_s / 100
