"""`--read-only`: an apiserver pointed at an etcd it must not change (a restored production snapshot)."""
from __future__ import annotations

import os

from tests.helpers import Api, current_etcd, etcd_revision, start_apiserver


def test_read_only_serves_reads_and_refuses_every_write():
    # An etcd of its own: the revision check must not see other servers' writes (leases, compactions).
    with current_etcd() as etcd:
        check_read_only(etcd, f"/registry-ro{os.getpid()}")


def check_read_only(etcd, prefix: str) -> None:
    writer = start_apiserver(etcd.endpoint, prefix, "--etcd-compaction-interval=0")
    try:
        w = Api(writer.base)
        assert w.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "kept"}}).status_code == 201
    finally:
        writer.stop()
    before = etcd_revision(etcd.endpoint)
    srv = start_apiserver(etcd.endpoint, prefix, "--read-only", "--etcd-compaction-interval=1s")
    try:
        api = Api(srv.base)
        base = "/api/v1/namespaces/default/configmaps"
        assert [i["metadata"]["name"] for i in api.get(base).json()["items"]] == ["kept"]
        assert api.get(f"{base}/kept").status_code == 200
        refused = [
            (api.post(base, {"metadata": {"name": "new"}}), "create"),
            (api.put(f"{base}/kept", {"metadata": {"name": "kept"}, "data": {"a": "1"}}), "update"),
            (api.patch(f"{base}/kept", {"data": {"a": "1"}}, "application/merge-patch+json"), "patch"),
            (api.delete(f"{base}/kept"), "delete"),
            (api.delete(base), "deletecollection"),
            (api.post("/api/v1/namespaces", {"metadata": {"name": "ro"}}), "create"),
        ]
        for r, verb in refused:
            assert r.status_code == 405, r.text
            st = r.json()
            assert st["reason"] == "MethodNotAllowed" and st["message"].startswith(f"{verb} is not supported")
        assert api.get(f"{base}/kept").json().get("data") is None
        # Nothing was written, the 1 s compactor included (it would record compact_rev_key).
        assert etcd_revision(etcd.endpoint) == before
    finally:
        srv.stop()
