"""Watch progress requests against a current etcd (>= 3.5.13) built from its Go module.

etcd before 3.4.31 / 3.5.13 could answer a progress request with a revision
ahead of events the watcher had not yet received (etcd-io/etcd#15220, #17507);
the watch cache's consistent reads depend on that not happening. The etcd is
built by `tools/build_etcd.py` (cached in .cache/etcd; a cold build takes
about two minutes and needs Go and the module proxy).
"""
from __future__ import annotations

import asyncio
import pytest

from storage.etcd import EtcdClient, WatchEvent, WatchProgress

@pytest.fixture
async def client(current_etcd):
    c = EtcdClient([current_etcd.endpoint])
    yield c
    await c.close()


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("-")[0].split("."))


class _Pump:
    """Drains an EtcdWatch into a queue so waits can time out without closing it."""

    def __init__(self, w):
        self.w = w
        self.q: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.create_task(self._run())

    async def _run(self):
        try:
            async for item in self.w:
                await self.q.put(item)
        except Exception as e:  # surfaced by get()
            await self.q.put(e)

    async def get(self, timeout: float):
        item = await asyncio.wait_for(self.q.get(), timeout)
        if isinstance(item, Exception):
            raise item
        return item

    async def until_progress(self, at_least: int, on_progress=None,
                             deadline: float = 15.0) -> tuple[list[WatchEvent], WatchProgress]:
        """Request progress (re-requesting every 100 ms, as etcd >= 3.5.13 drops a
        request while a watcher is unsynced or before its start revision) and
        collect the events delivered before the first notification at or above
        `at_least`; `on_progress(events_so_far, p)` sees every notification."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline
        events: list[WatchEvent] = []
        self.w.request_progress()
        while True:
            try:
                item = await self.get(0.1)
            except asyncio.TimeoutError:
                assert loop.time() < end, "no progress notification"
                self.w.request_progress()
                continue
            if isinstance(item, WatchProgress):
                if on_progress:
                    on_progress(events, item)
                if item.revision >= at_least:
                    return events, item
                continue
            events.extend(item)

    async def close(self):
        self.w.close()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def _rev(client: EtcdClient) -> int:
    return await client.current_revision(b"/")


async def test_version_is_current(client):
    v = await client.status()
    assert _vtuple(v) >= (3, 5, 13), v


async def test_progress_request_reports_current_revision(client, unique_prefix):
    prefix = (unique_prefix + "/watched/").encode()
    other = (unique_prefix + "/other/").encode()
    await client.create(prefix + b"a", b"1")
    w = _Pump(client.watch(prefix, await _rev(client) + 1))
    try:
        # Writes to unrelated keys advance the revision; the watcher is told it
        # is up to date at the new current revision.
        for i in range(50):
            await client.create(other + str(i).encode(), b"x")
        want = await _rev(client)
        events, p = await w.until_progress(want)
        assert events == []
        assert p.revision == want

        # Interleaved writes: every watched event at or below a notified
        # revision is delivered before that notification (#15220 / #17507).
        def check(evs, p):
            assert all(e.kv.mod_revision <= p.revision for e in evs)

        for i in range(20):
            await client.create(prefix + b"k" + str(i).encode(), b"v")
            await client.create(other + b"k" + str(i).encode(), b"x")
        want = await _rev(client)
        events, p = await w.until_progress(want, check)
        assert p.revision == want
        assert [e.kv.key for e in events] == [prefix + b"k" + str(i).encode() for i in range(20)]
    finally:
        await w.close()


async def test_progress_request_dropped_before_start_revision(client, unique_prefix):
    """etcd >= 3.5.13 ignores (does not defer) a progress request while a watcher's
    start revision is above the current revision; re-requesting after any write
    gets an answer. The watch cache must therefore re-request periodically."""
    prefix = (unique_prefix + "/watched/").encode()
    w = _Pump(client.watch(prefix, await _rev(client) + 1))
    try:
        w.w.request_progress()
        await asyncio.sleep(0.5)
        with pytest.raises(asyncio.TimeoutError):
            await w.get(0.5)
        await client.create((unique_prefix + "/other").encode(), b"x")
        want = await _rev(client)
        events, p = await w.until_progress(want)
        assert events == [] and p.revision == want
    finally:
        await w.close()


async def test_progress_request_waits_for_unsynced_watcher(client, unique_prefix):
    """A watcher started far in the past is unsynced while it catches up; a
    progress notification must not overtake its pending events."""
    prefix = (unique_prefix + "/watched/").encode()
    other = (unique_prefix + "/other/").encode()
    start = await _rev(client) + 1
    n = 300
    sem = asyncio.Semaphore(32)

    async def put(key: bytes):
        async with sem:
            await client.create(key, b"v" * 512)

    await asyncio.gather(*(put(prefix + b"%04d" % i) for i in range(n)),
                         *(put(other + b"%04d" % i) for i in range(n)))
    want = await _rev(client)
    kvs, _, _, _ = await client.range(prefix, prefix + b"\xff")
    rev_of = {kv.key: kv.mod_revision for kv in kvs}
    assert len(rev_of) == n

    def check(evs, p):
        # Nothing at or below the notified revision may still be pending.
        got = sorted(e.kv.key for e in evs)
        assert got == sorted(k for k, r in rev_of.items() if r <= p.revision), p

    w = _Pump(client.watch(prefix, start))
    try:
        events, p = await w.until_progress(want, check)  # first request while unsynced
        assert p.revision == want
        assert len(events) == n
    finally:
        await w.close()
