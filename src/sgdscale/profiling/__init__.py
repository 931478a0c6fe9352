"""Single-node profiling with real PyTorch: the model zoo (`zoo`) and the per-layer profiler
(`profiler`). Import the submodules directly; importing this package does not import torch."""
