"""The general fine-grained discrete-event simulator: parameter servers (sync, async), all-reduce.

Every worker's step is the DAG of its elementary operations (data + copy, forward per layer,
backward per layer, one push per gradient message, the server's update, one pull per message);
the simulator runs that DAG for every worker and iteration on shared resources:

- each worker's compute: one FIFO resource (data, forward layers, backward layers, and, for
  all-reduce, the optimizer);
- NIC links, laid out by the topology (`sgdscale.comm.topology.Topology.ps_links`): with one
  device per node and dedicated servers every worker and every server shard has a full-duplex
  NIC, an uplink and a downlink; with several devices per node they share their node's NIC, and
  colocated shards use their node's NIC, local traffic the intra-node link. Rates come from the
  topology (a measured network file scales them all). A message from A to B is a flow over
  A's uplink and B's downlink; one connection (TCP stream) per (worker, shard) pair and direction
  sends its messages FIFO; concurrent connections share links max-min fairly
  (`sgdscale.fine.links`); each message is delivered the NIC's latency alpha after its last byte left;
- server shards: FIFO resources; applying a message costs its share of the profile's optimizer
  time, `optimizer_s * bytes / gradient_bytes`, per applied update (the workers run no optimizer).
- receive before send (gloo's rendezvous): a point-to-point message only flows once its receiver
  has posted the receive, and that notice travels on the same FIFO connection as the data. A
  worker posts its pulls when its backward ends, so the notice to shard s sits behind all its
  pushes to s: a shard's new parameters start towards worker w only after w's last push of the
  step has reached that shard. (Measured on the emulated cluster: without this rule, sync PS at
  200 Mbit/s was predicted 30% too fast, because pulls overlapped pushes that in reality block
  them.) The other direction has a rule too, in sync PS: a shard posts its receives for step k+1
  only when all its replies of step k have left (the runtime's server waits for its sends before it
  posts the next receives, `sgdscale.runtime.ps`), so a worker that got its parameters early
  cannot push step k+1 to that shard while the shard still replies to a slower worker. Without this
  rule the simulation drifted, over some tens of steps, from serial push and pull phases into a
  pattern where early workers' pushes overlap late workers' pulls: the predicted step shrank with
  the number of simulated iterations (densenet121 replay, 6 workers, 500 Mbit/s: 7.16 s over 20
  steps, 4.70 s over 200), a state the runtime's server never allows.

Strategies:
- ps-sync: a worker pushes each message as soon as backward completes its group; the shard, once
  it has all N copies, aggregates + updates, then sends the new parameters to all N workers;
  forward of layer l in the next iteration starts once l's parameters are back. No other barrier.
- ps-async: no aggregation: the shard applies each worker's message on arrival (FIFO) and sends
  that worker the fresh parameters; a worker's forward of layer l waits for the messages of its
  own previous push that hold l's tensors (the pull overlaps with forward, layer by layer).
- allreduce: one communication stream; group g's collective starts when every worker produced it
  and the previous collective is done, and lasts the topology's all-reduce time (slowest link paces
  a ring); a worker's optimizer follows its backward and the last collective. This is the DAG
  that `sgdscale.fine.allreduce` evaluates in closed form: the two must agree (a test checks it).

Speed (why the loop looks like this): workers are state machines, not one object per operation.
Forward layers whose parameters are back (or in flight with a known arrival) run in one go; the
whole backward is one event, its pushes queued ahead of time with their release times; a message
is handled when its last byte leaves (arrival = that + alpha, the same for all, so order is kept)
and shards compute their FIFO completion times on arrival, so a message costs about one heap
event. Link rates are recomputed only when a connection starts or stops moving, and while the
server NICs are what binds, `StarNetwork` / `HybridNetwork` serve each server NIC as one
processor-sharing queue with a virtual clock (O(log k) per change instead of O(k)); they give
the same answer as the general max-min network (tests check it).

Measurement: `warmup` steps per worker are simulated and discarded, then `iterations` steps are
reported. For the parameter servers `Outcome.iteration_s` holds every worker's steps (one worker
step = data + forward + backward, ending when its backward ends) and throughput is the sum over
workers of batch * iterations / (time of its last step end - time of its warm-up end). For
all-reduce it is one sample per iteration (the cluster's step), exactly as the fast path.

Breakdown (mean per worker step, parameter servers): compute_s = the worker's busy compute time;
blocked = step - compute is time its forward waited for parameters; exposed_comm_s = the part of
that the worker would see alone (a reference run of one worker with the same links and servers to
itself, mean compute times: latency, transfer and update not hidden behind compute), per step
min(blocked, that); wait_s = the rest: queueing behind other workers at server NICs and shards,
and in sync PS waiting for the slowest worker's gradients (stragglers).

Utilization (parameter servers) is measured over the window in which every worker is past its
warm-up and none has finished: worker compute (mean), each shard's update work, each server NIC
(bytes carried / capacity), and the mean worker NIC up/down.
"""

