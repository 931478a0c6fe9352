"""Parameter server on gloo point-to-point (isend/irecv), synchronous or asynchronous.

Ranks: workers are ranks 0..N-1, server shards are ranks N..N+S-1. Parameter tensors (in
`module.parameters()` order) go to shards by `sgdscale.placement` (round-robin or by size), the
rule the predictors use. Messages between a worker and a shard carry tag i, so gloo matches them per tensor, in order.

Worker step (both modes): forward, where each module's forward pre-hook first waits for the
pulled values of that module's own parameters (so pulls overlap the forward of earlier layers);
backward, where a post-accumulate-grad hook pushes each gradient to its shard the moment it is
ready (isend, overlapping the rest of backward); then it posts the receives for the next pull
and the step ends. The worker runs no optimizer: the shards update. Recorded per iteration:
`wait_s` (pull waits inside forward + waiting for the previous pushes to leave), `compute_s`
(forward + backward minus `wait_s`); `forward_s` includes the pull waits.

Synchronous shard: per iteration, receive every worker's gradient of each of its tensors
(visited in the order backward makes them ready, found by one local backward at start), average
them, apply SGD with momentum (`v = m * v + mean(g); p -= lr * v`: the update whose time the
profile's `optimizer_s` holds, `sgdscale.profiling.profiler.MOMENTUM`), and send the new value to
every worker. Workers therefore all start iteration k+1 from the same parameters: this is
synchronous SGD on the averaged gradient.

Traced runs (`config["trace"]`, worker.EventRecorder): a worker timestamps each pull wait inside
forward ("wait for parameters"), its wait for the previous pushes, and the moment each push is
posted (gloo's send/recv work has no completion callback, so a push's end is not observed there);
a shard timestamps each update and its wait for each gradient: a sync shard waits worker by worker,
so the end of "wait for worker w" is when w's gradient was in (or the previous wait ended, if it
was in earlier: then the slice is ~0 long), the nearest the runtime sees to a push's completion.
Untraced runs install none of it.

Asynchronous shard: one thread per worker, no barrier; each gradient tensor is applied on
arrival (`v = m * v + g; p -= lr * v`, under a lock per shard) and the fresh value goes straight back to the
worker that sent it. Workers may compute on stale parameters, as in async SGD.

A replay's shard (`setup.replay`) spends its tensors' share of the profiled `optimizer_s` (slept
or spun, as the replay's compute) instead of summing and updating, as a replay worker spends it
instead of running its optimizer: the built-in profiles time the update on a whole core, and the
real update under a node's CPU quota takes about 1/quota times as long as the prediction was told
(`benchmarks/shard_update_cost.py`: resnet18's, 18-22 ms of CPU against the profile's 24 ms, is
some 90 ms of a 0.23-core node).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from sgdscale.placement import place_tensors
from sgdscale.profiling.profiler import MOMENTUM
from sgdscale.runtime.rank import RankContext, run_threads
from sgdscale.runtime.worker import (
    ComputeReference,
    EventRecorder,
    IterationLog,
    Setup,
    clock,
    maybe_fault,
    recorder_for,
)


def _placement(params: list[torch.Tensor], config: dict[str, Any]) -> list[int]:
    sizes = [p.numel() * p.element_size() for p in params]
    return place_tensors(sizes, config["ps_count"], config.get("ps_placement", "round-robin"))


def run_worker(ctx: RankContext, setup: Setup) -> dict[str, Any]:
    config = ctx.config
    workers = config["workers"]
    module = setup.workload.module
    loss_fn = setup.workload.loss_fn
    params = list(module.parameters())
    server = [workers + shard for shard in _placement(params, config)]
    index_of = {id(p): i for i, p in enumerate(params)}
    pulls: dict[int, Any] = {}
    pushes: list[Any] = []
    waited = [0.0]
    recorder = recorder_for(config)
    reference = ComputeReference(setup, config)  # a copy of the plain model, before the hooks below

    def wait_pull_untraced(indices: list[int]) -> None:
        for i in indices:
            work = pulls.pop(i, None)
            if work is not None:
                t = time.perf_counter()
                work.wait()
                waited[0] += time.perf_counter() - t

    def wait_pull_traced(indices: list[int]) -> None:
        for i in indices:
            work = pulls.pop(i, None)
            if work is not None:
                t = time.perf_counter()
                work.wait()
                end = time.perf_counter()
                waited[0] += end - t
                recorder.add("wait", "wait for parameters", t, end, {"tensor": i})

    wait_pull = wait_pull_untraced if recorder is None else wait_pull_traced  # chosen once, not at every wait

    for submodule in module.modules():
        own = [index_of[id(p)] for p in submodule.parameters(recurse=False) if id(p) in index_of]
        if own:
            submodule.register_forward_pre_hook(lambda _m, _inputs, own=own: wait_pull(own))

    def push_hook(i: int):
        def hook(p: torch.Tensor) -> None:
            pushes.append(dist.isend(p.grad, dst=server[i], tag=i))

        def hook_traced(p: torch.Tensor) -> None:
            t = time.perf_counter()
            pushes.append(dist.isend(p.grad, dst=server[i], tag=i))
            recorder.add("push", f"push tensor {i}", t, t, {"shard": server[i] - workers,
                                                             "bytes": p.grad.numel() * p.grad.element_size()})

        return hook if recorder is None else hook_traced

    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(push_hook(i))

    def post_pulls() -> None:
        for i, p in enumerate(params):
            pulls[i] = dist.irecv(p.data, src=server[i], tag=i)

    total = config["warmup"] + config["iterations"]
    log = IterationLog()
    reference.run(reference.before)
    dist.barrier()
    post_pulls()  # the shards send the initial parameters
    for iteration in range(total):
        maybe_fault(config, ctx.rank, iteration)
        start_unix, t0 = clock()
        waited[0] = 0.0
        for work in pushes:  # previous gradients must be on their way out before .grad is freed
            t = time.perf_counter()
            work.wait()
            waited[0] += time.perf_counter() - t
        if recorder is not None:
            recorder.begin(iteration, start_unix, t0)
            recorder.add("wait", "wait for pushes", t0, time.perf_counter())
        pushes.clear()
        for p in params:
            p.grad = None
        inputs, targets = setup.batch(iteration)
        outputs = module(inputs)
        wait_pull(list(pulls))  # parameters this forward did not touch: drain their receives too
        loss = loss_fn(outputs, targets)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        post_pulls()
        t3 = time.perf_counter()
        forward = t1 - t0
        log.add(
            start_unix, t3 - t0, forward_s=forward, backward_s=t2 - t1, wait_s=waited[0],
            compute_s=(t2 - t0) - waited[0],
        )
        ctx.report_progress(iteration + 1)
    # Final pull: the model after the last update (not part of any measured iteration).
    wait_pull(list(pulls))
    for work in pushes:
        work.wait()
    reference.run(reference.after)  # the shards are done with this worker: no traffic left to slow it
    extra: dict[str, Any] = {}
    reference.record(extra)
    if config.get("return_params"):
        extra["params"] = [p.detach().flatten().tolist() for p in params]
    if setup.replay is not None:
        extra.update(setup.replay.record())
    record = log.record(ctx.rank, config["warmup"], extra or None)
    if recorder is not None:
        record["events"] = recorder.record(config["warmup"])
    return record


def gradient_ready_order(setup: Setup) -> list[int]:
    """Parameter indices in the order backward makes their gradients ready (one local step on a
    2-sample batch; mostly reverse order, but e.g. a BatchNorm's bias comes before its weight).
    A replay knows it from the profile (and one local step would cost a whole profiled step)."""
    if setup.replay is not None:
        return list(setup.replay.module.ready_order)
    module = setup.workload.module
    params = list(module.parameters())
    order: list[int] = []
    handles = [p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i)) for i, p in enumerate(params)]
    inputs, targets = setup.workload.make_batch(2)
    setup.workload.loss_fn(module(inputs), targets).backward()
    for handle in handles:
        handle.remove()
    module.zero_grad(set_to_none=True)
    seen = set(order)
    return order + [i for i in reversed(range(len(params))) if i not in seen]


def run_server(ctx: RankContext, setup: Setup) -> dict[str, Any]:
    config = ctx.config
    workers = config["workers"]
    shard = ctx.rank - workers
    named = list(setup.workload.module.named_parameters())
    shards = _placement([p for _, p in named], config)
    mine = [i for i in range(len(named)) if shards[i] == shard]
    values = {i: named[i][1].detach().clone() for i in mine}
    own = set(mine)
    mine = [i for i in gradient_ready_order(setup) if i in own]  # the order gradients will arrive
    total = config["warmup"] + config["iterations"]
    lr = config["lr"]
    stats = {"busy_s": 0.0, "updates": 0}
    recorder = recorder_for(config)
    replay_update = _replay_update(setup, values)

    dist.barrier()
    t_start = time.perf_counter()
    initial = [dist.isend(values[i], dst=w, tag=i) for i in mine for w in range(workers)]
    for work in initial:
        work.wait()
    if config["strategy"] == "ps-sync":
        _serve_sync(values, mine, workers, total, lr, stats, ctx.report_progress, recorder, replay_update)
    else:
        _serve_async(values, mine, workers, total, lr, stats, ctx.report_progress, recorder, replay_update)
    events = {} if recorder is None else {"events": recorder.record(config["warmup"])}
    return {
        **events,
        "rank": ctx.rank,
        "shard": shard,
        "tensors": [named[i][0] for i in mine],
        "bytes": int(sum(values[i].numel() * values[i].element_size() for i in mine)),
        "updates": stats["updates"],
        "busy_s": stats["busy_s"],
        "wall_s": time.perf_counter() - t_start,
    }


def _replay_update(setup: Setup, values: dict[int, torch.Tensor]) -> Callable[[int], None] | None:
    """For a replay's shard: spend tensor i's share of the profiled optimizer time (None otherwise)."""
    if setup.replay is None:
        return None
    profile, spender = setup.replay.profile, setup.replay.spender  # a shard's: no overhead calibrated
    per_byte_s = profile.step.optimizer_s / profile.gradient_bytes if profile.gradient_bytes else 0.0

    def spend(i: int) -> None:
        spender.spend(per_byte_s * values[i].numel() * values[i].element_size(), time.perf_counter())

    return spend


def _serve_sync(values: dict[int, torch.Tensor], mine: list[int], workers: int, total: int, lr: float,
                stats: dict[str, Any], report_progress: Callable[[int], None],
                recorder: EventRecorder | None = None, replay_update: Callable[[int], None] | None = None) -> None:
    grads = {(w, i): torch.empty_like(values[i]) for w in range(workers) for i in mine}
    velocity = {i: torch.zeros_like(values[i]) for i in mine}
    order = mine  # already in gradient-ready order
    for iteration in range(total):
        if recorder is not None:
            recorder.begin(iteration, *clock())
        recvs = {(w, i): dist.irecv(grads[w, i], src=w, tag=i) for i in order for w in range(workers)}
        replies = []
        for i in order:
            if recorder is None:
                for w in range(workers):
                    recvs[w, i].wait()
            else:
                for w in range(workers):  # worker by worker: a gradient that was already in shows as ~0
                    waiting = time.perf_counter()
                    recvs[w, i].wait()
                    recorder.add("receive", f"wait for worker {w}", waiting, time.perf_counter(),
                                 {"tensor": i, "worker": w})
            t = time.perf_counter()
            if replay_update is not None:
                replay_update(i)
                reply = values[i]  # never changes
            else:
                summed = grads[0, i].clone()
                for w in range(1, workers):
                    summed.add_(grads[w, i])
                velocity[i].mul_(MOMENTUM).add_(summed, alpha=1.0 / workers)
                values[i].add_(velocity[i], alpha=-lr)
                reply = values[i].clone()  # the value stays intact while the sends are in flight
            done = time.perf_counter()
            stats["busy_s"] += done - t
            stats["updates"] += workers
            if recorder is not None:
                recorder.add("update", f"update tensor {i}", t, done, {"tensor": i})
            replies += [dist.isend(reply, dst=w, tag=i) for w in range(workers)]
        for work in replies:
            work.wait()
        report_progress(iteration + 1)


def _serve_async(values: dict[int, torch.Tensor], mine: list[int], workers: int, total: int, lr: float,
                 stats: dict[str, Any], report_progress: Callable[[int], None],
                 recorder: EventRecorder | None = None, replay_update: Callable[[int], None] | None = None) -> None:
    lock = threading.Lock()
    velocity = {i: torch.zeros_like(values[i]) for i in mine}
    served = [0] * workers  # iterations served per worker; progress = the slowest worker's count
    order = mine  # already in gradient-ready order

    def serve(w: int) -> None:
        grads = {i: torch.empty_like(values[i]) for i in mine}
        for iteration in range(total):
            recvs = {i: dist.irecv(grads[i], src=w, tag=i) for i in order}
            replies = []
            for i in order:
                waiting = time.perf_counter() if recorder is not None else 0.0
                recvs[i].wait()
                if recorder is not None:
                    recorder.add(f"from worker {w}", "wait for gradients", waiting, time.perf_counter(),
                                 {"tensor": i, "worker": w}, iteration=iteration)
                with lock:
                    t = time.perf_counter()
                    if replay_update is not None:
                        replay_update(i)
                        reply = values[i]  # never changes
                    else:
                        velocity[i].mul_(MOMENTUM).add_(grads[i])
                        values[i].add_(velocity[i], alpha=-lr)
                        reply = values[i].clone()
                    done = time.perf_counter()
                    stats["busy_s"] += done - t
                    stats["updates"] += 1
                if recorder is not None:  # the worker's iteration: this thread serves one worker
                    recorder.add(f"from worker {w}", f"update tensor {i}", t, done, {"tensor": i, "worker": w},
                                 iteration=iteration)
                replies.append(dist.isend(reply, dst=w, tag=i))
            for work in replies:
                work.wait()
            with lock:
                served[w] += 1
                report_progress(min(served))

    run_threads(serve, workers, "ps-worker")
