"""Continue tokens for paged LISTs, byte-compatible with upstream (S2.1-S2.4).

Token = base64url without padding (Go RawURLEncoding) of compact JSON
`{"v":"meta.k8s.io/v1","rv":<int64>,"start":"<key suffix>\\u0000"}`, keys in that
order, strings escaped as Go's encoding/json does. `start` is the storage key of
the last returned item with the list's key prefix stripped, plus a NUL so that
the next page starts strictly after it.

Decoding (AS:pkg/storage/continue.go DecodeContinue): prepend "/" if missing,
reject anything Go's `path.Clean` would change (path traversal), re-join with the
request's key prefix. Errors are 400 BadRequest `invalid continue token: <err>`
(S1.13, composed in AS:pkg/storage/interfaces.go ValidateListOptions).

S1.12 (`specifying resource version is not allowed when using continue`) is
implemented here by `validate_continue_with_rv` and applied, in upstream order
(decode first, then the RV check), by `resolve_continue`.
"""
from __future__ import annotations

import base64
import binascii
import json
import re

from machinery.errors import bad_request

__all__ = ["encode_continue", "decode_continue", "validate_continue_with_rv",
           "resolve_continue", "go_path_clean", "CONTINUE_API_VERSION"]

CONTINUE_API_VERSION = "meta.k8s.io/v1"
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# --- Go encoding/json string escaping --------------------------------------

