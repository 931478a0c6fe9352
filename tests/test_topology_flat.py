"""A one-device-per-node topology reproduces the pre-topology predictions exactly.

tests/data/flat_reference.json was recorded from the code before `sgdscale.comm.topology`
existed (commit 'Record flat-topology reference predictions'), with the cases of
tests/flat_cases.py: several profiles, all three strategies, both methods, a measured network,
slow links and slow workers. One entry was re-recorded on purpose since: sync PS, fine method,
`mlp-pssync` at 4 workers (75.2 -> 61.0 samples/s), when the simulator learned that a shard
posts its next receives only after all its replies have left (`sgdscale.fine.ps`), and again
(61.0 -> 67.6) when a worker whose pushes wait for the shard sends its receive notice ahead of
them; and `cnn-pssync-net` (fine, 2 and 4 workers: -0.01% and +0.3%) when the notice learned it
cannot leave before the worker's backward ends; and the coarse sync PS entries of `mlp-pssync`
(2 and 4 workers: 58.3 -> 69.7, 58.9 -> 70.6) and `cnn-pssync-net` (2 and 4 workers: +8.1%,
+14.7%) when its pull after the push phase became the late workers' share
(`sgdscale.coarse.heuristics.sync_pull_tail_s`, since replaced), and again (`mlp-pssync` 1, 2, 4 workers:
57.2 -> 57.5, 69.7 -> 66.7, 70.6 -> 67.4; `cnn-pssync-net` 2 and 4 workers: 1562 -> 1558, 2856 -> 2524;
`cnn-pssync-slow` 3 workers: 1178 -> 1108) when its replies followed the order in which the shard
applies messages (`sgdscale.coarse.heuristics.sync_pull_end_s`), and again (`mlp-pssync` 2 and 4 workers:
66.7 -> 67.6, 67.4 -> 67.8; `cnn-pssync-net` 4 workers: 2523.6 -> 2523.7) when the early workers ran a lead
ahead into the next step where the shard's NIC binds (`sgdscale.coarse.heuristics.sync_ps_end_s`); and the
coarse all-reduce entries of `mlp-mgwfbp`
(2 and 8 workers: 217.0 -> 212.9, 513.3 -> 508.4; fine 212.9, 508.4) and `cnn-slowlink` (4 workers:
2263 -> 2023; fine 2008) when it took every term of the WFBP recurrence. Every other entry is still
the pre-topology recording. DDP's bucket copies (`sgdscale.bucket_copies`) came after the
recording and are not what this checks: every case runs with a measured copy cost of 0; nor is DDP's
buffer broadcast (`sgdscale.bucket_copies.buffer_broadcast_s`): every profile runs without buffers; nor
is the incumbents-first rule for nominal figures and files without a sharing fit
(`sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT`, in every prediction since set 25): every case runs
with equal sharing, as all of them did when recorded (none has a sharing fit); nor is the slope of
an all-reduce beyond the network file's largest measured size (`sgdscale.comm.cost.BEYOND_SLOPE`,
since set 54; `mlp-net`'s 25 MB buckets lie beyond its file's 16 MB): every case runs with the fitted line's;
nor is coarse async PS's residual correction at the shard's replies (`sgdscale.coarse.models.SERVICE_CV2`,
since set 66): every case runs with the plain MVA, as recorded; nor is coarse sync PS counting the
shards of its late workers by bytes (`sgdscale.coarse.models.LATE_SHARE_SHARDS`, since set 77; `mlp`'s
weights all land on one of `mlp-pssync`'s two shards): every case counts every shard, as recorded;
nor is the fine method's shard spending its transport CPU beside the wire while its pushes slow as it
replies (`sgdscale.fine.ps.RECEIVE_OVERLAPS_TRANSFER`, `sgdscale.comm.sharing.RECEIVE_SHARE_WHILE_SENDING`,
since set 78): every case charges it in series with independent directions, as recorded; nor are late
joiners into a busy node last (`sgdscale.comm.sharing.LATE_JOINER_WEIGHT`, since set 85): every case
shares a node's incoming link equally, as recorded.
"""

