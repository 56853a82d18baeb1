"""The etcd store: the storage contract served straight from etcd.

This is upstream's `etcd3/store.go` path (`--watch-cache=false`): every read
and watch goes to etcd. The cacher serves the same contract from memory and
uses this store as its fallback, so one test suite covers both
(tests/test_storage_contract.py).

Objects are JSON values; the stored bytes never contain
`metadata.resourceVersion` - it is the key's etcd `mod_revision`, stamped in
on the way out (S1.2).
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Optional

import orjson

from machinery.gocompat import parse_uint64
from machinery.listoptions import invalid_resource_version

from . import errors
from .codec import decode_value
from .continue_token import encode_continue, resolve_continue
from .interface import ListPage, ListRequest, WatchRequest, WatchSink
from .etcd import KV, PAGE_SIZE, EtcdClient, WatchCompacted, WatchProgress, prefix_end

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]

# ObjectMeta field order (S8.5): resourceVersion is re-inserted at its place.
_META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
               "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
               "labels", "annotations", "ownerReferences", "finalizers", "managedFields")
_META_RANK = {k: i for i, k in enumerate(_META_ORDER)}


_RV_RANK = _META_RANK["resourceVersion"]


def stamp_rv(obj: Obj, rv: int) -> Obj:
    """Set metadata.resourceVersion at its ObjectMeta position (S8.5). O(fields), no sort:
    stored metadata is already in order and only lacks the RV."""
    md = obj.get("metadata")
    if not isinstance(md, dict):
        md = {}
    out: dict = {}
    placed = False
    for k, v in md.items():
        if k == "resourceVersion":
            continue
        if not placed and _META_RANK.get(k, 99) > _RV_RANK:
            out["resourceVersion"] = str(rv)
            placed = True
        out[k] = v
    if not placed:
        out["resourceVersion"] = str(rv)
    obj["metadata"] = out
    return obj


_HEAD = ("kind", "apiVersion", "metadata")


def encode_value(obj: Obj) -> bytes:
    """Bytes stored in etcd: the object without its resourceVersion.

    Layout guarantee (cache/residency.uid_of relies on it): top-level `kind`,
    `apiVersion`, then `metadata` come first, and metadata is in ObjectMeta order,
    so metadata.uid can be read from the bytes without decoding the object (and
    `stamp_rv` can insert the RV without sorting).
    """
    md = obj.get("metadata")
    if isinstance(md, dict):
        # ObjectMeta order (S8.5), without the RV: uid then precedes every nested field.
        md = {k: md[k] for k in sorted(md, key=lambda k: _META_RANK.get(k, 99)) if k != "resourceVersion"}
    out = {k: (md if k == "metadata" else obj[k]) for k in _HEAD if k in obj}
    for k, v in obj.items():
        if k not in out:
            out[k] = v
    try:
        return orjson.dumps(out)
    except orjson.JSONEncodeError as e:  # e.g. nested deeper than orjson's 254 levels (a JSON patch's result)
        raise errors.StorageError(errors.Code.INVALID_OBJECT, message=str(e)) from None


def check_key(key: str) -> str:
    """upstream's etcd3 prepareKey: no "." or ".." segment, whatever the route or encoding that built it."""
    if "/." in key and any(seg in (".", "..") for seg in key.split("/")):
        raise errors.invalid_key(key)
    return key


def decode_kv(kv: KV) -> Obj:
    return stamp_rv(decode_value(kv.key.decode(), kv.value), kv.mod_revision)


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: int
    continue_key: str | None  # full storage key the next page starts at (inclusive)
    remaining: int | None     # remainingItemCount (S2.9), None when not set


@dataclass
class Event:
    """A storage-level watch event (S4.5/S4.6): type, object, and its RV."""
    type: str          # ADDED | MODIFIED | DELETED | BOOKMARK (and INITIAL_END, BATCH_END: `watch`'s markers)
    obj: Obj
    rv: int


# --- helpers of the request-level contract ---------------------------------------------------

# Watch without progress: ask etcd for a bookmark this often at most (defaultBookmarkFrequency, S4.11).
BOOKMARK_FREQUENCY = 60.0
# A watch served without the cache writes the events of one etcd response as one chunk, split at about this size.
WATCH_CHUNK_BYTES = 64 * 1024

CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list.")


def parse_resource_version(rv_s: str | None, key: str = "") -> int:
    """A resourceVersion as upstream's versioner parses it (S1.1, S1.11): ""/"0"/None are 0."""
    if rv_s in (None, "", "0"):
        return 0
    try:
        return parse_uint64(rv_s)
    except ValueError as e:
        raise errors.StorageError(errors.Code.INVALID_RV, key, invalid_resource_version(rv_s, e)) from None


def with_shard(predicate: Predicate | None, shard) -> Predicate | None:
    """The object predicate of the etcd path: selectors AND the shard selector (S7.12)."""
    if shard is None:
        return predicate

    def p(obj: Obj) -> bool:
        md = obj.get("metadata") or {}
        return shard.matches(md.get("uid") or "", md.get("namespace") or "") and (
            predicate is None or predicate(obj))
    return p


class EtcdStore:
    """One resource's view of etcd (keys under `/registry/<resource>/`)."""

    def __init__(self, client: EtcdClient, resource: str):
        self.client = client
        self.resource = resource
        self.watch_tasks: set[asyncio.Future] = set()  # client watches served from etcd (cancelled at stop)

    async def stop(self) -> None:
        for t in list(self.watch_tasks):
            t.cancel()
        await asyncio.gather(*self.watch_tasks, return_exceptions=True)

    # --- the request-level contract (storage.interface), as upstream's etcd3 store --------

    async def get_list(self, prefix: str, req: ListRequest) -> ListPage:
        """LIST semantics of upstream's etcd3 store (S1.4 with the cache off, S2): RV and RVM, limit and
        continue tokens, a single-key list (S1.20), the shard selector as a predicate (S7.12)."""
        revision = not_older_than = 0
        start_key = None
        rv_s = req.resource_version
        if req.continue_:
            start_key, cont_rv = resolve_continue(req.continue_, rv_s, prefix)  # S1.12, S2.1-S2.4
            if cont_rv > 0:
                revision = cont_rv
        elif rv_s not in (None, "", "0"):
            n = parse_resource_version(rv_s, prefix)
            if req.resource_version_match == "Exact" or (not req.resource_version_match and req.limit > 0):
                revision = n          # L5/L6: exactly at N
            else:
                not_older_than = n    # L3/L4: latest state, must be >= N
        pred = with_shard(req.predicate, req.shard)
        try:
            if req.single_key:
                try:
                    obj = await self.get(prefix + req.exact_name, rv=revision)
                    items = [obj] if pred is None or pred(obj) else []
                except errors.StorageError as e:
                    if e.code is not errors.Code.KEY_NOT_FOUND:
                        raise
                    items = []
                return ListPage(revision or await self.current_revision(prefix), objects=items)
            result = await self.list(prefix, revision=revision, start_key=start_key, limit=req.limit,
                                     predicate=pred, not_older_than=not_older_than)
        except errors.StorageError as e:
            if e.code is errors.Code.EXPIRED and start_key is not None:
                # S2.12: a new token continuing inconsistently from the same key.
                e.status_message = CONTINUE_EXPIRED
                e.continue_token = encode_continue(start_key[len(prefix):].removesuffix("\x00"), -1)
            elif e.code is errors.Code.TOO_LARGE_RV and not e.rv:
                e.rv = int(rv_s or 0)
            raise
        page = ListPage(result.resource_version, objects=result.items)
        if result.continue_key is not None:
            # continue_key is "<last key>\x00"; the token format appends the NUL itself (S2.1).
            last = result.continue_key[len(prefix):].removesuffix("\x00")
            page.continue_ = encode_continue(last, result.resource_version)
            page.remaining = result.remaining
        return page

    async def serve_watch(self, prefix: str, req: WatchRequest, sink: WatchSink) -> None:
        """A watch served by one etcd watch of its own (the cache replaces this with one etcd watch per
        resource): state first for RV unset/0 (S1.29) or watch-list (S5.5-S5.7), bookmarks from etcd
        progress, an ERROR event for a compacted start revision, until `req.timeout`."""
        rv = int(req.resource_version or 0)
        pred = with_shard(req.predicate, req.shard)
        frames = req.frames
        await sink.start()  # S4.3: 200 and headers flushed before the first event
        # The frames of one etcd watch response (and the initial state, by ~64 KB) go out as one chunk: a socket
        # write per event was the node tier's largest cost under kwok's Lease watch (py-spy: a fifth of its CPU
        # in aiohttp's writelines at 8,000 nodes).
        pending: list[bytes] = []
        size = 0

        async def flush() -> None:
            nonlocal size
            if pending:
                data = b"".join(pending)
                pending.clear()
                size = 0
                await sink.write(data)

        async def pump() -> None:
            nonlocal size
            start = rv
            if req.send_initial_events is None:
                initial = rv == 0   # RV unset/0 without watch-list: state first (S1.29)
            else:
                initial = req.send_initial_events
                if not initial and rv == 0:
                    start = await self.current_revision(prefix)
            # Bookmarks: ask etcd for progress once a minute, or ~2 s before the timeout for short
            # watches (the cadence of S4.11).
            gen = self.watch(prefix, start, pred, initial_state=initial,
                             mark_initial_end=bool(req.send_initial_events), progress=req.allow_bookmarks,
                             progress_interval=min(BOOKMARK_FREQUENCY, max(req.timeout - 2, 0.5)),
                             batch_ends=True)
            try:
                async for ev in gen:
                    if ev.type == "BATCH_END":
                        await flush()
                    elif ev.type == "INITIAL_END":
                        if req.allow_bookmarks:  # S5.4, S5.8
                            pending.append(frames.bookmark(ev.rv, initial_events_end=True))
                        await flush()
                    elif ev.type == "BOOKMARK":
                        pending.append(frames.bookmark(ev.rv))
                        await flush()
                    else:
                        frame = frames.event_obj(ev.type, ev.obj)
                        pending.append(frame)
                        size += len(frame)
                        if size >= WATCH_CHUNK_BYTES:
                            await flush()
            except errors.StorageError as e:
                await flush()
                if e.code is errors.Code.EXPIRED:
                    e.status_message = f"too old resource version: {rv} ({e.current_rv})"
                await sink.fail(e)
            finally:
                await gen.aclose()

        task = asyncio.ensure_future(pump())
        self.watch_tasks.add(task)
        try:
            async with asyncio.timeout(req.timeout):   # not wait_for: machinery/aio.py
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
        except (ConnectionResetError, asyncio.CancelledError):
            task.cancel()
            raise
        finally:
            self.watch_tasks.discard(task)
            if not task.done():
                task.cancel()

    # --- single objects -----------------------------------------------------

    async def get(self, key: str, rv: int = 0) -> Obj:
        check_key(key)
        kv, _ = await self.client.get(key.encode(), self.resource, revision=rv)
        if kv is None:
            raise errors.not_found(key)
        return decode_kv(kv)

    async def create(self, key: str, obj: Obj) -> Obj:
        check_key(key)
        ok, rev, _ = await self.client.create(key.encode(), encode_value(obj), self.resource)
        if not ok:
            raise errors.exists(key)
        return stamp_rv(obj, rev)

    async def update(self, key: str, obj: Obj, expected_rv: int) -> Obj:
        """CAS update: fails with RV_CONFLICT if the key's mod_revision != expected_rv."""
        out, _ = await self.try_update(key, obj, expected_rv)
        if out is None:
            raise errors.conflict(key, "the object has been modified")
        return out

    async def try_update(self, key: str, obj: Obj, expected_rv: int) -> tuple[Obj | None, Obj | None]:
        """One CAS Txn: (stored object, None) if the key's mod_revision was expected_rv, else
        (None, the current object) from the same Txn's failure branch; not_found if the key is gone.
        Lets a caller that started from a possibly stale copy retry without another read."""
        check_key(key)
        ok, rev, cur = await self.client.update(key.encode(), encode_value(obj), expected_rv, self.resource)
        if ok:
            return stamp_rv(obj, rev), None
        if cur is None:
            raise errors.not_found(key)
        return None, decode_kv(cur)

    async def guaranteed_update(self, key: str, fn: Callable[[Obj], Obj | None],
                                retries: int = 20) -> Obj:
        """Read-modify-write with CAS retries (upstream GuaranteedUpdate).

        `fn(current)` returns the new object, or None for "no change". It may raise
        to abort (its exception propagates).
        """
        cur = await self.get(key)
        for _ in range(retries):
            new = fn(cur)
            if new is None:
                return cur
            out, current = await self.try_update(key, new, int(cur["metadata"]["resourceVersion"]))
            if out is not None:
                return out
            cur = current  # the Txn's failure branch read it: no second GET
        raise errors.conflict(key, "too many conflicting updates")

    async def delete(self, key: str, *, uid: str | None = None, rv: str | None = None,
                     check: Optional[Callable[[Obj], None]] = None) -> tuple[Obj, int]:
        """Delete with optional uid/resourceVersion preconditions.

        Returns (last stored state, revision of the delete).
        """
        check_key(key)
        while True:
            kv, _ = await self.client.get(key.encode(), self.resource)
            if kv is None:
                raise errors.not_found(key)
            cur = decode_kv(kv)
            md = cur.get("metadata", {})
            if uid is not None and md.get("uid") != uid:
                raise errors.conflict(key, f"Precondition failed: UID in precondition: {uid}, "
                                           f"UID in object meta: {md.get('uid', '')}")
            if rv is not None and md.get("resourceVersion") != rv:
                raise errors.conflict(key, f"Precondition failed: ResourceVersion in precondition: {rv}, "
                                           f"ResourceVersion in object meta: {md.get('resourceVersion')}")
            if check is not None:
                check(cur)
            ok, rev, now = await self.client.delete(key.encode(), kv.mod_revision, self.resource)
            if ok:
                return cur, rev
            if now is None:
                raise errors.not_found(key)
            # Changed under us: re-check preconditions against the new state.

    # --- collections --------------------------------------------------------

    async def current_revision(self, prefix: str) -> int:
        return await self.client.current_revision(prefix.encode(), self.resource)

    async def list(self, prefix: str, *, revision: int = 0, start_key: str | None = None,
                   limit: int = 0, predicate: Predicate | None = None,
                   not_older_than: int = 0) -> ListResult:
        """List keys under `prefix` (which ends in '/').

        revision > 0 reads exactly at that revision (410 if compacted, 504 if in
        the future); 0 reads the latest state (quorum). `not_older_than` checks
        the served revision (S1.23 on the etcd path). `start_key` (inclusive)
        continues a paged list. With `limit`, keeps fetching (doubling the etcd
        page, capped) until `limit` items pass the predicate (S2.7); sets
        continue iff keys remain after the last returned item (S2.8) and
        remainingItemCount only without a predicate (S2.9).
        """
        end = prefix_end(prefix.encode())
        start = (start_key or prefix).encode()
        items: list[Obj] = []
        page = limit if limit > 0 else PAGE_SIZE
        read_rev = revision
        last_key: bytes | None = None
        more = False
        remaining: int | None = None
        while True:
            kvs, hdr_rev, more, count = await self.client.range(
                start, end, revision=read_rev, limit=page, resource=self.resource)
            if read_rev == 0:
                read_rev = hdr_rev  # every later page at the same revision
            for i, kv in enumerate(kvs):
                obj = decode_kv(kv)
                if predicate is None or predicate(obj):
                    items.append(obj)
                    if limit > 0 and len(items) == limit:
                        last_key = kv.key
                        more = more or i < len(kvs) - 1
                        if predicate is None:
                            remaining = count - (i + 1)
                        break
            else:
                if kvs:
                    last_key = kvs[-1].key
                if more:
                    start = kvs[-1].key + b"\x00"
                    if limit > 0:
                        page = min(page * 2, PAGE_SIZE)
                    continue
                break
            break
        if not_older_than and read_rev < not_older_than:
            raise errors.StorageError(errors.Code.TOO_LARGE_RV, prefix, rv=not_older_than,
                                      current_rv=read_rev)
        cont = None
        if limit > 0 and more and last_key is not None:
            cont = last_key.decode() + "\x00"
        if cont is None:
            remaining = None
        return ListResult(items, read_rev, cont, remaining if remaining else None)

    async def compact(self, revision: int) -> None:
        """Compact etcd history up to `revision` (reads below it then fail with EXPIRED)."""
        await self.client.compact(revision)

    async def count(self, prefix: str) -> int:
        _, _, _, n = await self.client.range(prefix.encode(), prefix_end(prefix.encode()),
                                             count_only=True, resource=self.resource)
        return n

    # --- watch --------------------------------------------------------------

    async def watch(self, prefix: str, rv: int, predicate: Predicate | None = None, *,
                    initial_state: bool = False, mark_initial_end: bool = False, progress: bool = False,
                    progress_interval: float | None = None, batch_ends: bool = False) -> AsyncIterator[Event]:
        """Watch keys under `prefix` from after `rv`.

        batch_ends: also yield a BATCH_END marker (empty obj) after the initial state and after the events of
        each etcd watch response, so a consumer can write what it has before it waits (`serve_watch`).

        initial_state: first emit ADDED for every matching object at the latest
        revision, then watch from there (upstream etcd3 watcher with RV 0).
        Raises StorageError(EXPIRED) if rv is compacted. With `progress`, yields
        BOOKMARK events (empty obj) on etcd progress notifications, and asks etcd
        for one every `progress_interval` seconds if given.
        """
        if initial_state:
            res = await self.list(prefix, predicate=predicate)
            for obj in res.items:
                yield Event("ADDED", obj, int(obj["metadata"]["resourceVersion"]))
            rv = res.resource_version
            if mark_initial_end:
                yield Event("INITIAL_END", {}, rv)
            elif batch_ends:
                yield Event("BATCH_END", {}, rv)
        w = self.client.watch(prefix.encode(), rv + 1, resource=self.resource, progress_notify=progress)
        ticker = None
        if progress and progress_interval:
            async def tick() -> None:
                while True:
                    await asyncio.sleep(progress_interval)
                    w.request_progress()
            ticker = asyncio.ensure_future(tick())
        last = rv
        try:
            async for batch in w:
                if isinstance(batch, WatchProgress):
                    # Only forward progress that moves past what was already sent (S4.12).
                    if progress and batch.revision > last:
                        last = batch.revision
                        yield Event("BOOKMARK", {}, batch.revision)
                    continue
                for ev in batch:
                    last = ev.kv.mod_revision
                    for out in _transition(ev, predicate):
                        yield out
                if batch_ends:
                    yield Event("BATCH_END", {}, last)
        except WatchCompacted as e:
            raise errors.StorageError(errors.Code.EXPIRED, prefix, rv=rv,
                                      current_rv=e.compact_revision) from None
        finally:
            if ticker is not None:
                ticker.cancel()
            w.close()


