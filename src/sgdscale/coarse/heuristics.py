"""Overlap heuristics: how much of a step's communication hides behind compute.

The coarse model's phases do not overlap. Real systems overlap gradient communication with
backward (WFBP: a group is sent as soon as its last gradient is ready, one message at a time) and,
with parameter servers, pushes, updates and pulls of different messages with each other.

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
(`single` grouping: one group ready at B) it is exactly C. With variability the model takes each
term with its own E[max over workers] of the time until that group is ready (models.py), so a
straggler's delay before the first group is counted once.

**Pipelines (parameter servers).** A PS message goes through several serial resources in turn:
the push (busiest NIC), the shard's update, the pull. Message g enters at its ready time; each
resource serves messages in order. This is a flow shop, whose makespan is at least, for every
stage k, "first message reaches k, all messages pass k, the last message finishes the later
stages", and at least "the last message goes through every stage":
    end >= max_k ( h_1 + sum_{j<k} s_j[1] + sum_g s_k[g] + sum_{j>k} s_j[G] ),  h_G + sum_k s_k[G]
`pipeline_end_s` takes the max of these K + 1 terms (h = time until the first / last message is
ready), plus every message's own path h_g + sum_k s_k[g] (h_g from the mean backward timeline). With one stage it is the backward-overlap formula above. The pipeline holds the pushes and
updates only: gloo sends a message only into a posted receive, and a worker's notice that it is
ready to receive its new parameters queues behind its own pushes, so pulls start after the last
push (measured: assuming a full-duplex pipeline of push and pull predicted sync PS 30% too fast
on the emulated cluster). The next forward needs layer 0's parameters, which travel in the last
message (backward order), so the pull hardly overlaps the next forward and the heuristic does
not assume it does. Stage times are split over messages in proportion to their bytes (fluid network).

**Async PS.** In the closed network a worker's queueing and transfer time at the server can
hide behind its own backward in the same way. The model applies `pipeline_end_s` to the worker's
push / update / pull response times, shortens the think time by the time so hidden, and re-solves
MVA to a fixed point (hidden time depends on queueing, which depends on how fast workers return).
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


def pipeline_end_s(head_first_s: float, head_last_s: float, stages: Sequence[Sequence[float]],
                   ready_offsets_s: Sequence[float] | None = None) -> float:
    """Flow-shop bound of when the last message leaves the last stage (see module doc).

    `stages[k][g]`: time of message g (in order) at stage k; `head_*`: when the first and the last
    message are ready. `ready_offsets_s[g]`: when message g is ready relative to the first; given,
    every message's own path (ready + all its stages) is a term too, so one dominant message
    (VGG's 400 MB fully connected layer) is not pipelined with itself. 0 messages: 0.
    """
    if not stages or not stages[0]:
        return 0.0
    firsts = [stage[0] for stage in stages]
    lasts = [stage[-1] for stage in stages]
    end = head_last_s + sum(lasts)
    if ready_offsets_s is not None:
        for g, offset in enumerate(ready_offsets_s):
            end = max(end, head_first_s + offset + sum(stage[g] for stage in stages))
    for k, stage in enumerate(stages):
        end = max(end, head_first_s + sum(firsts[:k]) + float(sum(stage)) + sum(lasts[k + 1:]))
    return end


def split_by_bytes(total_s: float, nbytes: Sequence[float]) -> list[float]:
    """Fluid split of a transfer time over messages in proportion to their bytes."""
    whole = float(sum(nbytes))
    if whole <= 0:
        return [0.0 for _ in nbytes]
    return [total_s * b / whole for b in nbytes]
