"""machinery.jsonenc vs the real Go encoding/json (SPEC S6.1-S6.4, S8.1, S4.2).

The Go reference helper (tests/go/jsonref) is built once per module; a missing
Go toolchain is a test FAILURE, not a skip.
"""

from __future__ import annotations

import base64
import json
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from machinery import jsonenc
from machinery.jsonenc import (
    dumps,
    dumps_sorted,
    encode_list,
    encode_unstructured_list,
    iter_list,
    iter_unstructured_list,
    loads,
    watch_event,
)
from tests.helpers.gobin import go_program


@pytest.fixture(scope="module")
def gobin() -> str:
    return go_program("jsonref")


def go_marshal_json(gobin: str, docs: list[bytes]) -> list[bytes]:
    """Go: decode each JSON line (UseNumber; floats as float64) and json.Marshal it."""
    r = subprocess.run([gobin], input=b"".join(d + b"\n" for d in docs), capture_output=True, check=True)
    lines = r.stdout.split(b"\n")[:-1]
    assert len(lines) == len(docs), r.stderr
    return lines


def go_marshal_strings(gobin: str, raws: list[bytes]) -> list[bytes]:
    """Go: json.Marshal(string(raw)) for each raw byte string."""
    inp = b"".join(base64.b64encode(x) + b"\n" for x in raws)
    r = subprocess.run([gobin, "-strings"], input=inp, capture_output=True, check=True)
    lines = r.stdout.split(b"\n")[:-1]
    assert len(lines) == len(raws), r.stderr
    return lines


def _num_norm(v):
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, dict):
        return {k: _num_norm(x) for k, x in v.items()}
    return [_num_norm(x) for x in v]


def to_go_input(v) -> bytes:
    # Independent of the code under test: stdlib json, pure ASCII input.
    return json.dumps(v, ensure_ascii=True, allow_nan=False).encode()


# ---------------------------------------------------------------- strategies

SPECIAL_CHARS = "<>&\u2028\u2029\x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f\x7f\x80\x9f\u00e9\ufffd\uffff\U0001F600\"\\/"

text = st.text(
    alphabet=st.one_of(st.sampled_from(SPECIAL_CHARS), st.characters(exclude_categories=["Cs"])),
    max_size=12,
)
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, 3.0, 1.5, 1e21, 1e20, 9.999999999999999e20, 1e-6, 9.99e-7, 1e-7,
                     1e16, 1e15, 123456789.0, 5e-324, 1.7976931348623157e308, -2.5e-10, 0.1, 1e-5]),
    st.builds(lambda m, e: m * 10.0 ** e, st.integers(-999, 999), st.integers(-30, 30)),
)
ints = st.one_of(
    st.integers(-(2**63), 2**64 - 1),
    st.integers(-(10**40), 10**40),
    st.sampled_from([0, -1, 2**63, 2**64, -(2**63) - 1]),
)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, text)
json_values = st.recursive(
    scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=5), st.dictionaries(text, kids, max_size=5)),
    max_leaves=15,
)

