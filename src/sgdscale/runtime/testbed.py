"""An emulated cluster on one Linux machine: network namespaces, shaped links, CPU quotas.

Each node is a network namespace with one veth ("eth0", 10.200.0.<k+1>/24) plugged into a private
Linux bridge, a cgroup-v1 `cpu` group that caps its CPU time, a `cpuacct` group that counts the CPU
time it really received, and (with `pin_cpus`) a `cpuset` group that keeps it on its own cores. Both ends of every veth carry a
`tc tbf` qdisc at the node's rate: the namespace end shapes what the node sends, the bridge end
shapes what it receives, so each node has a full-duplex NIC of the given bandwidth and a shared
server NIC is a real bottleneck. Nothing outside the objects it creates is touched: the bridge has
no address, no host route or interface changes, addresses exist only inside our namespaces.

Why these choices (see docs/design.md "Real runs"):
- tbf, not netem: this kernel has no netem, so there is no added latency (add it in the app).
- CFS period 10 ms instead of the default 100 ms: a throttled process runs in short slices, so a
  step under a 45 % quota is stretched smoothly instead of running full speed then stalling 55 ms.
- Pinning (cpuset) besides the quota: without it the scheduler may stack two nodes on one core
  while the other idles, so a node receives less than its quota for a while; nodes are packed
  onto cores so no core is promised more than one core's worth of quota
  (`benchmarks/noise_sources.py` measures what it changes).
- A process joins its cgroups *before* `ip netns exec`, because `ip netns exec` mounts a fresh
  /sys in which our cgroup path may not be visible.
- Each shaper queues what waits in one FIFO (`link_queue="fifo"`, up to 50 ms of line rate), so a node's
  acknowledgements wait behind the data it sends. `link_queue="acks-first"` sends packets under 128
  bytes (pure acknowledgements) ahead of that queue, as flow-queueing hosts and shallow NIC queues do:
  an experiment (`benchmarks/push_window.py`), not the validated cluster.
- Every node's TCP congestion control is set (`tcp_congestion_control`), not inherited from the
  host: CUBIC, the Linux default, where the host allows it in a namespace, else Reno (always
  there; loss-based too). Namespaces start with the host's choice, on this machine BBR, and under
  BBR an async parameter server's bursts of pushes and pulls (each direction's ACKs queued behind
  the other's data in the shaped egress) ran 16% slower: set 15's gpt2 replay with 4 workers at
  950 Mbit/s gave 29.8 and 30.7 samples/s under BBR, 36.1 and 35.6 under Reno (the fine method
  predicts 35.7 from that set's network file), while sync PS (24.3 vs 24.5) and all-reduce did not
  move (`benchmarks/tcp_settings_async.py`). The models share links as TCP's loss-based control does.

Teardown is guaranteed: on leaving the `with` block (normally or by exception), on SIGINT and
SIGTERM, every process left in the node cgroups or namespaces is killed, then namespaces, veths,
bridge and cgroups are removed. An owner killed outright (SIGKILL) cannot run that: its reaper
process (runtime/reaper.py) removes the testbed when the owner's end of their pipe closes. Should
the reaper die too, the objects' names carry the owner's pid, and `sweep_leftovers()` removes
those of dead owners at every testbed start.

    with Testbed(nodes=2, bandwidth_bps=100e6, cpu_quota_cores=0.9) as bed:
        bed.run_on_node(0, ["python", "-c", "print('hi')"], timeout_s=10)
        print(bed.measure_bandwidth(0, 1))
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sgdscale.errors import UserError
from sgdscale.interrupts import raise_terminated
from sgdscale.runtime import reaper

CGROUP_CPU_ROOT = Path("/sys/fs/cgroup/cpu")
CGROUP_CPUACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
CGROUP_CPUSET_ROOT = Path("/sys/fs/cgroup/cpuset")
# Every controller a node may have a group in; the cpu group always exists, the others when mounted.
CGROUP_ROOTS = (CGROUP_CPU_ROOT, CGROUP_CPUACCT_ROOT, CGROUP_CPUSET_ROOT)
NAME_STEM = "sgs"  # every object we create starts with this, followed by the owner's pid
# What the shaped rates count besides payload: tbf counts a frame from its Ethernet header
# (sgdscale.comm.framing), so predictions from a nominal rate of this testbed use `--framing tc`.
LINK_FRAMING = "tc"
CFS_PERIOD_US = 10_000
MIN_QUOTA_US = 1_000  # the kernel refuses cfs quotas below 1 ms
NODE_IFNAME = "eth0"
SUBNET = "10.200.0"
MAX_NODES = 250
LINK_QUEUES = ("fifo", "acks-first")  # how a shaped link queues (Testbed's link_queue)
_PREFIX_RE = re.compile(rf"^({NAME_STEM}(\d+)[a-z])")
_instance_counter = itertools.count()


GSO_BURST_BYTES = 64 * 1024 + 8 * 1024  # a 64 KiB GSO packet with its per-frame headers, and margin
ALLOWED_CONGESTION = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


def default_congestion_control() -> str:
    """CUBIC (the Linux default) where the host lets a namespace choose it, else Reno (module doc)."""
    try:
        allowed = ALLOWED_CONGESTION.read_text().split()
    except OSError:
        allowed = []
    return "cubic" if "cubic" in allowed else "reno"


@dataclass(frozen=True)
class TbfParams:
    """tbf settings for one rate.

    burst: bytes the bucket lets through back-to-back. A message of M bytes then arrives after
    about (M - burst)/rate instead of M/rate, so a big burst hides the latency a real NIC has
    (it biases a fitted alpha by -burst/rate). A small burst needs many qdisc wake-ups: measured
    here, 0.25 ms of line rate keeps TCP bulk goodput at 94-95 % up to 500 Mbit/s (64 kB one-way
    5.30 ms vs 5.24 ms nominal at 100 Mbit/s), but at 1 Gbit/s a 32 KB burst drops it to 88 %
    while 1 ms of line rate (125 KB) gives 95.5 %. So: 0.25 ms of line rate up to 500 Mbit/s,
    1 ms above, and never less than one full GSO packet (`GSO_BURST_BYTES`): tbf cuts a packet
    bigger than its burst into frames in software, which made moving a byte cost 2.0-3.9 ns of CPU
    instead of 0.2-0.5 ns (benchmarks/tbf_cpu.py: 200, 400 and 700 Mbit/s, bursts of 6-50 kB
    against 74-100 kB, same goodput). A real NIC segments in hardware, so a node under a CPU quota paid
    for an artefact of the emulation: the parameter servers of held-out sets 1 and 6 (500 and
    400 Mbit/s) were CPU-bound on it.
    limit: bytes that may queue behind the bucket before drops: 50 ms of line rate (at least
    256 KiB) so TCP keeps the pipe full without loss, while a queue never adds more than ~50 ms.
    """

    rate_bps: float
    burst_bytes: int
    limit_bytes: int

    @classmethod
    def for_rate(cls, rate_bps: float, burst_s: float | None = None, limit_s: float | None = None) -> TbfParams:
        """The settings above; `burst_s` sets the burst instead (seconds of line rate, at least two
        frames; no GSO floor, so benchmarks/tbf_cpu.py can measure what the floor is for);
        `limit_s` the queue instead of 50 ms (benchmarks/tcp_settings_async.py)."""
        bytes_per_s = rate_bps / 8
        if burst_s is None:
            burst = max(GSO_BURST_BYTES, int(bytes_per_s * (0.25e-3 if rate_bps <= 500e6 else 1e-3)))
        else:
            burst = max(2 * 1514, int(bytes_per_s * burst_s))
        limit = max(256 * 1024, int(bytes_per_s * (0.05 if limit_s is None else limit_s))) + burst
        return cls(rate_bps=rate_bps, burst_bytes=burst, limit_bytes=limit)

    def tc_args(self) -> list[str]:
        return ["tbf", "rate", f"{int(self.rate_bps)}bit", "burst", str(self.burst_bytes),
                "limit", str(self.limit_bytes)]

    def acks_first_commands(self, dev: str) -> list[list[str]]:
        """`tc` arguments (after `tc [-n NS]`) that put this shaper on `dev` over two queues: packets under
        128 bytes (IPv4 total length: pure acknowledgements) first, the rest in a byte FIFO of the
        shaper's limit. An htb child of tbf whose classes never limit (10 Gbit/s) serves them in
        priority order."""
        return [["qdisc", "add", "dev", dev, "root", "handle", "1:", *self.tc_args()],
                ["qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "htb", "default", "20"],
                ["class", "add", "dev", dev, "parent", "10:", "classid", "10:10", "htb", "rate", "10gbit", "prio", "0"],
                ["class", "add", "dev", dev, "parent", "10:", "classid", "10:20", "htb", "rate", "10gbit", "prio", "1"],
                ["qdisc", "add", "dev", dev, "parent", "10:10", "pfifo", "limit", "1000"],
                ["qdisc", "add", "dev", dev, "parent", "10:20", "bfifo", "limit", str(self.limit_bytes)],
                ["filter", "add", "dev", dev, "parent", "10:", "protocol", "ip", "prio", "1", "u32",
                 "match", "u16", "0x0000", "0xff80", "at", "2", "flowid", "10:10"]]


@dataclass(frozen=True)
class Bandwidth:
    """One timed TCP transfer between two nodes."""

    nbytes: int
    seconds: float

    @property
    def bps(self) -> float:
        return self.nbytes * 8 / self.seconds


def _run(argv: Sequence[str], *, check: bool = True, what: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        if "Specified qdisc kind is unknown" in message or "qdisc kind" in message:
            raise UserError(f"the kernel has no tc 'tbf' qdisc (`{' '.join(argv)}` said: {message}); "
                            "the emulated cluster needs tbf (CONFIG_NET_SCH_TBF)")
        if "Unknown device type" in message or "not supported" in message.lower():
            raise UserError(f"the kernel lacks a network feature the emulated cluster needs "
                            f"(`{' '.join(argv)}` said: {message}); it needs network namespaces, veth and "
                            "bridge support")
        raise UserError(f"{what or 'building the emulated cluster'} failed: `{' '.join(argv)}` said: "
                        f"{message or f'exit status {proc.returncode}'}")
    return proc


def preflight() -> None:
    """Say clearly what is missing before creating anything: root, ip, tc, the cgroup cpu controller."""
    if os.geteuid() != 0:
        raise UserError("the emulated cluster needs root (network namespaces, tc, cgroups); run as root")
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2")):
        if shutil.which(tool) is None:
            raise UserError(f"`{tool}` is not installed; install {package} (e.g. apt-get install {package})")
    quota = CGROUP_CPU_ROOT / "cpu.cfs_quota_us"
    if not quota.exists():
        raise UserError(f"no cgroup-v1 cpu controller with CFS quotas at {CGROUP_CPU_ROOT} "
                        f"({quota} is missing); mount one with "
                        f"`mkdir -p {CGROUP_CPU_ROOT} && mount -t cgroup -o cpu cgroup {CGROUP_CPU_ROOT}`")
    if not Path("/var/run/netns").exists() and not os.access("/var/run", os.W_OK):
        raise UserError("cannot create network namespaces: /var/run/netns is missing and /var/run is not writable")


def _list_ours() -> dict[str, dict[str, list[str]]]:
    """Every namespace, link and cgroup named like ours, grouped by prefix."""
    found: dict[str, dict[str, list[str]]] = {}

    def add(kind: str, name: str) -> None:
        match = _PREFIX_RE.match(Path(name).name)
        if match:
            found.setdefault(match.group(1), {"netns": [], "links": [], "cgroups": []})[kind].append(name)

    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in netns.splitlines():
        if line.split():
            add("netns", line.split()[0])
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            add("links", parts[1].strip().split("@")[0])
    for root in CGROUP_ROOTS:
        if root.is_dir():
            for entry in root.iterdir():
                if entry.is_dir():
                    add("cgroups", str(entry))
    return found


def owned_by(pid: int) -> dict[str, list[str]]:
    """Namespaces, links and cgroups of every testbed process `pid` built (their names carry it),
    and nobody else's: what a check for leftovers of one run may count."""
    merged: dict[str, list[str]] = {"netns": [], "links": [], "cgroups": []}
    for prefix, objects in _list_ours().items():
        if int(_PREFIX_RE.match(prefix).group(2)) == pid:
            for kind, names in objects.items():
                merged[kind] += names
    return merged


