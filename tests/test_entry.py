"""ext.entry.Entry (compiled) against its pure-Python twin."""
from __future__ import annotations

import gc
import sys

import pytest

import ext
from ext.entry_py import Entry as PyEntry


@pytest.fixture(params=["c", "py"])
def Entry(request):
    return ext.Entry if request.param == "c" else PyEntry


def test_fields_roundtrip(Entry):
    e = Entry("/registry/configmaps/ns/a", 2**40, b'{"x":1}', 7, 2**64 - 1)
    assert (e.key, e.rv, e.data, e.slot, e.uid_hash) == ("/registry/configmaps/ns/a", 2**40, b'{"x":1}', 7,
                                                         2**64 - 1)
    assert e.__sizeof__() >= sys.getsizeof(b'{"x":1}')


def test_compiled_entry_is_small_and_untracked():
    """No GC header and C integers: the record itself is 64 B on 64-bit CPython (56 before its codec slot,
    cache/compression.py)."""
    e = ext.Entry("k", 1, b"", 0, 0)
    assert not gc.is_tracked(e)
    assert e.__sizeof__() - b"".__sizeof__() - "k".__sizeof__() <= 64     # (the record counts its key)
    with pytest.raises(AttributeError):
        e.rv = 2  # read-only: entries are immutable versions


class _Codec:
    """What cache/compression.Codec gives an entry: `decompress` (zlib here: any decoder will do)."""
    @staticmethod
    def decompress(frame):
        import zlib
        assert type(frame) is bytes   # the compiled entry hands the decoder a copy, never its own block
        return zlib.decompress(frame)


def test_compress_keeps_the_frame_and_goes_back(Entry):
    """A compressed entry gives its frame back as bytes (`stored`) and its length without a copy
    (`stored_size`), decodes to the wire bytes (`data`), and can go back to plain bytes (codec None)."""
    import zlib
    wire = b'{"kind":"ConfigMap","data":{"a":"' + b"x" * 500 + b'"}}'
    frame = zlib.compress(wire)
    e = Entry("k", 9, wire, 4, 5)
    assert (e.stored, e.stored_size, e.codec) == (wire, len(wire), None)
    e.compress(frame, _Codec)
    assert (e.stored, e.stored_size, e.codec, e.data) == (frame, len(frame), _Codec, wire)
    assert (e.key, e.rv, e.slot, e.uid_hash) == ("k", 9, 4, 5)
    again = zlib.compress(wire, 1)
    e.compress(again, _Codec)   # re-encoded with another frame
    assert (e.stored, e.data) == (again, wire)
    e.compress(wire, None)
    assert (e.stored, e.stored_size, e.codec, e.data) == (wire, len(wire), None, wire)
    assert e.stored is wire       # plain bytes are shared, not copied
    with pytest.raises(TypeError):
        e.compress(bytearray(frame), _Codec)
    made = Entry("k", 9, frame, 4, 5, _Codec)   # as restored: made compressed
    assert (made.stored, made.data) == (frame, wire)


def test_compiled_compressed_entry_holds_its_frame_inline():
    """Once compressed, the compiled entry keeps its frame in a block of its own, not in a bytes object: the
    record stays 64 B and the frame costs its length (a bytes object would add 33 B of header). The wire
    bytes it held are released, and references are counted right both ways."""
    import zlib
    wire = b'{"a":"' + b"y" * 300 + b'"}'
    frame = zlib.compress(wire)
    e = ext.Entry("k", 1, wire, 0, 0)
    held = sys.getrefcount(wire)
    e.compress(frame, _Codec)
    assert sys.getrefcount(wire) == held - 1
    assert sys.getrefcount(frame) == 2      # not kept: copied into the entry's block
    assert e.__sizeof__() == 64 + 2 + len("k") + len(frame)     # the key's UTF-8 and its length in the block
    e.compress(wire, None)
    assert sys.getrefcount(wire) == held
    del e
    assert sys.getrefcount(wire) == held - 1
    with pytest.raises(OverflowError):
        ext.Entry("k", 1, b"", 2**31, 0)     # slots are 32-bit (-1: a tombstone)
    assert ext.Entry("k", 1, b"", -1, 0).slot == -1


