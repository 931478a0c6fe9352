"""Alpha-beta(-gamma) cost of point-to-point messages and all-reduce collectives.

Every collective is linear in the message size M for a fixed worker count N,
t(M, N) = A(N) + B(N)*M, so predictors can cost thousands of messages with one multiply-add and
MG-WFBP can reason about the startup cost A(N) saved by merging. Formulas follow Thakur et al.
as tabulated in reference/shi2018_dag_model.md §2.4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sgdscale.comm.network import AlphaBeta, Network

ALGORITHMS = ("ring", "tree", "halving-doubling")


@dataclass(frozen=True)
class CommModel:
    """Costs on one NIC link: `p2p` is one message between two nodes.

    `measured_allreduce` holds whole-collective fits per worker count from `sgdscale netbench`;
    where one exists it replaces the formula, because real libraries (gloo) pick their own algorithm.
    """

    p2p: AlphaBeta
    algorithm: str = "ring"
    gamma_s_per_byte: float = 0.0
    measured_allreduce: dict[int, AlphaBeta] = field(default_factory=dict)

    @classmethod
    def from_link(cls, bandwidth_bps: float, latency_s: float, algorithm: str = "ring",
                  gamma_s_per_byte: float = 0.0) -> CommModel:
        return cls(AlphaBeta(alpha_s=latency_s, beta_s_per_byte=8.0 / bandwidth_bps), algorithm, gamma_s_per_byte)

    @classmethod
    def from_network(cls, network: Network, algorithm: str = "ring", gamma_s_per_byte: float = 0.0) -> CommModel:
        measured = {int(n): fit for n, fit in network.allreduce.items()}
        return cls(network.p2p, algorithm, gamma_s_per_byte, measured)

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

    def allreduce_s(self, nbytes: float, workers: int) -> float:
        linear = self.allreduce_linear(workers)
        return 0.0 if linear is None else linear.time_s(nbytes)

    def p2p_s(self, nbytes: float) -> float:
        return self.p2p.time_s(nbytes)
