"""Sans-IO tests of the watch cache state and the delegator (injected clock, no etcd)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from cache import plan as d
from cache.watch_cache import LOWER_CAPACITY, Indexes, TooOld, WatchCache, bitmap_native_bytes


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def obj(key, rv):
    return (key, rv, b'{"rv":%d}' % rv, f"uid-{key}", "ns", {"app": key[-1]})


def fill(wc, clock, n, start_rv=10, dt=0.0):
    rv = start_rv
    for i in range(n):
        rv += 1
        clock.t += dt
        wc.apply_put(f"/r/ns/o{i % 50:03d}", rv, b"{}", f"u{i % 50}", "ns", {"i": str(i % 3)}, {"i": str((i - 50) % 3)} if i >= 50 else None)
    return rv


def test_replace_then_events_since_list_rv_is_fine_before_eviction():
    """S1.31: with nothing evicted, any RV >= the list RV is served."""
    clock = Clock()
    wc = WatchCache("/r/", clock)
    wc.replace([obj("/r/ns/a", 5), obj("/r/ns/b", 7)], 10)
    assert wc.events_since(10) == []
    with pytest.raises(TooOld) as ei:
        wc.events_since(9)
    assert str(ei.value) == "too old resource version: 9 (10)"
    wc.apply_put("/r/ns/c", 11, b"{}", "u", "ns", {}, None)
    assert [e.rv for e in wc.events_since(10)] == [11]


def test_window_grows_while_fresh_and_evicts_when_stale():
    """S4.18: capacity doubles while the oldest event is younger than 75 s; once events are old
    the ring evicts and TooOld reports oldest-1."""
    clock = Clock()
    wc = WatchCache("/r/", clock)
    wc.replace([], 10)
    fill(wc, clock, 150)   # all within one instant: capacity doubled
    assert wc.capacity == 2 * LOWER_CAPACITY and len(wc.history) == 150
    clock.t += 100          # everything is now older than the window
    last = fill(wc, clock, 300, start_rv=160, dt=1.0)
    assert wc.capacity <= 4 * LOWER_CAPACITY
    oldest = wc.history[0].rv
    with pytest.raises(TooOld) as ei:
        wc.events_since(oldest - 2)
    assert ei.value.oldest == oldest - 1
    assert [e.rv for e in wc.events_since(last - 3)] == [last - 2, last - 1, last]


def test_a_stale_window_halves_at_most_once_a_second():
    """S4.18's shrink, looked for at most once a second of the cache's clock (the deque's middle is O(n) to
    reach): a window grown to 8x that goes stale halves once per second of events, down to its lower bound
    (while the event capacity/4 from the newest is older than the window)."""
    clock = Clock()
    wc = WatchCache("/r/", clock)
    wc.replace([], 10)
    rv = fill(wc, clock, 700)                  # one instant: 100 -> 200 -> 400 -> 800
    assert wc.capacity == 8 * LOWER_CAPACITY
    clock.t += 100                             # all of it older than the window
    rv = fill(wc, clock, 10, start_rv=rv)      # 10 events within that instant: one halving, not three
    assert wc.capacity == 4 * LOWER_CAPACITY and wc.capacity_changes.count(-1) == 1
    for expected in (2 * LOWER_CAPACITY, LOWER_CAPACITY, LOWER_CAPACITY):
        clock.t += 1.0
        rv = fill(wc, clock, 5, start_rv=rv)
        assert wc.capacity == expected
    assert len(wc.history) <= LOWER_CAPACITY


def test_snapshot_per_event_and_retention_with_the_window():
    """S2.14, S2.16.1: a snapshot per event; greatest RV <= r; dropped with evicted events."""
    clock = Clock()
    wc = WatchCache("/r/", clock, lower_capacity=10, upper_capacity=10)
    wc.replace([obj("/r/ns/a", 5)], 10)
    for i in range(1, 6):
        wc.apply_put("/r/ns/a", 10 + 2 * i, b"v%d" % i, "u", "ns", {}, {})
    snap = wc.snapshot_at(15)           # between events 14 and 16 -> the one at 14
    assert snap.get("/r/ns/a").data == b"v2"
    assert wc.snapshot_at(9) is None
    assert wc.snapshot_at(10).get("/r/ns/a").data == b'{"rv":5}'
    for i in range(6, 30):
        wc.apply_put("/r/ns/a", 10 + 2 * i, b"v%d" % i, "u", "ns", {}, {})
    assert wc.oldest_snapshot_rv() >= wc.history[0].rv
    assert wc.snapshot_at(12) is None
    wc.compact(wc.history[-3].rv)       # S2.16.2
    assert wc.oldest_snapshot_rv() >= wc.history[-3].rv - 2


def test_an_idle_resource_keeps_one_snapshot_and_rebuilds_the_others():
    """Beyond upstream (memory): once no event came in the window's 75 s, only the current snapshot stays; every
    state the window can reproduce is still served, the dropped ones rebuilt by undoing events (S2.14), and
    RVs before the list stay unservable (S1.21)."""
    clock = Clock()
    wc = WatchCache("/r/", clock)
    wc.replace([obj(f"/r/ns/o{i:03d}", 5) for i in range(40)], 10)
    last = fill(wc, clock, 120, dt=0.1)
    want = {rv: {e.key: e.data for e in wc.iter_prefix(wc.snapshot_at(rv), "/r/")} for rv in range(10, last + 1)}
    n = len(wc.snapshots)
    clock.t += 60
    wc.drop_idle_snapshots()
    assert len(wc.snapshots) == n > 100      # events 60 s old: still in the window
    clock.t += 20
    wc.drop_idle_snapshots()
    assert wc.snapshots == [(last, wc.snapshot_trees[-1])]
    for rv, state in want.items():
        assert {e.key: e.data for e in wc.iter_prefix(wc.snapshot_at(rv), "/r/")} == state, rv
    assert wc.snapshot_at(9) is None
    wc.apply_put("/r/ns/new", last + 1, b"{}", "u-new", "ns", {}, None)   # snapshots per event again
    assert [rv for rv, _ in wc.snapshots] == [last, last + 1]


def test_indexes_follow_label_changes_and_deletes():
    clock = Clock()
    wc = WatchCache("/r/", clock)
    wc.replace([obj("/r/ns/a", 5), obj("/r/ns/b", 6)], 10)
    sel = lambda reqs, ns="ns": sorted(wc.slots[s].key for s in wc.indexes.select(reqs, ns)[0])  # noqa: E731
    assert sel([("app", "=", ["a"])]) == ["/r/ns/a"]
    assert sel([("app", "exists", [])]) == ["/r/ns/a", "/r/ns/b"]
    wc.apply_put("/r/ns/a", 11, b"{}", "uid-/r/ns/a", "ns", {"app": "z"}, {"app": "a"})
    assert sel([("app", "=", ["a"])]) == []
    assert sel([("app", "in", ["z", "b"])]) == ["/r/ns/a", "/r/ns/b"]
    assert sel([("app", "notin", ["z"])]) == ["/r/ns/b"]
    wc.apply_delete("/r/ns/b", 12, b"{}", "ns", {"app": "b"})
    assert sel([("app", "exists", [])]) == ["/r/ns/a"]
    assert sel([("app", "!", [])]) == []
    assert sel([], "other") == []


def test_label_keys_of_mostly_one_object_per_value_are_not_indexed_by_value():
    """A key with more than MOSTLY_SINGLE_VALUES values and fewer than two objects per value (a chart version
    label) keeps only its exists-bitmap; one with as many values over ten times the objects stays indexed."""
    clock = Clock()
    wc = WatchCache("/r/", clock)
    wc.replace([("/r/n%04d" % i, i + 1, b"{}", f"u{i}", "", {"chart": f"c-{i % 400}", "hash": f"h{i % 300}"})
                for i in range(600)], 5000)
    assert "chart" in wc.indexes.unindexed_keys and "hash" not in wc.indexes.unindexed_keys
    slots, exact = wc.indexes.select([("chart", "=", ["c-7"])], None)
    assert not exact and len(slots) == 600          # candidates: every object with the key
    wc = WatchCache("/r/", clock)
    wc.replace([("/r/n%04d" % i, i + 1, b"{}", f"u{i}", "", {"hash": f"h{i % 300}"}) for i in range(3000)], 5000)
    assert not wc.indexes.unindexed_keys
    slots, exact = wc.indexes.select([("hash", "=", ["h7"])], None)
    assert exact and len(slots) == 10


def test_a_label_value_of_one_object_is_kept_as_its_slot():
    """One object's value is an int (no bitmap); a second object makes it a bitmap, and back to an int when
    one is left; selectors read both forms alike."""
    idx = Indexes()
    idx.add(7, "ns", {"chart": "a-1.2", "app": "x"})
    assert idx.by_label[("chart", "a-1.2")] == 7 and type(idx.by_label[("chart", "a-1.2")]) is int
    idx.add(9, "ns", {"chart": "a-1.2", "app": "x"})
    assert isinstance(idx.by_label[("chart", "a-1.2")], BitMap)
    assert list(idx.select([("chart", "=", ["a-1.2"])], "ns")[0]) == [7, 9]
    idx.remove(7, "ns", {"chart": "a-1.2", "app": "x"})
    assert idx.by_label[("chart", "a-1.2")] == 9
    assert list(idx.select([("chart", "in", ["a-1.2", "b"])], None)[0]) == [9]
    assert list(idx.select([("chart", "notin", ["a-1.2"])], None)[0]) == []
    idx.remove(9, "ns", {"chart": "a-1.2", "app": "x"})
    assert ("chart", "a-1.2") not in idx.by_label and idx.values_per_key["chart"] == 0
    # removing a slot that does not hold the value leaves it alone
    idx.add(3, "ns", {"chart": "c"})
    idx.remove(4, "ns", {"chart": "c"})
    assert idx.by_label[("chart", "c")] == 3


_LABELS = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["1", "2", "3", "4"]), max_size=3)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 11), st.sampled_from(["n1", "n2"]), _LABELS), max_size=60),
       st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["=", "in", "!=", "notin", "exists", "!"]),
                          st.lists(st.sampled_from(["1", "2", "3", "4"]), min_size=1, max_size=2)), max_size=3),
       st.sampled_from([None, "n1", "n2"]))
def test_indexes_select_as_a_scan_of_the_objects_would(ops, reqs, ns):
    """Adds, relabels and removes in any order; every selector answers what matching the objects answers."""
    idx, objs = Indexes(), {}
    for slot, namespace, labels in ops:
        if slot in objs:
            old_ns, old = objs.pop(slot)
            idx.remove(slot, old_ns, old)
            if not labels:
                continue   # a delete
        idx.add(slot, namespace, labels)
        objs[slot] = (namespace, labels)

    def match(o_ns, labels):
        if ns is not None and o_ns != ns:
            return False
        for k, op, vs in reqs:
            has = k in labels
            if op in ("=", "in") and not (has and labels[k] in vs) or op in ("!=", "notin") and has and \
                    labels[k] in vs or op == "exists" and not has or op == "!" and has:
                return False
        return True
    slots, exact = idx.select([(k, "==" if op == "=" else op, vs) for k, op, vs in reqs], ns)
    assert exact and sorted(slots) == sorted(s for s, (o_ns, lb) in objs.items() if match(o_ns, lb))
    # one-object values are ints, bitmaps hold at least two, none is empty
    for b in idx.by_label.values():
        assert type(b) is int or len(b) >= 2
    assert idx.native_bytes() >= 0 and idx.__sizeof__() > 0


def test_bitmap_native_bytes_counts_what_croaring_allocates():
    """The estimate against sizes from CRoaring's allocation rules (checked with glibc's mallinfo2 when it was
    written: 144 B per one-member bitmap): never pyroaring's serialised size."""
    one = BitMap([5])
    assert bitmap_native_bytes(one) == 144 > one.__sizeof__()
    dense = BitMap(range(0, 65536, 2))          # one bitset container of 8 KiB
    assert 8192 < bitmap_native_bytes(dense) < 8192 + 256
    assert bitmap_native_bytes(BitMap()) == 48


