"""Every built-in kind kube-apiserver v1.37.2 stores, served here from machine-readable data (issue 13 §1).

* machinery/builtin_resources.json equals what tools/discovery_upstream.py extracts from the reference now
  (its aggregated discovery, the etcd keys its objects get, whether its DELETE answers with the object): a
  stale copy fails.
* The registry (machinery.resources) holds every stored resource of it but the documented gaps
  (docs/differences.md: events.k8s.io, autoscaling/v1), with upstream's names, scope, verbs and keys.
* Our server, given one object of every kind (the tool's samples), writes it under upstream's etcd key,
  serves it back from the watch cache and from etcd, lists and watches it, and answers its DELETE with the
  object exactly where kube-apiserver does.
"""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from machinery.resources import (BUILTINS, CRD, GROUP_ORDER, GROUPS, REVIEWS, UNSERVED_GROUPS, UPSTREAM,
                                 Registry)
from tests.helpers.client import Api
from tests.helpers.etcd import ROOT, load_tool

tool = load_tool("discovery_upstream")

with open(os.path.join(ROOT, "machinery", "builtin_resources.json"), encoding="utf-8") as f:
    DATA = json.load(f)
STORED = [e for e in DATA["resources"] if "storageVersionHash" in e]
LOW = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
HIGH = "shardRange(object.metadata.uid, '0x8000000000000000', '0xffffffffffffffff')"


def _kube(k) -> Api:
    return Api(k.url, cert=k.client_cert, verify=k.ca)


def _base(r) -> str:
    return f"/apis/{r.group}/{r.version}" if r.group else "/api/v1"


def test_committed_file_is_current():
    """Regenerated from a live reference kube-apiserver (about 10 s): a stale file fails."""
    with load_tool("generated").reference(tool.PREFIX) as (ref, etcd_endpoint):
        fresh = tool.render(tool.extract(ref, etcd_endpoint))
    with open(tool.OUT, encoding="utf-8") as f:
        assert f.read() == fresh, "machinery/builtin_resources.json is stale: run python tools/discovery_upstream.py"


def test_registry_holds_every_stored_kind_but_the_documented_gaps():
    served = {(r.group, r.version, r.plural) for r in BUILTINS}
    upstream = {(e["group"], e["version"], e["plural"]) for e in STORED}
    gaps = {gvr for gvr in upstream if gvr[0] in UNSERVED_GROUPS} | {("autoscaling", "v1", "horizontalpodautoscalers")}
    assert served == upstream - gaps
    assert len(upstream) == 64 and len(served) == 62  # 63 resources (HPAs in two versions), events.k8s.io left out
    assert len({r.group for r in BUILTINS}) == 19 and set(GROUP_ORDER) >= {r.group for r in BUILTINS}
    # not stored: componentstatuses, bindings (a create), the reviews (machinery.resources.REVIEWS)
    not_stored = {(e["group"], e["plural"]) for e in DATA["resources"] if "storageVersionHash" not in e}
    assert {("", "componentstatuses"), ("", "bindings"), ("authentication.k8s.io", "tokenreviews")} <= not_stored
    assert {(r.group, r.plural) for r in REVIEWS} <= not_stored and all(not r.stored for r in REVIEWS)


@pytest.mark.parametrize("plural,group,key", [
    ("nodes", "", "minions"), ("services", "", "services/specs"), ("endpoints", "", "services/endpoints"),
    ("replicationcontrollers", "", "controllers"), ("ingresses", "networking.k8s.io", "ingress"),
    ("customresourcedefinitions", "apiextensions.k8s.io", "apiextensions.k8s.io/customresourcedefinitions"),
    ("apiservices", "apiregistration.k8s.io", "apiregistration.k8s.io/apiservices"),
    ("horizontalpodautoscalers", "autoscaling", "horizontalpodautoscalers"), ("deployments", "apps", "deployments"),
])
def test_key_layout_exceptions(plural, group, key):
    (r,) = [r for r in BUILTINS if r.plural == plural and r.group == group]
    assert r.key_resource == key
    assert r.key("/registry", "ns", "x") == (f"/registry/{key}/ns/x" if r.namespaced else f"/registry/{key}/x")


