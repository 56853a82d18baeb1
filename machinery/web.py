"""A lean HTTP/1.1 server: the part of aiohttp.web the apiserver's processes use, on httptools (llhttp, the
parser of Node.js). The apiserver's, its shards' and fronts' server; APISERVER_HTTP=aiohttp runs them on aiohttp.web
instead (apiserver/httpstack.py).

Why: an empty shard forked from the zygote holds 49.7 MiB RSS after serving discovery, OpenAPI and a list and a
watch of every resource once, and issue 21 asks for 40. aiohttp's import graph is ~9 MiB of it (its client,
email, http.cookies, urllib.request, pickle, netrc, mimetypes, two TLS contexts loaded with the system CAs at
import, multidict, yarl, attrs), while the servers use a few names of aiohttp.web. The same process on this
module: 38.0 MiB, and an empty front 35.2 (`python -m bench.floor`, docs/floor.md).

What it keeps of aiohttp.web, by name, so a module imports one or the other (`from apiserver.httpstack import
web`): Application (middlewares, one catch-all route, on_startup / on_shutdown / on_cleanup, app[key]),
Request (method, path, raw_path, query, headers, content, read, json, transport, protocol, writer, app, and a
dict of its own), StreamResponse / Response (prepare, write with backpressure, write_eof, chunked encoding,
gzip for enable_compression), HTTPException, AppRunner, TCPSite, UnixSite. HTTP/1.1 as aiohttp serves it:
keep-alive and pipelining, HTTP/1.0 (no chunks: the connection closes), HEAD, Expect: 100-continue, 431 for a request line
or headers over the limits (as apiserver/filters.py answers on aiohttp), 400 for what the parser refuses, an
idle keep-alive timeout, and a graceful shutdown (handlers get `shutdown_timeout` to finish, then are
cancelled). A handler is not cancelled when its client goes away (aiohttp 3.9+'s default): writes raise
ConnectionResetError and the transport says it is closing.
"""
from __future__ import annotations

import asyncio
import errno
import json as _json
import logging
import os
import socket
import stat
import time
import zlib
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote

import httptools

from machinery.http1 import http_date

log = logging.getLogger("apiserver.http")

KEEPALIVE_TIMEOUT = 75.0          # aiohttp's default: an idle keep-alive connection closes after it
READ_HIGH_WATER = 1024 * 1024     # a request body buffered beyond this pauses reading from the socket
_NO_BODY = frozenset((204, 304))


def middleware(f):
    """aiohttp's decorator: here a middleware is any `async f(request, handler)`."""
    return f


class AppKey(str):
    """A typed key of the application's dict (aiohttp.web.AppKey): here its name."""

    def __new__(cls, name: str, t=None):
        return super().__new__(cls, name)


class HTTPException(Exception):
    """An answer raised instead of returned (aiohttp's web.HTTPException): its status and text."""
    status = 500

    def __init__(self, *, status: int | None = None, text: str | None = None):
        super().__init__(text or "")
        if status is not None:
            self.status = status
        self.text = text if text is not None else f"{self.status}: {HTTPStatus(self.status).phrase}"


class HTTPRequestEntityTooLarge(HTTPException):
    status = 413

    def __init__(self, max_size: int, actual_size: int):
        super().__init__(text=f"Maximum request body size {max_size} exceeded, actual body size {actual_size}")


# --------------------------------------------------------------------------- headers and queries

