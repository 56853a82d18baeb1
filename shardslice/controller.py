"""A sharded controller: one replica reconciles the Widgets of one hash range, through a sharded informer on
its own shard.

    python -m shardslice controller --server URL --shard-selector SEL [--name NAME] [--port P] [--workers N]

The informer is a watch-list (`sendInitialEvents=true`, `resourceVersionMatch=NotOlderThan`, bookmarks) with
`shardSelector=SEL`; a server that refuses watch-list (422: the WatchList gate off, as this apiserver with
`--watch-cache=false`; or an ERROR event before the initial state is complete, as on an etcd without
RequestWatchProgress, S3.6) gets a paged list then a watch, both with the selector, as client-go's reflector
does.
A watch that ends is resumed from the last resourceVersion seen (bookmarks included); a 410 starts over.
The initial state replaces the store (objects that vanished while the watch was down are forgotten).

Every object the informer receives is checked against the selector (FNV-1a of the UID, as the server
hashes it): one outside the range is counted in `out_of_range_reads` and never stored; a write is checked
again before it is sent (`out_of_range_writes`). Both must stay 0.

Reconcile (a work queue keyed by UID, as client-go's: a key queued while it is processed is processed again
afterwards): if `status.observedGeneration` is not the object's generation, PUT the status subresource with
the object's resourceVersion as precondition (see `shardslice.widgets`), so each generation is written at
most once however often events repeat or the informer restarts. 409: a newer version exists and its event
is on its way; 404: deleted; anything else is retried with a backoff.

HTTP on `--port` (127.0.0.1): `/healthz` (200 once the initial state is in), `/metrics` (Prometheus text:
`slice_controller_*`), `/debug/controller` (JSON: counters, and with `?since=N` the reconciles from index N:
uid, namespace, name, generation, resourceVersion written, time seen, time written).
"""
from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys
import time

import aiohttp
import orjson
from aiohttp import web

from machinery.shard_selector import ShardSelector, ShardSelectorError, parse_shard_selector
from shardslice import widgets

JSON_CT = {"Content-Type": "application/json"}
COUNTERS = ("events", "bookmarks", "reconciles", "skipped", "conflicts", "not_found", "retries", "errors",
            "out_of_range_reads", "out_of_range_writes", "watch_lists", "lists", "watches", "relists_410")


class Gone(Exception):
    """The watch's resourceVersion is too old (410): start over with a fresh initial state."""


class WatchListFailed(Exception):
    """An ERROR event (not a 410) before the initial state was complete: the server took the watch-list but
    cannot serve it (as upstream on an etcd without RequestWatchProgress, whose refusal comes after the 200)."""


