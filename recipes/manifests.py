"""A recipe as Kubernetes manifests: the processes `recipes/topology.py` starts on loopback, run as pods of an
existing cluster with the same commands and flags, so a recipe measured on one machine can be tried at scale.

    python -m recipes manifests NAME [--image IMAGE] [--namespace NS] [--scale S] [--out DIR|-]

`render(recipe, ...)` returns the objects (dicts), `write(objects, out)` prints one YAML stream (`-`) or writes one
file per object into a directory, and `to_recipe(objects)` reads them back into the recipe's stores and processes.

What becomes what (names are the recipe's store and process names; one recipe per namespace, which the user
creates first):

* store S: StatefulSet `etcd-S` (1 replica) + headless Service `etcd-S`; durability "none" adds
  --unsafe-no-fsync and keeps the data in a memory-backed emptyDir, "fsync" in a volumeClaimTemplate. The
  stores' routing becomes --etcd-servers / --etcd-servers-overrides with the pods' DNS names.
* apiserver: Deployment of `count` (`python -m apiserver`) + Service (the cluster's balancer, where the runner
  starts recipes/balancer.py).
* deployment (K shards, N fronts): one StatefulSet per shard (`P-shard-i`, each its own --residency range and
  compaction setting in plain flags) under one headless Service `P-shards`; the fronts a Deployment of N
  (`P-front`) + Service `P`. The recipe's flags are routed to shards and fronts by python -m deployment's own rules
  (deployment/supervisor.py), so each pod gets what the supervisor would give its child.
* nodetier: Deployment + Service; with count > 1 a StatefulSet + headless Service (`P-tiers`) for the stable
  names --tiers lists, and --tier-index from the pod's `apps.kubernetes.io/pod-index` label.
* kube-scheduler / kube-controller-manager: Deployments of the upstream images, leader election when count > 1.
* slice-controllers: one Deployment per hash range; kwok: one Deployment per kwok process (its own
  annotation selector), with its configuration and stages in a ConfigMap.
* Secrets: the apiserver's serving certificate (a placeholder to fill) and kubeconfigs for the Go components.

Every pod talks only to the recipe's control plane: service-account tokens are not mounted, so no component can
fall back to the host cluster's in-cluster configuration (kwok would make its fake nodes there). As in the
runner, our apiservers' plain HTTP port has no authentication (every request is system:masters): it is meant
for the recipe's own components inside the namespace.
"""
from __future__ import annotations

import json
import math
import os
import sys
from collections import defaultdict

import yaml

from machinery.shard_selector import complementary

from . import binaries
from .spec import Process, Recipe, RecipeError, Store
from .topology import KWOK_ANNOTATION, KWOK_OPTIONS

ETCD_IMAGE = "registry.k8s.io/etcd:3.5.21-0"
KUBE_VERSION = "v1.37.2"
KWOK_IMAGE = "registry.k8s.io/kwok/kwok:v0.8.0"

DOMAIN = "recipes.residency.io"
RECIPE_LABEL = f"{DOMAIN}/recipe"
COMPONENT_LABEL = f"{DOMAIN}/component"
SOURCE = f"{DOMAIN}/source"        # JSON: the recipe element an object comes from (read by to_recipe)
FILL_ME = f"{DOMAIN}/fill-me"      # on placeholders: what the user has to put there

ETCD_PORT = 2379
API_PORT, API_SECURE_PORT = 8080, 6443
NODETIER_PORT = 8090
CONTROLLER_PORT = 8095
SCHEDULER_PORT, KCM_PORT = 10259, 10257    # upstream's secure ports
KWOK_PORT = 10247                           # kwok's server (/healthz), upstream's default

STATE_DIR = "/var/lib/residency"
TLS_DIR = "/etc/residency/tls"
KUBECONFIG_DIR = "/etc/kubernetes/kubeconfig"
ALLOW_PATHS = "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"

# Requests: the recipe's budget (cores, memory_gib: the machine it was sized for, every process on it) is split
# over all its pods in proportion to these weights, times each pod's replicas, so the requests add up to the
# budget. The apiservers (shards and fronts too) hold the caches and do the serving, so they weigh most; etcd
# and the node tier next; controllers and kwok least. Requests only, no limits: the budget is a reservation
# for scheduling, not a cap (a limit would throttle or OOM-kill what the recipe measured without one).
WEIGHTS = {"apiserver": 4, "shard": 4, "front": 4, "etcd": 2, "nodetier": 2, "kube-scheduler": 1,
           "kube-controller-manager": 1, "slice-controller": 1, "kwok": 1}

