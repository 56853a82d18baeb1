# cython: language_level=3, binding=True
"""Scans of compact JSON text, compiled (hot path of machinery/jsonenc.py).

``container_end(b, i)``: where the JSON object or array starting at ``b[i]`` ends (-1: not yet in ``b``).

``has_float(b)``: whether the JSON text ``b`` has a number token written as a float (with a '.' or
an exponent) outside strings. jsonenc asks this of every orjson output, because orjson formats
floats differently from Go; one pass over the bytes, no allocation.

The pure-Python twin is :mod:`ext.jsonscan_py` (same function, used as the test oracle).
"""


cimport cython
from libc.string cimport memchr


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline Py_ssize_t _string_end(const unsigned char* base, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """Just past the string whose opening quote is at i: the next quote not escaped by an odd run of
    backslashes (memchr is vectorised: long strings cost little); -1 if the text ends first."""
    cdef Py_ssize_t k = i + 1, m
    cdef const void* p
    while True:
        p = memchr(base + k, 0x22, n - k)
        if p == NULL:
            return -1
        k = <const unsigned char*>p - base
        m = k - 1
        while m > i and base[m] == 0x5C:
            m -= 1
        if (k - 1 - m) % 2 == 0:
            return k + 1
        k += 1


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _has_float(const unsigned char[::1] b) noexcept nogil:
    cdef Py_ssize_t i = 0, n = b.shape[0]
    cdef const unsigned char* base
    cdef unsigned char c
    if n == 0:
        return False
    base = &b[0]
    while i < n:
        c = base[i]
        if c == 0x22:
            i = _string_end(base, i, n)
            if i < 0:
                return False
            continue
        if c == 0x2E:          # '.' outside strings only occurs in numbers
            return True
        if (c == 0x65 or c == 0x45) and i > 0 and 0x30 <= base[i - 1] <= 0x39:
            return True        # an exponent follows a digit ('e' of true/false does not)
        i += 1
    return False


def has_float(const unsigned char[::1] b not None) -> bool:
    return _has_float(b)


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _container_end(const unsigned char[::1] b, Py_ssize_t i) noexcept nogil:
    cdef Py_ssize_t n = b.shape[0], depth = 0
    cdef const unsigned char* base
    cdef unsigned char c
    if i < 0 or i >= n:
        return -1
    base = &b[0]
    while i < n:
        c = base[i]
        if c == 0x22:
            i = _string_end(base, i, n)
            if i < 0:
                return -1
            continue
        if c == 0x7B or c == 0x5B:     # '{' '['
            depth += 1
        elif c == 0x7D or c == 0x5D:   # '}' ']'
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def container_end(const unsigned char[::1] b not None, Py_ssize_t i) -> int:
    """The index just past the JSON object or array that starts at ``b[i]`` (valid JSON assumed), or -1
    when ``b`` ends before it does (the front splits a shard's list into items as the bytes arrive)."""
    return _container_end(b, i)
