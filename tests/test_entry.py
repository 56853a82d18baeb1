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