# Each slice controller's init container (python -c): the runner creates the Widget CRD before it starts the
# sharded controllers and waits until it is served; so does each controller pod (201 or 409 both do).
CRD_INIT = """\
import json, sys, time, urllib.error, urllib.request
from shardslice import widgets
base = sys.argv[1]
def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0
deadline = time.monotonic() + 300
while (call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgets.crd()) not in (201, 409)
       or call("GET", widgets.collection() + "?limit=1") != 200):
    if time.monotonic() > deadline:
        sys.exit("the Widget CRD is not served after 300 s")
    time.sleep(1)
"""

# The slice controller serves /healthz on 127.0.0.1 only, out of the kubelet's reach: probe it from inside.
CONTROLLER_PROBE = (f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{CONTROLLER_PORT}/healthz', "
                    "timeout=3)")


def render(recipe: Recipe, *, image: str = "residency-apiserver:dev", namespace: str = "residency",
           scale: str = "small", etcd_image: str = ETCD_IMAGE) -> list[dict]:
    """The recipe's objects: Secrets, then in the runner's start order the stores, the control plane, the node
    tier, the controllers and kwok (each after its ConfigMap). `scale` changes no object (no process count in a
    recipe depends on the size) but is recorded in each one's source annotation."""
    if "ours" not in recipe.implementations:
        raise RecipeError(f"recipe {recipe.name} runs only on {recipe.implementations}; the manifests run this "
                          "project's apiserver")
    return _Renderer(recipe, image, namespace, scale, etcd_image).render()