def test_compiled_compressed_entry_keeps_its_key_in_the_frame_block():
    """A compressed entry gives up its key str (49 B of header on CPython 3.11): the key's UTF-8 goes in front of
    the frame in its block and `key` decodes it when asked; it survives re-encoding and going back to plain.
    A key over 65,535 bytes of UTF-8 stays a str."""
    import zlib
    wire = b'{"a":"' + b"z" * 300 + b'"}'
    frame = zlib.compress(wire)
    key = "".join(["/registry/rolebindings/team-\u00e9t\u00e9/binding-", "x" * 20])   # not ASCII
    held = sys.getrefcount(key)
    e = ext.Entry(key, 1, wire, 0, 0)
    e.compress(frame, _Codec)
    assert sys.getrefcount(key) == held         # the entry dropped its reference
    klen = len(key.encode())
    assert e.__sizeof__() == 64 + 2 + klen + len(frame)
    assert (e.key, e.stored, e.data) == (key, frame, wire)
    assert e.key is not e.key                   # made from the block each time
    again = zlib.compress(wire, 1)
    e.compress(again, _Codec)
    assert (e.key, e.stored, e.data, e.__sizeof__()) == (key, again, wire, 64 + 2 + klen + len(again))
    e.compress(wire, None)
    assert (e.key, e.data, e.stored_size) == (key, wire, len(wire))
    assert e.__sizeof__() == 64 + e.key.__sizeof__() + wire.__sizeof__()   # (`key` itself caches its UTF-8)
    made = ext.Entry(key, 1, frame, 0, 0, _Codec)  # made compressed (a warm start)
    assert (made.key, made.data, made.__sizeof__()) == (key, wire, 64 + 2 + klen + len(frame))
    long_key = "/registry/x/" + "k" * 70_000
    big = ext.Entry(long_key, 1, frame, 0, 0, _Codec)
    assert (big.key, big.data) == (long_key, wire)
    assert big.key is long_key and big.__sizeof__() == 64 + long_key.__sizeof__() + 2 + len(frame)
    big.compress(again, _Codec)
    assert (big.key, big.data) == (long_key, wire)
    empty = ext.Entry("", 1, frame, 0, 0, _Codec)
    assert (empty.key, empty.data) == ("", wire)


@pytest.mark.parametrize("self_keyed", [False, True], ids=["two-slot", "self-keyed"])
def test_compiled_tree_keyed_by_entries_orders_by_their_keys(self_keyed):
    """The watch cache's tree holds each entry in its key's place (`insert(e, e)`): lookups, ranges, counts
    and snapshots by str keys see the entries' keys, plain or compressed, in UTF-8 (code point) order, keys
    come out as str, and replacing an entry replaces it in the key's place too (the old one is released).
    A self-keyed tree (the watch cache's) holds one reference per item."""
    import zlib
    keys = ["/r/a", "/r/b\u00e9", "/r/b", "/r/\U0001f600", "/r/ba", "/r/a\x00", "/r/", "/r/z" * 3]
    t = ext.BTree(self_keyed=self_keyed)
    entries = {}
    for i, k in enumerate(keys):
        e = entries[k] = ext.Entry(k, i, b"{}", i, 0)
        if i % 2:
            e.compress(zlib.compress(b"{}"), _Codec)
        t.insert(e, e)
    t._check()
    assert list(t.keys()) == sorted(keys)
    assert [type(k) for k in t.keys()] == [str] * len(keys)
    assert all(t.get(k) is entries[k] for k in keys) and t.get("/r/c") is None
    assert t.count_from("/r/b", "/r/c") == sum("/r/b" <= k < "/r/c" for k in keys)
    assert [k for k, _ in t.iter_from("/r/b")] == sorted(k for k in keys if k >= "/r/b")
    assert (t.min_key(), t.max_key()) == (min(keys), max(keys))
    old = entries["/r/b"]
    new = ext.Entry("/r/b", 99, b"{}", 0, 0)
    held = sys.getrefcount(old)
    assert t.insert(new, new) is old
    assert sys.getrefcount(old) == held - (1 if self_keyed else 2)  # out of the key's place too
    snap = t.snapshot()
    assert t.insert(old, old) is new
    assert t.get("/r/b") is old and snap.get("/r/b") is new
    if self_keyed:
        t.insert(new, new)
        with pytest.raises(ValueError):
            t.insert("/r/b", new)
    else:
        t.insert("/r/b", new)                   # a str key in an entry-keyed tree
    assert t.get("/r/b") is new and list(t.keys()) == sorted(keys)
    gone = entries["/r/\U0001f600"]
    held = sys.getrefcount(gone)
    assert t.delete("/r/\U0001f600") is gone
    assert sys.getrefcount(gone) == held - (1 if self_keyed else 2)
    t._check()
    with pytest.raises(ValueError):
        t.append(ext.Entry("/r/a", 1, b"{}", 0, 0), None)
    with pytest.raises(TypeError):
        t.insert(b"/r/a", 1)

    class Key(str):
        pass
    c = Key("/r/c")
    t.insert(c, c if self_keyed else 7)         # a str subclass is a str key, beside entries
    assert t.get(Key("/r/b")) is new and t.get("/r/c") == (c if self_keyed else 7) and "/r/c" in list(t.keys())
    t._check()


