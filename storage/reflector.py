"""A list and a watch of one prefix straight from etcd, feeding an observer: what a process without a watch cache
of a resource keeps of the objects it must know anyway (RBAC for its authorizer, namespace names for
NamespaceLifecycle), as upstream's informers keep them in every kube-apiserver.

The observer has `replace(objects)` (the whole set, after each list) and `apply(event_type, obj)` (ADDED,
MODIFIED, DELETED), as a watch cache's observers (`cache.cacher.Cacher.add_observer`).
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("apiserver.reflector")


async def reflect(store: Any, prefix: str, observer: Any, name: str, retry: float = 1.0) -> asyncio.Task:
    """Feed `observer` from etcd: the first list now (the observer has its data before the server answers),
    then a task that watches from the list's revision, and lists again after any failure (a compacted watch
    included) until cancelled."""
    res = await store.list(prefix)
    observer.replace(res.items)

    async def run(rv: int) -> None:
        while True:
            try:
                if rv == 0:
                    res = await store.list(prefix)
                    observer.replace(res.items)
                    rv = res.resource_version
                async for ev in store.watch(prefix, rv):
                    if ev.type in ("ADDED", "MODIFIED", "DELETED"):
                        observer.apply(ev.type, ev.obj)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("reflector restarting resource=%s error=%r", name, e)
            rv = 0
            await asyncio.sleep(retry)
    return asyncio.create_task(run(res.resource_version))


class NameSet:
    """The names of a cluster-scoped resource's objects (an observer), asked by key: `key in names` for keys
    `<prefix><name>`."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.names: set[str] = set()

    def replace(self, objects) -> None:
        self.names = {o["metadata"]["name"] for o in objects}

    def apply(self, event_type: str, obj: dict) -> None:
        if event_type == "DELETED":
            self.names.discard(obj["metadata"]["name"])
        else:
            self.names.add(obj["metadata"]["name"])

    def __contains__(self, key: str) -> bool:
        return key.startswith(self.prefix) and key[len(self.prefix):] in self.names
