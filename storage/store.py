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

from . import errors
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
    return orjson.dumps(out)


def decode_kv(kv: KV) -> Obj:
    try:
        obj = orjson.loads(kv.value)
    except orjson.JSONDecodeError as e:
        raise errors.StorageError(errors.Code.INTERNAL, kv.key.decode(), f"undecodable value: {e}") from None
    return stamp_rv(obj, kv.mod_revision)


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: int
    continue_key: str | None  # full storage key the next page starts at (inclusive)
    remaining: int | None     # remainingItemCount (S2.9), None when not set


@dataclass
class Event:
    """A storage-level watch event (S4.5/S4.6): type, object, and its RV."""
    type: str          # ADDED | MODIFIED | DELETED | BOOKMARK
    obj: Obj
    rv: int


class EtcdStore:
    """One resource's view of etcd (keys under `/registry/<resource>/`)."""

    def __init__(self, client: EtcdClient, resource: str):
        self.client = client
        self.resource = resource

    # --- single objects -----------------------------------------------------

    async def get(self, key: str, rv: int = 0) -> Obj:
        kv, _ = await self.client.get(key.encode(), self.resource, revision=rv)
        if kv is None:
            raise errors.not_found(key)
        return decode_kv(kv)

    async def create(self, key: str, obj: Obj) -> Obj:
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
                    progress_interval: float | None = None) -> AsyncIterator[Event]:
        """Watch keys under `prefix` from after `rv`.

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
        except WatchCompacted as e:
            raise errors.StorageError(errors.Code.EXPIRED, prefix, rv=rv,
                                      current_rv=e.compact_revision) from None
        finally:
            if ticker is not None:
                ticker.cancel()
            w.close()


def _transition(ev, predicate: Predicate | None):
    """Selector transitions (S4.6) and DELETED-with-delete-RV (S4.5)."""
    rev = ev.kv.mod_revision
    old = decode_kv(ev.prev) if ev.prev is not None else None
    if ev.type == "DELETE":
        if old is None:
            return
        if predicate is None or predicate(old):
            yield Event("DELETED", stamp_rv(old, rev), rev)
        return
    new = decode_kv(ev.kv)
    new_ok = predicate is None or predicate(new)
    old_ok = old is not None and (predicate is None or predicate(old))
    if new_ok and old_ok:
        yield Event("MODIFIED", new, rev)
    elif new_ok:
        yield Event("ADDED", new, rev)
    elif old_ok:
        yield Event("DELETED", stamp_rv(old, rev), rev)


async def aclose_quietly(gen) -> None:
    try:
        await gen.aclose()
    except (asyncio.CancelledError, Exception):  # pragma: no cover - best effort
        pass
