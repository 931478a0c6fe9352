"""Every bad input of issue 9 ends in one line naming the field, the value, the allowed range and
a fix, exit status 2, no traceback; outputs are checked before the work and written all-or-nothing.

The CLI runs in-process (sgdscale.cli.main), as a user's shell would run it.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from sgdscale.cli import main
from sgdscale.errors import UserError
from sgdscale.jsonio import all_or_nothing, atomic_output, write_json_atomic
from sgdscale.profile import load_profile

QUICK = ["--iterations", "4", "--warmup", "1"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def clean_error(capsys, *argv: str) -> str:
    """Run; assert exit 2 and exactly one line starting 'error: '; return that line."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def cnn() -> dict:
    return load_profile("cnn").to_json()


def write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))  # Python writes NaN/Infinity as JSON's missing constants
    return path


def mutated(cnn: dict, tmp_path: Path, edit) -> Path:
    data = copy.deepcopy(cnn)
    edit(data)
    return write(tmp_path / "profile.json", data)


def first_with_params(data: dict) -> dict:
    return next(layer for layer in data["layers"] if layer["params"])


NETWORK = {"schema": "sgdscale.network/1", "p2p": {"alpha_s": 2e-5, "beta_s_per_byte": 8e-10}}


# ---------------------------------------------------------------- profile files


@pytest.mark.parametrize("value, problem", [(math.nan, "not a finite number"), (math.inf, "not a finite number"),
                                            (1e30, "too large")])
def test_non_finite_and_absurd_samples_are_named(cnn, tmp_path, capsys, value, problem):
    def edit(data):
        data["layers"][0]["forward_samples_s"][3] = value
    line = clean_error(capsys, "predict", str(mutated(cnn, tmp_path, edit)), "--workers", "2", *QUICK)
    assert "layers.0.forward_samples_s.3" in line and problem in line
    assert "allowed: 0 to 86400 s" in line and "re-profile" in line


def test_nan_is_not_reported_as_negative(cnn, tmp_path, capsys):
    def edit(data):
        data["layers"][1]["backward_s"] = math.nan
    line = clean_error(capsys, "predict", str(mutated(cnn, tmp_path, edit)), "--workers", "2", *QUICK)
    assert "layers.1.backward_s = nan: not a finite number" in line and ">= 0" not in line


def test_absurd_gradient_bytes(cnn, tmp_path, capsys):
    def edit(data):
        first_with_params(data)["params"][0]["bytes"] = 10**30
    line = clean_error(capsys, "predict", str(mutated(cnn, tmp_path, edit)), "--workers", "2", *QUICK)
    assert ".params.0.bytes = 1000000000000000000000000000000: too large" in line and "1e+13 bytes" in line


def test_all_zero_times_are_an_error_not_a_division_by_zero(cnn, tmp_path, capsys):
    def edit(data):
        data["step"] = {"data_s": 0.0, "h2d_s": 0.0, "optimizer_s": 0.0}
        data.pop("iteration_s", None)
        for layer in data["layers"]:
            layer.update(forward_s=0.0, backward_s=0.0)
            layer.pop("forward_samples_s", None)
            layer.pop("backward_samples_s", None)
    line = clean_error(capsys, "predict", str(mutated(cnn, tmp_path, edit)), "--workers", "2", *QUICK)
    assert "every time in the profile is 0" in line


@pytest.mark.parametrize("command", ["predict", "show"])
def test_non_utf8_profile(tmp_path, capsys, command):
    path = tmp_path / "p.json"
    path.write_bytes(b'{"schema": "\xff\xfe"}')
    assert "not UTF-8 text (byte 0xff at offset 12)" in clean_error(capsys, command, str(path))


@pytest.mark.parametrize("command", ["predict", "show"])
def test_deeply_nested_profile(tmp_path, capsys, command):
    path = tmp_path / "p.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested more than 64 levels deep" in clean_error(capsys, command, str(path))


def test_profile_directory_is_not_reported_missing(tmp_path, capsys):
    folder = tmp_path / "r50.json"
    folder.mkdir()
    line = clean_error(capsys, "predict", str(folder))
    assert "is a directory, not a profile file" in line and "does not exist" not in line


