"""A small keep-alive HTTP/1.1 client for the tier's own calls to the control plane (the forwarder's PUTs, the
Lease GETs and lists, changes forwarded at once).

Why not aiohttp's client, which the proxy still uses: at 20,000 nodes the tier forwards ~650 renewals a second,
and aiohttp's per-request machinery (ClientRequest, its auto headers, the connector's bookkeeping) cost the
tier ~350 us of CPU per forward, more than absorbing the renewal itself. These calls are all alike (a JSON
body or none, a JSON answer, one host), so a request here is one formatted header block and one write, and
the answer is read by Content-Length or chunks.

A connection is reused while the server keeps it alive. A reused connection that the server had closed
meanwhile fails before any byte of an answer arrives: the request is then sent once more on a new connection
(every call of the tier is safe to repeat: a PUT carries its resourceVersion precondition).
"""
from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

from machinery import http1


class H1Error(Exception):
    """The request could not be sent or its answer not read (no HTTP status)."""


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    def close(self) -> None:
        self.writer.close()


class H1Client:
    def __init__(self, base: str, ssl_context: ssl.SSLContext | bool = False, max_idle: int = 64):
        u = urlsplit(base)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {base}")
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = (ssl_context or ssl.create_default_context()) if u.scheme == "https" else None
        self.host_header = u.netloc.rsplit("@", 1)[-1]
        self.max_idle = max_idle
        self._idle: list[_Conn] = []
        self._closed = False

    async def _connect(self) -> _Conn:
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl,
                                                       limit=4 * 1024 * 1024)
        return _Conn(reader, writer)

    async def request(self, method: str, path: str, headers: dict[str, str], body: bytes | None = None,
                      timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
        """(status, headers with lower-case names, body); H1Error if no answer could be had."""
        length = len(body or b"") if body is not None or method in ("POST", "PUT", "PATCH") else None
        data = http1.request_head(method, path, self.host_header, headers, length) + (body or b"")
        try:
            async with asyncio.timeout(timeout):
                while True:
                    reused = bool(self._idle)
                    conn = self._idle.pop() if reused else await self._connect()
                    try:
                        conn.writer.write(data)
                        status, hdrs, answer, keep = await self._read(conn.reader)
                    except _NothingRead:
                        conn.close()
                        if reused:
                            continue        # the server closed it while it was idle: once more, anew
                        raise H1Error("the connection closed before an answer") from None
                    except BaseException:
                        conn.close()
                        raise
                    if keep and not self._closed and len(self._idle) < self.max_idle:
                        self._idle.append(conn)
                    else:
                        conn.close()
                    return status, hdrs, answer
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            raise H1Error(repr(e)) from None
        except TimeoutError:
            raise H1Error(f"no answer within {timeout:g} s") from None

    async def _read(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes, bool]:
        try:
            block = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                raise _NothingRead() from None
            raise
        except ConnectionError:         # reset before a byte of the answer: as an end before it
            raise _NothingRead() from None
        status, hdrs, keep = http1.parse_head(block)
        if status in (204, 304) or 100 <= status < 200:
            return status, hdrs, b"", keep
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            parts = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":   # trailers, if any
                        pass
                    return status, hdrs, b"".join(parts), keep
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
        if "content-length" in hdrs:
            return status, hdrs, await reader.readexactly(int(hdrs["content-length"])), keep
        return status, hdrs, await reader.read(), False      # to the end of the connection

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()


class _NothingRead(Exception):
    """The connection ended before the first byte of an answer."""
