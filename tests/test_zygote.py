"""deployment/zygote.py: children forked from one process that imported the server, run as `python -m` runs them.

The deployment and the slice start their apiservers this way by default (tests/test_deployment.py and
tests/test_slice.py run them); here the zygote itself: argv, working directory, environment, log, exit statuses
as `subprocess` reports them, sessions, and children that die with the zygote when asked to.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from deployment.zygote import Zygote, ZygoteError
from tests.helpers.deployment import alive, gone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = [sys.executable, "-m", "tests.helpers.zygote_child"]


@pytest.fixture
def zygote():
    z = Zygote(preload=("json",), cwd=ROOT)
    yield z
    z.stop()


def spawn(z: Zygote, tmp_path, *args: str, **kw):
    log = tmp_path / "child.log"
    env = dict(os.environ, ZYGOTE_TEST="seen")
    return z.spawn([*CHILD, *args], log=str(log), cwd=str(tmp_path), env=env, **kw), log


def test_a_child_runs_as_python_dash_m_with_its_argv_cwd_env_and_log(zygote, tmp_path):
    p, log = spawn(zygote, tmp_path, "exit", "0")
    assert p.wait(30) == 0 and p.poll() == 0 and p.returncode == 0
    text = log.read_text()
    assert f"argv=['exit', '0'] cwd={tmp_path} env=seen own_session=True main=__main__" in text, text
    assert p.pid != zygote.pid and not alive(p.pid)


def test_exit_statuses_are_those_subprocess_reports(zygote, tmp_path):
    p, _ = spawn(zygote, tmp_path, "exit", "3")
    assert p.wait(30) == 3
    p, log = spawn(zygote, tmp_path, "message")
    assert p.wait(30) == 1 and "a message to stderr" in log.read_text()
    p, log = spawn(zygote, tmp_path, "raise")
    assert p.wait(30) == 1 and "ValueError: boom" in log.read_text()
    p, _ = spawn(zygote, tmp_path, "sleep", name="sleeper")
    assert p.poll() is None
    # Its command line is the zygote's; its name (what ps shows) says which child it is.
    deadline = time.monotonic() + 10
    while _comm(p.pid) != "sleeper" and time.monotonic() < deadline:   # set by the child once forked
        time.sleep(0.05)
    assert _comm(p.pid) == "sleeper" and _comm(zygote.pid) == "zygote"
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(0.3)
    p.terminate()
    assert p.wait(30) == -signal.SIGTERM
    p, _ = spawn(zygote, tmp_path, "sleep")
    os.kill(p.pid, signal.SIGKILL)     # killed by someone else, as the fault tests do
    assert p.wait(30) == -signal.SIGKILL
    assert not alive(p.pid)            # reaped by the zygote, not left a zombie


def test_children_asked_to_die_with_the_zygote_do(zygote, tmp_path):
    mortal, _ = spawn(zygote, tmp_path, "sleep", deathsig=True)
    survivor, _ = spawn(zygote, tmp_path, "sleep", session=True)
    zygote.stop()                      # as when the launcher exits: the zygote's stdin closes
    deadline = time.monotonic() + 10
    while not gone(mortal.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(mortal.pid)
    assert not gone(survivor.pid)
    os.kill(survivor.pid, signal.SIGKILL)
    # A zygote stopped is started again on the next spawn.
    p, _ = spawn(zygote, tmp_path, "exit", "5")
    assert p.wait(30) == 5


def test_only_python_dash_m_commands(zygote, tmp_path):
    with pytest.raises(ZygoteError):
        zygote.spawn(["/bin/true"], log=str(tmp_path / "x.log"), cwd=str(tmp_path), env=dict(os.environ))


def test_the_default_preload_runs_the_apiserver(tmp_path):
    z = Zygote(cwd=ROOT)
    try:
        p = z.spawn([sys.executable, "-m", "apiserver", "--help"], log=str(tmp_path / "a.log"), cwd=str(tmp_path),
                    env=dict(os.environ))
        assert p.wait(60) == 0
        assert "usage: python -m apiserver" in (tmp_path / "a.log").read_text()
        # The imports happened once, in the zygote: it holds the server's modules, frozen for the children.
        with open(f"/proc/{z.pid}/status") as f:
            rss_kib = int(next(line for line in f if line.startswith("VmRSS")).split()[1])
        assert rss_kib > 20 * 1024
    finally:
        z.stop()


def _comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm") as f:
        return f.read().strip()


def test_a_module_that_prints_at_import_does_not_garble_the_replies(tmp_path):
    z = Zygote(preload=("this",), cwd=ROOT)    # `import this` prints the Zen of Python to stdout
    try:
        p, _ = spawn(z, tmp_path, "exit", "4")
        assert p.wait(30) == 4
    finally:
        z.stop()


def test_a_zygote_that_cannot_start_is_an_error_the_launchers_fall_back_on(tmp_path):
    z = Zygote(preload=("no_such_module_for_the_zygote",), cwd=ROOT)
    try:
        with pytest.raises(ZygoteError):
            spawn(z, tmp_path, "exit", "0")
    finally:
        z.stop()


def test_a_zygote_killed_takes_its_mortal_children_and_the_next_spawn_starts_another(zygote, tmp_path):
    mortal, _ = spawn(zygote, tmp_path, "sleep", deathsig=True)
    first = zygote.pid
    os.kill(first, signal.SIGKILL)     # not a clean stop: its pipe breaks
    assert mortal.wait(30) is not None     # its status is lost with the zygote, but it is gone
    assert gone(mortal.pid)
    p, _ = spawn(zygote, tmp_path, "exit", "6")
    assert p.wait(30) == 6 and zygote.pid not in (None, first)
