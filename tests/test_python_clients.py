"""The official Python clients against real apiserver processes: `kubernetes` (paged lists with
`limit`/`_continue`, `watch.Watch().stream` including its reaction to an ERROR event with code 410)
and `kubernetes_asyncio` (watch events carrying ConfigMaps of 256 KiB and more arrive complete)."""
from __future__ import annotations

import asyncio
import functools
import os
import threading
import time

import pytest
import requests

from storage.embedded import EmbeddedEtcd
from tests.helpers import Api, start_apiserver, stop_all


def official_client(base):
    from kubernetes import client
    c = client.Configuration()
    c.host = base
    return client.CoreV1Api(client.ApiClient(c))


def cm_body(name, data=None, labels=None):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}},
            "data": data or {}}


def test_list_with_limit_and_continue(apiserver, api, namespace):
    v1 = official_client(apiserver)
    for i in range(25):
        assert api.post(f"/api/v1/namespaces/{namespace}/configmaps",
                        cm_body(f"c{i:02d}", {"i": str(i)})).status_code == 201
    names, rvs, remaining = [], set(), []
    tok = None
    while True:
        kw = {"limit": 10}
        if tok:
            kw["_continue"] = tok
        page = v1.list_namespaced_config_map(namespace, **kw)
        names += [c.metadata.name for c in page.items]
        rvs.add(page.metadata.resource_version)
        remaining.append(page.metadata.remaining_item_count)
        tok = page.metadata._continue
        if not tok:
            break
    assert names == [f"c{i:02d}" for i in range(25)]
    assert len(rvs) == 1  # every page at the first page's RV
    assert remaining == [15, 5, None]
    assert all(isinstance(c.data["i"], str) for c in page.items)


def test_watch_stream_create_update_delete(apiserver, api, namespace):
    from kubernetes import watch
    v1 = official_client(apiserver)
    rv = v1.list_namespaced_config_map(namespace).metadata.resource_version
    w = watch.Watch()
    got = []

    def writer():
        time.sleep(0.3)
        # Writes through the test helper: the official client sends no Content-Type on create
        # (see test_official_client_create_without_content_type).
        cms = f"/api/v1/namespaces/{namespace}/configmaps"
        assert api.post(cms, cm_body("x", {"v": "1"})).status_code == 201
        assert api.patch(cms + "/x", {"data": {"v": "2"}}, "application/merge-patch+json").status_code == 200
        assert api.delete(cms + "/x").status_code == 200

    t = threading.Thread(target=writer)
    t.start()
    for ev in w.stream(v1.list_namespaced_config_map, namespace, resource_version=rv, timeout_seconds=10,
                       allow_watch_bookmarks=True):
        if ev["type"] == "BOOKMARK":
            continue
        got.append((ev["type"], ev["object"].metadata.name, (ev["object"].data or {}).get("v")))
        if ev["type"] == "DELETED":
            w.stop()
    t.join()
    assert got == [("ADDED", "x", "1"), ("MODIFIED", "x", "2"), ("DELETED", "x", "2")]
    assert int(w.resource_version) > int(rv)


@pytest.fixture(scope="module", params=["cache", "etcd"])
def gone(request):
    """(server, namespace, an RV the server answers 410 for on a watch).
    cache: a server whose configmap cache started after the RV (older than its window, S1.30);
    etcd: a --watch-cache=false server over its own etcd compacted past the RV."""
    procs = []
    own = None
    try:
        if request.param == "cache":
            etcd = request.getfixturevalue("current_etcd")
            prefix = f"/registry-py410{os.getpid()}"
        else:
            own = EmbeddedEtcd()
            etcd = own.__enter__()
            prefix = "/registry"
        flags = () if request.param == "cache" else ("--watch-cache=false",)
        p = start_apiserver(etcd.endpoint, prefix, *flags)
        procs.append(p)
        base = p.base
        a = Api(base)
        assert a.post("/api/v1/namespaces", {"metadata": {"name": "g"}}).status_code == 201
        old = a.post("/api/v1/namespaces/g/configmaps", cm_body("old")).json()["metadata"]["resourceVersion"]
        for i in range(3):
            assert a.post("/api/v1/namespaces/g/configmaps", cm_body(f"n{i}")).status_code == 201
        if request.param == "cache":
            p2 = start_apiserver(etcd.endpoint, prefix)  # its cache starts after `old`
            procs.append(p2)
            base = p2.base
        else:
            cur = a.get("/api/v1/namespaces/g/configmaps").json()["metadata"]["resourceVersion"]
            r = requests.post(etcd.endpoint + "/v3/kv/compaction", json={"revision": cur, "physical": True},
                              timeout=10)
            assert r.status_code == 200, r.text
        yield base, "g", old
    finally:
        stop_all(procs)
        if own is not None:
            own.__exit__(None, None, None)


