"""The per-resource watch cache state (upstream `watch_cache.go`), sans-IO.

Fed with a full list (`replace`) and then etcd events (`process`), it keeps:

* `store`: a copy-on-write B-tree (ext.BTree) from storage key to `Entry`, each entry
  standing in its key's place (`store.insert(e, e)`: no key string of the tree's own,
  and a compressed entry keeps its key as UTF-8 in its frame's block);
* `history`: the event window (ring buffer, capacity resized as S4.18);
* `snapshots`: a B-tree snapshot per applied event (S2.14), dropped with the
  window (S2.16);
* indexes: roaring bitmaps of dense slot ids per namespace and per label
  (key=value and key-exists), so label selectors over the latest state are
  answered without a scan.

Entries hold bytes, not dicts: each object version is decoded once at ingest
and kept as the exact bytes clients receive (resourceVersion stamped in).
Nothing here awaits; `Cacher` (cacher.py) owns the IO and the clock.
"""
from __future__ import annotations

import bisect
import math
import sys
from collections import OrderedDict, deque
from typing import Any, Callable, Iterable, Iterator

from pyroaring import BitMap

import ext

# Event window (S4.18-S4.19): capacity starts at 100, doubles up to 100*1024
# while the oldest event is younger than the window, halves (not below 100)
# when old events dominate. The window is 75 s = 60 s bookmark period + 15 s.
LOWER_CAPACITY = 100
UPPER_CAPACITY = 100 * 1024
EVENT_FRESH_SECONDS = 75.0


# The per-object record (ext/entry.pyx): key, wire bytes (or a frame), RV, slot, UID hash.
Entry = ext.Entry


# One applied event of the window (ext/entry.pyx, 48 B): entry, prev, time; type (ADDED | MODIFIED | DELETED),
# key and rv read from them. For DELETED, `entry` carries the last state with the delete's RV (S4.5), as a
# tombstone (slot -1); `prev` is the entry it replaced (None for ADDED).
CacheEvent = ext.WindowEvent


class TooOld(Exception):
    """The requested RV is older than the window (S1.30): carries M of `too old resource version: N (M)`."""

    def __init__(self, requested: int, oldest: int):
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


class SlotAllocator:
    """Small dense ids for bitmaps (never 64-bit hashes): freed ids are reused."""

    def __init__(self) -> None:
        self._free: list[int] = []
        self._next = 0

    def take(self) -> int:
        if self._free:
            return self._free.pop()
        s = self._next
        self._next += 1
        return s

    def give(self, slot: int) -> None:
        self._free.append(slot)

    def reset(self) -> None:
        self._free.clear()
        self._next = 0


