"""Compute-communication interference and the CPU cost of communication (docs/interference.md).

Two effects the plain alpha-beta + WFBP model leaves out, both measured by `sgdscale netbench`
(`--ops overlap`, and the CPU time of every timed op) and stored in the network file:

- **Interference.** While a collective overlaps compute on the same worker, both slow down: here
  they share a CPU quota (gloo's threads copy, checksum and reduce); on a GPU communication kernels
  share SMs and memory bandwidth. Model: compute progresses at 1/`compute_slowdown` of its speed
  while a collective runs, a collective at 1/`comm_slowdown` of its speed while any worker computes.
  `stream_with_interference` applies it to the fine all-reduce recurrence, `two_body_end_s` to the
  coarse overlap heuristic. Slowdowns of 1 (or none) leave every prediction exactly as before: the
  predictors then take their old code path.
- **CPU cost per byte.** Moving a byte costs CPU time (send, receive, reduce), so on a node with a
  CPU budget a link cannot run faster than budget / cpu_s_per_byte. `cpu_bound_bps` gives that
  rate; `cpu_bounded_comm` applies it to a cost model.

Only this module knows the model; the predictors call it where compute and communication overlap.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

# Measured on the emulated testbed (2-core VM, gloo, tbf links; benchmarks/results/interference/):
# what a measured network moved predictions made from nominal figures. Quoted when a prediction
# uses nominal figures only, so the user knows how far off they may be.
TYPICAL_MEASURED_NOTE = (
    "on the emulated testbed (1 Gbit/s tbf links, 0.45 cores per node) measured networks ran point to point at "
    "93-95% of the nominal rate (tc's framing alone takes 4.4% there; predictions count it, see --framing) "
    "and 2- and 4-way all-reduces at 87-99% of the ring formula's, and compute ran "
    "1.1-1.8x slower while an all-reduce was in flight (benchmarks/results/interference/)"
)


@dataclass(frozen=True)
class Interference:
    """Slowdown factors (>= 1) of compute while a collective runs and of a collective while compute runs."""

    compute_slowdown: float = 1.0
    comm_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if not (self.compute_slowdown >= 1.0 and self.comm_slowdown >= 1.0):
            raise ValueError(f"interference slowdowns must be >= 1, got {self.compute_slowdown}, {self.comm_slowdown}")

    @property
    def active(self) -> bool:
        return self.compute_slowdown != 1.0 or self.comm_slowdown != 1.0

    @classmethod
    def from_network(cls, network) -> Interference | None:
        fit = getattr(network, "interference", None)
        return None if fit is None else cls(fit.compute_slowdown, fit.comm_slowdown)


def is_active(interference: Interference | None) -> bool:
    return interference is not None and interference.active


def interference_of(comm) -> Interference | None:
    """The active interference model carried by a cost model (or by the NIC model of an object that
    wraps one in `.nic`); None when there is none or it is zero."""
    model = getattr(comm, "interference", None)
    if model is None:
        model = getattr(getattr(comm, "nic", None), "interference", None)
    return model if is_active(model) else None


def two_body_end_s(compute_s: float, comm_s: float, interference: Interference) -> tuple[float, float]:
    """(compute end, communication end), both starting at 0 with `compute_s` and `comm_s` of work alone.

    Both run slowed until the first finishes, the other then at full speed: with kc, km the slowdowns,
    if comm_s*km <= compute_s*kc the collective ends at comm_s*km and compute at
    comm_s*km + compute_s - comm_s*km/kc; otherwise compute ends at compute_s*kc and the collective at
    compute_s*kc + comm_s - compute_s*kc/km.
    """
    kc, km = interference.compute_slowdown, interference.comm_slowdown
    compute_s, comm_s = max(compute_s, 0.0), max(comm_s, 0.0)
    if comm_s * km <= compute_s * kc:
        overlap = comm_s * km
        return overlap + compute_s - overlap / kc, overlap
    overlap = compute_s * kc
    return overlap, overlap + comm_s - overlap / km


def stream_with_interference(ready_s: np.ndarray, costs_s: np.ndarray, backward_end_s: np.ndarray,
                             interference: Interference) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One iteration of the all-reduce stream with interference: (collective starts, ends, backward ends).

    Inputs are the no-interference quantities of `sgdscale.fine.allreduce`: `ready_s[g]` when the last
    worker produces group g, `backward_end_s[w]` when worker w's backward ends. Collectives run one at a
    time in order, each from max(previous end, ready). Derivation (docs/interference.md): every
    backward of this iteration starts before its first collective, so all workers feel the same busy
    intervals, and a worker's work clock tau(t) = t - (1 - 1/kc) * |busy before t| maps no-interference
    times to real ones by tau^-1; the max over workers commutes with it (monotone). So group g is ready
    at tau^-1(ready_s[g]), and collective g starts at the previous end, or later by ready_s[g] - tau(previous
    end) if that is positive (no collective then runs). It is slowed by km while compute still runs,
    i.e. until tau reaches max(backward_end_s) (`two_body_end_s`). Backward of worker w ends at
    tau^-1(backward_end_s[w]). O(groups) scalar steps plus one interpolation over workers.
    """
    kc = interference.compute_slowdown
    last_compute = float(np.max(backward_end_s))
    starts = np.empty(len(costs_s))
    ends = np.empty(len(costs_s))
    tau_at_start = np.empty(len(costs_s))
    tau_at_end = np.empty(len(costs_s))
    previous_end, tau_end = -np.inf, -np.inf
    for g, (ready, cost) in enumerate(zip(ready_s.tolist(), costs_s.tolist())):
        if previous_end == -np.inf:
            start, tau_start = ready, ready
        else:
            gap = max(ready - tau_end, 0.0)
            start, tau_start = previous_end + gap, tau_end + gap
        left = last_compute - tau_start  # compute work left (in no-interference seconds) on the latest worker
        if left > 0:
            end = start + two_body_end_s(left, cost, interference)[1]
            # the work clock runs at 1/kc under the collective; once the last worker's compute is done
            # (possibly inside it) later values of tau are never asked for
            tau_end = tau_start + (end - start) / kc
        else:
            end = start + cost
            tau_end = tau_start + cost
        starts[g], ends[g], tau_at_start[g], tau_at_end[g] = start, end, tau_start, tau_end
        previous_end = end
    if not len(costs_s):
        return starts, ends, np.asarray(backward_end_s, dtype=float)
    wall = np.column_stack([starts, ends]).ravel()
    tau = np.column_stack([tau_at_start, tau_at_end]).ravel()
    y = np.asarray(backward_end_s, dtype=float)
    inside = np.interp(y, tau, wall)
    backward_end = np.where(y <= tau[0], y, np.where(y >= tau[-1], wall[-1] + (y - tau[-1]), inside))
    return starts, ends, backward_end


