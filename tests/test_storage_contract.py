"""The storage contract (storage/interface.py), run against every backend, as upstream's
store_tests.go: the etcd store, and the `CacheDelegator` the server really uses, with its watch cache
(over a current etcd, whose progress requests let the cache answer consistent lists itself) and
without one (`--watch-cache=false`). Lists and watches go through the same request-level calls the
endpoints make; watches are read back from the frames they write. Runs against a real etcd.
"""
from __future__ import annotations

import asyncio

import orjson
import pytest

from storage import errors
from storage.interface import ListRequest, WatchRequest
from storage.store import EtcdStore, Event

# delegator+compressed: the cache with every entry compressed within 50 ms (issue 23, --cache-compression-eager)
BACKENDS = ["etcd", "delegator+cache", "delegator+compressed", "delegator"]


@pytest.fixture(params=BACKENDS)
async def backend(request, unique_prefix):
    """(store, raw etcd client)."""
    from cache.cacher import Cacher
    from cache.delegator import CacheDelegator
    from cache.residency import Residency
    from machinery.encoding import encode_obj, wire_head
    from storage.etcd import EtcdClient
    from cache.compression import EAGER, CompressionConfig
    cached = request.param in ("delegator+cache", "delegator+compressed")
    etcd = request.getfixturevalue("current_etcd" if cached else "etcd")
    client = EtcdClient([etcd.endpoint])
    await client.status()
    es = EtcdStore(client, "configmaps")
    prefix = f"{unique_prefix}/"
    res = CONFIGMAPS
    if request.param == "etcd":
        yield es, client
    elif request.param == "delegator":
        yield CacheDelegator(res, es, None, Residency(None), prefix), client
    else:
        # Configured as apiserver/app.py configures it.
        c = Cacher(store=es, client=client, prefix=prefix, resource_label=res.plural, group=res.group,
                   encode=lambda obj: encode_obj(res, obj), head=wire_head(res),
                   compression=CompressionConfig(**EAGER) if request.param == "delegator+compressed" else None)
        c.start()
        for _ in range(200):
            if c.ready:
                break
            await asyncio.sleep(0.02)
        assert c.ready and c.progress_supported
        d = CacheDelegator(res, es, c, Residency(None), prefix)
        yield d, client
        await d.stop()
    await client.close()


@pytest.fixture
def store(backend):
    return backend[0]


@pytest.fixture
def etcd_client(backend):
    return backend[1]


def _configmaps():
    from machinery.resources import Registry
    return Registry().lookup("", "v1", "configmaps")


CONFIGMAPS = _configmaps()


class FrameCollector:
    """A WatchSink that decodes the frames a watch writes back into events."""

    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()

    async def start(self) -> None:
        pass

    async def write(self, data: bytes) -> None:
        self.write_direct(data)

    def write_direct(self, data: bytes) -> bool:
        for line in data.splitlines():
            if line.strip():
                self.queue.put_nowait(orjson.loads(line))
        return True

    async def fail(self, err: errors.StorageError) -> None:
        self.queue.put_nowait(err)

    def direct_writer(self):
        return self.write_direct


async def watch_events(store, prefix: str, rv: int, predicate=None):
    """The watch served by `store.serve_watch` (as the watch endpoint calls it), as storage Events."""
    from machinery.encoding import WatchFrames
    sink = FrameCollector()
    req = WatchRequest(frames=WatchFrames(CONFIGMAPS), timeout=30, resource_version=str(rv), predicate=predicate)
    task = asyncio.ensure_future(store.serve_watch(prefix, req, sink))
    try:
        while True:
            got = await asyncio.wait_for(sink.queue.get(), 10)
            if isinstance(got, errors.StorageError):
                raise got
            obj = got["object"]
            yield Event(got["type"], obj, int(obj["metadata"]["resourceVersion"]))
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def serves_watches_from_etcd(store) -> bool:
    return isinstance(store, EtcdStore) or store.cacher is None


def cm(name, ns="default", **data):
    return {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": name, "namespace": ns},
            "data": data}


async def test_create_get_roundtrip_stamps_rv(store, unique_prefix):
    key = f"{unique_prefix}/default/a"
    out = await store.create(key, cm("a", x="1"))
    got = await store.get(key)
    assert got == out
    assert int(got["metadata"]["resourceVersion"]) > 0


