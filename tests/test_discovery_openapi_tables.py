"""Discovery, OpenAPI and Table shapes (pure functions; no server, no etcd).

Upstream sources the expectations come from (behaviour paraphrased, nothing copied):
  * k8s.io/apiserver pkg/endpoints/discovery/{legacy,version,group,root,storageversionhash}.go,
    aggregated/handler.go; k8s.io/api apidiscovery/v2/types.go; client-go discovery_client.go.
  * cli-runtime pkg/resource/query_param_verifier_v3.go; kubectl pkg/cmd/apply/patcher.go;
    apimachinery pkg/util/strategicpatch/meta.go (PatchMetaFromOpenAPIV3).
  * kubernetes pkg/printers/internalversion/printers.go, pkg/printers/storage/storage.go;
    apiserver pkg/registry/rest/table.go, pkg/endpoints/handlers/response.go;
    apiextensions-apiserver pkg/registry/customresource/tableconvertor;
    apimachinery pkg/util/duration/duration_test.go (HumanDuration vectors).
"""
from __future__ import annotations

import datetime as dt
import re

import pytest

from apiserver import discovery, openapi
from machinery import jsonenc, tables
from machinery.resources import BUILTINS, GROUP_ORDER, SERVED_SUBRESOURCES, Registry

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

CRD = {
    "metadata": {"name": "crontabs.stable.example.com"},
    "spec": {
        "group": "stable.example.com", "scope": "Namespaced",
        "names": {"plural": "crontabs", "singular": "crontab", "kind": "CronTab", "shortNames": ["ct"]},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"cronSpec": {"type": "string"},
                                                          "replicas": {"type": "integer"}}}}}},
            "additionalPrinterColumns": [
                {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
                {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready", "priority": 1},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            ],
        }],
    },
}


def res(plural: str, group: str = ""):
    return next(r for r in BUILTINS if r.plural == plural and r.group == group)