def ps_compute_slowdown(comm) -> float | None:
    """How much slower a parameter-server worker's backward runs while the worker sends its pushes
    (None: not at all); the sends keep their speed (the file's comm_slowdown does not apply).

    Measured on the PS pattern itself (`benchmarks/send_while_computing.py`, 47 MB in 62 tensors over
    gloo, 1.7 Gbit/s at 0.43 cores and 1.25 Gbit/s at 0.47): netbench's compute loop ran 1.44x and
    1.27x slower while the worker sent, 1.70x and 1.44x while it also received; the transfers took
    1.01-1.04x their time alone. netbench's all-reduce measures 1.5-1.8x for both directions (the
    reduction is CPU work that compute starves); a push has none. The compute slowdown is the
    network file's (an all-reduce sends and receives, as an async worker does while replies to its
    first pushes arrive during backward).
    """
    model = interference_of(comm)
    return None if model is None or model.compute_slowdown == 1.0 else model.compute_slowdown


def compute_while_sending(start_s: float, offsets_s: list[float], order: list[int], send_s: list[float],
                          compute_s: float, link_free_s: float, compute_slowdown: float
                          ) -> tuple[list[float], list[float], float]:
    """A worker's backward that hands its pushes to its own uplink, slowed while the uplink sends.

    Parameter-server form of the model (docs/interference.md, "Parameter servers"): backward
    (`compute_s` alone, from `start_s`) hands message m to the uplink when its work reaches
    `offsets_s[m]`; the uplink sends messages FIFO in hand-over order at full speed, each for
    `send_s[m]` (its bytes at the link's rate), after what it still sends at `link_free_s`; while it
    sends, compute progresses at 1/`compute_slowdown`. The sending is the node's own: the CPU a byte
    costs is spent where it leaves, however the network then shares the flow, so the link's own rate
    is the clock. Returns (wall time each message is handed over, wall time its last byte has left,
    backward end). `order`: message indices by offset. O(messages).
    """
    kc = compute_slowdown
    wall, work, free = start_s, 0.0, link_free_s
    handed = [0.0] * len(offsets_s)
    sent = [0.0] * len(offsets_s)
    for m in [*order, -1]:  # -1: backward's end
        target = compute_s if m < 0 else offsets_s[m]
        if target > work and wall < free:  # the link sends: compute at 1/kc until it stops or reaches the target
            gained = (free - wall) / kc
            if work + gained >= target:
                wall += (target - work) * kc
                work = target
            else:
                wall, work = free, work + gained
        if target > work:  # the link is idle: full speed
            wall += target - work
            work = target
        if m >= 0:
            handed[m] = wall
            free = (free if free > wall else wall) + send_s[m]
            sent[m] = free
    return handed, sent, wall


