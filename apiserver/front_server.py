"""`python -m apiserver --front --shards URL,URL,...`: an apiserver that keeps no object cache and serves the
whole API from K residency shards (front/): the same routes, endpoints, filters and authentication as
`APIServer`, with `front.storage.FrontStorage` as every resource's storage contract. `/readyz` has one check
per shard (`shard-<host:port>`), `/debug/residency` reports the shard map."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from front.shards import ShardMap
from front.storage import FrontStorage
from machinery.resources import Resource

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
    def __init__(self, config: Config, shard_urls: list[str]):
        config.watch_cache = False   # no object cache in the front
        self.shards = ShardMap.of(shard_urls)
        super().__init__(config)
        # Watch-list is served by merging the shards' lists and watches (S5).
        self.endpoints.watch_list_enabled = True
        self.routes.health = self.health = FrontHealth(self.health, self.shards)
        self.routes.residency_report = self.report

    def storage_for(self, res: Resource) -> FrontStorage:
        k = (res.group, res.plural)
        d = self._storage.get(k)
        if d is None:
            d = self._storage[k] = FrontStorage(res, self.store_for(res), self.shards, res.prefix(self.etcd_prefix))
        return d

    def report(self) -> dict[str, Any]:
        return {"residency": "", "front": True, "shards": [
            {"url": s.url, "residency": str(s.selector) if s.selector else None, "ready": s.ready,
             "error": s.error, "fullResources": sorted(s.full_resources)} for s in self.shards.shards],
            "coverage": self.shards.coverage_problem() or "ok", "resources": {}, "process": process_memory()}

    async def start(self) -> None:
        await self.shards.start()
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        await self.shards.stop()
