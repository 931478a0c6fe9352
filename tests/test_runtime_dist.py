"""Real distributed SGD with 2 workers on a tiny MLP: every strategy completes with a well-formed
measurement, the updates are real (synchronous) SGD, and crashed or hung workers stop the run."""

import time
from pathlib import Path

import pytest
import torch

from sgdscale.errors import UserError
from sgdscale.profiling.profiler import MOMENTUM
from sgdscale.runtime.train import TrainConfig, run_training
from sgdscale.runtime.worker import build

pytestmark = [pytest.mark.dist, pytest.mark.timeout(120)]

TINY = {"width": 32, "depth": 2, "input_dim": 16}


def _config(**changes) -> TrainConfig:
    base = dict(model="mlp", workers=2, batch_size=8, iterations=4, warmup=2, model_options=dict(TINY))
    base.update(changes)
    return TrainConfig(**base)


@pytest.mark.parametrize(
    "strategy, extra",
    [("allreduce", {}), ("allreduce", {"grouping": "per-layer"}), ("ps-sync", {"ps_count": 2}),
     ("ps-async", {"ps_count": 1})],
)
def test_strategy_yields_well_formed_measurement(strategy, extra):
    seen: list[tuple[int, int]] = []
    m = run_training(_config(strategy=strategy, **extra), timeout_s=90,
                     on_progress=lambda done, total: seen.append((done, total)))
    assert m.throughput > 0 and m.iteration_s.mean > 0
    assert [w.rank for w in m.workers] == [0, 1]
    for worker in m.workers:
        assert len(worker.iteration_s) == 4  # warm-up (2) excluded
        assert len(worker.iteration_start_s) == 4
        assert all(b > a for a, b in zip(worker.iteration_start_s, worker.iteration_start_s[1:]))
    assert m.config.warmup == 2 and m.config.iterations == 4
    if strategy.startswith("ps"):
        assert len(m.servers) == extra["ps_count"]
        # 6 tensors, every worker's gradient of every tensor applied once per iteration
        assert sum(s.updates for s in m.servers) == 6 * 2 * 6
        assert sorted(t for s in m.servers for t in s.tensors) == sorted(
            n for n, _ in build(vars(_config()), None).workload.module.named_parameters())
        for worker in m.workers:
            assert worker.compute_s is not None and worker.wait_s is not None
    else:
        assert m.servers == []
    if extra.get("grouping", "buckets") == "buckets" and strategy == "allreduce":
        # DDP's rebuilt buckets cover every gradient byte of the tiny MLP (16*32+32+32*32+32+32*10+10 floats)
        assert sum(m.workers[0].extra["ddp_bucket_bytes"]) == 1930 * 4
    if seen:
        assert seen[-1][1] == 6 and all(done <= total for done, total in seen)


@pytest.mark.parametrize("strategy, extra", [("allreduce", {}), ("ps-async", {"ps_count": 1})])
def test_a_real_run_times_its_own_compute_reference_around_the_window(strategy, extra):
    """`reference_steps` plain steps of a private copy of the model (half before the window, half
    after), on every worker, beside the measured window; the trained parameters are those of a run
    without them."""
    m = run_training(_config(strategy=strategy, reference_steps=5, return_params=True, **extra), timeout_s=90)
    plain = run_training(_config(strategy=strategy, return_params=True, **extra), timeout_s=90)
    if strategy == "allreduce":  # async PS: workers interleave differently from run to run
        assert m.workers[0].extra["params"] == plain.workers[0].extra["params"]
    for worker in m.workers:
        steps = worker.extra["reference_step_s"]
        assert len(steps) == 5 and all(0 < s < 1.0 for s in steps)
        assert len(worker.iteration_s) == 4
    from sgdscale.validation import reference_step_s

    assert reference_step_s(m) > 0 and reference_step_s(plain) is None


def _reference_steps(config: TrainConfig) -> list[torch.Tensor]:
    """`config.iterations` single-process steps of SGD with the profiler's momentum on the gradient
    averaged over the workers' batches of each iteration."""
    module = build(vars(config), None).workload.module
    loss_fn = build(vars(config), None).workload.loss_fn
    optimizer = torch.optim.SGD(module.parameters(), lr=config.lr, momentum=MOMENTUM)
    for iteration in range(config.iterations):
        grads = None
        for worker in range(config.workers):
            module.zero_grad()
            inputs, targets = build(vars(config), worker).batch(iteration)
            loss_fn(module(inputs), targets).backward()
            step = [p.grad.clone() for p in module.parameters()]
            grads = step if grads is None else [g + s for g, s in zip(grads, step)]
        for p, g in zip(module.parameters(), grads):
            p.grad = g / config.workers
        optimizer.step()
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize(
    "strategy, extra",
    [("ps-sync", {"ps_count": 2}), ("allreduce", {"grouping": "single"}),
     ("allreduce", {"grouping": "per-tensor"}), ("allreduce", {"grouping": "buckets"})],
)
def test_steps_equal_momentum_sgd_on_averaged_gradient(strategy, extra):
    """Two steps, so the momentum the profile's optimizer_s timed is in the update too."""
    config = _config(strategy=strategy, warmup=0, iterations=2, lr=0.5, return_params=True, **extra)
    expected = _reference_steps(config)
    initial = [p.detach().clone() for p in build(vars(config), None).workload.module.parameters()]
    m = run_training(config, timeout_s=90)
    for worker in m.workers:
        got = worker.extra["params"]
        for want, start, values in zip(expected, initial, got):
            tensor = torch.tensor(values).reshape(want.shape)
            assert not torch.allclose(tensor, start)  # it moved
            torch.testing.assert_close(tensor, want, rtol=1e-5, atol=1e-6)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("strategy, extra", [("allreduce", {}), ("ps-sync", {"ps_count": 1})])