class Headers:
    """Case-insensitive, ordered, several values per name (aiohttp's CIMultiDict, as far as it is used)."""
    __slots__ = ("_items",)

    def __init__(self, items=None):
        self._items: list[tuple[str, str]] = []
        if items:
            self.update(items)

    def _all(self, key: str) -> list[str]:
        k = key.lower()
        return [v for n, v in self._items if n.lower() == k]

    def get(self, key: str, default=None):
        k = key.lower()
        for n, v in self._items:
            if n.lower() == k:
                return v
        return default

    def getone(self, key: str, *default):
        got = self._all(key)
        if got:
            return got[0]
        if default:
            return default[0]
        raise KeyError(key)

    def getall(self, key: str, *default) -> list[str]:
        got = self._all(key)
        if got or not default:
            if not got:
                raise KeyError(key)
            return got
        return default[0]

    def __getitem__(self, key: str) -> str:
        return self.getone(key)

    def __setitem__(self, key: str, value: str) -> None:
        k = key.lower()
        self._items = [(n, v) for n, v in self._items if n.lower() != k]
        self._items.append((key, str(value)))

    def __delitem__(self, key: str) -> None:
        k = key.lower()
        kept = [(n, v) for n, v in self._items if n.lower() != k]
        if len(kept) == len(self._items):
            raise KeyError(key)
        self._items = kept

    def __contains__(self, key) -> bool:
        return isinstance(key, str) and bool(self._all(key))

    def __iter__(self):
        return (n for n, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def pop(self, key: str, *default):
        got = self._all(key)
        if got:
            del self[key]
            return got[0]
        if default:
            return default[0]
        raise KeyError(key)

    def setdefault(self, key: str, value: str) -> str:
        got = self.get(key)
        if got is None:
            self._items.append((key, str(value)))
            return str(value)
        return got

    def add(self, key: str, value: str) -> None:
        self._items.append((key, str(value)))

    def update(self, other) -> None:
        for k, v in (other.items() if hasattr(other, "items") else other):
            self[k] = v

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)

    def __repr__(self) -> str:
        return f"<Headers {self._items!r}>"


class Query(dict):
    """The query string's parameters: `q[name]`, `get` and `in` see a name's first value, `getall` all of them
    (aiohttp's MultiDictProxy, as far as it is used)."""

    def __init__(self, raw: str):
        super().__init__()
        self._all: dict[str, list[str]] = {}
        for k, v in parse_qsl(raw, keep_blank_values=True):
            self._all.setdefault(k, []).append(v)
            super().setdefault(k, v)

    def getall(self, key: str, *default) -> list[str]:
        got = self._all.get(key)
        if got is not None:
            return list(got)
        if default:
            return default[0]
        raise KeyError(key)


# --------------------------------------------------------------------------- requests

class BodyReader:
    """A request's body as it arrives (aiohttp's StreamReader: `read(n)` gives what is there, up to n bytes,
    waiting for some; b"" at the end)."""
    __slots__ = ("_proto", "_buf", "_done", "_waiter", "_exc", "total", "_discard")

    def __init__(self, proto: "RequestHandler"):
        self._proto = proto
        self._buf = bytearray()
        self._done = False
        self._waiter: asyncio.Future | None = None
        self._exc: BaseException | None = None
        self.total = 0
        self._discard = False

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self._discard:
            return
        self._buf += data
        if len(self._buf) > READ_HIGH_WATER:
            self._proto.pause_reading()
        self._wake()

    def feed_eof(self) -> None:
        self._done = True
        self._wake()

    def set_exception(self, exc: BaseException) -> None:
        self._exc = exc
        self._wake()

    def _wake(self) -> None:
        w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.set_result(None)

    def discard(self) -> None:
        """The answer was sent without reading the whole body: the rest is read and dropped (the connection
        stays usable, as aiohttp keeps it)."""
        self._discard = True
        self._buf = bytearray()
        self._proto.resume_reading()

    async def read(self, n: int = -1) -> bytes:
        while not self._buf and not self._done:
            if self._exc is not None:
                raise self._exc
            self._waiter = asyncio.get_running_loop().create_future()
            self._proto.resume_reading()
            await self._waiter
        if n < 0 or n >= len(self._buf):
            out = bytes(self._buf)
            self._buf.clear()
        else:
            out = bytes(self._buf[:n])
            del self._buf[:n]
        if len(self._buf) <= READ_HIGH_WATER:
            self._proto.resume_reading()
        return out


