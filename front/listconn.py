"""The front's list requests to its shards, answers received straight into a buffer (issue 21: fast merged lists).

aiohttp's client hands a received answer over as new bytes objects: uvloop copies what the kernel gave into one,
the HTTP parser slices the body out of it into another, and its stream reader adds Python per piece. Reading a
5 MB list that way took the front about 2.7 ms of CPU; received into one buffer by an `asyncio.BufferedProtocol`,
about 0.8 ms (both measured with an ad hoc script on this 2-core machine). So a shard's list answer (always a
framed list with a Content-Length, or a Status) is read here: a plain HTTP/1.1 GET on a keep-alive connection of
this module's own, the answer received into the bytearray that connection keeps from request to request, which
the merge (ext.framed) reads in place. The front's watches (read as they arrive: front.wire.ShardWatch) and health
checks go through the same connections, so a front imports no HTTP client (no aiohttp: docs/floor.md).

Flow control: a connection receives at most WINDOW bytes ahead of what its reader took, then pauses reading (the
shard's writes then wait, as they would on a slow client), so K streams merged at the pace of the slowest hold
K windows, whatever the size of the list; a record larger than the window grows the buffer to fit it. A reader
that wants the whole answer (a page: `read_all`) lifts the window.
"""
from __future__ import annotations

import asyncio
import functools
import ssl
from urllib.parse import quote, urlencode, urlsplit

from machinery import http1

WINDOW = 1 << 20        # bytes received ahead of the reader before reading pauses
MIN_READ = 64 << 10     # the least room offered to a read
FIRST_BUFFER = 128 << 10
# A watch's answer (a stream of small events that may stay open for long, one per resource and shard in a front's
# shared feeds) starts on a small buffer, grown as a list's is when an event needs more.
STREAM_MIN_READ = 2 << 10
STREAM_BUFFER = 4 << 10
KEEP_BUFFER = 2 * (WINDOW + MIN_READ)   # an idle connection keeps a buffer up to this (else a new small one)
MAX_IDLE = 4            # idle keep-alive connections kept per shard
CONNECT_TIMEOUT = 2.0   # as the front's aiohttp session had it (sock_connect)
MAX_HEAD = 64 << 10


class ShardConnectionError(ConnectionError):
    """The answer could not be had or was cut (the caller reports the shard unreachable)."""


