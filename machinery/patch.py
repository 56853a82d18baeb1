"""PATCH bodies: JSON merge patch, JSON patch and strategic merge patch (pure code, no IO).

Upstream reference (behaviour re-implemented, nothing copied):

* k8s.io/apiserver/pkg/endpoints/handlers/patch.go -- how each patch type is decoded,
  applied and which Status answers a failure;
* gopkg.in/evanphx/json-patch.v4 -- the JSON-patch / merge-patch engine the apiserver uses;
* k8s.io/apimachinery/pkg/util/strategicpatch + mergepatch -- strategic merge patch.

Error mapping (as upstream's patch handler does it):

==============================================  =====  ==========================================
situation                                       code   message
==============================================  =====  ==========================================
JSON patch body not JSON / not a list of ops    400    ``error decoding patch: <go json error>``
JSON patch with > 10000 operations              413    ``Request entity too large: The allowed
                                                       maximum operations in a JSON patch is
                                                       10000, got N``
JSON patch op fails (missing path, failed       422    ``the server rejected our request due to
``test``, unknown op, bad index)                       an error in our request`` (reason Invalid,
                                                       no causes: upstream builds it with
                                                       NewGenericServerResponse(422, ...) and
                                                       drops the engine's text)
merge patch body not JSON / not an object       400    ``error decoding patch: <go json error>``
merge patch body ``null``                       400    ``Invalid JSON Patch``
strategic patch body not JSON / not an object   400    ``<go json error>``
SMP: bad ``$deleteFromPrimitiveList``,          400    mergepatch.Err* text (e.g. ``invalid patch
``$retainKeys``, ``$setElementOrder`` format           format of retainKeys``)
SMP: list of lists, patch keys outside          422    generic 422 as for JSON patch
``$retainKeys``
SMP: other engine errors (missing merge key,    400    the engine's text, reason BadRequest (upstream
unknown ``$patch`` value, mixed list types)            returns a plain Go error -> 500 without a
                                                       reason: the client's patch is at fault, so a
                                                       4xx here, docs/differences.md)
strategic patch on a custom / unknown resource  415    ``the body of the request was in an unknown
                                                       format - accepted media types include:
                                                       application/json-patch+json,
                                                       application/merge-patch+json,
                                                       application/apply-patch+yaml``
unsupported Content-Type                        415    same shape, listing the accepted types
==============================================  =====  ==========================================

Server-side apply (``application/apply-patch+yaml``) is out of scope: it is answered 415 listing
the patch types this server does accept.

Deliberate simplifications, because we store untyped JSON instead of decoding into Go structs:
values that are new to the document (absent key, type change, new list element) are merged into
an empty container, so ``null`` members and ``$``-directives never reach storage (upstream drops
them when decoding into the typed struct).
"""
from __future__ import annotations

import copy
import json
import os
import re
from typing import Any

from machinery import jsonenc
from machinery.bodies import MAX_DEPTH, json_depth, too_deep_message
from machinery.errors import StatusError, bad_request, request_entity_too_large
from machinery.gocompat import format_v, json_syntax_error, json_type_word, unmarshal_type_error

__all__ = [
    "json_merge_patch", "json_patch", "strategic_merge_patch", "apply_patch", "check_patch_type",
    "STRATEGIC_SCHEMA", "JSONPatchError", "MAX_JSON_PATCH_OPERATIONS",
]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

MAX_JSON_PATCH_OPERATIONS = 10000  # handlers/patch.go maxJSONPatchOperations
_OP_STRING_FIELDS = ("op", "path", "from")  # handlers.jsonPatchOp's string fields

_GENERIC_422 = "the server rejected our request due to an error in our request"


# --------------------------------------------------------------------------- helpers

def _generic_invalid(cause: str) -> StatusError:
    """errors.NewGenericServerResponse(422, "", GroupResource{}, "", msg, 0, false).

    The server message is dropped (isUnexpectedResponse=false); upstream sends
    ``details: {}``. The engine's text is kept on the exception for logs only.
    """
    err = StatusError(422, "Invalid", _GENERIC_422)
    err.cause = cause  # type: ignore[attr-defined]
    return err


