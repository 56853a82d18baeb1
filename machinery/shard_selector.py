"""KEP-5866 ``shardSelector``: parsing, canonical form and matching (SPEC S7.1-S7.11).

Pure code, no I/O. The parser mirrors upstream ``k8s.io/apiserver/pkg/sharding`` (``Parse``): the
value is parsed as a CEL expression (with a small hand-written CEL parser below, no macros) and the
AST is walked without evaluating anything:

* the root is a ``shardRange(F, S, E)`` call or ``_||_`` of such (any nesting/parenthesisation of
  ``||``; a member call ``x.shardRange(F, S, E)`` is also accepted, as upstream's walk only looks at
  the function name and the non-target arguments);
* ``F`` is an identifier/select chain that must spell ``object.metadata.uid`` or
  ``object.metadata.namespace``; all terms use the same one (S7.5);
* ``S``/``E`` are CEL string literals (any CEL quoting/escaping) of the form ``0x`` + 16 lowercase
  hex digits, or exactly ``0x10000000000000000`` (2^64; accepted for S too, where it then always
  fails the ``start < end`` check) (S7.6, S7.7).

Errors raise :class:`ShardSelectorError`; ``str(err)`` is ``invalid shard selector: <upstream text>``
(S7.8). Messages produced by the AST walk are upstream's. For input that is not valid CEL at all the
message is ``CEL parse error: <detail>`` where ``<detail>`` is this parser's own description (e.g.
``Syntax error: unexpected token ')' at offset 12``), *not* cel-go's ANTLR text; only the
``CEL parse error: `` prefix is meant to match -- except for cel-go's limits, reproduced with its
texts: ``expression code point size exceeds limit``, ``expression recursion limit exceeded: 250`` (the
parse listener) and ``max recursion depth exceeded`` (the AST visitor). The parser needs no Python
recursion (see :class:`_CelParser`). The ``expression kind N`` numbers follow cel-go's
``ast.ExprKind`` enum (Call=1, Comprehension=2, Ident=3, List=4, Literal=5, Map=6, Select=7,
Struct=8), printed with ``%v`` as integers.

HTTP: we answer an invalid selector with 400 BadRequest (:func:`status_error`); upstream 1.36 answers
500 with an empty reason (S7.9). Deliberate, documented difference.
"""
from __future__ import annotations

from typing import Iterable

import ext
from machinery.errors import StatusError, bad_request
from machinery.gocompat import quote as go_quote, trim_space

__all__ = [
    "FULL", "FIELD_PATHS", "ShardSelector", "ShardSelectorError", "complementary",
    "parse_shard_selector", "status_error", "hex_of",
]

FULL = 1 << 64
FIELD_PATHS = {"uid": "object.metadata.uid", "namespace": "object.metadata.namespace"}
_FIELD_BY_PATH = {v: k for k, v in FIELD_PATHS.items()}
PREFIX = "invalid shard selector: "

# cel-go limits (defaults of parser.NewParser), with cel-go's messages.
_MAX_RECURSION = 250
_MAX_CODE_POINTS = 100_000


class ShardSelectorError(ValueError):
    """An invalid ``shardSelector``. ``str(e)`` / ``e.message`` carry the ``invalid shard selector: `` prefix;
    ``e.detail`` is the bare upstream parser text."""

    def __init__(self, detail: str):
        self.detail = detail
        self.message = PREFIX + detail
        super().__init__(self.message)


def status_error(e: ShardSelectorError) -> StatusError:
    """400 BadRequest with the error text (upstream 1.36: 500, reason empty; S7.9)."""
    return bad_request(e.message)


def hex_of(v: int) -> str:
    """Upstream's fixed-width rendering: ``0x`` + 16 lowercase digits, or ``0x10000000000000000`` for 2^64."""
    return "0x%016x" % v


# --------------------------------------------------------------------------------------------------
# The selector


