"""A parameter server's CPU budget pays for every byte it moves (measured CPU cost per byte)."""

from __future__ import annotations

import pytest

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.network import AlphaBeta, CpuCost, Network
from sgdscale.predict import predict
from sgdscale.profile import load_profile
from sgdscale.strategy import Strategy


def network(p2p_cpu_s_per_byte: float | None, cores: float | None) -> Network:
    cpu = CpuCost(p2p_s_per_byte=p2p_cpu_s_per_byte, cores=cores) if p2p_cpu_s_per_byte else None
    return Network(p2p=AlphaBeta(alpha_s=1e-4, beta_s_per_byte=8e-9), allreduce={}, points=[], cpu=cpu)


def test_server_cpu_per_byte_comes_from_the_network_file():
    assert CommModel.from_network(network(3e-9, 0.25)).server_cpu_s_per_byte == pytest.approx(1.2e-8)
    assert CommModel.from_network(network(None, None)).server_cpu_s_per_byte == 0.0


def _throughput(kind: str, comm: CommModel, method: str, workers: int = 8) -> float:
    profile = load_profile("gpt2")
    cluster = Cluster(workers, bandwidth_bps=1e9, latency_s=1e-4)
    result = predict(profile, cluster, Strategy(kind=kind), comm, [workers], methods=(method,), iterations=40,
                     warmup=5, variability=False)
    return result.results[0].throughput


@pytest.mark.parametrize("method", ["fine", "coarse"])
def test_async_server_cpu_bound(method):
    """With 8 workers and a server CPU 5x slower per byte than its NIC, async PS runs at the CPU's
    rate: one worker step moves the model's bytes in and out of the server CPU."""
    profile = load_profile("gpt2")
    free = CommModel.from_network(network(None, None))
    per_byte = 5 * 8e-9 / 2  # CPU s per byte moved, over 1 core: in + out = 5 x one NIC direction
    busy = CommModel.from_network(network(per_byte, 1.0))
    bound = profile.batch_size / (2 * profile.gradient_bytes * per_byte)  # samples/s
    with_cpu = _throughput("ps-async", busy, method)
    assert with_cpu <= bound * 1.001
    assert with_cpu >= bound * 0.9
    assert _throughput("ps-async", free, method) > 2 * with_cpu
