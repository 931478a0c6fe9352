"""The GPU path: CUDA-event timing in the profiler and the NCCL backend choice for training.

The backend choice is plain logic and runs everywhere; profiling and training on a GPU skip on a
machine without one."""

from __future__ import annotations

import pytest

from sgdscale.runtime.rank import pick_backend

torch = pytest.importorskip("torch")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


def test_nccl_for_allreduce_with_a_gpu_per_rank(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert pick_backend({"strategy": "allreduce"}, 2, cuda_devices=2, nccl_available=True) == ("nccl", "cuda:1")


@pytest.mark.parametrize("config, gpus, nccl", [
    ({"strategy": "ps-sync"}, 4, True),          # parameter server: CPU point-to-point
    ({"strategy": "allreduce"}, 0, True),        # no GPU
    ({"strategy": "allreduce"}, 1, True),        # two ranks cannot share one GPU under NCCL
    ({"strategy": "allreduce"}, 2, False),       # torch without NCCL
    ({"strategy": "allreduce", "device": "cpu"}, 2, True),
])
def test_gloo_otherwise(monkeypatch, config, gpus, nccl):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert pick_backend(config, 2, cuda_devices=gpus, nccl_available=nccl) == ("gloo", "cpu")


def test_torchrun_counts_only_this_hosts_ranks(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert pick_backend({"strategy": "allreduce"}, 16, cuda_devices=1, nccl_available=True) == ("nccl", "cuda:0")


def test_forcing_cuda_without_enough_gpus_says_why(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="0 CUDA GPU"):
        pick_backend({"strategy": "allreduce", "device": "cuda"}, 2, cuda_devices=0, nccl_available=True)


@needs_cuda
def test_cuda_profile_uses_events_and_its_parts_add_up():
    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    profile = profile_workload(build_workload("cnn"), 16, warmup=2, iterations=5, device="cuda")
    assert profile.provenance["timing"].startswith("CUDA events")
    assert profile.has_counts and profile.compute_s > 0
    gap = profile.provenance["consistency"]["paired_median_gap_fraction"]
    assert abs(gap) < 0.5, gap
    assert all(layer.forward_s >= 0 and layer.backward_s >= 0 for layer in profile.layers)


@needs_cuda
def test_cuda_tf32_profile_records_its_precision():
    from sgdscale.profiling.profiler import profile_workload
    from sgdscale.profiling.zoo import build_workload

    profile = profile_workload(build_workload("mlp", width=256, depth=2), 32, warmup=1, iterations=3, device="cuda",
                               precision="tf32")
    assert profile.precision == "tf32"
    assert all(t.bytes == 4 * t.numel for t in profile.tensors)