class ShardSelector:
    """A parsed selector: one field and an ordered list of half-open ranges [start, end).

    Order and duplicates are kept as written (upstream's ``String()`` does not sort or merge).
    """

    __slots__ = ("field", "ranges", "_merged")

    def __init__(self, field: str, ranges: Iterable[tuple[int, int]]):
        if field not in FIELD_PATHS:
            raise ValueError(f"unknown shard field {field!r}")
        rs = [(int(s), int(e)) for s, e in ranges]
        if not rs:
            raise ValueError("a shard selector needs at least one range")
        for s, e in rs:
            if not (0 <= s < e <= FULL):
                raise ValueError(f"invalid shard range [{s:#x}, {e:#x})")
        self.field = field
        self.ranges = rs
        self._merged = _merge(rs)

    # -- identity --------------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return FIELD_PATHS[self.field]

    def __str__(self) -> str:
        p = self.path
        return " || ".join(f"shardRange({p}, '{hex_of(s)}', '{hex_of(e)}')" for s, e in self.ranges)

    def __repr__(self) -> str:
        return f"ShardSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ShardSelector):
            return NotImplemented
        return self.field == other.field and self.ranges == other.ranges

    def __hash__(self) -> int:
        return hash((self.field, tuple(self.ranges)))

    # -- matching --------------------------------------------------------------------------------
    def matches_hash(self, h: int) -> bool:
        """S7.11: any range with start <= h < end."""
        for s, e in self.ranges:
            if s <= h < e:
                return True
        return False

    def matches(self, uid: str, namespace: str) -> bool:
        """Hash the selected field's string (FNV-1a 64, S7.10) and test it."""
        return self.matches_hash(ext.fnv1a64(uid if self.field == "uid" else namespace))

    # -- set relations ---------------------------------------------------------------------------
    def contains(self, other: "ShardSelector") -> bool:
        """True iff other has the same field and every hash other matches, self matches too."""
        if other.field != self.field:
            return False
        m = self._merged
        for s, e in other.ranges:
            if not any(ms <= s and e <= me for ms, me in m):
                return False
        return True


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def complementary(k: int, field: str = "uid") -> list[ShardSelector]:
    """Split [0, 2^64) into k equal contiguous ranges (boundaries i*2^64//k; the last ends at 2^64)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1 or k > FULL:
        raise ValueError(f"k must be an integer in [1, 2**64], got {k!r}")
    bounds = [i * FULL // k for i in range(k + 1)]
    return [ShardSelector(field, [(bounds[i], bounds[i + 1])]) for i in range(k)]


# --------------------------------------------------------------------------------------------------
# Parse + AST walk (upstream Parse / walkExpr / parseShardRangeCall / extractHexLiteral)

# cel-go ast.ExprKind values (printed with %v).
K_CALL, K_COMPREHENSION, K_IDENT, K_LIST, K_LITERAL, K_MAP, K_SELECT, K_STRUCT = range(1, 9)


class _Node:
    __slots__ = ("kind", "fn", "args", "target", "name", "operand", "value")

    def __init__(self, kind: int, *, fn: str = "", args: list | None = None, target=None,
                 name: str = "", operand=None, value=None):
        self.kind = kind
        self.fn = fn
        self.args = args or []
        self.target = target
        self.name = name
        self.operand = operand
        self.value = value


class _Bytes(bytes):
    """A CEL bytes literal value (Go: []byte, %T = []uint8)."""


class _Null:
    pass


_NULL = _Null()


def _go_type_name(v: object) -> str:
    """%T of ref.Val.Value() for CEL literal kinds (cel-go types: Int->int64, Uint->uint64, ...)."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, _Uint):
        return "uint64"
    if isinstance(v, int):
        return "int64"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, _Bytes):
        return "[]uint8"
    if v is _NULL:
        return "structpb.NullValue"
    return type(v).__name__


class _Uint(int):
    pass


