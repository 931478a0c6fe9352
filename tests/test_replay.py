"""Replay (runtime/replay.py): a module built from a profile has exactly the profiled parameters,
makes gradients ready in the profiled order, spends the profiled time, and runs on the real
distributed runtime."""

import statistics
import time

import pytest
import torch

from sgdscale.errors import UserError
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes, load_profile
from sgdscale.runtime.replay import build_replay, replay_batch
from sgdscale.runtime.train import replay_config, run_training


# A wake-up delay (a few ms here with 5 busy processes per core) makes a gradient late; the next
# duration is shortened by it (so the step total stays exact), which can make the next one early.
LATE_S = 0.015


def _profile(**changes) -> Profile:
    """Three layers, 10/12/8 ms forward, 15/20/10 ms backward; the last layer's bias is ready
    before its weight (as a BatchNorm's is), and the middle layer has no parameters."""
    layers = [
        Layer(name="a", forward_s=0.010, backward_s=0.015,
              params=[ParamTensor(name="a.weight", numel=3000, bytes=12000, grad_ready_s=0.045)]),
        Layer(name="act", forward_s=0.012, backward_s=0.020),
        Layer(name="b", forward_s=0.008, backward_s=0.010,
              params=[ParamTensor(name="b.weight", numel=5000, bytes=20000, grad_ready_s=0.010),
                      ParamTensor(name="b.bias", numel=50, bytes=200, grad_ready_s=0.004)]),
    ]
    base = dict(model="synthetic", batch_size=4, layers=layers, step=StepTimes(data_s=0.002, optimizer_s=0.005))
    base.update(changes)
    return Profile(**base)


def _grad_order(replay) -> tuple[list[int], list[float]]:
    module = replay.module
    x, _ = replay_batch(1)
    module(x).sum().backward()  # warm-up: the first backward starts autograd's machinery
    module.zero_grad(set_to_none=True)
    events: list[tuple[int, float]] = []
    params = list(module.parameters())
    handles = [p.register_post_accumulate_grad_hook(lambda _p, i=i: events.append((i, time.perf_counter())))
               for i, p in enumerate(params)]
    out = module(x)
    start = time.perf_counter()
    out.sum().backward()
    for handle in handles:
        handle.remove()
    return [i for i, _ in events], [t - start for _, t in events]


@pytest.mark.parametrize("name", ["resnet50", "gpt2"])  # resnet50: 212,904 bytes of buffers; gpt2: none
def test_builtin_replay_has_exactly_the_profiled_parameters(name):
    profile = load_profile(name)
    module = build_replay(profile.to_json(), "sleep").module
    assert [p.numel() for p in module.parameters()] == [t.numel for t in profile.tensors]
    assert sum(p.numel() * p.element_size() for p in module.parameters()) == profile.gradient_bytes
    assert module.profile_names == [t.name for t in profile.tensors]
    # the model's buffer bytes too: DDP broadcasts them before every forward, as it does the real model's
    assert sum(b.numel() * b.element_size() for b in module.buffers()) == profile.buffer_bytes
    # one module per profiled layer, owning exactly that layer's tensors (per-layer grouping, PS pulls)
    assert [len(list(layer.parameters(recurse=False))) for layer in module.layers] == \
        [len(layer.params) for layer in profile.layers]


def test_replay_spends_ddps_local_buffer_work_before_every_forward_of_its_wrapper():
    """The replay's one buffer does not cost DDP the real model's local work with its many buffer
    tensors, so it spends the profiled `buffer_sync_s` ahead of every forward of the DDP wrapper."""
    from torch import nn

    profile = _profile(buffer_bytes=1000, buffer_sync_s=0.03)
    replay = build_replay(profile.to_json(), "sleep", calibrate=False)
    net = nn.Sequential(replay.module)  # stands in for the DDP wrapper
    x, _ = replay_batch(1)

    def forward_s() -> float:
        start = time.perf_counter()
        net(x)
        return time.perf_counter() - start

    plain = min(forward_s() for _ in range(3))
    replay.spend_buffer_sync_before(net)
    assert 0.03 * 0.97 <= min(forward_s() for _ in range(3)) - plain <= 0.03 + LATE_S
    # nothing to spend without the profiled time or without buffers
    for changes in ({"buffer_bytes": 1000}, {"buffer_sync_s": 0.03}):
        other = build_replay(_profile(**changes).to_json(), "sleep", calibrate=False)
        wrapper = nn.Sequential(other.module)
        other.spend_buffer_sync_before(wrapper)
        assert not wrapper._forward_pre_hooks


