"""Pure-Python twin of ext.entry.Entry (test oracle and RESIDENCY_PURE_PYTHON=1)."""
from __future__ import annotations


class Entry:
    __slots__ = ("key", "rv", "data", "slot", "uid_hash")

    def __init__(self, key: str, rv: int, data: bytes, slot: int, uid_hash: int):
        self.key = key
        self.rv = rv
        self.data = data
        self.slot = slot
        self.uid_hash = uid_hash

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + self.data.__sizeof__()

    def __repr__(self) -> str:
        return f"Entry({self.key!r}, rv={self.rv})"
