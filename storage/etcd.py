"""Thin async etcd v3 client over gRPC (storage/grpc_h2.py's HTTP/2 connection; grpcio is not used).

Why not the `etcd3` package: it does not import under protobuf >= 4. We use
the generated etcd v3 API messages shipped by `aetcd` (maintained, works with
current protobuf and grpcio) directly, because we need
things aetcd's high-level client does not expose: compare-and-swap Txns on
`mod_revision`, paged ranges at a fixed revision, watches with `prev_kv` and
`progress_notify`, and explicit progress requests on a watch stream.

Every call is counted in `etcd_requests_total` / `etcd_request_duration_seconds`
by operation and resource (upstream names).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import AsyncIterator
from urllib.parse import urlparse

from . import errors
from . import metrics
from .etcdpb import pb
from .grpc_h2 import H2Channel, RpcError, StatusCode

# The etcd methods we call (api/etcdserverpb/rpc.proto), through storage.grpc_h2.
RANGE, TXN, DELETE_RANGE, COMPACT = (b"/etcdserverpb.KV/" + m for m in (b"Range", b"Txn", b"DeleteRange", b"Compact"))
WATCH = b"/etcdserverpb.Watch/Watch"
STATUS, DEFRAGMENT = b"/etcdserverpb.Maintenance/Status", b"/etcdserverpb.Maintenance/Defragment"
# Upstream pages the cache's initial list and its own etcd lists by 10,000 (S4.17).
PAGE_SIZE = 10_000


@dataclass(slots=True)
class KV:
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int


@dataclass(slots=True)
class WatchEvent:
    """One etcd event. `type` is "PUT" or "DELETE"; `prev` is the previous kv (if any)."""
    type: str
    kv: KV
    prev: KV | None


@dataclass(slots=True)
class WatchProgress:
    """A progress notification: etcd has sent everything up to `revision`."""
    revision: int


def _kv(m) -> KV:
    return KV(m.key, m.value, m.mod_revision, m.create_revision)


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that makes [prefix, end) cover every key starting with prefix."""
    b = bytearray(prefix)
    for i in range(len(b) - 1, -1, -1):
        if b[i] < 0xFF:
            b[i] += 1
            return bytes(b[: i + 1])
    return b"\x00"


def _hosts(endpoints: list[str]) -> list[tuple[str, int]]:
    hosts = []
    for ep in endpoints:
        u = urlparse(ep if "://" in ep else "http://" + ep)
        if u.scheme not in ("http", ""):
            raise ValueError(f"unsupported etcd endpoint scheme {u.scheme!r} in {ep!r} (only http)")
        hosts.append((u.hostname, u.port or 2379))
    return hosts


def _map_rpc_error(e: RpcError, key: str = "") -> errors.StorageError:
    detail = e.details() or ""
    if "required revision has been compacted" in detail:
        return errors.StorageError(errors.Code.EXPIRED, key, detail)
    if "required revision is a future revision" in detail:
        return errors.StorageError(errors.Code.TOO_LARGE_RV, key, detail)
    if "request is too large" in detail:  # etcdserver's ErrRequestTooLarge (over --max-request-bytes)
        return errors.StorageError(errors.Code.TOO_LARGE, key, detail)
    if e.code() in (StatusCode.UNAVAILABLE, StatusCode.DEADLINE_EXCEEDED):
        return errors.StorageError(errors.Code.UNREACHABLE, key, detail)
    return errors.StorageError(errors.Code.INTERNAL, key, f"{e.code().name}: {detail}")


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, b: bytes) -> bytes:
    """A length-delimited field (wire type 2) whose tag byte is `tag` (field number << 3 | 2, below 16)."""
    return bytes((tag,)) + _varint(len(b)) + b


def _scalar(tag: int, b: bytes) -> bytes:
    """A proto3 `bytes` field: not written when empty (its default)."""
    return _field(tag, b) if b else b""


def cas_request(key: bytes, expected_mod_revision: int, value: bytes | None) -> bytes:
    """The serialised TxnRequest of a compare-and-swap, byte for byte what the message classes make (a test
    compares them): compare [{key, target MOD, result EQUAL, mod_revision}], success [put key=value, or delete
    the key when `value` is None], failure [range key]. Built here because the messages took 10.5 us a write
    and this takes 4 (upb, a 1 KB value)."""
    k = _scalar(0x0A, key)
    cmp = b"\x10\x02" + _scalar(0x1A, key) + b"\x30" + _varint(expected_mod_revision)   # target=MOD (2),
    # result EQUAL is proto3's default (not written); mod_revision in the target_union oneof is written even at 0
    if value is None:
        then = _field(0x1A, k)                                  # request_delete_range {key}
    else:
        then = _field(0x12, k + _scalar(0x12, value))           # request_put {key, value}
    return _field(0x0A, cmp) + _field(0x12, then) + _field(0x1A, _field(0x0A, k))


