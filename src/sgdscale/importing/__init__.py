"""Profiles and network files from measurements other tools already made.

- `kineto`: a `torch.profiler` Chrome trace of a few training steps -> `sgdscale.profile/1`
  (with a `sgdscale.model-info/1` file naming the model's parameter tensors, `modelinfo`).
- `bcaffe`: B-Caffe per-tensor backward/communication logs -> `sgdscale.profile/1`, and OSU
  `MPI_Allreduce` latency tables -> `sgdscale.network/1`.
None of these import torch except `modelinfo.model_info_from_module`, which reads a live module.
"""
