"""Full-duplex NIC links shared max-min fairly by connections (flow-level network model).

A *connection* carries messages from one node to another, FIFO, like one TCP stream: its traffic
crosses the sender's uplink and the receiver's downlink. All connections that have a message in
flight share the links max-min fairly (progressive filling, as SimGrid's LMM model); rates are
recomputed only when the set of active connections changes, not at every message boundary,
because a backlogged connection keeps its share while it moves from one message to the next.
That keeps the cost per event proportional to the active connections, and a connection that is
continuously backlogged costs one event per message.

A message is *released* at a given time (it may be queued ahead of time, e.g. a gradient that
backward will produce later); it is transmitted after every earlier message of its connection and
is *delivered* `alpha_s` (per-message latency) after its last byte left.

The network does not own the clock: it pushes events into the caller's heap as tuples
`(time_s, seq, kind, a, b)` with `kind` in {base+DONE, base+RELEASE, base+DELIVER}; the caller's
loop dispatches DONE/RELEASE back to `on_done`/`on_release`, calls `reallocate(now)` before time
advances while `dirty` is set, and handles DELIVER (a = token, b = tag given to `send`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque

DONE, RELEASE, DELIVER = 0, 1, 2


class EventQueue:
    """A heap of (time_s, seq, kind, a, b) tuples; `seq` breaks ties deterministically (FIFO)."""

    __slots__ = ("heap", "seq")

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = itertools.count()

    def push(self, time_s: float, kind: int, a: int = 0, b: int = 0) -> None:
        heapq.heappush(self.heap, (time_s, next(self.seq), kind, a, b))


class LinkNetwork:
    """Links with capacities in bytes/s, connections over (uplink, downlink) pairs, max-min sharing."""

    def __init__(self, queue: EventQueue, capacities_Bps: list[float], alpha_s: float, kind_base: int = 0,
                 names: list[str] | None = None) -> None:
        if any(not c > 0 for c in capacities_Bps):
            raise ValueError("link capacities must be positive")
        self.queue = queue
        self.cap = [float(c) for c in capacities_Bps]
        self.names = names or [f"link {i}" for i in range(len(capacities_Bps))]
        self.alpha_s = float(alpha_s)
        self.kind_done = kind_base + DONE
        self.kind_release = kind_base + RELEASE
        self.kind_deliver = kind_base + DELIVER
        nl = len(self.cap)
        self.l_n = [0] * nl  # active connections per link
        # Per link: total rate now, bytes carried so far (at l_last), time of the last update.
        self.l_rate = [0.0] * nl
        self.l_bytes = [0.0] * nl
        self.l_last = [0.0] * nl
        # Per connection.
        self.c_up: list[int] = []
        self.c_down: list[int] = []
        self.c_queue: list[deque] = []
        self.c_rem: list[float] = []  # bytes left of the head message at c_t
        self.c_t: list[float] = []
        self.c_rate: list[float] = []
        self.c_ver: list[int] = []
        self.c_pending: list[bool] = []  # a RELEASE event is scheduled
        self.c_start: list[float] = []  # when the head message started to move (for timelines)
        self.c_sent: list[float] = []  # bytes of messages fully sent
        self.active: dict[int, None] = {}  # insertion-ordered set of connections with a message moving
        self.dirty = False
        self.on_transfer = None  # optional callback(conn, token, tag, start_s, end_s) for timelines
        # Optional callback(token, tag, arrival_s, now): handle a delivery when its last byte leaves
        # instead of through a DELIVER event alpha later. Exact when the handler only schedules
        # effects at or after arrival_s (every message has the same latency, so arrival order is
        # done order); saves a heap event per message.
        self.deliver = None
        self.reallocations = 0

    def add_connection(self, up: int, down: int) -> int:
        self.c_up.append(up)
        self.c_down.append(down)
        self.c_queue.append(deque())
        self.c_rem.append(0.0)
        self.c_t.append(0.0)
        self.c_rate.append(0.0)
        self.c_ver.append(0)
        self.c_pending.append(False)
        self.c_start.append(0.0)
        self.c_sent.append(0.0)
        return len(self.c_up) - 1

    # --- messages -------------------------------------------------------------------------------
    def send(self, conn: int, nbytes: float, release_s: float, now: float, token: int, tag: int = 0) -> None:
        """Queue a message on `conn`, released at `release_s` (>= the previous message's release)."""
        q = self.c_queue[conn]
        q.append((release_s, nbytes, token, tag))
        if len(q) == 1:
            self._head_arrived(conn, now)

    def _head_arrived(self, conn: int, now: float) -> None:
        """The queue's head is new: start it if released, otherwise wake up at its release time."""
        release_s, nbytes, _, _ = self.c_queue[conn][0]
        if release_s <= now:
            self.c_rem[conn] = nbytes
            self.c_t[conn] = now
            self.c_start[conn] = now
            self.c_rate[conn] = 0.0
            ver = self.c_ver[conn] + 1
            self.c_ver[conn] = ver
            self.active[conn] = None
            up, down = self.c_up[conn], self.c_down[conn]
            l_n = self.l_n
            if l_n[up] == 0 and l_n[down] == 0:
                # Alone on both links: it takes the smaller capacity and nobody else changes.
                rate = min(self.cap[up], self.cap[down])
                self._account(up, now)
                self._account(down, now)
                self.l_rate[up] += rate
                self.l_rate[down] += rate
                self.c_rate[conn] = rate
                heapq.heappush(self.queue.heap, (now + nbytes / rate, next(self.queue.seq), self.kind_done, conn, ver))
            else:
                self.dirty = True
            l_n[up] += 1
            l_n[down] += 1
        elif not self.c_pending[conn]:
            self.c_pending[conn] = True
            self.queue.push(release_s, self.kind_release, conn, 0)

    def on_release(self, conn: int, now: float) -> None:
        self.c_pending[conn] = False
        if self.c_queue[conn] and conn not in self.active:
            self._head_arrived(conn, now)

    def on_done(self, conn: int, version: int, now: float) -> None:
        """The head message of `conn` sent its last byte (unless the event is stale)."""
        if version != self.c_ver[conn]:
            return
        q = self.c_queue[conn]
        _, sent, token, tag = q.popleft()
        self.c_sent[conn] += sent
        if self.on_transfer is not None:
            self.on_transfer(conn, token, tag, self.c_start[conn], now)
        if self.deliver is not None:
            self.deliver(token, tag, now + self.alpha_s, now)
        else:
            heapq.heappush(self.queue.heap, (now + self.alpha_s, next(self.queue.seq), self.kind_deliver, token, tag))
        if q and q[0][0] <= now:
            # Backlogged: the next message continues at the same rate; nobody else's share changes.
            nbytes = q[0][1]
            self.c_rem[conn] = nbytes
            self.c_t[conn] = now
            self.c_start[conn] = now
            ver = self.c_ver[conn] + 1
            self.c_ver[conn] = ver
            rate = self.c_rate[conn]
            if rate > 0.0:
                heapq.heappush(self.queue.heap, (now + nbytes / rate, next(self.queue.seq), self.kind_done, conn, ver))
            return
        del self.active[conn]
        self.c_ver[conn] += 1
        up, down = self.c_up[conn], self.c_down[conn]
        self._account(up, now)
        self._account(down, now)
        self.l_rate[up] -= self.c_rate[conn]
        self.l_rate[down] -= self.c_rate[conn]
        self.c_rate[conn] = 0.0
        l_n = self.l_n
        l_n[up] -= 1
        l_n[down] -= 1
        if l_n[up] or l_n[down]:
            self.dirty = True  # someone shared a link with it: their share may rise
        else:
            self.l_rate[up] = 0.0  # idle link: drop rounding residue
            self.l_rate[down] = 0.0
        if q:
            self._head_arrived(conn, now)

    def _account(self, link: int, now: float) -> None:
        self.l_bytes[link] += self.l_rate[link] * (now - self.l_last[link])
        self.l_last[link] = now

    # --- sharing --------------------------------------------------------------------------------
    def reallocate(self, now: float) -> None:
        """Max-min fair rates for the active connections (progressive filling over their links)."""
        self.dirty = False
        self.reallocations += 1
        active = self.active
        if not active:
            return
        c_up, c_down, c_rate, c_rem, c_t = self.c_up, self.c_down, self.c_rate, self.c_rem, self.c_t
        cap = self.cap
        count: dict[int, int] = {}
        conns_on: dict[int, list[int]] = {}
        for c in active:
            # Bring the bytes left up to date at the old rate.
            rate = c_rate[c]
            if rate > 0.0:
                c_rem[c] -= rate * (now - c_t[c])
                if c_rem[c] < 0.0:
                    c_rem[c] = 0.0
            c_t[c] = now
            for link in (c_up[c], c_down[c]):
                lst = conns_on.get(link)
                if lst is None:
                    conns_on[link] = [c]
                    count[link] = 1
                else:
                    lst.append(c)
                    count[link] += 1
        left = {link: cap[link] for link in count}
        heap = [(left[link] / n, link) for link, n in count.items()]
        heapq.heapify(heap)
        new_rate: dict[int, float] = {}
        while heap:
            share, link = heapq.heappop(heap)
            n = count[link]
            if n == 0 or left[link] / n != share:
                continue  # stale entry: this link's share rose since it was pushed
            for c in conns_on[link]:
                if c in new_rate:
                    continue
                new_rate[c] = share
                other = c_down[c] if c_up[c] == link else c_up[c]
                left[other] -= share
                count[other] -= 1
                if count[other] > 0:
                    if left[other] < 0.0:
                        left[other] = 0.0
                    heapq.heappush(heap, (left[other] / count[other], other))
            count[link] = 0
        l_rate, push, kind_done = self.l_rate, self.queue.push, self.kind_done
        for link in conns_on:
            self._account(link, now)
        for c, rate in new_rate.items():
            old = c_rate[c]
            if rate == old:
                continue
            l_rate[c_up[c]] += rate - old
            l_rate[c_down[c]] += rate - old
            c_rate[c] = rate
            ver = self.c_ver[c] + 1
            self.c_ver[c] = ver
            push(now + c_rem[c] / rate, kind_done, c, ver)

    def bytes_carried(self, link: int, now: float) -> float:
        """Bytes the link has carried up to `now` (rates are constant since the last change)."""
        return self.l_bytes[link] + self.l_rate[link] * (now - self.l_last[link])


def run_network(net: LinkNetwork) -> list[tuple[float, int, int]]:
    """Drive a network alone (tests, small studies): returns (delivery time, token, tag) in order."""
    q = net.queue
    heap = q.heap
    now = 0.0
    out = []
    while True:
        if net.dirty and (not heap or heap[0][0] > now):
            net.reallocate(now)
        if not heap:
            break
        t, _, kind, a, b = heapq.heappop(heap)
        now = t
        if kind == net.kind_done:
            net.on_done(a, b, now)
        elif kind == net.kind_release:
            net.on_release(a, now)
        elif kind == net.kind_deliver:
            out.append((t, a, b))
    return out


def _reschedule_hub(net, hub: int, now: float, event_arg: int) -> None:
    """A hub's connections share it as one processor-sharing queue: each gets min(its own edge's
    capacity p, capacity / k); schedule the hub's next completion in virtual time (a new version
    makes the hub's older completion events stale)."""
    k = net.s_k[hub]
    ver = net.s_ver[hub] + 1
    net.s_ver[hub] = ver
    if k == 0:
        net.s_rate[hub] = 0.0
        return
    share = net.cap[hub] / k
    p = net.s_p[hub]
    rate = p if p < share else share
    net.s_rate[hub] = rate
    left = net.s_heap[hub][0][0] - net.s_v[hub]
    if left < 0.0:
        left = 0.0
    heapq.heappush(net.queue.heap, (now + left / rate, next(net.queue.seq), net.kind_done, event_arg, ver))


class NotAStar(Exception):
    """Raised by StarNetwork when its shortcut stops being the max-min allocation."""


class StarNetwork:
    """The same model as `LinkNetwork`, faster, when each connection crosses one *shared* link
    (a server NIC) and one *edge* link (a worker NIC) and the edge links are not what binds.

    If every connection on a shared link of capacity C (k of them active, edge links of capacity
    p) gets min(p, C/k), and no edge link is over its capacity, that allocation is max-min fair
    (every connection is bottlenecked on a saturated link where nobody gets more). Each shared link
    is then a processor-sharing queue: a virtual clock V (bytes served per connection) advances at
    that rate, a moving message finishes when V reaches its virtual finish tag, and only the
    earliest tag needs an event: a change costs O(log k) instead of rescheduling all k
    connections. With one server shard and identical workers edge links are private and the
    shortcut always holds; with several shards a worker's NIC carries one connection per shard,
    so every rate increase is checked, and `NotAStar` is raised the moment an edge link would be
    over capacity (the caller then reruns with `LinkNetwork`). Same interface as `LinkNetwork`;
    the DONE event carries (shared link, version).
    """

    @staticmethod
    def applies(capacities_Bps: list[float], pairs: list[tuple[int, int]], shared: set[int] | None = None) -> bool:
        """True when every connection has one shared link (given, or else the link of the two that
        other connections also use, the other being private) and, per shared link, all its
        connections' edge links have the same capacity."""
        uses: dict[int, int] = {}
        for up, down in pairs:
            uses[up] = uses.get(up, 0) + 1
            uses[down] = uses.get(down, 0) + 1
        edge_cap: dict[int, float] = {}
        for up, down in pairs:
            if shared is not None:
                if (up in shared) == (down in shared):
                    return False
                hub, edge = (up, down) if up in shared else (down, up)
            elif uses[up] == 1:
                edge, hub = up, down
            elif uses[down] == 1:
                edge, hub = down, up
            else:
                return False
            cap = capacities_Bps[edge]
            if edge_cap.setdefault(hub, cap) != cap:
                return False
        return True

    def __init__(self, queue: EventQueue, capacities_Bps: list[float], alpha_s: float, kind_base: int = 0,
                 names: list[str] | None = None, shared: set[int] | None = None) -> None:
        if any(not c > 0 for c in capacities_Bps):
            raise ValueError("link capacities must be positive")
        self.shared = shared
        self.queue = queue
        self.cap = [float(c) for c in capacities_Bps]
        self.names = names or [f"link {i}" for i in range(len(capacities_Bps))]
        self.alpha_s = float(alpha_s)
        self.kind_done = kind_base + DONE
        self.kind_release = kind_base + RELEASE
        self.kind_deliver = kind_base + DELIVER
        self.dirty = False  # never: rates change inside each operation
        self.on_transfer = None
        self.deliver = None
        self.reallocations = 0
        nl = len(self.cap)
        self._uses = [0] * nl
        # Per shared link: active count, per-connection rate, virtual clock, its time, tag heap, version.
        self.s_k = [0] * nl
        self.s_rate = [0.0] * nl
        self.s_v = [0.0] * nl
        self.s_vt = [0.0] * nl
        self.s_heap: list[list] = [[] for _ in range(nl)]
        self.s_ver = [0] * nl
        self.s_p = [0.0] * nl  # private capacity of its connections
        self.s_bytes = [0.0] * nl  # bytes carried up to s_vt
        # Per connection.
        self.c_up: list[int] = []
        self.c_down: list[int] = []
        self.c_shared: list[int] = []
        self.c_private: list[int] = []
        self.c_queue: list[deque] = []
        self.c_active: list[bool] = []
        self.c_pending: list[bool] = []
        self.c_start: list[float] = []
        self.c_fin: list[float] = []  # virtual finish tag of the moving message
        self.c_head_bytes: list[float] = []
        self.c_sent: list[float] = []  # bytes of messages fully sent
        self._pairs: list[tuple[int, int]] = []
        self._seq = itertools.count()

    def add_connection(self, up: int, down: int) -> int:
        c = len(self.c_up)
        self.c_up.append(up)
        self.c_down.append(down)
        self._pairs.append((up, down))
        self._uses[up] += 1
        self._uses[down] += 1
        self.c_queue.append(deque())
        self.c_active.append(False)
        self.c_pending.append(False)
        self.c_start.append(0.0)
        self.c_fin.append(0.0)
        self.c_head_bytes.append(0.0)
        self.c_sent.append(0.0)
        self.c_shared.append(-1)
        self.c_private.append(-1)
        return c

    def _finalize(self) -> None:
        """Decide edge/shared links once all connections exist (first message sent)."""
        if not StarNetwork.applies(self.cap, self._pairs, self.shared):
            raise ValueError("these connections do not form a star (use LinkNetwork)")
        edge_uses: dict[int, int] = {}
        for c, (up, down) in enumerate(self._pairs):
            if self.shared is not None:
                private, shared = (down, up) if up in self.shared else (up, down)
            else:
                private, shared = (up, down) if self._uses[up] == 1 else (down, up)
            self.c_private[c], self.c_shared[c] = private, shared
            self.s_p[shared] = self.cap[private]
            edge_uses[private] = edge_uses.get(private, 0) + 1
        # Edge links carrying several connections need the capacity check on every rate rise.
        self.check = any(n > 1 for n in edge_uses.values())
        self.hubs = sorted({self.c_shared[c] for c in range(len(self.c_up))})
        self.edge_min_cap = min(self.cap[self.c_private[c]] for c in range(len(self.c_up)))
        self.edge_active: list[list[int]] = [[] for _ in self.cap]
        self._pairs = []

    def _check(self, link: int, conn: int = -1) -> None:
        """Raise NotAStar if some edge link would carry more than its capacity."""
        rate = self.s_rate
        if sum(rate[h] for h in self.hubs if self.s_k[h]) <= self.edge_min_cap * (1 + 1e-12):
            return
        edges = [self.c_private[conn]] if conn >= 0 else [self.c_private[e[2]] for e in self.s_heap[link]]
        for x in edges:
            total = 0.0
            for c in self.edge_active[x]:
                total += rate[self.c_shared[c]]
            if total > self.cap[x] * (1 + 1e-9):
                raise NotAStar(f"edge link {x} would carry {total:.6g} B/s > {self.cap[x]:.6g} B/s")

    def _advance(self, link: int, now: float) -> None:
        dt = now - self.s_vt[link]
        if dt > 0.0:
            rate = self.s_rate[link]
            self.s_v[link] += rate * dt
            self.s_bytes[link] += self.s_k[link] * rate * dt
        self.s_vt[link] = now

    def _reschedule(self, link: int, now: float) -> None:
        _reschedule_hub(self, link, now, link)

    def send(self, conn: int, nbytes: float, release_s: float, now: float, token: int, tag: int = 0) -> None:
        if self._pairs:
            self._finalize()
        q = self.c_queue[conn]
        q.append((release_s, nbytes, token, tag))
        if len(q) == 1:
            self._head_arrived(conn, now)

    def _start_head(self, conn: int, now: float, link: int) -> None:
        """Put the (released) head message of `conn` on its shared link; V is current."""
        nbytes = self.c_queue[conn][0][1]
        fin = self.s_v[link] + nbytes
        self.c_fin[conn] = fin
        self.c_head_bytes[conn] = nbytes
        self.c_start[conn] = now
        heapq.heappush(self.s_heap[link], (fin, next(self._seq), conn))

    def _head_arrived(self, conn: int, now: float) -> None:
        release_s = self.c_queue[conn][0][0]
        if release_s <= now:
            link = self.c_shared[conn]
            self._advance(link, now)
            self._start_head(conn, now, link)
            self.c_active[conn] = True
            self.s_k[link] += 1
            self._reschedule(link, now)
            if self.check:
                self.edge_active[self.c_private[conn]].append(conn)
                self._check(link, conn)
        elif not self.c_pending[conn]:
            self.c_pending[conn] = True
            heapq.heappush(self.queue.heap, (release_s, next(self.queue.seq), self.kind_release, conn, 0))

    def on_release(self, conn: int, now: float) -> None:
        self.c_pending[conn] = False
        if self.c_queue[conn] and not self.c_active[conn]:
            self._head_arrived(conn, now)

    def on_done(self, link: int, version: int, now: float) -> None:
        # The hot path of a one-shard parameter server: written out inline (no helper calls).
        s_ver = self.s_ver
        if version != s_ver[link]:
            return
        rate = old_rate = self.s_rate[link]
        k = self.s_k[link]
        dt = now - self.s_vt[link]
        v = self.s_v[link]
        if dt > 0.0:
            v += rate * dt
            self.s_v[link] = v
            self.s_bytes[link] += k * rate * dt
        self.s_vt[link] = now
        lheap = self.s_heap[link]
        conn = heapq.heappop(lheap)[2]
        q = self.c_queue[conn]
        _, nbytes, token, tag = q.popleft()
        self.c_sent[conn] += nbytes
        if self.on_transfer is not None:
            self.on_transfer(conn, token, tag, self.c_start[conn], now)
        gheap, gseq = self.queue.heap, self.queue.seq
        if self.deliver is not None:
            self.deliver(token, tag, now + self.alpha_s, now)
        else:
            heapq.heappush(gheap, (now + self.alpha_s, next(gseq), self.kind_deliver, token, tag))
        if q and q[0][0] <= now:
            # Backlogged: the next message starts at once; same count, same rate.
            nb = q[0][1]
            fin = v + nb
            self.c_fin[conn] = fin
            self.c_head_bytes[conn] = nb
            self.c_start[conn] = now
            heapq.heappush(lheap, (fin, next(self._seq), conn))
        else:
            self.c_active[conn] = False
            k -= 1
            self.s_k[link] = k
            if self.check:
                self.edge_active[self.c_private[conn]].remove(conn)
            if q:
                self._head_arrived(conn, now)  # schedules its release (in the future)
        ver = s_ver[link] + 1
        s_ver[link] = ver
        if k == 0:
            self.s_rate[link] = 0.0
            return
        share = self.cap[link] / k
        p = self.s_p[link]
        rate = p if p < share else share
        self.s_rate[link] = rate
        left = lheap[0][0] - v
        if left < 0.0:
            left = 0.0
        heapq.heappush(gheap, (now + left / rate, next(gseq), self.kind_done, link, ver))
        if self.check and rate > old_rate:
            self._check(link)

    def reallocate(self, now: float) -> None:
        self.dirty = False

    def bytes_carried(self, link: int, now: float) -> float:
        if self._pairs:
            self._finalize()
        if self._uses[link] == 0:
            return 0.0
        if self.s_p[link] > 0.0 or self.s_k[link] > 0 or self.s_heap[link]:
            # a shared link
            return self.s_bytes[link] + self.s_k[link] * self.s_rate[link] * max(0.0, now - self.s_vt[link])
        total = 0.0
        for c in range(len(self.c_up)):
            if self.c_private[c] == link:
                total += self.c_sent[c]
                if self.c_active[c]:
                    shared = self.c_shared[c]
                    v = self.s_v[shared] + self.s_rate[shared] * max(0.0, now - self.s_vt[shared])
                    total += max(0.0, v - (self.c_fin[c] - self.c_head_bytes[c]))
        return total


class HybridNetwork(LinkNetwork):
    """`LinkNetwork` that switches to the `StarNetwork` shortcut whenever it holds.

    Connections each cross one hub link (a server NIC, given in `shared`) and one edge link (a
    worker NIC, possibly carrying one connection per server shard). While every active connection's
    max-min rate is min(p, C/k) of its hub, the network runs in *star mode* (virtual clock per hub,
    one event per hub); when a change would put an edge link over capacity it converts the state
    (bytes left per connection) to the general progressive-filling mode, and after each general
    reallocation it converts back if the rates are the star rates again. Hub events are encoded
    with a = -1 - hub, so `on_done` tells them from per-connection events. Exactly the same answer
    as `LinkNetwork`, far fewer rate recomputations when server NICs are saturated.
    """

    def __init__(self, queue: EventQueue, capacities_Bps: list[float], alpha_s: float, kind_base: int = 0,
                 names: list[str] | None = None, shared: set[int] | None = None) -> None:
        super().__init__(queue, capacities_Bps, alpha_s, kind_base, names)
        self.hub_set = set(shared or ())
        nl = len(self.cap)
        self.s_k = [0] * nl
        self.s_rate = [0.0] * nl
        self.s_v = [0.0] * nl
        self.s_vt = [0.0] * nl
        self.s_heap: list[list] = [[] for _ in range(nl)]
        self.s_ver = [0] * nl
        self.s_p = [0.0] * nl
        self.c_hub: list[int] = []
        self.c_edge: list[int] = []
        self.c_fin: list[float] = []
        self.c_head_bytes: list[float] = []
        self.edge_active: list[list[int]] = [[] for _ in range(nl)]
        self.star = False
        self.star_possible = False
        self._ready = False
        self._seq2 = itertools.count()
        self.switches = 0

    def add_connection(self, up: int, down: int) -> int:
        c = super().add_connection(up, down)
        hub, edge = (up, down) if up in self.hub_set else (down, up)
        self.c_hub.append(hub)
        self.c_edge.append(edge)
        self.c_fin.append(0.0)
        self.c_head_bytes.append(0.0)
        return c

    def _finalize(self) -> None:
        self._ready = True
        pairs = list(zip(self.c_up, self.c_down))
        self.star_possible = bool(pairs) and StarNetwork.applies(self.cap, pairs, self.hub_set)
        if self.star_possible:
            for c in range(len(pairs)):
                self.s_p[self.c_hub[c]] = self.cap[self.c_edge[c]]
            self.hubs = sorted(set(self.c_hub))
            self.edge_min_cap = min(self.cap[e] for e in self.c_edge)
            self.star = True
        self.link_conns: list[list[int]] = [[] for _ in self.cap]
        for c in range(len(pairs)):
            self.link_conns[self.c_up[c]].append(c)
            self.link_conns[self.c_down[c]].append(c)

    # --- star mode ----------------------------------------------------------------------------
    def _advance(self, hub: int, now: float) -> None:
        dt = now - self.s_vt[hub]
        if dt > 0.0:
            self.s_v[hub] += self.s_rate[hub] * dt
        self.s_vt[hub] = now

    def _reschedule(self, hub: int, now: float) -> None:
        _reschedule_hub(self, hub, now, -1 - hub)

    def _feasible(self, edges) -> bool:
        rate = self.s_rate
        if sum(rate[h] for h in self.hubs if self.s_k[h]) <= self.edge_min_cap * (1 + 1e-12):
            return True
        for x in edges:
            total = 0.0
            for c in self.edge_active[x]:
                total += rate[self.c_hub[c]]
            if total > self.cap[x] * (1 + 1e-9):
                return False
        return True

    def _to_general(self, now: float) -> None:
        self.star = False
        self.switches += 1
        l_n = self.l_n
        for i in range(len(l_n)):
            l_n[i] = 0
            self.l_rate[i] = 0.0
            self.l_last[i] = now
        for h in self.hubs:
            if self.s_k[h]:
                self._advance(h, now)
                v = self.s_v[h]
                for fin, _, c in self.s_heap[h]:
                    self.c_rem[c] = max(fin - v, 0.0)
                    self.c_t[c] = now
                    self.c_rate[c] = 0.0
                    self.c_ver[c] += 1
                self.s_heap[h] = []
                self.s_k[h] = 0
            self.s_ver[h] += 1
            self.s_rate[h] = 0.0
        for c in self.active:
            l_n[self.c_up[c]] += 1
            l_n[self.c_down[c]] += 1
        for lst in self.edge_active:
            lst.clear()
        self.dirty = True

    def _to_star(self, now: float) -> None:
        self.star = True
        self.switches += 1
        for h in self.hubs:
            self.s_v[h] = 0.0
            self.s_vt[h] = now
            self.s_k[h] = 0
            self.s_heap[h] = []
        for c in self.active:
            h = self.c_hub[c]
            rem = self.c_rem[c] - self.c_rate[c] * (now - self.c_t[c])
            rem = rem if rem > 0.0 else 0.0
            self.c_fin[c] = rem
            self.c_ver[c] += 1  # drop its pending per-connection event
            self.c_rate[c] = 0.0
            heapq.heappush(self.s_heap[h], (rem, next(self._seq2), c))
            self.s_k[h] += 1
            self.edge_active[self.c_edge[c]].append(c)
        for h in self.hubs:
            if self.s_k[h]:
                self._reschedule(h, now)

    # --- interface ----------------------------------------------------------------------------
    def send(self, conn: int, nbytes: float, release_s: float, now: float, token: int, tag: int = 0) -> None:
        if not self._ready:
            self._finalize()
        q = self.c_queue[conn]
        q.append((release_s, nbytes, token, tag))
        if len(q) == 1:
            self._head_arrived(conn, now)

    def _head_arrived(self, conn: int, now: float) -> None:
        release_s, nbytes, _, _ = self.c_queue[conn][0]
        self.c_head_bytes[conn] = nbytes
        if release_s > now or not self.star:
            super()._head_arrived(conn, now)
            return
        h = self.c_hub[conn]
        self._advance(h, now)
        fin = self.s_v[h] + nbytes
        self.c_fin[conn] = fin
        self.c_start[conn] = now
        heapq.heappush(self.s_heap[h], (fin, next(self._seq2), conn))
        self.active[conn] = None
        self.s_k[h] += 1
        self._reschedule(h, now)
        edge = self.c_edge[conn]
        self.edge_active[edge].append(conn)
        if not self._feasible((edge,)):
            self._to_general(now)

    def on_done(self, a: int, version: int, now: float) -> None:
        if a >= 0:
            if not self.star:
                LinkNetwork.on_done(self, a, version, now)
                if not self.star and self.c_queue[a] and a in self.active:
                    self.c_head_bytes[a] = self.c_queue[a][0][1]
            return
        hub = -1 - a
        s_ver = self.s_ver
        if not self.star or version != s_ver[hub]:
            return
        # Hot path (saturated server NICs): written out inline.
        old_rate = self.s_rate[hub]
        dt = now - self.s_vt[hub]
        v = self.s_v[hub]
        if dt > 0.0:
            v += old_rate * dt
            self.s_v[hub] = v
        self.s_vt[hub] = now
        lheap = self.s_heap[hub]
        conn = heapq.heappop(lheap)[2]
        q = self.c_queue[conn]
        _, nbytes, token, tag = q.popleft()
        self.c_sent[conn] += nbytes
        if self.on_transfer is not None:
            self.on_transfer(conn, token, tag, self.c_start[conn], now)
        gheap, gseq = self.queue.heap, self.queue.seq
        if self.deliver is not None:
            self.deliver(token, tag, now + self.alpha_s, now)
        else:
            heapq.heappush(gheap, (now + self.alpha_s, next(gseq), self.kind_deliver, token, tag))
        if not self.star:  # the delivery handler cannot touch this network, but be safe
            return
        k = self.s_k[hub]
        if q and q[0][0] <= now:
            nb = q[0][1]
            self.c_head_bytes[conn] = nb
            self.c_fin[conn] = v + nb
            self.c_start[conn] = now
            heapq.heappush(lheap, (v + nb, next(self._seq2), conn))
            ver = s_ver[hub] + 1
            s_ver[hub] = ver
            left = lheap[0][0] - v
            if left < 0.0:
                left = 0.0
            heapq.heappush(gheap, (now + left / old_rate, next(gseq), self.kind_done, a, ver))
            return
        del self.active[conn]
        self.s_k[hub] = k - 1
        self.edge_active[self.c_edge[conn]].remove(conn)
        self._reschedule(hub, now)
        if q:
            self._head_arrived(conn, now)
        if self.star and self.s_rate[hub] > old_rate and not self._feasible(
                [self.c_edge[e[2]] for e in self.s_heap[hub]]):
            self._to_general(now)

    def reallocate(self, now: float) -> None:
        if self.star:
            self.dirty = False
            return
        super().reallocate(now)
        if not self.star_possible or not self.active:
            if self.star_possible and not self.active:
                self._to_star(now)
            return
        k: dict[int, int] = {}
        for c in self.active:
            h = self.c_hub[c]
            k[h] = k.get(h, 0) + 1
        for c in self.active:
            h = self.c_hub[c]
            share = self.cap[h] / k[h]
            p = self.s_p[h]
            want = p if p < share else share
            if abs(self.c_rate[c] - want) > 1e-12 * want:
                return
        self._to_star(now)

    def bytes_carried(self, link: int, now: float) -> float:
        if not self._ready:
            self._finalize()
        total = 0.0
        for c in self.link_conns[link]:
            total += self.c_sent[c]
            if c in self.active:
                if self.star:
                    h = self.c_hub[c]
                    v = self.s_v[h] + self.s_rate[h] * max(0.0, now - self.s_vt[h])
                    total += max(0.0, v - (self.c_fin[c] - self.c_head_bytes[c]))
                else:
                    rem = self.c_rem[c] - self.c_rate[c] * max(0.0, now - self.c_t[c])
                    total += max(0.0, self.c_head_bytes[c] - rem)
        return total