class _Output:
    """What was written of the answer (aiohttp's request.writer.output_size)."""
    __slots__ = ("output_size",)

    def __init__(self):
        self.output_size = 0


class Request(dict):
    """One request; its dict holds what the middlewares pass along (request["user"], ...)."""

    def __init__(self, proto: "RequestHandler", method: str, raw_path: str, version: str, headers: Headers):
        super().__init__()
        self.protocol = proto
        self.transport = proto.transport
        self.app = proto.server.app
        self.method = method
        self.raw_path = raw_path
        self.version = version
        self.headers = headers
        self.writer = _Output()
        self.keep_alive = True
        self.content = BodyReader(proto)
        path, _, self.query_string = raw_path.partition("?")
        self.path = unquote(path)
        self._query: Query | None = None
        self.client_max_size = getattr(self.app, "client_max_size", 1024 ** 2)

    @property
    def query(self) -> Query:
        if self._query is None:
            self._query = Query(self.query_string)
        return self._query

    @property
    def host(self) -> str:
        return self.headers.get("Host", "")

    @property
    def content_type(self) -> str:
        ct = self.headers.get("Content-Type")
        return ct.split(";", 1)[0].strip().lower() if ct else "application/octet-stream"

    @property
    def content_length(self) -> int | None:
        cl = self.headers.get("Content-Length")
        try:
            return int(cl) if cl is not None else None
        except ValueError:
            return None

    @property
    def body_exists(self) -> bool:
        return bool(self.content_length) or "chunked" in self.headers.get("Transfer-Encoding", "").lower()

    async def read(self) -> bytes:
        parts, size = [], 0
        while True:
            chunk = await self.content.read()
            if not chunk:
                return b"".join(parts)
            size += len(chunk)
            if self.client_max_size and size > self.client_max_size:
                raise HTTPRequestEntityTooLarge(self.client_max_size, size)
            parts.append(chunk)

    async def json(self, *, loads=_json.loads):
        return loads((await self.read()).decode())


# --------------------------------------------------------------------------- responses


