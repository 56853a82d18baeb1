"""`FrontStorage`: the storage contract the endpoints call (as `cache.delegator.CacheDelegator`), answered by
the shards instead of a watch cache.

* Writes, GETs and counts go to etcd (`storage.store.EtcdStore`), as with `--watch-cache=false`; a write
  starts from the front's copy of what it last wrote or read of the object (`RecentObjects`), where a process
  with a watch cache starts from the cache's.
* A list or watch one shard can answer alone (a resource every shard keeps whole, or a `shardSelector` inside
  one shard's range) is proxied to it, item by item / frame by frame.
* Any other list is the merge of the shards' lists at one resourceVersion R (the current etcd revision for a
  consistent list, else the client's), key order, one page per shard at most; `limit`/`continue` across the
  merge with upstream's continue token (key + R, which every shard understands).
* Any other watch merges the shards' watches started at R, in resourceVersion order: an event goes out once
  every shard's watermark (its events, and the bookmarks it sends on every advance of its cache's RV when the
  front asks with FRONT_PROGRESS_HEADER) has reached it. Initial events (watch-list, RV unset or 0) are the
  merged list at R, then the end bookmark at R.
* A shard that is needed and not ready fails the request (504 as for an unreachable etcd); a shard's own
  Status (410, 400, 504...) reaches the client as the shard answered it.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from typing import Any, AsyncIterator, Callable

from cache.cacher import BLOCK_TIMEOUT, next_bookmark_time, progress_requests_supported
from cache.delegator import CacheDelegator
from cache.metrics import consistent_read
from cache.residency import Residency
from machinery import errors, jsonenc
from machinery.aio import wait_event
from machinery.encoding import wire_head
from machinery.resources import Resource
from machinery.shard_selector import FULL, ShardSelector
from storage import errors as serr
from storage.continue_token import encode_continue, resolve_continue
from storage.interface import FRONT_PROGRESS_HEADER, ListPage, ListRequest, WatchRequest, WatchSink
from storage.revision import SharedRevision
from storage.store import EtcdStore, parse_resource_version

from .feed import Feed, NotServed, take_ready
from .shards import Part, Shard, ShardDown, ShardMap
from .wire import ShardList, ShardWatch, fail, merged, open_watch, read_whole, take

Obj = dict[str, Any]
# A watch on a shard outlives the client's by this much: the front, not the shard, ends it on time.
WATCH_GRACE = 5
# Events a merged watch holds for one shard before it gives up on a client that does not keep up.
MAX_QUEUED = 10_000


def api_path(res: Resource, namespace: str | None) -> str:
    base = f"/api/{res.version}" if not res.group else f"/apis/{res.group}/{res.version}"
    return base + (f"/namespaces/{namespace}" if namespace else "") + f"/{res.plural}"


async def open_each(opening) -> list:
    """Open one answer per shard at once; if any fails, close the others and raise the first error."""
    got = await asyncio.gather(*opening, return_exceptions=True)
    errs = [g for g in got if isinstance(g, BaseException)]
    if errs:
        for g in got:
            if not isinstance(g, BaseException):
                g.close()
        raise errs[0]
    return list(got)


class RecentObjects:
    """The objects this front last wrote or read from etcd, as JSON bytes, newest last, bounded in count and bytes, one
    set for all of the front's resources (each resource's `view`): the copy a write starts from (upstream
    GuaranteedUpdate's cachedExistingObject, which a front has no watch cache to take it from), so an update of
    an object the front has seen is one etcd Txn instead of a Range and a Txn. It may be stale (another front
    wrote since): the Txn compares the resourceVersion and, on a conflict, returns etcd's current object, from
    which the write retries.

    The bounds are sized for a burst of writes to be followed by updates of the same objects (a controller's
    creates, then its status updates): at 4 MiB, a front's copies of the 4,000 1 KB ConfigMaps it had just
    created (1.2 KB of JSON each) did not fit, and a least-recently-used set walked in the order it was filled
    keeps none of what it is asked for next: every one of the 4,000 updates read etcd first (4,002 Ranges,
    counted on etcd). 16 MiB holds 10,000 such objects, and is what a front may grow by under writes, whatever
    the number of resources written (it was 4 MiB for each resource)."""

    def __init__(self, max_entries: int = 16384, max_bytes: int = 16 << 20):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self.bytes = 0

    def put(self, key: str, obj: Obj | None) -> None:
        if obj is None:
            return
        self.drop(key)
        b = jsonenc.dumps(obj)
        if len(b) > self.max_bytes // 8:   # a large object would push out many small ones
            return
        self._items[key] = b
        self.bytes += len(b)
        while len(self._items) > self.max_entries or self.bytes > self.max_bytes:
            _, old = self._items.popitem(last=False)
            self.bytes -= len(old)

    def drop(self, key: str) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= len(old)

    def get(self, key: str) -> Obj | None:
        b = self._items.get(key)
        if b is None:
            return None
        self._items.move_to_end(key)
        return jsonenc.loads(b)

    def __len__(self) -> int:
        return len(self._items)

    def view(self, scope: str) -> "RecentView":
        return RecentView(self, scope)


class RecentView:
    """One resource's part of a front's `RecentObjects`: its keys under a scope of their own (two resources
    may store objects under one etcd key, e.g. core and events.k8s.io Events)."""
    __slots__ = ("shared", "scope")

    def __init__(self, shared: RecentObjects, scope: str):
        self.shared, self.scope = shared, scope

    def get(self, key: str) -> Obj | None:
        return self.shared.get(self.scope + key)

    def put(self, key: str, obj: Obj | None) -> None:
        self.shared.put(self.scope + key, obj)

    def drop(self, key: str) -> None:
        self.shared.drop(self.scope + key)


class FrontStorage(CacheDelegator):
    """One resource's storage contract in the front (writes and GETs: the etcd path of CacheDelegator)."""

    def __init__(self, res: Resource, store: EtcdStore, shards: ShardMap, resource_prefix: str,
                 feed_disabled: bool = False, recent: RecentObjects | None = None):
        super().__init__(res, store, None, Residency(None), resource_prefix)
        self.shards = shards
        head = wire_head(res)
        self.wire = (lambda b: b) if head is None else (lambda b: head + b[1:])
        # Consistent lists and watches read etcd's revision: those that arrive together share one read (S3.1).
        self.revision = SharedRevision(store.client, resource_prefix, res.plural)
        self.feed: Feed | None = None   # the shared stream of this resource's watches (front.feed)
        self.feed_disabled = feed_disabled
        self._feed_lock = asyncio.Lock()
        # the front's copies, shared by its resources (FrontServer passes one set); keys scoped by resource
        self.recent = (recent if recent is not None else RecentObjects()).view(f"{res.group}/{res.plural} ")

    # --- writes and quorum reads: etcd, remembering what was read or written ------------------

    def cached_object(self, key: str) -> Obj | None:
        return self.recent.get(key)

    async def get(self, key: str) -> Obj:
        try:
            obj = await self.store.get(key)
        except serr.StorageError:
            self.recent.drop(key)
            raise
        self.recent.put(key, obj)
        return obj

    async def wait_for_revision(self, key: str, rv: int, current: int, follower: Any) -> None:
        """A GET at `rv` ahead of etcd's revision waits as a watch cache would (S1.16: up to 3 s, then 504 with
        Retry-After 1): the front has no cache of its own, so it asks etcd's revision again every 100 ms (one
        shared read per resource, `SharedRevision`) until it reaches `rv`."""
        deadline = time.monotonic() + BLOCK_TIMEOUT
        while current < rv:
            if time.monotonic() >= deadline:
                raise serr.StorageError(serr.Code.TOO_LARGE_RV, key, rv=rv, current_rv=current, retry_after=1)
            await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
            current = await self.revision.current()

    async def create(self, key: str, obj: Obj) -> Obj:
        out = await self.store.create(key, obj)
        self.recent.put(key, out)
        return out

    async def update(self, key: str, obj: Obj, expected_rv: int) -> Obj:
        try:
            out = await self.store.update(key, obj, expected_rv)
        except serr.StorageError:
            self.recent.drop(key)
            raise
        self.recent.put(key, out)
        return out

    async def try_update(self, key: str, obj: Obj, expected_rv: int) -> tuple[Obj | None, Obj | None]:
        try:
            out, current = await self.store.try_update(key, obj, expected_rv)
        except serr.StorageError:
            self.recent.drop(key)
            raise
        if out is not None:
            self.recent.put(key, out)
        elif current is not None:
            self.recent.put(key, current)
        else:
            self.recent.drop(key)
        return out, current

    async def guaranteed_update(self, key: str, fn: Callable[[Obj], Obj | None], retries: int = 20) -> Obj:
        self.recent.drop(key)
        out = await self.store.guaranteed_update(key, fn, retries)
        self.recent.put(key, out)
        return out

    async def delete(self, key: str, **kw) -> tuple[Obj, int]:
        self.recent.drop(key)
        return await self.store.delete(key, **kw)

    # --- helpers -------------------------------------------------------------------------------

    def _namespace(self, prefix: str) -> str | None:
        ns = prefix[len(self.resource_prefix):].rstrip("/")
        return ns or None

    def _plan(self, shard: ShardSelector | None) -> list[Part] | None:
        """The shards to ask (None: a selector the shards do not partition by: etcd answers)."""
        try:
            return self.shards.plan(self.res.plural, shard)
        except LookupError:
            return None
        except ShardDown as e:
            raise serr.StorageError(serr.Code.UNREACHABLE, message=str(e)) from None

    def _url(self, shard: Shard, namespace: str | None) -> str:
        return shard.url + api_path(self.res, namespace)

    @staticmethod
    def _params(base: dict[str, str], selectors: dict[str, str] | None, sel: ShardSelector | None) -> dict[str, str]:
        p = dict(base)
        p.update(selectors or {})
        if sel is not None:
            p["shardSelector"] = str(sel)
        return p

    async def _open_list(self, part: Part, namespace: str | None, base: dict[str, str],
                         selectors: dict[str, str] | None) -> ShardList:
        shard, sel = part
        url = self._url(shard, namespace)
        return await ShardList.open(self.shards.lists(shard.url), url, self._params(base, selectors, sel), shard)

    def _decode(self, b: bytes) -> Obj:
        return jsonenc.loads(self.wire(b))

    # --- LIST ----------------------------------------------------------------------------------

    async def get_list(self, prefix: str, req: ListRequest) -> ListPage:
        parse_resource_version(req.resource_version, prefix)  # S1.11: 400 first
        start_key = cont_rv = None
        if req.continue_:
            start_key, cont_rv = resolve_continue(req.continue_, req.resource_version, prefix)  # S1.12, S1.13
        parts = self._plan(req.shard)
        if parts is None or (req.single_key and self._exact(req, cont_rv)):
            # S1.20: an exact-RV read of one named key is etcd's, as in the cache's delegator (one key, never a
            # range); and selectors on a field the shards are not cut by.
            return await self.store.get_list(prefix, req)
        ns = self._namespace(prefix)
        if len(parts) == 1 and parts[0][1] == req.shard:
            return await self._proxy_list(parts[0], ns, req)
        if len(parts) == 1 and req.shard is None and self._holds_all(parts[0][0]):
            return await self._proxy_list((parts[0][0], None), ns, req)   # one shard holding everything (K = 1)
        # One resourceVersion for every shard (S2.14: the list is the state at R).
        limit = req.limit if req.limit > 0 else 0
        rv_s, rvm = req.resource_version, req.resource_version_match
        consistent = False   # upstream's consistent read: no resourceVersion, no continue
        if cont_rv is not None and cont_rv > 0:
            rv = cont_rv
        elif cont_rv is not None or rv_s in (None, ""):
            rv = await self.revision.current()
            consistent = cont_rv is None
        elif rv_s == "0":
            rv, limit = await self.revision.current(), 0   # S1.19: RV=0 ignores limit
        else:
            n = int(rv_s)
            exact = rvm == "Exact" or (not rvm and limit > 0)
            rv = n if exact else max(n, await self.revision.current())
        start = None
        if start_key is not None:
            start = start_key[len(prefix) - 1:]   # "/<key>\x00" as the token carried it
        base = self._base(rv, start, limit)
        try:
            if limit:
                page = await self._merged_page(parts, ns, base, req, rv, limit, prefix)
            else:
                lists = await self._open_all(parts, ns, base, req.selectors)
                page = ListPage(rv, stream=self._merged_stream(lists, req.runs), decode=self._decode,
                                stream_size=self._size(lists))
        except Exception:
            if consistent:
                consistent_read.labels(self.res.group, self.res.plural, "false", "false").inc()
            raise
        if consistent:   # upstream's count of consistent reads: here served by the shards' caches at etcd's revision
            consistent_read.labels(self.res.group, self.res.plural, "true", "false").inc()
        return page

    @staticmethod
    def _size(lists: list[ShardList]) -> tuple[int, int] | None:
        """The merged list's items and their bytes, if every shard said (its list's Content-Length)."""
        if any(ls.size is None for ls in lists):
            return None
        return sum(ls.size[0] for ls in lists), sum(ls.size[1] for ls in lists)

    @staticmethod
    def _exact(req: ListRequest, cont_rv: int | None) -> bool:
        """The list is at an exact RV (cache.plan's EXACT: L5-L7)."""
        if cont_rv is not None:
            return cont_rv > 0
        rv = req.resource_version
        return rv not in (None, "", "0") and (req.resource_version_match == "Exact" or
                                              (not req.resource_version_match and req.limit > 0))

    @staticmethod
    def _base(rv: int, start: str | None, limit: int) -> dict[str, str]:
        if start is not None:
            base = {"continue": encode_continue(start[:-1] if start.endswith("\x00") else start, rv)}
        else:
            base = {"resourceVersion": str(rv), "resourceVersionMatch": "Exact"}
        if limit:
            base["limit"] = str(limit)
        return base

    async def _open_all(self, parts: list[Part], ns: str | None, base: dict[str, str],
                        selectors: dict[str, str] | None) -> list[ShardList]:
        return await open_each(self._open_list(p, ns, base, selectors) for p in parts)

    async def _proxy_list(self, part: Part, ns: str | None, req: ListRequest) -> ListPage:
        base = {}
        for k, v in (("resourceVersion", req.resource_version), ("resourceVersionMatch", req.resource_version_match),
                     ("continue", req.continue_), ("limit", str(req.limit) if req.limit else "")):
            if v:
                base[k] = v
        lst = await self._open_list(part, ns, base, req.selectors)
        m = lst.meta
        page = ListPage(int(m.get("resourceVersion") or 0), continue_=m.get("continue") or None,
                        remaining=m.get("remainingItemCount"), decode=self._decode)
        if req.limit > 0 and req.resource_version != "0" and not self._whole(part[0]):
            # A page (at most `limit` items): read whole. A full replica continues after a full page if any key
            # follows, in any shard's range; the shard knows only its own keys.
            try:
                await read_whole([lst])
                page.raw, last = take([lst], 0)
            finally:
                lst.close()
            if len(page.raw) == req.limit and page.continue_ is None and \
                    await self._any_after([], ns, last, page.resource_version):
                page.continue_ = encode_continue("/" + last, page.resource_version)
                page.remaining = 0 if req.predicate is None else None
            return page
        page.stream = self._merged_stream([lst], req.runs)
        page.stream_size = self._size([lst])
        return page

    @staticmethod
    async def _merged_stream(lists: list[ShardList], runs: bool = False) -> AsyncIterator[list[bytes] | bytes]:
        """The K key-ordered lists merged as they arrive (front.wire.merged), closed at the end."""
        try:
            async for batch in merged(lists, runs):
                yield batch
        finally:
            for ls in lists:
                ls.close()

    async def _merged_page(self, parts: list[Part], ns: str | None, base: dict[str, str], req: ListRequest,
                           rv: int, limit: int, prefix: str) -> ListPage:
        lists = await self._open_all(parts, ns, base, req.selectors)
        try:
            await read_whole(lists)
            out, last = take(lists, limit)
            rest, _ = take(lists, 0)
        finally:
            for ls in lists:
                ls.close()
        page = ListPage(rv, raw=out, decode=self._decode)
        if len(out) < limit:
            return page
        conts = [bool(ls.meta.get("continue")) for ls in lists]
        more = bool(rest) or any(conts)
        filtered = req.predicate is not None or req.shard is not None
        if not more and filtered:
            # A full replica continues if any key follows the last item, matching or not: ask every shard.
            more = await self._any_after(parts, ns, last, rv)
        if not more:
            return page
        page.continue_ = encode_continue("/" + last, rv)
        if req.predicate is None:   # S2.9: remainingItemCount only without label/field selectors
            page.remaining = len(rest) + sum(int(ls.meta.get("remainingItemCount") or 0) for ls in lists)
        return page

    def _whole(self, shard: Shard) -> bool:
        """The shard keeps this resource whole (a resource every shard keeps, or a shard whose range is the whole
        hash space: its answers are a full replica's)."""
        return self.res.plural in shard.full_resources or self._holds_all(shard)

    @staticmethod
    def _holds_all(shard: Shard) -> bool:
        return shard.selector is not None and shard.selector._merged == [(0, FULL)]

    async def _any_after(self, parts: list[Part], ns: str | None, last: str, rv: int) -> bool:
        everyone = [(s, s.selector) for s in self.shards.shards]
        lists = await self._open_all(everyone, ns, {"continue": encode_continue("/" + last, rv), "limit": "1"}, None)
        try:
            await read_whole(lists)
            return bool(take(lists, 1)[0])
        finally:
            for ls in lists:
                ls.close()

    # --- WATCH ---------------------------------------------------------------------------------

    async def poke_shards(self, parts: list[Part]) -> None:
        """Make each shard learn etcd's current revision now (a consistent list: its cache asks etcd for progress),
        so the watermarks of the front's watches on it reach that revision on a quiet resource too."""
        async def one(part: Part) -> None:
            try:
                ls = await self._open_list(part, None, {"limit": "1"}, None)
                try:
                    await read_whole([ls])
                finally:
                    ls.close()
            except (errors.StatusError, serr.StorageError):
                pass
        await asyncio.gather(*(one(p) for p in parts))

    async def write_initial(self, parts: list[Part], ns: str | None, rv: int, req: WatchRequest,
                            sink: WatchSink) -> bool:
        """The merged list at `rv` written as ADDED events (S5.5), in 64 KiB writes. False: a shard failed (its
        Status went out as an ERROR event)."""
        try:
            lists = await self._open_all(parts, ns, {"resourceVersion": str(rv), "resourceVersionMatch": "Exact"},
                                         req.selectors)
        except errors.StatusError as e:
            await fail(sink, e)
            return False
        buf: list[bytes] = []
        size = 0
        async for batch in self._merged_stream(lists):
            for item in batch:
                b = req.frames.event("ADDED", self.wire(item))
                buf.append(b)
                size += len(b)
            if size >= 64 * 1024:
                await sink.write(b"".join(buf))
                buf, size = [], 0
        if buf:
            await sink.write(b"".join(buf))
        return True

    async def serve_watch(self, prefix: str, req: WatchRequest, sink: WatchSink) -> None:
        parts = self._plan(req.shard)
        if parts is None:
            await self.store.serve_watch(prefix, req, sink)
            return
        ns = self._namespace(prefix)
        shard_timeout = str(int(math.ceil(req.timeout)) + WATCH_GRACE)
        if len(parts) == 1 and parts[0][1] == req.shard:
            self.shards.served["proxied"] += 1
            await self._proxy_watch(parts[0], ns, req, sink, shard_timeout)
            return
        if not self.feed_disabled:
            try:
                await self._watch_from_feed(prefix, req, sink)
                return
            except NotServed:
                pass   # before the feed's window, or it did not reach the RV in time: per-client shard watches
        rv_s = req.resource_version
        if req.send_initial_events or rv_s in (None, "", "0"):
            rv = await self.revision.current()
            if rv_s not in (None, "", "0"):
                rv = max(rv, int(rv_s))
        else:
            rv = int(rv_s)
        base = {"watch": "1", "resourceVersion": str(rv), "allowWatchBookmarks": "true",
                "timeoutSeconds": shard_timeout}
        self.shards.served["merged"] += 1
        # The 200 goes out at once (S4.3), as the cache's watch does: a client that has its watch may stop it.
        # A shard failing now (after the health check) is an ERROR event.
        await sink.start()
        try:
            watches = await self._open_watches(parts, ns, base, req.selectors)
        except errors.StatusError as e:
            await fail(sink, e)
            return
        try:
            await _MergedWatch(self, watches, rv, req, sink).run(parts, ns)
        finally:
            for w in watches:
                w.close()

    async def _watch_from_feed(self, prefix: str, req: WatchRequest, sink: WatchSink) -> None:
        """A watch from the resource's shared stream (front.feed)."""
        rv_s = req.resource_version
        initial = bool(req.send_initial_events)   # defaulted for RV unset and "0" (S5.2)
        if rv_s in (None, ""):
            need = await self.revision.current()   # most recent: etcd's revision (S1.29, S5.7)
        elif rv_s == "0":
            need = 0                                           # any state (S1.29)
        else:
            need = int(rv_s)
        feed = await self._feed()
        if need > feed.mark and not progress_requests_supported(self.store.client.version or ""):
            # An etcd without reliable progress requests (S3.6): a quiet shard cannot be made to learn etcd's
            # revision, so the feed may not reach it; the per-client watches wait as before.
            raise NotServed()
        parts = self._plan(req.shard) if initial else None
        sel = req.shard
        shard = None if sel is None else (lambda e: sel.matches(e.uid, e.namespace))
        await feed.serve(prefix, req, sink, need, initial, parts, shard, self.shards.served)

    async def _feed(self) -> Feed:
        """The resource's shared stream, started on first use (the shards' watches from the current revision)."""
        feed = self.feed
        if feed is not None and not feed.retired:
            return feed
        async with self._feed_lock:
            if self.feed is None or self.feed.retired:
                try:
                    parts = self._plan(None)
                except serr.StorageError:   # a shard this watch may not need is down: its own shard watches
                    raise NotServed() from None
                if parts is None:
                    raise NotServed()
                rv = await self.revision.current()
                new = Feed(self, parts, rv)
                try:
                    await new.start()
                except (errors.StatusError, serr.StorageError):
                    raise NotServed() from None   # the per-client path answers with the shard's own error
                self.feed = new
                self.shards.watches.add(new)
            return self.feed

    async def feed_closed(self, feed: Feed) -> None:
        if self.feed is feed:
            self.feed = None
        self.shards.watches.discard(feed)
        await feed.close()

    async def _open_watches(self, parts: list[Part], ns: str | None, base: dict[str, str],
                            selectors: dict[str, str] | None) -> list[ShardWatch]:
        async def one(part: Part) -> ShardWatch:
            shard, sel = part
            url = self._url(shard, ns)
            return await open_watch(self.shards.lists(shard.url), url, self._params(base, selectors, sel),
                                    headers={FRONT_PROGRESS_HEADER: "true"}, shard=shard)
        return await open_each(one(p) for p in parts)

    async def _proxy_watch(self, part: Part, ns: str | None, req: WatchRequest, sink: WatchSink,
                           shard_timeout: str) -> None:
        base = {"watch": "1", "timeoutSeconds": shard_timeout}
        if req.resource_version is not None:
            base["resourceVersion"] = req.resource_version
        if req.send_initial_events is not None:
            base["sendInitialEvents"] = "true" if req.send_initial_events else "false"
            base["resourceVersionMatch"] = "NotOlderThan"
        if req.allow_bookmarks:
            base["allowWatchBookmarks"] = "true"
        shard, sel = part
        await sink.start()
        try:
            w = await open_watch(self.shards.lists(shard.url), self._url(shard, ns),
                                 self._params(base, req.selectors, sel), shard=shard)
        except errors.StatusError as e:
            await fail(sink, e)
            return
        try:
            deadline = time.monotonic() + req.timeout
            frames = w.frames()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                try:
                    async with asyncio.timeout(left):   # not wait_for: machinery/aio.py
                        f = await anext(frames, None)
                except TimeoutError:
                    return
                if f is None:
                    return
                t, _, obj, line = f
                if t == "ERROR" or not req.frames.table:
                    await sink.write(line)
                    if t == "ERROR":
                        return
                elif t == "BOOKMARK":
                    await sink.write(line)   # bookmarks are never Tables
                else:
                    await sink.write(req.frames.event(t, obj))
        finally:
            w.close()


class _MergedWatch:
    """K shard watches started at `rv`, written to the client in resourceVersion order."""

    def __init__(self, st: FrontStorage, watches: list[ShardWatch], rv: int, req: WatchRequest, sink: WatchSink):
        self.st = st
        self.watches = watches
        self.rv = rv
        self.req = req
        self.sink = sink
        k = len(watches)
        self.queues: list[list[tuple[int, str, bytes]]] = [[] for _ in range(k)]
        self.marks = [rv] * k        # every shard has passed this RV
        self.ended = False
        self.error: bytes | None = None
        self.wake = asyncio.Event()
        self.drain_to = 0            # resharding: end (after a bookmark) once every shard has passed this RV

    async def _read(self, i: int) -> None:
        try:
            async for t, rv, obj, line in self.watches[i].frames():
                if t == "ERROR":
                    self.error = self.error or line
                    break
                if t != "BOOKMARK":
                    q = self.queues[i]
                    q.append((rv, t, obj))
                    if len(q) > MAX_QUEUED:   # the client does not keep up: end its watch (as S4.14 does)
                        break
                if rv > self.marks[i]:
                    self.marks[i] = rv
                self.wake.set()
        finally:
            self.ended = True
            self.wake.set()

    def drain(self, rv: int) -> bool:
        """The shard map changed: a watch with bookmarks ends at a bookmark at or past `rv` (so its client goes on
        from there, through the new map); one without keeps its shards until its timeout. True if it will."""
        if not self.req.allow_bookmarks:
            return False
        self.drain_to = rv
        self.wake.set()
        return True

    async def poke(self) -> None:
        """Make every shard of this watch learn etcd's current revision now, so their watermarks pass the drain
        RV even on a quiet resource."""
        await self.st.poke_shards(self.parts)

    async def run(self, parts: list[Part], ns: str | None) -> None:
        req, sink = self.req, self.sink
        self.parts = parts
        readers = [asyncio.create_task(self._read(i)) for i in range(len(self.watches))]
        self.st.shards.watches.add(self)
        try:
            deadline = time.monotonic() + req.timeout
            if req.send_initial_events:
                await self._initial(parts, ns)
            sent = self.rv
            next_bm = next_bookmark_time(time.monotonic(), deadline) if req.allow_bookmarks else 0.0
            while True:
                mark = min(self.marks)
                out = take_ready(self.queues, mark)
                if out:
                    sent = max(sent, out[-1][0])
                    await sink.write(b"".join(req.frames.event(t, obj) for _, t, obj in out))
                if self.error is not None:
                    await sink.write(self.error)
                    return
                if self.drain_to and mark >= self.drain_to:
                    if mark > sent:
                        await sink.write(req.frames.bookmark(mark))
                    return
                now = time.monotonic()
                if now >= deadline or self.ended:
                    return
                if next_bm and now >= next_bm:
                    if mark > sent:   # S4.12: past the start, never behind an event sent
                        await sink.write(req.frames.bookmark(mark))
                        sent = mark
                    next_bm = next_bookmark_time(now, deadline)
                self.wake.clear()
                wait = deadline - now if not next_bm else min(deadline, next_bm) - now
                await wait_event(self.wake, max(wait, 0.001))
        finally:
            self.st.shards.watches.discard(self)
            for r in readers:
                r.cancel()
            await asyncio.gather(*readers, return_exceptions=True)


    async def _initial(self, parts: list[Part], ns: str | None) -> None:
        """Initial events (S5.5): the merged list at the watch's RV, then the end bookmark (S5.4)."""
        if not await self.st.write_initial(parts, ns, self.rv, self.req, self.sink):
            self.error = b""
            return
        if self.req.allow_bookmarks:
            await self.sink.write(self.req.frames.bookmark(self.rv, True))
