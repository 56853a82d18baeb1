"""The shards a front serves from: each shard's range (its `--residency`, read from its `/debug/residency`),
the resources every shard keeps whole, health, and which shards a request needs.

A shard is a residency apiserver reached over HTTP on loopback. The map is complete when the shards'
ranges partition the hash space of one field (`uid` or `namespace`): every object then lives in exactly one
shard, so merging the shards' answers gives the whole collection. Until it is complete, and while a shard
it needs is down, a request fails with a Status (never a partial answer).
"""
from __future__ import annotations

import asyncio
import json
import logging
import weakref
from dataclasses import dataclass, field

from machinery.shard_selector import FULL, ShardSelector, parse_shard_selector

from .listconn import ShardLists

log = logging.getLogger("front")

# How often the front looks at its shards' /readyz (and re-reads a shard whose range is not known yet).
HEALTH_INTERVAL = 1.0
CHECK_TIMEOUT = 2.0   # a check not answered by then counts as slow
SLOW_CHECKS = 3


@dataclass
class Shard:
    url: str
    residency: ShardSelector | None = None   # the shard's --residency (None: not learnt yet)
    full_resources: frozenset[str] = frozenset()
    ready: bool = False
    error: str = "not contacted yet"
    assigned: ShardSelector | None = None    # the range the front asks it for (None: its residency)
    slow: int = 0                             # health checks in a row that timed out
    # The answers being read from this shard and the requests waiting for one: cut when the health checks mark
    # it down, so that nothing waits on a hung shard longer than it takes to find it hung (SLOW_CHECKS checks).
    responses: weakref.WeakSet = field(default_factory=weakref.WeakSet, repr=False, compare=False)
    waiting: set = field(default_factory=set, repr=False, compare=False)

    async def unless_cut(self, aw):
        """Await `aw` (a request to this shard), or raise TimeoutError if the shard is marked down meanwhile
        (or already is)."""
        if not self.ready:
            if asyncio.iscoroutine(aw):
                aw.close()   # (never to be awaited)
            raise asyncio.TimeoutError("marked down by the front's health checks")
        task = asyncio.ensure_future(aw)
        cut = asyncio.get_running_loop().create_future()
        self.waiting.add(cut)
        try:
            await asyncio.wait((task, cut), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:      # the caller was cancelled: so is its request
            task.cancel()
            raise
        finally:
            self.waiting.discard(cut)
        if task.done():
            return task.result()
        task.cancel()
        raise asyncio.TimeoutError("marked down by the front's health checks")

    def cut(self) -> None:
        """Marked down: every answer being read from it ends (its reader gets a connection error, as if the
        shard had closed it), every request waiting for one fails."""
        for resp in list(self.responses):
            getattr(resp, "cut", resp.close)()   # (a list answer received whole is left to its reader)
        for f in list(self.waiting):
            if not f.done():
                f.set_result(None)

    @property
    def selector(self) -> ShardSelector | None:
        """The range this shard answers for in the front's map: within its residency (resharding narrows it)."""
        return self.assigned if self.assigned is not None else self.residency

    def overlap(self, request: ShardSelector | None) -> ShardSelector | None:
        """The part of `request` (None: everything) this shard holds, or None if nothing."""
        if self.selector is None:
            return None
        if request is None:
            return self.selector
        ranges = [(max(s, rs), min(e, re)) for s, e in self.selector._merged for rs, re in request._merged
                  if max(s, rs) < min(e, re)]
        return ShardSelector(self.selector.field, ranges) if ranges else None


# A shard a request asks, with the shard selector it sends it (None: the shard's own range).
Part = tuple[Shard, ShardSelector | None]


class ShardDown(Exception):
    """A shard a request needs is not ready (or the map does not cover the hash space)."""


@dataclass
class ShardMap:
    shards: list[Shard]
    _task: asyncio.Task | None = field(default=None, repr=False)
    # The merged watches being served (front.storage._MergedWatch): resharding drains them onto the new map.
    watches: set = field(default_factory=set, repr=False)
    # Client watches served since start: from a resource's shared stream ("feed", front.feed), by K shard
    # watches of their own ("merged"), by one shard ("proxied").
    served: dict = field(default_factory=lambda: {"feed": 0, "merged": 0, "proxied": 0}, repr=False)
    # Per shard URL, the connections its list answers are read on (front.listconn: received into a buffer).
    list_clients: dict = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, urls: list[str]) -> "ShardMap":
        return cls([Shard(u.rstrip("/")) for u in urls])

    async def start(self) -> None:
        await self.check_all()
        self._task = asyncio.create_task(self._health_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for c in self.list_clients.values():
            c.close()

    def lists(self, url: str) -> ShardLists:
        """The list connections to the shard at `url`."""
        c = self.list_clients.get(url)
        if c is None:
            c = self.list_clients[url] = ShardLists(url)
        return c

    async def _health_forever(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_INTERVAL)
            try:
                await self.check_all()
            except Exception:  # never let the health loop die
                log.exception("shard health check failed")

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(s) for s in list(self.shards)))

    # --- resharding ------------------------------------------------------------------------------

    async def replace(self, entries: list[tuple[str, ShardSelector | None]]) -> list[Shard]:
        """A new map: (url, range or None for the shard's residency). Every shard must be ready, every range
        inside its shard's residency, and the ranges must partition the hash space; then the map is swapped at
        once (requests already running keep the shards they started with). Returns the old map. ValueError
        says what is wrong."""
        known = {s.url: s for s in self.shards}
        new = []
        for url, rng in entries:
            url = url.rstrip("/")
            s = known.get(url) or Shard(url)
            s = Shard(s.url, s.residency, s.full_resources, s.ready, s.error, rng)
            await self.check(s)
            if not s.ready:
                raise ValueError(f"shard {url} is not ready ({s.error})")
            if rng is not None and not s.residency.contains(rng):
                raise ValueError(f"shard {url}: range {rng} is not inside its residency {s.residency}")
            new.append(s)
        problem = ShardMap(new).coverage_problem()
        if problem:
            raise ValueError(problem)
        old, self.shards = self.shards, new
        log.info("shard map: %s", "; ".join(f"{s.url} {s.selector}" for s in new))
        return old

    async def _get(self, s: Shard, path: str) -> tuple[int, bytes]:
        """A health check's GET on one of the shard's connections (front.listconn): its status and body, in at
        most CHECK_TIMEOUT seconds (else TimeoutError)."""
        client = self.lists(s.url)
        async with asyncio.timeout(CHECK_TIMEOUT):
            conn = await client.get(s.url + path, {}, {})
            try:
                await conn.read_all()
            except BaseException:
                conn.abort()
                raise
            status, body = conn.status, conn.body()
            client.release(conn)
            return status, body

    async def check(self, s: Shard) -> None:
        """Learn the shard's range (once), then its readiness."""
        try:
            if s.residency is None:
                status, body = await self._get(s, "/debug/residency")
                if status != 200:
                    raise RuntimeError(f"/debug/residency: HTTP {status}")
                doc = json.loads(body)
                sel = parse_shard_selector(doc.get("residency") or "")
                # A shard without --residency holds everything.
                s.residency = sel if sel is not None else ShardSelector("uid", [(0, FULL)])
                s.full_resources = frozenset(doc.get("fullResources") or ())
            status, _ = await self._get(s, "/readyz")
            ok = status == 200
            s.error = "" if ok else f"/readyz: HTTP {status}"
        except asyncio.TimeoutError:
            # A busy shard (or machine) answers late: down after SLOW_CHECKS late answers in a row, not one.
            s.slow += 1
            ok = s.ready and s.slow < SLOW_CHECKS
            s.error = "/readyz: no answer in 2 s"
        except Exception as e:  # connection refused, bad answer: down at once
            ok = False
            s.error = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        else:
            s.slow = 0
        if ok != s.ready:
            log.info("shard %s %s%s", s.url, "ready" if ok else "not ready: ", s.error)
        was, s.ready = s.ready, ok
        if was and not ok:
            s.cut()

    # --- what a request needs ------------------------------------------------------------------

    def coverage_problem(self) -> str | None:
        """None when the known ranges partition the hash space of one field, else what is wrong."""
        known = [s for s in self.shards if s.selector is not None]
        if len(known) < len(self.shards):
            return "range not known for " + ", ".join(s.url for s in self.shards if s.selector is None)
        fields = {s.selector.field for s in known}
        if len(fields) != 1:
            return f"shards select on different fields: {sorted(fields)}"
        spans = sorted(r for s in known for r in s.selector._merged)
        at = 0
        for lo, hi in spans:
            if lo != at:
                return f"ranges do not partition the hash space at {at:#x}"
            at = hi
        return None if at == FULL else f"ranges end at {at:#x}"

    @property
    def field(self) -> str:
        return self.shards[0].selector.field if self.shards and self.shards[0].selector else "uid"

    def plan(self, plural: str, request: ShardSelector | None) -> list[tuple[Shard, ShardSelector | None]]:
        """The shards a list or watch of `plural` needs, each with the selector to send it. One shard with the
        request's own selector when it can answer alone (a whole resource, or a range inside one shard).
        Raises ShardDown when a needed shard is not ready, LookupError when the shards cannot serve it (a
        selector on another field: the caller goes to etcd)."""
        problem = self.coverage_problem()
        if problem:
            raise ShardDown(problem)
        if all(plural in s.full_resources for s in self.shards):
            ready = [s for s in self.shards if s.ready]
            if not ready:
                raise ShardDown(self.down_message(self.shards))
            return [(ready[0], request)]
        if request is not None and request.field != self.field:
            raise LookupError(request.field)
        if request is not None:
            for s in self.shards:
                if s.selector.contains(request):
                    self.need([s])
                    return [(s, request)]
        parts = [(s, s.overlap(request)) for s in self.shards]
        parts = [(s, sel) for s, sel in parts if sel is not None]
        self.need([s for s, _ in parts])
        return parts

    def need(self, shards: list[Shard]) -> None:
        down = [s for s in shards if not s.ready]
        if down:
            raise ShardDown(self.down_message(down))

    @staticmethod
    def down_message(down: list[Shard]) -> str:
        return "; ".join(f"shard {s.url} not ready ({s.error})" for s in down)

    def readiness(self) -> str | None:
        """The /readyz check: None, or which shards are down and why."""
        problem = self.coverage_problem()
        down = [s for s in self.shards if not s.ready]
        msgs = ([problem] if problem else []) + ([self.down_message(down)] if down else [])
        return "; ".join(msgs) or None
