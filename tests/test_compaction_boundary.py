"""Events at exactly the compacted revision come from etcd without their previous value (compaction keeps
only each key's newest version at that revision). Found by the robustness suite (compaction scenario, a
custom resource, --watch-cache=false): a watch resumed from the revision before the compaction got a
modification of an existing object as ADDED, and a delete there would have been dropped without a word.

Now, as upstream's etcd3 watcher: a PUT without its previous value is ADDED only if it created the key
(create_revision == mod_revision), else MODIFIED; a DELETE without it ends the watch with an internal
error (event.go parseEvent). The watch cache, which holds the previous state itself, uses its own copy."""
from __future__ import annotations

import asyncio

import pytest

from storage import errors
from storage.compact import compact_now
from storage.etcd import KV, EtcdClient, WatchEvent
from storage.store import EtcdStore


def cm(name, **data):
    return {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": name, "namespace": "default"},
            "data": data}


async def _events(store: EtcdStore, prefix: str, rv: int, n: int):
    out = []
    async for ev in store.watch(prefix, rv):
        out.append((ev.type, ev.obj["metadata"]["name"], ev.rv))
        if len(out) == n:
            return out
    return out


async def test_etcd_watch_at_the_compacted_revision(current_etcd, unique_prefix):
    client = EtcdClient([current_etcd.endpoint])
    try:
        store = EtcdStore(client, "configmaps")
        prefix = f"{unique_prefix}/"
        a = await store.create(f"{prefix}default/a", cm("a"))
        a2 = await store.update(f"{prefix}default/a", cm("a", x="1"), int(a["metadata"]["resourceVersion"]))
        rev = int(a2["metadata"]["resourceVersion"])
        await compact_now(client, rev)
        # From the compacted revision itself: the update of `a` has no previous value, and is still MODIFIED.
        got = await asyncio.wait_for(_events(store, prefix, rev - 1, 1), 10)
        assert got == [("MODIFIED", "a", rev)]   # before: ADDED
        b = await store.create(f"{prefix}default/b", cm("b"))
        brev = int(b["metadata"]["resourceVersion"])
        got = await asyncio.wait_for(_events(store, prefix, brev - 1, 1), 10)
        assert got == [("ADDED", "b", brev)]     # a creation is ADDED, previous value or not
        _, drev = await store.delete(f"{prefix}default/b")
        await compact_now(client, drev)
        with pytest.raises(errors.StorageError) as ei:   # before: the delete was dropped, the watch went on
            await asyncio.wait_for(_events(store, prefix, drev - 1, 1), 10)
        assert ei.value.code is errors.Code.INTERNAL
        assert "etcd event received with PrevKv=nil" in ei.value.message
    finally:
        await client.close()


async def test_cache_applies_events_without_previous_value_from_its_own_copy(current_etcd, unique_prefix):
    from cache.cacher import Cacher
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    res = Registry().lookup("", "v1", "configmaps")
    client = EtcdClient([current_etcd.endpoint])
    await client.status()
    store = EtcdStore(client, "configmaps")
    prefix = f"{unique_prefix}/"
    key = f"{prefix}default/a"
    obj = cm("a")
    obj["metadata"]["labels"] = {"l": "1"}
    a = await store.create(key, obj)
    c = Cacher(store=store, client=client, prefix=prefix, resource_label=res.plural, group=res.group,
               encode=lambda o: encode_obj(res, o), head=wire_head(res))
    c.start()
    try:
        for _ in range(300):
            if c.ready:
                break
            await asyncio.sleep(0.02)
        assert c.ready
        rv = int(a["metadata"]["resourceVersion"])
        # A modification without prev_kv (as at the compacted revision): MODIFIED, label index moved.
        new = b'{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"default","labels":{"l":"2"}}}'
        ev = c._apply(WatchEvent("PUT", KV(key.encode(), new, rv + 100, rv), None))
        assert ev.type == "MODIFIED"
        assert [e.key for e in c.wc.iter_prefix(c.wc.store, prefix)] == [key]
        idx = c.wc.indexes
        assert ("l", "1") not in idx.by_label and len(idx.label_slots("l", "2")) == 1   # before: l=1 stayed
        # A delete without prev_kv: DELETED with the cache's copy at the delete's RV (before: dropped).
        ev = c._apply(WatchEvent("DELETE", KV(key.encode(), b"", rv + 101, 0), None))
        assert ev is not None and ev.type == "DELETED" and ev.rv == rv + 101
        assert key not in c.wc.store
    finally:
        await c.stop()
        await client.close()