class StreamResponse:
    """An answer written as it goes: `prepare` sends the status line and headers, `write` a piece (waiting
    while the client's socket is full), `write_eof` the end. Without a Content-Length it is chunked (on
    HTTP/1.1; on HTTP/1.0 the connection closes at its end)."""

    def __init__(self, *, status: int = 200, reason: str | None = None, headers=None):
        self.status = status
        self.reason = reason
        self.headers = Headers(headers)
        self._chunked = False
        self._compress = False
        self._zlib = None
        self._proto: RequestHandler | None = None
        self._request: Request | None = None
        self._head = False
        self._eof = False
        self.keep_alive: bool | None = None

    @property
    def prepared(self) -> bool:
        return self._proto is not None

    @property
    def content_type(self) -> str:
        ct = self.headers.get("Content-Type")
        return ct.split(";", 1)[0] if ct else "application/octet-stream"

    @content_type.setter
    def content_type(self, value: str) -> None:
        self.headers["Content-Type"] = value

    @property
    def content_length(self) -> int | None:
        cl = self.headers.get("Content-Length")
        return int(cl) if cl is not None else None

    @content_length.setter
    def content_length(self, value: int | None) -> None:
        if value is None:
            self.headers.pop("Content-Length", None)
        else:
            self.headers["Content-Length"] = str(int(value))

    def enable_chunked_encoding(self) -> None:
        self._chunked = True

    def enable_compression(self, force=None) -> None:
        self._compress = True

    def force_close(self) -> None:
        self.keep_alive = False

    def _start_compression(self, request: Request) -> None:
        accept = request.headers.get("Accept-Encoding", "").lower()
        if "gzip" in accept:
            coding, wbits = "gzip", 16 + zlib.MAX_WBITS
        elif "deflate" in accept:
            coding, wbits = "deflate", zlib.MAX_WBITS
        else:
            return
        self._zlib = zlib.compressobj(wbits=wbits)
        self.headers["Content-Encoding"] = coding
        self.headers.pop("Content-Length", None)

    async def prepare(self, request: Request):
        if self._proto is not None:
            return
        proto = request.protocol
        self._proto, self._request = proto, request
        self._head = request.method == "HEAD"
        if self._compress:
            self._start_compression(request)
        h = self.headers
        if self.keep_alive is None:
            # (a connection that takes no more requests closes after the last one queued is answered)
            self.keep_alive = request.keep_alive and (proto.keep_alive or bool(proto._queue))
        if self.status in _NO_BODY or self.status < 200:
            h.pop("Content-Length", None)
            self._chunked = False
        elif "Content-Length" in h and not self._chunked:
            pass
        elif request.version == "1.0":
            self._chunked = False
            self.keep_alive = False      # the end of the answer is the end of the connection
        else:
            self._chunked = True
            h.pop("Content-Length", None)
            h["Transfer-Encoding"] = "chunked"
        if not self.keep_alive:
            h["Connection"] = "close"
        elif request.version == "1.0":
            h["Connection"] = "keep-alive"
        h.setdefault("Date", http_date())
        reason = self.reason or _reason(self.status)
        head = "".join([f"HTTP/1.1 {self.status} {reason}\r\n", *(f"{k}: {v}\r\n" for k, v in h.items()), "\r\n"])
        proto.write(request, head.encode("latin-1"))

    async def write(self, data) -> None:
        if self._proto is None:
            raise RuntimeError("write before prepare")
        if self._eof:
            raise RuntimeError("write after write_eof")
        if not data or self._head or self.status in _NO_BODY:
            return
        if self._zlib is not None:
            data = self._zlib.compress(data)
            if not data:
                return
        if self._chunked:
            self._proto.write(self._request, b"%x\r\n" % len(data), data, b"\r\n")
        else:
            self._proto.write(self._request, data)
        await self._proto.drain()

    async def write_eof(self, data: bytes = b"") -> None:
        if self._eof:
            return
        if data:
            await self.write(data)
        if self._zlib is not None and not self._head:
            tail = self._zlib.flush()
            if tail and self._chunked:
                self._proto.write(self._request, b"%x\r\n" % len(tail), tail, b"\r\n")
            elif tail:
                self._proto.write(self._request, tail)
        self._eof = True
        if self._chunked and not self._head:
            self._proto.write(self._request, b"0\r\n\r\n")
        await self._proto.drain()


class Response(StreamResponse):
    """An answer whose body is known: sent with its Content-Length."""

    def __init__(self, *, body: bytes | None = None, status: int = 200, reason: str | None = None,
                 text: str | None = None, headers=None, content_type: str | None = None, charset: str | None = None):
        super().__init__(status=status, reason=reason, headers=headers)
        if text is not None:
            body = text.encode(charset or "utf-8")
            content_type, charset = content_type or "text/plain", charset or "utf-8"
        if content_type is not None:
            self.headers["Content-Type"] = content_type + (f"; charset={charset}" if charset else "")
        elif body is not None and "Content-Type" not in self.headers:
            self.headers["Content-Type"] = "application/octet-stream"
        self.body = body if body is not None else b""

    async def prepare(self, request: Request):
        if self._proto is None and not self._chunked:
            body = self.body
            if self._compress and body:
                self._start_compression(request)
                if self._zlib is not None:
                    self.body = body = self._zlib.compress(body) + self._zlib.flush()
                    self._zlib = None
                    self._compress = False
            if self.status not in _NO_BODY:
                self.headers["Content-Length"] = str(len(body))
        return await super().prepare(request)

    async def write_eof(self, data: bytes = b"") -> None:
        if self._eof:
            return
        if self.body and not self._head and self.status not in _NO_BODY:
            self._proto.write(self._request, self.body)
        self._eof = True
        await self._proto.drain()


def json_response(data, *, status: int = 200, headers=None, dumps=_json.dumps) -> Response:
    return Response(body=dumps(data).encode(), status=status, headers=headers, content_type="application/json")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