def ts(seconds_ago: float) -> str:
    return (NOW - dt.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


# ============================================================ discovery

def test_api_versions_is_version_stripped():
    # legacy.go writes through stripVersionNegotiatedSerializer: kind but no apiVersion.
    doc = discovery.api_versions("10.0.0.1:6443")
    assert list(doc) == ["kind", "versions", "serverAddressByClientCIDRs"]
    assert doc["versions"] == ["v1"]
    assert doc["serverAddressByClientCIDRs"] == [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.0.0.1:6443"}]


def test_api_group_list_and_group():
    reg = Registry()
    doc = discovery.api_group_list(reg)
    assert list(doc) == ["kind", "apiVersion", "groups"]
    names = [g["name"] for g in doc["groups"]]
    assert "" not in names and "rbac.authorization.k8s.io" in names
    g = next(g for g in doc["groups"] if g["name"] == "coordination.k8s.io")
    assert g == {"name": "coordination.k8s.io",
                 "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
                 "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}}
    one = discovery.api_group(reg, "coordination.k8s.io")
    assert list(one) == ["kind", "apiVersion", "name", "versions", "preferredVersion"]
    assert discovery.api_group(reg, "nope.example.com") is None
    assert discovery.api_group(reg, "") is None


def test_api_resource_list_core():
    doc = discovery.api_resource_list(Registry(), "", "v1")
    assert list(doc) == ["kind", "groupVersion", "resources"]  # core: apiVersion stripped (version.go)
    by = {r["name"]: r for r in doc["resources"]}
    pods = by["pods"]
    assert list(pods) == ["name", "singularName", "namespaced", "kind", "verbs", "shortNames", "categories",
                          "storageVersionHash"]
    # storageversionhash.go: base64(sha256("/v1/Pod")[:8]) - the value real clusters report.
    assert pods["storageVersionHash"] == "xPOwRZ+Yhw8="
    assert by["configmaps"]["storageVersionHash"] == "qFsyl6wFWjQ="
    assert by["pods/status"] == {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod",
                                 "verbs": ["get", "patch", "update"]}
    assert "configmaps/status" not in by
    assert "secrets" in by and "shortNames" not in by["secrets"]


def test_api_resource_list_group_and_missing():
    reg = Registry()
    doc = discovery.api_resource_list(reg, "rbac.authorization.k8s.io", "v1")
    assert doc["apiVersion"] == "v1" and doc["groupVersion"] == "rbac.authorization.k8s.io/v1"
    assert discovery.api_resource_list(reg, "rbac.authorization.k8s.io", "v2") is None


def test_crd_shows_up_in_discovery():
    reg = Registry()
    reg.apply_crd(CRD)
    names = [g["name"] for g in discovery.api_group_list(reg)["groups"]]
    assert "stable.example.com" in names
    doc = discovery.api_resource_list(reg, "stable.example.com", "v1")
    assert [r["name"] for r in doc["resources"]] == ["crontabs", "crontabs/status"]
    assert doc["resources"][0]["shortNames"] == ["ct"]


def test_version_info():
    v = discovery.version_info()
    assert list(v)[:2] == ["major", "minor"] and v["major"] == "1" and v["minor"] == "36"
    assert v["gitVersion"] == "v1.36.0-residency"
    assert list(v)[-1] == "platform"


KUBECTL_DISCOVERY_ACCEPT = ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
                            "application/json")


def test_wants_aggregated():
    # aggregated/wrapper.go: the only transform allowed is the aggregated list, so any clause asking for it
    # wins, wherever it stands; v2beta1 is no longer served (AggregatedDiscoveryRemoveBetaType).
    assert discovery.wants_aggregated(KUBECTL_DISCOVERY_ACCEPT)
    assert not discovery.wants_aggregated("application/json")
    assert discovery.wants_aggregated("application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert discovery.wants_aggregated("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert not discovery.wants_aggregated("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList")
    assert not discovery.wants_aggregated("text/plain;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    assert not discovery.wants_aggregated(None)


def test_aggregated_discovery_shape():
    reg = Registry()
    reg.apply_crd(CRD)
    core = discovery.aggregated_discovery(reg, core=True)
    assert list(core) == ["kind", "apiVersion", "metadata", "items"]
    assert core["apiVersion"] == "apidiscovery.k8s.io/v2" and len(core["items"]) == 1
    item = core["items"][0]
    assert item["metadata"] == {}
    v1 = item["versions"][0]
    assert v1["version"] == "v1" and v1["freshness"] == "Current"
    pods = next(r for r in v1["resources"] if r["resource"] == "pods")
    assert list(pods) == ["resource", "responseKind", "scope", "singularResource", "verbs", "shortNames",
                          "categories", "subresources"]
    # built-in kinds leave the response kind's group and version empty (as kube-apiserver does)
    assert pods["responseKind"] == {"group": "", "version": "", "kind": "Pod"}
    # the served subresources in upstream's order, each with its own kind (pods/binding: Binding)
    subs = {s["subresource"]: s for s in pods["subresources"]}
    assert list(subs) == [s.name for s in res("pods").subresources if s.name in SERVED_SUBRESOURCES]
    assert subs["status"] == {"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "Pod"},
                              "verbs": ["get", "patch", "update"]}
    if "binding" in subs:
        assert subs["binding"] == {"subresource": "binding", "verbs": ["create"],
                                   "responseKind": {"group": "", "version": "", "kind": "Binding"}}
    deployments = next(r for g in discovery.aggregated_discovery(reg, core=False)["items"] if g["metadata"]["name"]
                       == "apps" for r in g["versions"][0]["resources"] if r["resource"] == "deployments")
    if "scale" in SERVED_SUBRESOURCES:  # another group version's kind: named in full
        assert deployments["subresources"][0] == {"subresource": "scale", "verbs": ["get", "patch", "update"],
                                                  "responseKind": {"group": "autoscaling", "version": "v1",
                                                                   "kind": "Scale"}}
    apis = discovery.aggregated_discovery(reg, core=False)
    names = [i["metadata"]["name"] for i in apis["items"]]
    assert "stable.example.com" in names and "" not in names
    ns = next(r for r in v1["resources"] if r["resource"] == "namespaces")
    assert ns["scope"] == "Cluster" and "deletecollection" not in ns["verbs"]
    ct = next(i for i in apis["items"] if i["metadata"]["name"] == "stable.example.com")["versions"][0]["resources"][0]
    assert ct["responseKind"] == {"group": "stable.example.com", "version": "v1", "kind": "CronTab"}
    assert ct["verbs"] == ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]
    assert names.index("rbac.authorization.k8s.io") < names.index("apiextensions.k8s.io") < \
        names.index("coordination.k8s.io") < names.index("stable.example.com")  # group priorities
    assert re.fullmatch(r'"[0-9A-F]{128}"', discovery.aggregated_etag(apis))


def test_storage_version_hash_uses_the_storage_version():
    reg = Registry()
    crds = {r["name"]: r for r in discovery.api_resource_list(reg, "apiextensions.k8s.io", "v1")["resources"]}
    assert crds["customresourcedefinitions"]["storageVersionHash"] == "jfWCUB31mvA="  # v1beta1, as upstream
    two = {**CRD, "spec": {**CRD["spec"], "versions": [
        {**CRD["spec"]["versions"][0], "name": "v2", "storage": True},
        {**CRD["spec"]["versions"][0], "name": "v1", "storage": False}]}}
    reg.apply_crd(two)
    h = {v: discovery.api_resource_list(reg, "stable.example.com", v)["resources"][0]["storageVersionHash"]
         for v in ("v1", "v2")}
    assert h["v1"] == h["v2"] == discovery.storage_version_hash("stable.example.com", "v2", "CronTab")
    assert [v["version"] for v in discovery.api_group(reg, "stable.example.com")["versions"]] == ["v2", "v1"]


def test_version_json_is_indented_like_marshal_indent():
    body = discovery.version_json()
    assert body.startswith(b'{\n  "major": "1",\n') and body.endswith(b'"\n}')


# ============================================================ OpenAPI

def _refs(x, acc):
    if isinstance(x, dict):
        for k, v in x.items():
            if k == "$ref" and isinstance(v, str) and "/parameters/" not in v:
                acc.add(v)
            else:
                _refs(v, acc)
    elif isinstance(x, list):
        for v in x:
            _refs(v, acc)
    return acc


def test_v3_index_lists_every_group_version():
    reg = Registry()
    idx = openapi.v3_index(reg)
    gvs = {(r.group, r.version) for r in BUILTINS if r.group}
    # every group of kube-apiserver v1.37.2 with a stored kind, but events.k8s.io (docs/differences.md)
    assert {g for g, _ in gvs} == set(GROUP_ORDER) - {"", "events.k8s.io", "authentication.k8s.io",
                                                      "authorization.k8s.io"}
    assert set(idx["paths"]) == {"api", "api/v1", "apis", "version"} | {f"apis/{g}" for g, _ in gvs} | \
        {f"apis/{g}/{v}" for g, v in gvs}
    url = idx["paths"]["api/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/api/v1?hash=") and url.endswith(openapi.v3_hash(reg, "api/v1"))
    reg.apply_crd(CRD)
    idx2 = openapi.v3_index(reg)
    assert "apis/stable.example.com/v1" in idx2["paths"]
    assert "apis/stable.example.com" not in idx2["paths"]  # custom groups have no group document


def test_v3_documents_are_memoized_per_registry_state():
    """What is kept is the served body, compressed, per registry state; the document as a dict is built for it
    and dropped (a fresh process's floor, issue 21)."""
    reg = Registry()
    a = openapi._v3_body(reg, "api/v1")
    assert openapi._v3_body(reg, "api/v1") is a
    body, digest = openapi.v3_body(reg, "api/v1")
    assert body == jsonenc.dumps(openapi.v3_group_version(reg, "", "v1")) and digest == a.digest
    assert len(a.frame) * 5 < len(body)
    reg.apply_crd(CRD)
    assert openapi._v3_body(reg, "api/v1") is not a   # state changed -> rebuilt
    assert openapi.v3_body(reg, "apis/nope/v1") is None


def test_documents_are_built_in_a_child_process(monkeypatch, caplog):
    """The builds run in `python -m apiserver.openapi`, so their garbage never enters the server's heap (the
    floor of issue 21): the bodies come back as this process would build them, a custom resource's too, and an
    unserved path is None. If the child cannot run, the server builds them itself and says so."""
    reg = Registry()
    reg.apply_crd(CRD)
    wanted = [("v2", ""), ("v3", "api/v1"), ("v3", "apis/stable.example.com/v1"), ("v3", "apis/nope/v1")]
    here = [None if b is None else b.get() for b in openapi._build_here(reg, wanted)]
    assert here[3] is None and all(here[:3])
    with monkeypatch.context() as m:
        def refuse(*_):
            raise AssertionError("built in the server's own process")
        m.setattr(openapi, "_build_here", refuse)
        child = [None if b is None else b.get() for b in openapi._build_bodies(reg, wanted)]
    assert child == here
    monkeypatch.setattr(openapi.sys, "executable", "/nonexistent/python")
    with caplog.at_level("WARNING", logger="apiserver"):
        fallback = [None if b is None else b.get() for b in openapi._build_bodies(reg, wanted[1:2])]
    assert fallback == here[1:2]
    assert "OpenAPI build child could not run" in caplog.text


def _patch_ops(doc, gvk):
    for path, item in doc["paths"].items():
        op = item.get("patch")
        if op and op["x-kubernetes-group-version-kind"] == gvk:
            yield path, op


@pytest.mark.parametrize("group,version,kind", [("", "v1", "ConfigMap"), ("", "v1", "Pod"),
                                                ("", "v1", "Namespace"),
                                                ("rbac.authorization.k8s.io", "v1", "Role"),
                                                ("coordination.k8s.io", "v1", "Lease")])
def test_v3_patch_operations_support_field_validation_and_smp(group, version, kind):
    # query_param_verifier_v3.go: first PATCH op with the GVK must list "fieldValidation" itself;
    # patcher.go gvkSupportsPatchOpenAPIV3: its requestBody must offer strategic merge patch.
    doc = openapi.v3_group_version(Registry(), group, version)
    ops = list(_patch_ops(doc, {"group": group, "kind": kind, "version": version}))
    assert ops
    for _, op in ops:
        assert "fieldValidation" in [p["name"] for p in op["parameters"]]
        assert "application/strategic-merge-patch+json" in op["requestBody"]["content"]
        assert op["x-kubernetes-action"] == "patch"


def test_v3_custom_resources():
    reg = Registry()
    reg.apply_crd(CRD)
    doc = openapi.v3_group_version(reg, "stable.example.com", "v1")
    schemas = doc["components"]["schemas"]
    ct = schemas["com.example.stable.v1.CronTab"]
    assert ct["x-kubernetes-group-version-kind"] == [{"group": "stable.example.com", "kind": "CronTab",
                                                      "version": "v1"}]
    assert ct["properties"]["spec"]["properties"]["cronSpec"] == {"type": "string"}
    assert ct["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]
    ops = list(_patch_ops(doc, {"group": "stable.example.com", "kind": "CronTab", "version": "v1"}))
    assert len(ops) == 2  # main resource + status
    for _, op in ops:
        assert "fieldValidation" in [p["name"] for p in op["parameters"]]
        # no SMP for custom resources: kubectl must compute a JSON merge patch
        assert "application/strategic-merge-patch+json" not in op["requestBody"]["content"]
    # CRDs themselves are a built-in kind: strategic merge patch is offered (and served)
    crd_doc = openapi.v3_group_version(reg, "apiextensions.k8s.io", "v1")
    for _, op in _patch_ops(crd_doc, {"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition",
                                      "version": "v1"}):
        assert "application/strategic-merge-patch+json" in op["requestBody"]["content"]
        assert "application/apply-patch+yaml" not in op["requestBody"]["content"]  # server-side apply: 415


def test_all_refs_resolve():
    reg = Registry()
    reg.apply_crd(CRD)
    for g, v in {(r.group, r.version) for r in reg.all()}:
        doc = openapi.v3_group_version(reg, g, v)
        for r in _refs(doc, set()):
            assert r.startswith("#/components/schemas/")
            assert r.split("/")[-1] in doc["components"]["schemas"], r
    doc2 = openapi.v2(reg)
    assert doc2["swagger"] == "2.0"
    for r in _refs(doc2, set()):
        assert r.startswith("#/definitions/") and r.split("/")[-1] in doc2["definitions"], r
    patch = doc2["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"]
    assert "fieldValidation" in [p.get("name") for p in patch["parameters"]]  # never shared (kubectl looks)
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "kind": "ConfigMap", "version": "v1"}
    for p in (p for item in doc2["paths"].values() for op in item.values() if isinstance(op, dict)
              for p in op.get("parameters", []) if "$ref" in p):
        assert p["$ref"].split("/")[-1] in doc2["parameters"]


# --- a small re-implementation of strategicpatch.PatchMetaFromOpenAPIV3's lookups, to check that
# --- kubectl can walk our schemas for realistic manifests without "unable to find api field".

class _Meta:
    def __init__(self, schemas, schema):
        self.schemas, self.schema = schemas, schema

    def _resolve(self, s):
        if s.get("allOf"):
            s = s["allOf"][0]
        if "$ref" in s:
            s = self.schemas[s["$ref"].split("/")[-1]]
        return s

    def field(self, key):
        props = self.schema.get("properties") or {}
        if key not in props:
            raise KeyError(f'unable to find api field "{key}"')
        return props[key]

    def struct(self, key):
        f = self.field(key)
        return _Meta(self.schemas, self._resolve(f)), f

    def slice(self, key):
        f = self.field(key)
        item = f.get("items") or f
        return _Meta(self.schemas, self._resolve(item)), f


def _walk(meta, value, path, found):
    """Visit every map/list value the way diffMaps does when original == modified == value."""
    for k, v in value.items():
        if isinstance(v, dict):
            sub, f = meta.struct(k)
            if f.get("x-kubernetes-patch-strategy"):
                found[path + k] = (f.get("x-kubernetes-patch-strategy"), f.get("x-kubernetes-patch-merge-key"))
            _walk(sub, v, path + k + ".", found)
        elif isinstance(v, list):
            sub, f = meta.slice(k)
            strategy = f.get("x-kubernetes-patch-strategy", "")
            if strategy:
                found[path + k] = (strategy, f.get("x-kubernetes-patch-merge-key"))
            if "merge" in strategy.split(",") and f.get("x-kubernetes-patch-merge-key"):
                for el in v:
                    if isinstance(el, dict):
                        _walk(sub, el, path + k + "[].", found)


POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "p", "labels": {"a": "b"}, "annotations": {"x": "y"}, "finalizers": ["f"],
                 "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u"}]},
    "spec": {
        "nodeSelector": {"disk": "ssd"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}}},
        "securityContext": {"runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}, "sysctls": []},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
        "containers": [{
            "name": "c", "image": "nginx", "args": ["-g"],
            "ports": [{"containerPort": 80, "protocol": "TCP"}],
            "env": [{"name": "A", "value": "1"},
                    {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "envFrom": [{"configMapRef": {"name": "cm"}}],
            "resources": {"limits": {"cpu": "1"}, "requests": {"memory": "1Gi"}},
            "volumeMounts": [{"name": "v", "mountPath": "/d"}],
            "livenessProbe": {"httpGet": {"path": "/", "port": 80, "httpHeaders": [{"name": "h", "value": "v"}]}},
            "readinessProbe": {"exec": {"command": ["true"]}},
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "1"]}}},
            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}, "privileged": False},
        }],
        "volumes": [{"name": "v", "configMap": {"name": "cm", "items": [{"key": "a", "path": "a"}]}},
                    {"name": "e", "emptyDir": {}},
                    {"name": "s", "secret": {"secretName": "s"}},
                    {"name": "p", "persistentVolumeClaim": {"claimName": "c"}}],
        "imagePullSecrets": [{"name": "reg"}],
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"a": "b"}}}],
        "dnsConfig": {"nameservers": ["1.1.1.1"], "options": [{"name": "ndots", "value": "2"}]},
    },
}