def test_resources_carry_upstream_discovery():
    by = {(r.group, r.plural): r for r in BUILTINS}
    d = by[("apps", "deployments")]
    assert (d.kind, d.singular, d.namespaced, d.short_names, d.categories) == \
           ("Deployment", "deployment", True, ["deploy"], ["all"])
    assert [s.name for s in d.subresources] == ["scale", "status"] and d.status_subresource
    assert (d.subresource("scale").group, d.subresource("scale").kind) == ("autoscaling", "Scale")
    pods = by[("", "pods")]
    assert {"binding", "eviction", "status", "log", "exec"} <= {s.name for s in pods.subresources}
    assert by[("", "namespaces")].verbs == ["create", "delete", "get", "list", "patch", "update", "watch"]
    assert CRD.storage_hash and all(r.storage_hash for r in BUILTINS)
    # DELETE answers with the object where upstream's registry says so (observed on the reference)
    assert {(r.group, r.plural) for r in BUILTINS if r.returns_deleted_object} >= \
           {("", "pods"), ("", "services"), ("", "namespaces"), ("", "serviceaccounts"),
            ("apiextensions.k8s.io", "customresourcedefinitions"), ("storage.k8s.io", "storageclasses")}
    assert not by[("", "configmaps")].returns_deleted_object and not by[("batch", "jobs")].returns_deleted_object
    assert GROUPS["versions"]["autoscaling"] == ["v2", "v1"]
    assert UPSTREAM and Registry().lookup("apps", "v1", "statefulsets") is not None


def test_every_kind_through_our_server(api):
    """One object of every kind: the etcd key and the DELETE answer as upstream's (the reference's, recorded in
    the data file), and in between get, sharded lists and a watch see it (cache or etcd, as the server runs)."""
    entries = [e for e in STORED if (e["group"], e["version"], e["plural"])
               in {(r.group, r.version, r.plural) for r in BUILTINS}]
    # a watch on every kind from now on: each must see its ADDED event
    seen: dict[str, set] = {}
    rv = {}
    for r in BUILTINS:
        lst = api.get(f"{_base(r)}/{r.plural}", params={"limit": 1})
        assert lst.status_code == 200, (r.plural, lst.text)
        assert lst.json()["kind"] == r.list_kind
        rv[(r.group, r.plural)] = lst.json()["metadata"]["resourceVersion"]
    stop = threading.Event()

    def watch(r):
        resp = api.get(f"{_base(r)}/{r.plural}", params={"watch": "1", "resourceVersion": rv[(r.group, r.plural)],
                                                         "timeoutSeconds": "30"}, stream=True, timeout=40)
        for line in resp.iter_lines():
            ev = json.loads(line)
            seen.setdefault(f"{r.group}/{r.plural}", set()).add(ev["type"])
            if stop.is_set() or ev["type"] == "DELETED":
                break
        resp.close()
    threads = [threading.Thread(target=watch, args=(r,), daemon=True) for r in BUILTINS]
    for t in threads:
        t.start()
    time.sleep(1)
    prefix = api.etcd_prefix if hasattr(api, "etcd_prefix") else f"/registry-http{os.getpid()}"
    def inspect(paths):
        """Each object: a GET answers it, and exactly one of two complementary shardSelectors lists it."""
        for gr, path in paths.items():
            r = api.get(path)
            assert r.status_code == 200 and r.json()["metadata"]["name"] == path.rsplit("/", 1)[1], (gr, r.text)
            coll = path.rsplit("/", 1)[0]
            found = []
            for sel in (LOW, HIGH):
                lst = api.get(coll, params={"shardSelector": sel})
                assert lst.status_code == 200, (gr, lst.text)
                found += [i["metadata"]["name"] for i in lst.json()["items"] if i["metadata"]["name"] == path.rsplit("/", 1)[1]]
            assert len(found) == 1, (gr, found)
    keys, deleted = tool.probe(api, api.etcd.endpoint, prefix, entries, inspect=inspect)
    for e in entries:
        gr = (e["group"], e["plural"])
        assert keys[gr] == e["key"], gr
        assert deleted[gr] == e["returnsDeletedObject"], gr
    deadline = time.monotonic() + 30
    want = {f"{r.group}/{r.plural}" for r in BUILTINS}
    while time.monotonic() < deadline and not all({"ADDED", "DELETED"} <= seen.get(k, set()) for k in want):
        time.sleep(0.2)
    stop.set()
    missing = {k for k in want if not {"ADDED", "DELETED"} <= seen.get(k, set())}
    assert not missing, missing


