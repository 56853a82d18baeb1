"""A recipe's processes, started on loopback in dependency order and stopped in reverse: etcd stores, the
apiservers (this project's or kube-apiserver, N of them behind a TCP balancer) or a deployment of resident
shards and fronts, the node-facing tiers, then the controllers and kwok.

Clients reach the control plane through `Topology.api` (URL, TLS material); kwok reaches it through the node
tier where the recipe has one (`Topology.node_server`). Our apiservers serve plain HTTP on loopback (no
credentials: every request is system:masters); kube-apiserver serves HTTPS with a throwaway CA and an admin
client certificate, since 1.37 refuses anonymous requests.
"""
from __future__ import annotations

import json
import os
import shutil
import ssl
import sys
import tempfile
import time

from machinery.shard_selector import complementary
from storage.embedded import EmbeddedEtcd, free_port

from . import binaries
from .client import Client, Endpoint
from .pki import make_pki
from .processes import Child, StartError, die_with_launcher, http_ok
from .spec import Process, Recipe

ROOT = binaries.ROOT
PY = sys.executable


class Topology:
    """Everything one run of a recipe starts. `start()` returns once every process is ready; `stop()` stops
    every process it started (by pid), controllers first and etcd last, and removes the run's data unless
    `keep`."""

    def __init__(self, recipe: Recipe, implementation: str, run_dir: str, *, nodes: int = 0, say=print,
                 port: int = 0, etcd_servers: str | None = None, keep_data: bool = False, etcd_binary: str = ""):
        """`port`: the control plane's address (else a free one); `etcd_servers`: an existing etcd for the default
        store (not started, not stopped); `keep_data`: the stores' data in `<run_dir>/etcd-<store>`, kept after
        `stop` so a topology started again on the same directory resumes (tmpfs stores stay temporary);
        `etcd_binary`: the etcd to start (else the current one tools/build_etcd.py builds)."""
        if implementation not in recipe.implementations:
            raise StartError(f"recipe {recipe.name} does not run on {implementation!r} "
                             f"(it runs on: {', '.join(recipe.implementations)})")
        self.recipe = recipe
        self.impl = implementation
        self.run_dir = run_dir
        self.nodes = nodes
        self.say = say
        self.stores: dict[str, EmbeddedEtcd] = {}
        self.children: list[Child] = []     # in start order
        self.api: Endpoint | None = None
        self.node_server: Endpoint | None = None
        self.apiservers: list[Endpoint] = []  # each apiserver (or front port) that serves /metrics
        self.tiers: list[Endpoint] = []
        self.controller_urls: list[str] = []  # sharded controllers' HTTP ports
        self.deployment_metrics: str | None = None   # a deployment's own port: every child's /metrics
        self.pki: str | None = None
        self.api_port = port
        self.etcd_servers = etcd_servers
        self.keep_data = keep_data
        self.etcd_binary = etcd_binary
        self._taken: set[int] = {port} if port else set()

    # --- helpers --------------------------------------------------------------------------------------

    def port(self) -> int:
        p = free_port(avoid=self._taken)
        self._taken.add(p)
        return p

    def _child(self, name: str, argv: list[str], *, ready=None, kind: str = "", python: bool = True,
               env: dict | None = None) -> Child:
        c = Child(name, argv, self.run_dir, ready=ready, kind=kind, python=python, say=self.say,
                  env=dict(os.environ, **env) if env else None)
        self.children.append(c)
        return c.start()

    def _ready_all(self, group: list[Child], timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        for c in group:
            c.wait_ready(deadline)

    # --- start ----------------------------------------------------------------------------------------

    def start(self) -> "Topology":
        try:
            self._start_stores()
            self._start_control_plane()
            self._start_node_tiers()
            self._start_controllers()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_stores(self) -> None:
        etcd = None
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        for s in self.recipe.stores:
            if s.default and self.etcd_servers:
                self.say(f"  using etcd-{s.name:<22} {self.etcd_servers} (given: not started or stopped here)")
                self.stores[s.name] = GivenEtcd(self.etcd_servers)
                continue
            etcd = etcd or self.etcd_binary or binaries.binary("etcd", self.say)
            # durability "none": no fsync and data on tmpfs, for data whose loss costs one renewal period
            extra = ["--unsafe-no-fsync"] if s.durability == "none" else []
            keep = self.keep_data and s.durability != "none"
            if keep:
                data = os.path.join(self.run_dir, f"etcd-{s.name}")
            else:
                data = tempfile.mkdtemp(prefix=f"etcd-{s.name}-", dir=shm if s.durability == "none" else self.run_dir)
            e = EmbeddedEtcd(data_dir=data, binary=etcd, client_port=self.port(), peer_port=self.port(),
                             log_path=os.path.join(self.run_dir, f"etcd-{s.name}.log"), preexec=die_with_launcher(),
                             extra_args=extra + ["--auto-compaction-mode=periodic", "--auto-compaction-retention=5m"])
            if not keep:
                e._tmp = data  # removed on stop
            self.say(f"  starting etcd-{s.name:<19} {e.endpoint} ({s.durability}"
                     f"{'; ' + ', '.join(s.resources) if s.resources else '; every other resource'}) "
                     f"log {e.log_path}")
            self.stores[s.name] = e.start()

    def etcd_flags(self) -> list[str]:
        return self.recipe.etcd_flags(lambda s: self.stores[s.name].endpoint)

    def _start_control_plane(self) -> None:
        p = self.recipe.process("deployment") or self.recipe.process("apiserver")
        if p.kind == "deployment":
            self._start_deployment(p)
        elif self.impl == "kube":
            self._start_kube_apiservers(p)
        else:
            self._start_our_apiservers(p)
        if len(self.apiservers) > 1 and p.kind == "apiserver":
            port = self.api_port or self.port()
            backends = [f"127.0.0.1:{e.url.rsplit(':', 1)[1]}" for e in self.apiservers]
            argv = [PY, "-m", "recipes.balancer", "--listen", f"127.0.0.1:{port}"]
            for b in backends:
                argv += ["--backend", b]
            front = self.apiservers[0]
            self.api = Endpoint(f"{front.url.split('://')[0]}://127.0.0.1:{port}", front.ca, front.cert)
            ctx = self.api.ssl()
            self._ready_all([self._child("balancer", argv, ready=lambda: http_ok(self.api.url + "/readyz", ctx))])
        else:
            self.api = self.apiservers[0]
        self.node_server = self.api

    def _start_our_apiservers(self, p: Process) -> None:
        group = []
        for i in range(p.count):
            port = self.api_port if p.count == 1 and self.api_port else self.port()
            name = "apiserver" if p.count == 1 else f"apiserver-{i}"
            argv = [PY, "-m", "apiserver", *self.etcd_flags(), "--port", str(port),
                    "--state-dir", os.path.join(self.run_dir, name), *p.flags]
            if i > 0:   # one apiserver compacts the store, as one kube-apiserver's compactor wins the lease
                argv.append("--etcd-compaction-interval=0")
            url = f"http://127.0.0.1:{port}"
            group.append(self._child(name, argv, ready=lambda u=url: http_ok(u + "/readyz"), kind="apiserver"))
            self.apiservers.append(Endpoint(url))
        self._ready_all(group)

    def _start_kube_apiservers(self, p: Process) -> None:
        self.pki = os.path.join(self.run_dir, "pki")
        os.makedirs(self.pki, exist_ok=True)
        make_pki(self.pki)
        k = lambda n: os.path.join(self.pki, n)  # noqa: E731
        exe = binaries.binary("kube-apiserver", self.say)
        group = []
        for i in range(p.count):
            port = self.api_port if p.count == 1 and self.api_port else self.port()
            name = "kube-apiserver" if p.count == 1 else f"kube-apiserver-{i}"
            argv = [exe, *self.etcd_flags(), "--bind-address=127.0.0.1", f"--secure-port={port}",
                    f"--cert-dir={k(name)}", f"--tls-cert-file={k('serving.crt')}",
                    f"--tls-private-key-file={k('serving.key')}", f"--client-ca-file={k('ca.crt')}",
                    "--authorization-mode=AlwaysAllow", f"--service-account-key-file={k('sa.pub')}",
                    f"--service-account-signing-key-file={k('sa.key')}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    "--endpoint-reconciler-type=none", "--service-cluster-ip-range=10.96.0.0/16",
                    "--disable-admission-plugins=ServiceAccount", "--storage-media-type=application/json",
                    *p.flags]
            ep = Endpoint(f"https://127.0.0.1:{port}", k("ca.crt"), (k("admin.crt"), k("admin.key")))
            ctx = ep.ssl()
            group.append(self._child(name, argv, ready=lambda u=ep.url, c=ctx: http_ok(u + "/readyz", c),
                                     kind="kube-apiserver", python=False))
            self.apiservers.append(ep)
        self._ready_all(group)

    def _start_deployment(self, p: Process) -> None:
        port, dport = self.api_port or self.port(), self.port()
        shards = int(p.options.get("shards", 1))
        fronts = int(p.options.get("fronts", 2))
        state = os.path.join(self.run_dir, "deployment")
        argv = [PY, "-m", "deployment", "--shards", str(shards), "--fronts", str(fronts),
                "--deployment-port", str(dport), *self.etcd_flags(), "--port", str(port),
                "--state-dir", state, *p.flags]
        url = f"http://127.0.0.1:{port}"
        self._ready_all([self._child("deployment", argv, ready=lambda: http_ok(url + "/readyz")
                                     and http_ok(f"http://127.0.0.1:{dport}/readyz"), kind="deployment")])
        self.apiservers.append(Endpoint(url))
        # its own port gathers every child's /metrics (label process="...")
        self.deployment_metrics = f"http://127.0.0.1:{dport}"
        # what the supervisor started, each with its log (its children are forked from a zygote of its own)
        try:
            code, body = Client(Endpoint(self.deployment_metrics)).request("GET", "/debug/residency", timeout=10)
            children = json.loads(body).get("processes", []) if code == 200 else []
        except (OSError, ValueError):
            children = []
        for c in children:
            log = os.path.join(state, "logs", f"{c['name']}.log")
            self.say(f"    deployment's {c['name']:<11} pid {c['pid']:<7} log {log if os.path.exists(log) else '-'}")

    def _start_node_tiers(self) -> None:
        p = self.recipe.process("nodetier")
        if p is None:
            return
        ports = [self.port() for _ in range(p.count)]
        urls = [f"http://127.0.0.1:{q}" for q in ports]
        group = []
        for i, q in enumerate(ports):
            argv = [PY, "-m", "nodetier", "--control-plane", self.api.url, "--port", str(q), *p.flags]
            if p.count > 1:
                argv += ["--tiers", ",".join(urls), "--tier-index", str(i)]
            group.append(self._child(f"nodetier-{i}" if p.count > 1 else "nodetier", argv,
                                     ready=lambda u=urls[i]: http_ok(u + "/readyz"), kind="nodetier"))
            self.tiers.append(Endpoint(urls[i]))
        self._ready_all(group)
        self.node_server = self.tiers[0]

    def _start_controllers(self) -> None:
        for p in self.recipe.processes:
            if p.kind == "kube-scheduler":
                self._start_scheduler(p)
            elif p.kind == "kube-controller-manager":
                self._start_kcm(p)
            elif p.kind == "slice-controllers":
                self._start_slice_controllers(p)
        for p in self.recipe.processes:
            if p.kind == "kwok":
                self._start_kwok(p)

    def _go_dir(self, name: str, server: Endpoint) -> tuple[str, str]:
        d = os.path.join(self.run_dir, name)
        os.makedirs(d, exist_ok=True)
        return d, server.kubeconfig(os.path.join(d, "kubeconfig"))

    def _start_scheduler(self, p: Process) -> None:
        exe = binaries.binary("kube-scheduler", self.say)
        group = []
        for i in range(p.count):
            name = "kube-scheduler" if p.count == 1 else f"kube-scheduler-{i}"
            d, kc = self._go_dir(name, self.api)
            config = os.path.join(d, "config.yaml")
            with open(config, "w") as f:
                f.write("\n".join([
                    "apiVersion: kubescheduler.config.k8s.io/v1", "kind: KubeSchedulerConfiguration",
                    "clientConnection:", f"  kubeconfig: {kc}", "  qps: 200", "  burst: 400",
                    "leaderElection:", f"  leaderElect: {'true' if p.count > 1 else 'false'}", ""]))
            port = self.port()
            argv = [exe, f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={d}",
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics", "-v=1", *p.flags]
            group.append(self._child(name, argv, ready=lambda q=port: http_ok(f"https://127.0.0.1:{q}/healthz",
                                                                               _insecure()),
                                     kind="kube-scheduler", python=False, env={"HOME": d}))
        self._ready_all(group)

    def _start_kcm(self, p: Process) -> None:
        exe = binaries.binary("kube-controller-manager", self.say)
        controllers = ",".join(p.options.get("controllers", ["deployment-controller", "replicaset-controller"]))
        group = []
        for i in range(p.count):
            name = "kube-controller-manager" if p.count == 1 else f"kube-controller-manager-{i}"
            d, kc = self._go_dir(name, self.api)
            port = self.port()
            argv = [exe, f"--kubeconfig={kc}", f"--leader-elect={'true' if p.count > 1 else 'false'}",
                    f"--controllers={controllers}", "--bind-address=127.0.0.1", f"--secure-port={port}",
                    f"--cert-dir={d}", "--authentication-skip-lookup=true",
                    "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                    "--kube-api-qps=200", "--kube-api-burst=400", "-v=1", *p.flags]
            group.append(self._child(name, argv, ready=lambda q=port: http_ok(f"https://127.0.0.1:{q}/healthz",
                                                                               _insecure()),
                                     kind="kube-controller-manager", python=False, env={"HOME": d}))
        self._ready_all(group)

    def _start_slice_controllers(self, p: Process) -> None:
        """One sharded Widget controller per hash range, against the control plane's address (the front
        routes a sharded watch to the shard that holds the range)."""
        from shardslice import widgets
        with Client(self.api) as c:
            code, body = c.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgets.crd())
            if code not in (201, 409):
                raise StartError(f"creating the Widget CRD: HTTP {code}: {body[:300]!r}")
            deadline = time.monotonic() + 60
            while c.request("GET", widgets.collection() + "?limit=1")[0] != 200:
                if time.monotonic() > deadline:
                    raise StartError("the Widget CRD is not served after 60 s")
                time.sleep(0.2)
        group = []
        for i, sel in enumerate(complementary(p.count)):
            port = self.port()
            argv = [PY, "-m", "shardslice", "controller", "--server", self.api.url, "--shard-selector", str(sel),
                    "--name", f"controller-{i}", "--port", str(port),
                    "--workers", str(p.options.get("workers", 4)), *p.flags]
            url = f"http://127.0.0.1:{port}"
            group.append(self._child(f"controller-{i}", argv, ready=lambda u=url: http_ok(u + "/healthz"),
                                     kind="slice-controller"))
            self.controller_urls.append(url)
        self._ready_all(group)

    def _start_kwok(self, p: Process) -> None:
        exe = binaries.binary("kwok", self.say)
        stages = binaries.load_tool("build_kwok").stage_files()
        for i in range(p.count):
            name = "kwok" if p.count == 1 else f"kwok-{i}"
            d, kc = self._go_dir(name, self.node_server)
            # each kwok holds the nodes whose annotation names it (recipes.workloads.kwok_node)
            argv = [exe, "--kubeconfig", kc, "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={name}",
                    "--node-lease-duration-seconds=40", f"--server-address=127.0.0.1:{self.port()}", *p.flags]
            config = os.path.join(d, "kwok-config.yaml")
            with open(config, "w") as f:
                f.write("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
                        + "".join(f"  {k}: {v}\n" for k, v in KWOK_OPTIONS.items()))
            for path in [config, *stages]:
                argv += ["--config", path]
            self._child(name, argv, kind="kwok", python=False, env={"HOME": d})

    # --- stop -----------------------------------------------------------------------------------------

    def check_alive(self) -> None:
        for c in self.children:
            if c.exited() is not None:
                raise c.failure(f"exited with {c.popen.returncode}")

    def stop(self) -> None:
        for c in reversed(self.children):
            c.terminate()
        for c in reversed(self.children):
            c.stop()
        for e in reversed(list(self.stores.values())):
            e.stop()
        self.stores.clear()
        if self.pki:
            shutil.rmtree(self.pki, ignore_errors=True)


class GivenEtcd:
    """A store the user runs (`recipes up --etcd-servers`): used, never started or stopped."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint

    def stop(self) -> None:
        pass


# kwok's KwokConfiguration: a configuration file replaces every default, so the defaults are repeated
# (tests/helpers/kwok.py CONFIG_DEFAULTS) with more lease and node parallelism for thousands of nodes.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"   # a kwok process manages the Nodes whose annotation names it
KWOK_OPTIONS = {"cidr": "10.0.0.0/16", "manageAllNodes": "false", "enableDebuggingHandlers": "true",
                "enableContentionProfiling": "false", "enableProfilingHandler": "true", "podPlayStageParallelism": 8,
                "nodePlayStageParallelism": 16, "nodeLeaseParallelism": 32, "podsOnNodeSyncParallelism": 1,
                "enablePodsOnNodeSyncListPager": "true", "enablePodsOnNodeSyncStreamWatch": "false"}


def _insecure() -> ssl.SSLContext:
    """The Go components' own HTTPS ports serve a self-signed certificate: health checks do not verify it."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
