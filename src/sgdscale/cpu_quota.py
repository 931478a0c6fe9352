"""A node's CPU under a CFS bandwidth quota (a container's CPU limit; the testbed's nodes).

Linux gives a cgroup with quota q cores q x P seconds of CPU per period P (the testbed's P is 10 ms,
Kubernetes' 100 ms) and throttles it until the next period once they are spent; what a period
leaves unused is lost. A profile times its steps back to back under the quota, so its phases
carry the throttling on average: a phase of c CPU-seconds is timed at about c / q. In training a
worker or a shard also waits (for the network, for the other workers), and a period that begins
while it waits starts with a full budget: a phase after a wait runs at a full core's speed until
that budget is spent. A short phase after a long wait takes c instead of c / q.

`QuotaClock` replays that on one node: phases in time order, each given as the seconds a profile
made under the same quota timed it (its "saturated" seconds, CPU = saturated x q), each answered
with when it ends. With q >= 1 (no throttling for one thread) it is the identity.
"""

from __future__ import annotations

import math

import numpy as np

# Whether predictions replay the quota where they can (profiled_quota): modelled, measured, not used.
# The effect is real on one node (`benchmarks/cfs_idle_speed.py`, mlp at 0.40 cores: forward +
# backward 32.7 ms back to back, 23.0-24.4 ms after a 5-50 ms sleep; this replay gives 29.4-31.0;
# cnn 114.7 against 109.0-111.1 ms, replayed 112.7-117.5). But replayed in the fine PS method it made
# the kept real PS runs of sets 10-37 worse (median error 8.8% -> 9.6%, mean signed +4.3% -> +8.3%;
# sync 7.6% -> 9.6%; `benchmarks/quota_clock_tuning.py`): it mends mlp's sync misses (set 37: -25.3%
# / -30.5% -> -13.2% / -19.9%) and pushes cnn, gpt2 and bert, already fast, further (set 32's gpt2
# sync +1.3% -> +11.7%). A worker's "waits" are not idle: it receives its pulls and sends its
# pushes meanwhile, CPU the replay does not charge to its budget, so it starts too many phases on a
# full one.
REPLAYED = False
# With it (only where REPLAYED): a PS worker's own transport CPU (receiving its pulls, sending its
# pushes, at the network's CPU per byte) spent from its budget as the bytes move, so a wait that
# moves bytes is not idle. Measured on the same runs: median 8.8% (as without the replay), max 46.5%
# -> 47.3%, mean signed +4.3% -> +5.5%; mlp's set 37 sync misses -25.3% / -30.5% -> -21.5% / -25.4%.
WORKER_TRANSPORT_ON_BUDGET = True

# Whether the fine all-reduce method replays each node's budget where it can (profiled_quota): the
# optimizer after the wait for the all-reduce, and the next step's data and forward, run on a budget
# that refilled while the node waited (NodeBudgets). Measured, not used. The effect is real: on
# every kept real all-reduce run of sets 1-72 (benchmarks/allreduce_step_parts.py) an optimizer
# whose CPU fits one period's budget ran at 0.32x its profiled time (quota 0.36 in the median; 147
# runs). Replayed (benchmarks/allreduce_refill_tuning.py, a tuning look): at the runs' own compute
# speed 5.9% / 17.6% -> 3.5% / 15.4% (41 cases, mean -3.4% -> +0.2%), from the profiles as measured
# 4.3% / 28.4% -> 5.5% / 34.8% (94 cases). Held out on set 73 with the rule written before its run
# (keep if fine's median error at the runs' own speed falls): 1.1% / 5.2% without it, 2.2% / 6.4%
# with it (from the profiles 2.9% -> 5.4%); gpt2 with 2 workers -0.1% -> +3.6%, cnn +0.9% -> +6.4%.
# Not kept. The wait is not idle (gloo's threads spend the refilled budget moving the last
# buckets), which the clock does not charge.
ALLREDUCE_REFILLED = False

# The testbed's CFS period (`sgdscale.runtime.testbed.CFS_PERIOD_US`), used for network files that
# do not record the period their quota ran under.
TESTBED_PERIOD_S = 0.010