def parse_shard_selector(s: str) -> ShardSelector | None:
    """Parse a ``shardSelector`` query value. ``""`` → None (absent, S7.1); errors → ShardSelectorError."""
    if s == "":
        return None
    expr = trim_space(s)
    if expr == "":
        raise ShardSelectorError("empty shard selector is not allowed; omit the parameter for unfiltered lists")
    try:
        root = _CelParser(expr).parse()
    except _CelSyntaxError as e:
        raise ShardSelectorError(f"CEL parse error: {e}") from None
    reqs = _walk(root)
    key0 = reqs[0][0]
    for key, _, _ in reqs[1:]:
        if key != key0:
            raise ShardSelectorError(f"all shard ranges must use the same field, got {go_quote(key0)} and {go_quote(key)}")
    return ShardSelector(_FIELD_BY_PATH[key0], [(int(a[2:], 16), int(b[2:], 16)) for _, a, b in reqs])


def _walk(root: _Node) -> list[tuple[str, str, str]]:
    # Iterative (the CEL tree may be deep); left-to-right order like upstream's recursion.
    out: list[tuple[str, str, str]] = []
    stack = [root]
    while stack:
        e = stack.pop()
        if e.kind == K_CALL:
            if e.fn == "_||_":
                stack.extend(reversed(e.args))
                continue
            if e.fn == "shardRange":
                out.append(_shard_range_call(e))
                continue
            raise ShardSelectorError(f"unsupported function {go_quote(e.fn)}; only shardRange() and || are allowed")
        raise ShardSelectorError(f"unexpected expression kind {e.kind}; expected shardRange() call or || operator")
    return out


def _shard_range_call(call: _Node) -> tuple[str, str, str]:
    args = call.args
    if len(args) != 3:
        raise ShardSelectorError(f"shardRange() requires exactly 3 arguments, got {len(args)}")
    path = _field_path(args[0])
    if path not in _FIELD_BY_PATH:
        raise ShardSelectorError(
            f"unsupported field path {go_quote(path)}; supported: object.metadata.uid, object.metadata.namespace")
    start = _hex_literal(args[1], "hexStart")
    end = _hex_literal(args[2], "hexEnd")
    if not (int(start[2:], 16) < int(end[2:], 16)):
        raise ShardSelectorError(f"shard range start {start} must be less than end {end}")
    return path, start, end


def _field_path(e: _Node) -> str:
    parts = []
    while e.kind == K_SELECT:
        parts.append(e.name)
        e = e.operand
    if e.kind != K_IDENT:
        raise ShardSelectorError(
            f"shardRange() first argument: expected field path (e.g. object.metadata.uid), got expression kind {e.kind}")
    parts.append(e.name)
    return ".".join(reversed(parts))


def _hex_literal(e: _Node, name: str) -> str:
    if e.kind != K_LITERAL:
        raise ShardSelectorError(f"{name} must be a string literal (e.g. '0xff'), got expression kind {e.kind}")
    v = e.value
    if not isinstance(v, str):
        raise ShardSelectorError(f"{name} must be a string literal, got {_go_type_name(v)}")
    if not v.startswith("0x"):
        raise ShardSelectorError(f"{name} must have '0x' prefix, got {go_quote(v)}")
    h = v[2:]
    if h == "":
        raise ShardSelectorError(f"{name}: hex value is required after '0x'")
    n = len(h.encode("utf-8", "surrogatepass"))  # Go len(): bytes
    if n > 17:
        raise ShardSelectorError(f"{name}: hex value too long ({n} chars, max 17): {go_quote(h)}")
    for c in h:
        if not ("0" <= c <= "9" or "a" <= c <= "f"):
            raise ShardSelectorError(f"{name}: invalid hex character {go_quote(c)} in {go_quote(v)}")
    if n == 17:
        if v != "0x10000000000000000":
            raise ShardSelectorError(f"{name}: 17-digit hex value must be '0x10000000000000000' (2^64), got {go_quote(v)}")
    elif n != 16:
        padded = "0x" + "0" * (16 - n) + h
        raise ShardSelectorError(
            f"{name} must be a 0x-prefixed 16-digit hex value, got {go_quote(v)} (did you mean {go_quote(padded)}?)")
    return v