def test_gradients_become_ready_in_the_profiled_order_at_the_profiled_times():
    profile = _profile()
    replay = build_replay(profile.to_json(), "sleep")
    order, ready_s = _grad_order(replay)
    # parameters() order: a.weight (0), b.weight (1), b.bias (2); profiled ready: bias, weight, a.weight
    assert order == [2, 1, 0] == replay.module.ready_order
    for got, want in zip(ready_s, [0.004, 0.010, 0.045]):
        assert want - LATE_S <= got <= want + LATE_S


def test_without_grad_ready_times_tensors_are_ready_when_their_layer_backward_ends():
    layers = [layer.model_copy(update={"params": [t.model_copy(update={"grad_ready_s": None}) for t in layer.params]})
              for layer in _profile().layers]
    replay = build_replay(_profile(layers=layers).to_json(), "sleep")
    order, ready_s = _grad_order(replay)
    assert order[2] == 0 and set(order[:2]) == {1, 2}  # layer b (both tensors) first, then layer a
    assert ready_s[0] == pytest.approx(0.010, abs=LATE_S) and ready_s[2] == pytest.approx(0.045, abs=LATE_S)


def _local_steps(profile: Profile, compute: str, steps: int = 8) -> tuple[list[float], float]:
    """Step times (forward + backward + optimizer) after 2 warm-up steps, and the CPU share, with one
    intra-op thread as every rank runs (`sgdscale.runtime.rank`, --threads 1): with torch's default
    of one per core, an idle OpenMP thread spins between the tiny ops on some hosts (measured on an
    AMD EPYC VM: 0.34-0.38 of the wall time in CPU for a sleeping replay, 0.09 with one thread)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _timed_local_steps(profile, compute, steps)
    finally:
        torch.set_num_threads(previous)


def _timed_local_steps(profile: Profile, compute: str, steps: int) -> tuple[list[float], float]:
    replay = build_replay(profile.to_json(), compute)
    module = replay.module
    x, _ = replay_batch(1)
    wall, cpu = [], []
    for _ in range(steps + 2):
        for p in module.parameters():
            p.grad = None
        start, start_cpu = time.perf_counter(), time.process_time()
        module(x).sum().backward()
        replay.optimizer_step()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return wall[2:], sum(cpu[2:]) / sum(wall[2:])


def test_a_local_replay_step_takes_the_profiled_time():
    """One worker, no communication, the cnn profile (37.7 ms step). Sleep: never early, and the
    fastest step within 10% on a quiet machine (+0.1-0.9% measured, benchmarks/replay_fidelity.py) but within 25% here, because with
    5 busy processes per core every wake-up waits for a CPU (+16% seen); the CPU stays nearly idle.
    Spin burns the CPU: a larger share of its wall time is CPU time than sleep's. Its wall time
    follows the machine's load against its start-up calibration (-18% to +84% in
    benchmarks/results/replay_fidelity.txt, +80% seen in this test under load), so no bound on it
    is asserted here: that is measured, not tested."""
    profile = load_profile("cnn")
    sleep_steps, sleep_cpu = _local_steps(profile, "sleep")
    assert 0.97 * profile.compute_s <= min(sleep_steps) <= 1.25 * profile.compute_s
    assert sleep_cpu < 0.3
    _, spin_cpu = _local_steps(profile, "spin")
    assert spin_cpu > sleep_cpu  # 0.34 vs 0.19 of the wall time here with 5 busy processes per core


@pytest.mark.dist
@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy, extra", [("allreduce", {}), ("allreduce", {"grouping": "per-layer"}),
                                             ("ps-sync", {"ps_count": 1}), ("ps-async", {"ps_count": 2})])
def test_replay_runs_on_the_distributed_runtime(tmp_path, strategy, extra):
    path = tmp_path / "synthetic.json"
    path.write_text(__import__("json").dumps(_profile().to_json()))
    config = replay_config(str(path), workers=2, strategy=strategy, iterations=6, warmup=3, **extra)
    m = run_training(config, timeout_s=150)
    assert m.config.workload == "replay" and m.config.replay_compute == "sleep"
    assert m.config.model == "synthetic" and m.config.batch_size == 4
    profile = _profile()
    step = statistics.median(t for w in m.workers for t in w.iteration_s)
    if strategy == "allreduce":
        # DDP's buckets carry exactly the profiled gradient bytes
        if extra.get("grouping", "buckets") == "buckets":
            assert sum(m.workers[0].extra["ddp_bucket_bytes"]) == profile.gradient_bytes
        # tiny tensors on loopback: the step is the profiled compute plus framework time
        assert profile.compute_s * 0.97 <= step <= profile.compute_s * 1.5
    else:
        assert sum(s.bytes for s in m.servers) == profile.gradient_bytes
        # the PS worker runs no optimizer (the shards update), so no optimizer time is spent
        assert step >= (profile.compute_s - profile.step.optimizer_s) * 0.97
        # the shards spend the profiled optimizer time, each tensor its share, in place of the update:
        # once per step in sync PS, once per worker and step in async PS
        steps = config.warmup + config.iterations
        spent = steps * profile.step.optimizer_s * (1 if strategy == "ps-sync" else config.workers)
        busy = sum(s.busy_s for s in m.servers)
        assert 0.95 * spent <= busy <= 1.5 * spent + 0.02


def test_replay_of_something_that_is_not_a_profile_is_a_user_error():
    with pytest.raises(UserError, match="--replay takes a profile: no profile file or built-in profile named"):
        replay_config("not-a-profile")
    with pytest.raises(UserError, match="does not exist"):
        replay_config("missing/profile.json")


def test_cli_replay_bad_input_exits_2(capsys):
    from sgdscale.cli import main

    for args, message in ((["train", "gpt2", "--replay", "--batch-size", "4"], "profiled batch"),
                          (["train", "mlp", "--replay-compute", "spin"], "add --replay"),
                          (["train", "gpt2", "--replay", "--replay-compute", "burn"], "unknown replay compute"),
                          (["train", "nosuch", "--replay"], "--replay takes a profile")):
        assert main(args) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1


_THIRD_BACKWARD = """
import json, resource, sys
from sgdscale.profile import Layer, ParamTensor, Profile, StepTimes
from sgdscale.runtime.replay import build_replay, replay_batch
big = Layer(name="big", forward_s=0.001, backward_s=0.001,
            params=[ParamTensor(name="big.weight", numel=16 * 2**20, bytes=64 * 2**20)])
