"""kwok (sigs.k8s.io/kwok, built by tools/build_kwok.py) as a real process against an apiserver: simulated
nodes and the pods bound to them.

The standalone binary has no stages of its own; it gets upstream's stage files from tools/kwok/ with
`--config` (node initialisation, node heartbeat with leases, pod ready / complete / delete). It manages
only the nodes annotated `kwok.x-k8s.io/node: fake` (`kwok_node()` makes such a Node), holds a Lease per
node in kube-node-lease (`--node-lease-duration-seconds`, renewed every quarter of it as a kubelet does:
40 s -> every 10 s), and talks to the apiserver through a kubeconfig with no credentials (our server
without authentication flags treats every request as system:unsecured in system:masters).
`HOME` is a throwaway directory, so a `~/.kwok/kwok.yaml` on the machine never joins the configuration.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from recipes.topology import KWOK_ANNOTATION
from recipes.workloads import kwok_node  # noqa: F401  (re-exported: the one kwok Node of tests, bench and recipes)
from storage.embedded import free_port, stop_process
from tests.helpers.etcd import load_tool

ANNOTATION = KWOK_ANNOTATION
SELECTOR = f"{ANNOTATION}=fake"
NODE_LEASE_NAMESPACE = "kube-node-lease"
# kwok's KwokConfiguration defaults (its defaulter-gen output): a configuration file replaces them all,
# so one with a few options must repeat the rest.
CONFIG_DEFAULTS = {"cidr": "10.0.0.0/24", "manageAllNodes": False, "enableDebuggingHandlers": True,
                   "enableContentionProfiling": False, "enableProfilingHandler": True, "podPlayStageParallelism": 4,
                   "nodePlayStageParallelism": 4, "nodeLeaseParallelism": 4, "podsOnNodeSyncParallelism": 1,
                   "enablePodsOnNodeSyncListPager": True, "enablePodsOnNodeSyncStreamWatch": False}


def kwok_binary() -> str:
    """Path of kwok, built once into .cache/kwok."""
    return load_tool("build_kwok").ensure_kwok()


def stage_files() -> list[str]:
    return load_tool("build_kwok").stage_files()


def write_kubeconfig(path: str, server: str, *, ca: str | None = None, cert: tuple[str, str] | None = None) -> str:
    """A kubeconfig for `server` (plain HTTP: no credentials; HTTPS: a CA and optionally a client cert)."""
    cluster = [f"    server: {server}"]
    if ca:
        cluster.append(f"    certificate-authority: {ca}")
    user = ["  user: {}"] if not cert else ["  user:", f"    client-certificate: {cert[0]}",
                                            f"    client-key: {cert[1]}"]
    text = "\n".join(["apiVersion: v1", "kind: Config", "clusters:", "- name: local", "  cluster:", *cluster,
                      "users:", "- name: local", *user, "contexts:", "- name: local", "  context:",
                      "    cluster: local", "    user: local", "current-context: local", ""])
    with open(path, "w") as f:
        f.write(text)
    return path


def ready_node(name: str, message: str = "its Lease is renewed without a kubelet") -> dict:
    """A Node already Ready (a Ready=True condition, heartbeat now) that no kubelet or kwok updates: the node
    lifecycle controller judges it by its Lease alone."""
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    node = kwok_node(name)
    node["metadata"]["annotations"] = {}
    node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": message,
                                     "lastHeartbeatTime": now, "lastTransitionTime": now}]
    return node


class _Component:
    """A Go control-plane component run against an apiserver: its own directory (kubeconfig, config, log),
    HOME pointed there and KUBECONFIG unset (nothing of the machine's joins its configuration), output to
    `<dir>/<log_name>`; `start()` (or a context manager), `stop()` by pid."""
    log_name = ""

    def __init__(self, server: str, prefix: str, *, ca: str | None = None, cert: tuple[str, str] | None = None):
        self.server = server
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.kubeconfig = write_kubeconfig(os.path.join(self.dir, "kubeconfig"), server, ca=ca, cert=cert)
        self.log_path = os.path.join(self.dir, self.log_name)
        self.argv: list[str] = []
        self.popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def start(self):
        env = dict(os.environ, HOME=self.dir)
        env.pop("KUBECONFIG", None)
        with open(self.log_path, "wb") as log:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          cwd=self.dir, env=env)
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 10.0, keep_dir: bool = False) -> None:
        """SIGTERM (SIGKILL after `timeout`), then remove the directory unless `keep_dir` (its log)."""
        stop_process(self.popen, timeout)
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """GET on the component's own HTTPS port, `self.url` (self-signed: not verified): (status, body)."""
        import ssl
        import urllib.error
        import urllib.request
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout, context=ctx) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError as e:
            return 0, str(e)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class KwokProcess(_Component):
    """One kwok process against `server`; started by `start()` (or as a context manager), stopped by pid.

    `options` become a KwokConfiguration (`{"nodeLeaseParallelism": 32}`); `extra` flags are appended (e.g.
    `-v=DEBUG`). The log is `<dir>/kwok.log` (`log()` reads it)."""
    log_name = "kwok.log"

    def __init__(self, server: str, *, lease_seconds: int = 40, stages: list[str] | None = None,
                 options: dict[str, int | bool | str] | None = None, extra: tuple[str, ...] = (), name: str = "kwok",
                 selector: str = SELECTOR, ca: str | None = None, cert: tuple[str, str] | None = None):
        super().__init__(server, "kwok-", ca=ca, cert=cert)
        self.name = name
        config = []
        if options:  # KwokConfiguration options without a flag (nodeLeaseParallelism, ...)
            config.append(os.path.join(self.dir, "kwok-config.yaml"))
            with open(config[0], "w") as f:
                f.write("apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
                        + "".join(f"  {k}: {str(v).lower() if isinstance(v, bool) else v}\n"
                                  for k, v in {**CONFIG_DEFAULTS, **options}.items()))
        self.port = free_port()
        self.argv = [kwok_binary(), "--kubeconfig", self.kubeconfig,
                     "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={selector}",
                     f"--node-lease-duration-seconds={lease_seconds}",
                     f"--server-address=127.0.0.1:{self.port}"]
        for path in config + (stage_files() if stages is None else stages):
            self.argv += ["--config", path]
        self.argv += list(extra)


