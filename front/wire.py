"""Reading a shard's HTTP answers as they arrive: a list as key-framed items (ext.framed; merged by key without
parsing JSON), a watch split into frames. Errors a shard answers are raised as the shard's own Status; a shard that
cannot be reached is a storage UNREACHABLE error (504, as for an unreachable etcd).
"""
from __future__ import annotations

import asyncio
import struct
from typing import Any, AsyncIterator

import aiohttp
import orjson

import ext
from machinery import errors, jsonenc
from storage import errors as serr
from storage.interface import FRONT_FRAMED_HEADER, FRONT_FRAMED_SIZE_HEADER

Obj = dict[str, Any]
_OBJECT = b',"object":'
_PREV = b',"prevObject":'


def shard_status(url: str, status: int, body: bytes) -> errors.StatusError:
    """The shard's Status, as it answered it (upstream's text reaches the client unchanged)."""
    try:
        st = orjson.loads(body)
        if not isinstance(st, dict) or st.get("kind") != "Status":
            raise ValueError
    except ValueError:
        return errors.StatusError(status, "InternalError", f"shard {url}: HTTP {status}")
    e = errors.StatusError(int(st.get("code") or status), st.get("reason") or "", st.get("message") or "",
                           st.get("details") if "details" in st else None, st.get("metadata") or None)
    return e


async def fail(sink, e: errors.StatusError) -> None:
    """A shard's Status after a watch started: the ERROR event carrying it (S4.4)."""
    await sink.write(jsonenc.watch_event("ERROR", jsonenc.dumps(e.status())))


def unreachable(url: str, e: BaseException) -> serr.StorageError:
    return serr.StorageError(serr.Code.UNREACHABLE, message=f"shard {url}: {type(e).__name__}: {e}")


async def open_get(session: aiohttp.ClientSession, url: str, params: dict[str, str],
                   headers: dict[str, str] | None = None, shard=None) -> aiohttp.ClientResponse:
    """GET with the answer's headers in: a non-200 answer raises the shard's Status. Given the `shard`
    (front.shards.Shard), the wait and the answer are cut when its health checks mark it down."""
    try:
        if shard is None:
            resp = await session.get(url, params=params, headers=headers)
        else:
            resp = await shard.unless_cut(session.get(url, params=params, headers=headers))
            shard.responses.add(resp)
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
        raise unreachable(url, e) from None
    if resp.status != 200:
        try:
            body = await resp.read()
        except (aiohttp.ClientError, OSError) as e:
            raise unreachable(url, e) from None
        finally:
            resp.release()
        raise shard_status(url, resp.status, body)
    return resp


class ShardList:
    """One shard's list answer, key-framed (ext.framed: the front asks with FRONT_FRAMED_HEADER), read as it
    arrives: `buf[pos:]` holds what has not been taken yet. `meta`, the list's metadata, is its first record."""

    def __init__(self, url: str, resp: aiohttp.ClientResponse):
        self.url = url
        self.resp = resp
        self.buf = b""
        self.pos = 0
        self.meta: Obj = {}
        self.size: tuple[int, int] | None = None   # (items, their bytes), as the shard said (FRONT_FRAMED_SIZE_HEADER)
        self._next: tuple[bytes, int] | None = None  # a piece read, to be taken from this offset after `buf`

    async def more(self) -> None:
        """Read what the shard sent next (the answer ends only after its end record). A piece is taken as it
        arrived, without a copy: a record cut between two pieces is copied alone into a bridge (`buf`), the rest of
        the piece following it."""
        if self._next is not None:   # the bridge has been taken (else: both, in one bytes)
            chunk, at = self._next
            self._next = None
            self.buf, self.pos = (chunk, at) if self.pos >= len(self.buf) else (self.buf[self.pos:] + chunk[at:], 0)
            return
        try:
            chunk, _ = await self.resp.content.readchunk()   # one piece as received: no join
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            raise unreachable(self.url, e) from None
        if not chunk:
            raise unreachable(self.url, EOFError("list cut short"))
        rest = self.buf[self.pos:] if self.pos < len(self.buf) else b""
        self.pos = 0
        if not rest:
            self.buf = chunk
            return
        head = rest[:8] if len(rest) >= 8 else rest + chunk[:8 - len(rest)]
        if len(head) == 8:
            a, b = _HEAD.unpack(head)
            cut = (8 + b if a == _MARK else 8 + a + b) - len(rest)   # what the cut record still needs
            if 0 < cut < len(chunk):
                self.buf = rest + chunk[:cut]
                self._next = (chunk, cut)
                return
        self.buf = rest + chunk

    def _unread(self) -> bytes:
        """What has been read and not taken yet, in one bytes."""
        rest = self.buf[self.pos:]
        if self._next is not None:
            chunk, at = self._next
            rest += chunk[at:]
            self._next = None
        return rest

    async def _record(self) -> bytes:
        """The metadata or end record at `pos`, taken."""
        while len(self.buf) - self.pos < 8:
            await self.more()
        mark, n = _HEAD.unpack_from(self.buf, self.pos)
        if mark != _MARK:
            raise unreachable(self.url, ValueError("not a framed list"))
        while len(self.buf) - self.pos - 8 < n:
            await self.more()
        body = self.buf[self.pos + 8:self.pos + 8 + n]
        self.pos += 8 + n
        return body

    async def start(self) -> "ShardList":
        if self.resp.headers.get(FRONT_FRAMED_HEADER) != "true":
            raise unreachable(self.url, ValueError("answered a list without key framing"))
        size = self.resp.headers.get(FRONT_FRAMED_SIZE_HEADER)
        if size:
            count, _, nbytes = size.partition(",")
            self.size = (int(count), int(nbytes))
        self.meta = orjson.loads(await self._record())
        return self

    async def end(self) -> None:
        """After the last item: the end record, and the answer is done."""
        await self._record()
        self.resp.release()

    def close(self) -> None:
        self.resp.close()


