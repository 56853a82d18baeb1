"""Reads the watch cache answers once `cache.delegator` has routed them here: consistent-read
waiting with etcd fallback (S3.4), snapshot paging (S2.14-S2.17), bitmap label selection, watch
replay from the window, watch-list (S5), bookmarks. No HTTP here: a watch writes to a
`storage.interface.WatchSink`, errors are storage errors.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from machinery.resources import Resource
from storage import errors as serr
from storage.interface import WatchRequest, WatchSink

from . import metrics as cmetrics
from .cache_watcher import CacheWatcher
from .cacher import Cacher, next_bookmark_time
from .plan import CONSISTENT, EXACT, NOT_OLDER_THAN, ListPlan
from .watch_cache import INDEXABLE_OPS, Entry, TooOld

Obj = dict[str, Any]


class Delegate(Exception):
    """The cache cannot serve this read: go to etcd (S1.21, S3.4 fallback)."""


@dataclass
class CachedList:
    entries: list[Entry]
    resource_version: int
    continue_key: str | None    # last returned key (no NUL) when more keys follow
    remaining: int | None


async def list_from_cache(cacher: Cacher, res: Resource, plan: ListPlan, prefix: str, start_key: str | None,
                          predicate: Callable[[Obj], bool] | None, label_reqs: list | None,
                          namespace: str | None, shard: Callable[[Entry], bool] | None = None) -> CachedList:
    """One page (or the whole list) from the cache, per the plan's semantics."""
    wc = cacher.wc
    tree = None
    list_rv = 0
    if plan.mode == CONSISTENT:
        rev = await cacher.current_revision()
        try:
            await cacher.wait_until_fresh(rev)
        except serr.StorageError as e:
            if e.code is not serr.Code.TOO_LARGE_RV:
                raise
            cmetrics.consistent_read.labels(res.group, res.plural, "true", "true").inc()
            raise Delegate() from None  # S3.4: a consistent list falls back to etcd
        cmetrics.consistent_read.labels(res.group, res.plural, "true", "false").inc()
    elif plan.mode == NOT_OLDER_THAN:
        await cacher.wait_until_fresh(plan.rv)  # 504 after 3 s (S1.16)
    elif plan.mode == EXACT:
        if plan.rv > wc.rv:
            await cacher.wait_until_fresh(plan.rv)  # 504 after 3 s (S1.16)
        tree = wc.snapshot_at(plan.rv)
        if tree is None:
            raise Delegate()  # older than every snapshot: etcd answers (or 410s), S1.21
        list_rv = plan.rv    # S2.14: the requested RV, not the snapshot's
    if tree is None:
        tree = wc.store.snapshot()  # a stable view while we stream; O(1)
        list_rv = wc.rv
    use_index = (plan.mode != EXACT and predicate is not None and label_reqs is not None)
    entries, cont, remaining = _select(wc, tree, prefix, start_key, plan.limit, predicate, label_reqs,
                                       namespace, shard, use_index, cacher.decode_entry)
    cmetrics.storage_list_total.labels(res.group, "label" if use_index else "", res.plural, "watchcache").inc()
    cmetrics.storage_list_returned.labels(res.group, res.plural, "watchcache").inc(len(entries))
    return CachedList(entries, list_rv, cont, remaining)


def _select(wc, tree, prefix: str, start_key: str | None, limit: int, predicate, label_reqs, namespace,
            shard, use_index: bool, decode) -> tuple[list[Entry], str | None, int | None]:
    start = start_key if start_key and start_key > prefix else prefix
    if use_index:
        # Label selector from the bitmaps (latest state only, S2.15): slots -> entries, key order.
        slots, exact = wc.indexes.select(label_reqs, namespace)
        cands = sorted((wc.slots[s] for s in slots), key=lambda e: e.key)
        cands = [e for e in cands if e.key >= start and e.key.startswith(prefix)]
        out = []
        last = None
        for e in cands:
            if shard is not None and not shard(e):
                continue
            # The bitmaps answer label selectors exactly unless a key was too unique to index.
            if not exact and predicate is not None and not predicate(decode(e)):
                continue
            out.append(e)
            last = e.key
            if limit and len(out) == limit:
                break
        more = bool(limit and last is not None and
                    wc.count_prefix(tree, prefix, last + "\x00") > 0)
        return out, (last if more else None), None
    out: list[Entry] = []
    it = wc.iter_prefix(tree, prefix, start)
    last = None
    for e in it:
        if shard is not None and not shard(e):
            continue
        if predicate is not None and not predicate(decode(e)):
            continue
        out.append(e)
        last = e.key
        if limit and len(out) == limit:
            break
    if not (limit and len(out) == limit):
        return out, None, None
    after = wc.count_prefix(tree, prefix, last + "\x00")
    if after == 0:
        return out, None, None
    # S2.9: remainingItemCount only without a label/field filter; with a shard selector it
    # counts matching items only (1.37-dev omits it; 1.36 counts everything, S7.14).
    if predicate is not None:
        remaining = None
    elif shard is None:
        remaining = after
    else:
        remaining = sum(1 for e in wc.iter_prefix(tree, prefix, last + "\x00") if shard(e))
    return out, last, remaining


def indexable(label_selector) -> list | None:
    """The requirements if the bitmaps can answer them, else None."""
    reqs = list(label_selector.requirements)
    if not reqs:
        return None
    if all(op in INDEXABLE_OPS for _, op, _ in reqs):
        return reqs
    return None