# --------------------------------------------------------------------------------------------------
# A small CEL parser (syntax only, no macros), enough to build the AST shapes the walk inspects.


class _CelSyntaxError(Exception):
    pass


_RESERVED = {"as", "break", "const", "continue", "else", "for", "function", "if", "import", "let", "loop",
             "package", "namespace", "return", "var", "void", "while"}
_CEL_WS = " \t\r\n\f"
_PUNCT2 = ("||", "&&", "==", "!=", "<=", ">=")
_PUNCT1 = "()[]{},.?:!-+*/%<>"
_SIMPLE_ESC = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
               "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?"}
_BIN_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 3, "<=": 3, ">": 3, ">=": 3, "in": 3,
             "+": 4, "-": 4, "*": 5, "/": 5, "%": 5}
_BIN_FN = {"||": "_||_", "&&": "_&&_", "==": "_==_", "!=": "_!=_", "<": "_<_", "<=": "_<=_", ">": "_>_",
           ">=": "_>=_", "in": "@in", "+": "_+_", "-": "_-_", "*": "_*_", "/": "_/_", "%": "_%_"}


class _Tok:
    __slots__ = ("kind", "text", "value", "pos")

    def __init__(self, kind: str, text: str, value, pos: int):
        self.kind = kind  # "id", "lit", "op", "eof"
        self.text = text
        self.value = value
        self.pos = pos


def _is_id_start(c: str) -> bool:
    return c == "_" or ("a" <= c <= "z") or ("A" <= c <= "Z")


def _is_id_char(c: str) -> bool:
    return _is_id_start(c) or ("0" <= c <= "9")


