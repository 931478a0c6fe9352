"""Network benchmark: point-to-point and all-reduce time against message size, fitted to alpha-beta.

What is measured (gloo, CPU tensors, float32 payloads):
- p2p: rank 0 sends M bytes to rank 1, which sends them back; one sample is half the round trip.
  Ranks other than 0 and 1 only join the barriers.
- allreduce: `dist.all_reduce` of M bytes on all N ranks; one sample is the slowest rank's time
  from a common barrier to the end of its all-reduce.
- incast: ranks 1..N-1 each send M bytes to rank 0 at once (what parameter-server pushes do to a
  server); one sample is rank 0's time from the barrier until it has all (N-1)*M bytes. Many TCP
  flows converging on one shaped link reach less than one flow does, and this measures how much.
  Rank 0 also records when each sender's message completed (one waiting thread each): the spread says how unequally the flows shared the link (`sgdscale.comm.network.Sharing`).
  `incast_sizes` in the config (default: `sizes`) runs incast on fewer sizes.
- outcast: how flows out of one node share its link (a shard's pulls). With 3 or more processes,
  rank 0 sends M bytes (the largest size, or `outcast_bytes`) to rank 1 alone, then to ranks 1 and 2
  with the second flow starting a head start of OUTCAST_HEAD_START of the lone flow's time after the
  first, then to both at once. Each receiver acknowledges with a 4-byte message; rank 0 times the
  acknowledgements from its start (one waiting thread each, as for incast), on its own clock only.
  From the first flow's finish t1, the head start d and the lone flow's time L, the newcomer's weight
  while both moved is (t1 - d) / (L - d) - 1 (`Outcast`; 0: the first flow keeps the link, 1: equal
  sharing); started together, the first done over the second says how unequally they split.
- overlap: compute/communication interference. Every rank runs a fixed compute loop (convolution
  and matrix products, like backward) alone, then while an all-reduce of the largest size is in
  flight; and the all-reduce alone, then while the compute loop runs in a second thread. One
  sample each per repeat; `InterferenceFit` keeps the ratios of the medians
  (docs/interference.md).
- messages (with p2p, ranks 0 and 1): the CPU a message costs apart from its bytes, as a parameter
  server's pushes and pulls come (one isend or irecv per tensor): rank 0 posts MESSAGE_BURST isends
  of MESSAGE_BYTES each to rank 1, which posts as many irecvs, both wait for all; then the other
  way. Each rank's CPU time over the burst / MESSAGE_BURST is one sample per direction
  (`CpuCost.message_s`: the median over both ranks and directions). Then the same messages alone:
  the sender computes MESSAGE_GAP_S (a matrix-product loop, its thread's CPU time) before each of
  MESSAGE_ALONE isends while the receiver waits on its posted irecvs, and once more without the
  messages; the CPU difference per message, less the burst figure, is what a message pays for
  coming alone after compute (`CpuCost.message_wakeup_s`, sgdscale.message_cpu.wakeup_weights):
  gloo's thread wakes for it alone and runs on caches the compute has cooled.
- send lead (with p2p, ranks 0 and 1): how long before its bytes arrive a send completes. Rank 1 posts
  its receive of the largest size (or `send_lead_bytes`), rank 0 its receive of a 4-byte
  acknowledgement, then sends; rank 1 acknowledges once it has every byte. On rank 0's clock, the
  acknowledgement's arrival less the send's completion, less the p2p startup, is the lead
  (`SendLead`): gloo completes a send once its last byte is in the socket, so it is what the
  sender's socket and the queues between the nodes hold then. A sync PS shard posts its next step's
  receives that early (recorded; `sgdscale.fine.ps.POSTS_AHEAD_BY_SEND_LEAD` says why it is not used).
Every timed p2p and all-reduce repeat also records the rank's CPU time (getrusage: user + system,
gloo's threads included), from which the CPU cost per byte is fitted (`CpuCost`).
Each size gets `warmup` discarded repeats, then `repeats` kept ones; the fit (least squares,
`sgdscale.comm.network.fit_alpha_beta`) uses the median per size. The result is a
`sgdscale.network/1` file (`sgdscale.comm.network.Network`).

Where it runs:
- this machine (loopback): `run_netbench(workers=[2])`;
- the emulated cluster: pass a `Testbed` as `placement` (rank r on node r);
- a real cluster: write the rank config (`bench_config`), start the rank target with torchrun on
  every machine, then fit the ranks' result files with `collect_results`:

      sgdscale netbench --write-config nb.json --workers 4
      torchrun --nnodes 4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
          -m sgdscale.runtime.rank --target sgdscale.runtime.netbench:bench_rank \\
          --config nb.json --out nbresults
      sgdscale netbench --collect nbresults -o net.json     (on the machine running rank 0)
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sgdscale.comm.network import (AlphaBeta, BenchPoint, CpuCost, InterferenceFit, Network, Outcast, SendLead,
                                   fit_alpha_beta, sharing_from_points, startup_s)
from sgdscale.errors import UserError
from sgdscale.hostinfo import QUIET_STEAL_CORES, wait_for_quiet_host

BENCH_TARGET = "sgdscale.runtime.netbench:bench_rank"
OPS = ("p2p", "allreduce", "incast", "outcast", "overlap")
POINT_OPS = ("p2p", "allreduce", "incast")
OVERLAP_UNITS = 8  # compute-loop units per "alone" sample
OUTCAST_HEAD_START = 0.3  # the second flow starts this fraction of a lone flow's time after the first
OUTCAST_MIN_WEIGHT = 0.01  # a newcomer that got nothing measurable still moves eventually
ELEMENT_BYTES = 4  # float32
MESSAGE_BURST = 128  # messages per burst of the per-message CPU measurement (mobilenet_v2 has 158 tensors)
MESSAGE_BYTES = 4  # one float: the per-byte cost is p2p's
MESSAGE_ALONE = 16  # messages per direction of the messages-alone measurement
MESSAGE_GAP_S = 3e-3  # CPU seconds of compute before each of them (past message_cpu.WAKEUP_SPACING_S)
SEND_LEAD_NOTICE_S = 0.02  # rank 0 waits this long after the barrier before it sends (rank 1's receive is up)
# A launch whose largest ping-pong message took times spreading more than this over its repeats ran on
# a disturbed machine: it is measured again, up to UNSTEADY_RETRIES times, and the steadiest attempt
# kept. In the 196 network files of the held-out sets the spread was at most 3.0% in 90% of them and
# 6.3% in 98%; of the three above 10%, one (set 71, round 3) fitted the link 25% slow (609 against 812
# Mbit/s in its other rounds) and moved its predictions 28-37% while its runs moved 1.1%. On this VM
# while the hypervisor took its CPU, 8 of 14 launches spread 14-59% and their 16 MB times were 0-25%
# slower (157.9-197.0 ms against 156.9-157.6 for the steady ones) (benchmarks/netbench_steadiness.py).
P2P_STEADY_SPREAD = 0.10
UNSTEADY_RETRIES = 2


def message_sizes(min_bytes: float, max_bytes: float, points: int) -> list[int]:
    """`points` log-spaced sizes from min to max, each a whole number of float32 elements."""
    if min_bytes < ELEMENT_BYTES:
        raise UserError(f"smallest message must be at least {ELEMENT_BYTES} bytes, got {min_bytes:g}")
    if max_bytes < min_bytes:
        raise UserError(f"largest message ({max_bytes:g} B) is smaller than the smallest ({min_bytes:g} B)")
    if points < 2 and max_bytes > min_bytes:
        raise UserError("need at least 2 message sizes to fit alpha and beta (--points 2 or more)")
    if max_bytes == min_bytes:
        raise UserError("need two different message sizes to fit alpha and beta; make --max-size larger")
    ratio = (max_bytes / min_bytes) ** (1 / (points - 1))
    sizes = {max(1, round(min_bytes * ratio**k / ELEMENT_BYTES)) * ELEMENT_BYTES for k in range(points)}
    return sorted(sizes)


def bench_config(sizes: Sequence[int], repeats: int, warmup: int, ops: Sequence[str]) -> dict[str, Any]:
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1, got {repeats}")
    if warmup < 0:
        raise UserError(f"--warmup must not be negative, got {warmup}")
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise UserError(f"unknown benchmark op(s) {', '.join(unknown) or '(none)'}; use {', '.join(OPS)}")
    return {"sizes": [int(s) for s in sizes], "repeats": int(repeats), "warmup": int(warmup), "ops": list(ops)}


def op_sizes(config: dict[str, Any], op: str) -> list[int]:
    """The message sizes `op` runs (incast may run fewer: `incast_sizes`)."""
    if op == "incast" and config.get("incast_sizes"):
        return [int(s) for s in config["incast_sizes"]]
    return [int(s) for s in config["sizes"]]


def steps_per_rank(config: dict[str, Any], world_size: int) -> int:
    ops = [op for op in config["ops"] if op in POINT_OPS and (op == "allreduce" or world_size >= 2)]
    steps = sum(len(op_sizes(config, op)) for op in ops) * (config["repeats"] + config["warmup"])
    if "overlap" in config["ops"]:
        steps += config["repeats"] + config["warmup"]
    if "p2p" in config["ops"] and world_size >= 2:  # the per-message CPU bursts, the send lead
        steps += 2 * (config["repeats"] + config["warmup"])
    if "outcast" in config["ops"] and world_size >= 3:
        steps += config["repeats"] + config["warmup"]
    return steps


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process so far, all threads (gloo's included)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _compute_unit():
    """One unit of the compute loop: a convolution and a matrix product (~5-10 ms on one core),
    the kind of work backward does; returns a callable."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(0)
    image = torch.randn(8, 32, 32, 32, generator=generator)
    kernel = torch.randn(32, 32, 3, 3, generator=generator)
    a = torch.randn(384, 384, generator=generator)

    def unit() -> None:
        with torch.no_grad():
            F.conv2d(image, kernel, padding=1)
            torch.mm(a, a)

    return unit