def _cgroup_pids(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except (FileNotFoundError, ProcessLookupError, OSError):
        return []


def _netns_pids(netns: str) -> list[int]:
    proc = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True)
    return [int(x) for x in proc.stdout.split() if x.isdigit()]


def _kill_all(netns: list[str], cgroups: list[Path], timeout_s: float = 10.0) -> None:
    """SIGKILL every process in these cgroups and namespaces until none is left (or timeout)."""
    me = os.getpid()
    deadline = time.monotonic() + timeout_s
    while True:
        pids = {pid for group in cgroups for pid in _cgroup_pids(group)}
        pids.update(pid for ns in netns for pid in _netns_pids(ns))
        pids.discard(me)
        if not pids or time.monotonic() > deadline:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # Not reaped here: a zombie holds neither namespace nor cgroup, and reaping would steal the
        # exit status from whoever launched the process.
        time.sleep(0.02)


def _remove(netns: list[str], links: list[str], cgroups: list[Path]) -> list[str]:
    """Kill processes, then delete namespaces, links and cgroups; return what could not be removed."""
    _kill_all(netns, cgroups)
    left: list[str] = []
    for ns in netns:
        proc = subprocess.run(["ip", "netns", "delete", ns], capture_output=True, text=True)
        if proc.returncode != 0 and "No such file" not in proc.stderr:
            left.append(f"netns {ns}: {proc.stderr.strip()}")
    # Deleting a namespace destroys its veth ends (and so the host ends) asynchronously; veths first,
    # the bridge last.
    for link in sorted(links, key=lambda name: name.endswith("br")):
        proc = subprocess.run(["ip", "link", "delete", link], capture_output=True, text=True)
        if proc.returncode != 0 and "Cannot find device" not in proc.stderr:
            left.append(f"link {link}: {proc.stderr.strip()}")
    for group in cgroups:
        for attempt in range(100):
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as error:
                if error.errno != errno.EBUSY or attempt == 99:
                    left.append(f"cgroup {group}: {error.strerror}")
                    break
                _kill_all([], [group], timeout_s=0.5)
                time.sleep(0.05)
    return left


