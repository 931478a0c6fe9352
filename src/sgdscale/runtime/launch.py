"""Start `world_size` rank processes, watch them, and stop all of them whatever happens.

Each rank runs `python -m sgdscale.runtime.rank --target module:function ...` in its own process
group (so a rank's children die with it), rendezvousing over `tcp://ADDR:PORT`. Without a
placement the ranks are local processes on 127.0.0.1; with one (the emulated cluster,
`runtime/testbed.py`) each rank's argv is wrapped to run inside its node's namespace and cgroup.

Failures a user can act on become `UserError`s: a rank that exits non-zero (message names the rank
and quotes the end of its stderr), ranks that do not finish within the timeout (message names
them), a port already in use. In every case, also on Ctrl-C, all process groups are killed and the
temporary directory is removed before returning. If the launcher itself is killed outright
(SIGKILL), the ranks die with it (parent-death signal) and its reaper removes the temporary
directory (runtime/reaper.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from sgdscale.errors import UserError
from sgdscale.interrupts import raise_terminated
from sgdscale.runtime import reaper

POLL_S = 0.05
# After the first failure, wait this long for the other ranks' exits so the report can tell the
# rank that failed first from the ranks that merely lost their peer.
FAILURE_GRACE_S = 1.0
KILL_GRACE_S = 2.0
STDERR_TAIL_LINES = 12
LAUNCHER_PID_ENV = "SGDSCALE_LAUNCHER_PID"

# Errors a rank reports when *another* rank died: secondary, not the cause.
_PEER_LOSS = re.compile(
    r"Connection closed by peer|Connection reset|ECONNRESET|Broken pipe|EPIPE|"
    r"Socket closed|Timed out waiting|connection refused|Read error|peer.*closed",
    re.IGNORECASE,
)


@runtime_checkable
class Placement(Protocol):
    """Where ranks run: implemented by the emulated cluster (runtime/testbed.py)."""

    def master_addr(self) -> str:
        """Address rank 0 listens on (reachable from every node)."""
        ...

    def wrap(self, rank: int, argv: list[str], env: dict[str, str]) -> list[str]:
        """The argv that runs `argv` inside node `rank`'s namespace and cgroup."""
        ...

    def socket_ifname(self) -> str | None:
        """GLOO_SOCKET_IFNAME inside the nodes (None: let gloo choose)."""
        ...


@dataclass
class RankOutcome:
    rank: int
    returncode: int | None
    result: Any = None
    stderr_tail: str = ""


