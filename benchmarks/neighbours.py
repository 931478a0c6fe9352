"""What do a node's neighbours on this 2-CPU VM do to its compute? (root, torch)

A profile times one node with the machine's other CPU idle; in a run, nodes share the two CPUs,
and a node computed 0.95x (cnn beside another worker) to 1.30x (beside the shard) of what it
computes alone (`benchmarks/results/core_layout/`). This profiles a model on node 0 (CPU 0, under
the quota) beside one kind of neighbour per setting, every setting once per round, rounds
interleaved (the order reversed every other round; `core_sharing.measure`). Settings (`--settings`):

- `alone`; `same core` / `other core`: another node (nodes 2 / 1, the same quota) profiling the
  same model in a loop, as `core_sharing.py` does;
- `spinners` suffix (`alone, spinners`, ...): besides, one busy loop per CPU at the lowest priority
  (SCHED_IDLE, pinned, outside the nodes' cgroups, so it gets only time no node wants), keeping
  both vCPUs from going idle: does a halting vCPU make a node slower?
- `same core, bursts python` / `same core, bursts memory` / `other core, bursts memory`: a
  process outside the nodes' cgroups (no quota, normal priority) pinned to that CPU, busy for
  `--burst-ms` then asleep for `--gap-ms`, in a loop: pure Python (the core's clock only) or
  numpy adds striding over a 64 MB array (a shard's receive-and-update kind of work, which evicts
  the node's caches). A shard beside a worker is such a neighbour.
- `same core, traffic out` / `same core, traffic in` / `other core, traffic`: a bulk TCP stream
  over the shaped links (`--bandwidth`, the testbed's own sender and receiver) from node 2 (CPU 0)
  to node 1 (CPU 1), from node 1 to node 2, or from node 1 to node 3 (both CPU 1): a shard's
  pulls and pushes. Where a packet's kernel work (veth, bridge, tbf, TCP) runs on CPU 0 it runs
  beside node 0, and is charged to whichever task it interrupts. With the suffix `, rps`, receive
  packet steering moves each packet's receive work to a CPU of the node it enters: the node's own
  CPU for packets into its namespace, the sender's CPU for packets onto the bridge (`rps_cpus` of
  both ends of every node's veth pair), as a real cluster's NICs keep each host's packets on its host.

The testbed has 4 nodes (0 and 2 on CPU 0, 1 and 3 on CPU 1); settings that use fewer leave the
rest idle (the first runs, spinners and bursts, had 3 nodes at 1 Gbit/s).

    .venv/bin/python benchmarks/neighbours.py [--model cnn] [--quota 0.38] [--rounds 4]
        [--settings "alone;same core;alone, spinners;..."] [--burst-ms 3] [--gap-ms 7]
        [--bandwidth 740Mbit] [--name NAME]
    .venv/bin/python benchmarks/neighbours.py --report NAME   (the table again, from the kept JSON)

Raw output: benchmarks/results/neighbours/NAME.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core_sharing import SETTINGS as CO_NODES
from core_sharing import measure

from sgdscale.runtime.testbed import _RECEIVER, _SENDER, NODE_IFNAME, Testbed
from sgdscale.units import parse_bandwidth_bps

OUT = Path(__file__).resolve().parent / "results" / "neighbours"
SPINNER_SETTINGS = ("alone", "same core", "other core", "alone, spinners", "same core, spinners",
                    "other core, spinners")
BURST_KINDS = ("python", "memory")
TRAFFIC = {"same core, traffic out": (2, 1), "same core, traffic in": (1, 2), "other core, traffic": (1, 3)}
STREAM_PORT = 5301
SPIN = ("import os; os.sched_setaffinity(0, {{{cpu}}}); "
        "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\nwhile True: pass")
BURST = """import os, time
import numpy as np
os.sched_setaffinity(0, {{{cpu}}})
memory = {memory}
array = np.zeros(16 * 1024 * 1024, dtype=np.float32)  # 64 MB
chunk, at = 256 * 1024, 0
while True:
    end = time.perf_counter() + {burst_s}
    while time.perf_counter() < end:
        if memory:
            array[at:at + chunk] += 1.0
            at = (at + chunk) % array.size
        else:
            sum(range(2000))
    time.sleep({gap_s})