def overlap_end_s(heads_s: list[float], pre_s: float, comm_s: list[float], interference: Interference) -> float:
    """Coarse WFBP with interference: when both backward and communication are done, from step start.

    Every term of the WFBP recurrence (`sgdscale.coarse.heuristics`), each as a two-body overlap: the
    communication from group g on against the backward left after g is ready (`heads_s[g]`); the
    latest end wins.
    """
    if not comm_s:
        return pre_s
    ends = []
    suffix = 0.0
    for head, comm in zip(reversed(heads_s), reversed(comm_s)):
        suffix += comm
        compute_end, comm_end = two_body_end_s(pre_s - head, suffix, interference)
        ends.append(head + max(compute_end, comm_end))
    return max(max(ends), pre_s)


# Interference a CPU budget implies, where no network file measured it (`derived_interference`): fitted to
# the 43 overlap benchmarks netbench ran on the emulated testbed before held-out sets 18-46 (0.21-0.49
# cores, 250-3500 Mbit/s; benchmarks/interference_fit.py, raw benchmarks/results/interference_fit.md).
# A collective beside compute slows as a smooth maximum of 1 and the CPU it needs over the CPU it gets:
# comm_slowdown = (1 + (c * rate / cores) ** p) ** (1 / p), with rate the link's payload in bytes/s.
TYPICAL_COMM_CPU_S_PER_BYTE = 3.1e-9  # c: wall seconds of a core per byte a collective moves beside compute
TYPICAL_COMM_SLOWDOWN_SHARPNESS = 2.2  # p
# Compute beside a collective: the measured slowdowns (1.17-1.76) do not follow the link's rate per core,
# so the prediction takes their median.
TYPICAL_COMPUTE_SLOWDOWN = 1.39


def derived_interference(link_bps: float, cores: float) -> Interference:
    """The interference a node with `cores` of CPU and a link of `link_bps` payload shows, from the
    testbed's fit (above): a collective slows once the CPU it needs beside compute exceeds what the
    budget leaves it; compute slows by the typical factor. Outside 0.21-0.49 cores it is extrapolated."""
    demand = TYPICAL_COMM_CPU_S_PER_BYTE * link_bps / 8.0 / cores
    p = TYPICAL_COMM_SLOWDOWN_SHARPNESS
    return Interference(TYPICAL_COMPUTE_SLOWDOWN, float((1.0 + demand ** p) ** (1.0 / p)))


def cpu_bound_bps(cpu_s_per_byte: float, cores: float) -> float:
    """The fastest a node with `cores` of CPU can move bytes when each costs `cpu_s_per_byte` (bit/s)."""
    return 8.0 * cores / cpu_s_per_byte


