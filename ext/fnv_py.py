"""64-bit FNV-1a, pure Python (SPEC S7.10): the twin of the compiled :mod:`ext.fnv`.

Same three functions, same results, same exceptions. Used as the test oracle and, with
``RESIDENCY_PURE_PYTHON=1``, as a debugging fallback (see :mod:`ext`). Roughly two orders of
magnitude slower than the compiled module; never use it on a hot path.
"""

from __future__ import annotations

__all__ = ["FNV64_OFFSET_BASIS", "FNV64_PRIME", "fnv1a64", "fnv1a64_bytes", "fnv1a64_hex"]

FNV64_OFFSET_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1  # Python ints are unbounded: wrap explicitly, as C uint64_t does


def fnv1a64_bytes(b: bytes) -> int:
    """Return the 64-bit FNV-1a hash of ``b`` as an int in [0, 2**64). O(len(b)) time, O(1) memory."""
    if not isinstance(b, bytes):
        raise TypeError(f"fnv1a64_bytes() argument must be bytes, not {type(b).__name__}")
    h = FNV64_OFFSET_BASIS
    for byte in b:
        h = ((h ^ byte) * FNV64_PRIME) & _MASK64
    return h


def fnv1a64(s: str) -> int:
    """Return the 64-bit FNV-1a hash of the UTF-8 encoding of ``s`` as an int in [0, 2**64).

    O(len(s)) time and O(len(s)) memory (the encoded copy). Raises TypeError for non-str and
    UnicodeEncodeError for strings with lone surrogates.
    """
    if not isinstance(s, str):
        raise TypeError(f"fnv1a64() argument must be str, not {type(s).__name__}")
    return fnv1a64_bytes(s.encode("utf-8"))


def fnv1a64_hex(s: str) -> str:
    """Return ``fnv1a64(s)`` rendered as ``'0x'`` + 16 lowercase hex digits (SPEC S7.10). O(len(s))."""
    return f"0x{fnv1a64(s):016x}"
