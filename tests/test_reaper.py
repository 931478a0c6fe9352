"""What an owner killed outright (SIGKILL) leaves is removed by its reaper; ranks die with their
launcher; a signal while the CLI exits changes nothing (runtime/reaper.py, cli.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from sgdscale.runtime import reaper


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def _owner(script: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()
    assert line, "the owner did not start"
    return proc, line


def test_the_reaper_removes_a_killed_owners_directory_and_keeps_released_ones(tmp_path):
    kept, removed = tmp_path / "released", tmp_path / "registered"
    owner, _ = _owner(f"""
        import time
        from pathlib import Path
        from sgdscale.runtime import reaper
        for path in ({str(kept)!r}, {str(removed)!r}):
            Path(path).mkdir()
            reaper.register_path(path)
        reaper.release_path({str(kept)!r})
        print("ready", flush=True)
        time.sleep(300)
    """)
    owner.kill()
    owner.wait(timeout=10)
    deadline = time.monotonic() + 15
    while removed.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not removed.exists()
    assert kept.exists()


def test_a_normal_exit_leaves_released_paths_alone(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    script = (f"from sgdscale.runtime import reaper\nreaper.register_path({str(path)!r})\n"
              f"reaper.release_path({str(path)!r})\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    time.sleep(1.0)  # the reaper has seen end-of-file by now
    assert path.exists()


def test_sweep_removes_run_directories_of_dead_owners_only(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = tmp_path / f"{reaper.RUN_DIR_PREFIX}{os.getpid()}-abc"
    theirs = tmp_path / f"{reaper.RUN_DIR_PREFIX}{dead.pid}-xyz"
    other = tmp_path / "sgdscale-run-notapid"
    for path in (mine, theirs, other):
        path.mkdir()
    assert reaper.sweep_dead_run_dirs(str(tmp_path)) == [str(theirs)]
    assert mine.exists() and other.exists() and not theirs.exists()


def test_a_child_with_the_parent_death_signal_dies_with_its_parent():
    parent, line = _owner("""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import os, time\\nfrom sgdscale.runtime.reaper import set_parent_death_signal\\n"
            f"set_parent_death_signal({__import__('os').getpid()})\\nprint('set', flush=True)\\ntime.sleep(300)"],
            stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "set"
        print(child.pid, flush=True)
        time.sleep(300)
    """)
    child = int(line)
    assert not _gone(child, timeout_s=0.5)
    parent.kill()
    parent.wait(timeout=10)
    assert _gone(child)


def test_ctrl_c_while_the_interpreter_exits_is_ignored():
    """A signal after the command finished (torch's atexit hooks run then) neither adds a traceback
    nor changes the exit status: the hook below runs after the CLI's own and sends SIGINT."""
    script = ("import atexit, os, signal, sys, time\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(0.2)))\n"
              "from sgdscale.cli import main\n"
              "sys.exit(main(['show', '--list']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr


def test_sigterm_in_a_command_ends_it_with_one_line():
    script = ("import os, signal, sys\n"
              "from sgdscale.cli import main\n"
              "import click\n"
              "@click.command('hold')\n"
              "def hold():\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "    signal.pause()\n"
              "from sgdscale.cli import app\n"
              "app.add_command(hold)\n"
              "sys.exit(main(['hold']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert done.stderr.strip() == "terminated"


def test_a_signal_during_the_torch_import_waits_until_it_is_done(tmp_path):
    """preload_torch holds SIGTERM while torch loads (an exception raised inside torch's C++
    initialisation aborts the process); here a stand-in `torch` sends itself SIGTERM halfway."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\n"
                                      "time.sleep(0.2)\nfinished = True\n")
    script = ("import signal, sys\n"
              "from sgdscale.interrupts import Terminated, preload_torch, raise_terminated\n"
              "signal.signal(signal.SIGTERM, raise_terminated)\n"
              "try:\n"
              "    preload_torch()\n"
              "except Terminated:\n"
              "    print('terminated after import', sys.modules['torch'].finished)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.strip() == "terminated after import True", done.stderr