class EtcdClient:
    """One gRPC channel to an etcd cluster (one per resource group, see `Router`)."""

    def __init__(self, endpoints: list[str], timeout: float = 30.0):
        self.endpoints = list(endpoints)
        self.timeout = timeout
        # Every call goes over a connection of our own (storage/grpc_h2.py: a third of a Lease update's CPU
        # was grpc-aio's). Replies of any size are read (grpc's default limit was 4 MiB; clientv3 and
        # kube-apiserver take math.MaxInt32: 10,000 objects of 100 KB are a 1 GB page).
        self.h2 = H2Channel(_hosts(self.endpoints))
        self.version: str | None = None  # etcd server version, read by status()
        self.cluster_id: int | None = None  # the etcd cluster's id, read by status()

    async def close(self) -> None:
        self.h2.close()

    async def _call(self, op: str, resource: str, coro, key: str = ""):
        t0 = time.perf_counter()
        try:
            return await coro
        except RpcError as e:
            raise _map_rpc_error(e, key) from None
        finally:
            metrics.observe_etcd(op, resource, time.perf_counter() - t0)

    async def _kv_call(self, method: bytes, request, reply):
        """One unary call over `self.h2`: `reply` (the response class) parsed from its answer; `request` a
        message, or its serialised bytes."""
        if not isinstance(request, bytes):
            request = request.SerializeToString()
        return reply.FromString(await self.h2.call(method, request, self.timeout))

    async def status(self) -> str:
        """Ask the member for its version (kept for S3.6 decisions) and its cluster's id (`cluster_id`)."""
        r = await self._call("status", "", self._kv_call(STATUS, pb.StatusRequest(), pb.StatusResponse))
        self.version = r.version
        self.cluster_id = r.header.cluster_id
        return r.version

    async def get(self, key: bytes, resource: str = "", revision: int = 0) -> tuple[KV | None, int]:
        r = await self._call("get", resource, self._kv_call(
            RANGE, pb.RangeRequest(key=key, revision=revision), pb.RangeResponse), key.decode())
        return (_kv(r.kvs[0]) if r.kvs else None), r.header.revision

    async def range(self, start: bytes, end: bytes, *, revision: int = 0, limit: int = 0,
                    resource: str = "", count_only: bool = False,
                    keys_only: bool = False) -> tuple[list[KV], int, bool, int]:
        """One range request: (kvs, header revision, more, count)."""
        # Count-only ranges (apiserver_resource_objects) are not lists of objects.
        r = await self._call("count" if count_only else "list", resource, self._kv_call(RANGE, pb.RangeRequest(
            key=start, range_end=end, revision=revision, limit=limit,
            count_only=count_only, keys_only=keys_only), pb.RangeResponse))
        return [_kv(m) for m in r.kvs], r.header.revision, r.more, r.count

    async def current_revision(self, prefix: bytes, resource: str = "") -> int:
        """Linearizable revision read: a count-free limit=1 range on the prefix (S3.1)."""
        r = await self._call("getCurrentResourceVersion", resource, self._kv_call(RANGE, pb.RangeRequest(
            key=prefix, range_end=prefix_end(prefix), limit=1, keys_only=True), pb.RangeResponse))
        return r.header.revision

    async def create(self, key: bytes, value: bytes, resource: str = "") -> tuple[bool, int, KV | None]:
        """Put iff the key does not exist. Returns (ok, revision, existing kv if not ok)."""
        return await self._cas("create", key, 0, value, resource)

    async def update(self, key: bytes, value: bytes, expected_mod_revision: int,
                     resource: str = "") -> tuple[bool, int, KV | None]:
        """Compare-and-swap on mod_revision. Returns (ok, revision, current kv if not ok)."""
        return await self._cas("update", key, expected_mod_revision, value, resource)

    async def delete(self, key: bytes, expected_mod_revision: int,
                     resource: str = "") -> tuple[bool, int, KV | None]:
        """Delete iff mod_revision matches. Returns (ok, revision, current kv if not ok)."""
        return await self._cas("delete", key, expected_mod_revision, None, resource)

    async def _cas(self, op: str, key: bytes, expected_mod_revision: int, value: bytes | None,
                   resource: str) -> tuple[bool, int, KV | None]:
        """One Txn: put `value` (None: delete the key) iff the key's mod_revision is `expected_mod_revision`
        (0: the key does not exist), else read the key. Returns (ok, revision, current kv if not ok)."""
        r = await self.txn(cas_request(key, expected_mod_revision, value), op, resource, key.decode())
        if r.succeeded:
            return True, r.header.revision, None
        kvs = r.responses[0].response_range.kvs
        return False, r.header.revision, (_kv(kvs[0]) if kvs else None)

    async def txn(self, req, op: str, resource: str = "", key: str = ""):
        """A Txn as given, a message or its bytes (`_cas`; the compactor's CAS on compact_rev_key's version)."""
        return await self._call(op, resource, self._kv_call(TXN, req, pb.TxnResponse), key)

    async def defragment(self) -> None:
        await self._call("defragment", "", self._kv_call(DEFRAGMENT, pb.DefragmentRequest(), pb.DefragmentResponse))

    async def delete_prefix(self, prefix: bytes, resource: str = "") -> int:
        """Delete every key under prefix (CRD and namespace clean-up). Returns the count."""
        r = await self._call("deleteRange", resource, self._kv_call(
            DELETE_RANGE, pb.DeleteRangeRequest(key=prefix, range_end=prefix_end(prefix)), pb.DeleteRangeResponse))
        return r.deleted

    async def compact(self, revision: int, physical: bool = True) -> None:
        await self._call("compact", "", self._kv_call(
            COMPACT, pb.CompactionRequest(revision=revision, physical=physical), pb.CompactionResponse))

    def watch(self, prefix: bytes, start_revision: int, *, resource: str = "",
              progress_notify: bool = True) -> "EtcdWatch":
        return EtcdWatch(self, prefix, start_revision, resource, progress_notify)


