"""Custom resources: served and discoverable as soon as the CRD is created (no restart),
namespaced and cluster-scoped, status subresource, unstructured encoding (S6.4)."""
from __future__ import annotations

import time

import pytest

from tests.helpers import crd, start_apiserver
from tests.test_http_core import read_events


@pytest.fixture
def api(differential_api):
    """Against our apiserver and the real kube-apiserver (conftest.differential_mode)."""
    return differential_api


def wait_status(api, path: str, code: int, timeout: float = 30.0) -> None:
    """Ours serves (or stops serving) a CRD's resources at once; kube-apiserver a moment after the CRD
    is Established (or its finalizer has run)."""
    deadline = time.monotonic() + timeout
    while (got := api.get(path).status_code) != code:
        assert time.monotonic() < deadline, f"{path}: {got}, not {code}, {timeout} s after the CRD change"
        time.sleep(0.1)


@pytest.fixture
def widgets(api, request):
    group = f"g{abs(hash(request.node.name)) % 10**8}.example.com"
    r = api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(group, "widgets", "Widget"))
    assert r.status_code == 201, r.text
    wait_status(api, f"/apis/{group}/v1", 200)
    yield group
    api.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{group}")


def test_crd_is_established_and_discoverable_immediately(api, widgets):
    c = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.{widgets}").json()
    conds = {x["type"]: x["status"] for x in c["status"]["conditions"]}
    assert conds["Established"] == "True" and conds["NamesAccepted"] == "True"
    rl = api.get(f"/apis/{widgets}/v1").json()
    names = {r["name"]: r for r in rl["resources"]}
    assert names["widgets"]["kind"] == "Widget" and names["widgets"]["namespaced"] is True
    assert "widgets/status" in names
    groups = [g["name"] for g in api.get("/apis").json()["groups"]]
    assert widgets in groups


def test_custom_resource_crud_list_watch(api, namespace, widgets):
    base = f"/apis/{widgets}/v1/namespaces/{namespace}/widgets"
    obj = {"apiVersion": f"{widgets}/v1", "kind": "Widget", "metadata": {"name": "w1"},
           "spec": {"zeta": 1, "alpha": {"b": 2, "a": 1}}}
    r = api.post(base, obj)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["metadata"]["generation"] == 1
    # Unstructured objects are encoded with sorted keys at every level (S6.4).
    assert r.content.startswith(b'{"apiVersion":')
    assert list(created["spec"]) == ["alpha", "zeta"]
    lst = api.get(base)
    assert lst.status_code == 200
    doc = lst.json()
    assert list(doc) == ["apiVersion", "items", "kind", "metadata"] and doc["kind"] == "WidgetList"
    assert doc["items"][0]["kind"] == "Widget"  # CR items keep kind/apiVersion (S8.1)
    rv = created["metadata"]["resourceVersion"]
    w = api.get(base, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "10"}, stream=True)
    upd = dict(created, spec={"zeta": 2})
    r = api.put(f"{base}/w1", upd)
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["generation"] == 2
    evs = read_events(w, 1)
    assert evs[0]["type"] == "MODIFIED" and evs[0]["object"]["spec"] == {"zeta": 2}
    # Status subresource: status through the main resource is dropped, through /status kept.
    cur = r.json()
    r = api.put(f"{base}/w1/status", dict(cur, status={"ready": True}))
    assert r.status_code == 200, r.text
    assert r.json()["status"] == {"ready": True} and r.json()["metadata"]["generation"] == 2
    r = api.patch(f"{base}/w1", {"spec": {"zeta": 3}}, "application/merge-patch+json")
    assert r.status_code == 200 and r.json()["status"] == {"ready": True}
    r = api.patch(f"{base}/w1", {"spec": {"zeta": 3}}, "application/strategic-merge-patch+json")
    assert r.status_code == 415  # not for custom resources
    assert api.delete(f"{base}/w1").status_code == 200


def test_cluster_scoped_custom_resource(api, request):
    group = f"c{abs(hash(request.node.name)) % 10**8}.example.com"
    assert api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    crd(group, "gadgets", "Gadget", scope="Cluster", status=False)).status_code == 201
    base = f"/apis/{group}/v1/gadgets"
    wait_status(api, f"/apis/{group}/v1", 200)
    r = api.post(base, {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": "g"}})
    assert r.status_code == 201, r.text
    assert "namespace" not in r.json()["metadata"]
    assert [i["metadata"]["name"] for i in api.get(base).json()["items"]] == ["g"]
    # Deleting the CRD removes the resource and its objects.
    assert api.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gadgets.{group}").status_code == 200
    wait_status(api, base, 404)


def test_crd_seen_by_a_second_apiserver(api, widgets, namespace):
    """A CRD created through one process is served by another sharing the etcd (CRD sync watch). With
    kube-apiserver as the first process, ours reads what kube stored (JSON) under kube's prefix."""
    import requests

    # Same etcd prefix as the session apiserver (tests/conftest.py), so it sees the same CRD.
    srv = start_apiserver(api.etcd.endpoint, api.etcd_prefix)
    base = srv.base
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = requests.get(f"{base}/apis/{widgets}/v1/namespaces/{namespace}/widgets")
            if r.status_code == 200:
                break
            time.sleep(0.1)
        assert r.status_code == 200, r.text
    finally:
        srv.stop()
