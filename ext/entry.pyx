# cython: language_level=3, binding=True
"""The watch cache's per-object record, as small as a Python object can be.

`Entry` holds the storage key, the stored bytes, the resourceVersion and the
UID's FNV-1a 64 hash as C integers (a Python int each would cost 28-36 B
more), and the dense slot id used by the roaring bitmaps. The B-tree keeps
the entry itself in its key's place (ext/btree.pyx compares the key the
entry holds), so there is no second reference to the key.

The stored bytes are the wire bytes (a bytes object shared with the event
that brought them), or, once the entry is cold and its resource's compressor
has shrunk it (cache/compression.py), a zstd frame of them kept in a memory
block of the entry's own (no bytes header) that `codec.decompress` turns
back into exactly those bytes: `data` is always the wire bytes, so no reader
can tell. A compressed entry keeps its key's UTF-8 in that block too, in
front of the frame, instead of a str (49 B of header on CPython 3.11, more
than a compressed RoleBinding's whole frame at times); `key` decodes it
when asked. A codec never references entries, so an entry still cannot be
part of a reference cycle and is not tracked by the garbage collector
(saves the 16 B GC header).
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy


cdef class CodecBase:
    """Base class of what decodes compressed entries (cache/compression.py's Codec): the key prefix its entries
    leave out of their blocks, given once (a resource's entries all start with its prefix: 16-30 B of each
    RBAC object's key)."""

    def __init__(self, str key_prefix=""):
        self.key_prefix_str = key_prefix
        self.key_prefix = key_prefix.encode("utf-8")


@cython.no_gc
@cython.final
cdef class Entry:
    # Fields: ext/entry.pxd (ext.btree reads the key through them). A bytes object costs 33 B of header on top
    # of its contents (a 60 B RoleBinding frame took 96 B of pymalloc as bytes, 64 B as a block), and there is
    # no room for an eighth field without growing the record from 64 to 80 B: `_stored` serves both forms.

    def __cinit__(self, str key, int64_t rv, bytes data, int64_t slot, uint64_t uid_hash, object codec=None):
        if slot < -1 or slot > 0x7FFFFFFF:
            raise OverflowError(f"slot {slot} out of range")
        self._key = key
        self.rv = rv
        self.slot = <int32_t>slot
        self.uid_hash = uid_hash
        if codec is None:
            _set_plain(self, data)
        else:
            _set_frame(self, PyBytes_AS_STRING(data), len(data), codec)
        self.codec = codec

    def __dealloc__(self):
        _release(self)

    @property
    def key(self):
        """The storage key (a str made from the block's UTF-8 each time for a compressed entry)."""
        return entry_key(self)

    @property
    def stored(self):
        """The wire bytes, or (compressed) a copy of the frame as bytes."""
        if self.codec is None:
            return <object>self._stored
        return PyBytes_FromStringAndSize(_frame(self), self.flen)

    @property
    def stored_size(self):
        """len(stored), without copying a frame."""
        if self.codec is None:
            return PyBytes_GET_SIZE(<object>self._stored)
        return self.flen

    @property
    def data(self):
        """The wire bytes (decoded from the frame if the entry is compressed). The frame is copied to a bytes
        first, under the GIL: the decoder may release it, and a frame block can be replaced meanwhile."""
        if self.codec is None:
            return <object>self._stored
        return self.codec.decompress(PyBytes_FromStringAndSize(_frame(self), self.flen))

    def compress(self, bytes frame not None, object codec):
        """Keep `frame` instead of the wire bytes (or, with codec None, go back to these wire bytes); the
        compressor checked that `codec` decodes it back."""
        if codec is None:
            _set_plain(self, frame)
        else:
            _set_frame(self, PyBytes_AS_STRING(frame), len(frame), codec)
        self.codec = codec

    def __sizeof__(self):
        """The record, its bytes and its key (a str, or the UTF-8 in the frame's block, less the prefix the codec
        holds; the codec is counted by its resource). O(1)."""
        cdef Py_ssize_t n = Py_TYPE_BASICSIZE(self)
        if self._key is not None:
            n += (<object>self._key).__sizeof__()
        if self.codec is None:
            return n + (<object>self._stored).__sizeof__()
        return n + 2 + _klen(self) + self.flen

    def __repr__(self):
        return f"Entry({self.key!r}, rv={self.rv}{', compressed' if self.codec is not None else ''})"


cdef const char* entry_key_utf8(Entry e, Py_ssize_t* n, const char** prefix, Py_ssize_t* prefix_n) except NULL:
    """The key's UTF-8 in two parts, borrowed: `prefix` (the codec's, left out of the block; length 0 if none)
    then the returned `n` bytes (the block's, or the key str's own for a plain entry)."""
    prefix_n[0] = 0
    if e._key is None:
        if _elided(e):
            prefix[0] = PyBytes_AS_STRING((<CodecBase>e.codec).key_prefix)
            prefix_n[0] = PyBytes_GET_SIZE((<CodecBase>e.codec).key_prefix)
        n[0] = _klen(e)
        return <const char*>e._stored + 2
    return PyUnicode_AsUTF8AndSize(e._key, n)


cdef str entry_key(Entry e):
    cdef str rest
    if e._key is not None:
        return <str>e._key
    rest = PyUnicode_DecodeUTF8(<const char*>e._stored + 2, _klen(e), "strict")
    if _elided(e):
        return (<CodecBase>e.codec).key_prefix_str + rest
    return rest


# Module functions, not cdef methods: a cdef method would add a vtable pointer to every entry (72 B, not 64).
cdef inline Py_ssize_t _klen(Entry e) noexcept:
    """Bytes of key UTF-8 in a compressed entry's block (0 when the key stayed a str)."""
    cdef const unsigned char* b = <const unsigned char*>e._stored
    return b[0] | (<Py_ssize_t>(b[1] & 0x7F) << 8)


cdef inline bint _elided(Entry e) noexcept:
    """Whether a compressed entry's block leaves its codec's key prefix out."""
    return (<const unsigned char*>e._stored)[1] & 0x80


cdef inline const char* _frame(Entry e) noexcept:
    return <const char*>e._stored + 2 + _klen(e)


cdef inline void _release(Entry e) noexcept:
    if e._stored != NULL:
        if e.codec is None:
            _decref(<PyObject*>e._stored)
        else:
            PyMem_Free(e._stored)
        e._stored = NULL


cdef int _set_plain(Entry e, bytes data) except -1:
    """Hold `data` itself (the caller then sets `codec` to None; what the entry held before is released, a key
    kept in a frame's block becomes a str again first)."""
    if e._key is None:
        e._key = entry_key(e)
    _incref(<PyObject*>data)   # first: `data` may be what the entry holds
    _release(e)
    e._stored = <void*>data
    return 0


cdef int _set_frame(Entry e, const char* p, Py_ssize_t n, object codec) except -1:
    """Copy a frame into a block of the entry's own, the key's UTF-8 in front of it less the key prefix `codec`
    holds (the caller then sets `codec`; what the entry held before is released). A key whose rest is over
    32,767 bytes of UTF-8 stays a str."""
    cdef void* block
    cdef const char* k
    cdef const char* pre
    cdef Py_ssize_t klen, pre_n, cut = 0
    cdef bytes whole = None
    cdef bytes kp
    cdef unsigned int flag = 0
    cdef bint key_in_block = True
    if n > 0xFFFFFFFF:
        raise OverflowError("a frame over 4 GiB")
    k = entry_key_utf8(e, &klen, &pre, &pre_n)     # from the str, or from the block being replaced
    if pre_n:   # that block left its codec's prefix out: the whole key first
        whole = PyBytes_FromStringAndSize(pre, pre_n) + PyBytes_FromStringAndSize(k, klen)
        k = PyBytes_AS_STRING(whole)
        klen = PyBytes_GET_SIZE(whole)
    if isinstance(codec, CodecBase):
        kp = (<CodecBase>codec).key_prefix
        if kp is not None and 0 < PyBytes_GET_SIZE(kp) <= klen and \
                memcmp(k, PyBytes_AS_STRING(kp), PyBytes_GET_SIZE(kp)) == 0:
            cut = PyBytes_GET_SIZE(kp)
            flag = 0x80
    k += cut
    klen -= cut
    if klen > 0x7FFF:
        if e._key is None:
            e._key = entry_key(e)   # (from the block being replaced, before it goes)
        klen = 0
        flag = 0
        key_in_block = False
    block = PyMem_Malloc(2 + klen + n)
    if block == NULL:
        raise MemoryError()
    (<unsigned char*>block)[0] = <unsigned char>(klen & 0xFF)
    (<unsigned char*>block)[1] = <unsigned char>((klen >> 8) | flag)
    memcpy(<char*>block + 2, k, klen)
    memcpy(<char*>block + 2 + klen, p, n)
    _release(e)
    e._stored = block
    e.flen = <uint32_t>n
    if key_in_block:
        e._key = None
    return 0


@cython.no_gc
@cython.final
cdef class Event:
    """One applied event of a watch cache's window (cache/watch_cache.py): type, key, resourceVersion, the
    entry it produced (for DELETED the last state at the delete's RV), the entry it replaced (None for
    ADDED), and when it was applied. The window holds up to 102,400 of them per resource, so they are as
    small as the entry: the RV and the time as C numbers (a Python int and float would cost 56 B more), and
    no GC header (an event references entries and strings only, so it cannot be part of a cycle)."""
    cdef readonly str type       # ADDED | MODIFIED | DELETED (the interned literals)
    cdef readonly object key
    cdef readonly object entry
    cdef readonly object prev
    cdef readonly int64_t rv
    cdef readonly double time

    def __cinit__(self, str type, str key, int64_t rv, object entry, object prev, double time):
        self.type = type
        self.key = key
        self.rv = rv
        self.entry = entry
        self.prev = prev
        self.time = time

    def __sizeof__(self):
        return Py_TYPE_BASICSIZE(self)

    def __repr__(self):
        return f"Event({self.type}, {self.key!r}, rv={self.rv})"


@cython.no_gc
@cython.final
cdef class WindowEvent:
    """An event of a watch cache's own window (cache/watch_cache.py), 48 B where `Event` takes 64: only the
    entry it produced, the entry it replaced and when. Its key and RV are the entry's (the cache makes a new
    entry per event, at the event's RV), and its type follows from them: a DELETED event's entry is the
    tombstone (slot -1, never a stored entry's), an ADDED one replaced nothing. The front's window, whose
    entries carry no RV nor slot, keeps `Event`."""
    cdef readonly Entry entry
    cdef readonly object prev
    cdef readonly double time

    def __cinit__(self, Entry entry not None, object prev, double time):
        self.entry = entry
        self.prev = prev
        self.time = time

    @property
    def type(self):
        if self.entry.slot < 0:
            return "DELETED"
        return "ADDED" if self.prev is None else "MODIFIED"

    @property
    def key(self):
        return self.entry.key

    @property
    def rv(self):
        return self.entry.rv

    def __sizeof__(self):
        return Py_TYPE_BASICSIZE(self)

    def __repr__(self):
        return f"Event({self.type}, {self.key!r}, rv={self.rv})"


cdef extern from "Python.h":
    void _incref "Py_INCREF"(PyObject* o)
    void _decref "Py_DECREF"(PyObject* o)
    const char* PyUnicode_AsUTF8AndSize(object u, Py_ssize_t* size) except NULL


cdef extern from *:
    """
    static Py_ssize_t Py_TYPE_BASICSIZE(PyObject *o) { return Py_TYPE(o)->tp_basicsize; }
    """
    Py_ssize_t Py_TYPE_BASICSIZE(object o)


# --- a warm start's saved entries (cache/snapshot.py) -----------------------------------------------------
#
# A chunk of entries packed as the snapshot file keeps them: u32 count, then per entry a 30-byte head
# (u16 key length, u32 stored length, i64 rv, u32 slot, u64 uid hash, u32 codec id, 0 for plain; little-endian)
# followed by the key's UTF-8 and the stored bytes. Read straight from the file's memory map: no per-entry
# tuple or ints are made on the way (msgpack's unpacking was about a sixth of a 280,000-object warm start).

cdef enum:
    ENTRY_HEAD = 30

cdef bytes _EMPTY = b""

cdef inline void _put(unsigned char* p, uint64_t v, int n) noexcept:
    cdef int i
    for i in range(n):
        p[i] = <unsigned char>(v >> (8 * i))


cdef inline uint64_t _get(const unsigned char* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


def pack_entries(list rows):
    """(key, rv, stored bytes, slot, uid_hash, codec id) rows packed as above. OverflowError for a key over
    65,535 bytes or stored bytes over 4 GiB; TypeError for a key that is not a str or bytes that are not bytes."""
    cdef Py_ssize_t total = 4, pos = 4, klen, dlen
    cdef list keys = []
    cdef bytes k, data, out
    cdef unsigned char* p
    cdef int64_t rv
    cdef uint64_t slot, uid_hash, codec_id
    for row in rows:
        key = row[0]
        if type(key) is not str or type(row[2]) is not bytes:
            raise TypeError("a saved entry's key is a str and its data bytes")
        k = (<str>key).encode("utf-8")
        if len(k) > 0xFFFF or len(<bytes>row[2]) > 0xFFFFFFFF:
            raise OverflowError("a saved entry's key is at most 65,535 bytes and its data at most 4 GiB")
        keys.append(k)
        total += ENTRY_HEAD + len(k) + len(<bytes>row[2])
    if len(rows) > 0xFFFFFFFF:
        raise OverflowError("too many entries in one chunk")
    out = PyBytes_FromStringAndSize(NULL, total)
    p = <unsigned char*>PyBytes_AS_STRING(out)
    _put(p, len(rows), 4)
    for i, row in enumerate(rows):
        k = <bytes>keys[i]
        data = <bytes>row[2]
        rv, slot, uid_hash, codec_id = row[1], row[3], row[4], row[5]
        if codec_id > 0xFFFFFFFF or slot > 0xFFFFFFFF:
            raise OverflowError("a saved entry's slot and codec id are 32-bit")
        klen, dlen = len(k), len(data)
        _put(p + pos, klen, 2)
        _put(p + pos + 2, dlen, 4)
        _put(p + pos + 6, <uint64_t>rv, 8)
        _put(p + pos + 14, slot, 4)
        _put(p + pos + 18, uid_hash, 8)
        _put(p + pos + 26, codec_id, 4)
        pos += ENTRY_HEAD
        memcpy(p + pos, PyBytes_AS_STRING(k), klen)
        pos += klen
        memcpy(p + pos, PyBytes_AS_STRING(data), dlen)
        pos += dlen
    return out


def restore_packed(const unsigned char[::1] buf, str after, str prefix, list slots, object append, dict codecs,
                   tuple newest):
    """A warm start's chunk of saved entries (`pack_entries`' bytes, read-only buffers welcome) installed
    (cache/watch_cache.py `WatchCache.add_restored`, which documents the checks): each made an Entry, put in
    `slots` and the B-tree (`append`: keys come in order). ValueError for a truncated or overlong chunk, a key
    out of order or outside the prefix, a slot used twice or beyond the allocator's, bytes that are not UTF-8;
    KeyError for an unknown codec. Returns (the last key, the (key, rv) of the newest entry so far, the entries
    kept plain, how many are compressed, their stored bytes, how many entries)."""
    cdef Py_ssize_t size = buf.shape[0], pos = 4, nslots = len(slots), ncompressed = 0, compressed_bytes = 0
    cdef Py_ssize_t klen, dlen, j, count
    cdef int64_t rv, top
    cdef uint64_t slot, uid_hash, codec_id
    cdef const unsigned char* p
    cdef str key, top_key
    cdef Entry e
    cdef list plain = []
    top_key, top = newest
    if size < 4:
        raise ValueError("truncated entries chunk")
    p = &buf[0]
    count = <Py_ssize_t>_get(p, 4)
    for j in range(count):
        if size - pos < ENTRY_HEAD:
            raise ValueError("truncated entries chunk")
        klen = <Py_ssize_t>_get(p + pos, 2)
        dlen = <Py_ssize_t>_get(p + pos + 2, 4)
        rv = <int64_t>_get(p + pos + 6, 8)
        slot = _get(p + pos + 14, 4)
        uid_hash = _get(p + pos + 18, 8)
        codec_id = _get(p + pos + 26, 4)
        pos += ENTRY_HEAD
        if size - pos < klen + dlen:
            raise ValueError("truncated entries chunk")
        key = PyUnicode_DecodeUTF8(<const char*>(p + pos), klen, "strict")
        pos += klen
        if key <= after or not key.startswith(prefix):
            raise ValueError(f"key {key!r} out of order or outside {prefix}")
        if slot >= <uint64_t>nslots or slots[slot] is not None:
            raise ValueError(f"slot {slot} used twice or beyond the allocator's")
        # Made with zeros (cached small ints) and the C fields set here: passing them to the constructor would
        # make and free three Python ints per entry. A frame goes straight from the buffer to its block.
        if codec_id:
            codec = codecs[codec_id]
            e = Entry(key, 0, _EMPTY, 0, 0, None)
            _set_frame(e, <const char*>(p + pos), dlen, codec)
            e.codec = codec
            ncompressed += 1
            compressed_bytes += dlen
        else:
            e = Entry(key, 0, PyBytes_FromStringAndSize(<const char*>(p + pos), dlen), 0, 0, None)
            plain.append(e)
        pos += dlen
        e.rv, e.slot, e.uid_hash = rv, <int32_t>slot, uid_hash
        slots[slot] = e
        append(e, e)        # the tree keeps the entry in its key's place
        after = key
        if rv > top:
            top_key, top = key, rv
    if pos != size:
        raise ValueError("bytes after the last entry of a chunk")
    return after, (top_key, top), plain, ncompressed, compressed_bytes, count


def slots_filled(list slots, const unsigned int[::1] positions):
    """Whether `slots` holds an entry (not None) at every position listed (a bitmap's `to_array()`); IndexError
    for a position beyond it. A warm start checks its saved index against the entries it restored this way."""
    cdef Py_ssize_t i, n = len(slots)
    for i in range(positions.shape[0]):
        if positions[i] >= n:
            raise IndexError(f"slot {positions[i]} beyond {n}")
        if slots[positions[i]] is None:
            return False
    return True


# --- the snapshot file's frames, checked off the event loop's thread -----------------------------------------
#
# CRC-32 as zlib computes it (IEEE, reflected, polynomial 0xEDB88320), sliced by 8 bytes, here so that a whole
# section's frames can be checked without the GIL: zlib.crc32 releases it too, but a thread calling it once per
# chunk waits for the GIL (up to the 5 ms switch interval) before and after each call while the event loop's
# thread installs entries, and ended up waiting in line with it.

cdef uint32_t _crc_table[8][256]


cdef void _crc_init() noexcept:
    cdef uint32_t c
    cdef int i, j, k
    for i in range(256):
        c = i
        for j in range(8):
            c = (c >> 1) ^ (<uint32_t>0xEDB88320 if c & 1 else <uint32_t>0)
        _crc_table[0][i] = c
    for i in range(256):
        c = _crc_table[0][i]
        for k in range(1, 8):
            c = _crc_table[0][c & 0xFF] ^ (c >> 8)
            _crc_table[k][i] = c


_crc_init()


cdef uint32_t _crc32(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t crc = ~(<uint32_t>0)
    cdef uint32_t one, two
    while n >= 8:
        one = <uint32_t>_get(p, 4) ^ crc
        two = <uint32_t>_get(p + 4, 4)
        crc = (_crc_table[7][one & 0xFF] ^ _crc_table[6][(one >> 8) & 0xFF] ^
               _crc_table[5][(one >> 16) & 0xFF] ^ _crc_table[4][one >> 24] ^
               _crc_table[3][two & 0xFF] ^ _crc_table[2][(two >> 8) & 0xFF] ^
               _crc_table[1][(two >> 16) & 0xFF] ^ _crc_table[0][two >> 24])
        p += 8
        n -= 8
    while n > 0:
        crc = _crc_table[0][(crc ^ p[0]) & 0xFF] ^ (crc >> 8)
        p += 1
        n -= 1
    return ~crc


def crc32(const unsigned char[::1] buf):
    """zlib.crc32 of `buf` (tests compare the two)."""
    if buf.shape[0] == 0:
        return 0
    return _crc32(&buf[0], buf.shape[0])


def check_frames(const unsigned char[::1] buf, int ftype):
    """Walk the consecutive frames of type `ftype` at the start of `buf` (cache/snapshot.py: u8 type, u32 payload
    length, u32 CRC-32 of the payload, the payload), checking each payload's CRC-32 without the GIL. Returns (how
    many checked out, the index of the first that did not, or that runs past the end, -1 if none, the offset
    where the walk stopped: the first frame of another type, or the end)."""
    cdef Py_ssize_t size = buf.shape[0], pos = 0, n = 0, bad = -1, length
    cdef const unsigned char* p
    if size == 0:
        return 0, -1, 0
    p = &buf[0]
    with nogil:
        while pos < size and p[pos] == ftype:
            if size - pos < 9:
                bad = n
                break
            length = <Py_ssize_t>_get(p + pos + 1, 4)
            if length > size - pos - 9 or _crc32(p + pos + 9, length) != <uint32_t>_get(p + pos + 5, 4):
                bad = n
                break
            pos += 9 + length
            n += 1
    return n, bad, pos