class QuotaClock:
    """One node's CPU budget over time (see the module docstring). Phases must be given in the
    order they run, none starting before the previous one ended."""

    __slots__ = ("quota", "period_s", "budget_s", "boundary_s", "left_s", "free_s")

    def __init__(self, quota_cores: float, period_s: float = TESTBED_PERIOD_S, phase_s: float = 0.0) -> None:
        if not (quota_cores > 0 and period_s > 0):
            raise ValueError(f"a CPU quota needs positive cores and period, got {quota_cores}, {period_s}")
        self.quota = quota_cores
        self.period_s = period_s
        self.budget_s = quota_cores * period_s
        self.boundary_s = phase_s % period_s  # the end of the current period
        if self.boundary_s <= 0.0:
            self.boundary_s = period_s
        self.left_s = self.budget_s
        self.free_s = 0.0  # when the last phase ended

    def spent_at(self, t_s: float) -> None:
        """The node ran throttled up to `t_s`: its current period's budget is gone."""
        if t_s >= self.boundary_s:
            self.boundary_s += (math.floor((t_s - self.boundary_s) / self.period_s) + 1) * self.period_s
        self.left_s = 0.0
        self.free_s = max(self.free_s, t_s)

    def run(self, start_s: float, saturated_s: float) -> float:
        """When a phase that a profile under this quota timed at `saturated_s` ends, begun at `start_s`
        or when the node's previous phase ended, whichever is later (one budget, one phase at a time)."""
        if start_s < self.free_s:
            start_s = self.free_s
        end = start_s + saturated_s if self.quota >= 1.0 else self._run_cpu(start_s, saturated_s * self.quota)
        self.free_s = end
        return end

    def _run_cpu(self, start_s: float, cpu_s: float) -> float:
        period, budget = self.period_s, self.budget_s
        if start_s >= self.boundary_s:  # periods that began while the node waited: fresh budgets
            self.boundary_s += (math.floor((start_s - self.boundary_s) / period) + 1) * period
            self.left_s = budget
        usable = min(self.left_s, self.boundary_s - start_s)
        if cpu_s <= usable:
            self.left_s -= cpu_s
            return start_s + cpu_s
        cpu_s -= usable  # throttled (or at the boundary) until the next period
        t = self.boundary_s
        full = math.ceil(cpu_s / budget) - 1  # whole budgets spent before the last, partial one
        t += full * period
        cpu_s -= full * budget
        self.boundary_s = t + period
        self.left_s = budget - cpu_s
        return t + cpu_s

    def run_marks(self, start_s: float, saturated_marks_s: list[float]) -> list[float]:
        """When each of a phase's marks is reached: the phase begins at `start_s`, its marks are
        saturated seconds into it (in any order; the phase lasts to the last one)."""
        order = sorted(range(len(saturated_marks_s)), key=saturated_marks_s.__getitem__)
        out = [0.0] * len(saturated_marks_s)
        t, done = start_s, 0.0
        for i in order:
            mark = saturated_marks_s[i]
            if mark > done:
                t = self.run(t, mark - done)
                done = mark
            out[i] = t
        return out


def profiled_quota(profile, comm, replayed: bool | None = None) -> tuple[float, float] | None:
    """(cores, period seconds) of the quota to replay per node, where the nodes' quota (`comm.node_quota`,
    from a network file measured under it) is the one the profile's times were taken under (its
    provenance's `cpu_quota_cores`); None otherwise: times from elsewhere do not say how much CPU
    they hold, and a replay's sleeps take none. `replayed`: whether the caller's method replays it
    (default `REPLAYED`, the PS methods')."""
    if not (REPLAYED if replayed is None else replayed):
        return None
    nodes = getattr(comm, "node_quota", None)
    profiled = (profile.provenance or {}).get("cpu_quota_cores")
    if nodes is None or profiled is None or abs(float(profiled) - nodes[0]) > 1e-6:
        return None
    return nodes


class NodeBudgets:
    """`QuotaClock` for many nodes at once (numpy arrays, one entry per node), for the vectorized
    all-reduce recurrence: each node's CFS budget, its periods offset as in `node_clocks`."""

    __slots__ = ("quota", "period_s", "budget_s", "offset_s", "boundary_s", "left_s")

    def __init__(self, quota_cores: float, period_s: float, count: int) -> None:
        if not (quota_cores > 0 and period_s > 0):
            raise ValueError(f"a CPU quota needs positive cores and period, got {quota_cores}, {period_s}")
        self.quota, self.period_s = quota_cores, period_s
        self.budget_s = quota_cores * period_s
        self.offset_s = node_offsets_s(count, period_s)
        self.boundary_s = self.offset_s + period_s  # the end of each node's current period
        self.left_s = np.full(count, self.budget_s)

    def spent_at(self, t_s) -> None:
        """Each node ran throttled up to `t_s`: its current period's budget is gone (a phase longer than
        a period, timed at its saturated speed, ends that way)."""
        t = np.asarray(t_s, dtype=float)
        self.boundary_s = self.offset_s + (np.floor((t - self.offset_s) / self.period_s) + 1.0) * self.period_s
        self.left_s = np.zeros_like(self.boundary_s)

    def run(self, start_s, saturated_s):
        """When each node's phase ends: begun at `start_s`, timed at `saturated_s` by a profile under
        this quota (CPU = saturated x quota); a period that began while the node waited starts full."""
        start = np.asarray(start_s, dtype=float)
        saturated = np.asarray(saturated_s, dtype=float)
        if self.quota >= 1.0:
            return start + saturated
        period, budget = self.period_s, self.budget_s
        cpu = saturated * self.quota
        fresh = start >= self.boundary_s  # periods that began while the node waited
        boundary = np.where(fresh, self.boundary_s + (np.floor((start - self.boundary_s) / period) + 1.0) * period,
                            self.boundary_s)
        left = np.where(fresh, budget, self.left_s)
        usable = np.minimum(left, boundary - start)
        within = cpu <= usable
        rest = cpu - usable
        full = np.maximum(np.ceil(rest / budget) - 1.0, 0.0)  # whole budgets before the last, partial one
        last = rest - full * budget
        end = np.where(within, start + cpu, boundary + full * period + last)
        self.boundary_s = np.where(within, boundary, boundary + (full + 1.0) * period)
        self.left_s = np.where(within, left - cpu, budget - last)
        return end


def node_offsets_s(count: int, period_s: float, first_node: int = 0) -> np.ndarray:
    """Where each node's CFS periods begin (cgroups start their periods when their quota is set, so
    nodes' boundaries do not line up): node i at i x 0.618 of a period."""
    return (np.arange(first_node, first_node + count) * 0.6180339887) % 1.0 * period_s


def node_clocks(quota: tuple[float, float] | None, count: int, first_node: int = 0) -> list[QuotaClock] | None:
    """One clock per node, their periods offset from each other (`node_offsets_s`)."""
    if quota is None:
        return None
    cores, period = quota
    return [QuotaClock(cores, period, float(offset)) for offset in node_offsets_s(count, period, first_node)]
