"""KEP-5866 `shardSelector` over HTTP (S7), run differentially: our apiserver (cache on and off) and the
real kube-apiserver v1.37.2 with the `ShardedListAndWatch` gate on (conftest.differential_mode)."""
from __future__ import annotations

import pytest

from machinery.shard_selector import parse_shard_selector
from tests.test_http_core import cm, read_events, status_of

LOW = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
HIGH = "shardRange(object.metadata.uid, '0x8000000000000000', '0xffffffffffffffff')"


@pytest.fixture
def api(differential_api):
    return differential_api


def in_range(sel: str, obj) -> bool:
    """Our matcher (FNV-1a 64 of the UID, S7.10, checked against Go in test_fnv.py) as the reference."""
    return parse_shard_selector(sel).matches(obj["metadata"]["uid"], obj["metadata"].get("namespace") or "")


def test_complementary_shards_partition_the_list(api, namespace):
    """S7.3, S7.10-S7.12: each object is in exactly one of two complementary shards; the union is the
    full list; the response echoes the selector; label selectors AND with the shard."""
    for i in range(24):
        r = api.post(f"/api/v1/namespaces/{namespace}/configmaps",
                     dict(cm(f"s{i:02d}"), metadata={"name": f"s{i:02d}", "labels": {"even": str(i % 2 == 0)}}))
        assert r.status_code == 201, r.text
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    full = api.get(base).json()
    names = {}
    for sel in (LOW, HIGH):
        body = api.get(base, params={"shardSelector": sel}).json()
        assert body["metadata"]["shardInfo"] == {"selector": sel}
        assert all(in_range(sel, o) for o in body["items"])
        names[sel] = [o["metadata"]["name"] for o in body["items"]]
    assert not set(names[LOW]) & set(names[HIGH])
    assert sorted(names[LOW] + names[HIGH]) == [o["metadata"]["name"] for o in full["items"]]
    both = api.get(base, params={"shardSelector": LOW, "labelSelector": "even=True"}).json()["items"]
    assert [o["metadata"]["name"] for o in both] == [n for n in names[LOW] if int(n[1:]) % 2 == 0]


def test_sharded_paging_resends_the_selector(api, namespace):
    """S7.14: continue tokens carry no shard; the same shardSelector with each page gives the shard."""
    for i in range(20):
        api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm(f"p{i:02d}"))
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    whole = [o["metadata"]["name"] for o in api.get(base, params={"shardSelector": LOW}).json()["items"]]
    got, token = [], None
    while True:
        params = {"shardSelector": LOW, "limit": "3"}
        if token:
            params["continue"] = token
        page = api.get(base, params=params).json()
        got += [o["metadata"]["name"] for o in page["items"]]
        token = page["metadata"].get("continue")
        if not token:
            break
    assert got == whole


def test_sharded_watch_sees_only_its_range(api, namespace):
    """S7.13: a sharded watch gets the events of objects in its range only."""
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    rv = api.get(base).json()["metadata"]["resourceVersion"]
    w = api.get(base, params={"watch": "1", "resourceVersion": rv, "shardSelector": LOW, "timeoutSeconds": "10"},
                stream=True)
    assert w.status_code == 200
    created = [api.post(base, cm(f"w{i:02d}")).json() for i in range(16)]
    want = [o["metadata"]["name"] for o in created if in_range(LOW, o)]
    assert want, "16 random UIDs all outside half the hash space"
    evs = read_events(w, len(want))
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [("ADDED", n) for n in want]


@pytest.mark.parametrize("sel,message", [
    ("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
     'invalid shard selector: hexStart must be a 0x-prefixed 16-digit hex value, got "0x0" '
     '(did you mean "0x0000000000000000"?)'),
])
def test_invalid_shard_selector(api, namespace, sel, message):
    """S7.8/S7.9: upstream's message; upstream answers 500 without a reason, we answer 400 BadRequest
    (docs/differences.md), asserted on both sides."""
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"shardSelector": sel})
    st = status_of(r)
    assert st["message"] == message
    if api.mode == "kube":
        assert r.status_code == 500 and "reason" not in st
    else:
        assert r.status_code == 400 and st["reason"] == "BadRequest"
