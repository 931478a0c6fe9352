"""What fills the shard's link in fine's one-shard async PS: mechanisms switched on together. (no runs)

`shard_flows.py` measured three async PS runs on the wire: set 80's real gpt2 and set 78's resnet50
replay keep the shard's link 90-94% busy both ways, two workers pushing at a time at about half the
link each; fine keeps it 77-80% busy with three. Set 78's bert replay, which fine predicts within 1%,
is 79-80% busy in the run too. This re-predicts the three kept runs with fine and, one at a time and
together, the mechanisms the measurements point at:
- "turns passed on": a shard's replies take turns (a newcomer yields to the replies already
  leaving, and takes the link over when they end: `sgdscale.fine.links.INCUMBENCY_PASSES_ON`,
  measured with plain TCP by `incumbent_handover.py`);
- "pushes at full rate while replying": no coupling of the shard's two directions for async PS
  (on the wire the gpt2 run's pushes and replies each used 94% of the link at once;
  `sgdscale.comm.sharing.receive_share_while_sending`);
- "the runs' compute": real compute only, every layer's forward and backward scaled to the run's
  median forward computing time and backward over the profile's (`ps_compute_parts.py`'s ratios, from
  the kept measurement), with no CPU charges (interference and per-message CPU), which that speed
  already holds.
Each row: samples/s against the run's, and the shard's link use each way as `shard_flows.py` reads
it (20 ms windows).

    .venv/bin/python benchmarks/async_fill_variants.py [--output async_fill_variants]

Raw output: benchmarks/results/<output>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from unittest import mock

import shard_flows
from ps_compute_parts import parts_of
from repredict_sets import HERE

CASES = [  # (kept shard_flows run, its network file, the profile predicted from, workers, nominal rate)
    ("gpt2-async-w5-660Mbit", "accuracy-heldout80/networks/660Mbit-q0.32-n5-6.json",
     "accuracy-heldout80/profiles/gpt2-b4-s64-layers2-hidden128-vocab2048-q0.32.json", 5, 660e6),
    ("resnet50-replay-async-w4-600Mbit", "accuracy-heldout78/networks/600Mbit-q0.25-n4-5.json",
     "accuracy-heldout78/profiles/replay-resnet50-b16.json", 4, 600e6),
    ("bert-replay-async-w5-600Mbit", "accuracy-heldout78/networks/600Mbit-q0.25-n5-6.json",
     "accuracy-heldout78/profiles/replay-bert-b8.json", 5, 600e6),
]
NO_CPU = {"server_cpu_s_per_byte": 0.0, "server_cpu_s_per_message": 0.0, "worker_cpu_s_per_message": 0.0,
          "interference": None}


def runs_compute(measurement: dict, profile) -> tuple[float, float]:
    """(forward, backward) factors: the run's median forward computing time (forward less its waits) and
    backward per iteration over the profile's (`ps_compute_parts.parts_of`)."""
    backward_s, forward_s, _ = parts_of(measurement)
    return forward_s / profile.forward_s, backward_s / profile.backward_s


def scaled_profiles(forward: float, backward: float):
    import sgdscale.profile as profile_module
    load = profile_module.load_profile

    def scale(xs, f):
        return None if xs is None else [x * f for x in xs]

    def scaled(path):
        profile = load(path)
        return profile.with_layers([layer.model_copy(update={
            "forward_s": layer.forward_s * forward, "backward_s": layer.backward_s * backward,
            "forward_samples_s": scale(layer.forward_samples_s, forward),
            "backward_samples_s": scale(layer.backward_samples_s, backward)}) for layer in profile.layers])

    return mock.patch.object(profile_module, "load_profile", scaled)


def without_cpu():
    from sgdscale.comm import CommModel
    original = CommModel.from_network.__func__

    def from_network(cls, network, *args, **kwargs):
        return dataclasses.replace(original(cls, network, *args, **kwargs), **NO_CPU)

    return mock.patch.object(CommModel, "from_network", classmethod(from_network))


def turns_passed_on():
    import sgdscale.fine.links as links
    return mock.patch.object(links, "INCUMBENCY_PASSES_ON", True)


def full_rate_pushes():
    import sgdscale.fine.ps as fine_ps
    return mock.patch.object(fine_ps, "receive_share_while_sending", lambda sync: 1.0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="async_fill_variants")
    args = parser.parse_args(argv)
    from sgdscale.profile import load_profile

    variants = [("as the model stands", False, False, False), ("turns passed on", True, False, False),
                ("pushes at full rate while replying", False, True, False), ("the runs' compute", False, False, True),
                ("turns + full-rate pushes", True, True, False), ("turns + the runs' compute", True, False, True),
                ("full-rate pushes + the runs' compute", False, True, True), ("all three", True, True, True)]
    lines = ["# Filling the shard's link in fine's one-shard async PS: mechanisms together", "",
             f"Generated by `benchmarks/async_fill_variants.py{' ' + ' '.join(argv) if argv else ''}`. Per kept "
             "`shard_flows.py` run: fine's samples/s (error against the run) and the shard's link use, pushes / "
             "pulls, read as `shard_flows.py` reads the run. \"The runs' compute\" applies to real compute only "
             "(a replay spends its profile); the factors are the run's forward and backward over the profile's.", "",
             "| case | run | variant | samples/s | error | link use (pushes / pulls) |", "|---|---|---|---:|---:|---|"]
    for name, network, profile_path, workers, rate_bps in CASES:
        folder = HERE / "results" / f"shard_flows-{name}"
        measurement = json.loads((folder / "measurement.json").read_text())
        used = shard_flows.read_samples(folder / "samples.json.gz")
        link_Bps = 1.0 / json.loads((HERE / "results" / network).read_text())["p2p"]["beta_s_per_byte"]
        times, pulls, pushes = shard_flows.series(used, workers, 5.0)
        measured = measurement["throughput"]
        replay = measurement["config"].get("workload") == "replay"
        factors = (1.0, 1.0) if replay else runs_compute(measurement, load_profile(str(HERE / "results" / profile_path)))
        run = (f"{measured:.1f}/s, link {shard_flows.link_use(times, pushes, link_Bps):.0%} / "
               f"{shard_flows.link_use(times, pulls, link_Bps):.0%}"
               + ("" if replay else f"; forward x{factors[0]:.2f}, backward x{factors[1]:.2f}"))
        for label, turns, full_rate, compute in variants:
            if compute and replay:
                continue
            with contextlib.ExitStack() as stack:
                if turns:
                    stack.enter_context(turns_passed_on())
                if full_rate:
                    stack.enter_context(full_rate_pushes())
                if compute:
                    stack.enter_context(scaled_profiles(*factors))
                    stack.enter_context(without_cpu())
                t, pl, pu, throughput = shard_flows.fine_series(str(HERE / "results" / profile_path),
                                                                str(HERE / "results" / network), workers, rate_bps,
                                                                "ps-async", 5.0, 0.002, replay)
            lines.append(f"| {name} | {run} | {label} | {throughput:.1f} | {throughput / measured - 1:+.1%} | "
                         f"{shard_flows.link_use(t, pu, link_Bps):.0%} / {shard_flows.link_use(t, pl, link_Bps):.0%} |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    (HERE / "results" / f"{args.output}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