@pytest.mark.parametrize("rv,rvm,limit,cont,expect", [
    (None, "", 0, None, ("cache", d.CONSISTENT)),                  # L1
    ("0", "", 500, None, ("cache", d.ANY)),                        # L2 (limit ignored, S1.19)
    ("5", "NotOlderThan", 10, None, ("cache", d.NOT_OLDER_THAN)),  # L3
    ("5", "", 0, None, ("cache", d.NOT_OLDER_THAN)),               # L4
    ("5", "", 10, None, ("cache", d.EXACT)),                       # L5
    ("5", "Exact", 0, None, ("cache", d.EXACT)),                   # L6
    ("", "", 10, 7, ("cache", d.EXACT)),                           # L7
    ("", "", 10, -1, ("cache", d.CONSISTENT)),                     # L8
])
def test_delegator_table(rv, rvm, limit, cont, expect):
    """S1.18 (table L1-L8)."""
    p = d.plan_list(rv, rvm, limit, cont, ready=True, consistent_supported=True, has_selectors=False,
                    single_key=False, cache_rv=100)
    assert (p.source, p.mode) == expect
    if rv == "0":
        assert p.limit == 0


def test_delegator_fallbacks():
    """S1.20, S1.25, S1.26."""
    kw = dict(ready=True, has_selectors=False, single_key=False, cache_rv=100)
    assert d.plan_list(None, "", 0, None, consistent_supported=False, **kw).source == "etcd"
    assert d.plan_list("500", "Exact", 0, None, consistent_supported=False, **kw).source == "etcd"
    assert d.plan_list("50", "Exact", 0, None, consistent_supported=False, **kw).source == "cache"
    assert d.plan_list("50", "Exact", 0, None, consistent_supported=True,
                       **{**kw, "single_key": True}).source == "etcd"
    nr = dict(ready=False, consistent_supported=True, single_key=False, cache_rv=0)
    assert d.plan_list(None, "", 10, None, has_selectors=False, **nr).source == "etcd"
    with pytest.raises(d.NotReadyError):
        d.plan_list(None, "", 10, None, has_selectors=True, **nr)
    with pytest.raises(d.NotReadyError):
        d.plan_list(None, "", 0, None, has_selectors=False, **nr)
    assert d.plan_get(None, ready=True) == "etcd"       # S1.14
    assert d.plan_get("0", ready=False) == "etcd"       # S1.15
    assert d.plan_get("7", ready=True) == "cache"       # S1.16


