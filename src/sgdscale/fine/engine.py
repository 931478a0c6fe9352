"""A general discrete-event engine for explicit DAGs of operations (list scheduling).

Each operation is one of:
- a *task* on a FIFO resource (a worker's compute, a server shard, a communication stream): it
  queues when all its predecessors are done and runs alone on its resource for `duration_s`;
- a *delay* (resource -1): it runs for `duration_s` as soon as it is ready, in parallel with anything;
- a *message* (conn >= 0): `nbytes` sent on a connection of a `LinkNetwork` (max-min shared links,
  FIFO per connection, latency alpha), finishing when delivered;
- a *choice* (`add_choice`): once its one predecessor is done at time t, it finishes at t + delay
  unless every op of `unless_done` has finished by t; then it finishes when every op of
  `else_after` has, and not before t + delay. Timing decides which branch runs, as for gloo's
  receive notice, which goes ahead of pushes that wait for the peer and behind pushes already
  written.

Ties are broken by a sequence number, so a run is deterministic. `sgdscale.fine.ps` simulates
the parameter servers with a faster process-oriented loop over the same event queue and links; this
engine runs explicit DAGs (tests, small cross-checks, and any new variant someone wants to try
without writing a specialised loop).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from sgdscale.fine.events import EventQueue, Kind, NetworkModel

_FINISH = int(Kind.TASK_FINISH)


@dataclass
class Dag:
    """Operations with integer ids, in any order that respects nothing in particular."""

    duration_s: list[float] = field(default_factory=list)
    resource: list[int] = field(default_factory=list)
    preds: list[list[int]] = field(default_factory=list)
    conn: list[int] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    tag: list[int] = field(default_factory=list)  # a message's tag (the network's burst key)
    choice: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)  # op -> (unless, else)

    def add_choice(self, after: int, delay_s: float, unless_done: list[int], else_after: list[int],
                   name: str = "") -> int:
        """A choice op (see the module docstring)."""
        op = self.add(delay_s, -1, [after], name=name)
        self.choice[op] = (list(unless_done), list(else_after))
        return op

    def add(self, duration_s: float = 0.0, resource: int = -1, preds: tuple[int, ...] | list[int] = (),
            conn: int = -1, nbytes: float = 0.0, name: str = "", tag: int = 0) -> int:
        self.duration_s.append(float(duration_s))
        self.resource.append(resource)
        self.preds.append(list(preds))
        self.conn.append(conn)
        self.nbytes.append(float(nbytes))
        self.name.append(name)
        self.tag.append(tag)
        return len(self.duration_s) - 1

    def __len__(self) -> int:
        return len(self.duration_s)

    def critical_path_s(self) -> float:
        """Longest path counting task and delay durations (messages count 0): a makespan lower bound."""
        order = topological_order(self)
        finish = [0.0] * len(self)
        for op in order:
            start = max((finish[p] for p in self.preds[op]), default=0.0)
            finish[op] = start + (self.duration_s[op] if self.conn[op] < 0 else 0.0)
        return max(finish, default=0.0)


def topological_order(dag: Dag) -> list[int]:
    n = len(dag)
    indeg = [len(p) for p in dag.preds]
    succ: list[list[int]] = [[] for _ in range(n)]
    for op, preds in enumerate(dag.preds):
        for p in preds:
            succ[p].append(op)
    ready = deque(i for i in range(n) if indeg[i] == 0)
    order = []
    while ready:
        op = ready.popleft()
        order.append(op)
        for s in succ[op]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(order) != n:
        raise ValueError("the DAG has a cycle")
    return order


@dataclass
class DagRun:
    start_s: list[float]
    finish_s: list[float]
    makespan_s: float
    busy_s: list[float]  # per resource


def run_dag(dag: Dag, resources: int, network: NetworkModel | None = None,
            queue: EventQueue | None = None) -> DagRun:
    """Simulate `dag`; a message op needs `network` (built on `queue`; its event kinds must not be
    `Kind.TASK_FINISH`)."""
    n = len(dag)
    q = queue or (network.queue if network is not None else EventQueue())
    if network is not None and network.queue is not q:
        raise ValueError("the network must push into the engine's event queue")
    heap = q.heap
    succ: list[list[int]] = [[] for _ in range(n)]
    missing = [0] * n
    for op, preds in enumerate(dag.preds):
        missing[op] = len(preds)
        for p in preds:
            if not 0 <= p < n:
                raise ValueError(f"op {op} depends on unknown op {p}")
            succ[p].append(op)
    start = [float("nan")] * n
    finish = [float("nan")] * n
    free = [True] * resources
    waiting: list[deque] = [deque() for _ in range(resources)]
    busy = [0.0] * resources
    duration, resource, conn, nbytes = dag.duration_s, dag.resource, dag.conn, dag.nbytes
    now = 0.0
    done = 0

    choice = dict(dag.choice)
    waits_else: set[int] = set()  # choice ops that took the else branch and wait for its ops

    def ready(op: int) -> None:
        if op in choice:
            unless_done, else_after = choice.pop(op)
            start[op] = now
            pending = [p for p in else_after if not finish[p] <= now]  # (NaN: not finished)
            if all(finish[u] <= now for u in unless_done) and pending:
                waits_else.add(op)  # ready again once they are done
                missing[op] = len(pending)
                for p in pending:
                    succ[p].append(op)
                return
            q.push(now + duration[op], _FINISH, op)
            return
        if op in waits_else:
            q.push(max(now, start[op] + duration[op]), _FINISH, op)
            return
        c = conn[op]
        if c >= 0:
            if network is None:
                raise ValueError("the DAG has messages but no network was given")
            start[op] = now
            network.send(c, nbytes[op], now, now, op, dag.tag[op])
            return
        r = resource[op]
        if r < 0:
            start[op] = now
            q.push(now + duration[op], _FINISH, op)
        elif free[r]:
            free[r] = False
            start[op] = now
            busy[r] += duration[op]
            q.push(now + duration[op], _FINISH, op)
        else:
            waiting[r].append(op)

    for op in range(n):
        if missing[op] == 0:
            ready(op)
    while True:
        if network is not None and network.dirty and (not heap or heap[0][0] > now):
            network.reallocate(now)
        if not heap:
            break
        t, _, kind, a, b = heapq.heappop(heap)
        now = t
        if kind == _FINISH or (network is not None and kind == network.kind_deliver):
            op = a
            finish[op] = now
            done += 1
            r = resource[op] if conn[op] < 0 else -1
            if r >= 0:
                if waiting[r]:
                    nxt = waiting[r].popleft()
                    start[nxt] = now
                    busy[r] += duration[nxt]
                    q.push(now + duration[nxt], _FINISH, nxt)
                else:
                    free[r] = True
            for s in succ[op]:
                missing[s] -= 1
                if missing[s] == 0:
                    ready(s)
        elif kind == network.kind_done:
            network.on_done(a, b, now)
        elif kind == network.kind_release:
            network.on_release(a, now)
    if done != n:
        raise ValueError(f"only {done} of {n} operations ran: the DAG has a cycle")
    return DagRun(start, finish, max(finish, default=0.0), busy)
