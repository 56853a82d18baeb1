"""ext.framed (compiled) against ext.framed_py (twin) and against the truth: K key-ordered streams of key-framed
items, cut anywhere into chunks as a socket delivers them, merge into the sorted union, and each call takes
only what every stream has whole (issue 21's fast merged lists)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ext.framed as framed_c  # no importorskip: a missing compiled module must fail the run loudly
import ext.framed_py as framed_py

TWINS = [framed_c, framed_py]
_key = st.text(alphabet=st.sampled_from(list("ab/-.z\u00e9\u4e2d")), min_size=1, max_size=6)


def _streams(m, keys: list[str], k: int, owner: list[int]) -> list[bytes]:
    out = []
    for i in range(k):
        mine = sorted(key for key, o in zip(keys, owner) if o == i)
        body = m.frame_items(mine, [b'{"k":"%s"}' % key.encode() for key in mine])
        out.append(m.frame_meta(b'{"resourceVersion":"7"}') + body + m.frame_meta(b""))
    return out


def _merge_in_chunks(m, streams: list[bytes], cuts: list[int], limit: int = 0):
    """Feed each stream `cut` bytes at a time (after its metadata record), as ShardList.more does."""
    bufs = [s[8 + 23:8 + 23] for s in streams]
    sent = [8 + 23] * len(streams)
    pos = [0] * len(streams)
    got: list[bytes] = []
    while True:
        items, state, last = m.merge(bufs, pos, limit - len(got) if limit else 0)
        got += items
        if items:
            assert last == items[-1][6:-2]
        if state in (-1, -2):
            return got, state, bufs, pos
        assert state >= 0
        i = state
        assert sent[i] < len(streams[i]), "asked for more of a stream already whole"
        n = max(1, cuts[i % len(cuts)])
        bufs[i] = bufs[i][pos[i]:] + streams[i][sent[i]:sent[i] + n]
        pos[i] = 0
        sent[i] += n


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(_key, unique=True, max_size=40), k=st.integers(1, 5), data=st.data(),
       cuts=st.lists(st.integers(1, 60), min_size=1, max_size=5))
def test_merge_is_the_sorted_union_however_the_bytes_arrive(keys, k, data, cuts):
    owner = data.draw(st.lists(st.integers(0, k - 1), min_size=len(keys), max_size=len(keys)))
    want = [b'{"k":"%s"}' % key.encode() for key in sorted(keys, key=lambda s: s.encode())]
    for m in TWINS:
        streams = _streams(m, keys, k, owner)
        assert streams == _streams(framed_py, keys, k, owner)   # the twins frame the same bytes
        got, state, bufs, pos = _merge_in_chunks(m, streams, cuts)
        assert got == want and state == -1
        for b, p in zip(bufs, pos):      # each stream stopped at its end record, not consumed
            assert b[p:] == m.frame_meta(b"")


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(_key, unique=True, min_size=1, max_size=30), k=st.integers(1, 4), limit=st.integers(1, 10),
       data=st.data())
def test_merge_stops_at_the_limit_and_says_so(keys, k, limit, data):
    owner = data.draw(st.lists(st.integers(0, k - 1), min_size=len(keys), max_size=len(keys)))
    want = [b'{"k":"%s"}' % key.encode() for key in sorted(keys, key=lambda s: s.encode())]
    for m in TWINS:
        streams = [s[31:] for s in _streams(m, keys, k, owner)]   # whole, metadata record taken
        pos = [0] * k
        items, state, last = m.merge(streams, pos, limit)
        assert items == want[:limit]
        assert state == (-2 if len(want) >= limit else -1)
        rest, state2, _ = m.merge(streams, pos, 0)
        assert items + rest == want and state2 == -1
        # The joined form: the same items, comma-separated in one bytes, the same state and last key.
        pos = [0] * k
        joined, n, state3, last3 = m.merge_joined(streams, pos, limit)
        assert (joined, n, state3, last3) == (b",".join(items), len(items), state, last)
        # A run that follows another starts with its comma.
        pos = [0] * k
        assert m.merge_joined(streams, pos, limit, True)[0] == b"," + b",".join(items)


def test_utf8_byte_order_is_the_key_order():
    """Keys compare as UTF-8 bytes, which is code point order: what Python's str order (the cache's) is."""
    keys = ["a", "\u00e9", "\u4e2d", "z", "\U0001f600", "ab"]
    assert sorted(keys) == sorted(keys, key=lambda s: s.encode())
    for m in TWINS:
        a = m.frame_items(["a", "z", "\u4e2d"], [b"1", b"2", b"3"]) + m.frame_meta(b"")
        b = m.frame_items(["ab", "\u00e9", "\U0001f600"], [b"4", b"5", b"6"]) + m.frame_meta(b"")
        items, state, last = m.merge([a, b], [0, 0], 0)
        assert items == [b"1", b"4", b"2", b"5", b"3", b"6"] and state == -1 and last.decode() == "\U0001f600"


@pytest.mark.parametrize("m", TWINS, ids=["compiled", "python"])
def test_bad_calls_are_refused(m):
    with pytest.raises(ValueError):
        m.frame_items(["a"], [])
    with pytest.raises(ValueError):
        m.merge([b""], [0, 0], 0)
    assert m.merge([], [], 0) == ([], -1, None)
    assert m.merge_joined([], [], 0) == m.merge_joined([], [], 0, True) == (b"", 0, -1, None)
    assert m.END_RECORD == m.frame_meta(b"") == framed_py.END_RECORD
    assert m.merge([b"\x01\x00"], [0], 0) == ([], 0, None)   # a head not whole yet: stream 0 needs more
    with pytest.raises(ValueError):
        m.framed_size(["ab"], [b"x"], 3)   # a key shorter than the prefix cut from it
    with pytest.raises(ValueError):
        m.frame_piece(["ab"], [b"x"], 0, 3, 10)


class _Transport:
    """What a front.listconn.ListConnection's loop would be: bytes delivered into the buffers it offers, piece by
    piece as the socket would deliver them, never while it paused reading."""

    def __init__(self, conn, body: bytes, cuts: list[int]):
        from storage.interface import FRONT_FRAMED_HEADER
        head = (b"HTTP/1.1 200 OK\r\n%s: true\r\nContent-Length: %d\r\n\r\n"
                % (FRONT_FRAMED_HEADER.encode(), len(body)))
        self.data, self.conn, self.cuts = head + body, conn, cuts
        self.paused = self.aborted = False
        conn.connection_made(self)

    def pause_reading(self):
        assert not self.paused
        self.paused = True

    def resume_reading(self):
        assert self.paused
        self.paused = False

    def abort(self):
        self.aborted = True

    async def deliver(self):
        import asyncio
        at, i = 0, 0
        while at < len(self.data):
            if self.paused:
                await asyncio.sleep(0)
                continue
            buf = self.conn.get_buffer(-1)
            assert len(buf) > 0
            n = min(len(buf), self.cuts[i % len(self.cuts)], len(self.data) - at)
            buf[:n] = self.data[at:at + n]
            i += 1
            at += n
            self.conn.buffer_updated(n)   # (with the buffer still held, as uvloop holds it: no resize meanwhile)
            del buf
            await asyncio.sleep(0)


@settings(max_examples=150, deadline=None)
@given(keys=st.lists(_key, unique=True, min_size=0, max_size=25), k=st.integers(1, 3),
       cut=st.lists(st.integers(1, 40), min_size=1, max_size=8), whole=st.booleans(),
       window=st.sampled_from([8, 24, 64, 1 << 20]), writes=st.integers(0, 3), data=st.data())
def test_front_reads_answers_into_one_buffer(keys, k, cut, whole, window, writes, data):
    """front.wire.ShardList reads a shard's answer into its connection's buffer (front.listconn), whatever pieces
    the socket delivers, pausing at `window` bytes ahead of the merge, moving what is left to the front or growing
    the buffer for a record larger than it: the merged list, and the pages read whole after the metadata record,
    are the sorted union, and each connection ends its answer whole (ready to be kept)."""
    import asyncio

    from front import listconn
    from front.wire import ShardList, merged, read_whole, take
    owner = data.draw(st.lists(st.integers(0, k - 1), min_size=len(keys), max_size=len(keys)))
    want = [b'{"k":"%s"}' % key.encode() for key in sorted(keys, key=lambda s: s.encode())]

    class _Client:
        def __init__(self):
            self.released = []

        def release(self, conn):
            self.released.append(conn)

    async def run():
        conns, feeds = [], []
        for b in _streams(framed_c, keys, k, owner):
            conn = listconn.ListConnection()
            t = _Transport(conn, b, cut * 50)
            feeds.append(asyncio.ensure_future(t.deliver()))
            conns.append(conn)
        while not all(c.head_done for c in conns):
            await asyncio.sleep(0)
        client = _Client()
        lists = [await ShardList(f"s{i}", c, client).start() for i, c in enumerate(conns)]
        assert all(ls.meta == {"resourceVersion": "7"} for ls in lists)
        if whole:
            await read_whole(lists)
            out = take(lists, 0)[0]
        else:
            out = b""
            async for run_ in merged(lists, runs=True):
                out += run_
                for _ in range(writes):   # (as a client write lets the loop run: more arrives meanwhile)
                    await asyncio.sleep(0)
        await asyncio.gather(*feeds)
        for ls in lists:
            ls.close()
        assert client.released == conns and all(c.complete for c in conns)
        return out
    old = listconn.WINDOW, listconn.MIN_READ, listconn.FIRST_BUFFER
    listconn.WINDOW, listconn.MIN_READ, listconn.FIRST_BUFFER = window, min(window, 16), 32
    try:
        got = asyncio.run(run())
    finally:
        listconn.WINDOW, listconn.MIN_READ, listconn.FIRST_BUFFER = old
    assert got == (want if whole else b",".join(want))


def test_a_shard_refusal_on_a_kept_connection_keeps_its_code():
    """A shard's refusal of a list, on a connection the front keeps (Content-Length, keep-alive), reaches the
    client with its code, a Status or not (a shard that does not serve a CRD yet answers Go's plain "404 page not
    found", as upstream): the code was once read after the connection was readied for the next answer, and a
    client of the front got "HTTP/1.1 0" on a CRD's first list. The kept connection then serves the next answer.
    (A loopback HTTP server stands in for the shard: this is the front's client side.)"""
    import asyncio

    import orjson
    from aiohttp import web

    from front.listconn import ShardLists
    from front.wire import ShardList
    from machinery import errors

    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Gone",
              "message": "too old resource version: 2 (9)", "code": 410}
    peers = []

    async def handle(request):
        peers.append(id(request.transport))
        if len(peers) % 2:
            return web.Response(status=404, text="404 page not found\n")
        return web.Response(status=410, body=orjson.dumps(status), content_type="application/json")

    async def run():
        app = web.Application()
        app.router.add_get("/apis/ex.example.com/v1/gadgets", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/apis/ex.example.com/v1/gadgets"
        client = ShardLists(f"http://127.0.0.1:{port}")
        try:
            for want in (404, 410, 404, 410):
                with pytest.raises(errors.StatusError) as e:
                    await ShardList.open(client, url, {"limit": "1"})
                assert e.value.code == want
                if want == 410:
                    assert (e.value.reason, e.value.message) == ("Gone", status["message"])
                else:   # (as client-go's NewGenericServerResponse words a bare 404)
                    assert (e.value.reason, e.value.message) == ("NotFound",
                                                                 "the server could not find the requested resource")
                assert len(client.idle) == 1   # kept for the next answer
        finally:
            client.close()
            await runner.cleanup()
        assert len(peers) == 4 and len(set(peers)) == 1   # the answers on one connection
    asyncio.run(run())


@settings(max_examples=200, deadline=None)
@given(names=st.lists(_key, min_size=0, max_size=30), prefix=st.sampled_from(["", "/registry/configmaps/", "ns/"]),
       piece=st.integers(1, 120))
def test_pieces_are_the_records_of_the_cut_keys(names, prefix, piece):
    """A shard frames a cache page in pieces from its whole storage keys, the prefix cut off (frame_piece), and
    announces the sizes first (framed_size): the same bytes as frame_items over the cut keys, each piece at least
    one record and no more than one record past `piece` bytes."""
    keys = [prefix + n for n in names]
    items = [b'{"n":%d}' % i for i in range(len(keys))]
    want = framed_py.frame_items(names, items)
    for m in TWINS:
        assert m.framed_size(keys, items, len(prefix)) == (len(want), sum(map(len, items)))
        out, start, sizes = b"", 0, []
        while start < len(items):
            got, nxt = m.frame_piece(keys, items, start, len(prefix), piece)
            assert nxt > start
            sizes.append((len(got), nxt - start))
            out += got
            start = nxt
        assert out == want
        assert all(n == 1 or size - 8 - 6 * 3 - 10 < piece for size, n in sizes)
        assert m.frame_piece(keys, items, len(items), len(prefix), piece) == (b"", len(items))


@settings(max_examples=200, deadline=None)
@given(items=st.lists(st.binary(min_size=1, max_size=20), max_size=30), piece=st.integers(1, 60))
def test_join_piece_is_the_comma_joined_items(items, piece):
    """A cached list is written in pieces (join_piece), each after the first with its leading comma: together the
    comma-joined items, whatever the piece size."""
    for m in TWINS:
        out, start = b"", 0
        while start < len(items):
            got, nxt = m.join_piece(items, start, piece, start > 0)
            assert nxt > start and (nxt - start == 1 or len(got) - 21 < piece)
            out += got
            start = nxt
        assert out == b",".join(items)
        assert m.join_piece(items, len(items), piece, True) == (b"", len(items))
