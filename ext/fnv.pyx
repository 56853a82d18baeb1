# cython: language_level=3, binding=True
"""64-bit FNV-1a, compiled (SPEC S7.10).

Hash of a shard key = FNV-1a 64 over the UTF-8 bytes of the field's string value (the UID's
canonical 36-char text, or the namespace name), rendered as ``0x`` + 16 lowercase hex digits.
Arithmetic is C ``uint64_t``: the multiply wraps modulo 2**64 exactly as FNV requires.

The pure-Python twin is :mod:`ext.fnv_py` (same functions, used as the test oracle).
"""

from libc.stdint cimport uint64_t

cdef extern from "Python.h":
    # Returns a pointer to the str's UTF-8 form. For ASCII strings (UIDs, namespace names) this
    # is the str's own storage: no copy, no allocation. For non-ASCII strings CPython builds the
    # UTF-8 form once and caches it on the str object. Raises UnicodeEncodeError on lone
    # surrogates, exactly like str.encode("utf-8").
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size) except NULL

cdef uint64_t _OFFSET_BASIS = 0xcbf29ce484222325ULL  # FNV-1a 64 offset basis
cdef uint64_t _PRIME = 0x100000001b3ULL  # FNV 64 prime (2**40 + 2**8 + 0xb3)

# Python-visible copies, same names as in ext.fnv_py.
FNV64_OFFSET_BASIS = _OFFSET_BASIS
FNV64_PRIME = _PRIME

cdef const char* _HEX = b"0123456789abcdef"


cdef uint64_t fnv1a64_raw(const unsigned char* data, Py_ssize_t n) noexcept nogil:
    """FNV-1a 64 over ``n`` bytes at ``data``. O(n), no allocation, GIL not needed."""
    cdef uint64_t h = _OFFSET_BASIS
    cdef Py_ssize_t i
    for i in range(n):
        h ^= data[i]
        h *= _PRIME
    return h


cdef uint64_t fnv1a64_str(str s) except? 0:
    """FNV-1a 64 over the UTF-8 bytes of ``s``. O(len(s)); no allocation for ASCII ``s``."""
    cdef Py_ssize_t n
    cdef const char* p = PyUnicode_AsUTF8AndSize(s, &n)
    return fnv1a64_raw(<const unsigned char*>p, n)


def fnv1a64(str s not None) -> int:
    """Return the 64-bit FNV-1a hash of the UTF-8 encoding of ``s`` as an int in [0, 2**64).

    O(len(s)) time; O(1) extra memory for ASCII input. Raises TypeError for non-str and
    UnicodeEncodeError for strings with lone surrogates.
    """
    return fnv1a64_str(s)


def fnv1a64_bytes(bytes b not None) -> int:
    """Return the 64-bit FNV-1a hash of ``b`` as an int in [0, 2**64). O(len(b)) time, O(1) memory."""
    return fnv1a64_raw(<const unsigned char*><const char*>b, len(b))


def fnv1a64_hex(str s not None) -> str:
    """Return ``fnv1a64(s)`` rendered as ``'0x'`` + 16 lowercase hex digits (SPEC S7.10).

    O(len(s)) time; the fixed width makes string order equal numeric order (SPEC S7.11).
    """
    cdef uint64_t h = fnv1a64_str(s)
    cdef char buf[18]
    cdef int i
    buf[0] = b'0'
    buf[1] = b'x'
    for i in range(17, 1, -1):
        buf[i] = _HEX[h & 0xF]
        h >>= 4
    return buf[:18].decode("ascii")
