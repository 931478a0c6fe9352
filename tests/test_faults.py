"""Faults in real `sgdscale train --emulate` runs leave nothing behind and end with one line.

A killed worker, Ctrl-C to the launcher and a killed owner (the launcher SIGKILLed, so none of its
cleanup runs) each leave zero namespaces, links, cgroups, processes and run directories of that
run; benchmarks/faults.py injects 60 such faults at random (benchmarks/results/faults.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sgdscale.runtime.testbed import owned_by

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root (netns, tc, cgroups)")
pytestmark = [pytest.mark.testbed, pytest.mark.timeout(180)]

# The child takes Python's default SIGINT handler back: a shell that starts a job in the background
# (e.g. a CI runner) may hand it SIGINT ignored, and the tests are about what a user at a terminal gets.
CLI = [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
       "sys.argv[0] = 'sgdscale'; from sgdscale.cli import main; sys.exit(main())"]
TRAIN = ["train", "mlp", "--workers", "2", "--iterations", "400", "--warmup", "1", "--batch-size", "8",
         "--option", "width=256", "--option", "depth=1", "--emulate", "--bandwidth", "1Gbit", "--timeout", "150s"]
TAG = "SGDSCALE_TEST_FAULT_TAG"


class Run:
    """`sgdscale ARGS` with a private TMPDIR and a tag in the environment of every descendant."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.tag = f"{tmp_path.name}-{time.monotonic_ns()}"
        self.proc = subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "TMPDIR": str(self.tmp), TAG: self.tag})

    def progress(self) -> list[int]:
        done = []
        for path in sorted(self.tmp.glob("sgdscale-run-*/progress-*")):
            data = path.read_bytes()
            done.append(int.from_bytes(data, sys.byteorder, signed=True) if len(data) == 8 else 0)
        return done

    def wait_iterations(self, count: int, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            done = self.progress()
            if len(done) >= 2 and min(done) >= count:
                return
            assert self.proc.poll() is None, self.proc.communicate()
            time.sleep(0.02)
        raise AssertionError("the ranks did not start training")

    def rank_pid(self, rank: int) -> int:
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().decode().split("\0")
            except OSError:
                continue
            if "sgdscale.runtime.rank" in argv and argv[argv.index("--rank") + 1] == str(rank) and \
                    any(arg.startswith(str(self.tmp)) for arg in argv):
                return int(proc.name)
        raise AssertionError(f"rank {rank} not found")

    def tagged_processes(self) -> list[str]:
        found = []
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if f"{TAG}={self.tag}".encode() in (proc / "environ").read_bytes().split(b"\0"):
                    state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                    found.append(f"{proc.name} ({state})")
            except OSError:
                continue
        return found

    def leaks(self, timeout_s: float = 15) -> dict[str, list[str]]:
        """What this run left, waiting up to `timeout_s` for reapers."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = {**owned_by(self.proc.pid), "processes": self.tagged_processes(),
                     "run dirs": [p.name for p in self.tmp.iterdir() if p.name.startswith("sgdscale-")]}
            if not any(found.values()) or time.monotonic() > deadline:
                return {kind: names for kind, names in found.items() if names}
            time.sleep(0.1)


def one_message(stderr: str) -> list[str]:
    assert "Traceback" not in stderr, stderr
    return [line for line in stderr.splitlines() if line.startswith(("error:", "interrupted", "terminated"))]


@needs_root
def test_killed_worker_ends_the_run_with_one_error_and_leaves_nothing(tmp_path):
    run = Run(tmp_path, TRAIN)
    run.wait_iterations(3)
    os.kill(run.rank_pid(1), signal.SIGKILL)
    _, err = run.proc.communicate(timeout=60)
    assert run.proc.returncode == 2, err
    assert one_message(err)[0].startswith("error: rank 1 was killed by SIGKILL"), err
    assert len(one_message(err)) == 1, err
    assert run.leaks() == {}


@needs_root
@pytest.mark.parametrize("signum, code, message", [(signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGTERM, 143, "terminated")])
def test_signal_to_the_launcher_mid_run_leaves_nothing(tmp_path, signum, code, message):
    run = Run(tmp_path, TRAIN)
    run.wait_iterations(3)
    run.proc.send_signal(signum)
    _, err = run.proc.communicate(timeout=60)
    assert run.proc.returncode == code, err
    assert one_message(err) == [message], err
    assert run.leaks() == {}


@needs_root
def test_killed_owner_leaves_nothing(tmp_path):
    """SIGKILL to the launcher: its reaper removes the testbed and run directory, ranks die with it."""
    run = Run(tmp_path, TRAIN)
    run.wait_iterations(3)
    assert owned_by(run.proc.pid)["netns"]
    run.proc.kill()
    run.proc.communicate(timeout=30)
    assert run.leaks() == {}

