"""`CacheDelegator`: the storage contract the endpoints call, one per resource (upstream's
`cacheDelegator` in k8s.io/apiserver/pkg/storage/cacher/delegator.go).

Writes and quorum reads go to etcd (`storage.store.EtcdStore`). GETs with a resourceVersion, lists
and watches go to the watch cache where `cache.plan` (the S1.14-S1.27 table) and the residency
allow it, and to etcd otherwise. With `--watch-cache=false` there is no cacher and everything goes
to etcd. Errors are storage errors; `apiserver/status.py` turns them into Status objects.
"""
from __future__ import annotations

from typing import Any, Callable

from machinery import jsonenc
from machinery.encoding import list_item_bytes
from machinery.resources import Resource
from storage import errors as serr
from storage.continue_token import encode_continue, resolve_continue
from storage.interface import ListPage, ListRequest, WatchRequest, WatchSink
from storage.store import EtcdStore, parse_resource_version

from . import plan, reads
from .cacher import Cacher
from .compression import CorruptEntry
from .metrics import residency_delegated, sharded_watch_metrics
from .residency import Residency, entry_shard_filter

Obj = dict[str, Any]


def not_ready(cacher: Cacher) -> serr.StorageError:
    """S1.25/S1.33: the cache is (re)initializing and the request may not go to etcd (429)."""
    return serr.StorageError(serr.Code.NOT_READY, cacher.prefix, retry_after=cacher.retry_after())


def damaged(cacher: Cacher, key: str, err: CorruptEntry) -> serr.StorageError:
    """A compressed entry did not decode: the cache re-initialises from etcd and this request fails with a
    500 (its bytes are never served); the client's retry is answered once the cache is ready again."""
    cacher.corrupted(err)
    return serr.StorageError(serr.Code.INTERNAL, key, f"the watch cache's copy of {key} is damaged ({err}); "
                             "the cache is re-initialising from etcd")


