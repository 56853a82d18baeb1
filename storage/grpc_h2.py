"""gRPC over one HTTP/2 connection of our own, on the event loop: etcd's KV calls and its Watch streams.

Why: grpc-aio spent about 250 us of CPU per unary call here (the call object, its Cython invoke, the
completion-queue poller thread handing every reply to the event loop through a socket), a third of what a Lease
update cost this apiserver, and its poller thread woke for every watch event (py-spy; README "etcd calls
without grpc-aio"). A unary call is one HEADERS and one DATA frame out, HEADERS, DATA and trailing HEADERS back;
an asyncio protocol does that for a fraction. With every call here, the server does not import grpcio at all
(about 20 MiB of RSS per process, storage/etcdpb.py).

What it implements of HTTP/2 (RFC 9113) and gRPC over HTTP/2 (grpc/doc/PROTOCOL-HTTP2.md), client side, clear
text only (etcd endpoints are http:// here, `storage.etcd._hosts`):

* requests: :method and :scheme from HPACK's static table, our other headers (:path, :authority,
  content-type, te, grpc-timeout) added to etcd's decoder table the first time and sent as one-byte indexes
  after that (RFC 7541; the table is never filled past its default 4,096 B, so nothing is evicted); messages
  length-prefixed and uncompressed, cut to etcd's frame size and sent as its connection and stream windows
  allow;
* replies: headers and trailers decoded with python-hyper's ``hpack`` (etcd's encoder uses its dynamic table
  and Huffman codes), DATA collected per stream, ``grpc-status``/``grpc-message`` from the trailers (or a
  trailers-only reply); our receive windows are opened to 2**31 - 1 and topped up, so etcd never waits on us;
* streams (`StreamCall`, etcd's Watch): requests sent as they come, replies split into messages as DATA arrives;
* connection upkeep: SETTINGS (acknowledged; initial window, frame size, concurrent streams applied), PING
  answered, WINDOW_UPDATE, RST_STREAM, GOAWAY (streams etcd did not take fail as UNAVAILABLE; new calls dial
  a new connection), the connection lost (every pending call fails as UNAVAILABLE: grpc's fail-fast).

A failed call raises `RpcError`, shaped like grpc.aio.AioRpcError (``code()``, ``details()``, a `StatusCode`
named as grpcio's). Whether a request etcd may have received took effect is unknown when the connection fails,
exactly as with grpc: the store treats UNAVAILABLE as "unreachable", never as "not done".
"""
from __future__ import annotations

import asyncio
import enum
import struct
from collections import deque
from urllib.parse import unquote

from hpack import Decoder

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS, S_INITIAL_WINDOW_SIZE, S_MAX_FRAME_SIZE = 1, 2, 3, 4, 5
MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM, CANCEL = 0x0, 0x1, 0x7, 0x8
LAST_STREAM_ID = 2**31 - 1 - 2   # a connection is replaced before its stream ids run out

_HDR = struct.Struct(">IBI")    # (length << 8 | type), flags, stream id: a frame's 9-byte header


class StatusCode(enum.IntEnum):
    """gRPC's status codes (grpc/doc/statuscodes.md), named as grpcio names them."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def _frame(ftype: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _HDR.pack(len(payload) << 8 | ftype, flags, stream) + payload


def _hpack_int(n: int, bits: int, first: int) -> bytes:
    """An HPACK integer with a `bits`-bit prefix, `first` holding the representation's high bits (RFC 7541 5.1)."""
    top = (1 << bits) - 1
    if n < top:
        return bytes((first | n,))
    out, n = bytearray((first | top,)), n - top
    while n >= 128:
        out.append(n & 127 | 128)
        n >>= 7
    out.append(n)
    return bytes(out)


def _hpack_str(s: bytes) -> bytes:
    """A string literal without Huffman coding (RFC 7541 5.2)."""
    return _hpack_int(len(s), 7, 0) + s


