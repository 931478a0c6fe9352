"""Overlap heuristics: how much of a step's communication hides behind compute.

The coarse model's phases do not overlap. Real systems overlap gradient communication with
backward (WFBP: a group is sent as soon as its last gradient is ready, one message at a time) and,
with parameter servers, pushes, updates and pulls of different messages with each other.

**Backward overlap (all-reduce groups, PS pushes).** With groups g = 1..G in launch order, ready
r_g seconds after backward starts and costing c_g, one serial communication stream ends at
    end = max_g ( r_g + sum_{h>=g} c_h )            (the WFBP recurrence unrolled),
so the communication exposed after a backward of length B is end - B (`backward_exposed_exact_s`;
the coarse all-reduce model takes every term). Its two extreme terms need nothing but totals and two
profile numbers (`backward_exposed_s`):
    exposed = max(0, r_1 + C - B, r_G + c_G - B)     C = sum_g c_g
- r_1 + C - B: communication-bound: everything after the first ready gradient is hidden behind the
  rest of backward, the remainder is exposed;
- r_G + c_G - B: compute-bound: only the last group (ready when backward ends) is exposed.
They are a lower bound of the WFBP exposure, exact whenever one of the two regimes binds; in between
(a middle group waits for the link and delays all later ones) they are optimistic: on held-out set
10 (densenet121 replay, DDP buckets of 4.1, 26.2 and 1.6 MB ready 0.002, 0.147 and 0.224 s into
backward) the two terms left 0.138 s exposed where the runs and the full recurrence had 0.235 s,
and coarse all-reduce came out 21-26% too fast; so the model keeps them all. Without overlap
(`single` grouping: one group ready at B) it is exactly C. With variability the model takes each
term with its own E[max over workers] of the time until that group is ready (models.py), so a
straggler's delay before a group is counted once.

**Pipelines (parameter servers).** A PS message goes through several serial resources in turn:
the push (busiest NIC), the shard's update, the pull. Message g enters at its ready time; each
resource serves messages in order. This is a flow shop, whose makespan is at least, for every
stage k, "first message reaches k, all messages pass k, the last message finishes the later
stages", and at least "the last message goes through every stage":
    end >= max_k ( h_1 + sum_{j<k} s_j[1] + sum_g s_k[g] + sum_{j>k} s_j[G] ),  h_G + sum_k s_k[G]
`pipeline_end_s` takes the max of these K + 1 terms (h = time until the first / last message is
ready), plus every message's own path h_g + sum_k s_k[g] (h_g from the mean backward timeline).
With one stage it is the backward-overlap formula above. The pipeline holds the pushes and
updates only; the pull follows them as `sync_pull_end_s` describes. The next
forward needs layer 0's parameters, which travel in the last message (backward order), so the
pull hardly overlaps the next forward and the heuristic does not assume it does. Stage times are
split over messages in proportion to their bytes (fluid network).

**Sync PS pull tail.** gloo sends a message only into a posted receive, and a worker's notice that
it is ready for its new parameters travels behind its own pushes (measured: a full-duplex pipeline
of push and pull predicted sync PS 30% too fast), unless the shard had not yet posted its receives
of the step when the worker's backward ended (the shard posts them once all its replies of the
previous step have left). Such an early worker's notice goes first and its pull runs during the
push phase, tensor by tensor as all workers' copies arrive; a late worker pulls only after its last
push. Early workers got their parameters while late ones still pulled, so they stay early: links
that share unequally (every measured network: sigma 0.2-0.3) sort the workers into the two kinds.
The fine simulator, which carries these rules and is within 3% of the held-out sync PS runs, gives
the share of the busiest server NIC's pull left after the push phase (benchmarks/
coarse_vs_fine_syncps.py: resnet50, bert, mobilenet_v2 at 1 Gbit/s, 2-8 workers, sigma 0.1-0.5):
median 0.54 with one shard (0.34-0.84), 0.61 with two (0.41-0.77), 0.81 with four (0.65-1.12), a
worker being late wherever any of its shards holds it back; the model takes S / (S + 1) of the
workers as late with S shards (`late_share`). Those placements spread the bytes evenly; S counts the
shards as the worker's bytes over the busiest shard's (`coarse.models.LATE_SHARE_SHARDS`), since a
worker's notice is later at the busiest shard the more of its bytes its link sends elsewhere first:
where round-robin puts nearly every byte on one of three shards (resnet18, resnet50, mobilenet_v2,
densenet121: a convolution and its BatchNorm pair in threes) it is about 1, as with one shard;
counting all three made coarse 13-19% slower than fine there and 14% too slow on held-out sets 68
and 75 (benchmarks/coarse_late_share_shards.py). A whole pull after the push phase made coarse sync PS
12-18% too slow on the held-out sets. The replies follow the order in which the shard has summed and
applied each message (`sync_pull_end_s`; the pushes and updates an exact FIFO flow shop,
`flow_shop_s`): an early worker's reply of message g leaves once g is applied, a late worker's not
before its own last push; the server NIC sends one reply at a time. Where the largest gradients
complete late on the shard (alexnet: fc layers of 16, 67 and 151 MB ready first, so all pushes of
the 151 MB one end near the end of the push phase) nearly the whole pull follows the push phase: a
fixed late half of it made coarse 23-28% too fast on held-out set 14's alexnet replays
(benchmarks/coarse_pull_tail_heldout14.py). A worker's own NIC (and intra-node link) carries only
its own pull, which a late worker runs whole after its push.
Across steps the two classes keep their order: an early worker got its parameters some `lead`
seconds before the last reply left, and spends them on its next forward and backward while the
shard still replies to the late ones, so at the step's start (the shard posting its receives) its
gradients are that much nearer ready (`sync_ps_end_s`, the lead found as a fixed point; it settles in
two rounds on the built-ins). Where the largest gradient is ready last (gpt2's and bert's
embeddings: all of its replies follow the push phase) the one-step form, which has no such lead,
was 4-13% slower than fine with 2-16 workers; with it bert and gpt2 with 3-4 workers are within 3%
of fine (benchmarks/coarse_vs_fine_syncps.py).

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


def late_share(workers: int, shards: float) -> float:
    """The share of workers that pull only after their own last push (module doc, "Sync PS pull
    tail"): S / (S + 1) with S shards (counted by bytes: not always whole), from the fine simulator;
    a single worker is late alone."""
    return 1.0 if workers <= 1 else shards / (shards + 1.0)


def flow_shop_s(ready_s: Sequence[float], stages: Sequence[Sequence[float]]) -> list[list[float]]:
    """When each message leaves each stage of a FIFO flow shop (`stages[k][g]`: message g's time at
    stage k; message g enters at `ready_s[g]`): done[k][g] = max(done[k][g-1], done[k-1][g]) + s_k[g]."""
    done: list[list[float]] = []
    previous = list(ready_s)
    for stage in stages:
        row, free = [], 0.0
        for entry, service in zip(previous, stage):
            free = max(free, entry) + service
            row.append(free)
        done.append(row)
        previous = row
    return done


def sync_pull_end_s(pushed_s: float, updated_s: Sequence[float], pull_s: Sequence[float], late: float,
                    own_pull_s: float = 0.0) -> float:
    """When the busiest server NIC has sent every reply of a sync PS step (module doc, "Sync PS pull
    tail"). The shard can reply with message g only once all its pushes are summed and applied
    (`updated_s[g]`); an early worker's copy leaves from then on, a late worker's (share `late`) not
    before its own last push is through (`pushed_s`). The NIC sends one reply at a time, so it ends at
    max over entry times t of (t + all replies entering at or after t). `pull_s[g]`: message g's
    replies to all workers on that NIC. A late worker's own links (`own_pull_s`: the busiest worker
    NIC or intra-node link) carry its whole pull after its push."""
    return max(reply_order_s(pushed_s, updated_s, pull_s, late)[0], pushed_s + own_pull_s)


def reply_order_s(pushed_s: float, updated_s: Sequence[float], pull_s: Sequence[float],
                  late: float) -> tuple[float, float]:
    """(when the server NIC has sent every reply, when it has sent the early workers' last one), the
    replies ordered as `sync_pull_end_s` says; at equal times the early workers' go first (their
    notice reached the shard first)."""
    replies = sorted([(u, 0, (1.0 - late) * p) for u, p in zip(updated_s, pull_s)]
                     + [(max(pushed_s, u), 1, late * p) for u, p in zip(updated_s, pull_s)])
    free, early_end = 0.0, 0.0
    for entry, kind, service in replies:
        free = max(free, entry) + service
        if kind == 0:
            early_end = free
    return free, early_end


def sync_ps_end_s(ready_s: Sequence[float], push_s: Sequence[float], update_s: Sequence[float],
                  pull_s: Sequence[float], late: float, own_pull_s: float = 0.0, rounds: int = 12,
                  with_lead: bool = True) -> float:
    """When a sync PS step's last reply has left the busiest server NIC, in the steady state of two
    classes of workers (module doc, "Sync PS pull tail"): the early ones (share 1 - `late`) got their
    parameters `lead` seconds before the late ones and ran that much of their next forward and
    backward while the shard still replied, so their gradients of message g are ready at
    max(0, ready_g - lead) (not before the shard posts its receives: the step's start); the late ones
    at ready_g. Pushes through the shard's NIC are one FIFO over both classes' copies (message g:
    `push_s[g]` for all N copies), the update of g follows its last copy (`update_s[g]`), and the
    replies leave as `sync_pull_end_s` orders them. `lead` is the time from the early copies' last
    reply to the end, found by fixed-point iteration from 0 (the one-class form: one step, no
    overlap across steps), which left coarse 4-13% slower than fine where the largest gradient is
    ready last (gpt2's and bert's embeddings). Without `with_lead` (a worker's own link binds, not the
    shard's: that worker is the late one and sets the step) it is the one-step form."""
    early = 1.0 - late
    rounds = rounds if with_lead else 1
    lead, end = 0.0, 0.0
    for _ in range(rounds):
        copies = sorted([(max(0.0, r - lead), g, 0, early * p) for g, (r, p) in enumerate(zip(ready_s, push_s))]
                        + [(r, g, 1, late * p) for g, (r, p) in enumerate(zip(ready_s, push_s))])
        pushed = [0.0] * len(push_s)
        late_pushed, free = 0.0, 0.0
        for entry, g, kind, service in copies:
            free = max(free, entry) + service
            pushed[g] = max(pushed[g], free)
            if kind == 1:
                late_pushed = free
        updated = flow_shop_s(pushed, [update_s])[0]
        end = max(updated[-1], sync_pull_end_s(late_pushed, updated, pull_s, late, own_pull_s))
        early_end = reply_order_s(late_pushed, updated, pull_s, late)[1]
        new_lead = end - early_end if early > 0 else 0.0
        if abs(new_lead - lead) <= 1e-12:
            break
        lead = new_lead
    return end