BYTE_FRAGMENTS = [
    b"<", b">", b"&", b"\xe2\x80\xa8", b"\xe2\x80\xa9", b"\x00", b"\x08", b"\x0c", b"\x1f", b"\x7f",
    b"\n", b"\r", b"\t", b'"', b"\\", b"\xc3\xa9", b"\xef\xbf\xbd", b"\xf0\x9f\x98\x80",
    b"\xff", b"\x80", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xf0\x9f\x98",
]
raw_bytes = st.one_of(
    st.binary(max_size=16),
    st.lists(st.one_of(st.sampled_from(BYTE_FRAGMENTS), st.binary(max_size=3)), max_size=8).map(b"".join),
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------- Go reference checks


@SETTINGS
@given(st.lists(json_values, min_size=1, max_size=5))
def test_random_values_match_go(gobin, values):
    """S6.3: dumps_sorted(v) == Go json.Marshal of the same value (maps sorted)."""
    want = go_marshal_json(gobin, [to_go_input(v) for v in values])
    for v, w in zip(values, want):
        assert dumps_sorted(v) == w, v
        # the pure-Python fallback must agree too
        assert jsonenc._py_dumps(v, True) == w, v
        # decoding our output gives the value back (numerically: 3.0 is sent as 3, like Go)
        assert _num_norm(loads(w)) == _num_norm(v)


@SETTINGS
@given(st.lists(raw_bytes, min_size=1, max_size=8))
def test_raw_byte_strings_match_go(gobin, raws):
    """S6.3 invalid UTF-8 -> \\ufffd. A Go string of raw bytes corresponds to the
    Python str decoded with 'surrogateescape' (one lone surrogate per invalid byte,
    exactly how Go's encoder steps over invalid bytes). 'replace' would not match:
    it folds a truncated multi-byte sequence into one U+FFFD, Go emits one per byte."""
    want = go_marshal_strings(gobin, raws)
    for raw, w in zip(raws, want):
        s = raw.decode("utf-8", "surrogateescape")
        assert dumps(s) == w, raw
        assert dumps([s, {"k": s}]) == b"[" + w + b',{"k":' + w + b"}]", raw


def test_fixed_examples_against_go(gobin):
    values = [
        {"b": "<a href='x'>&amp;</a>", "a": "\u2028\u2029", "c": "\x00\x08\x0c\x1f\x7f\n\r\t"},
        [3.0, 1.5, 1e21, 1e20, 1e-6, 1e-7, -0.0, 1e16, 5e-324, 2**70, -(2**70)],
        {"z": {"y": [], "x": {}}, "\u00e9": None, "A": True, "a": False},
    ]
    assert [dumps_sorted(v) for v in values] == go_marshal_json(gobin, [to_go_input(v) for v in values])


# ------------------------------------------------------------ fixed examples


def test_s6_3_escapes_and_separators():
    # S6.3: compact, <>& and U+2028/9 escaped, other non-ASCII raw, short escapes for \n\r\t\b\f.
    assert dumps({"a": "<>&", "b": [1, 2]}) == b'{"a":"\\u003c\\u003e\\u0026","b":[1,2]}'
    assert dumps("\u2028\u2029") == b'"\\u2028\\u2029"'
    assert dumps("h\u00e9\U0001F600") == "\"h\u00e9\U0001F600\"".encode()
    assert dumps("\n\r\t\b\f\x00\x1f\x7f") == b'"\\n\\r\\t\\b\\f\\u0000\\u001f\x7f"'
    assert dumps("x\udcffy") == b'"x\\ufffdy"'


def test_s6_3_struct_order_kept():
    # S6.3/S8.5: typed objects keep Go struct order (insertion order), not alphabetical.
    meta = {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "7"}
    assert dumps(meta) == b'{"name":"p","namespace":"default","uid":"u","resourceVersion":"7"}'
    assert dumps_sorted(meta) == b'{"name":"p","namespace":"default","resourceVersion":"7","uid":"u"}'


def test_floats_like_go():
    cases = {
        1e21: b"1e+21", 1e20: b"100000000000000000000", 1e-6: b"0.000001", 1e-7: b"1e-7",
        1.5: b"1.5", 3.0: b"3", -0.0: b"-0", 1e16: b"10000000000000000", 2.5e-10: b"2.5e-10",
        1.5e300: b"1.5e+300", 0.1: b"0.1", -1234.5: b"-1234.5",
    }
    for f, want in cases.items():
        assert dumps(f) == want
        assert dumps([f]) == b"[" + want + b"]"
        assert dumps({"k": f, "s": "a:1.5,"}) == b'{"k":' + want + b',"s":"a:1.5,"}'
    # float detection must not be fooled by string contents / escapes
    assert dumps({"k:{\"uid\":1.5}": 'x\\', "n": [1, True, False, None, "\\\"e"]}) == (
        b'{"k:{\\"uid\\":1.5}":"x\\\\","n":[1,true,false,null,"\\\\\\"e"]}')
    assert dumps({"s": "x\\", "f": 2.0, "t": "\"1.5\""}) == b'{"s":"x\\\\","f":2,"t":"\\"1.5\\""}'
    assert dumps(2**100) == str(2**100).encode()
    assert dumps({1: "x"}) == b'{"1":"x"}'
    with pytest.raises(ValueError):
        jsonenc._py_dumps(float("nan"), False)


def test_loads():
    assert loads(b'{"a":1,"a":2}') == {"a": 2}  # last wins, like Go
    assert loads(b"[123456789012345678901234567890]") == [123456789012345678901234567890]
    assert loads(b'"\\ud800x\xff"') == "\ufffdx\ufffd"
    # json.Unmarshal's texts for the same inputs (Go 1.26): the whole input's syntax is checked first
    for bad, msg in [
        (b"", "unexpected end of JSON input"),
        (b"{", "unexpected end of JSON input"),
        (b'{"a":}', "invalid character '}' looking for beginning of value"),
        (b"[1,]", "invalid character ']' looking for beginning of value"),
        (b"NaN", "invalid character 'N' looking for beginning of value"),
        (b"-Infinity", "invalid character 'I' in numeric literal"),
        (b"1e400", "json: cannot unmarshal number 1e400 into Go value of type float64"),
        (b"[1e400, x]", "invalid character 'x' looking for beginning of value"),
        (b'"\x01"', "invalid character '\\x01' in string literal"),
        (b'{"a":[1,2}', "invalid character '}' after array element"),
        (b"\xef\xbb\xbf{}", "invalid character 'ï' looking for beginning of value"),
        (b"[-]", "invalid character ']' in numeric literal"),
    ]:
        with pytest.raises(ValueError) as ei:
            loads(bad)
        assert str(ei.value) == msg


# ---------------------------------------------------------- lists and watch


def _pod(i: int) -> dict:
    return {
        "metadata": {"name": f"pod-{i}", "namespace": "default", "resourceVersion": str(10 + i),
                     "labels": {"app": "<web>"}},
        "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]},
    }


LIST_METAS = [
    {},
    {"resourceVersion": "42"},
    {"resourceVersion": "42", "continue": "tok", "remainingItemCount": 0},
    {"selfLink": "", "resourceVersion": "42", "continue": "tok", "remainingItemCount": 17,
     "shardInfo": {"selector": "shardRange(object.metadata.uid, '0x0', '0x8')"}},
    {"remainingItemCount": None, "continue": "", "resourceVersion": "9"},
]


@pytest.mark.parametrize("meta", LIST_METAS)
@pytest.mark.parametrize("n", [0, 1, 3])
def test_s6_2_typed_list_streaming_equals_buffered(meta, n):
    items = [dumps(_pod(i)) for i in range(n)]
    streamed = b"".join(iter_list("PodList", "v1", meta, iter(items)))
    assert streamed == encode_list("PodList", "v1", meta, items)
    assert streamed.endswith(b"]}\n")
    if n == 0:
        assert b'"items":[]' in streamed


def test_s8_1_typed_list_exact_shape():
    meta = {"shardInfo": {"selector": "s"}, "remainingItemCount": 3, "continue": "c", "resourceVersion": "5"}
    out = b"".join(iter_list("ConfigMapList", "v1", meta, [b'{"a":1}', b'{"b":2}']))
    assert out == (
        b'{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"5","continue":"c",'
        b'"remainingItemCount":3,"shardInfo":{"selector":"s"}},"items":[{"a":1},{"b":2}]}\n'
    )
    assert b"".join(iter_list("PodList", "v1", {}, [])) == b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[]}\n'
    # S6.2: kind/apiVersion omitted when empty, metadata always present
    assert b"".join(iter_list("", "", None, [])) == b'{"metadata":{},"items":[]}\n'
    assert encode_list("", "", None, []) == b'{"metadata":{},"items":[]}\n'