# --------------------------------------------------------------------------- the application

class _Router:
    """One handler for every path: the apiserver routes requests itself (apiserver/routes.py)."""

    def __init__(self):
        self.handler = None

    def add_route(self, method: str, path: str, handler) -> None:
        if method != "*" or path != "/{tail:.*}":
            raise ValueError("machinery.web serves one catch-all route: add_route('*', '/{tail:.*}', handler)")
        self.handler = handler


class Application(dict):
    def __init__(self, *, middlewares=(), client_max_size: int = 1024 ** 2, **_):
        super().__init__()
        self.middlewares = list(middlewares)
        self.client_max_size = client_max_size
        self.router = _Router()
        self.on_startup: list = []
        self.on_shutdown: list = []
        self.on_cleanup: list = []
        self._chain = None

    def _handler(self):
        if self._chain is None:
            h = self.router.handler
            for m in reversed(self.middlewares):
                h = _link(m, h)
            self._chain = h
        return self._chain


def _link(mw, nxt):
    async def call(request):
        return await mw(request, nxt)
    return call


# --------------------------------------------------------------------------- the connection

_431 = b"431 Request Header Fields Too Large"
_400 = b"400 Bad Request"


class RequestHandler(asyncio.Protocol):
    """One connection: parses requests as they arrive and answers them in order."""

    def __init__(self, server: "Server", **_):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.keep_alive = True      # False: no more requests; it closes once the queued ones are answered
        self.closed = False
        self._queue: list[Request] = []
        self._task: asyncio.Task | None = None
        self._req: Request | None = None       # the request being parsed
        self._url = bytearray()
        self._headers: list[tuple[str, str]] = []
        self._too_large = False
        self._paused_read = False
        self._paused_write = False
        self._drain: asyncio.Future | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._upgraded = False

    # -- asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        reset = ConnectionResetError("the client closed the connection")
        for r in [self._req, *self._queue]:
            if r is not None and not r.content._done:
                r.content.set_exception(reset)
        d, self._drain = self._drain, None
        if d is not None and not d.done():
            d.set_exception(reset)
        if self._task is None:
            self._queue.clear()

    def pause_writing(self) -> None:
        self._paused_write = True

    def resume_writing(self) -> None:
        self._paused_write = False
        d, self._drain = self._drain, None
        if d is not None and not d.done():
            d.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._upgraded:
            return
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._upgraded = True          # the rest is another protocol's: answer what came, then close
        except httptools.HttpParserError:
            self._refuse(400, _400)

    def eof_received(self):
        return False

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        self._url.clear()
        self._headers = []
        self._too_large = False

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > self.server.max_line_size:
            self._too_large = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._too_large:
            return
        if len(name) + len(value) > self.server.max_field_size or len(self._headers) >= self.server.max_headers:
            self._too_large = True
            return
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        if self._too_large:
            self._refuse(431, _431)
            raise httptools.HttpParserError("431")
        p = self.parser
        headers = Headers()
        headers._items = self._headers
        req = Request(self, p.get_method().decode("ascii"), self._url.decode("latin-1"), p.get_http_version(), headers)
        req.keep_alive = p.should_keep_alive()   # (this request's: HTTP/1.0, Connection: close)
        self._req = req
        if headers.get("Expect", "").lower() == "100-continue" and req.version == "1.1":
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        self._queue.append(req)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._answer())

    def on_body(self, body: bytes) -> None:
        if self._req is not None:
            self._req.content.feed(body)

    def on_message_complete(self) -> None:
        if self._req is not None:
            self._req.content.feed_eof()
            self._req = None

    # -- reading and writing
    def pause_reading(self) -> None:
        if not self._paused_read and self.transport is not None and not self.closed:
            self._paused_read = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._paused_read and self.transport is not None and not self.closed:
            self._paused_read = False
            self.transport.resume_reading()

    def write(self, request: Request, *pieces: bytes) -> None:
        if self.closed or self.transport.is_closing():
            raise ConnectionResetError("cannot write: the connection is closed")
        if len(pieces) == 1:
            self.transport.write(pieces[0])
        else:
            self.transport.writelines(pieces)   # a chunk's size line, data and end in one call (one send)
        request.writer.output_size += sum(map(len, pieces))

    async def drain(self) -> None:
        if self.closed:
            raise ConnectionResetError("the connection is closed")
        if self._paused_write:
            if self._drain is None:
                self._drain = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drain)

    def _refuse(self, status: int, body: bytes) -> None:
        """An answer the parser gives (no handler ran): then the connection closes."""
        if self.transport is None or self.transport.is_closing():
            return
        if self._task is None:
            self.transport.write(b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
                                 b"Connection: close\r\nDate: %s\r\n\r\n%s" % (
                                     status, _reason(status).encode(), len(body), http_date().encode(), body))
            self.transport.close()
        else:   # behind requests being answered (pipelined): they are answered, then the connection closes
            self.keep_alive = False
            if self._req is not None and not self._req.content._done:
                self._req.content.set_exception(ConnectionResetError("the rest of the request was malformed"))

    def _arm_idle(self) -> None:
        if self.server.keepalive_timeout and not self.closed:
            self._idle = asyncio.get_running_loop().call_later(self.server.keepalive_timeout, self._close_idle)

    def _close_idle(self) -> None:
        self._idle = None
        if self._task is None and self.transport is not None:
            self.transport.close()

    def close_if_idle(self) -> bool:
        if self._task is None and self.transport is not None:
            self.transport.close()
            return True
        return False

    async def _answer(self) -> None:
        """Answer the queued requests in order, as long as the connection is kept."""
        handler = self.server.app._handler()
        try:
            while self._queue and not self.closed:
                req = self._queue.pop(0)
                self.server.active += 1
                try:
                    resp = await self._handle(handler, req)
                    if resp is None:
                        break
                    if not resp.keep_alive or ((not self.keep_alive or self._upgraded) and not self._queue):
                        self.transport.close()
                        break
                    if not req.content._done:
                        req.content.discard()   # the next request is parsed once this body has been read
                finally:
                    self.server.active -= 1
        except (ConnectionResetError, asyncio.CancelledError):
            if self.transport is not None:
                self.transport.close()
        finally:
            self._task = None
            if self.closed:
                self._queue.clear()
            elif self._queue and not self.transport.is_closing():   # a request that arrived as the loop ended
                self._task = asyncio.get_running_loop().create_task(self._answer())
            else:
                self._arm_idle()

    async def _handle(self, handler, req: Request) -> StreamResponse | None:
        try:
            resp = await handler(req)
        except HTTPException as e:
            resp = Response(status=e.status, text=e.text)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception:  # a bug below the middlewares (they answer errors): 500, never a stack trace
            log.exception("unhandled error path=%s", req.path)
            if req.writer.output_size:
                self.transport.abort()
                return None
            resp = Response(status=500, text="500 Internal Server Error")
            resp.force_close()
        if not resp.prepared:
            await resp.prepare(req)
        await resp.write_eof()
        return resp