def cpu_bounded_comm(comm, link_bps: float, cpu_s_per_byte: float, cores: float,
                     measured_cores: float | None = None):
    """`comm` with its per-byte costs raised to what a `cores` CPU budget allows.

    effective rate = min(link rate, cores / cpu_s_per_byte). For a model from nominal figures
    (`measured_cores` None) the per-byte costs scale by link_bps / effective rate when the CPU binds.
    For a measured network, its fits already include the CPU bound at `measured_cores`, so they scale
    by (per-byte bound at `cores`) / (per-byte bound at `measured_cores`), each the max of the wire and
    the CPU cost: a budget the link does not feel at either quota changes nothing.
    """
    wire = 8.0 / link_bps
    new = max(wire, cpu_s_per_byte / cores)
    old = wire if measured_cores is None else max(wire, cpu_s_per_byte / measured_cores)
    factor = new / old
    if factor == 1.0:
        return comm
    return comm.with_bandwidth_scaled(factor)


def with_interference(comm, interference: Interference | None):
    """`comm` carrying an interference model (None or zero: unchanged)."""
    return dataclasses.replace(comm, interference=interference)


# CPU seconds per byte a node sends in a gloo all-reduce (receive and reduce included), measured on the
# emulated testbed (benchmarks/results/interference/); used for --cpu-per-node without a network file.
TYPICAL_CPU_S_PER_BYTE = 1.0e-9  # median of 8 runs, range 0.53-1.20 ns/B
# (Held-out set 49 tried the medians of the network files of sets 18-46 for all three: 0.77 ns, 69 us, 126 us;
# not kept: benchmarks/budget_typical_figures.py, README "Held-out set 49".)
# CPU of one point-to-point message apart from its bytes (sgdscale.message_cpu): the median of netbench's
# four measurements on this testbed, 28 us alone and at 0.28 cores, 38.7 us at 0.24 (set 31), 48.9 us at 0.49 (set 32).
TYPICAL_CPU_S_PER_MESSAGE = 3.3e-5
# What a message sent or received alone, after compute, costs on top (sgdscale.message_cpu.wakeup_weights):
# benchmarks/message_spacing_cpu.py at 0.40 cores, spaced 2-4 ms against a burst.
TYPICAL_CPU_S_PER_WAKEUP = 7.0e-5


