"""What machine a measurement came from, recorded beside every profile and real run."""

from __future__ import annotations

import platform

# A host is quiet when the hypervisor takes under this many cores of it for other guests (steal).
# Measurements wait for it (netbench before measuring an unsteady launch again, validate before
# every run): in set 72 one round's three benchmark launches all ran while it took 0.43-0.60 cores
# (ping-pong spreads 10-24%, the kept one's link 18% slow), where the other rounds' saw 0.00-0.15.
QUIET_STEAL_CORES = 0.05


def cpu_model() -> str:
    """The host CPU's model name (from /proc/cpuinfo), or the platform's best guess."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_quota(cgroup_file: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> tuple[float, float] | None:
    """(cores, period seconds) of the CFS bandwidth quota on this process's cgroup (a container's CPU
    limit, an emulated node's quota), or None where there is none or it cannot be read. cgroup v1
    (cpu.cfs_quota_us, cpu.cfs_period_us) and v2 (cpu.max); parent groups' limits are not looked at."""
    from pathlib import Path

    try:
        lines = Path(cgroup_file).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        try:
            if controllers == "":  # cgroup v2
                quota, period = (Path(root) / path.lstrip("/") / "cpu.max").read_text().split()
            elif "cpu" in controllers.split(","):
                folder = Path(root) / "cpu" / path.lstrip("/")
                quota = (folder / "cpu.cfs_quota_us").read_text().strip()
                period = (folder / "cpu.cfs_period_us").read_text().strip()
            else:
                continue
        except (OSError, ValueError):
            continue
        if quota in ("max", "-1") or int(quota) <= 0:
            return None
        return int(quota) / int(period), int(period) / 1e6
    return None


def steal_s() -> float | None:
    """CPU seconds the hypervisor has taken from this VM for other guests since boot, all CPUs
    (/proc/stat's steal), or None where the kernel does not say."""
    import os

    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def wait_for_quiet_host(limit_cores: float, window_s: float = 2.0, max_wait_s: float = 60.0,
                        sleep=None) -> float | None:
    """Wait until the hypervisor takes under `limit_cores` over a window of `window_s`, at most
    `max_wait_s`; return the last window's steal in cores (None where steal cannot be read). On this
    VM a spell of steal (0.4-0.6 cores) outlasted three benchmark launches in a row (set 72)."""
    import time

    sleep = sleep or time.sleep
    waited = 0.0
    while True:
        before = steal_s()
        if before is None:
            return None
        sleep(window_s)
        taken = (steal_s() - before) / window_s
        waited += window_s
        if taken < limit_cores or waited >= max_wait_s:
            return taken