class RpcError(Exception):
    """A failed call, answering what grpc.aio.AioRpcError answers (grpcio is not imported: see storage/etcdpb.py)."""

    def __init__(self, code: StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _unavailable(why: str) -> RpcError:
    return RpcError(StatusCode.UNAVAILABLE, why)


def _http_status_code(status: str) -> StatusCode:
    """gRPC's mapping of an HTTP status without grpc-status (PROTOCOL-HTTP2.md, http-grpc-status-mapping.md)."""
    return {"400": StatusCode.INTERNAL, "401": StatusCode.UNAUTHENTICATED,
            "403": StatusCode.PERMISSION_DENIED, "404": StatusCode.UNIMPLEMENTED,
            "429": StatusCode.UNAVAILABLE, "502": StatusCode.UNAVAILABLE,
            "503": StatusCode.UNAVAILABLE, "504": StatusCode.UNAVAILABLE}.get(
        status, StatusCode.UNKNOWN)


class _Stream:
    """A call's stream. Unary: `fut` gets the reply or the error. Streaming (`msgs` not None): replies are
    queued in `msgs` as they complete, `ended`/`error` say how the stream ended, `ready` wakes the reader."""
    __slots__ = ("fut", "headers", "trailers", "data", "window", "window_open", "ended", "msgs", "ready",
                 "error", "recv_unacked")

    def __init__(self, fut: asyncio.Future | None, window: int):
        self.fut = fut
        self.headers: tuple | None = None
        self.trailers: tuple | None = None
        self.data = bytearray()
        self.window = window            # what we may still send on this stream
        self.window_open: asyncio.Event | None = None
        self.ended = False
        self.msgs: deque | None = None
        self.ready: asyncio.Event | None = None
        self.error: RpcError | None = None
        self.recv_unacked = 0

    def end(self, result: bytes | None, err: RpcError | None) -> None:
        self.ended = True
        if self.msgs is not None:
            self.error = err
            self.ready.set()
        elif not self.fut.done():
            if err is None:
                self.fut.set_result(result)
            else:
                self.fut.set_exception(err)
        if self.window_open is not None:
            self.window_open.set()


def _only_indexed(block: bytes) -> bool:
    """Whether a header block is indexed header fields only (RFC 7541 6.1; the index an integer with a 7-bit
    prefix, 5.1): decoding it neither adds to nor evicts from the decoder's dynamic table."""
    i, n = 0, len(block)
    while i < n:
        b = block[i]
        if not b & 0x80:
            return False   # a literal (which may be indexed) or a dynamic table size update
        i += 1
        if b & 0x7F == 0x7F:   # the index continues: bytes with the high bit set, then one without
            while i < n and block[i] & 0x80:
                i += 1
            i += 1
    return i == n


class _BlockDecoder:
    """hpack's Decoder, remembering the header blocks of indexed fields only. etcd's replies after the first are
    such blocks (":status 200" and "content-type", then "grpc-status 0" and "grpc-message" from its dynamic
    table), the same few bytes every time: a block like that leaves the table as it was, so while no other block
    is decoded it means the same, and any other block forgets them (hpack's decode was 3 % of a create's CPU)."""

    KEPT = 16

    def __init__(self) -> None:
        self.decoder = Decoder()
        self.pure: dict[bytes, tuple] = {}

    def decode(self, block: bytes) -> tuple:
        fields = self.pure.get(block)
        if fields is not None:
            return fields
        fields = tuple(self.decoder.decode(block))   # hpack's errors propagate (the caller aborts)
        if not _only_indexed(block):
            self.pure.clear()   # it may have added to (and evicted from) the table the kept blocks point into
        elif len(self.pure) < self.KEPT:
            self.pure[block] = fields
        return fields


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection carrying calls (the client's streams: odd ids, one per call)."""

    def __init__(self, authority: bytes):
        self.authority = authority
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.draining = False           # GOAWAY received, or stream ids nearly used up: take no new calls
        self.streams: dict[int, _Stream] = {}
        self.next_id = 1
        self.decoder = _BlockDecoder()
        self.buf = bytearray()
        self.header_block: tuple[int, int, bytearray] | None = None   # (stream, flags, block) until END_HEADERS
        self.send_window = DEFAULT_WINDOW          # the connection's, granted by the server
        self.initial_window = DEFAULT_WINDOW       # each new stream's
        self.max_frame = 16_384
        self.max_streams = 2**31
        self.recv_unacked = 0                      # DATA bytes received since our last WINDOW_UPDATE
        self.window_open = asyncio.Event()         # set when the connection window grows
        self.slots_open = asyncio.Event()          # set when a stream ends (MAX_CONCURRENT_STREAMS)
        # Our HPACK encoder's dynamic table (what etcd's decoder holds of it): header fields added with
        # incremental indexing, by the order they were added, never evicted (we stop adding at the default
        # 4,096 B), so a call's fixed headers cost etcd one byte each after the first call that sent them.
        self._table: dict[tuple[bytes, bytes], int] = {}
        self._table_size = 0
        self._table_limit = 4096
        self._size_update = False      # etcd lowered SETTINGS_HEADER_TABLE_SIZE: empty our table first
        self._blocks: dict[tuple[bytes, int], bytes] = {}   # header blocks made only of indexed fields, until
                                                              # the table grows
        self._out: list[bytes] | None = None      # frames to write at the end of this loop iteration
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._loop = asyncio.get_running_loop()
        settings = struct.pack(">HIHI", S_ENABLE_PUSH, 0, S_INITIAL_WINDOW_SIZE, MAX_WINDOW)
        transport.write(PREFACE + _frame(SETTINGS, 0, 0, settings)
                        + _frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)))

    def _send(self, frames: bytes) -> None:
        """Write frames unless the connection is closing (a reply to etcd then has nobody to read it, and a
        call's frames are not sent: its stream fails with the connection). The frames of one loop iteration
        (the calls that requests arriving together make) go out in one write, as grpc's transport batches
        them: one system call here and one read and wake-up in etcd instead of one per call."""
        if self._out is None:
            self._out = [frames]
            self._loop.call_soon(self._flush)
        else:
            self._out.append(frames)

    def _close_transport(self) -> None:
        self._flush()           # what is pending (a GOAWAY of ours) goes first
        self.transport.close()

    def _flush(self) -> None:
        out, self._out = self._out, None
        if out and not self.transport.is_closing():
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def connection_lost(self, exc) -> None:
        self._fail_all(_unavailable(f"connection to etcd lost: {exc or 'closed'}"))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, n = 0, len(buf)
        try:
            while n - pos >= 9:
                lt, flags, sid = _HDR.unpack_from(buf, pos)
                length = lt >> 8
                end = pos + 9 + length
                if end > n:
                    break
                self._frame(lt & 0xFF, flags, sid & 0x7FFFFFFF, bytes(buf[pos + 9:end]))
                pos = end
        except _ProtocolError as e:
            self._abort(str(e))
            return
        del buf[:pos]

    # ------------------------------------------------------------------ frames in

    def _frame(self, ftype: int, flags: int, sid: int, payload: bytes) -> None:
        if self.header_block is not None and ftype != CONTINUATION:
            raise _ProtocolError("expected CONTINUATION")
        if ftype == DATA:
            self._data(flags, sid, payload)
        elif ftype == HEADERS:
            if flags & PADDED:
                payload = payload[1:len(payload) - payload[0]]
            if flags & PRIORITY_FLAG:
                payload = payload[5:]
            if flags & END_HEADERS:
                self._headers(sid, flags, payload)
            else:
                self.header_block = (sid, flags, bytearray(payload))
        elif ftype == CONTINUATION:
            if self.header_block is None or self.header_block[0] != sid:
                raise _ProtocolError("unexpected CONTINUATION")
            self.header_block[2].extend(payload)
            if flags & END_HEADERS:
                hsid, hflags, block = self.header_block
                self.header_block = None
                self._headers(hsid, hflags, bytes(block))
        elif ftype == SETTINGS:
            if not flags & ACK:
                self._settings(payload)
        elif ftype == WINDOW_UPDATE:
            inc = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
            if sid == 0:
                self.send_window += inc
                self.window_open.set()
            else:
                st = self.streams.get(sid)
                if st is not None:
                    st.window += inc
                    if st.window_open is not None:
                        st.window_open.set()
        elif ftype == PING:
            if not flags & ACK:
                self._send(_frame(PING, ACK, 0, payload))
        elif ftype == RST_STREAM:
            code = struct.unpack(">I", payload)[0]
            st = self.streams.get(sid)
            if st is not None:
                self._end(sid, _unavailable("etcd refused the stream") if code == REFUSED_STREAM
                          else RpcError(StatusCode.CANCELLED if code == CANCEL else StatusCode.INTERNAL,
                                        f"stream reset by etcd (HTTP/2 error code {code})"))
        elif ftype == GOAWAY:
            last, code = struct.unpack(">II", payload[:8])
            last &= 0x7FFFFFFF
            self.draining = True
            for s in [s for s in self.streams if s > last]:
                self._end(s, _unavailable(f"etcd is going away (HTTP/2 GOAWAY, error code {code})"))
            if not self.streams:
                self._close_transport()
        elif ftype == PUSH_PROMISE:
            raise _ProtocolError("PUSH_PROMISE with push disabled")
        # PRIORITY and unknown frame types are ignored (RFC 9113 5.5)

    def _settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - 5, 6):
            ident, value = struct.unpack_from(">HI", payload, i)
            if ident == S_INITIAL_WINDOW_SIZE:
                delta, self.initial_window = value - self.initial_window, value
                for st in self.streams.values():
                    st.window += delta
                    if st.window_open is not None:
                        st.window_open.set()
            elif ident == S_MAX_FRAME_SIZE:
                self.max_frame = value
            elif ident == S_HEADER_TABLE_SIZE and value < self._table_limit:
                self._table_limit, self._table, self._table_size, self._blocks = 0, {}, 0, {}
                self._size_update = True
            elif ident == S_MAX_CONCURRENT_STREAMS:
                self.max_streams = value
                self.slots_open.set()
        self._send(_frame(SETTINGS, ACK, 0))

    def _data(self, flags: int, sid: int, payload: bytes) -> None:
        self.recv_unacked += len(payload)
        if self.recv_unacked > MAX_WINDOW // 2:
            self._send(_frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.recv_unacked)))
            self.recv_unacked = 0
        st = self.streams.get(sid)
        if st is None:
            return                      # a stream we reset or gave up on
        if flags & PADDED:
            payload = payload[1:len(payload) - payload[0]]
        st.data += payload
        if st.msgs is not None:
            st.recv_unacked += len(payload)
            if st.recv_unacked > MAX_WINDOW // 2:     # a long-lived stream: keep its window open
                self._send(_frame(WINDOW_UPDATE, 0, sid, struct.pack(">I", st.recv_unacked)))
                st.recv_unacked = 0
            if not self._split(st):
                self._end(sid, RpcError(StatusCode.INTERNAL, "etcd sent a compressed message"))
                return
        if flags & END_STREAM:
            self._finish(sid, st)

    @staticmethod
    def _split(st: _Stream) -> bool:
        """Move the complete length-prefixed messages of a streaming call to its queue."""
        data, pos, n = st.data, 0, len(st.data)
        while n - pos >= 5:
            if data[pos]:
                return False
            end = pos + 5 + int.from_bytes(data[pos + 1:pos + 5], "big")
            if end > n:
                break
            st.msgs.append(bytes(data[pos + 5:end]))
            pos = end
        if pos:
            del data[:pos]
            st.ready.set()
        return True

    def _headers(self, sid: int, flags: int, block: bytes) -> None:
        try:
            fields = self.decoder.decode(block)
        except Exception as e:  # hpack's errors: the connection state is lost (RFC 9113 4.3)
            raise _ProtocolError(f"HPACK: {e}") from None
        st = self.streams.get(sid)
        if st is None:
            return
        if st.headers is None:
            st.headers = fields
        else:
            st.trailers = fields
        if flags & END_STREAM:
            self._finish(sid, st)

    def _finish(self, sid: int, st: _Stream) -> None:
        meta = dict(st.trailers if st.trailers is not None else st.headers or ())
        head = dict(st.headers or ())
        status = meta.get("grpc-status")
        if head.get(":status", "200") != "200" and status is None:
            self._end(sid, RpcError(_http_status_code(head.get(":status", "")),
                                    f"etcd answered HTTP status {head.get(':status')}"))
            return
        if status is None:
            self._end(sid, RpcError(StatusCode.INTERNAL, "etcd's reply carries no grpc-status"))
            return
        if status != "0":
            code = StatusCode(int(status)) if status.isdigit() and int(status) <= 16 else StatusCode.UNKNOWN
            self._end(sid, RpcError(code, unquote(meta.get("grpc-message", ""))))
            return
        data = st.data
        if st.msgs is not None:
            if data:
                self._end(sid, RpcError(StatusCode.INTERNAL, "etcd's stream ended inside a message"))
                return
            result = None
        elif len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
            self._end(sid, RpcError(StatusCode.INTERNAL, "etcd's reply is not one uncompressed message"))
            return
        else:
            result = bytes(memoryview(data)[5:])
        del self.streams[sid]
        st.end(result, None)
        self._stream_closed()

    def _end(self, sid: int, err: RpcError) -> None:
        st = self.streams.pop(sid, None)
        if st is not None:
            st.end(None, err)
        self._stream_closed()

    def _stream_closed(self) -> None:
        self.slots_open.set()
        if self.draining and not self.streams and self.transport is not None:
            self._close_transport()

    def _fail_all(self, err: RpcError) -> None:
        self.closed = self.draining = True
        streams, self.streams = self.streams, {}
        for st in streams.values():
            st.end(None, err)
        self.window_open.set()
        self.slots_open.set()

    def _abort(self, why: str) -> None:
        if self.transport is not None and not self.closed:
            self._send(_frame(GOAWAY, 0, 0, struct.pack(">II", 0, PROTOCOL_ERROR)))
            self._close_transport()
        self._fail_all(RpcError(StatusCode.INTERNAL, f"HTTP/2 protocol error from etcd: {why}"))

    # ------------------------------------------------------------------ calls out

    def _header_block(self, path: bytes, timeout_ms: int) -> bytes:
        """The call's header block: :method POST and :scheme http from the static table, the rest from our
        dynamic table (added to it the first time); no grpc-timeout for a call without a deadline."""
        key = (path, timeout_ms)
        block = self._blocks.get(key)
        if block is not None:
            return block
        fields = [(b":path", path), (b":authority", self.authority), (b"content-type", b"application/grpc"),
                  (b"te", b"trailers")]
        if timeout_ms:
            fields.append((b"grpc-timeout", b"%dm" % timeout_ms))
        # a dynamic table size update to 0 first, if etcd lowered the table's size (RFC 7541 4.2, 6.3)
        out = [b"\x20\x83\x86"] if self._size_update else [b"\x83\x86"]
        self._size_update = False
        added = False
        for f in fields:
            i = self._table.get(f)
            if i is not None:    # the newest entry is index 62, the one before 63, ...
                out.append(_hpack_int(62 + len(self._table) - 1 - i, 7, 0x80))
                continue
            size = len(f[0]) + len(f[1]) + 32
            if self._table_size + size <= self._table_limit:
                self._table[f] = len(self._table)
                self._table_size += size
                self._blocks = {}      # indexes count from the newest entry: every block made before is stale
                added = True
                out.append(b"\x40" + _hpack_str(f[0]) + _hpack_str(f[1]))   # literal, incremental indexing
            else:
                out.append(b"\x00" + _hpack_str(f[0]) + _hpack_str(f[1]))   # literal without indexing
        block = b"".join(out)
        if not added and len(block) == 2 + len(fields):    # :method, :scheme and one byte per field
            self._blocks[key] = block
        return block

    async def _new_stream(self, fut: asyncio.Future | None) -> tuple[int, _Stream]:
        while len(self.streams) >= self.max_streams and not self.draining:
            self.slots_open.clear()
            await self.slots_open.wait()
        if self.draining:   # lost, going away, or out of stream ids while this call waited: take another
            raise _Redial()
        sid = self.next_id
        self.next_id += 2
        if self.next_id > LAST_STREAM_ID:
            self.draining = True
        st = self.streams[sid] = _Stream(fut, self.initial_window)
        return sid, st

    async def open_stream(self, path: bytes) -> tuple[int, _Stream]:
        """A streaming call (no deadline): its HEADERS are sent, messages go out with `send`."""
        sid, st = await self._new_stream(None)
        st.msgs, st.ready = deque(), asyncio.Event()
        self._send(_frame(HEADERS, END_HEADERS, sid, self._header_block(path, 0)))
        return sid, st

    async def send(self, sid: int, st: _Stream, message: bytes | None) -> None:
        """One message on a streaming call, or (None) the end of what we send."""
        if message is None:
            if not st.ended and not self.closed:
                self._send(_frame(DATA, END_STREAM, sid))
            return
        await self._send_flow_controlled(sid, st, memoryview(b"\x00" + len(message).to_bytes(4, "big") + message),
                                         end=False)

    async def unary(self, path: bytes, message: bytes, timeout: float) -> bytes:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        sid, st = await self._new_stream(fut)
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        # The deadline is a timer that fails the stream (`_expire`): asyncio.timeout's context around every
        # call cost ~2 % of an apiserver taking Lease PUTs (py-spy).
        deadline = loop.call_later(timeout, self._expire, sid, st)
        try:
            # no await from taking the stream id to writing its HEADERS: ids must reach etcd in order, and
            # header blocks in the order our HPACK table saw them
            # (grpc-timeout holds at most 8 digits: 99,999,999 ms is 27 hours)
            ms = min(max(1, int(timeout * 1000)), 99_999_999)
            headers = _frame(HEADERS, END_HEADERS, sid, self._header_block(path, ms))
            n = len(body)
            if n <= self.send_window and n <= st.window and n <= self.max_frame:
                self.send_window -= n
                st.window -= n
                self._send(headers + _frame(DATA, END_STREAM, sid, body))
            else:
                self._send(headers)
                await self._send_flow_controlled(sid, st, memoryview(body))
            return await fut
        except asyncio.CancelledError:
            self._reset(sid)
            raise
        finally:
            deadline.cancel()

    def _expire(self, sid: int, st: _Stream) -> None:
        """A unary call's deadline passed before its reply: the call fails as grpc's does, its stream is reset."""
        if self.streams.get(sid) is st:
            self._reset(sid, RpcError(StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))

    async def _send_flow_controlled(self, sid: int, st: _Stream, body: memoryview, end: bool = True) -> None:
        """DATA frames as the connection's and the stream's windows allow (a large value); the last one ends
        the stream if `end`."""
        while body:
            if self.closed or st.ended:
                return                  # the reply (an error) or the failure is the caller's to read
            n = min(len(body), self.send_window, st.window, self.max_frame)
            if n <= 0:
                if self.send_window <= 0:
                    self.window_open.clear()
                    waiter = self.window_open
                else:
                    st.window_open = st.window_open or asyncio.Event()
                    st.window_open.clear()
                    waiter = st.window_open
                await waiter.wait()
                continue
            self.send_window -= n
            st.window -= n
            last = end and n == len(body)
            self._send(_frame(DATA, END_STREAM if last else 0, sid, bytes(body[:n])))
            body = body[n:]

    def _reset(self, sid: int, err: RpcError | None = None) -> None:
        """Give up a stream: it ends with `err` (by default: a unary call's future is cancelled, its caller gave
        up; a streaming call ends CANCELLED) and etcd is told (RST_STREAM). `end` wakes a sender waiting for
        the stream's window; one waiting for the connection's looks again too."""
        st = self.streams.pop(sid, None)
        if st is not None:
            if err is None and st.msgs is None:      # nobody reads its future
                st.ended = True
                st.fut.cancel()
            else:
                st.end(None, err or RpcError(StatusCode.CANCELLED, "Cancelled"))
            if not self.closed:
                self._send(_frame(RST_STREAM, 0, sid, struct.pack(">I", CANCEL)))
            self.window_open.set()
            self._stream_closed()

    def close(self) -> None:
        """Our side is done with it: pending calls end as CANCELLED (as grpc's on a closed channel), so a
        watch does not take it for etcd going away and resume."""
        if self.transport is not None and not self.closed:
            self._send(_frame(GOAWAY, 0, 0, struct.pack(">II", 0, NO_ERROR)))
            self._close_transport()
        self._fail_all(RpcError(StatusCode.CANCELLED, "channel closed"))


