# cython: language_level=3
"""C-level API of ext.entry: the watch cache's per-object record, cimport-able from ext.btree, whose tree keeps
an entry in a key's place (no key string of its own: see entry.pyx)."""

cimport cython
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


cdef class CodecBase:
    # What every compressed entry of a resource leaves out of its block: the key prefix all its keys share (the
    # resource's, "/registry/rolebindings/"), UTF-8 and str; b"" / "" for none. cache/compression.py's Codec.
    cdef readonly bytes key_prefix
    cdef readonly str key_prefix_str


@cython.final
cdef class Entry:
    # The key str while the entry is plain, None once compressed: the key's UTF-8 then sits in the frame's block.
    cdef object _key
    # The wire bytes (an owned reference to a bytes object) while codec is None; once compressed, a PyMem block:
    # u16 key length (bit 15: the codec's key prefix left out; 0 when the key stayed a str), the key's UTF-8
    # (less that prefix), then the frame's `flen` bytes.
    cdef void* _stored
    cdef readonly object codec      # None, or what decodes the frame (shared by the resource's entries)
    cdef readonly int64_t rv
    cdef readonly uint64_t uid_hash
    cdef readonly int32_t slot      # dense slot id (-1: a tombstone); slots are far below 2**31
    cdef uint32_t flen              # the frame's length when compressed


cdef const char* entry_key_utf8(Entry e, Py_ssize_t* n, const char** prefix, Py_ssize_t* prefix_n) except NULL
cdef str entry_key(Entry e)
