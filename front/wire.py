"""Reading a shard's HTTP answers as they arrive: a list as key-framed items (ext.framed; merged by key without
parsing JSON), a watch split into frames. Errors a shard answers are raised as the shard's own Status; a shard that
cannot be reached is a storage UNREACHABLE error (504, as for an unreachable etcd).
"""
from __future__ import annotations

import asyncio
import struct
from typing import Any, AsyncIterator

import orjson

import ext
from machinery import errors, jsonenc
from storage import errors as serr
from storage.interface import FRONT_FRAMED_HEADER, FRONT_FRAMED_SIZE_HEADER

from .listconn import ListConnection, ShardConnectionError, ShardLists, take_chunks

Obj = dict[str, Any]
_OBJECT = b',"object":'
_PREV = b',"prevObject":'
_FRAMED = {FRONT_FRAMED_HEADER: "true"}


def shard_status(url: str, status: int, body: bytes) -> errors.StatusError:
    """The shard's Status, as it answered it (upstream's text reaches the client unchanged)."""
    try:
        st = orjson.loads(body)
        if not isinstance(st, dict) or st.get("kind") != "Status":
            raise ValueError
    except ValueError:
        if status == 404:   # Go's plain "404 page not found": a shard that does not serve the resource (yet)
            return errors.StatusError(404, "NotFound", "the server could not find the requested resource")
        return errors.StatusError(status, "InternalError", f"shard {url}: HTTP {status}")
    e = errors.StatusError(int(st.get("code") or status), st.get("reason") or "", st.get("message") or "",
                           st.get("details") if "details" in st else None, st.get("metadata") or None)
    return e


async def fail(sink, e: errors.StatusError) -> None:
    """A shard's Status after a watch started: the ERROR event carrying it (S4.4)."""
    await sink.write(jsonenc.watch_event("ERROR", jsonenc.dumps(e.status())))


def unreachable(url: str, e: BaseException) -> serr.StorageError:
    return serr.StorageError(serr.Code.UNREACHABLE, message=f"shard {url}: {type(e).__name__}: {e}")


async def open_answer(client: ShardLists, url: str, params: dict[str, str], headers: dict[str, str],
                      shard=None, stream: bool = False) -> ListConnection:
    """GET on one of the shard's connections (front.listconn), the answer's head in: a non-200 answer raises the
    shard's Status. Given the `shard` (front.shards.Shard), the wait is cut when its health checks mark it down."""
    try:
        asked = client.get(url, params, headers, stream)
        conn = await (asked if shard is None else shard.unless_cut(asked))
    except (ShardConnectionError, OSError, asyncio.TimeoutError) as e:
        raise unreachable(url, e) from None
    if conn.status != 200:
        try:
            await conn.read_all()
        except ShardConnectionError as e:
            conn.abort()
            raise unreachable(url, e) from None
        status, body = conn.status, conn.body()
        client.release(conn)   # (which readies it for the next answer: status and body are taken first)
        raise shard_status(url, status, body)
    return conn


async def open_watch(client: ShardLists, url: str, params: dict[str, str], headers: dict[str, str] | None = None,
                     shard=None) -> "ShardWatch":
    """A shard's watch, its answer read as it arrives (`ShardWatch`); cut with the `shard` as `open_answer`."""
    conn = await open_answer(client, url, params, headers or {}, shard, stream=True)
    w = ShardWatch(shard.url if shard is not None else url, conn)
    if shard is not None:
        shard.responses.add(w)
    return w


class ShardList:
    """One shard's list answer, key-framed (ext.framed: the front asks with FRONT_FRAMED_HEADER), read as it arrives
    into its connection's buffer (front.listconn), which the merge reads in place: `buf[pos:end_at]` holds what has
    been received and not taken yet. `meta`, the list's metadata, is its first record."""

    def __init__(self, url: str, conn: ListConnection, client: ShardLists):
        self.url = url
        self.conn = conn
        self.client = client
        self.meta: Obj = {}
        self.size: tuple[int, int] | None = None   # (items, their bytes), as the shard said (FRONT_FRAMED_SIZE_HEADER)
        self._closed = False

    @classmethod
    async def open(cls, client: ShardLists, url: str, params: dict[str, str], shard=None) -> "ShardList":
        """GET the framed list: a non-200 answer raises the shard's Status. Given the `shard` (front.shards.Shard),
        the wait and the answer are cut when its health checks mark it down."""
        conn = await open_answer(client, url, params, _FRAMED, shard)
        ls = cls(url, conn, client)
        if shard is not None:
            shard.responses.add(ls)
        try:
            return await ls.start()
        except BaseException:
            ls.close()
            raise

    @property
    def buf(self) -> bytearray:
        return self.conn.buf

    @property
    def pos(self) -> int:
        return self.conn.start

    @property
    def end_at(self) -> int:
        return self.conn.end

    def taken(self, pos: int) -> None:
        self.conn.taken(pos)

    async def more(self, have: int | None = None) -> None:
        """Wait for more of the answer than `have` bytes not taken (default: what there is now; it ends only after
        its end record)."""
        try:
            await self.conn.more(have)
        except ShardConnectionError as e:
            raise unreachable(self.url, e) from None

    async def _record(self) -> bytes:
        """The metadata or end record at `pos`, taken."""
        c = self.conn
        while c.end - c.start < 8:
            await self.more()
        mark, n = _HEAD.unpack_from(c.buf, c.start)
        if mark != _MARK:
            raise unreachable(self.url, ValueError("not a framed list"))
        while c.end - c.start - 8 < n:
            await self.more()
        body = bytes(memoryview(c.buf)[c.start + 8:c.start + 8 + n])
        c.taken(c.start + 8 + n)
        return body

    async def start(self) -> "ShardList":
        headers = self.conn.headers
        if headers.get(FRONT_FRAMED_HEADER.lower()) != "true":
            raise unreachable(self.url, ValueError("answered a list without key framing"))
        size = headers.get(FRONT_FRAMED_SIZE_HEADER.lower())
        if size:
            count, _, nbytes = size.partition(",")
            self.size = (int(count), int(nbytes))
        self.meta = orjson.loads(await self._record())
        return self

    async def end(self) -> None:
        """After the last item: the end record (`close` then keeps the connection for the next list)."""
        await self._record()

    async def read_all(self) -> None:
        """The rest of the answer (a page: at most `limit` items), to be merged with `take`."""
        try:
            await self.conn.read_all()
        except ShardConnectionError as e:
            raise unreachable(self.url, e) from None
        c = self.conn
        if c.end - c.start < len(_END) or c.buf[c.end - len(_END):c.end] != _END:
            # (JSON never holds a 0xFF byte: only the end record ends so)
            raise unreachable(self.url, EOFError("list cut short"))

    def cut(self) -> None:
        """The shard was marked down (`Shard.cut`): an answer still coming ends, its reader gets UNREACHABLE (one
        received whole is left to its reader)."""
        if not self._closed and not self.conn.complete:
            self._closed = True
            self.conn.abort()

    def close(self) -> None:
        """Done with the answer: a connection whose answer came whole is kept for the next request, any other
        closed (a reader that stopped early)."""
        if self._closed:
            return
        self._closed = True
        if self.conn.complete and self.conn.exc is None:
            self.client.release(self.conn)
        else:
            self.conn.abort()


