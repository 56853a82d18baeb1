"""The HTTP/2 client the store's KV calls and watches go over (storage/grpc_h2.py), against a real etcd:
every call shape the store makes on one connection (our HPACK table growing between them), values beyond
etcd's flow-control windows and frame size in both directions, etcd's errors mapped as grpc's were (S3.4:
a compacted revision is 410 Expired), a stopped etcd (deadline), a killed one (unreachable, then a new
connection), endpoint fail-over, cancellation."""
from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage import errors, grpc_h2
from storage.etcd import EtcdClient, WatchProgress
from storage.grpc_h2 import H2Channel
from tests.robustness.cluster import Etcd

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture
def etcd_member():
    e = Etcd().start()
    yield e
    e.stop()


@pytest.fixture
async def clients(etcd_member):
    """`clients(timeout[, endpoints])`: an EtcdClient (on the member unless told), closed after the test."""
    made: list[EtcdClient] = []

    def make(timeout: float, endpoints: list[str] | None = None) -> EtcdClient:
        made.append(EtcdClient(endpoints or [etcd_member.endpoint], timeout=timeout))
        return made[-1]
    yield make
    for c in made:
        await c.close()


async def _events(w, n: int, timeout: float = 10.0) -> list:
    out: list = []

    async def pump():
        async for item in w:
            if not isinstance(item, WatchProgress):
                out.extend(item)
                if len(out) >= n:
                    return
    await asyncio.wait_for(pump(), timeout)
    return out