def _overlap_repeat(dist, tensor, unit) -> dict[str, float]:
    """One repeat of the interference measurement on this rank (module docstring, op `overlap`)."""
    import threading

    began = time.perf_counter()
    for _ in range(OVERLAP_UNITS):
        unit()
    compute_alone = (time.perf_counter() - began) / OVERLAP_UNITS

    dist.barrier()
    began = time.perf_counter()
    dist.all_reduce(tensor)
    comm_alone = time.perf_counter() - began

    # compute while the all-reduce is in flight: per-unit time over the units that finished before it did;
    # where it finished inside the first unit (a fast link, a slow core), that unit is the sample: it
    # overlapped the whole all-reduce, so it understates the slowdown rather than leaving none measured
    dist.barrier()
    work = dist.all_reduce(tensor, async_op=True)
    began = time.perf_counter()
    units, last_end = 0, began
    while True:
        unit()
        if work.is_completed():
            break
        units, last_end = units + 1, time.perf_counter()
    if not units:
        units, last_end = 1, time.perf_counter()
    work.wait()
    compute_overlap = (last_end - began) / units

    # the all-reduce while the compute loop runs in another thread (torch releases the GIL)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            unit()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    unit()  # let the loop get going
    dist.barrier()
    began = time.perf_counter()
    dist.all_reduce(tensor)
    comm_overlap = time.perf_counter() - began
    stop.set()
    thread.join()
    return {"compute_alone_s": compute_alone, "compute_overlap_s": compute_overlap,
            "comm_alone_s": comm_alone, "comm_overlap_s": comm_overlap}


