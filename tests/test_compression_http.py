"""Compressed residency over HTTP (issue 23): one etcd (the wheel's 3.5.1, as a new user runs it), two of our
apiservers over one prefix, one compressing every entry from a resource's second object on
(`--cache-compression-eager`), the other keeping wire bytes (`--cache-compression=false`). Every answer
(GETs, lists at one resourceVersion, paged lists, label selections, watches from RV 0 and live events) is
byte-identical, writes that start from a compressed cached copy work, and /debug/residency and /metrics
report what is compressed. The damaged-entry path (a 500 Status, the cache re-initialising from etcd, the
counter) runs in-process over a real etcd at the end."""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import pytest

from tests.helpers import Api, start_apiserver

NS = "zipped"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"


@pytest.fixture(scope="module")
def pair(etcd):
    prefix = f"/registry-zip{os.getpid()}"
    eager = start_apiserver(etcd.endpoint, prefix, "--cache-compression-eager")
    plain = start_apiserver(etcd.endpoint, prefix, "--cache-compression=false")
    try:
        a, b = Api(eager.base), Api(plain.base)
        assert a.post("/api/v1/namespaces", {"metadata": {"name": NS}}).status_code == 201
        for i in range(40):
            body = {"metadata": {"name": f"cfg-{i:02d}", "labels": {"app": f"a{i % 3}", "tier": "web"}},
                    "data": {"level": ["info", "debug"][i % 2], "url": f"https://svc-{i}.{NS}.svc:8443/v1",
                             "blob": os.urandom(48).hex()}}
            assert a.post(CMS, body).status_code == 201
        for i in range(6):
            assert a.post(SECRETS, {"metadata": {"name": f"s{i}"}, "stringData": {"token": os.urandom(24).hex()}}
                          ).status_code == 201
        yield a, b
    finally:
        eager.stop()
        plain.stop()


def residency(api: Api) -> dict:
    r = api.get("/debug/residency")
    assert r.status_code == 200
    return r.json()["resources"]