import dataclasses
import json
from pathlib import Path

import pytest

from flat_cases import CASES, network
import sgdscale.coarse.models as coarse_models
import sgdscale.fine.ps as fine_ps
from sgdscale.comm import sharing
from sgdscale.comm import cost
from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.predict import predict
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy

REFERENCE = json.loads((Path(__file__).parent / "data" / "flat_reference.json").read_text())


@pytest.fixture(autouse=True)
def _as_recorded(monkeypatch):
    """The fitted line beyond the curve, the plain MVA, every shard counted, the shard's transport CPU in
    series and no late joiners, as recorded (module docstring)."""
    monkeypatch.setattr(cost, "BEYOND_SLOPE", "fitted line")
    monkeypatch.setattr(coarse_models, "SERVICE_CV2", dict.fromkeys(coarse_models.SERVICE_CV2, 1.0))
    monkeypatch.setattr(coarse_models, "LATE_SHARE_SHARDS", "count")
    monkeypatch.setattr(fine_ps, "RECEIVE_OVERLAPS_TRANSFER", False)
    monkeypatch.setattr(fine_ps, "SEND_OVERLAPS_TRANSFER", False)
    monkeypatch.setattr(sharing, "RECEIVE_SHARE_WHILE_SENDING", 1.0)
    monkeypatch.setattr(sharing, "LATE_JOINER_WEIGHT", 1.0)


def _run(case, allreduce="flat"):
    name, prof, skw, ckw, counts, use_net = case
    strategy = Strategy(**skw, allreduce=allreduce)
    ckw = dict(ckw)
    ckw.setdefault("workers", 1)
    if use_net:
        net = network()
        comm = CommModel.from_network(net, strategy.algorithm)
        ckw["bandwidth_bps"] = float(f"{8.0 / net.p2p.beta_s_per_byte:.4g}")
        ckw["latency_s"] = net.p2p.alpha_s
    else:
        comm = CommModel.from_link(ckw.get("bandwidth_bps", 10e9), ckw.get("latency_s", 20e-6), strategy.algorithm)
    # no bucket copies, flows share equally (module docstring)
    comm = dataclasses.replace(comm, copy_s_per_byte=0.0, newcomer_share_weight=1.0)
    profile = load_profile(prof).model_copy(update={"buffer_bytes": 0})  # no DDP buffer broadcast (docstring)
    return predict(profile, Cluster(**ckw), strategy, comm, counts, iterations=20, warmup=3)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_flat_topology_reproduces_reference(case):
    expected = REFERENCE[case[0]]
    got = _run(case).results
    assert [(r.workers, r.method) for r in got] == [(e["workers"], e["method"]) for e in expected]
    for r, e in zip(got, expected):
        assert r.throughput == pytest.approx(e["throughput"], rel=1e-9, abs=0)
        for key in ("mean", "p50", "p95"):
            assert r.iteration_s[key] == pytest.approx(e["iteration_s"][key], rel=1e-9, abs=0)
        assert r.breakdown.exposed_comm_s == pytest.approx(e["breakdown"]["exposed_comm_s"], rel=1e-9, abs=1e-15)
        assert r.breakdown.wait_s == pytest.approx(e["breakdown"]["wait_s"], rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("case", [c for c in CASES if c[2]["kind"] == "allreduce" and c[2].get("algorithm", "ring") == "ring"],
                         ids=lambda c: c[0])
def test_hierarchical_on_one_device_per_node_is_flat(case):
    """With G = 1 the hierarchical scheme has no intra-node phases: the same numbers."""
    expected = REFERENCE[case[0]]
    for r, e in zip(_run(case, "hierarchical").results, expected):
        assert r.throughput == pytest.approx(e["throughput"], rel=1e-9, abs=0)