def _plain_error(message: str) -> StatusError:
    """A plain Go error of the patch engine, which upstream answers 500 without a reason: the patch is the
    client's mistake, so 400 BadRequest with the engine's text here (a deliberate difference)."""
    return bad_request(message)


def _unsupported_media_type(accepted: list[str]) -> StatusError:
    """negotiation.NewUnsupportedMediaTypeError(accepted)."""
    return StatusError(415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types include: "
                       + ", ".join(accepted))


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN / Infinity: not JSON; json_syntax_error words it


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _decode_json(body: bytes) -> Any:
    """json.Unmarshal into ``interface{}``: ValueError with Go's syntax-error text; as in Go, invalid
    UTF-8 inside strings and lone ``\\uD800``-style escapes decode to U+FFFD."""
    try:
        text = body.decode("utf-8")
        lone = _SURROGATE_ESCAPE.search(text) is not None
    except UnicodeDecodeError:
        text, lone = body.decode("utf-8", "surrogateescape"), True
    try:
        v = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise ValueError(json_syntax_error(body) or "malformed JSON: exceeded max depth") from None
    return jsonenc.replace_surrogates(v) if lone else v


def _json_equal(a: Any, b: Any) -> bool:
    """Structural JSON equality (True != 1, 1 == 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


# --------------------------------------------------------------------------- merge patch

def _prune_nulls(v: Any) -> Any:
    """Values new to the document: drop null object members, recursively (json-patch v4)."""
    if isinstance(v, dict):
        return {k: _prune_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_prune_nulls(x) for x in v]
    return v


def json_merge_patch(doc: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch. Returns a new value (sharing what the patch leaves alone); inputs are
    not modified.

    Objects merge recursively, ``null`` deletes a member, anything else (arrays included)
    replaces. A non-object patch replaces the whole document.
    """
    # Only the containers on the patch's paths are copied (members the patch leaves alone are shared with
    # `doc`): copying `doc` whole at every level cost O(depth x size).
    if not isinstance(patch, dict):
        return _prune_nulls(patch)  # builds new containers
    out = dict(doc) if isinstance(doc, dict) else {}
    for k, pv in patch.items():
        if pv is None:
            out.pop(k, None)
        elif isinstance(pv, dict):
            out[k] = json_merge_patch(out.get(k), pv)
        else:
            out[k] = _prune_nulls(pv)
    return out


# --------------------------------------------------------------------------- JSON patch

class JSONPatchError(Exception):
    """An operation that does not apply (upstream answers the generic 422)."""


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split_pointer(path: Any, what: str) -> list[str]:
    if not isinstance(path, str):
        raise JSONPatchError(f"{what} operation failed to decode path")
    if path == "" or not path.startswith("/"):
        raise JSONPatchError(f'{what} operation does not apply: doc is missing path: "{path}"')
    return [_unescape(t) for t in path.split("/")[1:]]


def _index(token: str, length: int, *, for_add: bool) -> int:
    if not re.fullmatch(r"-?[0-9]+", token):
        raise JSONPatchError(f"value was not a proper array index: '{token}'")
    idx = int(token)
    limit = length + 1 if for_add else length
    if idx >= limit or idx < -limit:
        raise JSONPatchError(f"Unable to access invalid index: {idx}")
    if idx < 0:  # json-patch v4 SupportNegativeIndices
        idx += limit
    return idx


def _parent(doc: Any, tokens: list[str], path: str, what: str) -> tuple[Any, str]:
    cur = doc
    for t in tokens[:-1]:
        if isinstance(cur, dict) and t in cur:
            cur = cur[t]
        elif isinstance(cur, list):
            try:
                cur = cur[_index(t, len(cur), for_add=False)]
            except JSONPatchError:
                raise JSONPatchError(f'{what} operation does not apply: doc is missing path: "{path}"') from None
        else:
            raise JSONPatchError(f'{what} operation does not apply: doc is missing path: "{path}"')
    if not isinstance(cur, (dict, list)):
        raise JSONPatchError(f'{what} operation does not apply: doc is missing path: "{path}"')
    return cur, tokens[-1]


def _get(doc: Any, path: str, what: str) -> Any:
    con, key = _parent(doc, _split_pointer(path, what), path, what)
    if isinstance(con, dict):
        if key not in con:
            raise JSONPatchError(f"{what} operation does not apply: doc is missing path: {path}")
        return con[key]
    return con[_index(key, len(con), for_add=False)]


