"""Kubelet renewals answered from the request's bytes, before aiohttp.

Every node PUTs its Lease every ~10 s, so at 30,000 nodes the tier answers ~3,000 renewals a second. Through
aiohttp (its request objects, the handler task, middlewares, router, response objects and header writer)
about 40 % of the tier's CPU went to that machinery at 31,000 leasegen nodes (py-spy), more than absorbing the
renewal itself. So a connection starts on `RawRenewalProtocol`:

* a request that is plainly a renewal (`_parse`: `PUT` of a Lease in the tier's namespace, HTTP/1.1, no query,
  a JSON or protobuf body (the kubelet's and kwok's typed clients send protobuf) of at most 64 KiB by
  `Content-Length`, an `Accept` that asks for the object itself (answered as JSON, as everywhere here), no transfer or
  content coding, no `Expect`, `Upgrade`, `Connection: close` or impersonation) from a user the tier answers
  for a renewal (no authentication flags, `system:masters`, or the node whose Lease it is) goes to the same
  `NodeTier.absorb_renewal` the aiohttp path uses, and a 200 with the bytes aiohttp would send (`Date` aside)
  is written here, counted in the same request metrics;
* every other request, and a renewal the fast path declines (a stale version, another form: nothing was stored),
  is given to an aiohttp protocol made for the connection on the same transport, which answers it as the tier
  always did (errors, 409 texts, watches, proxying); its body is passed on as it arrives.

Requests on a connection are answered in order: a renewal that comes while aiohttp still owes an answer is given
to aiohttp too, and once aiohttp's access logger reports its last answer, the connection's next renewal is raw
again (a kubelet's GET and create of its Lease at start, or its GET after a 409, do not take its connection off
the raw path). A request framed otherwise than by one Content-Length (chunked, an upgrade, `Expect`) or a head
over MAX_HEAD hands aiohttp the transport for good. aiohttp's protocol keeps its own idle timer (its
keepalive_timeout, 3,630 s in aiohttp 3.14): when it runs out it closes the connection, raw renewals in between
or not; clients reconnect.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from aiohttp.abc import AbstractAccessLogger
from aiohttp.http import SERVER_SOFTWARE

from apiserver.auth.authn import authenticator
from apiserver.middleware import metric_verb, record
from machinery import http1, protobuf
from machinery.encoding import encode_obj

from . import metrics
from .leases import REQUEST_USER_AGENT
from .server import FAST_BODY_MAX, RENEWAL_MEDIA_TYPES, plain_object, serves_itself

log = logging.getLogger("nodetier")

PREFIX = b"PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/"
MAX_HEAD = 8 * 1024         # a renewal's head is ~200 B; anything longer is aiohttp's (with its 431 limits)
_MEDIA_TYPES = {t.encode(): t for t in RENEWAL_MEDIA_TYPES}
_NAME_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789-.")
# Headers whose presence hands the request to aiohttp (their meaning is its to apply).
_HAND_OFF_HEADERS = frozenset((b"transfer-encoding", b"expect", b"upgrade", b"content-encoding"))


class _Renewal:
    __slots__ = ("name", "length", "user_agent", "authorization", "protobuf")

    def __init__(self, name: str, length: int, user_agent: str, authorization: str | None, is_protobuf: bool):
        self.name, self.length, self.user_agent, self.authorization = name, length, user_agent, authorization
        self.protobuf = is_protobuf


class _Malformed(ValueError):
    """A header line aiohttp is to refuse (no colon, an empty name, whitespace before the colon, a folded line)."""


def _fields(lines: list[bytes]):
    """Each header line's (name lowercased, value stripped); _Malformed at the first line that is not one."""
    for line in lines:
        k, sep, v = line.partition(b":")
        if not sep or not k or k[-1:] in b" \t" or line[:1] in b" \t":
            raise _Malformed(line)
        yield k.lower(), v.strip()


def _parse(head: bytes) -> _Renewal | None:
    """The renewal a request head (without its blank line) asks for, or None when it is anything else."""
    try:
        return _parse_renewal(head.split(b"\r\n"))
    except _Malformed:
        return None


def _parse_renewal(lines: list[bytes]) -> _Renewal | None:
    request_line = lines[0]
    if not request_line.startswith(PREFIX) or not request_line.endswith(b" HTTP/1.1"):
        return None
    name = request_line[len(PREFIX):-9]
    if not name or len(name) > 253 or not _NAME_CHARS.issuperset(name):
        return None
    length, content_type, accept, agent, authorization = None, None, None, b"", None
    for k, v in _fields(lines[1:]):
        if k == b"content-length":
            if length is not None or not v.isdigit():
                return None
            length = int(v)
        elif k == b"content-type":
            content_type = v
        elif k == b"accept":
            accept = v
        elif k == b"user-agent":
            agent = v
        elif k == b"authorization":
            if authorization is not None:
                return None
            authorization = v
        elif k == b"connection":
            if v.lower() != b"keep-alive":
                return None
        elif k in _HAND_OFF_HEADERS or k.startswith(b"impersonate-"):
            return None
    media_type = _MEDIA_TYPES.get(content_type)
    if media_type is None or not length or length > FAST_BODY_MAX:
        return None
    try:
        if not plain_object(None if accept is None else accept.decode("latin-1")):
            return None
        return _Renewal(name.decode(), length, agent.decode("latin-1"),
                        None if authorization is None else authorization.decode("latin-1"),
                        media_type == protobuf.MEDIA_TYPE)
    except UnicodeDecodeError:
        return None


