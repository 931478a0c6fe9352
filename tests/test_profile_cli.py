"""`sgdscale profile` and `sgdscale show` through the real CLI entry point: good runs write a valid
profile; every bad input gives one clear message, exit status 2, no traceback, no output file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sgdscale.cli import main
from sgdscale.profile import load_profile

torch = pytest.importorskip("torch")

FACTORIES = textwrap.dedent(
    """
    import torch
    from torch import nn

    def tiny():
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 10))

    def not_a_module():
        return {"weights": 1}

    def with_batch():
        return nn.Linear(6, 2)

    with_batch.make_batch = lambda b: (torch.randn(b, 6), torch.randint(0, 2, (b,)))

    def broken():
        raise ValueError("no such config")
    """
)


@pytest.fixture
def factories(tmp_path, monkeypatch):
    package = tmp_path / "pkgdir"
    package.mkdir()
    (package / "userzoo_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(package))
    sys.modules.pop("userzoo_factories", None)
    yield package
    sys.modules.pop("userzoo_factories", None)


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(argv, capsys, out_dir: Path, *fragments: str) -> str:
    code, out, err = run(argv, capsys)
    assert code == 2, (out, err)
    assert err.startswith("error: "), err
    assert "Traceback" not in out + err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    left = [p for p in out_dir.iterdir() if p.name != "pkgdir"]  # pkgdir: the factories fixture
    assert left == [], "an output (or temporary) file was left behind"
    return err


QUICK = ["--warmup", "0", "--iterations", "2"]


# ----------------------------------------------------------------------------- good runs


def test_profile_builtin_writes_a_valid_profile_and_prints_the_table(tmp_path, capsys):
    target = tmp_path / "out" / "cnn.json"
    code, out, err = run(
        ["profile", "cnn", "-o", str(target), "--batch-size", "4", "--image-size", "8",
         "--option", "width=4", *QUICK],
        capsys,
    )
    assert code == 0, err
    profile = load_profile(target)
    assert profile.model == "cnn" and profile.batch_size == 4
    assert profile.input["width"] == 4 and profile.input["batch_shape"] == [4, 3, 8, 8]
    assert "sum of parts" in out and "measured step (uninstrumented)" in out and str(target) in out


def test_profile_json_to_stdout(capsys):
    code, out, err = run(["profile", "mlp", "--json", "--option", "width=16", "--option", "depth=1", *QUICK], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["schema"] == "sgdscale.profile/1" and data["model"] == "mlp"


def test_profile_user_model_with_input_shape(tmp_path, capsys, factories):
    target = tmp_path / "user.json"
    code, _, err = run(
        ["profile", "userzoo_factories:tiny", "--input-shape", "3x8x8", "--num-classes", "10",
         "-o", str(target), *QUICK],
        capsys,
    )
    assert code == 0, err
    profile = load_profile(target)
    assert profile.param_count == 3 * 8 * 8 * 10 + 10
    assert profile.input["input_shape"] == [3, 8, 8]


def test_profile_user_model_with_make_batch(tmp_path, capsys, factories):
    target = tmp_path / "user.json"
    code, _, err = run(["profile", "userzoo_factories:with_batch", "-o", str(target), *QUICK], capsys)
    assert code == 0, err
    assert load_profile(target).param_count == 6 * 2 + 2


# ----------------------------------------------------------------------------- bad input


def test_unknown_model_lists_known_ones(tmp_path, capsys):
    assert_user_error(["profile", "resnet9000", "-o", str(tmp_path / "x.json")], capsys, tmp_path,
                      "unknown model 'resnet9000'", "resnet50", "gpt2", "package.module:factory")


def test_import_path_that_fails(tmp_path, capsys):
    assert_user_error(["profile", "no_such_pkg_sgd.models:net", "-o", str(tmp_path / "x.json")], capsys,
                      tmp_path, "cannot import 'no_such_pkg_sgd.models'")


@pytest.mark.parametrize("target, extra, message", [
    ("userzoo_factories:nope", [], "has no attribute 'nope'"),
    ("userzoo_factories:not_a_module", ["--input-shape", "3"], "returned dict, not a torch.nn.Module"),
    ("userzoo_factories:broken", [], "no such config"),
    ("userzoo_factories:tiny", [], "--input-shape"),
], ids=["missing-attribute", "not-a-module", "factory-raises", "no-input-description"])
def test_bad_user_factory(tmp_path, capsys, factories, target, extra, message):
    out = tmp_path / "o"
    out.mkdir()
    assert_user_error(["profile", target, *extra, "-o", str(out / "x.json")], capsys, out, message)


def test_input_shape_the_model_rejects(tmp_path, capsys, factories):
    out = tmp_path / "o"
    out.mkdir()
    err = assert_user_error(
        ["profile", "userzoo_factories:tiny", "--input-shape", "3x16x16", "-o", str(out / "x.json"), *QUICK],
        capsys, out, "rejected an input of shape [8, 3, 16, 16]", "--input-shape",
    )
    assert len(err.strip().splitlines()) == 1


def test_malformed_input_shape(tmp_path, capsys, factories):
    assert_user_error(["profile", "userzoo_factories:tiny", "--input-shape", "3xtwo", "-o",
                       str(tmp_path / "x.json")], capsys, tmp_path, "bad input shape")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--iterations", "0"], "--iterations must be at least 1"),
        (["--threads", "0"], "--threads must be at least 1"),
        (["--image-size", "64", "--option", "width=8"], "does not take option(s) width"),
        (["--option", "layers"], "KEY=VALUE"),
    ],
)
def test_bad_options(tmp_path, capsys, args, fragment):
    model = "alexnet" if "--image-size" in args else "mlp"
    assert_user_error(["profile", model, "-o", str(tmp_path / "x.json"), *args], capsys, tmp_path, fragment)


def test_image_too_small(tmp_path, capsys):
    assert_user_error(["profile", "alexnet", "--image-size", "32", "-o", str(tmp_path / "x.json")], capsys,
                      tmp_path, "at least 63x63")


def test_cuda_requested_without_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # no GPU, also on a machine that has one
    assert_user_error(["profile", "mlp", "--device", "cuda", "-o", str(tmp_path / "x.json"), *QUICK], capsys,
                      tmp_path, "no CUDA GPU", "--device cpu")


def test_no_output_given(tmp_path, capsys):
    assert_user_error(["profile", "mlp"], capsys, tmp_path, "-o FILE")


def test_output_is_a_directory(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / "sub").mkdir()
    code, _, err = run(["profile", "mlp", "-o", str(out / "sub")], capsys)
    assert code == 2 and "is a directory" in err
    assert [p.name for p in out.iterdir()] == ["sub"] and not list((out / "sub").iterdir())


def test_bad_input_in_a_real_subprocess_has_no_traceback(tmp_path):
    """The installed entry point, end to end: exit 2, one line, nothing written."""
    target = tmp_path / "x.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    (tmp_path / "subproc_factories.py").write_text(FACTORIES)
    for model in ("nosuchmodel", "subproc_factories:not_a_module"):
        proc = subprocess.run(
            [sys.executable, "-m", "sgdscale.cli", "profile", model, "--input-shape", "4", "-o", str(target)],
            capture_output=True, text=True, env=env, timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
        assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["subproc_factories.py"] or all(
        p.name in ("subproc_factories.py", "__pycache__") for p in tmp_path.iterdir()
    )


# ----------------------------------------------------------------------------- show


def _valid_profile_dict() -> dict:
    return {
        "schema": "sgdscale.profile/1",
        "model": "toy",
        "batch_size": 4,
        "layers": [{"name": "fc", "forward_s": 0.001, "backward_s": 0.002,
                    "params": [{"name": "fc.weight", "numel": 10, "bytes": 40}]}],
    }


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON"),
        (json.dumps([1, 2]), "not a profile"),
        (json.dumps({**_valid_profile_dict(), "schema": "sgdscale.profile/9"}), "unsupported schema"),
        (json.dumps({**_valid_profile_dict(), "layers": []}), "layers"),
        (json.dumps({**_valid_profile_dict(), "layers": [{"name": "fc", "forward_s": -1.0, "backward_s": 0.0}]}),
         "forward_s = -1: too small"),
        (json.dumps({**_valid_profile_dict(), "batch_size": 0}), "batch_size"),
    ],
)
def test_show_rejects_bad_profiles(tmp_path, capsys, content, fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, out, err = run(["show", str(path)], capsys)
    assert code == 2 and err.startswith("error: ") and fragment in err, err
    assert "Traceback" not in out + err


def test_show_missing_file(tmp_path, capsys):
    code, _, err = run(["show", str(tmp_path / "none.json")], capsys)
    assert code == 2 and "does not exist" in err


def test_show_valid_and_builtin(tmp_path, capsys):
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(_valid_profile_dict()))
    code, out, _ = run(["show", str(path)], capsys)
    assert code == 0 and "fc" in out
    code, out, _ = run(["show", "resnet50"], capsys)
    assert code == 0 and "layer4.2.conv3" in out and "measured step (uninstrumented)" in out


def test_cli_and_show_do_not_import_torch():
    """Prediction must work without torch: loading the CLI and a built-in profile stays torch-free."""
    code = (
        "import sys; from sgdscale.cli import app; from sgdscale.profile import load_profile; "
        "load_profile('resnet50'); assert 'torch' not in sys.modules, 'torch imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
