"""Pure-Python twins of ext.entry.Entry, ext.entry.Event and ext.entry.WindowEvent (test oracles and RESIDENCY_PURE_PYTHON=1)."""
from __future__ import annotations


class Entry:
    __slots__ = ("key", "rv", "stored", "codec", "slot", "uid_hash")

    def __init__(self, key: str, rv: int, data: bytes, slot: int, uid_hash: int, codec=None):
        self.key = key
        self.rv = rv
        self.stored = data
        self.codec = codec
        self.slot = slot
        self.uid_hash = uid_hash

    @property
    def data(self) -> bytes:
        return self.stored if self.codec is None else self.codec.decompress(self.stored)

    def compress(self, frame: bytes, codec) -> None:
        self.stored = frame
        self.codec = codec

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + self.stored.__sizeof__()

    def __repr__(self) -> str:
        return f"Entry({self.key!r}, rv={self.rv}{', compressed' if self.codec is not None else ''})"


class Event:
    __slots__ = ("type", "key", "rv", "entry", "prev", "time")

    def __init__(self, type: str, key: str, rv: int, entry, prev, time: float):
        self.type = type
        self.key = key
        self.rv = rv
        self.entry = entry
        self.prev = prev
        self.time = time

    def __repr__(self) -> str:
        return f"Event({self.type}, {self.key!r}, rv={self.rv})"


class WindowEvent:
    __slots__ = ("entry", "prev", "time")

    def __init__(self, entry: Entry, prev, time: float):
        if entry is None:
            raise TypeError("entry must not be None")
        self.entry = entry
        self.prev = prev
        self.time = time

    @property
    def type(self) -> str:
        if self.entry.slot < 0:
            return "DELETED"
        return "ADDED" if self.prev is None else "MODIFIED"

    @property
    def key(self) -> str:
        return self.entry.key

    @property
    def rv(self) -> int:
        return self.entry.rv

    def __repr__(self) -> str:
        return f"Event({self.type}, {self.key!r}, rv={self.rv})"


def restore_entries(entries, after: str, prefix: str, slots: list, insert, codecs: dict, newest: tuple):
    """Twin of ext.entry.restore_entries."""
    ncompressed = compressed_bytes = 0
    plain = []
    top_key, top = newest
    for key, rv, data, slot, uid_hash, codec_id in entries:
        if not isinstance(key, str) or not isinstance(data, bytes):
            raise TypeError("a saved entry's key is a str and its data bytes")
        if key <= after or not key.startswith(prefix):
            raise ValueError(f"key {key!r} out of order or outside {prefix}")
        if slot < 0 or slot >= len(slots) or slots[slot] is not None:
            raise ValueError(f"slot {slot} used twice or beyond the allocator's")
        if codec_id:
            e = Entry(key, rv, data, slot, uid_hash, codecs[codec_id])
            ncompressed += 1
            compressed_bytes += len(data)
        else:
            e = Entry(key, rv, data, slot, uid_hash, None)
            plain.append(e)
        slots[slot] = e
        insert(key, e)
        after = key
        if rv > top:
            top_key, top = key, rv
    return after, (top_key, top), plain, ncompressed, compressed_bytes