def wait_compressed(api: Api, resource: str, at_least: int, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        st = residency(api)[resource]["compression"]
        if st["entries_compressed"] >= at_least or time.monotonic() > deadline:
            return st
        time.sleep(0.05)


def same_rv(a: Api, b: Api, path: str) -> str:
    """A resourceVersion both caches have reached (a list at it answers from both caches, Exact): the newest
    object's, as on etcd 3.5.1 a cache learns of later revisions only from its own resource's events."""
    items = a.get(path.split("/namespaces/")[0] + "/" + path.rsplit("/", 1)[1]).json()["items"]
    rv = str(max(int(o["metadata"]["resourceVersion"]) for o in items))
    for api in (a, b):
        r = api.get(path, params={"resourceVersion": rv})
        assert r.status_code == 200, r.text
    return rv


def test_entries_are_compressed_and_reported(pair):
    a, b = pair
    st = wait_compressed(a, "configmaps", 40)
    wire = sum(len(json.dumps(o, separators=(",", ":"))) for o in b.get(CMS).json()["items"])
    assert st["entries_compressed"] >= 40 and st["compressed_bytes"] < 0.6 * wire, (st, wire)
    assert st["dictionaries"] == 1 and st["dictionary_bytes"] > 0 and st["codec_native_bytes"] > 0
    sec = wait_compressed(a, "secrets", 6)
    assert sec["entries_compressed"] >= 1 and sec["dictionaries"] == 0 and sec["dictionary_bytes"] == 0
    assert "compression" not in residency(b)["configmaps"]
    m = a.get("/metrics").text
    assert 'apiserver_watch_cache_entries{group="",resource="configmaps",state="compressed"}' in m
    assert 'apiserver_watch_cache_dictionary_bytes{group="",resource="configmaps"}' in m
    assert "apiserver_watch_cache_corrupt_entries_total" in m


@pytest.mark.parametrize("params", [
    {},
    {"limit": "7"},
    {"labelSelector": "app=a1"},
    {"labelSelector": "app in (a0,a2),tier=web", "limit": "5"},
    {"fieldSelector": "metadata.name=cfg-03"},
])
def test_lists_are_byte_identical(pair, params):
    a, b = pair
    wait_compressed(a, "configmaps", 40)
    rv = same_rv(a, b, CMS)
    for path in (CMS, "/api/v1/configmaps"):
        q = dict(params, resourceVersion=rv, resourceVersionMatch="Exact")
        pages = 0
        while True:
            ra, rb = a.get(path, params=q), b.get(path, params=q)
            assert ra.status_code == rb.status_code == 200, (ra.text, rb.text)
            assert ra.content == rb.content
            pages += 1
            cont = ra.json()["metadata"].get("continue")
            if not cont:
                break
            q = dict(params, **{"continue": cont})
        assert pages >= (2 if "limit" in params and not params.get("fieldSelector") else 1)
    # RV=0 (any state the cache holds) and a table too
    ra = a.get(CMS, params=dict(params, resourceVersion=rv))
    rb = b.get(CMS, params=dict(params, resourceVersion=rv))
    assert ra.content == rb.content


def test_gets_and_secrets_are_byte_identical(pair):
    a, b = pair
    wait_compressed(a, "secrets", 6)
    rv = same_rv(a, b, SECRETS)
    for i in range(6):
        got = [x.get(f"{SECRETS}/s{i}", params={"resourceVersion": rv}) for x in (a, b)]
        assert got[0].status_code == 200 and got[0].content == got[1].content
    for i in (0, 17, 39):
        got = [x.get(f"{CMS}/cfg-{i:02d}", params={"resourceVersion": "0"}) for x in (a, b)]
        assert got[0].status_code == 200 and got[0].content == got[1].content
    ra = a.get(SECRETS, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert ra.content == b.get(SECRETS, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"}).content


def _watch_lines(api: Api, params: dict, want: int, timeout: float = 15.0) -> list[bytes]:
    out: list[bytes] = []
    with api.get(CMS, params=dict(params, watch="1", timeoutSeconds="10"), stream=True, timeout=timeout) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line:
                out.append(line)
            if len(out) >= want:
                break
    return out


def test_watches_are_byte_identical(pair):
    """Initial events from RV 0 come from compressed entries; live events (eager: compressed too, within
    50 ms) reach every watcher intact, the per-dispatch frame cache included."""
    a, b = pair
    wait_compressed(a, "configmaps", 40)
    same_rv(a, b, CMS)
    init_a = _watch_lines(a, {"resourceVersion": "0"}, 40)
    init_b = _watch_lines(b, {"resourceVersion": "0"}, 40)
    assert sorted(init_a) == sorted(init_b) and len(init_a) == 40
    start = same_rv(a, b, CMS)
    results: dict[str, list[bytes]] = {}

    def watch(name, api):
        results[name] = _watch_lines(api, {"resourceVersion": start}, 10)
    threads = [threading.Thread(target=watch, args=(f"{n}{k}", api)) for n, api in (("a", a), ("b", b))
               for k in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    for i in range(10):
        r = a.patch(f"{CMS}/cfg-{i:02d}", {"data": {"level": f"step{i}"}}, "application/merge-patch+json")
        assert r.status_code == 200, r.text
        time.sleep(0.02)
    for t in threads:
        t.join(30)
    assert len(results) == 6 and all(len(v) == 10 for v in results.values())
    assert all(v == results["b0"] for v in results.values())


def test_writes_from_compressed_cached_copies(pair):
    """A write's first attempt starts from the cache's copy (compressed here): the result is the same as the
    plain server's for the same change, and the stored object reads back identically from both."""
    a, b = pair
    wait_compressed(a, "configmaps", 40)
    for api, name in ((a, "cfg-20"), (b, "cfg-21")):
        cur = api.get(f"{CMS}/{name}").json()
        cur["data"]["level"] = "changed"
        r = api.put(f"{CMS}/{name}", cur)
        assert r.status_code == 200 and r.json()["data"]["level"] == "changed"
        assert api.put(f"{CMS}/{name}", cur).status_code == 409   # stale RV: upstream's conflict
    rv = same_rv(a, b, CMS)
    for name in ("cfg-20", "cfg-21"):
        got = [x.get(f"{CMS}/{name}", params={"resourceVersion": rv}) for x in (a, b)]
        assert got[0].content == got[1].content


# --- a damaged entry, in-process over a real etcd --------------------------------------------------------------

async def until(cond, tries: int = 500) -> None:
    """Poll `cond` (a Cacher's readiness, its compression) every 20 ms, at most `tries` times."""
    for _ in range(tries):
        if cond():
            return
        await asyncio.sleep(0.02)


async def test_damaged_entry_fails_the_request_and_the_cache_relists(etcd_client, unique_prefix):
    from cache import metrics as cmetrics
    from cache.cacher import Cacher
    from cache.compression import EAGER, CompressionConfig
    from cache.delegator import CacheDelegator
    from cache.residency import Residency
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    from storage import errors as serr
    from storage.interface import ListRequest
    from storage.store import EtcdStore
    res = Registry().lookup("", "v1", "configmaps")
    prefix = f"{unique_prefix}/"
    store = EtcdStore(etcd_client, res.plural)
    for i in range(5):
        await store.create(f"{prefix}ns/c{i}", {"apiVersion": "v1", "kind": "ConfigMap",
                                                "metadata": {"name": f"c{i}", "namespace": "ns"},
                                                "data": {"k": "v" * 50 + str(i)}})
    c = Cacher(store=store, client=etcd_client, prefix=prefix, resource_label=res.plural, group=res.group,
               encode=lambda o: encode_obj(res, o), head=wire_head(res), compression=CompressionConfig(**EAGER))
    d = CacheDelegator(res, store, c, Residency(None), prefix)
    c.start()
    try:
        await until(lambda: c.ready and c.wc.compressor.compressed == 5, 300)
        assert c.ready and c.wc.compressor.compressed == 5
        want = await d.get_at(f"{prefix}ns/c3", "0")
        before = cmetrics.corrupt_entries.labels("", "configmaps").get()
        e = c.wc.store.get(f"{prefix}ns/c3")
        f = bytearray(e.stored)
        f[len(f) // 2] ^= 0x01
        e.compress(bytes(f), e.codec)
        with pytest.raises(serr.StorageError) as ei:
            await d.get_at(f"{prefix}ns/c3", "0")
        assert ei.value.code is serr.Code.INTERNAL and "damaged" in ei.value.message
        assert cmetrics.corrupt_entries.labels("", "configmaps").get() == before + 1
        from apiserver.status import map_storage_error
        st = map_storage_error(ei.value, res, "c3")
        assert st.code == 500 and st.status()["reason"] == "InternalError"
        # the cache re-initialises from etcd: ready again, the object intact
        for _ in range(300):
            if c.ready and c.wc.store.get(f"{prefix}ns/c3") is not e:
                break
            await asyncio.sleep(0.02)
        assert c.ready and await d.get_at(f"{prefix}ns/c3", "0") == want
        page = await d.get_list(prefix, ListRequest(resource_version="0"))
        assert len(page.raw) == 5
    finally:
        await c.stop()


async def test_a_cache_lists_its_objects_already_compressed(etcd_client, unique_prefix, monkeypatch):
    """Over a real etcd: a Cacher's initial list, read in pages, is compressed while it is read, so the cache is
    ready with its listed objects compressed before any background pass has run (they would wait a minute
    here), and decodes each to the object etcd holds, with its mod revision as resourceVersion."""
    from cache import compression
    from cache.cacher import Cacher
    from cache.compression import CompressionConfig
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    from storage.store import EtcdStore
    monkeypatch.setattr(compression, "LISTING_BATCH_BYTES", 10_000)
    res = Registry().lookup("", "v1", "configmaps")
    prefix = f"{unique_prefix}/"
    store = EtcdStore(etcd_client, res.plural)
    for i in range(400):
        await store.create(f"{prefix}ns/c{i:04d}", {"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": f"c{i:04d}", "namespace": "ns",
                                                                 "labels": {"app": f"a{i % 9}"}},
                                                    "data": {"level": ["info", "debug"][i % 2],
                                                             "endpoint": f"https://svc-{i % 13}.ns:8443/v{i}"}})
    calls = []
    orig = compression.compress_all

    def spy(codec, datas):
        calls.append(len(datas))
        return orig(codec, datas)
    monkeypatch.setattr(compression, "compress_all", spy)
    c = Cacher(store=store, client=etcd_client, prefix=prefix, resource_label=res.plural, group=res.group,
               encode=lambda o: encode_obj(res, o), head=wire_head(res), list_page=40,
               compression=CompressionConfig(min_objects=100, interval=60.0))
    c.start()
    try:
        await until(lambda: c.ready)
        assert c.ready and c.wc.compressor.compressed == 400, c.wc.compressor.stats()
        assert len(calls) > 4 and max(calls) < 200, calls   # in batches (and the training sample's trial)
        kvs, _, _, _ = await etcd_client.range(prefix.encode(), (prefix[:-1] + "0").encode())
        assert len(kvs) == 400
        for kv in kvs:
            want = json.loads(kv.value)
            got = json.loads(c.wire(c.wc.store.get(kv.key.decode()).data))
            assert got["metadata"].pop("resourceVersion") == str(kv.mod_revision)
            want["metadata"].pop("resourceVersion", None)
            assert got == want
    finally:
        await c.stop()


async def test_a_cache_lists_in_pages_bounded_in_bytes(etcd_client, unique_prefix, monkeypatch):
    """Over a real etcd: the initial list asks first for FIRST_LIST_PAGE objects, then for as many as fit
    LIST_PAGE_BYTES at the mean size of the page before (a page is held whole while it is decoded: 10,000
    ConfigMaps of 100 KB were a 1 GB etcd reply), never more than the cache's page size; every object arrives.
    (Large objects after a run of small ones can still make one page of the page size, as before: the sizes
    ahead are not known.)"""
    from cache import cacher as cacher_mod
    from cache.cacher import Cacher
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    from storage.store import EtcdStore
    monkeypatch.setattr(cacher_mod, "FIRST_LIST_PAGE", 4)
    monkeypatch.setattr(cacher_mod, "LIST_PAGE_BYTES", 100_000)
    res = Registry().lookup("", "v1", "configmaps")
    prefix = f"{unique_prefix}/"
    store = EtcdStore(etcd_client, res.plural)
    for i in range(60):   # 30 of ~20 KB, then 30 small: the pages follow the sizes
        pad = "x" * (20_000 if i < 30 else 10)
        await store.create(f"{prefix}ns/c{i:04d}", {"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": f"c{i:04d}", "namespace": "ns"},
                                                    "data": {"p": pad}})
    asked: list[tuple[int, int]] = []   # (limit, bytes answered)
    orig = etcd_client.range

    async def spy(start, end, **kw):
        out = await orig(start, end, **kw)
        if start.startswith(prefix.encode()) and not kw.get("count_only"):
            asked.append((kw.get("limit", 0), sum(len(kv.value) for kv in out[0])))
        return out
    monkeypatch.setattr(etcd_client, "range", spy)
    c = Cacher(store=store, client=etcd_client, prefix=prefix, resource_label=res.plural, group=res.group,
               encode=lambda o: encode_obj(res, o), head=wire_head(res), list_page=40)
    c.start()
    try:
        await until(lambda: c.ready)
        assert c.ready and len(c.wc.store) == 60
        limits = [lim for lim, _ in asked]
        assert limits[0] == 4 and max(limits) == 40, asked              # first FIRST_LIST_PAGE, at most list_page
        assert all(b <= 100_000 + 21_000 for _, b in asked[1:]), asked  # then about LIST_PAGE_BYTES a page
        assert limits[:3] == [4, 4, 4], asked                            # (~20 KB objects: 4 a page)
    finally:
        await c.stop()