async def merged(lists: list[ShardList], runs: bool = False) -> AsyncIterator[list[bytes] | bytes]:
    """The lists' items merged in key order (each shard's list is key-ordered, keys are unique across shards),
    in batches: whatever every shard has sent so far, up to the first shard whose next item has not arrived.
    A batch is a list of items, or with `runs` one bytes of them comma-joined (no object per item), every run after
    the first starting with its comma (written as it is)."""
    lead = False
    while True:
        pos = [ls.pos for ls in lists]
        bufs = [ls.buf for ls in lists]
        if runs:
            items, n, state, _ = ext.framed.merge_joined(bufs, pos, 0, lead)
            lead = lead or n > 0
        else:
            items, state, _ = ext.framed.merge(bufs, pos, 0)
            n = len(items)
        for ls, p in zip(lists, pos):
            ls.pos = p
        if n:
            yield items
        if state == -1:
            break
        await lists[state].more()
    for ls in lists:
        await ls.end()


async def read_whole(lists: list[ShardList]) -> None:
    """Every list read to its end (pages: at most `limit` items each), to be merged with `take`."""
    async def one(ls: ShardList) -> None:
        try:
            rest = await ls.resp.content.read()
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            raise unreachable(ls.url, e) from None
        ls.buf, ls.pos = ls._unread() + rest, 0
        if not ls.buf.endswith(_END):   # JSON never holds a 0xFF byte: only the end record ends so
            raise unreachable(ls.url, EOFError("list cut short"))
        ls.resp.release()
    await asyncio.gather(*(one(ls) for ls in lists))


def take(lists: list[ShardList], limit: int) -> tuple[list[bytes], str | None]:
    """From lists read whole: up to `limit` (0: every) items in key order, and the last one's key."""
    pos = [ls.pos for ls in lists]
    items, _, last = ext.framed.merge([ls.buf for ls in lists], pos, limit)
    for ls, p in zip(lists, pos):
        ls.pos = p
    return items, None if last is None else last.decode()


_HEAD = struct.Struct("<II")
_MARK = 0xFFFFFFFF
_END = ext.framed.END_RECORD


class ShardWatch:
    """One shard's watch read frame by frame: (type, resourceVersion, object bytes, the frame's bytes), or with
    `parts()` (type, metadata, object bytes, previous object's bytes or None)."""

    def __init__(self, url: str, resp: aiohttp.ClientResponse):
        self.url = url
        self.resp = resp

    async def frames(self) -> AsyncIterator[tuple[str, int, bytes, bytes]]:
        async for line in self.lines():
            yield parse_frame(line)

    async def parts(self) -> AsyncIterator[tuple[str, Obj, bytes, bytes | None]]:
        async for line in self.lines():
            yield frame_with_prev(line)

    async def lines(self) -> AsyncIterator[bytes]:
        buf = b""
        try:
            async for chunk in self.resp.content.iter_any():
                buf += chunk
                start = 0
                while (nl := buf.find(b"\n", start)) >= 0:
                    line = buf[start:nl + 1]
                    start = nl + 1
                    yield line
                buf = buf[start:]
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            return   # the shard went away: the watch ends, as a watch ends when its server does

    def close(self) -> None:
        self.resp.close()


def parse_frame(line: bytes) -> tuple[str, int, bytes, bytes]:
    """`{"type":"T","object":{..}}\\n` -> (T, the object's resourceVersion (0 for ERROR), object, line)."""
    t, md, obj = frame_parts(line)
    return t, int(md.get("resourceVersion") or 0), obj, line


def frame_parts(line: bytes) -> tuple[str, Obj, bytes]:
    """`{"type":"T","object":{..}}\\n` -> (T, the object's metadata ({} for ERROR), the object's bytes)."""
    t, md, obj, _ = frame_with_prev(line)
    return t, md, obj


def frame_with_prev(line: bytes) -> tuple[str, Obj, bytes, bytes | None]:
    """As `frame_parts`, and the previous object's bytes of a frame that carries one (FRONT_PREV_HEADER:
    `{"type":"MODIFIED","object":{..},"prevObject":{..}}`), else None."""
    i = line.index(_OBJECT)
    t = orjson.loads(line[8:i])
    start = i + len(_OBJECT)
    end = ext.container_end(line, start)
    obj = line[start:end]
    prev = None
    if line.startswith(_PREV, end):
        prev = line[end + len(_PREV):line.rindex(b"}")]
    if t == "ERROR":
        return t, {}, obj, None
    return t, orjson.loads(obj)["metadata"], obj, prev
