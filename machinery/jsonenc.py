"""Wire encoding byte-identical to Go's ``encoding/json`` (SPEC S6.1-S6.4, S8, S4.2).

Public API
----------
``dumps(obj) -> bytes``
    Encode like Go ``json.Marshal`` of the same value, keeping dict insertion
    order (callers keep typed objects in Go struct order, S6.3/S8.5).
``dumps_sorted(obj) -> bytes``
    Same, but every object's keys sorted (Go marshals maps sorted; S6.4).
``loads(b) -> value``
    Decode; ``ValueError`` with ``json.Unmarshal``'s error text on malformed input.
    Permissive like Go: duplicate keys (last wins), invalid UTF-8 / lone surrogate
    escapes -> U+FFFD.
``iter_list(kind, api_version, list_meta, items)`` / ``iter_unstructured_list(...)``
    Streaming list encoders (S6.1, S6.2, S6.4); ``items`` are pre-encoded bytes.
``encode_list(...)`` / ``encode_unstructured_list(...)``
    Buffered counterparts, built independently (dict + ``dumps``).
``encode_list_meta(list_meta) -> bytes``
``watch_event(type, obj_bytes) -> bytes`` (S4.2)

Strategy: orjson does the heavy lifting (compact, raw UTF-8, same control
character escapes as Go >= 1.22). Its output is post-processed for the Go-only
escapes (``<`` ``>`` ``&`` U+2028 U+2029 -- these can only occur inside JSON
strings, so a bytes.replace is safe). Values orjson gets wrong or refuses go
through a pure-Python encoder with the same output (checked against Go in
tests): floats (orjson writes ``3.0``/``1e+16``, Go ``3``/``10000000000000000``;
detected by scanning the non-string parts of orjson's output), ints beyond
64 bit, non-str keys, lone surrogates.

Python ``str`` values containing lone surrogates are taken to be
``surrogateescape``-decoded bytes: each lone surrogate is one invalid byte and
becomes ``\\ufffd``, exactly as Go escapes each invalid byte of a ``string``.

Known difference from Go: NaN/Inf. Go's Marshal fails; the orjson fast path
emits ``null`` (checking would need a full traversal); the pure-Python path
raises ``ValueError``.
"""

from __future__ import annotations

import json as _json
import re
from decimal import Decimal
from typing import Any, Iterable, Iterator, Optional

import orjson

from ext import has_float, needs_slow_loads
from machinery.gocompat import json_syntax_error, unmarshal_type_error

__all__ = [
    "dumps",
    "dumps_sorted",
    "loads",
    "encode_list_meta",
    "iter_list",
    "iter_unstructured_list",
    "encode_list",
    "encode_unstructured_list",
    "watch_event",
    "replace_surrogates",
]

_OPT_SORT = orjson.OPT_SORT_KEYS
_JSONEncodeError = orjson.JSONEncodeError

# --------------------------------------------------------------------------
# Go-only string escapes
# --------------------------------------------------------------------------

_LT, _GT, _AMP = b"<", b">", b"&"
_LS = "\u2028".encode()
_PS = "\u2029".encode()
_E2 = b"\xe2"  # lead byte of U+2028/U+2029


def _go_escapes(b: bytes) -> bytes:
    if _LT in b:
        b = b.replace(_LT, b"\\u003c")
    if _GT in b:
        b = b.replace(_GT, b"\\u003e")
    if _AMP in b:
        b = b.replace(_AMP, b"\\u0026")
    if _E2 in b:
        if _LS in b:
            b = b.replace(_LS, b"\\u2028")
        if _PS in b:
            b = b.replace(_PS, b"\\u2029")
    return b


# --------------------------------------------------------------------------
# Floats
# --------------------------------------------------------------------------


def _fmt_float(f: float) -> str:
    """Format like Go's encoding/json floatEncoder for float64."""
    if f != f or f in (_INF, _NINF):
        raise ValueError(f"json: unsupported value: {f!r} (Go's Marshal rejects NaN/Inf)")
    r = repr(f)  # shortest round-trip digits, same digits as strconv 'g' -1
    a = -f if f < 0 else f
    if a != 0 and (a < 1e-6 or a >= 1e21):
        # Go: strconv 'e' format (exponent at least 2 digits), then "e-0X" -> "e-X".
        mant, _, exp = r.partition("e")
        if not exp:  # repr used fixed notation (cannot happen in this range, but be safe)
            mant, exp = ("%.17e" % f).split("e")
            mant = repr(float(mant))
        if mant.endswith(".0"):
            mant = mant[:-2]
        e = int(exp)
        if e < 0:
            return f"{mant}e-{-e}"
        return f"{mant}e+{e:02d}"
    # Go: strconv 'f' format, shortest digits.
    if "e" in r:
        s = format(Decimal(r), "f")
        if "." in s:
            s = s.rstrip("0").rstrip(".")
        return s
    if r.endswith(".0"):
        return r[:-2]
    return r


_INF = float("inf")
_NINF = float("-inf")

# --------------------------------------------------------------------------
# Pure-Python encoder (fallback; same output as the fast path)
# --------------------------------------------------------------------------