class _Renderer:
    def __init__(self, recipe: Recipe, image: str, ns: str, scale: str, etcd_image: str):
        self.r, self.image, self.ns, self.etcd_image = recipe, image, ns, etcd_image
        self.scale, self.size = scale, recipe.size(scale)
        self.objects: list[dict] = []
        self.pods: list[tuple[dict, str, int]] = []    # (pod spec, weight role, replicas) for the budget
        self.cp = recipe.process("deployment") or recipe.process("apiserver")
        self.tier = recipe.process("nodetier")

    # --- addresses ------------------------------------------------------------------------------------

    def svc(self, name: str, port: int, pod: str | None = None) -> str:
        host = f"{pod}.{name}" if pod else name
        return f"http://{host}.{self.ns}.svc:{port}"

    def etcd_url(self, s: Store) -> str:
        return self.svc(f"etcd-{s.name}", ETCD_PORT, f"etcd-{s.name}-0")

    def etcd_flags(self) -> list[str]:
        """The runner's flags (Recipe.etcd_flags), with the stores' DNS names."""
        return self.r.etcd_flags(self.etcd_url)

    @property
    def api_url(self) -> str:
        return self.svc(self.cp.name, API_PORT)

    @property
    def node_url(self) -> str:
        """Where kwok goes: the node tier's Service (any tier sends a Lease it does not hold to its owner), or
        the control plane."""
        return self.svc(self.tier.name, NODETIER_PORT) if self.tier else self.api_url

    # --- object helpers -------------------------------------------------------------------------------

    def source(self, role: str, **what) -> dict:
        return {"recipe": self.r.name, "scale": self.scale, "size": self.size, "role": role, **what}

    @staticmethod
    def of_process(i: int, p: Process) -> dict:
        return {"process": {"index": i, "kind": p.kind, "name": p.name, "count": p.count, "flags": list(p.flags),
                            "options": dict(p.options)}}

    def meta(self, name: str, source: dict, component: str | None = None, annotations: dict | None = None) -> dict:
        labels = {"app.kubernetes.io/part-of": self.r.name, "app.kubernetes.io/managed-by": "recipes",
                  RECIPE_LABEL: self.r.name, COMPONENT_LABEL: component or name}
        ann = {SOURCE: json.dumps(source, separators=(",", ":"), sort_keys=True), **(annotations or {})}
        return {"name": name, "namespace": self.ns, "labels": labels, "annotations": ann}

    def selector(self, component: str) -> dict:
        return {RECIPE_LABEL: self.r.name, COMPONENT_LABEL: component}

    def add(self, obj: dict) -> dict:
        self.objects.append(obj)
        return obj

    def pod(self, component: str, containers: list[dict], *, role: str, replicas: int, volumes=(),
            init: list[dict] | None = None) -> dict:
        labels = {"app.kubernetes.io/part-of": self.r.name, **self.selector(component)}
        spec = {"automountServiceAccountToken": False,   # no way to the host cluster (see the docstring)
                "enableServiceLinks": False,             # the recipe's components find each other by DNS
                "containers": containers}
        if init:
            spec["initContainers"] = init
        if volumes:
            spec["volumes"] = list(volumes)
        self.pods.append((spec, role, replicas))
        return {"metadata": {"labels": labels}, "spec": spec}

    def workload(self, kind: str, name: str, source: dict, template: dict, replicas: int, *,
                 service: str | None = None, claims: list[dict] | None = None) -> dict:
        # selects what its template labels (a shard's template carries the shards' component and its index)
        match = {k: v for k, v in template["metadata"]["labels"].items() if k != "app.kubernetes.io/part-of"}
        spec = {"replicas": replicas, "selector": {"matchLabels": match}, "template": template}
        if kind == "StatefulSet":
            spec["serviceName"] = service
            if claims:
                spec["volumeClaimTemplates"] = claims
        return self.add({"apiVersion": "apps/v1", "kind": kind, "metadata": self.meta(name, source), "spec": spec})

    def service(self, name: str, source: dict, component: str, ports: list[tuple[str, int, int]], *,
                headless: bool = False) -> dict:
        spec = {"selector": self.selector(component),
                "ports": [{"name": n, "port": p, "targetPort": t, "protocol": "TCP"} for n, p, t in ports]}
        if headless:
            # pods are addressed by name; they are published before they are ready (a peer, or a front
            # starting beside its shards, resolves them at once)
            spec.update(clusterIP="None", publishNotReadyAddresses=True)
        return self.add({"apiVersion": "v1", "kind": "Service",
                         "metadata": self.meta(name, source, component=component), "spec": spec})

    def container(self, name: str, image: str, command: list[str], args: list[str], *, ports=(), env=(),
                  mounts=(), ready: dict | None = None, live: dict | None = None,
                  startup: dict | None = None) -> dict:
        c = {"name": name, "image": image, "command": command, "args": args}
        if ports:
            c["ports"] = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports]
        if env:
            c["env"] = list(env)
        if mounts:
            c["volumeMounts"] = list(mounts)
        for key, probe in (("readinessProbe", ready), ("livenessProbe", live), ("startupProbe", startup)):
            if probe:
                c[key] = probe
        return c

    @staticmethod
    def http_probe(path: str, port: int, scheme: str = "HTTP", period: int = 10, failures: int = 3) -> dict:
        return {"httpGet": {"path": path, "port": port, "scheme": scheme}, "periodSeconds": period,
                "timeoutSeconds": 5, "failureThreshold": failures}

    def python(self, module: str) -> list[str]:
        return ["python", "-m", *module.split()]

    # --- the recipe -----------------------------------------------------------------------------------

    def render(self) -> list[dict]:
        self.secrets()
        for i, s in enumerate(self.r.stores):
            self.store(i, s)
        start = {"apiserver": 0, "deployment": 0, "nodetier": 1, "kwok": 3}     # the controllers: 2
        for i, p in sorted(enumerate(self.r.processes), key=lambda ip: start.get(ip[1].kind, 2)):
            {"apiserver": self.apiserver, "deployment": self.deployment, "nodetier": self.nodetier,
             "kube-scheduler": self.scheduler, "kube-controller-manager": self.kcm,
             "slice-controllers": self.slice_controllers, "kwok": self.kwok}[p.kind](i, p)
        self.requests()
        return self.objects

    def secrets(self) -> None:
        cp = self.cp
        names = [cp.name, f"{cp.name}.{self.ns}", f"{cp.name}.{self.ns}.svc", f"{cp.name}.{self.ns}.svc.cluster.local"]
        self.add({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                  "metadata": self.meta(f"{cp.name}-tls", self.source("serving-certificate"),
                                        annotations={FILL_ME: (
                                            "placeholder: the apiserver's serving certificate (port "
                                            f"{API_SECURE_PORT}, Service port 443) for {', '.join(names)}; fill "
                                            f"it: kubectl -n {self.ns} create secret tls {cp.name}-tls "
                                            "--cert=tls.crt --key=tls.key --dry-run=client -o yaml | "
                                            "kubectl apply -f -")}),
                  # the keys must exist for the type; empty values: the apiserver will not start until filled
                  "data": {"tls.crt": "", "tls.key": ""}})
        kinds = {p.kind for p in self.r.processes}
        if kinds & {"kube-scheduler", "kube-controller-manager"} or ("kwok" in kinds and not self.tier):
            self.kubeconfig("kubeconfig-control-plane", self.api_url)
        if "kwok" in kinds and self.tier:
            self.kubeconfig("kubeconfig-node-server", self.node_url)

    def kubeconfig(self, name: str, server: str) -> None:
        """The recipes.client.Endpoint.kubeconfig of a plain-HTTP server without credentials (the runner's)."""
        text = "\n".join(["apiVersion: v1", "kind: Config", "clusters:", "- name: recipe", "  cluster:",
                          f"    server: {server}", "users:", "- name: recipe", "  user: {}", "contexts:",
                          "- name: recipe", "  context:", "    cluster: recipe", "    user: recipe",
                          "current-context: recipe", ""])
        self.add({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": self.meta(name, self.source("kubeconfig", server=server)),
                  "stringData": {"kubeconfig": text}})

    def kubeconfig_volume(self, secret: str) -> tuple[dict, dict]:
        return ({"name": "kubeconfig", "secret": {"secretName": secret}},
                {"name": "kubeconfig", "mountPath": KUBECONFIG_DIR, "readOnly": True})

    def store(self, i: int, s: Store) -> None:
        name = f"etcd-{s.name}"
        src = self.source("etcd", store={"index": i, "name": s.name, "resources": list(s.resources),
                                         "durability": s.durability})
        # storage.embedded.EmbeddedEtcd's flags and recipes/topology.py's extras; one member, so its peer URL
        # never leaves the pod
        peer = "http://127.0.0.1:2380"
        args = ["--name=default", "--data-dir=/var/lib/etcd/member-data",
                f"--listen-client-urls=http://0.0.0.0:{ETCD_PORT}", f"--advertise-client-urls={self.etcd_url(s)}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}", f"--max-request-bytes={4 * 1024 * 1024}",
                f"--quota-backend-bytes={8 * 1024 ** 3}", "--log-level=warn",
                *(["--unsafe-no-fsync"] if s.durability == "none" else []),
                "--auto-compaction-mode=periodic", "--auto-compaction-retention=5m"]
        c = self.container("etcd", self.etcd_image, ["etcd"], args, ports=[("client", ETCD_PORT)],
                           mounts=[{"name": "data", "mountPath": "/var/lib/etcd"}],
                           ready=self.http_probe("/health", ETCD_PORT),
                           live=self.http_probe("/health?serializable=true", ETCD_PORT, failures=6))
        if s.durability == "none":
            # data whose loss costs one renewal period: in memory, as the runner's tmpfs
            volumes, claims = [{"name": "data", "emptyDir": {"medium": "Memory"}}], None
        else:
            # room for --quota-backend-bytes (8 GiB) plus the WAL and snapshots
            volumes, claims = [], [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}}]
        self.workload("StatefulSet", name, src, self.pod(name, [c], role="etcd", replicas=1, volumes=volumes), 1,
                      service=name, claims=claims)
        self.service(name, src, name, [("client", ETCD_PORT, ETCD_PORT)], headless=True)

    # --- the control plane ----------------------------------------------------------------------------

    def serving(self) -> list[str]:
        return ["--bind-address=0.0.0.0", f"--port={API_PORT}", f"--secure-port={API_SECURE_PORT}",
                f"--tls-cert-file={TLS_DIR}/tls.crt", f"--tls-private-key-file={TLS_DIR}/tls.key"]

    def apiserver_container(self, name: str, args: list[str], tls: bool) -> dict:
        mounts = [{"name": "state", "mountPath": STATE_DIR}]
        ports = [("http", API_PORT)]
        if tls:
            mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
            ports.append(("https", API_SECURE_PORT))
        return self.container(
            name, self.image, self.python("apiserver"), args, ports=ports, mounts=mounts,
            ready=self.http_probe("/readyz", API_PORT, period=5),
            live=self.http_probe("/livez", API_PORT, failures=6),
            # the runner waits up to 180 s for a first /readyz (the initial lists of a large store)
            startup=self.http_probe("/livez", API_PORT, failures=18))

    def apiserver_volumes(self, tls: bool) -> list[dict]:
        # the state directory holds the watch-cache snapshot (--warm-restart): it survives container restarts
        vols = [{"name": "state", "emptyDir": {}}]
        if tls:
            vols.append({"name": "tls", "secret": {"secretName": f"{self.cp.name}-tls"}})
        return vols

    def front_service(self, i: int, p: Process, component: str) -> None:
        self.service(p.name, self.source("service", **self.of_process(i, p)), component,
                     [("http", API_PORT, API_PORT), ("https", 443, API_SECURE_PORT)])

    def apiserver(self, i: int, p: Process) -> None:
        # recipes/topology.py's _start_our_apiservers. Every replica shares one template, so every one runs the
        # compactor (the runner turns it off on all but the first); they take turns through etcd's compare-and-
        # swap on the compaction key (storage/compact.py), as HA kube-apiservers do.
        args = [*self.etcd_flags(), *self.serving(), f"--state-dir={STATE_DIR}", *p.flags]
        c = self.apiserver_container("apiserver", args, tls=True)
        src = self.source("apiserver", **self.of_process(i, p))
        self.workload("Deployment", p.name, src, self.pod(p.name, [c], role="apiserver", replicas=p.count,
                                                          volumes=self.apiserver_volumes(True)), p.count)
        self.front_service(i, p, p.name)

    def deployment(self, i: int, p: Process) -> None:
        """python -m deployment's children as pods, their command lines as Deployment.plan() builds them."""
        from apiserver.flags import build_parser
        from deployment.supervisor import DIVIDED, FRONT, PARENT, REFUSED, SHARD, DeploymentError, split_flags
        k, n = int(p.options.get("shards", 1)), int(p.options.get("fronts", 2))
        # what the runner hands the supervisor: the stores, the address (here the fronts' ports and TLS), flags
        given = [*self.etcd_flags(), *self.serving(), *p.flags]
        parser = build_parser()
        try:
            flags = split_flags(parser, given)
        except DeploymentError as e:
            raise RecipeError(f"{self.r.name}: {p.name}: {e}") from None
        values = parser.parse_args(given)
        bad = sorted(set(flags) & (REFUSED | (PARENT - {"etcd_servers", "etcd_compaction_interval"})))
        if bad:
            raise RecipeError(f"{self.r.name}: {p.name}: not on a cluster (the deployment or its pods set them): "
                              + ", ".join("--" + b.replace("_", "-") for b in bad))

        def passed(dests: set[str]) -> list[str]:
            return [t for d in sorted(dests & set(flags)) for t in flags[d]]
        toks = flags.get("etcd_compaction_interval")
        compaction = (toks[-1].partition("=")[2] or toks[-1]) if toks else "5m"
        etcd = ["--etcd-servers", values.etcd_servers]

        # One StatefulSet per shard rather than one of K: each shard's range (and shard 0's compaction) is then a
        # plain flag in its own template, and K cannot be scaled without re-rendering the ranges.
        shards = f"{p.name}-shards"
        shard_urls = []
        for j, sel in enumerate(complementary(k)):
            name = f"{p.name}-shard-{j}"
            shard_urls.append(self.svc(shards, API_PORT, f"{name}-0"))
            args = [*etcd, *passed(SHARD), "--bind-address", "0.0.0.0", "--port", str(API_PORT), "--secure-port",
                    "0", "--state-dir", STATE_DIR, "--etcd-compaction-interval", compaction if j == 0 else "0"]
            if k > 1:
                args += ["--residency", str(sel)]
            src = self.source("shard", shard=j, **self.of_process(i, p))
            tpl = self.pod(shards, [self.apiserver_container("shard", args, tls=False)], role="shard", replicas=1,
                           volumes=self.apiserver_volumes(False))
            tpl["metadata"]["labels"][f"{DOMAIN}/shard"] = str(j)
            # the governing Service selects every shard, each StatefulSet its own shard's pod
            self.workload("StatefulSet", name, src, tpl, 1, service=shards)
        self.service(shards, self.source("service", **self.of_process(i, p)), shards,
                     [("http", API_PORT, API_PORT)], headless=True)

        # The fronts: each its own pod, so no --reuse-port or --admin-port (the Service spreads connections
        # as the kernel did over the supervisor's N processes on one port).
        divided = [t for d in sorted(DIVIDED) for t in ("--" + d.replace("_", "-"),
                                                          str(math.ceil(getattr(values, d) / n)))]
        args = [*etcd, *passed(FRONT), *divided, "--front", "--shards", ",".join(shard_urls),
                "--state-dir", STATE_DIR, "--etcd-compaction-interval", "0"]
        front = f"{p.name}-front"
        src = self.source("front", **self.of_process(i, p))
        self.workload("Deployment", front, src, self.pod(front, [self.apiserver_container("front", args, tls=True)],
                                                         role="front", replicas=n,
                                                         volumes=self.apiserver_volumes(True)), n)
        self.front_service(i, p, front)

    def nodetier(self, i: int, p: Process) -> None:
        src = self.source("nodetier", **self.of_process(i, p))
        args = ["--control-plane", self.api_url, "--port", str(NODETIER_PORT), "--bind-address", "0.0.0.0", *p.flags]
        env = []
        if p.count > 1:
            peers = f"{p.name}-tiers"
            tiers = [self.svc(peers, NODETIER_PORT, f"{p.name}-{t}") for t in range(p.count)]
            # the StatefulSet's pod-index label (Kubernetes >= 1.28) is the tier's place in --tiers
            env = [{"name": "TIER_INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}}}]
            args += ["--tiers", ",".join(tiers), "--tier-index", "$(TIER_INDEX)"]
        c = self.container("nodetier", self.image, self.python("nodetier"), args, ports=[("http", NODETIER_PORT)],
                           env=env, ready=self.http_probe("/readyz", NODETIER_PORT, period=5),
                           live=self.http_probe("/livez", NODETIER_PORT, failures=6))
        tpl = self.pod(p.name, [c], role="nodetier", replicas=p.count)
        if p.count > 1:
            self.workload("StatefulSet", p.name, src, tpl, p.count, service=f"{p.name}-tiers")
            self.service(f"{p.name}-tiers", self.source("service", **self.of_process(i, p)), p.name,
                         [("http", NODETIER_PORT, NODETIER_PORT)], headless=True)
        else:
            self.workload("Deployment", p.name, src, tpl, 1)
        self.service(p.name, self.source("service", **self.of_process(i, p)), p.name,
                     [("http", NODETIER_PORT, NODETIER_PORT)])

    # --- controllers and kwok -------------------------------------------------------------------------

    def go_component(self, i: int, p: Process, binary: str, port: int, args: list[str], volumes: list[dict],
                     mounts: list[dict]) -> None:
        c = self.container(binary, f"registry.k8s.io/{binary}:{KUBE_VERSION}", [binary], args,
                           ports=[("https", port)], mounts=mounts,
                           ready=self.http_probe("/healthz", port, "HTTPS"),
                           live=self.http_probe("/healthz", port, "HTTPS", failures=6))
        src = self.source(p.kind, **self.of_process(i, p))
        self.workload("Deployment", p.name, src, self.pod(p.name, [c], role=p.kind, replicas=p.count,
                                                          volumes=volumes), p.count)

    def scheduler(self, i: int, p: Process) -> None:
        # recipes/topology.py's _start_scheduler: its configuration file in a ConfigMap
        config = "\n".join(["apiVersion: kubescheduler.config.k8s.io/v1", "kind: KubeSchedulerConfiguration",
                            "clientConnection:", f"  kubeconfig: {KUBECONFIG_DIR}/kubeconfig", "  qps: 200",
                            "  burst: 400", "leaderElection:",
                            f"  leaderElect: {'true' if p.count > 1 else 'false'}", ""])
        cm = f"{p.name}-config"
        self.add({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": self.meta(cm, self.source("config", **self.of_process(i, p))),
                  "data": {"config.yaml": config}})
        kv, km = self.kubeconfig_volume("kubeconfig-control-plane")
        args = ["--config=/etc/kubernetes/scheduler/config.yaml", "--bind-address=0.0.0.0",
                f"--secure-port={SCHEDULER_PORT}", "--cert-dir=/var/run/kubernetes", ALLOW_PATHS, "-v=1", *p.flags]
        self.go_component(i, p, "kube-scheduler", SCHEDULER_PORT, args,
                          [kv, {"name": "config", "configMap": {"name": cm}}, {"name": "certs", "emptyDir": {}}],
                          [km, {"name": "config", "mountPath": "/etc/kubernetes/scheduler", "readOnly": True},
                           {"name": "certs", "mountPath": "/var/run/kubernetes"}])

    def kcm(self, i: int, p: Process) -> None:
        # recipes/topology.py's _start_kcm
        controllers = ",".join(p.options.get("controllers", ["deployment-controller", "replicaset-controller"]))
        kv, km = self.kubeconfig_volume("kubeconfig-control-plane")
        args = [f"--kubeconfig={KUBECONFIG_DIR}/kubeconfig", f"--leader-elect={'true' if p.count > 1 else 'false'}",
                f"--controllers={controllers}", "--bind-address=0.0.0.0", f"--secure-port={KCM_PORT}",
                "--cert-dir=/var/run/kubernetes", "--authentication-skip-lookup=true", ALLOW_PATHS,
                "--kube-api-qps=200", "--kube-api-burst=400", "-v=1", *p.flags]
        self.go_component(i, p, "kube-controller-manager", KCM_PORT, args,
                          [kv, {"name": "certs", "emptyDir": {}}],
                          [km, {"name": "certs", "mountPath": "/var/run/kubernetes"}])

    def slice_controllers(self, i: int, p: Process) -> None:
        # recipes/topology.py's _start_slice_controllers: one Deployment per hash range (a range is one
        # replica's identity, so they cannot share a template)
        for j, sel in enumerate(complementary(p.count)):
            name = f"{p.name}-{j}"
            args = ["--server", self.api_url, "--shard-selector", str(sel), "--name", f"controller-{j}",
                    "--port", str(CONTROLLER_PORT), "--workers", str(p.options.get("workers", 4)), *p.flags]
            probe = {"exec": {"command": ["python", "-c", CONTROLLER_PROBE]}, "periodSeconds": 10,
                     "timeoutSeconds": 5}
            c = self.container("controller", self.image, self.python("shardslice controller"), args,
                               ready=probe, live={**probe, "failureThreshold": 6})
            init = {"name": "widget-crd", "image": self.image, "command": ["python", "-c", CRD_INIT],
                    "args": [self.api_url]}
            src = self.source("slice-controller", range=j, **self.of_process(i, p))
            self.workload("Deployment", name, src, self.pod(name, [c], role="slice-controller", replicas=1,
                                                            init=[init]), 1)

    def kwok(self, i: int, p: Process) -> None:
        # recipes/topology.py's _start_kwok: each kwok holds the nodes whose annotation names it, so each is a
        # Deployment of its own; its configuration (the runner's KwokConfiguration) and the stages in a ConfigMap
        cm = f"{p.name}-config"
        stages = binaries.load_tool("build_kwok").stage_files()
        data = {"kwok-config.yaml": "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\n"
                                    "options:\n" + "".join(f"  {k}: {v}\n" for k, v in KWOK_OPTIONS.items())}
        for path in stages:
            with open(path) as f:
                data[os.path.basename(path)] = f.read()
        self.add({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": self.meta(cm, self.source("config", **self.of_process(i, p))), "data": data})
        kv, km = self.kubeconfig_volume("kubeconfig-node-server" if self.tier else "kubeconfig-control-plane")
        for j in range(p.count):
            name = p.name if p.count == 1 else f"{p.name}-{j}"
            args = ["--kubeconfig", f"{KUBECONFIG_DIR}/kubeconfig", "--manage-all-nodes=false",
                    f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={name}",
                    "--node-lease-duration-seconds=40", f"--server-address=0.0.0.0:{KWOK_PORT}", *p.flags]
            for f in data:
                args += ["--config", f"/etc/kwok/{f}"]
            # the image's entrypoint is kwok (upstream's kustomize/kwok passes args only)
            c = {"name": "kwok", "image": KWOK_IMAGE, "args": args,
                 "ports": [{"name": "http", "containerPort": KWOK_PORT, "protocol": "TCP"}],
                 "volumeMounts": [km, {"name": "config", "mountPath": "/etc/kwok", "readOnly": True}],
                 "readinessProbe": self.http_probe("/healthz", KWOK_PORT),
                 "livenessProbe": self.http_probe("/healthz", KWOK_PORT, failures=6)}
            src = self.source("kwok", instance=j, **self.of_process(i, p))
            self.workload("Deployment", name, src,
                          self.pod(name, [c], role="kwok", replicas=1,
                                   volumes=[kv, {"name": "config", "configMap": {"name": cm}}]), 1)

    # --- the budget -----------------------------------------------------------------------------------

    def requests(self) -> None:
        cores, mem = self.r.budget.get("cores"), self.r.budget.get("memory_gib")
        if not cores and not mem:
            return
        total = sum(WEIGHTS[role] * n for _, role, n in self.pods)
        for spec, role, _ in self.pods:
            share = WEIGHTS[role] / total
            req = {}
            if cores:
                req["cpu"] = f"{max(10, math.floor(cores * 1000 * share))}m"
            if mem:
                req["memory"] = f"{max(32, math.floor(mem * 1024 * share))}Mi"
            for c in spec["containers"]:
                c["resources"] = {"requests": dict(req)}


# --- output -------------------------------------------------------------------------------------------

class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data) -> bool:    # shared dicts are written out, not as &anchors
        return True


def _str(dumper: yaml.SafeDumper, s: str):
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


_Dumper.add_representer(str, _str)


def dump(objects: list[dict]) -> str:
    """One YAML stream; a placeholder is preceded by a comment saying what to fill in."""
    docs = []
    for o in objects:
        note = o["metadata"].get("annotations", {}).get(FILL_ME)
        head = f"# {note}\n" if note else ""
        docs.append(head + yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=120))
    return "---\n".join(docs)


def filename(obj: dict) -> str:
    return f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def write(objects: list[dict], out: str) -> None:
    """`-`: one YAML stream on stdout; otherwise a directory (created), one `<kind>-<name>.yaml` per object."""
    if out == "-":
        sys.stdout.write(dump(objects))
        return
    os.makedirs(out, exist_ok=True)
    for o in objects:
        with open(os.path.join(out, filename(o)), "w") as f:
            f.write(dump([o]))


# --- back to the recipe -------------------------------------------------------------------------------

def _flag(args: list[str], name: str) -> str | None:
    """The last value of `--name=v` or `--name v` in a command line."""
    found = None
    for j, a in enumerate(args):
        if a.startswith(name + "="):
            found = a.split("=", 1)[1]
        elif a == name and j + 1 < len(args):
            found = args[j + 1]
    return found


def _replicas(o: dict) -> int:
    return int(o["spec"].get("replicas", 1))


def to_recipe(objects: list[dict]) -> dict:
    """The recipe's name, stores and processes as the manifests run them: what the objects themselves say where
    they can (a store's durability from etcd's flags, its resources from the apiservers' --etcd-servers and
    --etcd-servers-overrides, counts from replicas and objects), the `recipes.residency.io/source` annotation
    for the rest (names, flags as written in the recipe, options). Raises ValueError where they disagree."""
    name = None
    stores: dict[int, dict] = {}
    procs: dict[int, dict] = {}
    pods: dict[tuple[int, str], int] = defaultdict(int)    # (process index, role) -> pods
    etcd_urls: dict[str, int] = {}                         # advertised URL -> store index
    control_args: list[str] | None = None
    for o in objects:
        src = json.loads(o["metadata"]["annotations"][SOURCE])
        if name is None:
            name = src["recipe"]
        elif src["recipe"] != name:
            raise ValueError(f"objects of two recipes: {name} and {src['recipe']}")
        workload = o["kind"] in ("Deployment", "StatefulSet")
        if "store" in src:
            st = src["store"]
            stores.setdefault(st["index"], {"name": st["name"], "resources": [], "durability": st["durability"]})
            if workload:
                args = o["spec"]["template"]["spec"]["containers"][0]["args"]
                stores[st["index"]]["durability"] = "none" if "--unsafe-no-fsync" in args else "fsync"
                etcd_urls[_flag(args, "--advertise-client-urls")] = st["index"]
        if "process" in src:
            p = src["process"]
            procs.setdefault(p["index"], {k: p[k] for k in ("kind", "name", "count", "flags", "options")})
            if workload:
                pods[p["index"], src["role"]] += _replicas(o)
                if src["role"] in ("apiserver", "shard") and control_args is None:
                    control_args = o["spec"]["template"]["spec"]["containers"][0]["args"]
    if name is None:
        raise ValueError("no objects")
    if control_args is not None:
        def store_of(url: str) -> int:
            if url not in etcd_urls:
                raise ValueError(f"the apiservers use {url}, which no etcd StatefulSet advertises")
            return etcd_urls[url]
        main = store_of(_flag(control_args, "--etcd-servers"))
        for pair in filter(None, (_flag(control_args, "--etcd-servers-overrides") or "").split(",")):
            resource, url = pair.split("#", 1)
            idx = store_of(url)
            if idx == main:
                raise ValueError(f"{resource} is routed to the default store")
            stores[idx]["resources"].append(resource)
    out_procs = []
    for idx in sorted(procs):
        p = procs[idx]
        kind = p["kind"]
        if kind == "deployment":
            # the count is the recipe's (the runner starts one supervisor whatever it says); shards and fronts
            # are the pods the objects run
            for key, role, default in (("shards", "shard", 1), ("fronts", "front", 2)):
                if key in p["options"] or pods[idx, role] != default:
                    p["options"][key] = pods[idx, role]
        else:
            role = {"slice-controllers": "slice-controller"}.get(kind, kind)
            p["count"] = pods[idx, role]
        out_procs.append(p)
    return {"name": name, "stores": [stores[i] for i in sorted(stores)], "processes": out_procs}
