"""Cases for the flat-topology exactness test (shared by the recorder and the test)."""
from sgdscale.comm.network import AlphaBeta, BenchPoint, Network

def network():
    pts = []
    for n in (2, 4):
        for b, t in ((1000, 2e-4 * n), (100000, 1.2e-3 * n), (4000000, 0.04 * n), (16000000, 0.15 * n)):
            pts.append(BenchPoint(op="allreduce", workers=n, bytes=b, samples_s=[t], median_s=t))
    return Network(p2p=AlphaBeta(alpha_s=1.3e-4, beta_s_per_byte=8.7e-9),
                   allreduce={"2": AlphaBeta(alpha_s=2e-4, beta_s_per_byte=9e-9),
                              "4": AlphaBeta(alpha_s=5e-4, beta_s_per_byte=2.5e-8)}, points=pts)

# (name, profile, strategy kwargs, cluster kwargs, worker counts, network?)
CASES = [
    ("r50-ring-buckets", "resnet50", dict(kind="allreduce"), dict(bandwidth_bps=10e9, latency_s=20e-6), [1, 2, 8, 64], False),
    ("r50-tree-perlayer", "resnet50", dict(kind="allreduce", grouping="per-layer", algorithm="tree"), dict(bandwidth_bps=1e9, latency_s=50e-6), [2, 16], False),
    ("gpt2-hd-single", "gpt2", dict(kind="allreduce", grouping="single", algorithm="halving-doubling"), dict(bandwidth_bps=1e9), [4, 32], False),
    ("mlp-mgwfbp", "mlp", dict(kind="allreduce", grouping="mg-wfbp"), dict(bandwidth_bps=1e9, latency_s=1e-4), [2, 8], False),
    ("mlp-net", "mlp", dict(kind="allreduce"), dict(), [2, 4, 8], True),
    ("cnn-slowlink", "cnn", dict(kind="allreduce", grouping="per-tensor"), dict(workers=4, bandwidth_bps=1e9, slow_links=((2, 2e8),), compute_scale=(1, 1, 1.5, 1)), [4], False),
    ("mlp-pssync", "mlp", dict(kind="ps-sync", grouping="buckets"), dict(bandwidth_bps=1e9, ps_count=2), [1, 2, 4], False),
    ("cnn-pssync-net", "cnn", dict(kind="ps-sync"), dict(ps_count=1), [2, 4], True),
    ("mlp-psasync", "mlp", dict(kind="ps-async", grouping="buckets"), dict(bandwidth_bps=1e9, ps_count=1, ps_bandwidth_bps=2e9), [2, 4], False),
    ("cnn-pssync-slow", "cnn", dict(kind="ps-sync", grouping="per-layer"), dict(workers=3, bandwidth_bps=5e8, slow_links=((1, 1e8),)), [3], False),
]
