"""`python -m apiserver --front --shards URL,URL,...`: an apiserver that keeps no object cache and serves the
whole API from K residency shards (front/): the same routes, endpoints, filters and authentication as
`APIServer`, with `front.storage.FrontStorage` as every resource's storage contract. `/readyz` has one check
per shard (`shard-<host:port>`), `/debug/residency` reports the shard map."""
from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

from apiserver.httpstack import web

from front.feed import Feed
from front.shards import ShardMap
from front.storage import FrontStorage, RecentObjects
from machinery import errors
from machinery.resources import Resource
from machinery.shard_selector import ShardSelectorError, parse_shard_selector

from .app import APIServer, Config
from .health import Health, process_memory


class FrontHealth(Health):
    def __init__(self, base: Health, shards: ShardMap):
        super().__init__(base.registry, base.router, base.etcd_prefix, base.cacher_of, watch_cache=False)
        self.shards = shards

    def checks(self, kind: str) -> dict[str, Any]:
        checks = super().checks(kind)
        if kind == "readyz":
            for s in self.shards.shards:
                checks[check_name(s.url)] = lambda s=s: self._shard(s)
        return checks

    async def _shard(self, s) -> str | None:
        problem = self.shards.coverage_problem()
        if problem:
            return problem
        return None if s.ready else f"shard {s.url}: {s.error}"


def check_name(url: str) -> str:
    return "shard-" + (urlsplit(url).netloc or url)


class FrontServer(APIServer):
    def __init__(self, config: Config, shard_urls: list[str], shared_watches: bool = True):
        config.watch_cache = False   # no object cache in the front
        self.shards = ShardMap.of(shard_urls)
        self.shared_watches = shared_watches
        self.recent = RecentObjects()   # the objects the front last wrote or read, all resources together
        super().__init__(config)
        # Watch-list is served by merging the shards' lists and watches (S5).
        self.endpoints.watch_list_enabled = True
        self.routes.health = self.health = FrontHealth(self.health, self.shards)
        self.routes.residency_report = self.report
        self._dispatch = self.routes.dispatch
        self.routes.dispatch = self.dispatch   # /debug/shards first, then the API

    def storage_for(self, res: Resource) -> FrontStorage:
        k = (res.group, res.plural)
        d = self._storage.get(k)
        if d is None:
            d = self._storage[k] = FrontStorage(res, self.store_for(res), self.shards, res.prefix(self.etcd_prefix),
                                                      feed_disabled=not self.shared_watches, recent=self.recent)
        return d

    def report(self) -> dict[str, Any]:
        return {"residency": "", "front": True, "shards": self.shard_map(),
                "coverage": self.shards.coverage_problem() or "ok", "resources": {}, "process": process_memory(),
                "watches": self.watch_report(), "watchesServed": dict(self.shards.served),
                # the copies the front's writes start from (front.storage.RecentObjects), all resources together
                "recentObjects": {"objects": len(self.recent), "bytes": self.recent.bytes,
                                  "maxBytes": self.recent.max_bytes}}

    def watch_report(self) -> dict[str, Any]:
        """The front's watches: per resource its shared stream (front.feed) and the per-client merged watches."""
        out: dict[str, Any] = {}
        for w in self.shards.watches:
            name = f"{w.st.res.plural}.{w.st.res.group}" if w.st.res.group else w.st.res.plural
            r = out.setdefault(name, {"feeds": [], "mergedWatches": 0})
            if isinstance(w, Feed):
                r["feeds"].append({"shardWatches": len(w.parts), "watchers": len(w.watchers), "rv": w.mark,
                                   "oldest": w.oldest, "window": len(w.window), "retired": w.retired,
                                   "failed": w.failed})
            else:
                r["mergedWatches"] += 1
        return out

    def shard_map(self) -> list[dict[str, Any]]:
        return [{"url": s.url, "range": str(s.selector) if s.selector else None,
                 "residency": str(s.residency) if s.residency else None, "ready": s.ready, "error": s.error,
                 "fullResources": sorted(s.full_resources)} for s in self.shards.shards]

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        if request.path.rstrip("/") == "/debug/shards":
            return await self.shards_endpoint(request)
        return await self._dispatch(request)

    async def shards_endpoint(self, request: web.Request) -> web.Response:
        """GET: the shard map. PUT {"shards": [{"url": U, "range": "<shard selector>"}, ...]}: resharding (range
        omitted: the shard's residency). The new map applies to requests from now on; merged watches that take
        bookmarks end at a bookmark once every old shard has passed the current revision (their clients go on
        through the new map from there, no relist); the others keep their shards until their timeout."""
        if request.method == "PUT":
            try:
                doc = await request.json()
                entries = [(e["url"], parse_shard_selector(e.get("range") or "")) for e in doc["shards"]]
            except (ValueError, KeyError, TypeError, ShardSelectorError) as e:
                raise errors.bad_request(f"shard map: {e}") from None
            try:
                await self.shards.replace(entries)
            except ValueError as e:
                raise errors.StatusError(422, "Invalid", f"shard map: {e}") from None
            # The drain revision of each watch is its resource's etcd's (Leases may live on an etcd of their own,
            # with revisions of their own: --etcd-servers-overrides, --embedded-lease-etcd).
            revs: dict[int, int] = {}
            draining = []
            for w in list(self.shards.watches):
                client = w.st.store.client
                if id(client) not in revs:
                    revs[id(client)] = await w.st.store.current_revision(w.st.resource_prefix)
                if w.drain(revs[id(client)]):
                    draining.append(w)
            for w in draining:
                asyncio.ensure_future(w.poke())
        elif request.method != "GET":
            raise errors.StatusError(405, "MethodNotAllowed", "GET or PUT")
        return web.json_response({"shards": self.shard_map()})

    async def start(self) -> None:
        await self.shards.start()
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        feeds = [w for w in self.shards.watches if isinstance(w, Feed)]
        await asyncio.gather(*(f.close() for f in feeds), return_exceptions=True)
        await self.shards.stop()