async def _once_back(c: EtcdClient, key: bytes):
    """The key read as soon as the restarted etcd answers (unreachable until then, nothing else)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return (await c.get(key))[0]
        except errors.StorageError as e:
            assert e.code == errors.Code.UNREACHABLE and time.monotonic() < deadline
            await asyncio.sleep(0.2)


async def test_every_call_shape_on_one_connection(clients):
    """Txn, Range (get, list, count, revision), Watch, DeleteRange and Compact interleaved: each new method or
    header adds to our HPACK table, which shifts every index (a stale cached header block was reset by etcd as
    PROTOCOL_ERROR before this was right)."""
    c = clients(5)
    ok, rev1, _ = await c.create(b"/p/a", b"1")
    assert ok
    conn = c.h2._conn
    w = c.watch(b"/p/", rev1, progress_notify=False)
    first = asyncio.ensure_future(_events(w, 3))
    kv, _ = await c.get(b"/p/a")
    assert kv.value == b"1" and kv.mod_revision == rev1
    ok, rev2, _ = await c.update(b"/p/a", b"2", rev1)
    assert ok
    ok, rev3, cur = await c.update(b"/p/a", b"3", rev1)      # a failed compare reads the current value
    assert not ok and cur.value == b"2" and cur.mod_revision == rev2
    ok, rev3, _ = await c.create(b"/p/b", b"x")
    kvs, _, more, count = await c.range(b"/p/", b"/p0")
    assert [k.key for k in kvs] == [b"/p/a", b"/p/b"] and not more and count == 2
    assert (await c.range(b"/p/", b"/p0", count_only=True))[3] == 2
    assert await c.current_revision(b"/p/") == rev3
    evs = await first
    assert [(e.type, e.kv.key, e.kv.mod_revision) for e in evs] == [
        ("PUT", b"/p/a", rev1), ("PUT", b"/p/a", rev2), ("PUT", b"/p/b", rev3)]
    assert evs[1].prev.value == b"1"
    ok, rev4, _ = await c.delete(b"/p/b", rev3)
    assert ok
    await c.compact(rev2)
    assert await c.delete_prefix(b"/p/") == 1
    assert c.h2._conn is conn and not conn.closed       # no call failed over to a new connection
    assert len(conn._table) >= 7
    w.close()


async def test_values_beyond_the_windows_and_the_frame_size(clients):
    """A 1 MiB value each way (etcd's stream window starts at 64 KiB, frames at 16 KiB), through a watch
    too, and 24 values of 200 KB at once (4.8 MB: the connection window must be replenished under load)."""
    c = clients(20)
    big = os.urandom(1 << 20)
    ok, rev, _ = await c.create(b"/big/one", big)
    assert ok
    w = c.watch(b"/big/", rev, progress_notify=False)
    (ev,) = await _events(w, 1)
    assert ev.kv.value == big
    w.close()
    kv, _ = await c.get(b"/big/one")
    assert kv.value == big
    vals = [os.urandom(200_000) for _ in range(24)]
    res = await asyncio.gather(*(c.create(b"/big/%02d" % i, v) for i, v in enumerate(vals)))
    assert all(ok for ok, _, _ in res)
    kvs, _, _, _ = await c.range(b"/big/0", b"/big/3")
    assert [k.value for k in kvs] == vals


async def test_etcd_errors_map_as_grpcs_did(clients):
    c = clients(5)
    ok, rev1, _ = await c.create(b"/e/a", b"1")
    _, rev2, _ = await c.update(b"/e/a", b"2", rev1)
    await c.compact(rev2)
    with pytest.raises(errors.StorageError) as ei:
        await c.get(b"/e/a", revision=rev1)
    assert ei.value.code == errors.Code.EXPIRED and "compacted" in str(ei.value)
    with pytest.raises(errors.StorageError) as ei:
        await c.get(b"/e/a", revision=rev2 + 1000)
    assert ei.value.code == errors.Code.TOO_LARGE_RV
    with pytest.raises(errors.StorageError) as ei:     # over --max-request-bytes (4 MiB, storage/embedded.py)
        await c.create(b"/e/huge", b"x" * ((4 << 20) + 100_000))   # (over 4.5 MiB grpc refuses it first)
    assert ei.value.code == errors.Code.TOO_LARGE
    assert (await c.get(b"/e/a"))[0].value == b"2"      # the connection still serves


async def test_many_concurrent_writes_each_get_their_revision(clients):
    c = clients(20)
    res = await asyncio.gather(*(c.create(b"/c/%04d" % i, b"v") for i in range(500)))
    assert all(ok for ok, _, _ in res)
    assert len({rev for _, rev, _ in res}) == 500


async def test_a_stopped_etcd_is_a_deadline_and_cancelling_a_call_resets_only_its_stream(etcd_member, clients):
    c = clients(1)
    await c.create(b"/d/a", b"1")
    conn = c.h2._conn
    etcd_member.pause()
    try:
        t0 = time.monotonic()
        with pytest.raises(errors.StorageError) as ei:
            await c.get(b"/d/a")
        assert ei.value.code == errors.Code.UNREACHABLE and 0.9 < time.monotonic() - t0 < 5
        pending = asyncio.ensure_future(c.get(b"/d/a"))
        await asyncio.sleep(0.2)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert conn.streams == {}                      # both given-up streams reset and forgotten
    finally:
        etcd_member.resume()
    kv, _ = await c.get(b"/d/a")
    assert kv.value == b"1" and c.h2._conn is conn  # the same connection, still in order


async def test_killed_etcd_fails_fast_then_a_new_connection_serves(etcd_member, clients):
    c = clients(5)
    await c.create(b"/k/a", b"1")
    conn = c.h2._conn
    await asyncio.to_thread(etcd_member.kill)
    with pytest.raises(errors.StorageError) as ei:
        await c.get(b"/k/a")
    assert ei.value.code == errors.Code.UNREACHABLE
    assert conn.closed
    await asyncio.to_thread(etcd_member.restart)
    assert (await _once_back(c, b"/k/a")).value == b"1" and c.h2._conn is not conn


async def test_graceful_etcd_stop_goaway(etcd_member, clients):
    """SIGTERM: etcd closes its connections (GOAWAY); calls fail as unreachable, never hang, and the
    restarted member is served on a new connection."""
    c = clients(5)
    await c.create(b"/g/a", b"1")
    p = etcd_member.member._proc
    os.kill(p.pid, signal.SIGTERM)
    await asyncio.to_thread(p.wait, 30)
    with pytest.raises(errors.StorageError) as ei:
        await asyncio.wait_for(c.get(b"/g/a"), 10)
    assert ei.value.code == errors.Code.UNREACHABLE
    await asyncio.to_thread(etcd_member.restart)
    assert (await _once_back(c, b"/g/a")).value == b"1"


async def test_first_endpoint_down_fails_over_to_the_next(etcd_member, clients):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()                                  # nothing listens there now
    c = clients(5, [f"http://127.0.0.1:{port}", etcd_member.endpoint])
    ok, _, _ = await c.create(b"/f/a", b"1")
    assert ok
    assert c.h2.hosts[0][1] == int(etcd_member.endpoint.rsplit(":", 1)[1])   # tried first next time
    ch = H2Channel([("127.0.0.1", port)])
    try:
        with pytest.raises(Exception) as ei:
            await ch.call(b"/etcdserverpb.KV/Range", b"", 1)
        assert ei.value.code().name == "UNAVAILABLE" and "cannot connect" in ei.value.details()
    finally:
        ch.close()


def test_the_server_does_not_import_grpcio():
    """grpcio's native library is about 16 MiB of every server process's RSS (README "etcd calls without
    grpc-aio"); nothing the server imports may bring it back, aetcd's package __init__s included."""
    code = ("import sys, apiserver.__main__, apiserver.app, storage.compact, cache.cacher, front.shards, "
            "nodetier.__main__, deployment.supervisor, shardslice.__main__; "
            "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.') or m == 'aetcd.client'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


async def test_our_header_blocks_decode_as_meant_through_a_table_that_grows_and_is_shrunk():
    """Our HPACK encoder against a conforming decoder (python-hyper's, as etcd's Go one would read it): blocks
    for several methods and deadlines, interleaved so the table grows between cached blocks, then etcd
    lowering SETTINGS_HEADER_TABLE_SIZE (a size update to 0 first, literals after)."""
    from hpack import Decoder

    class Sink:
        def __init__(self):
            self.out = []

        def write(self, b):
            self.out.append(b)

        def is_closing(self):
            return False

    conn = grpc_h2._Connection(b"127.0.0.1:2379")
    conn.connection_made(Sink())
    dec = Decoder()
    calls = [(b"/etcdserverpb.KV/Txn", 30000), (b"/etcdserverpb.KV/Range", 30000), (b"/etcdserverpb.KV/Txn", 30000),
             (b"/etcdserverpb.Watch/Watch", 0), (b"/etcdserverpb.KV/Range", 30000), (b"/etcdserverpb.KV/Range", 5000),
             (b"/etcdserverpb.KV/Txn", 30000)]

    def expect(path, ms):
        h = [(":method", "POST"), (":scheme", "http"), (":path", path.decode()), (":authority", "127.0.0.1:2379"),
             ("content-type", "application/grpc"), ("te", "trailers")]
        return h + ([("grpc-timeout", f"{ms}m")] if ms else [])

    sizes = []
    for path, ms in calls * 3:
        block = conn._header_block(path, ms)
        sizes.append(len(block))
        assert [tuple(f) for f in dec.decode(block)] == expect(path, ms)
    assert sizes[-7:] == [7, 7, 7, 6, 7, 7, 7]           # every field indexed once the table holds them all
    conn._settings(struct.pack(">HI", grpc_h2.S_HEADER_TABLE_SIZE, 0))
    dec.max_allowed_table_size = 0
    for path, ms in calls:
        block = conn._header_block(path, ms)
        assert [tuple(f) for f in dec.decode(block)] == expect(path, ms)
    assert conn._table == {} and dec.header_table_size == 0


def test_only_indexed_blocks_are_recognised():
    """RFC 7541 6.1 and 5.1: indexed fields (the index with a 7-bit prefix, continued past 126) and nothing else."""
    assert grpc_h2._only_indexed(b"\x88\xbe\xbf")
    assert grpc_h2._only_indexed(b"\xff\x80\x01\x88")           # index 127 + 128, then 8
    assert not grpc_h2._only_indexed(b"\xff\x80")                 # the index cut short
    assert not grpc_h2._only_indexed(b"\x88\x40\x01a\x01b")       # a literal with incremental indexing
    assert not grpc_h2._only_indexed(b"\x20\x88")                 # a dynamic table size update
    assert not grpc_h2._only_indexed(b"\x88\x0f\x10\x01a")         # a literal without indexing
    assert grpc_h2._only_indexed(b"")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(
    [(":status", "200"), ("content-type", "application/grpc"), ("grpc-status", "0"), ("grpc-message", ""),
     ("grpc-status", "14"), ("grpc-message", "etcdserver: request timed out"), ("x-a", "1"), ("x-b", "2" * 900)]),
    min_size=1, max_size=3), st.booleans(), st.sampled_from([None, None, None, 0, 256, 1024, 4096])),
    min_size=1, max_size=40), st.sampled_from([256, 1024, 4096]))
