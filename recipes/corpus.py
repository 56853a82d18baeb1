"""Realistic objects for the compression figures (issue 23): what a cluster holds, not objects made for size.

`bench/workloads.py` fills objects with values such as "0" * 100, which any compressor shrinks to nothing.
Here every object carries what the server and the controllers leave on it (uid, creationTimestamp,
managedFields entries as kube-apiserver writes them, defaults through `machinery.objects.prepare_create`),
names and values vary as in a real cluster, and payloads come from real files:

* configmap (~1 KB): a config file from upstream's own tree (the k8s.io/kubernetes module the kube-apiserver
  build downloads: manifests, test fixtures, scripts; else this Python environment's text files) as the data
  of a Helm-labelled ConfigMap in one of 24 team namespaces;
* rolebinding (~0.5 KB): the bootstrap RBAC policy's bindings (upstream's testdata YAML) plus generated ones,
  each to a bootstrap or team role, for 1-3 users, groups or service accounts with varied names;
* pod (~4 KB): a Deployment's Pod as kube-scheduler and kwok leave it: defaults, owner reference, node,
  status with conditions, IPs and container statuses (container and image IDs are random hex, as in life);
* ai_pod (~100 KB): a distributed-training Pod whose env and args come from real config files, with the
  last-applied-configuration annotation kubectl apply writes;
* secret (~1.5 KB): random payloads (service-account tokens, TLS keys and certificates, docker configs):
  their floor is their entropy, reported as its own row.

Deterministic for a seed; the file payloads depend on what the machine has (the module, else Python's own
files), which `source()` names.
"""
from __future__ import annotations

import base64
import functools
import glob
import json
import os
import random
import subprocess
import sysconfig
import tempfile
import uuid

import yaml

from machinery.objects import prepare_create
from machinery.resources import Registry

KUBERNETES = "k8s.io/kubernetes"
VERSION = "v1.37.2"
TEAMS = ["payments", "checkout", "search", "ml-platform", "identity", "billing", "ads", "catalog", "fraud",
         "growth", "infra", "observability", "data-eng", "mobile-api", "notifications", "recs", "pricing",
         "shipping", "support", "security", "storage", "web", "edge", "compliance"]
FIRST = ["ana", "bo", "chen", "dmitri", "eve", "farah", "gus", "hiro", "ines", "jamal", "kim", "lars", "mia",
         "nikhil", "olga", "pat", "quinn", "rosa", "sven", "tomas", "uma", "vik", "wen", "xavier", "yuki", "zoe"]
LAST = ["garcia", "smith", "nguyen", "kowalski", "okafor", "rossi", "tanaka", "muller", "silva", "haddad",
        "johansson", "patel", "dubois", "novak", "ivanova", "obrien", "kim", "santos", "weber", "ali"]
IMAGES = ["registry.k8s.io/pause:3.10", "nginx:1.27.3", "ghcr.io/acme/payments-api:v2.14.1",
          "quay.io/prometheus/node-exporter:v1.8.2", "docker.io/library/redis:7.4-alpine",
          "us-docker.pkg.dev/acme-prod/services/checkout:2026.11.28-3f9c2e1"]


@functools.lru_cache(maxsize=1)
def kubernetes_tree() -> str | None:
    """The k8s.io/kubernetes module's directory (downloaded through the Go module proxy if needed), or None."""
    try:
        with tempfile.TemporaryDirectory(prefix="corpus-") as d:
            out = subprocess.run(["go", "mod", "download", "-json", f"{KUBERNETES}@{VERSION}"], cwd=d,
                                 capture_output=True, text=True, timeout=600)
        if out.returncode == 0:
            return json.loads(out.stdout)["Dir"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError):
        pass
    return None


@functools.lru_cache(maxsize=1)
def text_files() -> tuple[list[str], str]:
    """(paths of real text files of 300 B-2 KB, where they come from), sorted."""
    root = kubernetes_tree()
    if root:
        pats = ["**/*.yaml", "**/*.yml", "**/*.json", "**/*.conf", "**/*.sh", "**/*.toml", "**/*.ini",
                "**/*.cfg", "**/*.tmpl"]
        src = f"{KUBERNETES}@{VERSION}"
    else:
        root = sysconfig.get_paths()["purelib"]
        pats = ["**/*.py", "**/*.txt", "**/*.json", "**/*.cfg"]
        src = "this Python environment's site-packages"
    files = set()
    for p in pats:
        for f in glob.glob(os.path.join(root, p), recursive=True):
            try:
                size = os.path.getsize(f)
            except OSError:
                continue
            if 300 <= size <= 2048:
                files.add(f)
    return sorted(files), src


