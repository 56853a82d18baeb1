# cython: language_level=3, binding=True
"""The watch cache's per-object record, as small as a Python object can be.

`Entry` holds the storage key (the same str object the B-tree is keyed by),
the wire bytes, the resourceVersion and the UID's FNV-1a 64 hash as C
integers (a Python int each would cost 28-36 B more), and the dense slot id
used by the roaring bitmaps. It references only str and bytes, so it cannot
be part of a reference cycle and is not tracked by the garbage collector
(saves the 16 B GC header).
"""
cimport cython
from libc.stdint cimport int64_t, uint64_t


@cython.no_gc
@cython.final
cdef class Entry:
    cdef readonly object key
    cdef readonly bytes data
    cdef readonly int64_t rv
    cdef readonly uint64_t uid_hash
    cdef readonly int64_t slot

    def __cinit__(self, str key, int64_t rv, bytes data, int64_t slot, uint64_t uid_hash):
        self.key = key
        self.rv = rv
        self.data = data
        self.slot = slot
        self.uid_hash = uid_hash

    def __sizeof__(self):
        """The record plus its bytes (the key is shared with the B-tree and counted there). O(1)."""
        return Py_TYPE_BASICSIZE(self) + self.data.__sizeof__()

    def __repr__(self):
        return f"Entry({self.key!r}, rv={self.rv})"


cdef extern from *:
    """
    static Py_ssize_t Py_TYPE_BASICSIZE(PyObject *o) { return Py_TYPE(o)->tp_basicsize; }
    """
    Py_ssize_t Py_TYPE_BASICSIZE(object o)