class Server:
    """The protocol factory of a runner (aiohttp's web.Server): the application and the protocol's limits."""

    def __init__(self, app: Application, *, max_line_size: int = 8190, max_field_size: int = 8190,
                 max_headers: int = 32768, keepalive_timeout: float = KEEPALIVE_TIMEOUT, **_):
        self.app = app
        self.max_line_size, self.max_field_size, self.max_headers = max_line_size, max_field_size, max_headers
        self.keepalive_timeout = keepalive_timeout
        self.connections: set[RequestHandler] = set()
        self.active = 0

    def __call__(self) -> RequestHandler:
        return RequestHandler(self)

    async def shutdown(self, timeout: float) -> None:
        """Close idle connections, give the answers in progress `timeout` seconds, then cancel them."""
        for c in list(self.connections):
            c.close_if_idle()
        deadline = time.monotonic() + (timeout or 0)
        while self.active and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for c in list(self.connections):
            if c._task is not None:
                c._task.cancel()
            if c.transport is not None:
                c.transport.close()
        await asyncio.sleep(0)


class AppRunner:
    def __init__(self, app: Application, *, handle_signals: bool = False, access_log=None, **limits):
        self.app = app
        self._limits = limits
        self.server: Server | None = None
        self.sites: list[BaseSite] = []

    async def setup(self) -> None:
        for f in self.app.on_startup:
            await f(self.app)
        self.server = Server(self.app, **self._limits)

    async def cleanup(self) -> None:
        timeout = max((s._shutdown_timeout for s in self.sites), default=1.0)
        for s in list(self.sites):   # (stop removes the site from the list)
            await s.stop()
        for f in self.app.on_shutdown:
            await f(self.app)
        if self.server is not None:
            await self.server.shutdown(timeout)
        for f in self.app.on_cleanup:
            await f(self.app)


