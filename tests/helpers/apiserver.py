"""Real `python -m apiserver` processes for tests and benchmarks: start on a free port, poll /readyz,
stop by pid."""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from storage.embedded import free_port
from tests.helpers.etcd import ROOT


class ApiserverError(RuntimeError):
    """An apiserver process exited, never became ready, or would not stop."""


class ApiserverProcess:
    """One apiserver serving plain HTTP on a free loopback port (`base`).

    Arguments after the flags this class sets (`--etcd-servers`, `--etcd-prefix`, `--port`, `--residency`)
    are passed as given; without `etcd_servers` the process starts its own embedded etcd. Output goes to
    `<tmp>/<log_name>-<port>.log`, or, with `stderr_pipe`, stderr stays a pipe for the caller to read.
    `residency` (a shard selector) is kept on the object so callers can match objects against it.
    As a context manager: started and ready on entry, stopped on exit.
    """

    def __init__(self, *args: str, etcd_servers: str | None = None, etcd_prefix: str | None = None,
                 residency=None, env: dict[str, str] | None = None, name: str = "apiserver",
                 log_name: str | None = None, stderr_pipe: bool = False, ready_timeout: float = 30.0,
                 ready_token: str | None = None):
        self.name = name
        self.residency = residency
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ready_timeout = ready_timeout
        self.ready_token = ready_token  # a bearer token for /readyz when the server authenticates
        self.argv = [sys.executable, "-m", "apiserver"]
        if etcd_servers:
            self.argv += ["--etcd-servers", etcd_servers]
        if etcd_prefix:
            self.argv += ["--etcd-prefix", etcd_prefix]
        self.argv += ["--port", str(self.port)]
        if residency is not None:
            self.argv += ["--residency", str(residency)]
        self.argv += list(args)
        # A state directory of its own unless given (--state-dir: the embedded etcd's data, the watch caches'
        # snapshot for a warm restart): processes of different tests never start from each other's snapshot.
        # Kept across kill/start of this object (a restart is warm), removed when it is stopped.
        self.own_state_dir = None
        if not any(a == "--state-dir" or a.startswith("--state-dir=") for a in args):
            self.own_state_dir = tempfile.mkdtemp(prefix=f"{name}-state-")
            self.argv += ["--state-dir", self.own_state_dir]
        self.env = dict(os.environ, **env) if env else None
        self.stderr_pipe = stderr_pipe
        self.log_path = None if stderr_pipe else os.path.join(tempfile.gettempdir(),
                                                              f"{log_name or name}-{self.port}.log")
        self.popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def _see(self) -> str:
        return f"see {self.log_path}" if self.log_path else "stderr is piped to the caller"

    def start(self) -> "ApiserverProcess":
        """Spawn the process; does not wait (several can start at once, then `wait_all_ready`)."""
        if self.stderr_pipe:
            self.popen = subprocess.Popen(self.argv, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                                          cwd=ROOT, env=self.env)
        else:
            with open(self.log_path, "wb") as log:  # the child keeps its own descriptor
                self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, cwd=ROOT, env=self.env)
        return self

    def ready(self) -> bool:
        """One GET /readyz: 200 or not."""
        try:
            req = urllib.request.Request(self.base + "/readyz", headers={
                "Authorization": f"Bearer {self.ready_token}"} if self.ready_token else {})
            with urllib.request.urlopen(req, timeout=1) as r:
                return r.status == 200
        except OSError:  # refused while starting; HTTPError (a 5xx readyz) is an OSError too
            return False

    def poll_ready(self, timeout: float) -> bool:
        """Poll /readyz until 200 (True), the process exits or `timeout` passes (False)."""
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None:
            if self.ready():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return False

    def wait_ready(self, timeout: float | None = None) -> "ApiserverProcess":
        """Poll /readyz; raise ApiserverError (and kill the process) if it exits or is not ready in time."""
        timeout = self.ready_timeout if timeout is None else timeout
        if self.poll_ready(timeout):
            return self
        if self.popen.poll() is not None:
            raise self._exited()
        self.popen.kill()
        self.popen.wait()
        raise ApiserverError(f"{self.name} not ready in {timeout:.0f} s; {self._see()}")

    def _exited(self, during: str = "") -> ApiserverError:
        return ApiserverError(f"{self.name} exited with {self.popen.returncode}{during}; {self._see()}")

    def alive(self) -> None:
        """Raise ApiserverError if the process has exited (a crash while a benchmark or test runs)."""
        if self.popen.poll() is not None:
            raise self._exited(" during the run")

    def stop(self, timeout: float = 10.0, strict: bool = True) -> None:
        stop_all([self], timeout, strict)

    def __enter__(self) -> "ApiserverProcess":
        self.start()
        try:
            return self.wait_ready()
        except BaseException:
            self.stop(strict=False)
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def start_apiserver(etcd_endpoint: str, prefix: str, *extra: str, **kw) -> ApiserverProcess:
    """An apiserver over `etcd_endpoint` with key prefix `prefix`, started and ready."""
    return ApiserverProcess(*extra, etcd_servers=etcd_endpoint, etcd_prefix=prefix, **kw).start().wait_ready()


def wait_all_ready(procs: list[ApiserverProcess], timeout: float) -> None:
    """Wait until every process is ready, within one deadline for all."""
    deadline = time.monotonic() + timeout
    for p in procs:
        p.wait_ready(max(0.0, deadline - time.monotonic()))


async def wait_all_ready_async(procs: list[ApiserverProcess], timeout: float) -> None:
    """`wait_all_ready` off the event loop (the polling blocks)."""
    await asyncio.to_thread(wait_all_ready, procs, timeout)


def stop_all(procs: list[ApiserverProcess], timeout: float = 10.0, strict: bool = True) -> None:
    """SIGTERM every running process first, so they shut down in parallel, then wait for each. One still
    running `timeout` s after SIGTERM is killed; with `strict` that is an error as well (tests should see a
    hung shutdown; benchmarks only need the process gone)."""
    running = [p for p in procs if p.popen is not None and p.popen.poll() is None]
    for p in running:
        p.popen.terminate()
    hung = []
    for p in running:
        try:
            p.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            p.popen.kill()
            p.popen.wait()
            hung.append(p)
    for p in procs:
        if p.own_state_dir and (p.popen is None or p.popen.poll() is not None):
            shutil.rmtree(p.own_state_dir, ignore_errors=True)
    if hung and strict:
        raise ApiserverError(f"{', '.join(p.name for p in hung)} still running {timeout:.0f} s after SIGTERM (killed)"
                             + "".join(_log_tail(p) for p in hung))


def _log_tail(p: ApiserverProcess, size: int = 6000) -> str:
    """The end of a hung process's log: the stacks it dumped while shutting down (apiserver/__main__.py), which
    a clean machine's CI run leaves nowhere else."""
    if not p.log_path:
        return ""
    try:
        with open(p.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f"\n--- end of {p.log_path} ---\n" + f.read().decode(errors="replace")
    except OSError:
        return ""