class Controller:
    """One replica, pinned to `selector` on the shard at `server`."""

    def __init__(self, server: str, selector: ShardSelector, name: str = "controller", workers: int = 4,
                 watch_timeout: tuple[int, int] = (300, 600)):
        self.server = server.rstrip("/")
        self.selector = selector
        self.name = name
        self.workers = workers
        self.watch_timeout = watch_timeout
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.store: dict[str, dict] = {}          # uid -> latest object seen
        self.first_seen: dict[str, tuple[int, float]] = {}   # uid -> (generation, when first received)
        self.done_gen: dict[str, int] = {}        # uid -> generation this replica wrote
        self.records: list[tuple] = []            # (uid, ns, name, generation, rv written, t_seen, t_done)
        self.synced = asyncio.Event()
        self.watch_list_supported = True
        self.last_rv: str | None = None
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task] = []

    # --- the informer ---------------------------------------------------------------------------------

    def _in_range(self, obj: dict) -> bool:
        md = obj.get("metadata") or {}
        return self.selector.matches(md.get("uid") or "", md.get("namespace") or "")

    def _ingest(self, etype: str, obj: dict) -> str | None:
        """Apply one object from a list or an event to the store; its UID, or None if refused."""
        if not self._in_range(obj):
            self.counts["out_of_range_reads"] += 1
            return None
        md = obj["metadata"]
        uid = md["uid"]
        if etype == "DELETED":
            self._forget(uid)
            return uid
        self.store[uid] = obj
        gen = int(md.get("generation") or 1)
        if self.first_seen.get(uid, (0,))[0] != gen:
            self.first_seen[uid] = (gen, time.time())
        if not widgets.reconciled(obj):
            self._enqueue(uid)
        return uid

    def _replace(self, seen: set[str]) -> None:
        """The initial state is complete: forget what it did not contain."""
        for uid in [u for u in self.store if u not in seen]:
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        self.store.pop(uid, None)
        self.done_gen.pop(uid, None)
        self.first_seen.pop(uid, None)

    async def run_informer(self) -> None:
        backoff = 0.1
        while True:
            try:
                if self.last_rv is None:
                    if self.watch_list_supported:
                        await self._watch(initial=True)
                    else:
                        await self._list()
                        await self._watch(initial=False)
                else:
                    await self._watch(initial=False)
                backoff = 0.1
            except Gone:
                self.counts["relists_410"] += 1
                self.last_rv = None
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as e:
                self.counts["errors"] += 1
                log(f"{self.name}: watch failed ({type(e).__name__}: {e}); retrying in {backoff:.1f} s")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _params(self) -> dict:
        return {"shardSelector": str(self.selector)}

    async def _list(self) -> None:
        """A paged list of the range (fallback when watch-list is refused)."""
        self.counts["lists"] += 1
        seen: set[str] = set()
        params = dict(self._params(), limit="500")
        while True:
            async with self._session.get(self.server + widgets.collection(), params=params) as r:
                body = await r.read()
                if r.status != 200:
                    raise aiohttp.ClientResponseError(r.request_info, (), status=r.status,
                                                      message=body[:300].decode(errors="replace"))
            doc = orjson.loads(body)
            for it in doc.get("items") or []:
                uid = self._ingest("ADDED", it)
                if uid:
                    seen.add(uid)
            cont = doc["metadata"].get("continue")
            if not cont:
                break
            params = dict(self._params(), limit="500", **{"continue": cont})
        self._replace(seen)
        self.last_rv = doc["metadata"]["resourceVersion"]
        self.synced.set()

    async def _watch(self, initial: bool) -> None:
        params = dict(self._params(), watch="1", allowWatchBookmarks="true",
                      timeoutSeconds=str(random.randint(*self.watch_timeout)))
        if initial:
            params.update(sendInitialEvents="true", resourceVersionMatch="NotOlderThan")
            self.counts["watch_lists"] += 1
        else:
            params["resourceVersion"] = self.last_rv
            self.counts["watches"] += 1
        seen: set[str] | None = set() if initial else None
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        async with self._session.get(self.server + widgets.collection(), params=params, timeout=timeout) as r:
            if r.status != 200:
                body = await r.read()
                if initial and r.status in (400, 422):
                    log(f"{self.name}: watch-list refused ({r.status}); list + watch from now on")
                    self.watch_list_supported = False
                    return
                if r.status == 410:
                    raise Gone()
                raise aiohttp.ClientResponseError(r.request_info, (), status=r.status,
                                                  message=body[:300].decode(errors="replace"))
            buf = b""
            async for chunk in r.content.iter_any():
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1:]
                    if not line.strip():
                        continue
                    try:
                        seen = self._event(orjson.loads(line), seen)
                    except WatchListFailed as e:
                        log(f"{self.name}: watch-list failed ({e}); list + watch from now on")
                        self.watch_list_supported = False
                        return

    def _event(self, ev: dict, seen: set[str] | None) -> set[str] | None:
        etype, obj = ev.get("type"), ev.get("object") or {}
        if etype == "ERROR":
            if obj.get("code") == 410:
                raise Gone()
            if seen is not None:  # still the initial state of a watch-list
                raise WatchListFailed(obj.get("message"))
            raise ValueError(f"watch error event: {obj.get('message')}")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if etype == "BOOKMARK":
            self.counts["bookmarks"] += 1
            if seen is not None and (obj["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end"):
                self._replace(seen)
                seen = None
                self.synced.set()
        else:
            self.counts["events"] += 1
            uid = self._ingest(etype, obj)
            if seen is not None and uid and etype != "DELETED":
                seen.add(uid)
        if rv:
            self.last_rv = rv
        return seen

    # --- the work queue and the reconcile --------------------------------------------------------------

    def _enqueue(self, uid: str) -> None:
        if uid in self._processing:
            self._dirty.add(uid)
        elif uid not in self._queued:
            self._queued.add(uid)
            self._queue.put_nowait(uid)

    async def _requeue_later(self, uid: str, delay: float) -> None:
        await asyncio.sleep(delay)
        self._enqueue(uid)

    async def run_worker(self) -> None:
        while True:
            uid = await self._queue.get()
            self._queued.discard(uid)
            self._processing.add(uid)
            try:
                retry = await self.reconcile(uid)
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
                self.counts["errors"] += 1
                log(f"{self.name}: reconcile {uid}: {type(e).__name__}: {e}")
                retry = True
            finally:
                self._processing.discard(uid)
            if retry:
                self.counts["retries"] += 1
                asyncio.get_running_loop().create_task(self._requeue_later(uid, 0.2))
            elif uid in self._dirty:
                self._dirty.discard(uid)
                self._enqueue(uid)
            self._dirty.discard(uid)

    async def reconcile(self, uid: str) -> bool:
        """Write the status of the stored object's generation if it is not there yet; True: retry later."""
        obj = self.store.get(uid)
        if obj is None:
            return False
        md = obj["metadata"]
        gen = int(md.get("generation") or 1)
        if widgets.reconciled(obj) or self.done_gen.get(uid, 0) >= gen:
            self.counts["skipped"] += 1
            return False
        if not self._in_range(obj):  # never: the informer stores nothing else
            self.counts["out_of_range_writes"] += 1
            return False
        body = dict(obj, status=widgets.desired_status(obj, self.name))
        url = self.server + widgets.status_path(md["namespace"], md["name"])
        async with self._session.put(url, data=orjson.dumps(body), headers=JSON_CT) as r:
            raw = await r.read()
            if r.status == 200:
                out = orjson.loads(raw)["metadata"]
                self.done_gen[uid] = gen
                self.counts["reconciles"] += 1
                self.records.append((uid, md["namespace"], md["name"], gen, out["resourceVersion"],
                                     self.first_seen.get(uid, (gen, 0.0))[1], time.time()))
                return False
            if r.status == 409:
                self.counts["conflicts"] += 1
                return False
            if r.status == 404:
                self.counts["not_found"] += 1
                return False
            return True

    # --- lifecycle and the HTTP face ------------------------------------------------------------------

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.workers + 4),
            timeout=aiohttp.ClientTimeout(total=30))
        self._tasks = [asyncio.create_task(self.run_informer())]
        self._tasks += [asyncio.create_task(self.run_worker()) for _ in range(self.workers)]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session:
            await self._session.close()

    def snapshot(self, since: int = 0) -> dict:
        keys = ("uid", "namespace", "name", "generation", "resourceVersion", "seen", "done")
        return {"name": self.name, "selector": str(self.selector), "server": self.server,
                "synced": self.synced.is_set(), "watch_list": self.watch_list_supported,
                "objects": len(self.store), "queue": self._queue.qsize(), "in_flight": len(self._processing),
                "counts": dict(self.counts),
                "reconciles_total": len(self.records),
                "reconciles": [dict(zip(keys, r)) for r in self.records[since:]]}

    def metrics_text(self) -> str:
        lines = []
        for k, v in self.counts.items():
            lines.append(f"# TYPE slice_controller_{k}_total counter")
            lines.append(f'slice_controller_{k}_total{{controller="{self.name}"}} {v}')
        lines.append("# TYPE slice_controller_objects gauge")
        lines.append(f'slice_controller_objects{{controller="{self.name}"}} {len(self.store)}')
        return "\n".join(lines) + "\n"

    def app(self) -> web.Application:
        async def healthz(_req):
            ok = self.synced.is_set()
            return web.Response(status=200 if ok else 503, text="ok" if ok else "not synced")

        async def metrics(_req):
            return web.Response(text=self.metrics_text(), content_type="text/plain")

        async def debug(req):
            since = int(req.query.get("since", "0") or 0)
            return web.Response(body=orjson.dumps(self.snapshot(since)), content_type="application/json")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/debug/controller", debug)
        return app


