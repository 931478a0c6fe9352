"""Fine-grained synchronous all-reduce (DDP/Horovod style), evaluated exactly and vectorized.

The DAG of one iteration (docs/design.md "Model semantics"; docs/reference/shi2018_dag_model.md §2.1):
every worker runs data + host-to-device copy, forward layers 0..L-1 and backward L-1..0 back to
back on its compute resource; gradient group g's collective starts when *every* worker has
produced g and the previous collective has finished (one communication stream, groups in launch
order); it lasts comm.allreduce_s(bytes_g, N); each worker's optimizer starts when its backward
and the last collective are done, and its next iteration follows at once.

Why this is exact and not an approximation of the discrete-event simulation: the only coupling
between workers is the barrier in front of each collective, and the stream is a chain, so the
longest path to the start of collective g is

    start_g = max(end_{g-1}, max_w ready_{g,w}),    end_g = start_g + c_g,

i.e. start = C + cummax(R - C) with C the prefix sums of c and R_g = max_w ready_{g,w}. Worker w
then ends its step at max(end_last, backward_end_w) + optimizer_w. Per iteration that is a max
over workers for every group plus O(groups) work. Workers that drew the same measured iteration
at the same speed factor share their group-ready offsets, so that max runs over those few classes
(latest backward start per class, then classes x groups) instead of workers x groups: 1,024
workers x 100 iterations of a ResNet-50 cost well under a second (benchmarks/predict_speed.py). An event-driven
oracle of the same DAG (tests/des_oracle.py) is checked against this in a test. With N identical workers and no
variability one worker is simulated.

Deterministic, per-layer grouping: the step equals the WFBP recurrence of §2.2 plus data, copy and
optimizer (sgdscale.wfbp.wfbp_iteration_s), to rounding.

Heterogeneity: per-worker speed factors and per-iteration variability come from
`ComputeSampler`. Collective costs come from the topology (`sgdscale.comm.topology`): per level
(intra-node link, NIC) and scheme; a slow NIC paces the whole collective (lock step).

Several collectives at once (comm.streams): gloo runs two of a worker's collectives at a time, sharing
the link. The one-stream schedule above gives the link's busy periods and pace; `shared_schedule_s`
re-times each collective within them as a processor-sharing queue (the last still ends where one
stream ends it), so the bucket that ends last, and with it DDP's copies after the last collective, can
be an early, large one. O(groups) per iteration; with one slot (NCCL) nothing changes.

Interference (comm.interference): with a model whose slowdowns are not 1, the collectives that overlap
backward slow it and are slowed by it; `stream_with_interference` turns the no-interference ready
times into the real starts, ends and backward ends (exact for that model, docs/interference.md).
Without one this module computes exactly what it did before.

Breakdown, per worker and step on average: compute = data + copy + forward + backward +
optimizer; exposed communication = the part of the collectives still running after the slowest
worker finished backward (nobody could have hidden it); wait = the rest of the step, i.e. time
workers sit at a barrier because another worker is slower.
"""

from __future__ import annotations


import numpy as np

from sgdscale.bottleneck import describe_allreduce
from sgdscale.bucket_copies import buffer_broadcast_s, copy_back_suffix_s, ddp_copies, finalized_s
from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.interference import interference_of, stream_with_interference
from sgdscale.comm.streams import collectives_at_once, shared_schedule_s
from sgdscale import cpu_quota
from sgdscale.cpu_quota import NodeBudgets, profiled_quota
from sgdscale.comm.topology import Topology
from sgdscale.variability import ComputeSampler
from sgdscale.grouping import GradGroup, backward_done_s, group_gradients, ready_offsets_s
from sgdscale.profile import Profile
from sgdscale.result import Breakdown, Outcome, TimelineSpec, TraceEvent, timeline_spec
from sgdscale.strategy import Strategy
from sgdscale.units import format_bytes

TIMELINE_MAX_EVENTS = 5000  # default cap (TimelineSpec.max_events overrides it)


def collective_times_s(groups: list[GradGroup], topology: Topology) -> tuple[np.ndarray, dict[str, float]]:
    """All-reduce time of each group (0 for one worker) and the seconds per step on each level."""
    sizes = [g.bytes for g in groups]
    return topology.allreduce_times_s(sizes), topology.allreduce_busy_s(sizes)


