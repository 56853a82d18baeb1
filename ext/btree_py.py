"""Copy-on-write B-tree (ordered map ``str -> object``), pure Python: the twin of :mod:`ext.btree`.

Same class, same API, same results, same exceptions as the compiled ``ext.btree.BTree``; used as the
test oracle and, with ``RESIDENCY_PURE_PYTHON=1``, as a debugging fallback (see :mod:`ext`).

Design (google/btree, degree 16, SPEC S2.14/S9.7): every node holds at most ``MAX_ITEMS = 31`` items,
every non-root node at least ``MIN_ITEMS = 15``; internal nodes have ``len(keys) + 1`` children; all leaves
are at the same depth. Insert splits full children on the way down, delete grows minimal children on the
way down (steal from a sibling or merge), so each operation is a single root-to-leaf pass.

Every node also stores ``size``, the number of items in its subtree, which makes
:meth:`BTree.count_from` O(log n) (upstream's ``remainingItemCount`` without a scan).

Copy-on-write (google/btree ``Clone()``): nodes carry the ``cow`` token of the tree that may mutate them
in place. :meth:`BTree.snapshot` gives both trees fresh tokens in O(1), so afterwards every node is owned
by neither; a write copies only the nodes on the root-to-leaf path it touches (plus siblings it rebalances
with). Keys compare as Python ``str``, i.e. by code point, which equals UTF-8 byte order (SPEC S2.6).

n = number of entries; all complexities assume the fixed degree 16 (so per-node work is O(1)).
"""

from __future__ import annotations

import itertools
import sys
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

__all__ = ["BTree", "DEGREE", "MAX_ITEMS", "MIN_ITEMS"]

DEGREE = 16
MAX_ITEMS = 2 * DEGREE - 1  # 31
MIN_ITEMS = DEGREE - 1  # 15

_cow_tokens = itertools.count(1)
_REMOVE_ITEM = 0
_REMOVE_MAX = 1


class _Node:
    """A B-tree node. ``children is None`` for leaves. ``size`` = items in this subtree."""

    __slots__ = ("keys", "vals", "children", "size", "cow")

    def __init__(self, cow: int, keys: list, vals: list, children: list | None, size: int) -> None:
        self.cow = cow
        self.keys = keys
        self.vals = vals
        self.children = children
        self.size = size


def _copy(node: _Node, cow: int) -> _Node:
    children = node.children
    return _Node(cow, node.keys[:], node.vals[:], None if children is None else children[:], node.size)


def _mut_child(node: _Node, i: int, cow: int) -> _Node:
    """Child ``i`` of the (mutable) ``node``, copied first if owned by another tree. O(1)."""
    child = node.children[i]
    if child.cow != cow:
        child = _copy(child, cow)
        node.children[i] = child
    return child


def _split(node: _Node, i: int, cow: int) -> tuple[str, Any, _Node]:
    """Split mutable ``node`` at item ``i``: returns (key_i, val_i, new right node). O(1)."""
    key, val = node.keys[i], node.vals[i]
    children = node.children
    right_keys = node.keys[i + 1 :]
    size = len(right_keys)
    if children is None:
        right_children = None
    else:
        right_children = children[i + 1 :]
        del children[i + 1 :]
        for c in right_children:
            size += c.size
    second = _Node(cow, right_keys, node.vals[i + 1 :], right_children, size)
    del node.keys[i:]
    del node.vals[i:]
    node.size -= size + 1
    return key, val, second


def _check_key(key: object) -> str:
    """The key as a str: a str, or an entry (ext.Entry or its twin) standing for its key (the compiled tree then
    keeps the entry in the key's place; this one keeps its key string)."""
    if isinstance(key, str):
        return key
    if type(key).__name__ == "Entry" and type(key).__module__ in ("ext.entry", "ext.entry_py"):
        return key.key
    raise TypeError(f"BTree keys must be str (or an ext.Entry, for its key), not {type(key).__name__}")