def test_malformed_profile_is_one_line_with_field_and_fix(cnn, tmp_path, capsys):
    def edit(data):
        data["layers"][0]["forward_s"] = "abc"
        data["batch_size"] = -1
    line = clean_error(capsys, "show", str(mutated(cnn, tmp_path, edit)))
    assert "batch_size = -1: too small (allowed: 1 to 1,000,000,000)" in line
    assert "(and 1 more problem)" in line and "re-profile with `sgdscale profile" in line


def test_json_never_holds_nan(cnn, tmp_path, capsys):
    """A prediction's JSON is standard JSON (no NaN/Infinity), and a writer refuses to write one."""
    out = tmp_path / "p.json"
    code, _, err = run(capsys, "predict", "cnn", "--workers", "1,2", *QUICK, "--json", str(out))
    assert code == 0, err
    json.loads(out.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in --json"))
    with pytest.raises(UserError, match="non-finite"):
        write_json_atomic(tmp_path / "bad.json", {"x": math.nan})
    assert not (tmp_path / "bad.json").exists()


# ---------------------------------------------------------------- options


@pytest.mark.parametrize("argv, fragments", [
    (["--latency", "1e400s"], ["--latency 1e400s: not a finite number", "0 to 10 s"]),
    (["--workers", "2", "--compute-scale", "1,inf"], ["--compute-scale factor inf: not a finite number"]),
    (["--bandwidth", "1e-300bit"], ["--bandwidth 1e-300bit: too small", "1 kbit/s to 10 Pbit/s"]),
    (["--bandwidth", "1e400Gbit"], ["--bandwidth 1e400Gbit: not a finite number"]),
    (["--bandwidth", "10"], ["--bandwidth '10' has no unit", "10Gbit"]),
    (["--iterations", "1000000000"], ["--iterations 1000000000: too large", "1 to 1,000,000 steps"]),
    (["--seed", "-1"], ["--seed -1: too small", "non-negative"]),
    (["--workers", ""], ["no worker counts given"]),
    (["--ps", "4"], ["--ps 4 sets parameter-server shards", "ps-sync"]),
    (["--cpu-per-node", "0.0001"], ["--cpu-per-node 0.0001: too small", "0.001 to 10000 cores"]),
    (["--bucket-mb", "nan"], ["--bucket-mb nan: not a finite number"]),
    (["--iterations", "abc"], ["'abc' is not a valid integer", "sgdscale predict --help"]),
    (["--workers", "1-100000"], ["holds 100,000 counts"]),
])
def test_bad_options(capsys, argv, fragments):
    line = clean_error(capsys, "predict", "cnn", *argv)
    for fragment in fragments:
        assert fragment in line


def test_huge_worker_count_is_refused_at_once_without_memory(capsys):
    tracemalloc.start()
    began = time.perf_counter()
    line = clean_error(capsys, "predict", "cnn", "--workers", "1" + "0" * 30)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert "too large (allowed: 1 to 1,000,000 workers)" in line
    assert time.perf_counter() - began < 5 and peak < 50e6


def test_fine_work_bound_is_checked_before_any_work(capsys, monkeypatch):
    import sgdscale.predict

    monkeypatch.setattr(sgdscale.predict, "run_method", lambda *a, **k: pytest.fail("work started"))
    line = clean_error(capsys, "predict", "resnet50", "--strategy", "ps-sync", "--workers", "1000000")
    assert "over the limit of 1e+07" in line and "about a minute" in line and "--method coarse" in line


def test_advise_and_sweep_bound_their_options(tmp_path, capsys):
    assert "--target-throughput 1e400/s: not a finite number" in clean_error(
        capsys, "advise", "cnn", "--target-throughput", "1e400/s")
    assert "--seed -1: too small" in clean_error(capsys, "advise", "cnn", "--seed", "-1")
    assert "over the limit of 1e+07" in clean_error(capsys, "advise", "cnn", "--method", "fine",
                                                   "--workers", "1-1000000:x2")
    assert "--seed -1: too small" in clean_error(capsys, "sweep", "cnn", "--seed", "-1", "-o", str(tmp_path / "s.csv"))
    assert not (tmp_path / "s.csv").exists()


# ---------------------------------------------------------------- network and cluster files


def test_network_allreduce_key_not_a_number(tmp_path, capsys):
    path = write(tmp_path / "n.json", {**NETWORK, "allreduce": {"abc": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9}}})
    line = clean_error(capsys, "predict", "cnn", "--network", str(path), *QUICK)
    assert "allreduce: key 'abc' is not a worker count" in line and "sgdscale netbench" in line


