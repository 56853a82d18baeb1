"""The supervisor of a deployment: K shards and N fronts on one address, started, watched, restarted, stopped.

Flags. The deployment takes `python -m apiserver`'s flags (parsed by its own parser, so the same names, types
and errors) and gives each child the ones that concern it, as written:

* every child: the key prefix, per-resource etcd overrides, `--read-only`, `-v`;
* the shards: the watch cache, residency and warm-restart and compression flags; each gets `--residency` (range i
  of K), a loopback port and `<state-dir>/shard-i`; shard 0 alone compacts etcd (`--etcd-compaction-interval`),
  as one kube-apiserver per etcd cluster would need to; `--request-timeout` doubled (0 stays 0), so the front
  that proxies a request always ends it first and a timed-out client request is answered, and counted in
  apiserver_request_terminations_total, once;
* the fronts: the listening address and ports (bound with `--reuse-port`), TLS, authentication, authorization,
  `--request-timeout`, `--front-shared-watches`; `--max-requests-inflight` and
  `--max-mutating-requests-inflight` are the deployment's, so each front gets its N-th (rounded up); each front
  also serves a loopback `--admin-port`, where the supervisor reaches it alone (readiness, /metrics,
  /debug/residency).

Shards listen on loopback without authentication: every client request has been authenticated and authorized by
the front that proxies it; the shards' ports are not the deployment's address. The fronts reach the shards on
each shard's `--unix-socket` (`<state-dir>/shard-i.sock`, owner-only): a 5 MB list costs sender and receiver
about a third of loopback TCP's CPU, and `bench.front` measured unsharded lists through the front 1.11x a full
replica's against 1.19x over TCP (medians of five interleaved pairs); the shards' TCP ports stay for the
supervisor's probes, /metrics and /debug/residency.

Defaults. N = the cores less the K shards, at least 1 (`default_fronts`): one process per core, since each is one
event loop and more of them than cores only share the cores. The fronts do the client-facing work (TLS, encoding,
fan-out to watchers, authorization), which grows with clients and spreads over cores. With N = the cores, two fronts
and a shard shared this 2-core machine with etcd, and each front saw half of the writes: an update through a front
that had not written the object read etcd first, and a front's copy another front had since made stale cost a failed
Txn (a Raft round) before the write; one front made the same writes with less CPU per write, and scored as well on
fan-out (README, "On 2 cores, one front"). With one front, a front that dies leaves the address without a server
until it is restarted; --fronts 2 keeps one serving. K = 1: every shard reads every event of the resources it caches
from etcd (residency drops the objects outside its range after decoding), so K shards do K times that work: K buys
memory per process (a K-th of the state), not CPU; raise it when the state does not fit one process.

Restarts. A child that exits is started again after a backoff: 1 s, doubled for each exit in a row up to 30 s,
back to 1 s once a child has run 60 s. The children are forked from a zygote (`deployment/zygote.py`: one
process that imported the server once, so the imports' pages are shared; `--zygote=false` starts each as its own
`python -m apiserver`). The zygote ends when the supervisor does, and each child has PR_SET_PDEATHSIG towards
its parent: if the supervisor dies, so do its children. SIGTERM or SIGINT stops the fronts first (they end their
watches; clients go on through whoever is left, or reconnect), then the shards, then the embedded etcds.

The deployment's endpoints (`--deployment-port`, loopback): `/readyz` (200 once every child is ready),
`/metrics` (every child's metrics, each series labelled `process="front-0"` ..., and the supervisor's
`deployment_child_up`, `deployment_child_restarts_total`, `deployment_child_pss_bytes`,
`deployment_zygote_pss_bytes`), `/debug/residency` (every child's report; each shard's `wholeResources`, the caches
of the resources every shard keeps whole, so K times over; and the deployment's memory: the sum of the children's,
the zygote's and the supervisor's PSS).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from apiserver.auth.user import LOOPBACK_TOKEN_ENV
from machinery.http1 import unix_url
from machinery.shard_selector import complementary
from storage.embedded import EmbeddedEtcd, find_etcd, free_port, lease_etcd

from .zygote import Zygote, ZygoteError, ZygoteProcess, set_deathsig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Which apiserver flags (by argparse dest) each kind of child takes.
COMMON = {"etcd_prefix", "etcd_servers_overrides", "read_only", "verbosity"}
SHARD = COMMON | {"watch_cache", "residency_full_resources", "warm_restart", "cache_snapshot_interval",
                  "cache_compression", "cache_compression_eager"}
FRONT = COMMON | {"request_timeout", "bind_address", "port", "secure_port", "tls_cert_file", "tls_private_key_file",
                  "authorization_mode", "token_auth_file", "client_ca_file", "anonymous_auth", "front_shared_watches"}
DIVIDED = {"max_requests_inflight", "max_mutating_requests_inflight"}   # the deployment's, split over the fronts
PARENT = {"etcd_servers", "embedded_lease_etcd", "state_dir", "etcd_compaction_interval"}
REFUSED = {"front", "shards", "residency", "reuse_port", "admin_port", "unix_socket"}

BACKOFF_FIRST, BACKOFF_MAX, BACKOFF_RESET_AFTER = 1.0, 30.0, 60.0
START_TIMEOUT = 180.0


class DeploymentError(RuntimeError):
    pass


def split_flags(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, list[str]]:
    """The command line's apiserver flags, each as written (its tokens), by argparse dest."""
    by_opt = {o: a for a in parser._actions for o in a.option_strings}
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        tok = argv[i]
        name, eq, _ = tok.partition("=")
        action = by_opt.get(name)
        if action is None:
            raise DeploymentError(f"unknown flag {tok!r}")
        toks = [tok]
        if not eq and action.nargs != 0:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if action.nargs == "?":
                if nxt is not None and not nxt.startswith("-"):
                    toks.append(nxt)
            elif nxt is None:
                raise DeploymentError(f"{name} needs a value")
            else:
                toks.append(nxt)
        out.setdefault(action.dest, []).extend(toks)
        i += len(toks)
    return out