def _add(doc: Any, path: str, value: Any, what: str = "add") -> None:
    con, key = _parent(doc, _split_pointer(path, what), path, what)
    if isinstance(con, dict):
        con[key] = value
    elif key == "-":
        con.append(value)
    else:
        con.insert(_index(key, len(con), for_add=True), value)


def _remove(doc: Any, path: str, what: str = "remove") -> Any:
    con, key = _parent(doc, _split_pointer(path, what), path, what)
    if isinstance(con, dict):
        if key not in con:
            raise JSONPatchError(f"Unable to remove nonexistent key: {key}: missing value")
        return con.pop(key)
    return con.pop(_index(key, len(con), for_add=False))


# json-patch v4's AccumulatedCopySizeLimit as the apiserver sets it (JSONPatchMaxCopyBytes = 3 MiB): the
# values `copy` operations duplicate may add up to this many bytes of JSON, so a patch cannot double a
# document again and again (any failure is the generic 422, as for every operation).
MAX_COPY_BYTES = 3 * 1024 * 1024


def _apply_json_patch(doc: Any, ops: list) -> Any:
    doc = copy.deepcopy(doc)
    copied = 0
    for op in ops:
        if not isinstance(op, dict):
            raise JSONPatchError("Unexpected kind: unknown")
        kind = op.get("op")
        kind = kind if isinstance(kind, str) else "unknown"
        path = op.get("path")
        if kind == "add":
            _add(doc, path, copy.deepcopy(op.get("value")))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            # json-patch v4 (used by the apiserver): replacing an absent object member sets it;
            # a missing parent or a bad array index fails.
            con, key = _parent(doc, _split_pointer(path, kind), path, kind)
            if isinstance(con, dict):
                con[key] = copy.deepcopy(op.get("value"))
            else:
                con[_index(key, len(con), for_add=False)] = copy.deepcopy(op.get("value"))
        elif kind == "move":
            frm = op.get("from")
            if not isinstance(frm, str):
                raise JSONPatchError("move operation failed to decode from")
            if isinstance(path, str) and path != frm and path.startswith(frm + "/"):
                raise JSONPatchError("move operation does not apply: from is a prefix of path")
            val = _remove(doc, frm, "move")
            _add(doc, path, val, "move")
        elif kind == "copy":
            frm = op.get("from")
            if not isinstance(frm, str):
                raise JSONPatchError("copy operation failed to decode from")
            value = _get(doc, frm, "copy")
            copied += len(jsonenc.dumps(value))
            if copied > MAX_COPY_BYTES:
                raise JSONPatchError(f"Unable to complete the copy, the accumulated size increase of copy is "
                                     f"{copied}, exceeding the limit {MAX_COPY_BYTES}")
            _add(doc, path, copy.deepcopy(value), "copy")
        elif kind == "test":
            con, key = _parent(doc, _split_pointer(path, kind), path, kind)
            if isinstance(con, dict):
                present, cur = key in con, con.get(key)
            else:
                present, cur = True, con[_index(key, len(con), for_add=False)]
            want = op.get("value")
            if not present:
                if want is not None:
                    raise JSONPatchError(f"testing value {path} failed: test failed")
            elif not _json_equal(cur, want):
                raise JSONPatchError(f"testing value {path} failed: test failed")
        else:
            raise JSONPatchError(f"Unexpected kind: {kind}")
    return doc


def json_patch(doc: Any, ops: list) -> Any:
    """RFC 6902 JSON patch, as gopkg.in/evanphx/json-patch.v4 applies it.

    Returns a new document (input untouched). Any failing operation raises the 422 the
    apiserver answers (``the server rejected our request due to an error in our request``).
    v4 quirks kept: negative array indexes count from the end; ``replace`` of an absent
    object member adds it.
    """
    if not isinstance(ops, list):
        raise bad_request("error decoding patch: "
                          + unmarshal_type_error(json_type_word(ops), "[]handlers.jsonPatchOp"))
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise request_entity_too_large(
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}")
    try:
        return _apply_json_patch(doc, ops)
    except JSONPatchError as e:
        raise _generic_invalid(str(e)) from None


