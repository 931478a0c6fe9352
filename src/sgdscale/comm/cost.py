"""Alpha-beta(-gamma) cost of point-to-point messages and all-reduce collectives.

Every collective is linear in the message size M for a fixed worker count N,
t(M, N) = A(N) + B(N)*M, so predictors can cost thousands of messages with one multiply-add and
MG-WFBP can reason about the startup cost A(N) saved by merging. Formulas follow Thakur et al.
as tabulated in docs/reference/shi2018_dag_model.md §2.4.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from sgdscale.comm.interference import Interference
from sgdscale.comm.network import AlphaBeta, Network
from sgdscale.comm.sharing import NEWCOMER_SHARE_WEIGHT
from sgdscale.cpu_quota import TESTBED_PERIOD_S

ALGORITHMS = ("ring", "tree", "halving-doubling")

# Each measured all-reduce size enters the curve at this quantile of its repeats, not their median:
# under a CFS quota a repeat can stall for a period or more, and in a 2-process file most repeats
# of a small size can (held-out set 26: 424 kB timed 2.5, 14.9, 19.2, 21.7, 2.6 ms, median 14.9; its
# real gpt2 with 2 workers, whose small buckets met no such stall in training, was predicted 14%
# too slow). Tried on the kept all-reduce runs of sets 18-26 (neutral there: fine 2.0% / 17.7% ->
# 2.1% / 18.4%), adopted on held-out set 27 by a rule set before it ran (lower the median error
# without raising the max): fine 8.8% / 13.2% -> 6.4% / 9.1% (`benchmarks/allreduce_curve_estimator.py`).
CURVE_QUANTILE = 0.25

# Beyond the largest measured all-reduce a collective's time grows at the slope between the two
# largest measured sizes, where it is bound by bandwidth. Until set 54 it grew at the slope of the
# line fitted through every size, which startup-bound small sizes flatten: on held-out set 51's 16
# nodes at 0.12 cores those lines' 22.5-23.7 ns/B left 32 MB 4-6% and 64 MB 7-10% short of the times
# measured there, and 16 MB to 64 MB grew at 25-26 ns/B (`benchmarks/allreduce_beyond_curve.py`).
BEYOND_SLOPE = "largest two"  # or "fitted line", as before


@dataclass(frozen=True)
class CommModel:
    """Costs on one NIC link: `p2p` is one message between two nodes.

    `measured_allreduce` holds whole-collective fits per worker count from `sgdscale netbench`;
    where one exists it replaces the formula, because real libraries (gloo) pick their own algorithm
    per message size. `measured_curves` keeps the measured times themselves (each size's lower
    quartile of repeats, `CURVE_QUANTILE`), (sizes, times) per worker count: inside the measured
    range a collective's time is interpolated between them (a line through 1 kB..16 MB misses
    gloo's size-dependent algorithms by up to 60%), beyond it the slope between the two largest
    sizes extends the last point (`BEYOND_SLOPE`). `interference`: how compute and collectives slow each
    other where they overlap (sgdscale.comm.interference; None = not at all).
    """

    p2p: AlphaBeta
    algorithm: str = "ring"
    gamma_s_per_byte: float = 0.0
    measured_allreduce: dict[int, AlphaBeta] = field(default_factory=dict)
    measured_curves: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    network: Network | None = field(default=None, compare=False)  # the file it came from, if any
    interference: Interference | None = None
    # Wall seconds of a parameter server's CPU budget per byte it receives or sends: the measured CPU
    # cost of point-to-point transport over the cores it was measured at (0: moving bytes is free).
    server_cpu_s_per_byte: float = 0.0
    # Wall seconds of a node's CPU budget per point-to-point message it sends or receives, apart from
    # its bytes: the measured CPU per message over the cores (sgdscale.message_cpu; 0: free). A shard
    # pays it per push received and reply sent, a PS worker per push and pull; a worker whose compute
    # takes no CPU (a replay that sleeps) is given 0.
    server_cpu_s_per_message: float = 0.0
    worker_cpu_s_per_message: float = 0.0
    # How unequally concurrent point-to-point flows share a link: the log-normal sigma of each
    # burst's weight in weighted max-min sharing, fitted to measured incast completion spread
    # (sgdscale.comm.network.Sharing; 0: not measured, and the fine method simulates
    # sgdscale.comm.sharing.UNMEASURED_WEIGHT_SIGMA under the incumbents-first rule).
    share_weight_sigma: float = 0.0
    # Weight of a flow that starts while other flows already leave its sender's node, relative to
    # them (sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT, measured with TCP; 1: no priority). For
    # nominal figures and every network file alike: it is how TCP flows out of one host share, not
    # a property of one cluster (`benchmarks/unmeasured_newcomer.py`).
    newcomer_share_weight: float = NEWCOMER_SHARE_WEIGHT
    # Measured wall seconds per byte of copying a gradient on a worker (DDP's bucket copies,
    # sgdscale.bucket_copies; None: not measured, the profile's own memory rate stands in).
    copy_s_per_byte: float | None = None
    # The CFS quota every node ran under while the network was measured (cores, period seconds; None:
    # unshaped). Where a profile was made under the same quota, the fine method replays it per node
    # (sgdscale.cpu_quota): a phase after a wait runs on a fresh budget.
    node_quota: tuple[float, float] | None = None
    # Wall seconds of a PS worker's budget a message costs on top when it leaves a gap after the
    # previous one (a thread wake-up and cold caches, sgdscale.message_cpu.wakeup_weights; 0: none).
    worker_cpu_s_per_wakeup: float = 0.0
    # Seconds before its bytes arrive that a point-to-point send completes (gloo's send completes once
    # its last byte is in the socket; what the sender's socket and the queues on the way hold then):
    # measured by `sgdscale netbench` (`SendLead`; 0: not measured). Used only where
    # `sgdscale.fine.ps.POSTS_AHEAD_BY_SEND_LEAD` is on (off: held out on set 84, not kept).
    send_lead_s: float = 0.0

    @classmethod
    def from_link(cls, bandwidth_bps: float, latency_s: float, algorithm: str = "ring",
                  gamma_s_per_byte: float = 0.0) -> CommModel:
        """A link moving `bandwidth_bps` of payload (a nominal rate less framing: `Cluster.payload_fraction`)."""
        return cls(AlphaBeta(alpha_s=latency_s, beta_s_per_byte=8.0 / bandwidth_bps), algorithm, gamma_s_per_byte)

    @classmethod
    def from_network(cls, network: Network, algorithm: str = "ring", gamma_s_per_byte: float = 0.0) -> CommModel:
        measured = {int(n): fit for n, fit in network.allreduce.items()}
        curves: dict[int, tuple[tuple[float, ...], tuple[float, ...]]] = {}
        for workers in measured:
            points = sorted((p.bytes, float(np.quantile(p.samples_s, CURVE_QUANTILE))) for p in network.points
                            if p.op == "allreduce" and p.workers == workers)
            if len(points) >= 2:
                curves[workers] = (tuple(float(b) for b, _ in points), tuple(float(t) for _, t in points))
        cpu = network.cpu
        server_cpu = cpu.p2p_s_per_byte / cpu.cores if cpu is not None and cpu.p2p_s_per_byte and cpu.cores else 0.0
        message_cpu = cpu.message_s / cpu.cores if cpu is not None and cpu.message_s and cpu.cores else 0.0
        wakeup_cpu = (cpu.message_wakeup_s / cpu.cores if cpu is not None and cpu.message_wakeup_s and cpu.cores
                      else 0.0)
        sigma = network.sharing.weight_sigma if network.sharing is not None else 0.0
        copy = network.bucket_copy.beta_s_per_byte if network.bucket_copy is not None else None
        quota = None
        if cpu is not None and cpu.cores and cpu.cores < 1.0:  # files from before it was recorded: the testbed's
            quota = (float(cpu.cores), float(network.environment.get("cfs_period_s", TESTBED_PERIOD_S)))
        lead = network.send_lead.lead_s if network.send_lead is not None else 0.0
        return cls(network.p2p, algorithm, gamma_s_per_byte, measured, curves, network,
                   Interference.from_network(network), server_cpu, message_cpu, message_cpu, sigma,
                   NEWCOMER_SHARE_WEIGHT, copy, quota, wakeup_cpu, lead)

    def for_sleeping_workers(self) -> CommModel:
        """The same network as workers whose compute sleeps (a replay's default) meet it: their layers
        take no CPU from gloo, nor gloo from them, so they pay no interference and no CPU per message
        or wake-up; a shard still pays its own."""
        return dataclasses.replace(self, interference=None, worker_cpu_s_per_message=0.0, worker_cpu_s_per_wakeup=0.0)

    def with_bandwidth_scaled(self, slowdown: float) -> CommModel:
        """The same network with every per-byte cost `slowdown` times higher (a slower link)."""
        def scale(fit: AlphaBeta) -> AlphaBeta:
            return AlphaBeta(alpha_s=fit.alpha_s, beta_s_per_byte=fit.beta_s_per_byte * slowdown)

        curves = {}
        for n, (sizes, times) in self.measured_curves.items():
            floor = times[0]  # the smallest message's time is startup, not bandwidth
            curves[n] = (sizes, tuple(floor + (t - floor) * slowdown for t in times))
        return dataclasses.replace(self, p2p=scale(self.p2p),
                                   measured_allreduce={n: scale(f) for n, f in self.measured_allreduce.items()},
                                   measured_curves=curves)

    def allreduce_linear(self, workers: int) -> AlphaBeta | None:
        """(A, B) with t = A + B*M for an all-reduce over `workers`; None when workers == 1 (free)."""
        if workers <= 1:
            return None
        fit = self.measured_allreduce.get(workers)
        if fit is not None:
            return fit
        a, b, g, n = self.p2p.alpha_s, self.p2p.beta_s_per_byte, self.gamma_s_per_byte, workers
        if self.algorithm == "ring":
            return AlphaBeta(alpha_s=2 * (n - 1) * a, beta_s_per_byte=2 * (n - 1) / n * b + (n - 1) / n * g)
        steps = math.ceil(math.log2(n))
        if self.algorithm == "tree":
            return AlphaBeta(alpha_s=2 * steps * a, beta_s_per_byte=steps * (2 * b + g))
        if self.algorithm == "halving-doubling":
            return AlphaBeta(alpha_s=2 * steps * a, beta_s_per_byte=2 * (n - 1) / n * b + (n - 1) / n * g)
        raise ValueError(f"unknown all-reduce algorithm {self.algorithm!r}")

    def allreduce_times_s(self, sizes_bytes: np.ndarray | list[float], workers: int) -> np.ndarray:
        """All-reduce time of each message size over `workers` (zeros for one worker)."""
        sizes = np.asarray(sizes_bytes, dtype=float)
        linear = self.allreduce_linear(workers)
        if linear is None:
            return np.zeros_like(sizes)
        curve = self.measured_curves.get(workers)
        if curve is None:
            return linear.alpha_s + linear.beta_s_per_byte * sizes
        known_sizes, known_times = np.asarray(curve[0]), np.asarray(curve[1])
        inside = np.interp(sizes, known_sizes, known_times)
        beyond = known_times[-1] + _beyond_slope(known_sizes, known_times, linear) * (sizes - known_sizes[-1])
        return np.where(sizes > known_sizes[-1], beyond, inside)

    def beyond_measured_note(self, largest_bytes: float, worker_counts: list[int]) -> str | None:
        """Where a collective of `largest_bytes` lies beyond the measured all-reduce curve, in words for
        `sgdscale predict` (None: inside it, or no curve for these worker counts)."""
        from sgdscale.units import format_bytes

        beyond = {n: self.measured_curves[n][0][-1] for n in worker_counts
                  if n in self.measured_curves and largest_bytes > self.measured_curves[n][0][-1]}
        if not beyond:
            return None
        counts = [str(n) for n in sorted(beyond)]
        workers = counts[0] if len(counts) == 1 else ", ".join(counts[:-1]) + " and " + counts[-1]
        return (f"an all-reduce of up to {format_bytes(largest_bytes)} lies beyond the network file's largest measured "
                f"one ({format_bytes(max(beyond.values()))} with {workers} workers): its time grows at the "
                "slope between the two largest sizes measured (within 3% at 2-4x the largest on the emulated cluster, "
                "benchmarks/allreduce_beyond_curve.py); to measure it, run sgdscale netbench with "
                f"--max-size {math.ceil(largest_bytes / 1e6)}MB")

    def allreduce_s(self, nbytes: float, workers: int) -> float:
        return float(self.allreduce_times_s([nbytes], workers)[0])

    def p2p_s(self, nbytes: float) -> float:
        return self.p2p.time_s(nbytes)


def _beyond_slope(sizes: np.ndarray, times: np.ndarray, linear: AlphaBeta) -> float:
    """Seconds per byte beyond the largest measured size: the two largest sizes' slope where it is
    positive (a noisy pair may not be), else the fitted line's."""
    if BEYOND_SLOPE == "largest two" and len(sizes) >= 2 and sizes[-1] > sizes[-2]:
        slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
        if slope > 0.0:
            return float(slope)
    return linear.beta_s_per_byte
