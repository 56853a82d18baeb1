"""etcd compaction as upstream (S2.16.2): the apiserver compacts at the revision seen one interval
earlier, records it in compact_rev_key, and the caches drop snapshots etcd can no longer back."""
from __future__ import annotations

import time

from tests.helpers import Api, current_etcd, start_apiserver


def test_compactor_compacts_and_cache_drops_old_snapshots():
    with current_etcd() as etcd:   # its own etcd: compaction is cluster-wide
        srv = start_apiserver(etcd.endpoint, "/registry", "--etcd-compaction-interval", "1s")
        try:
            api = Api(srv.base)
            v1 = api.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "a"}}).json()
            rv1 = v1["metadata"]["resourceVersion"]
            exact = {"resourceVersion": rv1, "resourceVersionMatch": "Exact"}
            assert api.get("/api/v1/namespaces/default/configmaps", params=exact).status_code == 200
            for i in range(3):
                api.put("/api/v1/namespaces/default/configmaps/a", {"metadata": {"name": "a"}, "data": {"i": str(i)}})
            deadline = time.monotonic() + 15
            r = None
            while time.monotonic() < deadline:
                r = api.get("/api/v1/namespaces/default/configmaps", params=exact)
                if r.status_code == 410:
                    break
                time.sleep(0.5)
            assert r.status_code == 410, r.text   # S1.24 via etcd after the snapshot was dropped (S1.21)
            assert r.json()["message"] == "The resourceVersion for the provided list is too old."
        finally:
            srv.stop()