# --- watch -----------------------------------------------------------------------------------

async def serve_watch(cacher: Cacher, prefix: str, req: WatchRequest, sink: WatchSink,
                      shard: Callable[[Entry], bool] | None,
                      on_watcher: Callable[[CacheWatcher, bool], None] | None = None) -> None:
    """A watch served from the cache: errors before `sink.start()` raise; after it, ERROR events."""
    wc = cacher.wc
    rv_s = req.resource_version
    rv = int(rv_s) if rv_s not in (None, "") else 0
    send_initial, allow_bookmarks, predicate = req.send_initial_events, req.allow_bookmarks, req.predicate
    frames = req.frames
    await sink.start()  # S4.3
    deadline = time.monotonic() + req.timeout

    def frame(ev_type: str, data: bytes) -> bytes:
        return frames.event(ev_type, cacher.wire(data))

    # S3.7: a consistent watch-list needs reliable progress requests.
    if send_initial and allow_bookmarks and rv_s in (None, "") and not cacher.progress_supported:
        await sink.fail(serr.StorageError(serr.Code.PROGRESS_UNSUPPORTED, prefix))
        return
    # 1. Freshness (S5.7, S1.29).
    try:
        if send_initial:
            if rv_s in (None, ""):
                await cacher.wait_until_fresh(await cacher.current_revision())
            elif rv > 0:
                await cacher.wait_until_fresh(rv)
        elif rv_s in (None, "") and send_initial is False:
            await cacher.wait_until_fresh(await cacher.current_revision())
    except serr.StorageError as e:  # TOO_LARGE_RV after 3 s, or etcd unreachable: an ERROR event
        await sink.fail(e)
        return

    # 2. Register atomically with the state we start from (no await in between).
    watch_list = bool(send_initial) and allow_bookmarks
    w = CacheWatcher(prefix=prefix, predicate=predicate, shard=shard, queue_size=cacher.queue_size(),
                     start_rv=0, allow_bookmarks=allow_bookmarks, deadline=deadline,
                     encode_deleted=cacher.encode_deleted, decode=cacher.decode_entry, watch_list=watch_list)
    initial: Iterator[Entry] | None = None
    replay = []
    if send_initial:
        snap = wc.store.snapshot()
        start_rv = wc.rv
        initial = wc.iter_prefix(snap, prefix)
    elif rv_s in (None, "", "0"):
        start_rv = wc.rv
    else:
        try:
            replay = wc.events_since(rv)
        except TooOld as e:
            await sink.fail(serr.StorageError(serr.Code.EXPIRED, prefix, rv=rv, current_rv=e.oldest,
                                              status_message=str(e)))
            return
        start_rv = max(rv, wc.rv)
    w.start_rv = w.last_rv = start_rv
    w.progress = req.progress
    if not frames.table:
        w.make_frame = frame   # one encoded frame per event shared by all plain watchers
        if req.prev:
            w.prev_wire = lambda e: cacher.wire(e.data)
    if allow_bookmarks:
        w.next_bookmark = next_bookmark_time(time.monotonic(), deadline)
    cacher.add_watcher(w)
    if on_watcher:
        on_watcher(w, True)
    try:
        # 3. Initial events (S5.5) or replay (S1.29), then the end bookmark (S5.4).
        buf: list[bytes] = []
        size = 0
        cache: dict = {}
        if initial is not None:
            n = 0
            for e in initial:
                if (shard is None or shard(e)) and (predicate is None or predicate(cacher.decode_entry(e))):
                    b = frame("ADDED", e.data)
                    buf.append(b)
                    size += len(b)
                    n += 1
                    if size >= 64 * 1024:
                        await sink.write(b"".join(buf))
                        buf, size = [], 0
            cmetrics.init_events.labels(cacher.group, cacher.resource_label).inc(n)
        for ev in replay:
            f = w.convert(ev, cache)
            if f is not None:
                buf.append(w._encoded(f, cache, ev)[1] if w.make_frame is not None else frame(*f))
        if watch_list:
            buf.append(frames.bookmark(start_rv, True))
        elif w.progress and start_rv > rv:
            buf.append(frames.bookmark(start_rv))  # the front's watermark: the replay covered up to here
        if buf:
            await sink.write(b"".join(buf))
        await write_live(w, sink, frames, frame, deadline)
    finally:
        cacher.remove_watcher(w)
        if on_watcher:
            on_watcher(w, False)


async def write_live(w: CacheWatcher, sink: WatchSink, frames, frame: Callable[[str, bytes], bytes],
                     deadline: float) -> None:
    """Live events until the deadline (or the watcher is stopped, or closes once its queue is written): written
    by the dispatcher itself while the socket keeps up (CacheWatcher.direct), otherwise from the queue by this
    task. Shared by the cache's watches and the front's shared stream (front.feed)."""
    if not frames.table:
        w.direct = sink.direct_writer()
    while not w.done:
        now = time.monotonic()
        if now >= deadline:
            break
        if not w.queue:
            if w.closing:
                break
            await w.wait(deadline - now)
            continue
        out = []
        while w.queue:
            t, payload = w.queue.popleft()
            if t == "FRAME":
                out.append(payload)
            elif t == "BOOKMARK":
                out.append(frames.bookmark(payload))
            else:
                out.append(frame(t, payload))
        await sink.write(b"".join(out))
