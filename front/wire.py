"""Reading a shard's HTTP answers as they arrive: a list split into its items (each item's exact bytes and its
key), a watch split into frames. Errors a shard answers are raised as the shard's own Status; a shard that
cannot be reached is a storage UNREACHABLE error (504, as for an unreachable etcd).
"""
from __future__ import annotations

import asyncio
import re
from typing import Any, AsyncIterator

import aiohttp
import orjson

import ext
from machinery import errors, jsonenc
from storage import errors as serr

Obj = dict[str, Any]
_ITEMS = b'"items":['
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
                   headers: dict[str, str] | None = None) -> aiohttp.ClientResponse:
    """GET with the answer's headers in: a non-200 answer raises the shard's Status."""
    try:
        resp = await session.get(url, params=params, headers=headers)
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


# A built-in kind's item starts with its metadata, name first (Go's field order), then generateName and namespace;
# names and namespaces are DNS names (no quote, no escape).
_TYPED_HEAD = re.compile(rb'\{"metadata":\{"name":"([^"\\]*)"(?:,"generateName":"[^"\\]*")?(?:,"namespace":"([^"\\]*)")?')


def item_key(item: bytes, cluster_wide: bool) -> str:
    """The item's key below the request's prefix: `namespace/name` when listing every namespace of a namespaced
    resource, else `name` (what orders a list and what a continue token carries). Read in place from a built-in
    kind's head; anything else is parsed."""
    m = _TYPED_HEAD.match(item)
    if m is not None:
        name, ns = m.groups()
        if not cluster_wide:
            return name.decode()
        if ns is not None:   # a namespaced object always has one: none matched means an unusual head, parsed
            return (ns + b"/" + name).decode()
    md = orjson.loads(item)["metadata"]
    ns = md.get("namespace")
    return f"{ns}/{md['name']}" if cluster_wide and ns else md["name"]


class ShardList:
    """One shard's list answer read item by item. `meta` is the list's metadata: known after `start()` for a
    typed list (written before the items), after the items for a custom resource's (written after them)."""

    def __init__(self, url: str, resp: aiohttp.ClientResponse, cluster_wide: bool):
        self.url = url
        self.resp = resp
        self.cluster_wide = cluster_wide
        self.buf = b""
        self.pos = 0
        self.meta: Obj | None = None
        self.eof = False

    async def _more(self) -> bool:
        try:
            chunk = await self.resp.content.readany()
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            raise unreachable(self.url, e) from None
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + chunk if self.pos else self.buf + chunk
        self.pos = 0
        return True

    async def start(self) -> "ShardList":
        while (i := self.buf.find(_ITEMS)) < 0:
            if not await self._more():
                raise unreachable(self.url, EOFError("list ended before its items"))
        head = self.buf[:i]
        if b'"metadata":' in head:   # typed list: {"kind":..,"apiVersion":..,"metadata":{..},"items":[
            self.meta = orjson.loads(head[:-1] + b"}")["metadata"]
        self.pos = i + len(_ITEMS)
        return self

    async def batches(self) -> AsyncIterator[list[tuple[str, bytes]]]:
        """(key, item bytes) in the shard's (key) order, as many as each read brought; then `meta` is set."""
        cluster_wide, end_of = self.cluster_wide, ext.container_end
        while True:
            buf, pos, n = self.buf, self.pos, len(self.buf)
            batch = []
            closed = False
            while True:
                while pos < n and buf[pos] in b", \n":
                    pos += 1
                if pos >= n:
                    break
                if buf[pos] == 0x5D:  # ']'
                    pos += 1
                    closed = True
                    break
                end = end_of(buf, pos)
                if end < 0:
                    break
                item = buf[pos:end]
                batch.append((item_key(item, cluster_wide), item))
                pos = end
            self.pos = pos
            if batch:
                yield batch
            if closed:
                break
            if not await self._more():
                raise unreachable(self.url, EOFError("list cut short"))
        while await self._more():
            pass
        tail = self.buf[self.pos:].strip()
        if self.meta is None:   # custom resource: ,"kind":"XList","metadata":{..}}
            self.meta = orjson.loads(b"{" + tail[1:])["metadata"] if tail.startswith(b",") else {}
        self.resp.release()

    async def all(self) -> list[tuple[str, bytes]]:
        return [kv async for batch in self.batches() for kv in batch]

    def close(self) -> None:
        self.resp.close()


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
