"""Compute/communication interference and the CPU cost of communication (comm/interference.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sgdscale.cli import main
from sgdscale.cluster import Cluster
from sgdscale.coarse import solve
from sgdscale.comm.cost import CommModel
from sgdscale.comm.interference import (
    TYPICAL_COMM_CPU_S_PER_BYTE,
    TYPICAL_COMM_SLOWDOWN_SHARPNESS,
    TYPICAL_COMPUTE_SLOWDOWN,
    Interference,
    compute_while_sending,
    derived_interference,
    cpu_bound_bps,
    cpu_bounded_comm,
    node_model,
    overlap_end_s,
    stream_with_interference,
    two_body_end_s,
    with_interference,
)
from sgdscale.comm.network import AlphaBeta, BenchPoint, InterferenceFit, Network, load_network
from sgdscale.fine import simulate
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes, load_profile
from sgdscale.runtime import netbench as nb
from sgdscale.strategy import Strategy

KC, KM = 2.0, 1.5


def two_layer_profile() -> Profile:
    """Forward 0.2 s; backward: the 1 MB classifier (ready 0.2 s in), then 0.4 s of a 100 kB layer."""
    return Profile(model="two", batch_size=10, step=StepTimes(data_s=0.0, h2d_s=0.0, optimizer_s=0.0), layers=[
        Layer(name="body", forward_s=0.1, backward_s=0.4, params=[ParamTensor(name="w0", numel=25_000, bytes=100_000)]),
        Layer(name="fc", forward_s=0.1, backward_s=0.2, params=[ParamTensor(name="w1", numel=250_000, bytes=1_000_000)]),
    ])


def comm_300ms_per_mb() -> CommModel:
    """2-worker ring with no latency and 3e-7 s/B: the classifier's all-reduce takes 0.3 s, the body's 0.03 s."""
    return CommModel.from_link(8 / 3e-7, 0.0)


def test_two_body_hand_computed():
    itf = Interference(KC, KM)
    # collective first: 0.3 s alone -> 0.45 s slowed; compute did 0.45/2 of 1 s, the rest at full speed
    assert two_body_end_s(1.0, 0.3, itf) == pytest.approx((1.225, 0.45))
    # compute first: 0.2 s alone -> 0.4 s; the collective did 0.4/1.5 of its 1 s
    assert two_body_end_s(0.2, 1.0, itf) == pytest.approx((0.4, 0.4 + 1.0 - 0.4 / 1.5))
    assert two_body_end_s(0.0, 0.03, itf) == pytest.approx((0.0, 0.03))
    assert two_body_end_s(0.5, 0.2, Interference()) == pytest.approx((0.5, 0.2))


def test_fine_hand_computed_two_workers():
    """Backward starts at 0.2; the classifier's collective runs 0.4-0.85 (0.3 s x 1.5) and halves backward's
    speed, so backward (0.4 s of work left at 0.4) ends at 0.85 + (0.4 - 0.45/2) = 1.025; the body's 0.03 s
    collective follows at full speed: step 1.055 s (0.83 s without interference)."""
    profile, cluster, strategy = two_layer_profile(), Cluster(2), Strategy(grouping="per-layer")
    plain = simulate(profile, cluster, strategy, comm_300ms_per_mb(), variability=False, iterations=5)
    slowed = simulate(profile, cluster, strategy, with_interference(comm_300ms_per_mb(), Interference(KC, KM)),
                      variability=False, iterations=5)
    assert plain.iteration_s == pytest.approx([0.83] * 5)
    assert slowed.iteration_s == pytest.approx([1.055] * 5)
    assert slowed.throughput == pytest.approx(2 * 10 / 1.055)
    assert slowed.breakdown.compute_s == pytest.approx(0.2 + 0.825)  # forward + slowed backward
    assert slowed.breakdown.exposed_comm_s == pytest.approx(0.03)


def test_coarse_hand_computed_two_workers():
    """All 0.33 s of collectives from 0.4 against 0.4 s of backward: collectives end 0.4 + 0.495, backward at
    0.4 + 0.495 + 0.4 - 0.2475 = 1.0475; the last group (0.03 s at 0.8) ends earlier: step 1.0475 s."""
    assert overlap_end_s([0.4, 0.8], 0.8, [0.3, 0.03], Interference(KC, KM)) == pytest.approx(1.0475)
    assert overlap_end_s([0.4, 0.8], 0.8, [0.3, 0.03], Interference()) == pytest.approx(0.83)
    outcome = solve(two_layer_profile(), Cluster(2), Strategy(grouping="per-layer"),
                    with_interference(comm_300ms_per_mb(), Interference(KC, KM)), variability=False)
    assert float(np.mean(outcome.iteration_s)) == pytest.approx(1.0475)


def test_compute_while_sending_is_the_two_body_rule_for_one_message():
    rng = np.random.default_rng(2)
    for _ in range(200):
        compute, send = rng.random() * rng.choice([0.1, 1.0]), rng.random() * rng.choice([0.1, 1.0])
        itf = Interference(1.0 + 3.0 * rng.random(), 1.0)  # a push is not slowed (send_while_computing.py)
        handed, sent, end = compute_while_sending(1.0, [0.0], [0], [send], compute, 0.0, itf.compute_slowdown)
        compute_end, send_end = two_body_end_s(compute, send, itf)
        assert handed == [1.0]
        assert end == pytest.approx(1.0 + compute_end) and sent[0] == pytest.approx(1.0 + send_end)


def test_compute_while_sending_without_slowdown_is_fifo_at_full_speed():
    rng = np.random.default_rng(3)
    for _ in range(100):
        k = int(rng.integers(1, 20))
        offsets = list(np.sort(rng.random(k)))
        sends = list(rng.random(k) * 0.2)
        free = rng.random() * 0.5
        handed, sent, end = compute_while_sending(0.0, offsets, list(range(k)), sends, 1.0, free, 1.0)
        assert handed == pytest.approx(offsets) and end == pytest.approx(1.0)
        link = free
        for offset, send, done in zip(offsets, sends, sent):
            link = max(link, offset) + send
            assert done == pytest.approx(link)


def test_ps_hand_computed_one_worker():
    """Backward starts at 0.2 and hands the classifier (0.3 s on the uplink) over at 0.4; backward runs
    at half speed while it is sent, to 0.7, so its 0.4 s of work left ends at 0.7 + 0.4 - 0.3 / 2 =
    0.95 (the send keeps its speed: comm_slowdown does not apply to pushes). The body's push (0.03 s)
    follows, then the pulls (0.33 s): the next forward starts at 1.31 (1.16 without interference).
    Fine and coarse, sync and async alike."""
    profile, cluster = two_layer_profile(), Cluster(1, 8 / 3e-7, ps_count=1, latency_s=0.0)
    slowed = with_interference(comm_300ms_per_mb(), Interference(KC, KM))
    for kind in ("ps-sync", "ps-async"):
        strategy = Strategy(kind=kind, grouping="per-layer")
        for comm, step in ((comm_300ms_per_mb(), 1.16), (slowed, 1.31)):
            fine = simulate(profile, cluster, strategy, comm, variability=False, iterations=5)
            assert fine.iteration_s == pytest.approx([step] * 5)
            assert solve(profile, cluster, strategy, comm, variability=False).throughput == pytest.approx(10 / step)
        fine = simulate(profile, cluster, strategy, slowed, variability=False, iterations=5, timeline=True)
        backward = [e for e in fine.timeline if e.name.startswith("backward") and e.process == "worker 0"]
        assert sum(e.duration_s for e in backward) == pytest.approx(0.75 * len(backward) / 2)


@pytest.mark.parametrize("kind", ["ps-sync", "ps-async"])
def test_ps_without_interference_changes_nothing(kind):
    """And an active model slows a step whose pushes overlap backward (10 Gbit/s: compute matters)."""
    profile, strategy = load_profile("resnet50"), Strategy(kind=kind)
    base = CommModel.from_link(10e9, 20e-6)
    for workers in (2, 8):
        cluster = Cluster(workers, 10e9, ps_count=2)
        for method in (simulate, solve):
            expected = method(profile, cluster, strategy, base, iterations=20)
            got = method(profile, cluster, strategy, with_interference(base, Interference(1.0, 1.0)), iterations=20)
            assert got.throughput == expected.throughput
            slowed = method(profile, cluster, strategy, with_interference(base, Interference(1.5, 1.7)), iterations=20)
            assert slowed.throughput < expected.throughput


def test_stream_without_slowdown_is_the_plain_recurrence():
    rng = np.random.default_rng(1)
    for _ in range(50):
        groups, workers = int(rng.integers(1, 30)), int(rng.integers(1, 8))
        ready = np.sort(rng.random(groups))
        costs = rng.random(groups) * rng.choice([0.01, 0.1, 1.0])
        backward_end = ready[-1] + rng.random(workers) * 0.1
        prefix = np.concatenate([[0.0], np.cumsum(costs)[:-1]])
        starts = prefix + np.maximum.accumulate(ready - prefix)
        s, e, b = stream_with_interference(ready, costs, backward_end, Interference(1.0, 1.0))
        assert np.max(np.abs(s - starts)) < 1e-9 and abs(e[-1] - (starts[-1] + costs[-1])) < 1e-9
        assert np.max(np.abs(b - backward_end)) < 1e-9


@pytest.mark.parametrize("model", ["resnet50", "gpt2", "mlp", "cnn"])
@pytest.mark.parametrize("grouping", ["buckets", "per-tensor"])
def test_absent_or_zero_interference_changes_nothing(model, grouping):
    profile, strategy = load_profile(model), Strategy(grouping=grouping)
    base = CommModel.from_link(1e9, 20e-6)
    for workers in (2, 16, 256):
        cluster = Cluster(workers, 1e9)
        for method in (simulate, solve):
            expected = method(profile, cluster, strategy, base, iterations=20)
            for comm in (with_interference(base, None), with_interference(base, Interference(1.0, 1.0))):
                got = method(profile, cluster, strategy, comm, iterations=20)
                assert abs(got.throughput - expected.throughput) <= 1e-9 * expected.throughput
                assert np.max(np.abs(np.asarray(got.iteration_s) - np.asarray(expected.iteration_s))) <= 1e-9


def test_interference_slows_compute_bound_steps_and_traces_stretch():
    profile, cluster, strategy = load_profile("resnet50"), Cluster(4, 1e9), Strategy()
    base = CommModel.from_link(1e9, 20e-6)
    plain = simulate(profile, cluster, strategy, base, iterations=10)
    slowed = simulate(profile, cluster, strategy, with_interference(base, Interference(1.5, 1.2)), iterations=10,
                      timeline=True)
    assert slowed.throughput < plain.throughput
    coarse_plain = solve(profile, cluster, strategy, base)
    coarse_slowed = solve(profile, cluster, strategy, with_interference(base, Interference(1.5, 1.2)))
    assert coarse_slowed.throughput < coarse_plain.throughput
    assert abs(coarse_slowed.throughput - slowed.throughput) / slowed.throughput < 0.1
    assert slowed.timeline and all(e.duration_s >= 0 for e in slowed.timeline)


def test_old_network_files_load_without_the_new_fields(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema": "sgdscale.network/1", "p2p": {"alpha_s": 1e-4, "beta_s_per_byte": 8e-9},
                                "points": [{"op": "p2p", "workers": 2, "bytes": 1000, "samples_s": [0.1],
                                            "median_s": 0.1}]}))
    network = load_network(path)
    assert network.interference is None and network.cpu is None and network.points[0].cpu_s is None
    assert CommModel.from_network(network).interference is None


def test_cpu_bound_rate():
    assert cpu_bound_bps(1e-9, 0.45) == pytest.approx(3.6e9)
    nominal = CommModel.from_link(1e9, 0.0)  # 8 ns/B on the wire
    # 0.1 cores x 1 ns/B -> 10 ns/B: the CPU binds, per-byte costs x1.25
    bound = cpu_bounded_comm(nominal, 1e9, 1e-9, 0.1)
    assert bound.p2p.beta_s_per_byte == pytest.approx(10e-9)
    assert cpu_bounded_comm(nominal, 1e9, 1e-9, 0.45) is nominal
    # a measured network at 0.45 cores (wire-bound there) asked for 0.1 cores: same factor
    assert cpu_bounded_comm(nominal, 1e9, 1e-9, 0.1, measured_cores=0.45).p2p.beta_s_per_byte == pytest.approx(10e-9)
    # measured where the CPU already bound (0.05 cores: 20 ns/B), asked for 0.1: 10/20 of the measured cost
    assert cpu_bounded_comm(nominal, 1e9, 1e-9, 0.1, measured_cores=0.05).p2p.beta_s_per_byte == pytest.approx(4e-9)


def test_cpu_cost_and_interference_are_fitted_from_rank_results():
    points = [BenchPoint(op="allreduce", workers=4, bytes=m, samples_s=[0.1], median_s=0.1,
                         cpu_s=[0.002 + 2e-9 * 1.5 * m]) for m in (1_000_000, 4_000_000, 16_000_000)]
    points += [BenchPoint(op="p2p", workers=2, bytes=m, samples_s=[0.1], median_s=0.1,
                          cpu_s=[0.001 + 0.5e-9 * 2 * m]) for m in (1_000_000, 16_000_000)]
    cpu = nb.cpu_cost_from_points(points, 0.45)
    assert cpu.allreduce_s_per_byte == pytest.approx(2e-9) and cpu.p2p_s_per_byte == pytest.approx(0.5e-9)
    assert cpu.cores == 0.45
    results = [{"world_size": 2, "overlap": {"compute_alone_s": [1.0, 1.0, 1.2], "compute_overlap_s": [2.0, 1.8, 2.2],
                                             "comm_alone_s": [0.1, 0.1, 0.1], "comm_overlap_s": [0.09, 0.09, 0.1],
                                             "bytes": [4000]}} for _ in range(2)]
    fit = nb.interference_from_results(results)
    assert fit.compute_slowdown == pytest.approx(2.0) and fit.comm_slowdown == 1.0  # 0.9 is noise: floored
    assert fit.workers == 2 and fit.bytes == 4000 and len(fit.compute_alone_s) == 6
    assert nb.interference_from_results([{"world_size": 2, "overlap": {}}]) is None


def test_node_model_notes():
    nominal = CommModel.from_link(1e9, 20e-6)
    comm, notes = node_model(nominal, link_bps=1e9)
    assert comm.interference is None and any("nominal network figures" in n for n in notes)
    assert "--cpu-per-node CORES" in " ".join(notes)  # the hint, until a budget is given
    assert "--cpu-per-node CORES" not in " ".join(node_model(nominal, link_bps=1e9, cpu_cores=0.3)[1])
    network = Network(source="t", p2p=AlphaBeta(alpha_s=0.0, beta_s_per_byte=8 / 0.7e9),
                      allreduce={"4": AlphaBeta(alpha_s=0.0, beta_s_per_byte=4e-8)},
                      environment={"bandwidth_bps": 1e9},
                      interference=InterferenceFit(compute_slowdown=1.8, comm_slowdown=1.3, workers=4, bytes=1000))
    comm, notes = node_model(CommModel.from_network(network), network=network, link_bps=1e9)
    assert comm.interference == Interference(1.8, 1.3)
    text = " ".join(notes)
    assert "point to point at 70%" in text and "4-way all-reduce at 30%" in text  # 1.5*8/1e9/4e-8
    comm, _ = node_model(CommModel.from_network(network), network=network, link_bps=1e9, interference=False)
    assert comm.interference is None


def test_budget_without_a_file_gets_the_derived_interference():
    """A CPU budget makes compute and communication share the CPU: without a measured network the
    prediction slows both by the testbed's fit (a collective more, the more bytes per core the link
    asks for), says so, and leaves it out on --no-interference."""
    nominal = CommModel.from_link(0.9e9, 20e-6)
    comm, notes = node_model(nominal, link_bps=0.9e9, cpu_cores=0.35)
    expected = derived_interference(0.9e9, 0.35)
    assert comm.interference == expected and expected.compute_slowdown == TYPICAL_COMPUTE_SLOWDOWN
    demand = TYPICAL_COMM_CPU_S_PER_BYTE * 0.9e9 / 8 / 0.35  # 1.0: the CPU it needs is what it gets
    assert demand == pytest.approx(0.996, abs=0.01)
    assert expected.comm_slowdown == pytest.approx((1 + demand ** TYPICAL_COMM_SLOWDOWN_SHARPNESS)
                                                   ** (1 / TYPICAL_COMM_SLOWDOWN_SHARPNESS))
    assert 1.3 < expected.comm_slowdown < 1.45  # the fit: 1.3-1.56 measured at 0.92 Gbit/s and 0.35 cores
    assert any("typical figures for 0.35 cores" in n for n in notes)
    slow_link, fast_link = derived_interference(0.25e9, 0.35), derived_interference(3e9, 0.35)
    assert 1.0 < slow_link.comm_slowdown < 1.1 < 3.0 < fast_link.comm_slowdown  # link-bound vs CPU-starved
    assert derived_interference(0.9e9, 0.7).comm_slowdown < expected.comm_slowdown  # more CPU, less contention
    assert node_model(nominal, link_bps=0.9e9, cpu_cores=0.35, interference=False)[0].interference is None
    assert node_model(nominal, link_bps=0.9e9)[0].interference is None  # no budget, no contention to model
    network = Network(source="t", p2p=AlphaBeta(alpha_s=0.0, beta_s_per_byte=8 / 0.7e9), allreduce={},
                      interference=InterferenceFit(compute_slowdown=1.8, comm_slowdown=1.3, workers=4, bytes=1000))
    measured, _ = node_model(CommModel.from_network(network), network=network, link_bps=0.9e9, cpu_cores=0.35)
    assert measured.interference == Interference(1.8, 1.3)  # a measured one wins


def test_predict_cli_uses_interference_and_cpu_budget(tmp_path, capsys):
    network = Network(source="t", p2p=AlphaBeta(alpha_s=1e-4, beta_s_per_byte=8e-9),
                      environment={"bandwidth_bps": 1e9, "cpu_quota_cores": [0.45, 0.45]},
                      interference=InterferenceFit(compute_slowdown=2.0, comm_slowdown=1.5, workers=2, bytes=1000))
    path = tmp_path / "net.json"
    path.write_text(json.dumps(network.to_json()))

    def throughput(*extra: str) -> float:
        out_json = tmp_path / "p.json"
        assert main(["predict", "resnet50", "--network", str(path), "--workers", "4", "--no-variability",
                     "--method", "fine", "--json", str(out_json), *extra]) == 0
        return json.loads(out_json.read_text())["results"][0]["throughput"]

    with_itf = throughput()
    out = capsys.readouterr().out
    assert "interference (measured): compute 2.00x" in out
    without = throughput("--no-interference")
    assert with_itf < without
    assert throughput("--no-interference", "--cpu-per-node", "0.001") < without  # typical CPU cost binds
    assert "testbed's typical figure" in capsys.readouterr().out
    assert main(["predict", "resnet50", "--cpu-per-node", "0"]) == 2
    assert "--cpu-per-node 0: too small" in capsys.readouterr().err


@pytest.mark.dist
@pytest.mark.timeout(180)
def test_local_netbench_overlap_records_interference_and_cpu_cost(tmp_path, capsys):
    out = tmp_path / "net.json"
    assert main(["netbench", "-o", str(out), "--min-size", "100kB", "--max-size", "4MB", "--points", "3",
                 "--repeats", "2", "--ops", "p2p,allreduce,overlap", "--overlap-size", "8MB"]) == 0
    assert "interference (2 workers, 8 MB all-reduce)" in capsys.readouterr().out
    network = load_network(out)
    itf = network.interference
    assert itf.workers == 2 and itf.bytes == 8_000_000 and itf.compute_slowdown >= 1 and itf.comm_slowdown >= 1
    assert len(itf.compute_alone_s) == 4 and len(itf.comm_overlap_s) == 4  # 2 repeats x 2 ranks
    assert network.cpu.allreduce_s_per_byte > 0 and network.cpu.p2p_s_per_byte > 0 and network.cpu.cores is None
    assert all(p.cpu_s and len(p.cpu_s) == 2 for p in network.points)


def test_fit_network_reads_the_quota_as_one_value_or_one_per_node():
    points = [BenchPoint(op="p2p", workers=2, bytes=m, samples_s=[1e-8 * m], median_s=1e-8 * m, cpu_s=[1e-9 * m])
              for m in (1_000_000, 8_000_000)]
    assert nb.fit_network(points, "t", {"cpu_quota_cores": 0.45}).cpu.cores == 0.45
    assert nb.fit_network(points, "t", {"cpu_quota_cores": [0.5, 0.25]}).cpu.cores == 0.25
    assert nb.fit_network(points, "t", {}).cpu.cores is None
