"""Warm restart of a custom resource's cache (issue 10): a CRD created after the process started gets its
cache written to the snapshot as soon as that cache is ready, not at the next periodic write, so a process
SIGKILLed seconds later restarts the custom resource warm and a client watch resumed from its last RV gets the
events after it, not 410 (the robustness suite's long form found restart-410 on custom resources only: their
caches were in no snapshot yet)."""
from __future__ import annotations

import json
import re
import time

from tests.helpers.objects import crd
from tests.test_warm_restart import env, etcd  # noqa: F401  (fixtures)

GROUP = "warm.example.com"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = f"/apis/{GROUP}/v1/namespaces/default/widgets"


def _served(api, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while api.get(WIDGETS).status_code != 200:
        assert time.monotonic() < deadline, "the CRD's resource was never served"
        time.sleep(0.1)


def _wait_snapshot(srv, want, timeout: float = 30.0) -> int:
    """The number of caches in the newest snapshot the server logged, once `want` holds for it."""
    deadline = time.monotonic() + timeout
    while True:
        written = re.findall(r"watch cache snapshot written .* resources=(\d+)", srv.log())
        if written and want(int(written[-1])):
            return int(written[-1])
        assert time.monotonic() < deadline, written
        time.sleep(0.2)


def test_crd_created_after_start_restarts_warm(env):
    srv, other = env
    srv.start()   # the default 1m interval: the periodic write would come far too late for this test
    first = _wait_snapshot(srv, lambda n: n > 0)   # the first snapshot: every cache created at start
    r = srv.api.post(CRDS, crd(GROUP, "widgets", "Widget"))
    assert r.status_code == 201, r.text
    _served(srv.api)
    rvs = []
    for i in range(5):
        r = srv.api.post(WIDGETS, {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": f"w{i}"}})
        assert r.status_code == 201, r.text
        rvs.append(int(r.json()["metadata"]["resourceVersion"]))
    _wait_snapshot(srv, lambda n: n == first + 1)   # ... and one with the widgets' cache, well before 1m
    srv.proc.popen.kill()
    srv.proc.popen.wait()

    other.start()
    r = other.api.post(WIDGETS, {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": "down"}})
    assert r.status_code == 201, r.text
    down_rv = int(r.json()["metadata"]["resourceVersion"])

    srv.start()
    # /readyz waits for the built-in caches; a custom resource's cache starts once the CRDs are read, a moment
    # later (a CI run read the metric before it had: {} against {"warm": 1}, the log showing a warm start).
    deadline = time.monotonic() + 30
    while not srv.loads("widgets") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert srv.loads("widgets") == {"warm": 1}, srv.log()[-3000:]
    # the resumed client watch: the one event after the last RV it saw, no 410
    resp = srv.api.get(WIDGETS, params={"watch": "1", "resourceVersion": str(rvs[-1])}, stream=True, timeout=20)
    assert resp.status_code == 200, resp.text
    ev = json.loads(next(resp.iter_lines()))
    resp.close()
    assert (ev["type"], ev["object"]["metadata"]["name"], int(ev["object"]["metadata"]["resourceVersion"])) == \
        ("ADDED", "down", down_rv), ev


def test_empty_resident_section_restarts_warm(env):
    """A resident shard snapshotted before it held any object of a resource (killed early, as the robustness
    long form's apiserver-kill-ha did on a resident shard) restarts that cache warm: the probe reads etcd's few
    objects at the snapshot's revision and finds none resident. Before, such a section was refused, the cache
    listed and a sharded client resuming from its last RV got 410 though etcd had not compacted it."""
    from tests.test_warm_restart import CM, SHARD, create
    srv, other = env
    srv.args = ("--residency", SHARD)
    srv.start()
    first = _wait_snapshot(srv, lambda n: n > 0)
    assert first
    srv.proc.popen.kill()
    srv.proc.popen.wait()
    other.start()
    rvs = [create(other.api, f"d{i}") for i in range(20)]   # about half of them in SHARD
    srv.start()
    assert srv.loads() == {"warm": 1}, srv.log()[-3000:]
    resp = srv.api.get(CM, params={"watch": "1", "resourceVersion": str(rvs[0] - 1), "shardSelector": SHARD},
                       stream=True, timeout=20)
    assert resp.status_code == 200, resp.text
    ev = json.loads(next(resp.iter_lines()))
    resp.close()
    assert ev["type"] == "ADDED" and int(ev["object"]["metadata"]["resourceVersion"]) in rvs, ev