def _root(doc, kind):
    schemas = doc["components"]["schemas"]
    for s in schemas.values():
        if {"group": kind[0], "kind": kind[2], "version": kind[1]} in s.get("x-kubernetes-group-version-kind", []):
            return _Meta(schemas, s)
    raise AssertionError(kind)


def test_pod_schema_walk_has_upstream_patch_metadata():
    doc = openapi.v3_group_version(Registry(), "", "v1")
    found: dict = {}
    _walk(_root(doc, ("", "v1", "Pod")), POD, "", found)
    # patchStrategy/patchMergeKey tags of k8s.io/api core/v1 + meta/v1 types.go
    assert found["metadata.finalizers"] == ("merge", None)
    assert found["metadata.ownerReferences"] == ("merge", "uid")
    assert found["spec.containers"] == ("merge", "name")
    assert found["spec.initContainers"] == ("merge", "name")
    assert found["spec.volumes"] == ("merge,retainKeys", "name")
    assert found["spec.imagePullSecrets"] == ("merge", "name")
    assert found["spec.topologySpreadConstraints"] == ("merge", "topologyKey")
    assert found["spec.containers[].env"] == ("merge", "name")
    assert found["spec.containers[].ports"] == ("merge", "containerPort")
    assert found["spec.containers[].volumeMounts"] == ("merge", "mountPath")
    assert "spec.tolerations" not in found  # atomic