def _tokenize(src: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in _CEL_WS:
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        start = i
        # string / bytes literals with optional r/b prefixes (r, b, rb, br in any case)
        j = i
        while j < n and j - i < 2 and src[j] in "rRbB":
            j += 1
        pre = src[i:j].lower()
        for cut in range(len(pre), -1, -1):
            p = pre[:cut]
            if p in ("", "r", "b", "rb", "br") and i + cut < n and src[i + cut] in "'\"":
                val, i = _read_string(src, i + cut, "r" in p, "b" in p)
                toks.append(_Tok("lit", src[start:i], val, start))
                break
        else:
            p = None
        if p is not None:
            continue
        if _is_id_start(c):
            j = i + 1
            while j < n and _is_id_char(src[j]):
                j += 1
            word = src[i:j]
            if word == "true" or word == "false":
                toks.append(_Tok("lit", word, word == "true", i))
            elif word == "null":
                toks.append(_Tok("lit", word, _NULL, i))
            elif word == "in":
                toks.append(_Tok("op", word, None, i))
            else:
                toks.append(_Tok("id", word, None, i))
            i = j
            continue
        if c.isascii() and c.isdigit() or (c == "." and i + 1 < n and src[i + 1].isascii() and src[i + 1].isdigit()):
            val, i = _read_number(src, i)
            toks.append(_Tok("lit", src[start:i], val, start))
            continue
        if src[i:i + 2] in _PUNCT2:
            toks.append(_Tok("op", src[i:i + 2], None, i))
            i += 2
            continue
        if c in _PUNCT1:
            toks.append(_Tok("op", c, None, i))
            i += 1
            continue
        raise _CelSyntaxError(f"Syntax error: token recognition error at: {src[i]!r} (offset {i})")
    toks.append(_Tok("eof", "<EOF>", None, n))
    return toks


def _read_string(src: str, i: int, raw: bool, is_bytes: bool):
    n = len(src)
    q = src[i]
    triple = src.startswith(q * 3, i)
    delim = q * 3 if triple else q
    j = i + len(delim)
    out: list[str] = []
    while True:
        if j >= n:
            raise _CelSyntaxError(f"Syntax error: unterminated string literal (offset {i})")
        if src.startswith(delim, j):
            j += len(delim)
            break
        ch = src[j]
        if not triple and ch in "\r\n":
            raise _CelSyntaxError(f"Syntax error: newline in string literal (offset {j})")
        if ch == "\\" and raw:
            # raw strings keep the backslash, but an escaped quote does not end the literal
            out.append(ch)
            if j + 1 < n:
                out.append(src[j + 1])
            j += 2
            continue
        if ch == "\\":
            j += 1
            if j >= n:
                raise _CelSyntaxError(f"Syntax error: unterminated string literal (offset {i})")
            e = src[j]
            if e in _SIMPLE_ESC:
                out.append(_SIMPLE_ESC[e])
                j += 1
            elif e in "xX":
                hx = src[j + 1:j + 3]
                if len(hx) != 2 or not all(x in "0123456789abcdefABCDEF" for x in hx):
                    raise _CelSyntaxError(f"Syntax error: invalid escape sequence (offset {j - 1})")
                out.append(chr(int(hx, 16)))
                j += 3
            elif e in "uU" and not is_bytes:
                w = 4 if e == "u" else 8
                hx = src[j + 1:j + 1 + w]
                if len(hx) != w or not all(x in "0123456789abcdefABCDEF" for x in hx):
                    raise _CelSyntaxError(f"Syntax error: invalid escape sequence (offset {j - 1})")
                cp = int(hx, 16)
                if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                    raise _CelSyntaxError(f"Syntax error: invalid unicode code point (offset {j - 1})")
                out.append(chr(cp))
                j += 1 + w
            elif e in "0123":
                oc = src[j:j + 3]
                if len(oc) != 3 or not all(x in "01234567" for x in oc):
                    raise _CelSyntaxError(f"Syntax error: invalid escape sequence (offset {j - 1})")
                out.append(chr(int(oc, 8)))
                j += 3
            else:
                raise _CelSyntaxError(f"Syntax error: invalid escape sequence (offset {j - 1})")
            continue
        out.append(ch)
        j += 1
    text = "".join(out)
    if is_bytes:
        return _Bytes(text.encode("utf-8", "surrogatepass") if not all(ord(c) < 256 for c in text)
                      else text.encode("latin-1")), j
    return text, j


def _read_number(src: str, i: int):
    n = len(src)
    if src.startswith(("0x", "0X"), i):
        j = i + 2
        while j < n and src[j] in "0123456789abcdefABCDEF":
            j += 1
        if j == i + 2:
            raise _CelSyntaxError(f"Syntax error: invalid hex literal (offset {i})")
        v = int(src[i + 2:j], 16)
        return _int_suffix(src, j, v, i)
    j = i
    while j < n and src[j].isascii() and src[j].isdigit():
        j += 1
    is_float = False
    if j < n and src[j] == "." and j + 1 < n and src[j + 1].isascii() and src[j + 1].isdigit():
        is_float = True
        j += 1
        while j < n and src[j].isascii() and src[j].isdigit():
            j += 1
    if j < n and src[j] in "eE":
        k = j + 1
        if k < n and src[k] in "+-":
            k += 1
        if k < n and src[k].isascii() and src[k].isdigit():
            is_float = True
            j = k
            while j < n and src[j].isascii() and src[j].isdigit():
                j += 1
    if is_float:
        return float(src[i:j]), j
    return _int_suffix(src, j, int(src[i:j]), i)


def _int_suffix(src: str, j: int, v: int, i: int):
    if j < len(src) and src[j] in "uU":
        if v >= FULL:
            raise _CelSyntaxError(f"Syntax error: invalid uint literal (offset {i})")
        return _Uint(v), j + 1
    return v, j  # range is checked in the parser (a leading '-' may make it fit)


class _CelParser:
    """Recursive descent over the token list, written as generators driven by one loop (`_run`): a
    rule that needs a sub-expression yields the sub-rule's generator and receives its node, so
    nesting costs heap, not Python stack, and no recursion limit is involved.

    cel-go's two depth limits (default 250) are reproduced: its parse listener counts, per grammar
    rule, how deeply the rule is nested, and every nesting goes through the `expr` rule (parentheses,
    call arguments, list/map/struct elements, index, the ternary's else branch), so `self.depth`
    counts nested `expr`s; its AST visitor counts nested ternary, relation, arithmetic, select,
    member-call and index nodes (`_check_visit_depth`).
    """

    def __init__(self, src: str):
        if len(src) > _MAX_CODE_POINTS:
            raise _CelSyntaxError(
                f"expression code point size exceeds limit: size: {len(src)}, limit {_MAX_CODE_POINTS}")
        self.toks = _tokenize(src)
        self.i = 0
        self.depth = 0

    # helpers
    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "eof":
            self.i += 1
        return t

    def at(self, text: str) -> bool:
        t = self.peek()
        return t.kind == "op" and t.text == text

    def expect(self, text: str) -> _Tok:
        t = self.next()
        if t.kind != "op" or t.text != text:
            self.fail(t, f"expecting '{text}'")
        return t

    def fail(self, t: _Tok, why: str = ""):
        msg = f"Syntax error: mismatched input '{t.text}'" if t.kind != "eof" else "Syntax error: unexpected end of input"
        if why:
            msg += f" {why}"
        raise _CelSyntaxError(f"{msg} (offset {t.pos})")

    def signed_number_at(self, k: int) -> bool:
        """A '-' at peek(k) directly before a numeric literal is that literal's sign (CEL grammar)."""
        t = self.peek(k + 1)
        return t.kind == "lit" and isinstance(t.value, (int, float)) and not isinstance(t.value, (bool, _Uint))

    @staticmethod
    def _run(rule) -> _Node:
        stack = [rule]
        value = None
        while True:
            try:
                sub = stack[-1].send(value)
            except StopIteration as done:
                stack.pop()
                if not stack:
                    return done.value
                value = done.value
                continue
            stack.append(sub)
            value = None

    # grammar
    def parse(self) -> _Node:
        e = self._run(self.expr())
        t = self.peek()
        if t.kind != "eof":
            self.fail(t, "expecting <EOF>")
        _check_visit_depth(e)
        return e

    def expr(self):
        self.depth += 1
        if self.depth > _MAX_RECURSION:
            raise _CelSyntaxError(f"expression recursion limit exceeded: {_MAX_RECURSION}")
        cond = yield self.binary(1)
        if self.at("?"):
            self.next()
            a = yield self.binary(1)
            self.expect(":")
            b = yield self.expr()
            cond = _Node(K_CALL, fn="_?_:_", args=[cond, a, b])
        self.depth -= 1
        return cond

    def binary(self, min_prec: int):
        left = yield self.unary()
        while True:
            t = self.peek()
            if t.kind != "op" or t.text not in _BIN_PREC:
                return left
            prec = _BIN_PREC[t.text]
            if prec < min_prec:
                return left
            self.next()
            right = yield self.binary(prec + 1)
            left = _Node(K_CALL, fn=_BIN_FN[t.text], args=[left, right])

    def unary(self):
        # unary: member | ('!')+ member | ('-')+ member. A lone '-' before a number is the literal's
        # sign; an even run of '!' or '-' cancels out (cel-go VisitLogicalNot / VisitNegate).
        t = self.peek()
        if t.kind != "op" or t.text not in ("!", "-") or (t.text == "-" and self.signed_number_at(0)):
            return (yield self.member())
        n = 0
        while self.at(t.text):
            self.next()
            n += 1
        operand = yield self.member()
        if n % 2 == 0:
            return operand
        return _Node(K_CALL, fn="!_" if t.text == "!" else "-_", args=[operand])

    def member(self):
        e = yield self.primary()
        while True:
            if self.at("."):
                self.next()
                t = self.next()
                if t.kind != "id":
                    self.fail(t, "expecting IDENTIFIER")
                if self.at("("):
                    args = yield self.args(")")
                    e = _Node(K_CALL, fn=t.text, args=args, target=e)
                else:
                    e = _Node(K_SELECT, name=t.text, operand=e)
            elif self.at("["):
                self.next()
                idx = yield self.expr()
                self.expect("]")
                e = _Node(K_CALL, fn="_[_]", args=[e, idx])
            elif self.at("{") and _is_qualified_name(e):
                self.next()
                fields = yield self.entries(field_names=True)
                e = _Node(K_STRUCT, args=fields)
            else:
                return e

    def args(self, close: str):
        self.next()  # the opening bracket
        out: list[_Node] = []
        if self.at(close):
            self.next()
            return out
        while True:
            out.append((yield self.expr()))
            if self.at(","):
                self.next()
                if close == "]" and self.at(close):  # trailing comma allowed in list literals
                    break
                continue
            break
        self.expect(close)
        return out

    def entries(self, field_names: bool):
        """``k: v`` pairs up to the closing brace (the '{' is consumed): a struct's fields (k an
        identifier; the values are returned) or a map's entries (k an expression; keys and values)."""
        out: list[_Node] = []
        if self.at("}"):
            self.next()
            return out
        while True:
            if field_names:
                t = self.next()
                if t.kind != "id":
                    self.fail(t, "expecting IDENTIFIER")
            else:
                out.append((yield self.expr()))
            self.expect(":")
            out.append((yield self.expr()))
            if self.at(","):
                self.next()
                if self.at("}"):
                    break
                continue
            break
        self.expect("}")
        return out

    def primary(self):
        t = self.peek()
        if t.kind == "lit":
            self.next()
            return self.literal(t, negative=False)
        if t.kind == "op" and t.text == "-" and self.signed_number_at(0):  # negative numeric literal
            self.next()
            return self.literal(self.next(), negative=True)
        leading = ""
        if t.kind == "op" and t.text == "." and self.peek(1).kind == "id":
            self.next()
            leading = "."
            t = self.peek()
        if t.kind == "id":
            self.next()
            if t.text in _RESERVED:
                raise _CelSyntaxError(f"reserved identifier: {t.text}")
            name = leading + t.text
            if self.at("("):
                return _Node(K_CALL, fn=name, args=(yield self.args(")")))
            return _Node(K_IDENT, name=name)
        if t.kind == "op" and t.text == "(":
            self.next()
            e = yield self.expr()
            self.expect(")")
            return e
        if t.kind == "op" and t.text == "[":
            return _Node(K_LIST, args=(yield self.args("]")))
        if t.kind == "op" and t.text == "{":
            self.next()
            return _Node(K_MAP, args=(yield self.entries(field_names=False)))
        self.fail(t)

    def literal(self, t: _Tok, negative: bool) -> _Node:
        v = t.value
        if isinstance(v, int) and not isinstance(v, (bool, _Uint)):
            v = -v if negative else v
            if not (-(1 << 63) <= v < (1 << 63)):
                raise _CelSyntaxError(f"Syntax error: invalid int literal (offset {t.pos})")
        elif isinstance(v, float) and negative:
            v = -v
        return _Node(K_LITERAL, value=v)


# AST nodes cel-go's visitor counts towards its depth limit (after collapsing parentheses and
# single-alternative rules): the ternary, relations, arithmetic, select, member call, index.
_VISIT_COUNTED = frozenset(("_?_:_", "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in",
                            "_+_", "_-_", "_*_", "_/_", "_%_", "_[_]"))


def _check_visit_depth(root: _Node) -> None:
    stack = [(root, 0)]
    while stack:
        e, depth = stack.pop()
        if e.kind == K_SELECT or (e.kind == K_CALL and (e.target is not None or e.fn in _VISIT_COUNTED)):
            depth += 1
            if depth > _MAX_RECURSION:
                raise _CelSyntaxError("max recursion depth exceeded")
        if e.operand is not None:
            stack.append((e.operand, depth))
        if e.target is not None:
            stack.append((e.target, depth))
        stack.extend((a, depth) for a in e.args)


def _is_qualified_name(e: _Node) -> bool:
    while e.kind == K_SELECT:
        e = e.operand
    return e.kind == K_IDENT
