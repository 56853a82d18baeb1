"""Shared linearizable revision reads (S3.1): the etcd revision now, for many callers at once.

Concurrent callers share one request that started after they all arrived (each sees a revision read after its
own arrival: linearizable for each), so N simultaneous consistent reads cost about two round trips, not N, as
upstream's cacher coalesces them. Used by the watch cache (cache.cacher) and the front (front.storage)."""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, TypeVar

from .etcd import EtcdClient

T = TypeVar("T")


class SharedRead(Generic[T]):
    """One read at a time, shared by the callers that arrived before it was sent (each sees a value read after
    its own arrival)."""

    def __init__(self, read: Callable[[], Awaitable[T]]):
        self.read = read
        self._inflight: asyncio.Future | None = None
        self._next: asyncio.Future | None = None

    async def current(self) -> T:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            asyncio.ensure_future(self._issue(self._next))
        return await asyncio.shield(self._next)

    async def _issue(self, fut: asyncio.Future) -> None:
        # Wait for the in-flight request (if any), so ours starts after every joiner arrived.
        while self._inflight is not None:
            try:
                await asyncio.shield(self._inflight)
            except Exception:
                pass
        self._inflight = fut
        self._next = None
        try:
            fut.set_result(await self.read())
        except Exception as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved: joiners re-raise it
        finally:
            self._inflight = None


class SharedRevision(SharedRead[int]):
    """The etcd revision now, for one resource's concurrent consistent reads (a limit=1 range on its prefix,
    upstream's getCurrentResourceVersion)."""

    def __init__(self, client: EtcdClient, prefix: str, resource: str):
        key = prefix.encode()
        super().__init__(lambda: client.current_revision(key, resource))