class _PrefixCodec(ext.CodecBase):
    """A codec whose entries leave a key prefix out of their blocks (cache/compression.Codec's base)."""
    __slots__ = ()

    @staticmethod
    def decompress(frame):
        import zlib
        return zlib.decompress(frame)


def test_compiled_entry_leaves_its_codecs_key_prefix_out_of_the_block():
    """With a codec holding its resource's key prefix, a compressed entry keeps only the rest of its key (16-30
    B less per RBAC object); `key` puts the prefix back. A key without that prefix is kept whole; re-encoding
    with another codec, or going back to plain, keeps the key; a tree orders elided keys among whole ones and
    str probes by the whole key."""
    import zlib
    wire = b'{"a":"' + b"q" * 200 + b'"}'
    frame = zlib.compress(wire)
    pre = _PrefixCodec("/registry/rolebindings/")
    assert (pre.key_prefix, pre.key_prefix_str) == (b"/registry/rolebindings/", "/registry/rolebindings/")
    key = "".join(["/registry/rolebindings/", "ns-\u00e9/b"])
    rest = len(key.encode()) - len(pre.key_prefix)
    e = ext.Entry(key, 1, wire, 0, 0)
    e.compress(frame, pre)
    assert (e.key, e.data) == (key, wire) and e.__sizeof__() == 64 + 2 + rest + len(frame)
    other = ext.Entry("/registry/roles/x", 1, frame, 0, 0, pre)      # not under the prefix: whole
    assert other.key == "/registry/roles/x" and other.__sizeof__() == 64 + 2 + 17 + len(frame)
    again = zlib.compress(wire, 1)
    e.compress(again, _PrefixCodec("/registry/"))                     # another prefix: re-cut
    assert (e.key, e.data, e.__sizeof__()) == (key, wire, 64 + 2 + len(key.encode()) - 10 + len(again))
    e.compress(again, _Codec)                                         # a codec without one: whole
    assert (e.key, e.__sizeof__()) == (key, 64 + 2 + len(key.encode()) + len(again))
    e.compress(frame, pre)
    e.compress(wire, None)
    assert (e.key, e.data, e.codec) == (key, wire, None)
    exact = ext.Entry("/registry/rolebindings/", 1, frame, 0, 0, pre)  # the prefix itself: nothing left
    assert exact.key == "/registry/rolebindings/" and exact.__sizeof__() == 64 + 2 + len(frame)
    t = ext.BTree()
    keys = ["/registry/rolebindings/a", "/registry/rolebindings/", "/registry/rolebindings/b\u00e9",
            "/registry/rolebinding", "/registry/rolebindingsz", "/registry/rolebindings/ab", "/registry/roles/x",
            "/registry/rolebindings/\U0001f600", "/a", "/z"]
    entries = {}
    for i, k in enumerate(keys):
        en = entries[k] = ext.Entry(k, i, wire, i, 0)
        if i % 3:
            en.compress(frame, pre)
        t.insert(en, en)
    t._check()
    assert list(t.keys()) == sorted(keys) and all(t.get(k) is entries[k] for k in keys)
    for probe in ("/registry/rolebindings", "/registry/rolebindings/a\x00", "/registry/rolebindings/b",
                  "/registry/rolebindings/\uffff", "/registry/rolebindingt", "/registry/rolebindings0"):
        assert [k for k, _ in t.iter_from(probe)] == sorted(k for k in keys if k >= probe), probe
        assert t.get(probe) is None
    assert t.count_from("/registry/rolebindings/", "/registry/rolebindings0") == 5


@pytest.mark.parametrize("which", ["c", "py"])
def test_event_fields_roundtrip(which):
    from ext.entry_py import Event as PyEvent
    Event = ext.Event if which == "c" else PyEvent
    Entry = ext.Entry if which == "c" else PyEntry
    new, old = Entry("k", 2**40 + 1, b"{}", 3, 9), Entry("k", 2**40, b"{}", 3, 9)
    ev = Event("MODIFIED", "k", 2**40 + 1, new, old, 1234.5)
    assert (ev.type, ev.key, ev.rv, ev.entry, ev.prev, ev.time) == ("MODIFIED", "k", 2**40 + 1, new, old, 1234.5)
    assert Event("ADDED", "k", 1, new, None, 0.0).prev is None


