"""The processes a recipe starts, each on loopback with its log in the run directory, and what /proc says about
them while they run (CPU seconds, PSS, peak RSS), counted over each process's whole tree (a deployment's
supervisor and its children are one entry).

What starts and where its log is are printed as each one starts, not once everything is ready: a recipe
that hangs while starting says which process it waits for.
"""
from __future__ import annotations

import os
import ssl
import subprocess
import threading
import time
import urllib.request
from typing import Callable

from deployment.zygote import set_deathsig
from storage.embedded import stop_process


class StartError(RuntimeError):
    """A process exited or never became ready; the message quotes its log's end."""


def die_with_launcher():
    """What a child runs before it starts (`preexec_fn`) so it dies with the launcher (PR_SET_PDEATHSIG), even a
    launcher killed with SIGKILL; None off the main thread, since the signal follows the thread that forked."""
    return set_deathsig if threading.current_thread() is threading.main_thread() else None


def http_ok(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return r.status == 200
    except OSError:   # refused, timed out, or an HTTP error status (HTTPError is an OSError)
        return False


class Child:
    """One process of a recipe. `ready()` (e.g. an HTTP health path) says when it serves; `python` processes
    count one core as their capacity, Go ones the machine's cores (for "which process saturated first")."""

    def __init__(self, name: str, argv: list[str], run_dir: str, *, ready: Callable[[], bool] | None = None,
                 env: dict[str, str] | None = None, cwd: str | None = None, kind: str = "", python: bool = True,
                 say=print):
        self.name = name
        self.kind = kind or name
        self.argv = argv
        self.log_path = os.path.join(run_dir, f"{name}.log")
        self.ready = ready
        self.env = env
        self.cwd = cwd or run_dir
        self.python = python
        self.say = say
        self.popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def start(self) -> "Child":
        # Started from the main thread (`recipes up`), the child dies with the launcher
        deathsig = die_with_launcher()
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=self.cwd, env=self.env, start_new_session=True, preexec_fn=deathsig)
        self.say(f"  started {self.name:<24} pid {self.pid:<7} log {self.log_path}")
        return self

    def exited(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def failure(self, what: str, lines: int = 10) -> StartError:
        try:
            with open(self.log_path, "rb") as f:
                tail = f.read()[-6000:].decode(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        return StartError(f"{self.name} {what}; see {self.log_path}" + "".join(f"\n  | {t}" for t in tail))

    def wait_ready(self, deadline: float) -> None:
        while self.ready is not None and not self.ready():
            if self.exited() is not None:
                raise self.failure(f"exited with {self.popen.returncode}")
            if time.monotonic() > deadline:
                raise self.failure("not ready in time")
            time.sleep(0.1)

    def terminate(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()

    def stop(self, timeout: float = 15.0) -> None:
        stop_process(self.popen, timeout)

    # --- /proc ----------------------------------------------------------------------------------------

    def pids(self) -> list[int]:
        return tree_pids(self.pid) if self.exited() is None else []

    def members(self) -> list[tuple[str, int, bool]]:
        """(label, pid, is Python) of every process in the tree: a deployment's supervisor, shards and fronts
        are reported one by one (which of them saturates is the question), named by their role."""
        pids = self.pids()
        if len(pids) <= 1:
            return [(self.name, p, self.python) for p in pids]
        out, seen = [], {}
        for p in pids:
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if p == self.pid:
                role = "supervisor"
            elif any(a.endswith(b"deployment.zygote") for a in argv):
                # Forked from the deployment's zygote: the command line is the zygote's, the name says who it is
                name = _comm(p)
                role = name.rsplit("-", 1)[0] if name.startswith(("front-", "shard-")) else "zygote"
            elif b"--front" in argv:
                role = "front"
            elif b"--residency" in argv or b"apiserver" in argv:
                role = "shard"
            elif argv and argv[0].endswith(b"etcd"):
                role = "etcd"
            else:
                role = os.path.basename(argv[0].decode(errors="replace")) if argv else "child"
            i = seen.get(role, 0)
            seen[role] = i + 1
            label = f"{self.name}/{role}" if role == "supervisor" else f"{self.name}/{role}-{i}"
            out.append((label, p, not (argv and argv[0].endswith(b"etcd"))))
        return out



def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def memory_kib(pid: int) -> dict[str, int]:
    """PSS (shared pages split between the processes that map them), RSS and peak RSS (VmHWM)."""
    st = status_kib(pid)
    return {"pss_kib": smaps_pss_kib(pid), "rss_kib": st.get("VmRSS", 0), "hwm_kib": st.get("VmHWM", 0)}


def tree_pids(root: int) -> list[int]:
    """`root` and its descendants, from /proc/*/stat's parent ids."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def status_kib(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def smaps_pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