from __future__ import annotations

import heapq

import numpy as np

from sgdscale.cluster import Cluster
from sgdscale.comm.cost import CommModel
from sgdscale.comm.topology import LEVEL_NIC, Topology
from sgdscale.fine import check_step_counts
from sgdscale.fine.dag import PsPlan, ps_plan
from sgdscale.fine.links import EventQueue, HybridNetwork, LinkNetwork, NotAStar, StarNetwork
from sgdscale.fine.variability import ComputeSampler
from sgdscale.profile import Profile
from sgdscale.result import Breakdown, Outcome, TraceEvent
from sgdscale.strategy import Strategy

TIMELINE_ITERATIONS = 3
TIMELINE_WORKERS = 3
TIMELINE_MAX_EVENTS = 20000

# Event kinds. Links use base 0 (push network) and 3 (pull network): DONE, RELEASE, DELIVER.
_PUSH_DONE, _PUSH_RELEASE, _PUSH_DELIVER = 0, 1, 2
_PULL_DONE, _PULL_RELEASE, _PULL_DELIVER = 3, 4, 5
_STEP_END = 11
_BWD_START, _GROUP_READY, _COLL_END = 20, 21, 22


def simulate_des(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, *, iterations: int = 100,
                 warmup: int = 10, seed: int = 0, variability: bool = True, timeline: bool = False) -> Outcome:
    """Simulate `warmup + iterations` steps of every worker (see the module docstring)."""
    check_step_counts(iterations, warmup)
    if strategy.kind == "allreduce":
        return _simulate_allreduce(profile, cluster, strategy, comm, iterations, warmup, seed, variability, timeline)
    topology = Topology.of(cluster, comm, strategy)
    plan = ps_plan(profile, cluster, strategy, topology)
    sampler = ComputeSampler(profile, cluster, seed=seed, variability=variability)
    total = warmup + iterations
    rows = np.array([sampler.draw_rows() for _ in range(total)], dtype=np.intp).reshape(total, cluster.workers)
    sim = run_ps(profile, cluster, topology, plan, sampler, rows, strategy.kind == "ps-sync", warmup, trace=timeline)
    reference = _reference_blocked(profile, cluster, strategy, topology, plan)
    return sim.outcome(reference, strategy)


# ---------------------------------------------------------------------------------------------
# Parameter servers
# ---------------------------------------------------------------------------------------------


def run_ps(profile: Profile, cluster: Cluster, comm: CommModel | Topology, plan: PsPlan, sampler: ComputeSampler,
           rows: np.ndarray, sync: bool, warmup: int, trace: bool = False, star: bool = True) -> _PsRun:
    """Run a parameter-server simulation: with the star shortcut for the NICs where it holds,
    again with the general max-min network the moment it does not (a worker NIC binds).
    NICs shared by several devices or colocated servers always take the general network."""
    topology = Topology.of(cluster, comm)
    if star and not topology.ps_links(plan.shards).shared_nics:
        try:
            sim = _PsRun(profile, cluster, topology, plan, sampler, rows, sync, warmup, trace=trace)
            sim.run()
            return sim
        except NotAStar:
            pass
    sim = _PsRun(profile, cluster, topology, plan, sampler, rows, sync, warmup, trace=trace, star=False)
    sim.run()
    return sim


class _Tables:
    """Per (measured row, worker scale): the numbers one worker-step needs, as Python floats."""

    def __init__(self, sampler: ComputeSampler, plan: PsPlan) -> None:
        self.sampler = sampler
        self.offsets = plan.release_offsets(sampler.backward_table_s)
        self.cache: dict[tuple[int, float], tuple] = {}

    def get(self, row: int, scale: float) -> tuple:
        key = (row, scale)
        tab = self.cache.get(key)
        if tab is None:
            s = self.sampler
            fwd = s.forward_table_s[row] * scale
            cf = np.concatenate([[0.0], np.cumsum(fwd)]).tolist()
            pre = float((s.data_table_s[row] + s.h2d_table_s[row]) * scale)
            bwd = float(s.backward_table_s[row].sum() * scale)
            rel = (self.offsets[row] * scale).tolist()
            tab = (pre, cf, bwd, rel, row, scale)
            self.cache[key] = tab
        return tab


