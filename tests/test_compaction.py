"""etcd compaction as upstream (S2.16.2): the apiserver compacts at the revision seen one interval
earlier, records it in compact_rev_key, and the caches drop snapshots etcd can no longer back."""
from __future__ import annotations

import time

from storage.embedded import EmbeddedEtcd
from tests.conftest import Api, _load_build_etcd, start_apiserver_process


def test_compactor_compacts_and_cache_drops_old_snapshots():
    path = _load_build_etcd().ensure_etcd()
    with EmbeddedEtcd(binary=path) as etcd:   # its own etcd: compaction is cluster-wide
        proc, base = start_apiserver_process(etcd.endpoint, "/registry", "--etcd-compaction-interval", "1s")
        try:
            api = Api(base)
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
            proc.terminate()
            proc.wait(10)