# The supervisor's own credential for its children's loopback ports (readiness, /metrics, /debug/residency) where
# the deployment authenticates: a fresh token per supervisor, given to the children in their environment
# (owner-only in /proc, unlike the command line), authenticated there as system:apiserver (apiserver.auth.authn).
LOOPBACK_TOKEN = secrets.token_urlsafe(32)


def child_env() -> dict[str, str]:
    """The supervisor's environment with the repository importable (children run from the supervisor's directory)
    and the supervisor's loopback token."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
                **{LOOPBACK_TOKEN_ENV: LOOPBACK_TOKEN})


def probe(url: str, timeout: float):
    """urlopen `url` with the supervisor's loopback token."""
    return urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": f"Bearer {LOOPBACK_TOKEN}"}),
                                  timeout=timeout)


def pss_bytes(pid: int) -> int:
    """Proportional set size (/proc/PID/smaps_rollup): shared pages counted once across the deployment."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Child:
    """One apiserver process of the deployment; `probe` is its loopback base URL (readiness, metrics, reports)."""

    def __init__(self, name: str, role: str, argv: list[str], probe: str, log_dir: str,
                 zygote: "Zygote | None" = None):
        self.name, self.role, self.argv, self.probe, self.zygote = name, role, argv, probe, zygote
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.popen: subprocess.Popen | ZygoteProcess | None = None
        self.restarts = 0
        self.started_at = 0.0
        self.backoff = BACKOFF_FIRST
        self.restart_at: float | None = None
        self.stopping = False

    def start(self) -> None:
        # In the supervisor's directory (relative paths in the flags mean what they meant to it), with the
        # repository importable from there.
        env = child_env()
        if self.zygote is not None:
            try:
                self.popen = self.zygote.spawn(self.argv, log=self.log_path, cwd=os.getcwd(), env=env, deathsig=True,
                                               name=self.name)
                self.started_at = time.monotonic()
                return
            except ZygoteError as e:
                say(f"{self.name}: {e}; starting it as its own process")
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env, start_new_session=True, preexec_fn=set_deathsig)
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None and self.popen.poll() is None else None

    def ready(self) -> bool:
        if self.pid is None:
            return False
        try:
            with probe(self.probe + "/readyz", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def get(self, path: str, timeout: float = 5.0) -> bytes | None:
        try:
            with probe(self.probe + path, timeout=timeout) as r:
                return r.read()
        except (OSError, urllib.error.URLError):
            return None

    def log_tail(self, lines: int = 8) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""

    def terminate(self) -> None:
        self.stopping = True
        if self.pid is not None:
            self.popen.terminate()

    def wait_stopped(self, timeout: float) -> None:
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class Deployment:
    def __init__(self, shards: int, fronts: int, flags: dict[str, list[str]], values: argparse.Namespace,
                 deployment_port: int = 0, zygote: bool = True):
        if shards < 1 or fronts < 1:
            raise DeploymentError("--shards and --fronts must be at least 1")
        bad = sorted(set(flags) & REFUSED)
        if bad:
            raise DeploymentError("the deployment sets these itself: " + ", ".join("--" + b.replace("_", "-")
                                                                                     for b in bad))
        if not values.port and not values.secure_port:
            raise DeploymentError("nothing to serve: both --port and --secure-port are 0")
        self.k, self.n, self.flags, self.values = shards, fronts, flags, values
        # Ports handed to this process that nothing has bound yet: the children's own picks must not take them
        # (free_port in a range walks from a random start, so a shard or an admin port could land on the
        # fronts' --port before they bind it, or on the deployment's port before it listens).
        self._taken = {p for p in (values.port, values.secure_port, deployment_port) if p}
        self.deployment_port = deployment_port or self._port()
        self.started = False   # /readyz says 'starting' until every child has been ready once
        self.state_dir = os.path.abspath(values.state_dir)
        self.log_dir = os.path.join(self.state_dir, "logs")
        self.etcd: EmbeddedEtcd | None = None
        self.lease_etcd: EmbeddedEtcd | None = None
        self.children: list[Child] = []
        self._socket_dir: str | None = None   # (_socket_path)
        self.stop_requested = threading.Event()
        self.server: ThreadingHTTPServer | None = None
        # The children are forked from one zygote that imported the server once (deployment/zygote.py says why);
        # `--zygote=false` runs each as its own `python -m apiserver`.
        self.zygote = Zygote(cwd=ROOT, env=child_env()) if zygote else None

    def _port(self) -> int:
        p = free_port(avoid=self._taken)
        self._taken.add(p)
        return p

    # --- the children's command lines ---------------------------------------------------------------

    def _pass(self, dests: set[str]) -> list[str]:
        return [t for d in sorted(dests & set(self.flags)) for t in self.flags[d]]

    def _apiserver(self) -> list[str]:
        return [sys.executable, "-m", "apiserver", "--etcd-servers", self.etcd_servers]

    def _overrides(self) -> list[str]:
        if self.lease_etcd is None:
            return []
        given = self.values.etcd_servers_overrides
        own = f"coordination.k8s.io/leases#{self.lease_etcd.endpoint}"
        return ["--etcd-servers-overrides", f"{given},{own}" if given else own]

    def plan(self) -> None:
        """The children, with their ports and state directories (started by `start`)."""
        common_extra = self._overrides()
        drop = {"etcd_servers_overrides"} if common_extra else set()
        shard_urls = []
        for i, sel in enumerate(complementary(self.k)):
            port = self._port()
            url = f"http://127.0.0.1:{port}"
            sock = self._socket_path(f"shard-{i}.sock")
            shard_urls.append(unix_url(sock))
            argv = self._apiserver() + self._pass(SHARD - drop) + common_extra + [
                "--bind-address", "127.0.0.1", "--port", str(port), "--secure-port", "0", "--unix-socket", sock,
                "--state-dir", os.path.join(self.state_dir, f"shard-{i}"),
                "--etcd-compaction-interval", self._compaction() if i == 0 else "0",
                "--request-timeout", f"{2 * self.values.request_timeout:g}s"]
            if self.k > 1:
                argv += ["--residency", str(sel)]
            self.children.append(Child(f"shard-{i}", "shard", argv, url, self.log_dir, self.zygote))
        for j in range(self.n):
            admin = self._port()
            argv = self._apiserver() + self._pass(FRONT - drop) + common_extra + self._divided() + [
                "--front", "--shards", ",".join(shard_urls), "--reuse-port", "--admin-port", str(admin),
                "--state-dir", os.path.join(self.state_dir, f"front-{j}"), "--etcd-compaction-interval", "0"]
            self.children.append(Child(f"front-{j}", "front", argv, f"http://127.0.0.1:{admin}", self.log_dir,
                                       self.zygote))

    def _socket_path(self, name: str) -> str:
        """Where a shard's --unix-socket is: in the state directory, or where its path fits a Unix socket's
        address (108 bytes on Linux) in a directory of the deployment's own under the temporary directory."""
        path = os.path.join(self.state_dir, name)
        if len(path.encode()) < 100:
            return path
        if self._socket_dir is None:
            self._socket_dir = tempfile.mkdtemp(prefix="deployment-")
        return os.path.join(self._socket_dir, name)

    def _compaction(self) -> str:
        toks = self.flags.get("etcd_compaction_interval")
        return toks[-1].partition("=")[2] or toks[-1] if toks else "5m"

    def _divided(self) -> list[str]:
        out = []
        for dest in sorted(DIVIDED):   # 0 (no limit) stays 0
            out += ["--" + dest.replace("_", "-"), str(math.ceil(getattr(self.values, dest) / self.n))]
        return out

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        # The deployment's own port first: a port that cannot be bound fails the start before any child runs.
        self._serve_endpoints()
        if self.values.etcd_servers:
            self.etcd_servers = self.values.etcd_servers
        else:
            binary = find_etcd()
            self.etcd = EmbeddedEtcd(data_dir=os.path.join(self.state_dir, "etcd"), binary=binary.path,
                                     client_port=self._port(), peer_port=self._port()).start()
            self.etcd_servers = self.etcd.endpoint
            say(f"embedded etcd: {self.etcd.endpoint} data={self.etcd.data_dir} binary={binary.path} "
                f"version={binary.version or 'unknown'} ({binary.source})")
        if self.values.embedded_lease_etcd:
            self.lease_etcd = lease_etcd(find_etcd().path, state_dir=self.state_dir,
                                        ports=(self._port(), self._port()))
            say(f"embedded lease etcd: {self.lease_etcd.endpoint} (no fsync, tmpfs)")
        self.plan()
        deadline = time.monotonic() + START_TIMEOUT
        for role in ("shard", "front"):   # the fronts learn the shards' ranges when they start
            group = [c for c in self.children if c.role == role]
            for c in group:
                c.start()
            self._wait_ready(group, deadline)
        self.started = True

    def _wait_ready(self, group: list[Child], deadline: float) -> None:
        waiting = list(group)
        while waiting:
            for c in list(waiting):
                if c.popen.poll() is not None:
                    raise DeploymentError(f"{c.name} exited with {c.popen.returncode} while starting "
                                          f"({c.log_path}):\n{c.log_tail()}")
                if c.ready():
                    waiting.remove(c)
            if self.stop_requested.is_set():
                raise DeploymentError("stopped while starting")
            if waiting and time.monotonic() > deadline:
                raise DeploymentError(f"not ready in {START_TIMEOUT:.0f} s: "
                                      + ", ".join(f"{c.name} ({c.log_path})" for c in waiting))
            time.sleep(0.2)

    def supervise(self) -> None:
        """Restart children that exit, until a stop is requested."""
        while not self.stop_requested.wait(0.2):
            now = time.monotonic()
            for c in self.children:
                if c.popen.poll() is None:
                    continue
                if c.restart_at is None:
                    ran = now - c.started_at
                    if ran >= BACKOFF_RESET_AFTER:
                        c.backoff = BACKOFF_FIRST
                    c.restart_at = now + c.backoff
                    say(f"{c.name} (pid {c.popen.pid}) exited with {c.popen.returncode} after {ran:.1f} s; "
                        f"restarting in {c.backoff:.0f} s; log {c.log_path}")
                    c.backoff = min(c.backoff * 2, BACKOFF_MAX)
                elif now >= c.restart_at:
                    c.restart_at = None
                    c.restarts += 1
                    c.start()
                    say(f"{c.name} restarted (pid {c.popen.pid}, restart {c.restarts})")

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for role in ("front", "shard"):
            group = [c for c in self.children if c.role == role]
            for c in group:
                c.terminate()
            for c in group:
                c.wait_stopped(15)
        if self.zygote is not None:
            self.zygote.stop()
        for e in (self.lease_etcd, self.etcd):
            if e is not None:
                e.stop()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    # --- the deployment's endpoints --------------------------------------------------------------------

    def _serve_endpoints(self) -> None:
        dep = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:   # noqa: N802 (http.server's name)
                path = self.path.split("?")[0].rstrip("/")
                if path == "/healthz":
                    body, ctype, code = b"ok", "text/plain", 200
                elif path == "/readyz":
                    down = [c.name for c in dep.children if not c.ready()] if dep.started else ["starting"]
                    body = (b"ok" if not down else ("not ready: " + ", ".join(down)).encode())
                    ctype, code = "text/plain", 200 if not down else 500
                elif path == "/metrics":
                    body, ctype, code = dep.metrics().encode(), "text/plain; version=0.0.4", 200
                elif path == "/debug/residency":
                    body, ctype, code = json.dumps(dep.report()).encode(), "application/json", 200
                else:
                    body, ctype, code = b"404 page not found", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.deployment_port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def metrics(self) -> str:
        """Every child's /metrics with a `process` label on each series (HELP/TYPE once per family), then the
        supervisor's own."""
        seen: set[str] = set()
        out: list[str] = []
        for c in self.children:
            text = c.get("/metrics")
            if text is None:
                continue
            for line in text.decode(errors="replace").splitlines():
                if not line:
                    continue
                if line.startswith("#"):
                    if line not in seen:
                        seen.add(line)
                        out.append(line)
                    continue
                out.append(label_series(line, c.name))
        for name, kind, help_, value in (
                ("deployment_child_up", "gauge", "1 if the child process is running", lambda c: int(c.pid is not None)),
                ("deployment_child_restarts_total", "counter", "times the supervisor restarted the child",
                 lambda c: c.restarts),
                ("deployment_child_pss_bytes", "gauge", "the child's proportional set size",
                 lambda c: pss_bytes(c.pid) if c.pid else 0)):
            out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            out += [f'{name}{{process="{c.name}",role="{c.role}"}} {value(c)}' for c in self.children]
        if self.zygote is not None:
            out += ["# HELP deployment_zygote_pss_bytes the proportional set size of the process the children are "
                    "forked from", "# TYPE deployment_zygote_pss_bytes gauge",
                    f"deployment_zygote_pss_bytes {pss_bytes(self.zygote.pid) if self.zygote.pid else 0}"]
        return "\n".join(out) + "\n"

    def report(self) -> dict:
        procs = []
        for c in self.children:
            raw = c.get("/debug/residency")
            try:
                rep = json.loads(raw) if raw else None
            except ValueError:
                rep = None
            procs.append({"name": c.name, "role": c.role, "pid": c.pid, "url": c.probe, "restarts": c.restarts,
                          "pssBytes": pss_bytes(c.pid) if c.pid else 0, "report": rep,
                          "wholeResources": whole_resources(rep) if c.role == "shard" and rep else None})
        own = pss_bytes(os.getpid())
        zygote = pss_bytes(self.zygote.pid) if self.zygote is not None and self.zygote.pid else 0
        whole = [p["wholeResources"] for p in procs if p["wholeResources"]]
        return {"shards": self.k, "fronts": self.n, "processes": procs,
                "zygote": {"pid": self.zygote.pid if self.zygote is not None else None, "pssBytes": zygote},
                "memory": {"supervisorPssBytes": own, "zygotePssBytes": zygote,
                           "totalPssBytes": own + zygote + sum(p["pssBytes"] for p in procs),
                           # What every shard holds whole (its --residency-full-resources), so K times over.
                           "wholeResourcesBytes": sum(w["bytes"] for w in whole)}}

    def urls(self) -> list[str]:
        host = self.values.bind_address
        host = f"[{host}]" if ":" in host else host
        out = []
        if self.values.port:
            out.append(f"http://{host}:{self.values.port}")
        if self.values.secure_port:
            out.append(f"https://{host}:{self.values.secure_port}")
        return out