class _PsRun:
    def __init__(self, profile: Profile, cluster: Cluster, topology: Topology, plan: PsPlan,
                 sampler: ComputeSampler, rows: np.ndarray, sync: bool, warmup: int, trace: bool = False,
                 star: bool = True) -> None:
        self.profile, self.cluster, self.plan, self.sampler = profile, cluster, plan, sampler
        self.rows = rows.tolist()
        self.total = rows.shape[0]
        self.sync, self.warmup = sync, warmup
        self.n = cluster.workers
        self.tables = _Tables(sampler, plan)
        n, shards = self.n, plan.shards
        # The topology lays out the links (sgdscale.comm.topology.Topology.ps_links): one device per
        # node and dedicated servers give push links 0..n-1 worker uplinks, n..n+S-1 server
        # downlinks; pull links 0..S-1 server uplinks, S..S+n-1 worker downlinks.
        self.links = links = topology.ps_links(shards)
        self.q = EventQueue()
        alpha = topology.alpha_s
        push_caps, pull_caps = links.push_caps_Bps, links.pull_caps_Bps
        push_pairs = [links.push_pairs[w][s] for w in range(n) for s in range(shards)]
        pull_pairs = [links.pull_pairs[s][w] for s in range(shards) for w in range(n)]

        def network(caps, pairs, base, hubs):
            if star and StarNetwork.applies(caps, pairs):  # one shard: worker NICs are private
                net = StarNetwork(self.q, caps, alpha, kind_base=base, shared=hubs)
            elif star and StarNetwork.applies(caps, pairs, hubs):  # several shards
                net = HybridNetwork(self.q, caps, alpha, kind_base=base, shared=hubs)
            else:
                net = LinkNetwork(self.q, caps, alpha, kind_base=base)
            conns = [net.add_connection(up, down) for up, down in pairs]
            return net, conns

        self.push_net, conns = network(push_caps, push_pairs, _PUSH_DONE, links.hubs_push)
        self.push_conn = [conns[w * shards:(w + 1) * shards] for w in range(n)]
        self.pull_net, conns = network(pull_caps, pull_pairs, _PULL_DONE, links.hubs_pull)
        self.pull_conn = [conns[s * n:(s + 1) * n] for s in range(shards)]
        self.trace: list[TraceEvent] | None = [] if trace else None
        self.snapshots: dict[str, tuple] = {}

    # The main loop is one long function on purpose: local variables are much faster in CPython.
    def run(self) -> None:
        n, total, warmup, sync = self.n, self.total, self.warmup, self.sync
        plan = self.plan
        M = plan.messages
        L = len(self.profile.layers)
        need = plan.need
        msg_bytes, msg_shard, msg_update = plan.bytes, plan.shard, plan.update_s
        rows = self.rows
        scale = [float(x) for x in self.sampler.scale]
        get_tab = self.tables.get
        push_net, pull_net = self.push_net, self.pull_net
        push_send, pull_send = push_net.send, pull_net.send
        push_conn, pull_conn = self.push_conn, self.pull_conn
        heap = self.q.heap
        seq = self.q.seq
        heappush, heappop = heapq.heappush, heapq.heappop
        trace = self.trace
        trace_workers = set(range(min(n, TIMELINE_WORKERS)))
        trace_iters = set(range(warmup, min(total, warmup + TIMELINE_ITERATIONS)))

        # Worker state.
        it = [0] * n  # current iteration
        nxt = [0] * n  # next forward layer
        tab = [None] * n
        waiting = [False] * n
        wait_since = [0.0] * n
        blocked = [0.0] * n  # blocked time in the current step
        have = [[-1] * M for _ in range(n)]  # iteration whose update of message m the worker holds
        have_t = [[0.0] * M for _ in range(n)]  # when it arrives (may be up to alpha ahead)
        busy = [0.0] * n  # compute busy time scheduled so far
        cend = [0.0] * n  # end of the compute scheduled last
        step_start = [0.0] * n
        ends: list[list[float]] = [[] for _ in range(n)]
        step_compute: list[list[float]] = [[] for _ in range(n)]
        step_blocked: list[list[float]] = [[] for _ in range(n)]
        # Shards.
        shards = plan.shards
        sfree = [0.0] * shards
        sbusy = [0.0] * shards
        arrivals = [[0] * M, [0] * M]
        past_warmup = 0 if warmup > 0 else n
        finished = 0
        snapshot = self._snapshot
        state = (busy, cend, sfree, sbusy)
        if warmup == 0:
            self.snapshots["start"] = snapshot(0.0, *state)
        last_release = [[0.0] * shards for _ in range(n)]
        # Receive-before-send: per (worker, shard), pushes of the worker's current step that have
        # arrived, the step whose receive notice has arrived (and when), and pulls held until then.
        per_shard = [0] * shards
        for m in range(M):
            per_shard[msg_shard[m]] += 1
        pushed = [[0] * shards for _ in range(n)]
        notice_k = [[-1] * shards for _ in range(n)]
        notice_t = [[0.0] * shards for _ in range(n)]
        held: list[list[list[tuple]]] = [[[] for _ in range(shards)] for _ in range(n)]
        # Sync PS, the shard's side of receive-before-send: the last step whose replies shard s has
        # all sent (its receives for the next step are posted then; `posted_t` is when that notice
        # reaches the workers), the replies of the step after it delivered so far, and pushes held
        # until the shard posts their receives: (worker, message, release, step).
        replies_of_step = [n * c for c in per_shard]
        posted_k = [-1] * shards
        posted_t = [0.0] * shards
        replies_done = [0] * shards
        held_push: list[list[tuple]] = [[] for _ in range(shards)]

        if trace is not None:
            self._install_flow_trace(trace_workers, trace_iters)

        def advance(w: int, t: float, extra: float, lnow: float) -> None:
            """Run worker w's forward from layer nxt[w], starting at its time t (>= the loop's time
            lnow), as far as the parameters it holds allow; start backward at the end.

            Parameters already handed over may still be in flight (arrival up to alpha ahead):
            forward then waits for them inside the chunk, which is exact because their arrival
            times are final."""
            cf = tab[w][1]
            k = it[w]
            j0 = nxt[w]
            j = j0
            t0 = t
            t += extra
            if k > 0:
                hv = have[w]
                ht = have_t[w]
                kk = k - 1
                while j < L:
                    r = 0.0
                    ok = True
                    for m in need[j]:
                        if hv[m] < kk:
                            ok = False
                            break
                        if ht[m] > r:
                            r = ht[m]
                    if not ok:
                        break
                    if r > t:
                        blocked[w] += r - t
                        t = r
                    t += cf[j + 1] - cf[j]
                    j += 1
            else:
                t += cf[L] - cf[j]
                j = L
            comp = extra + cf[j] - cf[j0]
            nxt[w] = j
            if trace is not None and w in trace_workers and k in trace_iters and (comp > 0 or j == L):
                self._trace_compute(w, k, t0, extra, j0, j)
            if j == L:
                _, _, bwd, rel, _, _ = tab[w]
                t_end = t + bwd
                busy[w] += comp + bwd
                cend[w] = t_end
                lr = last_release[w]
                pc = push_conn[w]
                base = w * M
                for m in range(M):
                    s = msg_shard[m]
                    release = t + rel[m]
                    if release < lr[s]:
                        release = lr[s]
                    lr[s] = release
                    if sync and k > 0:
                        if posted_k[s] < k - 1:  # shard s still replies step k-1 to someone
                            held_push[s].append((w, m, release, k))
                            continue
                        if release < posted_t[s]:
                            release = lr[s] = posted_t[s]
                    push_send(pc[s], msg_bytes[m], release, lnow, base + m, k)
                heappush(heap, (t_end, next(seq), _STEP_END, w, 0))
            else:
                busy[w] += comp
                cend[w] = t
                waiting[w] = True
                wait_since[w] = t

        def on_pull(token: int, k: int, arrival: float, lnow: float) -> None:
            """Fresh parameters of message m (update of iteration k) reach worker w at `arrival`."""
            w, m = divmod(token, M)
            have[w][m] = k
            have_t[w][m] = arrival
            if sync:
                s = msg_shard[m]
                replies_done[s] += 1
                if replies_done[s] == replies_of_step[s]:  # shard s posts its receives of step k+1
                    replies_done[s] = 0
                    posted_k[s] = k
                    posted_t[s] = arrival
                    waiting_pushes = held_push[s]
                    if waiting_pushes:
                        held_push[s] = []
                        for w2, m2, release, k2 in waiting_pushes:
                            if release < arrival:  # (held in release order: FIFO is kept)
                                release = arrival
                            if release > last_release[w2][s]:
                                last_release[w2][s] = release
                            push_send(push_conn[w2][s], msg_bytes[m2], release, lnow, w2 * M + m2, k2)
            if waiting[w]:
                j = nxt[w]
                if m in need[j]:
                    kk = it[w] - 1
                    hv = have[w]
                    for x in need[j]:
                        if hv[x] < kk:
                            return
                    waiting[w] = False
                    t = wait_since[w]
                    if trace is not None and w in trace_workers and it[w] in trace_iters:
                        self._trace_wait(w, it[w], t, max(t, max(have_t[w][x] for x in need[j])))
                    advance(w, t, 0.0, lnow)

        def on_push(token: int, k: int, arrival: float, lnow: float) -> None:
            """Worker w's gradient message m of iteration k reaches its shard at `arrival`."""
            w, m = divmod(token, M)
            s = msg_shard[m]
            pushed[w][s] += 1
            if pushed[w][s] == per_shard[s]:  # w's last push of step k to s: its notice follows
                pushed[w][s] = 0
                notice_k[w][s] = k
                notice_t[w][s] = arrival
                waiting_pulls = held[w][s]
                if waiting_pulls:  # all of step k (w's earlier steps' pulls were released before)
                    held[w][s] = []
                    conn = pull_conn[s][w]
                    for nb, ready, tok, kk in waiting_pulls:
                        pull_send(conn, nb, ready if ready > arrival else arrival, lnow, tok, kk)
            if sync:
                arr = arrivals[k & 1]
                arr[m] += 1
                if arr[m] < n:
                    return
                arr[m] = 0
            u = msg_update[m]
            st = sfree[s]
            if st < arrival:
                st = arrival
            en = st + u
            sfree[s] = en
            sbusy[s] += u
            if trace is not None and k in trace_iters:
                self._trace_update(s, m, k, st, u, None if sync else w)
            nb = msg_bytes[m]
            pcs = pull_conn[s]
            if sync:
                for w2 in range(n):  # a pull leaves once w2's receive notice of step k is in
                    if notice_k[w2][s] == k:
                        nt = notice_t[w2][s]
                        pull_send(pcs[w2], nb, en if en > nt else nt, lnow, w2 * M + m, k)
                    else:
                        held[w2][s].append((nb, en, w2 * M + m, k))
            elif notice_k[w][s] == k:
                nt = notice_t[w][s]
                pull_send(pcs[w], nb, en if en > nt else nt, lnow, token, k)
            else:
                held[w][s].append((nb, en, token, k))

        push_net.deliver = on_push
        pull_net.deliver = on_pull

        def start_step(w: int, k: int, now: float) -> None:
            it[w] = k
            nxt[w] = 0
            tab[w] = get_tab(rows[k][w], scale[w])
            step_start[w] = now
            blocked[w] = 0.0
            advance(w, now, tab[w][0], now)

        for w in range(n):
            start_step(w, 0, 0.0)

        now = 0.0
        while True:
            if push_net.dirty or pull_net.dirty:
                if not heap or heap[0][0] > now:
                    if push_net.dirty:
                        push_net.reallocate(now)
                    if pull_net.dirty:
                        pull_net.reallocate(now)
            if not heap:
                break
            now, _, kind, a, b = heappop(heap)
            if kind == _PUSH_DONE:
                push_net.on_done(a, b, now)
            elif kind == _PULL_DONE:
                pull_net.on_done(a, b, now)
            elif kind == _PUSH_RELEASE:
                push_net.on_release(a, now)
            elif kind == _PULL_RELEASE:
                pull_net.on_release(a, now)
            elif kind == _STEP_END:
                w = a
                k = it[w]
                ends[w].append(now)
                if k >= warmup:
                    t = tab[w]
                    step_compute[w].append(t[0] + t[1][L] + t[2])
                    step_blocked[w].append(blocked[w])
                if k + 1 == warmup:
                    past_warmup += 1
                    if past_warmup == n:
                        self.snapshots["start"] = snapshot(now, *state)
                if k + 1 < total:
                    start_step(w, k + 1, now)
                else:
                    finished += 1
                    if finished == 1:
                        self.snapshots["first_done"] = snapshot(now, *state)
        self.end_s = now
        self.snapshots["end"] = snapshot(now, *state)
        self.ends, self.step_compute, self.step_blocked = ends, step_compute, step_blocked

    # --- accounting -----------------------------------------------------------------------------
    def _snapshot(self, now: float, busy, cend, sfree, sbusy) -> tuple:
        compute = [b - max(0.0, e - now) for b, e in zip(busy, cend)]
        shard = [b - max(0.0, f - now) for b, f in zip(sbusy, sfree)]
        push = [self.push_net.bytes_carried(i, now) for i in range(len(self.push_net.cap))]
        pull = [self.pull_net.bytes_carried(i, now) for i in range(len(self.pull_net.cap))]
        return now, compute, shard, push, pull

    def utilization(self) -> dict[str, float]:
        start = self.snapshots.get("start")
        stop = self.snapshots.get("first_done")
        if start is None or stop is None or stop[0] <= start[0]:
            start, stop = (0.0, [0.0] * self.n, [0.0] * self.plan.shards, [0.0] * len(self.push_net.cap),
                           [0.0] * len(self.pull_net.cap)), self.snapshots["end"]
        span = stop[0] - start[0]
        if span <= 0:
            return {}
        n, shards = self.n, self.plan.shards
        d = [[(b - a) for a, b in zip(x, y)] for x, y in zip(start[1:], stop[1:])]
        compute, shard, push, pull = d
        links = self.links
        pcap, qcap = links.push_caps_Bps, links.pull_caps_Bps
        out = {"worker compute": float(np.mean(compute)) / span}
        for s in range(shards):
            up, down = links.server_up[s], links.server_down[s]
            out[f"server {s} update"] = shard[s] / span
            out[f"server {s} NIC up"] = pull[up] / (qcap[up] * span)
            out[f"server {s} NIC down"] = push[down] / (pcap[down] * span)
        # A NIC shared by a node's devices counts once per device here; its utilization is the node's.
        up_util = [push[links.worker_up[w]] / (pcap[links.worker_up[w]] * span) for w in range(n)]
        down_util = [pull[links.worker_down[w]] / (qcap[links.worker_down[w]] * span) for w in range(n)]
        out["worker NIC up (mean)"] = float(np.mean(up_util))
        out["worker NIC down (mean)"] = float(np.mean(down_util))
        self._worker_nic = [(w, up_util[w], down_util[w]) for w in range(n)]
        return {k: min(v, 1.0) for k, v in out.items()}

    def outcome(self, reference: list[float], strategy: Strategy) -> Outcome:
        n, warmup = self.n, self.warmup
        batch = self.profile.batch_size
        steps, compute, exposed, wait = [], [], [], []
        throughput = 0.0
        for w in range(n):
            e = self.ends[w]
            starts = [0.0] + e[:-1]
            measured = [e[k] - starts[k] for k in range(warmup, len(e))]
            steps.extend(measured)
            window = e[-1] - (e[warmup - 1] if warmup > 0 else 0.0)
            throughput += batch * len(measured) / window if window > 0 else float("inf")
            for c, blk in zip(self.step_compute[w], self.step_blocked[w]):
                x = min(blk, reference[w])
                compute.append(c)
                exposed.append(x)
                wait.append(blk - x)
        breakdown = Breakdown(compute_s=float(np.mean(compute)), exposed_comm_s=float(np.mean(exposed)),
                              wait_s=float(np.mean(wait)))
        util = self.utilization()
        step_mean = float(np.mean(steps))
        bottleneck = self._bottleneck(util, breakdown, step_mean, strategy)
        return Outcome(
            iteration_s=np.asarray(steps, dtype=float),
            throughput=float(throughput),
            breakdown=breakdown,
            bottleneck=bottleneck,
            utilization=util,
            timeline=self.trace,
            levels=self._levels(util, step_mean),
            limited_by="stragglers" if bottleneck.startswith("stragglers") else "",
        )

    def _levels(self, util: dict[str, float], step_s: float) -> dict[str, float]:
        """Busy seconds per step of each level's busiest link or resource (one direction)."""
        nic = max((max(up, down) for _, up, down in getattr(self, "_worker_nic", [])), default=0.0)
        server_nic = max((v for k, v in util.items() if k.startswith("server ") and "NIC" in k), default=0.0)
        update = max((v for k, v in util.items() if k.endswith(" update")), default=0.0)
        return {LEVEL_NIC: nic * step_s, "server NIC": server_nic * step_s, "server update": update * step_s}

    def _bottleneck(self, util: dict[str, float], b: Breakdown, step_s: float, strategy: Strategy) -> str:
        if step_s <= 0:
            return "nothing to compute"
        server = [(v, k) for k, v in util.items() if k.startswith("server ")]
        top_v, top_k = max(server) if server else (0.0, "")
        advice = {"update": "add servers (shards) or speed up the update",
                  "up": "add servers or server bandwidth", "down": "add servers or server bandwidth"}
        if top_v >= 0.85:
            what = top_k.replace("update", "update work").replace("NIC up", "NIC uplink").replace(
                "NIC down", "NIC downlink")
            return f"{what} is busy {top_v:.0%} of the time: {advice[top_k.split()[-1]]}"
        nic = getattr(self, "_worker_nic", [])
        if nic:
            w, up, down = max(nic, key=lambda x: max(x[1], x[2]))
            if max(up, down) >= 0.85:
                side = "uplink" if up >= down else "downlink"
                return (f"worker {w} NIC {side} is busy {max(up, down):.0%} of the time: "
                        "give the workers more bandwidth or push fewer bytes")
        blocked = b.exposed_comm_s + b.wait_s
        wait_frac, exposed_frac = b.wait_s / step_s, b.exposed_comm_s / step_s
        if wait_frac >= 0.10 and wait_frac >= exposed_frac:
            if self.sync and (not self.cluster.homogeneous or self.sampler.variable):
                return (f"stragglers: workers wait {wait_frac:.0%} of the step for the slowest worker's gradients "
                        "before the servers can update")
            return (f"contention: workers wait {wait_frac:.0%} of the step for parameters queued behind other "
                    f"workers' traffic ({top_k} busiest at {top_v:.0%}): add servers or bandwidth")
        if exposed_frac >= 0.05:
            return (f"communication: {exposed_frac:.0%} of each step waits for pushes, updates and pulls that "
                    "compute cannot hide (latency, transfer, update): more bandwidth, fewer messages "
                    "(--grouping buckets) or more servers")
        if blocked / step_s < 0.05:
            return f"compute-bound: workers compute {b.compute_s / step_s:.0%} of the time"
        return f"compute-bound: workers compute {b.compute_s / step_s:.0%} of the time"

    # --- timeline -------------------------------------------------------------------------------
    def _room(self) -> bool:
        return self.trace is not None and len(self.trace) < TIMELINE_MAX_EVENTS

    def _trace_compute(self, w: int, k: int, now: float, extra: float, j0: int, j: int) -> None:
        if not self._room():
            return
        pre, cf, bwd, _, row, scale = self.tables.get(self.rows[k][w], float(self.sampler.scale[w]))
        names = [layer.name for layer in self.profile.layers]
        proc, args = f"worker {w}", {"iteration": k}
        t = now
        if extra > 0:
            self.trace.append(TraceEvent("data", t, extra, proc, "compute", args))
            t += extra
        for layer in range(j0, j):
            d = cf[layer + 1] - cf[layer]
            self.trace.append(TraceEvent(f"forward {names[layer]}", t, d, proc, "compute", args))
            t += d
        if j == len(names):
            tb = self.sampler.backward_table_s[row] * scale
            for layer in range(len(names) - 1, -1, -1):
                self.trace.append(TraceEvent(f"backward {names[layer]}", t, float(tb[layer]), proc, "compute", args))
                t += float(tb[layer])

    def _trace_wait(self, w: int, k: int, since: float, now: float) -> None:
        if self._room() and now > since:
            self.trace.append(TraceEvent("wait for parameters", since, now - since, f"worker {w}", "compute",
                                         {"iteration": k}))

    def _trace_update(self, s: int, m: int, k: int, start: float, dur: float, w: int | None) -> None:
        if self._room() and dur > 0:
            args = {"iteration": k, "message": m, "bytes": self.plan.bytes[m]}
            if w is not None:
                args["worker"] = w
            self.trace.append(TraceEvent(f"update msg {m}", start, dur, f"server {s}", "update", args))

    def _install_flow_trace(self, workers: set[int], iters: set[int]) -> None:
        M = self.plan.messages

        def recorder(direction: str, thread: str):
            def on_transfer(conn, token, tag, start, end):
                w, m = divmod(token, M)
                if w in workers and tag in iters and self._room():
                    self.trace.append(TraceEvent(f"{direction} msg {m}", start, end - start, f"worker {w}", thread,
                                                 {"iteration": tag, "bytes": self.plan.bytes[m],
                                                  "shard": self.plan.shard[m]}))
            return on_transfer

        on_push, on_pull = recorder("push", "nic up"), recorder("pull", "nic down")

        self.push_net.on_transfer = on_push
        self.pull_net.on_transfer = on_pull