# --------------------------------------------------------------------------- strategic merge patch
#
# The "schema": the patchStrategy / patchMergeKey struct tags of the k8s.io/api types, as upstream's
# published OpenAPI carries them (x-kubernetes-patch-strategy / x-kubernetes-patch-merge-key), per built-in
# resource: machinery/strategic_merge.json, derived by tools/openapi_upstream.py from the reference
# kube-apiserver's schemas. Paths are dotted field names; "[]" steps into the elements of a list. Entry =
# (strategy, mergeKey); strategy "merge" on a list of scalars is a set-union list. Lists not listed are
# atomic (the patch replaces them).

_MERGE = "merge"


def _load_strategic_schema() -> dict[str, dict[str, tuple[str, str | None]]]:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "strategic_merge.json"),
              encoding="utf-8") as f:
        data = json.load(f)
    return {plural: {path: (_MERGE, key) for path, key in table.items()} for plural, table in data.items()}


STRATEGIC_SCHEMA: dict[str, dict[str, tuple[str, str | None]]] = _load_strategic_schema()

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList"
_SET_ORDER = "$setElementOrder"

# mergepatch errors (k8s.io/apimachinery/pkg/util/mergepatch/errors.go)
_ERR_PRIMITIVE_LIST = "invalid patch format of primitive list"
_ERR_RETAIN_KEYS = "invalid patch format of retainKeys"
_ERR_SET_ORDER = "invalid patch format of setElementOrder list"
_ERR_NOT_MATCH_RETAIN = "patch content doesn't match retainKeys list"
_ERR_LIST_OF_LISTS = "lists of lists are not supported"


class _SMPError(Exception):
    def __init__(self, status: StatusError):
        super().__init__(status.message)
        self.status = status


def _bad(msg: str) -> _SMPError:
    return _SMPError(bad_request(msg))


def _plain(msg: str) -> _SMPError:
    return _SMPError(_plain_error(msg))


class _Schema:
    def __init__(self, table: dict[str, tuple[str, str | None]], path: str = ""):
        self.table, self.path = table, path

    def child(self, key: str) -> "_Schema":
        return _Schema(self.table, f"{self.path}.{key}" if self.path else key)

    def elem(self) -> "_Schema":
        return _Schema(self.table, self.path + "[]")

    def lookup(self, key: str) -> tuple[str | None, str | None]:
        return self.table.get(f"{self.path}.{key}" if self.path else key, (None, None))


def _no_merge_key(m: dict, key: str) -> _SMPError:
    return _plain(f"map: {format_v(m)} does not contain declared merge key: {key}")


def _elem_kind(*lists: list) -> str | None:
    """'map' | 'scalar' | None (empty) -- sliceElementType."""
    kind = None
    for lst in lists:
        for v in lst:
            k = "list" if isinstance(v, list) else "map" if isinstance(v, dict) else \
                "null" if v is None else type(v).__name__
            if kind is None:
                if k == "list":
                    raise _SMPError(_generic_invalid(_ERR_LIST_OF_LISTS))
                kind = k
            elif k != kind and not ({k, kind} <= {"int", "float"}):
                raise _plain("list element types are not identical: " + format_v(list(lists)))
    if kind is None:
        return None
    return "map" if kind == "map" else "scalar"


def _canon(v: Any) -> Any:
    """A hashable form of a JSON value, equal exactly when `_json_equal` says so (True != 1, 1 == 1.0):
    list lookups by hash, so a patch of n list items against m costs O(n + m), not O(n * m)."""
    t = type(v)
    if t is str:
        return v
    if t is bool:
        return ("b", v)
    if t is int or t is float:
        return ("n", v)
    if v is None:
        return ("z",)
    if t is dict:
        return ("d", frozenset((k, _canon(x)) for k, x in v.items()))
    if t is list:
        return ("l", tuple(_canon(x) for x in v))
    return ("o", repr(v))


