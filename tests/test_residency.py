"""Shard residency (issue 4) and KEP-5866 shardSelector (S7), against real apiserver processes
over a real current etcd: a full replica and two shards with complementary residencies."""
from __future__ import annotations

import json
import os
import time

import pytest

from machinery.shard_selector import complementary
from tests.helpers import Api, start_apiserver, stop_all
from tests.helpers.metrics import scrape as metric

N_CM = 60
N_ROLES = 10


@pytest.fixture(scope="module")
def cluster(current_etcd):
    prefix = f"/registry-res{os.getpid()}"
    full_proc = start_apiserver(current_etcd.endpoint, prefix)
    full = Api(full_proc.base)
    ns = "res"
    assert full.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
    for i in range(N_CM):
        assert full.post(f"/api/v1/namespaces/{ns}/configmaps",
                         {"metadata": {"name": f"cm{i:03d}", "labels": {"i": str(i % 4)}},
                          "data": {"x": "y" * 100}}).status_code == 201
    for i in range(N_ROLES):
        assert full.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
                         {"metadata": {"name": f"r{i}"}, "rules": []}).status_code == 201
    sels = complementary(2)
    shards = []
    procs = [full_proc]
    for sel in sels:
        p = start_apiserver(current_etcd.endpoint, prefix, residency=sel)
        procs.append(p)
        shards.append((Api(p.base), sel))
    # Wait until every shard has ingested the full replica's revision.
    rev = int(full.get(f"/api/v1/namespaces/{ns}/configmaps").json()["metadata"]["resourceVersion"])
    deadline = time.monotonic() + 20
    for api, _ in shards:
        while time.monotonic() < deadline:
            rep = api.get("/debug/residency").json()["resources"].get("configmaps", {})
            if rep.get("ready") and rep.get("rv", 0) >= rev:
                break
            time.sleep(0.1)
    yield full, shards, ns
    stop_all(procs)


def test_shards_hold_complementary_parts(cluster):
    full, shards, ns = cluster
    counts = []
    for api, sel in shards:
        rep = api.get("/debug/residency").json()
        assert rep["residency"] == str(sel)
        cm = rep["resources"]["configmaps"]
        assert cm["partial"] is True and cm["ready"] is True
        counts.append(cm["objects"])
        # Fully resident by default: RBAC and namespaces (documented default).
        assert rep["resources"]["roles.rbac.authorization.k8s.io"]["partial"] is False
        assert rep["resources"]["roles.rbac.authorization.k8s.io"]["objects"] >= N_ROLES
    assert sum(counts) >= N_CM and all(0 < c < N_CM for c in counts)
    full_rep = full.get("/debug/residency").json()["resources"]["configmaps"]
    assert full_rep["partial"] is False and sum(counts) == full_rep["objects"]


def test_union_of_shard_lists_equals_the_full_list(cluster):
    """Issue 4 point 5: no object in two shards, none missing, same RV; shardInfo echoed (S7.3)."""
    full, shards, ns = cluster
    whole = full.get(f"/api/v1/namespaces/{ns}/configmaps").json()
    seen: dict[str, int] = {}
    for api, sel in shards:
        before = metric(api, "apiserver_residency_delegated_total")
        r = api.get(f"/api/v1/namespaces/{ns}/configmaps", params={"shardSelector": str(sel)})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["metadata"]["shardInfo"] == {"selector": str(sel)}
        assert doc["metadata"]["resourceVersion"] == whole["metadata"]["resourceVersion"]
        assert metric(api, "apiserver_residency_delegated_total") == before  # served from the cache
        for it in doc["items"]:
            assert it["metadata"]["name"] not in seen
            seen[it["metadata"]["name"]] = int(it["metadata"]["resourceVersion"])
            assert sel.matches(it["metadata"]["uid"], ns)
    assert seen == {i["metadata"]["name"]: int(i["metadata"]["resourceVersion"]) for i in whole["items"]}


def test_requests_outside_the_residency_go_to_etcd_and_are_counted(cluster):
    full, shards, ns = cluster
    api, sel = shards[0]
    other = shards[1][1]
    before = metric(api, "apiserver_residency_delegated_total", resource="configmaps")
    unsharded = api.get(f"/api/v1/namespaces/{ns}/configmaps").json()
    assert len(unsharded["items"]) == N_CM  # complete, from etcd, never partial
    r = api.get(f"/api/v1/namespaces/{ns}/configmaps", params={"shardSelector": str(other)}).json()
    assert r["metadata"]["shardInfo"] == {"selector": str(other)}
    assert all(other.matches(i["metadata"]["uid"], ns) for i in r["items"])
    assert metric(api, "apiserver_residency_delegated_total", resource="configmaps") == before + 2


def test_sharded_paging_counts_only_matching_items(cluster):
    """remainingItemCount counts only matching items (issue 4; S2.9, S7.14)."""
    full, shards, ns = cluster
    api, sel = shards[0]
    total = len(api.get(f"/api/v1/namespaces/{ns}/configmaps", params={"shardSelector": str(sel)}).json()["items"])
    page = api.get(f"/api/v1/namespaces/{ns}/configmaps", params={"shardSelector": str(sel), "limit": 5}).json()
    assert len(page["items"]) == 5
    assert page["metadata"]["remainingItemCount"] == total - 5
    names = [i["metadata"]["name"] for i in page["items"]]
    while page["metadata"].get("continue"):
        page = api.get(f"/api/v1/namespaces/{ns}/configmaps",
                       params={"shardSelector": str(sel), "limit": 5, "continue": page["metadata"]["continue"]}).json()
        names += [i["metadata"]["name"] for i in page["items"]]
    assert len(names) == total == len(set(names))


