"""Protobuf request bodies (application/vnd.kubernetes.protobuf), as client-go's typed clientsets send.

* The committed struct layouts (machinery/k8s_proto_schema.json) equal what tools/k8sproto
  generates from k8s.io/api now (a stale copy fails).
* The decoder against Go: tests/go/protoref fills objects of every decoded kind with random values,
  encodes them with apimachinery's protobuf serializer, decodes them as upstream does and prints
  encoding/json of the result; our decoder must produce those bytes exactly.
* Over HTTP (cache and etcd servers): a protobuf create is stored as its JSON; malformed bodies are
  400 Status errors; custom resources have no protobuf form (415, as upstream).

The client-go end of this is tests/clientgo/protobuf_test.go (TestProtobufWrites).
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from machinery import jsonenc, protobuf
from machinery.resources import BUILTINS
from tests.helpers.gobin import go_program
from tests.helpers.protowire import envelope as _envelope, field as _ld
from tests.test_http_crd import widgets  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parent.parent
PB = {"Content-Type": protobuf.MEDIA_TYPE}


def test_schema_is_current():
    r = subprocess.run([go_program("k8sproto")], cwd=ROOT / "tools" / "k8sproto", capture_output=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == protobuf.SCHEMA_PATH.read_bytes(), \
        "machinery/k8s_proto_schema.json is stale: cd tools/k8sproto && go run . > ../../machinery/k8s_proto_schema.json"


def test_every_served_builtin_has_a_layout():
    for res in BUILTINS:
        assert protobuf.supports(res.api_version, res.kind), res.kind
    assert protobuf.supports("meta.k8s.io/v1", "DeleteOptions")


@pytest.fixture(scope="module")
def protoref() -> str:
    # The binary is built with -trimpath, so it cannot find the schema from its source path: named here
    # (for this process's children, bench.protobuf_decode's encoder included).
    os.environ["PROTOREF_SCHEMA"] = str(protobuf.SCHEMA_PATH)
    return go_program("protoref")


def _decode(key: str, pb: bytes) -> dict:
    api_version, kind = key.rsplit("/", 1)
    if kind == "DeleteOptions":
        return {"kind": "DeleteOptions", "apiVersion": "v1", **protobuf.decode_delete_options(pb)}
    return protobuf.decode(pb, api_version, kind)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_decoder_matches_go_on_random_objects(protoref, seed):
    r = subprocess.run([protoref, str(seed), "40"], capture_output=True, text=True, timeout=300, check=True)
    seen, mismatches = Counter(), []
    for line in r.stdout.splitlines():
        case = json.loads(line)
        seen[case["key"]] += 1
        got = jsonenc.dumps(_decode(case["key"], base64.b64decode(case["pb"]))).decode()
        if got != case["json"]:
            mismatches.append((case["key"], got, case["json"]))
    assert not mismatches, f"{len(mismatches)} differ from Go; first: {mismatches[0]}"
    # Every kind was exercised (a few random objects may be dropped, e.g. a NaN float).
    assert set(seen) == set(protobuf.schema()["kinds"]), seen
    assert sum(seen.values()) >= 0.95 * 40 * len(seen)


# --- bodies built with tests.helpers.protowire, so the HTTP tests do not need Go ------------

def _configmap(name: str, data: dict[str, str], binary: dict[str, bytes]) -> bytes:
    meta = _ld(1, name)
    body = _ld(1, meta)
    for k, v in data.items():
        body += _ld(2, _ld(1, k) + _ld(2, v))
    for k, v in binary.items():
        body += _ld(3, _ld(1, k) + _ld(2, v))
    return body


@pytest.fixture
def api(differential_api):
    """The HTTP tests run against our apiserver and the real kube-apiserver (conftest.differential_mode)."""
    return differential_api


def test_http_create_from_protobuf(api, namespace):
    body = _envelope("v1", "ConfigMap", _configmap("pb1", {"b": "2", "a": "<1>"}, {"bin": b"\x00\xff"}))
    r = api.req("POST", f"/api/v1/namespaces/{namespace}/configmaps", data=body, headers=PB)
    assert r.status_code == 201, r.text
    obj = r.json()
    assert obj["kind"] == "ConfigMap" and obj["apiVersion"] == "v1"
    assert obj["data"] == {"a": "<1>", "b": "2"}
    assert obj["binaryData"] == {"bin": base64.b64encode(b"\x00\xff").decode()}
    assert obj["metadata"]["namespace"] == namespace and obj["metadata"]["uid"]
    got = api.get(f"/api/v1/namespaces/{namespace}/configmaps/pb1").json()
    assert got["data"] == obj["data"] and got["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


def test_http_delete_options_from_protobuf(api, namespace):
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": "pbdel"}})
    assert r.status_code == 201
    uid = r.json()["metadata"]["uid"]
    # DeleteOptions {2: preconditions {1: uid}}
    wrong = protobuf.MAGIC + _ld(1, _ld(1, "v1") + _ld(2, "DeleteOptions")) + _ld(2, _ld(2, _ld(1, "not-" + uid)))
    r = api.req("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/pbdel", data=wrong, headers=PB)
    assert r.status_code == 409, r.text
    right = protobuf.MAGIC + _ld(1, _ld(1, "v1") + _ld(2, "DeleteOptions")) + _ld(2, _ld(2, _ld(1, uid)))
    r = api.req("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/pbdel", data=right, headers=PB)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("body,why,upstream", [
    (b'{"metadata":{"name":"x"}}', "expected prefix", None),                # JSON sent as protobuf
    (protobuf.MAGIC + b"\x0a\x05ab", "truncated",                            # cut short
     "the object provided is unrecognized (must be of type ConfigMap): unexpected EOF (6b3873000a056162)"),
    (protobuf.MAGIC + _ld(2, b"\x0f\x01"), "wire type",                      # wire type 7
     'ConfigMap in version "v1" cannot be handled as a ConfigMap: proto: wrong wireType = 7 for field ObjectMeta'),
])
def test_http_malformed_protobuf_is_400(api, namespace, body, why, upstream):
    """Malformed protobuf bodies are 400 BadRequest on both servers. The error texts of Go's protobuf
    decoder are a deliberate difference where `upstream` is given (docs/differences.md): kube-apiserver
    is asserted to say exactly that, we say what went wrong in our words."""
    r = api.req("POST", f"/api/v1/namespaces/{namespace}/configmaps", data=body, headers=PB)
    assert r.status_code == 400, r.text
    st = r.json()
    assert st["kind"] == "Status" and st["reason"] == "BadRequest"
    if api.mode == "kube" and upstream is not None:
        assert st["message"] == upstream
    else:
        assert st["message"].startswith("the object provided is unrecognized (must be of type ConfigMap)")
        assert why in st["message"]


def test_http_protobuf_kind_mismatch_is_400(api, namespace):
    body = _envelope("v1", "Secret", _configmap("pbx", {}, {}))
    r = api.req("POST", f"/api/v1/namespaces/{namespace}/configmaps", data=body, headers=PB)
    assert r.status_code == 400, r.text
    assert r.json()["message"] == ('Secret in version "v1" cannot be handled as a ConfigMap: converting '
                                   '(v1.Secret) to (core.ConfigMap): unknown conversion')


def test_http_custom_resource_protobuf_is_415(api, namespace, widgets):  # noqa: F811
    """Custom resources have no protobuf form. kube-apiserver v1.37.2 panics on such a body (a nil
    pointer in apiextensions' schemaCoercingDecoder.Decode; its panic filter drops the connection without
    a response); we answer 415 (docs/differences.md)."""
    import requests
    body = _envelope(f"{widgets}/v1", "Widget", _ld(1, _ld(1, "w1")))
    if api.mode == "kube":
        with pytest.raises(requests.ConnectionError):
            api.req("POST", f"/apis/{widgets}/v1/namespaces/{namespace}/widgets", data=body, headers=PB)
        return
    r = api.req("POST", f"/apis/{widgets}/v1/namespaces/{namespace}/widgets", data=body, headers=PB)
    assert r.status_code == 415, r.text
    st = r.json()
    assert st["reason"] == "UnsupportedMediaType"
    assert protobuf.MEDIA_TYPE not in st["message"]