def simulate_allreduce(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel | Topology, *,
                       iterations: int = 100, warmup: int = 10, seed: int = 0, variability: bool = True,
                       timeline: bool | TimelineSpec = False) -> Outcome:
    """Fine-grained synchronous all-reduce for `cluster.workers` workers (module docstring)."""
    workers = cluster.workers
    topology = Topology.of(cluster, comm, strategy)
    profile, copy_back_s_per_byte = ddp_copies(profile, strategy.grouping, topology.nic.copy_s_per_byte, workers)
    groups = group_gradients(profile, strategy, topology, workers)
    costs, levels = collective_times_s(groups, topology)
    copy_back = copy_back_suffix_s([g.bytes for g in groups], copy_back_s_per_byte)
    broadcast_s = buffer_broadcast_s(profile, strategy.grouping, topology)  # DDP's, before every forward
    interference = interference_of(comm) if workers > 1 else None
    slots = collectives_at_once(profile, strategy.collectives_at_once) if workers > 1 else 1
    sampler = ComputeSampler(profile, cluster, seed=seed, variability=variability)
    tables = _RowTables(sampler, groups)
    n_groups = len(groups)
    prefix = np.concatenate([[0.0], np.cumsum(costs)[:-1]]) if n_groups else np.zeros(0)
    comm_total_s = float(costs.sum())

    identical = sampler.identical_workers
    rows_fixed = None if sampler.variable else (np.zeros(1 if identical else workers, dtype=np.intp))
    scale = np.ones(1) if identical else sampler.scale
    unit_scale = bool(np.all(scale == 1.0))
    width = 1 if identical else workers
    # Workers that drew the same measured row and share a speed factor have the same group-ready
    # offsets, so the max over workers of (backward start + offset) is a max over those classes
    # of (latest backward start in the class + offset): O(workers + classes x groups).
    speeds, speed_class = np.unique(scale, return_inverse=True)
    n_classes = sampler.rows * len(speeds)
    by_class = width > 1 and 2 * n_classes <= width
    if by_class:
        class_offsets = (tables.offsets[:, None, :] * speeds[None, :, None]).reshape(n_classes, n_groups)
        class_latest = np.empty(n_classes)

    # Each node's CFS budget, where the profile was timed under the nodes' quota (cpu_quota.ALLREDUCE_REFILLED):
    # the optimizer after the wait for the all-reduce, and the next data and forward, run on a budget that
    # refilled while the node waited, not at the throttled speed the profile timed them at.
    quota = profiled_quota(profile, topology.nic, replayed=cpu_quota.ALLREDUCE_REFILLED) if n_groups else None
    budgets = NodeBudgets(quota[0], quota[1], width) if quota is not None else None
    start = np.zeros(width)  # when each worker begins its next iteration
    previous_end = 0.0
    total = warmup + iterations
    steps = np.empty(iterations)
    compute = np.empty(iterations)
    exposed = np.empty(iterations)
    spec = timeline_spec(timeline)
    events: list[TraceEvent] | None = [] if spec else None
    trace_workers = (list(range(workers)) if spec and spec.all_workers else _trace_workers(sampler, identical))
    max_events = (spec.max_events if spec and spec.max_events else TIMELINE_MAX_EVENTS)
    fixed = None
    for k in range(total):
        rows = rows_fixed if rows_fixed is not None else sampler.draw_rows()
        if fixed is None or rows_fixed is None:
            pre, fwd, bwd, opt, offsets = tables.worker_arrays(rows, scale, unit_scale, with_offsets=not by_class)
            if rows_fixed is not None:
                fixed = (pre, fwd, bwd, opt, offsets)
        else:
            pre, fwd, bwd, opt, offsets = fixed
        # DDP's buffer broadcast holds every forward until the last worker has its data and the tree is done
        pre_end = start + pre if budgets is None else budgets.run(start, pre)
        forward_start = pre_end if broadcast_s <= 0 else np.full(width, float(pre_end.max()) + broadcast_s)
        backward_start = forward_start + fwd if budgets is None else budgets.run(forward_start, fwd)
        backward_end = backward_start + bwd
        if n_groups:
            if by_class:
                class_latest.fill(-np.inf)
                np.maximum.at(class_latest, rows * len(speeds) + speed_class, backward_start)
                ready = (class_offsets + class_latest[:, None]).max(axis=0)
            elif width > 1:
                ready = (offsets + backward_start[:, None]).max(axis=0)
            else:
                ready = offsets[0] + backward_start[0]
            if interference is None:
                comm_start = prefix + np.maximum.accumulate(ready - prefix)
                comm_ends = comm_start + costs
            else:
                comm_start, comm_ends, backward_end = stream_with_interference(ready, costs, backward_end,
                                                                               interference)
                bwd = backward_end - backward_start
            lanes = None
            if slots > 1:  # gloo's threads: collectives share the link (comm.streams)
                comm_start, comm_ends, lanes = shared_schedule_s(ready, comm_start, comm_ends, costs, slots)
            comm_end = float(comm_ends.max())
            opt_start = finalized_s(backward_end, comm_ends, copy_back)  # DDP's copies back, if any
            if budgets is None:
                step_end = opt_start + opt
            else:
                budgets.spent_at(backward_end)  # backward ran throttled to its end
                step_end = budgets.run(opt_start, opt)
        else:
            comm_start, comm_end, lanes = np.zeros(0), float("-inf"), None
            opt_start = backward_end
            step_end = backward_end + opt
        cluster_end = float(step_end.max())
        if k >= warmup:
            i = k - warmup
            steps[i] = cluster_end - previous_end
            compute[i] = float(np.mean((pre_end - start) + (backward_start - forward_start) + bwd
                                       + (step_end - opt_start)))
            exposed[i] = max(comm_end - float(backward_end.max()), 0.0) + broadcast_s
            if events is not None and i < spec.iterations:
                durations = costs if interference is None and lanes is None else comm_ends - comm_start
                _record(events, profile, sampler, groups, durations, rows, trace_workers, identical, start,
                        backward_end, comm_start, comm_end, step_end, k, stretch_backward=interference is not None,
                        max_events=max_events, alike_label=not spec.all_workers, forward_start=forward_start,
                        lanes=lanes, backward_start=backward_start, optimizer_start=np.broadcast_to(opt_start, (width,)))
        previous_end = cluster_end
        start = step_end

    step_mean = float(steps.mean())
    compute_mean = float(compute.mean())
    exposed_mean = float(exposed.mean())
    wait_mean = max(step_mean - compute_mean - exposed_mean, 0.0)
    breakdown = Breakdown(compute_s=compute_mean, exposed_comm_s=exposed_mean, wait_s=wait_mean)
    limited_by, bottleneck, utilization = describe_allreduce(
        workers=workers, step_s=step_mean, breakdown=breakdown, levels=levels, topology=topology,
        grouping=strategy.grouping, sizes_bytes=[g.bytes for g in groups], comm_s=comm_total_s,
        compute_scale=cluster.compute_scale, variable=sampler.variable)
    throughput = workers * profile.batch_size / step_mean if step_mean > 0 else float("inf")
    return Outcome(
        iteration_s=steps,
        throughput=throughput,
        breakdown=breakdown,
        bottleneck=bottleneck,
        utilization=utilization,
        timeline=events,
        levels=levels,
        limited_by=limited_by,
    )