class BTree:
    """Ordered map from ``str`` keys to arbitrary values with O(1) copy-on-write snapshots.

    Iterating a tree while writing to the same tree raises ``RuntimeError`` (as ``dict`` does);
    iterate a :meth:`snapshot` instead, which is stable however the original changes.
    Not thread-safe: callers serialize writers (the watch cache has a single writer).
    """

    __slots__ = ("_root", "_cow", "_version", "_self_keyed", "__weakref__")

    def __init__(self, self_keyed: bool = False) -> None:
        """Empty tree. O(1). ``self_keyed``: every item is inserted as its own key (``insert(e, e)``); the
        compiled tree then keeps one pointer per item, this twin only checks the rule."""
        self._root: _Node | None = None
        self._cow = next(_cow_tokens)
        self._version = 0
        self._self_keyed = self_keyed

    @property
    def self_keyed(self) -> bool:
        return self._self_keyed

    # ---- size / lookup -------------------------------------------------------------------------

    def __len__(self) -> int:
        """Number of entries. O(1)."""
        root = self._root
        return 0 if root is None else root.size

    def __repr__(self) -> str:
        return f"<BTree len={len(self)}>"

    def _find(self, key: str) -> tuple[_Node, int] | None:
        node = self._root
        while node is not None:
            keys = node.keys
            i = bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                return node, i
            if node.children is None:
                return None
            node = node.children[i]
        return None

    def get(self, key: str, default: Any = None) -> Any:
        """Value for ``key`` or ``default``. O(log n). TypeError for a non-str key."""
        key = _check_key(key)
        hit = self._find(key)
        return default if hit is None else hit[0].vals[hit[1]]

    def __getitem__(self, key: str) -> Any:
        """Value for ``key``; KeyError if absent. O(log n)."""
        key = _check_key(key)
        hit = self._find(key)
        if hit is None:
            raise KeyError(key)
        return hit[0].vals[hit[1]]

    def __contains__(self, key: object) -> bool:
        """``key in t``. O(log n). TypeError for a non-str key."""
        key = _check_key(key)
        return self._find(key) is not None  # type: ignore[arg-type]

    def min_key(self) -> str | None:
        """Smallest key, None if empty. O(log n)."""
        node = self._root
        if node is None:
            return None
        while node.children is not None:
            node = node.children[0]
        return node.keys[0]

    def max_key(self) -> str | None:
        """Largest key, None if empty. O(log n)."""
        node = self._root
        if node is None:
            return None
        while node.children is not None:
            node = node.children[-1]
        return node.keys[-1]

    # ---- writes --------------------------------------------------------------------------------

    def _mut_root(self) -> _Node:
        root = self._root
        assert root is not None
        if root.cow != self._cow:
            root = self._root = _copy(root, self._cow)
        return root

    def insert(self, key: str, value: Any) -> Any:
        """Set ``key`` to ``value``; return the previous value or None. O(log n).

        Copies (at most) the nodes on the root-to-leaf path that are shared with a snapshot.
        A self-keyed tree takes only ``value is key`` (ValueError otherwise).
        """
        if self._self_keyed and value is not key:
            raise ValueError("a self-keyed BTree keeps each item as its own key: insert(e, e)")
        key = _check_key(key)
        cow = self._cow
        self._version += 1
        if self._root is None:
            self._root = _Node(cow, [key], [value], None, 1)
            return None
        root = self._mut_root()
        if len(root.keys) >= MAX_ITEMS:
            k, v, second = _split(root, MAX_ITEMS // 2, cow)
            root = self._root = _Node(cow, [k], [v], [root, second], root.size + second.size + 1)
        path = []
        node = root
        while True:
            keys = node.keys
            i = bisect_left(keys, key)
            if i < len(keys) and keys[i] == key:
                old = node.vals[i]
                node.vals[i] = value
                return old
            children = node.children
            if children is None:
                keys.insert(i, key)
                node.vals.insert(i, value)
                node.size += 1
                for p in path:
                    p.size += 1
                return None
            if len(children[i].keys) >= MAX_ITEMS:
                first = _mut_child(node, i, cow)
                k, v, second = _split(first, MAX_ITEMS // 2, cow)
                keys.insert(i, k)
                node.vals.insert(i, v)
                children.insert(i + 1, second)
                if key > k:
                    i += 1
                elif key == k:
                    old = node.vals[i]
                    node.vals[i] = value
                    return old
            path.append(node)
            node = _mut_child(node, i, cow)

    def append(self, key: str, value: Any) -> None:
        """Insert ``key``, greater than every key in the tree (ValueError otherwise)."""
        if self._self_keyed and value is not key:
            raise ValueError("a self-keyed BTree keeps each item as its own key: append(e, e)")
        k = _check_key(key)
        if self._root is not None and not k > self.max_key():
            raise ValueError(f"BTree.append: {k!r} is not after the last key")
        self.insert(key, value)

    def delete(self, key: str) -> Any:
        """Remove ``key`` and return its value; KeyError if absent (tree untouched). O(log n)."""
        key = _check_key(key)
        if self._find(key) is None:
            raise KeyError(key)
        self._version += 1
        root = self._mut_root()
        _, val = _remove(root, key, _REMOVE_ITEM, self._cow)
        if not root.keys:
            self._root = None if root.children is None else root.children[0]
        return val

    def snapshot(self) -> BTree:
        """O(1) copy-on-write clone; later writes to either tree are invisible to the other."""
        out = BTree.__new__(BTree)
        out._root = self._root
        out._version = 0
        out._self_keyed = self._self_keyed
        out._cow = next(_cow_tokens)
        self._cow = next(_cow_tokens)
        return out

    # ---- ordered reads -------------------------------------------------------------------------

    def iter_from(self, start: str | None = None) -> Iterator[tuple[str, Any]]:
        """Iterator of ``(key, value)`` with key >= ``start`` (None: all), in key order.

        O(log n) to position, amortized O(1) per item. RuntimeError if this tree is written meanwhile.
        """
        return self._iter(start, 0)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Iterator of all ``(key, value)`` in key order. O(n) total."""
        return self._iter(None, 0)

    def keys(self) -> Iterator[str]:
        """Iterator of all keys in order. O(n) total."""
        return self._iter(None, 1)

    def values(self) -> Iterator[Any]:
        """Iterator of all values in key order. O(n) total."""
        return self._iter(None, 2)

    def __iter__(self) -> Iterator[str]:
        return self._iter(None, 1)

    def _iter(self, start: str | None, mode: int) -> Iterator[Any]:
        if start is not None:
            start = _check_key(start)
        return self._gen(start, mode)

    def _gen(self, start: str | None, mode: int) -> Iterator[Any]:
        version = self._version
        stack: list[list] = []
        node = self._root
        while node is not None:
            if start is None:
                i, found = 0, False
            else:
                i = bisect_left(node.keys, start)
                found = i < len(node.keys) and node.keys[i] == start
            stack.append([node, i])
            if found or node.children is None:
                break
            node = node.children[i]
        while stack:
            if self._version != version:
                raise RuntimeError("BTree changed during iteration (iterate a snapshot instead)")
            top = stack[-1]
            node, i = top
            if i >= len(node.keys):
                stack.pop()
                continue
            top[1] = i + 1
            if node.children is not None:
                c = node.children[i + 1]
                stack.append([c, 0])
                while c.children is not None:
                    c = c.children[0]
                    stack.append([c, 0])
            if mode == 0:
                yield node.keys[i], node.vals[i]
            elif mode == 1:
                yield node.keys[i]
            else:
                yield node.vals[i]

    def _rank(self, key: str) -> int:
        """Number of keys < ``key``. O(log n) thanks to subtree sizes."""
        r = 0
        node = self._root
        while node is not None:
            keys = node.keys
            i = bisect_left(keys, key)
            found = i < len(keys) and keys[i] == key
            r += i
            children = node.children
            if children is None:
                return r
            for j in range(i):
                r += children[j].size
            if found:
                return r + children[i].size
            node = children[i]
        return r

    def count_from(self, start: str | None, end: str | None = None) -> int:
        """Number of keys k with ``start <= k < end`` (None: unbounded). O(log n), no scan."""
        lo = 0
        if start is not None:
            start = _check_key(start)
            lo = self._rank(start)
        if end is None:
            hi = len(self)
        else:
            end = _check_key(end)
            hi = self._rank(end)
        return max(0, hi - lo)

    # ---- memory / introspection ----------------------------------------------------------------

    def _nodes(self) -> Iterator[_Node]:
        stack = [] if self._root is None else [self._root]
        while stack:
            node = stack.pop()
            yield node
            if node.children is not None:
                stack.extend(node.children)

    def node_count(self) -> int:
        """Number of nodes reachable from this tree (shared nodes included). O(n / 16)."""
        return sum(1 for _ in self._nodes())

    def _node_ids(self) -> set[int]:
        """Identities of the reachable nodes (tests use it to check what copy-on-write shares)."""
        return {id(n) for n in self._nodes()}

    def __sizeof__(self) -> int:
        """Bytes of this tree's own nodes (node objects and their lists, not keys/values). O(n / 16).

        Nodes shared with snapshots are counted in each tree that reaches them.
        """
        total = object.__sizeof__(self)
        getsizeof = sys.getsizeof
        for node in self._nodes():
            total += getsizeof(node) + getsizeof(node.keys) + getsizeof(node.vals)
            if node.children is not None:
                total += getsizeof(node.children)
        return total

    def _check(self) -> None:
        """Check every invariant (order, fill bounds, sizes, len, uniform leaf depth); AssertionError. O(n)."""
        root = self._root
        if root is None:
            return
        assert len(root.keys) >= 1, "empty root"
        leaf_depths: set[int] = set()
        size = _check_node(root, None, None, 0, leaf_depths, True)
        assert len(leaf_depths) == 1, f"leaves at depths {leaf_depths}"
        assert size == len(self)
        n = 0
        prev = None
        for k in self._gen(None, 1):
            assert prev is None or prev < k
            prev = k
            n += 1
        assert n == len(self)


def _check_node(node: _Node, lo: str | None, hi: str | None, depth: int, leaf_depths: set, is_root: bool) -> int:
    keys = node.keys
    n = len(keys)
    assert len(node.vals) == n, "keys/vals length mismatch"
    assert n <= MAX_ITEMS, f"node overfull: {n}"
    assert is_root or n >= MIN_ITEMS, f"node underfull: {n}"
    for a, b in zip(keys, keys[1:]):
        assert a < b, f"keys out of order: {a!r} >= {b!r}"
    for k in keys:
        assert isinstance(k, str)
        assert lo is None or lo < k, f"key {k!r} <= lower bound {lo!r}"
        assert hi is None or k < hi, f"key {k!r} >= upper bound {hi!r}"
    if node.children is None:
        leaf_depths.add(depth)
        assert node.size == n, f"leaf size {node.size} != {n}"
        return n
    assert len(node.children) == n + 1, "internal node children count"
    total = n
    bounds = [lo, *keys, hi]
    for j, c in enumerate(node.children):
        total += _check_node(c, bounds[j], bounds[j + 1], depth + 1, leaf_depths, False)
    assert node.size == total, f"subtree size {node.size} != {total}"
    return total


def _remove(node: _Node, key: str | None, typ: int, cow: int) -> tuple[str, Any]:
    """Remove ``key`` (or the maximum, ``typ == _REMOVE_MAX``) below the mutable ``node``.

    The target must exist (callers check first), so each node on the path loses exactly one item:
    its ``size`` is decremented on entry. Minimal children are grown before descending. O(log n).
    """
    node.size -= 1
    while True:
        children = node.children
        if typ == _REMOVE_MAX:
            if children is None:
                return node.keys.pop(), node.vals.pop()
            i = len(node.keys)
            found = False
        else:
            keys = node.keys
            i = bisect_left(keys, key)  # type: ignore[type-var]
            found = i < len(keys) and keys[i] == key
            if children is None:
                assert found, "BTree._remove: key vanished"
                return keys.pop(i), node.vals.pop(i)
        if len(children[i].keys) <= MIN_ITEMS:
            _grow_child(node, i, cow)
            continue  # the node changed: search again
        child = _mut_child(node, i, cow)
        if found:
            # Replace the item by its predecessor (the maximum of the left subtree).
            out = node.keys[i], node.vals[i]
            node.keys[i], node.vals[i] = _remove(child, None, _REMOVE_MAX, cow)
            return out
        child.size -= 1
        node = child


def _grow_child(node: _Node, i: int, cow: int) -> None:
    """Give child ``i`` of the mutable ``node`` more than MIN_ITEMS items: steal or merge. O(1)."""
    children = node.children
    assert children is not None
    if i > 0 and len(children[i - 1].keys) > MIN_ITEMS:
        child = _mut_child(node, i, cow)
        left = _mut_child(node, i - 1, cow)
        child.keys.insert(0, node.keys[i - 1])
        child.vals.insert(0, node.vals[i - 1])
        node.keys[i - 1] = left.keys.pop()
        node.vals[i - 1] = left.vals.pop()
        moved = 1
        if left.children is not None:
            c = left.children.pop()
            child.children.insert(0, c)  # type: ignore[union-attr]
            moved += c.size
        left.size -= moved
        child.size += moved
    elif i < len(node.keys) and len(children[i + 1].keys) > MIN_ITEMS:
        child = _mut_child(node, i, cow)
        right = _mut_child(node, i + 1, cow)
        child.keys.append(node.keys[i])
        child.vals.append(node.vals[i])
        node.keys[i] = right.keys.pop(0)
        node.vals[i] = right.vals.pop(0)
        moved = 1
        if right.children is not None:
            c = right.children.pop(0)
            child.children.append(c)  # type: ignore[union-attr]
            moved += c.size
        right.size -= moved
        child.size += moved
    else:
        if i >= len(node.keys):
            i -= 1
        child = _mut_child(node, i, cow)
        merged = children.pop(i + 1)  # only read from: may stay shared with a snapshot
        child.keys.append(node.keys.pop(i))
        child.vals.append(node.vals.pop(i))
        child.keys.extend(merged.keys)
        child.vals.extend(merged.vals)
        if child.children is not None:
            child.children.extend(merged.children)  # type: ignore[arg-type]
        child.size += 1 + merged.size
