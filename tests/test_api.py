"""`sgdscale.predict(...)`: the one-call Python API returns what `sgdscale predict --json` writes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sgdscale
from sgdscale.cli import main
from sgdscale.errors import UserError


def _compare(api, cli, where="document"):
    """Same keys at every level; same values, except how long each predictor ran (a timing)."""
    assert type(api) is type(cli), f"{where}: {type(api).__name__} vs {type(cli).__name__}"
    if isinstance(api, dict):
        assert set(api) == set(cli), f"{where}: keys differ: {set(api) ^ set(cli)}"
        for key in api:
            if key != "predict_time_s":
                _compare(api[key], cli[key], f"{where}.{key}")
    elif isinstance(api, list):
        assert len(api) == len(cli), f"{where}: {len(api)} vs {len(cli)} items"
        for index, (a, c) in enumerate(zip(api, cli)):
            _compare(a, c, f"{where}[{index}]")
    else:
        assert api == cli, f"{where}: {api!r} vs {cli!r}"


@pytest.mark.parametrize("cli_args, api_kwargs", [
    (["resnet50", "--workers", "1,8,64", "--bandwidth", "10Gbit", "--strategy", "allreduce"],
     dict(workers=[1, 8, 64], bandwidth="10Gbit", strategy="allreduce")),
    (["gpt2", "--workers", "1,4", "--bandwidth", "1Gbit", "--strategy", "ps-sync", "--ps", "2", "--iterations", "20"],
     dict(workers=[1, 4], bandwidth=1e9, strategy="ps-sync", ps=2, iterations=20)),
    (["mlp", "--workers", "4", "--strategy", "ps-async", "--compute-scale", "1,1,1,2", "--method", "coarse"],
     dict(workers=4, strategy="ps-async", compute_scale=[1, 1, 1, 2], method="coarse")),
])
def test_api_equals_cli_json_key_by_key(tmp_path, capsys, cli_args, api_kwargs):
    path = tmp_path / "cli.json"
    assert main(["predict", *cli_args, "--json", str(path)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    _compare(sgdscale.predict(cli_args[0], **api_kwargs), json.loads(path.read_text()))


def test_readme_example_runs_without_torch():
    """The README's example, in a fresh interpreter: a result per (workers, method), no torch loaded."""
    code = ("import sys, sgdscale\n"
            "r = sgdscale.predict('resnet50', workers=[1, 8, 64], bandwidth='10Gbit', strategy='allreduce')\n"
            "assert r['schema'] == 'sgdscale.prediction/1'\n"
            "assert [(x['workers'], x['method']) for x in r['results']] == "
            "[(1, 'fine'), (1, 'coarse'), (8, 'fine'), (8, 'coarse'), (64, 'fine'), (64, 'coarse')]\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_api_is_callable_however_the_core_was_imported():
    from sgdscale.predict import predict as core  # the predictor core stays importable by name

    assert callable(core) and callable(sgdscale.predict)
    result = sgdscale.predict("cnn", workers=2, method="coarse")
    assert [r["workers"] for r in result["results"]] == [2]


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(workers=0), "worker counts"),
    (dict(method="exact"), "unknown method"),
    (dict(bandwidth="-1Gbit"), "bandwidth"),
])
def test_api_bad_input_is_a_user_error(kwargs, fragment):
    with pytest.raises(UserError, match=fragment):
        sgdscale.predict("resnet50", **kwargs)


@pytest.mark.parametrize("kwargs", [dict(iterations=0), dict(ps=0), dict(bucket_mb=-1.0), dict(workers="0")])
def test_api_rejects_as_the_cli_does(kwargs, capsys):
    """The same rejection, in the same words, as `sgdscale predict` with the same option."""
    cli = {"iterations": "--iterations", "ps": "--ps", "bucket_mb": "--bucket-mb", "workers": "--workers"}
    (key, value), = kwargs.items()
    assert main(["predict", "resnet50", cli[key], str(value)]) == 2
    message = capsys.readouterr().err.removeprefix("error: ").strip()
    with pytest.raises(UserError) as raised:
        sgdscale.predict("resnet50", **kwargs)
    assert str(raised.value) == message
