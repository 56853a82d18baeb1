"""Continue tokens (S2.1-S2.4, S1.12, S1.13)."""
import base64
import gc
import json

import pytest
from hypothesis import given, strategies as st

from apiserver.status import map_storage_error
from machinery.resources import BUILTINS
from storage.continue_token import (decode_continue, encode_continue, go_path_clean, resolve_continue,
                                    validate_continue_with_rv)
from storage.errors import Code, StorageError

VECTOR = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzNDUsInN0YXJ0IjoiZGVmYXVsdC9jbS1iXHUwMDAwIn0"
PREFIX = "/registry/configmaps/"
CONFIGMAPS = next(r for r in BUILTINS if r.plural == "configmaps")


def tok(obj_or_bytes):
    raw = obj_or_bytes if isinstance(obj_or_bytes, bytes) else json.dumps(obj_or_bytes).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def bad_request(e: StorageError) -> str:
    """Storage raises its own error; the HTTP layer answers 400 BadRequest with its message."""
    assert e.code is Code.INVALID_CONTINUE
    st = map_storage_error(e, CONFIGMAPS)
    assert st.code == 400 and st.reason == "BadRequest" and st.message == e.message
    return e.message


def err(token, prefix=PREFIX):
    with pytest.raises(StorageError) as ei:
        decode_continue(token, prefix)
    return bad_request(ei.value)


def test_s2_1_vector_byte_exact():
    assert encode_continue("default/cm-b", 12345) == VECTOR
    assert base64.urlsafe_b64decode(VECTOR + "==") == \
        b'{"v":"meta.k8s.io/v1","rv":12345,"start":"default/cm-b\\u0000"}'
    assert decode_continue(VECTOR, PREFIX) == (PREFIX + "default/cm-b\x00", 12345)


def test_s2_1_go_json_escaping():
    raw = base64.urlsafe_b64decode(encode_continue('a<b>&"\\\n\u2028é', 1) + "===")
    assert raw == '{"v":"meta.k8s.io/v1","rv":1,"start":"a\\u003cb\\u003e\\u0026\\"\\\\\\n\\u2028é\\u0000"}'.encode()


def test_s2_2_cache_form_with_leading_slash_decodes_identically():
    t = tok({"v": "meta.k8s.io/v1", "rv": 12345, "start": "/default/cm-b\x00"})
    assert decode_continue(t, PREFIX) == decode_continue(VECTOR, PREFIX)


def test_s2_4_negative_rv():
    assert decode_continue(encode_continue("ns/x", -1), PREFIX) == (PREFIX + "ns/x\x00", -1)


@pytest.mark.parametrize("start", ["../etc", "a/../../b", "a//b", "./a", "a/", "a/."])
def test_s2_2_path_traversal_rejected(start):
    t = tok({"v": "meta.k8s.io/v1", "rv": 5, "start": start})
    assert err(t) == f"invalid continue token: continue key is not valid: {start}"


@pytest.mark.parametrize("body,msg", [
    ({"v": "meta.k8s.io/v1", "rv": 0, "start": "a"},
     "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"),
    ({"v": "meta.k8s.io/v1", "rv": 3},
     "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"),
    # upstream formats the version with %v (k8s.io/apiserver v0.36.0 storage.DecodeContinue): unquoted
    ({"v": "v2", "rv": 3, "start": "a"},
     "continue key is not valid: server does not recognize this encoded version v2"),
    ({"rv": 3, "start": "a"}, "continue key is not valid: server does not recognize this encoded version "),
])
def test_s2_3_decode_errors(body, msg):
    assert err(tok(body)) == "invalid continue token: " + msg


def test_s1_13_garbage():
    assert err("!!!").startswith("invalid continue token: continue key is not valid: illegal base64 data")
    assert err(tok(b"not json")).startswith("invalid continue token: continue key is not valid: invalid character")


def test_s1_12_continue_with_rv():
    validate_continue_with_rv(VECTOR, None)
    validate_continue_with_rv(VECTOR, "")
    validate_continue_with_rv(VECTOR, "0")
    with pytest.raises(StorageError) as ei:
        validate_continue_with_rv(VECTOR, "5")
    assert bad_request(ei.value) == "specifying resource version is not allowed when using continue"
    assert resolve_continue(VECTOR, "0", PREFIX) == (PREFIX + "default/cm-b\x00", 12345)
    with pytest.raises(StorageError) as ei:  # decode errors win over S1.12 (upstream order)
        resolve_continue("!!", "5", PREFIX)
    assert bad_request(ei.value).startswith("invalid continue token: ")