class ListConnection(asyncio.BufferedProtocol):
    """One keep-alive connection to a shard; one answer at a time. After the head: `buf[start:end]` holds what has
    been received and not taken yet; `body_left` what the shard has still to send."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray(FIRST_BUFFER)
        self.min_read = MIN_READ
        self.streaming = False
        self.start = self.end = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.body_left: int | None = None   # None: not known (the head not read yet, chunked, or to the end)
        self.chunked = False
        self.keep_alive = True
        self.want_all = False
        self.paused = False
        self.closed = False
        self.exc: BaseException | None = None
        self._waiter: asyncio.Future | None = None
        self._head_waiter: asyncio.Future | None = None

    # --- asyncio.BufferedProtocol -------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if len(self.buf) - self.end < self.min_read:
            self._make_room()
        return memoryview(self.buf)[self.end:]

    def buffer_updated(self, nbytes: int) -> None:
        self.end += nbytes
        if not self.head_done:
            self._parse_head()
            if not self.head_done:
                if self.end > MAX_HEAD:
                    self._fail(ShardConnectionError("an answer head over 64 KiB"))
                return
        elif self.body_left is not None:
            self.body_left -= nbytes
            if self.body_left < 0:   # (the head's own bytes are checked by _parse_head)
                self._fail(ShardConnectionError("more bytes than the answer's Content-Length"))
                return
        if (self.chunked and not (self.streaming and self.status == 200) and
                _dechunk(bytes(memoryview(self.buf)[self.start:self.end])) is not None):
            self.body_left = 0   # the last chunk came (a watch's reader finds it itself, with take_chunks)
        if (not self.want_all and self.body_left != 0 and self.end - self.start >= WINDOW and
                not self.paused and self.transport is not None):
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._lost(None)
        return False

    def connection_lost(self, exc: BaseException | None) -> None:
        self._lost(exc)

    # --- the answer ---------------------------------------------------------------------------------

    def _parse_head(self) -> None:
        i = self.buf.find(b"\r\n\r\n", 0, self.end)
        if i < 0:
            return
        try:
            head = http1.parse_head(memoryview(self.buf)[:i])
        except ValueError as e:
            self._fail(ShardConnectionError(str(e)))
            return
        self.status, self.headers, self.keep_alive = head
        hdrs = head.headers
        self.start = i + 4
        self.head_done = True
        received = self.end - self.start
        if "content-length" in hdrs:
            try:
                self.body_left = int(hdrs["content-length"]) - received
            except ValueError:
                self._fail(ShardConnectionError(f"a malformed Content-Length: {hdrs['content-length'][:40]!r}"))
                return
        elif "chunked" in hdrs.get("transfer-encoding", "").lower():
            self.chunked, self.keep_alive = True, False   # (a Status or a watch: the connection is not kept)
        else:
            self.keep_alive = False                       # to the connection's end
        if self.body_left is not None and self.body_left < 0:
            self._fail(ShardConnectionError("more bytes than the answer's Content-Length"))
            return
        if self._head_waiter is not None and not self._head_waiter.done():
            self._head_waiter.set_result(None)

    def _make_room(self) -> None:
        """Room for the next read: what was taken is dropped, the rest moved to the front, once that frees half
        the buffer (so a byte is moved at most about once); else the buffer grows. (Reading pauses at WINDOW
        bytes ahead of the reader, which bounds the buffer but for a record larger than that, or a reader that
        wants the whole answer.)"""
        if self.head_done and self.start >= len(self.buf) // 2:
            n = self.end - self.start
            if n:
                rest = bytes(memoryview(self.buf)[self.start:self.end])
                self.buf[:n] = rest
            self.start, self.end = 0, n
        if len(self.buf) - self.end < self.min_read:
            self._grow()

    def _grow(self) -> None:
        grown = bytearray(max(2 * len(self.buf), self.end + self.min_read))
        grown[:self.end] = memoryview(self.buf)[:self.end]
        self.buf = grown

    def taken(self, pos: int) -> None:
        """The reader took `buf[start:pos]`: reading resumes once half the buffer can be given back."""
        self.start = pos
        if self.paused and self.start >= len(self.buf) // 2:
            self._resume()

    def _resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    @property
    def complete(self) -> bool:
        """Every byte of the answer received (an answer read to the connection's end is complete at its end)."""
        return self.body_left == 0 or (self.body_left is None and not self.chunked and self.head_done and
                                       self.closed and self.exc is None)

    async def more(self, have: int | None = None) -> None:
        """Wait until more than `have` bytes (default: what is there now) are received and not taken;
        ShardConnectionError if nothing more will come. (A reader that looked, then awaited something else,
        says what it saw: the rest may have come meanwhile.)"""
        if have is None:
            have = self.end - self.start
        elif self.end - self.start > have:
            return
        if self.complete:
            raise ShardConnectionError("the answer ended early")
        if self.exc is not None:
            raise ShardConnectionError(str(self.exc) or type(self.exc).__name__)
        if len(self.buf) - self.end < self.min_read:
            self._make_room()   # the reader needs more than fits: room now, or the window would hold it back
        self._resume()
        while self.end - self.start <= have:
            await self._next()

    async def read_all(self) -> None:
        """The rest of the answer, whatever its size."""
        self.want_all = True
        self._resume()
        while not self.complete:
            if len(self.buf) - self.end < self.min_read:
                self._make_room()
            await self._next()

    async def _next(self) -> None:
        """Until the next bytes arrive (or the connection ends: ShardConnectionError)."""
        if self.exc is not None or self.closed:
            raise ShardConnectionError(str(self.exc) if self.exc else "the shard closed the connection")
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def body(self) -> bytes:
        """The whole answer's body (after read_all), chunked transfer decoded."""
        data = bytes(memoryview(self.buf)[self.start:self.end])
        return (_dechunk(data) or b"") if self.chunked else data

    # --- lifecycle ----------------------------------------------------------------------------------

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if exc is not None and self.exc is None:
            self.exc = exc
        if self._head_waiter is not None and not self._head_waiter.done():
            self._head_waiter.set_exception(ShardConnectionError(
                str(exc) if exc else "the shard closed the connection before answering"))
        self._wake()

    def _fail(self, exc: BaseException) -> None:
        self.exc = exc
        self.abort()
        self._lost(exc)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def streamed(self) -> None:
        """Before a watch's request: its answer is read on a small buffer (STREAM_BUFFER)."""
        self.streaming = True
        if self.end == 0:
            self.buf = bytearray(STREAM_BUFFER)
            self.min_read = STREAM_MIN_READ

    def reset(self) -> None:
        """Ready for the next request on this connection (the previous answer was taken whole)."""
        if len(self.buf) > KEEP_BUFFER or len(self.buf) < FIRST_BUFFER:
            self.buf = bytearray(FIRST_BUFFER)   # (a page or a huge record grew it: not kept while idle)
        self.min_read, self.streaming = MIN_READ, False
        self.start = self.end = 0
        self.status, self.headers, self.head_done = 0, {}, False
        self.body_left, self.chunked, self.keep_alive, self.want_all = None, False, True, False
        self._resume()


def take_chunks(buf, start: int, end: int) -> tuple[bytes, int, bool]:
    """The data of the complete chunks of a chunked body in `buf[start:end]`: (their data, where the first
    incomplete one starts, whether the last chunk came)."""
    out, at = [], start
    while True:
        nl = buf.find(b"\r\n", at, end)
        if nl < 0:
            break
        try:
            size = int(bytes(buf[at:nl]).split(b";", 1)[0], 16)
        except ValueError:
            raise ShardConnectionError("a malformed chunked answer") from None
        if size == 0:
            return b"".join(out), end, True
        if end < nl + 2 + size + 2:
            break
        out.append(bytes(buf[nl + 2:nl + 2 + size]))
        at = nl + 2 + size + 2
    return b"".join(out), at, False


def _dechunk(data: bytes) -> bytes | None:
    """A chunked body decoded, or None while its last chunk has not come."""
    body, _, last = take_chunks(data, 0, len(data))
    return body if last else None


@functools.cache
def _client_context() -> ssl.SSLContext:
    """One TLS client context for every shard (each loads the system's CAs: about 1 MiB)."""
    return ssl.create_default_context()


class ShardLists:
    """Keep-alive connections to one shard (the shard's URL: http, https verified against the system's CAs, as
    Python's default context does, or http+unix://<socket path, %-encoded>: a shard's `--unix-socket` on the same
    machine, where a 5 MB list costs sender and receiver a third of loopback TCP's CPU)."""

    def __init__(self, url: str):
        u = urlsplit(url)
        self.unix = http1.unix_path(url)   # (then host and port are unused)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = _client_context() if u.scheme == "https" else None
        self.host_header = "localhost" if self.unix is not None else u.netloc.rsplit("@", 1)[-1]
        self.idle: list[ListConnection] = []

    async def _connect(self) -> ListConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                if self.unix is not None:
                    _, conn = await loop.create_unix_connection(ListConnection, self.unix)
                else:
                    _, conn = await loop.create_connection(ListConnection, self.host, self.port, ssl=self.ssl)
        except (OSError, TimeoutError, ssl.SSLError) as e:
            raise ShardConnectionError(f"{type(e).__name__}: {e}") from None
        return conn

    async def get(self, url: str, params: dict[str, str], headers: dict[str, str],
                  stream: bool = False) -> ListConnection:
        """Send the GET and wait for the answer's head; the connection is then the caller's until `release`.
        `stream`: a watch, read on a small buffer (ListConnection.streamed)."""
        path = urlsplit(url)
        target = (path.path or "/") + ("?" + urlencode(params, quote_via=quote) if params else "")
        data = http1.request_head("GET", target, self.host_header, headers)
        while True:
            reused = False
            while self.idle:
                conn = self.idle.pop()
                if not conn.closed:
                    reused = True
                    break
            else:
                conn = await self._connect()
            if stream:
                conn.streamed()
            conn._head_waiter = asyncio.get_running_loop().create_future()
            conn.transport.write(data)
            try:
                await conn._head_waiter
            except ShardConnectionError:
                conn.abort()
                if reused and conn.end == 0:
                    continue   # the shard had closed it while idle: once more on a new connection (a GET)
                raise
            except BaseException:
                conn.abort()
                raise
            finally:
                conn._head_waiter = None
            return conn

    def release(self, conn: ListConnection) -> None:
        """An answer received whole (what the reader left of it is dropped): the connection is kept for the next,
        or closed."""
        if conn.closed or not conn.keep_alive or not conn.complete or len(self.idle) >= MAX_IDLE:
            conn.abort()
            return
        conn.reset()
        self.idle.append(conn)

    def close(self) -> None:
        idle, self.idle = self.idle, []
        for c in idle:
            c.abort()

