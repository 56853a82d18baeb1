"""Watch cache snapshots for a warm restart (issue 10).

A process writes every ready cache's state to one file in `<state-dir>/watch-cache/` on shutdown and
periodically; on start each Cacher loads its section, checks it against etcd, and resumes its etcd watch
from the saved revision instead of listing the whole resource (cache/cacher.py, `Cacher._warm_start`).

File layout (little-endian), version 3 (2 kept entries as msgpack tuples, 1 had no codecs; such files are refused
as another version):

```
header   MAGIC (8) | u32 version | frame(META)
section  frame(SECTION) frame(ENTRIES)* frame(SECTION_END)        one per cache, one after another
index    frame(INDEX)                                              {"group/resource": [offset, length]}
trailer  u64 offset of the INDEX frame | END_MAGIC (8)
frame    u8 type | u32 payload length | u32 crc32(payload) | payload (msgpack; ENTRIES: packed, below)
```

An entry is saved as the cache holds it, compressed or not (cache/compression.py), and restored without
decompressing: (key, rv, stored bytes, slot, uid hash, codec id, 0 for plain), with the section's codecs
(their dictionaries) in its SECTION frame. An ENTRIES payload is `ext.pack_entries`' format (a fixed head per
entry, then its key and bytes), which `ext.restore_packed` installs straight from the file's memory map. A
dictionary is made of the resource's objects, so the file is created readable by its owner only (as etcd's data
directory is).

A file is written to a temporary name, fsynced and renamed over the previous one, so a reader sees a
whole old file or a whole new one. Whatever happens to it afterwards (torn, truncated, bit flips, another
version) is found by the magics, the lengths and the per-frame CRC32s: a section is installed only when
every frame of it checked out, otherwise the cache lists from etcd as without a snapshot (counted in
`apiserver_watch_cache_snapshot_loads_total{result="corrupt"}` and logged).

Writing does not stop the event loop for long and does not copy the cache: the entries are read from a
copy-on-write B-tree snapshot taken at one instant together with the (small) bitmap indexes, packed a
chunk at a time with a yield to the loop between chunks, and written as they are packed.
"""
from __future__ import annotations

import asyncio
import glob
import hashlib
import logging
import mmap
import os
import struct
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import msgpack
from pyroaring import BitMap

import ext

from . import metrics
from .compression import Codec
from .watch_cache import Indexes, WatchCache

log = logging.getLogger("cache.snapshot")

MAGIC = b"RSWCSNAP"
END_MAGIC = b"RSWCEND\x00"
FORMAT_VERSION = 3
META, SECTION, ENTRIES, SECTION_END, INDEX = 1, 2, 3, 4, 9
_FRAME = struct.Struct("<BII")
_TRAILER = struct.Struct("<Q8s")
CHUNK_ENTRIES = 2000          # entries per ENTRIES frame (one pack, then a yield to the event loop)
# ... and at most about this many bytes of them: a compressed entry's frame is copied out as a bytes to be packed,
# so 2,000 frames of a 100 KB ConfigMap (~47 KB each) were 94 MB of heap, then the 94 MB frame, freed between the
# cache's live blocks where glibc kept them: a K = 4 shard of the 1.66 GB state-bound slice held ~90 MiB more RSS
# for the 10-20 s after each snapshot (260 -> 350 MiB, /proc/PID/smaps_rollup every 10 s), until a trim.
CHUNK_BYTES = 4 << 20
MAX_FRAME = 1 << 31           # a length beyond this is corruption, not a frame to allocate
STALE_SECONDS = 24 * 3600     # other processes' snapshot files untouched this long are removed when we write
DIRNAME = "watch-cache"


