"""Can equal link sharing keep a one-shard async PS pipelined? A deliberately small model. (no runs)

On the wire (`shard_flows.py`) set 80's async gpt2 and set 78's resnet50 replay keep the shard's link
90-94% busy both ways, each worker's push phase overlapping one other's; fine keeps it ~80% busy.
This strips the cluster to what that takes: N identical workers, one shard, a link of C bytes/s
each way; a worker computes its forward, then its backward, handing its gradients (the gpt2
profile's shape: 1.67 MB in nine messages over the last part of backward, then its 1 MB embedding)
to the shard's downlink; once they are all in, the shard sends its parameters back (one message) and
the worker's next forward starts when they are in. Compute times jitter by a normal factor per step.
Each direction shares its link among the workers' messages by one policy:
- "equal": processor sharing (as fine shares a shard's downlink);
- "fifo": one message at a time, in arrival order;
- "turns x": weighted by arrival order among the messages moving, each later one x times the one
  before (the oldest always heaviest: a newcomer yields and takes over when the older ones end, as
  plain TCP flows out of one node do, `incumbent_handover.py`).
It prints the link's use each way. Fluid model, time step 0.1 ms, nothing from sgdscale.

    .venv/bin/python benchmarks/async_sharing_toy.py [--output async_sharing_toy]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SMALL_BYTES = [262144, 262144, 65536, 196608, 262144, 262144, 65536, 196608, 32768]  # gpt2's, by readiness
LAST_BYTES = 1048576  # its embedding, ready last and needed first
STEP_BYTES = sum(SMALL_BYTES) + LAST_BYTES


def serve(queue: list, policy: str, budget: float) -> list:
    """Move `budget` bytes of the queued messages ([worker, bytes left]) by `policy`; the finished ones."""
    done = []
    if not queue:
        return done
    if policy == "fifo":
        while queue and budget > 0:
            take = min(budget, queue[0][1])
            queue[0][1] -= take
            budget -= take
            if queue[0][1] <= 0:
                done.append(queue.pop(0))
        return done
    heads, seen = [], set()  # each worker's oldest message moves (one connection each)
    for message in queue:
        if message[0] not in seen:
            seen.add(message[0])
            heads.append(message)
    x = 1.0 if policy == "equal" else float(policy.split()[1])
    weights = np.array([x ** i for i in range(len(heads))])
    for message, weight in zip(heads, weights / weights.sum()):
        message[1] -= budget * weight
        if message[1] <= 0:
            queue.remove(message)
            done.append(message)
    return done


def simulate(push_policy: str, pull_policy: str, *, workers: int = 5, link_Bps: float = 78.9e6, scale: float = 1.0,
             forward_s: float = 0.0226, before_first_s: float = 0.017, pushing_s: float = 0.0305,
             jitter: float = 0.1, seconds: float = 20.0, dt: float = 1e-4, seed: int = 0, stagger_s: float = 0.0) -> float:
    """The link's use each way (steps x bytes over seconds x rate); message sizes times `scale`."""
    rng = np.random.default_rng(seed)
    state = ["forward"] * workers
    next_s = [w * stagger_s for w in range(workers)] if stagger_s else list(rng.uniform(0.0, 0.1, workers))
    pending: list[list] = [[] for _ in range(workers)]
    up: list = []
    down: list = []
    steps = 0
    t = 0.0
    spread = np.linspace(0.0, 1.0, len(SMALL_BYTES))
    while t < seconds:
        for w in range(workers):
            if state[w] == "forward" and t >= next_s[w]:
                j = max(0.2, 1.0 + jitter * rng.standard_normal())
                first = t + before_first_s * j
                pending[w] = [(first + pushing_s * j * f, b * scale) for f, b in zip(spread, SMALL_BYTES)]
                pending[w].append((first + pushing_s * j, LAST_BYTES * scale))
                state[w] = "backward"
            if state[w] == "backward":
                while pending[w] and pending[w][0][0] <= t:
                    up.append([w, pending[w].pop(0)[1]])
                if not pending[w] and not any(m[0] == w for m in up):
                    state[w] = "pull"
                    down.append([w, STEP_BYTES * scale])
        serve(up, push_policy, link_Bps * dt)
        for w, _ in serve(down, pull_policy, link_Bps * dt):
            state[w] = "forward"
            next_s[w] = t + forward_s * max(0.2, 1.0 + jitter * rng.standard_normal())
            steps += 1
        t += dt
    return steps * STEP_BYTES * scale / seconds / link_Bps


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="async_sharing_toy")
    args = parser.parse_args(argv)
    shapes = [("gpt2 (set 80): 5 workers, 2.67 MB a step at 78.9 MB/s, forward 22.6 ms, backward 17 + 30.5 ms",
               {}),
              ("gpt2, the workers started 34 ms apart (a pipeline) and no jitter, 40 s",
               {"jitter": 0.0, "seconds": 40.0, "stagger_s": 0.034}),
              ("bert-sized (set 78's replay): 5 workers, 21.4 MB a step at 75 MB/s, forward 72.7 ms, backward "
               "37 + 67 ms", {"scale": 21.4 / (STEP_BYTES / 1e6), "link_Bps": 75e6, "forward_s": 0.0727,
                              "before_first_s": 0.037, "pushing_s": 0.067, "seconds": 60.0})]
    policies = [("equal", "equal"), ("equal", "turns 0.5"), ("equal", "turns 0.25"), ("equal", "fifo"),
                ("turns 0.5", "equal"), ("fifo", "equal")]
    lines = ["# Equal link sharing against a one-shard async PS pipeline (a small model)", "",
             f"Generated by `benchmarks/async_sharing_toy.py{' ' + ' '.join(argv) if argv else ''}`. The link's "
             "use each way under each sharing policy (pushes / pulls); compute jitter 10% unless stated. The runs "
             "measured on the wire: gpt2 94% / 94%, bert replay 79% / 80% (`shard_flows-*.md`).", "",
             "| shape | pushes shared | pulls shared | link use |", "|---|---|---|---:|"]
    for label, kwargs in shapes:
        for push, pull in policies:
            use = simulate(push, pull, **kwargs)
            lines.append(f"| {label} | {push} | {pull} | {use:.0%} |")
            print(lines[-1], flush=True)
    (HERE / "results" / f"{args.output}.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
