"""The front's shared stream (front/feed.py, issue 21): per resource one merged stream from the shards, whatever the
number of client watches, with the events a full replica's watch carries.

Real etcd, two residency shards, a full replica over the same etcd and key prefix (the reference), a front with
shared watches (the default) and one with `--front-shared-watches=false` (K shard watches per client watch).
Each shard's `/debug/residency` counts the watchers of its configmaps cache; the front's reports which path
served each watch.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

import aiohttp
import pytest
import requests

from machinery.shard_selector import FULL, ShardSelector
from tests.helpers import ApiserverProcess, stop_all
from tests.test_front import CM, Slice

N_CLIENTS = 12


@pytest.fixture(scope="module")
def fslice(current_etcd):
    s = Slice(current_etcd.endpoint, 2, f"/registry-feed{os.getpid()}").start()
    unshared = None
    try:
        unshared = ApiserverProcess("--front", "--shards", ",".join(p.base for p in s.shards),
                                    "--front-shared-watches", "false", etcd_servers=current_etcd.endpoint,
                                    etcd_prefix=s.prefix, name="front-unshared")
        unshared.start().wait_ready(60)
        s.unshared = unshared
        http = requests.Session()
        for ns in ("a", "b", "c"):
            assert http.post(s.front.base + "/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
        yield s
    finally:
        if unshared is not None and unshared.popen is not None:
            stop_all([unshared], strict=False)
        s.stop()


def report(base: str) -> dict:
    return requests.get(base + "/debug/residency", timeout=10).json()


def shard_watchers(s) -> list[int]:
    return [report(p.base)["resources"]["configmaps"]["watchers"] for p in s.shards]


def served(s, front=None) -> dict:
    return report((front or s.front).base)["watchesServed"]


class Watch(threading.Thread):
    """One watch read to its end in a thread of its own (its own connection)."""

    def __init__(self, base: str, params: dict, path: str = CM):
        super().__init__(daemon=True)
        self.base, self.params, self.path = base, params, path
        self.events: list[dict] = []
        self.started = threading.Event()
        self.status = None

    def run(self) -> None:
        with requests.get(self.base + self.path, params=self.params, stream=True, timeout=60) as r:
            self.status = r.status_code
            self.started.set()
            for line in r.iter_lines():
                if line:
                    self.events.append(json.loads(line))

    def begin(self) -> "Watch":
        self.start()
        assert self.started.wait(20), "the watch did not start"
        assert self.status == 200
        return self

    def objects(self) -> list[str]:
        """The non-bookmark events, canonical JSON (the frames a full replica sends, byte for byte in content)."""
        return [json.dumps(e, sort_keys=True) for e in self.events if e["type"] != "BOOKMARK"]


def keep_feed_open(s, seconds: int = 30) -> Watch:
    """A watch through the front, served by the configmaps feed (created by it if none is open). A feed starts at
    the current revision: a watch from an RV read after this one returns is inside its window."""
    n0 = served(s)["feed"]
    w = Watch(s.front.base, {"watch": "1", "timeoutSeconds": str(seconds)}).begin()
    deadline = time.monotonic() + 10
    while served(s)["feed"] == n0:
        assert time.monotonic() < deadline, served(s)
        time.sleep(0.05)
    return w


def writes(base: str, tag: str, n: int = 12) -> str:
    """Creates, updates and deletes over three namespaces; then a list's RV (every write is at or below it)."""
    http = requests.Session()
    for i in range(n):
        ns, name = "abc"[i % 3], f"{tag}{i:02d}"
        r = http.post(base + f"/api/v1/namespaces/{ns}/configmaps",
                      json={"metadata": {"name": name, "labels": {"x": str(i % 2)}}, "data": {"i": str(i)}})
        assert r.status_code == 201, r.text
        if i % 3 == 0:
            r = http.put(base + f"/api/v1/namespaces/{ns}/configmaps/{name}",
                         json={"metadata": {"name": name}, "data": {"i": "u"}})
            assert r.status_code == 200, r.text
        if i % 4 == 0:
            r = http.delete(base + f"/api/v1/namespaces/{ns}/configmaps/{name}")
            assert r.status_code == 200, r.text
    return list_rv(base)


def list_rv(base: str) -> str:
    return requests.get(base + CM, timeout=10).json()["metadata"]["resourceVersion"]


