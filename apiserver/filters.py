"""The filters in front of the endpoints, as upstream's handler chain has them (k8s.io/apiserver
pkg/server/filters and pkg/endpoints/filters), and the HTTP protocol limits:

* `max_in_flight`: `--max-requests-inflight` (400) and `--max-mutating-requests-inflight` (200) requests
  at once (0: no limit); more are answered 429 `Too many requests, please try again later.` with
  `Retry-After: 1`, as upstream's WithMaxInFlightLimit (plain text, not a Status). Long-running requests
  (watches) are not counted. Health probes and /metrics are not counted either (upstream exempts them
  through API Priority and Fairness' exempt flow schemas).
* `request_timeout`: a non-long-running request still running after `--request-timeout` (60 s), or after
  its own shorter `?timeout=` (Go duration; a malformed one is 400), is answered 504 with upstream's
  Status, written as upstream's timeout writer writes it (no kind/apiVersion, text/plain); one whose
  response has already started is cut off (the connection is closed), as upstream does.
* `path_guard`: names and namespaces never escape their key prefix. The raw path is decoded once, as Go
  does (an invalid %-escape is Go's plain 400; `%2F` separates segments), before aiohttp normalizes `.`
  and `..` away. A name `.` or `..` or containing `%` is 400 `Name parameter invalid: ...` (upstream's key
  functions); a namespace `.` or `..` is 400 `invalid key: "..."` (upstream's etcd3 store: 500, a
  deliberate difference); any other dot segment in an API path matches no route (404). The storage layer
  refuses such keys too (`storage.store.check_key`).
* `install_protocol_limits`: a request line over 1 MiB, a header over 64 KiB or more than 128 headers are
  answered `431 Request Header Fields Too Large` (Go's net/http text, which kube-apiserver answers past
  its 1 MiB header budget) instead of aiohttp's 400 with a logged traceback. A request's Content-Encoding
  is not decoded (as Go's net/http): the body is parsed as sent.
"""
from __future__ import annotations

import asyncio
import functools
import re
from typing import Awaitable, Callable
from urllib.parse import unquote

from apiserver.httpstack import web

from machinery import errors, jsonenc
from machinery.gocompat import parse_duration, quote
from machinery.validation import is_valid_path_segment_name

from .middleware import count_dropped, count_termination
from .routes import is_watch
from .status import status_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_LINE_BYTES = 1024 * 1024 + 4096   # Go's DefaultMaxHeaderBytes (1 MiB) plus its 4096 slack
MAX_FIELD_BYTES = 64 * 1024            # per header line (Go: the 1 MiB budget for all of them)
MAX_HEADERS = 128                      # aiohttp's default
# auto_decompress off: Go's net/http (and so kube-apiserver) never decodes a request's Content-Encoding; the
# body is read as sent. aiohttp's decoding turned a mislabelled body into a 500 or a dropped connection.
PROTOCOL_LIMITS = {"max_line_size": MAX_LINE_BYTES, "max_field_size": MAX_FIELD_BYTES, "max_headers": MAX_HEADERS,
                   "auto_decompress": False}

_UNCOUNTED = ("livez", "readyz", "healthz", "metrics")


