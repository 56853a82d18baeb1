"""Fuzzing, in process, of every parser a request reaches (issue 14): label and field selectors, the
shardSelector, continue tokens, resourceVersion / limit / timeoutSeconds and the other list options, the
`?timeout=` duration, JSON, YAML and protobuf bodies, the three patch types, DeleteOptions. Whatever the
input, the parser ends in a value or a Status error of the 4xx family (or the storage error the endpoint
maps to one) -- never another exception, never a 5xx.

The short form runs in the normal suite (a few hundred examples each, seconds in all); set
FUZZ_EXAMPLES=<n> for a longer run (e.g. 20000)."""
from __future__ import annotations

import os
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apiserver.endpoints.write import validate_delete_options
from apiserver.status import map_storage_error
from machinery import bodies, errors, jsonenc, patch, protobuf, shard_selector
from machinery.gocompat import parse_duration
from machinery.listoptions import parse_list_options, parse_resource_version
from machinery.resources import BUILTINS
from machinery.selectors import field_selectors_for, parse_field_selector, parse_label_selector
from storage import errors as serr
from storage.continue_token import encode_continue, resolve_continue

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize="FUZZ_EXAMPLES" not in os.environ,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
CM = next(r for r in BUILTINS if r.plural == "configmaps")


def ends_well(fn, *args, **kw):
    """fn's value, or the 4xx Status it raises (storage errors mapped as the endpoints map them)."""
    try:
        return fn(*args, **kw)
    except errors.StatusError as e:
        status = e
    except serr.StorageError as e:
        status = map_storage_error(e, CM)
    except shard_selector.ShardSelectorError as e:
        status = shard_selector.status_error(e)
    assert 400 <= status.code < 500, (status.code, status.message)
    assert status.message
    return status


def texts(alphabet: str, max_size: int = 60):
    """Mostly text over the parser's own alphabet, sometimes anything at all."""
    return st.one_of(st.text(alphabet=alphabet, max_size=max_size), st.text(max_size=max_size))


# --- query parameters -------------------------------------------------------------------------------

SELECTOR = string.ascii_lowercase[:6] + "0123456789-_./=!,() " + "inotexsINOTEXS"


@fuzz
@given(texts(SELECTOR))
def test_label_selectors(s):
    ends_well(parse_label_selector, s)


@fuzz
@given(texts(SELECTOR + "\\"), st.sampled_from(["pods", "configmaps", "events", "namespaces", "secrets", "nodes"]))
def test_field_selectors(s, plural):
    ends_well(parse_field_selector, s, field_selectors_for(plural, plural not in ("namespaces", "nodes")))


SHARD = "shardRange(object.metadata.uid, '0x0123456789abcdef') |&!<>=+-*/%?:[]{}\".,0x ftruenul\\\n"


@fuzz
@given(st.one_of(texts(SHARD, 120), st.builds(
    lambda a, b, field, op: f"shardRange(object.metadata.{field}, '{a}', '{b}'){op}",
    st.from_regex(r"0x[0-9a-fA-F]{0,18}", fullmatch=True), st.from_regex(r"0x[0-9a-f]{0,18}", fullmatch=True),
    st.sampled_from(["uid", "name", "namespace", "uid.x", ""]), st.sampled_from(["", " || ", " && true", ")", "("]))))
def test_shard_selectors(s):
    ends_well(shard_selector.parse_shard_selector, s)


@fuzz
@given(st.one_of(st.text(alphabet=string.ascii_letters + string.digits + "-_=+/", max_size=80),
                 st.builds(lambda k, rv: encode_continue(k, rv), st.text(max_size=30), st.integers(-5, 2 ** 63 - 1))),
       st.one_of(st.none(), st.sampled_from(["", "0", "1", "x"])))
def test_continue_tokens(token, rv):
    ends_well(resolve_continue, token, rv, "/registry/configmaps/")


QUERY_VALUE = st.one_of(st.sampled_from(["", "0", "1", "-1", "true", "false", "t", "NotOlderThan", "Exact", "x",
                                         "9223372036854775808", "18446744073709551616", "01", "+5", " 5", "1e3"]),
                        st.text(max_size=12))
QUERY = st.dictionaries(st.sampled_from(["resourceVersion", "resourceVersionMatch", "limit", "timeoutSeconds",
                                         "continue", "watch", "allowWatchBookmarks", "sendInitialEvents",
                                         "labelSelector", "fieldSelector", "shardSelector"]), QUERY_VALUE)


@fuzz
@given(QUERY, st.booleans(), st.booleans())
def test_list_options(query, watch, watch_list):
    ends_well(parse_list_options, query, watch=watch, watch_list_enabled=watch_list,
              field_selectors=field_selectors_for("configmaps", True))
    if "resourceVersion" in query:
        ends_well(parse_resource_version, query["resourceVersion"])