def test_invalid_shard_selector_is_400(cluster):
    """S7.6, S7.9 (upstream answers 500; we answer 400, documented)."""
    full, shards, ns = cluster
    r = full.get(f"/api/v1/namespaces/{ns}/configmaps",
                 params={"shardSelector": "shardRange(object.metadata.uid, '0x0', '0xffffffffffffffff')"})
    assert r.status_code == 400
    body = r.json()
    assert body["reason"] == "BadRequest" and body["message"].startswith("invalid shard selector: ")


def test_sharded_watch_list_gets_only_its_range_and_bookmarks(cluster):
    """S7.13: sharded watch-lists receive only their range, plus bookmarks; metrics S7.15."""
    full, shards, ns = cluster
    api, sel = shards[0]
    r = api.get(f"/api/v1/namespaces/{ns}/configmaps",
                params={"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
                        "allowWatchBookmarks": "true", "shardSelector": str(sel), "timeoutSeconds": "4"},
                stream=True)
    # The same sharded watch on the full replica: there the watcher itself rejects the other
    # range's events (on the shard they never enter the cache).
    r_full = full.get(f"/api/v1/namespaces/{ns}/configmaps",
                      params={"watch": "1", "resourceVersion": "0", "shardSelector": str(sel),
                              "timeoutSeconds": "4"}, stream=True)
    time.sleep(1)
    assert metric(api, "apiserver_watch_shards_total", resource="configmaps") >= 1
    filtered_before = metric(full, "apiserver_watch_filtered_events_total", resource="configmaps")
    created = []
    for i in range(8):
        created.append(full.post(f"/api/v1/namespaces/{ns}/configmaps",
                                 {"metadata": {"name": f"w{i}"}}).json())
    evs = [json.loads(l) for l in r.iter_lines() if l]
    end = [i for i, e in enumerate(evs) if e["type"] == "BOOKMARK"
           and e["object"]["metadata"].get("annotations", {}).get("k8s.io/initial-events-end") == "true"]
    assert end, evs
    live = [e for e in evs[end[0] + 1:] if e["type"] == "ADDED"]
    expect = sorted(c["metadata"]["name"] for c in created if sel.matches(c["metadata"]["uid"], ns))
    assert sorted(e["object"]["metadata"]["name"] for e in live) == expect
    for e in evs:
        if e["type"] != "BOOKMARK":
            assert sel.matches(e["object"]["metadata"]["uid"], ns)
    full_evs = [json.loads(l) for l in r_full.iter_lines() if l]
    assert sorted(e["object"]["metadata"]["name"] for e in full_evs
                  if e["type"] == "ADDED" and e["object"]["metadata"]["name"].startswith("w")) == expect
    assert metric(full, "apiserver_watch_filtered_events_total", resource="configmaps") - filtered_before \
        >= len(created) - len(expect)
    for c in created:
        full.delete(f"/api/v1/namespaces/{ns}/configmaps/{c['metadata']['name']}")


def test_residency_readiness_and_flag_validation(cluster):
    full, shards, ns = cluster
    api, sel = shards[0]
    r = api.get("/readyz", params={"verbose": "1"})
    assert r.status_code == 200 and "[+]watch-cache ok" in r.text
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "apiserver", "--residency", "shardRange(object.metadata.uid, 'x', 'y')"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "--residency: invalid shard selector" in p.stderr


def test_residency_report_after_a_collection_and_trim(cluster):
    """`?gc=1&trim=1` (bench.vs_upstream reads RSS after it): a collection and glibc's malloc_trim, then the same
    report, RSS included."""
    full, _, ns = cluster
    for _ in range(3):   # some garbage to give back
        assert full.get(f"/api/v1/namespaces/{ns}/configmaps").status_code == 200
    r = full.get("/debug/residency", params={"gc": "1", "trim": "1"})
    assert r.status_code == 200
    rep = r.json()
    assert rep["resources"]["configmaps"]["objects"] >= N_CM and rep["process"]["rss_bytes"] > 0


def test_get_of_a_non_resident_object_is_not_a_false_404(cluster):
    """GETs on a partially resident resource go to etcd (with RV=0 too), counted."""
    full, shards, ns = cluster
    for api, sel in shards:
        before = metric(api, "apiserver_residency_delegated_total", verb="get")
        for i in range(5):
            r = api.get(f"/api/v1/namespaces/{ns}/configmaps/cm{i:03d}", params={"resourceVersion": "0"})
            assert r.status_code == 200, r.text
        assert metric(api, "apiserver_residency_delegated_total", verb="get") == before + 5


def test_uid_is_read_from_stored_bytes_without_decoding():
    """The ingest filter reads metadata.uid from the stored layout; nested uids never fool it."""
    from cache.residency import uid_of
    from storage.store import encode_value
    obj = {"apiVersion": "g/v1", "kind": "W", "spec": {"uid": "spec-uid"},
           "metadata": {"ownerReferences": [{"uid": "owner-uid"}], "name": "w", "uid": "meta-uid"}}
    assert uid_of(encode_value(obj)) == "meta-uid"
    no_uid = {"kind": "W", "metadata": {"name": "w", "ownerReferences": [{"uid": "owner-uid"}]}}
    assert uid_of(encode_value(no_uid)) is None   # caller decodes
    assert uid_of(b'{"spec":{"uid":"x"},"metadata":{"uid":"y"}}') is None
