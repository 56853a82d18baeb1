# cython: language_level=3, binding=True
"""Key-framed list items between a shard and a front (hot path of front/wire.py, issue 21).

A shard asked for a framed list (``storage.interface.FRONT_FRAMED_HEADER``) answers with records: first
``<0xFFFFFFFF><u32 n><n bytes>``, the list's metadata (JSON); then each item as
``<u32 key length><u32 item length><key><item>`` (little-endian; the key is the item's key below the
request's prefix, UTF-8, what orders a list); last ``<0xFFFFFFFF><0>``. A front then merges K such streams
without parsing JSON: it compares keys and slices items.

``frame_piece(keys, items, start, cut, piece)``: the records of items from ``start`` under ``keys[i][cut:]`` (str; a
cache's whole storage keys, the list's prefix cut off without a new str) until they reach ``piece`` bytes (at least
one): ``(bytes, next start)``. ``framed_size(keys, items, cut)``: ``(bytes of every record, bytes of the items)``,
what a shard announces before it writes them.

``join_piece(items, start, piece, lead)``: items (bytes) from ``start`` comma-joined until they reach ``piece`` bytes
(at least one), with ``lead`` a comma first: ``(bytes, next start)``. What a list body holds between its
brackets, one copy per piece (a cache's list written by any apiserver).

``frame_meta(meta)``: the metadata record (``frame_meta(b"")``, ``END_RECORD``, is the end record).

``frame_items(keys, items)``: the records of items (bytes) under keys (str), one bytes.

``merge(bufs, pos, limit, ends=None)``: the K streams' item records merged by key, from ``bufs[i][pos[i]:ends[i]]``
(a stream is a bytes, or a bytearray a reader fills: ``ends[i]`` says how much of it holds data), while every
stream not yet at its end record has a whole record buffered; ``pos`` is advanced in place (an end record is
not consumed). Returns ``(items, state, last_key)``: the merged items (bytes); ``state`` -1 when every stream
is at its end record, -2 when ``limit`` (> 0) items were taken, else the index of a stream whose next record is
not whole yet; the key of the last item taken (bytes, None if none).

``merge_joined(bufs, pos, limit, lead=False, ends=None)``: the same merge, its items written as one bytes,
comma-separated (what a list body holds between its brackets), with ``lead`` a comma before the first item too (a run
that follows another): ``(joined, count, state, last_key)``. A front writing a list through uses it: no bytes object
per item, one copy, each run written as it is.

The pure-Python twin is :mod:`ext.framed_py` (same functions, used as the test oracle).
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE, PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_GET_LENGTH
from libc.stdint cimport uint32_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy


cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    void* PyUnicode_DATA(object o)

cdef uint32_t END = 0xFFFFFFFF
cdef enum:
    MAX_STREAMS = 256


cdef inline uint32_t _u32(const unsigned char* p) noexcept nogil:
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline void _put32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


def frame_items(list keys not None, list items not None) -> bytes:
    cdef Py_ssize_t n = len(items), i, total = 0, kl, il
    if len(keys) != n:
        raise ValueError("frame_items: as many keys as items")
    cdef list kb = [s.encode() if isinstance(s, str) else s for s in keys]
    for i in range(n):
        total += 8 + PyBytes_GET_SIZE(kb[i]) + PyBytes_GET_SIZE(items[i])
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    cdef bytes k, it
    for i in range(n):
        k = kb[i]
        it = items[i]
        kl = PyBytes_GET_SIZE(k)
        il = PyBytes_GET_SIZE(it)
        _put32(w, <uint32_t>kl)
        _put32(w + 4, <uint32_t>il)
        memcpy(w + 8, PyBytes_AS_STRING(k), kl)
        memcpy(w + 8 + kl, PyBytes_AS_STRING(it), il)
        w += 8 + kl + il
    return out


cdef inline Py_ssize_t _key_len(str k, Py_ssize_t cut) except -1:
    """The UTF-8 length of k[cut:] (an ASCII key's is its length, without encoding it)."""
    if cut < 0 or cut > PyUnicode_GET_LENGTH(k):
        raise ValueError("a key shorter than the prefix cut from it")
    if PyUnicode_IS_COMPACT_ASCII(k):
        return PyUnicode_GET_LENGTH(k) - cut
    return len(k[cut:].encode())


def framed_size(list keys not None, list items not None, Py_ssize_t cut=0):
    cdef Py_ssize_t n = len(items), i, total = 0, nbytes = 0, il
    if len(keys) != n:
        raise ValueError("framed_size: as many keys as items")
    for i in range(n):
        il = PyBytes_GET_SIZE(<bytes?>items[i])
        nbytes += il
        total += 8 + _key_len(<str?>keys[i], cut) + il
    return total, nbytes


def frame_piece(list keys not None, list items not None, Py_ssize_t start, Py_ssize_t cut, Py_ssize_t piece):
    cdef Py_ssize_t n = len(items), i, end, total = 0, kl, il
    cdef str k
    cdef bytes it, kb
    if len(keys) != n or start < 0 or start > n:
        raise ValueError("frame_piece: as many keys as items, start within them")
    end = start
    while end < n and (end == start or total < piece):
        total += 8 + _key_len(<str?>keys[end], cut) + PyBytes_GET_SIZE(<bytes?>items[end])
        end += 1
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    for i in range(start, end):
        k = <str>keys[i]
        it = <bytes>items[i]
        il = PyBytes_GET_SIZE(it)
        if PyUnicode_IS_COMPACT_ASCII(k):
            kl = PyUnicode_GET_LENGTH(k) - cut
            memcpy(w + 8, <const char*>PyUnicode_DATA(k) + cut, kl)
        else:
            kb = k[cut:].encode()
            kl = PyBytes_GET_SIZE(kb)
            memcpy(w + 8, PyBytes_AS_STRING(kb), kl)
        _put32(w, <uint32_t>kl)
        _put32(w + 4, <uint32_t>il)
        memcpy(w + 8 + kl, PyBytes_AS_STRING(it), il)
        w += 8 + kl + il
    return out, end


def join_piece(list items not None, Py_ssize_t start, Py_ssize_t piece, bint lead=False):
    cdef Py_ssize_t n = len(items), i, end, total = 0, il
    cdef bytes it
    if start < 0 or start > n:
        raise ValueError("join_piece: start within the items")
    end = start
    while end < n and (end == start or total < piece):
        total += PyBytes_GET_SIZE(<bytes?>items[end]) + 1
        end += 1
    if end == start:
        return b"", end
    out = PyBytes_FromStringAndSize(NULL, total - (0 if lead else 1))
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    for i in range(start, end):
        if i > start or lead:
            w[0] = 0x2C   # ','
            w += 1
        it = <bytes>items[i]
        il = PyBytes_GET_SIZE(it)
        memcpy(w, PyBytes_AS_STRING(it), il)
        w += il
    return out, end


def frame_meta(bytes meta not None) -> bytes:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(meta)
    out = PyBytes_FromStringAndSize(NULL, 8 + n)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    _put32(w, END)
    _put32(w + 4, <uint32_t>n)
    memcpy(w + 8, PyBytes_AS_STRING(meta), n)
    return out


cdef struct Pick:
    Py_ssize_t stream
    Py_ssize_t start
    Py_ssize_t length


cdef inline const unsigned char* _data(object b, Py_ssize_t* size) except NULL:
    """A stream's bytes and their size: a bytes, or a bytearray (no Python code runs during a merge, so a
    bytearray cannot be resized under it)."""
    if type(b) is bytes:
        size[0] = PyBytes_GET_SIZE(b)
        return <const unsigned char*>PyBytes_AS_STRING(b)
    if type(b) is bytearray:
        size[0] = PyByteArray_GET_SIZE(b)
        return <const unsigned char*>PyByteArray_AS_STRING(b)
    raise TypeError(f"merge: a stream is bytes or bytearray, not {type(b).__name__}")


@cython.boundscheck(False)
@cython.wraparound(False)
cdef Py_ssize_t _merge(list bufs, list pos, Py_ssize_t limit, object ends, Pick** picks_out, Py_ssize_t* count,
                       Py_ssize_t* last_stream, Py_ssize_t* last_at, Py_ssize_t* last_len) except -3:
    """The merge itself: the items taken as (stream, offset, length) in `*picks_out` (malloc'd, the caller frees
    it), `pos` advanced; returns the state (see the module's doc)."""
    cdef Py_ssize_t k = len(bufs), i, best, taken = 0, cap = 256, e
    if k > MAX_STREAMS or len(pos) != k or (ends is not None and len(ends) != k):
        raise ValueError("merge: at most 256 streams, one position (and end) each")
    cdef const unsigned char* base[MAX_STREAMS]
    cdef Py_ssize_t size[MAX_STREAMS]
    cdef Py_ssize_t at[MAX_STREAMS]
    cdef Py_ssize_t kl[MAX_STREAMS]
    cdef Py_ssize_t il[MAX_STREAMS]
    cdef bint done[MAX_STREAMS]
    cdef Py_ssize_t n, m, need = -1
    cdef uint32_t key_len
    cdef int c
    cdef Pick* picks
    cdef Pick* grown
    for i in range(k):
        base[i] = _data(bufs[i], &size[i])
        if ends is not None:
            e = ends[i]
            if 0 <= e < size[i]:
                size[i] = e
        at[i] = pos[i]
        if at[i] < 0 or at[i] > size[i]:
            raise ValueError("merge: a position outside its stream")
        done[i] = False
    picks = <Pick*>malloc(cap * sizeof(Pick))
    if picks == NULL:
        raise MemoryError()
    last_stream[0] = -1
    while True:
        if limit > 0 and taken == limit:
            need = -2
            break
        # Every stream's head record, whole; the first that is not stops the merge.
        best = -1
        need = -1
        for i in range(k):
            if done[i]:
                continue
            if size[i] - at[i] < 8:
                need = i
                break
            key_len = _u32(base[i] + at[i])
            if key_len == END:
                done[i] = True
                continue
            kl[i] = key_len
            il[i] = _u32(base[i] + at[i] + 4)
            if size[i] - at[i] - 8 < kl[i] + il[i]:
                need = i
                break
            if best < 0:
                best = i
            else:
                n = kl[i] if kl[i] < kl[best] else kl[best]
                c = memcmp(base[i] + at[i] + 8, base[best] + at[best] + 8, n)
                if c < 0 or (c == 0 and kl[i] < kl[best]):
                    best = i
        if need >= 0:
            break
        if best < 0:
            need = -1   # every stream at its end
            break
        if taken == cap:
            cap *= 2
            grown = <Pick*>realloc(picks, cap * sizeof(Pick))
            if grown == NULL:
                free(picks)
                raise MemoryError()
            picks = grown
        m = at[best] + 8 + kl[best]
        picks[taken].stream = best
        picks[taken].start = m
        picks[taken].length = il[best]
        last_stream[0], last_at[0], last_len[0] = best, at[best] + 8, kl[best]
        at[best] = m + il[best]
        taken += 1
    for i in range(k):
        pos[i] = at[i]
    picks_out[0] = picks
    count[0] = taken
    return need


cdef object _last(list bufs, Py_ssize_t stream, Py_ssize_t at, Py_ssize_t n):
    cdef Py_ssize_t size
    if stream < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>_data(bufs[stream], &size) + at, n)