_enc_str = _json.encoder.encode_basestring  # C version when available
_SURROGATE = re.compile("[\ud800-\udfff]")


def _key_str(k: Any) -> str:
    if type(k) is str or isinstance(k, str):
        return k
    if isinstance(k, bool):
        raise TypeError(f"json: unsupported map key type {type(k).__name__}")
    if isinstance(k, int):
        return str(int(k))
    raise TypeError(f"json: unsupported map key type {type(k).__name__}")


def _sort_key(item: tuple) -> bytes:
    # Go sorts map keys by their raw byte value (lone surrogates = raw bytes).
    return _raw_bytes(item[0])


def _raw_bytes(s: str) -> bytes:
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass")


def _py_encode(obj: Any, out: list, sort: bool) -> None:
    t = type(obj)
    if t is str or (isinstance(obj, str)):
        out.append(_enc_str(obj))
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif t is int or isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif t is float or isinstance(obj, float):
        out.append(_fmt_float(float(obj)))
    elif isinstance(obj, dict):
        if not obj:
            out.append("{}")
            return
        items = [(_key_str(k), v) for k, v in obj.items()]
        if sort:
            items.sort(key=_sort_key)
        out.append("{")
        first = True
        for k, v in items:
            if first:
                first = False
            else:
                out.append(",")
            out.append(_enc_str(k))
            out.append(":")
            _py_encode(v, out, sort)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        out.append("[")
        first = True
        for v in obj:
            if first:
                first = False
            else:
                out.append(",")
            _py_encode(v, out, sort)
        out.append("]")
    else:
        raise TypeError(f"json: unsupported type {type(obj).__name__}")


def _py_dumps(obj: Any, sort: bool) -> bytes:
    out: list = []
    _py_encode(obj, out, sort)
    s = "".join(out)
    try:
        b = s.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates can only occur inside strings: one invalid byte each.
        b = _SURROGATE.sub("\\\\ufffd", s).encode("utf-8")
    return _go_escapes(b)


