"""Real data-parallel SGD on torch.distributed (gloo, CPU): the ground truth predictions are checked
against.

- `launch`: start one process per rank (locally, or inside emulated cluster nodes through a
  `Placement`), watch them, stop everything on a crash, a hang or Ctrl-C.
- `rank`: the per-process entry point (`python -m sgdscale.runtime.rank`), also usable under torchrun.
- `train`: `run_training(config)` -> Measurement; the rank-side `train_rank` dispatches to
- `ddp` (all-reduce: DDP buckets, or manual single / per-layer / per-tensor grouping) and
- `ps` (parameter server on gloo point-to-point, synchronous or asynchronous).
- `replay`: a module built from a profile (profiled parameter sizes, times and gradient order)
  that any strategy trains in place of a real model (`sgdscale train PROFILE --replay`).
- `measurement`: the `sgdscale.measurement/1` file format.

Only the rank-side modules (rank, worker, ddp, ps, replay) import torch at module level.
"""
