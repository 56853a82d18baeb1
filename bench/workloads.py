"""Workloads of the benchmarks: object factories (ConfigMaps of a given size, realistic Pods, Nodes,
Leases, RoleBindings, custom resources), loaders, and the residency benchmark's profiles (what to load,
what to write while measuring, which resources to compare)."""
from __future__ import annotations

import asyncio
import base64
import collections
import json
import random
import time
import uuid

import aiohttp
import orjson

from bench.harness import JSON_CT, Apiserver, check, log, post, run_pool
from tests.helpers import crd

CRD_GROUP = "bench.example.com"
STATE_FULL_RESOURCES = "namespaces,customresourcedefinitions"


# --- ConfigMaps ---------------------------------------------------------------------------------------------

def configmap(name: str, ns: str, labels: dict | None = None, data: dict | None = None) -> dict:
    md = {"name": name, "namespace": ns}
    if labels is not None:
        md["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}


def payload(keys: int = 8, **extra: str) -> dict:
    """ConfigMap data of `keys` 100-character values (8: ~1 KB objects), then `extra`."""
    return {**{f"key{j}": ("%d" % j) * 100 for j in range(keys)}, **extra}


def sized_configmap(name: str, size: int, ns: str, extra: dict | None = None) -> dict:
    """A ConfigMap whose JSON is about `size` bytes (10 keys of equal length)."""
    per = max(1, (size - 200) // 10)
    data = {f"k{i}": chr(ord("a") + i) * per for i in range(10)}
    if extra:
        data.update(extra)
    return configmap(name, ns, {"app": "bench"}, data)


async def ensure_namespace(s: aiohttp.ClientSession, base: str, name: str) -> None:
    await post(s, f"{base}/api/v1/namespaces", {"metadata": {"name": name}}, ok=(200, 201, 409))


async def create_objects(s: aiohttp.ClientSession, url: str, n: int, make, clients: int = 8, label: str = "",
                         steps: int = 5) -> None:
    """POST make(i) for i in range(n) to `url` on `clients` workers; an object that exists (409) is kept."""
    async def op(i):
        async with s.post(url, data=orjson.dumps(make(i)), headers=JSON_CT) as r:
            if r.status != 409:
                await check(r, f"POST {url} #{i}")
    await run_pool(n, clients, op, label, steps)


async def load_configmaps(base: str, ns: str, n: int, size: int, clients: int = 8) -> int:
    """Create namespace `ns` and n ConfigMaps cm-NNNNNN of ~size bytes; returns the body size of one."""
    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
        await ensure_namespace(s, base, ns)
        await create_objects(s, f"{base}/api/v1/namespaces/{ns}/configmaps", n,
                             lambda i: sized_configmap(f"cm-{i:06d}", size, ns), clients, "loaded")
    return len(orjson.dumps(sized_configmap("cm-000000", size, ns)))


def load_with_throwaway_apiserver(etcd_endpoint: str, ns: str, n: int, size: int, clients: int = 8) -> int:
    """Load through a `--watch-cache=false` apiserver that is stopped afterwards, so the measured processes
    start fresh (their VmHWM covers initialisation and the measured load only)."""
    log(f"loading {n} ConfigMaps of ~{size} B through a throw-away apiserver")
    t0 = time.perf_counter()
    with Apiserver(etcd_endpoint, watch_cache=False) as api:
        obj_bytes = asyncio.run(load_configmaps(api.base, ns, n, size, clients))
    log(f"loaded in {time.perf_counter() - t0:.1f} s")
    return obj_bytes


# --- cluster objects (the residency profiles) ----------------------------------------------------------------

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


def app_configmap(ns: str, i: int) -> dict:
    """~1 KB ConfigMap of app `i % 50` (the state-bound profile's)."""
    return configmap(f"cm-{i:06d}", ns, {"app": f"app-{i % 50}", "tier": ("web", "db", "cache")[i % 3]}, payload())


def blob_configmap(ns: str, i: int) -> dict:
    """A 100 KB ConfigMap of random hex."""
    return configmap(f"big-{i:04d}", ns, {"app": "big"}, {"blob": _hexs(random.Random(i), 100 * 1024)})


def secret(ns: str, i: int) -> dict:
    rnd = random.Random(i)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": f"secret-{i:06d}", "namespace": ns, "labels": {"app": f"app-{i % 50}"}},
            "data": {"token": base64.b64encode(rnd.randbytes(480)).decode(),
                     "ca.crt": base64.b64encode(rnd.randbytes(160)).decode()}}


def pod(ns: str, i: int) -> dict:
    """A ReplicaSet-owned Pod with two containers, running (~3 KB)."""
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
    return crd(CRD_GROUP, "widgets", "Widget", status=False, short_names=False)


def widget(i: int, gen: int = 0) -> dict:
    return {"apiVersion": f"{CRD_GROUP}/v1", "kind": "Widget",
            "metadata": {"name": f"w-{i:07d}", "namespace": "churn", "labels": {"shard": f"s{i % 16}"}},
            "spec": {"generation": gen, "replicas": i % 5, "payload": ("%07d" % i) * 100}}

# --- object shapes measured in the cache (heap_per_object) --------------------------------------------------

def _meta(name: str, ns: str, i: int, labels: dict, annotations: dict | None = None, owner: bool = False) -> dict:
    md = {"name": name, "namespace": ns, "uid": str(uuid.UUID(int=i + 1)),
          "creationTimestamp": "2026-01-15T10:%02d:%02dZ" % (i // 60 % 60, i % 60), "labels": labels}
    if annotations:
        md["annotations"] = annotations
    if owner:
        md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"web-{i % 97:05x}",
                                  "uid": str(uuid.UUID(int=(i % 97) + 10**9)), "controller": True,
                                  "blockOwnerDeletion": True}]
    return md


def deployment_pod(i: int) -> dict:
    """A Deployment-owned web Pod, scheduled and running (~3.4 KB of JSON)."""
    name = f"web-{i % 97:05x}-{i:08x}"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": _meta(name, f"ns-{i % 50:02d}", i,
                          {"app": "web", "pod-template-hash": f"{i % 97:05x}", "tier": "frontend"},
                          {"kubectl.kubernetes.io/restartedAt": "2026-01-15T10:00:00Z",
                           "prometheus.io/scrape": "true"}, owner=True),
        "spec": {
            "containers": [{
                "name": "web", "image": "registry.example.com/team/web:1.27.3",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"},
                          {"name": "metrics", "containerPort": 9102, "protocol": "TCP"}],
                "env": [{"name": f"ENV_VAR_{k}", "value": f"value-{k}-{i % 13}"} for k in range(3)]
                + [{"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
                "resources": {"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"},
                                 {"name": "kube-api-access-x7k2p", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                                  "initialDelaySeconds": 10, "timeoutSeconds": 1, "periodSeconds": 10,
                                  "successThreshold": 1, "failureThreshold": 3},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                                   "timeoutSeconds": 1, "periodSeconds": 5, "successThreshold": 1,
                                   "failureThreshold": 3},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "config", "configMap": {"name": "web-config", "defaultMode": 420}},
                        {"name": "kube-api-access-x7k2p", "projected": {"sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}], "defaultMode": 420}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "nodeName": f"node-{i % 500:04d}",
            "securityContext": {}, "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None,
                            "lastTransitionTime": "2026-01-15T10:00:%02dZ" % k}
                           for k, t in enumerate(("PodReadyToStartContainers", "Initialized", "Ready",
                                                  "ContainersReady", "PodScheduled"))],
            "hostIP": f"10.0.{i % 250}.{i % 200 + 1}", "podIP": f"10.244.{i % 250}.{i % 200 + 2}",
            "podIPs": [{"ip": f"10.244.{i % 250}.{i % 200 + 2}"}], "startTime": "2026-01-15T10:00:00Z",
            "containerStatuses": [{"name": "web", "state": {"running": {"startedAt": "2026-01-15T10:00:03Z"}},
                                   "lastState": {}, "ready": True, "restartCount": 0,
                                   "image": "registry.example.com/team/web:1.27.3",
                                   "imageID": "registry.example.com/team/web@sha256:" + "ab12" * 16,
                                   "containerID": "containerd://" + f"{i:016x}" * 4, "started": True}],
            "qosClass": "Burstable"}}


