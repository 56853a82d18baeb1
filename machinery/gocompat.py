"""Imitations of Go standard-library behaviour whose text reaches clients, in one place.

Each helper names the Go function it reproduces; error texts are byte-identical to what that
function returns (checked against Go in the tests of the callers):

* ``quote`` -- ``strconv.Quote`` (``%q`` of a string); ``quote_char`` -- encoding/json's ``quoteChar``.
* ``trim_space`` -- ``strings.TrimSpace``; ``path_clean`` -- ``path.Clean``.
* ``parse_int64`` / ``parse_uint64`` -- ``strconv.ParseInt`` / ``ParseUint`` (base 10, 64 bit).
* ``format_v`` -- ``fmt``'s ``%v`` of a value decoded from JSON into ``interface{}``.
* ``parse_duration`` -- ``time.ParseDuration`` (seconds as a float; its error texts).
* ``json_syntax_error`` -- the ``*json.SyntaxError`` text ``json.Unmarshal`` returns for malformed
  input (a port of encoding/json's scanner, which checks the whole input before decoding anything);
  ``json_type_word`` and ``unmarshal_type_error`` -- the ``*json.UnmarshalTypeError`` text.

Pure code, no imports of the project: every layer may use it.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any

__all__ = ["quote", "quote_char", "trim_space", "path_clean", "parse_int64", "parse_uint64", "format_v",
           "parse_duration", "json_syntax_error", "json_type_word", "unmarshal_type_error"]


# --- strconv.Quote ------------------------------------------------------------------------------

_ESC = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _printable(ch: str) -> bool:
    # unicode.IsPrint: L, M, N, P, S categories plus ASCII space.
    return unicodedata.category(ch)[0] in "LMNPS"


def quote(s: str) -> str:
    """Go's ``strconv.Quote`` (``%q``) of a string."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == " " or (o >= 0x20 and o != 0x7F and _printable(ch)):
            out.append(ch)
        elif ch in _ESC:
            out.append(_ESC[ch])
        elif o < 0x20 or o == 0x7F:
            out.append("\\x%02x" % o)
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\ufffd")  # Go strings cannot hold surrogates; they come out as U+FFFD
        elif o < 0x10000:
            out.append("\\u%04x" % o)
        else:
            out.append("\\U%08x" % o)
    out.append('"')
    return "".join(out)


def quote_char(c: int) -> str:
    """encoding/json's ``quoteChar``: one input byte as it appears in a syntax error.

    ``'`` and ``"`` are special-cased; any other byte is ``strconv.Quote(string(c))`` between
    single quotes, where ``string(c)`` of a byte is the rune U+00XX (so byte 0xC3 prints ``'Ã'``).
    """
    if c == 0x27:
        return "'\\''"
    if c == 0x22:
        return "'\"'"
    return "'" + quote(chr(c))[1:-1] + "'"


# --- strings / path ----------------------------------------------------------------------------

# unicode.IsSpace, the set strings.TrimSpace trims.
_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}


def trim_space(s: str) -> str:
    """Go's ``strings.TrimSpace``."""
    i, j = 0, len(s)
    while i < j and s[i] in _SPACE:
        i += 1
    while j > i and s[j - 1] in _SPACE:
        j -= 1
    return s[i:j]


def path_clean(p: str) -> str:
    """Go's ``path.Clean`` (lexical; ``.``/``..``/duplicate slashes; "" -> ".")."""
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


# --- strconv.ParseInt / ParseUint ----------------------------------------------------------------

_INT_RE = re.compile(r"[+-]?[0-9]+")
_UINT_RE = re.compile(r"[0-9]+")


def parse_int64(value: str) -> int:
    """``strconv.ParseInt(value, 10, 64)``; raises ValueError with Go's message."""
    if not _INT_RE.fullmatch(value):
        raise ValueError(f"strconv.ParseInt: parsing {quote(value)}: invalid syntax")
    n = int(value)
    if not (-(1 << 63) <= n < (1 << 63)):
        raise ValueError(f"strconv.ParseInt: parsing {quote(value)}: value out of range")
    return n