# the case a memory that outlived a table change gets wrong: b"\xbe" (the newest entry) is grpc-status, then
# grpc-message once that is added
@example([([("grpc-status", "0")], False, None), ([("grpc-status", "0")], False, None),
          ([("grpc-message", "")], False, None), ([("grpc-message", "")], False, None)], 4096)
def test_remembered_blocks_decode_as_a_plain_decoder_does(blocks, table):
    """_BlockDecoder against hpack's Decoder over blocks from an encoder whose dynamic table fills, evicts
    (small tables, a 900-byte value) and is resized between blocks (the next block carries the size update):
    every block decodes to the same fields."""
    from hpack import Decoder, Encoder
    enc = Encoder()
    enc.header_table_size = table
    ours, plain = grpc_h2._BlockDecoder(), Decoder()
    for fields, sensitive, resize in blocks:
        if resize is not None:
            enc.header_table_size = resize
        # a sensitive field is never indexed (RFC 7541 7.1.3): blocks that are not "indexed only" in between
        block = enc.encode([(k, v, sensitive and k.startswith("x-")) for k, v in fields])
        assert [tuple(f) for f in ours.decode(block)] == [tuple(f) for f in plain.decode(block)] == list(fields)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 2**63 - 1),
       st.one_of(st.none(), st.binary(max_size=70_000)))
