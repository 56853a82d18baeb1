"""`front.storage.RecentObjects`, the copies a front's writes start from: bounded in count and bytes, least
recently used first out, and large enough for a burst of writes followed by updates of the same objects."""
from __future__ import annotations

from front.storage import RecentObjects


def configmap(i: int, size: int = 1024) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i:06d}", "namespace": "a", "resourceVersion": str(100 + i),
                         "uid": f"00000000-0000-4000-8000-{i:012d}"},
            "data": {f"k{j}": chr(97 + j) * ((size - 200) // 10) for j in range(10)}}


def test_ten_thousand_objects_written_are_all_there_to_update():
    """The pattern that found the 4 MiB bound too small: N objects created, then each updated in the same order
    (bench.deployment's throughput section). An LRU smaller than N keeps none of them by the time each is
    asked for; at the default bounds every one is a hit."""
    recent = RecentObjects()
    n = 10_000
    for i in range(n):
        recent.put(f"/registry/configmaps/a/cm-{i:06d}", configmap(i))
    hits = sum(recent.get(f"/registry/configmaps/a/cm-{i:06d}") is not None for i in range(n))
    assert hits == n
    assert recent.bytes > 10 << 20      # about 1.2 KB of JSON each: more than the old 4 MiB bound by far


def test_bounded_by_bytes_and_count_oldest_out_first():
    recent = RecentObjects(max_entries=100, max_bytes=60_000)
    for i in range(200):
        recent.put(f"k{i}", configmap(i))
    size = len(recent)
    assert 0 < size < 100 and recent.bytes <= 60_000      # the bytes bound: about 1.2 KB each
    assert recent.get("k199") is not None and recent.get("k0") is None
    # a hit moves an entry to the young end: it outlives those put after it
    first = 200 - size
    assert recent.get(f"k{first}") is not None
    recent.put("k200", configmap(200))
    assert recent.get(f"k{first}") is not None and recent.get(f"k{first + 1}") is None
    counted = RecentObjects(max_entries=10, max_bytes=1 << 30)
    for i in range(25):
        counted.put(f"k{i}", configmap(i, size=300))
    assert len(counted) == 10 and counted.get("k14") is None and counted.get("k15") is not None


def test_a_copy_is_the_callers_and_drop_forgets_it():
    recent = RecentObjects()
    recent.put("k", configmap(1))
    got = recent.get("k")
    got["data"]["k0"] = "changed"
    assert recent.get("k")["data"]["k0"] != "changed"      # each get decodes a fresh object
    assert recent.bytes > 0
    recent.drop("k")
    assert recent.get("k") is None and recent.bytes == 0 and len(recent) == 0
    recent.put("big", {"data": {"x": "y" * ((16 << 20) // 8)}})     # over an eighth of the bytes bound: not kept
    assert recent.get("big") is None


def test_one_set_for_the_fronts_resources_each_in_its_own_scope():
    """A front's resources share one bounded set (16 MiB per front, not per resource), and two resources that
    store objects under the same etcd key never see each other's copies."""
    shared = RecentObjects(max_entries=3, max_bytes=1 << 30)
    core, events = shared.view("/events "), shared.view("events.k8s.io/events ")
    core.put("/registry/events/a/e1", {"kind": "Event", "v": 1})
    assert events.get("/registry/events/a/e1") is None
    events.put("/registry/events/a/e1", {"kind": "Event", "v": 2})
    assert core.get("/registry/events/a/e1")["v"] == 1 and events.get("/registry/events/a/e1")["v"] == 2
    cms = shared.view("/configmaps ")
    cms.put("/registry/configmaps/a/x", {"kind": "ConfigMap"})
    cms.put("/registry/configmaps/a/y", {"kind": "ConfigMap"})
    assert len(shared) == 3 and core.get("/registry/events/a/e1") is None     # the oldest went, whatever its resource
    events.drop("/registry/events/a/e1")
    assert len(shared) == 2 and cms.get("/registry/configmaps/a/x") is not None