class BaseSite:
    def __init__(self, runner: AppRunner, *, shutdown_timeout: float = 1.0, ssl_context=None, backlog: int = 128):
        self._runner = runner
        self._shutdown_timeout = shutdown_timeout
        self._ssl_context = ssl_context
        self._backlog = backlog
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._runner.sites.append(self)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        if self in self._runner.sites:
            self._runner.sites.remove(self)


class TCPSite(BaseSite):
    def __init__(self, runner: AppRunner, host: str | None = None, port: int | None = None, *,
                 shutdown_timeout: float = 1.0, ssl_context=None, backlog: int = 128, reuse_port: bool | None = None,
                 reuse_address: bool | None = None):
        super().__init__(runner, shutdown_timeout=shutdown_timeout, ssl_context=ssl_context, backlog=backlog)
        self._host, self._port = host, port
        self._reuse_port, self._reuse_address = reuse_port, reuse_address

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await BaseSite.start(self)
        self._server = await asyncio.get_running_loop().create_server(
            self._runner.server, self._host, self._port, ssl=self._ssl_context, backlog=self._backlog,
            reuse_port=self._reuse_port, reuse_address=self._reuse_address)


class UnixSite(BaseSite):
    """Plain HTTP on a Unix socket (`--unix-socket`), owner-only; a stale socket file is replaced."""

    def __init__(self, runner: AppRunner, path: str, *, shutdown_timeout: float = 1.0, backlog: int = 128):
        super().__init__(runner, shutdown_timeout=shutdown_timeout, backlog=backlog)
        self._path = path

    @property
    def name(self) -> str:
        return f"http+unix://{self._path}"

    async def start(self) -> None:
        await BaseSite.start(self)
        sock = unix_listener(self._path, self._backlog)
        self._server = await asyncio.get_running_loop().create_unix_server(self._runner.server, sock=sock,
                                                                          backlog=self._backlog)

    async def stop(self) -> None:
        bound = self._server is not None   # (a path it did not bind is not its to remove)
        await BaseSite.stop(self)
        if bound:
            remove_socket(self._path)


def unix_listener(path: str, backlog: int) -> socket.socket:
    """A listening Unix socket at `path`, owner-only from the start: bound under a temporary name, made 0600, then
    renamed to `path` before it listens (so no other user can connect, not even in between; no process-wide
    umask change). A socket file left by a process that died is replaced, any other file refused."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
    except FileNotFoundError:
        pass
    tmp = f"{path}.{os.getpid()}.tmp"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        sock.bind(tmp)
        os.chmod(tmp, 0o600)
        os.rename(tmp, path)   # (replaces a stale socket file atomically)
        sock.listen(backlog)
    except OSError:
        sock.close()
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    sock.setblocking(False)
    return sock


def remove_socket(path: str) -> None:
    """A stopped Unix site's socket file removed (gone already is fine)."""
    try:
        os.unlink(path)
    except OSError:
        pass
