"""Cache residency benchmark (issue 4): heap per shard against full replication.

Starts a real current etcd (tools/build_etcd.py), loads a workload through a loader apiserver
(`--watch-cache=false`), then starts a full-replica apiserver and K shard apiservers (separate
processes, same etcd, complementary residencies from `machinery.shard_selector.complementary(k)`), all with
`RESIDENCY_TRACEMALLOC=1`; waits until every process has ingested the same revision and measures
each process's heap three ways: tracemalloc, native bytes (sum of the cache's structure bytes in
`/debug/residency`) and RSS, plus the floor of an empty apiserver (cache on, empty `--etcd-prefix`).

    .venv/bin/python -m bench.residency [--quick] [--objects N] [--ks 1,2,4,8] [--profiles node,churn,state]
                                        [--out bench/out/residency.json] [--png bench/out/residency.png]

Profiles: node-bound (Nodes ~3 KB, Leases ~0.4 KB, heartbeats while measuring), churn-bound (custom
resources created/updated/deleted while measuring), state-bound (ConfigMaps, Secrets, Pods,
RoleBindings, a few 100 KB ConfigMaps; shards run with `--residency-full-resources
namespaces,customresourcedefinitions`, so RBAC is sharded too). A correctness check per profile and K:
with writers stopped, the union of the shards' sharded lists equals the full replica's list at the same
resourceVersion, no object in two shards. In-process micro-benchmarks: dropping a non-resident event,
ingest events/s, label-selector list from bitmaps vs a scan.

Progress on stderr, a table per profile on stdout, every figure plus versions to --out (JSON), a PNG
(matplotlib, Agg) to --png. Targets are printed beside the figures, never asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import importlib.util
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid

import aiohttp
import orjson

from machinery.shard_selector import complementary
from storage.embedded import EmbeddedEtcd, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1024.0 * 1024.0
MEASURES = ("native", "tracemalloc", "rss")
MEASURE_LABEL = {"native": "native bytes (cache structures)", "tracemalloc": "tracemalloc heap",
                 "rss": "RSS"}
STATE_FULL_RESOURCES = "namespaces,customresourcedefinitions"
CRD_GROUP = "bench.example.com"

# Figures every run has (the smoke test asserts each is a positive number); per profile/K figures are
# named "<profile>_k<K>_<measure>_<stat>" (see profile_figures).
FIGURES = (
    "floor_tracemalloc_bytes", "floor_rss_bytes", "floor_native_bytes",
    "drop_nonresident_median_us", "keep_resident_median_us",
    "ingest_events_per_s_full", "ingest_events_per_s_k2",
    "select_bitmap_median_ms", "select_scan_median_ms", "select_speedup", "select_objects", "select_matches",
)
PROFILE_STATS = ("shard_mean_bytes", "shard_max_bytes", "shard_sum_bytes", "full_bytes", "mean_over_full")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(RuntimeError):
    pass


# --- objects -------------------------------------------------------------------

def _hexs(rnd: random.Random, n: int) -> str:
    return "%0*x" % (n, rnd.getrandbits(4 * n))


def node(i: int) -> dict:
    rnd = random.Random(i)
    name = f"node-{i:06d}"
    images = [{"names": [f"registry.example.com/team{j}/image{j}@sha256:{_hexs(rnd, 64)}",
                         f"registry.example.com/team{j}/image{j}:v1.{j}.{i % 7}"],
               "sizeBytes": 10_000_000 + j * 1_234_567} for j in range(7)]
    conds = [{"type": t, "status": "False" if t != "Ready" else "True",
              "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z",
              "reason": f"Kubelet{t}", "message": f"kubelet reports {t} condition is healthy"}
             for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": ("m5.xlarge", "m5.2xlarge", "c5.4xlarge")[i % 3],
                "topology.kubernetes.io/zone": f"zone-{i % 3}", "pool": f"pool-{i % 10}"}},
            "spec": {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24",
                     "providerID": f"aws:///zone-{i % 3}/i-{_hexs(rnd, 17)}"},
            "status": {"capacity": {"cpu": "4", "memory": "16310060Ki", "pods": "110",
                                    "ephemeral-storage": "101430960Ki"},
                       "allocatable": {"cpu": "3920m", "memory": "15293228Ki", "pods": "110",
                                       "ephemeral-storage": "93478772582"},
                       "conditions": conds,
                       "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256 % 256}.{i % 256}"},
                                     {"type": "Hostname", "address": name}],
                       "nodeInfo": {"machineID": _hexs(rnd, 32), "systemUUID": str(uuid.UUID(int=rnd.getrandbits(128))),
                                    "bootID": str(uuid.UUID(int=rnd.getrandbits(128))),
                                    "kernelVersion": "6.1.0-18-cloud-amd64", "osImage": "Debian GNU/Linux 12",
                                    "containerRuntimeVersion": "containerd://1.7.13",
                                    "kubeletVersion": "v1.36.0", "kubeProxyVersion": "v1.36.0",
                                    "operatingSystem": "linux", "architecture": "amd64"},
                       "images": images}}


def lease(i: int, renew: str = "2026-01-01T00:00:00.000000Z") -> dict:
    name = f"node-{i:06d}"
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name,
                                              "uid": str(uuid.UUID(int=random.Random(i).getrandbits(128)))}]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew}}


def configmap(ns: str, i: int, size: int = 8) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:06d}", "namespace": ns,
                         "labels": {"app": f"app-{i % 50}", "tier": ("web", "db", "cache")[i % 3]}},
            "data": {f"key{j}": ("%d" % j) * 100 for j in range(size)}}


def big_configmap(ns: str, i: int) -> dict:
    rnd = random.Random(i)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"big-{i:04d}", "namespace": ns, "labels": {"app": "big"}},
            "data": {"blob": _hexs(rnd, 100 * 1024)}}


def secret(ns: str, i: int) -> dict:
    rnd = random.Random(i)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": f"secret-{i:06d}", "namespace": ns, "labels": {"app": f"app-{i % 50}"}},
            "data": {"token": base64.b64encode(rnd.randbytes(480)).decode(),
                     "ca.crt": base64.b64encode(rnd.randbytes(160)).decode()}}


def pod(ns: str, i: int) -> dict:
    rnd = random.Random(i)
    app = f"app-{i % 50}"
    rs = f"{app}-{_hexs(rnd, 10)[:10]}"
    hash_ = f"{(i // 10) * 2654435761 % (1 << 32):08x}"

    def container(c: int) -> dict:
        return {"name": f"{app}-c{c}", "image": f"registry.example.com/{app}/server:v1.{c}.{i % 9}",
                "ports": [{"containerPort": 8080 + c, "protocol": "TCP", "name": f"http{c}"}],
                "env": [{"name": f"ENV_{k}", "value": f"value-{k}-{app}"} for k in range(4)],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"cpu": "500m", "memory": "512Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/config", "readOnly": True},
                                 {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                  "readOnly": True}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080 + c}, "periodSeconds": 10},
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080 + c}, "periodSeconds": 5},
                "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}

    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{rs}-{i:06d}", "namespace": ns,
                         "labels": {"app": app, "pod-template-hash": hash_, "tier": ("web", "db", "cache")[i % 3]},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                                              "uid": str(uuid.UUID(int=rnd.getrandbits(128))),
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"containers": [container(0), container(1)],
                     "volumes": [{"name": "config", "configMap": {"name": f"cm-{i % 100:06d}"}},
                                 {"name": "kube-api-access", "projected": {"sources": [
                                     {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
                     "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "serviceAccountName": "default",
                     "nodeName": f"node-{i % 500:06d}", "schedulerName": "default-scheduler",
                     "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 300}]},
            "status": {"phase": "Running", "hostIP": f"10.0.{i % 256}.{i // 256 % 256}",
                       "podIP": f"10.1.{i % 256}.{i // 256 % 256}", "startTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
                                      for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                       "containerStatuses": [{"name": f"{app}-c{c}", "ready": True, "restartCount": 0,
                                              "image": f"registry.example.com/{app}/server:v1.{c}.{i % 9}",
                                              "imageID": f"registry.example.com/{app}/server@sha256:{_hexs(rnd, 64)}",
                                              "containerID": f"containerd://{_hexs(rnd, 64)}",
                                              "state": {"running": {"startedAt": "2026-01-01T00:00:01Z"}}}
                                             for c in range(2)]}}


def rolebinding(ns: str, i: int) -> dict:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"rb-{i:06d}", "namespace": ns},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": f"user-{i}@example.com"}],
            "roleRef": {"kind": "Role", "apiGroup": "rbac.authorization.k8s.io", "name": f"role-{i % 20}"}}


def widget_crd() -> dict:
    v = {"name": "v1", "served": True, "storage": True,
         "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"widgets.{CRD_GROUP}"},
            "spec": {"group": CRD_GROUP, "scope": "Namespaced", "versions": [v],
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"}}}


def widget(i: int, gen: int = 0) -> dict:
    return {"apiVersion": f"{CRD_GROUP}/v1", "kind": "Widget",
            "metadata": {"name": f"w-{i:07d}", "namespace": "churn", "labels": {"shard": f"s{i % 16}"}},
            "spec": {"generation": gen, "replicas": i % 5, "payload": ("%07d" % i) * 100}}


# --- processes -----------------------------------------------------------------

def current_etcd_binary() -> str:
    spec = importlib.util.spec_from_file_location("_build_etcd", os.path.join(ROOT, "tools", "build_etcd.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ensure_etcd()


class Proc:
    def __init__(self, role: str, popen: subprocess.Popen, base: str, log_path: str, selector=None):
        self.role = role
        self.popen = popen
        self.base = base
        self.log_path = log_path
        self.selector = selector

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def spawn(role: str, endpoint: str, prefix: str, *extra: str, tracemalloc: bool = True, selector=None) -> Proc:
    port = free_port()
    log_path = os.path.join(tempfile.gettempdir(), f"bench-residency-{role}-{port}.log")
    env = dict(os.environ)
    if tracemalloc:
        env["RESIDENCY_TRACEMALLOC"] = "1"
    with open(log_path, "wb") as lf:
        p = subprocess.Popen([sys.executable, "-m", "apiserver", "--etcd-servers", endpoint, "--etcd-prefix",
                              prefix, "--port", str(port), *extra], stdout=lf, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
    return Proc(role, p, f"http://127.0.0.1:{port}", log_path, selector)


async def wait_ready(s: aiohttp.ClientSession, procs: list[Proc], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        while True:
            if p.popen.poll() is not None:
                raise BenchError(f"{p.role} exited with {p.popen.returncode}; see {p.log_path}")
            try:
                async with s.get(p.base + "/readyz", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        break
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"{p.role} not ready in {timeout:.0f} s; see {p.log_path}")
            await asyncio.sleep(0.2)


async def check(r: aiohttp.ClientResponse, what: str, ok=(200, 201)) -> bytes:
    body = await r.read()
    if r.status not in ok:
        raise BenchError(f"{what}: HTTP {r.status}: {body[:400]!r}")
    return body


async def get_json(s: aiohttp.ClientSession, url: str, params: dict | None = None, what: str = "") -> dict:
    for attempt in range(50):
        async with s.get(url, params=params) as r:
            if r.status == 429:  # cache (re)initialising
                await r.read()
                await asyncio.sleep(0.2)
                continue
            return orjson.loads(await check(r, what or url, ok=(200,)))
    raise BenchError(f"{what or url}: still 429 after retries")


async def post(s: aiohttp.ClientSession, url: str, obj: dict, ok=(200, 201)) -> bytes:
    async with s.post(url, data=orjson.dumps(obj), headers={"Content-Type": "application/json"}) as r:
        return await check(r, f"POST {url}", ok=ok)


async def pool(n: int, clients: int, op, label: str) -> float:
    it = iter(range(n))
    done = [0]
    step = max(1, n // 5)

    async def worker():
        for i in it:
            await op(i)
            done[0] += 1
            if done[0] % step == 0:
                log(f"  {label}: {done[0]}/{n}")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - t0


# --- profiles --------------------------------------------------------------------

class Profile:
    """A workload: what to load, what to run while measuring, which resources to check."""
    name = ""
    title = ""
    full_resources: str | None = None   # --residency-full-resources for shards (None: the default)

    def __init__(self, n: int):
        self.n = n
        self.counts: dict[str, int] = {}
        self.sample_bytes: dict[str, int] = {}   # one object's size as the apiserver returns it
        self.bytes_total = 0                     # sum of created objects' sizes (as returned)
        self.writes = 0
        self.write_errors = 0

    # (report key, cluster-wide list path) of every resource whose cache is compared
    resources: tuple[tuple[str, str], ...] = ()

    async def create(self, s, base, path, obj, kind) -> None:
        body = await post(s, base + path, obj)
        self.bytes_total += len(body)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.sample_bytes.setdefault(kind, len(body))

    async def load(self, s, base, clients):
        raise NotImplementedError

    async def writer(self, s, base, stop: asyncio.Event):
        raise NotImplementedError

    def describe(self) -> str:
        kinds = ", ".join(f"{self.counts[k]} {k} (~{self.sample_bytes[k] / 1024:.1f} KB)" for k in self.counts)
        return f"{kinds}; {self.bytes_total / 1e6:.1f} MB of objects"


async def paced(stop: asyncio.Event, rate: float, workers: int, op) -> None:
    """Run op(i) at about `rate`/s on `workers` coroutines until stop is set."""
    counter = iter(range(1 << 62))
    t0 = time.perf_counter()

    async def w():
        for i in counter:
            if stop.is_set():
                return
            due = t0 + i / rate
            now = time.perf_counter()
            if due > now:
                await asyncio.sleep(due - now)
            await op(i)
    await asyncio.gather(*(w() for _ in range(workers)))


class NodeProfile(Profile):
    name = "node"
    title = "node-bound"
    resources = (("nodes", "/api/v1/nodes"), ("leases.coordination.k8s.io", "/apis/coordination.k8s.io/v1/leases"))

    async def load(self, s, base, clients):
        self.nodes = self.n // 2
        await post(s, base + "/api/v1/namespaces", {"metadata": {"name": "kube-node-lease"}}, ok=(201, 409))
        await pool(self.nodes, clients, lambda i: self.create(s, base, "/api/v1/nodes", node(i), "Nodes"), "nodes")
        await pool(self.nodes, clients, lambda i: self.create(
            s, base, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease(i), "Leases"), "leases")

    def heartbeat_rate(self) -> float:
        return max(20.0, min(self.nodes / 10.0, 400.0))   # every lease renewed every ~10 s (capped)

    async def writer(self, s, base, stop):
        url = base + "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"

        async def op(i):
            j = i % self.nodes
            ts = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            async with s.put(url + f"node-{j:06d}", data=orjson.dumps(lease(j, ts)),
                             headers={"Content-Type": "application/json"}) as r:
                await r.read()
                self.writes += 1
                self.write_errors += r.status >= 300
        await paced(stop, self.heartbeat_rate(), 8, op)

    def describe(self) -> str:
        return super().describe() + f"; Lease heartbeats at {self.heartbeat_rate():.0f}/s while measuring"


class ChurnProfile(Profile):
    name = "churn"
    title = "churn-bound"
    resources = ((f"widgets.{CRD_GROUP}", f"/apis/{CRD_GROUP}/v1/widgets"),)

    async def load(self, s, base, clients):
        await post(s, base + "/api/v1/namespaces", {"metadata": {"name": "churn"}})
        await post(s, base + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widget_crd())
        url = f"/apis/{CRD_GROUP}/v1/namespaces/churn/widgets"
        for _ in range(100):  # served as soon as the CRD is created; wait for discovery to pick it up
            async with s.get(base + url, params={"limit": "1"}) as r:
                await r.read()
                if r.status == 200:
                    break
            await asyncio.sleep(0.1)
        self.live = collections.deque(range(self.n))
        self.next_id = self.n
        await pool(self.n, clients, lambda i: self.create(s, base, url, widget(i), "Widgets"), "widgets")

    async def writer(self, s, base, stop):
        url = base + f"/apis/{CRD_GROUP}/v1/namespaces/churn/widgets"
        rnd = random.Random(7)

        async def op(i):
            kind = i % 3
            if kind == 0:
                j = self.next_id
                self.next_id += 1
                async with s.post(url, data=orjson.dumps(widget(j)), headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    ok = r.status < 300
                if ok:
                    self.live.append(j)
            elif kind == 1:
                j = self.live[rnd.randrange(len(self.live))]
                async with s.put(f"{url}/w-{j:07d}", data=orjson.dumps(widget(j, i)),
                                 headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    ok = r.status < 300 or r.status in (404, 409)
            else:
                j = self.live.popleft()
                async with s.delete(f"{url}/w-{j:07d}") as r:
                    await r.read()
                    ok = r.status < 300 or r.status == 404
            self.writes += 1
            self.write_errors += not ok

        async def w():
            i = 0
            while not stop.is_set():
                await op(i)
                i += 1
        self.t_writer = time.perf_counter()
        await asyncio.gather(*(w() for _ in range(6)))

    def describe(self) -> str:
        return super().describe() + "; create/update/delete (1:1:1) as fast as 6 writers go while measuring"


class StateProfile(Profile):
    name = "state"
    title = "state-bound"
    full_resources = STATE_FULL_RESOURCES
    NS = 20
    resources = (("configmaps", "/api/v1/configmaps"), ("secrets", "/api/v1/secrets"), ("pods", "/api/v1/pods"),
                 ("rolebindings.rbac.authorization.k8s.io", "/apis/rbac.authorization.k8s.io/v1/rolebindings"))

    async def load(self, s, base, clients):
        n = self.n
        self.ncm, nsec, npod, nrb = int(n * 0.3), int(n * 0.15), int(n * 0.3), int(n * 0.25)
        nbig = max(2, n // 1000)
        for k in range(self.NS):
            await post(s, base + "/api/v1/namespaces", {"metadata": {"name": f"state-{k}"}})

        def ns(i):
            return f"state-{i % self.NS}"
        await pool(self.ncm, clients, lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/configmaps", configmap(ns(i), i), "ConfigMaps"), "configmaps")
        await pool(nsec, clients, lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/secrets", secret(ns(i), i), "Secrets"), "secrets")
        await pool(npod, clients, lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/pods", pod(ns(i), i), "Pods"), "pods")
        await pool(nrb, clients, lambda i: self.create(
            s, base, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns(i)}/rolebindings", rolebinding(ns(i), i),
            "RoleBindings"), "rolebindings")
        await pool(nbig, min(clients, 4), lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/configmaps", big_configmap(ns(i), i), "100KB-ConfigMaps"), "big")

    async def writer(self, s, base, stop):
        async def op(i):   # mostly idle: a trickle of ConfigMap updates
            j = (i * 7919) % self.ncm
            nsn = f"state-{j % self.NS}"
            async with s.put(f"{base}/api/v1/namespaces/{nsn}/configmaps/cm-{j:06d}",
                             data=orjson.dumps(configmap(nsn, j)), headers={"Content-Type": "application/json"}) as r:
                await r.read()
                self.writes += 1
                self.write_errors += r.status >= 300
        await paced(stop, 5.0, 1, op)

    def describe(self) -> str:
        return super().describe() + "; 5 ConfigMap updates/s while measuring"


PROFILES = {"node": NodeProfile, "churn": ChurnProfile, "state": StateProfile}


# --- measuring -------------------------------------------------------------------

def native_bytes(rep: dict) -> tuple[int, int]:
    """(all cache structure bytes, object-state bytes = entries + B-tree + bitmaps + slots)."""
    total = state = 0
    for st in rep["resources"].values():
        s = st["entry_bytes"] + st["btree_bytes"] + st["bitmap_bytes"] + st["slots_bytes"]
        state += s
        total += s + st["history_bytes"] + st["snapshot_bytes_estimate"]
    return total, state


def measurement(rep: dict) -> dict:
    total, state = native_bytes(rep)
    pm = rep["process"]
    if "tracemalloc_bytes" not in pm:
        raise BenchError("/debug/residency has no tracemalloc_bytes (RESIDENCY_TRACEMALLOC=1 not honoured?)")
    return {"native": total, "object_state": state, "tracemalloc": pm["tracemalloc_bytes"], "rss": pm["rss_bytes"],
            "rss_peak": pm.get("rss_peak_bytes", 0),
            "resources": {k: {f: v[f] for f in ("objects", "entry_bytes", "btree_bytes", "bitmap_bytes",
                                                 "slots_bytes", "history_events", "history_bytes",
                                                 "snapshot_bytes_estimate", "rv", "partial", "droppedNonResident")}
                          for k, v in rep["resources"].items()}}


async def current_revision(s, p: Proc, path: str) -> int:
    doc = await get_json(s, p.base + path, {"limit": "1"})
    return int(doc["metadata"]["resourceVersion"])


async def sync(s, procs: list[Proc], prof: Profile, partial, rev: int, timeout: float = 120.0) -> None:
    """Consistent lists (which make each cache catch up to etcd's revision), then poll /debug/residency
    until every compared resource (and namespaces) is ready with rv >= rev."""
    keys = [k for k, _ in prof.resources] + ["namespaces"]
    for p in procs:
        for key, path in list(prof.resources) + [("namespaces", "/api/v1/namespaces")]:
            params = {"limit": "1"}
            if p.selector is not None and partial(key):
                params["shardSelector"] = str(p.selector)
            await get_json(s, p.base + path, params, f"{p.role} sync list {key}")
    deadline = time.monotonic() + timeout
    for p in procs:
        while True:
            rep = await get_json(s, p.base + "/debug/residency")
            lag = [k for k in keys if not (rep["resources"].get(k, {}).get("ready")
                                           and rep["resources"][k]["rv"] >= rev)]
            if not lag:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{p.role}: caches {lag} did not reach rv {rev} in {timeout:.0f} s")
            await asyncio.sleep(0.1)


async def correctness(s, full: Proc, shards: list[Proc], prof: Profile, partial) -> dict:
    """Union of the shards' sharded lists == the full replica's list at the same RV, no object twice."""
    problems: list[str] = []
    per_resource = {}
    for key, path in prof.resources:
        whole = await get_json(s, full.base + path, None, f"full list {key}")
        want = {(i["metadata"].get("namespace", ""), i["metadata"]["name"]): i["metadata"]["resourceVersion"]
                for i in whole["items"]}
        rv = whole["metadata"]["resourceVersion"]
        seen: dict = {}
        for sh in shards:
            params = {"shardSelector": str(sh.selector)} if partial(key) else None
            doc = await get_json(s, sh.base + path, params, f"{sh.role} sharded list {key}")
            if doc["metadata"]["resourceVersion"] != rv:
                problems.append(f"{key}: {sh.role} list at RV {doc['metadata']['resourceVersion']}, full at {rv}")
            for it in doc["items"]:
                md = it["metadata"]
                k = (md.get("namespace", ""), md["name"])
                if k in seen:
                    problems.append(f"{key}: {k} in {seen[k][0]} and {sh.role}")
                seen[k] = (sh.role, md["resourceVersion"])
                if partial(key) and not sh.selector.matches(md["uid"], md.get("namespace", "")):
                    problems.append(f"{key}: {k} outside {sh.role}'s selector")
        got = {k: v[1] for k, v in seen.items()}
        if got != want:
            missing = set(want) - set(got)
            extra = set(got) - set(want)
            stale = [k for k in set(got) & set(want) if got[k] != want[k]]
            problems.append(f"{key}: union differs (missing {len(missing)}, extra {len(extra)}, "
                            f"different RV {len(stale)})")
        per_resource[key] = {"full_items": len(want), "union_items": len(got), "rv": rv}
    return {"passed": not problems, "problems": problems[:20], "resources": per_resource}


async def measure_all(s, procs: list[Proc]) -> list[dict]:
    out = []
    for p in procs:
        out.append(measurement(await get_json(s, p.base + "/debug/residency", {"gc": "1"})))
    return out


def summarize(full: dict, shards: list[dict], k: int, floor: dict) -> dict:
    out = {}
    for m in MEASURES + ("object_state",):
        vals = [x[m] for x in shards]
        mean = statistics.mean(vals)
        d = {"shard_mean_bytes": mean, "shard_max_bytes": max(vals), "shard_min_bytes": min(vals),
             "shard_sum_bytes": sum(vals), "full_bytes": full[m], "mean_over_full": mean / full[m],
             "max_over_full": max(vals) / full[m], "ideal": 1.0 / k,
             "max_dev_from_full_over_k": max(abs(v - full[m] / k) for v in vals) / (full[m] / k)}
        fl = floor.get(m, 0)
        if m in ("tracemalloc", "rss") and full[m] > fl:
            d["above_floor_mean_over_full"] = (mean - fl) / (full[m] - fl)
        out[m] = d
    objs = sum(r["objects"] for x in shards for r in x["resources"].values())
    bm = sum(r["bitmap_bytes"] for x in shards for r in x["resources"].values())
    out["bitmap_bytes_per_object"] = bm / objs if objs else 0.0
    fobjs = sum(r["objects"] for r in full["resources"].values())
    fbm = sum(r["bitmap_bytes"] for r in full["resources"].values())
    out["full_bitmap_bytes_per_object"] = fbm / fobjs if fobjs else 0.0
    return out


async def run_profile(s, etcd_ep: str, prof: Profile, ks: list[int], p: argparse.Namespace, floor: dict) -> dict:
    prefix = f"/registry-res-{prof.name}-{os.getpid()}"
    log(f"== profile {prof.title}: loading (prefix {prefix})")
    loader = spawn(f"{prof.name}-loader", etcd_ep, prefix, "--watch-cache=false", tracemalloc=False)
    procs_alive = [loader]
    try:
        await wait_ready(s, [loader])
        t0 = time.perf_counter()
        await prof.load(s, loader.base, p.clients)
        load_s = time.perf_counter() - t0
        log(f"loaded in {load_s:.1f} s: {prof.describe()}")
        full_res = set((prof.full_resources or
                        "namespaces,customresourcedefinitions,roles,rolebindings,clusterroles,clusterrolebindings"
                        ).split(","))

        def partial(key: str) -> bool:
            return key.split(".", 1)[0] not in full_res

        full = spawn(f"{prof.name}-full", etcd_ep, prefix)
        procs_alive.append(full)
        await wait_ready(s, [full])
        runs = []
        for k in ks:
            sels = complementary(k)
            extra = ("--residency-full-resources", prof.full_resources) if prof.full_resources else ()
            shards = [spawn(f"{prof.name}-k{k}-s{i}", etcd_ep, prefix, "--residency", str(sel), *extra, selector=sel)
                      for i, sel in enumerate(sels)]
            procs_alive += shards
            log(f"K={k}: started {k} shard process(es); waiting for ready")
            await wait_ready(s, shards)
            stop = asyncio.Event()
            writes0 = prof.writes
            wtask = asyncio.create_task(prof.writer(s, loader.base, stop))
            tw = time.perf_counter()
            await asyncio.sleep(p.warmup)
            rev = await current_revision(s, full, prof.resources[0][1])
            await sync(s, [full] + shards, prof, partial, rev)
            meas = await measure_all(s, [full] + shards)
            stop.set()
            await wtask
            wrate = (prof.writes - writes0) / (time.perf_counter() - tw)
            log(f"K={k}: measured at rv >= {rev} with writers running ({wrate:.0f} writes/s); checking lists")
            rev2 = await current_revision(s, full, prof.resources[0][1])
            await sync(s, [full] + shards, prof, partial, rev2)
            chk = await correctness(s, full, shards, prof, partial)
            summ = summarize(meas[0], meas[1:], k, floor)
            log(f"K={k}: native/shard {summ['native']['mean_over_full']:.3f} of full, tracemalloc "
                f"{summ['tracemalloc']['mean_over_full']:.3f}, RSS {summ['rss']['mean_over_full']:.3f}; "
                f"check {'pass' if chk['passed'] else 'FAIL ' + '; '.join(chk['problems'][:3])}")
            runs.append({"k": k, "selectors": [str(x) for x in sels], "measured_at_rv": rev,
                         "writes_per_s_while_measuring": wrate, "full": meas[0], "shards": meas[1:],
                         "summary": summ, "check": chk})
            for sh in shards:
                sh.stop()
                procs_alive.remove(sh)
        return {"title": prof.title, "description": prof.describe(), "counts": prof.counts,
                "sample_object_bytes": prof.sample_bytes, "workload_bytes": prof.bytes_total,
                "load_seconds": load_s, "writes": prof.writes, "write_errors": prof.write_errors,
                "shard_full_resources": prof.full_resources or "(default: namespaces, CRDs and RBAC fully resident)",
                "rbac_sharded": prof.full_resources == STATE_FULL_RESOURCES, "runs": runs}
    finally:
        for x in procs_alive:
            x.stop()


async def measure_floor(s, etcd_ep: str) -> dict:
    fp = spawn("floor", etcd_ep, f"/registry-empty-{os.getpid()}")
    try:
        await wait_ready(s, [fp])
        await asyncio.sleep(1.0)
        m = measurement(await get_json(s, fp.base + "/debug/residency", {"gc": "1"}))
        m.pop("resources")
        return m
    finally:
        fp.stop()


# --- in-process micro-benchmarks --------------------------------------------------

def _stored_pod(i: int, uid: str) -> tuple[str, bytes, dict]:
    from storage.store import encode_value, stamp_rv
    obj = pod("micro", i)
    obj["metadata"]["uid"] = uid
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    obj = stamp_rv(obj, 1)   # the apiserver's ObjectMeta key order
    key = f"/registry/pods/micro/{obj['metadata']['name']}"
    return key, encode_value(obj), obj


def micro_drop(batches: int, per_batch: int) -> dict:
    """Residency.ingest_filter on a Pod's stored bytes: median per call, non-resident and resident."""
    from cache.residency import Residency, uid_of
    sel = complementary(2)[0]
    keep = Residency(sel).ingest_filter("pods", "/registry/pods/", True)
    rnd = random.Random(3)
    out = {}
    for label, want in (("drop_nonresident_median_us", False), ("keep_resident_median_us", True)):
        while True:
            uid = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
            if sel.matches(uid, "micro") == want:
                break
        key, value, _ = _stored_pod(1, uid)
        assert uid_of(value) == uid, "stored layout not the one uid_of reads"
        assert keep(key, value) is want
        per = []
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(per_batch):
                keep(key, value)
            per.append((time.perf_counter() - t0) / per_batch * 1e6)
        out[label] = statistics.median(per)
        out["pod_stored_bytes"] = len(value)
    return out


def micro_ingest(n: int) -> dict:
    """The Cacher's own ingest (`Cacher._apply`: residency filter, decode, stamp RV, encode, apply to the
    WatchCache) on n etcd watch events: n/2 creates, then n/2 updates of the same Pods. A real Cacher
    configured as apiserver.server configures one, never started (no etcd, no watchers to dispatch to)."""
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    from cache.cacher import Cacher
    from cache.residency import Residency
    from storage.etcd import KV, WatchEvent
    res = Registry().lookup("", "v1", "pods")
    prefix = "/registry/pods/"
    rnd = random.Random(5)
    half = n // 2
    values = [_stored_pod(i, str(uuid.UUID(int=rnd.getrandbits(128), version=4)))[:2] for i in range(half)]
    out = {}
    for label, sel in (("ingest_events_per_s_full", None), ("ingest_events_per_s_k2", complementary(2)[0])):
        c = Cacher(store=None, client=types.SimpleNamespace(version="3.5.35"), prefix=prefix, resource_label=res.plural, group=res.group,
                   encode=lambda obj, _r=res: encode_obj(_r, obj), head=wire_head(res),
                   residency=Residency(sel).ingest_filter("pods", prefix, True) if sel else None,
                   clock=time.monotonic)
        c.wc.replace([], 1)
        events = []
        for i, (key, value) in enumerate(values):
            events.append(WatchEvent("PUT", KV(key.encode(), value, 2 + i, 2 + i), None))
        for i, (key, value) in enumerate(values):
            rv = 2 + half + i
            events.append(WatchEvent("PUT", KV(key.encode(), value, rv, 2 + i), KV(key.encode(), value, 2 + i, 2 + i)))
        t0 = time.perf_counter()
        applied = sum(1 for ev in events if c._apply(ev) is not None)
        el = time.perf_counter() - t0
        out[label] = n / el
        out[label.replace("events_per_s", "applied")] = applied
    out["ingest_events"] = n
    return out


def micro_select(n: int, runs: int) -> dict:
    """A label-selector list over n resident objects: bitmaps (WatchCache.indexes.select, then entries in
    key order as cache/reads.py does) against a scan of the same cache (orjson decode + match)."""
    from machinery.selectors import parse_label_selector
    from cache.watch_cache import WatchCache
    wc = WatchCache("/registry/configmaps/", time.monotonic)
    objs = []
    for i in range(n):
        ns = f"ns-{i % 20}"
        labels = {"app": f"app-{i % 100}", "tier": ("web", "db", "cache")[i % 3]}
        obj = {"kind": "ConfigMap", "apiVersion": "v1",
               "metadata": {"name": f"cm-{i:06d}", "namespace": ns, "uid": str(uuid.UUID(int=i)),
                            "resourceVersion": str(i + 1), "labels": labels},
               "data": {"k": "v" * 200}}
        objs.append((f"/registry/configmaps/{ns}/cm-{i:06d}", i + 1, orjson.dumps(obj), str(uuid.UUID(int=i)),
                     ns, labels))
    wc.replace(objs, n + 1)
    del objs
    sel = parse_label_selector("app=app-7,tier=web")
    reqs = sel.requirements

    def by_bitmap():
        slots, _exact = wc.indexes.select(reqs, None)
        return [e.data for e in sorted((wc.slots[s] for s in slots), key=lambda e: e.key)]

    def by_scan():
        out = []
        for _, e in wc.store.iter_from("/registry/configmaps/"):
            if sel.matches((orjson.loads(e.data).get("metadata") or {}).get("labels")):
                out.append(e.data)
        return out

    a, b = by_bitmap(), by_scan()
    if a != b:
        raise BenchError(f"bitmap select ({len(a)}) and scan ({len(b)}) disagree")
    tb, ts = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        by_bitmap()
        tb.append(time.perf_counter() - t0)
    for _ in range(max(3, runs // 5)):
        t0 = time.perf_counter()
        by_scan()
        ts.append(time.perf_counter() - t0)
    mb, ms = statistics.median(tb), statistics.median(ts)
    return {"select_objects": n, "select_matches": len(a), "select_bitmap_median_ms": mb * 1e3,
            "select_scan_median_ms": ms * 1e3, "select_speedup": ms / mb, "select_selector": str(sel)}


# --- targets, table, PNG ----------------------------------------------------------

def targets(doc: dict, p: argparse.Namespace) -> list[dict]:
    out = []
    fl = doc["floor"]
    for name, pr in doc["profiles"].items():
        for run in pr["runs"]:
            k, sm = run["k"], run["summary"]
            dev = sm["object_state"]["max_dev_from_full_over_k"]
            out.append({"target": "object-cache bytes per shard within 5 % of full/K", "profile": name, "k": k,
                        "value": f"max deviation {dev * 100:.1f} %", "met": dev <= 0.05})
            limit = (sm["rss"]["full_bytes"] / k + fl["rss"]) * 1.10
            worst = sm["rss"]["shard_max_bytes"]
            out.append({"target": "per-shard RSS <= (full/K + empty floor) + 10 %", "profile": name, "k": k,
                        "value": f"max {worst / MIB:.0f} MiB vs limit {limit / MIB:.0f} MiB", "met": worst <= limit})
            bpo = sm["bitmap_bytes_per_object"]
            out.append({"target": "membership+index overhead <= 4 B per resident object", "profile": name, "k": k,
                        "value": f"{bpo:.1f} B/object (bitmap_bytes / objects, all shards)", "met": bpo <= 4.0})
    st = doc["profiles"].get("state")
    if st:
        r2 = [r for r in st["runs"] if r["k"] == 2]
        if r2:
            big = st["workload_bytes"] >= 500e6
            ratio = r2[0]["summary"]["rss"]["mean_over_full"]
            out.append({"target": "K=2 state-bound (>= 500 MB of objects): per-shard RSS < 0.55 of full",
                        "profile": "state", "k": 2,
                        "value": f"{ratio:.3f} (tracemalloc {r2[0]['summary']['tracemalloc']['mean_over_full']:.3f}) "
                                 f"on {st['workload_bytes'] / 1e6:.0f} MB"
                                 + ("" if big else " - workload below 500 MB, target not applicable at this size"),
                        "met": (ratio < 0.55) if big else None})
    mi = doc["micro"]
    out.append({"target": "drop a non-resident event <= 10 us", "value": f"{mi['drop_nonresident_median_us']:.2f} us",
                "met": mi["drop_nonresident_median_us"] <= 10})
    out.append({"target": "ingest >= 10,000 events/s per process",
                "value": f"{mi['ingest_events_per_s_full']:,.0f} events/s all resident "
                         f"({mi['ingest_events_per_s_k2']:,.0f} with K=2 residency)",
                "met": mi["ingest_events_per_s_full"] >= 10_000})
    out.append({"target": f"label-selector list over {mi['select_objects']:,} objects from bitmaps >= 10x a scan",
                "value": f"{mi['select_speedup']:.0f}x ({mi['select_bitmap_median_ms']:.2f} ms vs "
                         f"{mi['select_scan_median_ms']:.0f} ms)", "met": mi["select_speedup"] >= 10})
    return out


def table(doc: dict) -> str:
    lines = []
    v = doc["versions"]
    etcd_v = v["etcd"].get("etcdserver") if isinstance(v["etcd"], dict) else "?"
    fl = doc["floor"]
    lines.append(f"# cache residency: heap per shard vs full replication; etcd {etcd_v}, Python {v['python']}, "
                 f"{v.get('cpu_affinity') or v['cpu_count']} cores ({v['cpu_model']}); all processes on one machine")
    lines.append(f"# empty-process floor (apiserver, cache on, empty prefix): tracemalloc {fl['tracemalloc'] / MIB:.1f} MiB, "
                 f"RSS {fl['rss'] / MIB:.1f} MiB, native {fl['native'] / 1024:.1f} KiB")
    for name, pr in doc["profiles"].items():
        lines.append("")
        lines.append(f"## {pr['title']}: {pr['description']}")
        lines.append("#   shards: " + ("--residency-full-resources " + STATE_FULL_RESOURCES +
                                         " (RBAC sharded too; by default RBAC stays fully resident)"
                                         if pr["rbac_sharded"] else
                                         "default residency (namespaces, CRDs and RBAC fully resident)"))
        hdr = (f"{'measure':<12} {'K':>2}  {'shard mean':>11} {'shard max':>11} {'sum shards':>11} "
               f"{'full':>11} {'mean/full':>9} {'ideal 1/K':>9} {'-floor':>7}  check")
        lines.append(hdr)
        for m in MEASURES:
            for run in pr["runs"]:
                d = run["summary"][m]
                af = d.get("above_floor_mean_over_full")
                lines.append(f"{m:<12} {run['k']:>2}  {d['shard_mean_bytes'] / MIB:>7.2f} MiB "
                             f"{d['shard_max_bytes'] / MIB:>7.2f} MiB {d['shard_sum_bytes'] / MIB:>7.2f} MiB "
                             f"{d['full_bytes'] / MIB:>7.2f} MiB {d['mean_over_full']:>9.3f} {1 / run['k']:>9.3f} "
                             f"{(f'{af:.3f}' if af is not None else '-'):>7}  "
                             f"{'pass' if run['check']['passed'] else 'FAIL'}")
    lines.append("")
    lines.append("# native = entry+btree+bitmap+slots+history+snapshot bytes from /debug/residency; "
                 "-floor = (shard - empty floor) / (full - empty floor); check = union of sharded lists == full list "
                 "at the same RV, no object twice (writers stopped)")
    mi = doc["micro"]
    lines.append(f"# in-process: drop non-resident Pod {mi['drop_nonresident_median_us']:.2f} us (keep resident "
                 f"{mi['keep_resident_median_us']:.2f} us; median per call); ingest {mi['ingest_events_per_s_full']:,.0f} "
                 f"events/s all resident, {mi['ingest_events_per_s_k2']:,.0f} with K=2 ({mi['ingest_events']} Pod events); "
                 f"label select over {mi['select_objects']:,}: bitmaps {mi['select_bitmap_median_ms']:.2f} ms vs "
                 f"scan {mi['select_scan_median_ms']:.0f} ms")
    lines.append("")
    lines.append("targets (reported, not asserted):")
    for t in doc["targets"]:
        where = f" [{t['profile']} K={t['k']}]" if "profile" in t else ""
        met = {True: "met", False: "NOT met", None: "n/a"}[t["met"]]
        lines.append(f"  {met:<8} {t['target']}{where}: {t['value']}")
    return "\n".join(lines)


def draw(doc: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    profs = list(doc["profiles"].items())
    fig, axes = plt.subplots(1, len(profs), figsize=(5.5 * len(profs), 4.5), squeeze=False)
    colors = {"native": "tab:blue", "tracemalloc": "tab:orange", "rss": "tab:green"}
    for ax, (name, pr) in zip(axes[0], profs):
        ks = [r["k"] for r in pr["runs"]]
        for m in MEASURES:
            mean = [r["summary"][m]["shard_mean_bytes"] / MIB for r in pr["runs"]]
            mx = [r["summary"][m]["shard_max_bytes"] / MIB for r in pr["runs"]]
            full = statistics.mean(r["summary"][m]["full_bytes"] for r in pr["runs"]) / MIB
            ax.errorbar(ks, mean, yerr=[[0] * len(ks), [a - b for a, b in zip(mx, mean)]], marker="o",
                        color=colors[m], label=f"{m} per shard (mean, max)", capsize=3)
            ax.plot(ks, [full / k for k in ks], linestyle="--", color=colors[m], alpha=0.6, label=f"{m} ideal full/K")
        ax.axhline(doc["floor"]["rss"] / MIB, color="grey", linestyle=":", label="RSS floor (empty)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ks)
        ax.set_xticklabels([str(k) for k in ks])
        ax.set_xlabel("K (shards)")
        ax.set_ylabel("MiB per process")
        ax.set_title(f"{pr['title']} ({pr['workload_bytes'] / 1e6:.1f} MB of objects)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def versions(etcd_ep: str, etcd_bin: str) -> dict:
    import urllib.request
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    out = {"python": platform.python_version(), "aiohttp": aiohttp.__version__, "orjson": orjson.__version__,
           "platform": platform.platform(), "cpu_model": cpu or platform.processor(), "cpu_count": os.cpu_count(),
           "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
           "etcd_binary": etcd_bin}
    for mod in ("pyroaring", "matplotlib"):
        try:
            from importlib.metadata import version
            out[mod] = version(mod)
        except Exception as e:  # noqa: BLE001
            out[mod] = f"unavailable: {e}"
    try:
        out["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                           timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out["git_commit"] = ""
    try:
        with urllib.request.urlopen(etcd_ep + "/version", timeout=5) as r:
            out["etcd"] = json.loads(r.read())
    except OSError as e:
        out["etcd"] = f"unavailable: {e}"
    return out


def flat_figures(doc: dict) -> dict:
    f = {"floor_tracemalloc_bytes": doc["floor"]["tracemalloc"], "floor_rss_bytes": doc["floor"]["rss"],
         "floor_native_bytes": doc["floor"]["native"]}
    f.update({k: v for k, v in doc["micro"].items() if isinstance(v, (int, float))})
    for name, pr in doc["profiles"].items():
        f[f"{name}_workload_bytes"] = pr["workload_bytes"]
        for run in pr["runs"]:
            for m in MEASURES:
                for st in PROFILE_STATS:
                    f[f"{name}_k{run['k']}_{m}_{st}"] = run["summary"][m][st]
    return f


def profile_figures(profiles: list[str], ks: list[int]) -> list[str]:
    return [f"{n}_k{k}_{m}_{st}" for n in profiles for k in ks for m in MEASURES for st in PROFILE_STATS] + \
        [f"{n}_workload_bytes" for n in profiles]


# --- main ------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.residency", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run for CI (< 1 min)")
    ap.add_argument("--objects", type=int, help="objects per profile (default 8000; --quick 300)")
    ap.add_argument("--ks", help="shard counts (default 1,2,4,8; --quick 1,2)")
    ap.add_argument("--profiles", default="node,churn,state", help="comma-separated: node, churn, state")
    ap.add_argument("--out", default="bench/out/residency.json")
    ap.add_argument("--png", default="bench/out/residency.png")
    ap.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients while loading")
    ap.add_argument("--warmup", type=float, help="seconds writers run before measuring (default 5; --quick 1)")
    ap.add_argument("--select-objects", type=int, help="objects in the bitmap-vs-scan micro-benchmark "
                                                       "(default 100000; --quick 20000)")
    p = ap.parse_args(argv)
    q = p.quick
    p.objects = p.objects or (300 if q else 8000)
    p.ks = [int(x) for x in (p.ks or ("1,2" if q else "1,2,4,8")).split(",")]
    p.profiles = [x.strip() for x in p.profiles.split(",") if x.strip()]
    for x in p.profiles:
        if x not in PROFILES:
            ap.error(f"--profiles: unknown profile {x!r} (node, churn, state)")
    p.warmup = p.warmup if p.warmup is not None else (1.0 if q else 5.0)
    p.select_objects = p.select_objects or (20_000 if q else 100_000)
    return p


async def run(p: argparse.Namespace, etcd_ep: str) -> dict:
    conn = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
        log("measuring the empty-process floor")
        floor = await measure_floor(s, etcd_ep)
        log(f"floor: tracemalloc {floor['tracemalloc'] / MIB:.1f} MiB, RSS {floor['rss'] / MIB:.1f} MiB")
        profiles = {}
        for name in p.profiles:
            profiles[name] = await run_profile(s, etcd_ep, PROFILES[name](p.objects), p.ks, p, floor)
    return {"floor": floor, "profiles": profiles}


def main(argv=None) -> int:
    p = parse_args(argv)
    t_start = time.perf_counter()
    log("ensuring a current etcd (tools/build_etcd.py)")
    etcd_bin = current_etcd_binary()
    q = p.quick
    log("in-process micro-benchmarks")
    micro = {}
    micro.update(micro_drop(50 if q else 200, 1000))
    micro.update(micro_ingest(4000 if q else 20000))
    micro.update(micro_select(p.select_objects, 10 if q else 20))
    log(f"micro: drop {micro['drop_nonresident_median_us']:.2f} us, ingest {micro['ingest_events_per_s_full']:,.0f}/s, "
        f"select speedup {micro['select_speedup']:.0f}x")
    with EmbeddedEtcd(binary=etcd_bin) as etcd:
        log(f"etcd at {etcd.endpoint} ({etcd_bin})")
        vers = versions(etcd.endpoint, etcd_bin)
        res = asyncio.run(run(p, etcd.endpoint))
    doc = {"benchmark": "residency", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "params": {k: v for k, v in vars(p).items() if k not in ("out", "png")},
           "measured": "etcd, a loader apiserver (--watch-cache=false, drives the writers), the full replica and "
                       "K shard apiservers run as separate processes on one machine; heap read from each "
                       "process's /debug/residency?gc=1 (tracemalloc with RESIDENCY_TRACEMALLOC=1, RSS from "
                       "/proc, native = the cache's structure bytes) at the same ingested revision, with the "
                       "profile's writers running; micro-benchmarks in the benchmark process",
           "versions": vers, "micro": micro, **res}
    doc["targets"] = targets(doc, p)
    doc["checks_passed"] = all(r["check"]["passed"] for pr in doc["profiles"].values() for r in pr["runs"])
    doc["figures"] = flat_figures(doc)
    doc["elapsed_s"] = time.perf_counter() - t_start
    os.makedirs(os.path.dirname(os.path.abspath(p.out)), exist_ok=True)
    with open(p.out, "w") as f:
        json.dump(doc, f, indent=2)
    draw(doc, p.png)
    print(table(doc))
    log(f"wrote {p.out} and {p.png} in {doc['elapsed_s']:.1f} s")
    return 0 if doc["checks_passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