class _Finder:
    """The first index in a list of an item equal to a given one (the whole value; with a merge key, the
    key's value of a map holding that key), by hash; `add` keeps it current as the list grows."""

    def __init__(self, lst: list, key: str | None):
        self.key = key
        self.first: dict[Any, int] = {}
        for i, v in enumerate(lst):
            self.add(v, i)

    def _of(self, v: Any) -> Any:
        if self.key is None:
            return _canon(v)
        if isinstance(v, dict) and self.key in v:
            return _canon(v[self.key])
        return _MISSING

    def add(self, v: Any, i: int) -> None:
        c = self._of(v)
        if c is not _MISSING:
            self.first.setdefault(c, i)

    def index(self, item: Any) -> int:
        if self.key is None:
            return self.first.get(_canon(item), -1)
        if not isinstance(item, dict):
            return -1
        return self.first.get(_canon(item.get(self.key)), -1)


_MISSING = object()


def _normalize_order(patch_items: list, server_only: list, patch_order: list, server_order: list,
                     key: str | None) -> list:
    """normalizeElementOrder: patch items by patch order, server-only by live order, interleaved."""
    in_patch, in_server = _Finder(patch_order, key), _Finder(server_order, key)
    left = sorted(server_only, key=in_server.index)
    right = sorted(patch_items, key=in_patch.index)
    out, i, j = [], 0, 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j]); j += 1
        elif j >= len(right):
            out.append(left[i]); i += 1
        else:
            li, ri = in_server.index(left[i]), in_server.index(right[j])
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i]); i += 1
            else:
                out.append(right[j]); j += 1
    return out


def _dedupe(items: list) -> list:
    out: list = []
    seen: set = set()
    for v in items:
        c = _canon(v)
        if c not in seen:
            seen.add(c)
            out.append(v)
    return out


def _split_by(merged: list, order: list, key: str | None) -> tuple[list, list]:
    """(items of `merged` present in `order`, the others), each in `merged`'s order."""
    present = _Finder(order, key)
    inside, outside = [], []
    for m in merged:
        (inside if present.index(m) >= 0 else outside).append(m)
    return inside, outside


def _fresh(value: Any, schema: _Schema, strategy: str | None, key: str | None) -> Any:
    """A value new to the document: merge it into an empty container (strips nulls/directives)."""
    if isinstance(value, dict):
        return _merge_map({}, value, schema)
    if isinstance(value, list):
        if strategy == _MERGE:
            return _merge_list([], value, schema, key, delete_list=False)
        return [_fresh(v, schema.elem(), None, None) if isinstance(v, dict) else copy.deepcopy(v) for v in value]
    return value


def _merge_list(original: list, patch: list, schema: _Schema, key: str | None, delete_list: bool) -> list:
    if not original and not patch:
        return []
    kind = _elem_kind(original, patch)
    if kind != "map":
        if delete_list:
            gone = {_canon(d) for d in patch}
            return [v for v in original if _canon(v) not in gone]
        merged = _dedupe(list(original) + list(patch))
        mkey = None
    else:
        if key is None:
            raise _plain("cannot merge lists without merge key for " + (schema.path or "list"))
        mkey = key
        # special elements: {"$patch": "delete", key: v} / {"$patch": "replace"}
        plain, replace, deleted = [], False, set()
        for v in patch:
            d = v.get(_DIRECTIVE)
            if _DIRECTIVE not in v:
                plain.append(v)
            elif d == "delete":
                if key not in v:
                    raise _no_merge_key(v, key)
                deleted.add(_canon(v[key]))
            elif d == "replace":
                replace = True
            elif d == "merge":
                raise _plain("merging lists cannot yet be specified in the patch")
            else:
                raise _plain(f"unknown patch type: {format_v(d)} in map: {format_v(v)}")
        if deleted:
            original = [o for o in original if not (isinstance(o, dict) and key in o and _canon(o[key]) in deleted)]
        if replace:
            original, patch = [_fresh(v, schema.elem(), None, None) for v in plain], []
        else:
            patch = plain
        merged = list(original)
        where = _Finder(merged, key)
        for v in patch:
            if key not in v:
                raise _no_merge_key(v, key)
            i = where.index(v)
            if i >= 0:
                merged[i] = _merge_map(merged[i], v, schema.elem())
            else:
                merged.append(_merge_map({}, v, schema.elem()))
                where.add(merged[-1], len(merged) - 1)
    patch_items, server_only = _split_by(merged, patch, mkey)
    return _normalize_order(patch_items, server_only, patch, original, mkey)