class Indexes:
    """Namespace and label bitmaps over slot ids (latest state only, S2.15).

    Label values are indexed per key until the key turns out to be near-unique
    (e.g. `kubernetes.io/hostname`), or its values mostly one object's each (a
    Helm chart's version, `pod-template-hash` of one-replica Deployments): a
    value's entry (its tuple key, string, dict slot and int or bitmap, ~200 B)
    would then cost about as much as the object's whole compressed copy. Such a
    key keeps only its "exists" bitmap; selectors on it get candidates from that
    bitmap and are finished by matching the objects (`select` says the answer is
    not exact), as upstream's cache answers every label selector.

    A label value held by one object alone (a Helm chart's version, a release
    name: most values of such keys below the near-unique threshold) is kept as
    that object's slot, an int, instead of a bitmap: a one-member BitMap costs
    184 B (a 40 B Python object and 144 B of CRoaring allocations, see
    `bitmap_native_bytes`), an int 32 B. `label_slots` reads either form.
    """

    def __init__(self) -> None:
        self.all = BitMap()
        self.by_namespace: dict[str, BitMap] = {}
        self.by_label: dict[tuple[str, str], BitMap | int] = {}
        self.by_label_key: dict[str, BitMap] = {}
        self.values_per_key: dict[str, int] = {}
        self.unindexed_keys: set[str] = set()
        # A (re)list is being added: the objects so far are not the whole, so the values-per-object rule waits
        # for `review` (a list comes in key order, and a key's values need not).
        self.filling = False

    def add(self, slot: int, namespace: str, labels: dict[str, str]) -> None:
        self.all.add(slot)
        self.by_namespace.setdefault(namespace, BitMap()).add(slot)
        for k, v in labels.items():
            self.by_label_key.setdefault(k, BitMap()).add(slot)
            if k in self.unindexed_keys:
                continue
            b = self.by_label.get((k, v))
            if b is None:
                self.by_label[(sys.intern(k), v)] = slot
                n = self.values_per_key[k] = self.values_per_key.get(k, 0) + 1
                if n > HIGH_CARDINALITY_VALUES and n * HIGH_CARDINALITY_SHARE > len(self.all) or \
                        not self.filling and _mostly_single(n, len(self.all)):
                    self._stop_indexing(k)
            elif type(b) is int:
                if b != slot:
                    self.by_label[(k, v)] = BitMap((b, slot))
            else:
                b.add(slot)

    def review(self) -> None:
        """The end of a (re)list: keys whose values turned out mostly one object's each stop being indexed."""
        self.filling = False
        n_all = len(self.all)
        gone = {k for k, n in self.values_per_key.items() if _mostly_single(n, n_all)}
        if gone:
            self.unindexed_keys |= gone
            for k in gone:
                del self.values_per_key[k]
            self.by_label = {kv: b for kv, b in self.by_label.items() if kv[0] not in gone}

    def _stop_indexing(self, key: str) -> None:
        self.unindexed_keys.add(key)
        self.values_per_key.pop(key, None)
        # Rebuilt rather than deleted from: a dict never shrinks its table.
        self.by_label = {kv: b for kv, b in self.by_label.items() if kv[0] != key}

    def remove(self, slot: int, namespace: str, labels: dict[str, str]) -> None:
        self.all.discard(slot)
        _discard(self.by_namespace, namespace, slot)
        for k, v in labels.items():
            _discard(self.by_label_key, k, slot)
            if k in self.unindexed_keys:
                continue
            b = self.by_label.get((k, v))
            if b is None:
                continue
            if type(b) is int:
                if b != slot:
                    continue
            else:
                b.discard(slot)
                if len(b) == 1:
                    self.by_label[(k, v)] = b.min()   # back to one member: the int form
                    continue
                if b:
                    continue
            del self.by_label[(k, v)]
            self.values_per_key[k] -= 1

    def label_slots(self, key: str, value: str) -> BitMap:
        """The slots of the objects labelled key=value (a new BitMap when the value has one object)."""
        b = self.by_label.get((key, value))
        if b is None:
            return BitMap()
        return BitMap((b,)) if type(b) is int else b

    def select(self, requirements: Iterable[tuple[str, str, Any]], namespace: str | None) -> tuple[BitMap, bool]:
        """(slots, exact): slots matching the label requirements (ops from machinery.selectors) in a
        namespace; `exact` is False when a requirement on an unindexed key only narrowed the
        candidates (the caller must then match the objects). O(bitmap sizes)."""
        out = self.by_namespace.get(namespace, BitMap()) if namespace is not None else self.all
        out = BitMap(out)
        exact = True
        for key, op, values in requirements:
            if key in self.unindexed_keys and op not in ("exists", "!"):
                exact = False
                if op in ("=", "==", "in"):
                    out &= self.by_label_key.get(key, BitMap())
                continue
            if op in ("=", "==", "in"):
                m = BitMap()
                for v in values:
                    m |= self.label_slots(key, v)
                out &= m
            elif op in ("!=", "notin"):
                for v in values:
                    out -= self.label_slots(key, v)
            elif op == "exists":
                out &= self.by_label_key.get(key, BitMap())
            elif op == "!":
                out -= self.by_label_key.get(key, BitMap())
            else:
                raise ValueError(f"unsupported label operator for bitmap index: {op}")
        return out, exact

    def _bitmaps(self) -> Iterator[BitMap]:
        yield self.all
        for d in (self.by_namespace, self.by_label, self.by_label_key):
            for b in d.values():
                if type(b) is not int:
                    yield b

    def optimize(self) -> None:
        """Convert dense runs of slots to run containers (after a full list, slots are contiguous)."""
        for b in self._bitmaps():
            b.run_optimize()

    def native_bytes(self) -> int:
        """What CRoaring allocated for the bitmaps (outside the Python heap, so tracemalloc cannot see it)."""
        return sum(bitmap_native_bytes(b) for b in self._bitmaps())

    def python_bytes(self) -> int:
        """The indexes' Python heap: the dicts, the bitmaps' Python objects, the one-object values' ints (keys'
        strings are shared with nothing else)."""
        n = _BITMAP_OBJECT_BYTES * sum(1 for _ in self._bitmaps())
        for d in (self.by_namespace, self.by_label, self.by_label_key):
            n += d.__sizeof__()
        return n + sum(b.__sizeof__() for b in self.by_label.values() if type(b) is int)

    def __sizeof__(self) -> int:
        """Everything the indexes hold: their Python heap and the bitmaps' CRoaring memory."""
        return self.python_bytes() + self.native_bytes()