# Upstream's texts, as printed by k8s.io/apiserver v0.36.0 storage.DecodeContinue (Go 1.26) for the same
# tokens: json.Unmarshal's syntax errors (the whole input is checked first), then type errors in document
# order (the first wins), case-folded field names, invalid UTF-8 as U+FFFD, base64 offsets counting CR/LF.
_NOT_VALID = "continue key is not valid: "
_DEEP = b"[" * 2000 + b"]" * 2000


@pytest.mark.parametrize("body,want", [
    (b'{"start":1,"v":true}',
     "json: cannot unmarshal number into Go struct field continueToken.start of type string"),
    (b'{"v":"meta.k8s.io/v1","rv":1.5,"start":"a"}',
     "json: cannot unmarshal number 1.5 into Go struct field continueToken.rv of type int64"),
    (b'{"v":"meta.k8s.io/v1","rv":9223372036854775808,"start":"a"}',
     "json: cannot unmarshal number 9223372036854775808 into Go struct field continueToken.rv of type int64"),
    (b'{"v":"meta.k8s.io/v1","rv":"5","start":"a"}',
     "json: cannot unmarshal string into Go struct field continueToken.rv of type int64"),
    (b'{"v":"meta.k8s.io/v1","rv":5,"start":["a"]}',
     "json: cannot unmarshal array into Go struct field continueToken.start of type string"),
    (b'{"v":' + _DEEP + b'}', "json: cannot unmarshal array into Go struct field continueToken.v of type string"),
    (b"nope", "invalid character 'o' in literal null (expecting 'u')"),
    (b'{"v":"meta.k8s.io/v1" "rv":3}', "invalid character '\"' after object key:value pair"),
    (b'{"v":"meta.k8s.io/v1","rv":-Infinity}', "invalid character 'I' in numeric literal"),
    (b'{"v":"meta.k8s.io/v1","rv":3,"start":"a"} x', "invalid character 'x' after top-level value"),
    (b'{"v":"meta.k8s.io/v1","rv":3,"start":"a', "unexpected end of JSON input"),
    (b"[" * 10001, "invalid character '[' exceeded max depth"),
    (b'["a"]', "json: cannot unmarshal array into Go value of type storage.continueToken"),
    (_DEEP, "json: cannot unmarshal array into Go value of type storage.continueToken"),
    (b'"meta.k8s.io/v1"', "json: cannot unmarshal string into Go value of type storage.continueToken"),
    (b"12", "json: cannot unmarshal number into Go value of type storage.continueToken"),
    (b"null", "server does not recognize this encoded version "),
    (b'{"v":"v2\\n"}', "server does not recognize this encoded version v2\n"),
])
def test_s2_3_go_json_errors(body, want):
    # Earlier tests' garbage is collected here, at normal depth: a finalizer run by the collector deep inside the
    # 10,001-level decode made pytest's unraisable hook itself hit the recursion limit (once, in CI).
    gc.collect()
    assert err(tok(body)) == "invalid continue token: " + _NOT_VALID + want


@pytest.mark.parametrize("token,offset", [("QUJD\nRA==", 7), ("QU\rJ!", 4), ("QUJDR", 4)])
def test_s1_13_base64_offsets(token, offset):
    assert err(token) == f"invalid continue token: {_NOT_VALID}illegal base64 data at input byte {offset}"


def test_s2_3_go_json_decoding():
    # encoding/json: case-folded names (U+017F folds to 's'), later duplicates win, null leaves a field
    # alone, invalid UTF-8 and lone surrogate escapes become U+FFFD.
    assert decode_continue(tok('{"\u017ftart":"x","V":"meta.k8s.io/v1","RV":4}'.encode()), PREFIX) == (PREFIX + "x", 4)
    assert decode_continue(tok(b'{"v":"meta.k8s.io/v1","rv":3,"start":"a\xffb","start":null}'), PREFIX) == \
        (PREFIX + "a\ufffdb", 3)
    assert decode_continue(tok(b'{"v":"meta.k8s.io/v1","rv":3,"start":"a\\ud800"}'), PREFIX) == (PREFIX + "a\ufffd", 3)


@pytest.mark.parametrize("p,want", [("", "."), ("/", "/"), ("/a/b/", "/a/b"), ("/a//b", "/a/b"),
                                    ("/../a", "/a"), ("a/../..", ".."), ("/a/./b/../c", "/a/c"), ("x\x00", "x\x00")])
def test_go_path_clean(p, want):
    assert go_path_clean(p) == want


_seg = st.text(st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=8) \
    .filter(lambda s: s not in (".", ".."))


@given(st.lists(_seg, min_size=1, max_size=3).map("/".join),
       st.integers(min_value=-(2**63), max_value=2**63 - 1).filter(lambda n: n != 0))
def test_roundtrip(suffix, rv):
    t = encode_continue(suffix, rv)
    assert "=" not in t and "+" not in t and "/" not in t
    assert decode_continue(t, PREFIX) == (PREFIX + suffix + "\x00", rv)
