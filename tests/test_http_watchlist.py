"""Watch-list (S5) and watch validation, run differentially: our apiserver with the watch cache, without it
(where watch-list is refused as upstream with the WatchList gate off, S5.3, docs/differences.md), and the
real kube-apiserver v1.37.2 (conftest.differential_mode)."""
from __future__ import annotations

import json
import time

import pytest

from tests.test_http_core import cm, status_of

WATCH_LIST = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
              "allowWatchBookmarks": "true", "timeoutSeconds": "20"}


@pytest.fixture
def api(differential_api):
    return differential_api


def rv_of(obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


class Events:
    """The events of one watch response, read through one line iterator (a second `iter_lines` would
    drop what the first one buffered)."""

    def __init__(self, resp):
        self.lines = resp.iter_lines()

    def read(self, n: int, timeout: float = 10) -> list[dict]:
        out: list[dict] = []
        deadline = time.monotonic() + timeout
        for line in self.lines:
            if line:
                out.append(json.loads(line))
            if len(out) >= n or time.monotonic() > deadline:
                break
        return out


def check_watch_list(api, base: str, params: dict, objs: dict[str, int]) -> None:
    """Initial ADDED events in key order with their own RVs, one end bookmark at least as new, then live."""
    w = api.get(base, params=params, stream=True)
    assert w.status_code == 200, w.text
    events = Events(w)
    try:
        evs = events.read(len(objs) + 1)
        adds, bm = evs[:-1], evs[-1]
        assert [e["type"] for e in adds] == ["ADDED"] * len(objs)
        names = [e["object"]["metadata"]["name"] for e in adds]
        assert names == sorted(objs)                                             # S5.5 key order
        assert {n: rv_of(e["object"]) for n, e in zip(names, adds)} == objs      # own RVs
        assert bm["type"] == "BOOKMARK"
        assert bm["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}   # S5.4
        assert rv_of(bm["object"]) >= max(objs.values())                         # S5.6
        o = api.post(base, cm(f"live{len(objs)}", v="1")).json()
        live = events.read(1)[0]
        assert live["type"] == "ADDED" and rv_of(live["object"]) == rv_of(o) > rv_of(bm["object"])
        objs[o["metadata"]["name"]] = rv_of(o)
    finally:
        w.close()


def test_watch_list_initial_events_end_bookmark_and_live(api, namespace):
    """S5.1, S5.4-S5.7: from RV unset, RV=0 and a long-gone RV=1 (never a 410: the full state)."""
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    objs = {name: rv_of(api.post(base, cm(name, v="1")).json()) for name in ["m", "b", "z", "a-b", "a", "k"]}
    if api.mode == "etcd":  # ours without the cache: as upstream with the WatchList gate off (S5.3)
        r = api.get(base, params=WATCH_LIST)
        assert r.status_code == 422, r.text
        assert "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled" in \
            status_of(r)["message"]
        return
    check_watch_list(api, base, dict(WATCH_LIST), objs)
    check_watch_list(api, base, dict(WATCH_LIST, resourceVersion="0"), objs)
    check_watch_list(api, base, dict(WATCH_LIST, resourceVersion="1"), objs)


@pytest.mark.parametrize("params,field,msg", [
    ({"sendInitialEvents": "true"}, "resourceVersionMatch",
     "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),                 # S1.8
    ({"sendInitialEvents": "true", "resourceVersionMatch": "Exact", "resourceVersion": "5"},
     "resourceVersionMatch", "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
    ({"resourceVersionMatch": "NotOlderThan", "resourceVersion": "5"}, "resourceVersionMatch",
     "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"),          # S1.9
])
def test_watch_option_validation_is_422(api, namespace, params, field, msg):
    """S1.8, S1.9: 422 Invalid before any stream."""
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"watch": "1", **params}, timeout=10)
    assert r.status_code == 422, r.text
    st = r.json()
    assert st["reason"] == "Invalid" and st["details"]["kind"] == "ListOptions"
    assert msg in st["message"]
    assert any(c["field"] == field for c in st["details"]["causes"])