def whole_resources(rep: dict) -> dict:
    """A shard's caches of the resources it keeps whole whatever its range (namespaces, CRDs, RBAC kinds: each of
    the K shards holds them all): objects and bytes by its own /debug/residency accounting."""
    full = set(rep.get("fullResources") or ())
    objs = size = 0
    for name, st in (rep.get("resources") or {}).items():
        if name.split(".", 1)[0] in full:
            objs += st.get("objects", 0)
            size += sum(st.get(k, 0) for k in ("entry_bytes", "btree_bytes", "bitmap_bytes", "slots_bytes",
                                                 "history_bytes"))
    return {"objects": objs, "bytes": size}


def label_series(line: str, process: str) -> str:
    """`name{a="b"} 1` -> `name{process="p",a="b"} 1`; `name 1` -> `name{process="p"} 1`."""
    name_end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
    if name_end < len(line) and line[name_end] == "{":
        rest = line[name_end + 1:]
        sep = "" if rest.startswith("}") else ","
        return f'{line[:name_end]}{{process="{process}"{sep}{rest}'
    return f'{line[:name_end]}{{process="{process}"}}{line[name_end:]}'


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def default_fronts(k: int, cores: int | None = None) -> int:
    """N when --fronts is not given: the cores less the K shards, at least 1 (the module's docstring says why)."""
    return max(1, (cores or os.cpu_count() or 1) - k)


