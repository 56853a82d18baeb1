"""Request bodies: their limits and their decode errors, as kube-apiserver words them.

* Size: 3 MiB (`MaxRequestBodyBytes`), 413 `Request entity too large: limit is 3145728` (read in
  `apiserver/endpoints/common.read_body`).
* Nesting: upstream's decoders allow 10,000 levels (encoding/json's scanner, go-yaml's scanner) and name
  that limit in their errors, which are reproduced. This server stores and encodes objects with orjson,
  whose encoder stops at 254 levels, and walks them with recursive Python code, so it refuses objects
  nested deeper than `MAX_DEPTH` = 254 levels with a 400 of its own (a deliberate difference: no
  Kubernetes object comes near it).
* Decode errors: `handlers/rest.go` transformDecodeError, ``the object provided is unrecognized (must be
  of type <Kind>): <decoder error> (<first 30 bytes>)`` where the JSON decoder's errors start with
  ``couldn't get version/kind; json parse error: `` (`runtime/serializer/json` meta.Interpret) and
  the summary is the text of a body starting with ``{``, else its hex.
"""
from __future__ import annotations

import itertools
import re
from typing import Any

import orjson

from . import jsonenc
from .errors import StatusError, bad_request
from .gocompat import json_syntax_error, json_type_word, unmarshal_type_error

MAX_BODY_BYTES = 3 * 1024 * 1024  # upstream's MaxRequestBodyBytes
MAX_DEPTH = 254                   # levels of nested objects and arrays this server stores (upstream: 10,000)
GO_MAX_DEPTH = 10000              # encoding/json maxNestingDepth, go-yaml max_flow_level / max_indents

# meta.Interpret decodes into this struct first: a body that is not an object fails there.
_FIND_KIND = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
_JSON_PARSE = "couldn't get version/kind; json parse error: "


def summarize(body: bytes, max_length: int = 30) -> str:
    """handlers/rest.go summarizeData: a JSON object's first bytes as text, anything else in hex."""
    if not body:
        return "<empty>"
    head = body[:max_length]
    more = " ..." if len(body) > max_length else ""
    if body[:1] == b"{":
        return head.decode("utf-8", "surrogateescape") + more  # invalid bytes become U+FFFD on the wire
    return head.hex() + more


def unrecognized(kind: str, error: str, body: bytes) -> StatusError:
    return bad_request(f"the object provided is unrecognized (must be of type {kind}): {error} ({summarize(body)})")


def too_deep_message() -> str:
    return (f"nested deeper than {MAX_DEPTH} levels of objects and arrays, the most this server supports "
            f"(kube-apiserver: {GO_MAX_DEPTH})")


class TooDeep(ValueError):
    """A value nested deeper than MAX_DEPTH."""

    def __init__(self) -> None:
        super().__init__(too_deep_message())


# --- nesting depth -------------------------------------------------------------------------------

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_STEP = [0] * 256
for _c in b"[{":
    _STEP[_c] = 1
for _c in b"]}":
    _STEP[_c] = -1
del _c


