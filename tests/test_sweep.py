"""`sgdscale sweep`: rows equal `predict`, interrupted sweeps resume without recomputing, Dask runs."""

from __future__ import annotations

import json

import pytest

import sgdscale.sweep as sweep
from sgdscale.cli import main
from sgdscale.commands.predict import resolve_cluster
from sgdscale.predict import predict
from sgdscale.profile import load_profile
from sgdscale.strategy import MIB, Strategy

GRID = {"profile": "gpt2", "workers": "1,2,4,8", "bandwidth": ["1Gbit", "10Gbit"], "strategy": ["allreduce", "ps-sync"],
        "grouping": ["buckets", "per-tensor"], "bucket_mb": [5, 25], "ps": [1, 2]}
SAME = [c for c, _ in sweep.COLUMNS if c != "predict_time_s"]


def key_rows(rows):
    return sorted(({k: r[k] for k in SAME} for r in rows), key=lambda r: (r["task"], r["workers"]))


def test_grid_collapses_dimensions_that_do_not_apply():
    tasks = sweep.expand(GRID)
    # all-reduce: 2 bandwidths x (buckets x 2 sizes + per-tensor); PS: 2 x (buckets x 2 + per-tensor) x 2 shards
    assert len(tasks) == 2 * 3 + 2 * 3 * 2
    assert all(t["ps"] is None for t in tasks if t["strategy"] == "allreduce")
    assert all(t["bucket_mb"] is None for t in tasks if t["grouping"] != "buckets")
    nodes = sweep.expand(dict(GRID, workers=None, nodes="1-4:x2", gpus_per_node=[1, 8]))
    assert {t["workers"] for t in nodes} == {"1,2,4", "8,16,32"}


