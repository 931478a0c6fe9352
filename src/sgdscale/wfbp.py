"""Analytic wait-free back-propagation (WFBP) schedules: the exact recurrences of Shi et al.

These are the closed forms the fine-grained simulation must reproduce in the deterministic case
(docs/reference/shi2018_dag_model.md §2.2), and the schedule MG-WFBP reasons about when it decides
which gradients to merge (§5, `_generate_groups_mgwfbp` of HKBU-HPML/MG-WFBP).

Layers are indexed 0..L-1 in forward order; backward runs L-1 down to 0; all times are relative
to the start of backward. A layer without a gradient to send has t_c = 0, which leaves the
recurrence's answer unchanged (its "communication" ends the moment it starts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def backward_starts(t_b: Sequence[float]) -> np.ndarray:
    """tau_b[L-1] = 0; tau_b[l] = tau_b[l+1] + t_b[l+1]."""
    t_b = np.asarray(t_b, dtype=float)
    tau_b = np.zeros_like(t_b)
    for layer in range(len(t_b) - 2, -1, -1):
        tau_b[layer] = tau_b[layer + 1] + t_b[layer + 1]
    return tau_b


def comm_starts(t_b: Sequence[float], t_c: Sequence[float], tau_b: Sequence[float] | None = None) -> np.ndarray:
    """tau_c[L-1] = tau_b[L-1] + t_b[L-1]; tau_c[l] = max(tau_c[l+1] + t_c[l+1], tau_b[l] + t_b[l]).

    The first term is "the link is still busy", the second "the gradient is ready".
    """
    t_b = np.asarray(t_b, dtype=float)
    t_c = np.asarray(t_c, dtype=float)
    tau_b = backward_starts(t_b) if tau_b is None else np.asarray(tau_b, dtype=float)
    count = len(t_b)
    tau_c = np.zeros(count)
    if count == 0:
        return tau_c
    tau_c[count - 1] = tau_b[count - 1] + t_b[count - 1]
    for layer in range(count - 2, -1, -1):
        tau_c[layer] = max(tau_c[layer + 1] + t_c[layer + 1], tau_b[layer] + t_b[layer])
    return tau_c


def wfbp_backward_comm_s(t_b: Sequence[float], t_c: Sequence[float]) -> float:
    """End of backward plus communication, tau_c[0] + t_c[0] ("Predicted tb+tc" in MG-WFBP)."""
    if len(t_b) == 0:
        return 0.0
    tau_c = comm_starts(t_b, t_c)
    return float(tau_c[0] + np.asarray(t_c, dtype=float)[0])


def wfbp_iteration_s(t_f: float, t_b: Sequence[float], t_c: Sequence[float], *, data_s: float = 0.0,
                     h2d_s: float = 0.0, optimizer_s: float = 0.0) -> float:
    """One S-SGD step with layer-wise overlap: t_f + tau_c[0] + t_c[0] (§2.2), plus the steps the
    authors' simulator leaves out and sgdscale keeps on the critical path: data loading and
    host-to-device copy before forward, the optimizer after the last collective."""
    return data_s + h2d_s + t_f + wfbp_backward_comm_s(t_b, t_c) + optimizer_s


def mgwfbp_merge(t_b: Sequence[float], nbytes: Sequence[float], alpha_s: float, beta_s_per_byte: float) -> list[list[int]]:
    """MG-WFBP's merge decision exactly as HKBU-HPML/MG-WFBP codes it; returns groups of unit
    indices in launch order (each group listed from its first-ready unit to its last).

    Units 0..K-1 are in forward order with backward times `t_b` and gradient sizes `nbytes`;
    t_c[l] = alpha + beta * nbytes[l]. Walking l = K-1 down to 1 with e = tau_b[l-1] + t_b[l-1]
    (when unit l-1's gradient is ready): if unit l's communication is not hidden (e < tau_c[l] +
    t_c[l]), merge l into l-1 when its communication has not even started by e, or when the wait
    e - tau_c[l] is shorter than the startup alpha that merging saves. Unit 0 joins the last group.

    One deliberate difference: with alpha == 0 merging saves nothing, so every unit stays alone
    (the original would still merge when tau_c[l] > e, which changes nothing in its model).
    """
    count = len(t_b)
    if count == 0:
        return []
    if alpha_s <= 0:
        return [[unit] for unit in range(count - 1, -1, -1)]
    t_b = np.asarray(t_b, dtype=float)
    p = [float(x) for x in nbytes]
    t_c = [alpha_s + beta_s_per_byte * x for x in p]
    tau_b = backward_starts(t_b)
    tau_c = comm_starts(t_b, t_c, tau_b)
    groups: list[list[int]] = []
    group: list[int] = []
    for unit in range(count - 1, 0, -1):
        group.append(unit)
        ready_next = tau_b[unit - 1] + t_b[unit - 1]
        merged = False
        if ready_next < tau_c[unit] + t_c[unit]:
            if tau_c[unit] > ready_next or ready_next - tau_c[unit] < alpha_s:
                t_c[unit] = 0.0
                p[unit - 1] += p[unit]
                p[unit] = 0.0
                t_c[unit - 1] = alpha_s + beta_s_per_byte * p[unit - 1]
                tau_c = comm_starts(t_b, t_c, tau_b)
                merged = True
        if not merged:
            groups.append(group)
            group = []
    group.append(0)
    groups.append(group)
    return groups
