"""A profile with the same bytes and times as another but its layers merged into few tensors.

For replay experiments that separate the number of messages from the bytes and the timing: e.g.
does mobilenet_v2 (158 tensors, 14 MB) keep its async workers pushing together because of its many
small messages? Consecutive layers are merged into `--groups` layers of about equal bytes; each
merged layer has one parameter tensor holding all their bytes, their summed forward and backward
times, and becomes ready when the last of them did (`grad_ready_s`, the latest).

    .venv/bin/python benchmarks/merge_profile_tensors.py PROFILE --groups 16 -o OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys


def merge(profile: dict, groups: int) -> dict:
    layers = profile["layers"]
    total = sum(p["bytes"] for layer in layers for p in layer["params"])
    merged, current, size = [], [], 0.0
    for index, layer in enumerate(layers):
        current.append(layer)
        size += sum(p["bytes"] for p in layer["params"])
        last = index == len(layers) - 1
        if last or (size >= total / groups and len(merged) < groups - 1):
            params = [p for x in current for p in x["params"]]
            numel = sum(p["numel"] for p in params)
            merged.append({
                "name": f"merged.{len(merged)}",
                "forward_s": sum(x["forward_s"] for x in current),
                "backward_s": sum(x["backward_s"] for x in current),
                "params": [{"name": f"merged.{len(merged)}.weight", "numel": numel,
                            "bytes": sum(p["bytes"] for p in params),
                            "grad_ready_s": max(p["grad_ready_s"] for p in params)}],
            })
            current, size = [], 0.0
    out = {k: v for k, v in profile.items() if k != "layers"}
    out["layers"] = merged
    out["model"] = f"{profile['model']}-merged{len(merged)}"
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    profile = json.loads(open(args.profile).read())
    merged = merge(profile, args.groups)
    with open(args.output, "w") as out:
        json.dump(merged, out, indent=1)
    print(f"{len(profile['layers'])} layers -> {len(merged['layers'])}, "
          f"{sum(p['bytes'] for x in merged['layers'] for p in x['params']) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