def node_model(comm, *, network=None, link_bps: float, cpu_cores: float | None = None,
               interference: bool = True) -> tuple[object, list[str]]:
    """The cost model a prediction uses on nodes with a CPU budget, and notes saying what was applied.
    `link_bps` is the link's payload rate (its nominal rate less framing, `sgdscale.comm.framing`).

    - CPU budget: `cpu_cores` (e.g. --cpu-per-node), else the quota the network file was measured at.
      With a CPU cost per byte (from the file, else `TYPICAL_CPU_S_PER_BYTE`) the link runs at most at
      cores / cpu_s_per_byte (`cpu_bounded_comm`); parameter-server messages cost message_s / cores
      each (from the file, else `TYPICAL_CPU_S_PER_MESSAGE`; `sgdscale.message_cpu`).
    - Interference: the file's model, unless `interference` is False.
    - Without a network file, a note says how far measured networks moved predictions from nominal figures.
    """
    notes: list[str] = []
    cpu = getattr(network, "cpu", None) if network is not None else None
    measured_cores = cpu.cores if cpu is not None else None
    cores = cpu_cores if cpu_cores is not None else measured_cores
    per_byte = None
    if cpu is not None:
        per_byte = cpu.allreduce_s_per_byte or cpu.p2p_s_per_byte
    if per_byte is None and cpu_cores is not None:
        per_byte = TYPICAL_CPU_S_PER_BYTE
        notes.append(f"CPU cost of transport {per_byte * 1e9:.3g} ns/B: the testbed's typical figure "
                     "(no measured one in the network file)")
    if cores is not None and per_byte is not None:
        if network is not None and measured_cores is None and cpu_cores is not None:
            measured = None  # measured unshaped: treat the fits as the wire's own cost
        else:
            measured = measured_cores if network is not None else None
        bound_bps = cpu_bound_bps(per_byte, cores)
        before = comm
        comm = cpu_bounded_comm(comm, link_bps, per_byte, cores, measured)
        if comm is not before:
            notes.append(f"CPU-bound links: {cores:g} cores per node move at most {bound_bps / 1e6:.0f} Mbit/s "
                         f"({per_byte * 1e9:.3g} ns of CPU per byte), below the link's {link_bps / 1e6:.0f} Mbit/s of payload: "
                         f"per-byte costs x{comm.p2p.beta_s_per_byte / before.p2p.beta_s_per_byte:.2f}")
        else:
            notes.append(f"CPU budget {cores:g} cores per node allows {bound_bps / 1e6:.0f} Mbit/s "
                         f"({per_byte * 1e9:.3g} ns of CPU per byte): the link, not the CPU, limits")
    message_s = cpu.message_s if cpu is not None else None
    measured_message = bool(message_s)
    if not message_s and cpu_cores is not None:
        message_s = TYPICAL_CPU_S_PER_MESSAGE
    wakeup_s = cpu.message_wakeup_s if cpu is not None else None
    if not wakeup_s and not measured_message and cpu_cores is not None:
        wakeup_s = TYPICAL_CPU_S_PER_WAKEUP
    if wakeup_s and cores:
        comm = dataclasses.replace(comm, worker_cpu_s_per_wakeup=wakeup_s / cores)
    if message_s and cores:
        wall_s = message_s / cores
        comm = dataclasses.replace(comm, server_cpu_s_per_message=wall_s, worker_cpu_s_per_message=wall_s)
        source = "measured" if measured_message else "the testbed's typical figure, none measured"
        notes.append(f"parameter-server messages ({source}): {message_s * 1e6:.0f} us of CPU each apart from their "
                     f"bytes, {wall_s * 1e6:.0f} us of a node at {cores:g} cores, paid by the worker per tensor pushed "
                     "and pulled and by the shard per copy in and reply out"
                     + (f"; a worker's message {wakeup_s * 1e6:.0f} us more when it leaves alone, after compute"
                        if wakeup_s else ""))
    model = Interference.from_network(network) if network is not None and interference else None
    if model is None and interference and cpu_cores is not None:
        model = derived_interference(link_bps, cpu_cores)
        notes.append(f"interference (the testbed's typical figures for {cpu_cores:g} cores and a "
                     f"{link_bps / 1e6:.0f} Mbit/s link, none measured): compute {model.compute_slowdown:.2f}x slower "
                     f"while a collective runs or a parameter-server worker sends its pushes, a collective "
                     f"{model.comm_slowdown:.2f}x slower while compute runs (--no-interference to leave it out)")
    elif model is not None:
        notes.append(f"interference (measured): compute {model.compute_slowdown:.2f}x slower while a collective "
                     f"runs or a parameter-server worker sends its pushes, a collective {model.comm_slowdown:.2f}x "
                     "slower while compute runs (pushes keep their speed) (--no-interference to leave it out)")
    comm = with_interference(comm, model)
    if network is None:
        from sgdscale.heldout_ranges import median_bias_note

        budget_hint = "" if cpu_cores is not None else (
            "; or, if you know the nodes' CPU budget, give it with --cpu-per-node CORES")
        notes.append("nominal network figures (no --network FILE): " + TYPICAL_MEASURED_NOTE + "; "
                     + median_bias_note() + "; measure yours with "
                     "`sgdscale netbench --workers 2,3 --ops p2p,allreduce,incast,overlap -o net.json`" + budget_hint)
    else:
        nominal = (network.environment or {}).get("bandwidth_bps")
        if nominal:
            ratios = [f"point to point at {8 / network.p2p.beta_s_per_byte / nominal:.0%}"]
            for workers, fit in sorted(network.allreduce.items(), key=lambda kv: int(kv[0])):
                n = int(workers)
                ratios.append(f"{n}-way all-reduce at {2 * (n - 1) / n * 8 / nominal / fit.beta_s_per_byte:.0%}")
            notes.append(f"measured network vs the nominal {nominal / 1e6:.0f} Mbit/s link: " + ", ".join(ratios)
                         + " of the ring formula's rate")
    return comm, notes
