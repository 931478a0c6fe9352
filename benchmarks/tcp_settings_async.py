"""Does the nodes' TCP stack set how fast async PS runs? The same replay case under three settings.

Async PS is measured 5-23% slower than fine predicts on deterministic replays (held-out sets 12 and
15), with pushes and pulls bunching more than in fine's timeline, and the server's outgoing
direction moving bytes at 73% of the link rate while busy (`results/async_investigation/`). The
testbed's nodes inherited this machine's TCP settings (until this benchmark; the testbed now sets
a loss-based control, `runtime/testbed.py`): BBR congestion control and
`tcp_slow_start_after_idle=1`. A worker's push or pull is a burst after idle, while the opposite
direction fills the shaped egress queue (tbf, up to 50 ms of line rate) that its ACKs wait in: so a
burst may restart slowly on an inflated round trip. This runs set 15's `replay-gpt2-b8-ps-async-ps1-w4-950Mbit`
(4 workers, one shard, 950 Mbit/s, 0.37 cores per node; measured 29.0 samples/s there, fine 35.7)
under the default settings, with Reno (loss-based, as CUBIC, which this machine does not allow in a
namespace), and with BBR but no slow start after idle, set in every
node's network namespace, interleaved over rounds.

Later (set 19, on Reno, where async replays ran 20-36% *faster* than fine predicts): does the
shaped queue's depth (tbf limit, 50 ms of line rate) or slow start after idle set it? A worker's
push starting while another's is under way meets a round trip inflated by that queue and ramps
up slowly, so the first flow keeps the link: settings `reno-noidle`, `reno-q2ms`, `reno-q2ms-noidle`.

    .venv/bin/python benchmarks/tcp_settings_async.py [--rounds 2] [--model gpt2] [--workers 4]
        [--strategy ps-async] [--settings default,reno,bbr] [--tag NAME]
Raw output: benchmarks/results/tcp_settings_async.md (other models or strategies: -MODEL-STRATEGY.md,
or -TAG.md with --tag).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
NO_IDLE_RESTART = {"net.ipv4.tcp_slow_start_after_idle": "0"}
SETTINGS = {  # key: (description, Testbed's tcp_congestion_control (None = the host's), extra sysctls in
    #              every node, tbf queue in seconds of line rate (None = the testbed's 50 ms))
    "default": ("default (bbr, slow start after idle)", None, {}, None),
    "reno": ("reno (loss-based; cubic is not allowed in a namespace here)", "reno", {}, None),
    "bbr": ("bbr, no slow start after idle", None, NO_IDLE_RESTART, None),
    "reno-noidle": ("reno, no slow start after idle", "reno", NO_IDLE_RESTART, None),
    "reno-q2ms": ("reno, tbf queue 2 ms of line rate", "reno", {}, 0.002),
    "reno-q2ms-noidle": ("reno, tbf queue 2 ms, no slow start after idle", "reno", NO_IDLE_RESTART, 0.002),
}


def main(argv: list[str]) -> int:
    from sgdscale.runtime.testbed import Testbed
    from sgdscale.runtime.train import replay_config, run_training

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--bandwidth-mbit", type=float, default=950)
    parser.add_argument("--quota", type=float, default=0.37)
    parser.add_argument("--strategy", default="ps-async")
    parser.add_argument("--settings", default="default,reno,bbr", help="which settings: " + ", ".join(SETTINGS))
    parser.add_argument("--tag", default=None, help="name of the raw output: results/tcp_settings_async-TAG.md")
    args = parser.parse_args(argv)
    chosen = {SETTINGS[key][0]: SETTINGS[key][1:] for key in args.settings.split(",")}
    measured: dict[str, list[float]] = {name: [] for name in chosen}
    for round_index in range(args.rounds):
        for name, (congestion, sysctls, limit_s) in chosen.items():
            servers = 1 if args.strategy.startswith("ps") else 0
            config = replay_config(args.model, "sleep", workers=args.workers, strategy=args.strategy,
                                   ps_count=servers, iterations=30, warmup=5,
                                   bandwidth_bps=args.bandwidth_mbit * 1e6, cpu_quota=args.quota)
            with Testbed(args.workers + servers, args.bandwidth_mbit * 1e6, args.quota, pin_cpus=True,
                         tcp_congestion_control=congestion, tbf_limit_s=limit_s) as testbed:
                for node in range(args.workers + servers):
                    for key, value in sysctls.items():
                        subprocess.run(["ip", "netns", "exec", testbed.netns(node), "sysctl", "-qw", f"{key}={value}"],
                                       check=True)
                result = run_training(config, placement=testbed, timeout_s=900)
            measured[name].append(result.throughput)
            print(f"round {round_index + 1}, {name}: {result.throughput:.1f} samples/s", flush=True)
    lines = [f"# {args.model} replay, {args.strategy}, {args.workers} workers, one shard, {args.bandwidth_mbit:g} Mbit/s, "
             f"{args.quota:g} cores per node: throughput under each TCP setting", "",
             "Generated by `benchmarks/tcp_settings_async.py " + " ".join(argv) + f"`. {args.rounds} interleaved rounds, "
             "30 measured steps each.", "", "| setting | samples/s, each round | median |", "|---|---|---:|"]
    for name, values in measured.items():
        lines.append(f"| {name} | " + ", ".join(f"{v:.1f}" for v in values) + f" | {statistics.median(values):.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.tag:
        suffix = f"-{args.tag}"
    else:
        suffix = "" if (args.model, args.strategy) == ("gpt2", "ps-async") else f"-{args.model}-{args.strategy}"
    (HERE / "results" / f"tcp_settings_async{suffix}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
