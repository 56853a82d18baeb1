# cython: language_level=3, binding=True
"""The watch cache's per-object record, as small as a Python object can be.

`Entry` holds the storage key (the same str object the B-tree is keyed by),
the stored bytes, the resourceVersion and the UID's FNV-1a 64 hash as C
integers (a Python int each would cost 28-36 B more), and the dense slot id
used by the roaring bitmaps.

The stored bytes are the wire bytes, or, once the entry is cold and its
resource's compressor has shrunk it (cache/compression.py), a zstd frame that
`codec.decompress` turns back into exactly those bytes: `data` is always the
wire bytes, so no reader can tell. A codec never references entries, so an
entry still cannot be part of a reference cycle and is not tracked by the
garbage collector (saves the 16 B GC header).
"""
cimport cython
from libc.stdint cimport int64_t, uint64_t


@cython.no_gc
@cython.final
cdef class Entry:
    cdef readonly object key
    cdef readonly bytes stored      # the wire bytes, or a frame of them when codec is not None
    cdef readonly object codec      # None, or what decodes `stored` (shared by the resource's entries)
    cdef readonly int64_t rv
    cdef readonly uint64_t uid_hash
    cdef readonly int64_t slot

    def __cinit__(self, str key, int64_t rv, bytes data, int64_t slot, uint64_t uid_hash, object codec=None):
        self.key = key
        self.rv = rv
        self.stored = data
        self.codec = codec
        self.slot = slot
        self.uid_hash = uid_hash

    @property
    def data(self):
        """The wire bytes (decoded from the frame if the entry is compressed)."""
        if self.codec is None:
            return self.stored
        return self.codec.decompress(self.stored)

    def compress(self, bytes frame, object codec):
        """Keep `frame` instead of the wire bytes; the compressor checked that `codec` decodes it back."""
        self.stored = frame
        self.codec = codec

    def __sizeof__(self):
        """The record plus its bytes (the key is shared with the B-tree and counted there, the codec by its
        resource). O(1)."""
        return Py_TYPE_BASICSIZE(self) + self.stored.__sizeof__()

    def __repr__(self):
        return f"Entry({self.key!r}, rv={self.rv}{', compressed' if self.codec is not None else ''})"


@cython.no_gc
@cython.final
cdef class Event:
    """One applied event of a watch cache's window (cache/watch_cache.py): type, key, resourceVersion, the
    entry it produced (for DELETED the last state at the delete's RV), the entry it replaced (None for
    ADDED), and when it was applied. The window holds up to 102,400 of them per resource, so they are as
    small as the entry: the RV and the time as C numbers (a Python int and float would cost 56 B more), and
    no GC header (an event references entries and strings only, so it cannot be part of a cycle)."""
    cdef readonly str type       # ADDED | MODIFIED | DELETED (the interned literals)
    cdef readonly object key
    cdef readonly object entry
    cdef readonly object prev
    cdef readonly int64_t rv
    cdef readonly double time

    def __cinit__(self, str type, str key, int64_t rv, object entry, object prev, double time):
        self.type = type
        self.key = key
        self.rv = rv
        self.entry = entry
        self.prev = prev
        self.time = time

    def __sizeof__(self):
        return Py_TYPE_BASICSIZE(self)

    def __repr__(self):
        return f"Event({self.type}, {self.key!r}, rv={self.rv})"


@cython.no_gc
@cython.final
cdef class WindowEvent:
    """An event of a watch cache's own window (cache/watch_cache.py), 48 B where `Event` takes 64: only the
    entry it produced, the entry it replaced and when. Its key and RV are the entry's (the cache makes a new
    entry per event, at the event's RV), and its type follows from them: a DELETED event's entry is the
    tombstone (slot -1, never a stored entry's), an ADDED one replaced nothing. The front's window, whose
    entries carry no RV nor slot, keeps `Event`."""
    cdef readonly Entry entry
    cdef readonly object prev
    cdef readonly double time

    def __cinit__(self, Entry entry not None, object prev, double time):
        self.entry = entry
        self.prev = prev
        self.time = time

    @property
    def type(self):
        if self.entry.slot < 0:
            return "DELETED"
        return "ADDED" if self.prev is None else "MODIFIED"

    @property
    def key(self):
        return self.entry.key

    @property
    def rv(self):
        return self.entry.rv

    def __sizeof__(self):
        return Py_TYPE_BASICSIZE(self)

    def __repr__(self):
        return f"Event({self.type}, {self.key!r}, rv={self.rv})"


cdef extern from *:
    """
    static Py_ssize_t Py_TYPE_BASICSIZE(PyObject *o) { return Py_TYPE(o)->tp_basicsize; }
    """
    Py_ssize_t Py_TYPE_BASICSIZE(object o)


def restore_entries(entries, str after, str prefix, list slots, object insert, dict codecs, tuple newest):
    """A warm start's chunk of saved entries installed (cache/watch_cache.py `WatchCache.add_restored`, which
    documents the checks): each a (key, rv, stored bytes, slot, uid_hash, codec id) tuple, made an Entry, put in
    `slots` and the B-tree (`insert`). Compiled because a restart installs every object this way (the Python loop
    was about a quarter of a 280,000-object warm start's samples under py-spy; compiled, that start is 0.02-0.05 s
    faster, of ~0.87 s). Returns (the last key, the (key, rv) of the newest entry so
    far, the entries kept plain, how many are compressed, their stored bytes)."""
    cdef Py_ssize_t nslots = len(slots), ncompressed = 0, compressed_bytes = 0
    cdef int64_t rv, slot, top
    cdef uint64_t uid_hash
    cdef str key, top_key
    cdef bytes data
    cdef Entry e
    cdef list plain = []
    top_key, top = newest
    for key, rv, data, slot, uid_hash, codec_id in entries:
        if key is None or data is None:
            raise TypeError("a saved entry's key is a str and its data bytes")
        if key <= after or not key.startswith(prefix):
            raise ValueError(f"key {key!r} out of order or outside {prefix}")
        if slot < 0 or slot >= nslots or slots[slot] is not None:
            raise ValueError(f"slot {slot} used twice or beyond the allocator's")
        if codec_id:
            e = Entry(key, rv, data, slot, uid_hash, codecs[codec_id])
            ncompressed += 1
            compressed_bytes += len(data)
        else:
            e = Entry(key, rv, data, slot, uid_hash, None)
            plain.append(e)
        slots[slot] = e
        insert(key, e)
        after = key
        if rv > top:
            top_key, top = key, rv
    return after, (top_key, top), plain, ncompressed, compressed_bytes