def test_openapi_extract_and_merge_tables_are_current(kube_apiserver):
    """apiserver/openapi_upstream.json equals a fresh extract from the reference, and
    machinery/strategic_merge.json the merge tables derived from it (tools/openapi_upstream.py)."""
    oa = load_tool("openapi_upstream")
    data = oa.extract(load_tool("generated").json_getter(_kube(kube_apiserver)))
    with open(oa.OUT, encoding="utf-8") as f:
        assert f.read() == oa.render(data), "apiserver/openapi_upstream.json is stale: run python tools/openapi_upstream.py"
    with open(oa.SMP_OUT, encoding="utf-8") as f:
        assert f.read() == oa.render(oa.strategic_merge_tables(data)), "machinery/strategic_merge.json is stale"


def test_strategic_merge_patch_of_a_new_kind(differential_api, request):
    """A Deployment's containers merge by name and their env by name, as on kube-apiserver (the merge keys
    come from upstream's OpenAPI)."""
    api = differential_api
    ns = f"smp-{abs(hash(request.node.nodeid)) % 10**6}"
    assert api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns}}).status_code == 201
    labels = {"app": "web"}
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
           "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
               "containers": [{"name": "a", "image": "nginx", "env": [{"name": "X", "value": "1"}]},
                              {"name": "b", "image": "busybox"}]}}}}
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    assert api.post(base, dep).status_code == 201, api.post(base, dep).text
    patch = {"spec": {"template": {"spec": {"containers": [
        {"name": "a", "env": [{"name": "Y", "value": "2"}]}, {"name": "c", "image": "redis"}]}}}}
    r = api.patch(f"{base}/web", patch, "application/strategic-merge-patch+json")
    assert r.status_code == 200, r.text
    got = [(c["name"], c["image"], c.get("env")) for c in r.json()["spec"]["template"]["spec"]["containers"]]
    assert got == [("a", "nginx", [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]),
                   ("c", "redis", None), ("b", "busybox", None)]
    api.delete(f"/api/v1/namespaces/{ns}")


@pytest.mark.parametrize("path,body", [
    ("/apis/apps/v1/namespaces/default/deployments",
     {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": "three"}}),
    ("/apis/batch/v1/namespaces/default/jobs",
     {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
      "spec": {"template": {"spec": {"containers": {"name": "c"}}}}}),
    ("/apis/storage.k8s.io/v1/storageclasses",
     {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "s"}, "provisioner": 7}),
])
def test_typed_decoding_of_new_kinds_equals_kube(api, kube_apiserver, path, body):
    """A field of the wrong JSON type in a new kind's body: upstream's typed decoder error (machinery.typed, from
    the protobuf layouts of every kind), the same Status as kube-apiserver's."""
    mine, theirs = api.post(path, body), _kube(kube_apiserver).post(path, body)
    assert theirs.status_code == 400, theirs.text
    assert (mine.status_code, mine.json()) == (theirs.status_code, theirs.json())