def bench_rank(ctx) -> dict[str, Any]:
    """Rank target (run by `sgdscale.runtime.rank`): time every op and size; return this rank's samples."""
    import torch
    import torch.distributed as dist

    config = ctx.config
    rank, world = ctx.rank, ctx.world_size
    repeats, warmup = config["repeats"], config["warmup"]
    samples: dict[str, dict[str, list[float]]] = {}
    cpu: dict[str, dict[str, list[float]]] = {}
    completions: dict[str, list[list[float]]] = {}  # incast on rank 0: per size, per repeat, per sender
    copies: dict[str, list[float]] = {}  # all-reduce: per size, a copy of the reduced tensor right after it
    done = 0

    def repeated(one_repeat: Callable[[], dict[str, float] | None]) -> dict[str, list[float]]:
        """Run `warmup` discarded and `repeats` kept repeats, each one progress step; per key, the kept
        samples (a repeat that measured nothing on this rank gives None)."""
        nonlocal done
        kept: dict[str, list[float]] = {}
        for repeat in range(warmup + repeats):
            sample = one_repeat()
            if repeat >= warmup and sample is not None:
                for key, value in sample.items():
                    kept.setdefault(key, []).append(value)
            done += 1
            ctx.report_progress(done)
        return kept

    overlap: dict[str, list[float]] = {}
    if "overlap" in config["ops"]:
        overlap_bytes = int(config.get("overlap_bytes") or max(config["sizes"]))
        tensor = torch.zeros(overlap_bytes // ELEMENT_BYTES, dtype=torch.float32)
        unit = _compute_unit()
        overlap = repeated(lambda: _overlap_repeat(dist, tensor, unit))
        overlap["bytes"] = [overlap_bytes]
    outcast: dict[str, list[float]] = {}
    if "outcast" in config["ops"] and world >= 3:
        outcast_bytes = int(config.get("outcast_bytes") or max(config["sizes"]))
        outcast_tensor = torch.zeros(outcast_bytes // ELEMENT_BYTES, dtype=torch.float32)
        outcast = repeated(lambda: _outcast_repeat(dist, rank, outcast_tensor))
        if outcast:
            outcast["bytes"] = [outcast_bytes]
    message_cpu: dict[str, list[float]] = {}
    send_lead: dict[str, list[float]] = {}
    if "p2p" in config["ops"] and world >= 2:
        tensors = [torch.zeros(MESSAGE_BYTES // ELEMENT_BYTES, dtype=torch.float32) for _ in range(MESSAGE_BURST)]
        spin = spin_loop()
        message_cpu = repeated(lambda: {**_message_burst_cpu(dist, rank, tensors),
                                        **_message_alone_cpu(dist, rank, tensors[:MESSAGE_ALONE], spin)})
        lead_bytes = int(config.get("send_lead_bytes") or max(config["sizes"]))
        lead_tensor = torch.zeros(lead_bytes // ELEMENT_BYTES, dtype=torch.float32)
        send_lead = repeated(lambda: _send_lead_repeat(dist, rank, lead_tensor))
        if send_lead:
            send_lead["bytes"] = [lead_bytes]
    for op in config["ops"]:
        if op not in POINT_OPS or (op != "allreduce" and world < 2):
            continue
        samples[op] = {}
        cpu[op] = {}
        for nbytes in op_sizes(config, op):
            tensor = torch.zeros(nbytes // ELEMENT_BYTES, dtype=torch.float32)
            scratch = torch.zeros_like(tensor) if op == "allreduce" else None
            kept: list[float | None] = []
            kept_copy: list[float] = []
            kept_cpu: list[float] = []
            kept_senders: list[list[float]] = []
            for repeat in range(warmup + repeats):
                dist.barrier()
                cpu_start = _cpu_s()
                start = time.perf_counter()
                if op == "allreduce":
                    dist.all_reduce(tensor)
                    elapsed = time.perf_counter() - start
                elif op == "incast":
                    if rank == 0:
                        buffers = [torch.empty_like(tensor) for _ in range(1, world)]
                        senders_s = _timed_receives(dist, range(1, world), buffers, start)
                        elapsed = time.perf_counter() - start
                    else:
                        dist.send(tensor, dst=0)
                        elapsed = None  # rank 0 times the arrival of everything
                elif rank == 0:
                    dist.send(tensor, dst=1)
                    dist.recv(tensor, src=1)
                    elapsed = (time.perf_counter() - start) / 2
                elif rank == 1:
                    dist.recv(tensor, src=0)
                    dist.send(tensor, dst=0)
                    elapsed = None  # rank 0 times the round trip
                else:
                    elapsed = None  # not timed on this rank (JSON has no NaN)
                if repeat >= warmup:
                    kept.append(elapsed)
                    kept_cpu.append(_cpu_s() - cpu_start)
                    if op == "incast" and rank == 0:
                        kept_senders.append(senders_s)
                if scratch is not None:  # after the CPU reading: the transport's CPU cost stays its own
                    # as DDP copies a reduced bucket back into the gradients (sgdscale.bucket_copies)
                    copied = time.perf_counter()
                    scratch.copy_(tensor)
                    if repeat >= warmup:
                        kept_copy.append(time.perf_counter() - copied)
                done += 1
                ctx.report_progress(done)
            samples[op][str(nbytes)] = kept
            cpu[op][str(nbytes)] = kept_cpu
            if kept_copy:
                copies[str(nbytes)] = kept_copy
            if kept_senders:
                completions[str(nbytes)] = kept_senders
    return {"rank": rank, "world_size": world, "samples": samples, "cpu_s": cpu, "overlap": overlap,
            "message_cpu_s": message_cpu, "outcast": outcast, "send_lead": send_lead, "incast_senders_s": completions, "copy_s": copies, "torch": torch.__version__, "host": platform.node()}


def spin_loop() -> Callable[[float], None]:
    """A callable that computes (small matrix products) for a given number of CPU seconds of its thread."""
    import torch

    a = torch.randn(128, 128, generator=torch.Generator().manual_seed(0))

    def spin(cpu_s: float) -> None:
        end = time.thread_time() + cpu_s
        while time.thread_time() < end:
            torch.mm(a, a)

    return spin


def _message_alone_cpu(dist, rank: int, tensors, spin: Callable[[float], None]) -> dict[str, float]:
    """One repeat of the messages-alone measurement (module docstring, `messages`): per direction,
    CPU seconds per message this rank spent sending or receiving them, compute between them excluded."""
    sample = {}
    for sender in (0, 1):
        spent = {}
        for with_messages in (False, True):
            dist.barrier()
            start = _cpu_s()
            works = []
            if rank == sender:
                for i, t in enumerate(tensors):
                    spin(MESSAGE_GAP_S)
                    if with_messages:
                        works.append(dist.isend(t, dst=1 - rank, tag=i))
            elif rank == 1 - sender and with_messages:
                works = [dist.irecv(t, src=1 - rank, tag=i) for i, t in enumerate(tensors)]
            for work in works:
                work.wait()
            spent[with_messages] = _cpu_s() - start
        if rank in (0, 1):
            key = "send_alone" if rank == sender else "receive_alone"
            sample[key] = (spent[True] - spent[False]) / len(tensors)
    return sample


def _message_burst_cpu(dist, rank: int, tensors) -> dict[str, float]:
    """One repeat of the per-message CPU measurement on ranks 0 and 1 (module docstring, `messages`):
    CPU seconds per message this rank spent sending a burst, and receiving one."""
    sample = {}
    for sender in (0, 1):
        dist.barrier()
        start = _cpu_s()
        if rank == sender:
            works = [dist.isend(t, dst=1 - rank, tag=i) for i, t in enumerate(tensors)]
        elif rank == 1 - sender:
            works = [dist.irecv(t, src=1 - rank, tag=i) for i, t in enumerate(tensors)]
        else:
            works = []
        for work in works:
            work.wait()
        if rank in (0, 1):
            sample["send" if rank == sender else "receive"] = (_cpu_s() - start) / len(tensors)
    return sample


def _timed_receives(dist, sources: Sequence[int], buffers, start: float,
                    meanwhile: Callable[[], None] | None = None) -> list[float]:
    """Receive one message from each of `sources` into `buffers`, running `meanwhile` (the sends the
    receives answer, if any) beside them; return when each receive completed (s after `start`, in
    source order). One waiting thread per receive: a blocking wait on one would hide when the others
    finished, and gloo's `is_completed()` on a receive stays False until `wait()` (polling it never
    returns)."""
    from sgdscale.runtime.rank import run_threads

    works = [dist.irecv(buf, src=src) for src, buf in zip(sources, buffers)]
    done_s: list[float] = [math.nan] * len(works)

    def act(index: int) -> None:
        if index == len(works):
            meanwhile()
            return
        works[index].wait()
        done_s[index] = time.perf_counter() - start

    run_threads(act, len(works) + (meanwhile is not None), "timed-receive")
    return done_s


def _outcast_repeat(dist, rank: int, tensor) -> dict[str, float] | None:
    """One repeat of the outcast measurement (module docstring): on rank 0 the lone flow's time, the
    head start, and when each flow finished with it and started together; None on other ranks."""
    import torch

    ack = torch.zeros(1, dtype=torch.float32)

    def flows(delay_of_second: float | None) -> list[float] | None:
        """Rank 0 sends to rank 1 (and, unless None, to rank 2 that much later); when each receiver's
        acknowledgement arrived, from the first send."""
        receivers = [1] if delay_of_second is None else [1, 2]
        dist.barrier()
        if rank in receivers:
            dist.recv(torch.empty_like(tensor), src=0)
            dist.send(ack, dst=0)
            return None
        if rank != 0:
            return None
        start = time.perf_counter()

        def send() -> None:
            first = dist.isend(tensor, dst=1)
            if delay_of_second is not None:
                time.sleep(max(0.0, start + delay_of_second - time.perf_counter()))
                dist.isend(tensor, dst=2).wait()
            first.wait()

        return _timed_receives(dist, receivers, [torch.empty_like(ack) for _ in receivers], start, send)

    alone = flows(None)
    head_start = OUTCAST_HEAD_START * alone[0] if rank == 0 else 0.0
    staggered = flows(head_start)
    together = flows(0.0)
    if rank != 0:
        return None
    return {"alone_s": alone[0], "head_start_s": head_start, "first_s": staggered[0], "second_s": staggered[1],
            "together_first_s": together[0], "together_second_s": together[1]}


def _send_lead_repeat(dist, rank: int, tensor) -> dict[str, float] | None:
    """One repeat of the send-lead measurement (module docstring): on rank 0 when its send completed and
    when rank 1's acknowledgement arrived, seconds from the send's start; None on other ranks."""
    import torch

    ack = torch.zeros(1, dtype=torch.float32)
    dist.barrier()
    if rank == 1:
        dist.irecv(tensor, src=0).wait()
        dist.send(ack, dst=0)
        return None
    if rank != 0:
        return None
    acknowledged = dist.irecv(ack, src=1)
    time.sleep(SEND_LEAD_NOTICE_S)  # rank 1's receive is posted: the send need not wait for it
    start = time.perf_counter()
    send = dist.isend(tensor, dst=1)
    send.wait()
    sent = time.perf_counter() - start
    acknowledged.wait()
    return {"sent_s": sent, "acknowledged_s": time.perf_counter() - start}


def send_lead_from_results(results: Sequence[dict[str, Any]], points: Sequence[BenchPoint]) -> SendLead | None:
    """Rank 0's send-lead samples as `SendLead` (None: not measured): per repeat, the acknowledgement's
    arrival less the send's completion less the p2p startup (`startup_s`, the acknowledgement's own
    trip), at least 0; the median is the lead."""
    samples = next((r.get("send_lead") or {} for r in results if int(r["rank"]) == 0), {})
    if not samples.get("bytes") or not samples.get("sent_s") or not samples.get("acknowledged_s"):
        return None
    p2p_points = [p for p in points if p.op == "p2p"]
    trip = startup_s(p2p_points, fit_alpha_beta([p.bytes for p in p2p_points], [p.median_s for p in p2p_points])) \
        if len({p.bytes for p in p2p_points}) >= 2 else 0.0
    leads = [max(0.0, ack - sent - trip) for sent, ack in zip(samples["sent_s"], samples["acknowledged_s"])]
    return SendLead(lead_s=statistics.median(leads), bytes=int(samples["bytes"][0]), sent_s=samples["sent_s"],
                    acknowledged_s=samples["acknowledged_s"])


def outcast_from_results(results: Sequence[dict[str, Any]]) -> Outcast | None:
    """Rank 0's outcast samples as `Outcast` (None: not measured). Per repeat, the newcomer's weight
    (t1 - d) / (L - d) - 1 with L the median lone flow, kept within [OUTCAST_MIN_WEIGHT, 1]; the fit
    is their median."""
    samples = next((r.get("outcast") or {} for r in results if int(r["rank"]) == 0), {})
    keys = ("alone_s", "head_start_s", "first_s", "second_s", "together_first_s", "together_second_s")
    if not samples.get("bytes") or not all(samples.get(k) for k in keys):
        return None
    line = statistics.median(samples["alone_s"])
    weights = [min(1.0, max(OUTCAST_MIN_WEIGHT, (t1 - d) / (line - d) - 1))
               for t1, d in zip(samples["first_s"], samples["head_start_s"]) if line > d]
    splits = [min(a, b) / max(a, b) for a, b in zip(samples["together_first_s"], samples["together_second_s"])]
    if not weights:
        return None
    return Outcast(newcomer_weight=statistics.median(weights), first_second_together=statistics.median(splits),
                   bytes=int(samples["bytes"][0]), **{k: samples[k] for k in keys})


def points_from_results(results: Sequence[dict[str, Any]]) -> list[BenchPoint]:
    """Merge the ranks' samples of one run: p2p from rank 0, all-reduce = slowest rank per repeat."""
    if not results:
        raise UserError("no rank results to fit")
    world = int(results[0]["world_size"])
    by_rank = {int(r["rank"]): r["samples"] for r in results}
    if sorted(by_rank) != list(range(world)):
        raise UserError(f"expected results from ranks 0-{world - 1}, got ranks {sorted(by_rank)}")
    cpu_by_rank = {int(r["rank"]): r.get("cpu_s") or {} for r in results}
    copy_by_rank = {int(r["rank"]): r.get("copy_s") or {} for r in results}
    senders_by_size = next((r.get("incast_senders_s") or {} for r in results if int(r["rank"]) == 0), {})
    points: list[BenchPoint] = []
    for op in POINT_OPS:
        if op not in by_rank[0]:
            continue
        for size_text in by_rank[0][op]:
            if op in ("p2p", "incast"):
                kept = list(by_rank[0][op][size_text])
            else:
                per_rank = [by_rank[r][op][size_text] for r in range(world)]
                kept = [max(values) for values in zip(*per_rank)]
            # CPU: the busiest rank per repeat (p2p: ranks 0 and 1 each send and receive M per round trip)
            ranks = (0, 1) if op == "p2p" else range(world) if op == "allreduce" else ()
            per_rank_cpu = [cpu_by_rank[r].get(op, {}).get(size_text) for r in ranks]
            cpu = ([max(values) for values in zip(*per_rank_cpu)]
                   if per_rank_cpu and all(c and len(c) == len(kept) for c in per_rank_cpu) else None)
            senders = senders_by_size.get(size_text) if op == "incast" else None
            per_rank_copy = [copy_by_rank[r].get(size_text) for r in range(world)] if op == "allreduce" else []
            copies = ([max(values) for values in zip(*per_rank_copy)]
                      if per_rank_copy and all(c and len(c) == len(kept) for c in per_rank_copy) else None)
            points.append(BenchPoint(op=op, workers=world, bytes=int(size_text), samples_s=kept,
                                     median_s=statistics.median(kept), cpu_s=cpu,
                                     senders_s=senders if senders and len(senders) == len(kept) else None,
                                     copy_s=copies))
    return points


def interference_from_results(results: Sequence[dict[str, Any]]) -> InterferenceFit | None:
    """Pool the ranks' overlap samples: slowdown = median with overlap / median alone, floored at 1."""
    pooled: dict[str, list[float]] = {}
    overlap_bytes = 0
    for result in results:
        for key, values in (result.get("overlap") or {}).items():
            if key == "bytes":
                overlap_bytes = int(values[0])
            else:
                pooled.setdefault(key, []).extend(v for v in values if v is not None and not math.isnan(v))
    keys = ("compute_alone_s", "compute_overlap_s", "comm_alone_s", "comm_overlap_s")
    if not overlap_bytes or not all(pooled.get(k) for k in keys):
        return None
    med = {k: statistics.median(pooled[k]) for k in keys}
    return InterferenceFit(compute_slowdown=max(1.0, med["compute_overlap_s"] / med["compute_alone_s"]),
                           comm_slowdown=max(1.0, med["comm_overlap_s"] / med["comm_alone_s"]),
                           workers=int(results[0]["world_size"]), bytes=overlap_bytes,
                           **{k: pooled[k] for k in keys})


def message_cpu_from_results(results: Sequence[dict[str, Any]], keys: Sequence[str] = ("send", "receive")
                             ) -> float | None:
    """CPU seconds per message sent or received, apart from its bytes: the median of ranks 0 and 1's
    burst samples, both directions (None where no burst was measured). `keys` ("send_alone",
    "receive_alone"): the messages-alone samples instead."""
    samples = [value for r in results for key, values in (r.get("message_cpu_s") or {}).items() if key in keys
               for value in values]
    return statistics.median(samples) if samples else None


def message_wakeup_from_results(results: Sequence[dict[str, Any]]) -> float | None:
    """What a message alone after compute costs on top of one in a burst, CPU seconds (never below 0;
    None where either was not measured: files from before the messages-alone measurement)."""
    burst = message_cpu_from_results(results)
    alone = message_cpu_from_results(results, ("send_alone", "receive_alone"))
    return None if burst is None or alone is None else max(0.0, alone - burst)


def cpu_cost_from_points(points: Sequence[BenchPoint], cores: float | None,
                         message_s: float | None = None, message_wakeup_s: float | None = None) -> CpuCost | None:
    """CPU seconds per byte, the slope over the large messages (`fit_alpha_beta`): all-reduce per byte a
    node sends (2(N-1)/N * M, the largest worker count measured), p2p per byte sent or received; and
    the measured CPU per message (`message_cpu_from_results`)."""
    def slope(chosen: list[BenchPoint], wire: Callable[[BenchPoint], float]) -> float | None:
        chosen = [p for p in chosen if p.cpu_s]
        if len({p.bytes for p in chosen}) < 2:
            return None
        return fit_alpha_beta([wire(p) for p in chosen], [statistics.median(p.cpu_s) for p in chosen]).beta_s_per_byte

    ar = [p for p in points if p.op == "allreduce"]
    ar_cost = None
    if ar:
        most = max(p.workers for p in ar)
        ar_cost = slope([p for p in ar if p.workers == most], lambda p: 2 * (p.workers - 1) / p.workers * p.bytes)
    p2p_cost = slope([p for p in points if p.op == "p2p"], lambda p: 2 * p.bytes)
    if ar_cost is None and p2p_cost is None and message_s is None:
        return None
    return CpuCost(allreduce_s_per_byte=ar_cost, p2p_s_per_byte=p2p_cost, message_s=message_s,
                   message_wakeup_s=message_wakeup_s, cores=cores)


def fit_network(points: Sequence[BenchPoint], source: str, environment: dict[str, Any],
                interference: InterferenceFit | None = None, outcast: Outcast | None = None,
                message_cpu_s: float | None = None, message_wakeup_s: float | None = None,
                send_lead: SendLead | None = None) -> Network:
    """Fit alpha-beta for p2p (from the 2-rank run, or the smallest one), all-reduce per worker count,
    and incast per sender count (t against the total bytes received) with the link-sharing fit."""
    incast: dict[str, AlphaBeta] = {}
    for world in sorted({p.workers for p in points if p.op == "incast"}):
        chosen = [p for p in points if p.op == "incast" and p.workers == world]
        incast[str(world - 1)] = fit_alpha_beta([p.bytes * (world - 1) for p in chosen], [p.median_s for p in chosen])
    p2p_points = [p for p in points if p.op == "p2p"]
    ar_points = [p for p in points if p.op == "allreduce"]
    allreduce: dict[str, AlphaBeta] = {}
    for workers in sorted({p.workers for p in ar_points}):
        chosen = [p for p in ar_points if p.workers == workers]
        allreduce[str(workers)] = fit_alpha_beta([p.bytes for p in chosen], [p.median_s for p in chosen])
    if p2p_points:
        smallest = min(p.workers for p in p2p_points)
        chosen = [p for p in p2p_points if p.workers == smallest]
        p2p = fit_alpha_beta([p.bytes for p in chosen], [p.median_s for p in chosen])
    elif "2" in allreduce:
        # Without a ping-pong, a 2-rank all-reduce moves ~M each way once: the closest stand-in.
        p2p = allreduce["2"]
        environment = {**environment, "p2p_from": "allreduce with 2 workers (no p2p measured)"}
    else:
        raise UserError("the network file needs point-to-point figures: include the p2p op "
                        "(--ops p2p,allreduce) or a 2-worker all-reduce")
    quotas = environment.get("cpu_quota_cores")  # one value, or one per node
    cores = (min(quotas) if isinstance(quotas, (list, tuple)) else float(quotas)) if quotas else None
    return Network(source=source, p2p=p2p, allreduce=allreduce, incast=incast, points=list(points),
                   environment=environment, interference=interference,
                   cpu=cpu_cost_from_points(points, cores, message_cpu_s, message_wakeup_s),
                   sharing=sharing_from_points(points, p2p), bucket_copy=copy_from_points(points), outcast=outcast,
                   send_lead=send_lead)


def copy_from_points(points: Sequence[BenchPoint]) -> AlphaBeta | None:
    """Wall time to copy M bytes on a node right after an all-reduce of them (the slowest rank), fitted
    over the sizes of the largest worker count measured: DDP's bucket copies (sgdscale.bucket_copies)."""
    chosen = [p for p in points if p.op == "allreduce" and p.copy_s]
    if chosen:
        most = max(p.workers for p in chosen)
        chosen = [p for p in chosen if p.workers == most]
    if len({p.bytes for p in chosen}) < 2:
        return None
    return fit_alpha_beta([p.bytes for p in chosen], [statistics.median(p.copy_s) for p in chosen])


def estimate_run_s(config: dict[str, Any], workers: int, bandwidth_bps: float) -> float:
    """Rough upper bound on one run's wall time, for the launcher's timeout."""
    per_repeat = 0.0
    for nbytes in config["sizes"]:
        wire_s = nbytes * 8 / bandwidth_bps
        if "p2p" in config["ops"]:
            per_repeat += 2 * wire_s + 0.01
        if "allreduce" in config["ops"]:
            per_repeat += 2 * (workers - 1) / workers * wire_s * 2 + 0.01 * workers
    if "incast" in config["ops"]:
        for nbytes in op_sizes(config, "incast"):
            per_repeat += (workers - 1) * nbytes * 8 / bandwidth_bps + 0.01
    if "overlap" in config["ops"]:
        wire_s = int(config.get("overlap_bytes") or max(config["sizes"])) * 8 / bandwidth_bps
        per_repeat += 2 * 2 * wire_s * 3 + 2.0  # two all-reduces, slowed, plus the compute units
    if "outcast" in config["ops"] and workers >= 3:
        wire_s = int(config.get("outcast_bytes") or max(config["sizes"])) * 8 / bandwidth_bps
        per_repeat += 5 * wire_s + 0.1  # one lone flow, then two pairs
    if "p2p" in config["ops"]:
        per_repeat += 2 * 2 * MESSAGE_ALONE * MESSAGE_GAP_S / 0.1  # the messages alone, at 0.1 cores
        per_repeat += int(config.get("send_lead_bytes") or max(config["sizes"])) * 8 / bandwidth_bps + 0.05
    return per_repeat * (config["repeats"] + config["warmup"])


def run_netbench(
    workers: Sequence[int],
    config: dict[str, Any],
    *,
    placement=None,
    bandwidth_hint_bps: float = 1e9,
    on_progress: Callable[[int, int], None] | None = None,
    environment: dict[str, Any] | None = None,
    source: str = "",
) -> Network:
    """Run the benchmark once per worker count (p2p only in the first run) and fit the results.

    placement: None for local processes, or an emulated cluster with at least max(workers) nodes.
    on_progress(done, total) counts timed operations across all runs.
    """
    from sgdscale.runtime.launch import launch

    counts = sorted(set(workers))
    if not counts or counts[0] < 2:
        raise UserError(f"the network benchmark needs at least 2 processes per run, got {counts or 'none'}")
    runs = []
    for index, count in enumerate(counts):
        run_config = dict(config)
        # p2p in the first run only, the interference and outcast measurements in the last (most workers) only
        run_config["ops"] = [op for op in config["ops"] if not (op == "p2p" and index > 0)
                             and not (op in ("overlap", "outcast") and count != counts[-1])]
        if not run_config["ops"]:
            continue
        runs.append((count, run_config))
    total = sum(steps_per_rank(c, n) for n, c in runs)
    done_before = 0
    points: list[BenchPoint] = []
    interference = outcast = message_cpu_s = message_wakeup_s = send_lead = None
    torch_version = None
    launches: list[dict[str, Any]] = []  # every launch, retries included: what the machine did meanwhile
    snapshot = getattr(placement, "cpu_snapshot", None)  # an emulated cluster reports its CPU
    for count, run_config in runs:
        timeout_s = 60 + 3 * estimate_run_s(run_config, count, bandwidth_hint_bps)
        attempts = []
        for attempt in range(1 + UNSTEADY_RETRIES):
            def progress(per_rank: list[int], base: int = done_before) -> None:
                if on_progress is not None:
                    on_progress(base + min(per_rank), total)

            before = snapshot() if snapshot else None
            result = launch(BENCH_TARGET, run_config, count, placement=placement, timeout_s=timeout_s,
                            on_progress=progress)
            spread = p2p_spread(result.results)
            launches.append({"processes": count, "attempt": attempt + 1, "p2p_spread": spread,
                             **(machine_summary(placement.cpu_report(before, snapshot())) if before else {})})
            attempts.append((spread or 0.0, len(launches) - 1, result))
            done_before += steps_per_rank(run_config, count)
            if spread is None or spread <= P2P_STEADY_SPREAD or attempt == UNSTEADY_RETRIES:
                break
            total += steps_per_rank(run_config, count)  # measured again: the bar grows
            launches[-1]["steal_before_retry_cores"] = wait_for_quiet_host(QUIET_STEAL_CORES)
        _, kept_index, result = min(attempts, key=lambda a: a[0])
        launches[kept_index]["kept"] = True
        run_points = points_from_results(result.results)
        points += run_points
        send_lead = send_lead_from_results(result.results, run_points) or send_lead
        interference = interference_from_results(result.results) or interference
        outcast = outcast_from_results(result.results) or outcast
        message_cpu_s = message_cpu_from_results(result.results) or message_cpu_s
        message_wakeup_s = message_wakeup_from_results(result.results) or message_wakeup_s
        torch_version = result.results[0].get("torch")
        if on_progress is not None:
            on_progress(done_before, total)
    env = {"backend": "gloo", "torch": torch_version, "host": platform.node(),
           "python": platform.python_version(), "repeats": config["repeats"], "warmup": config["warmup"],
           "timing": "p2p: half round trip on rank 0; allreduce: slowest rank from a common barrier; "
                     "incast: rank 0 from a common barrier until every sender's message arrived",
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **(environment or {})}
    env["launches"] = launches
    return fit_network(points, source=source, environment=env, interference=interference, outcast=outcast,
                       message_cpu_s=message_cpu_s, message_wakeup_s=message_wakeup_s, send_lead=send_lead)


def machine_summary(report: dict[str, Any]) -> dict[str, Any]:
    """The part of an emulated cluster's CPU report (`Testbed.cpu_report`) that says whether a
    benchmark ran on a quiet machine: cores the rest of the machine used (`other_load_cores`) and, of
    them, what the hypervisor took for other guests (`steal_cores`)."""
    return {"wall_s": round(report["wall_s"], 3), "other_load_cores": report.get("other_load_cores"),
            "steal_cores": sum(c.get("steal_cores", 0.0) for c in report.get("cpus") or [])}


def p2p_spread(results: Sequence[dict[str, Any]]) -> float | None:
    """(max - min) / median of rank 0's kept ping-pong times at the largest size (None: no p2p in
    this launch). A link that holds still repeats a large message's time closely; see P2P_STEADY_SPREAD."""
    samples = next((r.get("samples") or {} for r in results if int(r["rank"]) == 0), {}).get("p2p")
    if not samples:
        return None
    times = [t for t in samples[max(samples, key=int)] if t is not None]
    return (max(times) - min(times)) / statistics.median(times) if len(times) > 1 else None


def collect_results(directory: str | Path, environment: dict[str, Any] | None = None) -> Network:
    """Fit the result-RANK.json files that torchrun ranks wrote into `directory` (real clusters)."""
    directory = Path(directory)
    files = sorted(directory.glob("result-*.json"))
    if not files:
        raise UserError(f"no result-*.json files in {directory}; run the ranks with --out {directory} first")
    try:
        results = [json.loads(path.read_text()) for path in files]
    except json.JSONDecodeError as error:
        raise UserError(f"a rank result in {directory} is not valid JSON: {error}") from None
    points = points_from_results(results)
    first = results[0]
    repeats = next((len(v) for by_size in first["samples"].values() for v in by_size.values()),
                   len((first.get("overlap") or {}).get("compute_alone_s", [])))
    env = {"backend": "gloo", "torch": first.get("torch"), "hosts": sorted({r.get("host") for r in results}),
           "repeats": repeats, "mode": "cluster (torchrun)", **(environment or {})}
    return fit_network(points, source=f"netbench on {len(results)} ranks (torchrun), collected from {directory}",
                       environment=env, interference=interference_from_results(results),
                       outcast=outcast_from_results(results), message_cpu_s=message_cpu_from_results(results),
                       message_wakeup_s=message_wakeup_from_results(results),
                       send_lead=send_lead_from_results(results, points))