class SnapshotError(Exception):
    """The file or a section cannot be used (torn, truncated, corrupt, another version or identity)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason   # corrupt | version | mismatch


def snapshot_path(state_dir: str, etcd_prefix: str, residency: str, clusters: dict[str, str]) -> str:
    """One file per identity of the data: the key prefix, the residency and the cluster id of every etcd the
    process reads (`clusters`: "" for the default etcd, "group/resource" for each override, to its cluster id
    in hex). Not the etcd URLs: the embedded etcd gets a new free port at every start while its cluster id,
    kept in its data directory, stays, so a restart finds the file it wrote (and writes no second one).
    Processes over different etcds sharing a state directory do not overwrite each other's file; replicas of
    one configuration share theirs (either's state is right for both, and each is checked against etcd, its
    revision and a probe of its objects, when loaded)."""
    ident = "\n".join([etcd_prefix, residency, *(f"{k}={v}" for k, v in sorted(clusters.items()))])
    return os.path.join(state_dir, DIRNAME, hashlib.sha1(ident.encode()).hexdigest()[:16] + ".snap")


# --- the indexes: serialised bitmaps ------------------------------------------------------------------------

def dump_indexes(ix: Indexes) -> dict[str, Any]:
    return {"all": ix.all.serialize(),
            "ns": [[k, b.serialize()] for k, b in ix.by_namespace.items()],
            # a value with one object is its slot (Indexes keeps an int for it)
            "label": [[k, v, b if type(b) is int else b.serialize()] for (k, v), b in ix.by_label.items()],
            "key": [[k, b.serialize()] for k, b in ix.by_label_key.items()],
            "values": ix.values_per_key, "unindexed": sorted(ix.unindexed_keys)}


def load_indexes(d: dict[str, Any]) -> Indexes:
    ix = Indexes()
    de = BitMap.deserialize
    ix.all = de(d["all"])
    ix.by_namespace = {k: de(b) for k, b in d["ns"]}
    ix.by_label = {(sys.intern(k), v): b if type(b) is int else de(b) for k, v, b in d["label"]}
    ix.by_label_key = {sys.intern(k): de(b) for k, b in d["key"]}
    ix.values_per_key = dict(d["values"])
    ix.unindexed_keys = set(d["unindexed"])
    return ix


# --- writing ------------------------------------------------------------------------------------------------

@dataclass
class Capture:
    """One cache's state at one instant: an immutable B-tree snapshot plus what goes with it."""
    identity: dict[str, Any]
    rv: int
    tree: Any
    prefix: str
    indexes: dict[str, Any]
    next_slot: int
    count: int
    codecs: dict[int, Any]          # codec id -> Codec: the ones the captured entries may reference


def capture(wc: WatchCache, identity: dict[str, Any]) -> Capture:
    """Synchronous (no await): the tree snapshot, the RV and the indexes belong to the same state."""
    c = wc.compressor
    codecs = {k.id: k for k in (c.codec, c.retiring) if k is not None} if c is not None else {}
    return Capture(identity, wc.rv, wc.store.snapshot(), wc.prefix, dump_indexes(wc.indexes),
                   len(wc.slots), len(wc.store), codecs)


class _Writer:
    def __init__(self, f):
        self.f = f
        self.offset = 0

    def raw(self, b: bytes) -> None:
        self.f.write(b)
        self.offset += len(b)

    def frame(self, ftype: int, obj: Any) -> int:
        return self.packed(ftype, msgpack.packb(obj, use_bin_type=True))

    def packed(self, ftype: int, payload: bytes) -> int:
        start = self.offset
        self.raw(_FRAME.pack(ftype, len(payload), zlib.crc32(payload)))
        self.raw(payload)
        return start