def _validate_set_order(patch_list: list, order: list, key: str | None) -> None:
    if not order or not patch_list:
        return
    items = [p for p in patch_list if not (isinstance(p, dict) and _DIRECTIVE in p)] if key else patch_list
    pi = oi = 0
    while pi < len(items) and oi < len(order):
        a, b = items[pi], order[oi]
        if key is not None:
            if not isinstance(a, dict) or not isinstance(b, dict):
                raise _plain("expected a map[string]interface {}")
            if key not in a:
                raise _no_merge_key(a, key)
            if key not in b:
                raise _no_merge_key(b, key)
            eq = _json_equal(a[key], b[key])
        else:
            eq = _json_equal(a, b)
        if eq:
            pi += 1
        oi += 1
    if pi < len(items):
        raise _plain(f"The order in patch list:\n{format_v(patch_list)}\n doesn't match {_SET_ORDER} list:\n"
                     f"{format_v(order)}\n")


def _merge_map(original: dict, patch: dict, schema: _Schema) -> dict:
    """mergeMap with MergeParallelList=true, IgnoreUnmatchedNulls=true. Returns a new dict."""
    if _DIRECTIVE in patch:
        d = patch[_DIRECTIVE]
        if d == "replace":
            return _merge_map({}, {k: v for k, v in patch.items() if k != _DIRECTIVE}, schema)
        if d == "delete":
            return {}
        raise _plain(f"unknown patch type: {format_v(d)} in map: {format_v(patch)}")
    out = dict(original) if isinstance(original, dict) else {}  # members left alone are shared, not copied
    patch = dict(patch)

    # $retainKeys
    if _RETAIN_KEYS in patch:
        retain = patch.pop(_RETAIN_KEYS)
        if not isinstance(retain, list):
            raise _bad(_ERR_RETAIN_KEYS)
        for k, v in patch.items():
            if v is None or k.startswith(_DELETE_PRIMITIVE) or k.startswith(_SET_ORDER):
                continue
            if k not in retain:
                raise _SMPError(_generic_invalid(_ERR_NOT_MATCH_RETAIN))
        for k in list(out):
            if k not in retain:
                del out[k]

    # $setElementOrder/<field> (and the list it orders)
    for k in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(k)
        head, _, field = k.partition("/")
        if head != _SET_ORDER or not field:
            raise _bad(_ERR_SET_ORDER)
        if not isinstance(order, list):
            raise _plain("expected a []interface {}, but received a " + json_type_word(order))
        strategy, key = schema.lookup(field)
        found_o, found_p = field in out, field in patch
        o_list = out.get(field) if found_o else []
        p_list = patch.get(field) if found_p else []
        if not isinstance(o_list, list) or not isinstance(p_list, list):
            raise _bad(_ERR_SET_ORDER)
        _validate_set_order(p_list, order, key)
        if found_o and found_p:
            if strategy == _MERGE:
                merged = _merge_list(o_list, p_list, schema.child(field), key, delete_list=False)
            else:
                merged = _fresh(p_list, schema.child(field), None, None)
        elif found_p:
            merged = _fresh(p_list, schema.child(field), strategy, key)
        elif found_o:
            merged = o_list
        else:
            continue
        ekind = _elem_kind(o_list, p_list)
        mkey = key if ekind == "map" else None
        patch_items, server_only = _split_by(merged, order, mkey)
        out[field] = _normalize_order(patch_items, server_only, order, o_list, mkey)
        patch.pop(field, None)

    # $deleteFromPrimitiveList/<field>: applied after the additions of the same field
    deletes = [(k, patch.pop(k)) for k in [k for k in patch if k.startswith(_DELETE_PRIMITIVE)]]

    for k, pv in patch.items():
        strategy, key = schema.lookup(k)
        sub = schema.child(k)
        if pv is None:
            out.pop(k, None)
            continue
        if k not in out:
            out[k] = _fresh(pv, sub, strategy, key)
            continue
        ov = out[k]
        if isinstance(ov, dict) and isinstance(pv, dict):
            out[k] = _fresh(pv, sub, None, None) if strategy == "replace" else _merge_map(ov, pv, sub)
        elif isinstance(ov, list) and isinstance(pv, list):
            if strategy == _MERGE:
                out[k] = _merge_list(ov, pv, sub, key, delete_list=False)
            else:
                out[k] = _fresh(pv, sub, None, None)
        else:
            out[k] = _fresh(pv, sub, strategy, key)

    for k, pv in deletes:
        head, _, field = k.partition("/")
        if head != _DELETE_PRIMITIVE or not field:
            raise _bad(_ERR_PRIMITIVE_LIST)
        if field not in out or not isinstance(out[field], list) or not isinstance(pv, list):
            continue
        strategy, key = schema.lookup(field)
        if strategy == _MERGE:
            out[field] = _merge_list(out[field], pv, schema.child(field), key, delete_list=True)
        else:
            out[field] = copy.deepcopy(pv)
    return out


