"""The processes a scenario starts, and the faults it injects into them: only processes we started, by
their own process id, on loopback."""
from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import requests

from storage.embedded import EmbeddedEtcd
from tests.helpers import ApiserverProcess, current_etcd_binary
from tests.helpers.deployment import Deployment


class Etcd:
    """One etcd member on a fixed data directory and fixed ports, so it can be killed and restarted."""

    def __init__(self, lease: bool = False):
        """`lease`: as `--embedded-lease-etcd` starts it (storage.embedded.lease_etcd): no fsync, data on tmpfs."""
        shm = "/dev/shm" if lease and os.access("/dev/shm", os.W_OK) else None
        self.dir = tempfile.mkdtemp(prefix="robust-etcd-", dir=shm)
        extra = ["--unsafe-no-fsync"] if lease else []
        self.member = EmbeddedEtcd(data_dir=self.dir, binary=current_etcd_binary(), extra_args=extra)
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
        """SIGSTOP, returning once the member is stopped: the signal is delivered before every thread has
        stopped, and a request sent meanwhile may still be answered (a cold .ci/run saw /livez answer 200 right
        after it)."""
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True
        deadline = time.monotonic() + 5
        while self.state() != "T" and time.monotonic() < deadline:
            time.sleep(0.01)

    def state(self) -> str:
        """The process's state letter from /proc (T: stopped, Z: a zombie)."""
        with open(f"/proc/{self.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]

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


class Member:
    """One member of a three-member etcd cluster on loopback: fixed name, data directory and ports, so it can
    be killed and restarted into the same cluster."""

    def __init__(self, name: str, root: str):
        from storage.embedded import free_port
        self.name = name
        self.dir = os.path.join(root, name)
        self.client_port, self.peer_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def launch(self, initial_cluster: str, state: str) -> None:
        os.makedirs(self.dir, exist_ok=True)
        log = open(os.path.join(self.dir, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            [current_etcd_binary(), "--name", self.name, "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", self.peer, "--initial-advertise-peer-urls", self.peer,
             "--initial-cluster", initial_cluster, "--initial-cluster-state", state,
             "--initial-cluster-token", "robust", "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def status(self) -> dict | None:
        """Maintenance.Status through the member's gRPC gateway (None if it does not answer)."""
        import json
        import urllib.request
        try:
            req = urllib.request.Request(self.endpoint + "/v3/maintenance/status", data=b"{}", method="POST")
            with urllib.request.urlopen(req, timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None

    def healthy(self) -> bool:
        import urllib.request
        try:
            with urllib.request.urlopen(self.endpoint + "/health", timeout=2) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class EtcdCluster:
    """Three etcd members on loopback (scenario 3). `endpoint` is the comma-separated list of the three
    client URLs, as the apiserver's --etcd-servers takes it; faults kill and restart one member."""

    def __init__(self, n: int = 3):
        self.dir = tempfile.mkdtemp(prefix="robust-etcd3-")
        self.members = [Member(f"m{i}", self.dir) for i in range(n)]
        self.paused = False

    @property
    def endpoint(self) -> str:
        return ",".join(m.endpoint for m in self.members)

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer}" for m in self.members)

    def start(self) -> "EtcdCluster":
        for m in self.members:
            m.launch(self.initial_cluster, "new")
        if not wait_until(lambda: all(m.healthy() for m in self.members), 60, 0.1):
            raise RuntimeError(f"etcd cluster not healthy in 60 s (logs under {self.dir})")
        return self

    def leader(self, timeout: float = 20.0) -> Member:
        """The member the others agree leads (waits for an election in progress)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ids = {}
            for m in self.members:
                st = m.status() if m.alive() else None
                if st and st.get("leader") and st.get("header", {}).get("member_id"):
                    ids[str(st["header"]["member_id"])] = (m, str(st["leader"]))
            leaders = {lead for _, lead in ids.values()}
            if len(leaders) == 1 and (lead := leaders.pop()) in ids:
                return ids[lead][0]
            time.sleep(0.1)
        raise RuntimeError("no etcd leader agreed on")

    def kill(self, m: Member) -> None:
        os.kill(m.proc.pid, signal.SIGKILL)
        m.proc.wait()

    def restart(self, m: Member) -> None:
        m.launch(self.initial_cluster, "existing")
        if not wait_until(m.healthy, 60, 0.1):
            raise RuntimeError(f"etcd member {m.name} not healthy 60 s after its restart")

    def alive(self) -> bool:
        return all(m.alive() for m in self.members)

    def stop(self) -> None:
        from storage.embedded import stop_process
        for m in self.members:
            stop_process(m.proc, 10)
        shutil.rmtree(self.dir, ignore_errors=True)


class Apiserver:
    """One `python -m apiserver` process on a fixed port, so it can be killed and restarted there."""

    def __init__(self, etcd_endpoint: str, *args: str):
        # its own state directory (the warm restart's cache snapshot), kept across a restart
        self.state_dir = tempfile.mkdtemp(prefix="robust-state-")
        self.proc = ApiserverProcess(*args, "--state-dir", self.state_dir, etcd_servers=etcd_endpoint,
                                     etcd_prefix="/registry", name="robust-apiserver", ready_timeout=60.0)
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

    def rss_mib(self) -> float | None:
        return rss_mib(self.proc.popen.pid) if self.alive() else None

    def stop(self) -> None:
        self.proc.stop(timeout=15, strict=False)
        shutil.rmtree(self.state_dir, ignore_errors=True)


class DeploymentUnderTest:
    """`python -m deployment` in place of one apiserver: K resident shards and N fronts on one port under their
    supervisor, which restarts a child that dies (the front-kill and shard-kill faults kill one by its pid)."""

    def __init__(self, etcd_endpoint: str, *args: str, shards: int = 2, fronts: int = 2):
        self.tmp = pathlib.Path(tempfile.mkdtemp(prefix="robust-deployment-"))
        self.dep = Deployment(self.tmp, "--shards", str(shards), "--fronts", str(fronts), "--etcd-servers",
                              etcd_endpoint, "--etcd-prefix", "/registry", *args)
        self.restarts = 0   # children this run killed (each restarted by the supervisor)

    @property
    def base(self) -> str:
        return self.dep.base

    @property
    def log_path(self) -> str:
        return os.path.join(self.dep.state, "logs")   # the children's logs, one file each

    def start(self) -> "DeploymentUnderTest":
        self.dep.start(timeout=120)
        return self

    def children(self) -> list[dict]:
        return self.dep.report()["processes"]

    def kill_child(self, role: str) -> dict:
        """SIGKILL the first child of `role` ("front" or "shard"); returns its report entry (name, pid)."""
        child = next(c for c in self.children() if c["role"] == role)
        os.kill(child["pid"], signal.SIGKILL)
        self.restarts += 1
        return child

    def wait_restarted(self, killed: dict, timeout: float) -> bool:
        """The supervisor has started the killed child again and it answers /readyz."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                now = next(c for c in self.children() if c["name"] == killed["name"])
                if now["pid"] and now["pid"] != killed["pid"] and \
                        requests.get(now["url"] + "/readyz", timeout=2).status_code == 200:
                    return True
            except (requests.RequestException, StopIteration, ValueError):
                pass
            time.sleep(0.2)
        return False

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if requests.get(self.dep.dbase + "/readyz", timeout=2).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.2)
        return False

    def alive(self) -> bool:
        return self.dep.proc is not None and self.dep.proc.poll() is None

    def exit_code(self) -> int | None:
        return self.dep.proc.poll() if self.dep.proc is not None else None

    def rss_mib(self) -> float | None:
        """The supervisor's and every child's resident set, summed."""
        if not self.alive():
            return None
        pids = [self.dep.proc.pid]
        try:
            pids += [c["pid"] for c in self.children() if c["pid"]]
        except (requests.RequestException, ValueError):
            return None
        got = [rss_mib(p) for p in pids]
        return sum(g for g in got if g is not None)

    def stop(self) -> None:
        try:
            self.dep.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def rss_mib(pid: int) -> float | None:
    """A process's resident set (VmRSS), MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


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