@dataclass
class LaunchResult:
    """What every rank's target returned (JSON), by rank, and how long the whole run took."""

    results: list[Any]
    wall_s: float
    stderr_tails: list[str] = field(default_factory=list)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_port_free(port: int, host: str = "127.0.0.1") -> None:
    if not 1 <= port <= 65535:
        raise UserError(f"port {port} is not a TCP port (use 1-65535, or leave it out to pick a free one)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as error:
            raise UserError(
                f"port {port} on {host} is already in use ({error.strerror}); choose another port "
                "or leave --port out to pick a free one automatically"
            ) from None


def _tail(path: Path, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def _kill_all(procs: Sequence[subprocess.Popen]) -> None:
    """SIGTERM every rank's process group, then SIGKILL whatever is left; reap all."""
    alive = [p for p in procs if p.poll() is None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            try:
                os.killpg(proc.pid, sig)  # the group: also children the rank (or a wrapper) started
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + KILL_GRACE_S
        while alive and time.monotonic() < deadline:
            alive = [p for p in alive if p.poll() is None]
            if alive:
                time.sleep(POLL_S)
        if not alive:
            break
    for proc in procs:
        try:
            proc.wait(timeout=KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            pass


def read_progress(run_dir: Path, world_size: int) -> list[int]:
    """Iterations each rank reported as done so far (0 where none yet): each rank's 8-byte
    native-order counter (runtime/rank.py, ProgressCounter)."""
    done = []
    for rank in range(world_size):
        try:
            data = (run_dir / f"progress-{rank}").read_bytes()
        except OSError:
            data = b""
        done.append(int.from_bytes(data, sys.byteorder, signed=True) if len(data) == 8 else 0)
    return done


def launch(
    target: str,
    config: dict[str, Any],
    world_size: int,
    *,
    placement: Placement | None = None,
    port: int | None = None,
    timeout_s: float = 300.0,
    on_progress: Callable[[list[int]], None] | None = None,
    on_spawn: Callable[[list[int]], None] | None = None,
    env: dict[str, str] | None = None,
    threads: int = 1,
    python: str = sys.executable,
) -> LaunchResult:
    """Run `target` ("module:function") on `world_size` ranks with `config`; return each rank's result.

    The target is called as `function(ctx)` with a `RankContext` (rank, world size, config, progress
    reporting) after the gloo process group is initialised; its return value must be JSON-able.
    `on_progress` gets the per-rank iteration counts as they change; `on_spawn` the rank pids.
    Raises UserError if a rank fails, the run exceeds `timeout_s`, or `port` is taken.
    """
    if world_size < 1:
        raise UserError(f"world size must be at least 1, got {world_size}")
    if timeout_s <= 0:
        raise UserError(f"timeout must be positive, got {timeout_s} s")
    if placement is None:
        addr = "127.0.0.1"
        if port is None:
            port = free_port(addr)
        else:
            check_port_free(port, addr)
        ifname = None
    else:
        addr = placement.master_addr()
        port = port or free_port()  # a fresh namespace has all ports free; any unused number works
        ifname = placement.socket_ifname()

    reaper.sweep_dead_run_dirs()  # what launchers killed outright (and their reapers) left
    run_dir = Path(tempfile.mkdtemp(prefix=reaper.run_dir_prefix()))
    reaper.register_path(run_dir)  # removed by the reaper if this process is killed outright
    procs: list[subprocess.Popen] = []
    handles = []
    start = time.monotonic()
    previous_sigterm = _sigterm_as_interrupt()
    try:
        (run_dir / "config.json").write_text(json.dumps(config))
        base_env = dict(os.environ)
        base_env.update(env or {})
        base_env.setdefault("OMP_NUM_THREADS", str(threads))
        base_env.setdefault("MKL_NUM_THREADS", str(threads))
        base_env["PYTHONUNBUFFERED"] = "1"
        base_env[LAUNCHER_PID_ENV] = str(os.getpid())  # ranks die with this process (runtime/rank.py)
        if ifname:
            base_env["GLOO_SOCKET_IFNAME"] = ifname
        for rank in range(world_size):
            argv = [
                python, "-m", "sgdscale.runtime.rank",
                "--target", target,
                "--config", str(run_dir / "config.json"),
                "--out", str(run_dir),
                "--rank", str(rank),
                "--world-size", str(world_size),
                "--init-method", f"tcp://{addr}:{port}",
                "--threads", str(threads),
                "--timeout-s", str(timeout_s),
            ]
            rank_env = dict(base_env)
            if placement is not None:
                argv = placement.wrap(rank, argv, rank_env)
            stdout = open(run_dir / f"stdout-{rank}", "wb")
            stderr = open(run_dir / f"stderr-{rank}", "wb")
            handles += [stdout, stderr]
            try:
                procs.append(
                    subprocess.Popen(
                        argv, env=rank_env, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                        start_new_session=True,  # own process group: killpg reaches the rank's children
                    )
                )
            except OSError as error:
                raise UserError(f"cannot start rank {rank} ({argv[0]}): {error.strerror or error}") from None
        if on_spawn is not None:
            on_spawn([p.pid for p in procs])
        _watch(procs, run_dir, start, timeout_s, on_progress)
        results = []
        for rank in range(world_size):
            path = run_dir / f"result-{rank}.json"
            if not path.exists():
                raise UserError(
                    f"rank {rank} exited without writing its result; its last output:\n"
                    + (_tail(run_dir / f"stderr-{rank}") or "(nothing on stderr)")
                )
            results.append(json.loads(path.read_text()))
        tails = [_tail(run_dir / f"stderr-{rank}") for rank in range(world_size)]
        return LaunchResult(results=results, wall_s=time.monotonic() - start, stderr_tails=tails)
    finally:
        _kill_all(procs)
        for handle in handles:
            handle.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        reaper.release_path(run_dir)
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)


def _sigterm_as_interrupt():
    """While ranks run, SIGTERM raises Terminated so the `finally` still kills them."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, raise_terminated)


def _watch(
    procs: list[subprocess.Popen],
    run_dir: Path,
    start: float,
    timeout_s: float,
    on_progress: Callable[[list[int]], None] | None,
) -> None:
    """Return when every rank exited 0; raise UserError on the first failure or at the timeout."""
    last_progress: list[int] | None = None
    while True:
        codes = [p.poll() for p in procs]
        failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            _report_failure(procs, run_dir, failed)
        if all(c == 0 for c in codes):
            return
        if on_progress is not None:
            progress = read_progress(run_dir, len(procs))
            if progress != last_progress:
                on_progress(progress)
                last_progress = progress
        if time.monotonic() - start > timeout_s:
            hung = [r for r, c in enumerate(codes) if c is None]
            progress = read_progress(run_dir, len(procs))
            detail = ", ".join(f"rank {r} after {progress[r]} iterations" for r in hung)
            least = min(progress[r] for r in hung)
            behind = [r for r in hung if progress[r] == least]
            lag = f"furthest behind: rank {behind[0]}. " if len(behind) == 1 and len(hung) > 1 else ""
            raise UserError(
                f"the run did not finish within {timeout_s:g} s: rank{'s' if len(hung) > 1 else ''} "
                f"{', '.join(map(str, hung))} still running ({detail}); {lag}"
                "All ranks were stopped. Raise --timeout if the model is just slow, or look for a rank "
                "stuck (the others usually wait for it)."
            )
        time.sleep(POLL_S)


def _report_failure(procs: list[subprocess.Popen], run_dir: Path, failed: list[int]) -> None:
    # Note which ranks failed first; give the others a moment so the message can name the cause.
    first = set(failed)
    deadline = time.monotonic() + FAILURE_GRACE_S
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(POLL_S)
    codes = [p.poll() for p in procs]
    all_failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
    tails = {r: _tail(run_dir / f"stderr-{r}") for r in all_failed}
    # The cause: a rank whose error is not just "my peer vanished", preferring those that failed first.
    own = [r for r in all_failed if not _PEER_LOSS.search(tails[r])]
    primary = [r for r in own if r in first] or own or sorted(first)
    cause = primary[0]
    others = [r for r in all_failed if r != cause]
    message = f"rank {cause} {_describe_exit(codes[cause])}"
    message += f"; its last output:\n{_indent(tails[cause]) or '    (nothing on stderr)'}"
    if others:
        message += f"\nthen rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} failed too"
    message += "\nall ranks were stopped."
    raise UserError(message)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())
