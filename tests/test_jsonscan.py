"""ext.jsonscan (compiled) against ext.jsonscan_py (twin) and against the truth: orjson writes every
float with '.' or an exponent, so `has_float(orjson.dumps(v))` must equal "v contains a float"."""
from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ext.jsonscan as scan_c  # no importorskip: a missing compiled module must fail the run loudly
import ext.jsonscan_py as scan_py

_text = st.text(alphabet=st.sampled_from(list('ab1.eE"\\:,[]{}- \u2028<')), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(_text, kids, max_size=4),
    max_leaves=20)


def _has_float_value(v) -> bool:
    if isinstance(v, float):
        return True
    if isinstance(v, list):
        return any(_has_float_value(x) for x in v)
    if isinstance(v, dict):
        return any(_has_float_value(x) for x in v.values())
    return False


@settings(max_examples=1500)
@given(_json)
def test_has_float_matches_the_value_and_the_twin(v):
    b = orjson.dumps(v)
    want = _has_float_value(v)
    assert scan_c.has_float(b) is want, b
    assert scan_py.has_float(b) is want, b


def test_has_float_cases():
    for b, want in [(b"1", False), (b"1.5", True), (b"1e16", True), (b"-2E-3", True), (b"true", False),
                    (b'{"a":"1.5e3"}', False), (b'{"a\\"":1.0}', True), (b'["\\\\",2]', False),
                    (b'{"false":true,"e":3}', False), (b"", False)]:
        assert scan_c.has_float(b) is want, b
        assert scan_py.has_float(b) is want, b


@settings(max_examples=800)
@given(st.lists(_json, max_size=4), st.integers(0, 40))
def test_container_end_finds_each_item_and_waits_for_the_rest(items, cut):
    """The front splits a shard's list into items with container_end: every item's end, -1 when cut short."""
    body = b"[" + b",".join(orjson.dumps([v]) for v in items) + b"]"
    for mod in (scan_c, scan_py):
        assert mod.container_end(body, 0) == len(body)
        pos = 1
        for v in items:
            end = mod.container_end(body, pos)
            assert orjson.loads(body[pos:end]) == [v]
            pos = end + 1
        short = body[:max(0, len(body) - 1 - cut)]
        assert mod.container_end(short, 0) == -1


# needs_slow_loads: a bare -0 token or a run of 19+ digits sends jsonenc.loads to the stdlib path (orjson
# decodes both unlike Go). Texts from the characters that matter, in any order (valid JSON or not: the check
# runs before any parse).
_scan_text = st.lists(st.sampled_from([b"-0", b"-", b"0", b"7", b"1234567", b" ", b"\t", b"\n", b":", b",", b"[", b"]",
                                        b"{", b'"', b".", b"e", b"E", b"a"]), max_size=30).map(b"".join)


@settings(max_examples=3000)
@given(_scan_text)
def test_needs_slow_loads_compiled_matches_the_twin(b):
    assert scan_c.needs_slow_loads(b) is scan_py.needs_slow_loads(b), b


def test_needs_slow_loads_cases():
    for b, want in [(b"", False), (b"-0", True), (b"[1,-0]", True), (b'{"a": \t-0}', True), (b"-0.5", False),
                    (b"-0e1", False), (b"-01", False), (b'"x-0"', False), (b'{"a":"-0"}', False),
                    (b"9" * 18, False), (b"9" * 19, True), (b'{"n":12345678901234567890}', True),
                    (b'{"n":-1234567890123456789}', True), (b'{"v":[-0 ]}', True), (b'{"t":"1"}', False)]:
        assert scan_c.needs_slow_loads(b) is want, b
        assert scan_py.needs_slow_loads(b) is want, b
        assert scan_c.needs_slow_loads(bytearray(b)) is want and scan_c.needs_slow_loads(memoryview(b)) is want
    with pytest.raises(TypeError):
        scan_c.needs_slow_loads(None)
