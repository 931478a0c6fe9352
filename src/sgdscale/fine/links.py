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

The network does not own the clock: it pushes events into the caller's heap under the kinds it
was given (`sgdscale.fine.events.NetKinds`) and implements `sgdscale.fine.events.NetworkModel`.
When the server NICs are what binds, `sgdscale.fine.hubs.StarNetwork` gives the same answer faster.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from statistics import NormalDist

from sgdscale.fine.events import PUSH_KINDS, DeliverFn, EventQueue, NetKinds, NetworkModel, TransferFn

__all__ = ["EventQueue", "LinkNetwork", "run_network"]

# Whether a newcomer that yielded to the flows already leaving its node takes its full weight back once
# they have all stopped, and then holds the link against later newcomers as any first flow does, rather
# than yielding for its whole burst. Measured with plain TCP out of one node
# (`benchmarks/incumbent_handover.py`, 600 Mbit/s, 0.25 cores): B starts while A moves, A ends, B runs
# alone, C starts: C got 0.33 of B's weight (0.25-0.35, 5 runs), as a newcomer to a flow that had been
# first all along (0.28), where yielding for the whole burst has them share equally. In the simulation
# a shard's replies to several async workers then take turns throughout, and its links stay busier:
# set 78's async resnet50 replay (4 workers, one shard, whose runs kept the shard's link busy ~98% both
# ways) went from -17.4% to -10.4%, but the kept async PS runs of sets 27-78 went from 5.2% to 7.2% in
# the median (124 cases; sets 40-78 3.0% -> 5.8%; 15 better, 39 worse by more than half a point), nearly
# all too fast (`benchmarks/incumbency_tuning.py`, results/incumbency_tuning-async-27-78.md): what makes a
# real shard's replies (gloo, under a CPU quota) share its uplink more evenly than plain TCP flows do is
# not measured. Modelled, tested, not used.
INCUMBENCY_PASSES_ON = False


