"""Continue tokens (S2.1-S2.4, S1.12, S1.13)."""
import base64
import json

import pytest
from hypothesis import given, strategies as st

from machinery.errors import StatusError
from storage.continue_token import (decode_continue, encode_continue, go_path_clean, resolve_continue,
                                    validate_continue_with_rv)

VECTOR = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIzNDUsInN0YXJ0IjoiZGVmYXVsdC9jbS1iXHUwMDAwIn0"
PREFIX = "/registry/configmaps/"


def tok(obj_or_bytes):
    raw = obj_or_bytes if isinstance(obj_or_bytes, bytes) else json.dumps(obj_or_bytes).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def err(token, prefix=PREFIX):
    with pytest.raises(StatusError) as ei:
        decode_continue(token, prefix)
    assert ei.value.code == 400 and ei.value.reason == "BadRequest"
    return ei.value.message


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
    ({"v": "v2", "rv": 3, "start": "a"},
     'continue key is not valid: server does not recognize this encoded version "v2"'),
    ({"rv": 3, "start": "a"}, 'continue key is not valid: server does not recognize this encoded version ""'),
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
    with pytest.raises(StatusError) as ei:
        validate_continue_with_rv(VECTOR, "5")
    assert (ei.value.code, ei.value.message) == (400, "specifying resource version is not allowed when using continue")
    assert resolve_continue(VECTOR, "0", PREFIX) == (PREFIX + "default/cm-b\x00", 12345)
    with pytest.raises(StatusError) as ei:  # decode errors win over S1.12 (upstream order)
        resolve_continue("!!", "5", PREFIX)
    assert ei.value.message.startswith("invalid continue token: ")


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