def settings_configmap(i: int) -> dict:
    """An application ConfigMap (~1 KB of JSON)."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(f"app-config-{i:08x}", f"ns-{i % 50:02d}", i, {"app": "web", "component": "config"}),
            "data": {"app.properties": "server.port=8080\nserver.threads=%d\nlog.level=info\n" % (i % 64)
                     + "feature.flags=" + ",".join(f"flag{k}" for k in range(40)) + "\n",
                     "endpoints.yaml": "primary: https://db-%d.internal:5432\nreplica: https://db-%d-ro.internal:5432\n"
                     % (i % 7, i % 7) + "timeout: 30s\nretries: 5\n" * 8}}


def user_rolebinding(i: int) -> dict:
    """A RoleBinding of one user to a Role (~0.4 KB of JSON)."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _meta(f"rb-{i:08x}", f"ns-{i % 50:02d}", i, {"team": f"t{i % 20}"}),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "edit"},
            "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": f"user{i}@example.com"}]}


def training_pod(i: int) -> dict:
    """A distributed-training Pod (~100 KB): hundreds of env vars (rank table, hyper-parameters), a large
    launcher-config annotation and many volume mounts, as training operators generate them."""
    p = deployment_pod(i)
    p["metadata"]["name"] = f"train-llm-{i:06d}-worker-{i % 512}"
    p["metadata"]["labels"] = {"training.kubeflow.org/job-name": f"train-llm-{i // 512}",
                               "training.kubeflow.org/replica-type": "worker",
                               "training.kubeflow.org/replica-index": str(i % 512)}
    p["metadata"]["annotations"]["training.example.com/launcher-config"] = json.dumps(
        {"hosts": [f"train-llm-{i // 512}-worker-{k}.train-llm.svc:2222" for k in range(512)],
         "hyper": {f"param_{k}": k * 0.001 for k in range(300)}})
    c = p["spec"]["containers"][0]
    c["image"] = "nvcr.io/nvidia/pytorch:25.01-py3"
    c["env"] = [{"name": f"NCCL_RANK_{k}", "value": f"train-llm-{i // 512}-worker-{k}:{29500 + k}"}
                for k in range(740)]
    c["resources"] = {"limits": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1600Gi"},
                      "requests": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1600Gi"}}
    c["volumeMounts"] += [{"name": f"shard-{k}", "mountPath": f"/data/shard-{k:03d}", "readOnly": True}
                          for k in range(120)]
    p["spec"]["volumes"] += [{"name": f"shard-{k}", "persistentVolumeClaim": {"claimName": f"dataset-shard-{k:03d}"}}
                             for k in range(120)]
    return p

# --- residency profiles -------------------------------------------------------------------------------------

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
        await ensure_namespace(s, base, "kube-node-lease")
        await run_pool(self.nodes, clients, lambda i: self.create(s, base, "/api/v1/nodes", node(i), "Nodes"),
                       "nodes", steps=5)
        await run_pool(self.nodes, clients, lambda i: self.create(
            s, base, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease(i), "Leases"),
            "leases", steps=5)

    def heartbeat_rate(self) -> float:
        return max(20.0, min(self.nodes / 10.0, 400.0))   # every lease renewed every ~10 s (capped)

    async def writer(self, s, base, stop):
        url = base + "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"

        async def op(i):
            j = i % self.nodes
            ts = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            async with s.put(url + f"node-{j:06d}", data=orjson.dumps(lease(j, ts)), headers=JSON_CT) as r:
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
        await run_pool(self.n, clients, lambda i: self.create(s, base, url, widget(i), "Widgets"), "widgets",
                       steps=5)

    async def writer(self, s, base, stop):
        url = base + f"/apis/{CRD_GROUP}/v1/namespaces/churn/widgets"
        rnd = random.Random(7)

        async def op(i):
            kind = i % 3
            if kind == 0:
                j = self.next_id
                self.next_id += 1
                async with s.post(url, data=orjson.dumps(widget(j)), headers=JSON_CT) as r:
                    await r.read()
                    ok = r.status < 300
                if ok:
                    self.live.append(j)
            elif kind == 1:
                j = self.live[rnd.randrange(len(self.live))]
                async with s.put(f"{url}/w-{j:07d}", data=orjson.dumps(widget(j, i)), headers=JSON_CT) as r:
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
        await run_pool(self.ncm, clients, lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/configmaps", app_configmap(ns(i), i), "ConfigMaps"), "configmaps",
            steps=5)
        await run_pool(nsec, clients, lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/secrets", secret(ns(i), i), "Secrets"), "secrets", steps=5)
        await run_pool(npod, clients, lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/pods", pod(ns(i), i), "Pods"), "pods", steps=5)
        await run_pool(nrb, clients, lambda i: self.create(
            s, base, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns(i)}/rolebindings", rolebinding(ns(i), i),
            "RoleBindings"), "rolebindings", steps=5)
        await run_pool(nbig, min(clients, 4), lambda i: self.create(
            s, base, f"/api/v1/namespaces/{ns(i)}/configmaps", blob_configmap(ns(i), i), "100KB-ConfigMaps"), "big",
            steps=5)

    def configmap_put(self, j: int) -> tuple[str, dict]:
        """(path, object) of an unconditional update of the j-th loaded ConfigMap (j < self.ncm)."""
        ns = f"state-{j % self.NS}"
        return f"/api/v1/namespaces/{ns}/configmaps/cm-{j:06d}", app_configmap(ns, j)

    async def writer(self, s, base, stop):
        async def op(i):   # mostly idle: a trickle of ConfigMap updates
            path, obj = self.configmap_put((i * 7919) % self.ncm)
            async with s.put(base + path, data=orjson.dumps(obj), headers=JSON_CT) as r:
                await r.read()
                self.writes += 1
                self.write_errors += r.status >= 300
        await paced(stop, 5.0, 1, op)

    def describe(self) -> str:
        return super().describe() + "; 5 ConfigMap updates/s while measuring"


class RealisticStateProfile(StateProfile):
    """The state-bound profile on realistic objects (recipes/corpus.py, issue 23): ConfigMaps of real config
    files with Helm labels and managedFields (~1.5 KB), random-payload Secrets (~1.6 KB), Pods as
    kube-scheduler and kwok leave them (~5 KB), RoleBindings from the bootstrap policy and generated subjects
    (~0.75 KB), one 100 KB training Pod per thousand objects, in the corpus's team namespaces. Objects made
    for size (bench/workloads.py's "0" * 100 payloads) compress to nothing; these compress as a cluster's do."""
    name = "realistic"
    title = "state-bound, realistic objects"

    async def load(self, s, base, clients):
        from bench import corpus
        n = self.n
        self.ncm = int(n * 0.3)
        teams = corpus.TEAMS
        for t in teams:
            await post(s, base + "/api/v1/namespaces", {"metadata": {"name": t}})
        self.configmap = corpus.as_posted(corpus.configmap)
        kinds = (("ConfigMaps", "/api/v1/namespaces/{ns}/configmaps", self.configmap, self.ncm),
                 ("Secrets", "/api/v1/namespaces/{ns}/secrets", corpus.as_posted(corpus.secret), int(n * 0.15)),
                 ("Pods", "/api/v1/namespaces/{ns}/pods", corpus.as_posted(corpus.pod), int(n * 0.3)),
                 ("RoleBindings", "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
                  corpus.as_posted(corpus.rolebinding), int(n * 0.25)),
                 ("100KB-Pods", "/api/v1/namespaces/{ns}/pods", corpus.as_posted(corpus.ai_pod), max(2, n // 1000)))
        for kind, path, make, count in kinds:
            def one(i, kind=kind, path=path, make=make):
                ns = teams[i % len(teams)]
                return self.create(s, base, path.format(ns=ns), make(ns, i), kind)
            await run_pool(count, clients if count > 100 else min(clients, 4), one, kind.lower(), steps=5)

    def configmap_put(self, j: int) -> tuple[str, dict]:
        from bench import corpus
        ns = corpus.TEAMS[j % len(corpus.TEAMS)]
        obj = self.configmap(ns, j)
        return f"/api/v1/namespaces/{ns}/configmaps/{obj['metadata']['name']}", obj


PROFILES = {"node": NodeProfile, "churn": ChurnProfile, "state": StateProfile, "realistic": RealisticStateProfile}
