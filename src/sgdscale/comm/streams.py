"""How many collectives run at once, and when each ends when several share the link.

gloo (torch.distributed on CPU tensors) runs a process group's collectives on a pool of two threads
(`ProcessGroupGloo.Options._threads`, 2 by default): DDP launches each bucket's all-reduce the moment
the bucket is full, so while one is still on the wire the next starts beside it, and a third waits
for a thread. NCCL runs a process group's collectives one after another on one stream. Traced on
held-out set 59's vgg16 replay with 3 workers (`benchmarks/results/allreduce_replay_gap/`): the
411 MB bucket's all-reduce was still in flight when the three later buckets (28, 28 and 2 MB), each
waiting for a thread and then taking about twice its time alone, had finished; it ended last, so its
copy back into the gradients (DDP copies back in launch order, each bucket once its collective is
done) came after every all-reduce, where one stream in launch order hides it.

Model: the link does the same work at the same pace as one stream would (the one-stream schedule
gives its busy periods and, with interference, its speed), but up to `slots` collectives share it
equally, admitted in launch order when a thread is free. So the last collective ends when one stream
would have ended it; only which collective ends last, and when the others end, move. Timed on its own
(`benchmarks/concurrent_allreduce.py`, 3 and 5 workers): two all-reduces launched together ended
-0.2% to +0.7% from the two alone added, the small one first every time. Not modelled: the small one
also waits behind the large one's messages at each ring step (2.2-3.0x its time alone, not 2x).
"""

from __future__ import annotations

import numpy as np

from sgdscale.profile import Profile

GLOO_THREADS = 2  # ProcessGroupGloo's default thread pool


def collectives_at_once(profile: Profile, override: int | None = None) -> int:
    """How many of a worker's collectives run at once: `override` if given, else gloo's two threads for
    a profile measured on a CPU and predicted at that speed (the runtime trains it with gloo), else one
    (NCCL's stream: a GPU's profile, or one calibrated to another device's speed)."""
    if override is not None:
        return override
    moved = any(not entry.get("same_device") for entry in profile.provenance.get("calibration", []))
    on_cpu = profile.device.strip().lower().startswith("cpu") and not moved
    return GLOO_THREADS if on_cpu else 1


def streams_note(profile: Profile, override: int | None = None) -> str:
    """How many all-reduces a prediction let share the link, in words, for `sgdscale predict`."""
    slots = collectives_at_once(profile, override)
    if override is not None:
        return f"{slots} all-reduce(s) of a worker share the link at once (--collectives-at-once {slots})"
    if slots > 1:
        return ("two all-reduces of a worker share the link at once, as gloo runs them on its two threads (a profile "
                "measured on a CPU trains with gloo); --collectives-at-once 1 for NCCL's one stream")
    return ("one all-reduce at a time, as NCCL runs them on one stream (a GPU's profile, or one calibrated to another "
            "device's speed); --collectives-at-once 2 as gloo runs them")


def shared_schedule_s(ready_s: np.ndarray, starts_s: np.ndarray, ends_s: np.ndarray, costs_s: np.ndarray,
                      slots: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, thread of each collective) when up to `slots` share the link (module docstring).

    Inputs are the one-stream schedule of one iteration in launch order: when each collective's group
    was ready, when it started and ended, and its cost alone. The one-stream schedule maps link work
    (the sum of costs done) to time; in work units the collectives are a processor-sharing queue with
    `slots` servers, each arriving at the work done by its ready time. O(groups) scalar steps."""
    n = len(costs_s)
    ready = np.asarray(ready_s, dtype=float)
    if slots <= 1 or n <= 1 or not np.any(ready[1:] < ends_s[:-1]):  # never two in flight: one stream's
        return starts_s, ends_s, np.zeros(n, dtype=np.intp)
    cost_arr = np.maximum(np.asarray(costs_s, dtype=float), 0.0)
    costs = cost_arr.tolist()
    work_before = np.concatenate([[0.0], np.cumsum(cost_arr)])
    # the work done by each group's ready time: within collective g the link does its work evenly
    g = np.minimum(np.searchsorted(ends_s, ready, side="right"), n - 1)
    span = ends_s[g] - starts_s[g]
    inside = np.clip(ready - starts_s[g], 0.0, None)
    fraction = np.divide(inside, span, out=np.zeros(n), where=span > 0)
    arrivals = (work_before[g] + cost_arr[g] * np.minimum(fraction, 1.0)).tolist()
    start_work = [0.0] * n
    end_work = [0.0] * n
    thread = [0] * n
    running: list[list] = []  # [collective, its work left], in admission order
    free = list(range(slots))
    now, nxt = 0.0, 0
    while nxt < n or running:
        while nxt < n and len(running) < slots and arrivals[nxt] <= now:  # admit in launch order
            start_work[nxt] = now
            if costs[nxt] > 0:
                thread[nxt] = free.pop(0)
                running.append([nxt, costs[nxt]])
            else:
                end_work[nxt] = now
            nxt += 1
        if not running:
            now = arrivals[nxt]
            continue
        share = len(running)
        least = min(left for _, left in running)
        arrive = arrivals[nxt] if nxt < n and share < slots else np.inf
        if arrive < now + least * share:  # the next one arrives before any running one ends
            progress = (arrive - now) / share
            for job in running:
                job[1] -= progress
            now = arrive
            continue
        now += least * share
        still = []
        for job in running:
            job[1] -= least
            if job[1] <= 1e-12:
                end_work[job[0]] = now
                free.append(thread[job[0]])
            else:
                still.append(job)
        running = still
        free.sort()
    return (np.maximum(ready, _time_at(np.array(start_work), work_before, starts_s, ends_s, cost_arr)),
            _time_at(np.array(end_work), work_before, starts_s, ends_s, cost_arr), np.array(thread, dtype=np.intp))


def _time_at(work: np.ndarray, work_before: np.ndarray, starts_s: np.ndarray, ends_s: np.ndarray,
             costs: np.ndarray) -> np.ndarray:
    """The earliest time the one-stream schedule has done `work` (seconds of collective cost)."""
    g = np.minimum(np.searchsorted(work_before[1:], work, side="left"), len(costs) - 1)
    cost = costs[g]
    done = np.clip(work - work_before[g], 0.0, None)
    fraction = np.divide(done, cost, out=np.zeros_like(done), where=cost > 0)
    return starts_s[g] + np.minimum(fraction, 1.0) * (ends_s[g] - starts_s[g])