@functools.lru_cache(maxsize=1)
def small_files() -> list[str]:
    """The text files of at most 700 B (a ~1 KB ConfigMap's payload)."""
    return [f for f in text_files()[0] if os.path.getsize(f) <= 700]


def source() -> str:
    return text_files()[1]


def _read(path: str) -> str:
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def _time(r: random.Random) -> str:
    return f"2026-{r.randint(1, 11):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:" \
           f"{r.randint(0, 59):02d}Z"


def _fields(obj, depth: int = 0) -> dict:
    """The FieldsV1 tree of an object's fields (what a managedFields entry owns), as kube-apiserver writes it."""
    if isinstance(obj, dict):
        return {f"f:{k}": _fields(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list) and obj and all(isinstance(x, dict) and "name" in x for x in obj):
        return {f'k:{{"name":"{x["name"]}"}}': {".": {}, **_fields(x, depth + 1)} for x in obj}
    return {}


def _managed(manager: str, operation: str, api_version: str, fields: dict, when: str,
             subresource: str = "") -> dict:
    e = {"manager": manager, "operation": operation, "apiVersion": api_version, "time": when,
         "fieldsType": "FieldsV1", "fieldsV1": fields}
    if subresource:
        e["subresource"] = subresource
    return e


_REGISTRY = Registry()


def _created(group: str, plural: str, obj: dict, r: random.Random) -> dict:
    """Server-set fields and defaults as our create path sets them, a uid from the seed, a past timestamp."""
    res = _REGISTRY.lookup(group, "v1", plural)
    obj = prepare_create(res, obj)
    obj["metadata"]["uid"] = str(uuid.UUID(int=r.getrandbits(128), version=4))
    obj["metadata"]["creationTimestamp"] = _time(r)
    obj["metadata"]["resourceVersion"] = str(r.randint(10_000, 90_000_000))
    return obj


def configmap(i: int, seed: int = 1) -> dict:
    r = random.Random(seed * 1_000_003 + i)
    files = small_files()
    path = files[r.randrange(len(files))]
    team = TEAMS[i % len(TEAMS)]
    app = os.path.splitext(os.path.basename(path))[0].lower().replace("_", "-")[:40].strip("-.") or "app"
    data = {os.path.basename(path): _read(path)}
    if r.random() < 0.3:
        data["LOG_LEVEL"] = r.choice(["info", "debug", "warn"])
        data["FEATURE_FLAGS"] = ",".join(r.sample(["fast-path", "v2-api", "shadow-writes", "canary", "dark-mode",
                                                   "batching", "tracing"], r.randint(1, 4)))
    md = {"name": f"{app}-config-{r.getrandbits(20):05x}", "namespace": team,
          "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": f"{app}-{team}",
                     "app.kubernetes.io/part-of": team, "app.kubernetes.io/managed-by": "Helm"},
          "annotations": {"meta.helm.sh/release-name": f"{team}-{app}", "meta.helm.sh/release-namespace": team}}
    obj = _created("", "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}, r)
    obj["metadata"]["managedFields"] = [_managed("helm", "Update", "v1", {
        "f:data": _fields(data), "f:metadata": {"f:annotations": _fields(md["annotations"]),
                                                "f:labels": _fields(md["labels"])}},
        obj["metadata"]["creationTimestamp"])]
    return obj


@functools.lru_cache(maxsize=1)
def bootstrap_bindings() -> list[dict]:
    root = kubernetes_tree()
    if not root:
        return []
    out = []
    d = os.path.join(root, "plugin/pkg/auth/authorizer/rbac/bootstrappolicy/testdata")
    for name in ("cluster-role-bindings.yaml", "controller-role-bindings.yaml", "namespace-role-bindings.yaml"):
        try:
            with open(os.path.join(d, name)) as f:
                out += [o for o in yaml.safe_load(f)["items"] if o.get("kind") in ("RoleBinding", "ClusterRoleBinding")]
        except (OSError, KeyError, TypeError, yaml.YAMLError):
            continue
    return out


def _subject(r: random.Random, team: str) -> dict:
    k = r.random()
    if k < 0.55:
        return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                "name": f"{r.choice(FIRST)}.{r.choice(LAST)}{r.choice(['', str(r.randint(1, 99))])}@acme-corp.example"}
    if k < 0.8:
        return {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                "name": r.choice([f"oidc:{team}-{r.choice(['devs', 'oncall', 'leads', 'readers'])}",
                                  f"acme:eng:{team}", "system:authenticated"])}
    return {"kind": "ServiceAccount", "name": r.choice(["default", f"{team}-deployer", "argocd-application-controller",
                                                        f"{team}-ci-{r.getrandbits(16):04x}"]),
            "namespace": r.choice([team, "argocd", "ci"])}


