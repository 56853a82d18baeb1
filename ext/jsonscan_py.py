"""Pure-Python twin of :mod:`ext.jsonscan` (same function; the test oracle)."""
from __future__ import annotations

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