async def write_snapshot(path: str, meta: dict[str, Any], captures) -> dict[str, Any]:
    """Write every capture (an async iterator of (key, Capture), taken one at a time by the caller so each
    is as fresh as possible) to `path` atomically. Returns {"bytes", "sections", "entries", "seconds"}."""
    t0 = time.perf_counter()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    loop = asyncio.get_running_loop()
    index: dict[str, list[int]] = {}
    entries = 0
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
            w = _Writer(f)
            w.raw(MAGIC + struct.pack("<I", FORMAT_VERSION))
            w.frame(META, dict(meta, version=FORMAT_VERSION, written=time.time(), pid=os.getpid()))
            async for key, cap in captures:
                start = w.offset
                codecs = cap.codecs
                w.frame(SECTION, dict(cap.identity, rv=cap.rv, count=cap.count, next_slot=cap.next_slot,
                                      indexes=cap.indexes,
                                      codecs=[[i, k.dictionary(), k.ratio] for i, k in codecs.items()]))
                n = 0
                it = iter(cap.tree.iter_from(cap.prefix))
                more = True
                while more:
                    chunk, size, more = [], 0, False
                    for k, e in it:
                        if not k.startswith(cap.prefix):
                            break
                        codec = e.codec
                        if codec is None:
                            row = (k, e.rv, e.stored, e.slot, e.uid_hash, 0)
                        elif codecs.get(codec.id) is codec:
                            row = (k, e.rv, e.stored, e.slot, e.uid_hash, codec.id)
                        else:  # compressed after the capture with a codec the section does not carry
                            row = (k, e.rv, e.data, e.slot, e.uid_hash, 0)
                        chunk.append(row)
                        size += len(row[2])
                        if len(chunk) == CHUNK_ENTRIES or size >= CHUNK_BYTES:
                            more = True
                            break
                    if not chunk:
                        break
                    w.packed(ENTRIES, ext.pack_entries(chunk))
                    n += len(chunk)
                    del chunk   # (the frames' copies go before the loop runs others)
                    await asyncio.sleep(0)
                if n != cap.count:
                    raise RuntimeError(f"{key}: {n} entries written, {cap.count} captured")
                w.frame(SECTION_END, {"count": n})
                index[key] = [start, w.offset - start]
                entries += n
            at = w.frame(INDEX, index)
            w.raw(_TRAILER.pack(at, END_MAGIC))
            f.flush()
            await loop.run_in_executor(None, os.fsync, f.fileno())
        os.replace(tmp, path)
        _fsync_dir(os.path.dirname(path))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _remove_stale(path)
    return {"bytes": w.offset, "sections": len(index), "entries": entries, "seconds": time.perf_counter() - t0}


def _fsync_dir(d: str) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_stale(path: str) -> None:
    """Snapshot files (and temporaries of killed writers) in our directory untouched for a day: nothing
    could resume from them (etcd compacts every 5 minutes by default)."""
    now = time.time()
    for p in glob.glob(os.path.join(os.path.dirname(path), "*.snap*")):
        if p == path:
            continue
        try:
            if now - os.stat(p).st_mtime > STALE_SECONDS:
                os.unlink(p)
        except OSError:
            pass


# --- reading ------------------------------------------------------------------------------------------------

