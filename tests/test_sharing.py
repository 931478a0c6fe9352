"""Link sharing: the log-normal weight sigma fitted to how far apart incast senders finish
(sgdscale.comm.network.Sharing), its file round trip, its checks, and what CommModel reads."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from sgdscale.cli import main
from sgdscale.comm import CommModel, load_network
from sgdscale.comm.network import (SHARING_MIN_BYTES, AlphaBeta, BenchPoint, Network, Sharing, fit_share_weight_sigma,
                                   sharing_from_points, startup_s)
from sgdscale.comm.sharing import LATE_JOINER_WEIGHT, NEWCOMER_SHARE_WEIGHT, UNMEASURED_WEIGHT_SIGMA, first_over_last, simulated_weight_sigma
from sgdscale.jsonio import write_json_atomic
from sgdscale.runtime import netbench as nb

REPO = Path(__file__).resolve().parents[1]
OLD_NETWORK = REPO / "benchmarks" / "results" / "accuracy" / "networks" / "200Mbit-q0.2-n8.json"  # before sharing
P2P = AlphaBeta(alpha_s=100e-6, beta_s_per_byte=1e-8)  # 800 Mbit/s; crossover 10 kB


def gps_ratios(sigma: float, senders: int, repeats: int, seed: int) -> list[float]:
    """first/last of `senders` equal flows under GPS with log-normal weights, drawn independently of the fit."""
    phi = np.exp(sigma * np.random.default_rng(seed).standard_normal((repeats, senders)))
    return list(phi.sum(axis=1) / (senders * phi.max(axis=1)))


@pytest.mark.parametrize("sigma", [0.05, 0.15, 0.4])
@pytest.mark.parametrize("senders", [2, 4])
def test_fit_recovers_a_known_sigma(sigma, senders):
    fitted = fit_share_weight_sigma({senders: gps_ratios(sigma, senders, 4000, seed=12345)})
    assert fitted == pytest.approx(sigma, rel=0.03)  # a mean in place of the median misses by 4-15%


def test_fit_combines_sender_counts_weighted_by_repeats():
    both = fit_share_weight_sigma({2: gps_ratios(0.2, 2, 3000, 1), 4: gps_ratios(0.2, 4, 1000, 2)})
    assert both == pytest.approx(0.2, rel=0.03)
    # per-k sigmas 0 (ratios of 1) and ~0.3, weighted 1:3
    mixed = fit_share_weight_sigma({2: [1.0] * 10, 4: [first_over_last(4, 0.3, "median")] * 30})
    assert mixed == pytest.approx(0.75 * 0.3, abs=0.005)


def test_the_brief_numbers_the_fit_is_built_on():
    # median GPS first/last with log-normal weights (docs: weighted sharing in links.py)
    assert first_over_last(2, 0.12, "median") == pytest.approx(0.945, abs=0.002)
    assert first_over_last(4, 0.12, "median") == pytest.approx(0.895, abs=0.002)
    assert first_over_last(4, 0.15, "median") == pytest.approx(0.872, abs=0.002)


def test_equal_finishes_mean_equal_sharing_and_limits():
    assert fit_share_weight_sigma({2: [1.0] * 5, 4: [1.0, 1.0, 1.0]}) == 0.0
    assert fit_share_weight_sigma({4: [0.01] * 3}) == 2.0  # beyond the range: its edge
    assert fit_share_weight_sigma({1: [0.5], 3: [1.0]}) == 0.0  # one sender says nothing
    for bad in ({2: [1.2]}, {2: [0.0]}, {2: [math.nan]}):
        with pytest.raises(ValueError, match=r"\(0, 1\]"):
            fit_share_weight_sigma(bad)
    with pytest.raises(ValueError, match="2 or more senders"):
        fit_share_weight_sigma({1: [0.9]})


def incast_point(nbytes: int, senders: int, ratios: list[float]) -> BenchPoint:
    last = (nbytes * senders) * P2P.beta_s_per_byte
    rows = [[ratio * last] + [last] * (senders - 1) for ratio in ratios]
    return BenchPoint(op="incast", workers=senders + 1, bytes=nbytes, samples_s=[last] * len(rows),
                      median_s=last, senders_s=rows)


def test_sharing_uses_only_bandwidth_bound_messages_and_several_senders():
    points = [incast_point(4_000_000, 4, [0.8, 0.85, 0.9]), incast_point(2_000_000, 2, [0.9, 0.95]),
              incast_point(100_000, 4, [0.1] * 3),  # below SHARING_MIN_BYTES: excluded
              incast_point(8_000_000, 1, [1.0] * 3)]  # one sender: excluded
    sharing = sharing_from_points(points, P2P)
    assert sharing.first_last == {"2": pytest.approx(0.925), "4": pytest.approx(0.85)}
    assert sharing.repeats == {"2": 2, "4": 3} and sharing.bytes == [2_000_000, 4_000_000]
    assert sharing.weight_sigma == pytest.approx(fit_share_weight_sigma({2: [0.9, 0.95], 4: [0.8, 0.85, 0.9]}))
    assert 0 < sharing.sigma_by_senders["2"] and 0 < sharing.sigma_by_senders["4"]
    # each size alone, its sender counts pooled (recorded, not used by the predictors)
    assert sharing.sigma_by_bytes == {"2000000": pytest.approx(fit_share_weight_sigma({2: [0.9, 0.95]})),
                                      "4000000": pytest.approx(fit_share_weight_sigma({4: [0.8, 0.85, 0.9]}))}
    # a slow start (alpha 10 ms: crossover 1 MB) leaves only messages of 20 MB and more
    slow = AlphaBeta(alpha_s=10e-3, beta_s_per_byte=1e-8)
    assert sharing_from_points(points, slow) is None
    assert sharing_from_points([p for p in points if p.bytes < SHARING_MIN_BYTES], P2P) is None


def test_one_slow_small_ping_pong_does_not_hide_link_sharing():
    """The crossover takes the startup as the median over the three smallest ping-pong sizes: set
    18's 1 kB ping-pong took 3.96 ms (3.4 kB and 11 kB: 0.07 and 0.06 ms), its fit's alpha came from
    that one size, and no sharing was fitted (fine's async workers then ran in lock step)."""
    points = [incast_point(4_000_000, 4, [0.8, 0.85, 0.9]), incast_point(2_000_000, 2, [0.9, 0.95])]

    def ping(nbytes, seconds):
        return BenchPoint(op="p2p", workers=2, bytes=nbytes, samples_s=[seconds], median_s=seconds)

    slow_alpha = AlphaBeta(alpha_s=3.96e-3, beta_s_per_byte=P2P.beta_s_per_byte)
    one_slow = [ping(1000, 3.96e-3), ping(3352, 7e-5), ping(11248, 6e-5)]
    assert startup_s(one_slow, slow_alpha) == pytest.approx(7e-5 - 3352 * P2P.beta_s_per_byte)
    assert sharing_from_points(points + one_slow, slow_alpha) == sharing_from_points(points, P2P) is not None
    # slow at every small size: a real startup cost, and the incast sizes are not bandwidth-bound
    all_slow = [ping(1000, 3.96e-3), ping(3352, 3.9e-3), ping(11248, 4e-3)]
    assert sharing_from_points(points + all_slow, slow_alpha) is None


def test_ping_pongs_stalled_by_the_cpu_quota_do_not_hide_link_sharing():
    """A node throttled by its CPU quota stalls a ping-pong for the rest of the CFS period: on set
    23's file most small repeats took 4.5-4.9 ms, the others 0.06-0.1 ms. The crossover uses each
    size's fastest repeat, so the sharing fit stays."""
    points = [incast_point(4_000_000, 4, [0.8, 0.85, 0.9]), incast_point(2_000_000, 2, [0.9, 0.95])]

    def ping(nbytes, samples):
        return BenchPoint(op="p2p", workers=2, bytes=nbytes, samples_s=samples, median_s=statistics.median(samples))

    stalled = [ping(1000, [1.0e-4, 4.53e-3, 1.2e-4, 4.76e-3, 4.82e-3]),
               ping(3352, [4.69e-3, 4.98e-3, 8e-5, 4.72e-3, 4.93e-3]),
               ping(11248, [6e-5, 6e-5, 8e-5, 2.0e-3, 1.1e-4])]
    alpha = AlphaBeta(alpha_s=4.53e-3, beta_s_per_byte=P2P.beta_s_per_byte)
    assert startup_s(stalled, alpha) == pytest.approx(8e-5 - 3352 * P2P.beta_s_per_byte)
    assert sharing_from_points(points + stalled, alpha) == sharing_from_points(points, P2P) is not None


def test_rank_results_carry_each_senders_completion_into_the_fit():
    sizes = ("2000000", "4000000")
    completions = {"2000000": [[0.015, 0.020], [0.020, 0.018]], "4000000": [[0.030, 0.040], [0.036, 0.040]]}
    rank0 = {"rank": 0, "world_size": 3, "incast_senders_s": completions,
             "samples": {"p2p": {s: [int(s) * 1e-8] * 2 for s in sizes}, "incast": {s: [0.041, 0.041] for s in sizes}}}
    others = [{"rank": r, "world_size": 3,
               "samples": {"p2p": {s: [None, None] for s in sizes}, "incast": {s: [None, None] for s in sizes}}}
              for r in (1, 2)]
    points = nb.points_from_results([rank0, *others])
    assert {p.bytes: p.senders_s for p in points if p.op == "incast"} == {int(s): c for s, c in completions.items()}
    network = nb.fit_network(points, "synthetic", {})
    assert network.sharing.first_last == {"2": pytest.approx(statistics.median([0.75, 0.75, 0.9, 0.9]))}
    assert network.sharing.repeats == {"2": 4} and network.sharing.bytes == [2_000_000, 4_000_000]
    # rank results from before per-sender recording: no per-sender data, no sharing fit
    del rank0["incast_senders_s"]
    points = nb.points_from_results([rank0, *others])
    assert all(p.senders_s is None for p in points) and nb.fit_network(points, "synthetic", {}).sharing is None


def test_network_file_round_trip_with_and_without_sharing(tmp_path):
    base = Network(source="x", p2p=P2P, points=[incast_point(4_000_000, 4, [0.8, 0.9])])
    shared = base.model_copy(update={"sharing": sharing_from_points(base.points, P2P)})
    for network in (base, shared):
        path = tmp_path / "net.json"
        write_json_atomic(path, network.to_json())
        loaded = load_network(path)
        assert loaded == network
        expected = network.sharing.weight_sigma if network.sharing else 0.0
        assert CommModel.from_network(loaded).share_weight_sigma == expected
    assert CommModel.from_network(shared).share_weight_sigma > 0
    assert CommModel.from_network(shared).with_bandwidth_scaled(2).share_weight_sigma == shared.sharing.weight_sigma


def test_a_network_file_from_before_sharing_still_loads():
    assert "sharing" not in json.loads(OLD_NETWORK.read_text())
    network = load_network(OLD_NETWORK)
    assert network.sharing is None and CommModel.from_network(network).share_weight_sigma == 0.0


@pytest.mark.parametrize(("edit", "message"), [
    (lambda s: s["first_last"].update({"4": 1.2}), "first_last.4 = 1.2"),
    (lambda s: s["first_last"].update({"4": math.nan}), "not a finite number"),
    (lambda s: s.update(weight_sigma=-0.1), "weight_sigma"),
    (lambda s: s["first_last"].update({"four": 0.9}), "not a worker count"),
])
def test_bad_sharing_in_a_file_is_a_clean_user_error(tmp_path, capsys, edit, message):
    data = Network(source="x", p2p=P2P, sharing=Sharing(weight_sigma=0.2, first_last={"4": 0.85},
                                                         repeats={"4": 8}, bytes=[4_000_000])).to_json()
    edit(data["sharing"])
    path = tmp_path / "net.json"
    path.write_text(json.dumps(data))  # allow_nan: what a hand-edited file can hold
    assert main(["predict", "cnn", "--network", str(path), "--iterations", "4", "--warmup", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_incast_sizes_limit_the_incast_op_only():
    config = nb.bench_config([1000, 2_000_000, 16_000_000], 3, 1, ["p2p", "incast"])
    assert nb.op_sizes(config, "incast") == [1000, 2_000_000, 16_000_000]
    config["incast_sizes"] = [2_000_000]
    assert nb.op_sizes(config, "incast") == [2_000_000] and nb.op_sizes(config, "p2p") == [1000, 2_000_000, 16_000_000]
    # 3 p2p sizes, 1 incast size, the message bursts, the send lead
    assert nb.steps_per_rank(config, 3) == (3 + 1) * (4 + 2)
    assert nb.estimate_run_s(config, 3, 1e9) < nb.estimate_run_s({**config, "incast_sizes": None}, 3, 1e9)


def test_validation_measures_incast_on_the_bandwidth_bound_sizes():
    from sgdscale.validation import network_bench_config

    config = network_bench_config()
    assert "incast" in config["ops"] and config["incast_sizes"] == [1_422_624, 4_770_952]
    assert all(size >= SHARING_MIN_BYTES for size in config["incast_sizes"])


def test_the_netbench_report_prints_the_sharing_fit():
    from sgdscale.commands.testbed import network_notes

    sharing = Sharing(weight_sigma=0.221, first_last={"2": 0.95, "4": 0.82}, repeats={"2": 8, "4": 40},
                      bytes=[1_000_000, 16_000_000])
    notes = "\n".join(network_notes(Network(source="x", p2p=P2P, sharing=sharing)))
    assert "link sharing: weight sigma 0.221" in notes
    assert "0.950 with 2 senders (8 repeats), 0.820 with 4 senders (40 repeats)" in notes
    assert not any("link sharing" in note for note in network_notes(Network(source="x", p2p=P2P)))


def test_a_prediction_says_when_it_shares_links_unequally(tmp_path, capsys):
    """The header names the measured sigma for parameter servers, and the JSON carries it."""
    network = Network(source="x", p2p=P2P, sharing=Sharing(weight_sigma=0.2, first_last={"4": 0.85},
                                                            repeats={"4": 8}, bytes=[4_000_000]))
    path, out = tmp_path / "net.json", tmp_path / "p.json"
    write_json_atomic(path, network.to_json())
    for strategy, shown in (("ps-sync", True), ("allreduce", False)):
        main(["predict", "mlp", "--strategy", strategy, "--workers", "2", "--network", str(path),
              "--iterations", "5", "--json", str(out)])
        header = capsys.readouterr().out.splitlines()[0]
        assert ("links shared unequally (measured, sigma 0.20)" in header) is shown
        assert ("flows already leaving a node first (a newcomer weighs 0.22)" in header) is shown
        assert ("a late joiner into a busy node weighs 0.51 (fine)" in header) is shown
        comm = json.loads(out.read_text())["inputs"]["comm"]
        assert comm["share_weight_sigma"] == 0.2 and comm["newcomer_share_weight"] == NEWCOMER_SHARE_WEIGHT == 0.22
        assert comm["late_joiner_weight"] == LATE_JOINER_WEIGHT == 0.51


def test_a_prediction_from_nominal_figures_names_the_late_joiner_rule(capsys):
    """Late joiners last is gloo's, not one cluster's measurement: nominal PS predictions name it too."""
    main(["predict", "mlp", "--strategy", "ps-async", "--workers", "2", "--iterations", "5"])
    header = capsys.readouterr().out.splitlines()[0]
    assert "a late joiner into a busy node weighs 0.51 (fine)" in header
    assert "links shared unequally" not in header


def test_the_flows_already_moving_go_first_in_every_prediction():
    """The newcomer weight is TCP's, not one cluster's: a network file with a sharing fit, one
    without, and nominal figures all carry it; only the measured sigma differs."""
    measured = Network(source="x", p2p=P2P, sharing=Sharing(weight_sigma=0.2, first_last={"4": 0.85},
                                                             repeats={"4": 8}, bytes=[4_000_000]))
    for comm in (CommModel.from_network(measured), CommModel.from_network(Network(source="x", p2p=P2P)),
                 CommModel.from_link(1e9, 1e-5)):
        assert comm.newcomer_share_weight == NEWCOMER_SHARE_WEIGHT
    assert CommModel.from_link(1e9, 1e-5).share_weight_sigma == 0.0


def test_unmeasured_sharing_gets_the_typical_sigma_only_under_the_incumbents_rule():
    assert simulated_weight_sigma(0.3, NEWCOMER_SHARE_WEIGHT) == 0.3
    assert simulated_weight_sigma(0.0, NEWCOMER_SHARE_WEIGHT) == UNMEASURED_WEIGHT_SIGMA > 0
    assert simulated_weight_sigma(0.0, 1.0) == 0.0