def json_depth(body: bytes | bytearray | memoryview) -> int:
    """The deepest nesting of objects and arrays in JSON text (strings skipped), at C speed; for text that
    is not JSON, an estimate good enough to bound what decoding it will cost."""
    brackets = _JSON_STRING.sub(b"", bytes(body)).translate(None, _NOT_BRACKETS)
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def value_depth(v: Any) -> int:
    """Nesting depth of a decoded value (iterative: any depth)."""
    deepest = 0
    stack = [(v, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            x = x.values()
        elif not isinstance(x, list):
            continue
        deepest = max(deepest, d)
        stack.extend((c, d + 1) for c in x if isinstance(c, (dict, list)))
    return deepest


def check_depth(v: Any) -> None:
    """TooDeep if `v` nests deeper than MAX_DEPTH (orjson's encoder decides at C speed when it can)."""
    try:
        orjson.dumps(v)
        return
    except orjson.JSONEncodeError as e:
        if "Recursion" not in str(e) and value_depth(v) <= MAX_DEPTH:
            return
    raise TooDeep()


def loads_bounded(body: bytes) -> Any:
    """jsonenc.loads for a request body nested at most MAX_DEPTH levels: TooDeep beyond, ValueError with
    Go's text when the body is not JSON (Go's own depth error beyond 10,000 levels)."""
    # Nesting never exceeds the opening brackets, strings' included: most bodies are settled by counting them.
    depth = json_depth(body) if body.count(b"{") + body.count(b"[") > MAX_DEPTH else 0
    if depth > MAX_DEPTH:
        if depth > GO_MAX_DEPTH:
            syntax = json_syntax_error(body)
            if syntax:
                raise ValueError(syntax)
        raise TooDeep()
    try:
        return jsonenc.loads(body)
    except RecursionError:  # pragma: no cover - json_depth bounds what the decoders see
        raise TooDeep() from None


# --- objects -------------------------------------------------------------------------------------

def _object(value: Any, kind: str, body: bytes) -> dict:
    if value is None:
        return {}  # `null` (or an empty YAML document) decodes to an empty object, as upstream
    if not isinstance(value, dict):
        raise unrecognized(kind, _JSON_PARSE + unmarshal_type_error(json_type_word(value), _FIND_KIND), body)
    for k in ("apiVersion", "kind"):  # meta.Interpret's struct holds them as strings
        err = _go_type_error(value.get(k), "string", f".{k}")
        if err:
            raise unrecognized(kind, _JSON_PARSE + err, body)
    return value


def decode_json_object(body: bytes, kind: str) -> dict:
    """A JSON request body as the object of `kind` it must be (400 with upstream's texts otherwise)."""
    try:
        value = loads_bounded(body)
    except TooDeep as e:
        raise unrecognized(kind, _JSON_PARSE + str(e), body) from None
    except ValueError as e:
        raise unrecognized(kind, _JSON_PARSE + str(e), body) from None
    return _object(value, kind, body)


def decode_yaml_object(body: bytes, kind: str) -> dict:
    """A YAML request body (sigs.k8s.io/yaml's YAMLToJSON, bounded: see machinery.yamlconv)."""
    # PyYAML is imported on the first YAML body: a process that never gets one (most clients send JSON or
    # protobuf) keeps its ~0.7 MiB of modules and ~25 ms of start-up.
    from . import yamlconv  # noqa: PLC0415
    try:
        value = yamlconv.yaml_to_json(body, MAX_DEPTH)
    except yamlconv.TooDeep:
        raise unrecognized(kind, _JSON_PARSE + too_deep_message(), body) from None
    except yamlconv.YAMLToJSONError as e:
        raise unrecognized(kind, e.message, body) from None
    return _object(value, kind, body)


# --- DeleteOptions -----------------------------------------------------------------------------------

# meta/v1 DeleteOptions as encoding/json sees it (case-sensitive, as upstream's decoder): field -> Go type.
_DELETE_OPTIONS = {"kind": "string", "apiVersion": "string", "gracePeriodSeconds": "int64",
                   "preconditions": "v1.Preconditions", "orphanDependents": "bool",
                   "propagationPolicy": "v1.DeletionPropagation", "dryRun": "[]string",
                   "ignoreStoreReadErrorWithClusterBreakingPotential": "bool"}
_PRECONDITIONS = {"uid": "types.UID", "resourceVersion": "string"}
_STRINGS = ("string", "v1.DeletionPropagation", "types.UID")


def _go_type_error(value: Any, go_type: str, field: str) -> str | None:
    """The UnmarshalTypeError decoding `value` into a field of `go_type` gives, or None."""
    if value is None:
        return None
    if go_type in _STRINGS:
        ok = isinstance(value, str)
    elif go_type == "bool":
        ok = isinstance(value, bool)
    elif go_type == "int64":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            ok = False
        elif isinstance(value, float) or not -(1 << 63) <= value < (1 << 63):
            return unmarshal_type_error(f"number {jsonenc.dumps(value).decode()}", go_type, field)
        else:
            ok = True
    elif go_type == "[]string":
        if not isinstance(value, list):
            ok = False
        else:
            for v in value:
                err = _go_type_error(v, "string", field)
                if err:
                    return err
            return None
    else:  # a struct
        ok = isinstance(value, dict)
    return None if ok else unmarshal_type_error(json_type_word(value), go_type, field)


def decode_delete_options(body: bytes) -> dict:
    """A JSON DeleteOptions body as upstream's decoder takes it (`null` is empty options); 400 with its
    texts: not JSON or not an object (meta.Interpret), a field of the wrong type (the first one, as
    encoding/json reports), a kind DeleteOptions is not."""
    try:
        value = loads_bounded(body)
    except (TooDeep, ValueError) as e:
        raise bad_request(_JSON_PARSE + str(e)) from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(_JSON_PARSE + unmarshal_type_error(json_type_word(value), _FIND_KIND))
    for k in ("apiVersion", "kind"):  # meta.Interpret reads these first
        err = _go_type_error(value.get(k), "string", f".{k}")
        if err:
            raise bad_request(_JSON_PARSE + err)
    for k, v in value.items():
        go_type = _DELETE_OPTIONS.get(k)
        err = _go_type_error(v, go_type, f"DeleteOptions.{k}") if go_type else None
        if err is None and k == "preconditions" and isinstance(v, dict):
            for pk, pv in v.items():
                if pk in _PRECONDITIONS:
                    err = _go_type_error(pv, _PRECONDITIONS[pk], f"Preconditions.preconditions.{pk}")
                    if err:
                        break
        if err:
            raise bad_request(err)
    kind = value.get("kind")
    if kind and kind != "DeleteOptions":
        version = value.get("apiVersion") or "meta.k8s.io/v1"
        raise bad_request(f'no kind "{kind}" is registered for version "{version}" in scheme '
                          f'"pkg/runtime/scheme.go:111"')
    return value


# --- ObjectMeta as the typed decoder sees it ---------------------------------------------------------------

# meta/v1 ObjectMeta's fields and Go types (sigs.k8s.io/json: case-sensitive). A built-in object's metadata
# of the wrong shape is a decode error upstream (400 on create/update, 422 on a patch); without this check a
# `labels: "x"` was stored and every cache of that resource failed to ingest it.
_OWNER_REFERENCE = ("v1.OwnerReference", "OwnerReference", {
    "apiVersion": "string", "kind": "string", "name": "string", "uid": "types.UID", "controller": "bool",
    "blockOwnerDeletion": "bool"})
_MANAGED_FIELDS_ENTRY = ("v1.ManagedFieldsEntry", "ManagedFieldsEntry", {
    "manager": "string", "operation": "v1.ManagedFieldsOperationType", "apiVersion": "string", "time": "time",
    "fieldsType": "string", "subresource": "string"})
_OBJECT_META = {
    "name": "string", "generateName": "string", "namespace": "string", "selfLink": "string", "uid": "types.UID",
    "resourceVersion": "string", "generation": "int64", "creationTimestamp": "time", "deletionTimestamp": "time",
    "deletionGracePeriodSeconds": "int64", "labels": "map[string]string", "annotations": "map[string]string",
    "ownerReferences": _OWNER_REFERENCE, "finalizers": "[]string", "managedFields": _MANAGED_FIELDS_ENTRY}


class TypedDecodeError(Exception):
    """The first field encoding/json cannot decode into a typed object: Go's struct name (ObjectMeta,
    OwnerReference, PodSpec ...), the JSON path, the Go type it wanted and the value it got."""

    def __init__(self, struct: str, path: str, go_type: str, value: Any):
        super().__init__(path)
        self.struct, self.path, self.go_type, self.value = struct, path, go_type, value

    def json_error(self) -> str:
        """encoding/json's UnmarshalTypeError text (create, update, merge and JSON patches)."""
        word = json_type_word(self.value)
        if self.go_type in ("int32", "int64", "uint32", "uint64") and word == "number":
            word = f"number {jsonenc.dumps(self.value).decode()}"
        return unmarshal_type_error(word, self.go_type, f"{self.struct}.{self.path}")

    def converter_error(self) -> str:
        """runtime.DefaultUnstructuredConverter's text (a strategic merge patch is converted, not decoded)."""
        word = json_type_word(self.value)
        go = {"number": "float64" if isinstance(self.value, float) else "int64", "array": "slice",
              "object": "map"}.get(word, word)
        if self.go_type.startswith("map["):
            return f"cannot restore map from {go}"
        if self.go_type.startswith("[]"):
            return f"cannot restore slice from {go}"
        if self.go_type.startswith("v1."):
            return f"cannot restore struct from: {go}"
        return f"cannot convert {go} to {'string' if self.go_type in ('time', 'types.UID') else self.go_type}"


def _leaf_ok(value: Any, go_type: str) -> bool:
    if value is None:
        return True
    if go_type == "bool":
        return isinstance(value, bool)
    if go_type == "int64":
        return not isinstance(value, bool) and isinstance(value, int) and -(1 << 63) <= value < (1 << 63)
    return isinstance(value, str)  # string, types.UID, v1.ManagedFieldsOperationType, time (a string first)


def check_object_meta(md: dict) -> None:
    """Raise TypedDecodeError for the first field (in body order, as encoding/json) of the wrong type; map and
    list values that are null become "" as encoding/json decodes them into strings."""
    _check_struct(md, "ObjectMeta", "metadata", _OBJECT_META)


def _check_struct(obj: dict, struct: str, path: str, fields: dict) -> None:
    for k, v in obj.items():
        t = fields.get(k)
        if t is None or v is None:
            continue
        p = f"{path}.{k}"
        if isinstance(t, tuple):                      # a list of structs
            list_type, inner, inner_fields = t
            if not isinstance(v, list):
                raise TypedDecodeError(struct, p, f"[]{list_type}", v)
            for item in v:
                if item is None:
                    continue
                if not isinstance(item, dict):
                    raise TypedDecodeError(struct, p, list_type, item)
                _check_struct(item, inner, p, inner_fields)
        elif t == "map[string]string":
            if not isinstance(v, dict):
                raise TypedDecodeError(struct, p, t, v)
            for mk, mv in v.items():
                if mv is None:
                    v[mk] = ""
                elif not isinstance(mv, str):
                    raise TypedDecodeError(struct, p, "string", mv)
        elif t == "[]string":
            if not isinstance(v, list):
                raise TypedDecodeError(struct, p, t, v)
            for i, item in enumerate(v):
                if item is None:
                    v[i] = ""
                elif not isinstance(item, str):
                    raise TypedDecodeError(struct, p, "string", item)
        elif not _leaf_ok(v, t):
            raise TypedDecodeError(struct, p, "string" if t == "time" else t, v)
