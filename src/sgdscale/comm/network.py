"""The Network file (`sgdscale.network/1`): alpha-beta parameters fitted from a benchmark.

`sgdscale netbench` measures point-to-point and all-reduce times against message size and writes
this file with its raw points; `sgdscale predict --network FILE` reads it so predictions use the
measured network instead of the nominal bandwidth and latency.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sgdscale.errors import UserError

NETWORK_SCHEMA = "sgdscale.network/1"


class AlphaBeta(BaseModel):
    """t(M) = alpha_s + beta_s_per_byte * M for a message of M bytes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    alpha_s: float = Field(ge=0)
    beta_s_per_byte: float = Field(gt=0)

    def time_s(self, nbytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * nbytes


class BenchPoint(BaseModel):
    """One measured message size: the op, worker count, bytes and per-repeat times."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    op: Literal["p2p", "allreduce"]
    workers: int = Field(ge=2)
    bytes: int = Field(ge=0)
    samples_s: list[float] = Field(min_length=1)
    median_s: float = Field(ge=0)


class Network(BaseModel):
    """Fitted cost parameters plus the raw points they came from.

    `p2p` is one message between two nodes. `allreduce` maps a worker count (as a string key, JSON
    style) to the fitted whole-collective time alpha + beta*M of the implementation measured
    (e.g. gloo), which the predictor uses as is for that worker count.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    schema_: Literal["sgdscale.network/1"] = Field(default=NETWORK_SCHEMA, alias="schema")
    source: str = ""
    p2p: AlphaBeta
    allreduce: dict[str, AlphaBeta] = Field(default_factory=dict)
    points: list[BenchPoint] = Field(default_factory=list)
    environment: dict[str, Any] = Field(default_factory=dict)

    def allreduce_fit(self, workers: int) -> AlphaBeta | None:
        return self.allreduce.get(str(workers))

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


def fit_alpha_beta(nbytes: list[float] | np.ndarray, seconds: list[float] | np.ndarray) -> AlphaBeta:
    """Line t = alpha + beta*M with alpha >= 0 and beta > 0, fitted on relative error.

    Weighting each point by 1/t keeps the many-megabyte messages from drowning the small ones, so
    alpha (the startup cost that decides whether merging small gradients pays) is measured too.
    """
    x = np.asarray(nbytes, dtype=float)
    y = np.asarray(seconds, dtype=float)
    if x.size < 2 or np.ptp(x) == 0:
        raise UserError("need at least two different message sizes to fit alpha and beta")
    if np.any(y <= 0):
        raise UserError("measured times must be positive to fit alpha and beta")
    beta, alpha = np.polyfit(x, y, 1, w=1.0 / y)
    if alpha < 0:  # a negative startup cost is unphysical: refit through the origin, same weights
        alpha, beta = 0.0, float(np.sum(x / y) / np.sum((x / y) ** 2))
    beta = max(float(beta), 1e-15)
    return AlphaBeta(alpha_s=float(alpha), beta_s_per_byte=beta)


def load_network(path: str | Path) -> Network:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"network file {path} does not exist (make one with `sgdscale netbench -o {path}`)") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}: not valid JSON (line {error.lineno}: {error.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != NETWORK_SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise UserError(f"{path}: unsupported schema {found!r}; expected \"{NETWORK_SCHEMA}\"")
    try:
        return Network.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:5])
        raise UserError(f"{path}: invalid network file: {problems}") from None