class CacheDelegator:
    def __init__(self, res: Resource, store: EtcdStore, cacher: Cacher | None, residency: Residency,
                 resource_prefix: str):
        self.res = res
        self.store = store
        self.cacher = cacher
        self.residency = residency
        self.resource_prefix = resource_prefix  # `/registry/<resource>/`, what shard filters cut keys by
        # Without a cacher: the keys a reflector keeps (storage.reflector.NameSet; namespaces in a front).
        self.known: Any = None

    async def stop(self) -> None:
        if self.cacher is not None:
            await self.cacher.stop()
        await self.store.stop()

    async def _settled(self) -> Cacher | None:
        """The cacher, after its first initialisation has had a short grace period."""
        c = self.cacher
        if c is not None and not c.ready:
            await c.settle()
        return c

    # --- writes and quorum reads: etcd -------------------------------------------------------

    async def get(self, key: str) -> Obj:
        return await self.store.get(key)

    async def create(self, key: str, obj: Obj) -> Obj:
        return await self.store.create(key, obj)

    async def update(self, key: str, obj: Obj, expected_rv: int) -> Obj:
        return await self.store.update(key, obj, expected_rv)

    async def try_update(self, key: str, obj: Obj, expected_rv: int) -> tuple[Obj | None, Obj | None]:
        return await self.store.try_update(key, obj, expected_rv)

    async def guaranteed_update(self, key: str, fn: Callable[[Obj], Obj | None], retries: int = 20) -> Obj:
        return await self.store.guaranteed_update(key, fn, retries)

    async def delete(self, key: str, **kw) -> tuple[Obj, int]:
        return await self.store.delete(key, **kw)

    async def current_revision(self, prefix: str) -> int:
        return await self.store.current_revision(prefix)

    async def count(self, prefix: str) -> int:
        return await self.store.count(prefix)

    async def compact(self, revision: int) -> None:
        """Compact etcd; the cache forgets the compacted history at once (it would on its next
        compaction poll, S2.16.2)."""
        await self.store.compact(revision)
        if self.cacher is not None:
            self.cacher.wc.compact(revision)

    # --- the cache's copy, for writes (upstream GuaranteedUpdate's cachedExistingObject) ------

    def holds(self, key: str) -> bool:
        """The ready cache holds this key (a namespace that exists for NamespaceLifecycle); without a cache, the
        reflector's names do."""
        c = self.cacher
        if c is None:
            return self.known is not None and key in self.known
        return c.ready and c.wc.store.get(key) is not None

    def cached_object(self, key: str) -> Obj | None:
        """The ready cache's copy of an object (possibly stale: only a CAS may rely on it)."""
        c = self.cacher
        if c is None or not c.ready:
            return None
        e = c.wc.store.get(key)
        if e is None:
            return None
        try:
            return jsonenc.loads(c.wire(e.data))
        except CorruptEntry as err:
            c.corrupted(err)
            return None   # the write reads the object from etcd instead

    # --- GET with a resourceVersion (S1.14-S1.16) ----------------------------------------------

    async def get_at(self, key: str, resource_version: str | None) -> Obj | bytes:
        """The object (decoded from etcd) or its wire bytes (from the cache)."""
        rv = parse_resource_version(resource_version, key)
        cacher = follower = await self._settled()
        if cacher is not None and self.residency.partial(self.res.plural):
            # A name does not tell which shard holds the object: never answer 404 for an
            # object that merely lives outside this process's residency.
            residency_delegated.labels(self.res.group, self.res.plural, "get").inc()
            cacher = None
        if cacher is not None:
            try:
                where = plan.plan_get(resource_version, ready=cacher.ready)
            except plan.NotReadyError:
                raise not_ready(cacher) from None
            if where == "cache":
                # S1.15-S1.16: RV=0 any state; RV=N wait up to 3 s, 504 otherwise (no etcd fallback).
                if rv:
                    await cacher.wait_until_fresh(rv)
                e = cacher.wc.store.get(key)
                if e is None:
                    raise serr.not_found(key)
                try:
                    return cacher.wire(e.data)
                except CorruptEntry as err:
                    raise damaged(cacher, key, err) from None
        # S1.14: RV unset is a quorum read. On the etcd path RV=N reads the latest state and
        # checks it is not older than N.
        obj = await self.store.get(key)
        if rv and int(obj["metadata"]["resourceVersion"]) < rv:
            cur = await self.store.current_revision(self.resource_prefix)
            if cur < rv:
                await self.wait_for_revision(key, rv, cur, follower)
                obj = await self.store.get(key)
        return obj

    async def wait_for_revision(self, key: str, rv: int, current: int, follower: Cacher | None) -> None:
        """A GET at `rv`, ahead of etcd's `current` revision. A server with a watch cache waits for it as the cache
        would (S1.16: up to 3 s, then 504 with Retry-After 1), even where the object itself is read from etcd
        (a shard outside its range: its cacher follows the whole resource); without one (--watch-cache=false)
        the etcd path answers at once, as upstream's does."""
        if follower is None:
            raise serr.StorageError(serr.Code.TOO_LARGE_RV, key, rv=rv, current_rv=current, retry_after=1)
        await follower.wait_until_fresh(rv)

    # --- LIST ----------------------------------------------------------------------------------

    async def get_list(self, prefix: str, req: ListRequest) -> ListPage:
        cacher = await self._settled()
        if cacher is not None:
            if self.residency.serves(self.res.plural, req.shard):
                page = await self._list_from_cache(cacher, prefix, req)
                if page is not None:
                    return page
            else:
                residency_delegated.labels(self.res.group, self.res.plural, "list").inc()
        return await self.store.get_list(prefix, req)

    async def _list_from_cache(self, cacher: Cacher, prefix: str, req: ListRequest) -> ListPage | None:
        """A page from the watch cache, or None when the list must go to etcd (S1.18-S1.26)."""
        parse_resource_version(req.resource_version, prefix)  # S1.11: 400 before routing (and before continue)
        start_key = cont_rv = None
        if req.continue_:
            start_key, cont_rv = resolve_continue(req.continue_, req.resource_version, prefix)  # S1.12
        try:
            p = plan.plan_list(req.resource_version, req.resource_version_match, req.limit, cont_rv,
                               ready=cacher.ready, consistent_supported=cacher.progress_supported,
                               has_selectors=req.predicate is not None or req.shard is not None,
                               single_key=req.single_key, cache_rv=cacher.wc.rv)
        except plan.NotReadyError:
            raise not_ready(cacher) from None
        if p.source != "cache":
            return None
        shard = None
        if req.shard is not None and not (self.residency.partial(self.res.plural) and
                                          req.shard.contains(self.residency.selector)):
            # (a shardSelector covering this shard's residency matches every entry it holds: no filter)
            shard = entry_shard_filter(req.shard, self.resource_prefix)
        try:
            got = await reads.list_from_cache(cacher, self.res, p, prefix, start_key, req.predicate,
                                              req.label_requirements, req.namespace, shard=shard)
        except reads.Delegate:
            return None
        res, wire = self.res, cacher.wire
        try:
            raw = [list_item_bytes(res, e.data) for e in got.entries]
        except CorruptEntry as err:
            raise damaged(cacher, prefix, err) from None
        entries = got.entries
        page = ListPage(got.resource_version, raw=raw, decode=lambda data: jsonenc.loads(wire(data)),
                        keys=lambda: [e.key for e in entries], key_cut=len(prefix))
        if got.continue_key is not None:
            # S2.2: upstream's cache path strips the un-slashed prefix, so its tokens start with "/".
            page.continue_ = encode_continue(got.continue_key[len(prefix) - 1:], got.resource_version)
            page.remaining = got.remaining
        return page

    # --- WATCH ---------------------------------------------------------------------------------

    @staticmethod
    def _before_warm_window(cacher, req: WatchRequest) -> bool:
        """A watch from an RV older than a warm-started cache's window, which etcd has not compacted: served
        by etcd instead of 410 (beyond upstream, docs/differences.md). After a warm restart the window starts
        at the snapshot's revision, which may be past the last event a client saw (the snapshot is taken after
        progress, and a sharded or selective watcher sees few events), though that client lost nothing; a cold
        cache's window starts at its list as upstream's, and its 410 stays. Only until the window first evicts
        an event: from then on the cache's own bound applies."""
        rv_s = req.resource_version
        if cacher.started != "warm" or req.send_initial_events or rv_s in (None, "", "0"):
            return False
        wc = cacher.wc
        rv = int(rv_s)
        return not wc.evicted and rv < wc.list_rv and rv >= wc.compacted

    async def serve_watch(self, prefix: str, req: WatchRequest, sink: WatchSink) -> None:
        """Serve one watch into `sink` until its timeout, from the cache or from etcd."""
        cacher = await self._settled()
        if cacher is not None and not self.residency.serves(self.res.plural, req.shard):
            residency_delegated.labels(self.res.group, self.res.plural, "watch").inc()
            cacher = None
        if cacher is None:
            await self.store.serve_watch(prefix, req, sink)
            return
        if not cacher.ready:  # S1.33: a plain 429, not an ERROR event
            raise not_ready(cacher)
        if self._before_warm_window(cacher, req):
            await self.store.serve_watch(prefix, req, sink)
            return
        try:
            if req.shard is None:
                await reads.serve_watch(cacher, prefix, req, sink, None)
            else:
                await reads.serve_watch(cacher, prefix, req, sink,
                                        entry_shard_filter(req.shard, self.resource_prefix),
                                        on_watcher=sharded_watch_metrics(self.res))
        except CorruptEntry as err:   # in a watch-list's initial state (a live event's fails the dispatch)
            raise damaged(cacher, prefix, err) from None