async def test_rv_is_never_stored_in_value(store, etcd_client, unique_prefix):
    key = f"{unique_prefix}/default/a"
    obj = cm("a")
    obj["metadata"]["resourceVersion"] = "12345"
    await store.create(key, obj)
    kv, _ = await etcd_client.get(key.encode())
    assert b"resourceVersion" not in kv.value


async def test_create_existing_fails_key_exists(store, unique_prefix):
    key = f"{unique_prefix}/default/a"
    await store.create(key, cm("a"))
    with pytest.raises(errors.StorageError) as ei:
        await store.create(key, cm("a"))
    assert ei.value.code is errors.Code.KEY_EXISTS


async def test_get_missing_is_not_found(store, unique_prefix):
    with pytest.raises(errors.StorageError) as ei:
        await store.get(f"{unique_prefix}/default/none")
    assert ei.value.code is errors.Code.KEY_NOT_FOUND


async def test_update_with_stale_rv_conflicts(store, unique_prefix):
    key = f"{unique_prefix}/default/a"
    v1 = await store.create(key, cm("a", x="1"))
    rv1 = int(v1["metadata"]["resourceVersion"])
    v2 = await store.update(key, cm("a", x="2"), rv1)
    assert int(v2["metadata"]["resourceVersion"]) > rv1
    with pytest.raises(errors.StorageError) as ei:
        await store.update(key, cm("a", x="3"), rv1)
    assert ei.value.code is errors.Code.RV_CONFLICT
    assert (await store.get(key))["data"] == {"x": "2"}


async def test_guaranteed_update_retries_on_concurrent_writers(store, unique_prefix):
    key = f"{unique_prefix}/default/counter"
    await store.create(key, cm("counter", n="0"))

    def inc(o):
        o["data"]["n"] = str(int(o["data"]["n"]) + 1)
        return o
    await asyncio.gather(*(store.guaranteed_update(key, inc) for _ in range(10)))
    assert (await store.get(key))["data"]["n"] == "10"


async def test_delete_with_preconditions(store, unique_prefix):
    key = f"{unique_prefix}/default/a"
    obj = cm("a")
    obj["metadata"]["uid"] = "u-1"
    out = await store.create(key, obj)
    with pytest.raises(errors.StorageError) as ei:
        await store.delete(key, uid="other")
    assert ei.value.code is errors.Code.RV_CONFLICT
    with pytest.raises(errors.StorageError) as ei:
        await store.delete(key, rv="1")
    assert ei.value.code is errors.Code.RV_CONFLICT
    last, rev = await store.delete(key, uid="u-1", rv=out["metadata"]["resourceVersion"])
    assert last["metadata"]["uid"] == "u-1"
    assert rev > int(out["metadata"]["resourceVersion"])
    with pytest.raises(errors.StorageError) as ei:
        await store.delete(key)
    assert ei.value.code is errors.Code.KEY_NOT_FOUND


async def test_list_pages_at_fixed_revision(store, unique_prefix):
    """S2.6-S2.10: key byte order, continue iff more, later pages at the first page's revision."""
    prefix = f"{unique_prefix}/"
    names = [("a-b", "x"), ("a", "x"), ("b", "y"), ("a", "z"), ("c", "w")]
    for ns, n in names:
        await store.create(f"{prefix}{ns}/{n}", cm(n, ns))
    first = await store.get_list(prefix, ListRequest(limit=2))
    assert [i["metadata"]["namespace"] + "/" + i["metadata"]["name"] for i in first.items()] == ["a-b/x", "a/x"]
    assert first.continue_ is not None and first.remaining == 3
    # A write after the first page must not show up in later pages.
    await store.create(f"{prefix}a/y", cm("y", "a"))
    seen = list(first.items())
    page = first
    while page.continue_:
        page = await store.get_list(prefix, ListRequest(continue_=page.continue_, limit=2))
        assert page.resource_version == first.resource_version
        seen += page.items()
    keys = [i["metadata"]["namespace"] + "/" + i["metadata"]["name"] for i in seen]
    assert keys == ["a-b/x", "a/x", "a/z", "b/y", "c/w"]
    assert page.remaining is None