class LinkNetwork:
    """Links with capacities in bytes/s, connections over (uplink, downlink) pairs, max-min sharing."""

    def __init__(self, queue: EventQueue, capacities_Bps: list[float], alpha_s: float,
                 kinds: NetKinds = PUSH_KINDS, weight_sigma: float = 0.0, seed: int = 0,
                 key_offset: int = 0, newcomer_weight: float = 1.0, late_joiner_weight: float = 1.0) -> None:
        if any(not c > 0 for c in capacities_Bps):
            raise ValueError("link capacities must be positive")
        if not weight_sigma >= 0.0:
            raise ValueError("weight_sigma must be >= 0")
        if not 0.0 < newcomer_weight <= 1.0:
            raise ValueError("newcomer_weight must be in (0, 1]")
        if not 0.0 < late_joiner_weight <= 1.0:
            raise ValueError("late_joiner_weight must be in (0, 1]")
        # Unequal sharing (TCP flows into one link do not finish together): a connection's messages
        # of one tag (the parameter-server simulation tags them with their step) are one burst with
        # one weight exp(sigma * z), z standard normal; links are shared weighted max-min.
        # sigma = 0: equal sharing.
        # Incumbents first (`newcomer_weight` < 1, `sgdscale.comm.sharing.NEWCOMER_SHARE_WEIGHT`): a
        # message that starts moving out of a node whose link has been busy since before now has
        # its weight multiplied by newcomer_weight, so the flows already leaving that node keep most
        # of its link, as TCP flows out of one host do (`benchmarks/head_start.py`: a 30 ms head
        # start leaves the newcomer about a fifth of the link; into one receiver, none). Messages
        # that start together share as before, whatever order the simulation starts them in.
        self.weight_sigma = float(weight_sigma)
        # Late joiners last (`late_joiner_weight` < 1, `sgdscale.comm.sharing.LATE_JOINER_WEIGHT`): a message
        # that starts moving into a node whose link has been busy since before now has its weight
        # multiplied by late_joiner_weight (gloo's senders into one node, `benchmarks/late_joiner.py`).
        self.newcomer_weight = float(newcomer_weight)
        self.late_joiner_weight = float(late_joiner_weight)
        self.newcomers_yield = newcomer_weight < 1.0 or late_joiner_weight < 1.0  # who came first matters
        self.weighted = weight_sigma > 0.0 or self.newcomers_yield
        self.seed = int(seed)
        self.key_offset = int(key_offset)  # connection c draws as connection key_offset + c
        self.queue = queue
        self.cap = [float(c) for c in capacities_Bps]
        self.alpha_s = float(alpha_s)
        self.kind_done, self.kind_release, self.kind_deliver = (int(k) for k in kinds)
        nl = len(self.cap)
        self.l_n = [0] * nl  # active connections per link
        # Per link: total rate now, bytes carried so far (at l_last), time of the last update.
        self.l_rate = [0.0] * nl
        self.l_bytes = [0.0] * nl
        self.l_last = [0.0] * nl
        self.l_since = [0.0] * nl  # when the link last went from idle to busy (incumbents first)
        # Per link, until when its sending node's CPU is busy with other work (None: never). A
        # newcomer out of such a node does not yield to the incumbents: where the sender's CPU paces
        # its writes, its flows take turns at the CPU and share its link equally
        # (`benchmarks/head_start.py --busy-sender`). The parameter-server simulation sets it for a
        # shard's uplink from the shard's update queue.
        self.sender_busy_until: list[float] | None = None
        # Called (link, busy, now) when a sending link goes from idle to busy or back (None: nobody
        # listens): `sgdscale.comm.sharing.couple_duplex` slows the node's downlink meanwhile.
        self.on_busy: Callable[[int, bool, float], None] | None = None
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
        self.c_w: list[float] = []  # sharing weight of the connection's current burst
        self.c_tag: list[int] = []  # tag of the message moving (its weight's burst)
        self.c_yields: list[bool] = []  # whether its messages yield as newcomers (incumbents first)
        # Incumbents first, until they leave: per connection, its activations so far (one per start of
        # a head message on an idle connection), the incumbents its current activation still yields
        # to, and the (connection, activation) pairs that yield to it (INCUMBENCY_PASSES_ON).
        self.c_act: list[int] = []
        self.c_act_s: list[float] = []  # when the current activation started
        self.c_older: list[int] = []
        self.c_yielders: list[list[tuple[int, int]]] = []
        self.up_conns: list[list[int]] = [[] for _ in range(nl)]  # connections sending out of each link
        self.active: dict[int, None] = {}  # insertion-ordered set of connections with a message moving
        self.dirty = False
        self.on_transfer: TransferFn | None = None  # for timelines
        # Watches (`watch`): per connection with one, (bytes given to it by then, lead, token, earliest
        # time); a version per connection that stales the watch events already scheduled; the event
        # kind they go under, and whom they call.
        self.watches: dict[int, tuple[float, float, int, float]] = {}
        self.c_wver: list[int] = []
        self.kind_watch: int | None = None
        self.on_watch: Callable[[int, float], None] | None = None
        # Handle a delivery when its last byte leaves instead of through a DELIVER event alpha
        # later. Exact when the handler only schedules effects at or after arrival_s (every
        # message has the same latency, so arrival order is done order); saves a heap event per message.
        self.deliver: DeliverFn | None = None

    def add_connection(self, up: int, down: int, yields: bool = True) -> int:
        """A connection from link `up` (its sender's) to `down`; `yields=False`: its messages never
        take the newcomer's weight (they still count as incumbents for others)."""
        self.c_yields.append(yields)
        self.c_act.append(0)
        self.c_act_s.append(0.0)
        self.c_older.append(0)
        self.c_yielders.append([])
        self.up_conns[up].append(len(self.c_up))
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
        self.c_w.append(1.0)
        self.c_tag.append(-1)
        self.c_wver.append(0)
        return len(self.c_up) - 1

    def burst_weight(self, conn: int, tag: int) -> float:
        """The weight of `conn`'s burst `tag`: exp(sigma * z), z a standard normal that depends only
        on (seed, key_offset + connection, tag), so any event order, `StarNetwork`, and a network
        that holds both directions (the explicit DAG's) give the same weights."""
        return math.exp(self.weight_sigma * _normal(self.seed, self.key_offset + conn, tag))

    # --- messages -------------------------------------------------------------------------------
    def send(self, conn: int, nbytes: float, release_s: float, now: float, token: int, tag: int = 0) -> None:
        """Queue a message on `conn`, released at `release_s` (>= the previous message's release)."""
        q = self.c_queue[conn]
        q.append((release_s, nbytes, token, tag))
        if len(q) == 1:
            self._head_arrived(conn, now)

    def _head_arrived(self, conn: int, now: float) -> None:
        """The queue's head is new: start it if released, otherwise wake up at its release time."""
        release_s, nbytes, _, tag = self.c_queue[conn][0]
        if release_s <= now:
            self.c_rem[conn] = nbytes
            self.c_t[conn] = now
            self.c_start[conn] = now
            self.c_rate[conn] = 0.0
            ver = self.c_ver[conn] + 1
            self.c_ver[conn] = ver
            self.c_act[conn] += 1
            self.c_act_s[conn] = now
            self.active[conn] = None
            up, down = self.c_up[conn], self.c_down[conn]
            l_n = self.l_n
            if self.weighted:
                weight = self.burst_weight(conn, tag)
                if self.newcomers_yield:  # who came first on the sender's link and on the receiver's
                    weight = self._yield_to_incumbents(weight, now, (up, l_n[up]), (down, l_n[down]),
                                                       self.c_yields[conn], conn)
                self.c_w[conn] = weight
                self.c_tag[conn] = tag
            if l_n[up] == 0 and l_n[down] == 0:
                # Alone on both links: it takes the smaller capacity and nobody else changes.
                rate = min(self.cap[up], self.cap[down])
                self._account(up, now)
                self._account(down, now)
                self.l_rate[up] += rate
                self.l_rate[down] += rate
                self.c_rate[conn] = rate
                heapq.heappush(self.queue.heap, (now + nbytes / rate, next(self.queue.seq), self.kind_done, conn, ver))
                if self.watches and conn in self.watches:
                    self._check_watch(conn, now)
            else:
                self.dirty = True
            l_n[up] += 1
            l_n[down] += 1
            if self.on_busy is not None and l_n[up] == 1:
                self.on_busy(up, True, now)
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
        if self.watches and conn in self.watches:
            self._check_watch(conn, now, moving=False)
        if self.on_transfer is not None:
            self.on_transfer(conn, token, tag, self.c_start[conn], now)
        if self.deliver is not None:
            self.deliver(token, tag, now + self.alpha_s, now)
        else:
            heapq.heappush(self.queue.heap, (now + self.alpha_s, next(self.queue.seq), self.kind_deliver, token, tag))
        if q and q[0][0] <= now and (not self.weighted or q[0][3] == self.c_tag[conn]):
            # Backlogged: the next message continues at the same rate; nobody else's share changes
            # (a message of another burst has another weight: it restarts below).
            nbytes = q[0][1]
            self.c_rem[conn] = nbytes
            self.c_t[conn] = now
            self.c_start[conn] = now
            ver = self.c_ver[conn] + 1
            self.c_ver[conn] = ver
            rate = self.c_rate[conn]
            if rate > 0.0:
                heapq.heappush(self.queue.heap, (now + nbytes / rate, next(self.queue.seq), self.kind_done, conn, ver))
                if self.watches and conn in self.watches:
                    self._check_watch(conn, now)
            return
        del self.active[conn]
        self.c_ver[conn] += 1
        if self.c_yielders[conn]:
            self._incumbent_left(conn, now)
        up, down = self.c_up[conn], self.c_down[conn]
        self._account(up, now)
        self._account(down, now)
        self.l_rate[up] -= self.c_rate[conn]
        self.l_rate[down] -= self.c_rate[conn]
        self.c_rate[conn] = 0.0
        l_n = self.l_n
        l_n[up] -= 1
        l_n[down] -= 1
        if self.on_busy is not None and l_n[up] == 0:
            self.on_busy(up, False, now)
        if l_n[up] or l_n[down]:
            self.dirty = True  # someone shared a link with it: their share may rise
        else:
            self.l_rate[up] = 0.0  # idle link: drop rounding residue
            self.l_rate[down] = 0.0
        if q:
            self._head_arrived(conn, now)

    def _yield_to_incumbents(self, weight: float, now: float, sender: tuple[int, int], receiver: tuple[int, int],
                             yields: bool = True, conn: int = -1) -> float:
        """The weight of a message starting now from the `sender`'s link to the `receiver`'s ((link, its
        active connections) pairs): times newcomer_weight if the sender's link has been busy since
        before now and the sender's CPU is not busy (`sender_busy_until`), and times late_joiner_weight
        if the receiver's link has been busy since before now. Idle links are marked busy from now.
        Flows out of one node share its link the way the first to start wants (`benchmarks/head_start.py`);
        gloo's flows from several nodes into one leave a late one less than its share
        (`benchmarks/late_joiner.py`). `yields=False`: the sender's rule does not apply (links still marked).
        `conn` (the newcomer, activated and not yet counted on its links): it takes its full weight
        back when the last of those incumbents stops (INCUMBENCY_PASSES_ON)."""
        since, busy = self.l_since, self.sender_busy_until
        link, active = sender
        if yields and active and since[link] < now and (busy is None or busy[link] <= now) and (
                not INCUMBENCY_PASSES_ON or conn < 0 or self._note_incumbents(conn, link, now)):
            weight *= self.newcomer_weight
        if receiver[1] and since[receiver[0]] < now:
            weight *= self.late_joiner_weight
        for link, active in (sender, receiver):
            if not active:
                since[link] = now
        return weight

    def _note_incumbents(self, conn: int, link: int, now: float) -> int:
        """How many connections have been moving out of `link` since before now (not those starting
        with `conn`: they share as before); `conn` yields to them until they have all stopped."""
        active, since = self.active, self.c_act_s
        older = [c for c in self.up_conns[link] if c != conn and c in active and since[c] < now]
        act = self.c_act[conn]
        for c in older:
            self.c_yielders[c].append((conn, act))
        self.c_older[conn] = len(older)
        return len(older)

    def _incumbent_left(self, conn: int, now: float) -> None:
        """`conn` stopped moving: a newcomer that yielded only to incumbents now gone takes its weight back."""
        yielders, self.c_yielders[conn] = self.c_yielders[conn], []
        for c, act in yielders:
            if self.c_act[c] == act and c in self.active:
                self.c_older[c] -= 1
                if self.c_older[c] == 0:
                    self._promote(c, now)

    def _promote(self, conn: int, now: float) -> None:
        """`conn`'s weight back to its burst's (rates recomputed at the next reallocation)."""
        self.c_w[conn] /= self.newcomer_weight
        self.dirty = True

    # --- watches ------------------------------------------------------------------------------------
    def watch(self, conn: int, lead_s: float, token: int, now: float) -> None:
        """Call `on_watch(token, t)` at the first t at which what `conn` has been given so far would all
        have left within `lead_s` at the connection's rate then (and not before the last message given
        is released): when a sender whose buffers hold that much has handed it all over. One watch
        per connection: a new one replaces the last."""
        q = self.c_queue[conn]
        release = q[-1][0] if q else now
        given = self.c_sent[conn] + sum(message[1] for message in q)  # sent in full, plus all still queued
        self.watches[conn] = (given, lead_s, token, release)
        self._check_watch(conn, now)

    def _check_watch(self, conn: int, now: float, moving: bool = True) -> None:
        """Fire `conn`'s watch if it is reached, else schedule the event that checks it again (a rate
        change or the head message's end checks it anew). `moving=False`: between messages (on_done)."""
        given, lead_s, token, release = self.watches[conn]
        ver = self.c_wver[conn] = self.c_wver[conn] + 1
        if release > now:
            self.queue.push(release, self.kind_watch, conn, ver)
            return
        q = self.c_queue[conn]
        sent = self.c_sent[conn]
        rate = self.c_rate[conn] if moving and conn in self.active else 0.0
        if rate > 0.0 and q:
            sent += q[0][1] - (self.c_rem[conn] - rate * (now - self.c_t[conn]))
        target = given - lead_s * rate  # what has to have left by then
        if sent >= target - 1e-6 * (1.0 + abs(given)):
            del self.watches[conn]
            self.on_watch(token, now)
        elif rate > 0.0 and target <= self.c_sent[conn] + q[0][1]:  # inside the moving head message
            self.queue.push(now + (target - sent) / rate, self.kind_watch, conn, ver)

    def on_watch_event(self, conn: int, version: int, now: float) -> None:
        if version == self.c_wver[conn] and conn in self.watches:
            self._check_watch(conn, now)

    def set_capacity(self, link: int, capacity_Bps: float, now: float) -> None:
        """Change a link's capacity from now on (its connections' rates are recomputed at the next
        reallocation, before time moves on)."""
        if capacity_Bps == self.cap[link]:
            return
        self.cap[link] = capacity_Bps
        if self.l_n[link]:
            self.dirty = True

    def _account(self, link: int, now: float) -> None:
        self.l_bytes[link] += self.l_rate[link] * (now - self.l_last[link])
        self.l_last[link] = now

    # --- sharing --------------------------------------------------------------------------------
    def reallocate(self, now: float) -> None:
        """Weighted max-min fair rates for the active connections (progressive filling over their
        links, in rate per unit of weight; all weights 1 without `weight_sigma`)."""
        self.dirty = False
        active = self.active
        if not active:
            return
        c_up, c_down, c_rate, c_rem, c_t = self.c_up, self.c_down, self.c_rate, self.c_rem, self.c_t
        cap, c_w = self.cap, self.c_w
        count: dict[int, float] = {}  # per link: total weight of its connections not yet fixed
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
                    count[link] = c_w[c]
                else:
                    lst.append(c)
                    count[link] += c_w[c]
        left = {link: cap[link] for link in count}
        heap = [(left[link] / n, link) for link, n in count.items()]
        heapq.heapify(heap)
        new_rate: dict[int, float] = {}
        weighted = self.weighted
        while heap:
            share, link = heapq.heappop(heap)
            n = count[link]
            if n <= 0 or left[link] / n != share:
                continue  # stale entry: this link's share rose since it was pushed
            for c in conns_on[link]:
                if c in new_rate:
                    continue
                rate = share * c_w[c] if weighted else share
                new_rate[c] = rate
                other = c_down[c] if c_up[c] == link else c_up[c]
                left[other] -= rate
                count[other] -= c_w[c] if weighted else 1
                if count[other] > 1e-12:
                    if left[other] < 0.0:
                        left[other] = 0.0
                    heapq.heappush(heap, (left[other] / count[other], other))
                else:
                    count[other] = 0
            count[link] = 0
        l_rate, push, kind_done = self.l_rate, self.queue.push, self.kind_done
        watches = self.watches
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
            if watches and c in watches:
                self._check_watch(c, now)

    def bytes_carried(self, link: int, now: float) -> float:
        """Bytes the link has carried up to `now` (rates are constant since the last change)."""
        return self.l_bytes[link] + self.l_rate[link] * (now - self.l_last[link])


_MASK64 = (1 << 64) - 1
_UNIT_NORMAL = NormalDist()


def _normal(seed: int, conn: int, burst: int) -> float:
    """A standard normal from (seed, conn, burst) by splitmix64: counter-based, no shared state."""
    x = (seed * 0x9E3779B97F4A7C15 + conn * 0xBF58476D1CE4E5B9 + burst * 0x94D049BB133111EB) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    x ^= x >> 31
    return _UNIT_NORMAL.inv_cdf(((x >> 11) + 0.5) / (1 << 53))


def run_network(net: NetworkModel) -> list[tuple[float, int, int]]:
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
        elif kind == getattr(net, "kind_watch", None):
            net.on_watch_event(a, b, now)
    return out
