"""One etcd, two apiservers: the real kube-apiserver v1.37.2 storing protobuf (its default) and ours over
the same prefix. Objects written through either are served byte-identically by both, GETs and Exact
lists at the same resourceVersion (storage/codec.py decodes stored protobuf)."""
from __future__ import annotations

import pytest

from tests.helpers import Api, current_etcd, start_apiserver

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
        ours = start_apiserver(etcd.endpoint, "/registry")
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