def log(msg: str) -> None:
    print(f"[slice {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", required=True, help="the shard's URL (http://127.0.0.1:PORT)")
    p.add_argument("--shard-selector", required=True, help="the hash range, a KEP-5866 shard selector")
    p.add_argument("--name", default="controller")
    p.add_argument("--port", type=int, default=0, help="/healthz /metrics /debug/controller (0: none)")
    p.add_argument("--workers", type=int, default=4)


async def serve(args: argparse.Namespace) -> None:
    try:
        sel = parse_shard_selector(args.shard_selector)
    except ShardSelectorError as e:
        raise SystemExit(str(e)) from None
    if sel is None:
        raise SystemExit("--shard-selector: empty selector")
    c = Controller(args.server, sel, args.name, args.workers)
    runner = None
    if args.port:
        runner = web.AppRunner(c.app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", args.port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    await c.start()
    log(f"{c.name}: reconciling {widgets.CRD_NAME} in {sel} on {c.server}"
        + (f"; http://127.0.0.1:{args.port}/debug/controller" if args.port else ""))
    await stop.wait()
    await c.stop()
    if runner:
        await runner.cleanup()
    log(f"{c.name}: stopped; {c.counts['reconciles']} reconciles, out of range: "
        f"{c.counts['out_of_range_reads']} reads, {c.counts['out_of_range_writes']} writes")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m shardslice controller", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    asyncio.run(serve(p.parse_args(argv)))
