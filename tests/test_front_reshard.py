"""Resharding without a gap (issue 11 §4): one shard's range split in two while clients watch through the front.

Procedure (what the test does, and what an operator does):
1. start a new shard for half of the old shard's range (`--residency` = that half) and wait for its /readyz;
2. move the boundary: `PUT /debug/shards` on the front with the new map (the old shard keeps the other half);
   the front checks every shard is ready, every range is inside its shard's residency, the ranges partition
   the hash space; new requests use the new map; merged watches that take bookmarks end at a bookmark once
   every old shard has passed the current revision, so their clients resume from there through the new map
   (no relist); the others keep their old shards until their timeout;
3. to free the old shard's memory, replace it the same way: start one with the narrower `--residency`, PUT the
   map naming it, stop the old process.

Clients here are reflector-like loops (watch from the last RV seen, again when the watch ends; a 410 would
mean a relist) with watch-list on and off; their events are compared with a direct watch on a full replica.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest
import requests

from machinery.shard_selector import FULL, ShardSelector
from tests.helpers import ApiserverProcess
from tests.test_clientgo import MODULE, clientgo_binary  # noqa: F401  (a fixture, reused)
from tests.test_front import Slice

CM = "/api/v1/namespaces/r/configmaps"


class Reflector(threading.Thread):
    """Watch, and re-watch from the last RV when the server ends the watch; count watches, 410s and lists."""

    def __init__(self, base: str, rv: str | None, watch_list: bool, stop: threading.Event):
        super().__init__(daemon=True)
        self.base, self.rv, self.watch_list, self.stop_ = base, rv, watch_list, stop
        self.events: list[dict] = []
        self.initial: list[dict] = []
        self.watches = 0
        self.errors: list[dict] = []

    def run(self) -> None:
        try:
            self._run()
        except requests.RequestException as e:
            if not self.stop_.is_set():   # the servers stop at the end of the test: not an error then
                self.errors.append({"exception": repr(e)})

    def _run(self) -> None:
        s = requests.Session()
        while not self.stop_.is_set():
            p = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "30"}
            first = self.rv is None
            if first and self.watch_list:
                p |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
            else:
                p["resourceVersion"] = self.rv
            self.watches += 1
            with s.get(self.base + CM, params=p, stream=True, timeout=60) as r:
                assert r.status_code == 200, r.text
                in_initial = first and self.watch_list
                for line in r.iter_lines():
                    if not line:
                        continue
                    e = json.loads(line)
                    if e["type"] == "ERROR":
                        self.errors.append(e)
                        return
                    self.rv = e["object"]["metadata"]["resourceVersion"]
                    if e["type"] == "BOOKMARK":
                        if e["object"]["metadata"].get("annotations", {}).get("k8s.io/initial-events-end"):
                            in_initial = False
                        continue
                    (self.initial if in_initial else self.events).append(e)
                    if self.stop_.is_set():
                        return


def key(e: dict) -> tuple:
    md = e["object"]["metadata"]
    return e["type"], md["name"], md["resourceVersion"]


def split(s: Slice, http: requests.Session, etcd: str, extra: list[ApiserverProcess],
          clients: list[Reflector] = ()) -> list[int]:
    """The procedure: shard 1's range [h, FULL) split in two (a new shard for the upper half, the old one keeps
    the lower half), then the old shard replaced by one with the lower half as its residency and stopped.
    Returns each client's watch count before the boundary moved."""
    h = FULL // 2
    upper = ShardSelector("uid", [(h + h // 2, FULL)])
    lower = ShardSelector("uid", [(h, h + h // 2)])
    # 1. A new shard for the upper half; ready before it is used.
    c = ApiserverProcess(etcd_servers=etcd, etcd_prefix=s.prefix, residency=upper, name="new")
    extra.append(c)
    c.start().wait_ready(60)
    watches_before = [cl.watches for cl in clients]
    # 2. Move the boundary.
    f = s.front.base
    r = http.put(f + "/debug/shards", json={"shards": [{"url": s.shards[0].base},
                                                        {"url": s.shards[1].base, "range": str(lower)},
                                                        {"url": c.base}]})
    assert r.status_code == 200, r.text
    assert [e["range"] for e in r.json()["shards"]] == [str(s.selectors[0]), str(lower), str(upper)]
    time.sleep(1.5)
    # 3. Replace the old shard by one with the narrower residency, then stop it.
    b2 = ApiserverProcess(etcd_servers=etcd, etcd_prefix=s.prefix, residency=lower, name="b2")
    extra.append(b2)
    b2.start().wait_ready(60)
    r = http.put(f + "/debug/shards", json={"shards": [{"url": s.shards[0].base}, {"url": b2.base},
                                                        {"url": c.base}]})
    assert r.status_code == 200, r.text
    time.sleep(1.0)
    s.shards[1].stop()
    time.sleep(1.5)
    return watches_before


def test_split_a_shard_while_clients_watch(current_etcd):
    s = Slice(current_etcd.endpoint, 2, f"/registry-reshard{os.getpid()}").start()
    extra: list[ApiserverProcess] = []
    try:
        f, full = s.front.base, s.full.base
        http = requests.Session()
        http.post(f + "/api/v1/namespaces", json={"metadata": {"name": "r"}})
        for i in range(20):
            http.post(f + CM, json={"metadata": {"name": f"o{i:03d}"}, "data": {"v": "0"}})
        start = http.get(f + CM).json()["metadata"]["resourceVersion"]
        stop = threading.Event()
        truth = Reflector(full, start, False, stop)
        clients = [Reflector(f, start, False, stop), Reflector(f, None, True, stop)]
        for c in [truth, *clients]:
            c.start()
        done = threading.Event()
        last = {}

        def write():
            i = 0
            while not done.is_set():
                r = http.put(f + CM + f"/o{i % 20:03d}", json={"metadata": {"name": f"o{i % 20:03d}"},
                                                               "data": {"v": str(i)}})
                assert r.status_code == 200, r.text
                last["rv"] = r.json()["metadata"]["resourceVersion"]
                if i % 7 == 3:
                    http.delete(f + CM + f"/x{i - 3}")
                r = http.post(f + CM, json={"metadata": {"name": f"x{i}"}})
                i += 1
                time.sleep(0.03)
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        time.sleep(1.5)
        watches_before = split(s, http, current_etcd.endpoint, extra, clients)
        done.set()
        writer.join()
        # Every client catches up with the last write, then all stop.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(int(cl.rv or 0) < int(last["rv"]) for cl in [truth, *clients]):
            time.sleep(0.1)
        stop.set()
        want = [key(e) for e in truth.events if int(e["object"]["metadata"]["resourceVersion"]) <= int(last["rv"])]
        assert len(want) > 50
        for cl, before in zip(clients, watches_before):
            assert not cl.errors, cl.errors      # no 410: no relist
            assert cl.watches > before           # the split moved the watch to the new map
            got = [key(e) for e in cl.events if int(e["object"]["metadata"]["resourceVersion"]) <= int(last["rv"])]
            if cl.watch_list:   # its initial state was at its own RV: compare what followed it
                first = int(cl.initial and max(int(e["object"]["metadata"]["resourceVersion"]) for e in cl.initial)
                            or 0)
                want_cl = [k for k in want if int(k[2]) > first]
                got = [k for k in got if int(k[2]) > first]
            else:
                want_cl = want
            assert got == want_cl
        # The new map answers lists as the full replica.
        rv = http.get(f + CM).json()["metadata"]["resourceVersion"]
        assert http.get(f + CM, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"}).content == \
            http.get(full + CM, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"}).content
        # A map that leaves a gap is refused.
        bad = http.put(f + "/debug/shards", json={"shards": [{"url": s.shards[0].base}, {"url": extra[0].base}]})
        assert bad.status_code == 422 and "partition" in bad.json()["message"]
    finally:
        for p in extra:
            if p.popen is not None and p.popen.poll() is None:
                p.stop(strict=False)
        s.stop()


@pytest.mark.parametrize("watchlist", ["true", "false"])
def test_clientgo_informer_during_a_split(current_etcd, clientgo_binary, tmp_path, watchlist):  # noqa: F811
    """client-go's informer through the front while the shard map changes (tests/clientgo/reshard_test.go):
    every write once and in order, no relist, the watch moved to the new map."""
    s = Slice(current_etcd.endpoint, 2, f"/registry-reshardcg{os.getpid()}{watchlist}").start()
    extra: list[ApiserverProcess] = []
    ready, done = tmp_path / "ready", tmp_path / "done"
    try:
        env = dict(os.environ, APISERVER_URL=s.front.base, RESHARD_READY=str(ready), RESHARD_DONE=str(done),
                   KUBE_FEATURE_WatchListClient=watchlist)
        go = subprocess.Popen([clientgo_binary, "-test.v", "-test.count=1", "-test.timeout=150s", "-test.run",
                               "^TestInformerDuringReshard$"], cwd=MODULE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while not ready.exists() and go.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ready.exists(), go.communicate(timeout=30)[0][-4000:] if go.poll() is not None else "no signal"
            time.sleep(1.0)
            split(s, requests.Session(), current_etcd.endpoint, extra)
            done.write_text("done")
            out = go.communicate(timeout=150)[0]
        finally:
            if go.poll() is None:
                go.kill()
                go.wait()
        assert go.returncode == 0 and "--- PASS: TestInformerDuringReshard" in out, out[-6000:]
    finally:
        for p in extra:
            if p.popen is not None and p.popen.poll() is None:
                p.stop(strict=False)
        s.stop()
