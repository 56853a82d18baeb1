"""One client watch served from the cache (upstream `cache_watcher.go`).

A watcher has a filter (key prefix + optional object predicate), a bounded
queue of frames, and bookkeeping for bookmarks. The dispatcher (Cacher) puts
events in with `try_add`; while the client's socket keeps up, it writes them
itself (`pending` + `flush`), otherwise the HTTP writer task drains the queue.
The queue, not the server, absorbs bursts; a watcher that stays full past the
dispatch time budget is terminated (S4.14).
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable, Iterator

from machinery.aio import wait_event

from .watch_cache import CacheEvent, Entry

Obj = dict[str, Any]


class CacheWatcher:
    # FRONT_PREV_HEADER: the previous object's wire bytes of an entry (set for a front's shared stream); its
    # MODIFIED frames end with `,"prevObject":{..}`.
    prev_wire: Callable[[Entry], bytes] | None = None

    def __init__(self, *, prefix: str, predicate: Callable[[Obj], bool] | None,
                 shard: Callable[[Entry], bool] | None, queue_size: int, start_rv: int,
                 allow_bookmarks: bool, deadline: float, encode_deleted: Callable[[Entry, int], bytes],
                 decode: Callable[[Entry], Obj], watch_list: bool = False):
        self.prefix = prefix
        self.predicate = predicate
        self.shard = shard
        self.queue: deque[tuple[str, bytes | int]] = deque()
        self.queue_size = queue_size
        self.start_rv = start_rv           # RV reached after the initial/replay phase (S4.12)
        self.last_rv = start_rv
        self.allow_bookmarks = allow_bookmarks
        self.deadline = deadline
        self.next_bookmark = 0.0
        self.encode_deleted = encode_deleted
        self.decode = decode
        self.watch_list = watch_list        # owes the initial-events-end bookmark (S5.4)
        self.initial: Iterator[Entry] | None = None
        self.replay: list[CacheEvent] = []
        self.done = False
        self.terminated = False
        self.closing = False               # close_after_queue: no new events, ends once its queue is written
        self.on_filtered: Callable[[], None] | None = None
        # (type, stored bytes) -> wire frame; set for plain JSON watches (not Table ones).
        self.make_frame: Callable[[str, bytes], bytes] | None = None
        # Writes frames straight to the socket if it can take them now (False: it cannot).
        # Set by the HTTP writer once it is in its live phase; see `try_add`.
        self.direct: Callable[[bytes], bool] | None = None
        self.pending: list[bytes] = []  # frames for `direct`, sent together by `flush`
        # The front's watermark (storage.interface.FRONT_PROGRESS_HEADER): a bookmark whenever the cache's RV
        # passes the last RV this watch sent, so a merge of shard watches never waits for a quiet shard.
        self.progress = False
        self.sent_rv = 0
        self._wakeup = asyncio.Event()

    # --- filtering (S4.6) -------------------------------------------------------

    def _matches(self, e: Entry, cache: dict) -> bool:
        if not e.key.startswith(self.prefix):
            return False
        if self.shard is not None and not self.shard(e):
            if self.on_filtered is not None:
                self.on_filtered()  # apiserver_watch_filtered_events_total (S7.15)
            return False
        if self.predicate is None:
            return True
        obj = cache.get(id(e))
        if obj is None:
            obj = cache[id(e)] = self.decode(e)
        return self.predicate(obj)

    def convert(self, ev: CacheEvent, cache: dict) -> tuple[str, bytes] | None:
        """The frame this watcher gets for an event, per selector transitions (S4.6)."""
        if ev.type == "DELETED":
            if ev.prev is not None and self._matches(ev.prev, cache):
                return "DELETED", ev.entry.data
            return None
        cur_ok = self._matches(ev.entry, cache)
        prev_ok = ev.prev is not None and self._matches(ev.prev, cache)
        if cur_ok and prev_ok:
            return "MODIFIED", ev.entry.data
        if cur_ok:
            return "ADDED", ev.entry.data
        if prev_ok:
            return "DELETED", self.encode_deleted(ev.prev, ev.rv)
        return None

    # --- queue --------------------------------------------------------------------

    def _encoded(self, frame: tuple[str, bytes], cache: dict, ev: CacheEvent | None = None) -> tuple[str, bytes]:
        """With `make_frame`, the finished wire frame, built once per event for all watchers
        that get the same (type, bytes) — `cache` lives for one dispatch only."""
        if self.make_frame is None:
            return frame
        if self.prev_wire is not None and frame[0] == "MODIFIED" and ev is not None and ev.prev is not None:
            return ("FRAME", self.with_prev(frame, ev.prev))
        key = (frame[0], id(frame[1]))
        hit = cache.get(key)
        if hit is None:
            # The source bytes stay referenced with their frame: a compressed entry's `data` is a new bytes
            # object at every read, whose id() could otherwise be reused by the next one's within a dispatch.
            hit = cache[key] = (frame[1], self.make_frame(*frame))
        return ("FRAME", hit[1])

    def with_prev(self, frame: tuple[str, bytes], prev: Entry) -> bytes:
        """The MODIFIED frame with the previous object after the object (FRONT_PREV_HEADER)."""
        return self.make_frame(*frame)[:-2] + b',"prevObject":' + self.prev_wire(prev) + b"}\n"

    def try_add(self, ev: CacheEvent, cache: dict) -> bool | None:
        """Non-blocking put. None: not interested; True: queued; False: queue full."""
        rv = ev.rv   # read once: the watch cache's events derive it from their entry
        if rv <= self.last_rv or self.done or self.closing:
            return None   # already covered by the initial/replay phase (S4.7)
        frame = self.convert(ev, cache)
        if frame is None:
            self.last_rv = rv
            return None
        if len(self.queue) >= self.queue_size:
            return False
        encoded = self._encoded(frame, cache, ev)
        # Fast path: with nothing queued, the dispatcher writes the frame itself at its next
        # `flush` (all events of one dispatch round in one socket write) instead of waking this
        # watcher's writer task per event. Ordering holds: the queue is empty while frames are
        # pending, and a bookmark moves them to the queue first.
        self.sent_rv = rv
        if not self.queue and self.direct is not None and encoded[0] == "FRAME":
            self.pending.append(encoded[1])
            self.last_rv = rv
            return True
        self.queue.append(encoded)
        self.last_rv = rv
        self._wakeup.set()
        return True

    def flush(self) -> None:
        """Write the pending frames in one socket write if the socket takes it now; otherwise they
        go to the queue (the writer task drains it and S4.14 applies to what follows)."""
        if not self.pending or self.done:
            self.pending = []
            return
        if self.direct is not None and self.direct(b"".join(self.pending)):
            self.pending = []
            return
        self._pending_to_queue()
        self._wakeup.set()

    def _pending_to_queue(self) -> None:
        if self.pending:
            self.queue.extend(("FRAME", f) for f in self.pending)
            self.pending = []

    def force_add(self, ev: CacheEvent, cache: dict) -> None:
        frame = self.convert(ev, cache)
        if frame is not None:
            self.queue.append(self._encoded(frame, cache, ev))
            self.sent_rv = ev.rv
            self._wakeup.set()
        self.last_rv = ev.rv

    def add_bookmark(self, rv: int) -> bool:
        """Bookmarks never block (S4.15) and are only written past the RV reached by the
        initial/replay phase (S4.12); their RV may exceed every event this watcher saw."""
        if self.done or self.closing or rv <= self.start_rv or len(self.queue) >= self.queue_size:
            return False
        self._pending_to_queue()  # the bookmark follows the events it covers
        self.queue.append(("BOOKMARK", rv))
        self._wakeup.set()
        return True

    def progress_to(self, rv: int) -> None:
        """The cache has applied everything up to `rv`: tell a front's watch (after the events it covers)."""
        if self.progress and rv > max(self.sent_rv, self.start_rv) and self.add_bookmark(rv):
            self.sent_rv = rv

    def close_after_queue(self) -> None:
        """Take no more events; the writer ends the watch once what is queued (and pending) is written."""
        self._pending_to_queue()
        self.closing = True
        self._wakeup.set()

    def stop(self, terminated: bool = False) -> None:
        self.done = True
        self.terminated = terminated
        self._wakeup.set()

    async def wait(self, timeout: float) -> None:
        if not self.queue and not self.done:
            self._wakeup.clear()
            await wait_event(self._wakeup, timeout)
