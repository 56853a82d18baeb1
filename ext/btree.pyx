# cython: language_level=3, binding=True
"""Copy-on-write B-tree (ordered map ``str -> object``), compiled (SPEC S2.14, S9.7).

A key may also be given as an ``ext.Entry`` (``insert(e, e)``): the tree then keeps the entry in the key's
place and orders by the key it holds, so the watch cache's tree keeps no key string of its own (a compressed
entry holds its key's UTF-8 only, ext/entry.pyx). Keys come out of the tree as str either way.

Same algorithm and API as the pure-Python twin :mod:`ext.btree_py` (read its docstring for the
design: google/btree, degree 16, at most 31 items per node, subtree sizes for O(log n) counting,
``Clone()``-style copy-on-write snapshots).

Memory layout: a node is a small non-GC extension object (no cyclic-GC header) plus one
``PyMem_Malloc`` block of interleaved ``key, value`` pointers and, for internal nodes, one block of
child pointers. A self-keyed tree (``BTree(self_keyed=True)``, the watch cache's: every item is an entry
inserted as its own key, ``insert(e, e)``) keeps one pointer per item instead of two (a node's ``s``,
1 or 2 slots per item, the same in every node of a tree): 8 B less per item. Blocks are sized to the
fill (capacity rounded up to 4 items, shrunk again when a node loses 8 free slots), so half-full nodes
do not pay for 31 slots. ``PyMem_*`` memory is visible
to tracemalloc. Because nodes are not GC-tracked, a cycle running through a stored value back to the
tree is never collected (cache entries never refer to their tree).

One refinement over the twin (invisible in results): a node owned by another copy-on-write context
but referenced only by its (mutable) parent is adopted instead of copied, because no other tree
can reach it any more (its snapshot was dropped).
"""

cimport cython
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.object cimport PyObject
from libc.stdint cimport int16_t, int32_t, uint64_t
from libc.string cimport memcmp, memcpy, memmove

from ext.entry cimport Entry, entry_key, entry_key_utf8

cdef extern from "Python.h":
    # Both arguments are always str here, so this cannot fail. Code point order == UTF-8 byte order.
    int PyUnicode_Compare(PyObject* a, PyObject* b)
    bint PyUnicode_CheckExact(PyObject* o)
    bint PyUnicode_Check(PyObject* o)
    const char* PyUnicode_AsUTF8AndSize(object u, Py_ssize_t* size) except NULL
    void _incref "Py_INCREF"(PyObject* o)
    void _decref "Py_DECREF"(PyObject* o)
    Py_ssize_t Py_REFCNT(PyObject* o)

cdef enum:
    MAX_ITEMS_C = 31  # 2 * degree - 1
    MIN_ITEMS_C = 15  # degree - 1
    MAX_DEPTH = 48    # non-root internal nodes have >= 16 children: depth 48 is unreachable
    REMOVE_ITEM = 0
    REMOVE_MAX = 1

DEGREE = 16
MAX_ITEMS = MAX_ITEMS_C
MIN_ITEMS = MIN_ITEMS_C

cdef uint64_t _cow_counter = 0

cdef inline uint64_t _next_cow() noexcept:
    global _cow_counter
    _cow_counter += 1
    return _cow_counter


@cython.no_gc
@cython.final
@cython.auto_pickle(False)
cdef class _Node:
    """A B-tree node (internal to this module). ``ch == NULL`` for leaves."""
    cdef int32_t n          # items
    cdef int16_t cap        # capacity in items; kv has s*cap slots, ch (internal) has cap+1
    cdef int16_t s          # slots per item: 2 (key, value), or 1 in a self-keyed tree (the key is the value)
    cdef Py_ssize_t size    # items in this subtree
    cdef uint64_t cow       # copy-on-write context allowed to mutate this node in place
    cdef PyObject** kv      # key0, val0, key1, val1, ... or key0, key1, ... (owned references)
    cdef PyObject** ch      # n + 1 children (owned references), NULL for leaves

    def __dealloc__(self):
        cdef int32_t i
        if self.kv != NULL:
            for i in range(self.s * self.n):
                _decref(self.kv[i])
            PyMem_Free(self.kv)
        if self.ch != NULL:
            for i in range(self.n + 1):
                _decref(self.ch[i])
            PyMem_Free(self.ch)


cdef inline int32_t _cap_for(int32_t n) noexcept:
    cdef int32_t c = (n + 3) & ~3
    if c > MAX_ITEMS_C:
        c = MAX_ITEMS_C
    if c < 4:
        c = 4
    return c


