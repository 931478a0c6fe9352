"""What a byte of transport costs in CPU on the emulated cluster, by link rate and tbf burst (root, torch).

The testbed shapes each node's link with tbf, whose burst is 0.25 ms of line rate up to
500 Mbit/s and 1 ms above (`sgdscale.runtime.testbed.TbfParams`). netbench's CPU cost per byte
(getrusage of the ranks, gloo's threads included) came out 2.7-4.0 ns at 400-500 Mbit/s and
0.4-0.5 ns at 700-900 Mbit/s on the held-out sets' network files: a small burst means many more
qdisc wake-ups and smaller TCP bursts, CPU that a real NIC does not spend. This runs netbench's
p2p op (2 nodes, 64 kB-16 MB) at each rate with each burst, interleaved by round, and reports the
fitted CPU per byte, the goodput, and how long a 64 kB message takes one way (half a round trip;
a burst larger than the message lets it through faster than the wire would).

    .venv/bin/python benchmarks/tbf_cpu.py [--rates 400Mbit,700Mbit] [--bursts-ms 0.25,1,rule]
        [--cpu-quota 0.35] [--rounds 2]

Raw output: benchmarks/results/tbf_cpu.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from sgdscale.runtime.netbench import bench_config, message_sizes, run_netbench
from sgdscale.runtime.testbed import Testbed
from sgdscale.units import parse_bandwidth_bps

OUT = Path(__file__).parent / "results"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="400Mbit,700Mbit")
    parser.add_argument("--bursts-ms", default="0.25,1,rule",
                        help="bursts in ms of line rate; 'rule': the testbed's default (TbfParams.for_rate)")
    parser.add_argument("--cpu-quota", type=float, default=0.35)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    rates = [parse_bandwidth_bps(r) for r in args.rates.split(",")]
    bursts = [None if b == "rule" else float(b) * 1e-3 for b in args.bursts_ms.split(",")]
    config = bench_config(message_sizes(64e3, 16e6, 7), repeats=5, warmup=1, ops=["p2p"])
    rows: dict[tuple[float, float], list[dict]] = {}
    began = time.time()
    for round_index in range(args.rounds):
        for rate in rates:
            for burst in bursts:
                with Testbed(2, rate, args.cpu_quota, pin_cpus=True, tbf_burst_s=burst) as bed:
                    network = run_netbench([2], config, placement=bed, bandwidth_hint_bps=rate)
                    burst_bytes = bed.tbf.burst_bytes
                row = {"burst_bytes": burst_bytes, "cpu_ns_per_byte": network.cpu.p2p_s_per_byte * 1e9,
                       "goodput_mbps": 8 / network.p2p.beta_s_per_byte / 1e6,
                       "small_ms": 1e3 * statistics.median(next(p.samples_s for p in network.points
                                                                  if p.op == "p2p" and p.bytes == min(config["sizes"])))}
                rows.setdefault((rate, burst), []).append(row)
                print(f"round {round_index + 1}: {rate / 1e6:.0f} Mbit/s, burst {burst_bytes / 1e3:.1f} kB: "
                      f"{row['cpu_ns_per_byte']:.2f} ns/B, {row['goodput_mbps']:.0f} Mbit/s, "
                      f"64 kB in {row['small_ms']:.2f} ms", flush=True)
    lines = ["# CPU per byte of transport on the emulated cluster, by rate and tbf burst", "",
             f"`benchmarks/tbf_cpu.py {' '.join(argv)}` ({time.time() - began:.0f} s; netbench p2p, 2 nodes at "
             f"{args.cpu_quota} cores, 64 kB-16 MB; CPU = the ranks' user + system time per byte sent or received).", "",
             "| rate | burst | CPU per byte, each round | goodput, each round | 64 kB one way (median), each round |",
             "|---:|---:|---|---|---|"]
    for (rate, burst), found in rows.items():
        cpu = ", ".join(f"{r['cpu_ns_per_byte']:.2f} ns" for r in found)
        goodput = ", ".join(f"{r['goodput_mbps']:.0f} Mbit/s" for r in found)
        one_mb = ", ".join(f"{r['small_ms']:.2f} ms" for r in found)
        what = "rule" if burst is None else f"{burst * 1e3:g} ms"
        lines.append(f"| {rate / 1e6:.0f} Mbit/s | {what} ({found[0]['burst_bytes'] / 1e3:.1f} kB) | {cpu} | {goodput} | "
                     f"{one_mb} |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tbf_cpu.json").write_text(json.dumps({"args": vars(args), "rows": [
        {"rate_bps": r, "burst_s": b, "runs": v} for (r, b), v in rows.items()]}, indent=1) + "\n")
    (OUT / "tbf_cpu.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
