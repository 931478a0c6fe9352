"""The event heap every fine-grained loop shares, the event kinds in it, and the network interface.

A loop (the parameter-server simulation `sgdscale.fine.ps`, the DAG engine `sgdscale.fine.engine`)
owns one `EventQueue` of `(time_s, seq, kind, a, b)` tuples; the networks it drives push their own
events into the same heap under the kinds the loop gave them (`NetKinds`). Every kind is named here
once, so no two users can pick the same number by accident.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from enum import IntEnum
from typing import NamedTuple, Protocol, runtime_checkable


class Kind(IntEnum):
    """Event kinds. A network's three kinds are given to it as `NetKinds`."""

    PUSH_DONE = 0  # a message's last byte left (a = connection or -1 - hub, b = version)
    PUSH_RELEASE = 1  # a queued message's release time came (a = connection)
    PUSH_DELIVER = 2  # a message arrived (a = token, b = tag); loops may deliver inline instead
    PULL_DONE = 3
    PULL_RELEASE = 4
    PULL_DELIVER = 5
    PULL_WATCH = 6  # a connection's watch may be reached (a = connection, b = watch version)
    STEP_END = 11  # a worker's step ended (a = worker)
    GROUP_READY = 21  # all-reduce event oracle (tests): worker a produced group b
    COLLECTIVE_END = 22  # all-reduce event oracle (tests): group a's collective ended
    TASK_FINISH = 100  # DAG engine: operation a finished


class NetKinds(NamedTuple):
    """The three kinds one network pushes: its DONE, RELEASE and DELIVER events."""

    done: int
    release: int
    deliver: int


PUSH_KINDS = NetKinds(Kind.PUSH_DONE, Kind.PUSH_RELEASE, Kind.PUSH_DELIVER)
PULL_KINDS = NetKinds(Kind.PULL_DONE, Kind.PULL_RELEASE, Kind.PULL_DELIVER)


class EventQueue:
    """A heap of (time_s, seq, kind, a, b) tuples; `seq` breaks ties deterministically (FIFO)."""

    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = itertools.count()

    def push(self, time_s: float, kind: int, a: int = 0, b: int = 0) -> None:
        heapq.heappush(self.heap, (time_s, next(self.seq), kind, a, b))


# (token, tag, arrival_s, now_s): handle a delivery when its last byte leaves.
DeliverFn = Callable[[int, int, float, float], None]
# (connection, token, tag, start_s, end_s): a message's transfer, for timelines.
TransferFn = Callable[[int, int, int, float, float], None]


@runtime_checkable
class NetworkModel(Protocol):
    """What a loop needs from a network of links (`sgdscale.fine.links.LinkNetwork`,
    `sgdscale.fine.hubs.StarNetwork`).

    The loop pops the network's events from the shared heap and hands DONE to `on_done` and
    RELEASE to `on_release`; before time advances it calls `reallocate(now)` while `dirty` is set;
    a DELIVER event (a = token, b = tag) is the loop's own to handle, unless `deliver` is set, in
    which case the network calls it when the last byte leaves (exact because every message has the
    same latency: arrival order is done order).
    """

    queue: EventQueue
    cap: list[float]
    alpha_s: float
    kind_done: int
    kind_release: int
    kind_deliver: int
    dirty: bool
    deliver: DeliverFn | None
    on_transfer: TransferFn | None

    def add_connection(self, up: int, down: int) -> int: ...

    def send(self, conn: int, nbytes: float, release_s: float, now: float, token: int, tag: int = 0) -> None: ...

    def on_done(self, a: int, version: int, now: float) -> None: ...

    def on_release(self, conn: int, now: float) -> None: ...

    def reallocate(self, now: float) -> None: ...

    def bytes_carried(self, link: int, now: float) -> float: ...
