# cython: language_level=3
"""C-level API of ext.fnv: 64-bit FNV-1a (SPEC S7.10), cimport-able from other .pyx modules."""

from libc.stdint cimport uint64_t

cdef uint64_t fnv1a64_raw(const unsigned char* data, Py_ssize_t n) noexcept nogil
cdef uint64_t fnv1a64_str(str s) except? 0
