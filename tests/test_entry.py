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
    assert e.__sizeof__() - b"".__sizeof__() <= 64
    with pytest.raises(AttributeError):
        e.rv = 2  # read-only: entries are immutable versions


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
def test_restore_entries_installs_a_chunk_and_refuses_a_bad_one(impl):
    """ext.restore_entries (a warm start's install of saved entries, WatchCache.add_restored) and its twin: every
    entry in its slot and the B-tree, the compressed ones with their codec and counted, the plain ones returned,
    the newest (key, rv) kept; a key out of order or outside the prefix, a slot used twice or beyond the
    allocator's, an unknown codec or a missing key or bytes refused."""
    from ext import entry_py
    restore = ext.restore_entries if impl == "compiled" else entry_py.restore_entries
    codec = object()
    rows = _chunk(["a", "b", "c", "d"], [0, 7, 7, 0])
    rows[2] = rows[2][:1] + (99,) + rows[2][2:]          # the newest entry is "c"
    slots, tree = [None] * 6, ext.BTree()
    after, newest, plain, n, nbytes = restore(rows, "", "/registry/things/", slots, tree.insert, {7: codec},
                                              ("", -1))
    assert after == "/registry/things/d" and newest == ("/registry/things/c", 99)
    assert [e.key for e in plain] == ["/registry/things/a", "/registry/things/d"] and (n, nbytes) == (2, 2 + 3)
    assert [e.key if e else None for e in slots] == [r[0] for r in rows] + [None, None]
    assert [(k, e.rv, e.stored, e.slot, e.uid_hash, e.codec) for k, e in tree.items()] == \
        [(r[0], r[1], r[2], r[3], r[4], codec if r[5] else None) for r in rows]
    # The next chunk continues after the last key and keeps the newest so far.
    after2, newest2, *_ = restore([("/registry/things/e", 50, b"y", 5, 1, 0)], after, "/registry/things/", slots,
                                  tree.insert, {7: codec}, newest)
    assert after2 == "/registry/things/e" and newest2 == newest and len(tree) == 5
    used = object()
    bad = [([("/registry/things/a", 1, b"x", 0, 1, 0)], [None], ValueError),        # not after "b"
           ([("/registry/other/z", 1, b"x", 0, 1, 0)], [None], ValueError),         # outside the prefix
           ([("/registry/things/c", 1, b"x", 0, 1, 0)], [used], ValueError),        # slot 0 used
           ([("/registry/things/c", 1, b"x", 1, 1, 0)], [None], ValueError),        # beyond the allocator's 1
           ([("/registry/things/c", 1, b"x", -1, 1, 0)], [None], ValueError),
           ([("/registry/things/c", 1, None, 0, 1, 0)], [None], TypeError),
           ([(None, 1, b"x", 0, 1, 0)], [None], TypeError)]
    for rows_, slots_, err in bad:
        with pytest.raises(err):
            restore(rows_, "/registry/things/b", "/registry/things/", slots_, ext.BTree().insert, {7: codec},
                    ("", -1))
    with pytest.raises(KeyError):
        restore([("/registry/things/c", 1, b"x", 0, 1, 8)], "", "/registry/things/", [None], ext.BTree().insert,
                {7: codec}, ("", -1))
