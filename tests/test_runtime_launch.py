"""The launcher with real processes: results, crashed ranks, hung ranks, busy ports, cleanup."""

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from sgdscale.errors import UserError
from sgdscale.runtime.launch import launch

pytestmark = [pytest.mark.dist, pytest.mark.timeout(90)]

TARGETS = str(Path(__file__).parent / "runtime_targets")
ENV = {"PYTHONPATH": TARGETS + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def test_results_come_back_by_rank():
    out = launch("rt_targets:allreduce_rank", {"echo": "hi"}, 3, env=ENV, timeout_s=60)
    assert [r["rank"] for r in out.results] == [0, 1, 2]
    assert all(r["sum"] == 6.0 and r["echo"] == "hi" for r in out.results)


def test_crash_names_rank_and_error_and_kills_everything(tmp_path):
    pids: list[int] = []
    pid_file = tmp_path / "grandchild.pid"
    start = time.monotonic()
    with pytest.raises(UserError) as caught:
        launch("rt_targets:spawn_child_then_fail", {"pid_file": str(pid_file)}, 2, env=ENV,
               timeout_s=60, on_spawn=pids.extend)
    assert time.monotonic() - start < 30  # stopped on the crash, not at the timeout
    message = str(caught.value)
    assert message.startswith("rank 1 exited with status 1")
    assert "ValueError: rank one broke on purpose" in message
    # rank 0 (sleeping), rank 1 and the grandchild rank 1 started are all gone
    assert len(pids) == 2 and not any(_alive(p) for p in pids)
    assert not _alive(int(pid_file.read_text()))


def test_port_in_use_is_a_clear_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port} on 127.0.0.1 is already in use"):
            launch("rt_targets:allreduce_rank", {}, 2, env=ENV, port=port)


def test_bad_world_size():
    with pytest.raises(UserError, match="at least 1"):
        launch("rt_targets:allreduce_rank", {}, 0)


def test_ctrl_c_leaves_no_process(tmp_path):
    """SIGINT to a `sgdscale train` run: the ranks die with it and the CLI exits 130."""
    import subprocess

    script = (
        "import signal, sys\n"
        # A shell that starts a job in the background (e.g. a CI runner) may hand it SIGINT ignored;
        # the test is about what a user at a terminal gets, so take Python's default handler back.
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from sgdscale.runtime import launch as L\n"
        "orig = L._watch\n"
        "def watch(procs, *a):\n"
        "    open(sys.argv[1], 'w').write(' '.join(str(p.pid) for p in procs))\n"
        "    return orig(procs, *a)\n"
        "L._watch = watch\n"
        "from sgdscale.cli import main\n"
        "sys.exit(main(['train', 'mlp', '--workers', '2', '--iterations', '100000', '--batch-size', '4',\n"
        "               '--option', 'width=32', '--option', 'depth=1']))\n"
    )
    pid_file = tmp_path / "pids"
    proc = subprocess.Popen([sys.executable, "-c", script, str(pid_file)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)  # ranks are training now
    pids = [int(p) for p in pid_file.read_text().split()]
    assert all(_alive(p) for p in pids)
    proc.send_signal(2)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert not any(_alive(p) for p in pids)


class _MissingBinary:
    """A placement whose wrapper program does not exist."""

    def master_addr(self):
        return "127.0.0.1"

    def wrap(self, rank, argv, env):
        return ["/nonexistent/sgdscale-wrapper", *argv]

    def socket_ifname(self):
        return None


def test_unstartable_rank_is_a_user_error():
    with pytest.raises(UserError, match="cannot start rank 0"):
        launch("rt_targets:allreduce_rank", {}, 2, env=ENV, placement=_MissingBinary())


class _LoopbackPlacement:
    """Wraps each rank in `env SGD_MARK=node<rank>` and pins gloo to lo: the Placement contract."""

    def master_addr(self):
        return "127.0.0.1"

    def wrap(self, rank, argv, env):
        return ["env", f"SGD_MARK=node{rank}", *argv]

    def socket_ifname(self):
        return "lo"


def test_placement_wraps_every_rank():
    out = launch("rt_targets:env_rank", {}, 2, env=ENV, placement=_LoopbackPlacement(), timeout_s=60)
    assert out.results == [{"mark": "node0", "ifname": "lo"}, {"mark": "node1", "ifname": "lo"}]