cdef inline PyObject* _k(_Node nd, int32_t i) noexcept:
    """Item i's key slot."""
    return nd.kv[nd.s * i]


cdef inline PyObject* _v(_Node nd, int32_t i) noexcept:
    """Item i's value (its key slot itself in a self-keyed tree)."""
    return nd.kv[nd.s * i + nd.s - 1]


cdef inline void _set(_Node nd, int32_t i, PyObject* k, PyObject* v) noexcept:
    """Item i of `nd` := (k, v), references moved in: one (k is v) in a self-keyed tree."""
    nd.kv[nd.s * i] = k
    if nd.s == 2:
        nd.kv[2 * i + 1] = v


cdef inline void _move(_Node nd, int32_t to, int32_t frm, int32_t items) noexcept:
    """memmove of `items` items of `nd` from index frm to index to."""
    memmove(nd.kv + nd.s * to, nd.kv + nd.s * frm, nd.s * items * sizeof(PyObject*))


cdef _Node _new_node(int32_t cap, bint internal, uint64_t cow, int16_t s):
    cdef _Node nd = _Node.__new__(_Node)
    nd.s = s
    nd.kv = <PyObject**>PyMem_Malloc(s * cap * sizeof(PyObject*))
    if nd.kv == NULL:
        raise MemoryError()
    if internal:
        nd.ch = <PyObject**>PyMem_Malloc((cap + 1) * sizeof(PyObject*))
        if nd.ch == NULL:
            raise MemoryError()
    nd.cap = <int16_t>cap
    nd.cow = cow
    return nd


cdef int _resize(_Node nd, int32_t cap) except -1:
    cdef PyObject** kv = <PyObject**>PyMem_Realloc(nd.kv, nd.s * cap * sizeof(PyObject*))
    cdef PyObject** ch
    if kv == NULL:
        raise MemoryError()
    nd.kv = kv
    if nd.ch != NULL:
        ch = <PyObject**>PyMem_Realloc(nd.ch, (cap + 1) * sizeof(PyObject*))
        if ch == NULL:
            raise MemoryError()
        nd.ch = ch
    nd.cap = <int16_t>cap
    return 0


cdef inline int _ensure_cap(_Node nd, int32_t need) except -1:
    if nd.cap < need:
        _resize(nd, _cap_for(need))
    return 0


cdef inline void _maybe_shrink(_Node nd) noexcept:
    cdef int32_t cap
    if nd.cap - nd.n >= 8:
        cap = _cap_for(nd.n + 1)
        try:
            _resize(nd, cap)
        except MemoryError:  # shrinking is only an optimization
            pass


cdef _Node _copy(_Node src, uint64_t cow):
    """Copy of ``src`` owned by ``cow`` (items and children shared, their refcounts bumped). O(1)."""
    cdef _Node nd = _new_node(_cap_for(src.n + 1), src.ch != NULL, cow, src.s)
    cdef int32_t i
    memcpy(nd.kv, src.kv, src.s * src.n * sizeof(PyObject*))
    for i in range(src.s * src.n):
        _incref(nd.kv[i])
    if src.ch != NULL:
        memcpy(nd.ch, src.ch, (src.n + 1) * sizeof(PyObject*))
        for i in range(src.n + 1):
            _incref(nd.ch[i])
    nd.n = src.n
    nd.size = src.size
    return nd


cdef _Node _mut_child(_Node parent, int32_t i, uint64_t cow):
    """Child ``i`` of the mutable ``parent``, made mutable for ``cow`` (copied or adopted). O(1)."""
    cdef PyObject* p = parent.ch[i]
    cdef _Node c
    if (<_Node>p).cow == cow:
        return <_Node>p
    if Py_REFCNT(p) == 1:  # only our parent references it: no snapshot can see it any more
        (<_Node>p).cow = cow
        return <_Node>p
    c = _copy(<_Node>p, cow)
    _incref(<PyObject*>c)
    parent.ch[i] = <PyObject*>c
    _decref(p)
    return c


cdef int _cmp_slow(PyObject* a, PyObject* b) noexcept:
    """_cmp when a side's UTF-8 could not be had (no memory): both keys as str objects."""
    cdef object sa, sb
    try:
        sa = <object>a if PyUnicode_Check(a) else entry_key(<Entry><object>a)
        sb = <object>b if PyUnicode_Check(b) else entry_key(<Entry><object>b)
    except MemoryError:
        return 0
    return PyUnicode_Compare(<PyObject*>sa, <PyObject*>sb)