def test_cas_request_is_what_the_message_classes_serialise(key, rev, value):
    """storage.etcd.cas_request builds the compare-and-swap Txn by hand: byte for byte the TxnRequest the
    generated messages make, for puts and deletes, mod_revision 0 (written: it is in a oneof) up to 2**63 - 1,
    keys and values across the varint length boundaries."""
    from storage.etcd import cas_request
    from storage.etcdpb import pb
    then = (pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=key)) if value is None else
            pb.RequestOp(request_put=pb.PutRequest(key=key, value=value)))
    ref = pb.TxnRequest(compare=[pb.Compare(key=key, target=pb.Compare.MOD, result=pb.Compare.EQUAL,
                                            mod_revision=rev)],
                        success=[then], failure=[pb.RequestOp(request_range=pb.RangeRequest(key=key))])
    assert cas_request(key, rev, value) == ref.SerializeToString()


async def test_etcd_replies_are_decoded_from_remembered_blocks(clients):
    """etcd's reply headers and trailers after the first call are indexed fields only: they are kept and reused,
    and the calls' answers are right."""
    c = clients(5)
    revs = []
    for i in range(20):
        ok, rev, _ = await c.create(f"/m/{i}".encode(), b"v")
        assert ok
        revs.append(rev)
    assert revs == list(range(revs[0], revs[0] + 20))
    kv, _ = await c.get(b"/m/7")
    assert kv.value == b"v" and kv.mod_revision == revs[7]
    pure = c.h2._conn.decoder.pure
    assert pure and all(grpc_h2._only_indexed(b) for b in pure)
    assert any(dict(f).get("grpc-status") == "0" for f in pure.values())


async def test_closing_the_client_ends_its_watches_instead_of_resuming(etcd_member):
    """A closed channel cancels its calls (grpc's do too): a watch on it must end, not take the closing for
    etcd going away and re-create its stream every 250 ms forever."""
    c = EtcdClient([etcd_member.endpoint], timeout=5)
    ok, rev, _ = await c.create(b"/w/a", b"1")
    w = c.watch(b"/w/", rev, progress_notify=False)
    task = asyncio.ensure_future(_events(w, 2, timeout=30))
    await asyncio.sleep(0.3)
    await c.close()
    with pytest.raises(errors.StorageError) as ei:
        await asyncio.wait_for(task, 5)
    assert "CANCELLED" in str(ei.value) and w.resumes == 0
