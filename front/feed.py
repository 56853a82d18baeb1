"""`Feed`: one resource's merged stream from the shards, shared by every watch of the front that it can serve.

Without it every client watch through the front opens K shard watches (`front.storage._MergedWatch`); with it
the front opens K per resource, whatever the number of clients, and hands each event to its watchers as the
watch cache does (`cache.dispatch.Dispatching`: `CacheWatcher` queues, direct socket writes while a client
keeps up, the slow-watcher budget S4.14, bookmarks S4.11).

* The K shard watches cover the whole resource (every namespace, each shard's range, no label or field
  selector) from the revision the feed starts at, with the front's watermark (FRONT_PROGRESS_HEADER): an event
  is applied once every shard has passed its RV, so the feed's `mark` is an RV at which it has everything.
* A window of recent events (at least WINDOW_MIN, those younger than WINDOW_SECONDS, at most WINDOW_MAX) lets a
  watch resume from an RV at or after `oldest`; an older RV is not the feed's to answer (the caller falls back
  to per-client shard watches, whose windows answer it or give the 410 a full replica gives).
* Served here: every watch the shards can answer (label and field selectors the cache's predicates, with their
  transitions, S4.6, from the previous object each MODIFIED frame carries: FRONT_PREV_HEADER; a `shardSelector`
  filtered by the UID or namespace hash, both immutable).
* Initial events (watch-list, RV unset or 0) are the merged list of the shards at the RV the watcher is
  registered at, so nothing is lost or doubled between the list and the live events.
* A shard watch that ends is reopened from that shard's watermark; if that fails, or the front's health checks
  mark a shard of the feed down (a hung shard would stall every event), the feed fails: its watchers end (their
  clients resume, as when a server goes away) and the next watch builds a new feed.
* Resharding (`drain`): the feed takes no new watchers; each watcher that takes bookmarks gets one at or past
  the drain RV and ends there (its client resumes through the new map); the others keep the old shards until
  their timeout. A feed with no watchers for IDLE_SECONDS closes its shard watches.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from typing import Any, Callable

import orjson

from cache.cache_watcher import CacheWatcher
from cache.cacher import BLOCK_TIMEOUT, BOOKMARK_TICK, next_bookmark_time
from cache.dispatch import Dispatching
from cache.reads import write_live
from ext import Event as FeedEvent   # the window's record with its type, key and RV (FeedEntry has no RV)
from machinery import errors
from machinery.aio import wait_event
from machinery.encoding import encode_obj
from storage import errors as serr
from storage.interface import FRONT_PREV_HEADER, FRONT_PROGRESS_HEADER, WatchRequest, WatchSink
from storage.store import stamp_rv

from .shards import Part
from .wire import ShardWatch, open_watch

log = logging.getLogger("front")

WINDOW_MIN = 100
WINDOW_MAX = 10_000
WINDOW_SECONDS = 75.0
IDLE_SECONDS = 60.0
# A shard watch of the feed asks for this long; when it ends the feed reopens it from the shard's watermark.
SHARD_WATCH_SECONDS = 1800
# Events held for one shard while another lags behind, before the feed gives up (the shards are stuck).
MAX_QUEUED = 50_000
# Frames a watcher of the feed queues before the slow-watcher budget applies (the cache's upper bound, S4.14).
QUEUE_SIZE = 100


class FeedEntry:
    """An object as the feed holds it: what CacheWatcher reads (`key`, `data`), and the fields a
    shardSelector hashes."""
    __slots__ = ("key", "data", "uid", "namespace")

    def __init__(self, key: str, data: bytes, md: dict[str, Any]):
        self.key = key
        self.data = data
        self.uid = md.get("uid") or ""
        self.namespace = md.get("namespace") or ""


class NotServed(Exception):
    """The feed cannot serve this watch (an RV before its window, a revision it did not reach in time, or it is
    retired): the caller serves it with per-client shard watches."""


class Feed(Dispatching):
    def __init__(self, st: Any, parts: list[Part], rv: int):   # st: front.storage.FrontStorage
        self.st = st
        self.parts = parts
        self.group, self.resource_label = st.res.group, st.res.plural
        self.clock = time.monotonic
        self.init_dispatch()
        self.watchers: set[CacheWatcher] = set()
        self.mark = rv                 # every event with RV <= mark is applied and dispatched
        self.oldest = rv               # a watch from an RV >= oldest resumes from the window
        self.window: deque[FeedEvent] = deque()
        k = len(parts)
        self.marks = [rv] * k
        self.queues: list[list[tuple[int, str, FeedEntry, FeedEntry]]] = [[] for _ in range(k)]   # (rv, type, obj, prev)
        self.watches: list[ShardWatch | None] = [None] * k
        self.retired = False           # no new watchers (failed, drained or idle)
        self.failed = ""
        self.drain_to = 0
        self.idle_since = self.clock()
        self._wake = asyncio.Event()
        self._advanced = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> "Feed":
        """Open the K shard watches (a failure raises, as for a client watch) and start merging."""
        opened = await asyncio.gather(*(self._open(i) for i in range(len(self.parts))), return_exceptions=True)
        errs = [o for o in opened if isinstance(o, BaseException)]
        if errs:
            for o in opened:
                if isinstance(o, ShardWatch):
                    o.close()
            raise errs[0]
        self.watches = list(opened)
        self._tasks = [asyncio.create_task(self._read(i)) for i in range(len(self.parts))]
        self._tasks.append(asyncio.create_task(self._run()))
        self._tasks.append(asyncio.create_task(self._bookmarks()))
        return self

    async def _open(self, i: int) -> ShardWatch:
        shard, sel = self.parts[i]
        st = self.st
        params = st._params({"watch": "1", "resourceVersion": str(self.marks[i]), "allowWatchBookmarks": "true",
                             "timeoutSeconds": str(SHARD_WATCH_SECONDS)}, None, sel)
        return await open_watch(st.shards.lists(shard.url), st._url(shard, None), params,
                                headers={FRONT_PROGRESS_HEADER: "true", FRONT_PREV_HEADER: "true"}, shard=shard)

    def fail(self, why: str) -> None:
        """The feed cannot go on: its watchers end (after what they have queued) and it closes."""
        if not self.failed:
            self.failed = why
            log.warning("front feed %s failed: %s", self.resource_label, why)
        self.retired = True
        for w in list(self.watchers):
            w.close_after_queue()
        self._wake.set()

    async def close(self) -> None:
        self.retired = True
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for w in self.watches:
            if w is not None:
                w.close()
        for w in list(self.watchers):
            w.stop()
        self.watchers.clear()

    # --- merging the shards --------------------------------------------------------------------

    async def _read(self, i: int) -> None:
        prefix, cluster = self.st.resource_prefix, not self.st.res.namespaced
        q = self.queues[i]
        while True:
            w = self.watches[i]
            async for t, md, obj, prev in w.parts():
                if t == "ERROR":
                    self.fail(f"shard {w.url}: {obj[:300].decode(errors='replace')}")
                    return
                rv = int(md.get("resourceVersion") or 0)
                if t != "BOOKMARK":
                    ns = md.get("namespace")
                    key = prefix + (md["name"] if cluster or not ns else f"{ns}/{md['name']}")
                    entry = FeedEntry(key, obj, md)
                    q.append((rv, t, entry, entry if prev is None else FeedEntry(key, prev, md)))
                    if len(q) > MAX_QUEUED:
                        self.fail(f"more than {MAX_QUEUED} events from {w.url} wait for the other shards")
                        return
                if rv > self.marks[i]:
                    self.marks[i] = rv
                self._wake.set()
            w.close()
            if self.retired:
                return
            try:   # the shard ended its watch (its timeout, or it went away): go on from its watermark
                self.watches[i] = await self._open(i)
            except (errors.StatusError, serr.StorageError) as e:
                self.fail(f"shard {w.url}: watch not reopened: {e}")
                return

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            down = [s.url for s, _ in self.parts if not s.ready]
            if down and not self.failed:   # a hung shard stalls every event: fail once health says it is down
                self.fail("shard not ready: " + ", ".join(down))
            mark = min(self.marks)
            if mark > self.mark:
                await self._apply(mark)
            if self.drain_to and self.mark >= self.drain_to:
                self._end_drained()
            if not self.watchers and not self.retired and self.clock() - self.idle_since > IDLE_SECONDS:
                self.retired = True
            if self.retired and not self.watchers:
                break
            await wait_event(self._wake, BOOKMARK_TICK)
        asyncio.get_running_loop().create_task(self.st.feed_closed(self))

    async def _apply(self, mark: int) -> None:
        """Dispatch the queued events at or below `mark`, in RV order; then the feed is at `mark`."""
        now = self.clock()
        events = take_ready(self.queues, mark)
        for i, (rv, t, entry, prev) in enumerate(events):
            ev = FeedEvent(t, entry.key, rv, entry, None if t == "ADDED" else prev, now)
            self.window.append(ev)
            # The mark passes an event before it is dispatched, as the cache's RV does: a dispatch may wait for a
            # slow watcher, and a bookmark or a watcher registered meanwhile must be at or past what was sent (a
            # new watcher's initial list at the mark holds this event; its replay starts after it).
            if i + 1 == len(events) or events[i + 1][0] > rv:
                self.mark = rv
            await self._dispatch(ev)
        self.mark = mark
        self._trim(now)
        self._flush_watchers()
        self._advanced.set()

    def _trim(self, now: float) -> None:
        win = self.window
        while len(win) > WINDOW_MAX or (len(win) > WINDOW_MIN and now - win[0].time > WINDOW_SECONDS):
            self.oldest = win.popleft().rv

    def _since(self, rv: int) -> list[FeedEvent]:
        """The window's events after `rv` (those of a batch being dispatched included), oldest first."""
        out = []
        for ev in reversed(self.window):
            if ev.rv <= rv:
                break
            out.append(ev)
        out.reverse()
        return out

    def dispatch_rv(self) -> int:
        return self.mark

    def encode_deleted(self, prev: FeedEntry, rv: int) -> bytes:
        """An object that stopped matching a watcher's selectors: its previous content with the event's RV, as the
        watch cache sends it (S4.6)."""
        return encode_obj(self.st.res, stamp_rv(orjson.loads(prev.data), rv))

    async def _bookmarks(self) -> None:
        while True:
            await asyncio.sleep(BOOKMARK_TICK)
            now = self.clock()
            for w in self.due_bookmarks(now):
                w.add_bookmark(self.mark)
                w.next_bookmark = next_bookmark_time(now, w.deadline)

    # --- resharding ------------------------------------------------------------------------------

    def drain(self, rv: int) -> bool:
        """The shard map changed (front_server's PUT /debug/shards): see the module's docstring."""
        self.retired = True
        self.drain_to = rv
        self._wake.set()
        return True

    def _end_drained(self) -> None:
        for w in list(self.watchers):
            if w.allow_bookmarks and not w.closing:
                w.add_bookmark(self.mark)
                w.close_after_queue()

    async def poke(self) -> None:
        """Make every shard learn etcd's current revision now, so the feed's mark reaches it on a quiet resource."""
        await self.st.poke_shards(self.parts)

    async def reach(self, rv: int, timeout: float = BLOCK_TIMEOUT) -> bool:
        """Wait until the feed is at `rv` or later (asking the shards to catch up); False after `timeout`."""
        if self.mark >= rv:
            return True
        poke = asyncio.ensure_future(self.poke())
        deadline = self.clock() + timeout
        try:
            while self.mark < rv and not self.retired:
                left = deadline - self.clock()
                if left <= 0:
                    return False
                self._advanced.clear()
                await wait_event(self._advanced, min(left, 0.5))
                if self.mark < rv and poke.done():
                    poke = asyncio.ensure_future(self.poke())
            return self.mark >= rv
        finally:
            poke.cancel()

    # --- serving one client watch ------------------------------------------------------------------

    async def serve(self, prefix: str, req: WatchRequest, sink: WatchSink, need_rv: int, initial: bool,
                    initial_parts: list[Part] | None, shard: Callable[[FeedEntry], bool] | None,
                    served: dict[str, int]) -> None:
        """One client watch: from `need_rv` (initial: the merged list at an RV >= need_rv, then live events; else
        the window's events after need_rv, then live events). Raises NotServed before anything but the 200 (S4.3:
        at once, as the cache's watch) is written."""
        if self.retired or (not initial and need_rv < self.oldest):
            raise NotServed()
        await sink.start()
        if not await self.reach(need_rv) or self.retired or (not initial and need_rv < self.oldest):
            raise NotServed()
        frames = req.frames
        deadline = time.monotonic() + req.timeout
        watch_list = initial and bool(req.send_initial_events) and req.allow_bookmarks
        w = CacheWatcher(prefix=prefix, predicate=req.predicate, shard=shard, queue_size=QUEUE_SIZE, start_rv=0,
                         allow_bookmarks=req.allow_bookmarks, deadline=deadline, encode_deleted=self.encode_deleted,
                         decode=_decode, watch_list=watch_list)
        # Registered with the state it starts from, no await in between: every event after it reaches w.
        start_rv = self.mark if initial else max(need_rv, self.mark)
        replay = self._since(start_rv if initial else need_rv)
        w.start_rv = w.last_rv = start_rv
        w.progress = req.progress
        if not frames.table:
            w.make_frame = frames.event
        if req.allow_bookmarks:
            w.next_bookmark = next_bookmark_time(time.monotonic(), deadline)
        self.watchers.add(w)
        self.idle_since = self.clock()
        served["feed"] += 1
        try:
            buf: list[bytes] = []
            if initial and not await self.st.write_initial(initial_parts, self.st._namespace(prefix), start_rv,
                                                           req, sink):
                return
            cache: dict = {}
            for ev in replay:
                f = w.convert(ev, cache)
                if f is not None:
                    buf.append(frames.event(*f))
            if watch_list:
                buf.append(frames.bookmark(start_rv, True))
            elif w.progress and start_rv > need_rv and not initial:
                buf.append(frames.bookmark(start_rv))
            if buf:
                await sink.write(b"".join(buf))
            await write_live(w, sink, frames, frames.event, deadline)
        finally:
            self.watchers.discard(w)
            w.stop()
            self.idle_since = self.clock()
            self._wake.set()


def take_ready(queues: list[list[tuple]], mark: int) -> list[tuple]:
    """Take from each shard's queue (RV-ordered (rv, ...) tuples) the events at or below `mark`: every shard has
    passed it, so nothing older can still arrive. Merged in RV order."""
    taken = []
    for q in queues:
        n = 0
        while n < len(q) and q[n][0] <= mark:
            n += 1
        if n:
            taken.append(q[:n])
            del q[:n]
    if len(taken) == 1:
        return taken[0]
    return list(heapq.merge(*taken, key=lambda e: e[0]))


def _decode(e: FeedEntry) -> dict:
    return orjson.loads(e.data)