class _ProtocolError(Exception):
    pass


class _Redial(Exception):
    """The connection a call was given takes no new streams: the channel gives it another one."""


class StreamCall:
    """A bidirectional streaming call (etcd's Watch), used as grpc.aio's stream call is: the requests come
    from an async iterator (sent as they come, the stream half-closed when it ends), the replies are iterated
    (parsed by `parse`), `cancel()` resets the stream. A failure raises `RpcError` from the iteration."""

    def __init__(self, channel: "H2Channel", path: bytes, requests, parse):
        self._channel, self._path, self._requests, self._parse = channel, path, requests, parse
        self._conn: _Connection | None = None
        self._sid = 0
        self._st: _Stream | None = None
        self._pump: asyncio.Future | None = None
        self._cancelled = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        st = self._st
        if st is None:
            if self._cancelled:
                raise RpcError(StatusCode.CANCELLED, "Cancelled")
            conn, (self._sid, st) = await self._channel._on_a_connection(
                lambda conn: conn.open_stream(self._path))
            self._conn, self._st = conn, st
            if self._cancelled:
                conn._reset(self._sid)
            self._pump = asyncio.ensure_future(self._send_requests())
        while not st.msgs:
            if st.ended:
                if st.error is not None:
                    raise st.error
                raise StopAsyncIteration
            st.ready.clear()
            await st.ready.wait()
        return self._parse(st.msgs.popleft())

    async def _send_requests(self) -> None:
        conn, sid, st = self._conn, self._sid, self._st
        try:
            async for req in self._requests:
                await conn.send(sid, st, req.SerializeToString())
            await conn.send(sid, st, None)
        except asyncio.CancelledError:
            raise
        except Exception:   # grpc cancels a call whose request iterator fails: so do we
            conn._reset(sid)

    def cancel(self) -> None:
        self._cancelled = True
        if self._pump is not None:
            self._pump.cancel()
        if self._st is not None and not self._st.ended:
            self._conn._reset(self._sid)


