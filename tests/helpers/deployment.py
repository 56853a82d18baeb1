"""`python -m deployment` as a test runs it: a process with its stderr read line by line (ready once it prints
`deployment ready:`), its deployment port's reports, SIGTERM to stop."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import requests

from storage.embedded import free_port
from tests.helpers.etcd import ROOT


class Deployment:
    def __init__(self, tmp_path, *args: str, env: dict[str, str] | None = None, cwd: str = ROOT):
        self.port, self.dport = free_port(), free_port()
        self.state = str(tmp_path / "state")
        self.argv = [sys.executable, "-m", "deployment", "--port", str(self.port), "--deployment-port",
                     str(self.dport), "--state-dir", self.state, *args]
        self.env = dict(os.environ, **(env or {}))
        self.cwd = cwd
        self.base, self.dbase = f"http://127.0.0.1:{self.port}", f"http://127.0.0.1:{self.dport}"
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []

    def start(self, timeout: float = 180) -> "Deployment":
        self.lines = []
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()

        def read() -> None:
            for line in self.proc.stderr:
                self.lines.append(line.rstrip())
                if line.startswith("deployment ready:"):
                    ready.set()
        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.2):
            assert self.proc.poll() is None, "\n".join(self.lines[-20:])
            assert time.monotonic() < deadline, "\n".join(self.lines[-20:])
        return self

    def report(self) -> dict:
        return requests.get(self.dbase + "/debug/residency", timeout=20).json()

    def pids(self) -> dict[str, int]:
        return {p["name"]: p["pid"] for p in self.report()["processes"]}

    def stop(self) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is not None:
            self.proc.stderr.close()
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        finally:
            self.reader.join(10)
            self.proc.stderr.close()


def differential(tmp_path, etcd_endpoint: str, prefix: str, *flags: str) -> Deployment:
    """The deployment the differential suites hold to kube-apiserver's answers, started: K = 2 resident shards and
    N = 2 fronts on one address (so lists are merged, watches shared) over the suite's etcd, under a key prefix of
    its own, with the suite's other flags."""
    return Deployment(tmp_path, "--shards", "2", "--fronts", "2", "--etcd-servers", etcd_endpoint,
                      "--etcd-prefix", prefix, *flags).start()


def parent(pid: int) -> int:
    """`pid`'s parent process id (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    """`pid` has exited: no such process, or a zombie nobody has collected yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