def _reference_blocked(profile: Profile, cluster: Cluster, strategy: Strategy, topology: Topology,
                       plan: PsPlan) -> list[float]:
    """Per worker: blocked time per step with the servers and links to itself (mean compute): one
    worker on its own NIC (its node's, not shared) and the run's shards on dedicated server NICs
    (colocated shards: NICs like the node's)."""
    memo: dict[tuple[float, float], float] = {}
    out = []
    server_bps = cluster.server_bandwidth_bps if topology.ps_placement == "dedicated" else cluster.bandwidth_bps
    for w in range(cluster.workers):
        key = (cluster.worker_scale(w), cluster.worker_bandwidth_bps(w))
        if key not in memo:
            solo = Cluster(1, bandwidth_bps=key[1], latency_s=cluster.latency_s, ps_count=plan.shards,
                           ps_bandwidth_bps=server_bps, compute_scale=(key[0],))
            # Same messages as the real run (grouping may depend on N), one worker; a measured
            # network's scaling of every NIC carries over.
            solo_topology = Topology(solo, topology.nic, nic_factor=topology.nic_factor)
            sampler = ComputeSampler(profile, solo, seed=0, variability=False)
            steps = 4
            rows = np.zeros((steps, 1), dtype=np.intp)
            run = run_ps(profile, solo, solo_topology, plan, sampler, rows, strategy.kind == "ps-sync", 1)
            memo[key] = float(np.mean(run.step_blocked[0])) if run.step_blocked[0] else 0.0
        out.append(memo[key])
    return out