class _RowTables:
    """Per measured row: the sums and group-ready offsets the recurrence needs, computed once."""

    def __init__(self, sampler: ComputeSampler, groups: list[GradGroup]) -> None:
        tb = sampler.backward_table_s
        self.pre = sampler.data_table_s + sampler.h2d_table_s
        self.fwd = sampler.forward_table_s.sum(axis=1)
        self.opt = sampler.optimizer_table_s
        # time from backward start to the end of layer l's backward = sum(t_b[l:]) (reverse order);
        # the backward total is taken from the same sums so "ready at the end of layer 0" and
        # "backward done" are the same float
        self.bwd = backward_done_s(tb)[:, 0] if tb.shape[1] else np.zeros(tb.shape[0])
        self.offsets = ready_offsets_s(tb, [g.ready_layer for g in groups], [g.ready_fraction for g in groups])

    def worker_arrays(self, rows: np.ndarray, scale: np.ndarray, unit_scale: bool, with_offsets: bool = True):
        pre, fwd, bwd, opt = self.pre[rows], self.fwd[rows], self.bwd[rows], self.opt[rows]
        offsets = self.offsets[rows] if with_offsets else None
        if not unit_scale:
            pre, fwd, bwd, opt = pre * scale, fwd * scale, bwd * scale, opt * scale
            if offsets is not None:
                offsets = offsets * scale[:, None]
        return pre, fwd, bwd, opt, offsets


def _trace_workers(sampler: ComputeSampler, identical: bool) -> list[int]:
    if identical or sampler.workers == 1:
        return [0]
    slowest = int(np.argmax(sampler.scale)) if not sampler.homogeneous else sampler.workers - 1
    return [0, slowest] if slowest != 0 else [0, sampler.workers - 1]


