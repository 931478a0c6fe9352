"""The Network file (`sgdscale.network/1`): alpha-beta parameters fitted from a benchmark.

`sgdscale netbench` measures point-to-point and all-reduce times against message size and writes
this file with its raw points; `sgdscale predict --network FILE` reads it so predictions use the
measured network instead of the nominal bandwidth and latency.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sgdscale.comm.sharing import first_over_last
from sgdscale.errors import UserError
from sgdscale.inputs import (BANDWIDTH_BPS, LATENCY_S, SECONDS_PER_BYTE, ByteCount, Cores, CpuSecondsPerByte,
                             NonNegative, Positive, Range, Seconds, Slowdown, WorkerCount, bounded, show, worker_key)
from sgdscale.jsonio import read_document

NETWORK_SCHEMA = "sgdscale.network/1"

FIRST_LAST = Range(0, 1, low_open=True)  # first sender's completion over the last one's
SHARE_SIGMA = Range(0, 2)  # log-normal sigma of a flow's share weight; 2 means a 7x typical weight spread
FirstLastRatio = Annotated[float, bounded(FIRST_LAST)]
ShareSigma = Annotated[float, bounded(SHARE_SIGMA)]
SampleCount = Annotated[int, bounded(Range(1, 1e9, integer=True))]
# The sharing fit uses only bandwidth-bound incast messages (see `sharing_from_points`).
SHARING_MIN_BYTES = 1e6
SHARING_CROSSOVER_FACTOR = 20


class AlphaBeta(BaseModel):
    """t(M) = alpha_s + beta_s_per_byte * M for a message of M bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha_s: NonNegative
    beta_s_per_byte: Positive

    def time_s(self, nbytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * nbytes



class BenchPoint(BaseModel):
    """One measured message size: the op, worker count, bytes and per-repeat times."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    op: Literal["p2p", "allreduce", "incast"]
    workers: WorkerCount = Field(ge=2)
    bytes: ByteCount
    samples_s: list[Seconds] = Field(min_length=1)
    median_s: Seconds
    cpu_s: list[Seconds] | None = None  # CPU time (user + system) of the busiest measured rank per repeat
    # incast only: per repeat, when each sender's message had fully arrived at rank 0 (senders in rank order)
    senders_s: list[list[Seconds]] | None = None
    # all-reduce only: per repeat, a copy of the reduced tensor right after the collective (slowest rank)
    copy_s: list[Seconds] | None = None


class InterferenceFit(BaseModel):
    """How much compute and a collective slow each other when they overlap on one node (`--ops overlap`).

    `compute_slowdown` = time of a fixed compute loop while an all-reduce of `bytes` runs / alone;
    `comm_slowdown` = that all-reduce's time while the compute loop runs / alone (ratios of medians,
    floored at 1: a ratio below 1 is noise). The raw per-repeat samples stay for the record.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    compute_slowdown: Slowdown
    comm_slowdown: Slowdown
    workers: WorkerCount = Field(ge=2)
    bytes: ByteCount = Field(gt=0)
    compute_alone_s: list[Seconds] = Field(default_factory=list)
    compute_overlap_s: list[Seconds] = Field(default_factory=list)
    comm_alone_s: list[Seconds] = Field(default_factory=list)
    comm_overlap_s: list[Seconds] = Field(default_factory=list)


