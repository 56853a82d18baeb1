"""HTTP/1.1 message heads for the project's own small clients (front.listconn: a front's list requests to its
shards; nodetier.h1: the node tier's calls to the control plane). Each reads its answers its own way (into one
buffer, or from a stream reader); the request head they write and the answer head they parse are the same."""
from __future__ import annotations

import os
import time
from typing import NamedTuple
from urllib.parse import quote, unquote, urlsplit

UNIX_SCHEME = "http+unix"


class Head(NamedTuple):
    status: int
    headers: dict[str, str]   # names lower-cased
    keep_alive: bool          # HTTP/1.1 and no "Connection: close"


def request_head(method: str, target: str, host: str, headers: dict[str, str],
                 content_length: int | None = None) -> bytes:
    """The request line and headers, ending in the blank line."""
    head = [f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n"]
    head += [f"{k}: {v}\r\n" for k, v in headers.items()]
    if content_length is not None:
        head.append(f"Content-Length: {content_length}\r\n")
    head.append("\r\n")
    return "".join(head).encode("latin-1")


def parse_head(block: bytes | bytearray | memoryview) -> Head:
    """An answer's head (the bytes before its blank line; a trailing CRLF is fine). ValueError if its status line
    is not HTTP's (a three-digit code)."""
    lines = bytes(block).decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit() or rest[3:4] not in ("", " "):
        raise ValueError(f"not an HTTP answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
    return Head(int(code), headers, version == "HTTP/1.1" and headers.get("connection", "").lower() != "close")


def unix_url(path: str) -> str:
    """A server's `--unix-socket` as a URL (http+unix://<the absolute path, %-encoded>): how a front is given a
    shard on the same machine."""
    return f"{UNIX_SCHEME}://" + quote(os.path.abspath(path), safe="")


def unix_path(url: str) -> str | None:
    """The socket path of a `unix_url`, else None."""
    u = urlsplit(url)
    return unquote(u.netloc) if u.scheme == UNIX_SCHEME else None


_DATE = ["", 0]   # (formatted, the second it was formatted at)
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("", "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def http_date() -> str:
    """The Date header (RFC 9110 IMF-fixdate), formatted once a second."""
    now = int(time.time())
    if _DATE[1] != now:
        t = time.gmtime(now)
        _DATE[0] = (f"{_DAYS[t.tm_wday]}, {t.tm_mday:02d} {_MONTHS[t.tm_mon]} {t.tm_year} "
                    f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} GMT")
        _DATE[1] = now
    return _DATE[0]
