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


class Proxy:
    """A TCP proxy we own between the apiserver and etcd, on its own thread and event loop. `blackhole()`
    holds every byte in both directions and every new connection (nothing is refused or reset: the link
    just goes silent, as a dropped route would), `restore()` lets them through again."""

    def __init__(self, target_port: int):
        import asyncio
        import threading
        from storage.embedded import free_port
        self.target_port = target_port
        self.port = free_port()
        self._asyncio = asyncio
        self._holding = threading.Event()
        self._ready = threading.Event()
        self._loop = None
        self._server = None
        self._thread = threading.Thread(target=self._main, name="robust-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Proxy":
        self._thread.start()
        self._ready.wait(10)
        return self

    def blackhole(self) -> None:
        self._holding.set()

    def restore(self) -> None:
        self._holding.clear()

    def stop(self) -> None:
        self.restore()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio = self._asyncio
        self._loop = loop = asyncio.new_event_loop()
        self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            for t in asyncio.all_tasks(loop):
                t.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _gate(self) -> None:
        while self._holding.is_set():
            await self._asyncio.sleep(0.02)

    async def _handle(self, reader, writer) -> None:
        asyncio = self._asyncio
        try:
            await self._gate()
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def pipe(r, w):
            try:
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    await self._gate()
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                try:
                    w.close()
                except OSError:
                    pass
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
