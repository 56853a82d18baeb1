"""machinery/shard_selector.py: shardSelector grammar, messages, canonical form, matching (SPEC S7.1-S7.11)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from machinery.shard_selector import (FULL, ShardSelector, ShardSelectorError, complementary, parse_shard_selector,
                            status_error)
import ext.fnv_py as fnv_py

U = "object.metadata.uid"
NS = "object.metadata.namespace"
Z = "0x0000000000000000"
H = "0x8000000000000000"
TOP = "0x10000000000000000"


def sr(a: str, b: str, f: str = U, q: str = "'") -> str:
    return f"shardRange({f}, {q}{a}{q}, {q}{b}{q})"


def err(s: str) -> str:
    with pytest.raises(ShardSelectorError) as ei:
        parse_shard_selector(s)
    m = str(ei.value)
    assert m.startswith("invalid shard selector: ")  # S7.8
    return m[len("invalid shard selector: "):]


# --- S7.1 / S7.8: empty vs whitespace -----------------------------------------------------------------

def test_s7_1_empty_is_absent():
    assert parse_shard_selector("") is None


@pytest.mark.parametrize("s", [" ", "\t\n", "  \r "])
def test_s7_8_whitespace_only_rejected(s):
    assert err(s) == "empty shard selector is not allowed; omit the parameter for unfiltered lists"


# --- S7.4-S7.7 accepted ---------------------------------------------------------------------------------

@pytest.mark.parametrize("s,field,ranges", [
    (sr(Z, H), "uid", [(0, 1 << 63)]),
    (sr(Z, TOP), "uid", [(0, FULL)]),
    (sr("0x00000000000000aa", "0x00000000000000ff", NS), "namespace", [(0xaa, 0xff)]),
    (sr(Z, H) + " || " + sr(H, TOP), "uid", [(0, 1 << 63), (1 << 63, FULL)]),
    ("shardRange(object.metadata.uid,'0x0000000000000000','0x8000000000000000')", "uid", [(0, 1 << 63)]),
    ("  shardRange( object.metadata.uid ,  '0x0000000000000000' ,  '0x8000000000000000' )  ", "uid", [(0, 1 << 63)]),
    (sr(Z, H, q='"'), "uid", [(0, 1 << 63)]),                                   # S7.6 double quotes
    (f"({sr(Z, '0x0000000000000005')} || {sr('0x0000000000000005', '0x000000000000000a')}) || "
     f"{sr('0x000000000000000a', '0x000000000000000f')}", "uid", [(0, 5), (5, 10), (10, 15)]),  # S7.4 nesting
    (f"{sr(Z, '0x0000000000000005')} || ({sr('0x0000000000000005', '0x000000000000000a')} || "
     f"({sr('0x000000000000000a', '0x000000000000000f')}))", "uid", [(0, 5), (5, 10), (10, 15)]),
    (f"(({sr(Z, H)}))", "uid", [(0, 1 << 63)]),
    (sr(Z, H) + " || " + sr("0x0000000000000001", TOP), "uid", [(0, 1 << 63), (1, FULL)]),  # S7.7 overlap ok
    (sr(Z, H) + "||" + sr(Z, H), "uid", [(0, 1 << 63), (0, 1 << 63)]),                     # duplicates kept
])
def test_s7_4_to_s7_7_accepted(s, field, ranges):
    sel = parse_shard_selector(s)
    assert sel.field == field and sel.ranges == ranges


# --- S7.4-S7.8 rejected, with upstream messages ------------------------------------------------------------

@pytest.mark.parametrize("s,msg", [
    # S7.6 short forms: did-you-mean
    (sr("0x0", H), 'hexStart must be a 0x-prefixed 16-digit hex value, got "0x0" (did you mean "0x0000000000000000"?)'),
    (sr(Z, "0xff"), 'hexEnd must be a 0x-prefixed 16-digit hex value, got "0xff" (did you mean "0x00000000000000ff"?)'),
    # S7.6 upper case / 0X / no prefix / empty / too long / bad char
    (sr(Z, "0x800000000000000A"), 'hexEnd: invalid hex character "A" in "0x800000000000000A"'),
    (sr("0X0000000000000000", H), "hexStart must have '0x' prefix, got \"0X0000000000000000\""),
    (sr("0000000000000000", H), "hexStart must have '0x' prefix, got \"0000000000000000\""),
    (sr("0x", H), "hexStart: hex value is required after '0x'"),
    (sr("0x000000000000000000", H), 'hexStart: hex value too long (18 chars, max 17): "000000000000000000"'),
    (sr("0x0g", H), 'hexStart: invalid hex character "g" in "0x0g"'),
    # S7.6 17 digits other than 2^64
    (sr(Z, "0x10000000000000001"),
     "hexEnd: 17-digit hex value must be '0x10000000000000000' (2^64), got \"0x10000000000000001\""),
    (sr(Z, "0x20000000000000000"),
     "hexEnd: 17-digit hex value must be '0x10000000000000000' (2^64), got \"0x20000000000000000\""),
    # S7.7 equal / reversed (2^64 is a valid literal for the start too, but never below an end)
    (sr(H, H), f"shard range start {H} must be less than end {H}"),
    (sr("0xffffffffffffffff", Z), f"shard range start 0xffffffffffffffff must be less than end {Z}"),
    (sr(TOP, TOP), f"shard range start {TOP} must be less than end {TOP}"),
    # S7.5 fields
    (sr(Z, H) + " || " + sr(H, TOP, NS), f'all shard ranges must use the same field, got "{U}" and "{NS}"'),
    (sr("0x00", "0x80", "object.metadata.name"),
     'unsupported field path "object.metadata.name"; supported: object.metadata.uid, object.metadata.namespace'),
    (sr(Z, H, "metadata.uid"),
     'unsupported field path "metadata.uid"; supported: object.metadata.uid, object.metadata.namespace'),
    # S7.4 other operators / functions
    (sr(Z, H) + " && " + sr(H, TOP), 'unsupported function "_&&_"; only shardRange() and || are allowed'),
    ("object.metadata.uid > '0x0'", 'unsupported function "_>_"; only shardRange() and || are allowed'),
    ("invalidFunc(object.metadata.uid, '0x00', '0x80')",
     'unsupported function "invalidFunc"; only shardRange() and || are allowed'),
    ("!" + sr(Z, H), 'unsupported function "!_"; only shardRange() and || are allowed'),
    (sr(Z, H) + " || true", "unexpected expression kind 5; expected shardRange() call or || operator"),
    ("shardRange(object.metadata.uid, '0x0')", "shardRange() requires exactly 3 arguments, got 2"),
    ("shardRange()", "shardRange() requires exactly 3 arguments, got 0"),
    ("shardRange(object.metadata.uid, 0, 8)", "hexStart must be a string literal, got int64"),
    ("shardRange(object.metadata.uid, hex(0), '0x8')",
     "hexStart must be a string literal (e.g. '0xff'), got expression kind 1"),
    ("shardRange(object['metadata'].uid, '0x00', '0x80')",
     "shardRange() first argument: expected field path (e.g. object.metadata.uid), got expression kind 1"),
])
def test_s7_8_rejected_messages(s, msg):
    assert err(s) == msg


@pytest.mark.parametrize("s", ["shardRange(", sr(Z, H) + " ||", "shardRange(object.metadata.uid, '0x0, '0x1')",
                               "@", sr(Z, H) + ")", "if"])
def test_s7_8_not_cel_is_a_parse_error(s):
    assert err(s).startswith("CEL parse error: ")


def test_s7_9_status_is_400_bad_request():
    with pytest.raises(ShardSelectorError) as ei:
        parse_shard_selector(sr("0x0", H))
    se = status_error(ei.value)
    assert se.code == 400 and se.reason == "BadRequest"
    assert se.message == str(ei.value)


# --- S7.3 canonical form ------------------------------------------------------------------------------------

def test_s7_3_canonical_string():
    s = f'( shardRange(object.metadata.uid,"{Z}",\'{H}\')||shardRange( object.metadata.uid , "{H}" , "{TOP}" ) )'
    assert str(parse_shard_selector(s)) == f"{sr(Z, H)} || {sr(H, TOP)}"
    assert str(parse_shard_selector(sr("0x00000000000000aa", "0x00000000000000ff", NS))) == \
        "shardRange(object.metadata.namespace, '0x00000000000000aa', '0x00000000000000ff')"


# --- S7.10 / S7.11 hashing and matching -----------------------------------------------------------------------

VECTORS = {"": 0xcbf29ce484222325, "a": 0xaf63dc4c8601ec8c, "default": 0xebada5168620c5fe,
           "kube-system": 0xdf65c7bc1d82b35e, "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee": 0x93754b7248a00eb9,
           "6f1c8e0a-3c3e-4b8e-9a55-2f0c1e7d9b10": 0xe1324157e7400a80}


@pytest.mark.parametrize("value,h", sorted(VECTORS.items()))
def test_s7_10_vectors_through_matches(value, h):
    point_uid = ShardSelector("uid", [(h, h + 1)])
    point_ns = ShardSelector("namespace", [(h, h + 1)])
    assert point_uid.matches(value, "other-ns-not-hashed")
    assert point_ns.matches("other-uid-not-hashed", value)
    below = ShardSelector("uid", [(0, h)]) if h else None
    if below is not None:
        assert not below.matches(value, value)           # end exclusive (S7.11)
    assert ShardSelector("uid", [(h, FULL)]).matches(value, "")  # start inclusive


def test_s7_11_cluster_scoped_namespace_shard():
    sel = parse_shard_selector(sr("0xcbf29ce484222325", "0xcbf29ce484222326", NS))
    assert sel.matches("any-uid", "")


# --- properties -----------------------------------------------------------------------------------------------

u64 = st.integers(min_value=0, max_value=FULL - 1)


@st.composite
def ranges(draw):
    a = draw(st.integers(min_value=0, max_value=FULL))
    b = draw(st.integers(min_value=0, max_value=FULL))
    if a == b:
        b = a + 1 if a < FULL else a - 1
    return (min(a, b), max(a, b))


selectors = st.builds(ShardSelector, st.sampled_from(["uid", "namespace"]), st.lists(ranges(), min_size=1, max_size=5))


@given(selectors)
def test_roundtrip_parse_str(sel):
    assert parse_shard_selector(str(sel)) == sel


@given(st.integers(min_value=1, max_value=64), st.lists(u64, max_size=20))
@settings(max_examples=60)
def test_complementary_partition(k, hashes):
    shards = complementary(k)
    rs = [s.ranges[0] for s in shards]
    assert rs[0][0] == 0 and rs[-1][1] == FULL
    for (a, b), (c, d) in zip(rs, rs[1:]):
        assert b == c and a < b
    assert ShardSelector("uid", rs).contains(ShardSelector("uid", [(0, FULL)]))  # the union covers everything
    for h in hashes + [0, FULL - 1]:
        assert sum(s.matches_hash(h) for s in shards) == 1
    for s in shards:
        assert parse_shard_selector(str(s)) == s


def test_complementary_namespace_and_bounds():
    assert [s.field for s in complementary(3, "namespace")] == ["namespace"] * 3
    assert complementary(1)[0].ranges == [(0, FULL)]
    with pytest.raises(ValueError):
        complementary(0)


@st.composite
def near_points(draw, sels):
    pts = {0, FULL - 1}
    for s in sels:
        for a, b in s.ranges:
            pts.update({a, b - 1, min(b, FULL - 1), max(a - 1, 0)})
    extra = draw(st.lists(u64, max_size=10))
    return sorted(pts | set(extra))


@given(st.data(), st.lists(ranges(), min_size=1, max_size=4), st.lists(ranges(), min_size=1, max_size=4))
@settings(max_examples=200)
def test_contains_agrees_with_brute_force(data, ra, rb):
    a, b = ShardSelector("uid", ra), ShardSelector("uid", rb)
    pts = data.draw(near_points([a, b]))
    brute = all(a.matches_hash(h) for h in pts if b.matches_hash(h))
    # The probe points include every range boundary, so brute force over them is exact.
    assert a.contains(b) == brute
    assert a.contains(a)
    assert not a.contains(ShardSelector("namespace", rb))
    assert a.contains(ShardSelector("uid", [(0, FULL)])) == all(a.matches_hash(h) for h in pts)


def test_fnv_twin_agrees_on_vectors():
    for v, h in VECTORS.items():
        assert fnv_py.fnv1a64(v) == h


def test_deep_nesting_limits():
    ok = "(" * 200 + sr(Z, H) + ")" * 200
    assert parse_shard_selector(ok).ranges == [(0, 1 << 63)]
    assert err("(" * 400 + sr(Z, H) + ")" * 400).startswith("CEL parse error: ")
    many = " || ".join([sr(Z, H)] * 1000)
    assert len(parse_shard_selector(many).ranges) == 1000
    assert err(" || ".join([sr(Z, H)] * 1300)).startswith("CEL parse error: expression code point size exceeds limit")


# cel-go v0.26.0's limits as k8s.io/apiserver v0.36.0 sharding.Parse reports them (checked with Go): the
# parse listener's per-rule nesting depth (250; every nesting goes through `expr`, the call's arguments
# included) and the AST visitor's depth (250 nested select / index / member-call / operator nodes);
# `!` and `-` runs of even length cancel out.
@pytest.mark.parametrize("expr,want", [
    ("(" * 248 + sr(Z, H) + ")" * 248, None),
    ("(" * 249 + sr(Z, H) + ")" * 249, "CEL parse error: expression recursion limit exceeded: 250"),
    ("f(" * 250 + ")" * 250, 'unsupported function "f"; only shardRange() and || are allowed'),
    ("f(" * 251 + ")" * 251, "CEL parse error: expression recursion limit exceeded: 250"),
    ("[" * 250 + "]" * 250, "unexpected expression kind 4; expected shardRange() call or || operator"),
    ("[" * 251 + "]" * 251, "CEL parse error: expression recursion limit exceeded: 250"),
    ("a ? b : " * 249 + "c", 'unsupported function "_?_:_"; only shardRange() and || are allowed'),
    ("a ? b : " * 250 + "c", "CEL parse error: expression recursion limit exceeded: 250"),
    ("a" + "[0]" * 250, 'unsupported function "_[_]"; only shardRange() and || are allowed'),
    ("a" + "[0]" * 251, "CEL parse error: max recursion depth exceeded"),
    ("a" + ".b" * 251, "CEL parse error: max recursion depth exceeded"),
    (" + ".join(["1"] * 251), 'unsupported function "_+_"; only shardRange() and || are allowed'),
    ("!" * 250 + sr(Z, H), None),
    ("!" * 251 + sr(Z, H), 'unsupported function "!_"; only shardRange() and || are allowed'),
    ("--x", "unexpected expression kind 3; expected shardRange() call or || operator"),
    ("--5", "unexpected expression kind 5; expected shardRange() call or || operator"),
    ("-5", "unexpected expression kind 5; expected shardRange() call or || operator"),
    ("---5", 'unsupported function "-_"; only shardRange() and || are allowed'),
    ("!-5", 'unsupported function "!_"; only shardRange() and || are allowed'),
])
def test_cel_go_depth_limits_and_unary_runs(expr, want):
    if want is None:
        assert parse_shard_selector(expr).ranges == [(0, 1 << 63)]
    else:
        assert err(expr) == want


def test_parser_needs_no_python_stack():
    # The parser drives its rules from one loop: deep input parses even with little stack left,
    # and importing the module leaves the process's recursion limit alone.
    import subprocess
    import sys
    code = ("import sys; before = sys.getrecursionlimit(); import machinery.shard_selector, machinery.selectors, "
            "machinery.listoptions; assert sys.getrecursionlimit() == before, sys.getrecursionlimit()")
    subprocess.run([sys.executable, "-c", code], check=True)
    deep = "(" * 248 + " || ".join([sr(Z, H)] * 3) + ")" * 248

    def at_depth(n: int):
        if n > 0:
            return at_depth(n - 1)
        return parse_shard_selector(deep)
    import inspect
    room = sys.getrecursionlimit() - len(inspect.stack()) - 40
    assert at_depth(room).ranges == [(0, 1 << 63)] * 3