class H2Channel:
    """Calls to the first of `hosts` ((host, port) pairs) that answers, over one connection at a time,
    dialled on first use and again after it is lost (grpc's pick_first, fail-fast): unary calls, and
    streaming ones through `stream`."""

    CONNECT_TIMEOUT = 5.0

    def __init__(self, hosts: list[tuple[str, int]]):
        self.hosts = list(hosts)
        self._conn: _Connection | None = None
        self._dialing: asyncio.Future | None = None
        self._closed = False

    async def call(self, path: bytes, message: bytes, timeout: float) -> bytes:
        return (await self._on_a_connection(lambda conn: conn.unary(path, message, timeout)))[1]

    async def _on_a_connection(self, use):
        """(connection, `await use(connection)`) on a usable connection; on another one if the first turns
        out to take no new streams (it began draining), a bounded number of times."""
        for _ in range(3):
            conn = await self._usable()
            try:
                return conn, await use(conn)
            except _Redial:
                continue
        raise _unavailable("etcd's connections keep closing")

    def stream(self, path: bytes, requests, parse) -> StreamCall:
        return StreamCall(self, path, requests, parse)

    async def _usable(self) -> _Connection:
        conn = self._conn
        return conn if conn is not None and not conn.draining else await self._connection()

    async def _connection(self) -> _Connection:
        if self._closed:
            raise RpcError(StatusCode.CANCELLED, "channel closed")
        if self._dialing is None:
            self._dialing = asyncio.ensure_future(self._dial())
        dialing = self._dialing
        try:
            return await asyncio.shield(dialing)
        finally:
            if self._dialing is dialing and dialing.done():
                self._dialing = None

    async def _dial(self) -> _Connection:
        loop = asyncio.get_running_loop()
        errs = []
        for i, (host, port) in enumerate(self.hosts):
            try:
                async with asyncio.timeout(self.CONNECT_TIMEOUT):
                    _, conn = await loop.create_connection(
                        lambda: _Connection(f"{host}:{port}".encode()), host, port)
            except (OSError, TimeoutError) as e:
                errs.append(f"{host}:{port}: {e or type(e).__name__}")
                continue
            if self._closed:    # closed while this dialled
                conn.close()
                raise RpcError(StatusCode.CANCELLED, "channel closed")
            if i:   # the one that answered goes first next time
                self.hosts.insert(0, self.hosts.pop(i))
            old, self._conn = self._conn, conn
            if old is not None and not old.streams:
                old.close()
            return conn
        raise _unavailable("cannot connect to etcd: " + "; ".join(errs))

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
            self._conn = None