@fuzz
@given(texts("0123456789.+-nsuµμmh", 20))
def test_timeout_parameter(s):
    try:
        parse_duration(s)
    except ValueError as e:  # apiserver/filters: 400 "invalid timeout specified in the request URL - ..."
        assert str(e).startswith("time: ")


# --- bodies ---------------------------------------------------------------------------------------------

JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=False, allow_infinity=False),
                        st.text(max_size=10))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=20)
OBJECTS = st.dictionaries(st.sampled_from(["kind", "apiVersion", "metadata", "data", "spec", "x"]), JSON_VALUES,
                          max_size=5)
JSON_TOKENS = st.lists(st.sampled_from(['{', '}', '[', ']', ',', ':', '"a"', '"', '1', '-0', '1e999', 'true', 'nul',
                                        '\\u', '"\\ud800"', ' ', '\xff', '1.5', '{"kind":', '"metadata":{"name":"x"}']),
                       max_size=40).map("".join)


def json_bodies():
    return st.one_of(OBJECTS.map(lambda o: jsonenc.dumps(o)), JSON_VALUES.map(lambda o: jsonenc.dumps(o)),
                     JSON_TOKENS.map(lambda s: s.encode("utf-8", "surrogateescape")), st.binary(max_size=60),
                     st.integers(1, 300).map(lambda d: b'{"x":' + b"[" * d + b"]" * d + b"}"))


@fuzz
@given(json_bodies())
def test_json_bodies(body):
    out = ends_well(bodies.decode_json_object, body, "ConfigMap")
    if isinstance(out, dict):
        bodies.check_depth(out)


YAML_PIECES = ["a", "b: ", "- ", "[", "]", "{", "}", ", ", ": ", "\n", "  ", "&x ", "&y ", "*x", "*y", "<<: ", "? ",
               "!!int ", "!!str ", "!!binary ", "!!float ", "!!bool ", "!!timestamp ", "!!null ", "!!merge ", "!foo ",
               "'q'", '"q"', '"\\ud800"', "~", "y", "on", "0x1F", "017", "08", "1e400", ".nan", "-.inf", "1_000",
               "2001-01-01", "2001-02-30", "aGVsbG8=", "---\n", "...\n", "# c\n", "|\n  t\n", ">\n  t\n", "\t",
               "%YAML 1.1\n", "\xff", "0b101", "-0b1", "+.5", "18446744073709551616"]


def yaml_bodies():
    return st.one_of(st.lists(st.sampled_from(YAML_PIECES), max_size=40).map(lambda p: "".join(p).encode(
        "utf-8", "surrogateescape")), st.binary(max_size=60), json_bodies(),
        st.integers(1, 12).map(lambda n: b"a: &a [x,x,x,x,x,x,x,x,x]\n" + b"".join(
            b"%c: &%c [%s]\n" % (98 + i, 98 + i, b",".join([b"*%c" % (97 + i)] * 9)) for i in range(n))))


@fuzz
@given(yaml_bodies())
def test_yaml_bodies(body):
    out = ends_well(bodies.decode_yaml_object, body, "ConfigMap")
    if isinstance(out, dict):
        jsonenc.dumps(out)  # what the endpoint does next: storable JSON


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, wt: int, value) -> bytes:
    key = _varint(num << 3 | wt)
    if wt == 0:
        return key + _varint(value)
    if wt == 1:
        return key + value.to_bytes(8, "little")
    if wt == 5:
        return key + value.to_bytes(4, "little")
    return key + _varint(len(value)) + value


PROTO_MESSAGES = st.recursive(
    st.binary(max_size=12),
    lambda inner: st.lists(st.one_of(
        st.tuples(st.integers(1, 20), st.just(0), st.integers(0, 2 ** 64 - 1)),
        st.tuples(st.integers(1, 20), st.just(1), st.integers(0, 2 ** 64 - 1)),
        st.tuples(st.integers(1, 20), st.just(5), st.integers(0, 2 ** 32 - 1)),
        st.tuples(st.integers(1, 20), st.just(2), inner)), max_size=6).map(
        lambda fs: b"".join(_field(n, w, v) for n, w, v in fs)), max_leaves=15)


def _envelope(kind: str, raw: bytes) -> bytes:
    meta = _field(1, 2, b"v1") + _field(2, 2, kind.encode())
    return b"k8s\x00" + _field(1, 2, meta) + _field(2, 2, raw)


@fuzz
@given(st.sampled_from(["ConfigMap", "Pod", "Secret", "Namespace", "Service"]),
       st.one_of(PROTO_MESSAGES.map(lambda m: ("env", m)), st.binary(max_size=80).map(lambda b: ("raw", b))))
def test_protobuf_bodies(kind, body):
    how, data = body
    raw = _envelope(kind, data) if how == "env" else b"k8s\x00" + data
    try:  # what decode_body does with the outcomes (every one a 400)
        obj = protobuf.decode(raw, "v1", kind)
        bodies.check_depth(obj)
        jsonenc.dumps(obj)
    except (protobuf.ProtobufError, bodies.TooDeep):
        pass


