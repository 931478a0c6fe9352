"""Clean up after an owner that was killed outright (SIGKILL, the OOM killer): no `finally` runs then.

An owner (the process that builds an emulated cluster or launches ranks) starts one small reaper
process, in its own session so signals aimed at the owner's process group miss it, and keeps the
write end of a pipe to it. The owner registers what it creates before creating it and releases it
once removed. When the pipe reaches end-of-file (the owner exited, however) the reaper removes
whatever is still registered: a testbed's namespaces, links, cgroups and node processes
(`testbed.sweep_leftovers(prefix)`) and temporary run directories. A normal exit leaves nothing
registered, so the reaper just exits.

Fallbacks when the reaper itself is gone (killed together with the owner): rank processes die with
their launcher (`set_parent_death_signal`, used by runtime/rank.py), every testbed start sweeps
testbeds of dead owners, and every launch removes run directories of dead owners
(`sweep_dead_run_dirs`), which carry the owner's pid in their name.

    python -m sgdscale.runtime.reaper OWNER_PID     (started by `register`; reads commands on stdin)
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

RUN_DIR_PREFIX = "sgdscale-run-"  # + owner pid + "-" + random: see run_dir_prefix()
_RUN_DIR_RE = re.compile(rf"^{RUN_DIR_PREFIX}(\d+)-")
PR_SET_PDEATHSIG = 1

_lock = threading.Lock()
_reaper: subprocess.Popen | None = None
_reaper_owner: int | None = None


def run_dir_prefix() -> str:
    """mkdtemp prefix of a run directory owned by this process."""
    return f"{RUN_DIR_PREFIX}{os.getpid()}-"


def _send(line: str) -> None:
    """Write one command to this process's reaper, starting it on first use; silently nothing if it
    cannot run (the fallbacks in the module docstring still apply)."""
    global _reaper, _reaper_owner
    with _lock:
        if _reaper is not None and _reaper_owner != os.getpid():  # a forked child: not its reaper
            _reaper = None
        if _reaper is None or _reaper.poll() is not None:
            try:
                _reaper = subprocess.Popen(
                    [sys.executable, "-m", "sgdscale.runtime.reaper", str(os.getpid())],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True, text=True, env={**os.environ, "PYTHONPATH": _package_root()},
                )
                _reaper_owner = os.getpid()
            except OSError:
                _reaper = None
                return
        try:
            _reaper.stdin.write(line + "\n")
            _reaper.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            _reaper = None


def _package_root() -> str:
    """The directory that holds the `sgdscale` package, first on the reaper's path (so it runs the
    same code as the owner), then whatever the owner had."""
    root = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH", "")
    return root + (os.pathsep + rest if rest else "")


def register_testbed(prefix: str) -> None:
    _send(f"+testbed {prefix}")


def release_testbed(prefix: str) -> None:
    _send(f"-testbed {prefix}")


def register_path(path: str | os.PathLike[str]) -> None:
    _send(f"+path {os.fspath(path)}")


def release_path(path: str | os.PathLike[str]) -> None:
    _send(f"-path {os.fspath(path)}")


def set_parent_death_signal(expected_parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux prctl), and exit now if
    the parent is already gone (the race between fork and prctl). No-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != expected_parent:
        os._exit(1)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_dead_run_dirs(directory: str | None = None) -> list[str]:
    """Remove run directories (in the temporary directory) whose owner process is dead."""
    base = Path(directory or tempfile.gettempdir())
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _RUN_DIR_RE.match(entry.name)
        if match and entry.is_dir() and not pid_alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(str(entry))
    return removed


def main() -> int:
    """The reaper: follow the owner's commands on stdin; at end-of-file remove what is left.
    (Its argument, the owner's pid, only names it in `ps`.)"""
    for signum in (signal.SIGINT, signal.SIGHUP):  # only end-of-file ends the watch
        signal.signal(signum, signal.SIG_IGN)
    testbeds: set[str] = set()
    paths: set[str] = set()
    for line in sys.stdin:
        command, _, arg = line.rstrip("\n").partition(" ")
        target = {"testbed": testbeds, "path": paths}.get(command[1:])
        if target is None or not arg:
            continue
        (target.add if command.startswith("+") else target.discard)(arg)
    # End-of-file: the owner exited (the pipe is never closed otherwise). Do not ask whether its pid
    # is alive: a killed owner stays a zombie until its parent waits for it.
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    if testbeds:
        from sgdscale.errors import UserError
        from sgdscale.runtime.testbed import sweep_leftovers

        for prefix in sorted(testbeds):
            try:
                sweep_leftovers(prefix)
            except UserError:
                pass  # the next testbed start sweeps dead owners again
    return 0


if __name__ == "__main__":
    sys.exit(main())