@pytest.mark.parametrize("meta", LIST_METAS)
@pytest.mark.parametrize("n", [0, 1, 3])
def test_s6_4_unstructured_list_streaming_equals_buffered(meta, n):
    crs = [{"kind": "Foo", "apiVersion": "example.com/v1", "metadata": {"name": f"f{i}"},
            "spec": {"z": 1.5, "a": [3.0, "&"]}} for i in range(n)]
    items = [dumps_sorted(c) for c in crs]
    streamed = b"".join(iter_unstructured_list("FooList", "example.com/v1", meta, iter(items)))
    assert streamed == encode_unstructured_list("FooList", "example.com/v1", meta, items)
    assert streamed.startswith(b'{"apiVersion":"example.com/v1","items":[')
    if n == 0:
        assert b'"items":[]' in streamed


def test_s6_4_unstructured_exact_shape():
    item = dumps_sorted({"metadata": {"name": "a"}, "kind": "Foo", "apiVersion": "x/v1"})
    out = b"".join(iter_unstructured_list("FooList", "x/v1", {"resourceVersion": "3", "continue": "t"}, [item]))
    assert out == (
        b'{"apiVersion":"x/v1","items":[{"apiVersion":"x/v1","kind":"Foo","metadata":{"name":"a"}}],'
        b'"kind":"FooList","metadata":{"continue":"t","resourceVersion":"3"}}\n'
    )


@settings(max_examples=50, deadline=None)
@given(st.lists(st.dictionaries(text, json_values, max_size=4), max_size=4),
       st.sampled_from(LIST_METAS), text, text)
def test_streaming_equals_buffered_random(objs, meta, kind, apiv):
    typed = [dumps(o) for o in objs]
    assert b"".join(iter_list(kind, apiv, meta, typed)) == encode_list(kind, apiv, meta, typed)
    uns = [dumps_sorted(o) for o in objs]
    assert b"".join(iter_unstructured_list(kind, apiv, meta, uns)) == encode_unstructured_list(kind, apiv, meta, uns)