def rolebinding(i: int, seed: int = 1) -> dict:
    r = random.Random(seed * 2_000_003 + i)
    boot = bootstrap_bindings()
    team = TEAMS[i % len(TEAMS)]
    if boot and r.random() < 0.15:   # a bootstrap binding, namespaced into a team's namespace
        b = json.loads(json.dumps(boot[r.randrange(len(boot))]))
        md = {"name": f"{b['metadata']['name']}-{r.getrandbits(12):03x}", "namespace": team,
              **{k: v for k, v in b["metadata"].items() if k in ("labels", "annotations")}}
        role_ref = dict(b["roleRef"], kind="ClusterRole")
        subjects = b.get("subjects") or [_subject(r, team)]
    else:
        role = r.choice(["admin", "edit", "view", f"{team}-deployer", f"{team}-secrets-reader", "system:image-puller"])
        subjects = [_subject(r, team) for _ in range(r.choice([1, 1, 1, 2, 3]))]
        who = subjects[0]["name"].split("@")[0].split(":")[-1].replace(".", "-")[:30]
        md = {"name": f"{role.replace(':', '-')}-{who}-{r.getrandbits(16):04x}", "namespace": team}
        if r.random() < 0.3:
            md["labels"] = {"acme.example/team": team}
        role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role" if team in role else "ClusterRole",
                    "name": role}
    obj = _created("rbac.authorization.k8s.io", "rolebindings",
                   {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": md,
                    "roleRef": role_ref, "subjects": subjects}, r)
    obj["metadata"]["managedFields"] = [_managed(
        r.choice(["kubectl-client-side-apply", "argocd-controller", "terraform-provider-kubernetes"]), "Update",
        "rbac.authorization.k8s.io/v1", {"f:roleRef": {}, "f:subjects": {}}, obj["metadata"]["creationTimestamp"])]
    return obj


def _hex(r: random.Random, n: int) -> str:
    return f"{r.getrandbits(n * 4):0{n}x}"


def pod(i: int, seed: int = 1, big: bool = False) -> dict:
    r = random.Random(seed * 3_000_017 + i + (7 if big else 0))
    team = TEAMS[i % len(TEAMS)]
    app = r.choice(["api", "worker", "frontend", "indexer", "gateway", "scheduler", "consumer", "trainer"])
    rs_hash = f"{r.getrandbits(40):010x}"[:10]
    name = f"{team}-{app}-{rs_hash}-{_hex(r, 5)}"
    node = f"kwok-node-{r.randrange(5000)}"
    image = r.choice(IMAGES)
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
           {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
           {"name": "DB_HOST", "value": f"{team}-db-{r.randrange(3)}.{team}.svc.cluster.local"}]
    args = ["--port=8080", f"--log-level={r.choice(['info', 'debug'])}"]
    annotations = {"kubectl.kubernetes.io/restartedAt": _time(r), "prometheus.io/scrape": "true"}
    if big:   # a training job's pod: real config files as env and args, its last-applied configuration
        files, _ = text_files()
        for k in range(45):
            text = _read(files[r.randrange(len(files))])
            env.append({"name": f"TRAINING_CONFIG_{k:02d}", "value": text[:1400]})
        args += [f"--hyperparam-{k}={r.random():.6f}" for k in range(200)]
    containers = [{"name": app, "image": image, "args": args, "env": env,
                   "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                   "resources": {"limits": {"cpu": r.choice(["500m", "1", "2"]), "memory": r.choice(["256Mi", "1Gi"])},
                                 "requests": {"cpu": "100m", "memory": "128Mi"}},
                   "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 10},
                   "volumeMounts": [{"name": "kube-api-access", "readOnly": True,
                                     "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]},
                  {"name": "istio-proxy", "image": "docker.io/istio/proxyv2:1.24.1", "args": ["proxy", "sidecar"],
                   "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}}}]
    md = {"name": name, "generateName": name[:-5], "namespace": team,
          "labels": {"app": app, "pod-template-hash": rs_hash, "app.kubernetes.io/part-of": team,
                     "security.istio.io/tlsMode": "istio"},
          "annotations": annotations,
          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{team}-{app}-{rs_hash}",
                               "uid": str(uuid.UUID(int=r.getrandbits(128), version=4)), "controller": True,
                               "blockOwnerDeletion": True}]}
    spec = {"containers": containers, "nodeName": node, "serviceAccountName": f"{team}-{app}",
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}]}
    obj = _created("", "pods", {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}, r)
    t0 = obj["metadata"]["creationTimestamp"]
    ip = f"10.{r.randrange(256)}.{r.randrange(256)}.{r.randrange(1, 255)}"
    obj["status"] = {
        "phase": "Running", "hostIP": f"172.20.{r.randrange(256)}.{r.randrange(1, 255)}", "podIP": ip,
        "podIPs": [{"ip": ip}], "qosClass": "Burstable", "startTime": t0,
        "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": _time(r)}
                       for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady",
                                 "PodScheduled")],
        "containerStatuses": [{"name": c["name"], "image": c["image"], "ready": True,
                               "restartCount": r.choice([0, 0, 1]),
                               "started": True, "containerID": f"containerd://{_hex(r, 64)}",
                               "imageID": f"{c['image'].split(':')[0]}@sha256:{_hex(r, 64)}",
                               "state": {"running": {"startedAt": _time(r)}}} for c in containers]}
    obj["metadata"]["managedFields"] = [
        _managed("kube-controller-manager", "Update", "v1",
                 {"f:metadata": {"f:generateName": {}, "f:labels": _fields(md["labels"]),
                                 "f:ownerReferences": {}}, "f:spec": {"f:containers": {}, "f:volumes": {}}}, t0),
        _managed("kube-scheduler", "Update", "v1", {"f:status": {"f:conditions": {}}}, t0, "status"),
        _managed("kwok", "Update", "v1", {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                                                       "f:hostIP": {}, "f:phase": {}, "f:podIP": {}}}, t0, "status")]
    if big:
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": team},
             "spec": {"containers": [{k: v for k, v in c.items() if k in ("name", "image", "args", "env")}
                                     for c in containers]}}, separators=(",", ":"))
    return obj


