"""The front (issue 11 §1) against a full replica: real etcd, K residency shards, a `--residency`-less
apiserver over the same etcd and key prefix (the reference), and `python -m apiserver --front --shards ...`.

Merged lists must be byte-identical to the full replica's at the same resourceVersion (a Hypothesis property
over selectors, limits, RVs, shard selectors and every page of the continuation), merged watches must carry the
same events in the same order, watch-list must end with one bookmark at or above every initial event, and a
shard that is down must fail the requests that need it with a Status while /readyz names it.
"""
from __future__ import annotations

import json
import os
import threading
import time

import pytest
import requests
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from machinery.shard_selector import FULL, ShardSelector, complementary
from tests.helpers import ApiserverProcess, crd, stop_all, wait_all_ready

CM = "/api/v1/configmaps"


class Slice:
    """K shards + the front + a full replica over one etcd and key prefix (started together)."""

    def __init__(self, etcd_endpoint: str, k: int, prefix: str, front_args: tuple[str, ...] = ()):
        self.selectors = complementary(k)
        self.shards = [ApiserverProcess(etcd_servers=etcd_endpoint, etcd_prefix=prefix, residency=s, name=f"shard{i}")
                       for i, s in enumerate(self.selectors)]
        self.full = ApiserverProcess(etcd_servers=etcd_endpoint, etcd_prefix=prefix, name="full")
        self.etcd_endpoint, self.prefix, self.front_args = etcd_endpoint, prefix, front_args
        self.front: ApiserverProcess | None = None

    def start(self) -> "Slice":
        """Started and ready; on a failure, whatever started is stopped before the error goes on."""
        try:
            procs = self.shards + [self.full]
            for p in procs:
                p.start()
            wait_all_ready(procs, 90)
            self.front = ApiserverProcess("--front", "--shards", ",".join(s.base for s in self.shards),
                                          *self.front_args, etcd_servers=self.etcd_endpoint, etcd_prefix=self.prefix,
                                          name="front")
            self.front.start().wait_ready(60)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        stop_all([p for p in [self.front, self.full, *self.shards] if p is not None and p.popen is not None],
                 strict=False)


@pytest.fixture(scope="module")
def slice2(current_etcd):
    s = Slice(current_etcd.endpoint, 2, f"/registry-front{os.getpid()}").start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def http():
    return requests.Session()


@pytest.fixture(scope="module")
def history(slice2, http):
    """Objects in three namespaces with labels, then updates and deletes; the RVs along the way."""
    f = slice2.front.base
    rvs = []
    for ns in ("a", "b", "c"):
        assert http.post(f + "/api/v1/namespaces", json={"metadata": {"name": ns}}).status_code == 201
    for i in range(45):
        ns = "abc"[i % 3]
        labels = {"x": str(i % 3)} | ({"y": "1"} if i % 4 == 0 else {})
        r = http.post(f + f"/api/v1/namespaces/{ns}/configmaps",
                      json={"metadata": {"name": f"cm{i:02d}", "labels": labels}, "data": {"i": str(i)}})
        assert r.status_code == 201, r.text
        if i % 9 == 8:
            rvs.append(r.json()["metadata"]["resourceVersion"])
    for i in range(0, 45, 5):
        ns = "abc"[i % 3]
        r = http.put(f + f"/api/v1/namespaces/{ns}/configmaps/cm{i:02d}",
                     json={"metadata": {"name": f"cm{i:02d}", "labels": {"x": "2"}}, "data": {"i": "u"}})
        assert r.status_code == 200, r.text
    for i in range(1, 45, 7):
        r = http.delete(f + f"/api/v1/namespaces/{'abc'[i % 3]}/configmaps/cm{i:02d}")
        assert r.status_code == 200, r.text
    r = http.post(f + "/api/v1/namespaces/c/configmaps", json={"metadata": {"name": "last"}})
    rvs.append(r.json()["metadata"]["resourceVersion"])
    # Both the full replica and the shards have seen the last write.
    for base in [slice2.full.base, *(s.base for s in slice2.shards)]:
        http.get(base + CM + f"?resourceVersion={rvs[-1]}&resourceVersionMatch=NotOlderThan&limit=1")
    return rvs


