"""Network benchmark: sizes, fitting, and real runs on loopback, torchrun and the emulated cluster."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from sgdscale.cli import main
from sgdscale.comm.cost import CommModel
from sgdscale.comm.network import BenchPoint, load_network
from sgdscale.errors import UserError
from sgdscale.runtime import netbench as nb

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root (netns, tc, cgroups)")


def test_message_sizes_are_log_spaced_float32_multiples():
    sizes = nb.message_sizes(1000, 16e6, 8)
    assert sizes[0] == 1000 and sizes[-1] == 16_000_000 and len(sizes) == 8
    assert all(s % 4 == 0 for s in sizes)
    ratios = [b / a for a, b in zip(sizes, sizes[1:])]
    assert max(ratios) / min(ratios) < 1.01
    with pytest.raises(UserError, match="two different"):
        nb.message_sizes(1000, 1000, 4)
    with pytest.raises(UserError, match="smaller than"):
        nb.message_sizes(1e6, 1e3, 4)


def test_bench_config_rejects_unknown_ops():
    with pytest.raises(UserError, match="unknown benchmark op"):
        nb.bench_config([1000, 2000], 3, 1, ["broadcast"])
    with pytest.raises(UserError, match="repeats"):
        nb.bench_config([1000, 2000], 0, 1, ["p2p"])


def test_fit_recovers_a_known_line_per_op_and_worker_count():
    def points(op, workers, alpha, beta):
        return [BenchPoint(op=op, workers=workers, bytes=m, samples_s=[alpha + beta * m], median_s=alpha + beta * m)
                for m in (1_000, 100_000, 1_000_000, 10_000_000)]

    net = nb.fit_network(points("p2p", 2, 50e-6, 1e-9) + points("allreduce", 2, 100e-6, 2e-9)
                         + points("allreduce", 4, 300e-6, 3e-9), source="synthetic", environment={})
    assert net.p2p.alpha_s == pytest.approx(50e-6, rel=1e-6) and net.p2p.beta_s_per_byte == pytest.approx(1e-9)
    assert net.allreduce["4"].alpha_s == pytest.approx(300e-6, rel=1e-6)
    assert net.allreduce["4"].beta_s_per_byte == pytest.approx(3e-9)
    assert net.bucket_copy is None  # no copy timed


def test_bucket_copy_is_fitted_on_the_largest_worker_count():
    def points(workers, beta):
        return [BenchPoint(op="allreduce", workers=workers, bytes=m, samples_s=[0.1], median_s=0.1,
                           copy_s=[1e-5 + beta * m, 2e-5 + beta * m, 1e-5 + beta * m]) for m in (1_000_000, 16_000_000)]

    fit = nb.copy_from_points(points(2, 9e-10) + points(4, 3e-10))
    assert fit.beta_s_per_byte == pytest.approx(3e-10) and fit.alpha_s == pytest.approx(1e-5, rel=1e-3)


def test_outcast_fit_inverts_the_head_start_formula():
    """A lone flow takes 1 s; the second starts 0.3 s after the first. With the newcomer at weight w
    while both move, the first finishes at 0.3 + 0.7 (1 + w); the fit gets w back per repeat (median),
    kept within [0.01, 1], and the split of flows started together."""
    def results(firsts):
        n = len(firsts)
        rank0 = {"rank": 0, "world_size": 3, "outcast": {
            "bytes": [16_000_000], "alone_s": [1.0] * n, "head_start_s": [0.3] * n, "first_s": firsts,
            "second_s": [2.0] * n, "together_first_s": [1.6] * n, "together_second_s": [2.0] * n}}
        return [rank0, {"rank": 1, "world_size": 3, "outcast": {}}, {"rank": 2, "world_size": 3, "outcast": {}}]

    fit = nb.outcast_from_results(results([0.3 + 0.7 * 1.2, 0.3 + 0.7 * 1.25, 0.3 + 0.7 * 1.3]))
    assert fit.newcomer_weight == pytest.approx(0.25) and fit.first_second_together == pytest.approx(0.8)
    assert fit.bytes == 16_000_000 and len(fit.first_s) == 3
    assert nb.outcast_from_results(results([0.9, 0.95, 0.99])).newcomer_weight == nb.OUTCAST_MIN_WEIGHT
    assert nb.outcast_from_results(results([2.0, 2.0, 2.0])).newcomer_weight == 1.0  # worse than equal: equal
    assert nb.outcast_from_results([{"rank": 0, "world_size": 2, "outcast": {}}]) is None


def test_send_lead_is_the_acknowledgement_less_the_send_and_its_own_trip():
    """A 16 MB send completes at 0.10 s and its acknowledgement comes back at 0.15 s; the acknowledgement's
    own trip is the p2p startup (50 us here), so the send completed 0.04995 s before its bytes were in."""
    p2p = [BenchPoint(op="p2p", workers=2, bytes=m, samples_s=[50e-6 + 1e-8 * m], median_s=50e-6 + 1e-8 * m)
           for m in (1_000, 3_000, 10_000, 1_000_000, 16_000_000)]
    rank0 = {"rank": 0, "world_size": 2, "send_lead": {"bytes": [16_000_000], "sent_s": [0.10, 0.11, 0.10],
                                                       "acknowledged_s": [0.15, 0.17, 0.14]}}
    lead = nb.send_lead_from_results([rank0, {"rank": 1, "world_size": 2, "send_lead": {}}], p2p)
    assert lead.lead_s == pytest.approx(0.05 - 50e-6) and lead.bytes == 16_000_000 and len(lead.sent_s) == 3
    net = nb.fit_network(p2p, source="synthetic", environment={}, send_lead=lead)
    assert CommModel.from_network(net).send_lead_s == pytest.approx(0.05 - 50e-6)
    assert CommModel.from_network(nb.fit_network(p2p, source="synthetic", environment={})).send_lead_s == 0.0
    assert nb.send_lead_from_results([{"rank": 0, "world_size": 2}], p2p) is None  # not measured (older ranks)


def test_points_take_the_slowest_rank_for_allreduce():
    results = [{"rank": r, "world_size": 2, "samples": {"allreduce": {"1000": [1.0 + r, 5.0 - r]},
                                                      "p2p": {"1000": [0.5, 0.7] if r == 0 else [float("nan")] * 2}},
                "copy_s": {"1000": [0.1 * r, 0.3 - 0.1 * r]}}
               for r in (0, 1)]
    points = {p.op: p for p in nb.points_from_results(results)}
    assert points["allreduce"].samples_s == [2.0, 5.0]
    assert points["allreduce"].copy_s == [0.1, 0.3] and points["p2p"].copy_s is None
    assert points["p2p"].samples_s == [0.5, 0.7]


def test_cli_errors_are_user_errors(capsys):
    assert main(["netbench", "--workers", "1", "-o", "x.json"]) == 2
    assert "at least 2 processes" in capsys.readouterr().err
    assert main(["netbench"]) == 2
    assert "-o FILE" in capsys.readouterr().err
    assert main(["netbench", "--cpu-quota", "0.5", "-o", "x.json"]) == 2
    assert "--emulate" in capsys.readouterr().err
    # said before any measuring: without p2p or a 2-process all-reduce no network file can be fitted
    assert main(["netbench", "--ops", "allreduce", "--workers", "4", "-o", "x.json"]) == 2
    assert "add p2p to --ops" in capsys.readouterr().err


@pytest.mark.dist
@pytest.mark.timeout(120)
def test_local_netbench_writes_a_valid_network_file(tmp_path, capsys):
    out = tmp_path / "net.json"
    code = main(["netbench", "-o", str(out), "--max-size", "1MB", "--points", "5", "--repeats", "3"])
    assert code == 0
    # 2 processes: incast has one sender, so nothing says how links are shared; the user is told
    printed = " ".join(capsys.readouterr().out.split())
    assert "link sharing was not measured" in printed and "copy right after an all-reduce" in printed
    net = load_network(out)
    assert net.p2p.beta_s_per_byte > 0 and set(net.allreduce) == {"2"}
    assert net.allreduce["2"].beta_s_per_byte > 0
    assert len(net.points) == 15 and all(len(p.samples_s) == 3 for p in net.points)  # p2p, allreduce, incast
    assert net.environment["mode"] == "local (loopback)" and net.environment["backend"] == "gloo"
    # every all-reduce is followed by a timed copy of its tensor (DDP's copy back): a positive slope
    assert all(p.copy_s and len(p.copy_s) == 3 for p in net.points if p.op == "allreduce")
    assert net.bucket_copy is not None and net.bucket_copy.beta_s_per_byte > 0
    # a tiny isend or irecv costs tens of microseconds of CPU here (28 us on a quiet machine)
    assert net.cpu is not None and 2e-6 < net.cpu.message_s < 1e-3 and net.cpu.cores is None
    # a 1 MB send on loopback completes within a few ms of its acknowledgement
    assert net.send_lead is not None and net.send_lead.bytes == 1_000_000 and 0.0 <= net.send_lead.lead_s < 0.05


@pytest.mark.dist
@pytest.mark.timeout(180)
def test_an_unsteady_launch_is_measured_again_and_the_steadiest_kept(monkeypatch):
    # No real link here is unsteady on demand: a bound below any real spread makes every p2p launch
    # "unsteady", so the launch with p2p runs 1 + UNSTEADY_RETRIES times; the later one does not retry.
    monkeypatch.setattr(nb, "P2P_STEADY_SPREAD", -1.0)
    from sgdscale.hostinfo import wait_for_quiet_host
    waits = []  # before each retry it waits for a quiet host: here a short real wait, whatever the host does
    monkeypatch.setattr(nb, "wait_for_quiet_host",
                        lambda limit: waits.append(limit) or wait_for_quiet_host(limit, window_s=0.2, max_wait_s=0.4))
    bars = []
    network = nb.run_netbench([2, 3], nb.bench_config([4096, 65536, 1 << 20], 3, 1, ["p2p", "allreduce"]),
                                    on_progress=lambda done, total: bars.append((done, total)))
    launches = network.environment["launches"]
    assert [(r["processes"], r["attempt"]) for r in launches] == [(2, 1), (2, 2), (2, 3), (3, 1)]
    p2p = [r for r in launches if r["processes"] == 2]
    kept = [r for r in p2p if r.get("kept")]
    assert len(kept) == 1 and kept[0]["p2p_spread"] == min(r["p2p_spread"] for r in p2p)
    assert launches[-1].get("kept") and launches[-1]["p2p_spread"] is None
    assert waits == [nb.QUIET_STEAL_CORES] * 2
    assert all(r["steal_before_retry_cores"] >= 0 for r in p2p[:2]) and "steal_before_retry_cores" not in p2p[2]
    # the fit uses the kept attempt's points only: one p2p point per size
    assert sorted(p.bytes for p in network.points if p.op == "p2p") == [4096, 65536, 1 << 20]
    # the progress bar never runs past its total and ends full
    assert all(done <= total for done, total in bars) and bars[-1][0] == bars[-1][1]
    # the CLI says which attempt it kept and why it measured again
    from sgdscale.commands.testbed import launch_lines
    text = "\n".join(launch_lines(launches))
    assert "attempt 3" in text and "(kept)" in text and "a disturbed machine" in text


def test_waiting_for_a_quiet_host_is_bounded(monkeypatch):
    from sgdscale import hostinfo

    # the hypervisor's clock (/proc/stat's steal) as a counter the waits' sleeps advance: the wait's
    # own logic, whatever this machine's host does right now
    stolen = {"s": 0.0, "cores": 0.0}
    monkeypatch.setattr(hostinfo, "steal_s", lambda: stolen["s"])
    windows = []

    def sleep(seconds):
        windows.append(seconds)
        stolen["s"] += stolen["cores"] * seconds

    # no steal: quiet after one window
    assert hostinfo.wait_for_quiet_host(0.05, sleep=sleep) == 0.0 and windows == [2.0]
    # a host that is never quiet enough is waited for at most max_wait_s, then measured anyway
    windows.clear()
    stolen["cores"] = 0.5
    assert hostinfo.wait_for_quiet_host(0.05, window_s=1.0, max_wait_s=3.0, sleep=sleep) == 0.5
    assert windows == [1.0, 1.0, 1.0]
    # a kernel that does not report steal: nothing to wait for
    monkeypatch.setattr(hostinfo, "steal_s", lambda: None)
    windows.clear()
    assert hostinfo.wait_for_quiet_host(0.05, sleep=sleep) is None and windows == []
    # this machine's own reading, where it has one, counts up from boot
    monkeypatch.undo()
    assert hostinfo.steal_s() is None or hostinfo.steal_s() >= 0


@pytest.mark.dist
@pytest.mark.timeout(120)
def test_torchrun_ranks_then_collect(tmp_path):
    """The real-cluster path: torchrun runs the rank target, `--collect` fits the result files."""
    config = tmp_path / "nb.json"
    assert main(["netbench", "--write-config", str(config), "--max-size", "256kB", "--points", "3",
                 "--repeats", "2"]) == 0
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    run = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", "-m", "sgdscale.runtime.rank",
                          "--target", nb.BENCH_TARGET, "--config", str(config), "--out", str(tmp_path / "res")],
                         capture_output=True, text=True, timeout=100)
    assert run.returncode == 0, run.stderr[-2000:]
    out = tmp_path / "net.json"
    assert main(["netbench", "--collect", str(tmp_path / "res"), "-o", str(out)]) == 0
    net = load_network(out)
    assert {p.op for p in net.points} == {"p2p", "allreduce", "incast"} and "torchrun" in net.source
    incast = [p for p in net.points if p.op == "incast"]
    assert all(p.senders_s and all(len(row) == 1 for row in p.senders_s) for p in incast)
    assert net.sharing is None  # one sender says nothing about sharing
    assert net.cpu is not None and 2e-6 < net.cpu.message_s < 1e-3  # the per-message bursts, collected


@needs_root
@pytest.mark.testbed
@pytest.mark.timeout(120)
def test_emulated_netbench_sees_the_link_rate(tmp_path):
    # 100 Mbit/s links: TCP goodput is ~95.6 Mbit/s (header overhead), measured p2p 1/beta 96 Mbit/s and
    # 2-rank all-reduce 90 Mbit/s; the bound allows for a busy machine.
    out = tmp_path / "emu.json"
    code = main(["netbench", "--emulate", "--bandwidth", "100Mbit", "--cpu-quota", "0.6", "-o", str(out),
                 "--workers", "2,3", "--min-size", "64kB", "--max-size", "2MB", "--points", "4", "--repeats", "3",
                 "--ops", "p2p,allreduce,incast,outcast"])
    assert code == 0
    net = load_network(out)
    p2p_bps = 8 / net.p2p.beta_s_per_byte
    allreduce_bps = 8 / net.allreduce["2"].beta_s_per_byte
    assert 80e6 <= p2p_bps <= 105e6, p2p_bps
    assert 70e6 <= allreduce_bps <= 105e6, allreduce_bps
    assert net.environment["mode"] == "emulated" and net.environment["bandwidth_bps"] == 100e6
    assert net.environment["tcp_congestion_control"] in ("cubic", "reno")  # loss-based, whatever the host's
    # what the rest of the machine did during each launch, the evidence of a disturbed benchmark
    launches = net.environment["launches"]
    assert [run["processes"] for run in launches if run.get("kept")] == [2, 3]
    assert all(run["wall_s"] > 0 and run["other_load_cores"] >= 0 and run["steal_cores"] >= 0 for run in launches)
    assert launches[0]["p2p_spread"] >= 0 and launches[-1]["p2p_spread"] is None  # p2p in the first launch only
    # incast (default op): each sender's completion per repeat, and the sharing fit from the 2 MB, 2-sender one
    incast = {(p.workers, p.bytes): p for p in net.points if p.op == "incast"}
    assert {w for w, _ in incast} == {2, 3}
    for (workers, _), point in incast.items():
        assert len(point.senders_s) == 3
        assert all(len(row) == workers - 1 and max(row) <= total for row, total in zip(point.senders_s, point.samples_s))
    assert net.sharing is not None and set(net.sharing.first_last) == {"2"}
    assert math.isfinite(net.sharing.weight_sigma) and net.sharing.weight_sigma >= 0
    # outcast, with 3 processes: two flows share one uplink, so each takes longer than one alone, and
    # both together take about twice as long (100 Mbit/s: they share it nearly equally, weight ~0.95)
    fit = net.outcast
    assert fit is not None and len(fit.first_s) == 3 and fit.bytes == 2_000_000
    for alone, first, second, last in zip(fit.alone_s, fit.first_s, fit.second_s, fit.together_second_s):
        assert alone < first <= second and 1.6 * alone < last < 2.6 * alone, fit
    assert 0.0 < fit.newcomer_weight <= 1.0 and 0.0 < fit.first_second_together <= 1.0
    # the send lead: a 2 MB send (168 ms of line) completes while the shaper still queues part of it
    assert net.send_lead is not None and 0.0 < net.send_lead.lead_s < 0.168, net.send_lead
    json.loads(out.read_text())  # plain JSON on disk


def test_rank_threads_surface_the_first_error():
    """A failed wait in a rank's helper thread (incast receives, async PS server threads) must fail the
    rank, not be printed and forgotten."""
    from sgdscale.runtime.rank import run_threads

    seen: list[int] = []

    def work(index: int) -> None:
        seen.append(index)
        if index == 2:
            raise RuntimeError("peer 2 went away")

    with pytest.raises(RuntimeError, match="peer 2 went away"):
        run_threads(work, 4, "test")
    assert sorted(seen) == [0, 1, 2, 3]  # the others ran to the end