def _go_text(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    """Go's http.Error: plain text plus a newline, nosniff."""
    return web.Response(status=status, body=(text + "\n").encode(), headers={
        "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff", **(headers or {})})


def _api_rest(path: str) -> list[str] | None:
    """The segments after /api/<v> or /apis/<g>/<v> (and a legacy `watch` segment), else None."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) >= 2:
        rest = parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        rest = parts[3:]
    else:
        return None
    return rest[1:] if rest[:1] == ["watch"] else rest


def is_long_running(request: web.Request) -> bool:
    """Upstream's BasicLongRunningRequestCheck for what this server serves: watches."""
    if request.method != "GET":
        return False
    if is_watch(request):
        return True
    parts = request.path.strip("/").split("/")
    gv = 2 if parts[0] == "api" else 3 if parts[0] == "apis" else 0
    return bool(gv) and len(parts) > gv and parts[gv] == "watch"


def _mutating(request: web.Request) -> bool:
    return request.method not in ("GET", "HEAD", "OPTIONS")


def max_in_flight(non_mutating: int, mutating: int):
    """upstream's WithMaxInFlightLimit (two separate budgets; 0: unlimited)."""
    busy = {False: 0, True: 0}
    limits = {False: non_mutating, True: mutating}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        head = request.path.strip("/").split("/", 1)[0]
        if head in _UNCOUNTED or is_long_running(request):
            return await handler(request)
        kind = _mutating(request)
        limit = limits[kind]
        if limit and busy[kind] >= limit:
            count_dropped(request)
            return _go_text(429, "Too many requests, please try again later.", {"Retry-After": "1"})
        busy[kind] += 1
        try:
            return await handler(request)
        finally:
            busy[kind] -= 1
    return middleware


_TIMEOUT_BODY = jsonenc.dumps({"metadata": {}, "status": "Failure",
                               "message": "Timeout: request did not complete within the allotted timeout",
                               "reason": "Timeout", "details": {}, "code": 504}) + b"\n"


def request_timeout(seconds: float):
    """upstream's WithRequestDeadline (the ?timeout= parameter, capped at --request-timeout) and
    WithTimeoutForNonLongRunningRequests (the 504). 0: no timeout."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if is_long_running(request):
            return await handler(request)
        timeout = seconds
        asked = request.query.get("timeout", "")
        if asked:
            try:
                t = parse_duration(asked)
            except ValueError as e:
                return status_response(errors.bad_request(f"invalid timeout specified in the request URL - {e}"))
            if 0 < t and (t < timeout or not timeout):
                timeout = t
        if not timeout:
            return await handler(request)
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                return await handler(request)
        except TimeoutError:
            if not deadline.expired():
                raise  # a timeout of the handler's own, not the request's
            count_termination(request, 504)  # whether or not the answer had begun, as upstream's postTimeoutFn
            if request.writer is not None and request.writer.output_size > 0:
                # The answer has begun: nothing can replace it. Cut the connection, as upstream does.
                if request.transport is not None:
                    request.transport.abort()
                raise ConnectionResetError("request timed out after its response started") from None
            return web.Response(status=504, body=_TIMEOUT_BODY, headers={
                "Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-cache, private"})
    return middleware


_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@web.middleware
async def path_guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    raw = request.raw_path.split("?", 1)[0]
    if "%" not in raw and "/." not in raw:
        return await handler(request)  # nothing to decode, no dot segment: the common case
    if _BAD_ESCAPE.search(raw):
        return web.Response(status=400, body=b"400 Bad Request", headers={
            "Content-Type": "text/plain; charset=utf-8", "Connection": "close"})
    path = unquote(raw, errors="surrogateescape")
    rest = _api_rest(path)
    segments = path.strip("/").split("/")
    if rest is None:
        if "." in segments or ".." in segments:
            return _go_text(404, "404 page not found")
        return await handler(request)
    name = namespace = resource = None
    if len(rest) >= 2 and rest[0] == "namespaces" and (len(rest) == 2 or rest[2] in ("status", "finalize")):
        name, resource = rest[1], "namespaces"
    elif len(rest) >= 3 and rest[0] == "namespaces":
        namespace, resource = rest[1], rest[2]
        name = rest[3] if len(rest) >= 4 else None
    elif len(rest) >= 2:
        resource, name = rest[0], rest[1]
    if namespace in (".", ".."):
        key = "/".join(["", resource, namespace] + ([name] if name is not None else []))
        return status_response(errors.bad_request(f'invalid key: "{key}"'))
    if name is not None and request.method != "POST":
        msgs = is_valid_path_segment_name(name)
        if msgs:
            return status_response(errors.bad_request(f"Name parameter invalid: {quote(name)}: {';'.join(msgs)}"))
    if "." in segments or ".." in segments:
        return status_response(errors.StatusError(404, "NotFound", "the server could not find the requested "
                                                                   "resource", {}))
    return await handler(request)


# --- HTTP protocol limits ------------------------------------------------------------------------

_431 = "431 Request Header Fields Too Large"


@functools.cache
def _aiohttp_limited_server() -> type:
    """aiohttp's server whose connections answer 431 for a request line or headers over the limits (aiohttp
    answers 400). Imported only on aiohttp (machinery.web answers 431 itself)."""
    from aiohttp import web as aioweb  # noqa: PLC0415
    from aiohttp.http_exceptions import BadHttpMessage, LineTooLong  # noqa: PLC0415
    from aiohttp.web_protocol import RequestHandler  # noqa: PLC0415

    class LimitedRequestHandler(RequestHandler):
        def handle_error(self, request, status=500, exc=None, message=None):  # noqa: ANN001 (aiohttp's signature)
            if isinstance(exc, LineTooLong) or (isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc)):
                resp = aioweb.Response(status=431, body=_431.encode(), headers={
                    "Content-Type": "text/plain; charset=utf-8", "Connection": "close"})
                resp.force_close()
                return resp
            return super().handle_error(request, status, exc, message)

    class LimitedServer(aioweb.Server):
        def __call__(self) -> RequestHandler:
            return LimitedRequestHandler(self, loop=self._loop, **self._kwargs)

    return LimitedServer


def install_protocol_limits(runner: web.AppRunner) -> None:
    """After `runner.setup()` (the runner built with `**PROTOCOL_LIMITS`): answer 431, not aiohttp's 400. A
    runner of machinery.web (the default) answers 431 itself."""
    if type(runner).__module__ == "machinery.web":
        return
    runner.server.__class__ = _aiohttp_limited_server()