def kube_scheduler_binary() -> str:
    """Path of kube-scheduler, built once into .cache/kube-scheduler."""
    return load_tool("build_kube_scheduler").ensure_kube_scheduler()


class KubeSchedulerProcess(_Component):
    """kube-scheduler against `server`: a KubeSchedulerConfiguration with the kubeconfig and leader election
    off, its own HTTPS port on loopback (self-signed; /healthz, /readyz and /metrics need no credentials),
    no delegated authentication or authorization lookups. Log (`-v=<verbosity>`) in `<dir>/kube-scheduler.log`."""
    log_name = "kube-scheduler.log"

    def __init__(self, server: str, *, verbosity: int = 2, qps: int = 200, extra: tuple[str, ...] = ()):
        super().__init__(server, "kube-scheduler-")
        self.config = os.path.join(self.dir, "config.yaml")
        with open(self.config, "w") as f:
            f.write("\n".join([
                "apiVersion: kubescheduler.config.k8s.io/v1", "kind: KubeSchedulerConfiguration",
                "clientConnection:", f"  kubeconfig: {self.kubeconfig}", f"  qps: {qps}", f"  burst: {qps * 2}",
                "leaderElection:", "  leaderElect: false", ""]))
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.argv = [kube_scheduler_binary(), f"--config={self.config}", "--bind-address=127.0.0.1",
                     f"--secure-port={self.port}", f"--cert-dir={self.dir}",
                     "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                     f"-v={verbosity}", *extra]


def kube_controller_manager_binary() -> str:
    """Path of kube-controller-manager, built once into .cache/kube-controller-manager."""
    return load_tool("build_kube_controller_manager").ensure_kube_controller_manager()


class KubeControllerManagerProcess(_Component):
    """kube-controller-manager against `server`: leader election off, `controllers` only (default: the node
    lifecycle controller), its own HTTPS port on loopback (self-signed; /healthz needs no credentials), no
    delegated authentication or authorization lookups. `grace`/`monitor_period` are
    --node-monitor-grace-period and --node-monitor-period in seconds (upstream: 50 and 5); `qps` its client's
    --kube-api-qps and --kube-api-burst (None: the binary's 20 and 30). Log in `<dir>/kube-controller-manager.log`."""
    log_name = "kube-controller-manager.log"

    def __init__(self, server: str, *, controllers: str = "node-lifecycle-controller", grace: float = 50,
                 monitor_period: float = 5, verbosity: int = 2, ca: str | None = None,
                 cert: tuple[str, str] | None = None, qps: int | None = None, extra: tuple[str, ...] = ()):
        super().__init__(server, "kube-controller-manager-", ca=ca, cert=cert)
        if qps is not None:
            extra = (f"--kube-api-qps={qps}", f"--kube-api-burst={qps}", *extra)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.argv = [kube_controller_manager_binary(), f"--kubeconfig={self.kubeconfig}", "--leader-elect=false",
                     f"--controllers={controllers}", f"--node-monitor-grace-period={grace}s",
                     f"--node-monitor-period={monitor_period}s", "--bind-address=127.0.0.1",
                     f"--secure-port={self.port}", f"--cert-dir={self.dir}", "--authentication-skip-lookup=true",
                     "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                     f"-v={verbosity}", *extra]

