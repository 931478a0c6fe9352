"""The Network file (`sgdscale.network/1`): alpha-beta parameters fitted from a benchmark.

`sgdscale netbench` measures point-to-point and all-reduce times against message size and writes
this file with its raw points; `sgdscale predict --network FILE` reads it so predictions use the
measured network instead of the nominal bandwidth and latency.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sgdscale.errors import UserError
from sgdscale.inputs import (BANDWIDTH_BPS, LATENCY_S, SECONDS_PER_BYTE, ByteCount, Cores, CpuSecondsPerByte,
                             NonNegative, Positive, Seconds, Slowdown, WorkerCount, show, worker_key)
from sgdscale.jsonio import read_document

NETWORK_SCHEMA = "sgdscale.network/1"


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
    sent or received point to point. `cores`: the node's CPU budget while measured (None: unshaped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    allreduce_s_per_byte: CpuSecondsPerByte | None = None
    p2p_s_per_byte: CpuSecondsPerByte | None = None
    cores: Cores | None = None


class Network(BaseModel):
    """Fitted cost parameters plus the raw points they came from.

    `p2p` is one message between two nodes. `allreduce` maps a worker count (as a string key, JSON
    style) to the fitted whole-collective time alpha + beta*M of the implementation measured
    (e.g. gloo), which the predictor uses as is for that worker count. `incast` maps a number of
    concurrent senders to the fit of the time for one node to receive M bytes in total from them:
    the ingress a parameter server really gets when N workers push at once; it is measured and
    reported (`sgdscale netbench`) but no predictor reads it (both model a server NIC as shared
    max-min fairly at the p2p rate). `interference` and
    `cpu` (optional; files without them load as before) hold the compute/communication
    interference and the CPU cost per byte (sgdscale.comm.interference, docs/interference.md).
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


def load_network(path: str | Path) -> Network:
    return read_document(path, NETWORK_SCHEMA, Network, what="network file",
                         missing=f"network file {path} does not exist (make one with `sgdscale netbench -o {path}`)",
                         fix="fix that value, or measure the network again with `sgdscale netbench -o FILE`")
