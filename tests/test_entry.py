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