def test_watch_410_error_event(gone):
    """kubernetes.watch on an ERROR event with code 410: with `timeout_seconds` it raises ApiException(410)
    at once; without, it retries once with the same resource_version and raises on the second 410. The
    caller recovers by re-listing and watching from the list's RV."""
    from kubernetes import watch
    from kubernetes.client.rest import ApiException
    base, ns, old = gone
    v1 = official_client(base)
    calls = []

    @functools.wraps(v1.list_namespaced_config_map)
    def counting(*a, **kw):
        calls.append(kw.get("resource_version"))
        return v1.list_namespaced_config_map(*a, **kw)

    t0 = time.monotonic()
    with pytest.raises(ApiException) as ei:
        for _ in watch.Watch().stream(counting, ns, resource_version=old, timeout_seconds=5):
            pass
    assert ei.value.status == 410 and time.monotonic() - t0 < 4
    assert calls == [old]
    assert "Expired" in ei.value.reason or "Gone" in ei.value.reason, ei.value.reason

    calls.clear()
    with pytest.raises(ApiException) as ei:
        for _ in watch.Watch().stream(counting, ns, resource_version=old):
            pass
    assert ei.value.status == 410
    assert calls == [old, old]  # one retry, with the same (still expired) RV

    # Recovery: list, then watch from the list's RV.
    lst = v1.list_namespaced_config_map(ns)
    assert {c.metadata.name for c in lst.items} == {"old", "n0", "n1", "n2"}
    w = watch.Watch()
    threading.Timer(0.3, lambda: Api(base).post(f"/api/v1/namespaces/{ns}/configmaps", cm_body("after"))).start()
    for ev in w.stream(v1.list_namespaced_config_map, ns, resource_version=lst.metadata.resource_version,
                       timeout_seconds=10):
        assert ev["type"] == "ADDED" and ev["object"].metadata.name == "after"
        w.stop()
    assert w.resource_version and int(w.resource_version) > int(lst.metadata.resource_version)


def test_official_client_create_without_content_type(apiserver, api, namespace):
    """kubernetes 37.x's create_* sends no Content-Type: decoded as JSON, as upstream's
    negotiation.NegotiateInputSerializer defaults to the first supported type."""
    v1 = official_client(apiserver)
    created = v1.create_namespaced_config_map(namespace, cm_body("plain", {"k": "v"}))
    assert created.metadata.name == "plain" and created.data == {"k": "v"}


SIZES = [256 * 1024, 400 * 1024, 1024 * 1024]
PIECE = 32 * 1024


def pieces(i, n):
    """ConfigMap data of ~n bytes as 32 KiB values (non-ASCII included)."""
    return {f"k{j:03d}": (chr(ord("a") + (i + j) % 26) * (PIECE - 2)) + "\u00e9" for j in range(min(n // PIECE + 1, 31))}  # < 1 MiB total (upstream limit)


@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")  # aiohttp, on the client's POSTs
def test_asyncio_create_256k_configmap(apiserver, api, namespace):
    """Bodies beyond one socket read (~64 KiB) are read whole (up to 3 MiB, as upstream)."""
    from kubernetes_asyncio import client

    async def main():
        conf = client.Configuration()
        conf.host = apiserver
        async with client.ApiClient(conf) as ac:
            v1 = client.CoreV1Api(ac)
            for i, n in enumerate([256 * 1024, 512 * 1024, 900 * 1024] * 2):  # all must succeed
                c = await v1.create_namespaced_config_map(namespace, cm_body(f"big{i}", {"d": "x" * n}))
                assert len(c.data["d"]) == n
    asyncio.run(main())


def test_asyncio_watch_large_configmaps(apiserver, api, namespace):
    """kubernetes_asyncio: watch events carrying ConfigMaps of 256 KiB .. 1 MiB arrive complete (one JSON
    line per event, far above aiohttp's default 64 KiB line buffer). The objects are grown with 32 KiB merge
    patches, so each one produces many events."""
    from kubernetes_asyncio import client, watch
    cms = f"/api/v1/namespaces/{namespace}/configmaps"
    want = {f"big{i}": pieces(i, n) for i, n in enumerate(SIZES)}

    def writer():
        for name, data in want.items():
            assert api.post(cms, cm_body(name)).status_code == 201
            for k, v in data.items():
                r = api.patch(f"{cms}/{name}", {"data": {k: v}}, "application/merge-patch+json")
                assert r.status_code == 200, r.text
        assert api.delete(f"{cms}/big0").status_code == 200

    async def main():
        conf = client.Configuration()
        conf.host = apiserver
        async with client.ApiClient(conf) as ac:
            v1 = client.CoreV1Api(ac)
            rv = (await v1.list_namespaced_config_map(namespace)).metadata.resource_version
            wt = asyncio.get_running_loop().run_in_executor(None, writer)
            last, big_events = {}, 0
            async with watch.Watch().stream(v1.list_namespaced_config_map, namespace, resource_version=rv,
                                            timeout_seconds=60) as stream:
                async for ev in stream:
                    name, data = ev["object"].metadata.name, ev["object"].data or {}
                    assert all(want[name][k] == v for k, v in data.items()), (ev["type"], name)  # intact values
                    if sum(len(v.encode()) for v in data.values()) >= 256 * 1024:
                        big_events += 1
                    last[name] = (ev["type"], data)
                    if ev["type"] == "DELETED":
                        break
            await wt
            assert last["big0"] == ("DELETED", want["big0"])
            assert all(last[n] == ("MODIFIED", want[n]) for n in ("big1", "big2"))
            assert big_events >= 3
            # A watch with RV unset (watch-list on the cache path) replays the big objects complete.
            got = {}
            async with watch.Watch().stream(v1.list_namespaced_config_map, namespace, timeout_seconds=5) as s:
                async for ev in s:
                    got[ev["object"].metadata.name] = ev["object"].data
                    if len(got) == 2:
                        break
            assert got == {"big1": want["big1"], "big2": want["big2"]}

    asyncio.run(asyncio.wait_for(main(), 90))
