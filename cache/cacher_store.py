"""The storage contract served through the watch cache (upstream: Cacher implements storage.Interface).

Writes and quorum GETs go to etcd (S1.14); lists and watches are answered by
the cache with upstream's semantics (consistent reads S3, snapshots S2.14,
history S1.29-S1.31), falling back to etcd exactly where upstream does. The
HTTP layer uses the byte-level paths in `apiserver/cached.py`; this adapter
exists so the one storage contract suite (tests/test_storage_contract.py)
holds the cache to the same behaviour as the etcd store.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Callable

import orjson

from storage import errors as serr
from storage.store import EtcdStore, Event, ListResult, Obj

from .cache_watcher import CacheWatcher
from .cacher import Cacher, TooLargeRV
from .watch_cache import TooOld


class CacherStore:
    def __init__(self, etcd_store: EtcdStore, cacher: Cacher):
        self.etcd = etcd_store
        self.cacher = cacher

    # Writes and quorum reads: etcd.
    async def get(self, key: str, rv: int = 0) -> Obj:
        return await self.etcd.get(key, rv)

    async def create(self, key: str, obj: Obj) -> Obj:
        return await self.etcd.create(key, obj)

    async def update(self, key: str, obj: Obj, expected_rv: int) -> Obj:
        return await self.etcd.update(key, obj, expected_rv)

    async def guaranteed_update(self, key: str, fn, retries: int = 20) -> Obj:
        return await self.etcd.guaranteed_update(key, fn, retries)

    async def delete(self, key: str, **kw) -> tuple[Obj, int]:
        return await self.etcd.delete(key, **kw)

    async def current_revision(self, prefix: str) -> int:
        return await self.etcd.current_revision(prefix)

    async def count(self, prefix: str) -> int:
        return await self.etcd.count(prefix)

    async def compact(self, revision: int) -> None:
        await self.etcd.compact(revision)
        self.cacher.wc.compact(revision)

    # Reads from the cache.
    async def list(self, prefix: str, *, revision: int = 0, start_key: str | None = None, limit: int = 0,
                   predicate: Callable[[Obj], bool] | None = None, not_older_than: int = 0) -> ListResult:
        c = self.cacher
        wc = c.wc
        if not c.ready:
            return await self.etcd.list(prefix, revision=revision, start_key=start_key, limit=limit,
                                        predicate=predicate, not_older_than=not_older_than)
        if revision > 0:
            if revision > wc.rv:
                try:
                    await c.wait_until_fresh(revision)
                except TooLargeRV:
                    return await self.etcd.list(prefix, revision=revision, start_key=start_key, limit=limit,
                                                predicate=predicate)
            tree = wc.snapshot_at(revision)
            if tree is None:  # S1.21: older than every snapshot -> etcd (may be 410)
                return await self.etcd.list(prefix, revision=revision, start_key=start_key, limit=limit,
                                            predicate=predicate)
            rv = revision
        else:
            if not c.progress_supported:  # S1.26
                return await self.etcd.list(prefix, start_key=start_key, limit=limit, predicate=predicate,
                                            not_older_than=not_older_than)
            try:
                await c.wait_until_fresh(max(await c.current_revision(), not_older_than))
            except TooLargeRV:
                return await self.etcd.list(prefix, start_key=start_key, limit=limit, predicate=predicate,
                                            not_older_than=not_older_than)
            tree = wc.store.snapshot()
            rv = wc.rv
        items: list[Obj] = []
        last = None
        for e in wc.iter_prefix(tree, prefix, start_key):
            obj = orjson.loads(c.wire(e.data))
            if predicate is not None and not predicate(obj):
                continue
            items.append(obj)
            last = e.key
            if limit and len(items) == limit:
                break
        cont = remaining = None
        if limit and len(items) == limit and last is not None:
            after = wc.count_prefix(tree, prefix, last + "\x00")
            if after:
                cont = last + "\x00"
                remaining = after if predicate is None else None
        return ListResult(items, rv, cont, remaining)

    async def watch(self, prefix: str, rv: int, predicate: Callable[[Obj], bool] | None = None, *,
                    initial_state: bool = False, progress: bool = False,
                    progress_interval: float | None = None) -> AsyncIterator[Event]:
        c = self.cacher
        wc = c.wc
        if not c.ready:
            raise serr.StorageError(serr.Code.UNREACHABLE, prefix, "storage is (re)initializing")
        w = CacheWatcher(prefix=prefix, predicate=predicate, shard=None, queue_size=c.queue_size(), start_rv=0,
                         allow_bookmarks=False, deadline=time.monotonic() + 3600,
                         encode_deleted=c.encode_deleted, decode=c.decode_entry)
        if initial_state:
            snap = wc.store.snapshot()
            start = wc.rv
            first = [("ADDED", e.data) for e in wc.iter_prefix(snap, prefix)
                     if predicate is None or predicate(c.decode_entry(e))]
        else:
            try:
                replay = wc.events_since(rv)
            except TooOld as e:
                raise serr.StorageError(serr.Code.EXPIRED, prefix, rv=rv, current_rv=e.oldest) from None
            cache: dict = {}
            first = [f for f in (w.convert(ev, cache) for ev in replay) if f is not None]
            start = max(rv, wc.rv)
        w.start_rv = w.last_rv = start
        c.add_watcher(w)
        try:
            for t, data in first:
                obj = orjson.loads(c.wire(data))
                yield Event(t, obj, int(obj["metadata"]["resourceVersion"]))
            while not w.done:
                if not w.queue:
                    await w.wait(1.0)
                    continue
                t, data = w.queue.popleft()
                if t == "BOOKMARK":
                    continue
                obj = orjson.loads(c.wire(data))
                yield Event(t, obj, int(obj["metadata"]["resourceVersion"]))
            if w.terminated:
                raise serr.StorageError(serr.Code.INTERNAL, prefix, "watcher terminated (too slow)")
        finally:
            c.remove_watcher(w)


async def start_cacher_store(etcd_store: EtcdStore, prefix: str, encode, head: bytes | None = None) -> CacherStore:
    """A started, ready CacherStore for `prefix` (tests)."""
    client = etcd_store.client
    if client.version is None:
        await client.status()
    c = Cacher(store=etcd_store, client=client, prefix=prefix, resource_label=etcd_store.resource,
               group="", encode=encode, head=head)
    c.start()
    for _ in range(200):
        if c.ready:
            break
        await asyncio.sleep(0.02)
    return CacherStore(etcd_store, c)