async def merged(lists: list[ShardList], runs: bool = False) -> AsyncIterator[list[bytes] | bytes]:
    """The lists' items merged in key order (each shard's list is key-ordered, keys are unique across shards),
    in batches: whatever every shard has sent so far, up to the first shard whose next item has not arrived.
    A batch is a list of items, or with `runs` one bytes of them comma-joined (no object per item), every run after
    the first starting with its comma (written as it is)."""
    lead = False
    while True:
        pos = [ls.pos for ls in lists]
        bufs = [ls.buf for ls in lists]
        ends = [ls.end_at for ls in lists]
        if runs:
            items, n, state, _ = ext.framed.merge_joined(bufs, pos, 0, lead, ends)
            lead = lead or n > 0
        else:
            items, state, _ = ext.framed.merge(bufs, pos, 0, ends)
            n = len(items)
        for ls, p in zip(lists, pos):
            ls.taken(p)
        if state >= 0:
            seen = ends[state] - pos[state]   # (the rest may come while the batch is written)
        if n:
            yield items
        if state == -1:
            break
        await lists[state].more(seen)
    for ls in lists:
        await ls.end()


async def read_whole(lists: list[ShardList]) -> None:
    """Every list read to its end (pages: at most `limit` items each), to be merged with `take`."""
    await asyncio.gather(*(ls.read_all() for ls in lists))


def take(lists: list[ShardList], limit: int) -> tuple[list[bytes], str | None]:
    """From lists read whole: up to `limit` (0: every) items in key order, and the last one's key."""
    pos = [ls.pos for ls in lists]
    items, _, last = ext.framed.merge([ls.buf for ls in lists], pos, limit, [ls.end_at for ls in lists])
    for ls, p in zip(lists, pos):
        ls.taken(p)
    return items, None if last is None else last.decode()


_HEAD = struct.Struct("<II")
_MARK = 0xFFFFFFFF
_END = ext.framed.END_RECORD


class ShardWatch:
    """One shard's watch read frame by frame: (type, resourceVersion, object bytes, the frame's bytes), or with
    `parts()` (type, metadata, object bytes, previous object's bytes or None). Its answer (chunked) is received
    on a connection of front.listconn and read as it arrives."""

    def __init__(self, url: str, conn: ListConnection):
        self.url = url
        self.conn = conn

    async def frames(self) -> AsyncIterator[tuple[str, int, bytes, bytes]]:
        async for line in self.lines():
            yield parse_frame(line)

    async def parts(self) -> AsyncIterator[tuple[str, Obj, bytes, bytes | None]]:
        async for line in self.lines():
            yield frame_with_prev(line)

    async def lines(self) -> AsyncIterator[bytes]:
        buf = b""
        try:
            async for piece in self._pieces():
                buf += piece
                start = 0
                while (nl := buf.find(b"\n", start)) >= 0:
                    line = buf[start:nl + 1]
                    start = nl + 1
                    yield line
                buf = buf[start:]
        except (OSError, asyncio.TimeoutError):   # (ShardConnectionError is an OSError)
            return   # the shard went away: the watch ends, as a watch ends when its server does

    async def _pieces(self) -> AsyncIterator[bytes]:
        """The answer's body as it arrives, chunked transfer decoded; ends with the answer."""
        c = self.conn
        while True:
            if c.chunked:
                data, pos, last = take_chunks(c.buf, c.start, c.end)
                c.taken(pos)
            else:
                data, last = bytes(memoryview(c.buf)[c.start:c.end]), c.complete
                c.taken(c.end)
            if data:
                yield data
            if last:
                return
            await c.more(c.end - c.start)

    def cut(self) -> None:
        """The shard was marked down (`Shard.cut`): the watch ends."""
        self.conn.abort()

    def close(self) -> None:
        self.conn.abort()   # (a watch's connection is not kept: its answer ends with the connection)


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