def sweep_leftovers(prefix: str | None = None, *, only_dead: bool = True) -> list[str]:
    """Remove namespaces, links, cgroups and processes left by crashed testbeds.

    With `prefix`, remove that testbed's objects (whatever its owner's state). Without, remove every
    testbed whose owner pid is dead (or every testbed, when `only_dead=False`). Returns the prefixes
    swept; raises UserError if something could not be removed.
    """
    swept: list[str] = []
    problems: list[str] = []
    for found_prefix, objects in sorted(_list_ours().items()):
        if prefix is not None and found_prefix != prefix:
            continue
        if prefix is None and only_dead:
            pid = int(_PREFIX_RE.match(found_prefix).group(2))
            if pid == os.getpid() or reaper.pid_alive(pid):
                continue
        problems += _remove(objects["netns"], objects["links"], [Path(g) for g in objects["cgroups"]])
        swept.append(found_prefix)
    if problems:
        raise UserError("could not remove some emulated-cluster leftovers: " + "; ".join(problems))
    return swept


def available_cpus() -> list[int]:
    """CPUs this machine lets a cpuset use (the root cpuset's list, e.g. "0-1")."""
    text = (CGROUP_CPUSET_ROOT / "cpuset.cpus").read_text().strip() if CGROUP_CPUSET_ROOT.is_dir() else ""
    if not text:
        raise UserError(f"pinning nodes to CPUs needs the cgroup-v1 cpuset controller at {CGROUP_CPUSET_ROOT}; "
                        "mount it or run without pinning")
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus += list(range(int(low), int(high or low) + 1))
    return cpus