def strategic_merge_patch(doc: dict, patch: dict, resource: str) -> dict:
    """Kubernetes strategic merge patch for the built-in ``resource`` (plural, e.g. "pods").

    Returns a new dict; inputs are not modified. Unknown resources (custom resources) raise
    415 as upstream does for strategic merge on CRs.
    """
    table = STRATEGIC_SCHEMA.get(resource)
    if table is None:
        raise _unsupported_media_type([JSON_PATCH, MERGE_PATCH, APPLY_PATCH])
    if not isinstance(patch, dict):
        raise bad_request(unmarshal_type_error(json_type_word(patch), "map[string]interface {}"))
    try:
        return _merge_map(doc if isinstance(doc, dict) else {}, patch, _Schema(table))
    except _SMPError as e:
        raise e.status from None


# --------------------------------------------------------------------------- dispatch

def check_patch_type(content_type: str, resource: str, is_custom: bool) -> str:
    """The patch media type without parameters, or 415. Checked before the object is read, so
    an unsupported type is 415 whether or not the object exists."""
    ct = (content_type or "").split(";", 1)[0].strip()
    builtin = not is_custom and resource in STRATEGIC_SCHEMA
    accepted = [JSON_PATCH, MERGE_PATCH] + ([STRATEGIC_MERGE_PATCH] if builtin else []) + [APPLY_PATCH]
    if ct not in accepted:
        raise _unsupported_media_type(accepted)
    if ct == APPLY_PATCH:
        # server-side apply is not implemented: advertise what we do accept.
        raise _unsupported_media_type([t for t in accepted if t != APPLY_PATCH])
    return ct


def apply_patch(doc: dict, content_type: str, body: bytes, resource: str, is_custom: bool) -> dict:
    """Apply a PATCH request body to ``doc`` according to its Content-Type.

    ``content_type`` may carry parameters (``; charset=utf-8``), which are ignored like upstream.
    The result still has to be decoded/validated by the caller (apiVersion/kind/name checks).
    """
    ct = check_patch_type(content_type, resource, is_custom)
    if json_depth(body) > MAX_DEPTH:  # bounded before any decoder or recursive merge sees it
        raise bad_request(("error decoding patch: " if ct != STRATEGIC_MERGE_PATCH else "") + too_deep_message())
    if ct == JSON_PATCH:
        try:
            ops = _decode_json(body)
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}") from None
        if isinstance(ops, list):  # decoding into []jsonPatchOp: the first type error in document order
            for op in ops:
                if not isinstance(op, dict):
                    raise bad_request("error decoding patch: "
                                      + unmarshal_type_error(json_type_word(op), "handlers.jsonPatchOp"))
                for f, v in op.items():
                    if f in _OP_STRING_FIELDS and v is not None and not isinstance(v, str):
                        raise bad_request("error decoding patch: " + unmarshal_type_error(
                            json_type_word(v), "string", f"jsonPatchOp.{f}"))
        return json_patch(doc, ops)

    if ct == MERGE_PATCH:
        try:
            patch = _decode_json(body)
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}") from None
        if patch is None:
            raise bad_request("Invalid JSON Patch")
        if not isinstance(patch, dict):
            raise bad_request("error decoding patch: "
                              + unmarshal_type_error(json_type_word(patch), "map[string]interface {}"))
        return json_merge_patch(doc, patch)

    # strategic merge patch
    try:
        patch = _decode_json(body)
    except ValueError as e:
        raise bad_request(str(e)) from None
    if patch is None:
        patch = {}
    return strategic_merge_patch(doc, patch, resource)
