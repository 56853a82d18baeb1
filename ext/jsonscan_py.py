"""Pure-Python twin of :mod:`ext.jsonscan` (same function; the test oracle)."""
from __future__ import annotations

import re

_BS, _BSBS, _BSQ, _Q = b"\\", b"\\\\", b'\\"', b'"'


def has_float(b: bytes) -> bool:
    """Whether the JSON text ``b`` has a float number token (with '.' or an exponent) outside strings."""
    if b"." not in b and b"e" not in b and b"E" not in b:
        return False
    if _BS in b:
        # Drop escapes so every remaining quote delimits a string. Left-to-right
        # non-overlapping replace of "\\\\" pairs follows JSON escape parsing.
        b = b.replace(_BSBS, b"").replace(_BSQ, b"")
    o = b"".join(b.split(_Q)[::2]).lower()
    if b"." in o:
        return True
    ne = o.count(b"e")
    return ne != 0 and ne != o.count(b"true") + o.count(b"false")


def container_end(b: bytes, i: int) -> int:
    """The index just past the JSON object or array that starts at ``b[i]``, or -1 if ``b`` ends first."""
    n = len(b)
    if i < 0 or i >= n:
        return -1
    depth = 0
    while i < n:
        c = b[i]
        if c == 0x22:
            k = i + 1
            while True:
                k = b.find(b'"', k)
                if k < 0:
                    return -1
                m = k - 1
                while m > i and b[m] == 0x5C:
                    m -= 1
                if (k - 1 - m) % 2 == 0:
                    break
                k += 1
            i = k + 1
            continue
        if c in (0x7B, 0x5B):
            depth += 1
        elif c in (0x7D, 0x5D):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


_NEG_ZERO = re.compile(rb"-0(?![\d.eE])")  # literal prefix: fast; the context is checked by hand
_JSON_WS = b" \t\r\n"
_VALUE_START = b":,["
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * 19


def needs_slow_loads(b: bytes) -> bool:
    """Whether orjson would decode ``b`` differently from Go: a run of 19 or more digits, or a bare -0 number
    token. Plain substring tests first: the equivalent regex alone cost ~300 us on a 3.6 KB Pod."""
    if _LONG_DIGITS in b.translate(_DIGITS_TO_ZERO):
        return True
    for m in _NEG_ZERO.finditer(b):
        i = m.start() - 1
        while i >= 0 and b[i] in _JSON_WS:
            i -= 1
        if i < 0 or b[i] in _VALUE_START:  # a number token, not text inside a string
            return True
    return False