"""


@dataclass(frozen=True)
class Setting:
    """What runs beside node 0 in one setting, parsed once from its name (module docstring)."""

    co_nodes: tuple[int, ...] = ()  # other nodes profiling the model in a loop
    spin: bool = False  # a SCHED_IDLE busy loop on every CPU
    burst: tuple[int, str] | None = None  # (CPU, kind) of a bursty process
    traffic: tuple[int, int] | None = None  # (sender, receiver) nodes of a bulk TCP stream
    rps: bool = False  # receive packet steering on every veth


def parse_setting(name: str) -> Setting:
    traffic = name.removesuffix(", rps")
    if traffic in TRAFFIC:
        return Setting(traffic=TRAFFIC[traffic], rps=name != traffic)
    parts = [part.strip() for part in name.split(",")]
    placement, extras = parts[0], parts[1:]
    bursts = [e.split()[1] for e in extras if e.startswith("bursts ")]
    if placement not in CO_NODES or any(e != "spinners" and not e.startswith("bursts ") for e in extras) \
            or any(kind not in BURST_KINDS for kind in bursts) or (bursts and placement == "alone"):
        raise SystemExit(f"unknown setting {name!r}: PLACEMENT[, spinners][, bursts python|memory] with PLACEMENT "
                         f"one of {', '.join(CO_NODES)} (bursts: same core or other core), or one of "
                         f"{', '.join(TRAFFIC)} [, rps]")
    spin = "spinners" in extras
    if bursts:  # the burst process is the neighbour, instead of a co-node
        return Setting(spin=spin, burst=(0 if placement == "same core" else 1, bursts[0]))
    return Setting(co_nodes=CO_NODES[placement], spin=spin)


def link_bytes(testbed: Testbed) -> int:
    """Bytes all nodes have sent so far (what their host-side veths received)."""
    return sum(int(Path(f"/sys/class/net/{testbed.host_veth(node)}/statistics/rx_bytes").read_text())
               for node in range(testbed.nodes))


def set_rps(testbed: Testbed, on: bool) -> None:
    """Receive packet steering on both ends of every node's veth pair: to the node's CPUs, or off."""
    for node, cpus in enumerate(testbed.cpu_sets):
        mask = format(sum(1 << cpu for cpu in cpus), "x") if on else "0"
        Path(f"/sys/class/net/{testbed.host_veth(node)}/queues/rx-0/rps_cpus").write_text(mask)
        subprocess.run(["ip", "netns", "exec", testbed.netns(node), "sh", "-c",
                        f"echo {mask} > /sys/class/net/{NODE_IFNAME}/queues/rx-0/rps_cpus"], check=True)


@contextmanager
def neighbours(testbed: Testbed, setting: Setting, burst_s: float, gap_s: float):
    """The setting's spinners, bursty process, stream and packet steering, for as long as the block runs
    (the co-nodes are `core_sharing.measure`'s)."""
    scripts = [SPIN.format(cpu=cpu) for cpu in sorted(os.sched_getaffinity(0))] if setting.spin else []
    if setting.burst:
        cpu, kind = setting.burst
        scripts.append(BURST.format(cpu=cpu, memory=kind == "memory", burst_s=burst_s, gap_s=gap_s))
    procs = [subprocess.Popen([sys.executable, "-c", script], start_new_session=True) for script in scripts]
    if setting.rps:
        set_rps(testbed, True)
    if setting.traffic:
        src, dst = setting.traffic
        procs.append(testbed.popen(dst, [sys.executable, "-c", _RECEIVER, str(STREAM_PORT)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        procs.append(testbed.popen(src, [sys.executable, "-c", _SENDER, testbed.address(dst), str(STREAM_PORT),
                                         str(1 << 40)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True))
    try:
        yield
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if setting.rps:
            set_rps(testbed, False)


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def report(data: dict) -> str:
    rows = data["rows"]
    base_name = next(iter(rows))
    base = {part: statistics.median(r[part] for r in rows[base_name]) for part in ("forward_s", "backward_s")}
    args = data["args"]
    lines = [f"# {args['model']} at {args['quota']:g} cores per node beside its neighbours "
             f"({args['rounds']} interleaved rounds)", "",
             f"Generated by `benchmarks/neighbours.py {' '.join(data['argv'])}`. Forward and backward: sums of the "
             f"profile's layers (20 iterations) on node 0, CPU 0. `vs {base_name}`: over the first setting. "
             "Spread: (max - min) / median over rounds; the machine's speed drifts between rounds, so the "
             "same-round ratio is the fairer comparison." + (
                 f" Bursts: {args['burst_ms']:g} ms busy, {args['gap_ms']:g} ms asleep." if any(
                     "bursts" in name for name in rows) else ""), "",
             f"| setting | forward ms: median (min-max) | vs {base_name} | spread | backward ms: median (min-max) "
             f"| vs {base_name} | spread | forward + backward over {base_name}'s in the same round: median (min-max) "
             "| sent over the links, Mbit/s (median) |", "|---|---|---:|---:|---|---:|---:|---|---:|"]
    for name, results in rows.items():
        cells = []
        for part in ("forward_s", "backward_s"):
            ms = [r[part] * 1e3 for r in results]
            cells += [f"{statistics.median(ms):.1f} ({min(ms):.1f}-{max(ms):.1f})",
                      f"{statistics.median(ms) / (base[part] * 1e3):.2f}x", f"{spread(ms):.1%}"]
        paired = [(r["forward_s"] + r["backward_s"]) / (b["forward_s"] + b["backward_s"])
                  for r, b in zip(results, rows[base_name])]
        cells.append(f"{statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f})")
        rates = [r["link_bytes"] * 8 / r["seconds"] / 1e6 for r in results if "link_bytes" in r]
        cells.append(f"{statistics.median(rates):.0f}" if rates else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--quota", type=float, default=0.38)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--settings", default=";".join(SPINNER_SETTINGS),
                        help="settings separated by ';' (module docstring); the first is the base")
    parser.add_argument("--burst-ms", type=float, default=3.0)
    parser.add_argument("--gap-ms", type=float, default=7.0)
    parser.add_argument("--bandwidth", default="740Mbit", help="the links' rate (traffic settings)")
    parser.add_argument("--name", default=None, help="output stem (default: MODEL-qQUOTA)")
    parser.add_argument("--report", metavar="NAME", help="print the table again from a kept JSON")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads((OUT / f"{args.report}.json").read_text())))
        return 0
    names = [name.strip() for name in args.settings.split(";") if name.strip()]
    settings = {name: parse_setting(name) for name in names}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp, Testbed(4, parse_bandwidth_bps(args.bandwidth), args.quota,
                                                               pin_cpus=True) as testbed:
        print(f"CPU sets per node: {testbed.cpu_sets}", flush=True)
        for round_index in range(args.rounds):
            for name in names if round_index % 2 == 0 else names[::-1]:
                setting = settings[name]
                moved_before, began = link_bytes(testbed), time.perf_counter()
                with neighbours(testbed, setting, args.burst_ms / 1e3, args.gap_ms / 1e3):
                    result = measure(testbed, args.model, setting.co_nodes, Path(tmp))
                rows[name].append({**result, "link_bytes": link_bytes(testbed) - moved_before,
                                   "seconds": time.perf_counter() - began})
                print(f"round {round_index + 1} {name:28s} forward {result['forward_s'] * 1e3:7.1f} ms, "
                      f"backward {result['backward_s'] * 1e3:7.1f} ms, links "
                      f"{rows[name][-1]['link_bytes'] * 8 / rows[name][-1]['seconds'] / 1e6:.0f} Mbit/s", flush=True)
    data = {"args": vars(args), "argv": argv, "rows": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"{args.model}-q{args.quota:g}"
    (OUT / f"{stem}.json").write_text(json.dumps(data, indent=1) + "\n")
    text = report(data)
    (OUT / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