def pages(http, base: str, path: str, params: dict) -> list[bytes]:
    """Every page of a list, following its continue tokens (the bytes of each)."""
    out = []
    p = dict(params)
    for _ in range(200):
        r = http.get(base + path, params=p)
        out.append(r.content)
        if r.status_code != 200:
            return out
        cont = r.json()["metadata"].get("continue")
        if not cont:
            return out
        p = {k: v for k, v in params.items() if k not in ("resourceVersion", "resourceVersionMatch")}
        p["continue"] = cont
    raise AssertionError("more than 200 pages")


HALF = FULL // 2
SHARD_SELECTORS = [None, ShardSelector("uid", [(0, HALF)]), ShardSelector("uid", [(HALF // 2, HALF + HALF // 2)]),
                   ShardSelector("uid", [(HALF // 4, HALF // 3), (HALF + 5, FULL - 7)])]


@settings(max_examples=int(os.environ.get("FRONT_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ns=st.sampled_from([None, "a", "b"]),
       labels=st.sampled_from(["", "x=1", "x!=1", "x in (0,2)", "y", "!y", "x=0,y"]),
       fields=st.sampled_from(["", "metadata.name=cm07", "metadata.namespace=b", "metadata.name!=cm03"]),
       limit=st.sampled_from([0, 1, 2, 5, 13, 100]),
       rv_pick=st.integers(0, 10), match=st.sampled_from(["Exact", ""]),
       shard=st.sampled_from(SHARD_SELECTORS))
# Found by the property: a range inside one shard (proxied), a full last page, keys of the other shard after it:
# a full replica continues (and reports 0 remaining), the shard alone would not.
@example(ns=None, labels="", fields="", limit=1, rv_pick=2, match="Exact", shard=SHARD_SELECTORS[1])
@example(ns="b", labels="", fields="metadata.name=cm07", limit=1, rv_pick=1, match="Exact", shard=None)
def test_merged_lists_are_byte_identical_to_a_full_replica(slice2, http, history, ns, labels, fields, limit,
                                                           rv_pick, match, shard):
    """S2.14, S2.1, S2.9, S7: the same RV, the same bytes, page after page (continue tokens included)."""
    rv = history[rv_pick % len(history)]
    params = {"resourceVersion": rv}
    if match or not limit:
        params["resourceVersionMatch"] = "Exact"
    if limit:
        params["limit"] = str(limit)
    if labels:
        params["labelSelector"] = labels
    if fields:
        params["fieldSelector"] = fields
    if shard is not None:
        params["shardSelector"] = str(shard)
    path = f"/api/v1/namespaces/{ns}/configmaps" if ns else CM
    want = pages(http, slice2.full.base, path, params)
    got = pages(http, slice2.front.base, path, params)
    assert got == want, (params, path)
    assert b'"kind":"ConfigMapList"' in want[0]


def test_consistent_list_and_rv_semantics(slice2, http, history):
    """A consistent list (RV unset) through the front is the full replica's list at the RV it reports;
    RV=0 ignores limit (S1.19); NotOlderThan answers at or above the RV; a continue keeps the first page's RV."""
    f, full = slice2.front.base, slice2.full.base
    r = http.get(f + CM)
    assert r.status_code == 200
    rv = r.json()["metadata"]["resourceVersion"]
    assert int(rv) >= int(history[-1])
    assert r.content == http.get(full + CM, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"}).content
    # The merged list announces its length (its shards said their items' count and bytes): no chunk framing.
    assert r.headers.get("Content-Length") == str(len(r.content)) and "Transfer-Encoding" not in r.headers
    r0 = http.get(f + CM, params={"resourceVersion": "0", "limit": "3"}).json()
    assert "continue" not in r0["metadata"] and len(r0["items"]) > 3
    nt = http.get(f + CM, params={"resourceVersion": history[0], "resourceVersionMatch": "NotOlderThan"}).json()
    assert int(nt["metadata"]["resourceVersion"]) >= int(history[-1])
    p1 = http.get(f + CM, params={"limit": "4"}).json()
    p2 = http.get(f + CM, params={"limit": "4", "continue": p1["metadata"]["continue"]}).json()
    assert p2["metadata"]["resourceVersion"] == p1["metadata"]["resourceVersion"]
    assert p1["metadata"]["remainingItemCount"] == p2["metadata"]["remainingItemCount"] + 4
    # S1.12 / S1.13 as upstream: 400s from the front itself.
    bad = http.get(f + CM, params={"continue": p1["metadata"]["continue"], "resourceVersion": "5"})
    assert bad.status_code == 400 and bad.json()["reason"] == "BadRequest"
    bad = http.get(f + CM, params={"continue": "garbage"})
    assert bad.status_code == 400 and "invalid continue token" in bad.json()["message"]


def collect_watch(http, base: str, params: dict, out: list, started: threading.Event | None = None):
    r = http.get(base + CM, params=params, stream=True, timeout=60)
    assert r.status_code == 200, r.text
    if started is not None:
        started.set()
    for line in r.iter_lines():
        if line:
            out.append((time.monotonic(), json.loads(line)))


def ev_key(e: dict) -> tuple:
    md = e["object"]["metadata"]
    return e["type"], md.get("namespace"), md.get("name"), md["resourceVersion"]


def test_merged_watch_equals_a_direct_watch(slice2, http, history):
    """The same events, in the same order, no loss and no duplicate (S4.1, S4.6): merged from two shards
    vs one full replica's watch from the same RV; with a label selector too (transitions, S4.6)."""
    f, full = slice2.front.base, slice2.full.base
    start = http.get(f + CM).json()["metadata"]["resourceVersion"]
    runs = []
    for params in ({}, {"labelSelector": "x=1"}):
        p = {"watch": "1", "resourceVersion": start, "timeoutSeconds": "6", **params}
        got, want = [], []
        ts = [threading.Thread(target=collect_watch, args=(http, b, p, o)) for b, o in ((f, got), (full, want))]
        runs.append((ts, got, want))
        for t in ts:
            t.start()
    time.sleep(0.5)
    for i in range(24):
        ns = "abc"[i % 3]
        name = f"w{i:02d}"
        http.post(f + f"/api/v1/namespaces/{ns}/configmaps",
                  json={"metadata": {"name": name, "labels": {"x": str(i % 2)}}})
        if i % 3 == 0:
            http.put(f + f"/api/v1/namespaces/{ns}/configmaps/{name}",
                     json={"metadata": {"name": name, "labels": {"x": "1"}}, "data": {"v": "1"}})
        if i % 4 == 0:
            http.delete(f + f"/api/v1/namespaces/{ns}/configmaps/{name}")
    for ts, got, want in runs:
        for t in ts:
            t.join()
        assert [ev_key(e) for _, e in got] == [ev_key(e) for _, e in want]
        assert len(want) >= 8
        rvs = [int(e["object"]["metadata"]["resourceVersion"]) for _, e in got]
        assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
    # The frames are the full replica's frames, byte for byte.
    ts, got, want = runs[0]
    assert [json.dumps(e, sort_keys=True) for _, e in got] == [json.dumps(e, sort_keys=True) for _, e in want]


def test_custom_resource_list_through_the_front(slice2, http, history):
    """A custom resource's list carries its metadata after the items (S6.4): through the front it is the full
    replica's list, bytes and length, its Content-Length announced before the items arrive."""
    f, full = slice2.front.base, slice2.full.base
    r = http.post(full + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                  json=crd("front.example.test", "gizmos", "Gizmo"))
    assert r.status_code == 201, r.text
    path = "/apis/front.example.test/v1/namespaces/a/gizmos"
    deadline = time.time() + 30
    while http.get(f + path).status_code != 200 or any(http.get(s.base + path).status_code != 200
                                                       for s in slice2.shards):
        assert time.time() < deadline, "the CRD is not served everywhere"
        time.sleep(0.2)
    for i in range(12):
        r = http.post(f + path, json={"apiVersion": "front.example.test/v1", "kind": "Gizmo",
                                      "metadata": {"name": f"g{i:02d}"}, "spec": {"n": i}})
        assert r.status_code == 201, r.text
    for p in (path, "/apis/front.example.test/v1/gizmos"):
        r = http.get(f + p)
        assert r.status_code == 200 and len(r.json()["items"]) == 12
        rv = r.json()["metadata"]["resourceVersion"]
        assert r.content == http.get(full + p, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"}).content
        assert r.headers.get("Content-Length") == str(len(r.content))


def test_watch_list_through_the_front(slice2, http, history):
    """S5.4-S5.5: initial events from every shard (the state at one RV: the full replica's list at it), then one
    bookmark with the initial-events-end annotation at an RV >= every initial event's."""
    got = []
    collect_watch(http, slice2.front.base, {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                                            "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "2"}, got)
    evs = [e for _, e in got]
    ends = [i for i, e in enumerate(evs) if e["type"] == "BOOKMARK"
            and e["object"]["metadata"].get("annotations", {}).get("k8s.io/initial-events-end") == "true"]
    assert len(ends) == 1
    initial, end = evs[:ends[0]], evs[ends[0]]
    assert all(e["type"] == "ADDED" for e in initial)
    end_rv = end["object"]["metadata"]["resourceVersion"]
    assert all(int(e["object"]["metadata"]["resourceVersion"]) <= int(end_rv) for e in initial)
    listed = http.get(slice2.full.base + CM, params={"resourceVersion": end_rv, "resourceVersionMatch": "Exact"}).json()
    assert [json.dumps(e["object"], sort_keys=True) for e in initial] == [
        json.dumps(dict(o, kind="ConfigMap", apiVersion="v1"), sort_keys=True) for o in listed["items"]]


def test_watch_timeouts_bookmarks_and_410(slice2, http, history, current_etcd):
    """S4.8: timeoutSeconds ends the merged watch on time; S4.12: no bookmark at or below the start RV; a
    watch from a compacted RV gets the 410 ERROR event the shards answer (as the full replica)."""
    f = slice2.front.base
    t0 = time.monotonic()
    got = []
    collect_watch(http, f, {"watch": "1", "resourceVersion": history[-1], "allowWatchBookmarks": "true",
                            "timeoutSeconds": "3"}, got)
    took = time.monotonic() - t0
    assert 2.5 < took < 6, took
    for _, e in got:
        if e["type"] == "BOOKMARK":
            assert int(e["object"]["metadata"]["resourceVersion"]) > int(history[-1])
    # 410: the same Status as the full replica for an RV below every shard's window.
    w_front, w_full = [], []
    for base, out in ((f, w_front), (slice2.full.base, w_full)):
        collect_watch(http, base, {"watch": "1", "resourceVersion": "2", "timeoutSeconds": "2"}, out)
    assert len(w_front) == len(w_full) == 1 and w_front[0][1]["type"] == w_full[0][1]["type"] == "ERROR"
    got, want = w_front[0][1]["object"], w_full[0][1]["object"]
    # The message names the oldest RV the answering cache holds ("too old resource version: 2 (N)"): N is each
    # process's own (two kube-apiservers differ the same way).
    assert got["code"] == want["code"] == 410 and got["reason"] == want["reason"] == "Expired"
    assert got["message"].split(" (")[0] == want["message"].split(" (")[0] == "too old resource version: 2"


def test_writes_and_gets_through_the_front(slice2, http, history):
    f, full = slice2.front.base, slice2.full.base
    r = http.post(f + "/api/v1/namespaces/a/configmaps", json={"metadata": {"name": "wg"}, "data": {"a": "b"}})
    assert r.status_code == 201
    g = http.get(f + "/api/v1/namespaces/a/configmaps/wg")
    assert g.status_code == 200 and g.json() == r.json()
    assert http.get(full + "/api/v1/namespaces/a/configmaps/wg").content == g.content
    nf = http.get(f + "/api/v1/namespaces/a/configmaps/nope")
    assert nf.status_code == 404 and nf.json()["reason"] == "NotFound"
    conflict = http.post(f + "/api/v1/namespaces/a/configmaps", json={"metadata": {"name": "wg"}})
    assert conflict.status_code == 409
    # A resource every shard keeps whole (namespaces) is proxied to one shard.
    assert http.get(f + "/api/v1/namespaces").content == http.get(full + "/api/v1/namespaces", params={
        "resourceVersion": http.get(f + "/api/v1/namespaces").json()["metadata"]["resourceVersion"],
        "resourceVersionMatch": "Exact"}).content


def etcd_requests(base: str, operation: str, resource: str) -> int:
    text = requests.get(base + "/metrics", timeout=10).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("etcd_requests_total{") and f'operation="{operation}"' in line
               and f'type="{resource}"' in line)


def test_a_front_knows_namespaces_without_reading_etcd(slice2, http, history):
    """NamespaceLifecycle in a front (no watch cache): the namespaces' names come from its own list and watch
    (storage.reflector), as upstream's admission reads an informer, so a create does not read its namespace from
    etcd; a namespace created a moment ago is still found (a name not known yet is asked of etcd), a missing one
    is upstream's 404 (`namespaces "x" not found`, as tests/test_http_core.py asserts for one process)."""
    f = slice2.front.base
    before = etcd_requests(f, "get", "namespaces")
    for i in range(5):
        r = http.post(f + "/api/v1/namespaces/b/configmaps", json={"metadata": {"name": f"known{i}"}})
        assert r.status_code == 201, r.text
    assert etcd_requests(f, "get", "namespaces") == before
    # Created and used at once: known from the watch, or read from etcd; never a false 404.
    assert http.post(f + "/api/v1/namespaces", json={"metadata": {"name": "fresh"}}).status_code == 201
    r = http.post(f + "/api/v1/namespaces/fresh/configmaps", json={"metadata": {"name": "x"}})
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 10
    while True:   # once the front's watch has the new namespace, creates in it read no namespace from etcd
        before = etcd_requests(f, "get", "namespaces")
        r = http.post(f + "/api/v1/namespaces/fresh/configmaps", json={"metadata": {"generateName": "y"}})
        assert r.status_code == 201, r.text
        if etcd_requests(f, "get", "namespaces") == before:
            break
        assert time.monotonic() < deadline, "the front's namespace reflector never saw namespace fresh"
        time.sleep(0.2)
    missing = http.post(f + "/api/v1/namespaces/nowhere/configmaps", json={"metadata": {"name": "x"}})
    assert missing.status_code == 404, missing.text
    assert missing.json()["reason"] == "NotFound"
    assert missing.json()["message"] == 'namespaces "nowhere" not found'


def test_a_front_updates_from_its_recent_copy_and_retries_a_stale_one(slice2, http, history):
    """A front has no watch cache to start a write from (upstream GuaranteedUpdate's cachedExistingObject): it
    keeps the objects it last wrote or read, so updating an object it created is one etcd Txn, no Range. A copy
    made stale by another server's write is caught by the Txn's resourceVersion compare and the write retries
    from etcd's object: the answer is as if there were no copy (the other writer's field kept, the RV new), and
    a client's own stale resourceVersion still gets upstream's 409."""
    f, full = slice2.front.base, slice2.full.base
    cm = f + "/api/v1/namespaces/a/configmaps"
    created = http.post(cm, json={"metadata": {"name": "recent"}, "data": {"n": "0"}})
    assert created.status_code == 201, created.text
    before = etcd_requests(f, "get", "configmaps")
    for i in range(1, 4):
        r = http.patch(cm + "/recent", json={"data": {"n": str(i)}},
                       headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200 and r.json()["data"]["n"] == str(i), r.text
    assert etcd_requests(f, "get", "configmaps") == before   # every write started from the front's copy
    held = http.get(f + "/debug/residency").json()["recentObjects"]   # what the copies hold, reported
    assert held["objects"] >= 1 and 0 < held["bytes"] <= held["maxBytes"] == 16 << 20, held
    # Another server writes: the front's copy is stale; the front's next write still builds on the other's.
    other = http.patch(full + "/api/v1/namespaces/a/configmaps/recent", json={"data": {"other": "x"}},
                       headers={"Content-Type": "application/merge-patch+json"})
    assert other.status_code == 200, other.text
    r = http.patch(cm + "/recent", json={"data": {"n": "4"}}, headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    assert r.json()["data"] == {"n": "4", "other": "x"}
    assert int(r.json()["metadata"]["resourceVersion"]) > int(other.json()["metadata"]["resourceVersion"])
    assert http.get(full + "/api/v1/namespaces/a/configmaps/recent", params={
        "resourceVersion": r.json()["metadata"]["resourceVersion"], "resourceVersionMatch": "NotOlderThan"}
    ).json()["data"] == {"n": "4", "other": "x"}
    # A PUT with the client's stale RV: 409 Conflict, as upstream, whatever copy the front held.
    stale = dict(created.json(), data={"n": "5"})
    c = http.put(cm + "/recent", json=stale)
    assert c.status_code == 409 and c.json()["reason"] == "Conflict", c.text
    # Deleted and created again elsewhere: the front's copy (of the old object) is not what it updates.
    assert http.delete(full + "/api/v1/namespaces/a/configmaps/recent").status_code == 200
    again = http.post(full + "/api/v1/namespaces/a/configmaps", json={"metadata": {"name": "recent"},
                                                                     "data": {"new": "1"}})
    assert again.status_code == 201, again.text
    r = http.patch(cm + "/recent", json={"data": {"n": "6"}}, headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    assert r.json()["data"] == {"new": "1", "n": "6"} and r.json()["metadata"]["uid"] == again.json()["metadata"]["uid"]


def test_a_shard_down_fails_what_needs_it(current_etcd, http):
    """A shard down: unsharded lists and watches fail with a Status (504, as for an unreachable etcd), never a
    partial answer; a list inside the other shard's range still works; /readyz fails naming the shard; GETs
    and writes (etcd) go on."""
    s = Slice(current_etcd.endpoint, 2, f"/registry-frontdown{os.getpid()}").start()
    try:
        f = s.front.base
        http.post(f + "/api/v1/namespaces", json={"metadata": {"name": "d"}})
        for i in range(6):
            http.post(f + "/api/v1/namespaces/d/configmaps", json={"metadata": {"name": f"c{i}"}})
        assert http.get(f + "/readyz").status_code == 200
        victim = s.shards[1]
        victim.stop()
        deadline = time.monotonic() + 10
        while http.get(f + "/readyz").status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        rz = http.get(f + "/readyz", params={"verbose": "1"})
        host = victim.base.split("//")[1]
        assert rz.status_code == 500 and f"[-]shard-{host} failed" in rz.text, rz.text
        assert f"[+]shard-{s.shards[0].base.split('//')[1]} ok" in rz.text
        for params in ({}, {"limit": "2"}, {"watch": "1"}):
            r = http.get(f + CM, params=params, timeout=10)
            assert r.status_code == 504, r.text
            st = r.json()
            assert st["kind"] == "Status" and st["reason"] == "Timeout" and host in st["message"]
        ok = http.get(f + CM, params={"shardSelector": str(s.selectors[0])})
        assert ok.status_code == 200
        assert http.get(f + "/api/v1/namespaces/d/configmaps/c1").status_code == 200
        assert http.post(f + "/api/v1/namespaces/d/configmaps", json={"metadata": {"name": "more"}}).status_code == 201
    finally:
        s.stop()
