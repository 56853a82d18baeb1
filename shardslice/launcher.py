"""The slice as a class for benchmarks and tests (`Slice`: etcd, K resident shards, the front, K controllers, started
and stopped in one process: bench/slice.py, tests/test_slice.py), and `python -m shardslice up`, a name for
`python -m recipes up slice` (recipes/catalog/slice.toml: one etcd, a deployment of K shards behind one front, the
Widget CRD and K sharded controllers), kept so the old command still works:

    python -m shardslice up [--shards K] [--port P] [--state-dir DIR] [--etcd-servers URL] [--no-controllers]
                            [--embedded-lease-etcd] [--zygote true|false]

`Slice` starts etcd (embedded, the newest binary `storage.embedded.find_etcd` finds; or `etcd_servers`; with
`lease_etcd` a second one for Leases, no fsync, on tmpfs, every apiserver routed to it), K resident shards
(`python -m apiserver --residency <range i of K>`, complementary ranges of the UID hash, forked from one zygote
that imported the server: deployment/zygote.py), the front over them (`python -m apiserver --front --shards
URL,...`; without the front package the shards are the entry points), the Widget CRD, and K controllers
(`python -m shardslice controller`), each pinned to one shard's range on that shard; `stop` stops everything,
controllers first and etcd last.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from deployment.zygote import Zygote, ZygoteError, ZygoteProcess
from machinery.shard_selector import ShardSelector, complementary
from shardslice import widgets
from storage.embedded import EmbeddedEtcd, free_port, stop_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.cache
def front_available() -> bool:
    """The front (issue 11 §1: the `front` package, started as `python -m apiserver --front`); the slice
    runs without it where the package is absent or the command line does not offer `--front` yet."""
    if importlib.util.find_spec("front") is None:
        return False
    out = subprocess.run([sys.executable, "-m", "apiserver", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    return "--front" in out.stdout


class SliceError(RuntimeError):
    """A process of the slice exited, never became ready, or a request during set-up failed."""


class Proc:
    """One child process of the slice on a loopback port: `health` is the path polled for readiness."""

    def __init__(self, name: str, argv: list[str], port: int, health: str, log_dir: str,
                 env: dict[str, str] | None = None, selector: ShardSelector | None = None,
                 zygote: Zygote | None = None):
        self.name = name
        self.argv = argv
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.health = health
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.env = dict(os.environ, **env) if env else None
        self.selector = selector
        self.zygote = zygote
        self.popen: subprocess.Popen | ZygoteProcess | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def start(self) -> "Proc":
        if self.zygote is not None:
            try:
                # Dies with the zygote, which ends with this process: a launcher that is killed leaves no process
                # behind (PDEATHSIG towards the zygote; towards this process it would follow the thread that
                # started the slice, and `bench.slice` starts it from a worker thread).
                self.popen = self.zygote.spawn(self.argv, log=self.log_path, cwd=ROOT,
                                               env=self.env or dict(os.environ), name=self.name, deathsig=True)
                return self
            except ZygoteError as e:
                print(f"{self.name}: {e}; starting it as its own process", file=sys.stderr)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=ROOT, env=self.env, start_new_session=True)
        return self

    def exited(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.base + self.health, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def failure(self, what: str, lines: int = 8) -> SliceError:
        """`what` happened to this process: the error names the log and quotes its end (a test that fails on
        a clean machine leaves no log behind to read)."""
        try:
            with open(self.log_path, "rb") as f:
                tail = f.read()[-4096:].decode(errors="replace").splitlines()[-lines:]
        except OSError:
            tail = []
        return SliceError(f"{self.name} {what}; see {self.log_path}" + "".join(f"\n  | {t}" for t in tail))

    def wait_ready(self, deadline: float) -> None:
        while not self.healthy():
            if self.exited() is not None:
                raise self.failure(f"exited with {self.popen.returncode}")
            if time.monotonic() > deadline:
                raise self.failure(f"not ready at {self.base}{self.health}")
            time.sleep(0.1)

    def terminate(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()

    def stop(self, timeout: float = 15.0) -> None:
        stop_process(self.popen, timeout)


def http_json(method: str, url: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"raw": raw.decode(errors="replace")}


def kubeconfig(server: str, name: str = "slice") -> str:
    """A kubeconfig for a plain-HTTP server without authentication (YAML)."""
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n"
            f"contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n"
            f"current-context: {name}\nusers:\n- name: {name}\n  user: {{}}\n")


class Slice:
    """etcd, K shards, the front (if `front` and the package exists), K controllers.

    `shard_args` go to every shard, `front_args` to the front; `env` to every apiserver (e.g.
    RESIDENCY_TRACEMALLOC=1). Logs go to `<log_dir>/<name>.log` (default: a temporary directory kept after
    stop, printed by `up`). As a context manager: started on entry, stopped on exit.
    """

    def __init__(self, k: int, *, port: int = 0, etcd_servers: str | None = None, state_dir: str | None = None,
                 etcd_prefix: str = "/registry", front: bool = True, controllers: bool = True,
                 shard_args: tuple[str, ...] = (), front_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, log_dir: str | None = None, workers: int = 4,
                 lease_etcd: bool = False, zygote: bool = True):
        if k < 1:
            raise ValueError("--shards must be at least 1")
        self.k = k
        self.port = port
        self.etcd_servers = etcd_servers
        self.state_dir = state_dir
        self.etcd_prefix = etcd_prefix
        self.want_front = front
        self.want_controllers = controllers
        self.shard_args = tuple(shard_args)
        self.front_args = tuple(front_args)
        self.env = env
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="slice-logs-")
        self.workers = workers
        self.selectors = complementary(k)
        self.etcd: EmbeddedEtcd | None = None
        self.want_lease_etcd = lease_etcd   # Leases on an etcd of their own (as apiserver --embedded-lease-etcd)
        self.lease_etcd: EmbeddedEtcd | None = None
        self.lease_etcd_dir: str | None = None   # on tmpfs; kept with a state dir (removed by `up` with its own)
        self.shards: list[Proc] = []
        self.front: Proc | None = None
        self.controllers: list[Proc] = []
        self._tmp_state: str | None = None
        # The apiservers (and the controllers) are forked from one zygote that imported the server once
        # (deployment/zygote.py); zygote=False runs each as its own `python -m ...`.
        self.zygote = Zygote(cwd=ROOT) if zygote else None

    # --- what runs ----------------------------------------------------------------------------------

    @property
    def etcd_endpoint(self) -> str:
        return self.etcd_servers or self.etcd.endpoint

    @property
    def server(self) -> str:
        """Where clients go: the front, or (without it) the first shard."""
        return self.front.base if self.front else self.shards[0].base

    def processes(self) -> list[Proc]:
        return [*self.controllers, *([self.front] if self.front else []), *self.shards]

    def _apiserver(self, name: str, port: int, *args: str, selector: ShardSelector | None = None) -> Proc:
        """Each apiserver has a state directory of its own (its watch-cache snapshot for the warm restart):
        `<state-dir>/<name>` (kept, so a slice started again on the same state resumes warm), or one under
        a temporary directory removed by `stop`."""
        if self._tmp_state is None and not self.state_dir:
            self._tmp_state = tempfile.mkdtemp(prefix="slice-state-")
        state = os.path.join(self.state_dir or self._tmp_state, name)
        argv = [sys.executable, "-m", "apiserver", "--etcd-servers", self.etcd_endpoint,
                "--etcd-prefix", self.etcd_prefix, "--port", str(port), "--state-dir", state, *args]
        if self.lease_etcd is not None:
            argv += ["--etcd-servers-overrides", f"coordination.k8s.io/leases#{self.lease_etcd.endpoint}"]
        return Proc(name, argv, port, "/readyz", self.log_dir, self.env, selector, self.zygote)

    # --- start and stop -----------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> "Slice":
        deadline = time.monotonic() + timeout
        # The front's port may come from the caller, picked but not bound yet: no other process gets it
        taken = {self.port} if self.port else set()

        def port() -> int:
            picked = free_port(avoid=taken)
            taken.add(picked)
            return picked

        try:
            if not self.etcd_servers:
                self.etcd = EmbeddedEtcd(data_dir=os.path.join(self.state_dir, "etcd") if self.state_dir else None,
                                         log_path=os.path.join(self.log_dir, "etcd.log"),
                                         client_port=port(), peer_port=port()).start()
            if self.want_lease_etcd:
                from storage.embedded import lease_etcd
                self.lease_etcd = lease_etcd(state_dir=os.path.join(self.state_dir, "lease-etcd")
                                             if self.state_dir else None, avoid=frozenset(taken))
                self.lease_etcd_dir = self.lease_etcd.data_dir
            self.shards = [self._apiserver(f"shard-{i}", port(), "--residency", str(sel), *self.shard_args,
                                           selector=sel)
                           for i, sel in enumerate(self.selectors)]
            for p in self.shards:
                p.start()
            for p in self.shards:
                p.wait_ready(deadline)
            if self.want_front and front_available():
                self.front = self._apiserver("front", self.port or port(), "--front", "--shards",
                                             ",".join(p.base for p in self.shards), *self.front_args).start()
                self.front.wait_ready(deadline)
            if self.want_controllers:
                self.install_crd(deadline)
                self.controllers = [
                    Proc(f"controller-{i}", [sys.executable, "-m", "shardslice", "controller", "--server", sh.base,
                                             "--shard-selector", str(sh.selector), "--name", f"controller-{i}",
                                             "--port", str(cport), "--workers", str(self.workers)],
                         cport, "/healthz", self.log_dir, selector=sh.selector, zygote=self.zygote)
                    for i, (sh, cport) in enumerate((sh, port()) for sh in self.shards)]
                for c in self.controllers:
                    c.start()
                for c in self.controllers:
                    c.wait_ready(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def install_crd(self, deadline: float) -> None:
        """Create the Widget CRD (once) and wait until every shard serves it."""
        code, body = http_json("POST", self.shards[0].base + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                               widgets.crd())
        if code not in (201, 409):
            raise SliceError(f"creating the CRD: HTTP {code}: {body}")
        for p in self.shards + ([self.front] if self.front else []):
            while http_json("GET", p.base + widgets.collection() + "?limit=1")[0] != 200:
                if time.monotonic() > deadline:
                    raise SliceError(f"{p.name} does not serve {widgets.CRD_NAME}")
                time.sleep(0.1)

    def check_alive(self) -> None:
        for p in self.processes():
            if p.exited() is not None:
                raise p.failure(f"exited with {p.popen.returncode}")

    def stop(self) -> None:
        """Controllers first, then the front, then the shards (SIGTERM in parallel per tier), etcd last."""
        for tier in (self.controllers, [self.front] if self.front else [], self.shards):
            for p in tier:
                p.terminate()
            for p in tier:
                p.stop()
        if self.zygote is not None:
            self.zygote.stop()
        for e in (self.lease_etcd, self.etcd):
            if e is not None:
                e.stop()
        self.etcd = self.lease_etcd = None
        if self._tmp_state:
            shutil.rmtree(self._tmp_state, ignore_errors=True)
            self._tmp_state = None

    def __enter__(self) -> "Slice":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def up(argv: list[str] | None = None) -> int:
    """`python -m shardslice up`: a name for `python -m recipes up slice` (the one launcher), its options
    translated; the process becomes the recipes runner (exec), so its pid, signals and exit status are the
    runner's."""
    p = argparse.ArgumentParser(prog="python -m shardslice up",
                                description="A whole local slice in one command: `python -m recipes up slice` "
                                            "(recipes/catalog/slice.toml), under its old name.")
    p.add_argument("--shards", type=int, default=2, help="K, the number of shards and controllers")
    p.add_argument("--port", type=int, default=8080, help="the front's port (0: any free port)")
    p.add_argument("--state-dir", default=None,
                   help="etcd's data, the deployment's state, the logs and the kubeconfig, kept (default: a "
                        "temporary directory)")
    p.add_argument("--etcd-servers", default=None, help="an existing etcd instead of the embedded one")
    p.add_argument("--no-front", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-controllers", action="store_true")
    p.add_argument("--embedded-lease-etcd", action="store_true",
                   help="Leases (node heartbeats, leader election) on a second etcd: no fsync, data on tmpfs")
    p.add_argument("--zygote", choices=("true", "false"), default="true",
                   help="fork the shards and the front from one process that imported the server (false: each its "
                        "own python -m apiserver)")
    a = p.parse_args(argv)
    if a.no_front:
        p.error("--no-front is gone: the slice is a deployment (`python -m recipes up slice`), whose front is its "
                "address; start bare shards with `python -m apiserver --residency RANGE`")
    cmd = [sys.executable, "-m", "recipes", "up", "slice", "--shards", str(a.shards), "--port", str(a.port)]
    if a.state_dir:
        cmd += ["--dir", a.state_dir]
    if a.etcd_servers:
        cmd += ["--etcd-servers", a.etcd_servers]
    if a.no_controllers:
        cmd += ["--without", "slice-controllers"]
    if a.embedded_lease_etcd:
        cmd.append("--apiserver-flag=--embedded-lease-etcd")
    if a.zygote == "false":
        cmd.append("--apiserver-flag=--zygote=false")
    print("python -m shardslice up is a name for: " + " ".join(cmd[1:]), flush=True)
    os.execv(sys.executable, cmd)   # recipes is importable wherever shardslice was (same sys.path, cwd, environment)