profile = Profile(model="synthetic", batch_size=4, layers=[big], step=StepTimes(data_s=0.0, optimizer_s=0.0))
replay = build_replay(profile.to_json(), "sleep", calibrate=False, keep_gradients=sys.argv[1] == "kept")
x, _ = replay_batch(1)
pointers = []
for _ in range(3):
    replay.module.zero_grad(set_to_none=True)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    replay.module(x).sum().backward()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    pointers.append(next(replay.module.parameters()).grad.data_ptr())
print(json.dumps([faults, pointers[1] == pointers[2]]))
"""


def _faults_of_third_backward(keep: bool) -> tuple[int, bool]:
    """Minor page faults of a replay's third backward (one 64 MB tensor), and whether its gradient
    has the second step's storage. In a fresh interpreter, as a worker is: inside the test session a
    fresh gradient can land on heap memory that earlier tests left resident, and fault in nothing."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _THIRD_BACKWARD, "kept" if keep else "fresh"],
                          capture_output=True, text=True, timeout=120, check=True)
    faults, same = json.loads(done.stdout.strip().splitlines()[-1])
    return faults, same


def test_a_replay_worker_reuses_its_gradients_storage_so_no_step_faults_it_in_again():
    """Fresh each step, a 64 MB gradient is a new mapping (glibc maps anything over 32 MB apart) whose
    16,384 pages fault in again: at 0.15 cores vgg16's 411 MB gradient took 1.05 s against 0.26 s
    profiled for its layer (benchmarks/results/gradient_allocation.md). Kept, the third step's
    gradient is the second's storage and faults in almost nothing."""
    faults, same = _faults_of_third_backward(keep=True)
    assert same and faults < 500
    faults, same = _faults_of_third_backward(keep=False)
    assert faults > 16_000