def _discard(d: dict, k, slot: int) -> None:
    b = d.get(k)
    if b is not None:
        b.discard(slot)
        if not b:
            del d[k]


# What a BitMap costs besides CRoaring's memory: its Python object (tracemalloc: 40 B).
_BITMAP_OBJECT_BYTES = 40


def _chunk(n: int) -> int:
    """glibc malloc's chunk for an n-byte request (8 B of header, 16 B alignment, 32 B at least)."""
    return max(32, (n + 8 + 15) & ~15)


def bitmap_native_bytes(b: BitMap) -> int:
    """An estimate of what CRoaring allocated for `b`: its roaring_bitmap_t (40 B), the container index (key,
    pointer and type per container, 11 B, grown by doubling), a 16 B struct per container, and the containers'
    values (sized by CRoaring's statistics; their spare capacity is not reported). pyroaring's own
    `__sizeof__` is the serialised size: 18 B for one member, where glibc's mallinfo2 counted 144 B allocated
    per bitmap over 2,000 of them (this estimate: 144; 40 members: 210 counted, 208 estimated; 300 members over
    four containers: 1,006 and 904; a bitset container: 8,334 and 8,320)."""
    st = b.get_statistics()
    n = st["n_containers"]
    if not n:
        return _chunk(40)
    data = st["n_bytes_array_containers"] + st["n_bytes_run_containers"] + st["n_bytes_bitset_containers"]
    return (_chunk(40) + _chunk(11 * (1 << (n - 1).bit_length())) + n * _chunk(16)
            + max(n * 32, data + n * 16))


# Snapshots kept per event (the most recent ones; older states are rebuilt by undo),
# and how many rebuilt states are kept for continuing pages.
RECENT_SNAPSHOTS = 256
REBUILT_KEPT = 4

# A label key stops being indexed by value once it has more than this many distinct
# values and they are more than 1/HIGH_CARDINALITY_SHARE of the objects (near-unique),
HIGH_CARDINALITY_VALUES = 1024
HIGH_CARDINALITY_SHARE = 4
# or more than this many and more than half as many values as objects (fewer than two objects per value).
MOSTLY_SINGLE_VALUES = 256


def _mostly_single(values: int, objects: int) -> bool:
    return values > MOSTLY_SINGLE_VALUES and values * 2 > objects


INDEXABLE_OPS = {"=", "==", "in", "!=", "notin", "exists", "!"}