def merge(list bufs not None, list pos not None, Py_ssize_t limit, ends=None):
    cdef Pick* picks = NULL
    cdef Py_ssize_t count = 0, ls = -1, la = 0, ln = 0, i, size
    state = _merge(bufs, pos, limit, ends, &picks, &count, &ls, &la, &ln)
    try:
        items = [PyBytes_FromStringAndSize(<const char*>_data(bufs[picks[i].stream], &size) + picks[i].start,
                                           picks[i].length) for i in range(count)]
    finally:
        free(picks)
    return items, state, _last(bufs, ls, la, ln)


def merge_joined(list bufs not None, list pos not None, Py_ssize_t limit, bint lead=False, ends=None):
    cdef Pick* picks = NULL
    cdef Py_ssize_t count = 0, ls = -1, la = 0, ln = 0, i, total = 0, size
    cdef unsigned char* w
    cdef const unsigned char* base[MAX_STREAMS]
    state = _merge(bufs, pos, limit, ends, &picks, &count, &ls, &la, &ln)
    try:
        for i in range(count):
            total += picks[i].length + 1
        out = PyBytes_FromStringAndSize(NULL, total - (0 if lead else 1) if count else 0)
        w = <unsigned char*>PyBytes_AS_STRING(out)
        for i in range(len(bufs)):
            base[i] = _data(bufs[i], &size)
        for i in range(count):
            if i or lead:
                w[0] = 0x2C   # ','
                w += 1
            memcpy(w, base[picks[i].stream] + picks[i].start, picks[i].length)
            w += picks[i].length
    finally:
        free(picks)
    return out, count, state, _last(bufs, ls, la, ln)


END_RECORD = frame_meta(b"")   # what ends a framed list
