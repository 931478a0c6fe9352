"""`LinkNetwork` made fast where server NICs bind: each hub link is one processor-sharing queue.

Connections each cross one *hub* link (a server NIC) and one *edge* link (a worker NIC, possibly
carrying one connection per server shard). If every connection on a hub of capacity C (k of them
active, edge links of capacity p) gets min(p, C/k) and no edge link is over its capacity, that
allocation is max-min fair (every connection is bottlenecked on a saturated link where nobody gets
more). Each hub is then a processor-sharing queue: a virtual clock V (bytes served per connection)
advances at that rate, a moving message finishes when V reaches its virtual finish tag, and only
the earliest tag needs an event, so a change costs O(log k) instead of rescheduling all k
connections (*star mode*).

With `weight_sigma` > 0 (weighted max-min, `LinkNetwork.burst_weight`) each hub is a generalized
processor-sharing queue: V counts bytes per unit weight and advances at C / (total weight of the
hub's active connections); a message of b bytes on a connection of weight w finishes when V reaches
its start tag + b / w, and the connection moves at w dV/dt. That is the weighted max-min allocation
as long as no edge link is over capacity; unlike the equal case there is no per-connection cap
min(p, .) in star mode (with unequal weights a capped connection would move off the virtual clock),
so a hub faster than its edges leaves star mode whenever a connection's w dV/dt would exceed p.

With one server shard and identical workers the edge links are private and star mode always
holds (weighted: while the hub is no faster than the edges, as w C / W <= C). With several shards
a worker's NIC carries one connection per shard, so every rate rise is checked; when a change
would put an edge link over capacity the network converts its state (bytes left per connection)
to `LinkNetwork`'s general progressive filling, and after each general reallocation converts
back if the rates are the star rates again (weights and bytes left carried both ways). Hub events
carry a = -1 - hub, so `on_done` tells them from per-connection events. Exactly the same answer
as `LinkNetwork` (tests check it), with far fewer rate recomputations.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable

from sgdscale.fine.events import PUSH_KINDS, EventQueue, NetKinds
from sgdscale.fine.links import LinkNetwork

__all__ = ["StarNetwork"]


class StarNetwork(LinkNetwork):
    """`LinkNetwork` in star mode while it holds (see the module docstring).

    `shared` names the hub links; without it, of a connection's two links the one that other
    connections also use is its hub (the other, private, its edge)."""

    @staticmethod
    def applies(capacities_Bps: list[float], pairs: list[tuple[int, int]], shared: set[int] | None = None,
                weighted: bool = False) -> bool:
        """True when every connection has one hub link and, per hub, all its connections' edge
        links have the same capacity (star mode is possible at all); `weighted`: and no hub is
        faster than its edges. A weighted hub faster than its edges keeps star mode only while
        enough connections share it that none would exceed its edge, so such a network runs mostly
        general mode, slower than `LinkNetwork` itself (benchmarks/ps_weighted_speed.py
        --server-gbps 40: 10-25% more CPU)."""
        roles = _hub_edges(capacities_Bps, pairs, shared)
        if roles is None:
            return False
        return not weighted or all(capacities_Bps[hub] <= capacities_Bps[edge] for hub, edge in roles)

    def __init__(self, queue: EventQueue, capacities_Bps: list[float], alpha_s: float,
                 kinds: NetKinds = PUSH_KINDS, shared: set[int] | None = None,
                 weight_sigma: float = 0.0, seed: int = 0, key_offset: int = 0, newcomer_weight: float = 1.0,
                 late_joiner_weight: float = 1.0) -> None:
        super().__init__(queue, capacities_Bps, alpha_s, kinds, weight_sigma=weight_sigma, seed=seed,
                         key_offset=key_offset, newcomer_weight=newcomer_weight, late_joiner_weight=late_joiner_weight)
        self.hub_set = set(shared) if shared is not None else None
        nl = len(self.cap)
        # Per hub: active connections, rate per unit weight (dV/dt), virtual clock and its time,
        # heap of (finish tag, seq, connection), event version, edge capacity of its connections,
        # total weight of its active connections (weighted only).
        self.s_k = [0] * nl
        self.s_w = [0.0] * nl
        self.s_rate = [0.0] * nl
        self.s_v = [0.0] * nl
        self.s_vt = [0.0] * nl
        self.s_heap: list[list] = [[] for _ in range(nl)]
        self.s_ver = [0] * nl
        self.s_p = [0.0] * nl
        # Per connection: its hub and edge, finish tag and bytes of the moving message.
        self.c_hub: list[int] = []
        self.c_edge: list[int] = []
        self.c_fin: list[float] = []
        self.c_head_bytes: list[float] = []
        self.edge_active: list[list[int]] = [[] for _ in range(nl)]
        self.e_k = [0] * nl  # incumbents first: active connections per edge link in star mode
        self.star = False
        self.star_possible = False
        self.hub_links: set[int] = set()
        self.pending_cap: dict[int, float] = {}  # hub capacities to apply at the next reallocation
        self.check = False  # an edge may go over capacity: check it on every rate rise
        self.w_max = 1.0  # the largest weight drawn so far (bounds every connection's weight)
        self._ready = False
        self._seq2 = itertools.count()
        self.switches = 0
        self.full_cap = list(self.cap)  # before any `set_capacity`
        self.on_done = self._done_handler()

    def add_connection(self, up: int, down: int, yields: bool = True) -> int:
        c = super().add_connection(up, down, yields)
        self.c_hub.append(-1)
        self.c_edge.append(-1)
        self.c_fin.append(0.0)
        self.c_head_bytes.append(0.0)
        return c

    def burst_weight(self, conn: int, tag: int) -> float:
        w = super().burst_weight(conn, tag)
        if w > self.w_max:
            self.w_max = w
        return w

    def _finalize(self) -> None:
        """Decide hubs and edges once all connections exist (first message sent)."""
        self._ready = True
        pairs = list(zip(self.c_up, self.c_down))
        roles = _hub_edges(self.cap, pairs, self.hub_set) if pairs else None
        self.star_possible = roles is not None
        if roles is not None:
            edge_uses = [0] * len(self.cap)
            for c, (hub, edge) in enumerate(roles):
                self.c_hub[c], self.c_edge[c] = hub, edge
                self.s_p[hub] = self.cap[edge]
                edge_uses[edge] += 1
            self.hubs = sorted(set(self.c_hub))
            self.hub_links = set(self.hubs)
            # Equal shares are capped at p in star mode, so a private edge never binds; weighted
            # shares are not, so a hub faster than its edges needs the check too.
            self.check = max(edge_uses) > 1 or (self.weighted and any(self.full_cap[h] > self.s_p[h] for h in self.hubs))
            self.edge_min_cap = min(self.cap[e] for e in self.c_edge)
            self.star = True
        self.link_conns: list[list[int]] = [[] for _ in self.cap]
        for c, (up, down) in enumerate(pairs):
            self.link_conns[up].append(c)
            self.link_conns[down].append(c)

    # --- star mode ----------------------------------------------------------------------------
    def _advance(self, hub: int, now: float) -> None:
        dt = now - self.s_vt[hub]
        if dt > 0.0:
            self.s_v[hub] += self.s_rate[hub] * dt
        self.s_vt[hub] = now

    def _reschedule(self, hub: int, now: float) -> None:
        """The hub's k connections each get min(p, C/k) (weighted: w C / W, W their total weight);
        schedule its next completion in virtual time (a new version makes the hub's older
        completion event stale)."""
        k = self.s_k[hub]
        ver = self.s_ver[hub] + 1
        self.s_ver[hub] = ver
        if k == 0:
            self.s_rate[hub] = 0.0
            self.s_w[hub] = 0.0  # drop rounding residue
            return
        lheap = self.s_heap[hub]
        if self.weighted:
            if k == 1:
                self.s_w[hub] = self.c_w[lheap[0][2]]  # exact again
            rate = self.cap[hub] / self.s_w[hub]
        else:
            share = self.cap[hub] / k
            p = self.s_p[hub]
            rate = p if p < share else share
        self.s_rate[hub] = rate
        left = lheap[0][0] - self.s_v[hub]
        if left < 0.0:
            left = 0.0
        heapq.heappush(self.queue.heap, (now + left / rate, next(self.queue.seq), self.kind_done, -1 - hub, ver))

    def _feasible(self, edges: Iterable[int]) -> bool:
        """No edge link among `edges` carries more than its capacity at the star rates (an edge
        carries at most one connection per hub, each at most w_max dV/dt)."""
        rate, c_w, c_hub = self.s_rate, self.c_w, self.c_hub
        if sum(rate[h] for h in self.hubs if self.s_k[h]) * self.w_max <= self.edge_min_cap * (1 + 1e-12):
            return True
        for x in edges:
            total = 0.0
            for c in self.edge_active[x]:
                total += c_w[c] * rate[c_hub[c]]
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
                    self.c_rem[c] = max(fin - v, 0.0) * self.c_w[c]
                    self.c_t[c] = now
                    self.c_rate[c] = 0.0
                    self.c_ver[c] += 1
                self.s_heap[h] = []
                self.s_k[h] = 0
            self.s_w[h] = 0.0
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
            self.s_w[h] = 0.0
            self.s_heap[h] = []
        e_k = self.e_k
        for i in range(len(e_k)):
            e_k[i] = 0
        for c in self.active:
            h = self.c_hub[c]
            e_k[self.c_edge[c]] += 1
            rem = self.c_rem[c] - self.c_rate[c] * (now - self.c_t[c])
            rem = rem if rem > 0.0 else 0.0
            w = self.c_w[c]
            rem /= w  # exact when w = 1
            self.c_fin[c] = rem
            self.s_w[h] += w
            self.c_ver[c] += 1  # drop its pending per-connection event
            self.c_rate[c] = 0.0
            heapq.heappush(self.s_heap[h], (rem, next(self._seq2), c))
            self.s_k[h] += 1
            if self.check:
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
        release_s, nbytes, _, tag = self.c_queue[conn][0]
        self.c_head_bytes[conn] = nbytes
        if release_s > now or not self.star:
            super()._head_arrived(conn, now)
            return
        h = self.c_hub[conn]
        self._advance(h, now)
        self.c_act[conn] += 1
        self.c_act_s[conn] = now
        if self.weighted:
            w = self.burst_weight(conn, tag)  # a new burst starts, as in LinkNetwork
            if self.newcomers_yield:  # LinkNetwork's rules on the sender's link and the receiver's: hub or edge
                edge = self.c_edge[conn]
                hub_side, edge_side = (h, self.s_k[h]), (edge, self.e_k[edge])
                w = self._yield_to_incumbents(w, now, *((hub_side, edge_side) if self.c_up[conn] == h
                                                         else (edge_side, hub_side)), self.c_yields[conn], conn)
                self.e_k[edge] += 1
            self.c_w[conn] = w
            self.c_tag[conn] = tag
            self.s_w[h] += w
            fin = self.s_v[h] + nbytes / w
        else:
            fin = self.s_v[h] + nbytes
        self.c_fin[conn] = fin
        self.c_start[conn] = now
        heapq.heappush(self.s_heap[h], (fin, next(self._seq2), conn))
        self.active[conn] = None
        self.s_k[h] += 1
        self._reschedule(h, now)
        if self.on_busy is not None and self.s_k[h] == 1 and self.c_up[conn] == h:
            self.on_busy(h, True, now)
        if self.check:
            edge = self.c_edge[conn]
            self.edge_active[edge].append(conn)
            if not self._feasible((edge,)):
                self._to_general(now)

    def _done_handler(self):
        """`on_done`, as a closure over the state lists: the hot path of every parameter-server run
        (one call per message), where reading each list from the instance cost 8% of a run
        (benchmarks/predict_speed.py). Set as the instance's `on_done` in `__init__`."""
        s_ver, s_rate, s_vt, s_v, s_k, s_heap = self.s_ver, self.s_rate, self.s_vt, self.s_v, self.s_k, self.s_heap
        s_w, c_w, c_tag, weighted = self.s_w, self.c_w, self.c_tag, self.weighted
        newcomers_yield, e_k, c_edge = self.newcomers_yield, self.e_k, self.c_edge
        c_queue, c_sent, c_start, c_fin, c_head_bytes = self.c_queue, self.c_sent, self.c_start, self.c_fin, \
            self.c_head_bytes
        gheap, gseq, seq2 = self.queue.heap, self.queue.seq, self._seq2
        kind_done, alpha_s, active = self.kind_done, self.alpha_s, self.active
        heappush, heappop = heapq.heappush, heapq.heappop
        general_done = LinkNetwork.on_done

        def on_done(a: int, version: int, now: float) -> None:
            if a >= 0:  # a per-connection event (general mode)
                if not self.star:
                    general_done(self, a, version, now)
                    if not self.star and c_queue[a] and a in active:
                        c_head_bytes[a] = c_queue[a][0][1]
                return
            hub = -1 - a
            if version != s_ver[hub] or not self.star:
                return
            old_rate = s_rate[hub]
            v = s_v[hub]
            dt = now - s_vt[hub]
            if dt > 0.0:
                v += old_rate * dt
                s_v[hub] = v
            s_vt[hub] = now
            lheap = s_heap[hub]
            conn = heappop(lheap)[2]
            q = c_queue[conn]
            _, nbytes, token, tag = q.popleft()
            c_sent[conn] += nbytes
            if self.on_transfer is not None:
                self.on_transfer(conn, token, tag, c_start[conn], now)
            deliver = self.deliver
            if deliver is not None:
                deliver(token, tag, now + alpha_s, now)
            else:
                heappush(gheap, (now + alpha_s, next(gseq), self.kind_deliver, token, tag))
            if not self.star:  # a delivery handler that sent on this network switched it
                return
            if q and q[0][0] <= now and (not weighted or q[0][3] == c_tag[conn]):
                # Backlogged: the next message starts at once; same count, same rate (a message of
                # another burst has another weight: it leaves and comes back below).
                nb = q[0][1]
                c_head_bytes[conn] = nb
                fin = v + nb / c_w[conn]  # same burst, same weight (exact when 1)
                c_fin[conn] = fin
                c_start[conn] = now
                heappush(lheap, (fin, next(seq2), conn))
                ver = s_ver[hub] + 1
                s_ver[hub] = ver
                left = lheap[0][0] - v
                if left < 0.0:
                    left = 0.0
                heappush(gheap, (now + left / old_rate, next(gseq), kind_done, a, ver))
                return
            del active[conn]
            s_k[hub] -= 1
            s_w[hub] -= c_w[conn]
            if self.on_busy is not None and not s_k[hub] and self.c_up[conn] == hub:
                self.on_busy(hub, False, now)
            if newcomers_yield:
                e_k[c_edge[conn]] -= 1
            check = self.check
            if check:
                self.edge_active[self.c_edge[conn]].remove(conn)
            self._reschedule(hub, now)
            if self.c_yielders[conn]:
                self._incumbent_left(conn, now)  # may leave star mode
            if q:
                self._head_arrived(conn, now)  # a new burst now, or its release scheduled
            if check and self.star and s_rate[hub] > old_rate and not self._feasible(
                    [self.c_edge[e[2]] for e in lheap]):
                self._to_general(now)

        return on_done

    def _promote(self, conn: int, now: float) -> None:
        """In star mode: `conn`'s finish tag moved to its new weight, its hub rescheduled."""
        if not self.star:
            super()._promote(conn, now)
            return
        h = self.c_hub[conn]
        self._advance(h, now)
        old = self.c_w[conn]
        new = old / self.newcomer_weight
        v = self.s_v[h]
        fin = v + max(self.c_fin[conn] - v, 0.0) * old / new
        self.c_fin[conn] = fin
        self.c_w[conn] = new
        self.s_w[h] += new - old
        if new > self.w_max:
            self.w_max = new
        lheap = self.s_heap[h]  # in place: `on_done` may hold it
        lheap[:] = [(fin, s, c) if c == conn else (f, s, c) for f, s, c in lheap]
        heapq.heapify(lheap)
        self._reschedule(h, now)
        if self.check and not self._feasible((self.c_edge[conn],)):
            self._to_general(now)

    def set_capacity(self, link: int, capacity_Bps: float, now: float) -> None:
        """A hub's new capacity is applied at the next reallocation, before time moves on (it may
        come from a delivery handler while this network is mid-update); any other link's is the
        general network's."""
        if self._ready and self.star and link in self.hub_links:
            self.pending_cap[link] = capacity_Bps
            self.dirty = True
            return
        if capacity_Bps == self.cap[link]:
            return
        if self._ready and self.star:
            self._to_general(now)  # an edge's capacity is in every star rate of its hubs
        super().set_capacity(link, capacity_Bps, now)

    def _apply_capacities(self, now: float) -> None:
        """The hub capacities `set_capacity` left pending: each hub's virtual clock runs at the new
        rate from now on (star mode), or the general network recomputes."""
        pending, self.pending_cap = self.pending_cap, {}
        for link, capacity in pending.items():
            if not self.star:
                self.cap[link] = capacity
                continue
            self._advance(link, now)
            old_rate = self.s_rate[link]
            self.cap[link] = capacity
            if self.s_k[link]:
                self._reschedule(link, now)
                if self.check and self.s_rate[link] > old_rate and not self._feasible(
                        [self.c_edge[e[2]] for e in self.s_heap[link]]):
                    self._to_general(now)

    def reallocate(self, now: float) -> None:
        if self.pending_cap:
            self._apply_capacities(now)
        if self.star:
            self.dirty = False
            return
        super().reallocate(now)
        if not self.star_possible or not self.active:
            if self.star_possible and not self.active:
                self._to_star(now)
            return
        k: dict[int, float] = {}  # per hub: active connections (weighted: their total weight)
        c_w = self.c_w
        for c in self.active:
            h = self.c_hub[c]
            k[h] = k.get(h, 0) + (c_w[c] if self.weighted else 1)
        for c in self.active:
            h = self.c_hub[c]
            if self.weighted:
                want = c_w[c] * self.cap[h] / k[h]
            else:
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
                    if self.weighted:
                        total += max(0.0, self.c_head_bytes[c] - (self.c_fin[c] - v) * self.c_w[c])
                    else:
                        total += max(0.0, v - (self.c_fin[c] - self.c_head_bytes[c]))
                else:
                    rem = self.c_rem[c] - self.c_rate[c] * max(0.0, now - self.c_t[c])
                    total += max(0.0, self.c_head_bytes[c] - rem)
        return total


def _hub_edges(capacities_Bps: list[float], pairs: list[tuple[int, int]],
               shared: set[int] | None) -> list[tuple[int, int]] | None:
    """(hub, edge) of every connection, or None when the connections do not form stars: a
    connection needs exactly one hub (given in `shared`, or else the link of its two that other
    connections also use), and all edges into one hub the same capacity."""
    uses: dict[int, int] = {}
    for up, down in pairs:
        uses[up] = uses.get(up, 0) + 1
        uses[down] = uses.get(down, 0) + 1
    edge_cap: dict[int, float] = {}
    out = []
    for up, down in pairs:
        if shared is not None:
            if (up in shared) == (down in shared):
                return None
            hub, edge = (up, down) if up in shared else (down, up)
        elif uses[up] == 1:
            edge, hub = up, down
        elif uses[down] == 1:
            edge, hub = down, up
        else:
            return None
        cap = capacities_Bps[edge]
        if edge_cap.setdefault(hub, cap) != cap:
            return None
        out.append((hub, edge))
    return out