class _Reader:
    """Frames from a file, or from a memory map of it (`buf`: no copy of the payloads before unpacking)."""

    def __init__(self, f, end: int, buf=None):
        self.f = f
        self.end = end
        self.buf = buf
        self.pos = f.tell() if buf is None else 0

    def peek_type(self) -> int:
        if self.buf is not None:
            return self.buf[self.pos] if self.pos < self.end else -1
        b = self.f.read(1)
        self.f.seek(-len(b), os.SEEK_CUR)
        return b[0] if b else -1

    def _read(self, n: int):
        if self.buf is not None:
            out = self.buf[self.pos:self.pos + n]
        else:
            out = self.f.read(n)
        self.pos += len(out)
        return out

    def frame(self, expect: int) -> Any:
        payload = self.payload(expect)
        try:
            try:
                return msgpack.unpackb(payload, raw=False, strict_map_key=False)
            except Exception as e:  # a frame whose CRC matched but does not decode: a bug or a forgery
                raise SnapshotError("corrupt", f"frame does not decode: {e!r}") from None
        finally:
            if isinstance(payload, memoryview):
                payload.release()

    def payload(self, expect: int):
        """The next frame's payload, checked (type, length, CRC): a view into the memory map (the caller
        releases it) or bytes."""
        payload, crc = self.unchecked(expect)
        if zlib.crc32(payload) != crc:
            if isinstance(payload, memoryview):
                payload.release()
            raise SnapshotError("corrupt", "frame checksum mismatch")
        return payload

    def unchecked(self, expect: int):
        """(the next frame's payload, the CRC32 its header gives): type and length checked, the CRC is the
        caller's to check before the payload's contents count."""
        raw = self._read(_FRAME.size)
        head = bytes(raw)
        if isinstance(raw, memoryview):
            raw.release()
        if len(head) < _FRAME.size:
            raise SnapshotError("corrupt", "truncated frame header")
        ftype, n, crc = _FRAME.unpack(head)
        if ftype != expect:
            raise SnapshotError("corrupt", f"frame type {ftype}, expected {expect}")
        if n > MAX_FRAME or self.pos + n > self.end:
            raise SnapshotError("corrupt", f"frame length {n} beyond the file")
        payload = self._read(n)
        if len(payload) != n:
            if isinstance(payload, memoryview):
                payload.release()
            raise SnapshotError("corrupt", "truncated frame")
        return payload, crc


@dataclass
class Section:
    path: str
    offset: int
    length: int


class SnapshotFile:
    """A snapshot file's header and index, read at start; sections are loaded by each Cacher."""

    def __init__(self, path: str, meta: dict[str, Any], sections: dict[str, Section]):
        self.path = path
        self.meta = meta
        self.sections = sections

    @classmethod
    def open(cls, path: str) -> "SnapshotFile":
        """Raise FileNotFoundError (no snapshot) or SnapshotError (unusable)."""
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(len(MAGIC) + 4)
            if len(head) < len(MAGIC) + 4 or head[:len(MAGIC)] != MAGIC:
                raise SnapshotError("corrupt", "not a watch cache snapshot (bad magic)")
            version = struct.unpack("<I", head[len(MAGIC):])[0]
            if version != FORMAT_VERSION:
                raise SnapshotError("version", f"format version {version}, this server reads {FORMAT_VERSION}")
            if size < f.tell() + _TRAILER.size:
                raise SnapshotError("corrupt", "truncated (no trailer)")
            meta = _Reader(f, size - _TRAILER.size).frame(META)
            f.seek(size - _TRAILER.size)
            at, end = _TRAILER.unpack(f.read(_TRAILER.size))
            if end != END_MAGIC or at >= size:
                raise SnapshotError("corrupt", "truncated or torn (bad trailer)")
            f.seek(at)
            index = _Reader(f, size - _TRAILER.size).frame(INDEX)
        sections = {}
        for key, (off, length) in index.items():
            if off + length > at:
                raise SnapshotError("corrupt", f"section {key} beyond the index")
            sections[key] = Section(path, off, length)
        return cls(path, meta, sections)

    def section_head(self, key: str) -> dict[str, Any]:
        """A section's identity, RV and count (tools and tests)."""
        s = self.sections[key]
        with open(self.path, "rb") as f:
            f.seek(s.offset)
            head = _Reader(f, s.offset + s.length).frame(SECTION)
        head.pop("indexes", None)
        return head


def open_snapshot(path: str) -> tuple[SnapshotFile | None, str]:
    """(the snapshot at `path`, "") or (None, why not: missing, corrupt, version; logged and counted)."""
    try:
        return SnapshotFile.open(path), ""
    except FileNotFoundError:
        return None, "missing"
    except (SnapshotError, OSError, ValueError, struct.error) as e:
        reason = e.reason if isinstance(e, SnapshotError) else "corrupt"
        metrics.snapshot_files_rejected.labels(reason).inc()
        log.warning("watch cache snapshot ignored path=%s reason=%s error=%s", path, reason, e)
        return None, reason