def test_client_watches_share_one_stream_per_resource(fslice):
    """12 client watches through the shared front cost each shard one watch; through the unshared front, 12
    (issue 21: shard watches depend on resources and shards, not clients). Every client gets the full replica's
    events, in order (S4.1, S4.5)."""
    s = fslice
    keep = keep_feed_open(s, 12)
    start = list_rv(s.front.base)
    params = {"watch": "1", "resourceVersion": start, "timeoutSeconds": "8", "allowWatchBookmarks": "true"}
    before, served0 = shard_watchers(s), served(s)
    ref = Watch(s.full.base, params).begin()
    clients = [Watch(s.front.base, params).begin() for _ in range(N_CLIENTS)]
    deadline = time.monotonic() + 10
    while served(s)["feed"] - served0["feed"] < N_CLIENTS:
        assert time.monotonic() < deadline, served(s)
        time.sleep(0.1)
    shared = [n - b for n, b in zip(shard_watchers(s), before)]
    assert all(d <= 1 for d in shared), shared          # the feed's one watch per shard (0: it was open already)
    assert served(s)["feed"] - served0["feed"] == N_CLIENTS
    feeds = report(s.front.base)["watches"]["configmaps"]["feeds"]
    assert [f["watchers"] for f in feeds if not f["retired"]] == [N_CLIENTS + 1]
    assert all(f["shardWatches"] == 2 for f in feeds)
    # The same clients through the unshared front: one shard watch each, on every shard.
    before = shard_watchers(s)
    unshared = [Watch(s.unshared.base, params).begin() for _ in range(N_CLIENTS)]
    deadline = time.monotonic() + 10   # the front answers 200 before it opens the shard watches (S4.3)
    while [n - b for n, b in zip(shard_watchers(s), before)] != [N_CLIENTS, N_CLIENTS]:
        assert time.monotonic() < deadline, (shard_watchers(s), before)
        time.sleep(0.1)
    writes(s.front.base, "s")
    for w in [ref, *clients, *unshared]:
        w.join(30)
    want = ref.objects()
    assert len(want) >= 12
    for w in clients + unshared:
        assert w.objects() == want
    for w in clients:   # bookmarks never go back and never precede the start (S4.12)
        bms = [int(e["object"]["metadata"]["resourceVersion"]) for e in w.events if e["type"] == "BOOKMARK"]
        assert bms == sorted(bms) and all(b > int(start) for b in bms)
    keep.join(20)


def test_resume_from_the_window_or_before_it(fslice):
    """A watch from an RV in the feed's window replays from it; one from before the feed started is served by
    per-client shard watches (their windows hold it): both carry the full replica's events from that RV."""
    s = fslice
    keep = keep_feed_open(s, 20)
    oldest = min(f["oldest"] for f in report(s.front.base)["watches"]["configmaps"]["feeds"] if not f["retired"])
    mid = writes(s.front.base, "r1", 6)
    writes(s.front.base, "r2", 6)
    assert int(mid) >= oldest
    for rv, path in ((mid, "feed"), (str(oldest - 3), "merged")):
        n0 = served(s)[path]
        params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "2"}
        got, want = Watch(s.front.base, params), Watch(s.full.base, params)
        got.start(), want.start()
        got.join(30), want.join(30)
        assert got.status == want.status == 200
        assert served(s)[path] == n0 + 1
        assert got.objects() == want.objects() and len(want.objects()) >= 6
    keep.join(30)


