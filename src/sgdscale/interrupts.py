"""Ctrl-C and SIGTERM: unwind through every cleanup, and never while torch initialises.

SIGINT raises KeyboardInterrupt (Python's default) and SIGTERM raises `Terminated` where they
land, so `finally` blocks (testbed teardown, killing ranks) run and the CLI ends with one line.
An exception raised while torch's C++ initialisation is running Python code cannot unwind: pybind11
turns it into std::terminate and the process aborts (SIGABRT, a C++ stack on stderr; found by
benchmarks/faults.py, benchmarks/results/faults-found/). So commands that need torch import it first
with both signals held (`preload_torch`); one that arrives meanwhile is delivered right after.
"""

from __future__ import annotations

import signal
import sys
import threading

HELD = {signal.SIGINT, signal.SIGTERM}


class Terminated(SystemExit):
    """SIGTERM, raised where it lands so every `finally` runs.

    A SystemExit with status 143 (128 + SIGTERM): a script that does not catch it ends as the
    default action would, without a traceback; the CLI catches it and says "terminated"."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def raise_terminated(signum: int, frame: object) -> None:
    """A SIGTERM handler: raise Terminated."""
    raise Terminated()


def preload_torch() -> None:
    """Import torch (if installed and not yet imported) with SIGINT and SIGTERM held."""
    if "torch" in sys.modules or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        import torch  # noqa: F401
    except ImportError:
        pass  # the command says what is missing when it needs it
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
