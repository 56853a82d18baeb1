"""An in-process multi-version key-value store with the part of `storage.etcd.EtcdClient`'s contract that
`storage.store.EtcdStore` uses: gets and ranges at a revision, compare-and-swap creates, updates and deletes,
compaction, and watches with previous values and progress. The node tier keeps the Leases it absorbs here, so
the apiserver's own write, list and watch code (validation, managedFields, preconditions and their 409 texts,
continue tokens, selectors, bookmarks, 410 for a compacted revision) serves them unchanged; nothing in it is
durable (the control plane is: `nodetier.forwarder`).

Revisions: the first one is the wall clock in microseconds when the store was made, and each write adds one.
A tier that restarts therefore never hands out a resourceVersion it handed out before (it would have to
write a million times a second for its counter to overtake the clock), so a client resuming a watch with a
revision from before the restart is answered 410 (compacted) and relists, never silently skips events.
"""
from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from typing import AsyncIterator

from storage.etcd import KV, WatchCompacted, WatchEvent, WatchProgress, prefix_end


class _Watch:
    """One watch: replays the retained events from its start revision, then live ones, as `EtcdWatch`."""

    def __init__(self, kv: "MemoryKV", prefix: bytes, start_revision: int):
        self._kv, self._prefix, self._end = kv, prefix, prefix_end(prefix)
        self._start = start_revision
        self._queue: asyncio.Queue = asyncio.Queue()
        self._closed = False

    def matches(self, key: bytes) -> bool:
        return self._prefix <= key < self._end

    def push(self, item) -> None:
        if not self._closed:
            self._queue.put_nowait(item)

    def request_progress(self) -> None:
        self.push(WatchProgress(self._kv.revision))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._kv._watches.discard(self)
            self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[list[WatchEvent] | WatchProgress]:
        kv = self._kv
        if self._start and self._start <= kv.compacted:
            self.close()
            raise WatchCompacted(kv.compacted)
        # Registered before the replay is taken, with no await between: nothing is missed or repeated.
        kv._watches.add(self)
        replay = [kv._event(r) for r in kv._log if r[0] >= self._start and self.matches(r[1])] \
            if self._start else []
        try:
            if replay:
                yield replay
            # (a start in the future waits for it, as etcd's watch does)
            last = replay[-1].kv.mod_revision if replay else max(0, self._start - 1)
            while True:
                item = await self._queue.get()
                if item is None:
                    return
                if isinstance(item, WatchEvent):
                    if item.kv.mod_revision <= last:
                        continue
                    batch = [item]
                    while not self._queue.empty():   # whatever else is already queued, as one response
                        nxt = self._queue.get_nowait()
                        if not isinstance(nxt, WatchEvent):
                            self._queue.put_nowait(nxt)   # (a progress or the end: after this batch)
                            break
                        batch.append(nxt)
                    last = batch[-1].kv.mod_revision
                    yield batch
                else:
                    yield item
        finally:
            self.close()


