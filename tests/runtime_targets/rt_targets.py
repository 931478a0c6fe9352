"""Tiny rank targets for the launcher tests (found through PYTHONPATH, not installed)."""

import os
import time

import torch
import torch.distributed as dist


def allreduce_rank(ctx):
    value = torch.tensor([float(ctx.rank + 1)])
    dist.all_reduce(value)
    ctx.report_progress(1)
    return {"rank": ctx.rank, "sum": value.item(), "echo": ctx.config.get("echo")}


def spawn_child_then_fail(ctx):
    """Rank 1 starts a long-lived child (must be killed with its group), then fails."""
    if ctx.rank == 1:
        import subprocess

        child = subprocess.Popen(["sleep", "300"])
        open(ctx.config["pid_file"], "w").write(str(child.pid))
        time.sleep(0.5)
        raise ValueError("rank one broke on purpose")
    time.sleep(300)
    return {}


def env_rank(ctx):
    dist.barrier()
    return {"mark": os.environ.get("SGD_MARK"), "ifname": os.environ.get("GLOO_SOCKET_IFNAME")}
