"""Overlap heuristics: how much of a step's communication hides behind compute.

The coarse model's phases do not overlap. Real systems overlap gradient communication with
backward (WFBP: a group is sent as soon as its last gradient is ready, one message at a time) and
parameter pulls with the next forward (a layer's forward waits only for its own parameters).

**Backward overlap (all-reduce groups, PS pushes).** With groups g = 1..G in launch order, ready
r_g seconds after backward starts and costing c_g, one serial communication stream ends at
    end = max_g ( r_g + sum_{h>=g} c_h )            (the WFBP recurrence unrolled),
so the communication exposed after a backward of length B is end - B. The coarse heuristic keeps
only the two extreme terms of that max, which need nothing but totals and two profile numbers:
    exposed = max(0, r_1 + C - B, r_G + c_G - B)     C = sum_g c_g
- r_1 + C - B: communication-bound: everything after the first ready gradient is hidden behind the
  rest of backward, the remainder is exposed;
- r_G + c_G - B: compute-bound: only the last group (ready when backward ends) is exposed.
It is a lower bound of the WFBP exposure, exact whenever one of the two regimes binds; in between
(a middle group waits for the link and delays all later ones) it is optimistic. Without overlap
(`single` grouping: one group ready at B) it is exactly C.

**Forward overlap (PS pulls).** Pulls go in forward order; the forward of a layer needs its
parameters (cumulative pull P_g) and the previous layer. The forward ends at
max_g(P_g + F - n_g), n_g = forward time before that layer, so the exposed pull is
max(0, max_g(P_g - n_g)); the heuristic keeps the first and last groups:
    exposed = max(0, P_1 - n_1, P - n_G).
Pull and push times are split over groups in proportion to bytes (fluid network).

**Async PS.** In the closed network a worker's queueing time at the server (push, update, pull)
can hide behind its own backward/forward the same way. `async_hidden_s` applies the two formulas
to the worker's push side (own NIC + server NIC in + server CPU response times) and pull side; the
model then shortens the think time by the hidden amount and re-solves MVA, to a fixed point
(hidden time depends on queueing, which depends on how fast workers come back).
"""

from __future__ import annotations

from collections.abc import Sequence


def backward_exposed_s(comm_s: Sequence[float], ready_s: Sequence[float], backward_s: float) -> float:
    """Two-term WFBP bound of the communication left after backward ends (see module doc)."""
    if not comm_s:
        return 0.0
    total = float(sum(comm_s))
    return max(0.0, ready_s[0] + total - backward_s, ready_s[-1] + comm_s[-1] - backward_s)


def backward_exposed_exact_s(comm_s: Sequence[float], ready_s: Sequence[float], backward_s: float) -> float:
    """The full WFBP max-plus formula (all groups), for comparison with the heuristic."""
    end, suffix = 0.0, 0.0
    for c, r in zip(reversed(comm_s), reversed(ready_s)):
        suffix += c
        end = max(end, r + suffix)
    return max(0.0, end - backward_s)


def forward_exposed_s(total_s: float, groups: Sequence[tuple[float, float]]) -> float:
    """Two-term bound of pull time not hidden behind forward.

    `groups`: (bytes, forward time before the layer needing them) in forward order; the pull time
    `total_s` is split in proportion to bytes.
    """
    nbytes = sum(b for b, _ in groups)
    if not groups or nbytes <= 0 or total_s <= 0:
        return max(0.0, total_s)
    first_bytes, first_need = groups[0]
    return max(0.0, total_s * first_bytes / nbytes - first_need, total_s - groups[-1][1])


def split_by_bytes(total_s: float, nbytes: Sequence[float]) -> list[float]:
    """Fluid split of a transfer time over messages in proportion to their bytes."""
    whole = float(sum(nbytes))
    if whole <= 0:
        return [0.0 for _ in nbytes]
    return [total_s * b / whole for b in nbytes]
