"""`sgdscale advise`: answers equal brute force over `predict`, bounds never change them, CLI contract."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sgdscale.advise import Advisor, advise, candidates
from sgdscale.commands.advise import parse_throughput
from sgdscale.cli import main
from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.predict import predict
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy

BANDWIDTH_BPS = 1e9
LATENCY_S = 20e-6
GRID = [1, 2, 4, 8, 16, 32]
KINDS = ("allreduce", "ps-sync")
PS_COUNTS = (1, 2)


@pytest.fixture(scope="module")
def setup():
    profile = load_profile("gpt2")
    cluster = Cluster(1, BANDWIDTH_BPS, LATENCY_S, framing="none")  # the rate is payload, as from_link takes it
    comm = CommModel.from_link(BANDWIDTH_BPS, LATENCY_S)
    configs = candidates(profile, 1, kinds=KINDS, ps_counts=PS_COUNTS)
    base = predict(profile, cluster, Strategy(), comm, [1], ["coarse"]).results[0].throughput
    # Brute force: every config at every count 1..32 through predict itself.
    brute = {}
    for config in configs:
        prediction = predict(profile, dataclasses.replace(cluster, ps_count=config.ps_count), config.strategy("ring"),
                             comm, list(range(1, 33)), ["coarse"])
        brute[config] = {r.workers: r.throughput for r in prediction.results}
    return profile, cluster, comm, configs, base, brute


def test_max_workers_equals_brute_force(setup):
    profile, cluster, comm, configs, base, brute = setup
    target = 0.8
    advice = advise(profile, cluster, comm, GRID, target_efficiency=target, kinds=KINDS, ps_counts=PS_COUNTS)
    expected = max((n for c in configs for n, t in brute[c].items() if t / (n * base) >= target), default=None)
    answer = advice.answers["max_workers"]
    assert answer["max_workers"] == expected
    assert answer["best"]["efficiency"] >= target
    for row in answer["per_config"]:  # every configuration's own answer, too
        config = next(c for c in configs if c.label() == row["label"])
        own = max((n for n, t in brute[config].items() if t / (n * base) >= target), default=None)
        assert row["max_workers"] == own, row["label"]
    assert "efficient to" in answer["why"] and "%" in answer["why"]


def test_cheapest_equals_brute_force(setup):
    profile, cluster, comm, configs, base, brute = setup
    target = 0.6 * max(t for c in configs for t in brute[c].values())
    advice = advise(profile, cluster, comm, GRID, target_throughput=target, price_per_node_hour=3.2, kinds=KINDS,
                    ps_counts=PS_COUNTS)
    cheapest_nodes = min(c.nodes(n, 1) for c in configs for n, t in brute[c].items() if t >= target)
    best = advice.answers["cheapest"]["best"]
    assert best["nodes"] == cheapest_nodes
    assert best["throughput"] >= target
    assert best["cost_per_hour"] == pytest.approx(cheapest_nodes * 3.2)
    assert "$" in advice.answers["cheapest"]["why"]


def test_bandwidth_answer_is_the_least_within_precision(setup):
    profile, cluster, comm, configs, base, brute = setup
    target = 0.9 * max(brute[c][16] for c in configs)
    advice = advise(profile, cluster, comm, [16], target_throughput=target, kinds=KINDS, ps_counts=PS_COUNTS)
    answer = advice.answers["bandwidth"]["least_bandwidth"]
    bps = answer["bandwidth_bps"]
    assert answer["point"]["throughput"] >= target
    below = bps / 1.03
    for config in configs:  # nothing reaches the target 3% below the answer
        c = dataclasses.replace(cluster, bandwidth_bps=below, ps_count=config.ps_count)
        result = predict(profile, c, config.strategy("ring"), CommModel.from_link(below, LATENCY_S), [16],
                         ["coarse"]).results[0]
        assert result.throughput < target, config.label()


def test_bounds_never_change_the_ranking_and_hold(setup):
    profile, cluster, comm, configs, base, brute = setup
    advisor = Advisor(profile, cluster, comm)
    for n in GRID:
        pruned = advisor.rank(configs, n, 3)
        full = sorted(brute_points := [advisor.point(c, n) for c in configs], key=lambda p: (-p.throughput, p.nodes))
        assert [p.config for p in pruned] == [p.config for p in full[:3]]
        for p in brute_points:
            assert p.throughput <= advisor.upper_bound(p.config, n)
            assert p.throughput == pytest.approx(brute[p.config][n], rel=1e-12)


def test_async_and_colocated_bounds_hold():
    profile = load_profile("resnet18")
    advisor = Advisor(profile, Cluster(1, 1e9, 20e-6), CommModel.from_link(1e9, 20e-6))
    for config in candidates(profile, 1, kinds=("ps-async", "ps-sync"), ps_counts=(1, 4)):
        for n in (1, 3, 8, 32):
            assert advisor.point(config, n).throughput <= advisor.upper_bound(config, n), (config, n)


def test_shards_are_also_tried_with_tensors_balanced_by_size():
    """Round-robin over three shards puts 102.0 of resnet50's 102.2 MB on one shard (a convolution and its
    BatchNorm pair come in threes): advise also tries tensors balanced by size there, which predicts
    faster, and not with two shards, where round-robin already balances them (51.7 and 50.5 MB)."""
    profile = load_profile("resnet50")
    configs = candidates(profile, 1, kinds=("ps-sync",), ps_counts=(2, 3), groupings=("per-tensor",))
    assert [(c.ps_count, c.placement) for c in configs if c.ps_placement == "dedicated"] == [
        (2, "round-robin"), (3, "round-robin"), (3, "size")]
    advice = advise(profile, Cluster(1, 1e9, 20e-6), CommModel.from_link(1e9, 20e-6), [8], kinds=("ps-sync",),
                    ps_counts=(3,), groupings=("per-tensor",))
    ranked = advice.answers["ranking"][0]["ranked"]  # three candidates: both placements, colocated servers
    shards = {p["config"]["placement"]: p for p in ranked if p["config"]["ps_placement"] == "dedicated"}
    assert "3 dedicated shards (tensors balanced by size)" in shards["size"]["label"]
    assert shards["size"]["throughput"] > 1.5 * shards["round-robin"]["throughput"]


def test_best_bucket_and_multi_gpu_schemes():
    profile = load_profile("resnet50")
    cluster = Cluster(1, 25e9, 20e-6, gpus_per_node=8, intra_bandwidth_bps=2.4e12)
    advice = advise(profile, cluster, CommModel.from_link(25e9, 20e-6), [8, 64], best_bucket=True,
                    bucket_sizes_mib=[1, 25, 100], kinds=("allreduce",))
    rows = advice.answers["bucket"]
    assert [r["workers"] for r in rows] == [8, 64]
    for row in rows:
        assert row["bucket_mib"] in (1, 25, 100)
        assert row["best"]["throughput"] == max(s["throughput"] for s in row["sizes"])
    labels = {p["label"] for r in advice.answers["ranking"] for p in r["ranked"]}
    assert any(scheme in label for label in labels for scheme in ("hierarchical", "tree", "auto", "flat"))


def run(capsys, *args):
    code = main(["advise", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_answers_with_numbers_and_json(tmp_path, capsys):
    path = tmp_path / "advice.json"
    code, out, err = run(capsys, "gpt2", "--workers", "1-64:x4", "--bandwidth", "1Gbit", "--target-efficiency", "0.8",
                         "--target-throughput", "200/s", "--price-per-node-hour", "3.2", "--confirm", "fine",
                         "--confirm-top", "2", "--iterations", "20", "--json", str(path))
    assert code == 0, err
    assert "Best configurations per worker count" in out and "faster than" in out
    assert "Most workers at >= 80% efficiency" in out and "Cheapest for 200 samples/s" in out
    assert "Gbit/s" in out or "Mbit/s" in out
    assert "search:" in out and " s" in out
    data = json.loads(path.read_text())
    assert data["schema"] == "sgdscale.advice/1"
    assert any(p["method"] == "fine" for r in data["answers"]["ranking"] for p in r["ranked"])
    best = data["answers"]["max_workers"]["best"]
    assert best["fine"]["throughput"] > 0 and "fine method:" in out
    assert data["search"]["predictions"] > 0


@pytest.mark.parametrize("args, words", [
    (["--target-efficiency", "1.5"], "--target-efficiency"),
    (["--target-throughput", "fast"], "--target-throughput"),
    (["--strategies", "allreduce,gossip"], "gossip"),
    (["--price-per-node-hour", "-1"], "--price-per-node-hour"),
    (["--confirm", "coarse"], "--confirm"),
    (["--workers", "0"], "at least 1"),
    (["--bucket-sizes", "0"], "--bucket-sizes"),
])
def test_cli_bad_input_is_one_line_exit_2_and_no_file(tmp_path, capsys, args, words):
    path = tmp_path / "advice.json"
    code, out, err = run(capsys, "gpt2", *args, "--json", str(path))
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1
    assert not path.exists()


def test_parse_throughput():
    assert parse_throughput("2000/s") == 2000
    assert parse_throughput("2k/s") == 2000
    assert parse_throughput("1500 samples/s") == 1500


def test_cli_states_ranges_where_held_out_runs_cover_the_point(tmp_path, capsys):
    """A winner inside the held-out envelope gets the 80% range `predict` states for it; one outside
    gets none, and the reason is printed once."""
    from sgdscale.heldout_ranges import shipped

    path = tmp_path / "advice.json"
    code, out, err = run(capsys, "resnet18", "--workers", "4,64", "--bandwidth", "1Gbit", "--strategies", "allreduce",
                         "--groupings", "buckets", "--bucket-sizes", "25", "--json", str(path))
    assert code == 0, err
    ranking = {row["workers"]: row["ranked"][0] for row in json.loads(path.read_text())["answers"]["ranking"]}
    entry = shipped().bin("allreduce", "coarse", "nominal")
    four = ranking[4]
    assert four["likely_range"]["low"] == pytest.approx(four["throughput"] * entry["low"])
    assert four["likely_range"]["high"] == pytest.approx(four["throughput"] * entry["high"])
    assert "64 workers" in ranking[64]["likely_range"]["reason"]
    assert "80% range" in out and "no 80% range for 64 workers" in out
    assert f"{four['likely_range']['low']:,.1f}-{four['likely_range']['high']:,.1f}" in out


def test_a_cpu_profile_on_a_gpu_preset_says_so(capsys):
    code, out, err = run(capsys, "gpt2", "--cluster", "dgx-a100", "--nodes", "1,2", "--iterations", "10")
    assert code == 0, err
    assert ("note: the cluster dgx-a100 has A100 devices, but the profile was measured on cpu: Intel(R) Xeon(R) "
            "Processor, 1 thread: its compute times are used as measured; to search at A100 speed") in " ".join(out.split())


def test_cli_says_why_a_parameter_server_passes_full_efficiency(capsys):
    """One worker with a parameter server skips the optimizer step the one-device baseline includes:
    the printout says so where it shows an efficiency above 100%, and only there."""
    code, out, _ = run(capsys, "resnet18", "--workers", "1", "--bandwidth", "10Gbit", "--strategies", "ps-async")
    assert code == 0
    shown = float(out.split("async PS")[1].split("%")[0].split()[-1])
    assert shown > 100
    assert "efficiency above 100% at 1 worker: parameter-server shards run the optimizer step (23.9 ms of the 238 ms" in out
    code, out, _ = run(capsys, "resnet18", "--workers", "1", "--bandwidth", "10Gbit", "--strategies", "allreduce")
    assert code == 0 and "efficiency above 100%" not in out
