"""One watch cache per resource per process (upstream `cacher.go`).

```
            ┌────────── not ready ◀────────────┐ watch failure / compaction
  start ──▶ │ list from etcd (paged 10,000)    │ (all client watches end)
            └──────────▶ ready ─ watch etcd ───┘
```

* Initialisation: a quorum list paged by 10,000, then one etcd watch from that
  revision (with progress notifications) feeding every client watch (S4.16-S4.17).
  A warm start (cache/snapshot.py) replaces the list with the process's last
  snapshot of the cache, checked against etcd, and resumes the etcd watch from
  the snapshot's revision; the cache is ready once the watch has caught up with
  etcd's revision at start. Any doubt (no or a corrupt snapshot, another
  residency, a compacted revision) is a list, as before.
* While not ready, requests are answered 429 or delegated (S1.25, S1.33).
* Consistent reads (S3): the current etcd revision (one shared request for
  concurrent readers), then wait up to 3 s for the cache to reach it, asking
  etcd for progress every 100 ms while anyone waits.
* Dispatch: each event goes to every interested watcher without blocking;
  full queues get a shared time budget, then the watcher is terminated (S4.14).
* Bookmarks: a 1 s timer delivers one to watchers whose due time passed
  (min(now + 60 s, deadline - 2 s), S4.11).
"""
from __future__ import annotations

import asyncio
import logging
import math
import random
import time
import weakref
from collections import deque
from typing import Callable

import orjson

from machinery.aio import wait_event
from machinery.memory import release_free_memory
from storage import errors as serr
from storage.codec import decode_value
from storage.compact import last_compacted, revision_and_compacted
from storage.etcd import EtcdClient, WatchCompacted, WatchProgress
from storage.revision import SharedRead, SharedRevision
from storage.store import EtcdStore, stamp_rv

from . import metrics, snapshot
from .cache_watcher import CacheWatcher
from .dispatch import Dispatching
from .compression import CompressionConfig, Compressor, CorruptEntry
from .watch_cache import CacheEvent, Entry, WatchCache

# An empty section of a partially resident cache is checked by reading etcd's objects at its revision, if
# there are at most this many (else the cache lists).
EMPTY_PROBE_LIMIT = 256
log = logging.getLogger("cache")

# blockTimeout: how long a read waits for the cache to catch up (S3.4).
BLOCK_TIMEOUT = 3.0
# progressRequestPeriod: progress requests while someone waits (S3.2).
PROGRESS_PERIOD = 0.1
# Bookmark cadence (S4.11): a timer every ~1 s; per watcher at most once a minute
# and once ~2 s before its deadline.
BOOKMARK_TICK = 1.0
BOOKMARK_FREQUENCY = 60.0
BOOKMARK_BEFORE_DEADLINE = 2.0
# compactorPollPeriod (S2.16.2).
COMPACTION_POLL = 15.0
# Grace for a brand-new cache's first list before answering 429 (beyond upstream).
FIRST_INIT_GRACE = 3.0
# Initial list page size (S4.17). A partially resident cache reads pages of
# RESIDENT_LIST_PAGE instead: it keeps a fraction of each page, and a smaller page
# keeps the transient peak (raw page + decoded copies) from dominating its RSS.
LIST_PAGE = 10_000
RESIDENT_LIST_PAGE = 1_000
# Pages are also bounded in bytes (beyond upstream): the first asks for FIRST_LIST_PAGE objects, each next one for
# as many as fit LIST_PAGE_BYTES at the mean size of the page before (at most the page size above; large objects
# right after a run of small ones can still make one such page, as before). A page is held whole while it is
# decoded into the cache: 3,000 ConfigMaps of 100 KB (one page) peaked at 912 MiB RSS and held 286 MiB once
# ready; in pages of 16 MiB, 228 and 170 MiB, ready as fast (19 list requests instead of 1; an ad hoc script).
FIRST_LIST_PAGE = 100
LIST_PAGE_BYTES = 16 << 20
# etcd releases with reliable progress requests (S3.6).
PROGRESS_OK = {(3, 4): (3, 4, 31), (3, 5): (3, 5, 13)}


def progress_requests_supported(version: str) -> bool:
    """S3.6: >= 3.4.31 on 3.4.x, >= 3.5.13 on 3.5.x, any later minor; unparsable → False."""
    try:
        parts = tuple(int(p) for p in version.split("-")[0].split(".")[:3])
    except ValueError:
        return False
    if len(parts) != 3:
        return False
    need = PROGRESS_OK.get(parts[:2])
    if need is not None:
        return parts >= need
    return parts >= (3, 6, 0)