class _AuthView(dict):
    """What apiserver.auth.authn.Authenticator reads of a request: its transport (the client certificate), its
    Authorization header, and the item it sets."""
    __slots__ = ("transport", "headers")

    def __init__(self, transport, authorization: str | None):
        super().__init__()
        self.transport = transport
        self.headers = {} if authorization is None else {"Authorization": authorization}


class RawRenewals:
    """What every connection of a tier shares: the tier, its authenticator, and aiohttp's protocol factory (`wrap`)
    for the requests the raw path does not answer. `runner_kwargs` go to the tier's aiohttp runner: its access
    logger is how a connection learns that aiohttp has answered a request it was given."""

    def __init__(self, tier):
        self.tier = tier
        self.auth = authenticator(tier.auth_config)         # None without authentication flags
        self.make_aiohttp_protocol: Callable[[], asyncio.Protocol] | None = None
        self.connections: set[RawRenewalProtocol] = set()
        self.owners: dict[asyncio.Protocol, RawRenewalProtocol] = {}     # aiohttp's protocol -> its connection
        r = tier.res
        self.labels = (metric_verb("PUT", False, False), "", r.group, r.version, r.plural, "", "resource",
                       "apiserver")
        self._date, self._date_at = b"", 0
        owners = self.owners

        class Answered(AbstractAccessLogger):
            def log(self, request, response, time) -> None:
                conn = owners.get(request.protocol)
                if conn is not None:
                    conn.answered()
        self.runner_kwargs = {"access_log_class": Answered, "access_log": log}

    def wrap(self, make_aiohttp_protocol: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for the tier's sites, given aiohttp's."""
        self.make_aiohttp_protocol = make_aiohttp_protocol
        return lambda: RawRenewalProtocol(self)

    def close(self) -> None:
        for c in list(self.connections):
            c.transport.close()

    def _allowed(self, transport, req: _Renewal) -> bool:
        """Whether the tier answers this user's renewal itself (NodeTier._absorbs; any refusal is the general
        path's to word)."""
        if self.auth is None:
            return True
        view = _AuthView(transport, req.authorization)
        user = self.auth.authenticate(view)
        return user is not None and serves_itself(user, req.name, "PUT")

    async def renew(self, transport, req: _Renewal, body: bytes) -> bytes | None:
        """The whole 200 response to the renewal, or None when the tier's other paths must answer it (nothing
        was stored then)."""
        tier = self.tier
        if not tier.forwarder.loaded.is_set() or not tier.ranges.owns(req.name) \
                or not self._allowed(transport, req):
            return None
        token = REQUEST_USER_AGENT.set(req.user_agent)
        try:
            out = await tier.absorb_renewal(req.name, body, req.protobuf)
        finally:
            REQUEST_USER_AGENT.reset(token)
        if out is None:
            return None
        metrics.renewals_raw.inc()
        payload = encode_obj(tier.res, out) + b"\n"
        return b"".join((b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ",
                         str(len(payload)).encode(), b"\r\nDate: ", self._http_date(),
                         b"\r\nServer: ", SERVER_SOFTWARE.encode(), b"\r\n\r\n", payload))

    def _http_date(self) -> bytes:
        now = int(time.time())
        if now != self._date_at:
            self._date, self._date_at = http1.http_date().encode(), now
        return self._date


async def _carry_on(coro, fut):
    """The rest of a coroutine that suspended on `fut` when it was run inline."""
    return await _Rest(coro, fut)


class _Rest:
    """Awaiting this resumes `coro` where it yielded `fut` (what a task would have done with it)."""
    __slots__ = ("coro", "fut")

    def __init__(self, coro, fut):
        self.coro, self.fut = coro, fut

    def __await__(self):
        coro, waiting = self.coro, self.fut
        while True:
            try:
                sent = yield waiting
            except BaseException as e:      # (a cancellation too: the coroutine sees it where it waits)
                try:
                    waiting = coro.throw(e)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    waiting = coro.send(sent)
                except StopIteration as done:
                    return done.value


def _body_length(head: bytes) -> int | None:
    """The length of the body after a request head aiohttp is to answer, or None when its framing is anything
    but none or one Content-Length (chunked, an upgrade, a malformed head): aiohttp then takes the connection."""
    length = None
    try:
        for k, v in _fields(head.split(b"\r\n")[1:]):
            if k == b"content-length":
                if length is not None or not v.isdigit():
                    return None
                length = int(v)
            elif k in (b"transfer-encoding", b"upgrade", b"expect"):
                return None
    except _Malformed:
        return None
    return length or 0


class RawRenewalProtocol(asyncio.Protocol):
    """One connection (the module's docstring). Requests go in order: a plain renewal is answered here when
    nothing given to aiohttp is still unanswered; every other request is given to aiohttp's protocol for this
    connection (made at the first one, on the same transport, so it writes its answers itself), its body passed
    on as it arrives. A request whose framing is not a Content-Length (or none) hands aiohttp the transport."""

    def __init__(self, raw: RawRenewals):
        self.raw = raw
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.task: asyncio.Task | None = None       # the renewal being answered here
        self.aio: asyncio.Protocol | None = None    # aiohttp's protocol for this connection, once needed
        self.given = self.done = 0                  # requests given to it, and answered by it
        self.body_left = 0                          # bytes of the body of the request it was given last, to come
        self.eof = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.raw.connections.add(self)

    def connection_lost(self, exc) -> None:
        self.raw.connections.discard(self)
        if self.task is not None:
            self.task.cancel()
        if self.aio is not None:
            self.raw.owners.pop(self.aio, None)
            self.aio.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.aio is not None:
            self.aio.pause_writing()

    def resume_writing(self) -> None:
        if self.aio is not None:
            self.aio.resume_writing()

    def eof_received(self) -> bool | None:
        self.eof = True
        if self.task is None:
            self._next()        # what was read and is whole is answered; a request cut short closes
        if self.aio is not None:
            return self.aio.eof_received()          # as aiohttp alone would (it closes)
        return True             # open until the answer in progress is written (then _next closes)

    def data_received(self, data: bytes) -> None:
        if self.body_left:
            n = min(self.body_left, len(data))
            self.body_left -= n
            self.aio.data_received(data[:n])
            data = data[n:]
            if not data:
                return
        self.buf += data
        if self.task is None:
            self._next()

    def answered(self) -> None:
        """aiohttp wrote its answer to a request it was given (its access logger)."""
        self.done += 1
        if self.done == self.given and self.buf and self.task is None:
            asyncio.get_running_loop().call_soon(self._resume)     # (not inside aiohttp's handler task)

    def _resume(self) -> None:
        if self.task is None and not self.body_left and self.transport is not None \
                and not self.transport.is_closing():
            self._next()

    def _next(self) -> None:
        buf = self.buf
        while buf and self.task is None and not self.body_left:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._hand_over()
                elif self.eof:
                    self.transport.close()          # a request cut short
                return
            head = bytes(buf[:end])
            req = _parse(head) if end <= MAX_HEAD and self.done == self.given else None
            if req is not None:
                total = end + 4 + req.length
                if len(buf) < total:
                    if self.eof:
                        self.transport.close()
                    return                          # the body is still coming
                raw = bytes(buf[:total])
                del buf[:total]
                # Run inline: the tier's store never suspends a renewal, so the answer is written in this
                # callback (no task, no wait behind the loop's other callbacks); if it ever suspends, a task
                # carries it on and the next request waits for it.
                coro = self._answer(req, raw, end + 4, time.perf_counter())
                try:
                    fut = coro.send(None)
                except StopIteration:
                    continue
                self.task = asyncio.ensure_future(_carry_on(coro, fut))
                self.task.add_done_callback(self._answered_later)
                return
            length = _body_length(head) if end <= MAX_HEAD else None
            if length is None:
                self._hand_over()
                return
            n = min(len(buf), end + 4 + length)
            self.body_left = end + 4 + length - n
            data = bytes(buf[:n])
            del buf[:n]
            self._give(data)
        if not buf and self.eof and self.task is None and self.aio is None:
            self.transport.close()

    def _give(self, data: bytes) -> None:
        """A request (its head, and its body as far as it came) for aiohttp."""
        if self.aio is None:
            self.aio = self.raw.make_aiohttp_protocol()
            self.raw.owners[self.aio] = self
            self.aio.connection_made(self.transport)
        self.given += 1
        self.aio.data_received(data)

    async def _answer(self, req: _Renewal, raw: bytes, body_at: int, t0: float) -> None:
        try:
            response = await self.raw.renew(self.transport, req, raw[body_at:])
        except Exception:  # noqa: BLE001 (aiohttp's path answers instead, and reports what it finds)
            log.exception("raw renewal of lease %s", req.name)
            response = None
        if response is None:                        # nothing was stored: aiohttp's path answers it
            self._give(raw)
        else:
            self.transport.write(response)
            record(self.raw.labels, 200, time.perf_counter() - t0, sli=True)

    def _answered_later(self, task: asyncio.Task) -> None:
        self.task = None
        if not task.cancelled() and not self.transport.is_closing():
            self._next()

    def _hand_over(self) -> None:
        """aiohttp's protocol takes the transport, and what was read and not given to it, for good."""
        data, self.buf = bytes(self.buf), bytearray()
        self.raw.connections.discard(self)
        if self.aio is None:
            self.aio = self.raw.make_aiohttp_protocol()
            self.transport.set_protocol(self.aio)
            self.aio.connection_made(self.transport)
        else:
            self.raw.owners.pop(self.aio, None)
            self.transport.set_protocol(self.aio)
        if data:
            self.aio.data_received(data)
        if self.eof and self.aio.eof_received() is not True:
            self.transport.close()