def test_worker_exiting_mid_run_stops_everything(strategy, extra):
    pids: list[int] = []
    start = time.monotonic()
    with pytest.raises(UserError) as caught:
        run_training(_config(strategy=strategy, iterations=50, fault={"rank": 1, "iteration": 2, "kind": "exit"},
                             **extra), timeout_s=60, on_spawn=pids.extend)
    assert time.monotonic() - start < 40
    assert str(caught.value).startswith("rank 1 exited with status 3")
    assert pids and not any(_alive(p) for p in pids)


def test_hanging_worker_hits_the_timeout():
    pids: list[int] = []
    start = time.monotonic()
    with pytest.raises(UserError) as caught:
        run_training(_config(iterations=50, fault={"rank": 1, "iteration": 2, "kind": "hang"}),
                     timeout_s=12, on_spawn=pids.extend)
    assert 12 <= time.monotonic() - start < 40
    message = str(caught.value)
    assert "did not finish within 12 s" in message and "rank 1 after 2 iterations" in message
    assert not any(_alive(p) for p in pids)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"workers": 0}, "--workers must be at least 1"),
        ({"strategy": "gossip"}, "unknown strategy 'gossip'"),
        ({"strategy": "ps-sync", "ps_count": 0}, "needs at least one parameter-server shard"),
        ({"strategy": "ps-sync", "ps_count": 7}, "more shards than mlp has parameter tensors \\(6\\)"),
        ({"grouping": "ring"}, "unknown grouping 'ring'"),
        ({"bandwidth_bps": -5.0}, "bandwidth must be positive"),
        ({"model": "nonet"}, "unknown model 'nonet'"),
    ],
)
def test_bad_input_is_a_user_error(changes, message):
    with pytest.raises(UserError, match=message):
        run_training(_config(**changes), timeout_s=10)


def test_cli_train_writes_measurement_and_prints_table(tmp_path, capsys):
    from sgdscale.cli import main
    from sgdscale.runtime.measurement import load_measurement

    out = tmp_path / "m.json"
    code = main(["train", "mlp", "--workers", "2", "--strategy", "ps-sync", "--ps", "2", "--iterations", "3",
                 "--warmup", "1", "--batch-size", "4", "--option", "width=32", "--option", "depth=2",
                 "--timeout", "90s", "-o", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "samples/s" in printed and "PS 2" in printed and "PS 3" in printed
    m = load_measurement(out)
    assert m.config.ps_count == 2 and len(m.workers[1].iteration_s) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workers", "0"], "--workers must be at least 1"),
        (["--strategy", "ps-sync", "--ps", "0"], "at least one parameter-server shard"),
        (["--grouping", "per-layer", "--bucket-mb", "5"], "--bucket-mb applies to --grouping buckets"),
        (["--timeout", "soon"], "cannot read timeout"),
        (["--option", "width"], "KEY=VALUE"),
    ],
)
def test_cli_bad_input_exits_2(args, message, capsys):
    from sgdscale.cli import main

    assert main(["train", "mlp", *args]) == 2
    assert message in capsys.readouterr().err


def test_torchrun_launch_leaves_the_measurement_in_rank0_result(tmp_path):
    """The documented real-cluster path: --write-config, then torchrun on the rank entry point."""
    import subprocess
    import sys

    from sgdscale.cli import main
    from sgdscale.runtime.measurement import load_measurement

    config = tmp_path / "run.json"
    assert main(["train", "mlp", "--workers", "2", "--iterations", "2", "--warmup", "1", "--batch-size", "4",
                 "--option", "width=32", "--write-config", str(config)]) == 0
    torchrun = Path(sys.executable).parent / "torchrun"
    done = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "sgdscale.runtime.rank",
         "--target", "sgdscale.runtime.train:train_rank", "--config", str(config), "--out", str(tmp_path / "res")],
        capture_output=True, text=True, timeout=100,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    m = load_measurement(tmp_path / "res" / "result-0.json")
    assert m.config.workers == 2 and m.config.grouping == "buckets" and m.throughput > 0