# --------------------------------------------------------------------------
# Public encoders
# --------------------------------------------------------------------------


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` exactly as Go's ``json.Marshal`` (dict insertion order kept)."""
    try:
        b = orjson.dumps(obj)
    except _JSONEncodeError:
        return _py_dumps(obj, False)
    if has_float(b):  # orjson formats floats differently from Go (ext/jsonscan: one C pass)
        return _py_dumps(obj, False)
    return _go_escapes(b)


def dumps_sorted(obj: Any) -> bytes:
    """Like :func:`dumps` but every object's keys sorted (Go map marshalling)."""
    try:
        b = orjson.dumps(obj, option=_OPT_SORT)
    except _JSONEncodeError:
        return _py_dumps(obj, True)
    if has_float(b):  # orjson formats floats differently from Go (ext/jsonscan: one C pass)
        return _py_dumps(obj, True)
    return _go_escapes(b)


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------

# Go-fidelity cases orjson gets wrong, found by `needs_slow_loads` before every decode: ints beyond 64 bit (orjson
# gives a float) and a bare -0 (orjson gives int 0; Go float64 -0 re-encodes as "-0"). Compiled (ext/jsonscan, one
# pass): 0.6 us on two Leases' text (678 B), 1.6-2.8 us in Python, about what orjson's decode of them costs.


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN / Infinity: not JSON; json_syntax_error words it


def _parse_float(s: str) -> float:
    f = float(s)
    if f in (_INF, _NINF):
        raise _FloatRangeError(unmarshal_type_error(f"number {s}", "float64"))
    return f


class _FloatRangeError(ValueError):
    """A number beyond float64: Go's decoder reports it only if the whole input is valid JSON."""


def replace_surrogates(v: Any) -> Any:
    """Lone surrogates in decoded strings (invalid UTF-8 read with ``surrogateescape``, or lone
    ``\\uD800``-style escapes) become U+FFFD, as Go's decoder makes them."""
    if isinstance(v, str):
        return _SURROGATE.sub("\ufffd", v) if _SURROGATE.search(v) else v
    if isinstance(v, dict):
        return {replace_surrogates(k): replace_surrogates(x) for k, x in v.items()}
    if isinstance(v, list):
        return [replace_surrogates(x) for x in v]
    return v


def _parse_int(s: str) -> Any:
    return -0.0 if s == "-0" else int(s)


def _slow_loads(b: bytes) -> Any:
    if isinstance(b, (bytes, bytearray, memoryview)):
        s = bytes(b).decode("utf-8", "surrogateescape")
    else:
        s = b
    try:
        v = _json.loads(s, parse_constant=_reject_constant, parse_float=_parse_float, parse_int=_parse_int)
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        # Go checks the whole input's syntax before decoding anything (json.Unmarshal's error text).
        syntax = json_syntax_error(b)
        if syntax:
            raise ValueError(syntax) from None
        if isinstance(e, _FloatRangeError):
            raise ValueError(str(e)) from None
        raise ValueError("malformed JSON: exceeded max depth") from None  # valid, but deeper than Python decodes
    # Invalid UTF-8 bytes (surrogateescape) and lone \\uXXXX surrogate escapes
    # both decode to U+FFFD in Go.
    return replace_surrogates(v)


def loads(b: "bytes | bytearray | memoryview | str") -> Any:
    """Decode JSON; raises ``ValueError`` with a readable message on malformed input."""
    raw = b.encode("utf-8", "surrogatepass") if isinstance(b, str) else bytes(b)
    if needs_slow_loads(raw):
        return _slow_loads(b)
    try:
        return orjson.loads(b)
    except orjson.JSONDecodeError:
        # orjson is stricter than Go about invalid UTF-8 / lone surrogates;
        # the stdlib path decides, and produces the error message.
        return _slow_loads(b)


# --------------------------------------------------------------------------
# Lists (S6.1, S6.2, S6.4, S8.1) and watch events (S4.2)
# --------------------------------------------------------------------------

_LIST_META_ORDER = ("selfLink", "resourceVersion", "continue", "remainingItemCount", "shardInfo")


def _list_meta_dict(list_meta: Optional[dict]) -> dict:
    """ListMeta in Go struct order with omitempty applied."""
    out: dict = {}
    if not list_meta:
        return out
    for k in _LIST_META_ORDER:
        v = list_meta.get(k)
        if k == "remainingItemCount":
            if v is not None:  # *int64: omitted only when nil
                out[k] = v
        elif v:
            out[k] = v
    return out


def _unstructured_list_meta(list_meta: Optional[dict]) -> dict:
    """An UnstructuredList's metadata: as ListMeta, but `continue` is always there, "" when there is no next
    page, since upstream's stores set it through UnstructuredList.SetContinue, a map write with no omitempty
    (apimachinery unstructured_list.go; seen side by side: `"metadata":{"continue":"","resourceVersion":"7"}`)."""
    meta = _list_meta_dict(list_meta)
    meta.setdefault("continue", "")
    return meta


def encode_list_meta(list_meta: Optional[dict]) -> bytes:
    return dumps(_list_meta_dict(list_meta))


def _comma_joined(items: Iterable[bytes]) -> Iterator[bytes]:
    """Pre-encoded items separated by commas, one chunk per item."""
    first = True
    for it in items:
        if first:
            first = False
            yield it
        else:
            yield b"," + it


def iter_list(
    kind: str, api_version: str, list_meta: Optional[dict], items: Iterable[bytes]
) -> Iterator[bytes]:
    """Stream a typed ``*List`` (S6.2): envelope, then items one by one, then ``]}\\n``."""
    head = [b"{"]
    if kind:
        head.append(b'"kind":' + dumps(kind) + b",")
    if api_version:
        head.append(b'"apiVersion":' + dumps(api_version) + b",")
    head.append(b'"metadata":' + encode_list_meta(list_meta) + b',"items":[')
    yield b"".join(head)
    yield from _comma_joined(items)
    yield b"]}\n"


def iter_unstructured_list(
    kind: str, api_version: str, list_meta: Optional[dict], items: Iterable[bytes]
) -> Iterator[bytes]:
    """Stream an ``UnstructuredList`` (S6.4): keys alphabetical, ``items`` always present.

    ``items`` are pre-encoded with :func:`dumps_sorted`. ``apiVersion``/``kind``
    are omitted when empty, like the unstructured content map would.
    """
    head = [b"{"]
    if api_version:
        head.append(b'"apiVersion":' + dumps(api_version) + b",")
    head.append(b'"items":[')
    yield b"".join(head)
    yield from _comma_joined(items)
    tail = [b"]"]
    if kind:
        tail.append(b',"kind":' + dumps(kind))
    tail.append(b',"metadata":' + dumps_sorted(_unstructured_list_meta(list_meta)) + b"}\n")
    yield b"".join(tail)


def encode_list(
    kind: str, api_version: str, list_meta: Optional[dict], items: Iterable[bytes]
) -> bytes:
    """Buffered typed list: independent path (parse items, build dict, ``dumps``)."""
    d: dict = {}
    if kind:
        d["kind"] = kind
    if api_version:
        d["apiVersion"] = api_version
    d["metadata"] = _list_meta_dict(list_meta)
    d["items"] = [loads(i) for i in items]
    return dumps(d) + b"\n"


def encode_unstructured_list(
    kind: str, api_version: str, list_meta: Optional[dict], items: Iterable[bytes]
) -> bytes:
    """Buffered UnstructuredList: independent path (parse items, ``dumps_sorted``)."""
    d: dict = {"items": [loads(i) for i in items]}
    if kind:
        d["kind"] = kind
    if api_version:
        d["apiVersion"] = api_version
    d["metadata"] = _unstructured_list_meta(list_meta)
    return dumps_sorted(d) + b"\n"


def watch_event(type: str, obj_bytes: bytes) -> bytes:
    """One watch frame (S4.2): ``{"type":"ADDED","object":<obj>}\\n``."""
    return b'{"type":' + dumps(type) + b',"object":' + obj_bytes + b"}\n"
