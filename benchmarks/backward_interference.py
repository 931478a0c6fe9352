"""How much a real model's backward slows while an all-reduce runs, against netbench's compute loop.

Both methods slow compute by the network file's `interference.compute_slowdown` while a collective
is in flight: `sgdscale netbench --ops overlap` measures it with a fixed loop of convolutions and
matrix products. Held-out set 16's real all-reduce cases (mobilenet_v2, resnet18; 1.3 Gbit/s,
0.48 cores) are predicted 6-10% too fast, and the same mobilenet_v2 case at 5 Gbit/s within 2%
(`benchmarks/results/realcompute_fast_link/`): the miss follows the time compute shares the quota
with communication. This measures, on set 16's kind of cluster, each model's own backward alone and
while an all-reduce of netbench's size (16 MB, long enough to outlast it) is in flight on every
rank, interleaved per repeat; then re-predicts set 16's kept runs of that model with its own
slowdown in place of netbench's (a diagnosis: nothing in the package changes). It also times the
backward under DDP with a comm hook that returns each bucket at once: DDP's own work without
communication. DDP makes both of its copies inside `loss.backward()` (each gradient into its bucket,
and each reduced bucket back into the gradients in the final autograd callback, before backward
returns), so that time holds two copies per gradient byte and its autograd hooks; the models charge
netbench's copy rate for each of the two copies. The re-prediction with DDP's measured work
therefore sets each copy to half of it. (A first version of this script set each copy to the whole
of it, which counted DDP's work twice, and concluded that it explained most of the miss.)

    .venv/bin/python benchmarks/backward_interference.py [--models mobilenet_v2,resnet18] [--repeats 15]
Raw output: benchmarks/results/backward_interference.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
SET = "heldout16"
WORKERS, BANDWIDTH_BPS, QUOTA = 3, 1.3e9, 0.48
OVERLAP_BYTES = 16_000_000  # netbench's overlap size
WARMUP = 3


def gradient_bytes(model: str) -> int:
    from sgdscale.profiling.zoo import build_workload

    return sum(p.numel() * p.element_size() for p in build_workload(model, image_size=32).module.parameters())


def rank(ctx) -> dict:
    """Rank target: backward alone, then backward with an all-reduce in flight, per repeat."""
    import torch
    import torch.distributed as dist

    from sgdscale.profiling.zoo import build_workload

    torch.set_num_threads(1)
    workload = build_workload(ctx.config["model"], image_size=32)
    inputs, targets = workload.make_batch(4)
    tensor = torch.zeros(OVERLAP_BYTES // 4)
    alone, overlapped, outlasted = [], [], 0
    for repeat in range(WARMUP + ctx.config["repeats"]):
        dist.barrier()
        loss = workload.loss_fn(workload.module(inputs), targets)
        began = time.perf_counter()
        loss.backward()
        alone_s = time.perf_counter() - began
        workload.module.zero_grad(set_to_none=True)

        loss = workload.loss_fn(workload.module(inputs), targets)
        dist.barrier()
        work = dist.all_reduce(tensor, async_op=True)
        began = time.perf_counter()
        loss.backward()
        overlap_s = time.perf_counter() - began
        still_running = not work.is_completed()
        work.wait()
        workload.module.zero_grad(set_to_none=True)
        if repeat >= WARMUP:
            alone.append(alone_s)
            overlapped.append(overlap_s)
            outlasted += still_running
    # DDP's own work in backward (its autograd hooks, the copies into buckets and back) without communication:
    # a comm hook that hands each bucket back at once
    from torch.nn.parallel import DistributedDataParallel

    def no_communication(_state, bucket):
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    net = DistributedDataParallel(workload.module, broadcast_buffers=False)
    net.register_comm_hook(None, no_communication)
    ddp = []
    for repeat in range(WARMUP + ctx.config["repeats"]):
        loss = workload.loss_fn(net(inputs), targets)
        began = time.perf_counter()
        loss.backward()
        if repeat >= WARMUP:
            ddp.append(time.perf_counter() - began)
        net.zero_grad(set_to_none=True)
    return {"rank": ctx.rank, "alone_s": alone, "overlap_s": overlapped, "outlasted": outlasted, "ddp_s": ddp}


def repredict_with(model: str, compute_slowdown: float | None = None, copy_s_per_byte: float | None = None) -> list[str]:
    """Set 16's kept runs of `model`, re-predicted (fine and coarse) with this compute slowdown and/or
    this cost per gradient byte of DDP's copies in place of the network file's."""
    from repredict_sets import current, kept_cases

    from sgdscale.comm.interference import Interference
    from sgdscale.validation import Validator

    original = Validator.case_inputs

    def patched(self, case, round_index=0):
        profile, cluster, strategy, comm, variability = original(self, case, round_index)
        if compute_slowdown is not None:
            comm = dataclasses.replace(comm, interference=Interference(compute_slowdown,
                                                                       comm.interference.comm_slowdown))
        if copy_s_per_byte is not None:
            comm = dataclasses.replace(comm, copy_s_per_byte=copy_s_per_byte)
        return profile, cluster, strategy, comm, variability

    lines = []
    for _set, validator, case, runs, measured in kept_cases([SET], {"allreduce"}):
        if case.spec.kind != "real" or case.spec.model != model:
            continue
        with mock.patch.object(Validator, "case_inputs", patched):
            predicted = [current(validator, case, run.get("round", 0), ["fine", "coarse"]) for run in runs]
        fine, coarse = (statistics.median(p[m] for p in predicted) / measured - 1 for m in ("fine", "coarse"))
        lines.append(f"| {case.key} | {measured:.1f} | {fine:+.1%} | {coarse:+.1%} |")
    return lines


def main(argv: list[str]) -> int:
    from sgdscale.runtime.launch import launch
    from sgdscale.runtime.testbed import Testbed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet18")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    network = next((HERE / "results" / f"accuracy-{SET}" / "networks").glob("*.json"))
    netbench = json.loads(network.read_text())["interference"]["compute_slowdown"]
    lines = [f"# A model's own backward slowed by an all-reduce, against netbench's loop ({WORKERS} workers, "
             f"{BANDWIDTH_BPS / 1e9:g} Gbit/s, {QUOTA:g} cores per node: held-out set 16's cluster)", "",
             "Generated by `benchmarks/backward_interference.py " + " ".join(argv) + "`.", "",
             f"netbench's compute slowdown in set 16's network file: {netbench:.2f}", "",
             "| model | backward alone, ms (median over ranks and repeats) | with a 16 MB all-reduce in flight, ms | "
             "slowdown | repeats the all-reduce outlasted | under DDP without communication, ms |",
             "|---|---:|---:|---:|---:|---:|"]
    slowdowns: dict[str, float] = {}
    per_byte: dict[str, float] = {}
    copy_rate = json.loads(network.read_text())["bucket_copy"]["beta_s_per_byte"]
    with Testbed(WORKERS, BANDWIDTH_BPS, QUOTA, pin_cpus=True) as testbed:
        for model in args.models.split(","):
            result = launch("backward_interference:rank", {"model": model, "repeats": args.repeats}, WORKERS,
                            placement=testbed, env={"PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}, timeout_s=900)
            alone = statistics.median(s for r in result.results for s in r["alone_s"])
            overlap = statistics.median(s for r in result.results for s in r["overlap_s"])
            outlasted = sum(r["outlasted"] for r in result.results)
            slowdowns[model] = overlap / alone
            ddp_s = statistics.median(s for r in result.results for s in r["ddp_s"])
            per_byte[model] = (ddp_s - alone) / gradient_bytes(model)
            lines.append(f"| {model} | {alone * 1e3:.1f} | {overlap * 1e3:.1f} | {overlap / alone:.2f} | "
                         f"{outlasted} of {WORKERS * args.repeats} | {ddp_s * 1e3:.1f} ({per_byte[model] * 1e9:.2f} "
                         "ns per gradient byte) |")
            print(lines[-1], flush=True)
    header = ["", "| case | measured (samples/s) | fine | coarse |", "|---|---:|---:|---:|"]
    lines += ["", f"Set 16's kept runs re-predicted with each model's own slowdown (recorded: netbench's {netbench:.2f}):",
              *header]
    for model, slowdown in slowdowns.items():
        lines += repredict_with(model, compute_slowdown=slowdown)
    lines += ["", "DDP's work holds two copies per gradient byte (into the bucket and back); the models charge "
              f"netbench's copy rate for each: {2 * copy_rate * 1e9:.2f} ns per gradient byte in all.", "",
              "Set 16's kept runs re-predicted with each copy at half of each model's measured DDP work per byte "
              f"(recorded: netbench's copy, {copy_rate * 1e9:.2f} ns per byte per copy), netbench's slowdown:",
              *header]
    for model, rate in per_byte.items():
        lines += repredict_with(model, copy_s_per_byte=rate / 2)
    text = "\n".join(lines) + "\n"
    print(text)
    (HERE / "results" / "backward_interference.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