@dataclass
class Loaded:
    rv: int
    count: int
    newest: tuple[str, int] | None   # (key, rv) of the entry with the greatest RV (the etcd probe)
    seconds: float


_crc_threads: ThreadPoolExecutor | None = None


def _crc_pool() -> ThreadPoolExecutor:
    global _crc_threads
    if _crc_threads is None:
        _crc_threads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot-crc")
    return _crc_threads


async def load_section(section: Section, wc: WatchCache, identity: dict[str, Any],
                       on_head: Callable[[int], None] | None = None) -> Loaded:
    """Install a section into `wc` (begin_replace ... finish_replace): every frame is checked (the ENTRIES frames'
    CRCs on another thread while they are installed, before the section is used) and any failure raises
    SnapshotError with `wc` reset to empty, so a half-loaded state is never left behind.
    `on_head(rv)` is called once the section's identity is checked, before its entries load. Yields to the event
    loop between chunks."""
    t0 = time.perf_counter()
    wc.begin_replace()
    try:
        with open(section.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if section.offset + section.length > len(m):
                raise SnapshotError("corrupt", "section beyond the end of the file")
            view = memoryview(m)[section.offset:section.offset + section.length]
            try:
                r = _Reader(f, section.length, view)
                head = r.frame(SECTION)
                for k, v in identity.items():
                    if head.get(k) != v:
                        raise SnapshotError("mismatch", f"{k} is {head.get(k)!r}, this cache's is {v!r}")
                codecs = {int(i): Codec(int(i), d, float(r), key_prefix=wc.prefix) for i, d, r in head["codecs"]}
                if on_head is not None:
                    on_head(int(head["rv"]))
                wc.begin_restore(head["next_slot"])
                n = chunks = 0
                last_key, newest = "", ("", -1)
                # The ENTRIES frames' CRCs are checked on another core while the entries are installed
                # (ext.check_frames, without the GIL: about a tenth of a warm start's work otherwise), and the
                # result is awaited before the section is used: a damaged chunk's entries go with the section.
                rest = view[r.pos:]
                checked = _crc_pool().submit(ext.check_frames, rest, ENTRIES) if r.peek_type() == ENTRIES else None
                failed = False
                try:
                    while True:
                        ftype = r.peek_type()
                        if ftype != ENTRIES:
                            break
                        chunk, _ = r.unchecked(ENTRIES)
                        try:
                            last_key, newest, count = wc.add_restored(chunk, last_key, newest, codecs)
                        finally:
                            if isinstance(chunk, memoryview):
                                chunk.release()
                        n += count
                        chunks += 1
                        await asyncio.sleep(0)
                except BaseException:
                    failed = True
                    raise
                finally:   # the worker is done with the view before it is released
                    good, bad, _ = checked.result() if checked is not None else (0, -1, 0)
                    rest.release()
                    if not failed and (bad >= 0 or good != chunks):
                        raise SnapshotError("corrupt", "frame checksum mismatch")
                if ftype != SECTION_END:
                    raise SnapshotError("corrupt", "section ends without its end frame")
                end = r.frame(SECTION_END)
            finally:
                view.release()
            if end.get("count") != n or head.get("count") != n:
                raise SnapshotError("corrupt", f"{n} entries, the section says {end.get('count')}")
            wc.restore_indexes(load_indexes(head["indexes"]))
            if wc.compressor is not None:
                wc.compressor.restored(codecs)
        wc.finish_replace(head["rv"])
    except SnapshotError:
        wc.begin_replace()
        raise
    except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError, struct.error) as e:
        wc.begin_replace()
        raise SnapshotError("corrupt", f"{type(e).__name__}: {e}") from None
    return Loaded(head["rv"], n, newest if n else None, time.perf_counter() - t0)