def test_watch_list_and_shard_selector_from_the_feed(fslice):
    """Watch-list through the feed (S5.4-S5.5): the initial state is the full replica's list at the end
    bookmark's RV, then live events as the full replica's; a shardSelector across both shards is filtered by
    the feed as the full replica filters it (S7.11)."""
    s = fslice
    keep = keep_feed_open(s, 20)
    writes(s.front.base, "wl", 6)
    half = FULL // 2
    sel = str(ShardSelector("uid", [(half // 2, half + half // 2)]))
    for extra in ({}, {"shardSelector": sel}):
        n0 = served(s)["feed"]
        params = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                  "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "5", **extra}
        w = Watch(s.front.base, params).begin()
        time.sleep(0.5)
        last = writes(s.front.base, "wl" + str(len(extra)), 6)
        w.join(30)
        assert served(s)["feed"] == n0 + 1
        ends = [i for i, e in enumerate(w.events) if e["type"] == "BOOKMARK"
                and e["object"]["metadata"].get("annotations", {}).get("k8s.io/initial-events-end") == "true"]
        assert len(ends) == 1
        initial, end_rv = w.events[:ends[0]], w.events[ends[0]]["object"]["metadata"]["resourceVersion"]
        listed = requests.get(s.full.base + CM, params={"resourceVersion": end_rv, "resourceVersionMatch": "Exact",
                                                         **({"shardSelector": sel} if extra else {})}).json()
        assert [json.dumps(e["object"], sort_keys=True) for e in initial] == [
            json.dumps(dict(o, kind="ConfigMap", apiVersion="v1"), sort_keys=True) for o in listed["items"]]
        assert all(e["type"] == "ADDED" for e in initial)
        live = Watch(s.full.base, {"watch": "1", "resourceVersion": end_rv, "timeoutSeconds": "1", **extra})
        live.start()
        live.join(30)
        after = [json.dumps(e, sort_keys=True) for e in w.events[ends[0] + 1:] if e["type"] != "BOOKMARK"]
        assert after == live.objects()
        assert int(last) >= int(end_rv)
    keep.join(30)


def test_a_shard_that_dies_ends_the_feeds_watches(fslice):
    """A shard going away ends the watches of its feed (as a server going away ends them, no silent stall);
    once it is back, a watch resumed from the last RV a client saw gets every event after it."""
    s = fslice
    keep = keep_feed_open(s, 60)
    n0 = served(s)["feed"]
    w = Watch(s.front.base, {"watch": "1", "resourceVersion": list_rv(s.front.base), "timeoutSeconds": "60"}).begin()
    writes(s.front.base, "d1", 3)
    assert served(s)["feed"] == n0 + 1
    victim = s.shards[1]
    victim.popen.kill()
    victim.popen.wait(10)
    t0 = time.monotonic()
    w.join(15)
    assert not w.is_alive(), "the client watch outlived its shard by 15 s"
    keep.join(5)
    assert not keep.is_alive()
    ended = time.monotonic() - t0
    last = w.events[-1]["object"]["metadata"]["resourceVersion"]
    victim.start().wait_ready(60)
    deadline = time.monotonic() + 30
    while report(s.front.base)["coverage"] != "ok" or not all(x["ready"] for x in report(s.front.base)["shards"]):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    got = Watch(s.front.base, {"watch": "1", "resourceVersion": last, "timeoutSeconds": "4"})
    want = Watch(s.full.base, {"watch": "1", "resourceVersion": last, "timeoutSeconds": "4"})
    got.start(), want.start()
    time.sleep(0.5)
    writes(s.front.base, "d2", 3)
    got.join(30), want.join(30)
    assert got.objects() == want.objects() and len(want.objects()) >= 3, ended


def test_one_shard_holding_everything_is_proxied(current_etcd):
    """K = 1 (the deployment's default): the shard's range is the whole hash space, so a list without a
    shardSelector is the shard's own answer, proxied (no merge), byte-identical to a full replica's, page by page
    (limit/continue, remainingItemCount as a full replica's: S2.9)."""
    from tests.test_front import pages
    s = Slice(current_etcd.endpoint, 1, f"/registry-feed1-{os.getpid()}")
    # As `python -m deployment` starts it for K = 1: no --residency (a full replica; the front reads its range as
    # the whole hash space).
    s.shards = [ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=s.prefix, name="shard0")]
    s.start()
    try:
        http = requests.Session()
        for i in range(7):
            r = http.post(s.front.base + "/api/v1/namespaces/default/configmaps",
                          json={"metadata": {"name": f"one{i}", "labels": {"x": str(i % 2)}}})
            assert r.status_code == 201, r.text
        rv = list_rv(s.front.base)
        for params in ({}, {"limit": "2"}, {"limit": "3", "labelSelector": "x=1"}):
            p = dict(params, resourceVersion=rv, resourceVersionMatch="Exact") if not params else \
                dict(params, resourceVersion=rv)
            got, want = pages(http, s.front.base, CM, p), pages(http, s.full.base, CM, p)
            assert got == want, params
        assert report(s.front.base)["watchesServed"] == {"feed": 0, "merged": 0, "proxied": 0}
    finally:
        s.stop()


def shards_ready(s, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(x["ready"] for x in report(s.front.base)["shards"]):
        assert time.monotonic() < deadline, report(s.front.base)["shards"]
        time.sleep(0.2)


def test_a_hung_shard_ends_the_feeds_watches(fslice):
    """A shard that stops answering (SIGSTOP) would stall every event of the merged stream: once the front's
    health checks mark it down (3 checks of 2 s), the feed's live watches end; after SIGCONT a new feed serves."""
    s = fslice
    keep = keep_feed_open(s, 60)
    n0 = served(s)["feed"]
    live = Watch(s.front.base, {"watch": "1", "resourceVersion": list_rv(s.front.base), "timeoutSeconds": "120"})
    live.begin()
    deadline = time.monotonic() + 10
    while served(s)["feed"] == n0:   # registered: no initial list, its live phase has begun
        assert time.monotonic() < deadline, served(s)
        time.sleep(0.05)
    victim = s.shards[0]
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        live.join(30)
        assert not live.is_alive(), "the feed's watch outlived a hung shard by 30 s"
    finally:
        os.kill(victim.pid, signal.SIGCONT)
        shards_ready(s)
    keep.join(70)
    rv = list_rv(s.front.base)
    got = Watch(s.front.base, {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "4"}).begin()
    want = Watch(s.full.base, {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "4"}).begin()
    writes(s.front.base, "h", 3)
    got.join(20), want.join(20)
    assert got.objects() == want.objects() and len(want.objects()) >= 3


def test_a_hung_shard_fails_waiting_lists_and_initial_lists_within_the_health_bound(fslice):
    """Requests already waiting on a shard that stops answering (SIGSTOP) fail once the front's health checks mark
    it down (3 checks of 2 s: 7-9 s), not at the request timeout (60 s): a merged list gets a 504 Status, a
    watch-list waiting for its initial list a 504 or an ERROR event. After SIGCONT both work again."""
    s = fslice
    got: dict = {}

    def merged_list():
        t0 = time.monotonic()
        r = requests.get(s.front.base + CM, timeout=90)
        got["list"] = (r.status_code, time.monotonic() - t0, r.text)

    def watch_list():
        t0 = time.monotonic()
        with requests.get(s.front.base + CM, params={"watch": "1", "sendInitialEvents": "true",
                                                     "resourceVersionMatch": "NotOlderThan",
                                                     "allowWatchBookmarks": "true", "timeoutSeconds": "60"},
                          stream=True, timeout=90) as r:
            lines = [json.loads(x) for x in r.iter_lines() if x] if r.status_code == 200 else [r.json()]
        got["watch"] = (r.status_code, time.monotonic() - t0, lines)

    shards_ready(s)
    victim = s.shards[0]
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=f, daemon=True) for f in (merged_list, watch_list)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        os.kill(victim.pid, signal.SIGCONT)
        shards_ready(s)
    status, took, body = got["list"]
    assert status == 504 and took < 30, (status, took, body[:300])
    assert json.loads(body)["reason"] == "Timeout" and victim.base.split("//")[1] in body, body
    status, took, events = got["watch"]
    assert took < 30, (status, took, events[-1:])
    if status == 200:
        assert events[-1]["type"] == "ERROR" and events[-1]["object"]["code"] == 504, events[-1:]
    else:
        assert status == 504, (status, events)
    assert requests.get(s.front.base + CM, timeout=30).status_code == 200


def etcd_revision_reads(base: str) -> int:
    text = requests.get(base + "/metrics", timeout=10).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("etcd_requests_total{") and 'operation="getCurrentResourceVersion"' in line
               and 'type="configmaps"' in line)


def test_consistent_lists_that_arrive_together_share_one_revision_read(fslice):
    """S3.1: a consistent list through the front reads etcd's current revision (never a shard's progress), and
    lists that arrive together share the read, as upstream's cacher shares it: 20 concurrent lists, far fewer
    than 20 reads."""
    s = fslice
    shards_ready(s)
    before = etcd_revision_reads(s.front.base)

    async def burst() -> list[int]:   # 20 connections, the requests sent together
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as cs:
            async def one() -> int:
                async with cs.get(s.front.base + CM) as r:
                    await r.read()
                    return r.status
            return await asyncio.gather(*(one() for _ in range(20)))
    codes = asyncio.run(burst())
    assert codes == [200] * 20, codes
    reads = etcd_revision_reads(s.front.base) - before
    assert 1 <= reads < 20, reads   # each list read etcd's revision, and lists that arrived together shared it


def test_selector_watches_from_the_feed(fslice):
    """Label and field selector watches are served by the feed too, with the transitions a full replica's watch
    cache sends (S4.6): an update that makes an object match is ADDED, one that makes it stop matching is DELETED
    carrying its previous content at the event's RV; frames equal the full replica's."""
    s = fslice
    keep = keep_feed_open(s, 20)
    http = requests.Session()
    base = s.front.base + "/api/v1/namespaces/b/configmaps"
    for i in range(4):
        assert http.post(base, json={"metadata": {"name": f"sel{i}", "labels": {"tier": "x"}}}).status_code == 201
    rv = list_rv(s.front.base)
    n0 = served(s)["feed"]
    runs = []
    ns_b = "/api/v1/namespaces/b/configmaps"
    for path, params in ((CM, {"labelSelector": "tier=x"}), (CM, {"labelSelector": "tier in (x,y),!gone"}),
                         (CM, {"fieldSelector": "metadata.namespace=b,metadata.name!=sel0"}),
                         (ns_b, {"fieldSelector": "metadata.name=sel2"}), (ns_b, {}),
                         ("/api/v1/namespaces/a/configmaps", {})):
        p = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "5", **params}
        runs.append(((path, params), Watch(s.front.base, p, path).begin(), Watch(s.full.base, p, path).begin()))
    wait_for_served = time.monotonic() + 10
    while served(s)["feed"] < n0 + len(runs):
        assert time.monotonic() < wait_for_served, served(s)
        time.sleep(0.1)
    assert served(s)["feed"] == n0 + len(runs)
    for i in range(4):   # leave the selector, come back, change data, gain a label, delete
        http.put(base + f"/sel{i}", json={"metadata": {"name": f"sel{i}", "labels": {"tier": "z"}}})
        http.put(base + f"/sel{i}", json={"metadata": {"name": f"sel{i}", "labels": {"tier": "y"}}, "data": {"a": "1"}})
        http.put(base + f"/sel{i}", json={"metadata": {"name": f"sel{i}", "labels": {"tier": "x", "gone": "1"}}})
        http.delete(base + f"/sel{i}")
    for params, got, want in runs:
        got.join(30), want.join(30)
        assert got.objects() == want.objects(), params
        assert want.objects() or params[0].endswith("/a/configmaps"), params
    assert any(e["type"] == "DELETED" for _, _, w in runs for e in w.events)
    keep.join(30)


def terminated(base: str) -> float:
    text = requests.get(base + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("apiserver_terminated_watchers_total{") and 'resource="configmaps"' in line)


def test_a_slow_client_is_terminated_the_others_get_everything(fslice):
    """S4.14 through the feed: a client that stops reading is terminated after the dispatch budget
    (apiserver_terminated_watchers_total on the front), the other clients of the same stream get every event,
    and the stream goes on (the feed is not the slow client's)."""
    from tests.test_watch_cache import _raw_watch
    s = fslice
    keep = keep_feed_open(s, 35)
    rv = list_rv(s.front.base)
    m0 = terminated(s.front.base)
    slow = _raw_watch(s.front.base, f"{CM}?watch=1&resourceVersion={rv}&timeoutSeconds=60")
    fast = Watch(s.front.base, {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "30"}).begin()
    time.sleep(0.5)
    http = requests.Session()
    payload = "x" * 20_000
    n = 400   # 8 MB: more than the socket buffers between the front and a client that does not read
    for i in range(n):
        r = http.post(s.front.base + "/api/v1/namespaces/c/configmaps",
                      json={"metadata": {"name": f"slow{i:03d}"}, "data": {"p": payload}})
        assert r.status_code == 201, r.text[:200]
    deadline = time.monotonic() + 20
    while terminated(s.front.base) <= m0:
        assert time.monotonic() < deadline, "the slow watcher was not terminated"
        time.sleep(0.2)
    slow.close()
    fast.join(40)
    names = [e["object"]["metadata"]["name"] for e in fast.events if e["type"] == "ADDED"]
    assert names == [f"slow{i:03d}" for i in range(n)]
    feeds = [f for f in report(s.front.base)["watches"]["configmaps"]["feeds"] if not f["retired"]]
    assert feeds and not feeds[0]["failed"]
    keep.join(40)
