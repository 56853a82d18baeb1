"""The processes a scenario starts, and the faults it injects into them: only processes we started, by
their own process id, on loopback."""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time

from storage.embedded import EmbeddedEtcd
from tests.helpers import ApiserverProcess, current_etcd_binary


class Etcd:
    """One etcd member on a fixed data directory and fixed ports, so it can be killed and restarted."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="robust-etcd-")
        self.member = EmbeddedEtcd(data_dir=self.dir, binary=current_etcd_binary())
        self.paused = False

    @property
    def endpoint(self) -> str:
        return self.member.endpoint

    @property
    def pid(self) -> int:
        return self.member._proc.pid

    def start(self) -> "Etcd":
        self.member.start(timeout=60)
        return self

    def kill(self) -> None:
        """SIGKILL (no clean shutdown), and reap it."""
        p = self.member._proc
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def restart(self) -> None:
        """The same binary, data directory and ports."""
        self.member._proc = None
        self.member.start(timeout=60)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def alive(self) -> bool:
        return self.member._proc is not None and self.member._proc.poll() is None

    def stop(self) -> None:
        if self.paused:
            self.resume()
        self.member.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Apiserver:
    """One `python -m apiserver` process on a fixed port, so it can be killed and restarted there."""

    def __init__(self, etcd_endpoint: str, *args: str):
        self.proc = ApiserverProcess(*args, etcd_servers=etcd_endpoint, etcd_prefix="/registry",
                                     name="robust-apiserver", ready_timeout=60.0)
        self.restarts = 0

    @property
    def base(self) -> str:
        return self.proc.base

    @property
    def log_path(self) -> str:
        return self.proc.log_path

    def start(self) -> "Apiserver":
        self.proc.start().wait_ready()
        return self

    def kill(self) -> None:
        p = self.proc.popen
        os.kill(p.pid, signal.SIGKILL)
        p.wait()

    def restart_process(self) -> None:
        """Start again on the same port (does not wait for /readyz: the clients see it come back).
        The log of the killed process is kept beside the new one."""
        if self.proc.log_path and os.path.exists(self.proc.log_path):
            os.replace(self.proc.log_path, f"{self.proc.log_path}.{self.restarts}")
        self.restarts += 1
        self.proc.start()

    def wait_ready(self, timeout: float) -> bool:
        return self.proc.poll_ready(timeout)

    def alive(self) -> bool:
        return self.proc.popen is not None and self.proc.popen.poll() is None

    def exit_code(self) -> int | None:
        return self.proc.popen.poll() if self.proc.popen is not None else None

    def stop(self) -> None:
        self.proc.stop(timeout=15, strict=False)


def wait_until(pred, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()