def test_network_path_is_a_directory(tmp_path, capsys):
    assert "is a directory, not a network file" in clean_error(capsys, "predict", "cnn", "--network", str(tmp_path))


def test_infinite_beta_is_blamed_on_the_file_not_on_bandwidth(tmp_path, capsys):
    path = write(tmp_path / "n.json", {**NETWORK, "p2p": {"alpha_s": 2e-5, "beta_s_per_byte": math.inf}})
    line = clean_error(capsys, "predict", "cnn", "--network", str(path), *QUICK)
    assert "p2p.beta_s_per_byte = inf: not a finite number" in line and "--bandwidth" not in line


def test_network_nominal_rate_is_checked(tmp_path, capsys):
    path = write(tmp_path / "n.json", {**NETWORK, "environment": {"bandwidth_bps": "fast"}})
    assert "bandwidth_bps = 'fast': not a number" in clean_error(capsys, "predict", "cnn", "--network", str(path))


def test_bandwidth_with_network_is_rejected_unless_used(tmp_path, capsys):
    path = write(tmp_path / "n.json", NETWORK)
    line = clean_error(capsys, "predict", "cnn", "--network", str(path), "--bandwidth", "1Gbit", *QUICK)
    assert "--bandwidth is not used with --network" in line
    code, _, err = run(capsys, "predict", "cnn", "--network", str(path), "--bandwidth", "1Gbit", "--workers", "2",
                       "--slow-link", "1:500Mbit", *QUICK)
    assert code == 0, err  # with a slow link, --bandwidth is the nominal rate it is relative to


@pytest.mark.parametrize("edit, fragment", [
    ({"slow_nodes": [{"node": 0, "compute_scale": math.nan}]}, "slow_nodes.0.compute_scale = nan: not a finite"),
    ({"nic": {"bandwidth": "10"}}, "nic.bandwidth = 10: bandwidth '10' has no unit"),
    ({"nic": {"bandwidth": math.inf}}, "nic.bandwidth = inf: bandwidth inf: not a finite number"),
    ({"nic": {"bandwidth": "1Gbit", "latency": "1e400s"}}, "nic.latency = 1e400s: latency 1e400s: not a finite"),
    ({"gpus_per_node": 10**6}, "gpus_per_node = 1000000: too large (allowed: 1 to 1,024 devices)"),
])
def test_bad_cluster_values(tmp_path, capsys, edit, fragment):
    path = write(tmp_path / "c.json", {"schema": "sgdscale.cluster/1", "nodes": 2, **edit})
    line = clean_error(capsys, "predict", "cnn", "--cluster", str(path), *QUICK)
    assert fragment in line and "docs/clusters.md" in line


# ---------------------------------------------------------------- outputs


@pytest.mark.parametrize("option", ["--json", "--plot", "--trace"])
def test_output_to_a_directory_or_under_a_file_fails_before_the_work(tmp_path, capsys, monkeypatch, option):
    import sgdscale.predict

    monkeypatch.setattr(sgdscale.predict, "run_method", lambda *a, **k: pytest.fail("work started"))
    (tmp_path / "afile").write_text("x")
    assert "is a directory" in clean_error(capsys, "predict", "cnn", option, str(tmp_path))
    line = clean_error(capsys, "predict", "cnn", option, str(tmp_path / "afile" / "out.json"))
    assert "is a file, not a directory" in line


