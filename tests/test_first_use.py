"""First-use polish (issue 9): what a new user reads is right, fits the terminal, and names its model."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from sgdscale.cli import main
from sgdscale.cluster import Cluster
from sgdscale.comm import CommModel
from sgdscale.models import BUILTIN_MODELS, describe_model
from sgdscale.predict import predict
from sgdscale.profile import builtin_profile_names, load_profile
from sgdscale.report.progress import DelayedProgress
from sgdscale.strategy import Strategy


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_parameter_server_header_names_no_all_reduce(capsys):
    code, out, err = run(capsys, "predict", "gpt2", "--strategy", "ps-sync", "--workers", "1,2", "--iterations", "5")
    assert code == 0, err
    header = out.splitlines()[0]
    assert "ps-sync with 1 server" in header and "all-reduce" not in header
    code, out, err = run(capsys, "predict", "gpt2", "--workers", "1,2", "--iterations", "5")
    assert code == 0, err
    assert "ring all-reduce" in out.splitlines()[0]


def test_methods_that_disagree_get_a_remark(tmp_path, capsys):
    path = tmp_path / "p.json"
    code, out, err = run(capsys, "predict", "bert", "--strategy", "ps-async", "--workers", "1,16",
                         "--bandwidth", "1Gbit", "--iterations", "20", "--json", str(path))
    assert code == 0, err
    data = json.loads(path.read_text())
    (gap,) = data["disagreements"]
    pair = {r["method"]: r["throughput"] for r in data["results"] if r["workers"] == 16}
    assert gap["workers"] == 16 and gap["fine"] == pair["fine"] and gap["coarse"] == pair["coarse"]
    assert gap["difference"] == pytest.approx(max(pair.values()) / min(pair.values()) - 1) and gap["difference"] > 0.10
    assert f"remark: at 16 workers fine and coarse differ by {gap['difference']:.0%}" in out
    assert "read the two as a range" in out
    # where they agree within 10%, nothing is said
    code, out, err = run(capsys, "predict", "resnet50", "--workers", "1,8", "--iterations", "20", "--json", str(path))
    assert code == 0, err
    data = json.loads(path.read_text())
    for workers in (1, 8):
        pair = [r["throughput"] for r in data["results"] if r["workers"] == workers]
        assert max(pair) / min(pair) - 1 <= 0.10
    assert data["disagreements"] == [] and "remark:" not in out


def test_table_fits_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run(capsys, "predict", "resnet50", "--strategy", "ps-sync", "--workers", "1,16,1024",
                         "--method", "coarse", "--iterations", "5")
    assert code == 0, err
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Predicted data-parallel"))
    end = next(i for i, line in enumerate(lines) if line.startswith(("80% range:", "What limits it")))
    table = lines[start:end]
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    assert not any("…" in line or "..." in line for line in table), "\n".join(table)
    text = "\n".join(table)
    for header in ("workers", "method", "samples/s", "80% range", "speedup", "effic.", "wait", "limited"):
        assert header in text
    assert "server NIC" in text  # "limited by" values are whole too


def test_a_narrow_terminal_gets_one_line_per_result(capsys, monkeypatch):
    """Under 80 columns a table would cut every cell to a character or two: each result is a line
    that wraps instead, with every number the table holds."""
    monkeypatch.setenv("COLUMNS", "50")
    code, out, err = run(capsys, "predict", "resnet50", "--strategy", "ps-sync", "--workers", "1,16",
                         "--method", "coarse", "--iterations", "5")
    assert code == 0, err
    text = " ".join(out.split())  # the lines wrap at 50 columns
    assert "…" not in out and "──" not in out  # no cut cells, no table rule
    for workers in (1, 16):
        assert f"{workers} workers, coarse: " in text
    assert "samples/s" in text and "speedup" in text and "efficiency" in text and "limited by server NIC" in text
    assert "What limits it:" in out


def test_progress_shows_after_the_delay_and_not_before():
    profile, cluster = load_profile("resnet50"), Cluster(1, 1e9)
    comm = CommModel.from_link(1e9, 20e-6, "ring")
    slow = io.StringIO()
    progress = DelayedProgress(Console(file=slow, force_terminal=True, width=100), delay_s=0.2)
    with progress as report:
        predict(profile, cluster, Strategy("ps-async"), comm, [16], ["fine"], iterations=50, progress=report)
    assert progress.shown and "predicting:" in slow.getvalue()
    quick = io.StringIO()
    progress = DelayedProgress(Console(file=quick, force_terminal=True, width=100))  # the CLI's 2 s
    with progress as report:
        predict(profile, cluster, Strategy("allreduce"), comm, [8], ["coarse"], progress=report)
    assert not progress.shown and quick.getvalue() == ""


def test_plot_help_names_the_panels_it_draws(capsys):
    code, out, _ = run(capsys, "predict", "--help")
    assert code == 0
    help_text = " ".join(out.split())
    assert "throughput vs workers" in help_text and "per-step breakdown" in help_text
    assert "speedup vs workers" not in help_text


def test_trace_says_which_workers_it_holds(tmp_path, capsys):
    trace = tmp_path / "t.json"
    code, out, err = run(capsys, "predict", "gpt2", "--strategy", "ps-sync", "--workers", "16", "--method", "fine",
                         "--iterations", "10", "--trace", str(trace))
    assert code == 0, err
    data = json.loads(trace.read_text())
    names = {e["args"]["name"] for e in data["traceEvents"] if e.get("name") == "process_name"}
    drawn = sorted((n for n in names if n.startswith("worker ")), key=lambda n: int(n.split()[1]))
    assert 0 < len(drawn) < 16 and data["otherData"]["workers_drawn"] == drawn
    message = " ".join(out.split())
    assert f"it draws {len(drawn)} of the 16 workers ({', '.join(drawn)})" in message
    assert "timeline of 16 workers" not in message


def test_show_never_cuts_layer_names(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    for model in ("resnet50", "densenet121"):
        code, out, err = run(capsys, "show", model)
        assert code == 0, err
        lines = out.splitlines()
        footer = next(i for i, line in enumerate(lines) if line.startswith("├"))  # then the totals row
        names, rows = [], [line for line in lines[:footer] if line.startswith("│")]
        assert rows and all(len(line) <= 80 for line in rows)
        for line in rows:
            cells = [c.strip() for c in line.split("│")[1:-1]]
            if cells[0] == "":  # a continuation line of the row above: the folded rest of the name
                names[-1] += cells[1]
            else:
                names.append(cells[1])
        assert names == [layer.name for layer in load_profile(model).layers]


def test_each_builtin_name_is_the_model_its_shipped_profile_measured():
    assert set(BUILTIN_MODELS) == set(builtin_profile_names())
    for name, spec in BUILTIN_MODELS.items():
        profile = load_profile(name)
        assert profile.batch_size == spec.batch_size, name
        for key, value in spec.options.items():
            assert profile.input[key] == value, (name, key)
        assert describe_model(name, profile.input, profile.batch_size).endswith(f"the model of the built-in profile '{name}'")


def test_zoo_train_and_profile_build_the_builtin_model(tmp_path, capsys):
    pytest.importorskip("torch")
    from sgdscale.profiling.zoo import build_workload

    for name in ("mlp", "cnn", "gpt2", "bert", "alexnet"):  # alexnet: the one image model not at 64 px
        desc = build_workload(name).input_desc
        assert {k: desc[k] for k in BUILTIN_MODELS[name].options} == BUILTIN_MODELS[name].options, name
    config = tmp_path / "run.json"
    code, _, err = run(capsys, "train", "mlp", "--write-config", str(config))
    assert code == 0, err
    assert json.loads(config.read_text())["batch_size"] == BUILTIN_MODELS["mlp"].batch_size
    code, out, err = run(capsys, "profile", "mlp", "--json", "--iterations", "1", "--warmup", "0")
    assert code == 0, err
    measured = json.loads(out[out.index("{"):])
    assert measured["batch_size"] == 64 and measured["input"]["width"] == 2048


def test_train_takes_predicts_placement_option(tmp_path, capsys):
    """`train --placement size` puts tensors on shards as `predict --placement size` does; `--ps-placement`,
    its old name on `train`, still works (on `predict` that name is dedicated or colocated servers)."""
    pytest.importorskip("torch")
    for flag in ("--placement", "--ps-placement"):
        config = tmp_path / f"run{flag}.json"
        code, _, err = run(capsys, "train", "mlp", "--strategy", "ps-sync", "--ps", "3", flag, "size",
                           "--write-config", str(config))
        assert code == 0, err
        assert json.loads(config.read_text())["ps_placement"] == "size"


def test_outputs_say_which_model():
    from sgdscale.commands.runtime import ran_line
    from sgdscale.runtime.train import TrainConfig

    assert "the model of the built-in profile 'mlp'" in ran_line(TrainConfig(model="mlp", batch_size=64))
    other = ran_line(TrainConfig(model="mlp", batch_size=32, model_options={"width": 1024}))
    assert "not the built-in profile 'mlp' (width 1024 vs 2048" in other and "batch 32 vs 64" in other
    from sgdscale.runtime.train import replay_config

    replay = ran_line(replay_config("cnn", "spin", workers=3, strategy="ps-async", ps_count=1))
    assert replay == "a replay of the profile cnn (spin compute), batch 32 per worker; 3 workers, ps-async with 1 server shard"
    prediction = predict(load_profile("mlp"), Cluster(1), Strategy("allreduce"), CommModel.from_link(1e10, 2e-5, "ring"),
                         [2], ["coarse"])
    from sgdscale.report.table import header_line

    assert header_line(prediction).startswith("mlp (input_dim 2048, width 2048, depth 4, num_classes 10), batch 64 "
                                              "per worker; the model of the built-in profile 'mlp'")


def test_async_ps_limited_by_a_server_nic_states_the_most_to_expect(tmp_path, capsys):
    """Fine keeps a limiting server link ~80% busy where real async runs reached 96%: the prediction
    says what the cluster would do at that fill, and leaves its own number alone."""
    from sgdscale.result import SERVER_LINK_CEILING_FILL

    path = tmp_path / "p.json"
    code, out, err = run(capsys, "predict", "gpt2", "--strategy", "ps-async", "--workers", "1,6", "--bandwidth",
                         "300Mbit", "--iterations", "20", "--json", str(path))
    assert code == 0, err
    data = json.loads(path.read_text())
    (ceiling,) = data["server_link_ceilings"]
    fine = next(r for r in data["results"] if r["workers"] == 6 and r["method"] == "fine")
    busy = max(v for k, v in fine["utilization"].items() if k.startswith("server ") and " NIC " in k)
    assert fine["limited_by"] == "server NIC" and ceiling["workers"] == 6 and ceiling["method"] == "fine"
    assert ceiling["server_nic_busy"] == pytest.approx(busy) and busy < SERVER_LINK_CEILING_FILL
    assert ceiling["throughput"] == pytest.approx(fine["throughput"] * SERVER_LINK_CEILING_FILL / busy)
    assert ceiling["throughput"] > fine["throughput"]
    assert f"would train {ceiling['throughput']:,.1f} samples/s" in out
    # sync PS, which fine predicts within a few per cent where a server's link limits: nothing said
    code, out, err = run(capsys, "predict", "gpt2", "--strategy", "ps-sync", "--workers", "1,6", "--bandwidth",
                         "300Mbit", "--iterations", "20", "--json", str(path))
    assert code == 0, err
    assert json.loads(path.read_text())["server_link_ceilings"] == [] and "would train" not in out
