"""What machine a measurement came from, recorded beside every profile and real run."""

from __future__ import annotations

import platform


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