class MemoryKV:
    """Keys in sorted order, each with its versions since the last compaction (None for a deletion).

    Versions and the event log are plain tuples of bytes and ints, and KV and WatchEvent objects are made when
    read: such tuples leave the garbage collector's lists after their first collection, where a KV and a
    WatchEvent per write (dataclasses) stayed on them. At 20,000 nodes the log holds ~120,000 versions, and a
    full collection over them paused the tier for ~130 ms."""

    def __init__(self, start_revision: int | None = None, retain_events: int = 200_000):
        self.revision = start_revision if start_revision is not None else time.time_ns() // 1000
        self.compacted = self.revision     # nothing before the first revision can be read or watched
        self.version = "memkv"             # what EtcdClient.status() would have read
        self.cluster_id = 0
        self._keys: list[bytes] = []
        # key -> [(mod revision, value or None for a deletion, create revision)]
        self._versions: dict[bytes, list[tuple[int, bytes | None, int]]] = {}
        # (mod revision, key, value or None, create revision, previous version as in _versions or None)
        self._log: deque[tuple] = deque()
        self._retain = retain_events
        self._watches: set[_Watch] = set()

    # --- reads ----------------------------------------------------------------------------------

    def _at(self, key: bytes, revision: int) -> KV | None:
        versions = self._versions.get(key)
        if not versions:
            return None
        if not revision:
            rev, value, create = versions[-1]
            return None if value is None else KV(key, value, rev, create)
        for rev, value, create in reversed(versions):
            if rev <= revision:
                return None if value is None else KV(key, value, rev, create)
        return None

    @staticmethod
    def _event(rec: tuple) -> WatchEvent:
        rev, key, value, create, prev = rec
        prev_kv = KV(key, prev[1], prev[0], prev[2]) if prev is not None else None
        if value is None:
            return WatchEvent("DELETE", KV(key, b"", rev, 0), prev_kv)
        return WatchEvent("PUT", KV(key, value, rev, create), prev_kv)

    def current(self, key: bytes) -> KV | None:
        """The key's newest version (None: absent or deleted), without an await."""
        return self._at(key, 0)

    def _check_revision(self, revision: int) -> None:
        from storage import errors
        if revision and revision < self.compacted:
            raise errors.StorageError(errors.Code.EXPIRED, "", rv=revision, current_rv=self.compacted)
        if revision > self.revision:
            raise errors.StorageError(errors.Code.TOO_LARGE_RV, "", rv=revision, current_rv=self.revision)

    async def status(self) -> str:
        return self.version

    async def get(self, key: bytes, resource: str = "", revision: int = 0) -> tuple[KV | None, int]:
        self._check_revision(revision)
        return self._at(key, revision), self.revision

    async def range(self, start: bytes, end: bytes, *, revision: int = 0, limit: int = 0, resource: str = "",
                    count_only: bool = False, keys_only: bool = False) -> tuple[list[KV], int, bool, int]:
        self._check_revision(revision)
        lo = bisect.bisect_left(self._keys, start)
        hi = bisect.bisect_left(self._keys, end) if end != b"\x00" else len(self._keys)
        out: list[KV] = []
        count = 0
        for key in self._keys[lo:hi]:
            kv = self._at(key, revision)
            if kv is None:
                continue
            count += 1
            if not count_only and (not limit or len(out) < limit):
                out.append(kv)
        return out, revision or self.revision, bool(limit) and count > len(out), count

    async def current_revision(self, prefix: bytes, resource: str = "") -> int:
        return self.revision

    # --- writes: one revision each, as an etcd Txn ------------------------------------------------

    def _write(self, key: bytes, value: bytes | None, prev: KV | None) -> int:
        if value is not None:
            # A right-sized copy: the value usually comes from orjson.dumps, whose bytes keep the buffer they
            # were written in (4 KiB at least, for a 0.6 KB Lease: orjson 3.11-3.13 never trims it), and the
            # store keeps every version for its event window: 4.4 KB per renewal held, 0.7 GB at 20,000 nodes.
            value = bytes(memoryview(value))
        self.revision += 1
        rev = self.revision
        versions = self._versions.get(key)
        if versions is None:
            bisect.insort(self._keys, key)
            versions = self._versions[key] = []
        else:
            key = self._keys[bisect.bisect_left(self._keys, key)]   # one key object for all its versions
        create = 0 if value is None else prev.create_revision if prev is not None else rev
        versions.append((rev, value, create))
        rec = (rev, key, value, create,
               (prev.mod_revision, prev.value, prev.create_revision) if prev is not None else None)
        self._log.append(rec)
        if len(self._log) > self._retain:
            self.compact_to(self._log[len(self._log) - self._retain][0])
        ev = None
        for w in list(self._watches):
            if w.matches(key):
                ev = ev or self._event(rec)
                w.push(ev)
        return rev

    async def create(self, key: bytes, value: bytes, resource: str = "") -> tuple[bool, int, KV | None]:
        cur = self._at(key, 0)
        if cur is not None:
            return False, self.revision, cur
        return True, self._write(key, value, None), None

    async def update(self, key: bytes, value: bytes, expected_mod_revision: int,
                     resource: str = "") -> tuple[bool, int, KV | None]:
        cur = self._at(key, 0)
        if cur is None or cur.mod_revision != expected_mod_revision:
            return False, self.revision, cur
        return True, self._write(key, value, cur), None

    async def delete(self, key: bytes, expected_mod_revision: int,
                     resource: str = "") -> tuple[bool, int, KV | None]:
        cur = self._at(key, 0)
        if cur is None or cur.mod_revision != expected_mod_revision:
            return False, self.revision, cur
        return True, self._write(key, None, cur), None

    async def delete_prefix(self, prefix: bytes, resource: str = "") -> int:
        kvs, _, _, _ = await self.range(prefix, prefix_end(prefix))
        for kv in kvs:
            self._write(kv.key, None, kv)
        return len(kvs)

    async def compact(self, revision: int, physical: bool = True) -> None:
        self.compact_to(revision)

    def compact_to(self, revision: int) -> None:
        """Forget every version older than the newest one at `revision`, and the events up to it.

        Only the keys of the events forgotten now can hold a version to forget (every version has its event,
        and a version becomes forgettable when a newer one of its key at or below `revision` is forgotten), so
        the cost is the events', not the keys'. (A pass over every key, as this was, ran at each write once
        the log held `retain_events`: 31,000 nodes renew ~3,040 times a second, over 200,000 in the up to 65 s
        of history the forwarder's compaction then kept (60 s, every 5 s), and the tier spent 46 % of its time
        here and fell behind.)"""
        if revision <= self.compacted:
            return
        self.compacted = compacted = min(revision, self.revision)
        log, touched = self._log, set()
        while log and log[0][0] <= compacted:
            touched.add(log.popleft()[1])
        for key in touched:
            versions = self._versions.get(key)
            if versions is None:
                continue
            i = 0
            while i + 1 < len(versions) and versions[i + 1][0] <= compacted:
                i += 1
            if i:
                del versions[:i]
            if len(versions) == 1 and versions[0][1] is None and versions[0][0] <= compacted:
                del self._versions[key]
                self._keys.pop(bisect.bisect_left(self._keys, key))

    def watch(self, prefix: bytes, start_revision: int, *, resource: str = "",
              progress_notify: bool = True) -> _Watch:
        return _Watch(self, prefix, start_revision)

    def oldest_event_revision(self) -> int:
        return self._log[0][0] if self._log else self.revision

    async def close(self) -> None:
        for w in list(self._watches):
            w.close()