cdef inline const char* _utf8(PyObject* o, Py_ssize_t* n, const char** pre, Py_ssize_t* pre_n) except NULL:
    """A key's UTF-8 in two parts: pre[:pre_n] (an entry's codec's key prefix, left out of its block) + the
    returned n bytes."""
    if PyUnicode_Check(o):
        pre_n[0] = 0
        return PyUnicode_AsUTF8AndSize(<object>o, n)
    return entry_key_utf8(<Entry><object>o, n, pre, pre_n)


cdef int _cmp(PyObject* a, PyObject* b) noexcept:
    """Order of two keys: each a str, or an Entry standing for its key (the tree keeps no key string of its
    own for an entry, whose compressed form holds the key's UTF-8 only, less its resource's prefix). UTF-8 byte
    order is code point order, the order PyUnicode_Compare gives two str."""
    cdef const char* pa
    cdef const char* pb
    cdef const char* qa = NULL
    cdef const char* qb = NULL
    cdef Py_ssize_t na, nb, ma = 0, mb = 0, ia = 0, ib = 0, la, lb, ra, rb, m
    cdef const char* xa
    cdef const char* xb
    cdef int c
    if PyUnicode_CheckExact(a) and PyUnicode_CheckExact(b):
        return PyUnicode_Compare(a, b)
    try:
        pa = _utf8(a, &na, &qa, &ma)
        pb = _utf8(b, &nb, &qb, &mb)
    except MemoryError:
        return _cmp_slow(a, b)
    # a = qa[:ma] + pa[:na], b = qb[:mb] + pb[:nb]: compared a run at a time (at most three runs)
    la = ma + na
    lb = mb + nb
    while ia < la and ib < lb:
        if ia < ma:
            xa, ra = qa + ia, ma - ia
        else:
            xa, ra = pa + (ia - ma), la - ia
        if ib < mb:
            xb, rb = qb + ib, mb - ib
        else:
            xb, rb = pb + (ib - mb), lb - ib
        m = ra if ra < rb else rb
        c = memcmp(xa, xb, m)
        if c != 0:
            return -1 if c < 0 else 1
        ia += m
        ib += m
    return (la > lb) - (la < lb)


cdef inline object _key_of(PyObject* k):
    """A key slot's key as a str."""
    if PyUnicode_Check(k):
        return <object>k
    return entry_key(<Entry><object>k)


cdef inline int32_t _search(_Node nd, PyObject* key, bint* found) noexcept:
    """Index of the first item >= key in ``nd``; ``found`` if equal. O(log 31)."""
    cdef int32_t lo = 0, hi = nd.n, mid
    cdef int c
    cdef PyObject** kv = nd.kv
    cdef int32_t s = nd.s
    found[0] = False
    while lo < hi:
        mid = (lo + hi) >> 1
        c = _cmp(kv[s * mid], key)
        if c < 0:
            lo = mid + 1
        elif c > 0:
            hi = mid
        else:
            found[0] = True
            return mid
    return lo


cdef _Node _split(_Node nd, int32_t i, uint64_t cow, PyObject** mk, PyObject** mv):
    """Split mutable ``nd`` at item ``i``; item ``i`` is moved to ``mk``/``mv`` (owned: one reference for both
    in a self-keyed tree). O(1)."""
    cdef int32_t m = nd.n - i - 1
    cdef int32_t j
    cdef Py_ssize_t sz = m
    cdef _Node second = _new_node(_cap_for(m + 1), nd.ch != NULL, cow, nd.s)
    memcpy(second.kv, nd.kv + nd.s * (i + 1), nd.s * m * sizeof(PyObject*))
    mk[0] = _k(nd, i)
    mv[0] = _v(nd, i)
    second.n = m
    if nd.ch != NULL:
        memcpy(second.ch, nd.ch + i + 1, (m + 1) * sizeof(PyObject*))
        for j in range(m + 1):
            sz += (<_Node>second.ch[j]).size
    second.size = sz
    nd.n = i
    nd.size -= sz + 1
    _maybe_shrink(nd)
    return second