def test_s4_2_watch_event_framing():
    obj = dumps({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}})
    ev = watch_event("ADDED", obj)
    assert ev == b'{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}}\n'
    assert ev.count(b"\n") == 1
    assert loads(ev) == {"type": "ADDED", "object": loads(obj)}
    # S8.4 ERROR event
    status = dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "too old resource version: 5 (120)", "reason": "Expired", "code": 410})
    assert watch_event("ERROR", status) == (
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"too old resource version: 5 (120)","reason":"Expired","code":410}}\n'
    )


# ------------------------------------------- machinery.gocompat against Go

# A second Go reference (tests/go/errtext): json.Unmarshal's error text and strconv.Quote, for the
# Go-imitation helpers every layer shares (machinery.gocompat; loads above and the patch / continue-token
# decoders report the same texts).
@pytest.fixture(scope="module")
def go_errtext() -> str:
    return go_program("errtext")


def _go_lines(binary: str, mode: str, inputs: list[bytes]) -> list[str]:
    r = subprocess.run([binary, mode], input=b"".join(base64.b64encode(x) + b"\n" for x in inputs),
                       capture_output=True, check=True)
    out = [base64.b64decode(x).decode("utf-8") for x in r.stdout.split(b"\n")[:-1]]
    assert len(out) == len(inputs), r.stderr
    return out


_ATOMS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"u", b"0", b"1", b"9", b"-", b"+", b".", b"e",
          b"E", b"t", b"r", b"f", b"a", b"l", b"s", b"n", b" ", b"\n", b"\t", b"\x00", b"\x01", b"\x07", b"\x0b",
          b"\x7f", b"\xc3", b"\xa9", b"\xff", b"'", b"x", b"true", b"false", b"null", b'"k"', b"12.5e-3", b"NaN",
          b"\xe2\x80\xa8", b"1e999"]


def _json_ish(rnd) -> bytes:
    """Valid JSON, truncated or with bytes inserted/deleted, or a run of JSON-ish atoms."""
    def value(d: int) -> bytes:
        r = rnd.random()
        if d > 3 or r < 0.3:
            return rnd.choice([b"1", b"-0.5e3", b'"a\\u00e9\\n"', b"true", b"null", b"false", b'""', b"0"])
        if r < 0.65:
            return b"[" + b",".join(value(d + 1) for _ in range(rnd.randint(0, 3))) + b"]"
        return b"{" + b",".join(b'"k%d":' % i + value(d + 1) for i in range(rnd.randint(0, 3))) + b"}"
    if rnd.random() < 0.4:
        return b"".join(rnd.choice(_ATOMS) for _ in range(rnd.randint(0, 8)))
    v = bytearray(value(0))
    for _ in range(rnd.randint(0, 2)):
        i = rnd.randint(0, len(v))
        op = rnd.random()
        if op < 0.4 and v:
            del v[min(i, len(v) - 1)]
        elif op < 0.8:
            v[i:i] = rnd.choice(_ATOMS)
        else:
            del v[i:]
    return bytes(v)


def test_json_error_texts_match_go(go_errtext):
    import random
    from machinery.gocompat import json_syntax_error
    rnd = random.Random(5866)
    cases = [_json_ish(rnd) for _ in range(4000)] + [b"[" * 10001, b"[" * 10000 + b"]" * 10000, b"{" * 10001]
    cases += [bytes([c]) for c in range(256)] + [b"[" + bytes([c]) for c in range(256)]  # every quoteChar
    for case, want in zip(cases, _go_lines(go_errtext, "unmarshal", cases)):
        try:
            loads(case)
            got = "OK"
        except ValueError as e:
            got = "ERR " + str(e)
        if len(case) < 10000:  # beyond Python's recursion limit loads gives up on valid JSON
            assert got == want, case
        syntax = json_syntax_error(case)
        assert (syntax is None) == (not want.startswith("ERR invalid") and not want.startswith("ERR unexpected")), case
        if syntax is not None:
            assert "ERR " + syntax == want, case


def test_quote_matches_go(go_errtext):
    import random
    from machinery.gocompat import quote
    # characters whose printability is the same in Go's and Python's Unicode tables
    alphabet = [chr(c) for c in range(0x100)] + list("\u2028\u2029\u200b\u00ad\ufeff\ue000\ufffd\u4e16\U0001f600\u0378")
    rnd = random.Random(7)
    strings = ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6))) for _ in range(2000)]
    for s, want in zip(strings, _go_lines(go_errtext, "quote", [s.encode() for s in strings])):
        assert quote(s) == want, s
