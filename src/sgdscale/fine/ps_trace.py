"""The timeline of a parameter-server simulation: a few workers' first measured steps as intervals.

`sgdscale.fine.ps.PsRun` calls the recorder where something starts (compute chunks, waits for
parameters, server updates) and hands it the networks' transfers; the events become a Chrome trace
(`sgdscale.report.trace`). By default only the first `TIMELINE_WORKERS` workers and the first
`TimelineSpec.iterations` measured iterations are kept, at most `TIMELINE_MAX_EVENTS` events, so a
1,024-worker run stays small; a side-by-side with a real run (report/timeline.py) asks for every
worker and as many iterations as were measured.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sgdscale.result import TimelineSpec, TraceEvent

if TYPE_CHECKING:
    from sgdscale.fine.ps import PsRun

TIMELINE_WORKERS = 3  # defaults (TimelineSpec overrides them)
TIMELINE_MAX_EVENTS = 20000


class PsTrace:
    """Events of one run; `workers` and `iterations` are the ones recorded."""

    def __init__(self, run: PsRun, spec: TimelineSpec | None = None) -> None:
        spec = spec or TimelineSpec()
        self.run = run
        self.events: list[TraceEvent] = []
        self.workers = set(range(run.n if spec.all_workers else min(run.n, TIMELINE_WORKERS)))
        self.iterations = set(range(run.warmup, min(run.total, run.warmup + spec.iterations)))
        self.max_events = spec.max_events or TIMELINE_MAX_EVENTS
        self.layer_names = [layer.name for layer in run.profile.layers]

    def _room(self) -> bool:
        return len(self.events) < self.max_events

    def compute(self, w: int, k: int, now: float, extra: float, j0: int, j: int,
                arrival: list[float] | None = None, need: list[list[int]] | None = None,
                backward_s: float | None = None) -> None:
        """Worker w ran data (`extra` s), forward layers j0..j-1 and, if j is the last, backward, as
        `PsRun.run`'s `advance` ran them: a layer whose parameters were still in flight (`arrival`
        of the messages it `need`s) starts when they arrive."""
        if not self._room():
            return
        run = self.run
        _, cf, bwd, _, row, scale, _ = run.tables.get(run.rows[k][w], float(run.sampler.scale[w]))
        names = self.layer_names
        proc, args = f"worker {w}", {"iteration": k}
        t = now
        if extra > 0:
            self.events.append(TraceEvent("data", t, extra, proc, "compute", args))
            t += extra
        for layer in range(j0, j):
            if arrival is not None:
                t = max(t, max((arrival[m] for m in need[layer]), default=t))
            d = cf[layer + 1] - cf[layer]
            self.events.append(TraceEvent(f"forward {names[layer]}", t, d, proc, "compute", args))
            t += d
        if j == len(names):
            # slowed by interference: each layer drawn stretched evenly (the model knows the total only)
            stretch = 1.0 if backward_s is None or bwd <= 0 else backward_s / bwd
            tb = run.sampler.backward_table_s[row] * scale * stretch
            for layer in range(len(names) - 1, -1, -1):
                self.events.append(TraceEvent(f"backward {names[layer]}", t, float(tb[layer]), proc, "compute", args))
                t += float(tb[layer])

    def wait(self, w: int, k: int, since: float, now: float) -> None:
        if self._room() and now > since:
            self.events.append(TraceEvent("wait for parameters", since, now - since, f"worker {w}", "compute",
                                          {"iteration": k}))

    def update(self, s: int, m: int, k: int, start: float, dur: float, w: int | None) -> None:
        if self._room() and dur > 0:
            args = {"iteration": k, "message": m, "bytes": self.run.plan.bytes[m]}
            if w is not None:
                args["worker"] = w
            self.events.append(TraceEvent(f"update msg {m}", start, dur, f"server {s}", "update", args))

    def install_flows(self) -> None:
        """Record the recorded workers' pushes and pulls as the networks finish them."""
        plan = self.run.plan
        M = plan.messages
        workers, iterations = self.workers, self.iterations

        def recorder(direction: str, thread: str):
            def on_transfer(conn: int, token: int, tag: int, start: float, end: float) -> None:
                w, m = divmod(token, M)
                if w in workers and tag in iterations and self._room():
                    self.events.append(TraceEvent(f"{direction} msg {m}", start, end - start, f"worker {w}", thread,
                                                  {"iteration": tag, "bytes": plan.bytes[m], "shard": plan.shard[m]}))
            return on_transfer

        self.run.push_net.on_transfer = recorder("push", "nic up")
        self.run.pull_net.on_transfer = recorder("pull", "nic down")
