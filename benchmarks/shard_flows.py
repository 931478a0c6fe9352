"""How a parameter-server shard's link is shared among its workers' pushes and pulls, on the wire.

Set 78's async resnet50 replay and set 80's async gpt2 (one shard each) kept the shard's link 94-98%
busy both ways, where the fine method keeps it ~80% busy; a traced run showed the workers' pushes
completing one after another, evenly spaced (`async_link_concurrency.py`), but not what the link does
between them: the shard timestamps a gradient only when its thread gets to it. This runs one
`sgdscale train` on the emulated cluster and samples, from inside every node's network namespace,
each established TCP connection's tcp_info every few milliseconds over netlink sock_diag (a process
per node, outside the nodes' CPU quotas; a sample looks each connection up by its id, some 30 us
each). A byte is counted where it arrives: a push when the shard has received it, a pull when its
worker has (the sender's acknowledged bytes lag the wire by the queues the acknowledgements wait
in). With `--profile` the fine method's timeline of the same cluster is read the same way (each
message's bytes spread evenly over its transfer), beside the run.

Reported over the run's middle (the first and last `--skip-s` seconds left out), per direction:
- the link's use (bytes moved over the link's rate in the network file);
- the share of 20 ms windows with 0, 1, 2, 3+ workers' connections moving (over 5% of the link's rate
  in the window: TCP flows sharing a link take turns at millisecond scales);
- while two or more move, the largest one's share of what moved (1/k: equal sharing; 1: one at a time);
- per transfer (a connection's bytes in one direction, pauses under `--gap-ms` joined), for every two
  that overlap, the earlier-started one's share of the bytes the two moved while both moved;
- each worker over one second, 5 ms a character (P pushing, L pulling).

    .venv/bin/python benchmarks/shard_flows.py --name NAME --network-file NET.json \
        [--profile PROFILE.json --bandwidth RATE] [--every-ms 2] [--skip-s 5] -- TRAIN-ARGUMENTS...
    .venv/bin/python benchmarks/shard_flows.py --name NAME --network-file NET.json \
        --samples results/shard_flows-NAME/samples.json.gz [--profile ...]   (report again)

TRAIN-ARGUMENTS are `sgdscale train`'s, with --emulate and one shard. Raw output:
benchmarks/results/shard_flows-<name>.md and results/shard_flows-<name>/ (the samples of the
connections the report reads, delta-encoded and gzipped, and the run's measurement). Kept (each reported with `--samples` and `--profile`):
- `gpt2-async-w5-660Mbit`: set 80's async gpt2 (real compute), from
    --network-file results/accuracy-heldout80/networks/660Mbit-q0.32-n5-6.json -- gpt2 --batch-size 4
    --seq-len 64 --option layers=2 --option hidden=128 --option vocab=2048 --workers 5 --strategy ps-async
    --ps 1 --emulate --bandwidth 660Mbit --cpu-quota 0.32 --iterations 150
  (predicted from results/accuracy-heldout80/profiles/gpt2-b4-s64-layers2-hidden128-vocab2048-q0.32.json);
- `bert-replay-async-w5-600Mbit`: set 78's async bert replay, which fine predicts within 1%, from
    --network-file results/accuracy-heldout78/networks/600Mbit-q0.25-n5-6.json --
    results/accuracy-heldout78/profiles/replay-bert-b8.json --replay --workers 5 --strategy ps-async --ps 1
    --emulate --bandwidth 600Mbit --cpu-quota 0.25 --iterations 30
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# netlink sock_diag (linux/inet_diag.h, linux/sock_diag.h, linux/tcp.h)
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_DONE, NLMSG_ERROR = 3, 2
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
INET_DIAG_INFO = 2
TCP_ESTABLISHED = 1
TCPI_BYTES_ACKED, TCPI_BYTES_RECEIVED = 120, 128  # offsets in struct tcp_info
TCPI_SND_MSS, TCPI_RTT, TCPI_SND_SSTHRESH = 16, 68, 76  # ssthresh then snd_cwnd (segments), rtt in us
NO_SSTHRESH = 0x7FFFFFFF  # TCP_INFINITE_SSTHRESH: no loss yet
MOVING = 0.05  # a connection moves while it carries over this share of the link's rate
WINDOW_S = 0.02  # over windows this long


def diag_request(sockid: bytes = bytes(48), dump: bool = True) -> bytes:
    """A SOCK_DIAG_BY_FAMILY request for established IPv4 TCP sockets with their tcp_info: a dump of them
    all (it walks the kernel's whole connection table, ~1 ms), or one looked up by its id (microseconds)."""
    req = struct.pack("=BBBxI", socket.AF_INET, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 1 << TCP_ESTABLISHED)
    req += sockid
    flags = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
    return struct.pack("=IHHII", 16 + len(req), SOCK_DIAG_BY_FAMILY, flags, 1, 0) + req


def parse_diag(data: bytes, rows: list, t: float, ids: dict | None = None) -> int:
    """Append (t, peer's last address byte, local port, peer port, bytes acked, bytes received, send MSS,
    smoothed round trip in us, slow-start threshold and congestion window in segments) per socket in
    `data`, and its id to `ids`; returns how many messages it held (-1 at the dump's end)."""
    offset, count = 0, 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if kind == NLMSG_DONE:
            return -1
        if kind == NLMSG_ERROR:
            raise OSError("sock_diag request failed (a connection closed?)")
        msg = offset + 16
        sport, dport = struct.unpack_from(">HH", data, msg + 4)
        peer = data[msg + 24 + 3]  # dst address, IPv4 in the first 4 bytes of 16
        if ids is not None:
            ids[(sport, dport, peer)] = data[msg + 4:msg + 52]
        attr = msg + 72
        while attr + 4 <= offset + length:
            alen, atype = struct.unpack_from("=HH", data, attr)
            if atype == INET_DIAG_INFO and alen - 4 >= TCPI_BYTES_RECEIVED + 8:
                info = attr + 4
                acked, received = struct.unpack_from("=QQ", data, info + TCPI_BYTES_ACKED)
                mss, = struct.unpack_from("=I", data, info + TCPI_SND_MSS)
                rtt_us, = struct.unpack_from("=I", data, info + TCPI_RTT)
                ssthresh, cwnd = struct.unpack_from("=II", data, info + TCPI_SND_SSTHRESH)
                rows.append((t, peer, sport, dport, acked, received, mss, rtt_us, ssthresh, cwnd))
            attr += (alen + 3) & ~3
        offset += (length + 3) & ~3
        count += 1
    return count


def sample(out_path: str, every_s: float, node: int, rediscover_s: float = 0.5) -> None:
    """Inside the shard's namespace: sample until SIGTERM, appending the rows to `out_path` (one JSON list
    per line) every second, since the testbed SIGKILLs what runs in its namespaces when the run ends. The
    connections are found by a dump every `rediscover_s`, and in between each is looked up by its id."""
    rows: list = []
    out = open(out_path, "w")
    written_at = time.time()
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    ids: dict = {}
    lookups, found_at = b"", float("-inf")
    next_t = time.perf_counter()
    while not stop[0]:
        t = time.time()
        if t - found_at >= rediscover_s or not lookups:
            ids.clear()
            nl.send(diag_request())
            try:
                while parse_diag(nl.recv(1 << 20), rows, t, ids) >= 0:
                    pass
            except OSError:  # a connection closed mid-dump (the run ending): dump again next time
                ids.clear()
            lookups = b"".join(diag_request(sockid, dump=False) for sockid in ids.values())
            found_at = t
        else:
            nl.send(lookups)
            answered = 0
            try:
                while answered < len(ids):
                    answered += parse_diag(nl.recv(1 << 20), rows, t)
            except OSError:  # a connection closed: find them again
                found_at = float("-inf")
        if t - written_at >= 1.0:
            out.write("".join(json.dumps([node, *row]) + "\n" for row in rows))
            out.flush()
            rows.clear()
            written_at = t
        next_t += every_s
        pause = next_t - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            next_t = time.perf_counter()
    out.write("".join(json.dumps([node, *row]) + "\n" for row in rows))
    out.close()


def find_node_netns(nodes: int, before: set[str], timeout_s: float = 120.0) -> list[str]:
    """The run's namespaces, node 0 to nodes - 1, once the last (the shard's) exists."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        names = {line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                             text=True).stdout.splitlines() if line.strip()}
        new = sorted(n for n in names - before if n.startswith("sgs"))
        last = [n for n in new if n.endswith(f"n{nodes - 1}")]
        if last:
            stem = last[0][:-len(f"n{nodes - 1}")]
            return [f"{stem}n{k}" for k in range(nodes)]
        time.sleep(0.05)
    raise SystemExit("shard_flows: the run's namespaces never appeared")


def used_connections(rows: list, workers: int) -> dict[tuple[int, str], list[tuple[float, int]]]:
    """Per (worker, "push" or "pull"): the (time, bytes received) samples of the connection that carries
    it, counted where its bytes arrive (a push by the shard, node `workers`; a pull by its worker), the
    pair's busiest connection (not the workers' connections to each other or the store's)."""
    shard = workers
    by_conn: dict[tuple, list] = {}
    for node, t, peer, sport, dport, _acked, received, *_ in rows:
        by_conn.setdefault((node, peer, sport, dport), []).append((t, received))
    used: dict[tuple[int, str], list] = {}
    for (node, peer, _, _), samples in by_conn.items():
        w, into = (peer - 1, "push") if node == shard else (node, "pull")
        if (into == "pull" and peer - 1 != shard) or not 0 <= w < workers:
            continue
        if samples[-1][1] > used.get((w, into), [(0.0, 0)])[-1][1]:
            used[(w, into)] = samples
    return used


def sender_windows(rows: list, workers: int, every: int = 10) -> dict[tuple[int, str], dict[str, list]]:
    """Per (worker, "push" or "pull"): the sending end's TCP state, every `every`-th sample of the connection
    that carries it (a push sent by its worker to the shard, a pull by the shard to its worker; the pair's
    busiest): times (s), bytes acknowledged, congestion window and slow-start threshold (bytes; the
    threshold None until the connection's first loss) and smoothed round trip (s)."""
    shard = workers
    by_conn: dict[tuple, list] = {}
    for node, t, peer, sport, dport, acked, _received, mss, rtt_us, ssthresh, cwnd in rows:
        by_conn.setdefault((node, peer, sport, dport), []).append((t, acked, mss, rtt_us, ssthresh, cwnd))
    chosen: dict[tuple[int, str], list] = {}
    for (node, peer, _, _), samples in by_conn.items():
        w, out = (node, "push") if node != shard and peer - 1 == shard else (peer - 1, "pull")
        if (out == "pull" and node != shard) or not 0 <= w < workers:
            continue
        if samples[-1][1] > chosen.get((w, out), [(0.0, 0)])[-1][1]:
            chosen[(w, out)] = samples
    return {key: {"t": [x[0] for x in samples[::every]], "acked": [x[1] for x in samples[::every]],
                  "cwnd": [x[5] * x[2] for x in samples[::every]],
                  "ssthresh": [None if x[4] >= NO_SSTHRESH else x[4] * x[2] for x in samples[::every]],
                  "rtt_s": [x[3] / 1e6 for x in samples[::every]]}
            for key, samples in chosen.items()}


def write_samples(path: Path, used: dict, windows: dict | None = None) -> None:
    """Keep what `series` reads, delta-encoded (microseconds, bytes), and the senders' TCP state."""
    kept = []
    for (w, into), samples in sorted(used.items()):
        t_us = np.round(np.array([t for t, _ in samples]) * 1e6).astype(np.int64)
        nbytes = np.array([b for _, b in samples], dtype=np.int64)
        kept.append({"worker": w, "direction": into, "t0_us": int(t_us[0]), "dt_us": np.diff(t_us).tolist(),
                     "bytes0": int(nbytes[0]), "dbytes": np.diff(nbytes).tolist()})
    senders = []
    for (w, out), state in sorted((windows or {}).items()):
        t_us = np.round(np.array(state["t"]) * 1e6).astype(np.int64)
        acked = np.array(state["acked"], dtype=np.int64)
        senders.append({"worker": w, "direction": out, "t0_us": int(t_us[0]), "dt_us": np.diff(t_us).tolist(),
                        "acked0": int(acked[0]), "dacked": np.diff(acked).tolist(),
                        "cwnd": [int(c) for c in state["cwnd"]],
                        "ssthresh": [-1 if x is None else int(x) for x in state["ssthresh"]],
                        "rtt_us": [int(round(r * 1e6)) for r in state["rtt_s"]]})
    with gzip.open(path, "wt") as f:
        json.dump({"connections": kept, "senders": senders}, f)


def read_samples(path: str | Path) -> dict:
    with gzip.open(path, "rt") as f:
        kept = json.load(f)["connections"]
    used = {}
    for c in kept:
        t = (c["t0_us"] + np.concatenate([[0], np.cumsum(c["dt_us"])])) / 1e6
        b = c["bytes0"] + np.concatenate([[0], np.cumsum(c["dbytes"])])
        used[(c["worker"], c["direction"])] = list(zip(t.tolist(), b.tolist()))
    return used


def read_windows(path: str | Path) -> dict:
    """The senders' TCP state kept with the samples (empty for runs sampled before it was kept)."""
    with gzip.open(path, "rt") as f:
        senders = json.load(f).get("senders", [])
    return {(s["worker"], s["direction"]): {
        "t": ((s["t0_us"] + np.concatenate([[0], np.cumsum(s["dt_us"])])) / 1e6).tolist(),
        "acked": (s["acked0"] + np.concatenate([[0], np.cumsum(s["dacked"])])).tolist(),
        "cwnd": s["cwnd"], "ssthresh": [None if x < 0 else x for x in s["ssthresh"]],
        "rtt_s": [r / 1e6 for r in s["rtt_us"]]} for s in senders}


def window_rows(windows: dict, link_Bps: float, start_s: float, end_s: float) -> list[dict]:
    """Per sending connection over [start_s, end_s] (absolute times), while it sends (over `MOVING` of the
    link's rate in `WINDOW_S` windows): its congestion window over its round trip as a share of the link
    (what one flow can move however idle the link is), the window and round trip themselves, when it
    first lost a packet (seconds from `start_s`; negative: before) and its slow-start threshold at the end."""
    rows = []
    for (w, out), state in sorted(windows.items(), key=lambda kv: (kv[0][1] != "push", kv[0][0])):
        t = np.array(state["t"])
        keep = (t >= start_s) & (t <= end_s)
        if keep.sum() < 3:
            continue
        acked = np.array(state["acked"], dtype=float)
        rate = (np.interp(t + WINDOW_S, t, acked) - acked) / WINDOW_S
        sending = keep & (rate > MOVING * link_Bps)
        if sending.sum() < 3:
            continue
        cwnd, rtt = np.array(state["cwnd"], dtype=float), np.array(state["rtt_s"])
        capacity = cwnd[sending] / np.maximum(rtt[sending], 1e-6) / link_Bps
        losses = [x for x, th in zip(t, state["ssthresh"]) if th is not None]
        last = [th for x, th in zip(t, state["ssthresh"]) if x <= end_s]
        rows.append({"worker": w, "direction": out, "capacity": float(np.median(capacity)),
                     "capacity_p10": float(np.percentile(capacity, 10)),
                     "capacity_p90": float(np.percentile(capacity, 90)),
                     "cwnd_bytes": float(np.median(cwnd[sending])), "rtt_s": float(np.median(rtt[sending])),
                     "rtt_p90_s": float(np.percentile(rtt[sending], 90)),
                     "first_loss_s": (losses[0] - start_s) if losses else None,
                     "ssthresh_bytes": last[-1] if last else None})
    return rows


def window_table(rows: list[dict]) -> list[str]:
    mb = lambda b: "none (no loss)" if b is None else f"{b / 1e6:.2f} MB"
    lines = ["| sender | first loss | slow-start threshold at the end | window while sending | round trip while "
             "sending (median, p90) | window / round trip, share of the link (median, p10-p90) |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        who = f"w{r['worker']}'s pushes" if r["direction"] == "push" else f"pulls to w{r['worker']}"
        loss = "never" if r["first_loss_s"] is None else f"{r['first_loss_s']:+.1f} s"
        lines.append(f"| {who} | {loss} | {mb(r['ssthresh_bytes'])} | {r['cwnd_bytes'] / 1e6:.2f} MB | "
                     f"{r['rtt_s'] * 1e3:.1f} ms, {r['rtt_p90_s'] * 1e3:.1f} ms | {r['capacity']:.2f} "
                     f"({r['capacity_p10']:.2f}-{r['capacity_p90']:.2f}) |")
    return lines


def series(used: dict, workers: int, skip_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sample times, pulls[w, t], pushes[w, t]): cumulative bytes of `used_connections`, on the shard's
    sampling times, the first and last `skip_s` left out."""
    times = np.array(sorted({t for (_, into), samples in used.items() if into == "push" for t, _ in samples}))
    pulls, pushes = np.zeros((workers, len(times))), np.zeros((workers, len(times)))
    for (w, into), samples in used.items():
        ts = np.array([x[0] for x in samples])
        (pushes if into == "push" else pulls)[w] = np.interp(times, ts, [x[1] for x in samples])
    keep = (times >= times[0] + skip_s) & (times <= times[-1] - skip_s)
    return times[keep] - times[keep][0], pulls[:, keep], pushes[:, keep]


def cumulative_bytes(times: np.ndarray, starts: np.ndarray, ends: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """Bytes moved by `times` of transfers each moving its bytes evenly from its start to its end:
    sum r (min(t, end) - start)+ with r = bytes / (end - start), by sorted prefix sums."""
    rate = nbytes / np.maximum(ends - starts, 1e-12)

    def under(edges: np.ndarray) -> np.ndarray:  # sum over edges <= t of r * (t - edge)
        order = np.argsort(edges)
        e, r = edges[order], rate[order]
        k = np.searchsorted(e, times, side="right")
        r_sum, re_sum = np.concatenate([[0.0], np.cumsum(r)]), np.concatenate([[0.0], np.cumsum(r * e)])
        return times * r_sum[k] - re_sum[k]

    return under(starts) - under(ends)


def fine_series(profile_path: str, network_path: str, workers: int, bandwidth_bps: float, strategy_kind: str,
                skip_s: float, every_s: float, replay: bool = False, iterations: int = 150
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The fine method's (times, pulls[w, t], pushes[w, t], samples/s) for the same one-shard cluster, as the
    validator predicts a case from a measured network file (a replay: the profiled means, and none of the
    CPU that sleeping workers do not spend): its per-message transfers spread evenly over their slices and
    sampled like the run."""
    from sgdscale.cluster import Cluster
    from sgdscale.comm import CommModel, load_network
    from sgdscale.fine.ps import simulate_ps
    from sgdscale.profile import load_profile
    from sgdscale.result import TimelineSpec
    from sgdscale.strategy import Strategy

    network = load_network(network_path)
    comm = CommModel.from_network(network)
    out = simulate_ps(load_profile(profile_path), Cluster(workers, bandwidth_bps, network.p2p.alpha_s, 1),
                      Strategy(kind=strategy_kind), comm.for_sleeping_workers() if replay else comm,
                      iterations=iterations, warmup=10, variability=not replay,
                      timeline=TimelineSpec(iterations=iterations, all_workers=True, max_events=10 ** 7))
    slices = [(int(e.process.split()[1]), e.thread, e.start_s, e.start_s + e.duration_s, e.args["bytes"])
              for e in out.timeline if e.thread in ("nic up", "nic down")]
    start, end = min(a for _, _, a, _, _ in slices), max(b for _, _, _, b, _ in slices)
    times = np.arange(start, end, every_s)
    pulls, pushes = np.zeros((workers, len(times))), np.zeros((workers, len(times)))
    for w in range(workers):
        for thread, into in (("nic up", pushes), ("nic down", pulls)):
            mine = [(a, b, nbytes) for v, th, a, b, nbytes in slices if v == w and th == thread]
            if mine:
                into[w] = cumulative_bytes(times, *map(np.array, zip(*mine)))
    keep = (times >= start + skip_s) & (times <= end - skip_s)
    return times[keep] - times[keep][0], pulls[:, keep], pushes[:, keep], out.throughput


def transfers(cumulative: np.ndarray, times: np.ndarray, threshold: float, gap_s: float) -> list[tuple[float, float]]:
    """Spans (start, end) in which a connection's counter rose, gaps under gap_s joined."""
    moving = np.diff(cumulative) > threshold
    spans, start, last = [], None, None
    for i in np.flatnonzero(moving):
        if start is None:
            start, last = times[i], times[i + 1]
        elif times[i] - last <= gap_s:
            last = times[i + 1]
        else:
            spans.append((start, last))
            start, last = times[i], times[i + 1]
    if start is not None:
        spans.append((start, last))
    return spans


def direction_report(name: str, times: np.ndarray, cumulative: np.ndarray, link_Bps: float, gap_s: float,
                     window_s: float = WINDOW_S) -> list[str]:
    """One row of the report; concurrency and shares over `window_s` windows (TCP flows sharing a link take
    turns at millisecond scales, so at the sampling step one or two move where three share)."""
    grid = np.arange(times[0], times[-1], window_s)
    windowed = np.array([np.interp(grid, times, c) for c in cumulative])
    dt = np.diff(grid)
    moved = np.diff(windowed, axis=1)  # bytes per worker per window
    rate = moved / dt
    moving = rate > MOVING * link_Bps
    count = moving.sum(axis=0)
    use = moved.sum() / (times[-1] - times[0]) / link_Bps
    weights = dt / dt.sum()
    shares = [float(weights[count == k].sum()) for k in (0, 1, 2)] + [float(weights[count >= 3].sum())]
    several = count >= 2
    top = moved.max(axis=0)[several] / np.maximum(moved.sum(axis=0)[several], 1.0)
    expected_equal = 1.0 / count[several] if several.any() else np.array([])
    step_s = float(np.median(np.diff(times)))
    spans = sorted((a, b, w) for w in range(cumulative.shape[0])
                   for a, b in transfers(cumulative[w], times, MOVING * link_Bps * step_s, gap_s))
    earlier = []
    for i, (a0, a1, wa) in enumerate(spans):  # by start: each against the later-started ones it overlaps
        for b0, b1, wb in spans[i + 1:]:
            if b0 >= a1 - 2 * step_s:
                break
            lo, hi = b0, min(a1, b1)
            if wa == wb or hi - lo < 2 * step_s:
                continue
            ia, ib = np.searchsorted(times, lo), np.searchsorted(times, hi)
            first = cumulative[wa][ib] - cumulative[wa][ia]
            second = cumulative[wb][ib] - cumulative[wb][ia]
            if first + second > 0:
                earlier.append(first / (first + second))
    q = np.percentile(earlier, [25, 50, 75]) if earlier else [float("nan")] * 3
    return [f"| {name} | {use:.0%} | {' / '.join(f'{s:.0%}' for s in shares)} | "
            f"{np.median(top) if len(top) else float('nan'):.2f} (equal: {np.median(expected_equal) if len(top) else float('nan'):.2f}) | "
            f"{len(spans)} | {q[1]:.2f} ({q[0]:.2f}-{q[2]:.2f}), {len(earlier)} pairs |"]


def link_use(times: np.ndarray, cumulative: np.ndarray, link_Bps: float) -> float:
    """What the connections (cumulative[w, t] bytes) moved together over the link's rate, from first to last sample."""
    return float((cumulative[:, -1] - cumulative[:, 0]).sum() / (times[-1] - times[0]) / link_Bps)


def window_rates(times: np.ndarray, cumulative: np.ndarray, link_Bps: float, window_s: float = WINDOW_S) -> np.ndarray:
    """Each connection's rate (share of the link) over consecutive whole `window_s` windows: rates[w, k]."""
    grid = np.arange(times[0], times[-1], window_s)
    return np.diff(np.array([np.interp(grid, times, c) for c in cumulative]), axis=1) / window_s / link_Bps


def coupling(times: np.ndarray, these: np.ndarray, other: np.ndarray, link_Bps: float) -> str:
    """`these` direction's total rate (share of the link) and movers, by how many of the `other` move."""
    rate = [window_rates(times, cumulative, link_Bps) for cumulative in (these, other)]
    moving = [(r > MOVING).sum(axis=0) for r in rate]
    cells = []
    for k in range(4):
        picked = moving[1] == k if k < 3 else moving[1] >= 3
        cells.append(f"{rate[0].sum(axis=0)[picked].mean():.2f} ({moving[0][picked].mean():.1f})" if picked.sum() >= 10
                     else "-")
    return " / ".join(cells)


PHASE_GAP_S = 0.04


def phase_row(label: str, times: np.ndarray, pulls: np.ndarray, pushes: np.ndarray, link_Bps: float) -> str:
    step_s = float(np.median(np.diff(times)))
    threshold = MOVING * link_Bps * step_s
    push_s, gap_s, pull_s, idle_s, own, others = [], [], [], [], [], []
    for w in range(pushes.shape[0]):
        push_spans = transfers(pushes[w], times, threshold, PHASE_GAP_S)
        pull_spans = transfers(pulls[w], times, threshold, PHASE_GAP_S)
        for a, b in push_spans:
            push_s.append(b - a)
            ia, ib = np.searchsorted(times, a), np.searchsorted(times, b)
            own.append((pushes[w][ib] - pushes[w][ia]) / (b - a) / link_Bps)
            others.append(sum(pushes[v][ib] - pushes[v][ia] for v in range(pushes.shape[0]) if v != w)
                          / (b - a) / link_Bps)
            after = [span for span in pull_spans if span[0] >= a]
            if after:
                gap_s.append(after[0][0] - b)
                pull_s.append(after[0][1] - after[0][0])
                following = [span for span in push_spans if span[0] >= after[0][1]]
                if following:
                    idle_s.append(following[0][0] - after[0][1])
    ms = lambda xs: f"{np.median(xs) * 1e3:.0f} ms" if xs else "-"
    return (f"| {label} | {ms(push_s)} | {ms(gap_s)} | {ms(pull_s)} | {ms(idle_s)} | {np.median(own):.2f} | "
            f"{np.median(others):.2f} |")


def middle_s(used: dict, skip_s: float) -> tuple[float, float]:
    """The absolute start and end of the run's middle that `series` reports on."""
    times = [t for (_, into), samples in used.items() if into == "push" for t, _ in samples]
    return min(times) + skip_s, max(times) - skip_s


def report(name: str, used: dict, workers: int, link_Bps: float, skip_s: float, gap_s: float, command: str,
           measurement: dict | None, fine: tuple | None = None, windows: dict | None = None) -> str:
    times, pulls, pushes = series(used, workers, skip_s)
    dt = np.diff(times)
    lines = [f"# A parameter-server shard's link, connection by connection: {name}", "",
             f"Generated by `benchmarks/shard_flows.py {command}`. Every established TCP connection of every node's "
             f"namespace sampled every {np.median(dt) * 1e3:.1f} ms (median; 95th percentile "
             f"{np.percentile(dt, 95) * 1e3:.1f} ms) over {times[-1]:.0f} s (the first and last {skip_s:g} s left "
             f"out); each worker's connection with the most bytes; link {link_Bps / 1e6:.1f} MB/s each way. A "
             f"connection moves in a {WINDOW_S * 1e3:.0f} ms window where it carries over {MOVING:.0%} of that "
             "(flows sharing a link take turns at millisecond scales); transfers and their overlaps at the "
             "sampling step.", ""]
    if measurement is not None:
        lines += [f"The run: {measurement['throughput']:.1f} samples/s.", ""]
    lines += ["| direction | link use | time with 0 / 1 / 2 / 3+ moving | the largest's share while 2+ move "
              "(median) | transfers | earlier-started's share of two overlapping (median, quartiles) |",
              "|---|---:|---|---:|---:|---|"]
    lines += direction_report("pushes (into the shard), measured", times, pushes, link_Bps, gap_s)
    if fine is not None:
        lines += direction_report(f"pushes, fine ({fine[3]:.1f} samples/s)", fine[0], fine[2], link_Bps, gap_s)
    lines += direction_report("pulls (out of the shard), measured", times, pulls, link_Bps, gap_s)
    if fine is not None:
        lines += direction_report("pulls, fine", fine[0], fine[1], link_Bps, gap_s)
    if windows:
        lines += ["", "What each sending end's TCP lets through (its own counters; Reno): a connection's congestion "
                  "window over its smoothed round trip, as a share of the link, is what that one flow can move "
                  "however idle the link; over the middle of the run while it sends. A push's acknowledgements "
                  "leave the shard behind the replies queued in its uplink's shaper, so its round trip is that "
                  "queue's; its window stops growing at the slow-start threshold its first loss set.", ""]
        lines += window_table(window_rows(windows, link_Bps, *middle_s(used, skip_s)))
    lines += ["", "Each direction's total (share of the link) in the 20 ms windows where 0, 1, 2, 3+ connections of the "
              "other direction move (in brackets: how many of its own move):", "",
              "| side | pushes while 0 / 1 / 2 / 3+ pulls move | pulls while 0 / 1 / 2 / 3+ pushes move |",
              "|---|---|---|"]
    for label, (t, pl, pu) in [("measured", (times, pulls, pushes))] + ([("fine", fine[:3])] if fine else []):
        lines.append(f"| {label} | {coupling(t, pu, pl, link_Bps)} | {coupling(t, pl, pu, link_Bps)} |")
    lines += ["", f"A worker's step on the wire (medians; a phase: one direction's transfers with pauses under "
              f"{PHASE_GAP_S * 1e3:.0f} ms joined): its push phase, from its end to the pull's start (the shard's update of the last gradient), its pull phase, from the pull's end to its next "
              "push (its forward, and its backward up to the first gradient), and the share of the link its pushes "
              "got during its push phase and the other workers' pushes got meanwhile.", "",
              "| side | push phase | push end to pull start | pull phase | pull end to next push | its share while pushing | "
              "the others' share |", "|---|---:|---:|---:|---:|---:|---:|"]
    for label, (t, pl, pu) in [("measured", (times, pulls, pushes))] + ([("fine", fine[:3])] if fine else []):
        lines.append(phase_row(label, t, pl, pu, link_Bps))
    lines += ["", "Each worker over one second of the middle of the run, 5 ms a character: P its pushes moving, L its "
              "pulls, B both, . neither (moving: over 10% of the link's rate).", "", "```"]
    for label, (t, pl, pu) in [("measured", (times, pulls, pushes))] + ([("fine", fine[:3])] if fine else []):
        grid = np.arange(t[-1] / 2, t[-1] / 2 + 1.0, 0.005)
        for w in range(workers):
            ra = np.diff(np.interp(grid, t, pu[w])) / 0.005 / link_Bps
            rb = np.diff(np.interp(grid, t, pl[w])) / 0.005 / link_Bps
            lines.append(f"{label:8s} w{w} " + "".join("B" if x > 0.1 and y > 0.1 else "P" if x > 0.1 else
                                                        "L" if y > 0.1 else "." for x, y in zip(ra, rb)))
    lines.append("```")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--sample"]:
        sample(argv[1], float(argv[2]), int(argv[3]))
        return 0
    own, _, train = (argv[:argv.index("--")], None, argv[argv.index("--") + 1:]) if "--" in argv else (argv, None, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--every-ms", type=float, default=2.0)
    parser.add_argument("--skip-s", type=float, default=5.0)
    parser.add_argument("--gap-ms", type=float, default=6.0, help="join a connection's movements this close (ms)")
    parser.add_argument("--link-Bps", type=float, help="the link's rate, bytes/s [default: from --network-file]")
    parser.add_argument("--network-file", help="a netbench network file of the cluster: its point-to-point rate")
    parser.add_argument("--workers", type=int, help="with --samples: how many workers the run had")
    parser.add_argument("--samples", help="report again from kept samples (json.gz)")
    parser.add_argument("--profile", help="the fine method beside the run: the profile to predict from (with "
                        "--network-file, --bandwidth, --strategy)")
    parser.add_argument("--bandwidth", help="with --profile: the cluster's nominal rate, e.g. 660Mbit")
    parser.add_argument("--strategy", default="ps-async", help="with --profile: ps-async or ps-sync")
    args = parser.parse_args(own)
    if args.link_Bps is None:
        if not args.network_file:
            parser.error("give --link-Bps or --network-file")
        network = json.loads(Path(args.network_file).read_text())
        args.link_Bps = 1.0 / network["p2p"]["beta_s_per_byte"]
    out_dir = HERE / "results" / f"shard_flows-{args.name}"
    command = " ".join(argv)
    if args.samples:
        used, windows = read_samples(args.samples), read_windows(args.samples)
        measurement_path = out_dir / "measurement.json"
        measurement = json.loads(measurement_path.read_text()) if measurement_path.is_file() else None
        workers = args.workers or (len(measurement["workers"]) if measurement else None)
    else:
        workers = int(train[train.index("--workers") + 1])
        before = {line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                             text=True).stdout.splitlines() if line.strip()}
        tmp = Path(tempfile.mkdtemp(prefix="shard_flows-"))
        run = subprocess.Popen([sys.executable, "-m", "sgdscale.cli", "train", *train, "-o", str(tmp / "measurement.json")])
        samplers = []
        try:
            for node, netns in enumerate(find_node_netns(workers + 1, before)):
                samplers.append(subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, __file__, "--sample",
                                                  str(tmp / f"samples-{node}.jsonl"), str(args.every_ms / 1e3),
                                                  str(node)]))
            code = run.wait()
        finally:
            if run.poll() is None:
                run.terminate()
                run.wait()
            for sampler in samplers:  # killed already with their namespaces, as a rule
                if sampler.poll() is None:
                    sampler.send_signal(signal.SIGTERM)
                sampler.wait()
        if code != 0:
            raise SystemExit(f"shard_flows: the run failed (exit {code})")
        out_dir.mkdir(parents=True, exist_ok=True)
        lines = [line for node in range(workers + 1) if (tmp / f"samples-{node}.jsonl").is_file()
                 for line in (tmp / f"samples-{node}.jsonl").read_text().splitlines()]
        rows = [json.loads(line) for line in lines if line.endswith("]")]
        used, windows = used_connections(rows, workers), sender_windows(rows, workers)
        write_samples(out_dir / "samples.json.gz", used, windows)
        measurement = json.loads((tmp / "measurement.json").read_text())
        (out_dir / "measurement.json").write_text(json.dumps(measurement))
        shutil.rmtree(tmp)
    fine = None
    if args.profile:
        from sgdscale.units import parse_bandwidth_bps
        replay = "--replay" in train or (measurement is not None and measurement["config"].get("workload") == "replay")
        fine = fine_series(args.profile, args.network_file, workers, parse_bandwidth_bps(args.bandwidth), args.strategy,
                           args.skip_s, args.every_ms / 1e3, replay)
    text = report(args.name, used, workers, args.link_Bps, args.skip_s, args.gap_ms / 1e3, command, measurement, fine,
                  windows)
    (HERE / "results" / f"shard_flows-{args.name}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