cdef int _split_child(_Node nd, int32_t i, uint64_t cow) except -1:
    """Split the full child ``i`` of mutable ``nd``, moving its median up into ``nd``. O(1)."""
    cdef PyObject* mk
    cdef PyObject* mv
    cdef _Node first, second
    _ensure_cap(nd, nd.n + 1)
    first = _mut_child(nd, i, cow)
    second = _split(first, MAX_ITEMS_C // 2, cow, &mk, &mv)
    _move(nd, i + 1, i, nd.n - i)
    _set(nd, i, mk, mv)
    memmove(nd.ch + i + 2, nd.ch + i + 1, (nd.n - i) * sizeof(PyObject*))
    _incref(<PyObject*>second)
    nd.ch[i + 1] = <PyObject*>second
    nd.n += 1
    return 0


cdef int _grow_child(_Node nd, int32_t i, uint64_t cow) except -1:
    """Give child ``i`` of mutable ``nd`` more than MIN_ITEMS items: steal or merge. O(1)."""
    cdef _Node child, sib, merged
    cdef Py_ssize_t moved
    cdef int32_t j, cn
    cdef PyObject* c
    if i > 0 and (<_Node>nd.ch[i - 1]).n > MIN_ITEMS_C:
        child = _mut_child(nd, i, cow)
        sib = _mut_child(nd, i - 1, cow)
        _ensure_cap(child, child.n + 1)
        _move(child, 1, 0, child.n)
        _set(child, 0, _k(nd, i - 1), _v(nd, i - 1))
        sib.n -= 1
        _set(nd, i - 1, _k(sib, sib.n), _v(sib, sib.n))
        moved = 1
        if sib.ch != NULL:
            c = sib.ch[sib.n + 1]
            memmove(child.ch + 1, child.ch, (child.n + 1) * sizeof(PyObject*))
            child.ch[0] = c
            moved += (<_Node>c).size
        child.n += 1
        sib.size -= moved
        child.size += moved
        _maybe_shrink(sib)
    elif i < nd.n and (<_Node>nd.ch[i + 1]).n > MIN_ITEMS_C:
        child = _mut_child(nd, i, cow)
        sib = _mut_child(nd, i + 1, cow)
        _ensure_cap(child, child.n + 1)
        cn = child.n
        _set(child, cn, _k(nd, i), _v(nd, i))
        _set(nd, i, _k(sib, 0), _v(sib, 0))
        _move(sib, 0, 1, sib.n - 1)
        moved = 1
        if sib.ch != NULL:
            c = sib.ch[0]
            child.ch[cn + 1] = c
            memmove(sib.ch, sib.ch + 1, sib.n * sizeof(PyObject*))
            moved += (<_Node>c).size
        sib.n -= 1
        child.n += 1
        sib.size -= moved
        child.size += moved
        _maybe_shrink(sib)
    else:
        if i >= nd.n:
            i -= 1
        child = _mut_child(nd, i, cow)
        merged = <_Node>nd.ch[i + 1]  # only read from: may stay shared with a snapshot
        _ensure_cap(child, child.n + 1 + merged.n)
        cn = child.n
        _set(child, cn, _k(nd, i), _v(nd, i))
        for j in range(child.s * merged.n):
            _incref(merged.kv[j])
            child.kv[child.s * (cn + 1) + j] = merged.kv[j]
        if child.ch != NULL:
            for j in range(merged.n + 1):
                _incref(merged.ch[j])
                child.ch[cn + 1 + j] = merged.ch[j]
        child.n += 1 + merged.n
        child.size += 1 + merged.size
        _move(nd, i, i + 1, nd.n - i - 1)
        memmove(nd.ch + i + 1, nd.ch + i + 2, (nd.n - i - 1) * sizeof(PyObject*))
        nd.n -= 1
        _decref(<PyObject*>merged)  # nd's reference; the local one keeps it alive until return
    return 0


cdef int _remove(_Node nd, PyObject* key, int typ, uint64_t cow, PyObject** ok, PyObject** ov) except -1:
    """Remove ``key`` (or the maximum) below mutable ``nd``; the target must exist. O(log n).

    The removed key/value are moved to ``ok``/``ov`` (owned references; one for both, the same object, in a
    self-keyed tree).
    """
    cdef int32_t i
    cdef bint found
    cdef _Node child
    nd.size -= 1
    while True:
        if typ == REMOVE_MAX:
            if nd.ch == NULL:
                nd.n -= 1
                ok[0] = _k(nd, nd.n)
                ov[0] = _v(nd, nd.n)
                _maybe_shrink(nd)
                return 0
            i = nd.n
            found = False
        else:
            i = _search(nd, key, &found)
            if nd.ch == NULL:
                if not found:
                    raise AssertionError("BTree._remove: key vanished")
                ok[0] = _k(nd, i)
                ov[0] = _v(nd, i)
                _move(nd, i, i + 1, nd.n - i - 1)
                nd.n -= 1
                _maybe_shrink(nd)
                return 0
        if (<_Node>nd.ch[i]).n <= MIN_ITEMS_C:
            _grow_child(nd, i, cow)
            continue  # nd changed: search again
        child = _mut_child(nd, i, cow)
        if found:
            ok[0] = _k(nd, i)
            ov[0] = _v(nd, i)
            # Replace the item by its predecessor (the maximum of the left subtree); in a self-keyed tree both
            # pointers are the item's one slot.
            _remove(child, NULL, REMOVE_MAX, cow, &nd.kv[nd.s * i], &nd.kv[nd.s * i + nd.s - 1])
            return 0
        child.size -= 1
        nd = child


cdef int _put_in_leaf(_Node nd, int32_t i, PyObject* k, PyObject* v, PyObject** path, int depth) except -1:
    """Put (k, v) at position i of the leaf `nd` (new references) and count it there and in the `depth` nodes
    above it (`path`)."""
    cdef int d
    _ensure_cap(nd, nd.n + 1)
    _move(nd, i + 1, i, nd.n - i)
    _incref(k)
    if nd.s == 2:
        _incref(v)
    _set(nd, i, k, v)
    nd.n += 1
    nd.size += 1
    for d in range(depth):
        (<_Node>path[d]).size += 1
    return 0


cdef object _replace(_Node nd, int32_t i, PyObject* k, PyObject* v):
    """Item i of mutable `nd` gets key object `k` and value `v` (new references); returns the old value. The key
    object is replaced too: an entry standing for its key must not outlive its replacement in the tree."""
    cdef object old = <object>_v(nd, i)
    _incref(k)
    _decref(nd.kv[nd.s * i])
    if nd.s == 2:
        _incref(v)
        _decref(nd.kv[2 * i + 1])
    _set(nd, i, k, v)
    return old


cdef inline int _check_key(object key) except -1:
    if not PyUnicode_Check(<PyObject*>key) and type(key) is not Entry:
        raise TypeError(f"BTree keys must be str (or an ext.Entry, for its key), not {type(key).__name__}")
    return 0


cdef Py_ssize_t _rank(_Node nd, PyObject* key) noexcept:
    """Number of keys < ``key`` below ``nd``. O(log n) thanks to subtree sizes."""
    cdef Py_ssize_t r = 0
    cdef int32_t i, j
    cdef bint found
    while nd is not None:
        i = _search(nd, key, &found)
        r += i
        if nd.ch == NULL:
            return r
        for j in range(i):
            r += (<_Node>nd.ch[j]).size
        if found:
            return r + (<_Node>nd.ch[i]).size
        nd = <_Node>nd.ch[i]
    return r


@cython.final
@cython.auto_pickle(False)
cdef class BTree:
    """Ordered map from ``str`` keys to arbitrary values with O(1) copy-on-write snapshots.

    Iterating a tree while writing to the same tree raises ``RuntimeError`` (as ``dict`` does);
    iterate a :meth:`snapshot` instead, which is stable however the original changes.
    Not thread-safe: callers serialize writers (the watch cache has a single writer).
    """
    cdef _Node root          # None when empty
    cdef uint64_t cow
    cdef Py_ssize_t version  # bumped by every write; iterators compare it
    cdef int16_t stride      # slots per item in its nodes: 1 when self-keyed
    cdef object __weakref__

    def __cinit__(self, bint self_keyed=False):
        """``self_keyed``: every item is inserted as its own key (``insert(e, e)``, an ``ext.Entry`` or a str),
        and kept in one pointer instead of two."""
        self.root = None
        self.cow = _next_cow()
        self.version = 0
        self.stride = 1 if self_keyed else 2

    @property
    def self_keyed(self):
        return self.stride == 1

    def __len__(self):
        """Number of entries. O(1)."""
        return 0 if self.root is None else self.root.size

    def __repr__(self):
        return f"<BTree len={len(self)}>"

    cdef PyObject* _find(self, object key) except? NULL:
        """Borrowed pointer to the value slot's object for ``key``, NULL if absent. O(log n)."""
        cdef _Node nd = self.root
        cdef int32_t i
        cdef bint found
        _check_key(key)
        while nd is not None:
            i = _search(nd, <PyObject*>key, &found)
            if found:
                return _v(nd, i)
            if nd.ch == NULL:
                return NULL
            nd = <_Node>nd.ch[i]
        return NULL

    def get(self, key, default=None):
        """Value for ``key`` or ``default``. O(log n). TypeError for a non-str key."""
        cdef PyObject* v = self._find(key)
        return default if v == NULL else <object>v

    def __getitem__(self, key):
        """Value for ``key``; KeyError if absent. O(log n)."""
        cdef PyObject* v = self._find(key)
        if v == NULL:
            raise KeyError(key)
        return <object>v

    def __contains__(self, key):
        """``key in t``. O(log n). TypeError for a non-str key."""
        return self._find(key) != NULL

    def min_key(self):
        """Smallest key, None if empty. O(log n)."""
        cdef _Node nd = self.root
        if nd is None:
            return None
        while nd.ch != NULL:
            nd = <_Node>nd.ch[0]
        return _key_of(_k(nd, 0))

    def max_key(self):
        """Largest key, None if empty. O(log n)."""
        cdef _Node nd = self.root
        if nd is None:
            return None
        while nd.ch != NULL:
            nd = <_Node>nd.ch[nd.n]
        return _key_of(_k(nd, nd.n - 1))

    cdef _Node _mut_root(self):
        cdef _Node root = self.root
        if root.cow != self.cow:
            if Py_REFCNT(<PyObject*>root) == 2:  # self.root + the local: nobody else
                root.cow = self.cow
            else:
                root = _copy(root, self.cow)
                self.root = root
        return root

    cdef _Node _writable_root(self):
        """The root, mutable, split first if it is full (a write's way down never meets a full node)."""
        cdef _Node nd = self._mut_root()
        cdef _Node nr, second
        cdef PyObject* mk
        cdef PyObject* mv
        if nd.n >= MAX_ITEMS_C:
            nr = _new_node(4, True, self.cow, self.stride)
            second = _split(nd, MAX_ITEMS_C // 2, self.cow, &mk, &mv)
            _set(nr, 0, mk, mv)
            _incref(<PyObject*>nd)
            _incref(<PyObject*>second)
            nr.ch[0] = <PyObject*>nd
            nr.ch[1] = <PyObject*>second
            nr.n = 1
            nr.size = nd.size + second.size + 1
            self.root = nr
            nd = nr
        return nd

    def insert(self, key, value):
        """Set ``key`` to ``value``; return the previous value or None. O(log n).

        Copies (at most) the nodes on the root-to-leaf path that are shared with a snapshot.
        A self-keyed tree takes only ``value is key`` (ValueError otherwise).
        """
        _check_key(key)
        if self.stride == 1 and value is not key:
            raise ValueError("a self-keyed BTree keeps each item as its own key: insert(e, e)")
        cdef PyObject* k = <PyObject*>key
        cdef uint64_t cow = self.cow
        cdef _Node nd
        cdef PyObject* path[MAX_DEPTH]
        cdef int depth = 0
        cdef int32_t i
        cdef bint found
        cdef int c
        self.version += 1
        if self.root is None:
            nd = _new_node(4, False, cow, self.stride)
            _incref(k)
            if self.stride == 2:
                _incref(<PyObject*>value)
            _set(nd, 0, k, <PyObject*>value)
            nd.n = 1
            nd.size = 1
            self.root = nd
            return None
        nd = self._writable_root()
        while True:
            i = _search(nd, k, &found)
            if found:
                return _replace(nd, i, k, <PyObject*>value)
            if nd.ch == NULL:
                _put_in_leaf(nd, i, k, <PyObject*>value, path, depth)
                return None
            if (<_Node>nd.ch[i]).n >= MAX_ITEMS_C:
                _split_child(nd, i, cow)
                c = _cmp(_k(nd, i), k)
                if c < 0:
                    i += 1
                elif c == 0:
                    return _replace(nd, i, k, <PyObject*>value)
            if depth >= MAX_DEPTH:
                raise AssertionError("BTree too deep")
            path[depth] = <PyObject*>nd
            depth += 1
            nd = _mut_child(nd, i, cow)

    def append(self, key, value):
        """Insert ``key``, greater than every key in the tree (ValueError otherwise), at the end: one
        comparison instead of a search per level. A warm start installs each saved resource in key order
        this way (cache/snapshot.py). The tree built is the one ``insert`` builds for such keys."""
        _check_key(key)
        if self.stride == 1 and value is not key:
            raise ValueError("a self-keyed BTree keeps each item as its own key: append(e, e)")
        cdef PyObject* k = <PyObject*>key
        cdef uint64_t cow = self.cow
        cdef _Node nd
        cdef PyObject* path[MAX_DEPTH]
        cdef int depth = 0
        cdef int32_t i
        if self.root is None:
            self.insert(key, value)
            return
        nd = self.root
        while nd.ch != NULL:
            nd = <_Node>nd.ch[nd.n]
        if _cmp(_k(nd, nd.n - 1), k) >= 0:
            raise ValueError(f"BTree.append: {key!r} is not after the last key")
        self.version += 1
        nd = self._writable_root()
        while True:
            i = nd.n
            if nd.ch == NULL:
                _put_in_leaf(nd, i, k, <PyObject*>value, path, depth)
                return
            if (<_Node>nd.ch[i]).n >= MAX_ITEMS_C:
                _split_child(nd, i, cow)
                i += 1          # the key moved up is smaller than `key`
            if depth >= MAX_DEPTH:
                raise AssertionError("BTree too deep")
            path[depth] = <PyObject*>nd
            depth += 1
            nd = _mut_child(nd, i, cow)

    def delete(self, key):
        """Remove ``key`` and return its value; KeyError if absent (tree untouched). O(log n)."""
        if self._find(key) == NULL:
            raise KeyError(key)
        cdef PyObject* ok
        cdef PyObject* ov
        cdef _Node root
        self.version += 1
        root = self._mut_root()
        _remove(root, <PyObject*>key, REMOVE_ITEM, self.cow, &ok, &ov)
        if root.n == 0:
            self.root = None if root.ch == NULL else <_Node>root.ch[0]
        val = <object>ov
        _decref(ov)
        if self.stride == 2:
            _decref(ok)
        return val

    def snapshot(self):
        """O(1) copy-on-write clone; later writes to either tree are invisible to the other."""
        cdef BTree out = BTree.__new__(BTree)
        out.stride = self.stride
        out.root = self.root
        self.cow = _next_cow()
        return out

    def iter_from(self, start=None):
        """Iterator of ``(key, value)`` with key >= ``start`` (None: all), in key order.

        O(log n) to position, amortized O(1) per item. RuntimeError if this tree is written meanwhile.
        """
        if start is not None:
            _check_key(start)
        return _make_iter(self, start, 0)

    def items(self):
        """Iterator of all ``(key, value)`` in key order. O(n) total."""
        return _make_iter(self, None, 0)

    def keys(self):
        """Iterator of all keys in order. O(n) total."""
        return _make_iter(self, None, 1)

    def values(self):
        """Iterator of all values in key order. O(n) total."""
        return _make_iter(self, None, 2)

    def __iter__(self):
        return _make_iter(self, None, 1)

    def count_from(self, start, end=None):
        """Number of keys k with ``start <= k < end`` (None: unbounded). O(log n), no scan."""
        cdef Py_ssize_t lo = 0, hi
        if start is not None:
            _check_key(start)
            lo = _rank(self.root, <PyObject*>start)
        if end is None:
            hi = len(self)
        else:
            _check_key(end)
            hi = _rank(self.root, <PyObject*>end)
        return hi - lo if hi > lo else 0

    def node_count(self):
        """Number of nodes reachable from this tree (shared nodes included). O(n / 16)."""
        return _count_nodes(self.root)

    def _node_ids(self):
        """Identities of the reachable nodes (tests use it to check what copy-on-write shares)."""
        out = set()
        _collect_ids(self.root, out)
        return out

    def __sizeof__(self):
        """Bytes of this tree's own nodes (node objects and their arrays, not keys/values). O(n / 16).

        Nodes shared with snapshots are counted in each tree that reaches them.
        """
        return Py_TYPE_BASICSIZE(self) + _tree_bytes(self.root)

    def _check(self):
        """Check every invariant (order, fill bounds, sizes, len, uniform leaf depth); AssertionError. O(n)."""
        if self.root is None:
            return
        assert self.root.n >= 1, "empty root"
        size = _check_node(self.root, None, None, 0, [], True)
        assert size == len(self)
        n = 0
        prev = None
        for k in self.keys():
            assert prev is None or prev < k
            prev = k
            n += 1
        assert n == len(self)


cdef Py_ssize_t Py_TYPE_BASICSIZE(object o):
    return type(o).__basicsize__


cdef Py_ssize_t _NODE_BASICSIZE = _Node.__basicsize__


cdef Py_ssize_t _tree_bytes(_Node nd):
    cdef Py_ssize_t b
    cdef int32_t j
    if nd is None:
        return 0
    b = _NODE_BASICSIZE + nd.s * nd.cap * sizeof(PyObject*)
    if nd.ch != NULL:
        b += (nd.cap + 1) * sizeof(PyObject*)
        for j in range(nd.n + 1):
            b += _tree_bytes(<_Node>nd.ch[j])
    return b


cdef Py_ssize_t _count_nodes(_Node nd):
    cdef Py_ssize_t b = 1
    cdef int32_t j
    if nd is None:
        return 0
    if nd.ch != NULL:
        for j in range(nd.n + 1):
            b += _count_nodes(<_Node>nd.ch[j])
    return b


cdef _collect_ids(_Node nd, set out):
    cdef int32_t j
    if nd is None:
        return
    out.add(id(nd))
    if nd.ch != NULL:
        for j in range(nd.n + 1):
            _collect_ids(<_Node>nd.ch[j], out)


cdef Py_ssize_t _check_node(_Node nd, object lo, object hi, int depth, list leaf_depth, bint is_root) except -1:
    cdef int32_t j, n = nd.n
    cdef Py_ssize_t total
    assert 0 <= n <= nd.cap <= MAX_ITEMS_C, f"bad fill {n}/{nd.cap}"
    assert is_root or n >= MIN_ITEMS_C, f"node underfull: {n}"
    keys = [_key_of(_k(nd, j)) for j in range(n)]
    for j in range(n):
        k = keys[j]
        assert type(k) is str or isinstance(k, str)
        assert j == 0 or keys[j - 1] < k, f"keys out of order: {keys[j - 1]!r} >= {k!r}"
        assert lo is None or lo < k, f"key {k!r} <= lower bound {lo!r}"
        assert hi is None or k < hi, f"key {k!r} >= upper bound {hi!r}"
    if nd.ch == NULL:
        if not leaf_depth:
            leaf_depth.append(depth)
        assert leaf_depth[0] == depth, f"leaf at depth {depth}, another at {leaf_depth[0]}"
        assert nd.size == n, f"leaf size {nd.size} != {n}"
        return n
    total = n
    bounds = [lo] + keys + [hi]
    for j in range(n + 1):
        assert (<_Node>nd.ch[j]).s == nd.s, "a tree's nodes differ in stride"
        total += _check_node(<_Node>nd.ch[j], bounds[j], bounds[j + 1], depth + 1, leaf_depth, False)
    assert nd.size == total, f"subtree size {nd.size} != {total}"
    return total


@cython.final
@cython.auto_pickle(False)
cdef class _BTreeIter:
    """Iterator over a BTree from a start key; holds references to the nodes on its stack."""
    cdef BTree tree
    cdef Py_ssize_t version
    cdef int depth
    cdef int mode  # 0: (key, value), 1: key, 2: value
    cdef PyObject* nodes[MAX_DEPTH]
    cdef int32_t idx[MAX_DEPTH]

    def __cinit__(self):
        self.depth = 0

    def __dealloc__(self):
        while self.depth > 0:
            self.depth -= 1
            _decref(self.nodes[self.depth])

    cdef int _push(self, _Node nd, int32_t i) except -1:
        if self.depth >= MAX_DEPTH:
            raise AssertionError("BTree too deep")
        _incref(<PyObject*>nd)
        self.nodes[self.depth] = <PyObject*>nd
        self.idx[self.depth] = i
        self.depth += 1
        return 0

    def __iter__(self):
        return self

    def __next__(self):
        cdef _Node nd, c
        cdef int32_t i
        if self.tree.version != self.version:
            raise RuntimeError("BTree changed during iteration (iterate a snapshot instead)")
        while self.depth > 0:
            nd = <_Node>self.nodes[self.depth - 1]
            i = self.idx[self.depth - 1]
            if i >= nd.n:
                self.depth -= 1
                _decref(self.nodes[self.depth])
                continue
            self.idx[self.depth - 1] = i + 1
            if nd.ch != NULL:
                c = <_Node>nd.ch[i + 1]
                self._push(c, 0)
                while c.ch != NULL:
                    c = <_Node>c.ch[0]
                    self._push(c, 0)
            if self.mode == 0:
                return (_key_of(_k(nd, i)), <object>_v(nd, i))
            elif self.mode == 1:
                return _key_of(_k(nd, i))
            return <object>_v(nd, i)
        raise StopIteration


cdef _BTreeIter _make_iter(BTree tree, object start, int mode):
    cdef _BTreeIter it = _BTreeIter.__new__(_BTreeIter)
    cdef _Node nd = tree.root
    cdef int32_t i
    cdef bint found
    it.tree = tree
    it.version = tree.version
    it.mode = mode
    while nd is not None:
        if start is None:
            i = 0
            found = False
        else:
            i = _search(nd, <PyObject*>start, &found)
        it._push(nd, i)
        if found or nd.ch == NULL:
            break
        nd = <_Node>nd.ch[i]
    return it
