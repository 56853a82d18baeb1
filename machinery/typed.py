"""What upstream's typed decoding refuses in a built-in object, beyond its metadata: a field whose JSON
type is not the Go type of the field (`spec: "x"`, `containers: {}`, `containerPort: "80"`, an int32 out of
range). kube-apiserver decodes every built-in body into its Go struct, so such a body is a 400 (create,
update) or a 422 (patch) there; without this check it was stored here, and code reading it later (pod
update validation, controllers, the cache) met a string where it expected an object.

The field types come from `machinery/k8s_proto_schema.json` (generated from the Go types by
tools/k8sproto), so every built-in kind is covered. The error is encoding/json's UnmarshalTypeError, first
field in document order: `json: cannot unmarshal string into Go struct field Container.spec.containers.ports
of type []v1.ContainerPort`. One difference: a field of a named string type (v1.PodPhase, types.UID)
reports `string`, as the schema keeps only the wire type. Unknown fields are not errors (kube-apiserver drops
them with a warning; this server keeps them, see docs/differences.md).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from . import protobuf
from .bodies import TypedDecodeError, check_object_meta

_INT_RANGE = {"int32": (-(1 << 31), 1 << 31), "int64": (-(1 << 63), 1 << 63), "uint32": (0, 1 << 32),
              "uint64": (0, 1 << 64)}
_ANYTHING = {"raw", "quantity", "schemaorbool", "schemaorarray", "schemaorstringarray"}
_GO_SCALAR = {"bytes": "[]uint8", "time": "string", "microtime": "string", "intorstring": "int32"}


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    return protobuf.schema()


@lru_cache(maxsize=None)
def _fields(msg: str) -> dict[str, Any]:
    return {f[1]: f[3] for f in _schema()["messages"].get(msg, ())}


def _special(ty: str) -> str | None:
    if ty.startswith("msg:"):
        return _schema()["specials"].get(ty[4:])
    return ty if ty in _ANYTHING or ty in _GO_SCALAR else None


def go_type(ty: Any) -> str:
    """The Go type string encoding/json names: v1.PodSpec, []v1.Container, map[string]string, int32."""
    if isinstance(ty, list):
        if ty[0] == "list":
            return "[]" + go_type(ty[1])
        return f"map[{go_type(ty[1])}]{go_type(ty[2])}"
    sp = _special(ty)
    if sp is not None:
        return _GO_SCALAR.get(sp, sp)
    if ty.startswith("msg:"):
        path, _, name = ty[4:].rpartition(".")
        return f"{path.rsplit('/', 1)[-1]}.{name}"
    return ty


def message_of(api_version: str, kind: str) -> str | None:
    return _schema()["kinds"].get(f"{api_version}/{kind}")


def check_object(obj: dict, api_version: str, kind: str) -> None:
    """Raise TypedDecodeError for the first field of `obj` a Go decoder of `kind` refuses (metadata first
    checked by bodies.check_object_meta, which also turns null map values into "")."""
    md = obj.get("metadata")
    if isinstance(md, dict):
        check_object_meta(md)
    msg = message_of(api_version, kind)
    if msg is not None:
        _struct(obj, msg, "", top=True)


def _struct(obj: dict, msg: str, path: str, top: bool = False) -> None:
    fields = _fields(msg)
    struct = msg.rpartition(".")[2]
    for k, v in obj.items():
        if v is None or (top and k in ("metadata", "apiVersion", "kind")):
            continue
        ty = fields.get(k)
        if ty is not None:
            _value(v, ty, struct, f"{path}.{k}" if path else k)


def _value(v: Any, ty: Any, struct: str, path: str) -> None:
    if isinstance(ty, list):
        if ty[0] == "list":
            if not isinstance(v, list):
                raise TypedDecodeError(struct, path, go_type(ty), v)
            for item in v:
                if item is not None:
                    _value(item, ty[1], struct, path)
        else:
            if not isinstance(v, dict):
                raise TypedDecodeError(struct, path, go_type(ty), v)
            for item in v.values():
                if item is not None:
                    _value(item, ty[2], struct, path)
        return
    sp = _special(ty)
    if sp is not None:
        if sp == "quantity":
            if not (isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool))):
                raise DecodeFailure(QUANTITY_ERROR)  # Quantity.UnmarshalJSON parses what it gets as text
            return
        if sp in _ANYTHING:
            return
        ok = isinstance(v, str) or (sp == "intorstring" and _fits(v, "int32"))
        if not ok:
            raise TypedDecodeError(struct, path, go_type(ty), v)
        if sp == "bytes":
            _check_base64(v)
        return
    if ty.startswith("msg:"):
        if not isinstance(v, dict):
            raise TypedDecodeError(struct, path, go_type(ty), v)
        _struct(v, ty[4:], path)
        return
    if ty == "string":
        ok = isinstance(v, str)
    elif ty == "bool":
        ok = isinstance(v, bool)
    elif ty in _INT_RANGE:
        ok = _fits(v, ty)
    else:  # float32, float64
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    if not ok:
        raise TypedDecodeError(struct, path, ty, v)


class DecodeFailure(TypedDecodeError):
    """A decoder error that is not a type mismatch (a custom UnmarshalJSON's, base64's): its text as is."""

    def __init__(self, text: str):
        super().__init__("", "", "", None)
        self.text = text

    def json_error(self) -> str:
        return self.text

    converter_error = json_error


QUANTITY_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_B64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _check_base64(v: str) -> None:
    """[]byte fields are standard base64 with padding (encoding/base64.StdEncoding); Go's error names the
    offset of the first byte it could not use."""
    data = v.encode("utf-8", "surrogatepass").replace(b"\r", b"").replace(b"\n", b"")
    body = data.rstrip(b"=")
    for i, c in enumerate(body):
        if c not in _B64:
            raise DecodeFailure(f"illegal base64 data at input byte {i}")
    pad = len(data) - len(body)
    if len(data) % 4 or pad > 2 or (pad and len(body) % 4 + pad != 4) or len(body) % 4 == 1:
        raise DecodeFailure(f"illegal base64 data at input byte {_b64_error_offset(len(body), pad)}")


def _b64_error_offset(n: int, pad: int) -> int:
    # Go decodes in quanta of 4: a lone trailing character, or missing/excess padding, is reported at the
    # start of the incomplete quantum's padding (approximation of decodeQuantum's offsets).
    return n if pad else n - n % 4 if n % 4 == 1 else n


def _fits(v: Any, ty: str) -> bool:
    lo, hi = _INT_RANGE[ty]
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v < hi