def test_compiled_event_is_small_and_untracked():
    """The event window holds up to 102,400 events per resource: 64 B each, no GC header, RV and time as C
    numbers (the dataclass it replaced was 80 B plus a 32 B int and a 24 B float)."""
    ev = ext.Event("ADDED", "k", 10**12, ext.Entry("k", 1, b"", 0, 0), None, 1.0)
    assert not gc.is_tracked(ev)
    assert ev.__sizeof__() <= 64
    with pytest.raises(AttributeError):
        ev.rv = 2


@pytest.mark.parametrize("which", ["c", "py"])
def test_window_event_reads_type_key_and_rv_from_its_entries(which):
    """The watch cache's own events keep only entry, prev and time: the key and RV are the entry's, DELETED is a
    tombstone entry (slot -1), ADDED replaced nothing."""
    from ext.entry_py import WindowEvent as PyWindowEvent
    WindowEvent = ext.WindowEvent if which == "c" else PyWindowEvent
    Entry = ext.Entry if which == "c" else PyEntry
    old, new = Entry("k", 2**40, b"{}", 3, 9), Entry("k", 2**40 + 1, b"{}", 3, 9)
    tomb = Entry("k", 2**40 + 2, b"{}", -1, 9)
    got = [(ev.type, ev.key, ev.rv, ev.prev, ev.time) for ev in
           (WindowEvent(old, None, 1.0), WindowEvent(new, old, 2.0), WindowEvent(tomb, new, 3.5))]
    assert got == [("ADDED", "k", 2**40, None, 1.0), ("MODIFIED", "k", 2**40 + 1, old, 2.0),
                   ("DELETED", "k", 2**40 + 2, new, 3.5)]
    with pytest.raises(TypeError):
        WindowEvent(None, None, 0.0)


def test_compiled_window_event_is_48_bytes_and_untracked():
    """Up to 102,400 per resource: 40 B of struct (48 B from pymalloc), 16 B less than `Event`."""
    ev = ext.WindowEvent(ext.Entry("k", 1, b"", 0, 0), None, 1.0)
    assert not gc.is_tracked(ev) and ev.__sizeof__() <= 48
    with pytest.raises(AttributeError):
        ev.time = 2.0


def _chunk(draw_keys, codec_ids):
    return [(f"/registry/things/{k}", 10 + i, b"x" * (i + 1), i, 2 ** 64 - 1 - i, c)
            for i, (k, c) in enumerate(zip(draw_keys, codec_ids))]


@pytest.mark.parametrize("impl", ["compiled", "twin"])
def test_packed_entries_install_a_chunk_and_refuse_a_bad_one(impl):
    """ext.pack_entries / ext.restore_packed (a warm start's saved entries: cache/snapshot.py writes them,
    WatchCache.add_restored installs them) and their twins, which pack the same bytes: every entry in its slot
    and the B-tree, the compressed ones with their codec and counted, the plain ones returned, the newest
    (key, rv) kept, the slots used returned; a key out of order or outside the prefix, a slot used twice or
    beyond the allocator's, an unknown codec, a truncated or overlong chunk, a key that is not UTF-8 refused."""
    from ext import entry_py
    pack, restore = ((ext.pack_entries, ext.restore_packed) if impl == "compiled"
                     else (entry_py.pack_entries, entry_py.restore_packed))
    codec = object()
    rows = _chunk(["a", "b", "c", "d"], [0, 7, 7, 0])
    rows[2] = rows[2][:1] + (99,) + rows[2][2:]          # the newest entry is "c"
    packed = pack(rows)
    assert packed == ext.pack_entries(rows) == entry_py.pack_entries(rows)
    assert len(packed) == 4 + sum(30 + len(r[0]) + len(r[2]) for r in rows)
    slots, tree = [None] * 6, ext.BTree()
    after, newest, plain, n, nbytes, count = restore(memoryview(packed), "", "/registry/things/", slots, tree.append,
                                                    {7: codec}, ("", -1))
    assert after == "/registry/things/d" and newest == ("/registry/things/c", 99) and count == 4
    assert [e.key for e in plain] == ["/registry/things/a", "/registry/things/d"] and (n, nbytes) == (2, 2 + 3)
    assert [e.key if e else None for e in slots] == [r[0] for r in rows] + [None, None]
    assert [(k, e.rv, e.stored, e.slot, e.uid_hash, e.codec) for k, e in tree.items()] == \
        [(r[0], r[1], r[2], r[3], r[4], codec if r[5] else None) for r in rows]
    # The next chunk continues after the last key and keeps the newest so far.
    after2, newest2, *_ = restore(pack([("/registry/things/e", 50, b"y", 5, 1, 0)]), after, "/registry/things/",
                                  slots, tree.append, {7: codec}, newest)
    assert after2 == "/registry/things/e" and newest2 == newest and len(tree) == 5
    used = object()
    bad = [(pack([("/registry/things/a", 1, b"x", 0, 1, 0)]), [None]),        # not after "b"
           (pack([("/registry/other/z", 1, b"x", 0, 1, 0)]), [None]),         # outside the prefix
           (pack([("/registry/things/c", 1, b"x", 0, 1, 0)]), [used]),        # slot 0 used
           (pack([("/registry/things/c", 1, b"x", 1, 1, 0)]), [None]),        # beyond the allocator's 1
           (pack([("/registry/things/c", 1, b"x", 0, 1, 0)])[:-1], [None]),   # truncated
           (pack([("/registry/things/c", 1, b"x", 0, 1, 0)]) + b"!", [None]), # overlong
           (b"\x01\x00", [None]),
           (pack([("/registry/things/c", 1, b"x", 0, 1, 0)]).replace(b"things/c", b"things/\xff"), [None])]
    for chunk, slots_ in bad:
        with pytest.raises(ValueError):
            restore(chunk, "/registry/things/b", "/registry/things/", slots_, ext.BTree().append, {7: codec},
                    ("", -1))
    with pytest.raises(KeyError):
        restore(pack([("/registry/things/c", 1, b"x", 0, 1, 8)]), "", "/registry/things/", [None],
                ext.BTree().append, {7: codec}, ("", -1))
    for row, err in [(("/registry/things/c", 1, None, 0, 1, 0), TypeError), ((None, 1, b"x", 0, 1, 0), TypeError),
                     (("/registry/things/c", 1, b"x", -1, 1, 0), OverflowError),
                     (("/registry/things/" + "k" * 70000, 1, b"x", 0, 1, 0), OverflowError),
                     (("/registry/things/c", 1, b"x", 0, 1, 2 ** 32), OverflowError)]:
        with pytest.raises(err):
            pack([row])


