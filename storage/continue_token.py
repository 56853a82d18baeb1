"""Continue tokens for paged LISTs, byte-compatible with upstream (S2.1-S2.4).

Token = base64url without padding (Go RawURLEncoding) of compact JSON
`{"v":"meta.k8s.io/v1","rv":<int64>,"start":"<key suffix>\\u0000"}`, keys in that
order, strings escaped as Go's encoding/json does. `start` is the storage key of
the last returned item with the list's key prefix stripped, plus a NUL so that
the next page starts strictly after it.

Decoding (AS:pkg/storage/continue.go DecodeContinue): `json.Unmarshal` into the
token struct (Go's error texts), prepend "/" if missing, reject anything Go's
`path.Clean` would change (path traversal), re-join with the request's key prefix.
Errors raise the storage error `INVALID_CONTINUE` carrying upstream's message
`invalid continue token: <err>` (S1.13, composed in AS:pkg/storage/interfaces.go
ValidateListOptions), which the HTTP layer answers with 400 BadRequest.

S1.12 (`specifying resource version is not allowed when using continue`) is
implemented here by `validate_continue_with_rv` and applied, in upstream order
(decode first, then the RV check), by `resolve_continue`.
"""
from __future__ import annotations

import base64
import json
import re

from machinery import jsonenc
from machinery.gocompat import (json_syntax_error, json_type_word, path_clean as go_path_clean,
                                unmarshal_type_error)

from .errors import invalid_continue

__all__ = ["encode_continue", "decode_continue", "validate_continue_with_rv",
           "resolve_continue", "go_path_clean", "CONTINUE_API_VERSION"]

CONTINUE_API_VERSION = "meta.k8s.io/v1"
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_HEAD = b'{"v":' + jsonenc.dumps(CONTINUE_API_VERSION) + b',"rv":'


def encode_continue(key_suffix: str, rv: int) -> str:
    """Token for the page after the item whose key (minus the list prefix) is `key_suffix`.

    The NUL that makes the next page start strictly after that key is appended here:
    `encode_continue("default/cm-b", 12345)` gives the S2.1 test vector. `rv` is the
    list's revision (or -1 for an inconsistent continuation, S2.12).
    """
    if not (_INT64_MIN <= rv <= _INT64_MAX):
        raise ValueError(f"rv out of int64 range: {rv}")
    body = _HEAD + str(int(rv)).encode() + b',"start":' + jsonenc.dumps(key_suffix + "\x00") + b"}"
    return base64.urlsafe_b64encode(body).rstrip(b"=").decode("ascii")


# --- decoding -------------------------------------------------------------------

_B64_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")
_B64_VALUE = {c: i for i, c in enumerate(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}


def _raw_url_b64decode(s: str) -> bytes:
    """base64.RawURLEncoding.DecodeString; errors as Go's CorruptInputError text."""
    if len(s) % 4 != 1 and _B64_ALPHABET.fullmatch(s):
        return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    # Go's decodeQuantum, for the offsets of its errors: CR and LF are skipped (but counted), there is
    # no padding character, a lone trailing symbol is corrupt.
    src = s.encode("utf-8", "surrogateescape")
    out = bytearray()
    si = 0
    while True:
        dbuf = [0, 0, 0, 0]
        j = 0
        while j < 4:
            if si == len(src):
                if j == 0:
                    return bytes(out)
                if j == 1:
                    raise ValueError(f"illegal base64 data at input byte {si - 1}")
                break
            c = src[si]
            si += 1
            v = _B64_VALUE.get(c)
            if v is not None:
                dbuf[j] = v
                j += 1
            elif c not in (0x0A, 0x0D):
                raise ValueError(f"illegal base64 data at input byte {si - 1}")
        val = dbuf[0] << 18 | dbuf[1] << 12 | dbuf[2] << 6 | dbuf[3]
        out += val.to_bytes(3, "big")[:j - 1]


class _Number:
    """A JSON number as written (Go decodes it only once it knows the target type)."""
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


class _Object(dict):
    """A JSON object that remembers its members in document order, duplicates included."""
    __slots__ = ("pairs",)


def _object(pairs: list) -> _Object:
    o = _Object(pairs)
    o.pairs = pairs
    return o


def _reject_constant(name: str):
    raise ValueError(name)  # NaN / Infinity: not JSON; json_syntax_error words it


_FIELDS = ("v", "rv", "start")
_FOLD = {"s": "sS\u017f"}  # Go's simple case folding: 's' also matches U+017F (long s)


def _field_of(key: str) -> str | None:
    """The token field a JSON key sets: exact name, else encoding/json's case-folded match."""
    if key in _FIELDS:
        return key
    for name in _FIELDS:
        if len(key) == len(name) and all(k in _FOLD.get(n, n + n.upper()) for k, n in zip(key, name)):
            return name
    return None


def _go_string(v: str) -> str:
    """Invalid UTF-8 (surrogateescape) and lone \\uXXXX surrogates decode to U+FFFD in Go."""
    try:
        v.encode("utf-8")
        return v
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in v)