def test_near_unique_label_keys_are_not_indexed_by_value():
    """A hostname-like label would cost a bitmap per object: only its exists-bitmap is kept and
    selectors on it are marked inexact (the caller matches the objects)."""
    clock = Clock()
    wc = WatchCache("/r/", clock)
    wc.replace([("/r/n%04d" % i, i + 1, b"{}", f"u{i}", "", {"host": f"h{i}", "zone": f"z{i % 3}"})
                for i in range(4000)], 5000)
    idx = wc.indexes
    assert "host" in idx.unindexed_keys and "zone" not in idx.unindexed_keys
    assert not any(k == "host" for k, _ in idx.by_label)
    slots, exact = idx.select([("zone", "=", ["z1"])], None)
    assert exact and len(slots) == 1333
    slots, exact = idx.select([("host", "=", ["h5"]), ("zone", "in", ["z2"])], None)
    assert not exact and len(slots) == 1333   # candidates; objects decide
    # a few B/object here (2 B per bitmap membership in array containers; dense sets run-encoded).
    assert idx.__sizeof__() / 4000 < 6


def test_every_state_in_the_window_is_reproduced_exactly():
    """S2.14: a read at any RV in the window sees exactly the state at that RV, whether a retained
    snapshot answers it or the state is rebuilt by undoing later events. Random puts/deletes against
    a dict model, with only 3 per-event snapshots retained."""
    import random
    rnd = random.Random(7)
    clock = Clock()
    wc = WatchCache("/r/", clock, recent_snapshots=3)
    model: dict[str, bytes] = {"/r/ns/k0": b"init"}
    wc.replace([("/r/ns/k0", 5, b"init", "u0", "ns", {})], 10)
    states = {10: dict(model)}
    rv = 10
    for _ in range(300):
        rv += rnd.choice((1, 1, 2))
        key = f"/r/ns/k{rnd.randrange(12)}"
        if key in model and rnd.random() < 0.3:
            wc.apply_delete(key, rv, b"tomb", "ns", {})
            del model[key]
        else:
            data = b"v%d" % rv
            wc.apply_put(key, rv, data, "u" + key, "ns", {}, {} if key in model else None)
            model[key] = data
        states[rv] = dict(model)
    assert len(wc.snapshot_rvs) == 3
    floor = wc.oldest_servable_rv()
    last = None
    for r in range(10, rv + 1):
        if r in states:
            last = states[r]
        tree = wc.snapshot_at(r)
        if r < floor:
            assert tree is None
            continue
        got = {k: e.data for k, e in tree.items()}
        assert got == last, f"state at rv {r}"
    wc.compact(rv - 5)
    assert wc.snapshot_at(rv - 6) is None and wc.snapshot_at(rv - 5) is not None