def main(argv: list[str] | None = None) -> int:
    from apiserver.flags import build_parser
    argv = list(sys.argv[1:] if argv is None else argv)
    own = argparse.ArgumentParser(prog="python -m deployment", add_help=False)
    own.add_argument("--shards", dest="k", type=int, default=1)
    own.add_argument("--fronts", dest="n", type=int, default=None)
    own.add_argument("--deployment-port", type=int, default=0)
    own.add_argument("--zygote", choices=("true", "false"), default="true")
    own.add_argument("-h", "--help", action="store_true")
    mine, rest = own.parse_known_args(argv)
    apiserver = build_parser()
    if mine.help:
        print(__doc__.split("\n\n")[0].strip() + "\n\n  python -m deployment [--shards K (default 1)] "
              f"[--fronts N (default: the cores less K, at least 1; {default_fronts(1)} here with K = 1)] "
              "[--deployment-port P]\n"
              "                     [--zygote true|false (default true: the children forked from one process "
              "that imported the server)] [apiserver flags]\n\n"
              "apiserver flags:\n" + apiserver.format_help().split("\n", 2)[-1])
        return 0
    if mine.n is None:
        mine.n = default_fronts(mine.k)
    try:
        flags = split_flags(apiserver, rest)
        values = apiserver.parse_args(rest)   # the apiserver's own checks and messages (exit 2)
        dep = Deployment(mine.k, mine.n, flags, values, mine.deployment_port, zygote=mine.zygote == "true")
    except DeploymentError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: dep.stop_requested.set())
    try:
        dep.start()
    except (DeploymentError, FileNotFoundError, RuntimeError, TimeoutError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        dep.stop()
        return 1
    say(f"deployment ready: {' '.join(dep.urls())} ({dep.n} fronts, {dep.k} shards) "
        f"deployment=http://127.0.0.1:{dep.deployment_port} etcd={dep.etcd_servers} logs={dep.log_dir}")
    for c in dep.children:
        say(f"  {c.name}: pid {c.pid} {c.probe}")
    try:
        dep.supervise()
    finally:
        say("shutting down")
        dep.stop()
    return 0