def _record(events: list[TraceEvent], profile: Profile, sampler: ComputeSampler, groups: list[GradGroup],
            costs: np.ndarray, rows: np.ndarray, trace_workers: list[int], identical: bool, start: np.ndarray,
            backward_end: np.ndarray, comm_start: np.ndarray, comm_end: float, step_end: np.ndarray,
            iteration: int, stretch_backward: bool = False, max_events: int = TIMELINE_MAX_EVENTS,
            alike_label: bool = True, forward_start: np.ndarray | None = None,
            lanes: np.ndarray | None = None, backward_start: np.ndarray | None = None,
            optimizer_start: np.ndarray | None = None) -> None:
    """Append one iteration of the traced workers and the communication stream (capped).

    Identical workers are simulated as one: with `alike_label` it is drawn once as "worker 0 (all N
    alike)", else once per traced worker (a side-by-side with a real run wants every worker).
    `stretch_backward`: backward ran slower under interference; its layers are drawn stretched evenly
    to end at `backward_end` (the model knows the total, not how the slowdown fell on each layer).
    `lanes`: the thread each collective ran on where several share the link (one track each).
    `backward_start`, `optimizer_start`: where the node's CFS budget moved them (cpu_quota.NodeBudgets);
    data, forward and optimizer are then drawn shrunk evenly to fit."""
    if len(events) >= max_events:
        return
    names = [layer.name for layer in profile.layers]
    for worker in trace_workers:
        col = 0 if identical else worker
        row = int(rows[min(col, len(rows) - 1)])
        scale = float(sampler.scale[worker])
        alike = alike_label and identical and sampler.workers > 1
        process = f"worker {worker}" + (f" (all {sampler.workers} alike)" if alike else "")
        t = float(start[col])
        args = {"iteration": iteration}
        pre = (("data", sampler.data_table_s[row] * scale), ("h2d", sampler.h2d_table_s[row] * scale))
        pre_s = float(sum(duration for _, duration in pre))
        shrink = 1.0
        if forward_start is not None and pre_s > 0 and float(forward_start[col]) < t + pre_s:
            shrink = (float(forward_start[col]) - t) / pre_s
        for label, duration in pre:
            if duration > 0:
                events.append(TraceEvent(label, t, float(duration) * shrink, process, "compute", args))
                t += float(duration) * shrink
        if forward_start is not None and float(forward_start[col]) > t + 1e-12:  # DDP's buffer broadcast (and its wait)
            events.append(TraceEvent("broadcast buffers", t, float(forward_start[col]) - t, process, "compute", args))
            t = float(forward_start[col])
        forward = sampler.forward_table_s[row] * scale
        shrink = 1.0
        if backward_start is not None and float(forward.sum()) > 0:
            shrink = (float(backward_start[col]) - t) / float(forward.sum())
        for index, duration in enumerate(forward):
            events.append(TraceEvent(f"forward {names[index]}", t, float(duration) * shrink, process, "compute", args))
            t += float(duration) * shrink
        stretch = 1.0
        alone_s = float(sampler.backward_table_s[row].sum() * scale)
        if stretch_backward and alone_s > 0:
            stretch = (float(backward_end[col]) - t) / alone_s
        for index in range(len(names) - 1, -1, -1):
            duration = float(sampler.backward_table_s[row, index] * scale) * stretch
            events.append(TraceEvent(f"backward {names[index]}", t, duration, process, "compute", args))
            t += duration
        opt_s = float(sampler.optimizer_table_s[row] * scale)
        opt_start = float(step_end[col]) - opt_s
        if optimizer_start is not None:
            opt_start = float(optimizer_start[col])
            opt_s = float(step_end[col]) - opt_start
        if opt_start > float(backward_end[col]):
            events.append(TraceEvent("wait for all-reduce", float(backward_end[col]),
                                     opt_start - float(backward_end[col]), process, "compute", args))
        if opt_s > 0:
            events.append(TraceEvent("optimizer", opt_start, opt_s, process, "compute", args))
    for index, group in enumerate(groups):
        if costs[index] <= 0:
            continue
        track = "all-reduce stream" if lanes is None else f"all-reduce thread {int(lanes[index]) + 1}"
        events.append(TraceEvent(f"all-reduce {format_bytes(group.bytes)}", float(comm_start[index]),
                                 float(costs[index]), "network", track,
                                 {"iteration": iteration, "bytes": group.bytes, "tensors": len(group.tensors)}))
