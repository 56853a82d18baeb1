"""Tests for ext.btree (compiled) and ext.btree_py (pure-Python twin): the copy-on-write B-tree
of the watch cache (SPEC S2.14-S2.18, S9.7). Both implementations, ids ``py``/``c``."""

from __future__ import annotations

import random
from types import ModuleType

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule

import ext.btree as btree_c  # no importorskip: a missing compiled module must fail the run loudly
import ext.btree_py as btree_py

IMPLS = [btree_py, btree_c]
IDS = ["py", "c"]


@pytest.fixture(params=IMPLS, ids=IDS)
def impl(request: pytest.FixtureRequest) -> ModuleType:
    return request.param


# Small alphabet so that keys collide (replace/delete hit) and share prefixes; includes non-ASCII
# to exercise code point order (== UTF-8 byte order).
KEYS = st.text(alphabet="ab/\x00zé空", min_size=0, max_size=4)


class Model:
    """Naive model: dict + sorted keys."""

    def __init__(self, d: dict | None = None) -> None:
        self.d = dict(d or {})

    def sorted_items(self) -> list:
        return sorted(self.d.items())

    def iter_from(self, start):
        return [(k, v) for k, v in self.sorted_items() if start is None or k >= start]

    def count_from(self, start, end):
        return sum(1 for k in self.d if (start is None or k >= start) and (end is None or k < end))


def _same(tree, model: Model) -> None:
    assert len(tree) == len(model.d)
    assert list(tree.items()) == model.sorted_items()