def _loads(data: bytes):
    return json.loads(data.decode("utf-8", "surrogateescape"), parse_int=_Number, parse_float=_Number,
                      parse_constant=_reject_constant, object_pairs_hook=_object)


def _shallow(data: bytes) -> bytes:
    """Valid JSON with every array or object below the top level's members emptied: the token decoder
    only looks at their kind, and the result decodes without deep recursion."""
    out = bytearray()
    depth = 0
    in_str = esc = False
    for c in data:
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
            keep = depth <= 1
        elif c == 0x22:
            in_str = True
            keep = depth <= 1
        elif c in b"[{":
            depth += 1
            keep = depth <= 2
        elif c in b"]}":
            keep = depth <= 2
            depth -= 1
        else:
            keep = depth <= 1
        if keep:
            out.append(c)
    return bytes(out)


def _parse_token(data: bytes) -> tuple[str, int, str]:
    """json.Unmarshal(data, &continueToken{}): syntax errors first (Go checks the whole input before
    decoding), then members in document order, the first type error reported (the field keeps its
    value), null leaves a field alone, later duplicates win."""
    try:
        raw = _loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        syntax = json_syntax_error(data)
        if syntax:
            raise ValueError(syntax) from None
        raw = _loads(_shallow(data))  # valid but deeper than Python's recursion limit
    if raw is None:
        return "", 0, ""
    if not isinstance(raw, _Object):
        raise ValueError(unmarshal_type_error(json_type_word(raw), "storage.continueToken"))
    got: dict[str, object] = {"v": "", "rv": 0, "start": ""}
    first_error = None
    for key, val in raw.pairs:
        name = _field_of(key)
        if name is None or val is None:
            continue
        err = None
        if name == "rv":
            if isinstance(val, _Number):
                try:
                    n = int(val.text)  # ParseInt: only integer syntax, within int64
                except ValueError:
                    n = None
                if n is None or not (_INT64_MIN <= n <= _INT64_MAX):
                    err = unmarshal_type_error(f"number {val.text}", "int64", "continueToken.rv")
                else:
                    got["rv"] = n
            else:
                err = unmarshal_type_error(json_type_word(val), "int64", "continueToken.rv")
        elif isinstance(val, str):
            got[name] = _go_string(val)
        else:
            err = unmarshal_type_error(json_type_word(val), "string", "continueToken." + name)
        if err and first_error is None:
            first_error = err
    if first_error:
        raise ValueError(first_error)
    return got["v"], got["rv"], got["start"]  # type: ignore[return-value]


def _decode(token: str, key_prefix: str) -> tuple[str, int]:
    """storage.DecodeContinue; raises ValueError with upstream's error text."""
    try:
        data = _raw_url_b64decode(token)
    except ValueError as e:
        raise ValueError(f"continue key is not valid: {e}")
    try:
        v, rv, start = _parse_token(data)
    except ValueError as e:
        raise ValueError(f"continue key is not valid: {e}")
    if v != CONTINUE_API_VERSION:  # upstream formats the version with %v, unquoted
        raise ValueError(f"continue key is not valid: server does not recognize this encoded version {v}")
    if rv == 0:
        raise ValueError("continue key is not valid: incorrect encoded start resourceVersion "
                         "(version meta.k8s.io/v1)")
    if len(start) == 0:
        raise ValueError("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    cleaned = go_path_clean(key)
    if cleaned != key:
        raise ValueError(f"continue key is not valid: {start}")
    return key_prefix + cleaned[1:], rv


def decode_continue(token: str, key_prefix: str) -> tuple[str, int]:
    """Decode a continue token -> (from_key, rv) (S2.2-S2.4).

    `key_prefix` is the list's key prefix *with* its trailing "/" (e.g.
    `/registry/configmaps/` or `/registry/configmaps/default/`); `from_key` is
    `key_prefix + start` (start includes the trailing NUL), the inclusive start of
    the next page. `rv > 0`: continue exactly at rv; `rv < 0`: at the latest state.
    Errors: StorageError INVALID_CONTINUE, message `invalid continue token: continue key
    is not valid: ...` (400 BadRequest, S1.13, S2.3).
    """
    try:
        return _decode(token, key_prefix)
    except ValueError as e:
        raise invalid_continue(f"invalid continue token: {e}") from None


def validate_continue_with_rv(continue_: str, resource_version: str | None) -> None:
    """S1.12: continue + RV other than unset/""/"0" -> StorageError INVALID_CONTINUE (400)."""
    if continue_ and resource_version not in (None, "", "0"):
        raise invalid_continue("specifying resource version is not allowed when using continue")


def resolve_continue(continue_: str, resource_version: str | None, key_prefix: str) -> tuple[str, int]:
    """Upstream order for a recursive LIST with `continue`: decode (S1.13) then S1.12."""
    from_key, rv = decode_continue(continue_, key_prefix)
    validate_continue_with_rv(continue_, resource_version)
    return from_key, rv