class WatchCache:
    """Store + history window + snapshots + indexes for one resource."""

    def __init__(self, prefix: str, clock: Callable[[], float],
                 window_seconds: float = EVENT_FRESH_SECONDS,
                 lower_capacity: int = LOWER_CAPACITY, upper_capacity: int = UPPER_CAPACITY,
                 recent_snapshots: int = RECENT_SNAPSHOTS):
        self.prefix = prefix              # e.g. "/registry/configmaps/"
        self.clock = clock
        self.window = window_seconds
        self.lower = lower_capacity
        self.upper = upper_capacity
        self.capacity = lower_capacity
        self.store = ext.BTree(self_keyed=True)   # each entry its own key: one pointer per item
        self.history: deque[CacheEvent] = deque()
        # A snapshot per applied event (S2.14) for the most recent `recent_snapshots` events:
        # RVs and trees in two deques, ascending by RV (dropping the oldest is O(1)). Older
        # states in the window are rebuilt on demand by undoing events (see snapshot_at).
        self.recent_snapshots = recent_snapshots
        self.snapshot_rvs: deque[int] = deque()
        self.snapshot_trees: deque[Any] = deque()
        self.compacted = 0          # etcd compaction revision we were told of (S2.16.2)
        self._rebuilt: OrderedDict[int, Any] = OrderedDict()
        self.slots: list[Entry | None] = []
        self.allocator = SlotAllocator()
        self.indexes = Indexes()
        self.rv = 0                 # latest processed revision (events or progress)
        self.list_rv = 0            # revision of the last replace (S1.31)
        self.evicted = False        # an event has left the window since the last replace
        self.capacity_changes: list[int] = []  # +1/-1 per resize, for metrics
        self._shrink_checked = float("-inf")     # when _shrink_due last looked (the cache's clock)
        # cache/compression.py: told of every entry that becomes current, so cold ones get compressed.
        self.compressor = None

    # --- ingest ---------------------------------------------------------------

    def _new_entry(self, key: str, rv: int, data: bytes, uid: str, namespace: str,
                   labels: dict[str, str]) -> Entry:
        slot = self.allocator.take()
        e = Entry(key, rv, data, slot, ext.fnv1a64(uid))
        if slot == len(self.slots):
            self.slots.append(e)
        else:
            self.slots[slot] = e
        self.indexes.add(slot, namespace, labels)
        return e

    def _free_entry(self, e: Entry, namespace: str, labels: dict[str, str]) -> None:
        self.indexes.remove(e.slot, namespace, labels)
        self.slots[e.slot] = None
        self.allocator.give(e.slot)

    def replace(self, objects: Iterable[tuple[str, int, bytes, str, str, dict[str, str]]], rv: int) -> None:
        """Reset to a full list at `rv`: (key, rv, data, uid, namespace, labels) per object."""
        self.begin_replace()
        self.add_listed(objects)
        self.finish_replace(rv)

    # A (re)list may also be installed page by page: begin_replace, add_listed per page, finish_replace.
    # In between the state is partial; the Cacher is not ready then, and nothing reads it.

    def begin_replace(self) -> None:
        self.store = ext.BTree(self_keyed=True)   # each entry its own key: one pointer per item
        self.history.clear()
        self.slots = []
        self.allocator.reset()
        self.indexes = Indexes()
        self.indexes.filling = True
        if self.compressor is not None:
            self.compressor.reset()

    def add_listed(self, objects: Iterable[tuple[str, int, bytes, str, str, dict[str, str]]]) -> None:
        c = self.compressor
        size = 0
        for key, orv, data, uid, ns, labels in objects:
            e = self._new_entry(key, orv, data, uid, ns, labels)
            self.store.insert(e, e)
            if c is not None:
                c.note(e)
                size += len(data)
        if c is not None:
            c.listed_bytes += size   # what Compressor.listed compresses while the list goes on

    # A warm start (cache/snapshot.py) installs a saved state the same way: begin_replace, add_restored per
    # chunk (entries keep their saved slots), then restore_indexes and finish_replace at the saved RV.

    def begin_restore(self, next_slot: int) -> None:
        self.begin_replace()
        self.slots = [None] * next_slot

    def add_restored(self, chunk, after: str, newest: tuple[str, int],
                     codecs: dict) -> tuple[str, tuple[str, int], int]:
        """One packed chunk of saved entries (`ext.pack_entries`: key, rv, stored bytes, slot, uid_hash, codec id
        each): keys ascending after `after`, under the prefix, slots below the allocator's and each used once,
        codec ids 0 (plain) or in `codecs` (ValueError otherwise; KeyError for an unknown codec). Compressed
        entries stay compressed. Returns the last key, the (key, rv) of the entry with the greatest RV so far
        (`newest` before this chunk) and the chunk's entry count."""
        after, newest, plain, ncompressed, compressed_bytes, count = ext.restore_packed(
            chunk, after, self.prefix, self.slots, self.store.append, codecs, newest)
        if self.compressor is not None:
            self.compressor.kept(compressed_bytes, ncompressed)
            for e in plain:
                self.compressor.note(e)
        return after, newest, count

    def restore_indexes(self, indexes: "Indexes") -> None:
        """The saved bitmaps and the slot allocator that go with the restored entries (begin_restore)."""
        next_slot = len(self.slots)
        # add_restored put each entry in a slot of its own below next_slot: the index covers exactly them when it
        # has as many slots as there are entries, each holding one.
        if len(indexes.all) != len(self.store) or not ext.slots_filled(self.slots, indexes.all.to_array()):
            raise ValueError("saved index does not cover exactly the saved entries")
        self.allocator._next = next_slot
        free = BitMap(range(next_slot)) - indexes.all if len(indexes.all) < next_slot else ()
        self.allocator._free = list(free)[::-1]
        self.indexes = indexes

    def finish_replace(self, rv: int) -> None:
        self.indexes.review()
        self.indexes.optimize()
        self.rv = rv
        self.list_rv = rv
        self.evicted = False
        self.snapshot_rvs = deque([rv])
        self.snapshot_trees = deque([self.store.snapshot()])
        self._rebuilt.clear()

    def apply_put(self, key: str, rv: int, data: bytes, uid: str, namespace: str, labels: dict[str, str],
                  prev_labels: dict[str, str] | None) -> CacheEvent:
        prev = self.store.get(key)
        if prev is not None:
            if prev.codec is not None and self.compressor is not None:
                self.compressor.dropped(prev)
            # Same slot keeps the object's identity in the bitmaps; only labels move.
            self.indexes.remove(prev.slot, namespace, prev_labels or {})
            e = Entry(key, rv, data, prev.slot, prev.uid_hash)
            self.slots[prev.slot] = e
            self.indexes.add(prev.slot, namespace, labels)
        else:
            e = self._new_entry(key, rv, data, uid, namespace, labels)
        self.store.insert(e, e)
        if self.compressor is not None:
            self.compressor.note(e)
        return self._record(CacheEvent(e, prev, self.clock()))

    def apply_delete(self, key: str, rv: int, deleted_data: bytes, namespace: str,
                     prev_labels: dict[str, str] | None) -> CacheEvent | None:
        prev = self.store.get(key)
        if prev is None:
            self.rv = max(self.rv, rv)
            return None
        self.store.delete(key)
        if prev.codec is not None and self.compressor is not None:
            self.compressor.dropped(prev)
        self._free_entry(prev, namespace, prev_labels or {})
        tomb = Entry(key, rv, deleted_data, -1, prev.uid_hash)
        return self._record(CacheEvent(tomb, prev, self.clock()))

    def _record(self, ev: CacheEvent) -> CacheEvent:
        self.rv = ev.rv
        self._resize_locked(ev.time)
        if len(self.history) >= self.capacity:
            self.history.popleft()
            self.evicted = True
        self.history.append(ev)
        self.snapshot_rvs.append(ev.rv)
        self.snapshot_trees.append(self.store.snapshot())
        if len(self.snapshot_rvs) > self.recent_snapshots:
            self.snapshot_rvs.popleft()
            self.snapshot_trees.popleft()
        self._drop_snapshots()
        return ev

    def progress(self, rv: int) -> None:
        """An etcd progress notification: everything up to rv has been seen."""
        if rv > self.rv:
            self.rv = rv

    def _resize_locked(self, now: float) -> None:
        """S4.18: double when full and the oldest event is still fresh; halve when
        the event capacity/4 from the newest is older than the window."""
        n = len(self.history)
        if n >= self.capacity and self.capacity < self.upper and \
                now - self.history[0].time < self.window:
            self.capacity = min(self.capacity * 2, self.upper)
            self.capacity_changes.append(+1)
        elif self.capacity > self.lower and n > self.capacity // 4 and now - self._shrink_checked >= 1.0 and \
                self._shrink_due(now, n):
            new = max(self.capacity // 2, self.lower)
            while len(self.history) > new:
                self.history.popleft()
                self.evicted = True
            self.capacity = new
            self.capacity_changes.append(-1)

    def _shrink_due(self, now: float, n: int) -> bool:
        """Whether the event capacity/4 from the newest is older than the window. Asked at most once a second
        (upstream asks at every event, of a ring buffer): the middle of a deque is O(n) to reach, and at 1,000
        Lease renewals a second into a 100,000-event window this lookup was 1.3 % of the apiserver's CPU."""
        self._shrink_checked = now
        return now - self.history[n - self.capacity // 4].time > self.window

    def drop_idle_snapshots(self) -> None:
        """A resource with no event in the window's span (75 s) keeps its current snapshot only. The per-event
        ones are path copies that a later write made (at 10,000 ConfigMaps the 256 recent ones cost 48 B per
        object, most of the B-tree's memory); the states they held are rebuilt on demand by undoing events
        (`snapshot_at`), as older ones already are. Called by the Cacher every 15 s and after each compression
        pass (the pass that compresses a bulk load's last entries finds the resource idle)."""
        rvs, trees = self.snapshot_rvs, self.snapshot_trees
        if len(rvs) > 1 and self.history and self.clock() - self.history[-1].time > self.window:
            while len(rvs) > 1:
                rvs.popleft()
                trees.popleft()

    def _drop_snapshots(self) -> None:
        """S2.16.1: snapshots older than the oldest buffered event go (the one at list_rv
        stays while nothing has been evicted)."""
        if not self.history:
            return
        oldest = self.history[0].rv if self.evicted else self.list_rv
        self._drop_below(oldest, keep_last=False)

    def _drop_below(self, rv: int, keep_last: bool) -> None:
        rvs, trees = self.snapshot_rvs, self.snapshot_trees
        while rvs and rvs[0] < rv and not (keep_last and len(rvs) == 1):
            rvs.popleft()
            trees.popleft()

    def compact(self, revision: int) -> None:
        """S2.16.2: etcd compacted at `revision`: states older than it are not served from the
        cache any more (the newest snapshot stays: it is the current state)."""
        self.compacted = max(self.compacted, revision)
        self._drop_below(revision, keep_last=True)
        for rv in [rv for rv in self._rebuilt if rv < revision]:
            del self._rebuilt[rv]

    # --- reads ----------------------------------------------------------------

    def oldest_servable_rv(self) -> int:
        """The oldest RV whose state the window can reproduce (every later event is buffered)."""
        if not self.evicted:
            floor = self.list_rv
        elif self.history:
            floor = self.history[0].rv - 1
        else:
            floor = self.rv
        return max(floor, self.compacted)

    def snapshot_at(self, rv: int):
        """The state at `rv` as a B-tree (S2.14), or None if the window cannot reproduce it
        (S1.21: the caller goes to etcd).

        Recent RVs: the snapshot with the greatest RV <= rv, O(log n). Older RVs in the
        window: the oldest retained snapshot with the later events undone (each event keeps
        the entry it replaced), O(k log n) for k undone events; the last few rebuilt states
        are kept for continuing pages. This keeps upstream's per-event snapshot semantics
        while retaining path copies for the recent events only.
        """
        if rv < self.oldest_servable_rv():
            return None
        i = bisect.bisect_right(self.snapshot_rvs, rv)
        if i > 0:
            return self.snapshot_trees[i - 1]
        tree = self._rebuilt.get(rv)
        if tree is not None:
            self._rebuilt.move_to_end(rv)
            return tree
        if self.snapshot_rvs:
            base_rv, base = self.snapshot_rvs[0], self.snapshot_trees[0]
        else:
            base_rv, base = self.rv, self.store
        tree = base.snapshot()
        lo = bisect.bisect_right(self.history, rv, key=lambda e: e.rv)
        hi = bisect.bisect_right(self.history, base_rv, key=lambda e: e.rv)
        for j in range(hi - 1, lo - 1, -1):
            ev = self.history[j]
            if ev.prev is None:
                tree.delete(ev.key)
            else:
                tree.insert(ev.prev, ev.prev)
        self._rebuilt[rv] = tree
        while len(self._rebuilt) > REBUILT_KEPT:
            self._rebuilt.popitem(last=False)
        return tree

    def oldest_snapshot_rv(self) -> int:
        """RV of the oldest retained (not rebuilt) snapshot."""
        return self.snapshot_rvs[0] if self.snapshot_rvs else 0

    @property
    def snapshots(self) -> list[tuple[int, Any]]:
        """(rv, tree) pairs, oldest first (for stats and tests)."""
        return list(zip(self.snapshot_rvs, self.snapshot_trees))

    def events_since(self, rv: int) -> list[CacheEvent]:
        """History events with RV > rv (S1.31), or raise TooOld."""
        if not self.evicted:
            oldest_ok = self.list_rv
        else:
            oldest_ok = self.history[0].rv - 1 if self.history else self.rv
        if rv < oldest_ok:
            raise TooOld(rv, oldest_ok)
        if not self.history or rv >= self.history[-1].rv:
            return []
        i = bisect.bisect_right(self.history, rv, key=lambda e: e.rv)
        return [self.history[j] for j in range(i, len(self.history))]

    def iter_prefix(self, tree, prefix: str, start: str | None = None) -> Iterator[Entry]:
        """Entries of `tree` whose key starts with prefix, from start (inclusive), in key order (S2.15)."""
        for key, e in tree.iter_from(start if start and start > prefix else prefix):
            if not key.startswith(prefix):
                return
            yield e

    def count_prefix(self, tree, prefix: str, start: str) -> int:
        """Keys in [start, end of prefix) in O(log n) (for remainingItemCount, S2.9)."""
        return tree.count_from(start, _prefix_end(prefix))

    def __len__(self) -> int:
        return len(self.store)

    def stats(self) -> dict[str, int]:
        """Bytes by structure (debug endpoint, residency benchmark)."""
        entry_bytes = 0
        for e in self.slots:
            if e is not None:
                entry_bytes += e.__sizeof__()     # its key included (the tree holds the entry, not a key)
        # the events, plus what only the window keeps alive: the entries they replaced, deletes' tombstones
        history_bytes = self.history.__sizeof__() + sum(
            ev.__sizeof__() + (ev.prev.__sizeof__() if ev.prev is not None else 0)
            + (ev.entry.__sizeof__() if ev.type == "DELETED" else 0) for ev in self.history)
        # Each snapshot keeps alive the path a later write copied (about one node per level);
        # an estimate, as walking every snapshot's nodes would be O(snapshots * n).
        nodes = max(self.store.node_count(), 1)
        depth = max(1, math.ceil(math.log(max(len(self.store), 2), 16)))
        snap_bytes = max(len(self.snapshot_rvs) - 1, 0) * depth * (self.store.__sizeof__() // nodes)
        bitmap_native = self.indexes.native_bytes()
        return {
            "objects": len(self.store),
            "entry_bytes": entry_bytes,
            "btree_bytes": self.store.__sizeof__(),
            "bitmap_bytes": self.indexes.python_bytes() + bitmap_native,
            "bitmap_native_bytes": bitmap_native,
            "slots_bytes": self.slots.__sizeof__(),
            "history_events": len(self.history),
            "history_bytes": history_bytes,
            "snapshots": len(self.snapshots),
            "snapshot_bytes_estimate": snap_bytes,
            **({"compression": self.compressor.stats()} if self.compressor is not None else {}),
        }


def _prefix_end(prefix: str) -> str:
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