# --- patches ------------------------------------------------------------------------------------------------

DOC = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}, "finalizers": ["f"]},
       "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "E", "value": "v"}],
                                "ports": [{"containerPort": 80}]}], "volumes": [{"name": "v"}]}}
POINTERS = st.sampled_from(["", "/", "/metadata", "/metadata/labels/a", "/metadata/finalizers/0", "/metadata/finalizers/-",
                            "/spec/containers/0", "/spec/containers/-1", "/spec/containers/9", "/x~1y", "/~2",
                            "/spec/containers/0/env/0/name", "/spec/containers/01", "/metadata/name/x"])
OPS = st.lists(st.fixed_dictionaries({"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "x"]),
                                      "path": st.one_of(POINTERS, JSON_LEAVES)},
                                     optional={"from": st.one_of(POINTERS, JSON_LEAVES), "value": JSON_VALUES}),
               max_size=6)
SMP_KEYS = st.sampled_from(["metadata", "spec", "containers", "name", "image", "env", "$patch", "$retainKeys",
                            "$setElementOrder/containers", "$deleteFromPrimitiveList/finalizers", "finalizers",
                            "labels", "ports", "containerPort", "volumes", "x"])
SMP = st.recursive(JSON_LEAVES | st.sampled_from(["delete", "replace", "merge"]), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(SMP_KEYS, inner, max_size=4)), max_leaves=15)


@fuzz
@given(st.sampled_from([patch.JSON_PATCH, patch.MERGE_PATCH, patch.STRATEGIC_MERGE_PATCH]),
       st.one_of(OPS.map(jsonenc.dumps), SMP.map(jsonenc.dumps), JSON_VALUES.map(jsonenc.dumps), json_bodies()),
       st.sampled_from(["pods", "configmaps", "widgets"]))
def test_patches(ctype, body, resource):
    out = ends_well(patch.apply_patch, jsonenc.loads(jsonenc.dumps(DOC)), ctype, body, resource,
                    resource == "widgets")
    if isinstance(out, dict):
        jsonenc.dumps(out)


DELETE_KEYS = st.sampled_from(["kind", "apiVersion", "gracePeriodSeconds", "preconditions", "orphanDependents",
                               "propagationPolicy", "dryRun", "x"])


@fuzz
@given(st.one_of(st.dictionaries(DELETE_KEYS, st.one_of(JSON_VALUES, st.sampled_from(
    ["All", "Orphan", "Foreground", "DeleteOptions", ["All"], {"uid": "u", "resourceVersion": "1"}]))).map(
    jsonenc.dumps), json_bodies()))
def test_delete_options(body):
    opts = ends_well(bodies.decode_delete_options, body)
    if isinstance(opts, dict):  # what the endpoint does next (write.delete_options)
        opts["preconditions"] = dict(opts.get("preconditions") or {})
        opts["dryRun"] = list(opts.get("dryRun") or [])
        ends_well(validate_delete_options, opts)


@pytest.mark.parametrize("body", [b'{"dryRun": 5}', b'{"preconditions": [1]}', b'{"gracePeriodSeconds": 1.5}',
                                  b'{"kind": 5}', b"[1]", b"null"])
def test_delete_options_found(body):
    """Bodies that were 500s (TypeError) before DeleteOptions were decoded with Go's types."""
    ends_well(bodies.decode_delete_options, body)


def test_yaml_chains_are_bounded():
    """Anchors that merge anchors that merge anchors, and aliases nesting aliases: no recursion of the
    parser's own, and upstream's errors (the alias budget, then JSON's 10,000 levels)."""
    chain = b"a0: &a0 {x: 1}\n" + b"".join(b"a%d: &a%d {<<: *a%d, y%d: 2}\n" % (i, i, i - 1, i) for i in range(1, 3000))
    assert ends_well(bodies.decode_yaml_object, chain, "ConfigMap").message.endswith(
        f"yaml: document contains excessive aliasing ({bodies.summarize(chain)})")
    deep = b"a0: &a0 " + b"[" * 200 + b"1" + b"]" * 200 + b"\n" + b"".join(
        b"a%d: &a%d " % (i, i) + b"[" * 200 + b"*a%d" % (i - 1) + b"]" * 200 + b"\n" for i in range(1, 60))
    assert "json parse error: invalid character '[' exceeded max depth" in ends_well(
        bodies.decode_yaml_object, deep, "ConfigMap").message
    short = b"a0: &a0 {x: 1}\n" + b"".join(b"a%d: &a%d {<<: *a%d, y%d: 2}\n" % (i, i, i - 1, i) for i in range(1, 40))
    assert len(ends_well(bodies.decode_yaml_object, short, "ConfigMap")["a39"]) == 40