def parse_uint64(value: str) -> int:
    """``strconv.ParseUint(value, 10, 64)`` (leading zeros accepted, no sign); ValueError with Go's message."""
    if not _UINT_RE.fullmatch(value):
        raise ValueError(f"strconv.ParseUint: parsing {quote(value)}: invalid syntax")
    n = int(value)
    if n >= (1 << 64):
        raise ValueError(f"strconv.ParseUint: parsing {quote(value)}: value out of range")
    return n


# --- time.ParseDuration -------------------------------------------------------------------------

_DURATION_UNITS = {"ns": 1, "us": 1_000, "\u00b5s": 1_000, "\u03bcs": 1_000, "ms": 1_000_000,
                   "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}


def _time_quote(s: str) -> str:
    """package time's own quote(): non-ASCII and control bytes as \\xNN."""
    out = ['"']
    for ch in s:
        if ord(ch) >= 0x80 or ch < " ":
            out.extend("\\x%02x" % b for b in ch.encode("utf-8", "surrogateescape"))
        else:
            out.append("\\" + ch if ch in '"\\' else ch)
    out.append('"')
    return "".join(out)


def parse_duration(value: str) -> float:
    """``time.ParseDuration``: the duration in seconds, or ValueError with Go's message."""
    s, orig = value, value
    invalid = ValueError("time: invalid duration " + _time_quote(orig))
    neg = False
    if s[:1] in ("-", "+"):
        neg, s = s[0] == "-", s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise invalid
    total = 0
    while s:
        if not (s[0] == "." or "0" <= s[0] <= "9"):
            raise invalid
        i = 0
        while i < len(s) and "0" <= s[i] <= "9":
            i += 1
        pre, v, s = i > 0, int(s[:i] or "0"), s[i:]
        if v >= 1 << 63:
            raise invalid
        frac, scale, post = 0, 1, False
        if s[:1] == ".":
            s = s[1:]
            i = 0
            while i < len(s) and "0" <= s[i] <= "9":
                if frac <= ((1 << 63) - 1) // 10:  # leadingFraction stops gaining precision on overflow
                    frac, scale = frac * 10 + int(s[i]), scale * 10
                i += 1
            post, s = i > 0, s[i:]
        if not pre and not post:
            raise invalid
        i = 0
        while i < len(s) and not (s[i] == "." or "0" <= s[i] <= "9"):
            i += 1
        if i == 0:
            raise ValueError("time: missing unit in duration " + _time_quote(orig))
        unit, s = s[:i], s[i:]
        mult = _DURATION_UNITS.get(unit)
        if mult is None:
            raise ValueError("time: unknown unit " + _time_quote(unit) + " in duration " + _time_quote(orig))
        if v > (1 << 63) // mult:
            raise invalid
        v *= mult
        if frac:
            v += int(float(frac) * (float(mult) / scale))
            if v > 1 << 63:
                raise invalid
        total += v
        if total > 1 << 63:
            raise invalid
    if not neg and total > (1 << 63) - 1:
        raise invalid
    return (-total if neg else total) / 1e9


# --- fmt %v ------------------------------------------------------------------------------------

def format_v(v: Any) -> str:
    """Go's ``%v`` for values decoded from JSON into ``interface{}`` (maps print with sorted keys)."""
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{format_v(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(format_v(x) for x in v) + "]"
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return str(int(v))
    return str(v)


# --- encoding/json errors ----------------------------------------------------------------------

def json_type_word(v: Any) -> str:
    """The JSON kind of a decoded value as ``*json.UnmarshalTypeError`` names it.

    Anything that is not an object, array, string, bool or null counts as a number (so callers
    may decode numbers into markers of their own)."""
    if isinstance(v, dict):
        return "object"
    if isinstance(v, list):
        return "array"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "bool"
    if v is None:
        return "null"
    return "number"


def unmarshal_type_error(value: str, go_type: str, field: str = "") -> str:
    """``(*json.UnmarshalTypeError).Error()``: ``value`` is the JSON kind (``number 1.5`` for a number
    that does not fit), ``field`` the ``Struct.field`` path when the target is a struct field."""
    if field:
        return f"json: cannot unmarshal {value} into Go struct field {field} of type {go_type}"
    return f"json: cannot unmarshal {value} into Go value of type {go_type}"


# encoding/json scanner.go, state for state (only the error text is kept).
_MAX_NESTING_DEPTH = 10000
_OBJECT_KEY, _OBJECT_VALUE, _ARRAY_VALUE = range(3)
_HEX = frozenset(b"0123456789abcdefABCDEF")
_DIGITS = frozenset(b"0123456789")
_IN_HEX_ESCAPE = "in \\u hexadecimal character escape"


class _SyntaxError(Exception):
    pass


class _Scanner:
    __slots__ = ("step", "parse_state", "end_top", "err")

    def __init__(self) -> None:
        self.step = self.begin_value
        self.parse_state: list[int] = []
        self.end_top = False
        self.err: str | None = None

    def error(self, c: int, context: str) -> None:
        self.step = self.in_error
        self.err = "invalid character " + quote_char(c) + " " + context
        raise _SyntaxError

    def in_error(self, c: int) -> None:
        raise _SyntaxError

    def eof(self) -> None:
        if self.end_top:
            return
        self.step(0x20)
        if self.end_top:
            return
        self.err = "unexpected end of JSON input"
        raise _SyntaxError

    def push(self, c: int, state: int) -> None:
        self.parse_state.append(state)
        if len(self.parse_state) > _MAX_NESTING_DEPTH:
            self.error(c, "exceeded max depth")

    def pop(self) -> None:
        self.parse_state.pop()
        if not self.parse_state:
            self.step = self.end_top_state
            self.end_top = True
        else:
            self.step = self.end_value

    def begin_value_or_empty(self, c: int) -> None:
        if c in _SPACE_BYTES:
            return
        if c == 0x5D:  # ]
            return self.end_value(c)
        return self.begin_value(c)

    def begin_value(self, c: int) -> None:
        if c in _SPACE_BYTES:
            return
        if c == 0x7B:  # {
            self.step = self.begin_string_or_empty
            return self.push(c, _OBJECT_KEY)
        if c == 0x5B:  # [
            self.step = self.begin_value_or_empty
            return self.push(c, _ARRAY_VALUE)
        nxt = _LITERAL_START.get(c)
        if nxt is not None:
            self.step = getattr(self, nxt)
            return
        self.error(c, "looking for beginning of value")

    def begin_string_or_empty(self, c: int) -> None:
        if c in _SPACE_BYTES:
            return
        if c == 0x7D:  # }
            self.parse_state[-1] = _OBJECT_VALUE
            return self.end_value(c)
        return self.begin_string(c)

    def begin_string(self, c: int) -> None:
        if c in _SPACE_BYTES:
            return
        if c == 0x22:
            self.step = self.in_string
            return
        self.error(c, "looking for beginning of object key string")

    def end_value(self, c: int) -> None:
        if not self.parse_state:
            self.step = self.end_top_state
            self.end_top = True
            return self.end_top_state(c)
        if c in _SPACE_BYTES:
            self.step = self.end_value
            return
        ps = self.parse_state[-1]
        if ps == _OBJECT_KEY:
            if c == 0x3A:  # :
                self.parse_state[-1] = _OBJECT_VALUE
                self.step = self.begin_value
                return
            return self.error(c, "after object key")
        if ps == _OBJECT_VALUE:
            if c == 0x2C:  # ,
                self.parse_state[-1] = _OBJECT_KEY
                self.step = self.begin_string
                return
            if c == 0x7D:
                return self.pop()
            return self.error(c, "after object key:value pair")
        if c == 0x2C:
            self.step = self.begin_value
            return
        if c == 0x5D:
            return self.pop()
        return self.error(c, "after array element")

    def end_top_state(self, c: int) -> None:
        if c not in _SPACE_BYTES:
            self.error(c, "after top-level value")

    def in_string(self, c: int) -> None:
        if c == 0x22:
            self.step = self.end_value
        elif c == 0x5C:  # backslash
            self.step = self.in_string_esc
        elif c < 0x20:
            self.error(c, "in string literal")

    def in_string_esc(self, c: int) -> None:
        if c in b'bfnrt\\/"':
            self.step = self.in_string
        elif c == 0x75:  # u
            self.step = self.in_string_esc_u
        else:
            self.error(c, "in string escape code")

    def _one_of(self, c: int, allowed: frozenset, nxt, context: str) -> None:
        """A state that needs one byte of a class, then moves on to `nxt`."""
        if c in allowed:
            self.step = nxt
        else:
            self.error(c, context)

    def in_string_esc_u(self, c: int) -> None:
        self._one_of(c, _HEX, self.in_string_esc_u1, _IN_HEX_ESCAPE)

    def in_string_esc_u1(self, c: int) -> None:
        self._one_of(c, _HEX, self.in_string_esc_u12, _IN_HEX_ESCAPE)

    def in_string_esc_u12(self, c: int) -> None:
        self._one_of(c, _HEX, self.in_string_esc_u123, _IN_HEX_ESCAPE)

    def in_string_esc_u123(self, c: int) -> None:
        self._one_of(c, _HEX, self.in_string, _IN_HEX_ESCAPE)

    def neg(self, c: int) -> None:
        if c == 0x30:
            self.step = self.zero
        elif c in _DIGITS:
            self.step = self.one
        else:
            self.error(c, "in numeric literal")

    def one(self, c: int) -> None:
        if c in _DIGITS:
            return
        return self.zero(c)

    def zero(self, c: int) -> None:
        if c == 0x2E:  # .
            self.step = self.dot
        elif c in b"eE":
            self.step = self.exp
        else:
            return self.end_value(c)

    def dot(self, c: int) -> None:
        self._one_of(c, _DIGITS, self.dot0, "after decimal point in numeric literal")

    def dot0(self, c: int) -> None:
        if c in _DIGITS:
            return
        if c in b"eE":
            self.step = self.exp
            return
        return self.end_value(c)

    def exp(self, c: int) -> None:
        if c in b"+-":
            self.step = self.exp_sign
            return
        return self.exp_sign(c)

    def exp_sign(self, c: int) -> None:
        self._one_of(c, _DIGITS, self.exp0, "in exponent of numeric literal")

    def exp0(self, c: int) -> None:
        if c in _DIGITS:
            return
        return self.end_value(c)


def _literal_state(word: str, i: int):
    """stateT / stateTr / stateTru, stateF..., stateN...: expecting ``word[i]``."""
    want = ord(word[i])
    last = i == len(word) - 1
    context = f"in literal {word} (expecting {quote_char(want)})"

    def state(self: _Scanner, c: int) -> None:
        if c != want:
            return self.error(c, context)
        self.step = self.end_value if last else getattr(self, f"lit_{word}_{i + 1}")

    return state


for _w in ("true", "false", "null"):
    for _i in range(1, len(_w)):
        setattr(_Scanner, f"lit_{_w}_{_i}", _literal_state(_w, _i))
del _w, _i

_SPACE_BYTES = frozenset(b" \t\r\n")
_LITERAL_START = {0x22: "in_string", 0x2D: "neg", 0x30: "zero", 0x74: "lit_true_1", 0x66: "lit_false_1",
                  0x6E: "lit_null_1", **{d: "one" for d in b"123456789"}}


def json_syntax_error(data: bytes | bytearray | memoryview | str) -> str | None:
    """The ``*json.SyntaxError`` text ``json.Unmarshal`` (and ``json.Valid``) gives for ``data``, or
    None when ``data`` is syntactically valid JSON. A ``str`` is taken as UTF-8 (lone surrogates as
    ``surrogateescape`` bytes). Pure Python and per byte: call it on the failure path only."""
    if isinstance(data, str):
        try:
            data = data.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = data.encode("utf-8", "surrogatepass")
    s = _Scanner()
    try:
        for c in bytes(data):
            s.step(c)
        s.eof()
    except _SyntaxError:
        return s.err
    return None
