"""One etcd, two apiservers: the real kube-apiserver v1.37.2 storing protobuf (its default) and ours over
the same prefix. Objects written through either are served byte-identically by both, GETs and Exact
lists at the same resourceVersion (storage/codec.py decodes stored protobuf)."""
from __future__ import annotations

import time

import pytest

from tests.helpers import Api, crd, current_etcd, start_apiserver

NS = "shared"
OBJECTS = [  # (collection path, body): built-in kinds with quantities, base64 data, nested lists
    ("/api/v1/namespaces/shared/configmaps", {"metadata": {"name": "c", "labels": {"x": "y"}}, "data": {"k": "v"}}),
    ("/api/v1/namespaces/shared/secrets", {"metadata": {"name": "s"}, "stringData": {"k": "v"}}),
    ("/api/v1/namespaces/shared/pods", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}}]}}),
    ("/apis/rbac.authorization.k8s.io/v1/namespaces/shared/roles", {"metadata": {"name": "r"}, "rules": [
        {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]}),   # PolicyRule field order
    ("/apis/coordination.k8s.io/v1/namespaces/shared/leases", {"metadata": {"name": "l"}, "spec": {
        "holderIdentity": "h", "leaseDurationSeconds": 40}}),
]


@pytest.fixture(scope="module")
def two_servers():
    """kube-apiserver (protobuf storage) and ours (watch cache on) over one etcd of their own, prefix /registry."""
    from tests.helpers.kube import KubeApiserver
    with current_etcd() as etcd, KubeApiserver(etcd.endpoint, prefix="/registry", protobuf=True) as kube:
        ours = start_apiserver(etcd.endpoint, "/registry", "--cache-compression-eager")  # compressed entries
        try:
            yield Api(kube.url, cert=kube.client_cert, verify=kube.ca), Api(ours.base)
        finally:
            ours.stop()


@pytest.mark.parametrize("writer", ["kube", "ours"])
def test_gets_and_lists_are_byte_identical(two_servers, writer):
    kube, ours = two_servers
    w = kube if writer == "kube" else ours
    r = w.post("/api/v1/namespaces", {"metadata": {"name": f"{NS}-{writer}"}})
    assert r.status_code == 201, r.text
    for collection, body in OBJECTS:
        collection = collection.replace(f"/namespaces/{NS}/", f"/namespaces/{NS}-{writer}/")
        r = w.post(collection, body)
        assert r.status_code == 201, r.text
        path = f"{collection}/{body['metadata']['name']}"
        rv = r.json()["metadata"]["resourceVersion"]
        # A GET at the write's RV: both wait for (or read past) it.
        got = [a.get(path, params={"resourceVersion": rv}) for a in (kube, ours)]
        assert [g.status_code for g in got] == [200, 200], [g.text for g in got]
        lists = [a.get(collection, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"}) for a in (kube, ours)]
        assert [x.status_code for x in lists] == [200, 200], [x.text for x in lists]
        assert got[0].content == got[1].content, (path, got[0].text, got[1].text)
        assert lists[0].content == lists[1].content, (collection, lists[0].text, lists[1].text)


def test_nested_key_order_is_kept_as_sent(two_servers):
    """Deliberate difference (docs/differences.md, typed objects' key order): below the top level and
    metadata we keep the order the client sent; kube-apiserver re-encodes Go struct order. Same content."""
    kube, ours = two_servers
    ours.post("/api/v1/namespaces", {"metadata": {"name": "order"}})
    path = "/apis/rbac.authorization.k8s.io/v1/namespaces/order/roles"
    r = ours.post(path, {"metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "verbs": ["get"], "resources": ["pods"]}]})
    assert r.status_code == 201, r.text
    rv = r.json()["metadata"]["resourceVersion"]
    k, o = (a.get(f"{path}/r", params={"resourceVersion": rv}) for a in (kube, ours))
    assert k.json() == o.json() and k.content != o.content
    assert list(k.json()["rules"][0]) == ["verbs", "apiGroups", "resources"]
    assert list(o.json()["rules"][0]) == ["apiGroups", "verbs", "resources"]


@pytest.mark.parametrize("writer", ["kube", "ours"])
def test_custom_resource_gets_and_lists_are_byte_identical(two_servers, writer):
    """Custom resources too (S6.4): an UnstructuredList's metadata always carries `continue`, "" on the last
    page (kube-apiserver's stores set it through UnstructuredList.SetContinue, which does not omit it)."""
    kube, ours = two_servers
    w = kube if writer == "kube" else ours
    group = f"shared-{writer}.example.com"
    r = w.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd(group, "gadgets", "Gadget"))
    assert r.status_code == 201, r.text
    ns = f"{NS}-cr-{writer}"
    assert w.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
    collection = f"/apis/{group}/v1/namespaces/{ns}/gadgets"
    deadline = time.monotonic() + 30
    while any(a.get(collection).status_code != 200 for a in (kube, ours)):  # both serve the new CRD
        assert time.monotonic() < deadline, "the CRD was not served by both servers in 30 s"
        time.sleep(0.1)
    for name in ("g1", "g2"):
        r = w.post(collection, {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": name},
                                "spec": {"zeta": 1, "alpha": {"b": [2, 1], "a": "x"}}})
        assert r.status_code == 201, r.text
    rv = r.json()["metadata"]["resourceVersion"]
    for params in ({"resourceVersion": rv, "resourceVersionMatch": "Exact"},             # unpaged: continue ""
                   {"resourceVersion": rv, "resourceVersionMatch": "Exact", "limit": "1"},  # a next page
                   {"resourceVersion": rv}):                                              # NotOlderThan
        got = [a.get(collection, params=params) for a in (kube, ours)]
        assert [g.status_code for g in got] == [200, 200], [g.text for g in got]
        if params.get("resourceVersionMatch") != "Exact":   # each server's own cache: its RV may be newer
            for g in got:
                assert g.json()["metadata"]["continue"] == "" and len(g.json()["items"]) == 2
            continue
        assert got[0].content == got[1].content, (params, got[0].text, got[1].text)
    assert b'"metadata":{"continue":"","resourceVersion":"' in got[0].content
    g = [a.get(f"{collection}/g2", params={"resourceVersion": rv}) for a in (kube, ours)]
    assert g[0].content == g[1].content, (g[0].text, g[1].text)