async def test_list_with_predicate_fills_limit(store, unique_prefix):
    """S2.7: the etcd path keeps fetching until `limit` items pass the predicate."""
    prefix = f"{unique_prefix}/"
    for i in range(20):
        await store.create(f"{prefix}ns/o{i:02d}", cm(f"o{i:02d}", "ns", even=str(i % 2 == 0)))
    res = await store.get_list(prefix, ListRequest(limit=3, predicate=lambda o: o["data"]["even"] == "True"))
    assert [o["metadata"]["name"] for o in res.items()] == ["o00", "o02", "o04"]
    assert res.continue_ is not None and res.remaining is None  # no count with a predicate (S2.9)


async def test_watch_from_revision_and_delete_carries_delete_rv(store, unique_prefix):
    """S4.5: DELETED carries the last state with the delete's RV."""
    prefix = f"{unique_prefix}/"
    v1 = await store.create(f"{prefix}ns/a", cm("a", "ns"))
    start = int(v1["metadata"]["resourceVersion"])
    v2 = await store.update(f"{prefix}ns/a", cm("a", "ns", k="v"), start)
    _, drev = await store.delete(f"{prefix}ns/a")
    got = []
    async for ev in watch_events(store, prefix, start):
        got.append((ev.type, ev.rv, ev.obj["metadata"]["resourceVersion"], ev.obj.get("data")))
        if len(got) == 2:
            break
    assert got == [("MODIFIED", int(v2["metadata"]["resourceVersion"]), v2["metadata"]["resourceVersion"],
                    {"k": "v"}),
                   ("DELETED", drev, str(drev), {"k": "v"})]


async def test_watch_selector_transitions(store, unique_prefix):
    """S4.6: entering the selector is ADDED, leaving it is DELETED with the previous content."""
    prefix = f"{unique_prefix}/"
    v = await store.create(f"{prefix}ns/a", cm("a", "ns", on="no"))
    start = int(v["metadata"]["resourceVersion"])
    pred = lambda o: o["data"].get("on") == "yes"  # noqa: E731
    rv = start
    for val in ("yes", "yes", "no", "no"):
        rv = int((await store.update(f"{prefix}ns/a", cm("a", "ns", on=val), rv))["metadata"]["resourceVersion"])
    got = []
    async for ev in watch_events(store, prefix, start, pred):
        got.append((ev.type, ev.obj["data"]["on"]))
        if len(got) == 3:
            break
    assert got == [("ADDED", "yes"), ("MODIFIED", "yes"), ("DELETED", "yes")]


async def test_compaction_expires_old_revisions(store, unique_prefix):
    """S1.24: an exact read at a compacted revision fails with EXPIRED (the cache drops
    snapshots below the compaction, S2.16.2, and delegates to etcd, S1.21). A watch from a
    compacted revision fails on etcd; the cache still serves it from its window (S1.31)."""
    prefix = f"{unique_prefix}/"
    v1 = await store.create(f"{prefix}ns/a", cm("a", "ns"))
    rv1 = int(v1["metadata"]["resourceVersion"])
    v2 = await store.update(f"{prefix}ns/a", cm("a", "ns", x="1"), rv1)
    await store.compact(int(v2["metadata"]["resourceVersion"]))
    with pytest.raises(errors.StorageError) as ei:
        await store.get_list(prefix, ListRequest(resource_version=str(rv1), resource_version_match="Exact"))
    assert ei.value.code is errors.Code.EXPIRED
    if serves_watches_from_etcd(store):
        with pytest.raises(errors.StorageError) as ei:
            async for _ in watch_events(store, prefix, rv1 - 1):
                pass
        assert ei.value.code is errors.Code.EXPIRED
    else:
        got = []
        async for ev in watch_events(store, prefix, rv1 - 1):
            got.append((ev.type, ev.rv))
            if len(got) == 2:
                break
        assert got == [("ADDED", rv1), ("MODIFIED", int(v2["metadata"]["resourceVersion"]))]


async def test_future_revision_is_too_large(store, unique_prefix):
    """S1.22: an exact read beyond etcd's revision fails with TOO_LARGE_RV."""
    cur = await store.current_revision(f"{unique_prefix}/")
    with pytest.raises(errors.StorageError) as ei:
        await store.get_list(f"{unique_prefix}/", ListRequest(resource_version=str(cur + 1000),
                                                              resource_version_match="Exact"))
    assert ei.value.code is errors.Code.TOO_LARGE_RV