def pack_cpus(quotas: Sequence[float | None], cpus: Sequence[int]) -> list[tuple[int, ...]]:
    """CPUs for each node: a node of quota q <= 1 gets the least-promised core (biggest quotas
    first, ties to the lowest CPU), so no core is promised more than it has whenever that is
    possible; a node without a quota or above one core gets every CPU."""
    promised = {cpu: 0.0 for cpu in cpus}
    sets: list[tuple[int, ...]] = [tuple(cpus)] * len(quotas)
    order = sorted(range(len(quotas)), key=lambda k: (-(quotas[k] or 0.0), k))
    for k in order:
        quota = quotas[k]
        if quota is None or quota > 1.0:
            continue
        cpu = min(cpus, key=lambda c: (promised[c], c))
        promised[cpu] += quota
        sets[k] = (cpu,)
    return sets


def machine_busy_s() -> float:
    """CPU seconds all cores have spent busy since boot (/proc/stat: everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _key_values(path: Path) -> dict[str, int]:
    """A cgroup stat file's `key value` lines."""
    return {key: int(value) for key, value in (line.split() for line in path.read_text().splitlines() if line)}


NETWORK_COUNTERS = ("segments_out", "retransmitted_segments", "timeouts", "dropped_out", "dropped_in")


def _tcp_counters(text: str) -> dict[str, int]:
    """TCP's OutSegs and RetransSegs (/proc/net/snmp) and TCPTimeouts (/proc/net/netstat) from their
    header-and-values line pairs; 0 for any the kernel lacks."""
    found: dict[str, int] = {}
    lines = text.splitlines()
    for header, values in zip(lines, lines[1:]):
        names, numbers = header.split(), values.split()
        if names[0] not in ("Tcp:", "TcpExt:") or numbers[:1] != names[:1] or not numbers[-1].lstrip("-").isdigit():
            continue  # not a header followed by its values
        found.update({f"{names[0]}{n}": int(v) for n, v in zip(names[1:], numbers[1:]) if v.lstrip("-").isdigit()})
    return {"segments_out": found.get("Tcp:OutSegs", 0), "retransmitted_segments": found.get("Tcp:RetransSegs", 0),
            "timeouts": found.get("TcpExt:TCPTimeouts", 0)}


def _qdisc_dropped(text: str, dev: str) -> int:
    """Packets the qdisc on `dev` dropped (`tc -s qdisc show` output; 0 if it has none there)."""
    match = re.search(rf"qdisc \S+ \S+ dev {re.escape(dev)} .*?\n\s*Sent \d+ bytes \d+ pkt \(dropped (\d+)", text)
    return int(match.group(1)) if match else 0


def _split_cores(before: list, after: list, node: int, wall_s: float) -> dict[str, float]:
    """A node's user and kernel cores between two snapshots (nothing where cpuacct is missing)."""
    if node >= len(before) or node >= len(after) or before[node] is None or after[node] is None or wall_s <= 0:
        return {}
    return {f"{key}_cores": (after[node].get(key, 0.0) - before[node].get(key, 0.0)) / wall_s
            for key in ("user", "system")}