# Stream errors a watch resumes after (clientv3 watch.go isHaltErr: "Unavailable codes mean the system will be
# right back ... Treat Internal codes as if something failed ... but retrying could make progress").
RESUMABLE = (StatusCode.UNAVAILABLE, StatusCode.INTERNAL)


class WatchCompacted(Exception):
    def __init__(self, compact_revision: int):
        super().__init__(f"watch start revision compacted (compact revision {compact_revision})")
        self.compact_revision = compact_revision


class EtcdWatch:
    """One etcd watch over a key prefix, with prev_kv, as an async iterator.

    Yields lists of `WatchEvent` (one etcd response) or a `WatchProgress`.
    Raises `WatchCompacted` if the start revision has been compacted.
    `request_progress()` asks etcd for a progress notification (S3.2).

    Like clientv3's watcher, the watch survives etcd going away: when the stream
    fails as UNAVAILABLE or INTERNAL (clientv3's isHaltErr: etcd killed, restarted,
    unreachable, a connection cut mid-frame) or ends without
    being closed, it is re-created from the revision after the last one it
    delivered (events or progress), every `RESUME_DELAY` s until etcd answers;
    nothing is lost or repeated, and a compacted revision still raises
    `WatchCompacted`. Other errors end the watch as before.
    """

    RESUME_DELAY = 0.25

    def __init__(self, client: EtcdClient, prefix: bytes, start_revision: int,
                 resource: str, progress_notify: bool):
        self._client = client
        self._prefix = prefix
        self._progress_notify = progress_notify
        self._next_rev = start_revision   # where a re-created stream starts
        self._requests: asyncio.Queue = self._new_requests()
        self._call = None
        self._closed = False
        self.resumes = 0                  # streams re-created after etcd went away
        metrics.observe_etcd("watch", resource, 0.0)

    def _new_requests(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue()
        q.put_nowait(pb.WatchRequest(create_request=pb.WatchCreateRequest(
            key=self._prefix, range_end=prefix_end(self._prefix), start_revision=self._next_rev,
            prev_kv=True, progress_notify=self._progress_notify)))
        return q

    async def _request_iter(self, requests: asyncio.Queue):
        while True:
            req = await requests.get()
            if req is None:
                return
            yield req

    def request_progress(self) -> None:
        if not self._closed:
            self._requests.put_nowait(pb.WatchRequest(progress_request=pb.WatchProgressRequest()))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._requests.put_nowait(None)
            if self._call is not None:
                self._call.cancel()

    async def __aiter__(self) -> AsyncIterator[list[WatchEvent] | WatchProgress]:
        try:
            while not self._closed:
                self._call = self._client.h2.stream(WATCH, self._request_iter(self._requests),
                                                       pb.WatchResponse.FromString)
                try:
                    async for resp in self._call:
                        if resp.compact_revision:
                            raise WatchCompacted(resp.compact_revision)
                        if resp.canceled:
                            raise errors.StorageError(errors.Code.INTERNAL, "",
                                                      f"etcd canceled the watch: {resp.cancel_reason}")
                        if resp.created and not resp.events:
                            continue
                        if not resp.events:
                            # No events and not a creation: a progress notification.
                            self._next_rev = max(self._next_rev, resp.header.revision + 1)
                            yield WatchProgress(resp.header.revision)
                            continue
                        self._next_rev = max(self._next_rev, resp.events[-1].kv.mod_revision + 1)
                        yield [WatchEvent("PUT" if ev.type == 0 else "DELETE", _kv(ev.kv),
                                          _kv(ev.prev_kv) if ev.HasField("prev_kv") else None)
                               for ev in resp.events]
                except RpcError as e:
                    if self._closed and e.code() == StatusCode.CANCELLED:
                        return
                    if e.code() not in RESUMABLE:
                        raise _map_rpc_error(e) from None
                if self._closed:
                    return
                # etcd went away (or ended the stream): re-create it where this one stopped.
                self.resumes += 1
                self._call = None
                self._requests.put_nowait(None)   # ends the failed call's request iterator
                await asyncio.sleep(self.RESUME_DELAY)
                self._requests = self._new_requests()
        except asyncio.CancelledError:
            if self._closed:
                return
            raise
        finally:
            self.close()
