"""Pure-Python twins of ext.entry.Entry, ext.entry.Event and ext.entry.WindowEvent (test oracles and RESIDENCY_PURE_PYTHON=1)."""
from __future__ import annotations

import struct
import zlib


class CodecBase:
    """The compiled base's key prefix (the twin's entries keep their key as a str: nothing is left out)."""
    __slots__ = ("key_prefix", "key_prefix_str")

    def __init__(self, key_prefix: str = ""):
        self.key_prefix_str = key_prefix
        self.key_prefix = key_prefix.encode("utf-8")


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

    @property
    def stored_size(self) -> int:
        return len(self.stored)

    def compress(self, frame: bytes, codec) -> None:
        if not isinstance(frame, bytes):
            raise TypeError("frame must be bytes")
        self.stored = frame
        self.codec = codec

    def __sizeof__(self) -> int:
        return object.__sizeof__(self) + (self.stored.__sizeof__() if self.codec is None else len(self.stored))

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


_HEAD = struct.Struct("<HIqIQI")   # ext.entry's packed entry head (30 bytes)


def pack_entries(rows: list) -> bytes:
    """Twin of ext.entry.pack_entries."""
    out = [len(rows).to_bytes(4, "little")]
    for key, rv, data, slot, uid_hash, codec_id in rows:
        if not isinstance(key, str) or not isinstance(data, bytes):
            raise TypeError("a saved entry's key is a str and its data bytes")
        k = key.encode("utf-8")
        if len(k) > 0xFFFF or len(data) > 0xFFFFFFFF or slot > 0xFFFFFFFF or codec_id > 0xFFFFFFFF:
            raise OverflowError("a saved entry's key is at most 65,535 bytes and its data at most 4 GiB")
        if slot < 0 or codec_id < 0 or uid_hash < 0:
            raise OverflowError("a saved entry's slot, uid hash and codec id are unsigned")
        out += [_HEAD.pack(len(k), len(data), rv, slot, uid_hash, codec_id), k, data]
    return b"".join(out)


def restore_packed(buf, after: str, prefix: str, slots: list, append, codecs: dict, newest: tuple):
    """Twin of ext.entry.restore_packed."""
    buf = bytes(buf)   # a copy: no view of the caller's buffer outlives the call (an exception's frame keeps locals)
    ncompressed = compressed_bytes = 0
    plain = []
    top_key, top = newest
    if len(buf) < 4:
        raise ValueError("truncated entries chunk")
    count, pos = int.from_bytes(buf[:4], "little"), 4
    for _ in range(count):
        if len(buf) - pos < _HEAD.size:
            raise ValueError("truncated entries chunk")
        klen, dlen, rv, slot, uid_hash, codec_id = _HEAD.unpack_from(buf, pos)
        pos += _HEAD.size
        if len(buf) - pos < klen + dlen:
            raise ValueError("truncated entries chunk")
        key = str(buf[pos:pos + klen], "utf-8")
        pos += klen
        if key <= after or not key.startswith(prefix):
            raise ValueError(f"key {key!r} out of order or outside {prefix}")
        if slot >= len(slots) or slots[slot] is not None:
            raise ValueError(f"slot {slot} used twice or beyond the allocator's")
        data = bytes(buf[pos:pos + dlen])
        pos += dlen
        if codec_id:
            e = Entry(key, rv, data, slot, uid_hash, codecs[codec_id])
            ncompressed += 1
            compressed_bytes += dlen
        else:
            e = Entry(key, rv, data, slot, uid_hash, None)
            plain.append(e)
        slots[slot] = e
        append(key, e)
        after = key
        if rv > top:
            top_key, top = key, rv
    if pos != len(buf):
        raise ValueError("bytes after the last entry of a chunk")
    return after, (top_key, top), plain, ncompressed, compressed_bytes, count


def slots_filled(slots: list, positions) -> bool:
    """Twin of ext.entry.slots_filled."""
    for i in positions:
        if i >= len(slots):
            raise IndexError(f"slot {i} beyond {len(slots)}")
        if slots[i] is None:
            return False
    return True


def crc32(buf) -> int:
    """Twin of ext.entry.crc32."""
    return zlib.crc32(buf)


def check_frames(buf, ftype: int) -> tuple[int, int, int]:
    """Twin of ext.entry.check_frames."""
    buf = memoryview(buf)
    pos = n = 0
    while pos < len(buf) and buf[pos] == ftype:
        if len(buf) - pos < 9:
            return n, n, pos
        length, crc = struct.unpack_from("<II", buf, pos + 1)
        if length > len(buf) - pos - 9 or zlib.crc32(buf[pos + 9:pos + 9 + length]) != crc:
            return n, n, pos
        pos += 9 + length
        n += 1
    return n, -1, pos