def test_other_commands_check_outputs_first(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert "is a directory" in clean_error(capsys, "advise", "cnn", "--json", str(tmp_path))
    assert "is a directory" in clean_error(capsys, "sweep", "cnn", "-o", str(tmp_path))
    assert "is a file, not a directory" in clean_error(capsys, "show", "cnn", "-o", str(tmp_path / "afile" / "x"))


def test_outputs_are_all_or_nothing(tmp_path):
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    with pytest.raises(RuntimeError), all_or_nothing():
        write_json_atomic(first, {"a": 1})
        with atomic_output(second) as tmp:
            tmp.write_text("half")
            raise RuntimeError("the second output failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither file, no temporary left behind
    with all_or_nothing():
        write_json_atomic(first, {"a": 1})
        assert not first.exists()  # moved into place only when the whole run succeeded
    assert json.loads(first.read_text()) == {"a": 1}


def test_a_late_failure_leaves_no_json(tmp_path, capsys, monkeypatch):
    """The plot fails after the prediction's JSON was written: neither appears."""
    import sgdscale.report.plot

    def failing_plot(prediction, path):
        raise UserError("plot failed (injected)")

    monkeypatch.setattr(sgdscale.report.plot, "plot_prediction", failing_plot)
    out = tmp_path / "p.json"
    line = clean_error(capsys, "predict", "cnn", "--workers", "2", *QUICK, "--json", str(out),
                       "--plot", str(tmp_path / "p.png"))
    assert "injected" in line
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- the other readers


def test_import_readers_share_the_json_checks(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 5000 + "]" * 5000)
    line = clean_error(capsys, "import", "kineto", str(deep), "--model-info", str(deep), "--batch-size", "8",
                       "-o", str(tmp_path / "p.json"))
    assert "nested more than 64 levels deep" in line
    info = tmp_path / "info.json"
    info.write_bytes(b"\xff")
    assert "not UTF-8 text" in clean_error(capsys, "import", "kineto", str(deep), "--model-info", str(info),
                                           "--batch-size", "8", "-o", str(tmp_path / "p.json"))


@pytest.mark.parametrize("spec, fragment", [
    ({"profile": [{"a": 1}]}, "grid key 'profile'"),
    ({"profile": "cnn", "iterations": "abc"}, "whole numbers"),
    ({"profile": "cnn", "iterations": math.inf}, "whole numbers"),
    ({"profile": "cnn", "bucket_mb": [math.nan]}, "--bucket-mb nan: not a finite number"),
    ({"profile": "cnn", "bandwidth": [[1, 2]]}, "grid key 'bandwidth'"),
    ({"profile": "cnn", "ps": [10**9]}, "--ps 1000000000: too large"),
])
def test_bad_sweep_specs(tmp_path, capsys, spec, fragment):
    path = write(tmp_path / "spec.json", spec)
    assert fragment in clean_error(capsys, "sweep", "--spec", str(path), "-o", str(tmp_path / "s.csv"), "-j", "1")
    assert not (tmp_path / "s.csv").exists()
    assert "is a directory" in clean_error(capsys, "sweep", "--spec", str(tmp_path), "-o", str(tmp_path / "s.csv"))


def test_a_number_in_a_sweep_spec_is_bit_per_second(tmp_path, capsys):
    path = write(tmp_path / "spec.json", {"profile": "cnn", "workers": "2", "bandwidth": [1e9], "iterations": 4})
    out = tmp_path / "s.csv"
    code, _, err = run(capsys, "sweep", "--spec", str(path), "-o", str(out), "-j", "1")
    assert code == 0, err
    assert "1000000000.0" in out.read_text()


def test_validate_refuses_a_negative_min_window(capsys):
    assert "--min-window must be 0 or more seconds" in clean_error(capsys, "validate", "--models", "mlp",
                                                                  "--min-window", "-1")


def test_python_dash_m_sgdscale_exits_as_the_script_does():
    """`python -m sgdscale` (as the benchmarks call it) returns the CLI's status, not 0 after an error."""
    proc = subprocess.run([sys.executable, "-m", "sgdscale", "predict", "vgg16", "--collectives-at-once", "0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: collectives at once must be a whole number >= 1")
    assert "Traceback" not in proc.stderr