def _go_json_string(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif o < 0x20 or ch in "<>&" or o in (0x2028, 0x2029):
            out.append(f"\\u{o:04x}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\ufffd")  # invalid UTF-8 is replaced by U+FFFD
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def encode_continue(key_suffix: str, rv: int) -> str:
    """Token for the page after the item whose key (minus the list prefix) is `key_suffix`.

    The NUL that makes the next page start strictly after that key is appended here:
    `encode_continue("default/cm-b", 12345)` gives the S2.1 test vector. `rv` is the
    list's revision (or -1 for an inconsistent continuation, S2.12).
    """
    if not (_INT64_MIN <= rv <= _INT64_MAX):
        raise ValueError(f"rv out of int64 range: {rv}")
    body = ('{"v":' + _go_json_string(CONTINUE_API_VERSION) + ',"rv":' + str(int(rv))
            + ',"start":' + _go_json_string(key_suffix + "\x00") + "}")
    return base64.urlsafe_b64encode(body.encode("utf-8")).rstrip(b"=").decode("ascii")


# --- Go path.Clean ------------------------------------------------------------

def go_path_clean(p: str) -> str:
    """Go's path.Clean (lexical; `.`/`..`/duplicate slashes; "" -> ".")."""
    if p == "":
        return "."
    rooted = p.startswith("/")
    parts: list[str] = []
    for elem in p.split("/"):
        if elem in ("", "."):
            continue
        if elem == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(elem)
    out = "/".join(parts)
    if rooted:
        return "/" + out
    return out or "."


# --- decoding -------------------------------------------------------------------

_B64_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")


def _raw_url_b64decode(s: str) -> bytes:
    """base64.RawURLEncoding.DecodeString; errors as Go's CorruptInputError text."""
    stripped = s.replace("\r", "").replace("\n", "")  # Go's decoder skips CR/LF
    for i, ch in enumerate(stripped):
        if not ("A" <= ch <= "Z" or "a" <= ch <= "z" or "0" <= ch <= "9" or ch in "-_"):
            raise ValueError(f"illegal base64 data at input byte {i}")
    if len(stripped) % 4 == 1:
        raise ValueError(f"illegal base64 data at input byte {len(stripped) - 1}")
    try:
        return base64.urlsafe_b64decode(stripped + "=" * (-len(stripped) % 4))
    except (binascii.Error, ValueError) as e:  # pragma: no cover - alphabet checked above
        raise ValueError(f"illegal base64 data at input byte 0 ({e})")


def _json_error(e: json.JSONDecodeError, doc: str) -> str:
    """Approximation of Go's json.Unmarshal syntax error texts."""
    if e.pos >= len(doc):
        return "unexpected end of JSON input"
    ch = doc[e.pos]
    if e.msg.startswith("Expecting value"):
        return f"invalid character {_go_char(ch)} looking for beginning of value"
    if e.msg.startswith("Expecting property name"):
        return f"invalid character {_go_char(ch)} looking for beginning of object key string"
    if e.msg.startswith("Extra data"):
        return f"invalid character {_go_char(ch)} after top-level value"
    return f"invalid character {_go_char(ch)} {e.msg.lower()}"


def _go_char(ch: str) -> str:
    if ch == "'":
        return "'\\''"
    if ch == '"':
        return "'\"'"
    if ord(ch) < 0x20:
        return repr(ch)
    return f"'{ch}'"


def _go_type_name(v: object) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


def _field(obj: dict, name: str):
    """encoding/json field lookup: exact key, else case-insensitive; last wins."""
    if name in obj:
        return True, obj[name]
    found, val = False, None
    for k, v in obj.items():
        if k.lower() == name:
            found, val = True, v
    return found, val


def _parse_token(data: bytes) -> tuple[str, int, str]:
    try:
        doc = data.decode("utf-8")
    except UnicodeDecodeError:
        doc = data.decode("utf-8", "replace")
    try:
        raw = json.loads(doc, parse_float=lambda x: ("float", x), parse_int=lambda x: ("int", x),
                         parse_constant=lambda x: (_ for _ in ()).throw(ValueError(x)))
    except json.JSONDecodeError as e:
        raise ValueError(_json_error(e, doc))
    except ValueError as e:
        raise ValueError(f"invalid character '{str(e)[:1]}' looking for beginning of value")
    if raw is None:
        return "", 0, ""
    if not isinstance(raw, dict):
        kind = "array" if isinstance(raw, list) else ("number" if isinstance(raw, tuple) else _go_type_name(raw))
        raise ValueError(f"json: cannot unmarshal {kind} into Go value of type storage.continueToken")
    v, rv, start = "", 0, ""
    found, val = _field(raw, "v")
    if found and val is not None:
        if not isinstance(val, str):
            raise ValueError(f"json: cannot unmarshal {_jtype(val)} into Go struct field "
                             f"continueToken.v of type string")
        v = val
    found, val = _field(raw, "rv")
    if found and val is not None:
        if not (isinstance(val, tuple) and val[0] == "int"):
            desc = f"number {val[1]}" if isinstance(val, tuple) else _jtype(val)
            raise ValueError(f"json: cannot unmarshal {desc} into Go struct field "
                             f"continueToken.rv of type int64")
        n = int(val[1])
        if not (_INT64_MIN <= n <= _INT64_MAX):
            raise ValueError(f"json: cannot unmarshal number {val[1]} into Go struct field "
                             f"continueToken.rv of type int64")
        rv = n
    found, val = _field(raw, "start")
    if found and val is not None:
        if not isinstance(val, str):
            raise ValueError(f"json: cannot unmarshal {_jtype(val)} into Go struct field "
                             f"continueToken.start of type string")
        start = val
    return v, rv, start


def _jtype(val: object) -> str:
    if isinstance(val, tuple):
        return "number"
    return _go_type_name(val)


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
    if v != CONTINUE_API_VERSION:
        from machinery.selectors import go_quote
        raise ValueError(f"continue key is not valid: server does not recognize this encoded version {go_quote(v)}")
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
    Errors -> 400 `invalid continue token: continue key is not valid: ...` (S1.13, S2.3).
    """
    try:
        return _decode(token, key_prefix)
    except ValueError as e:
        raise bad_request(f"invalid continue token: {e}") from None


def validate_continue_with_rv(continue_: str, resource_version: str | None) -> None:
    """S1.12: continue + RV other than unset/""/"0" -> 400."""
    if continue_ and resource_version not in (None, "", "0"):
        raise bad_request("specifying resource version is not allowed when using continue")


def resolve_continue(continue_: str, resource_version: str | None, key_prefix: str) -> tuple[str, int]:
    """Upstream order for a recursive LIST with `continue`: decode (S1.13) then S1.12."""
    from_key, rv = decode_continue(continue_, key_prefix)
    validate_continue_with_rv(continue_, resource_version)
    return from_key, rv