def ai_pod(i: int, seed: int = 1) -> dict:
    return pod(i, seed, big=True)


def secret(i: int, seed: int = 1) -> dict:
    r = random.Random(seed * 4_000_037 + i)
    team = TEAMS[i % len(TEAMS)]
    k = i % 3
    if k == 0:
        data = {"token": base64.b64encode(r.randbytes(700)).decode(),
                "ca.crt": base64.b64encode(r.randbytes(400)).decode(),
                "namespace": base64.b64encode(team.encode()).decode()}
        typ, name = "kubernetes.io/service-account-token", f"{team}-sa-token-{_hex(r, 5)}"
    elif k == 1:
        data = {"tls.crt": base64.b64encode(r.randbytes(650)).decode(),
                "tls.key": base64.b64encode(r.randbytes(420)).decode()}
        typ, name = "kubernetes.io/tls", f"{team}-ingress-tls-{_hex(r, 4)}"
    else:
        auth = base64.b64encode(f"robot${team}+ci:{_hex(r, 40)}".encode()).decode()
        cfg = json.dumps({"auths": {"ghcr.io": {"auth": auth}, "us-docker.pkg.dev": {"auth": auth}}})
        data = {".dockerconfigjson": base64.b64encode(cfg.encode()).decode()}
        typ, name = "kubernetes.io/dockerconfigjson", f"{team}-pull-secret-{_hex(r, 4)}"
    md = {"name": name, "namespace": team, "labels": {"acme.example/team": team}}
    obj = _created("", "secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": md, "type": typ, "data": data}, r)
    obj["metadata"]["managedFields"] = [_managed("kubectl-create", "Update", "v1",
                                                 {"f:data": _fields(data), "f:type": {}},
                                                 obj["metadata"]["creationTimestamp"])]
    return obj


def big_configmap(i: int, size: int = 100_000, seed: int = 1, ns: str = "lists", labels: dict | None = None) -> dict:
    """A ConfigMap of about `size` bytes of real config files (a bundled dashboard or rule set, as operators
    ship them), named and labelled as `configmap`'s are."""
    r = random.Random(seed * 5_000_011 + i)
    files, _ = text_files()
    data, total = {}, 0
    while total < size - 600:
        path = files[r.randrange(len(files))]
        text = _read(path)[: size - 600 - total]
        key = f"{len(data):03d}-{os.path.basename(path)}"
        data[key] = text
        total += len(text) + len(key) + 6
    md = {"name": f"bundle-{i:06d}", "namespace": ns,
          "labels": labels if labels is not None else {"app.kubernetes.io/part-of": TEAMS[i % len(TEAMS)]}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}


MAKERS = {"configmap": configmap, "rolebinding": rolebinding, "pod": pod, "ai_pod": ai_pod, "secret": secret}


def as_posted(make):
    """A factory(ns, i) of `make`'s objects as a client creates them: in `ns`, a unique name, without the fields
    the server sets (resourceVersion, uid, creationTimestamp); managedFields and status kept."""
    def factory(ns: str, i: int) -> dict:
        o = make(i)
        md = o["metadata"]
        for k in ("resourceVersion", "uid", "creationTimestamp"):
            md.pop(k, None)
        md["namespace"] = ns
        md["name"] = f"{md['name'][:40].rstrip('-.')}-{i:06d}"
        md.pop("generateName", None)
        return o
    return factory
