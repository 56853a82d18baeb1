"""What the endpoints ask of storage, and how answers come back (upstream `storage.Interface`'s
`ListOptions`, list results and watch streams).

Two implementations serve this contract: `storage.store.EtcdStore` (every read from etcd, as
upstream's etcd3 store) and `cache.delegator.CacheDelegator` (the watch cache where upstream's
delegator allows it, etcd otherwise). `tests/test_storage_contract.py` holds both to it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Protocol

from .errors import StorageError

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]

# Set by the front (front/) on the watches it opens on its shards: the shard's watcher sends a bookmark
# whenever its cache's resourceVersion passes what the watch last sent (the merge's watermarks).
FRONT_PROGRESS_HEADER = "X-Residency-Front-Progress"
# A front's shared stream (front.feed) asks for each MODIFIED event's previous object, `"prevObject":{..}` after
# the object in the frame, so it can apply label and field selectors' transitions (S4.6) itself.
FRONT_PREV_HEADER = "X-Residency-Front-Prev"
# A front's lists on its shards: the shard answers with key-framed items (ext.framed), which the front merges by
# key without parsing JSON; the answer carries the header back.
FRONT_FRAMED_HEADER = "X-Residency-Front-Framed"
# ... and says how many items it frames and their bytes ("count,bytes"), so a front that writes them through knows its
# answer's length before the first item arrives (a Content-Length: no chunk framing, no copy to add it).
FRONT_FRAMED_SIZE_HEADER = "X-Residency-Front-Framed-Size"


@dataclass
class ListRequest:
    """One LIST, validated by `machinery.listoptions` (S1.2-S1.13) before it gets here."""
    resource_version: str | None = None     # as sent: None/"" (consistent), "0" (any) or N
    resource_version_match: str = ""        # "" | "Exact" | "NotOlderThan"
    limit: int = 0
    continue_: str = ""                     # the client's continue token (decoded here, S2.1-S2.4)
    predicate: Predicate | None = None      # label and field selectors over the decoded object
    exact_name: str | None = None           # metadata.name=X of the field selector (S1.20)
    namespace: str | None = None            # the request's namespace (None: all namespaces)
    shard: Any = None                       # machinery.shard_selector.ShardSelector (S7) or None
    label_requirements: list | None = None  # the label selector when indexes may answer it alone
    single_key: bool = False                # exact_name names one key (namespaced: in a namespace, S1.20)
    selectors: dict[str, str] | None = None  # labelSelector / fieldSelector as sent (the front forwards them)
    runs: bool = False                      # the items are written as they are: a stream may hand over comma-joined runs


@dataclass
class ListPage:
    """One page of a list. The etcd store returns decoded objects; the cache returns the stored bytes
    (list-item form, S8.1) and how to decode one into the whole object."""
    resource_version: int
    continue_: str | None = None            # the token for the next page (S2.1), None on the last
    remaining: int | None = None            # remainingItemCount (S2.9)
    objects: list[Obj] | None = None
    raw: list[bytes] | None = None
    decode: Callable[[bytes], Obj] | None = None
    # List items still arriving (the front streaming a shard's list through), in batches (each a list of items or, for a
    # request with `runs`, one bytes of comma-joined items, every run after the first starting with its comma): read
    # once, in order;
    # the fields above are final once the stream has ended (a custom resource's list carries its metadata last).
    stream: AsyncIterator[list[bytes]] | None = None
    # (items, their bytes) the stream yields, when its source said so before the first (a front: its shards'
    # FRONT_FRAMED_SIZE_HEADER): the list is written with its Content-Length.
    stream_size: tuple[int, int] | None = None
    # The raw items' keys, computed when asked (the cache's pages: a front's framed list), and how many characters
    # to cut from each to have the key below the list's prefix (the cache's whole storage keys, not copied).
    keys: Callable[[], list[str]] | None = None
    key_cut: int = 0

    def items(self) -> list[Obj]:
        """Whole objects (kind and apiVersion included), decoding the cache's bytes if needed."""
        if self.objects is not None:
            return self.objects
        assert self.raw is not None and self.decode is not None
        return [self.decode(b) for b in self.raw]


class WatchFrames(Protocol):
    """How a watch response frames events (machinery.encoding.WatchFrames)."""
    table: bool

    def event(self, ev_type: str, data: bytes) -> bytes: ...
    def event_obj(self, ev_type: str, obj: Obj) -> bytes: ...
    def bookmark(self, rv: int, initial_events_end: bool = False) -> bytes: ...


@dataclass
class WatchRequest:
    """One WATCH, validated before it gets here."""
    frames: WatchFrames
    timeout: float                          # seconds until the server ends the watch (S4.8)
    resource_version: str | None = None
    send_initial_events: bool | None = None
    allow_bookmarks: bool = False
    predicate: Predicate | None = None      # selectors, and the name of a single-object watch
    shard: Any = None                       # ShardSelector or None
    selectors: dict[str, str] | None = None  # labelSelector / fieldSelector as sent (a named watch's name in it)
    progress: bool = False                  # FRONT_PROGRESS_HEADER: bookmark every advance of the cache's RV
    prev: bool = False                      # FRONT_PREV_HEADER: MODIFIED frames carry the previous object


class WatchSink(Protocol):
    """Where a watch writes: the HTTP response in the server, a collector in tests."""

    async def start(self) -> None:
        """200 and headers out before the first event (S4.3); errors after this are ERROR events."""

    async def write(self, data: bytes) -> None: ...

    async def fail(self, err: StorageError) -> None:
        """An ERROR event carrying the error's Status; the stream ends after it."""

    def direct_writer(self) -> Callable[[bytes], bool] | None:
        """A non-blocking write the cache's dispatcher may call itself (False: fall behind to the queue)."""
