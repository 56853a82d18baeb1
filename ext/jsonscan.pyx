# cython: language_level=3, binding=True
"""Scans of compact JSON text, compiled (hot path of machinery/jsonenc.py).

``container_end(b, i)``: where the JSON object or array starting at ``b[i]`` ends (-1: not yet in ``b``).

``has_float(b)``: whether the JSON text ``b`` has a number token written as a float (with a '.' or
an exponent) outside strings. jsonenc asks this of every orjson output, because orjson formats
floats differently from Go; one pass over the bytes, no allocation.

``needs_slow_loads(b)``: whether orjson would decode the JSON text ``b`` differently from Go: a run of 19 or
more digits (an integer that may be beyond 64 bits, which orjson makes a float) or a bare ``-0`` number token
(orjson gives int 0; Go's float64 -0 encodes again as "-0"). Conservative (digits inside strings count too:
the slow path then decodes, correctly); jsonenc asks it of every input before orjson decodes it.

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


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline bint _json_ws(unsigned char c) noexcept nogil:
    return c == 0x20 or c == 0x09 or c == 0x0D or c == 0x0A


@cython.boundscheck(False)
@cython.wraparound(False)
cdef bint _needs_slow_loads(const unsigned char* base, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i, j, run = 0
    cdef unsigned char c, d
    for i in range(n):
        c = base[i]
        if <unsigned char>(c - 0x30) < 10:      # a digit
            run += 1
            if run >= 19:
                return True
            continue
        run = 0
        if c != 0x2D or i + 1 >= n or base[i + 1] != 0x30:
            continue
        if i + 2 < n:           # "-0" not followed by a digit, '.', 'e' or 'E'
            d = base[i + 2]
            if <unsigned char>(d - 0x30) < 10 or d == 0x2E or d == 0x65 or d == 0x45:
                continue
        j = i - 1
        while j >= 0 and _json_ws(base[j]):
            j -= 1
        if j < 0 or base[j] == 0x3A or base[j] == 0x2C or base[j] == 0x5B:   # ':' ',' '[': a number token
            return True
    return False


def needs_slow_loads(b) -> bool:
    """(bytes without a buffer's acquisition, the common case: jsonenc.loads passes bytes.)"""
    cdef const unsigned char[::1] view
    if type(b) is bytes:
        return _needs_slow_loads(<const unsigned char*><bytes>b, len(<bytes>b))
    if b is None:       # (a typed memoryview would take None)
        raise TypeError("needs_slow_loads() argument must be a bytes-like object, not None")
    view = b
    if view.shape[0] == 0:
        return False
    return _needs_slow_loads(&view[0], view.shape[0])