@pytest.mark.parametrize("kind,obj", [
    (("", "v1", "Service"), {"metadata": {"labels": {"a": "b"}}, "spec": {
        "selector": {"app": "x"}, "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10}}, "externalIPs": ["1.2.3.4"]}}),
    (("", "v1", "ConfigMap"), {"metadata": {"annotations": {"a": "b"}}, "data": {"k": "v"}}),
    (("", "v1", "Secret"), {"data": {"k": "dg=="}, "stringData": {"x": "y"}}),
    (("", "v1", "ServiceAccount"), {"secrets": [{"name": "s"}], "imagePullSecrets": [{"name": "r"}]}),
    (("", "v1", "Namespace"), {"spec": {"finalizers": ["kubernetes"]}}),
    (("", "v1", "Node"), {"spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [{"key": "k", "effect": "NoSchedule"}]},
                          "status": {"capacity": {"cpu": "4"}, "addresses": [{"type": "InternalIP", "address": "x"}],
                                     "nodeInfo": {"kubeletVersion": "v1"}}}),
    (("", "v1", "Event"), {"involvedObject": {"kind": "Pod", "name": "p"}, "source": {"component": "c"}}),
])
def test_builtin_schema_walks(kind, obj):
    doc = openapi.v3_group_version(Registry(), kind[0], kind[1])
    found: dict = {}
    _walk(_root(doc, kind), obj, "", found)
    if kind[2] == "Service":
        assert found["spec.ports"] == ("merge", "port")
    if kind[2] == "ServiceAccount":
        assert found["secrets"] == ("merge", "name")
    if kind[2] == "Node":
        assert found["status.addresses"] == ("merge", "type") and found["spec.podCIDRs"] == ("merge", None)


@pytest.mark.parametrize("group,kind,obj", [
    ("rbac.authorization.k8s.io", "Role", {"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding",
     {"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "x"},
      "subjects": [{"kind": "User", "name": "u"}]}),
    ("coordination.k8s.io", "Lease", {"spec": {"holderIdentity": "h", "leaseDurationSeconds": 10}}),
])
def test_group_schema_walks(group, kind, obj):
    doc = openapi.v3_group_version(Registry(), group, "v1")
    _walk(_root(doc, (group, "v1", kind)), {"metadata": {"labels": {}}, **obj}, "", {})


# ============================================================ Tables

@pytest.mark.parametrize("seconds,want", [
    # apimachinery pkg/util/duration/duration_test.go
    (1, "1s"), (70, "70s"), (190, "3m10s"), (70 * 60, "70m"), (47 * 3600, "47h"), (49 * 3600, "2d1h"),
    ((8 * 24 + 2) * 3600, "8d"), (367 * 24 * 3600, "367d"), ((365 * 2 * 24 + 25) * 3600, "2y1d"),
    ((365 * 8 * 24 + 2) * 3600, "8y"),
    (-2, "<invalid>"), (-1.999, "0s"), (0, "0s"), (0.999, "0s"), (119.999, "119s"), (120, "2m"), (121, "2m1s"),
    (599.999, "9m59s"), (600, "10m"), (601, "10m"), (3 * 3600 - 0.001, "179m"), (3 * 3600, "3h"),
    (3 * 3600 + 60, "3h1m"), (8 * 3600 - 0.001, "7h59m"), (8 * 3600, "8h"), (8 * 3600 + 59 * 60, "8h"),
    (48 * 3600 - 0.001, "47h"), (48 * 3600, "2d"), (49 * 3600, "2d1h"), (8 * 86400 - 0.001, "7d23h"),
    (8 * 86400, "8d"), (2 * 365 * 86400 - 0.001, "729d"), (2 * 365 * 86400, "2y"),
    (2 * 365 * 86400 + 86400, "2y1d"), (3 * 365 * 86400, "3y"),
])
def test_human_duration(seconds, want):
    assert tables.human_duration(seconds) == want


def test_parse_table_accept():
    kubectl = ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
               "application/json")
    assert tables.negotiate(kubectl) == tables.Target("Table", "meta.k8s.io/v1")
    assert tables.negotiate("application/json;as=Table;v=v1beta1;g=meta.k8s.io") == \
        tables.Target("Table", "meta.k8s.io/v1beta1")
    assert tables.negotiate("application/json") is None
    assert tables.negotiate("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io").kind == \
        "PartialObjectMetadataList"
    assert tables.negotiate("") is None


def test_pod_table_columns_and_running_row():
    pod = {"metadata": {"name": "p", "namespace": "d", "resourceVersion": "7", "creationTimestamp": ts(190),
                        "labels": {"a": "b"}},
           "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
           "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}],
                      "conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [
                          {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}},
                           "lastState": {"terminated": {"exitCode": 1, "finishedAt": ts(65)}}},
                          {"name": "b", "ready": False, "restartCount": 0,
                           "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    t = tables.to_table(res("pods"), [pod], {"resourceVersion": "9"}, now=NOW)
    assert list(t) == ["kind", "apiVersion", "metadata", "columnDefinitions", "rows"]
    assert t["kind"] == "Table" and t["apiVersion"] == "meta.k8s.io/v1" and t["metadata"] == {"resourceVersion": "9"}
    cols = t["columnDefinitions"]
    assert [c["name"] for c in cols] == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node",
                                         "Nominated Node", "Readiness Gates"]
    assert [c["priority"] for c in cols] == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert list(cols[0]) == ["name", "type", "format", "description", "priority"]
    assert cols[0]["format"] == "name" and cols[0]["type"] == "string"
    row = t["rows"][0]
    assert row["cells"] == ["p", "1/2", "CrashLoopBackOff", "2 (65s ago)", "3m10s", "10.0.0.5", "n1", "<none>",
                            "<none>"]
    assert row["object"] == {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": pod["metadata"]}


@pytest.mark.parametrize("status,spec_extra,deleting,want,conds", [
    ({"phase": "Pending"}, {}, False, "Pending", None),
    ({"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
     {}, False, "Completed", "Succeeded"),
    ({"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]}, {}, False,
     "ExitCode:2", "Failed"),
    ({"phase": "Running"}, {}, True, "Terminating", None),
    ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
     {}, False, "SchedulingGated", None),
    ({"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}]},
     {"initContainers": [{"name": "i"}]}, False, "Init:0/1", None),
    ({"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"terminated": {"exitCode": 1}}}]},
     {"initContainers": [{"name": "i"}]}, False, "Init:ExitCode:1", None),
])
def test_pod_status_column(status, spec_extra, deleting, want, conds):
    meta = {"name": "p", "creationTimestamp": ts(5)}
    if deleting:
        meta["deletionTimestamp"] = ts(1)
    pod = {"metadata": meta, "spec": {"containers": [{"name": "c"}], **spec_extra}, "status": status}
    row = tables.to_table(res("pods"), [pod], {}, now=NOW)["rows"][0]
    assert row["cells"][2] == want
    if conds:
        assert row["conditions"][0]["type"] == "Completed" and row["conditions"][0]["reason"] == conds
        assert list(row) == ["cells", "conditions", "object"]
    else:
        assert "conditions" not in row


def test_simple_kinds():
    cm = {"metadata": {"name": "c", "creationTimestamp": ts(3 * 86400)}, "data": {"a": "1"}, "binaryData": {"b": "AA=="}}
    assert tables.to_table(res("configmaps"), [cm], {}, now=NOW)["rows"][0]["cells"] == ["c", 2, "3d"]
    sec = {"metadata": {"name": "s", "creationTimestamp": ts(5 * 3600)}, "type": "Opaque", "data": {"a": "AA=="}}
    t = tables.to_table(res("secrets"), [sec], {}, now=NOW)
    assert t["rows"][0]["cells"] == ["s", "Opaque", 1, "5h"]
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Type", "Data", "Age"]
    ns = {"metadata": {"name": "default", "creationTimestamp": ts(5)}, "status": {"phase": "Active"}}
    assert tables.to_table(res("namespaces"), [ns], {}, now=NOW)["rows"][0]["cells"] == ["default", "Active", "5s"]
    sa = {"metadata": {"name": "default", "creationTimestamp": ts(5)}}
    t = tables.to_table(res("serviceaccounts"), [sa], {}, now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "Age"] and t["rows"][0]["cells"] == ["default", "5s"]
    lease = {"metadata": {"name": "l", "creationTimestamp": ts(5)}, "spec": {"holderIdentity": "me"}}
    assert tables.to_table(res("leases", "coordination.k8s.io"), [lease], {}, now=NOW)["rows"][0]["cells"] == \
        ["l", "me", "5s"]
    missing = {"metadata": {"name": "x"}}
    assert tables.to_table(res("serviceaccounts"), [missing], {}, now=NOW)["rows"][0]["cells"] == ["x", "<unknown>"]


def test_default_convertor_kinds():
    # rest/table.go: Name + "Created At" (type date, RFC3339 UTC cell)
    role = {"metadata": {"name": "r", "creationTimestamp": "2025-05-01T10:00:00Z"}}
    for plural, group in [("roles", "rbac.authorization.k8s.io"), ("clusterroles", "rbac.authorization.k8s.io")]:
        t = tables.to_table(res(plural, group), [role], {}, now=NOW)
        assert [(c["name"], c["type"]) for c in t["columnDefinitions"]] == [("Name", "string"), ("Created At", "date")]
        assert t["rows"][0]["cells"] == ["r", "2025-05-01T10:00:00Z"]


def test_crd_columns():
    # apiextensions-apiserver customresourcedefinition/tableconvertor (1.37)
    crd = {"metadata": {"name": "crontabs.stable.example.com", "creationTimestamp": "2025-05-01T10:00:00Z"},
           "spec": {**CRD["spec"], "versions": [{"name": "v2", "served": True, "storage": True},
                                                 {"name": "v1", "served": True}, {"name": "v0", "served": False}]},
           "status": {"conditions": [{"type": "Established", "status": "True"}]}}
    t = tables.to_table(res("customresourcedefinitions", "apiextensions.k8s.io"), [crd], {}, now=NOW)
    assert [(c["name"], c["type"], c["priority"]) for c in t["columnDefinitions"]] == [
        ("Name", "string", 0), ("Scope", "string", 0), ("Versions", "string", 0), ("Created At", "date", 0),
        ("Group", "string", 1), ("Kind", "string", 1), ("ShortNames", "string", 1), ("Established", "boolean", 1)]
    assert t["rows"][0]["cells"] == ["crontabs.stable.example.com", "Namespaced", "v1,v2(storage)",
                                     "2025-05-01T10:00:00Z", "stable.example.com", "CronTab", "ct", True]


def test_negotiate_conversions():
    pom = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
    assert tables.negotiate(pom) == tables.Target("PartialObjectMetadata", "meta.k8s.io/v1")
    # the metadata client asks for protobuf first: that clause wins (answered in JSON here)
    assert tables.negotiate("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
                            "application/json") == tables.Target("PartialObjectMetadataList", "meta.k8s.io/v1")
    # Tables only in JSON or YAML; an unknown conversion skips the clause
    assert tables.negotiate("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json") is None
    assert tables.negotiate("application/json;as=Table;v=v2;g=meta.k8s.io,application/json;as=Table;v=v1beta1;"
                            "g=meta.k8s.io") == tables.Target("Table", "meta.k8s.io/v1beta1")
    assert tables.negotiate("application/json;q=0.5,application/json;as=Table;v=v1;g=meta.k8s.io") == \
        tables.Target("Table", "meta.k8s.io/v1")  # by quality
    assert tables.include_object_error("Bogus") == ("Unable to convert to Table as requested: includeObject: "
                                                    "Invalid value: \"Bogus\": must be 'Metadata', 'Object', "
                                                    "'None', or empty")
    assert tables.include_object_error("") is None


def test_node_service_event_binding():
    node = {"metadata": {"name": "n", "creationTimestamp": ts(5),
                         "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "worker"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "False"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.36.0", "architecture": "amd64", "kernelVersion": "6.1"}}}
    assert tables.to_table(res("nodes"), [node], {}, now=NOW)["rows"][0]["cells"] == [
        "n", "NotReady,SchedulingDisabled", "control-plane,worker", "5s", "v1.36.0", "10.0.0.1", "<none>",
        "<unknown>", "6.1 (amd64)", "<unknown>"]
    svc = {"metadata": {"name": "s", "creationTimestamp": ts(5)},
           "spec": {"type": "NodePort", "clusterIPs": ["10.96.0.10"],
                    "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}],
                    "selector": {"b": "2", "a": "1"}}}
    assert tables.to_table(res("services"), [svc], {}, now=NOW)["rows"][0]["cells"] == [
        "s", "NodePort", "10.96.0.10", "<none>", "80:30080/TCP,53/UDP", "5s", "a=1,b=2"]
    lb = {"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer"}, "status": {}}
    assert tables.to_table(res("services"), [lb], {}, now=NOW)["rows"][0]["cells"][2:5] == ["<none>", "<pending>", "<none>"]
    ev = {"metadata": {"name": "e1", "creationTimestamp": ts(30)}, "type": "Normal", "reason": "Started",
          "message": " hi \n", "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{c}"},
          "source": {"component": "kubelet", "host": "n1"}, "firstTimestamp": ts(30), "lastTimestamp": ts(10),
          "count": 3}
    t = tables.to_table(res("events"), [ev], {}, now=NOW)
    assert [c["name"] for c in t["columnDefinitions"]][:4] == ["Last Seen", "Type", "Reason", "Object"]
    assert t["rows"][0]["cells"] == ["10s", "Normal", "Started", "pod/p", "spec.containers{c}", "kubelet, n1", "hi",
                                     "30s", 3, "e1"]
    rb = {"metadata": {"name": "rb", "creationTimestamp": ts(5)}, "roleRef": {"kind": "Role", "name": "r"},
          "subjects": [{"kind": "User", "name": "u1"}, {"kind": "User", "name": "u2"}, {"kind": "Group", "name": "g"},
                       {"kind": "ServiceAccount", "namespace": "ns", "name": "sa"}]}
    assert tables.to_table(res("rolebindings", "rbac.authorization.k8s.io"), [rb], {}, now=NOW)["rows"][0]["cells"] \
        == ["rb", "Role/r", "5s", "u1, u2", "g", "ns/sa"]


def test_custom_resource_columns():
    reg = Registry()
    (cr_res,) = reg.apply_crd(CRD)
    obj = {"apiVersion": "stable.example.com/v1", "kind": "CronTab",
           "metadata": {"name": "ct", "creationTimestamp": ts(65)}, "spec": {"cronSpec": "* * * * */5", "replicas": 3}}
    t = tables.to_table(cr_res, [obj], {"resourceVersion": "5", "continue": "abc"}, now=NOW)
    assert [(c["name"], c["type"], c["priority"]) for c in t["columnDefinitions"]] == [
        ("Name", "string", 0), ("Spec", "string", 0), ("Replicas", "integer", 0), ("Ready", "boolean", 1),
        ("Age", "date", 0)]
    assert t["columnDefinitions"][1]["description"] == "Custom resource definition column (in JSONPath format): .spec.cronSpec"
    assert t["rows"][0]["cells"] == ["ct", "* * * * */5", 3, None, "65s"]
    assert t["metadata"] == {"resourceVersion": "5", "continue": "abc"}
    # no additionalPrinterColumns -> Age (helpers.go serveDefaultColumnsIfEmpty)
    crd2 = {**CRD, "spec": {**CRD["spec"], "versions": [{**CRD["spec"]["versions"][0], "additionalPrinterColumns": []}]}}
    (plain,) = Registry().apply_crd(crd2)
    t2 = tables.to_table(plain, [obj], {}, now=NOW)
    assert [c["name"] for c in t2["columnDefinitions"]] == ["Name", "Age"] and t2["rows"][0]["cells"] == ["ct", "65s"]


def test_jsonpath_subset():
    o = {"spec": {"a": [{"b": 1}], "m": {"x/y": "z"}}}
    assert tables.jsonpath_get(o, ".spec.a[0].b") == (True, 1)
    assert tables.jsonpath_get(o, "{.spec.m['x/y']}") == (True, "z")
    assert tables.jsonpath_get(o, ".spec.nope") == (False, None)


def test_include_object_modes():
    cm = {"metadata": {"name": "c", "resourceVersion": "3"}, "data": {}}
    obj = tables.to_table(res("configmaps"), [cm], {}, include_object="Object", now=NOW)["rows"][0]["object"]
    assert obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1" and list(obj)[:2] == ["kind", "apiVersion"]
    assert tables.to_table(res("configmaps"), [cm], {}, include_object="None", now=NOW)["rows"][0]["object"] is None
    meta = tables.to_table(res("configmaps"), [cm], {}, include_object="", now=NOW)["rows"][0]["object"]
    assert meta["kind"] == "PartialObjectMetadata"
    b1 = tables.to_table(res("configmaps"), [cm], {}, api_version="meta.k8s.io/v1beta1", now=NOW)
    assert b1["apiVersion"] == "meta.k8s.io/v1beta1" and b1["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
    with pytest.raises(ValueError):
        tables.to_table(res("configmaps"), [cm], {}, include_object="Bogus")


def test_watch_tables_headers_only_on_first_event():
    # handlers/response.go watchEmbeddedEncoder: NoHeaders after the first encoded event.
    cm = {"metadata": {"name": "c", "resourceVersion": "3", "creationTimestamp": ts(1)}}
    first = tables.watch_table(res("configmaps"), cm, first=True, now=NOW)
    later = tables.watch_table(res("configmaps"), cm, first=False, now=NOW)
    assert len(first["columnDefinitions"]) == 3 and len(first["rows"]) == 1
    assert later["columnDefinitions"] is None and later["metadata"] == {"resourceVersion": "3"}
    assert later["rows"][0]["cells"] == ["c", 0, "1s"]
