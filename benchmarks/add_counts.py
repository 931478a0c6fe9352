"""Add counted flops and memory bytes to the shipped built-in profiles, keeping their measured times.

The built-in profiles (src/sgdscale/data/profiles/) were timed on a quiet machine; re-timing them
on the shared 2-core VM would make them worse. Counting does not need quiet: this script rebuilds
each model exactly as benchmarks/build_profiles.py did (same options, batch size and seed), finds
its layers the way the profiler does, counts one untimed step (sgdscale.profiling.counting) and
writes forward/backward flops and bytes per layer, optimizer flops and bytes, the bytes of the
module's buffers (`buffer_bytes`, which DDP broadcasts before every forward), `precision: fp32`
and `device_key: vm-cpu-1t` (the catalog entry of the measuring machine, 1 thread) into each
file. It refuses a model whose layers or tensors no longer match the file's, in name and order.

    .venv/bin/python benchmarks/add_counts.py            # all built-in models
    .venv/bin/python benchmarks/add_counts.py resnet50
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from build_profiles import CONFIGS, PROFILES  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", default=list(CONFIGS))
    args = parser.parse_args()

    import torch

    from sgdscale.profile import load_profile, profile_from_json, save_profile
    from sgdscale.profiling.counting import METHOD, count_step
    from sgdscale.profiling.profiler import LEARNING_RATE, MOMENTUM, _call, _discover_layers
    from sgdscale.profiling.zoo import build_workload

    torch.set_num_threads(1)
    for model in args.models:
        kwargs, batch, _warmup, _iterations = CONFIGS[model]
        path = PROFILES / f"{model}.json"
        data = json.loads(path.read_text())
        workload = build_workload(model, **kwargs)
        inputs, targets = workload.make_batch(batch)
        layers = _discover_layers(workload, inputs, targets, "")
        names = [layer.name for layer in layers]
        if names != [layer["name"] for layer in data["layers"]]:
            raise SystemExit(f"{model}: the model's layers no longer match {path}")
        tensors = [[name for name, _ in layer.params] for layer in layers]
        if tensors != [[t["name"] for t in layer["params"]] for layer in data["layers"]]:
            raise SystemExit(f"{model}: the model's parameter tensors no longer match {path}")
        params = [p for layer in layers for _, p in layer.params]
        param_layer = [i for i, layer in enumerate(layers) for _ in layer.params]
        optimizer = torch.optim.SGD(params, lr=LEARNING_RATE, momentum=MOMENTUM)
        optimizer.zero_grad(set_to_none=True)
        loss = workload.loss_fn(_call(workload.module, inputs), targets)  # warm the momentum buffers
        loss.backward()
        optimizer.step()

        def run_forward():
            x, y = workload.make_batch(batch)
            return workload.loss_fn(_call(workload.module, x), y)

        counts = count_step([layer.module for layer in layers], params, param_layer, run_forward, optimizer)
        for index, layer in enumerate(data["layers"]):
            layer["forward_flops"] = counts.forward[index].flops
            layer["backward_flops"] = counts.backward[index].flops
            layer["forward_bytes"] = counts.forward[index].bytes
            layer["backward_bytes"] = counts.backward[index].bytes
        data["step"]["optimizer_flops"] = counts.optimizer.flops
        data["step"]["optimizer_bytes"] = counts.optimizer.bytes
        data["buffer_bytes"] = sum(b.numel() * b.element_size() for b in workload.module.buffers())
        data["precision"] = "fp32"
        data["device_key"] = "vm-cpu-1t"
        data["provenance"]["counting"] = METHOD + " Added after timing by benchmarks/add_counts.py (times unchanged)."
        profile = profile_from_json(data, str(path))
        save_profile(profile, path)
        path.chmod(0o644)
        assert load_profile(path) == profile
        flops = sum(c.flops for c in counts.forward + counts.backward)
        nbytes = sum(c.bytes for c in counts.forward + counts.backward)
        print(f"{model:13s} {flops / 1e9:9.2f} GFLOP  {nbytes / 1e9:8.2f} GB per step  "
              f"({flops / nbytes:.1f} flop/byte)  step {profile.compute_s * 1e3:.1f} ms (unchanged)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