def test_rows_equal_direct_predict(tmp_path):
    grid = dict(GRID, gpus_per_node=[1, 4], allreduce=["flat", "hierarchical"], strategy=["allreduce", "ps-async"])
    tasks = sweep.expand(grid)
    out = tmp_path / "s.csv"
    sweep.run_sweep(tasks, str(out), jobs=1)
    rows = sweep.read_rows(str(out))
    assert len(rows) == 4 * len(tasks)
    profile = load_profile("gpt2")
    for task in tasks[:: max(1, len(tasks) // 8)]:
        counts, cluster, comm, _ = resolve_cluster(workers=task["workers"], nodes=None, gpus_per_node=task["gpus_per_node"],
                                                intra_bandwidth=None, intra_latency=None, cluster_file=None,
                                                bandwidth=task["bandwidth"], latency=task["latency"],
                                                ps_count=task["ps"] or 1, ps_bandwidth=None, algorithm="ring",
                                                network_file=None)
        strategy = Strategy(kind=task["strategy"], grouping=task["grouping"],
                            bucket_bytes=(task["bucket_mb"] or 25) * MIB, allreduce=task["allreduce"],
                            ps_placement=task["ps_placement"] or "dedicated")
        direct = predict(profile, cluster, strategy, comm, counts, ["coarse"])
        mine = sorted((r for r in rows if r["task"] == task["key"]), key=lambda r: r["workers"])
        assert [r["workers"] for r in mine] == [r.workers for r in direct.results]
        for row, result in zip(mine, direct.results):
            assert row["throughput"] == result.throughput
            assert row["efficiency"] == result.efficiency
            assert row["limited_by"] == result.limited_by


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_interrupted_sweep_resumes_without_recomputing(tmp_path, monkeypatch, suffix):
    tasks = sweep.expand(GRID)
    complete = tmp_path / f"complete.{suffix}"
    sweep.run_sweep(tasks, str(complete), jobs=1)

    computed = []
    real = sweep.run_task
    monkeypatch.setattr(sweep, "run_task", lambda task: (computed.append(task["key"]), real(task))[1])
    out = tmp_path / f"resumed.{suffix}"

    def stop_after_five(done, total):
        if done >= 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep.run_sweep(tasks, str(out), jobs=1, progress=stop_after_five)
    first = list(computed)
    assert len(first) == 5 and len(sweep.read_rows(str(out))) == 5 * 4
    if suffix == "csv":  # a torn last line (killed mid-write) is dropped, not misread
        with out.open("a") as handle:
            handle.write("deadbeef,gpt2,coarse,allred")
    stats = sweep.run_sweep(tasks, str(out), jobs=1)
    again = computed[len(first):]
    assert stats.reused == 5 and stats.computed == len(tasks) - 5
    assert not set(first) & set(again)  # nothing recomputed
    assert key_rows(sweep.read_rows(str(out))) == key_rows(sweep.read_rows(str(complete)))
    if suffix == "parquet":
        assert not (tmp_path / "resumed.parquet.parts").exists()


def test_process_pool_and_dask_give_the_same_rows(tmp_path):
    distributed = pytest.importorskip("distributed")
    tasks = sweep.expand(dict(GRID, bandwidth=["1Gbit"]))
    local = tmp_path / "local.parquet"
    sweep.run_sweep(tasks, str(local), jobs=2)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        out = tmp_path / "dask.parquet"
        stats = sweep.run_sweep(tasks, str(out), scheduler=cluster.scheduler_address)
    assert stats.computed == len(tasks)
    assert key_rows(sweep.read_rows(str(out))) == key_rows(sweep.read_rows(str(local)))


def run(capsys, *args):
    code = main(["sweep", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_spec_file_plots_and_resume(tmp_path, capsys):
    spec = tmp_path / "grid.yaml"
    spec.write_text("profile: gpt2\nworkers: 1-16:x2\nbandwidth: [1Gbit, 10Gbit]\nstrategy: [allreduce, ps-async]\n"
                    "grouping: [buckets, per-tensor]\nps: [1, 2]\n")
    out = tmp_path / "grid.csv"
    code, stdout, err = run(capsys, "--spec", str(spec), "-o", str(out), "-j", "1", "--plot", str(tmp_path / "g"))
    assert code == 0, err
    assert "computed" in stdout and (tmp_path / "g-heatmap.png").stat().st_size > 10_000
    assert (tmp_path / "g-curves.png").exists()
    code, stdout, err = run(capsys, "--spec", str(spec), "-o", str(out), "-j", "1")
    assert code == 0 and ", 0 computed" in stdout
    json_spec = tmp_path / "grid.json"
    json_spec.write_text(json.dumps({"profile": "gpt2", "workers": [1, 2], "bandwidth": "1Gbit"}))
    code, stdout, err = run(capsys, "--spec", str(json_spec), "-o", str(tmp_path / "j.parquet"), "-j", "1")
    assert code == 0, err


@pytest.mark.parametrize("args, words", [
    (["gpt2", "--strategy", "allreduce,gossip"], "gossip"),
    (["gpt2", "--bandwidth", "-1Gbit"], "bandwidth"),
    (["gpt2", "--workers", "0"], "at least 1"),
    (["gpt2", "--strategy", "ps-sync", "--ps", "99999"], "--ps"),
    (["nosuchmodel"], "nosuchmodel"),
    (["gpt2", "--grouping", "zip"], "grouping"),
])
def test_cli_bad_input_is_one_line_exit_2_and_no_file(tmp_path, capsys, args, words):
    out = tmp_path / "s.parquet"
    code, stdout, err = run(capsys, *args, "-o", str(out))
    assert code == 2, err
    assert words in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not (tmp_path / "s.parquet.parts").exists()


def test_cli_bad_spec_and_output(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text("profile: gpt2\nbandwith: 1Gbit\n")
    code, _, err = run(capsys, "--spec", str(spec), "-o", str(tmp_path / "x.csv"))
    assert code == 2 and "bandwith" in err and not (tmp_path / "x.csv").exists()
    code, _, err = run(capsys, "gpt2", "-o", str(tmp_path / "x.xlsx"))
    assert code == 2 and ".parquet or .csv" in err


def test_ctrl_c_then_rerun_resumes(tmp_path):
    """A real SIGINT mid-sweep (the CLI in a subprocess): exit 130, finished rows kept, the rerun
    computes only what is missing and ends with the rows of an uninterrupted sweep."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "s.csv"
    # A shell that starts a job in the background (e.g. a CI runner) may hand it SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler; the test is about what a user at a terminal
    # gets, so the child takes Python's default handler back.
    cli = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
           "from sgdscale.cli import main; sys.exit(main(sys.argv[1:]))")
    args = [sys.executable, "-c", cli, "sweep", "resnet50", "--workers", "1-64:x2", "--bandwidth",
            "1Gbit,10Gbit,100Gbit", "--strategy", "allreduce,ps-sync,ps-async", "--grouping", "buckets,per-tensor",
            "--ps", "1,2,4", "-j", "1", "-o", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if out.exists() and out.read_text().count("\n") > 10:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the sweep finished before it could be interrupted"
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "rerun the same command to resume" in err
    kept = len(sweep.read_rows(str(out)))
    assert kept > 0
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tasks = len(sweep.expand({"profile": "resnet50", "workers": "1-64:x2", "bandwidth": ["1Gbit", "10Gbit", "100Gbit"],
                              "strategy": ["allreduce", "ps-sync", "ps-async"], "grouping": ["buckets", "per-tensor"],
                              "ps": [1, 2, 4]}))
    assert f"{kept // 7} already in" in done.stdout and f"{tasks - kept // 7} computed" in done.stdout
    assert len(sweep.read_rows(str(out))) == tasks * 7


def test_rows_carry_predict_ranges_and_framing(tmp_path):
    """Each row states the 80% range `predict` gives a nominal prediction (or why none), and the
    framing its nominal rate was read with: payload framing none moves a link-bound row up by
    exactly the Ethernet share the default framing takes."""
    from sgdscale.comm.framing import payload_fraction
    from sgdscale.heldout_ranges import attach

    grid = {"profile": "resnet18", "workers": "1,4,64", "bandwidth": ["1Gbit"], "strategy": ["allreduce"]}
    rows = {}
    for framing in ("ethernet", "none"):
        out = tmp_path / f"{framing}.csv"
        sweep.run_sweep(sweep.expand(dict(grid, framing=framing)), str(out), jobs=1)
        rows[framing] = {r["workers"]: r for r in sweep.read_rows(str(out))}
    four = rows["ethernet"][4]
    assert four["framing"] == "ethernet" and rows["none"][4]["framing"] == "none"
    counts, cluster, comm, _ = resolve_cluster(workers="1,4,64", nodes=None, gpus_per_node=1, intra_bandwidth=None,
                                               intra_latency=None, cluster_file=None, bandwidth="1Gbit",
                                               latency=None, ps_count=1, ps_bandwidth=None, algorithm="ring",
                                               network_file=None)
    direct = predict(load_profile("resnet18"), cluster, Strategy(), comm, counts, ["coarse"])
    attach(direct, "nominal")
    by_workers = {r.workers: r for r in direct.results}
    assert four["likely_low"] == by_workers[4].likely_range["low"] < four["throughput"]
    assert four["likely_high"] == by_workers[4].likely_range["high"] and four["likely_note"] == ""
    assert rows["ethernet"][64]["likely_low"] is None and "64 workers" in rows["ethernet"][64]["likely_note"]
    assert rows["ethernet"][1]["likely_low"] is None and "1 worker" in rows["ethernet"][1]["likely_note"]
    # 64 workers at 1 Gbit/s: the ring's bytes bound the step, so the payload share moves it
    ratio = rows["none"][64]["throughput"] / rows["ethernet"][64]["throughput"]
    assert 1.0 < ratio <= 1.0 / payload_fraction("ethernet") + 1e-9
    assert rows["none"][1]["throughput"] == rows["ethernet"][1]["throughput"]  # no network at all


def test_cli_framing_and_mtu(tmp_path, capsys):
    out = tmp_path / "f.csv"
    code, stdout, err = run(capsys, "gpt2", "--workers", "2", "--bandwidth", "1Gbit", "--framing", "ethernet",
                            "--mtu", "9000", "-o", str(out), "-j", "1")
    assert code == 0, err
    code, _, err = run(capsys, "gpt2", "--workers", "2", "--mtu", "100", "-o", str(tmp_path / "bad.csv"))
    assert code == 2 and "MTU" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad.csv").exists()


def test_tensor_placement_is_an_axis_with_several_shards(tmp_path):
    """`--placement round-robin,size` doubles the tasks with several shards only; a balanced resnet50 with
    three shards (round-robin puts 102.0 of 102.2 MB on one) predicts as `predict --placement size` does,
    and asking for size too leaves the round-robin tasks' keys as they were (a sweep widened later resumes)."""
    grid = {"profile": "resnet50", "workers": "2,4", "bandwidth": ["1Gbit"], "strategy": ["allreduce", "ps-sync"],
            "ps": [1, 3]}
    before = sweep.expand(grid)
    tasks = sweep.expand(dict(grid, placement=["round-robin", "size"]))
    assert len(before) == 3 and len(tasks) == 4  # all-reduce, one shard, three shards x 2 placements
    assert {t["key"] for t in before} < {t["key"] for t in tasks}
    with pytest.raises(Exception, match="unknown placement 'sized'"):
        sweep.expand(dict(grid, placement=["sized"]))
    out = tmp_path / "s.csv"
    sweep.run_sweep(tasks, str(out), jobs=1)
    rows = sweep.read_rows(str(out))
    three = {r["placement"]: r for r in rows if r["ps_count"] == 3 and r["workers"] == 4}
    counts, cluster, comm, _ = resolve_cluster(workers="2,4", nodes=None, gpus_per_node=1, intra_bandwidth=None,
                                               intra_latency=None, cluster_file=None, bandwidth="1Gbit",
                                               latency="20us", ps_count=3, ps_bandwidth=None, algorithm="ring",
                                               network_file=None)
    direct = predict(load_profile("resnet50"), cluster, Strategy(kind="ps-sync", grouping="per-tensor", placement="size"),
                     comm, counts, ["coarse"])
    assert three["size"]["throughput"] == direct.results[-1].throughput
    assert three["size"]["throughput"] > 1.5 * three["round-robin"]["throughput"]
    assert all(r["placement"] is None for r in rows if r["ps_count"] in (1, None))