def make_machine(mod: ModuleType, self_keyed: bool = False):
    """The tree against the model; `self_keyed`: every item is its own key (the value drawn is replaced by the
    key), the watch cache's one-pointer-per-item mode."""
    class BTreeMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tree = mod.BTree(self_keyed=self_keyed) if self_keyed else mod.BTree()
            self.model = Model()
            self.snaps: list[tuple] = []  # (snapshot, model copy at snapshot time)

        def _check_all(self) -> None:
            self.tree._check()
            for s, _ in self.snaps:
                s._check()

        @rule(key=KEYS, value=st.integers())
        def insert(self, key, value):
            value = key if self_keyed else value
            assert self.tree.insert(key, value) == self.model.d.get(key)
            self.model.d[key] = value
            self._check_all()

        @rule(n=st.integers(1, 120), seed=st.integers(0, 2**16))
        def insert_many(self, n, seed):
            # Bulk inserts so that the tree gets several levels (degree 16: > 31 keys per split).
            rnd = random.Random(seed)
            for _ in range(n):
                key = "".join(rnd.choice("abcdefgh") for _ in range(rnd.randint(1, 4)))
                value = key if self_keyed else seed
                self.tree.insert(key, value)
                self.model.d[key] = value
            self._check_all()

        @rule(key=KEYS)
        def delete(self, key):
            if key in self.model.d:
                assert self.tree.delete(key) == self.model.d.pop(key)
            else:
                with pytest.raises(KeyError):
                    self.tree.delete(key)
            self._check_all()

        @precondition(lambda self: len(self.model.d) > 0)
        @rule(data=st.data(), frac=st.floats(0, 1))
        def delete_many(self, data, frac):
            keys = sorted(self.model.d)
            rnd = random.Random(data.draw(st.integers(0, 2**16)))
            for k in rnd.sample(keys, int(len(keys) * frac)):
                assert self.tree.delete(k) == self.model.d.pop(k)
            self._check_all()

        @rule(key=KEYS)
        def get(self, key):
            assert self.tree.get(key, "absent") == self.model.d.get(key, "absent")
            assert (key in self.tree) == (key in self.model.d)

        @rule(start=st.none() | KEYS)
        def iter_from(self, start):
            assert list(self.tree.iter_from(start)) == self.model.iter_from(start)

        @rule(start=st.none() | KEYS, end=st.none() | KEYS)
        def count_from(self, start, end):
            assert self.tree.count_from(start, end) == self.model.count_from(start, end)

        @rule()
        def snapshot(self):
            self.snaps.append((self.tree.snapshot(), Model(self.model.d)))
            self._check_all()

        @precondition(lambda self: len(self.snaps) > 0)
        @rule(i=st.integers(0, 100))
        def drop_snapshot(self, i):
            self.snaps.pop(i % len(self.snaps))

        @precondition(lambda self: len(self.snaps) > 0)
        @rule(i=st.integers(0, 100), key=KEYS, value=st.integers())
        def write_snapshot(self, i, key, value):
            # Snapshots are full trees: writing one must not leak into the original or other snapshots.
            s, m = self.snaps[i % len(self.snaps)]
            if self_keyed:
                value, odd = key, value % 2
            else:
                odd = value % 2
            if key in m.d and odd:
                assert s.delete(key) == m.d.pop(key)
            else:
                assert s.insert(key, value) == m.d.get(key)
                m.d[key] = value
            self._check_all()

        @invariant()
        def contents(self):
            _same(self.tree, self.model)
            for s, m in self.snaps:
                _same(s, m)
                start = min(m.d) if m.d else None
                assert list(s.iter_from(start)) == m.iter_from(start)
                assert s.min_key() == (min(m.d) if m.d else None)
                assert s.max_key() == (max(m.d) if m.d else None)

    BTreeMachine.TestCase.settings = settings(
        max_examples=100, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    return BTreeMachine


TestStateMachinePy = make_machine(btree_py).TestCase
TestStateMachineC = make_machine(btree_c).TestCase
TestStateMachineSelfKeyedPy = make_machine(btree_py, self_keyed=True).TestCase
TestStateMachineSelfKeyedC = make_machine(btree_c, self_keyed=True).TestCase


def test_self_keyed_tree_keeps_one_pointer_per_item_and_takes_only_items_as_their_keys(impl):
    t = impl.BTree(self_keyed=True)
    assert t.self_keyed and not impl.BTree().self_keyed
    with pytest.raises(ValueError):
        t.insert("a", "b")
    with pytest.raises(ValueError):
        t.append("a", 1)
    keys = [f"k{i:05d}" for i in range(3000)]
    for k in keys:
        t.append(k, k)
    snap = t.snapshot()
    assert snap.self_keyed
    with pytest.raises(ValueError):
        snap.insert("k00001", 1)
    for k in keys[::3]:
        assert t.delete(k) == k
    t._check()
    snap._check()
    assert list(t.keys()) == [k for i, k in enumerate(keys) if i % 3] and list(snap.values()) == keys
    if impl is btree_c:
        two = btree_c.BTree()
        for k in keys:
            two.append(k, k)
        # one pointer (8 B) per item and per spare slot less
        assert snap.__sizeof__() < two.__sizeof__() - 8 * len(keys)


# ---- edge cases -------------------------------------------------------------------------------


def test_empty(impl):
    t = impl.BTree()
    t._check()
    assert len(t) == 0
    assert t.get("a") is None and t.get("a", 7) == 7
    assert "a" not in t
    assert list(t.items()) == [] and list(t.keys()) == [] and list(t.iter_from("a")) == []
    assert t.count_from(None) == 0 and t.count_from("a", "b") == 0
    assert t.min_key() is None and t.max_key() is None
    assert t.node_count() == 0
    with pytest.raises(KeyError):
        t.delete("a")
    with pytest.raises(KeyError):
        t["a"]
    s = t.snapshot()
    assert len(s) == 0
    s._check()


def test_single_key_and_delete_to_empty(impl):
    t = impl.BTree()
    assert t.insert("k", 1) is None
    assert t.insert("k", 2) == 1
    assert len(t) == 1 and t["k"] == 2 and t.min_key() == t.max_key() == "k"
    assert list(t.iter_from("k")) == [("k", 2)] and list(t.iter_from("k\x00")) == []
    assert t.count_from("k") == 1 and t.count_from("k", "k") == 0 and t.count_from("l", "a") == 0
    assert t.delete("k") == 2
    assert len(t) == 0 and t.node_count() == 0
    t._check()
    t.insert("x", None)
    assert "x" in t and t.get("x", 5) is None


def test_many_keys_delete_to_empty(impl):
    rnd = random.Random(1)
    keys = [f"/registry/pods/ns{rnd.randrange(50)}/p{i}" for i in range(3000)]
    t = impl.BTree()
    for i, k in enumerate(keys):
        t.insert(k, i)
    t._check()
    assert list(t.keys()) == sorted(set(keys))
    prefix = "/registry/pods/ns1/"
    assert t.count_from(prefix, prefix[:-1] + "0") == sum(1 for k in set(keys) if k.startswith(prefix))
    rnd.shuffle(keys)
    for j, k in enumerate(dict.fromkeys(keys)):
        t.delete(k)
        if j % 97 == 0:
            t._check()
    assert len(t) == 0
    t._check()


def test_key_type_errors(impl):
    t = impl.BTree()
    t.insert("a", 1)
    for bad in (1, b"a", None):
        with pytest.raises(TypeError):
            t.insert(bad, 1)
        with pytest.raises(TypeError):
            t.get(bad)
        with pytest.raises(TypeError):
            bad in t  # noqa: B015
    with pytest.raises(TypeError):
        t.iter_from(1)
    with pytest.raises(TypeError):
        t.count_from("a", 3)


def test_utf8_byte_order(impl):
    keys = ["a", "z", "é", "\x7f", "空", "\U0001f600", "\uffff", "a\x00"]
    t = impl.BTree()
    for k in keys:
        t.insert(k, k)
    assert list(t.keys()) == sorted(keys, key=lambda s: s.encode("utf-8"))


def test_snapshot_isolation_both_ways(impl):
    t = impl.BTree()
    for i in range(1000):
        t.insert(f"k{i:04d}", i)
    s = t.snapshot()
    s.insert("k0500", "snap")
    s.delete("k0001")
    s.insert("zzz", 0)
    t.insert("k0500", "orig")
    t.delete("k0002")
    assert t["k0500"] == "orig" and "k0001" in t and "k0002" not in t and "zzz" not in t
    assert s["k0500"] == "snap" and "k0001" not in s and "k0002" in s and "zzz" in s
    t._check()
    s._check()


def test_snapshots_of_snapshots(impl):
    t = impl.BTree()
    chain = []  # (tree, expected dict)
    expected: dict = {}
    rnd = random.Random(7)
    cur = t
    for gen in range(40):
        for _ in range(60):
            k = f"k{rnd.randrange(400):03d}"
            if rnd.random() < 0.3 and k in expected:
                cur.delete(k)
                del expected[k]
            else:
                cur.insert(k, gen)
                expected[k] = gen
        chain.append((cur, dict(expected)))
        cur = cur.snapshot() if gen % 2 else chain[rnd.randrange(len(chain))][0].snapshot()
        expected = dict(dict(cur.items()))
    for tree, exp in chain:
        tree._check()
        assert list(tree.items()) == sorted(exp.items())


def test_write_copies_only_the_path(impl):
    t = impl.BTree()
    for i in range(20_000):
        t.insert(f"k{i:06d}", i)
    n = t.node_count()
    assert n > 600
    s = t.snapshot()
    before = t._node_ids()
    assert s._node_ids() == before
    s.insert("k010000", "new")  # replace: copies exactly the root-to-leaf path
    ids_t, ids_s = t._node_ids(), s._node_ids()
    assert ids_t == before
    # depth of a 20k-entry degree-16 tree is 3 or 4
    diff = len(ids_s - ids_t)
    assert 2 <= diff <= 4, diff
    assert len(ids_s & ids_t) == n - diff
    assert t["k010000"] == 10000


def test_iteration_of_snapshot_stable_while_original_mutates(impl):
    t = impl.BTree()
    for i in range(2000):
        t.insert(f"k{i:05d}", i)
    s = t.snapshot()
    it = s.iter_from("k00100")
    seen = [next(it) for _ in range(10)]
    for i in range(0, 2000, 3):
        t.delete(f"k{i:05d}")
    for i in range(5000):
        t.insert(f"j{i:05d}", -i)
    seen.extend(it)
    assert seen == [(f"k{i:05d}", i) for i in range(100, 2000)]


def test_mutating_while_iterating_same_tree_raises(impl):
    t = impl.BTree()
    for i in range(100):
        t.insert(f"k{i:03d}", i)
    it = t.items()
    next(it)
    t.insert("zzz", 1)
    with pytest.raises(RuntimeError):
        next(it)


def test_dropped_snapshot_then_writes(impl):
    # The compiled tree adopts nodes no other tree references; results must be identical.
    t = impl.BTree()
    for i in range(5000):
        t.insert(f"k{i:05d}", i)
    s = t.snapshot()
    del s
    for i in range(0, 5000, 2):
        t.delete(f"k{i:05d}")
    t._check()
    assert list(t.keys()) == [f"k{i:05d}" for i in range(1, 5000, 2)]


def test_sizeof_counts_nodes_only(impl):
    t = impl.BTree()
    empty = t.__sizeof__()
    for i in range(10_000):
        t.insert(f"k{i:06d}", i)
    size = t.__sizeof__()
    assert size > empty
    per_entry = (size - empty) / len(t)
    assert 8 < per_entry < 200, per_entry
    s = t.snapshot()
    assert s.__sizeof__() == size and s.node_count() == t.node_count()


def test_count_from_matches_scan(impl):
    rnd = random.Random(3)
    t = impl.BTree()
    keys = sorted({"".join(rnd.choice("abcd") for _ in range(rnd.randint(1, 6))) for _ in range(3000)})
    for k in keys:
        t.insert(k, None)
    probes = [None] + [rnd.choice(keys) for _ in range(50)] + ["", "b", "ccc\x00", "e"]
    for a in probes:
        for b in probes[:12]:
            exp = sum(1 for k in keys if (a is None or k >= a) and (b is None or k < b))
            assert t.count_from(a, b) == exp


def test_compiled_module_is_compiled():
    assert btree_c.__file__.endswith(".so"), btree_c.__file__
    assert btree_c.DEGREE == btree_py.DEGREE == 16
    assert btree_c.MAX_ITEMS == btree_py.MAX_ITEMS == 31
    assert btree_c.MIN_ITEMS == btree_py.MIN_ITEMS == 15


def test_package_exports_compiled():
    import os

    import ext

    if os.environ.get("RESIDENCY_PURE_PYTHON") == "1":
        # The debugging escape hatch selects the twin on purpose.
        assert ext.BTree is btree_py.BTree
        return
    assert ext.BTree is btree_c.BTree


def test_append_builds_the_tree_insert_builds_and_refuses_a_key_not_after_the_last(impl: ModuleType) -> None:
    """BTree.append (a warm start installs a saved resource in key order): the same tree as inserting the same
    keys (items, node count, structure checks), copy-on-write against a snapshot taken midway, and a ValueError
    (tree untouched) for a key equal to or before the last one."""
    keys = sorted(f"/registry/pods/ns{i % 37}/p{i:05d}" for i in range(3000))
    appended, inserted = impl.BTree(), impl.BTree()
    snap, half = None, None
    for i, k in enumerate(keys):
        appended.append(k, i)
        inserted.insert(k, i)
        if i == 1500:
            snap, half = appended.snapshot(), list(appended.items())
    assert list(appended.items()) == list(inserted.items()) and len(appended) == 3000
    assert appended.node_count() == inserted.node_count()
    appended._check()
    assert list(snap.items()) == half
    for bad in (keys[-1], keys[0], "/registry/pods/ns0/p00000"):
        with pytest.raises(ValueError):
            appended.append(bad, -1)
    assert list(appended.items()) == list(inserted.items())
    empty = impl.BTree()
    empty.append("", 1)
    assert list(empty.items()) == [("", 1)]
    with pytest.raises(TypeError):
        impl.BTree().append(b"bytes", 1)