@pytest.mark.parametrize("impl", ["compiled", "twin"])
def test_check_frames_walks_a_run_of_frames_and_finds_the_damaged_one(impl):
    """ext.check_frames (a snapshot section's ENTRIES frames checked off the event loop's thread,
    cache/snapshot.py) and its twin: CRC-32 as zlib's (ext.entry.crc32 against zlib.crc32 too), the frames of one
    type walked up to the first of another, the first damaged or overlong frame found."""
    import os
    import struct
    import zlib
    from ext import entry, entry_py
    check = ext.check_frames if impl == "compiled" else entry_py.check_frames
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 4096, 100_003):
        b = os.urandom(n)
        assert entry.crc32(b) == entry_py.crc32(b) == zlib.crc32(b), n

    def frame(t, payload, crc=None):
        return struct.pack("<BII", t, len(payload), zlib.crc32(payload) if crc is None else crc) + payload
    payloads = [os.urandom(n) for n in (0, 5, 1000, 70_000)]
    run = b"".join(frame(3, p) for p in payloads)
    tail = frame(4, b"end")
    assert check(run + tail, 3) == (4, -1, len(run))
    assert check(memoryview(run + tail), 3) == (4, -1, len(run))
    assert check(b"", 3) == (0, -1, 0) and check(tail, 3) == (0, -1, 0)
    flipped = bytearray(run)
    flipped[len(frame(3, payloads[0])) + len(frame(3, payloads[1])) + 9 + 500] ^= 0x10   # inside the third payload
    assert check(bytes(flipped) + tail, 3)[:2] == (2, 2)
    assert check(run[:-1], 3)[:2] == (3, 3)                     # the last frame runs past the end
    assert check(run[:4], 3)[:2] == (0, 0)                      # a cut header
    assert check(frame(3, b"abc", crc=1), 3)[:2] == (0, 0)


@pytest.mark.parametrize("impl", ["compiled", "twin"])
def test_slots_filled_checks_a_bitmaps_positions(impl):
    """ext.slots_filled (a warm start's saved index against its restored slots, WatchCache.restore_indexes)."""
    from pyroaring import BitMap
    from ext import entry_py
    filled = ext.slots_filled if impl == "compiled" else entry_py.slots_filled
    slots = [None, "a", None, "b", "c"]
    assert filled(slots, BitMap([1, 3, 4]).to_array()) and filled(slots, BitMap().to_array())
    assert not filled(slots, BitMap([1, 2]).to_array())
    with pytest.raises(IndexError):
        filled(slots, BitMap([1, 5]).to_array())
