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


async def test_revision_and_compacted_is_one_linearizable_get():
    """storage.compact.revision_and_compacted (a warm start's checks, cache/cacher.py): etcd's revision now and
    the compaction recorded in compact_rev_key, from one GET (etcd_requests_total counts one "get")."""
    from storage.compact import COMPACT_REV_KEY, revision_and_compacted
    from storage.etcd import EtcdClient
    with current_etcd() as etcd:   # its own etcd: compact_rev_key is cluster-wide
        c = EtcdClient([etcd.endpoint])
        try:
            rev, compacted = await revision_and_compacted(c)
            assert compacted == 0 and rev == await c.current_revision(b"/registry/")
            assert (await c.create(COMPACT_REV_KEY, b"7"))[0]
            assert (await c.create(b"/registry/x", b"{}"))[0]
            rev2, compacted2 = await revision_and_compacted(c)
            assert (rev2, compacted2) == (rev + 2, 7)
        finally:
            await c.close()


async def test_shared_read_joins_callers_that_arrived_before_it_was_sent():
    """storage.revision.SharedRead: callers that arrive together share one read, sent after they all arrived;
    one arriving while it is in flight gets the next read (its answer must postdate its arrival)."""
    import asyncio

    from storage.revision import SharedRead
    sent = []
    gate = asyncio.Event()

    async def read():
        sent.append(len(sent))
        await gate.wait()
        return len(sent)
    shared = SharedRead(read)
    first = [asyncio.ensure_future(shared.current()) for _ in range(5)]
    await asyncio.sleep(0.01)
    late = asyncio.ensure_future(shared.current())       # arrives while the first read is in flight
    await asyncio.sleep(0.01)
    assert sent == [0]
    gate.set()
    assert [await f for f in first] == [1] * 5
    assert await late == 2 and sent == [0, 1]