def per_cpu_kernel_s() -> dict[int, dict[str, float]]:
    """Per CPU, seconds since boot spent in the kernel for tasks (`system`), in softirqs (`softirq`;
    /proc/stat, sampled at each tick) and taken by the hypervisor (`steal`: this machine is a VM whose
    host runs others beside it). The network's packet work runs in softirq on the CPU where a
    packet was sent (veth delivers on the sender's CPU)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name[3:].isdigit():
            out[int(name[3:])] = {"system": int(fields[2]) / tick, "softirq": int(fields[6]) / tick,
                                  "steal": int(fields[7]) / tick if len(fields) > 7 else 0.0}
    return out


@dataclass(frozen=True)
class CpuSnapshot:
    time_s: float
    usage_s: list[float | None]
    stats: list[dict[str, int]]
    machine_busy_s: float
    user_system_s: list[dict[str, float] | None] = field(default_factory=list)
    per_cpu_kernel_s: dict[int, dict[str, float]] = field(default_factory=dict)


class Testbed:
    """Emulated cluster of `nodes` namespaces; a context manager and a launcher Placement.

    bandwidth_bps: every node's NIC rate, each direction. cpu_quota_cores: CPU cores per node (one
    number for all nodes, or one per node), e.g. 0.45 with 4 nodes on a 2-core machine; None means
    no quota. The node cgroups together must not promise more cores than the machine has.
    pin_cpus: also give each node its own core(s) (see `pack_cpus`). cfs_period_us: the CFS
    bandwidth period (the quota is enforced per period; see the module docstring). tbf_burst_s:
    the token bucket's burst in seconds of line rate, tbf_limit_s its queue (default: `TbfParams.for_rate`'s
    rules). tcp_congestion_control: every node's TCP congestion control (default: `default_congestion_control`;
    None keeps the host's). link_queue: "fifo" (default) or "acks-first" (see the module docstring).
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        nodes: int,
        bandwidth_bps: float,
        cpu_quota_cores: float | Sequence[float] | None,
        name_prefix: str | None = None,
        *,
        pin_cpus: bool = False,
        cfs_period_us: int = CFS_PERIOD_US,
        tbf_burst_s: float | None = None,
        tbf_limit_s: float | None = None,
        tcp_congestion_control: str | None = "default",
        link_queue: str = "fifo",
    ) -> None:
        if link_queue not in LINK_QUEUES:
            raise UserError(f"unknown link queue {link_queue!r}; use one of {', '.join(LINK_QUEUES)}")
        if not 1 <= nodes <= MAX_NODES:
            raise UserError(f"an emulated cluster has 1 to {MAX_NODES} nodes, got {nodes}")
        if bandwidth_bps <= 0:
            raise UserError(f"node bandwidth must be positive, got {bandwidth_bps} bit/s")
        if cpu_quota_cores is None:
            quotas: list[float | None] = [None] * nodes
        elif isinstance(cpu_quota_cores, (int, float)):
            quotas = [float(cpu_quota_cores)] * nodes
        else:
            quotas = [float(q) for q in cpu_quota_cores]
            if len(quotas) != nodes:
                raise UserError(f"got {len(quotas)} CPU quotas for {nodes} nodes; give one per node or one for all")
        for quota in quotas:
            if quota is not None and quota * cfs_period_us < MIN_QUOTA_US:
                raise UserError(f"CPU quota {quota} cores is below the kernel's minimum "
                                f"{MIN_QUOTA_US / cfs_period_us} cores per node")
        cores = os.cpu_count() or 1
        total = sum(q for q in quotas if q is not None)
        if total > cores + 1e-9:
            raise UserError(f"the node CPU quotas add up to {total:g} cores but this machine has {cores}; "
                            f"use at most {cores / nodes:.3g} cores per node (--cpu-quota)")
        self.nodes = nodes
        self.bandwidth_bps = float(bandwidth_bps)
        self.cpu_quotas = quotas
        self.cfs_period_us = int(cfs_period_us)
        self.cpu_sets = pack_cpus(quotas, available_cpus()) if pin_cpus else None
        self.tbf = TbfParams.for_rate(self.bandwidth_bps, tbf_burst_s, tbf_limit_s)
        self.tcp_congestion_control = (default_congestion_control() if tcp_congestion_control == "default"
                                       else tcp_congestion_control)
        self.link_queue = link_queue
        if name_prefix is None:
            letter = "abcdefghijklmnopqrstuvwxyz"[next(_instance_counter) % 26]
            name_prefix = f"{NAME_STEM}{os.getpid()}{letter}"
        if not _PREFIX_RE.fullmatch(name_prefix) or len(name_prefix) > 11:
            raise UserError(f"testbed name prefix must look like '{NAME_STEM}<pid><letter>' (at most 11 "
                            f"characters, so interface names fit in 15), got '{name_prefix}'")
        self.prefix = name_prefix
        self.bridge = f"{name_prefix}br"
        self._built = False
        self._closed = False
        self._old_handlers: dict[int, object] = {}
        self._close_lock = threading.Lock()

    # --- names -------------------------------------------------------------------------------
    def netns(self, node: int) -> str:
        return f"{self.prefix}n{node}"

    def host_veth(self, node: int) -> str:
        return f"{self.prefix}v{node}"

    def cgroup(self, node: int) -> Path:
        """The node's `cpu` group (its quota)."""
        return CGROUP_CPU_ROOT / f"{self.prefix}-node{node}"

    def node_cgroups(self, node: int) -> list[Path]:
        """Every group the node's processes join: cpu (quota), cpuacct (usage), cpuset (pinning)."""
        groups = [self.cgroup(node)]
        if CGROUP_CPUACCT_ROOT.is_dir():
            groups.append(CGROUP_CPUACCT_ROOT / self.cgroup(node).name)
        if self.cpu_sets is not None:
            groups.append(CGROUP_CPUSET_ROOT / self.cgroup(node).name)
        return groups

    def address(self, node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    # --- Placement protocol ------------------------------------------------------------------
    def master_addr(self) -> str:
        return self.address(0)

    def socket_ifname(self) -> str | None:
        return NODE_IFNAME

    def wrap(self, rank: int, argv: list[str], env: dict[str, str]) -> list[str]:
        """argv that runs `argv` with extra `env` inside node `rank`'s cgroup, then its namespace.

        The shell writes its own pid into the cgroup and then execs (same pid all the way down),
        so the pid the launcher sees is the pid of the final program. Only the variables of `env`
        that differ from this process's environment go on the `env` command line (the rest is
        inherited), which keeps `ps` output readable.
        """
        if not 0 <= rank < self.nodes:
            raise UserError(f"rank {rank} has no node: this emulated cluster has {self.nodes} nodes "
                            "(one per rank: workers + parameter servers)")
        joins = " && ".join(f"echo $$ > {group / 'cgroup.procs'}" for group in self.node_cgroups(rank))
        script = f'{joins} && exec "$@"'
        env_args = [f"{key}={value}" for key, value in env.items() if os.environ.get(key) != value]
        return ["sh", "-c", script, "sh", "ip", "netns", "exec", self.netns(rank), "env", *env_args, *argv]

    # --- life cycle --------------------------------------------------------------------------
    def __enter__(self) -> Testbed:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Build the cluster; on any failure remove what was built and re-raise."""
        preflight()
        try:
            sweep_leftovers()  # what crashed earlier runs left; never a reason not to start
        except UserError as error:
            print(f"warning: {error}", file=sys.stderr)
        self._install_signal_handlers()
        reaper.register_testbed(self.prefix)  # removes it all if this process is killed outright
        self._built = True  # from here on close() must clean up, whatever happened
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        for node, quota in enumerate(self.cpu_quotas):
            group = self.cgroup(node)
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(self.cfs_period_us))
            (group / "cpu.cfs_quota_us").write_text(
                "-1" if quota is None else str(int(round(quota * self.cfs_period_us))))
            for extra in self.node_cgroups(node)[1:]:
                extra.mkdir()
                if extra.parent == CGROUP_CPUSET_ROOT:
                    assert self.cpu_sets is not None
                    # a cpuset accepts tasks only once both its cpus and memory nodes are set
                    (extra / "cpuset.mems").write_text((CGROUP_CPUSET_ROOT / "cpuset.mems").read_text())
                    (extra / "cpuset.cpus").write_text(",".join(map(str, self.cpu_sets[node])))
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "link", "set", self.bridge, "up"])
        for node in range(self.nodes):
            ns, veth = self.netns(node), self.host_veth(node)
            _run(["ip", "netns", "add", ns])
            if self.tcp_congestion_control is not None:
                _run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                      f"net.ipv4.tcp_congestion_control={self.tcp_congestion_control}"])
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", NODE_IFNAME, "netns", ns])
            _run(["ip", "link", "set", veth, "master", self.bridge])
            _run(["ip", "link", "set", veth, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", NODE_IFNAME])
            _run(["ip", "-n", ns, "link", "set", NODE_IFNAME, "up"])
            # toward the node (bridge -> node) and from the node (node -> bridge)
            if self.link_queue == "acks-first":
                for tc, dev in ((["tc"], veth), (["tc", "-n", ns], NODE_IFNAME)):
                    for command in self.tbf.acks_first_commands(dev):
                        _run([*tc, *command])
            else:
                _run(["tc", "qdisc", "add", "dev", veth, "root", *self.tbf.tc_args()])
                _run(["tc", "-n", ns, "qdisc", "add", "dev", NODE_IFNAME, "root", *self.tbf.tc_args()])

    def close(self) -> None:
        """Kill every node process and remove everything built; idempotent, signals held meanwhile."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            in_main = threading.current_thread() is threading.main_thread()
            if in_main:
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                if self._built:
                    problems = _remove([self.netns(k) for k in range(self.nodes)],
                                       [self.host_veth(k) for k in range(self.nodes)] + [self.bridge],
                                       [g for k in range(self.nodes) for g in self.node_cgroups(k)])
                    # whatever a half-built or interrupted run left under our prefix
                    leftovers = _list_ours().get(self.prefix)
                    if leftovers:
                        problems += _remove(leftovers["netns"], leftovers["links"],
                                            [Path(g) for g in leftovers["cgroups"]])
                    if problems:
                        print("warning: emulated-cluster teardown left: " + "; ".join(problems)
                              + " (run `sgdscale testbed cleanup`)", file=sys.stderr)
                    else:
                        reaper.release_testbed(self.prefix)
            finally:
                self._restore_signal_handlers()
                if in_main:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

    def _install_signal_handlers(self) -> None:
        """Turn SIGINT/SIGTERM into exceptions so the stack unwinds through close()."""
        if threading.current_thread() is not threading.main_thread():
            return

        self._old_handlers[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        self._old_handlers[signal.SIGTERM] = signal.signal(signal.SIGTERM, raise_terminated)

    def _restore_signal_handlers(self) -> None:
        for signum, old in self._old_handlers.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)
        self._old_handlers.clear()

    # --- using the nodes ---------------------------------------------------------------------
    def popen(self, node: int, argv: list[str], env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        """Start `argv` on `node` (its namespace and CPU quota)."""
        self._check_open()
        return subprocess.Popen(self.wrap(node, list(argv), env or {}), **kwargs)

    def run_on_node(self, node: int, argv: list[str], timeout_s: float, env: dict[str, str] | None = None,
                    ) -> subprocess.CompletedProcess:
        """Run one process on `node` and wait for it (e.g. profile a model under the node's quota).

        Output is captured as text; a run past `timeout_s` is killed and raises UserError.
        """
        proc = self.popen(node, argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise UserError(f"`{' '.join(argv)}` on node {node} ran past {timeout_s:g} s and was killed") from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def cpu_stats(self, node: int) -> dict[str, int]:
        """The node cgroup's cpu.stat (nr_periods, nr_throttled, throttled_time in ns)."""
        return _key_values(self.cgroup(node) / "cpu.stat")

    def cpu_usage_s(self, node: int) -> float | None:
        """CPU seconds the node's processes have received so far (cpuacct), None without cpuacct."""
        path = CGROUP_CPUACCT_ROOT / self.cgroup(node).name / "cpuacct.usage"
        return int(path.read_text()) / 1e9 if path.exists() else None

    def cpu_user_system_s(self, node: int) -> dict[str, float] | None:
        """CPU seconds the node's processes spent in user mode and in the kernel (cpuacct.stat, sampled
        at each tick; `system` includes the softirq work that interrupted them, which this kernel
        charges to the running task and its quota: no IRQ_TIME_ACCOUNTING). None without cpuacct."""
        path = CGROUP_CPUACCT_ROOT / self.cgroup(node).name / "cpuacct.stat"
        if not path.exists():
            return None
        tick = os.sysconf("SC_CLK_TCK")
        return {key: value / tick for key, value in _key_values(path).items()}

    def cpu_snapshot(self) -> CpuSnapshot:
        """Per-node CPU received and throttling, plus the whole machine's busy time, at one moment."""
        return CpuSnapshot(time.monotonic(), [self.cpu_usage_s(k) for k in range(self.nodes)],
                           [self.cpu_stats(k) for k in range(self.nodes)], machine_busy_s(),
                           [self.cpu_user_system_s(k) for k in range(self.nodes)], per_cpu_kernel_s())

    def cpu_report(self, before: CpuSnapshot, after: CpuSnapshot) -> dict[str, Any]:
        """What each node received between two snapshots against what its quota promised, and how
        much CPU the rest of the machine used meanwhile: the evidence a noisy run leaves."""
        wall_s = after.time_s - before.time_s
        nodes = []
        ours_s = 0.0
        for k in range(self.nodes):
            used = (None if after.usage_s[k] is None or before.usage_s[k] is None
                    else after.usage_s[k] - before.usage_s[k])
            ours_s += used or 0.0
            periods = after.stats[k].get("nr_periods", 0) - before.stats[k].get("nr_periods", 0)
            throttled = after.stats[k].get("nr_throttled", 0) - before.stats[k].get("nr_throttled", 0)
            nodes.append({
                "node": k,
                "quota_cores": self.cpu_quotas[k],
                "cpus": list(self.cpu_sets[k]) if self.cpu_sets else None,
                "received_cores": None if used is None or wall_s <= 0 else used / wall_s,
                "throttled_periods_fraction": throttled / periods if periods else 0.0,
                "throttled_s": (after.stats[k].get("throttled_time", 0)
                                - before.stats[k].get("throttled_time", 0)) / 1e9,
                **_split_cores(before.user_system_s, after.user_system_s, k, wall_s),
            })
        busy_s = after.machine_busy_s - before.machine_busy_s
        cpus = [{"cpu": cpu, **{f"{key}_cores": (now[key] - before.per_cpu_kernel_s[cpu][key]) / wall_s
                                for key in ("system", "softirq", "steal") if key in now}}
                for cpu, now in sorted(after.per_cpu_kernel_s.items())
                if cpu in before.per_cpu_kernel_s and wall_s > 0]
        return {"wall_s": wall_s, "cfs_period_us": self.cfs_period_us, "pinned": self.cpu_sets is not None,
                "tcp_congestion_control": self.tcp_congestion_control,
                **({} if self.link_queue == "fifo" else {"link_queue": self.link_queue}), "nodes": nodes,
                "other_load_cores": None if wall_s <= 0 else max(0.0, busy_s - ours_s) / wall_s,
                "cpus": cpus}

    def network_snapshot(self) -> list[dict[str, int]]:
        """Per node, counters since its namespace was made: TCP segments sent and retransmitted and
        retransmission timeouts (its /proc/net/snmp and netstat), and the packets each tbf dropped
        when its queue was full (out of the node: its own eth0's; into it: the bridge end's)."""
        self._check_open()
        host = _run(["tc", "-s", "qdisc", "show"], check=False).stdout
        out = []
        for node in range(self.nodes):
            inside = _run(["ip", "netns", "exec", self.netns(node), "sh", "-c",
                           "cat /proc/net/snmp /proc/net/netstat; tc -s qdisc show"],
                          check=False).stdout
            out.append({**_tcp_counters(inside), "dropped_out": _qdisc_dropped(inside, NODE_IFNAME),
                        "dropped_in": _qdisc_dropped(host, self.host_veth(node))})
        return out

    def network_report(self, before: list[dict[str, int]], after: list[dict[str, int]]) -> dict[str, Any]:
        """What each node's TCP and queues did between two snapshots, so a slow run can be checked for
        losses (on set 57's 10-worker async PS case they were not what made the slow runs slow: 82-216
        of 13 million segments retransmitted, no timeouts, the fewest in the slowest run;
        benchmarks/results/shard_link_use-gpt2-async-w10-680Mbit-losses.md)."""
        nodes = [{"node": k, **{key: now[key] - then[key] for key in now}}
                 for k, (then, now) in enumerate(zip(before, after))]
        totals = {key: sum(node[key] for node in nodes) for key in NETWORK_COUNTERS}
        return {"nodes": nodes, **totals}

    def measure_bandwidth(self, src: int, dst: int, nbytes: int | None = None, port: int = 5201,
                          timeout_s: float = 60.0) -> Bandwidth:
        """Time one TCP transfer of `nbytes` from node `src` to node `dst` (python sockets).

        The clock runs from after the connection is set up until the receiver acknowledges the
        last byte, so queued bytes count. Default size: about 1.5 s worth at the nominal rate.
        """
        self._check_open()
        if nbytes is None:
            nbytes = max(1 << 20, int(self.bandwidth_bps / 8 * 1.5))
        receiver = self.popen(dst, [sys.executable, "-c", _RECEIVER, str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            sender = self.run_on_node(src, [sys.executable, "-c", _SENDER, self.address(dst), str(port),
                                            str(nbytes)], timeout_s=timeout_s)
            if sender.returncode != 0:
                raise UserError(f"bandwidth test from node {src} to node {dst} failed: {sender.stderr.strip()}")
            result = json.loads(sender.stdout.strip().splitlines()[-1])
        finally:
            receiver.kill()
            receiver.communicate()
        return Bandwidth(nbytes=int(result["bytes"]), seconds=float(result["seconds"]))

    def _check_open(self) -> None:
        if not self._built or self._closed:
            raise UserError("the emulated cluster is not running (use it inside `with Testbed(...)`)")


# Bulk TCP transfer used by measure_bandwidth: the receiver drains and acknowledges the count.
_RECEIVER = r"""
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen(1)
conn, _ = srv.accept(); total = 0
buf = bytearray(1 << 20)
while True:
    n = conn.recv_into(buf)
    if not n: break
    total += n
conn.sendall(total.to_bytes(8, "big")); conn.close()
"""

_SENDER = r"""
import json, socket, sys, time
host, port, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start_at = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0  # a wall-clock instant to start sending at
deadline = time.monotonic() + 10
while True:
    try:
        sock = socket.create_connection((host, port), timeout=30); break
    except OSError:
        if time.monotonic() > deadline: raise
        time.sleep(0.02)
chunk = b"\0" * (1 << 20); left = nbytes
while time.time() < start_at:
    time.sleep(0.001)
start = time.perf_counter()
while left > 0:
    n = min(left, len(chunk)); sock.sendall(chunk[:n] if n < len(chunk) else chunk); left -= n
sock.shutdown(socket.SHUT_WR)
ack = b""
while len(ack) < 8:
    part = sock.recv(8 - len(ack))
    if not part: break
    ack += part
seconds = time.perf_counter() - start
print(json.dumps({"bytes": int.from_bytes(ack, "big"), "seconds": seconds, "end": time.time()}))
"""
