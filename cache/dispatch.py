"""Handing one event to many watchers (upstream `cacher.go`'s dispatchEvent): shared by the watch cache
(`cache.cacher.Cacher`, fed by etcd) and the front's shared merged stream (`front.feed.Feed`, fed by the
shards), so both apply the same queueing, direct writes and slow-watcher budget (S4.14).

A class using `Dispatching` holds `watchers` (a set of `CacheWatcher`), `clock`, `group` and `resource_label`
(the metrics' labels), calls `init_dispatch()` once, and says in `dispatch_rv()` how far it has applied events.
"""
from __future__ import annotations

import asyncio
import logging

from . import metrics
from .cache_watcher import CacheWatcher
from .watch_cache import CacheEvent

log = logging.getLogger("cache")

# Dispatch time budget (S4.14): refills 50 ms per second, capped at 100 ms.
BUDGET_REFILL_PER_SECOND = 0.05
BUDGET_MAX = 0.1


class Dispatching:
    watchers: set[CacheWatcher]

    def init_dispatch(self) -> None:
        self._budget = BUDGET_MAX
        self._budget_at = self.clock()

    def dispatch_rv(self) -> int:
        raise NotImplementedError

    async def _dispatch(self, ev: CacheEvent) -> None:
        cache: dict = {}
        blocked = []
        for w in self.watchers:
            r = w.try_add(ev, cache)
            if r is False:
                blocked.append(w)
        if blocked:
            self._flush_watchers()  # before waiting: what is pending goes out first
            await self._dispatch_blocked(ev, blocked, cache)
        metrics.events_dispatched.labels(self.group, self.resource_label).inc()

    def _flush_watchers(self) -> None:
        rv = self.dispatch_rv()
        for w in self.watchers:
            if w.pending:
                w.flush()
            if w.progress:
                w.progress_to(rv)

    async def _dispatch_blocked(self, ev: CacheEvent, blocked: list[CacheWatcher], cache: dict) -> None:
        now = self.clock()
        self._budget = min(BUDGET_MAX, self._budget + (now - self._budget_at) * BUDGET_REFILL_PER_SECOND)
        self._budget_at = now
        t0 = self.clock()
        while blocked:
            remaining = []
            for w in blocked:
                if w.done:
                    continue
                if len(w.queue) < w.queue_size:
                    w.force_add(ev, cache)
                else:
                    remaining.append(w)
            blocked = remaining
            if not blocked:
                break
            spent = self.clock() - t0
            if spent >= self._budget:
                for w in blocked:
                    log.warning("Forcing %s watcher close due to unresponsiveness: prefix=%s",
                                self.resource_label, w.prefix)
                    w.stop(terminated=True)
                    self.watchers.discard(w)
                    metrics.terminated_watchers.labels(self.group, self.resource_label).inc()
                break
            await asyncio.sleep(0.005)
        self._budget = max(0.0, self._budget - (self.clock() - t0))

    def _terminate_all(self) -> None:
        for w in list(self.watchers):
            w.stop()
        self.watchers.clear()

    def due_bookmarks(self, now: float) -> list[CacheWatcher]:
        """The watchers whose periodic bookmark is due (S4.11)."""
        return [w for w in self.watchers if w.allow_bookmarks and w.next_bookmark and now >= w.next_bookmark]