def _transition(ev, predicate: Predicate | None):
    """Selector transitions (S4.6) and DELETED-with-delete-RV (S4.5).

    An event at exactly the compacted revision comes without its previous value (compaction keeps only each
    key's newest version at that revision). As upstream's etcd3 watcher: a PUT is ADDED when it created the key
    (create_revision == mod_revision), else MODIFIED, or ADDED through a selector (the old state is unknown,
    so it counts as not matching); a DELETE without its previous value ends the watch with an internal error
    (event.go parseEvent) rather than being dropped."""
    rev = ev.kv.mod_revision
    old = decode_kv(ev.prev) if ev.prev is not None else None
    if ev.type == "DELETE":
        if old is None:
            key = ev.kv.key.decode()
            raise errors.StorageError(errors.Code.INTERNAL, key, f'etcd event received with PrevKv=nil '
                                                                 f'(key="{key}", modRevision={rev}, type=DELETE)')
        if predicate is None or predicate(old):
            yield Event("DELETED", stamp_rv(old, rev), rev)
        return
    new = decode_kv(ev.kv)
    new_ok = predicate is None or predicate(new)
    if old is None and predicate is None and ev.kv.create_revision != rev:
        yield Event("MODIFIED", new, rev)   # a modification whose previous value was compacted
        return
    old_ok = old is not None and (predicate is None or predicate(old))
    if new_ok and old_ok:
        yield Event("MODIFIED", new, rev)
    elif new_ok:
        yield Event("ADDED", new, rev)
    elif old_ok:
        yield Event("DELETED", stamp_rv(old, rev), rev)