# ---------------------------------------------------------------------------------------------
# All-reduce (the same DAG as sgdscale.fine.allreduce, run event by event)
# ---------------------------------------------------------------------------------------------


def _simulate_allreduce(profile: Profile, cluster: Cluster, strategy: Strategy, comm: CommModel, iterations: int,
                        warmup: int, seed: int, variability: bool, timeline: bool) -> Outcome:
    from sgdscale.fine.allreduce import _straggler_limited, collective_times_s, describe_bottleneck
    from sgdscale.grouping import group_gradients

    n = cluster.workers
    topology = Topology.of(cluster, comm, strategy)
    groups = group_gradients(profile, strategy, topology, n)
    cost_arr, levels = collective_times_s(groups, topology)
    costs = cost_arr.tolist()
    G = len(groups)
    sampler = ComputeSampler(profile, cluster, seed=seed, variability=variability)
    total = warmup + iterations
    rows = [sampler.draw_rows().tolist() if sampler.variable else [0] * n for _ in range(total)]
    tb = sampler.backward_table_s
    after = np.cumsum(tb[:, ::-1], axis=1)[:, ::-1]
    if G:
        layer = np.array([g.ready_layer for g in groups], dtype=np.intp)
        frac = np.array([g.ready_fraction for g in groups])
        offsets = (after[:, layer] - (1.0 - frac) * tb[:, layer]).tolist()
    else:
        offsets = [[] for _ in range(tb.shape[0])]
    pre_t = (sampler.data_table_s + sampler.h2d_table_s).tolist()
    fwd_t = sampler.forward_table_s.sum(axis=1).tolist()
    bwd_t = tb.sum(axis=1).tolist()
    opt_t = sampler.optimizer_table_s.tolist()
    scale = [float(x) for x in sampler.scale]

    q = EventQueue()
    heap, seq = q.heap, q.seq
    it = [0] * n
    bwd_end = [0.0] * n
    opt = [0.0] * n
    comp = [0.0] * n
    ready_count = [0] * G
    launched = 0  # next group to launch on the stream
    stream_busy = False
    comm_end = 0.0
    step_end_max = [0.0] * total
    done_count = [0] * total
    compute_mean = [0.0] * total
    exposed = [0.0] * total

    def start(w: int, k: int, now: float) -> None:
        it[w] = k
        r = rows[k][w]
        sc = scale[w]
        t_b0 = now + (pre_t[r] + fwd_t[r]) * sc
        bwd_end[w] = t_b0 + bwd_t[r] * sc
        opt[w] = opt_t[r] * sc
        comp[w] = (pre_t[r] + fwd_t[r] + bwd_t[r] + opt_t[r]) * sc
        if G:
            off = offsets[r]
            for g in range(G):
                heapq.heappush(heap, (t_b0 + off[g] * sc, next(seq), _GROUP_READY, w, g))
        else:
            heapq.heappush(heap, (bwd_end[w] + opt[w], next(seq), _STEP_END, w, 0))

    for w in range(n):
        start(w, 0, 0.0)
    now = 0.0
    while heap:
        now, _, kind, a, b = heapq.heappop(heap)
        if kind == _GROUP_READY:
            ready_count[b] += 1
            if ready_count[b] == n and not stream_busy and launched == b:
                stream_busy = True
                heapq.heappush(heap, (now + costs[b], next(seq), _COLL_END, b, 0))
        elif kind == _COLL_END:
            g = a
            ready_count[g] = 0
            launched = g + 1
            stream_busy = False
            if launched < G:
                if ready_count[launched] == n:
                    stream_busy = True
                    heapq.heappush(heap, (now + costs[launched], next(seq), _COLL_END, launched, 0))
            else:
                launched = 0
                comm_end = now
                exposed[it[0]] = max(comm_end - max(bwd_end), 0.0)
                for w in range(n):
                    heapq.heappush(heap, (max(bwd_end[w], now) + opt[w], next(seq), _STEP_END, w, 0))
        elif kind == _STEP_END:
            w = a
            k = it[w]
            if now > step_end_max[k]:
                step_end_max[k] = now
            done_count[k] += 1
            if done_count[k] == 1:
                compute_mean[k] = 0.0
            compute_mean[k] += comp[w] / n
            if k + 1 < total:
                start(w, k + 1, now)
    prev = [0.0] + step_end_max[:-1]
    steps = np.array([step_end_max[k] - prev[k] for k in range(warmup, total)])
    step_mean = float(steps.mean())
    comp_m = float(np.mean(compute_mean[warmup:]))
    exp_m = float(np.mean(exposed[warmup:]))
    breakdown = Breakdown(compute_s=comp_m, exposed_comm_s=exp_m, wait_s=max(step_mean - comp_m - exp_m, 0.0))
    costs_arr = np.array(costs)
    util = {"compute": comp_m / step_mean if step_mean > 0 else 0.0,
            "network": float(costs_arr.sum()) / step_mean if step_mean > 0 else 0.0}
    return Outcome(
        iteration_s=steps,
        throughput=n * profile.batch_size / step_mean if step_mean > 0 else float("inf"),
        breakdown=breakdown,
        bottleneck=describe_bottleneck(profile, cluster, strategy, topology, groups, costs_arr, step_mean,
                                       breakdown, sampler),
        utilization=util,
        timeline=[] if timeline else None,
        levels=levels,
        limited_by=_straggler_limited(breakdown, step_mean),
    )