class Decoded:
    """What ingest extracts from one object version (decoded once)."""
    __slots__ = ("obj", "uid", "namespace", "labels")

    def __init__(self, obj: dict):
        md = meta_of(obj)
        self.obj = obj
        self.uid = _str(md.get("uid"))
        self.namespace = _str(md.get("namespace"))
        self.labels = labels_of(md)


def meta_of(obj: dict) -> dict:
    md = obj.get("metadata")
    return md if isinstance(md, dict) else {}


def labels_of(md: dict) -> dict[str, str]:
    """The labels a selector sees. What etcd holds was not necessarily written by an apiserver that checks
    types (a custom resource, another writer): a malformed value must not stop the cache ingesting it, so
    labels that are not a map of strings count as no labels (upstream's typed decoding would refuse them)."""
    labels = md.get("labels")
    if not labels or not isinstance(labels, dict):
        return {}
    if all(isinstance(v, str) for v in labels.values()):
        return labels
    return {k: v for k, v in labels.items() if isinstance(v, str)}


def _str(v) -> str:
    return v if isinstance(v, str) else ""


class Cacher(Dispatching):
    """The cache of one resource: owns its etcd watch, its WatchCache and its watchers."""

    def __init__(self, *, store: EtcdStore, client: EtcdClient, prefix: str, resource_label: str,
                 group: str, encode: Callable[[dict], bytes], residency: Callable[[str, bytes], bool] | None = None,
                 head: bytes | None = None, compaction_poll: float = COMPACTION_POLL,
                 list_page: int = LIST_PAGE, residency_name: str = "",
                 warm: "snapshot.Section | None" = None,
                 compression: CompressionConfig | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.client = client
        self.prefix = prefix
        self.resource_label = resource_label
        self.group = group
        self.encode = encode
        self.residency = residency
        # Typed objects' wire bytes start with `{"kind":"X","apiVersion":"v",`; entries keep
        # the rest only (list items carry no kind/apiVersion anyway, S8.1), `wire` puts it back.
        self.head = head
        self.compaction_poll = compaction_poll
        self.list_page = list_page
        self.clock = clock
        self.wc = WatchCache(prefix, clock)
        # Cold entries compressed (cache/compression.py); Secrets without a dictionary (no cross-namespace leak).
        if compression is not None and compression.enabled:
            self.wc.compressor = Compressor(self.wc, compression,
                                            dictionary=not (group == "" and resource_label == "secrets"),
                                            active=lambda: self.ready)
            self.wc.compressor.on_change = self._after_compression_pass
        self._compress_task: asyncio.Task | None = None
        self.ready = False
        self.not_ready_since = clock()
        self.watchers: set[CacheWatcher] = set()
        self.waiters: list[tuple[int, asyncio.Future]] = []
        self.progress_supported = progress_requests_supported(client.version or "")
        self._etcd_watch = None
        self._task: asyncio.Task | None = None
        self._bookmark_task: asyncio.Task | None = None
        self._progress_task: asyncio.Task | None = None
        self._compaction_task: asyncio.Task | None = None
        self._revision = SharedRevision(client, prefix, resource_label)
        self._ready_event = asyncio.Event()
        self.init_dispatch()
        self.dropped_nonresident = 0
        self.created_at = clock()
        self._initialised_once = False
        # Observers (an authorizer's indexes): `replace(objects)` after every (re)list and `apply(type, obj)`
        # for every event applied, with the decoded objects the cache ingests (add_observer).
        self.observers: list = []
        # Warm restart: the snapshot section to start from (once), what a section must match to be loaded,
        # and how the cache last started ("warm" or "cold").
        self.warm = warm
        self.residency_name = residency_name
        self.started = ""
        self._warming = False
        self._in_batch = False
        self._t_start = 0.0

    # --- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())
        self._bookmark_task = asyncio.create_task(self._bookmarks())
        self._compaction_task = asyncio.create_task(self._follow_compactions())
        if self.wc.compressor is not None:
            self._compress_task = asyncio.create_task(self.wc.compressor.run())

    async def stop(self) -> None:
        tasks = (self._task, self._bookmark_task, self._progress_task, self._compaction_task, self._compress_task)
        for t in tasks:
            if t is not None:
                t.cancel()
        for t in tasks:
            if t is not None:
                try:
                    await t
                except (asyncio.CancelledError, Exception):
                    pass
        self._terminate_all()

    def retry_after(self) -> int:
        """S1.25: clamp(floor(e^(0.06 * downtime)), 1, 30)."""
        down = max(self.clock() - self.not_ready_since, 0.0)
        return int(min(max(math.floor(math.exp(0.06 * down)), 1), 30))

    async def _run(self) -> None:
        while True:
            try:
                warm, self.warm = self.warm, None
                start = await self._warm_start(warm) if warm is not None else None
                if start is None:
                    await self._watch(await self._list_and_replace())
                else:
                    await self._watch(*start)
            except asyncio.CancelledError:
                raise
            except CorruptEntry as e:   # found by the dispatch of an event (a read's is handled by its request)
                self.corrupted(e)
            except Exception as e:
                log.warning("cache re-initialising resource=%s error=%r", self.resource_label, e)
                self._warm_failed("error")
            self._warm_failed("compacted")  # the resumed watch ended before it caught up: its RV was compacted
            self._set_not_ready()
            await asyncio.sleep(0.2 + random.random() * 0.3)

    def _after_compression_pass(self) -> None:
        """A pass changed entries: return what it freed to the OS and report the gauges."""
        c = self.wc.compressor
        # The pass that compresses a bulk load's last entries runs once its newest event left the window: the
        # resource is idle, and its per-event snapshots go now rather than at the next compaction poll.
        self.wc.drop_idle_snapshots()
        # The plain bytes compression replaced go back to the OS, not only to malloc: every 8 MiB, and what is
        # left once the cold entries are all compressed.
        if c.freed >= TRIM_AFTER_BYTES or (c.freed and c.settled()):
            c.freed = 0
            release_free_memory()
        labels = (self.group, self.resource_label)
        metrics.entries.labels(*labels, "compressed").set(c.compressed)
        metrics.entries.labels(*labels, "plain").set(len(self.wc.store) - c.compressed)
        metrics.compressed_bytes.labels(*labels).set(c.compressed_bytes)
        metrics.dictionary_bytes.labels(*labels).set(sum(k.native_bytes() for k in (c.codec, c.retiring) if k))

    def corrupted(self, err: Exception) -> None:
        """A compressed entry did not decode: the request that found it fails (the caller raises a Status), and
        the whole cache re-initialises from etcd, as after a watch error (the damaged bytes are never served)."""
        metrics.corrupt_entries.labels(self.group, self.resource_label).inc()
        if self.wc.compressor is not None:
            self.wc.compressor.corrupt += 1
        log.error("cache entry damaged resource=%s error=%s: re-initialising from etcd", self.resource_label, err)
        self._set_not_ready()
        w = self._etcd_watch
        if w is not None:
            w.close()   # _watch returns once what is buffered is applied; _run lists again

    def _set_not_ready(self) -> None:
        if self.ready:
            self.ready = False
            self.not_ready_since = self.clock()
            self._ready_event.clear()
        self._terminate_all()

    async def _list_and_replace(self) -> int:
        t0 = time.perf_counter()
        start = self.prefix
        rev = 0
        n = 0
        end = _prefix_end_bytes(self.prefix.encode())
        self.wc.begin_replace()
        limit = min(self.list_page, FIRST_LIST_PAGE)
        while True:
            kvs, hdr, more, _ = await self.client.range(start.encode(), end, revision=rev, limit=limit,
                                                        resource=self.resource_label)
            rev = rev or hdr
            start = kvs[-1].key.decode() + "\x00" if kvs else start
            if kvs:
                size = sum(len(kv.value) for kv in kvs) or 1
                limit = max(1, min(self.list_page, LIST_PAGE_BYTES * len(kvs) // size))
            n += self._ingest_page(kvs)  # consumes kvs: only one page of raw values is alive at a time
            if self.wc.compressor is not None:   # compressed while listed, a batch at a time (cache/compression.py)
                await self.wc.compressor.listed(final=not more)
            if not more:
                break
        self.wc.finish_replace(rev)
        self._mark_ready("cold", t0)
        return rev

    def _mark_ready(self, how: str, t0: float) -> None:
        """The state is complete (listed, or loaded and caught up): tell observers, serve."""
        for o in self.observers:
            self._tell(o, "replace", self._held_objects())
        release_free_memory()
        self.ready = True
        self.started = how
        self._initialised_once = True
        self._ready_event.set()
        if self._warming:
            self._warming = False
            metrics.snapshot_loads.labels(self.group, self.resource_label, "warm").inc()
        metrics.initializations.labels(self.group, self.resource_label).inc()
        metrics.capacity.labels(self.group, self.resource_label).set(self.wc.capacity)
        metrics.resource_version.labels(self.group, self.resource_label).set(self.wc.rv)
        log.info("cache ready resource=%s start=%s objects=%d rv=%d seconds=%.3f", self.resource_label, how,
                 len(self.wc), self.wc.rv, time.perf_counter() - t0)
        self._wake_waiters()

    # --- warm start (cache/snapshot.py) ---------------------------------------------------------

    def snapshot_identity(self) -> dict:
        """What a snapshot section must have been written by to be loaded into this cache."""
        return {"resource": self.resource_label, "group": self.group, "prefix": self.prefix,
                "residency": self.residency_name if self.residency is not None else "", "head": self.head}

    async def freshen(self, timeout: float = 1.0) -> None:
        """Bring the cache's RV up to etcd's current revision before a snapshot (progress requests, as a
        consistent read waits): a quiet resource's snapshot then carries a recent revision, not the one of its
        last event or list, which etcd may have compacted by the time the process restarts."""
        if not self.ready or not self.progress_supported:
            return

        async def fresh() -> None:
            await self.wait_until_fresh(await self.current_revision(), timeout)
        try:
            async with asyncio.timeout(timeout):
                await fresh()
        except Exception as e:  # etcd away or slow: the snapshot carries the RV the cache has
            log.debug("cache freshen before snapshot failed resource=%s error=%r", self.resource_label, e)

    async def capture(self) -> "snapshot.Capture | None":
        """This cache's state for a snapshot file, between two etcd responses (a transaction's events are
        all in or all out); None while not ready (listing or catching up)."""
        while self._in_batch:
            await asyncio.sleep(0.005)
        if not self.ready:
            return None
        return snapshot.capture(self.wc, self.snapshot_identity())

    async def _warm_start(self, section: "snapshot.Section") -> "tuple[int, int, _OpenWatch | None] | None":
        """Load the snapshot section and check it against etcd: (snapshot RV, RV to catch up to before
        being ready, the etcd watch from the snapshot RV, already open), or None (the caller lists; the reason
        is counted and logged)."""
        self._t_start = time.perf_counter()
        # etcd's revision and last compaction are asked for while the section loads (its chunks yield to the
        # loop): the load does not write, so what they say is as true after it as before. One GET answers both,
        # shared by the caches of this etcd that start together.
        checks = asyncio.ensure_future(_etcd_state(self.client).current())
        # The etcd watch from the snapshot's revision is opened as soon as that is known, and buffers while the
        # section loads: etcd delivers a watch that starts behind its revision on its next sync of such
        # watchers, up to 100 ms later (mvcc's syncWatchersLoop), and that wait now overlaps the load.
        opened: _OpenWatch | None = None

        def head_read(rv: int) -> None:
            nonlocal opened
            opened = self._open_watch(rv)
            if self.progress_supported:   # answered once etcd has synced the watch: usually while loading
                opened.watch.request_progress()
        try:
            try:
                loaded = await snapshot.load_section(section, self.wc, self.snapshot_identity(), head_read)
            except BaseException:
                _abandon(checks)
                raise
            current, compacted = await checks
            rv = loaded.rv
            if rv > current:
                raise snapshot.SnapshotError("mismatch", f"snapshot rv {rv} is beyond etcd's revision {current}")
            if rv < compacted:
                raise snapshot.SnapshotError("compacted", f"snapshot rv {rv} compacted (at {compacted})")
            await self._probe(loaded)
        except BaseException as e:
            if opened is not None:
                opened.close()
                self._etcd_watch = None
            if not isinstance(e, Exception):   # cancelled
                raise
            self.wc.begin_replace()
            self.wc.rv = self.wc.list_rv = 0
            reason = e.reason if isinstance(e, snapshot.SnapshotError) else "error"
            metrics.snapshot_loads.labels(self.group, self.resource_label, reason).inc()
            log.warning("cache snapshot not used resource=%s reason=%s error=%s", self.resource_label, reason, e)
            return None
        self._warming = True
        log.info("cache snapshot loaded resource=%s objects=%d rv=%d etcd_rv=%d seconds=%.3f", self.resource_label,
                 loaded.count, rv, current, loaded.seconds)
        # Ready once the watch has delivered everything up to etcd's revision now (progress requests tell
        # when a quiet resource got there); where they are unreliable (S3.6) at once.
        return rv, (current if self.progress_supported else 0), opened

    async def _probe(self, loaded: "snapshot.Loaded") -> None:
        """The snapshot describes this etcd: its newest entry is what etcd held under that key at the
        snapshot's revision (byte for byte, once ingested), or, for an empty snapshot of a fully resident
        cache, etcd held nothing under the prefix then. One small read either way."""
        rv = loaded.rv
        try:
            if loaded.newest is not None:
                key, mod = loaded.newest
                kv, _ = await self.client.get(key.encode(), self.resource_label, revision=rv)
                item = self._ingest_object(key, kv.value, kv.mod_revision) if kv is not None else None
                if item is None or kv.mod_revision != mod or item[2] != self.wc.store.get(key).data:
                    raise snapshot.SnapshotError("unverified", f"{key} at rv {rv} is not what etcd held")
                return
            p = self.prefix.encode()
            if self.residency is not None:
                # Empty here means no resident object at rv: etcd's objects there are few (with many, some would
                # fall in the range) and none may be resident. A resident shard snapshotted before its first
                # object (a process killed early) then restarts warm.
                kvs, _, more, _ = await self.client.range(p, _prefix_end_bytes(p), revision=rv,
                                                          limit=EMPTY_PROBE_LIMIT, resource=self.resource_label)
                if more or any(self.residency(kv.key.decode(), kv.value) for kv in kvs):
                    raise snapshot.SnapshotError("unverified", f"empty partially resident snapshot, but etcd "
                                                 f"held {'many objects' if more else 'a resident one'} at rv {rv}")
                return
            _, _, _, count = await self.client.range(p, _prefix_end_bytes(p), revision=rv, count_only=True,
                                                     resource=self.resource_label)
            if count:
                raise snapshot.SnapshotError("unverified", f"empty snapshot, but etcd held {count} keys at rv {rv}")
        except serr.StorageError as e:
            if e.code is serr.Code.EXPIRED:
                raise snapshot.SnapshotError("compacted", str(e)) from None
            raise

    def _warm_failed(self, reason: str) -> None:
        if self._warming:
            self._warming = False
            metrics.snapshot_loads.labels(self.group, self.resource_label, reason).inc()
            log.warning("cache warm start abandoned resource=%s reason=%s", self.resource_label, reason)

    def _ingest_page(self, kvs: list) -> int:
        """Ingest one listed page into the state being built; returns the resident count.

        Each object is decoded, encoded and put into the new state before the next one is touched, so
        its temporaries (decoded dict, labels, tuple) die at once and their memory is reused by the
        next object's, instead of all of them living until the end of the list and leaving pymalloc's
        pools empty but resident around the entries (bench.heap_per_object, 50,000 RoleBindings of
        0.4 KB: 27 MB of empty pools before, RSS 1,063 -> 614 B per object). Each raw value is dropped
        as soon as it has been ingested (the list is emptied)."""
        pending = deque(kvs)
        kvs.clear()
        count = 0

        def items():
            nonlocal count
            while pending:
                kv = pending.popleft()
                item = self._ingest_object(kv.key.decode(), kv.value, kv.mod_revision)
                if item is not None:
                    count += 1
                    yield item
        self.wc.add_listed(items())
        return count

    def install_list(self, listed: list, rev: int) -> int:
        """The whole (re)list at once from kvs already fetched (benchmarks); see `_ingest_page`."""
        self.wc.begin_replace()
        n = self._ingest_page(listed)
        self.wc.finish_replace(rev)
        return n

    def _resident(self, key: str, value: bytes) -> bool:
        if self.residency is None:
            return True
        ok = self.residency(key, value)
        if not ok:
            self.dropped_nonresident += 1
        return ok

    def _ingest_object(self, key: str, value: bytes, rv: int):
        """(key, rv, wire bytes, uid, namespace, labels) for one stored object, or None if not resident."""
        if not self._resident(key, value):
            return None
        d = Decoded(decode_value(key, value))
        data = self._stored_form(self.encode(stamp_rv(d.obj, rv)))
        return key, rv, data, d.uid, d.namespace, d.labels

    def _stored_form(self, full: bytes) -> bytes:
        """What an entry keeps: a fresh, exactly sized copy (orjson hands out bytes whose
        allocation is rounded up to >= 4 KiB; keeping those would cost up to 10x a small object)."""
        h = self.head
        if h is not None and full.startswith(h):
            return b"{" + full[len(h):]
        return memoryview(full).tobytes()

    def wire(self, data: bytes) -> bytes:
        """The bytes a GET or watch event sends for a stored entry."""
        h = self.head
        if h is not None and not data.startswith(b'{"kind":'):
            return h + data[1:]
        return data

    def _open_watch(self, rv: int) -> "_OpenWatch":
        """The etcd watch from `rv` + 1, its responses buffered by a reader task from now on (and, after a warm
        start's load, progress requests until the cache is ready)."""
        w = self.client.watch(self.prefix.encode(), rv + 1, resource=self.resource_label, progress_notify=True)
        self._etcd_watch = w
        return _OpenWatch(w)

    async def _watch(self, rv: int, ready_at: int | None = None, opened: "_OpenWatch | None" = None) -> None:
        """Apply and dispatch the etcd watch (`opened`: already opened from `rv` + 1 while a warm start
        loaded). A reader task buffers etcd's responses; this loop takes everything buffered at once, so
        under load one socket write per watcher carries several events (`_flush_watchers`) instead of one
        write per event. After a warm start the cache becomes ready when it has seen `ready_at`."""
        opened = opened or self._open_watch(rv)
        w, buffered, arrived, reader = opened.watch, opened.buffered, opened.arrived, opened.reader

        async def catch_up() -> None:
            while not self.ready:
                w.request_progress()
                await asyncio.sleep(PROGRESS_PERIOD)
        progress = None
        if ready_at is not None:
            progress = asyncio.ensure_future(catch_up()) if ready_at else None
        try:
            while True:
                if ready_at is not None and not self.ready and self.wc.rv >= ready_at:
                    self._mark_ready("warm", self._t_start)
                if not buffered:
                    if reader.done():
                        reader.result()  # WatchCompacted / storage errors surface here
                        return
                    arrived.clear()
                    waiter = asyncio.ensure_future(arrived.wait())
                    await asyncio.wait((waiter, reader), return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    continue
                # Let the reader take responses that are already here (a few loop turns, no timer).
                for _ in range(4):
                    n = len(buffered)
                    await asyncio.sleep(0)
                    if len(buffered) == n:
                        break
                while buffered:
                    await self._process(buffered.popleft())
                self._flush_watchers()
        except WatchCompacted:
            log.warning("cache watch compacted resource=%s rv=%d", self.resource_label, rv)
        finally:
            if progress is not None:
                progress.cancel()
            opened.close()
            self._etcd_watch = None

    async def _process(self, batch) -> None:
        self._in_batch = True
        try:
            await self._process_batch(batch)
        finally:
            self._in_batch = False

    async def _process_batch(self, batch) -> None:
        if isinstance(batch, WatchProgress):
            self.wc.progress(batch.revision)
            metrics.resource_version.labels(self.group, self.resource_label).set(self.wc.rv)
            self._wake_waiters()
            self._flush_watchers()  # fronts' watermarks (CacheWatcher.progress_to)
            return
        for ev in batch:
            metrics.events_received.labels(self.group, self.resource_label).inc()
            cev = self._apply(ev)
            if cev is not None:
                await self._dispatch(cev)
        if self.wc.capacity_changes:
            self._report_capacity()
        metrics.resource_version.labels(self.group, self.resource_label).set(self.wc.rv)
        self._wake_waiters()

    def _previous(self, key: str, ev) -> dict | None:
        """The object before `ev`: etcd's prev_kv, or, for an event at exactly the compacted revision (which
        comes without it), the cache's own copy; None if the cache does not hold the key."""
        cached = self.wc.store.get(key)
        if cached is None:
            return None
        if ev.prev is not None:
            return decode_value(key, ev.prev.value)
        return orjson.loads(self.wire(cached.data))

    def _apply(self, ev) -> CacheEvent | None:
        key = ev.kv.key.decode()
        rv = ev.kv.mod_revision
        if ev.type == "DELETE":
            before = self._previous(key, ev)
            if before is None:
                self.wc.progress(rv)
                return None
            prev = Decoded(before)
            data = self._stored_form(self.encode(stamp_rv(prev.obj, rv)))  # last state, delete's RV (S4.5)
            if self.observers and self.ready:  # before (a warm start catching up): the replace at ready
                self._notify("apply", "DELETED", prev.obj)
            return self.wc.apply_delete(key, rv, data, prev.namespace, prev.labels)
        if not self._resident(key, ev.kv.value):
            self.wc.progress(rv)
            return None
        cur = Decoded(decode_value(key, ev.kv.value))
        prev_labels = None
        before = self._previous(key, ev)
        if before is not None:
            prev_labels = labels_of(meta_of(before))
        data = self._stored_form(self.encode(stamp_rv(cur.obj, rv)))
        if self.observers and self.ready:
            self._notify("apply", "ADDED" if key not in self.wc.store else "MODIFIED", cur.obj)
        return self.wc.apply_put(key, rv, data, cur.uid, cur.namespace, cur.labels, prev_labels)

    # --- observers -----------------------------------------------------------------------

    def add_observer(self, observer) -> None:
        """Tell `observer` every object this cache holds: `replace(objects)` now if the cache is ready
        and after every (re)list, `apply(type, obj)` for every event applied (ADDED/MODIFIED/DELETED)."""
        self.observers.append(observer)
        if self.ready:
            self._tell(observer, "replace", self._held_objects())

    def _held_objects(self):
        """Every object the cache holds, decoded one at a time from its wire bytes: an observer's replace
        never sees the whole relist alive at once as dicts (that transient peak fragmented the heap and kept
        RSS at ~10 KB per RBAC object, bench.rbac_floor)."""
        for e in self.wc.iter_prefix(self.wc.store, self.prefix):
            yield orjson.loads(self.wire(e.data))

    def _notify(self, method: str, *args) -> None:
        for o in self.observers:
            self._tell(o, method, *args)

    def _tell(self, observer, method: str, *args) -> None:
        try:
            getattr(observer, method)(*args)
        except Exception:  # an observer's bug must not stop the cache
            log.exception("cache observer failed resource=%s", self.resource_label)

    def _report_capacity(self) -> None:
        for change in self.wc.capacity_changes:
            (metrics.capacity_increase if change > 0 else metrics.capacity_decrease).labels(
                self.group, self.resource_label).inc()
        self.wc.capacity_changes.clear()
        metrics.capacity.labels(self.group, self.resource_label).set(self.wc.capacity)

    # --- bookmarks (S4.11) ---------------------------------------------------------------

    async def _bookmarks(self) -> None:
        while True:
            await asyncio.sleep(BOOKMARK_TICK * (1 + random.random() * 0.25))
            if not self.ready:
                continue
            now = self.clock()
            due = self.due_bookmarks(now)
            if due and self.progress_supported and self._etcd_watch is not None:
                # Beyond upstream: learn the global revision before bookmarking, so a
                # quiet resource still gets fresh bookmarks (only where progress
                # requests are reliable, S3.6); later bookmarks carry the answer.
                self._etcd_watch.request_progress()
            for w in due:
                w.add_bookmark(self.wc.rv)
                w.next_bookmark = next_bookmark_time(now, w.deadline)

    async def _follow_compactions(self) -> None:
        """S2.16.2: every 15 s read the last compacted revision and drop older snapshots (and, beyond upstream,
        an idle resource's per-event snapshots: `WatchCache.drop_idle_snapshots`)."""
        while True:
            await asyncio.sleep(self.compaction_poll)
            self.wc.drop_idle_snapshots()
            try:
                rev = await last_compacted(self.client)
            except Exception as e:
                log.warning("compaction poll failed resource=%s error=%r", self.resource_label, e)
                continue
            if rev:
                self.wc.compact(rev)

    # --- waiting for freshness (S3) ------------------------------------------------------

    async def settle(self, grace: float = FIRST_INIT_GRACE) -> None:
        """A cache created moments ago (e.g. for a new CRD) gets a short grace period to
        finish its first list before requests see 429 (beyond upstream, documented)."""
        if self.ready or self._initialised_once:
            return
        left = grace - (self.clock() - self.created_at)
        if left > 0:
            await wait_event(self._ready_event, left)

    async def current_revision(self) -> int:
        """The etcd revision now, shared with concurrent callers (storage.revision)."""
        return await self._revision.current()

    async def wait_until_fresh(self, rv: int, timeout: float = BLOCK_TIMEOUT) -> None:
        """Block until the cache has seen rv; after `timeout`, TOO_LARGE_RV with Retry-After 1 (S1.16, S1.22)."""
        if self.wc.rv >= rv:
            return
        t0 = time.perf_counter()
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((rv, fut))
        self._ensure_progress_loop()
        try:
            async with asyncio.timeout(timeout):   # not wait_for: machinery/aio.py
                await asyncio.shield(fut)
        except TimeoutError:
            raise serr.StorageError(serr.Code.TOO_LARGE_RV, self.prefix, rv=rv, current_rv=self.wc.rv,
                                    retry_after=1) from None
        finally:
            metrics.read_wait.labels(self.group, self.resource_label).observe(time.perf_counter() - t0)
            self.waiters = [(r, f) for r, f in self.waiters if f is not fut]

    def _wake_waiters(self) -> None:
        if not self.waiters:
            return
        keep = []
        for rv, fut in self.waiters:
            if self.wc.rv >= rv:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((rv, fut))
        self.waiters = keep

    def _ensure_progress_loop(self) -> None:
        if self._progress_task is None or self._progress_task.done():
            self._progress_task = asyncio.create_task(self._progress_loop())

    async def _progress_loop(self) -> None:
        while self.waiters:
            w = self._etcd_watch
            if w is not None and self.progress_supported:
                w.request_progress()
            await asyncio.sleep(PROGRESS_PERIOD)

    # --- watchers ------------------------------------------------------------------------------

    def dispatch_rv(self) -> int:
        return self.wc.rv

    def add_watcher(self, w: CacheWatcher) -> None:
        self.watchers.add(w)

    def remove_watcher(self, w: CacheWatcher) -> None:
        self.watchers.discard(w)
        w.stop()

    def queue_size(self) -> int:
        """S4.14: clamp(ceil(capacity / 75 s), 10, 100)."""
        return int(min(max(math.ceil(self.wc.capacity / 75), 10), 100))

    def decode_entry(self, e: Entry) -> dict:
        return orjson.loads(e.data)

    def encode_deleted(self, prev: Entry, rv: int) -> bytes:
        """Previous content with the event's RV (S4.6)."""
        return self._stored_form(self.encode(stamp_rv(orjson.loads(self.wire(prev.data)), rv)))


TRIM_AFTER_BYTES = 8 << 20   # malloc_trim once compression has given up this many bytes (it walks the heap)


def next_bookmark_time(now: float, deadline: float) -> float:
    """S4.11: min(now + 60 s, deadline - 2 s); 0 (none) if that is already past."""
    t = min(now + BOOKMARK_FREQUENCY, deadline - BOOKMARK_BEFORE_DEADLINE)
    return t if t > now else 0.0


_etcd_states: "weakref.WeakKeyDictionary[EtcdClient, SharedRead]" = weakref.WeakKeyDictionary()


def _etcd_state(client: EtcdClient) -> "SharedRead[tuple[int, int]]":
    """(revision now, last compaction) of this client's etcd, one read for the callers that arrive together."""
    s = _etcd_states.get(client)
    if s is None:
        ref = weakref.ref(client)    # (the value must not keep its key alive)
        s = _etcd_states[client] = SharedRead(lambda: revision_and_compacted(ref()))
    return s


class _OpenWatch:
    """An etcd watch whose responses a reader task buffers as they come (Cacher._watch applies them)."""

    def __init__(self, watch) -> None:
        self.watch = watch
        self.buffered: deque = deque()
        self.arrived = asyncio.Event()
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for item in self.watch:
            self.buffered.append(item)
            self.arrived.set()

    def close(self) -> None:
        _abandon(self.reader)
        self.watch.close()


def _abandon(f: asyncio.Future) -> None:
    """Cancel a future whose outcome no longer matters; its exception, if it had one, is taken (not logged as
    never retrieved)."""
    f.cancel()
    f.add_done_callback(_retrieve)


def _retrieve(f: asyncio.Future) -> None:
    if not f.cancelled():
        f.exception()


def _prefix_end_bytes(prefix: bytes) -> bytes:
    from storage.etcd import prefix_end
    return prefix_end(prefix)

