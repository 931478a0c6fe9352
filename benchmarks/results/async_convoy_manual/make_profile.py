import json, sys
tensor_mb = float(sys.argv[1]); layers = int(sys.argv[2]); layer_ms = float(sys.argv[3])
numel = int(tensor_mb * 1e6 / 4)
prof = {"schema": "sgdscale.profile/1", "model": f"synthetic-{layers}x{tensor_mb:g}MB", "batch_size": 8,
        "device": "synthetic (replay experiment)", "provenance": {"how": "synthetic: equal layers, for the async-PS convoy experiment"},
        "layers": [{"name": f"layer{i}", "forward_s": layer_ms / 1e3, "backward_s": layer_ms / 1e3,
                    "params": [{"name": f"layer{i}.weight", "numel": numel, "bytes": numel * 4}]} for i in range(layers)],
        "step": {"data_s": 0.0, "h2d_s": 0.0, "optimizer_s": 0.0},
        "iteration_s": {"mean": 2 * layers * layer_ms / 1e3, "p50": 2 * layers * layer_ms / 1e3, "p95": 2 * layers * layer_ms / 1e3}}
json.dump(prof, open(sys.argv[4], "w"), indent=1)
