"""One vocabulary of resources and one describer of bottlenecks, for both prediction methods.

Both the fine method (simulation) and the coarse one (phases, MVA) report what they measured in
the words below, and every sentence starts with its category (`compute:`, `communication:`,
`stragglers:`, `contention:`, `server update:`), and `describe` turns that evidence into `(limited_by, sentence)` with one set of
rules, so the two methods' results compare key by key and the table, `--json` and plots say the
same thing (issue 11).

**Utilization keys** (`Outcome.utilization`: busy fraction of the step or cycle, 0..1):
`worker compute`; `worker NIC out` / `worker NIC in` (the busiest worker NIC, sending: push or
all-reduce send; receiving: pull or all-reduce receive); `intra-node link` (all-reduce on
multi-device nodes); `server S NIC in` (pushes arriving at shard S), `server S NIC out` (pulls
leaving it), `server S update` (aggregation and optimizer work of shard S).

**Levels** (`Outcome.levels`: busy seconds per step of each level's busiest part, one direction)
and the values of `limited_by`: `compute`, `stragglers`, `NIC`, `intra-node link`, `server NIC`,
`server update`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sgdscale.result import Breakdown
from sgdscale.units import format_bytes, format_seconds

# --- the vocabulary ---------------------------------------------------------------------------
COMPUTE = "worker compute"
WORKER_NIC_OUT = "worker NIC out"
WORKER_NIC_IN = "worker NIC in"
INTRA_LINK = "intra-node link"

LEVEL_COMPUTE = "compute"
LEVEL_STRAGGLERS = "stragglers"
LEVEL_NIC = "NIC"
LEVEL_INTRA = "intra-node link"
LEVEL_SERVER_NIC = "server NIC"
LEVEL_SERVER_UPDATE = "server update"
LIMITS = (LEVEL_COMPUTE, LEVEL_STRAGGLERS, LEVEL_NIC, LEVEL_INTRA, LEVEL_SERVER_NIC, LEVEL_SERVER_UPDATE)


def server_nic_in(shard: int) -> str:
    return f"server {shard} NIC in"


def server_nic_out(shard: int) -> str:
    return f"server {shard} NIC out"


def server_update(shard: int) -> str:
    return f"server {shard} update"


def level_of(resource: str) -> str:
    """The level (a `limited_by` value) a utilization key belongs to."""
    if resource == COMPUTE:
        return LEVEL_COMPUTE
    if resource.startswith("server "):
        return LEVEL_SERVER_UPDATE if resource.endswith(" update") else LEVEL_SERVER_NIC
    if resource == INTRA_LINK:
        return LEVEL_INTRA
    return LEVEL_NIC


# What to change when a level limits the step.
LEVERS = {
    LEVEL_NIC: "add worker bandwidth or send fewer gradient bytes",
    LEVEL_INTRA: "use a faster intra-node link or --allreduce hierarchical",
    LEVEL_SERVER_NIC: "add parameter servers or server bandwidth",
    LEVEL_SERVER_UPDATE: "add parameter servers (shards) or speed up the update",
    LEVEL_STRAGGLERS: "balance worker speeds or reduce compute variability",
}

SATURATED = 0.85  # a shared resource this busy limits throughput by itself
STRAGGLERS = 0.10  # waiting for others at least this share of the step (and more than exposed comm)
VISIBLE = 0.05  # communication under this share of the step counts as hidden


@dataclass
class Evidence:
    """What a method measured about one worker count, in the vocabulary above.

    `communication`: what the step waits for, in words (e.g. "the all-reduce of 102 MB over a
    10 Gbit/s ring (85 ms per step, ...)"); `lever`: the communication advice specific to the
    strategy (e.g. larger buckets), or empty for the level's `LEVERS` entry; `compute_scale` and
    `variable`: why workers could straggle; `note` is appended (e.g. "(approximate MVA)").
    """

    workers: int
    sync: bool
    step_s: float
    breakdown: Breakdown
    utilization: dict[str, float]
    levels: dict[str, float]
    communication: str = ""
    lever: str = ""
    compute_scale: Sequence[float] = ()
    variable: bool = False
    note: str = ""


def _pct(fraction: float) -> str:
    return f"{fraction:.0%}"


def straggler_cause(compute_scale: Sequence[float], variable: bool) -> str:
    """Why some worker is the slowest, from the inputs both methods share."""
    if compute_scale and any(s != 1.0 for s in compute_scale):
        slowest = max(range(len(compute_scale)), key=lambda w: compute_scale[w])
        return f"worker {slowest} computes {compute_scale[slowest]:g}x slower"
    if variable:
        return "per-iteration compute times vary and every barrier waits for the slowest worker"
    return ""


def busiest_level(levels: dict[str, float]) -> str:
    """The network or server level busiest per step (`NIC` when none is busy)."""
    busy = {k: v for k, v in levels.items() if k != LEVEL_COMPUTE and v > 0}
    return max(busy, key=busy.get) if busy else LEVEL_NIC


def describe(e: Evidence) -> tuple[str, str]:
    """(limited_by, sentence): one rule set for every strategy and method.

    In order: one worker with nothing to communicate (all-reduce; a parameter server's one worker
    still pushes and pulls), or exposed communication under 5% and waiting under 10% of the step,
    is compute; a shared resource at least 85% busy names itself; waiting at least 10% of the step and more than exposed
    communication is stragglers (sync, with a cause, and longer than any server is busy per step)
    or else queueing at the busiest resource;
    otherwise the exposed communication, on the busiest level.
    """
    tail = f" {e.note}" if e.note else ""
    b = e.breakdown
    if e.workers == 1 and b.exposed_comm_s <= 0 and b.wait_s < VISIBLE * e.step_s:
        return LEVEL_COMPUTE, "compute: a single worker does not communicate" + tail
    if e.step_s <= 0:
        return LEVEL_COMPUTE, "compute: nothing to compute" + tail
    wait, exposed = b.wait_s / e.step_s, b.exposed_comm_s / e.step_s
    shared = {k: v for k, v in e.utilization.items() if k != COMPUTE}
    top = max(shared, key=shared.get) if shared else ""
    top_u = shared.get(top, 0.0)
    if exposed < VISIBLE and wait < STRAGGLERS:
        busiest = f"; busiest resource {top} {_pct(top_u)} busy" if top_u >= VISIBLE else ""
        return LEVEL_COMPUTE, (f"compute: workers compute {_pct(b.compute_s / e.step_s)} of the step, communication "
                               f"is hidden{busiest}: scaling is near linear" + tail)
    if top_u >= SATURATED:
        level = level_of(top)
        what = f" with {e.communication}" if e.communication and level in (LEVEL_NIC, LEVEL_INTRA) else ""
        lever = (e.lever if level in (LEVEL_NIC, LEVEL_INTRA) else "") or LEVERS[level]
        category = "server update" if level == LEVEL_SERVER_UPDATE else "communication"
        return level, f"{category}: {top} is busy {_pct(top_u)} of the time{what}: {lever}" + tail
    cause = straggler_cause(e.compute_scale, e.variable)
    # Waiting that a server's busy time per step (its NIC in, update and NIC out, which a sync step
    # passes through one after another) could explain is queueing, not stragglers.
    per_shard: dict[str, float] = {}
    for key, u in shared.items():
        if key.startswith("server "):
            shard = key.split()[1]
            per_shard[shard] = per_shard.get(shard, 0.0) + u * e.step_s
    queued = not e.sync or max(per_shard.values(), default=0.0) >= b.wait_s
    if wait >= STRAGGLERS and wait >= exposed and (cause or queued):
        if e.sync and cause and not queued:
            text = f"stragglers: workers wait {_pct(wait)} of the step for the slowest ({cause})"
            if exposed >= VISIBLE:
                text += f"; communication not hidden behind compute adds another {_pct(exposed)}"
            return LEVEL_STRAGGLERS, text + f": {LEVERS[LEVEL_STRAGGLERS]}" + tail
        level = level_of(top) if top else busiest_level(e.levels)
        return level, (f"contention: workers wait {_pct(wait)} of the step queued behind other workers' traffic "
                       f"({top or level} busiest, {_pct(top_u)} busy): {LEVERS[level]}" + tail)
    level = busiest_level(e.levels)
    blocked = exposed if exposed >= VISIBLE else wait + exposed
    if level == LEVEL_SERVER_UPDATE:
        return level, (f"server update: {_pct(blocked)} of each step waits for shards aggregating and updating "
                       f"({format_seconds(e.levels[level])} per step): {LEVERS[level]}" + tail)
    what = e.communication or "communication"
    on_level = {k: v for k, v in shared.items() if level_of(k) == level}
    where = f"the {level}"
    if on_level:
        key = max(on_level, key=on_level.get)
        where = f"{key} ({_pct(on_level[key])} busy)"
    text = f"communication: {_pct(blocked)} of each step waits for {what}; busiest: {where}"
    if wait >= VISIBLE and exposed >= VISIBLE:
        # async workers never wait for each other: what they wait for is the others' messages ahead of
        # theirs at a shared server or link (the queueing of the coarse method's MVA, say)
        whom = "waiting for other workers" if e.sync else "queueing behind other workers' messages"
        text += f"; {whom} adds another {_pct(wait)}"
    return level, text + f": {e.lever or LEVERS[level]}" + tail


def allreduce_words(total_bytes: float, network: str, comm_s: float, exposed_s: float, grouping: str,
                    collectives: int, startup_s: float) -> tuple[str, str]:
    """(communication, lever) of a synchronous all-reduce step, for `Evidence`."""
    communication = (f"the all-reduce of {format_bytes(total_bytes)} over {network} ({format_seconds(comm_s)} per "
                     f"step, {format_seconds(exposed_s)} of it not hidden behind backward)")
    if grouping == "single":
        lever = "nothing overlaps with backward: try --grouping buckets"
    elif collectives and startup_s > 0.5 * comm_s:
        lever = (f"{collectives} collectives x {format_seconds(startup_s / collectives)} startup dominate: "
                 "try larger buckets or --grouping mg-wfbp")
    else:
        lever = "try a faster network or fewer gradient bytes"
    return communication, lever


def ps_words(total_bytes: float) -> str:
    """The communication of a parameter-server step, for `Evidence`."""
    return f"pushes and pulls ({format_bytes(total_bytes)} per worker and step each way)"


def describe_allreduce(*, workers: int, step_s: float, breakdown: Breakdown, levels: dict[str, float], topology,
                       grouping: str, sizes_bytes: Sequence[float], comm_s: float, compute_scale: Sequence[float],
                       variable: bool) -> tuple[str, str, dict[str, float]]:
    """(limited_by, sentence, utilization) of a synchronous all-reduce step, the same for both
    methods: `levels` holds the busy seconds per step of the NIC and the intra-node link,
    `topology` (a `comm.topology.Topology`) words the network and gives the startup cost."""
    per = (lambda s: s / step_s) if step_s > 0 else (lambda s: 0.0)
    nic = per(levels.get(LEVEL_NIC, 0.0))
    utilization = {COMPUTE: per(breakdown.compute_s), WORKER_NIC_OUT: nic, WORKER_NIC_IN: nic}
    if levels.get(LEVEL_INTRA, 0.0) > 0:
        utilization[INTRA_LINK] = per(levels[LEVEL_INTRA])
    linear = topology.allreduce_linear() if workers > 1 else None
    startup_s = (linear.alpha_s if linear else 0.0) * len(sizes_bytes)
    communication, lever = allreduce_words(float(sum(sizes_bytes)), topology.describe_allreduce(), comm_s,
                                           breakdown.exposed_comm_s, grouping, len(sizes_bytes), startup_s)
    evidence = Evidence(workers=workers, sync=True, step_s=step_s, breakdown=breakdown,
                        utilization={k: min(v, 1.0) for k, v in utilization.items()}, levels=levels,
                        communication=communication, lever=lever, compute_scale=compute_scale, variable=variable)
    limited_by, text = describe(evidence)
    return limited_by, text, evidence.utilization
