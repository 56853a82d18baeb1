"""Pure-Python twin of :mod:`ext.framed` (same functions; the test oracle)."""
from __future__ import annotations

import struct

END = 0xFFFFFFFF
_HEAD = struct.Struct("<II")


def frame_items(keys: list, items: list) -> bytes:
    if len(keys) != len(items):
        raise ValueError("frame_items: as many keys as items")
    out = []
    for k, it in zip(keys, items):
        kb = k.encode() if isinstance(k, str) else k
        out += (_HEAD.pack(len(kb), len(it)), kb, it)
    return b"".join(out)


def frame_meta(meta: bytes) -> bytes:
    return _HEAD.pack(END, len(meta)) + meta


END_RECORD = frame_meta(b"")


def merge(bufs: list, pos: list, limit: int, ends: list | None = None) -> tuple[list[bytes], int, bytes | None]:
    if len(bufs) > 256 or len(pos) != len(bufs) or (ends is not None and len(ends) != len(bufs)):
        raise ValueError("merge: at most 256 streams, one position (and end) each")
    if any(type(b) not in (bytes, bytearray) for b in bufs):
        raise TypeError("merge: a stream is bytes or bytearray")
    if ends is not None:   # what a reader has filled of each stream
        bufs = [b[:e] if 0 <= e < len(b) else b for b, e in zip(bufs, ends)]
    if any(not 0 <= p <= len(b) for b, p in zip(bufs, pos)):
        raise ValueError("merge: a position outside its stream")
    done = [False] * len(bufs)
    items: list[bytes] = []
    last = None
    while True:
        if limit > 0 and len(items) == limit:
            return items, -2, last
        best = None
        for i, b in enumerate(bufs):
            if done[i]:
                continue
            at = pos[i]
            if len(b) - at < 8:
                return items, i, last
            kl, il = _HEAD.unpack_from(b, at)
            if kl == END:
                done[i] = True
                continue
            if len(b) - at - 8 < kl + il:
                return items, i, last
            key = bytes(b[at + 8:at + 8 + kl])
            if best is None or key < best[0]:
                best = (key, i, at + 8 + kl, il)
        if best is None:
            return items, -1, last
        key, i, start, il = best
        items.append(bytes(bufs[i][start:start + il]))
        last = key
        pos[i] = start + il


def merge_joined(bufs: list, pos: list, limit: int, lead: bool = False,
                 ends: list | None = None) -> tuple[bytes, int, int, bytes | None]:
    items, state, last = merge(bufs, pos, limit, ends)
    return (b"," if lead and items else b"") + b",".join(items), len(items), state, last


def _check_cut(keys: list, cut: int) -> None:
    if any(not 0 <= cut <= len(k) for k in keys):
        raise ValueError("a key shorter than the prefix cut from it")


def framed_size(keys: list, items: list, cut: int = 0) -> tuple[int, int]:
    if len(keys) != len(items):
        raise ValueError("framed_size: as many keys as items")
    _check_cut(keys, cut)
    nbytes = sum(len(it) for it in items)
    return sum(8 + len(k[cut:].encode()) for k in keys) + nbytes, nbytes


def frame_piece(keys: list, items: list, start: int, cut: int, piece: int) -> tuple[bytes, int]:
    if len(keys) != len(items) or not 0 <= start <= len(items):
        raise ValueError("frame_piece: as many keys as items, start within them")
    end, total = start, 0
    while end < len(items) and (end == start or total < piece):
        _check_cut([keys[end]], cut)
        total += 8 + len(keys[end][cut:].encode()) + len(items[end])
        end += 1
    return frame_items([k[cut:] for k in keys[start:end]], items[start:end]), end


def join_piece(items: list, start: int, piece: int, lead: bool = False) -> tuple[bytes, int]:
    if not 0 <= start <= len(items):
        raise ValueError("join_piece: start within the items")
    end, total = start, 0
    while end < len(items) and (end == start or total < piece):
        total += len(items[end]) + 1
        end += 1
    if end == start:
        return b"", end
    return (b"," if lead else b"") + b",".join(items[start:end]), end