class CpuCost(BaseModel):
    """CPU seconds a node spends per byte of transport, fitted (slope over the large messages) from the
    ranks' CPU time during the benchmark: `allreduce_s_per_byte` per byte a node sends in an all-reduce
    (2(N-1)/N * M for M bytes; receiving and reducing that byte included), `p2p_s_per_byte` per byte
    sent or received point to point, `message_s` per point-to-point message sent or received apart from
    its bytes (an isend or irecv of a tiny tensor in a burst), `message_wakeup_s` what one costs on top
    when it comes alone, after compute (sgdscale.message_cpu.wakeup_weights). `cores`: the node's CPU
    budget while measured (None: unshaped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    allreduce_s_per_byte: CpuSecondsPerByte | None = None
    p2p_s_per_byte: CpuSecondsPerByte | None = None
    message_s: Seconds | None = None
    message_wakeup_s: Seconds | None = None
    cores: Cores | None = None


class Sharing(BaseModel):
    """How unequally concurrent TCP flows into one node share its link, from `--ops incast`.

    Senders that start together with equal messages all finish together under equal max-min sharing;
    measured, the first is done well before the last. `weight_sigma` is the log-normal sigma of a
    flow's weight under weighted max-min sharing that reproduces the measured median first/last
    ratio (`fit_share_weight_sigma`; `CommModel.share_weight_sigma` hands it to the simulator).
    `first_last` and `sigma_by_senders` hold, per sender count, the median ratio and its own sigma;
    `repeats` how many ratios (repeats x sizes) each median is over; `bytes` the message sizes used;
    `sigma_by_bytes` the sigma of each message size alone (every sender count pooled): recorded, not
    used by the predictors. Held-out set 52 kept the fine method taking the sigma at the size nearest
    its bursts (4 replays: 4.1% -> 2.5%), set 53 took it back (4 real-compute cases: 0.7% -> 5.0%).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    weight_sigma: ShareSigma
    first_last: dict[str, FirstLastRatio] = Field(min_length=1)
    sigma_by_senders: dict[str, ShareSigma] = Field(default_factory=dict)
    repeats: dict[str, SampleCount] = Field(default_factory=dict)
    bytes: list[ByteCount] = Field(default_factory=list)
    sigma_by_bytes: dict[str, ShareSigma] = Field(default_factory=dict)

    @field_validator("first_last", "sigma_by_senders", "repeats")
    @classmethod
    def _sender_keys(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in values:
            worker_key(key)
        return values

    @field_validator("sigma_by_bytes")
    @classmethod
    def _size_keys(cls, values: dict[str, Any]) -> dict[str, Any]:
        for key in values:
            if not key.isdigit() or int(key) <= 0:
                raise ValueError(f"key {key!r} is not a message size in bytes (write it as \"16000000\")")
        return values


NEWCOMER_WEIGHT = Range(0, 1, low_open=True)  # a newcomer flow's weight relative to the flows already moving
NewcomerWeight = Annotated[float, bounded(NEWCOMER_WEIGHT)]


class Outcast(BaseModel):
    """How flows out of one node share its link, from `--ops outcast` (`sgdscale.runtime.netbench`).

    `newcomer_weight`: the weight, relative to a flow already leaving the node, of a flow that starts
    while it moves (median over repeats of (t1 - d) / (L - d) - 1; recorded, not used by the
    predictors: `sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT` says why). `first_second_together`: two flows started together, the
    first's finish over the second's (median; 1: they finish together). The raw per-repeat times
    (seconds from the first send, rank 0's clock) stay for the record.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    newcomer_weight: NewcomerWeight
    first_second_together: FirstLastRatio
    bytes: ByteCount = Field(gt=0)
    alone_s: list[Seconds] = Field(default_factory=list)
    head_start_s: list[Seconds] = Field(default_factory=list)
    first_s: list[Seconds] = Field(default_factory=list)
    second_s: list[Seconds] = Field(default_factory=list)
    together_first_s: list[Seconds] = Field(default_factory=list)
    together_second_s: list[Seconds] = Field(default_factory=list)


class SendLead(BaseModel):
    """How long before its bytes arrive a point-to-point send completes, from `--ops p2p`
    (`sgdscale.runtime.netbench`): rank 0 sends `bytes` to rank 1, which answers a 4-byte
    acknowledgement once it has them all; per repeat, the acknowledgement's arrival less the send's
    completion less the p2p startup (both on rank 0's clock). gloo completes a send once its last byte
    is in the socket, so this is what the sender's socket and the queues between the nodes still hold
    then, in seconds. A sync PS shard posts its next step's receives that much before its replies
    arrive; the fine method can model that (`sgdscale.fine.ps.POSTS_AHEAD_BY_SEND_LEAD`), but it was
    not kept, so the lead is recorded, not used. `lead_s` is the median; the raw repeats stay for the record.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    lead_s: Seconds
    bytes: ByteCount = Field(gt=0)
    sent_s: list[Seconds] = Field(default_factory=list)  # the send's completion, from its start
    acknowledged_s: list[Seconds] = Field(default_factory=list)  # the acknowledgement's arrival, from the start


class Network(BaseModel):
    """Fitted cost parameters plus the raw points they came from.

    `p2p` is one message between two nodes. `allreduce` maps a worker count (as a string key, JSON
    style) to the fitted whole-collective time alpha + beta*M of the implementation measured
    (e.g. gloo), which the predictor uses as is for that worker count. `incast` maps a number of
    concurrent senders to the fit of the time for one node to receive M bytes in total from them:
    the ingress a parameter server really gets when N workers push at once; it is measured and
    reported (`sgdscale netbench`) but no predictor reads it (both share a server NIC at the p2p
    rate, weighted by `sharing` where present). `interference` and
    `cpu` (optional; files without them load as before) hold the compute/communication
    interference and the CPU cost per byte (sgdscale.comm.interference, docs/interference.md);
    `sharing` (optional too) how unequally concurrent flows share a link (`Sharing`); `outcast` (optional)
    how flows out of one node share its link (`Outcast`); `send_lead` (optional) how long before its
    bytes arrive a send completes (`SendLead`); `bucket_copy` (optional)
    the wall time of copying M bytes on a node right after an all-reduce, as DDP copies its buckets
    back (`sgdscale.bucket_copies`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    schema_: Literal["sgdscale.network/1"] = Field(default=NETWORK_SCHEMA, alias="schema")
    source: str = ""
    p2p: AlphaBeta
    allreduce: dict[str, AlphaBeta] = Field(default_factory=dict)
    incast: dict[str, AlphaBeta] = Field(default_factory=dict)
    points: list[BenchPoint] = Field(default_factory=list)
    environment: dict[str, Any] = Field(default_factory=dict)
    interference: InterferenceFit | None = None
    cpu: CpuCost | None = None
    sharing: Sharing | None = None
    bucket_copy: AlphaBeta | None = None  # copying M bytes on a node right after an all-reduce (sgdscale.bucket_copies)
    outcast: Outcast | None = None  # how flows out of one node share its link (`Outcast`)
    send_lead: SendLead | None = None  # how long before its bytes arrive a send completes (`SendLead`)

    @field_validator("allreduce", "incast")
    @classmethod
    def _worker_keys(cls, fits: dict[str, AlphaBeta]) -> dict[str, AlphaBeta]:
        for key, fit in fits.items():
            worker_key(key)
            _measurable(fit, f"{key}.")
        return fits

    @field_validator("p2p")
    @classmethod
    def _p2p(cls, fit: AlphaBeta) -> AlphaBeta:
        return _measurable(fit)

    @field_validator("environment")
    @classmethod
    def _nominal_rate(cls, environment: dict[str, Any]) -> dict[str, Any]:
        """The one environment entry the predictor reads: the nominal link rate it was measured at."""
        if environment.get("bandwidth_bps") is not None:
            problem = BANDWIDTH_BPS.problem(environment["bandwidth_bps"])
            if problem is not None:
                raise ValueError(f"bandwidth_bps = {environment['bandwidth_bps']!r}: {problem} "
                                 f"(allowed: {BANDWIDTH_BPS.text()})")
        return environment

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def _measurable(fit: AlphaBeta, where: str = "") -> AlphaBeta:
    """A fit a real link can have (sgdscale.inputs); costs the program derives (a tree of slow
    links) may exceed these bounds, so they are checked on files, not on every AlphaBeta."""
    for name, allowed in (("alpha_s", LATENCY_S), ("beta_s_per_byte", SECONDS_PER_BYTE)):
        problem = allowed.problem(getattr(fit, name))
        if problem is not None:
            raise ValueError(f"{where}{name} = {show(getattr(fit, name))}: {problem} (allowed: {allowed.text()})")
    return fit


def fit_alpha_beta(nbytes: list[float] | np.ndarray, seconds: list[float] | np.ndarray) -> AlphaBeta:
    """t = alpha + beta*M from benchmark points: beta is the slope over the large messages, alpha
    the startup cost left at the smallest message.

    One line through all sizes fits neither end: token-bucket bursts, protocol switches and CPU
    throttling bend the curve, and a least-squares line then trades the bandwidth (what large
    gradients pay) for the small messages, or the reverse. So the two regimes are fitted apart:
    beta by least squares over the messages within 1/20 of the largest, alpha >= 0 from the
    smallest message.
    """
    x = np.asarray(nbytes, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if x.size < 2 or np.ptp(x) == 0:
        raise UserError("need at least two different message sizes to fit alpha and beta")
    large = x >= x.max() / 20
    if np.ptp(x[large]) == 0:
        large = np.ones_like(x, dtype=bool)
    beta = max(float(np.polyfit(x[large], y[large], 1)[0]), 1e-15)
    smallest = x == x.min()
    alpha = max(0.0, float(np.median(y[smallest] - beta * x[smallest])))
    return AlphaBeta(alpha_s=alpha, beta_s_per_byte=beta)


def fit_share_weight_sigma(ratios_by_senders: dict[int, Sequence[float]]) -> float:
    """The log-normal weight sigma under which GPS sharing gives the measured first/last ratios.

    Per sender count k >= 2: bisection on sigma in [0, 2] until the median GPS ratio under those
    weights (`sgdscale.comm.sharing.first_over_last`; fixed draws, so monotone in sigma) equals the
    median measured ratio (a median of 1: sigma 0; below what sigma 2 gives: 2). The per-k sigmas are
    averaged weighted by how many ratios each has. One sender says nothing about sharing.
    """
    sigmas, weights = [], []
    for senders, ratios in ratios_by_senders.items():
        ratios = [float(r) for r in ratios]
        if any(FIRST_LAST.problem(r) is not None for r in ratios):
            raise ValueError(f"first/last ratios must lie in (0, 1], got {ratios}")
        if senders < 2 or not ratios:
            continue
        sigmas.append(_sigma_for(statistics.median(ratios), senders))
        weights.append(len(ratios))
    if not weights:
        raise ValueError("no first/last ratios with 2 or more senders to fit a sharing sigma to")
    return float(np.average(sigmas, weights=weights))


def _sigma_for(target: float, senders: int) -> float:
    low, high = SHARE_SIGMA.low, SHARE_SIGMA.high
    if target >= 1.0:
        return 0.0
    if target <= first_over_last(senders, high, "median"):
        return high
    for _ in range(40):  # 2 / 2**40: far below what the draws resolve
        middle = (low + high) / 2
        low, high = (middle, high) if first_over_last(senders, middle, "median") > target else (low, middle)
    return (low + high) / 2


def startup_s(points: Sequence[BenchPoint], p2p: AlphaBeta) -> float:
    """The p2p startup cost as the median over the three smallest ping-pong sizes of each size's
    fastest repeat less beta x size: what decides which incast sizes are bandwidth-bound. Not the
    fit's alpha, which comes from the smallest size's median alone: one slow spell there (held-out
    set 18's file: 1 kB took 3.96 ms, 3.4 kB and 11 kB 0.07 and 0.06 ms; set 14's: 1.8 ms) left
    every incast size below the crossover, so no link sharing was fitted and the fine method ran
    async workers in lock step (set 18: -37% and -38% with 4 workers). Not the medians either: a
    node throttled by its CPU quota stalls a ping-pong for the rest of the CFS period, and on set
    23's 3-process file most small repeats did (1 kB and 3.4 kB: medians 4.53 and 4.72 ms, fastest
    0.10 and 0.08 ms), with the same outcome (alexnet async, 2 workers: -42.6%)."""
    by_size: dict[int, list[float]] = {}
    for point in points:
        if point.op == "p2p":
            by_size.setdefault(point.bytes, []).append(min(point.samples_s))
    if not by_size:
        return p2p.alpha_s
    residuals = [min(times) - p2p.beta_s_per_byte * size for size, times in sorted(by_size.items())[:3]]
    return max(0.0, statistics.median(residuals))


def sharing_from_points(points: Sequence[BenchPoint], p2p: AlphaBeta) -> Sharing | None:
    """Fit `Sharing` from the incast points that recorded each sender's completion (None: none did).

    Only bandwidth-bound messages count: at least SHARING_MIN_BYTES and SHARING_CROSSOVER_FACTOR
    times the p2p crossover startup/beta (`startup_s`). In smaller ones the startup cost (alpha, and rank 0 noticing
    a completion) is more than 1/20 of the time and spreads the completions for reasons that are not
    link sharing, while the simulator's weights only act on bytes on the wire. Above that the spread
    still shrinks with the message (benchmarks/results/sharing/README.md: 4 senders at 800 Mbit/s,
    sigma 0.27 from 1-4 MB, 0.15 from 8-16 MB, pooled over 4 runs), so `bytes` says what a fit stands for.
    """
    min_bytes = max(SHARING_MIN_BYTES, SHARING_CROSSOVER_FACTOR * startup_s(points, p2p) / p2p.beta_s_per_byte)
    ratios: dict[int, list[float]] = {}
    by_size: dict[int, dict[int, list[float]]] = {}  # size -> senders -> ratios
    for point in points:
        if point.op != "incast" or not point.senders_s or point.bytes < min_bytes or point.workers < 3:
            continue
        these = [min(r) / max(r) for r in point.senders_s if min(r) > 0]
        ratios.setdefault(point.workers - 1, []).extend(these)
        by_size.setdefault(point.bytes, {}).setdefault(point.workers - 1, []).extend(these)
    ratios = {k: v for k, v in ratios.items() if v}
    if not ratios:
        return None
    by_size = {size: {k: v for k, v in senders.items() if v} for size, senders in by_size.items()}
    return Sharing(weight_sigma=fit_share_weight_sigma(ratios),
                   first_last={str(k): statistics.median(v) for k, v in sorted(ratios.items())},
                   sigma_by_senders={str(k): fit_share_weight_sigma({k: v}) for k, v in sorted(ratios.items())},
                   repeats={str(k): len(v) for k, v in sorted(ratios.items())}, bytes=sorted(by_size),
                   sigma_by_bytes={str(size): fit_share_weight_sigma(senders)
                                   for size, senders in sorted(by_size.items()) if senders})


def load_network(path: str | Path) -> Network:
    return read_document(path, NETWORK_SCHEMA, Network, what="network file",
                         missing=f"network file {path} does not exist (make one with `sgdscale netbench -o {path}`)",
                         fix="fix that value, or measure the network again with `sgdscale netbench -o FILE`")
