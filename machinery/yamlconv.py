"""YAML request bodies read as kube-apiserver reads them, at a bounded cost.

Upstream's YAML serializer runs `sigs.k8s.io/yaml.YAMLToJSON` (go-yaml v2 decoding the first document
into `interface{}`, then `convertToJSONableObject` and `json.Marshal`) and decodes the JSON. This module
reproduces that pipeline's values and error texts, and its limits:

* nesting: go-yaml's scanner refuses more than 10,000 nested flow collections (`max_flow_level`) or block
  indentation levels (`max_indents`): ``yaml: [line N: ]exceeded max depth of 10000``; YAML that expands
  to JSON nested deeper than 10,000 fails encoding/json's scanner (``couldn't get version/kind; json
  parse error: invalid character '[' exceeded max depth``);
* aliases (CVE-2019-11253): go-yaml counts every node its decoder visits, aliases re-visiting their
  anchor's whole subtree, and fails with ``yaml: document contains excessive aliasing`` as soon as more
  than 100 alias-driven decodes make up more than an allowed share of more than 1,000 decodes (99 % up to
  400,000 decodes, falling to 10 % at 4,000,000).

PyYAML's own loader builds the whole graph and its consumers expand shared anchors without limit (a
few hundred bytes became gigabytes). Here libyaml only produces events; the node graph is composed
iteratively (no recursion, whatever the depth), anchored subtrees are sized once (memoised expanded
size and depth, cycles detected), go-yaml's decode walk is replayed with those sizes (an alias costs
O(1), not its expansion), and the value is only built once it is known to be within the budget and
within `max_depth` (this server's limit on nesting, see `machinery.bodies`). Values follow go-yaml v2's
resolver (`y`/`yes`/`on` are booleans, `0x1F` and `017` integers, timestamps stay strings, `!!binary` is
decoded) and sigs.k8s.io/yaml's key conversion (int, float and bool keys become strings; a null key is an
error). libyaml is the C library go-yaml was ported from, so syntax errors carry the same texts, placed
as go-yaml's `parser.fail` places them (``yaml: line N: <problem>``).
"""
from __future__ import annotations

import base64
import binascii
import datetime
import math
import re
from typing import Any

import yaml

from .gocompat import quote

MAX_DEPTH = 10000  # go-yaml max_flow_level / max_indents; encoding/json maxNestingDepth

_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_BINARY = "tag:yaml.org,2002:binary"
_MERGE = "tag:yaml.org,2002:merge"
_RESOLVABLE = frozenset(("", _STR, _BOOL, _INT, _FLOAT, _NULL, _TIMESTAMP))
_LONG_PREFIX = "tag:yaml.org,2002:"

_CLAMP = 10 ** 12  # expanded sizes beyond any budget


class YAMLToJSONError(ValueError):
    """The error upstream's YAML decoding reports, as `message` (e.g. ``yaml: line 2: mapping values are
    not allowed in this context``); `BadRequest` text around it is the caller's."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class TooDeep(YAMLToJSONError):
    """Nested deeper than the caller's `max_depth` (a limit of this server, below upstream's)."""

    def __init__(self, depth: int, limit: int):
        super().__init__(f"nesting depth {depth} exceeds {limit}")
        self.depth = depth
        self.limit = limit


def _fail(message: str) -> YAMLToJSONError:
    return YAMLToJSONError("yaml: " + message)


# --- the node graph ------------------------------------------------------------------------------
# A plain, untagged, unanchored scalar is its str (the common case, and the memory floor); other
# scalars are _Scalar; collections are lists with slots for the memoised expanded size and depth.

class _Scalar:
    __slots__ = ("value", "tag", "implicit")

    def __init__(self, value: str, tag: str, implicit: bool):
        self.value = value
        self.tag = tag
        self.implicit = implicit  # libyaml's plain_implicit, go-yaml's node.implicit


class _Seq(list):
    __slots__ = ("size", "depth", "state")


class _Map(list):  # key, value, key, value, ...
    __slots__ = ("size", "depth", "state")


class _Alias:
    __slots__ = ("target", "name")

    def __init__(self, target: Any, name: str):
        self.target = target
        self.name = name


def _where(line: int) -> str:
    return f"line {line}: " if line else ""


def _parse_error(e: yaml.YAMLError) -> YAMLToJSONError:
    """go-yaml's parser.fail: the problem's line (scanner errors counted from 1), else the context's."""
    if isinstance(e, yaml.reader.ReaderError):
        return _fail(e.reason)
    problem = getattr(e, "problem", None) or "unknown problem parsing YAML content"
    pm, cm = getattr(e, "problem_mark", None), getattr(e, "context_mark", None)
    line = 0
    if pm is not None and pm.line:
        line = pm.line + (1 if isinstance(e, yaml.scanner.ScannerError) else 0)
    elif cm is not None and cm.line:
        line = cm.line
    return _fail(_where(line) + problem)


_FLOW_TOKENS = re.compile(rb'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\n]|\'\')*\'|(?:(?<=[ \t\n])|^)#[^\n]*|[\[\]{}\n]')


def _too_deep(body: bytes, limit: int) -> YAMLToJSONError:
    """Nesting beyond `limit` (far below go-yaml's): go-yaml's own error when its flow nesting would pass
    10,000 too (a bracket bomb), else TooDeep. libyaml itself stops at 1,000 levels, so the text is
    scanned (quoted scalars and comments skipped) rather than parsed."""
    depth = line = 0
    for m in _FLOW_TOKENS.finditer(body):
        c = m.group()
        if c in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                return _fail(_where(line + 1 if line else 0) + f"exceeded max depth of {MAX_DEPTH}")
        elif c in (b"]", b"}"):
            depth = max(0, depth - 1)
        elif c == b"\n":
            line += 1
        else:
            line += c.count(b"\n")
    return TooDeep(limit + 1, limit)


def _compose(body: bytes, max_depth: int) -> Any:
    """The first document's node graph (None for an empty stream), built from libyaml's events without
    recursion; nesting beyond `max_depth` refused before libyaml's own limit (1,000) is reached."""
    assert max_depth < 1000
    try:
        parser = yaml.CSafeLoader(body)
    except AttributeError:  # pragma: no cover - PyYAML without libyaml
        parser = yaml.SafeLoader(body)
    anchors: dict[str, Any] = {}
    stack: list[Any] = []          # open collections
    root: Any = None
    have_root = False
    get = parser.get_event
    try:
        while True:
            ev = get()
            t = type(ev)
            if t is yaml.ScalarEvent:
                plain_implicit = ev.implicit[0]
                if ev.tag is None and plain_implicit and ev.anchor is None:
                    node: Any = ev.value
                else:
                    node = _Scalar(ev.value, ev.tag or "", plain_implicit)
                if ev.anchor is not None:
                    anchors[ev.anchor] = node
            elif t is yaml.SequenceStartEvent or t is yaml.MappingStartEvent:
                if len(stack) >= max_depth:
                    raise _too_deep(body, max_depth)
                node = _Seq() if t is yaml.SequenceStartEvent else _Map()
                node.size = node.depth = None
                node.state = 0
                if ev.anchor is not None:
                    anchors[ev.anchor] = node  # registered before its children, as go-yaml does
                stack.append(node)
                continue
            elif t is yaml.SequenceEndEvent or t is yaml.MappingEndEvent:
                node = stack.pop()
            elif t is yaml.AliasEvent:
                target = anchors.get(ev.anchor)
                if target is None:
                    raise _fail(f"unknown anchor '{ev.anchor}' referenced")
                node = _Alias(target, ev.anchor)
            elif t is yaml.DocumentEndEvent or t is yaml.StreamEndEvent or ev is None:
                return root
            else:  # StreamStart, DocumentStart
                continue
            if stack:
                stack[-1].append(node)
            elif not have_root:
                root, have_root = node, True
    except yaml.YAMLError as e:
        if getattr(e, "problem", None) == "exceeded maximum nesting depth":  # libyaml's 1,000, scanning ahead
            raise _too_deep(body, max_depth) from None
        raise _parse_error(e) from None
    finally:
        parser.dispose()


# --- expanded size and depth, memoised per collection -----------------------------------------

def _is_merge_key(k: Any) -> bool:
    """go-yaml isMerge: a `<<` scalar, plain or tagged !!merge."""
    if type(k) is str:
        return k == "<<"
    return type(k) is _Scalar and k.value == "<<" and (k.implicit or k.tag == _MERGE)


def _want_map() -> YAMLToJSONError:
    return _fail("map merge requires map or sequence of maps as the value")


def _merged(v: Any) -> list[Any]:
    """The nodes go-yaml's decoder.merge unmarshals for a `<<` value, in its order."""
    if type(v) is _Map:
        return [v]
    if type(v) is _Alias:
        if type(v.target) is not _Map:
            raise _want_map()
        return [v]
    if type(v) is _Seq:
        for c in v:
            if not (type(c) is _Map or (type(c) is _Alias and type(c.target) is _Map)):
                raise _want_map()
        return list(reversed(v))  # earlier maps take precedence: go-yaml merges them last
    raise _want_map()


def _children(n: Any) -> list[Any]:
    """The nodes whose expanded size and depth a collection's depend on (merged maps included)."""
    if type(n) is _Seq:
        return list(n)
    out = []
    for i in range(0, len(n), 2):
        k, v = n[i], n[i + 1]
        if _is_merge_key(k):
            out.extend(_merged(v))
        else:
            out.append(k)
            out.append(v)
    return out


def _size_depth(n: Any) -> tuple[int, int]:
    """(decodes go-yaml makes unmarshalling n, container depth of n's JSON), aliases expanded."""
    t = type(n)
    if t is str or t is _Scalar:
        return 1, 0
    if t is _Alias:
        tgt = n.target
        if type(tgt) is str or type(tgt) is _Scalar:
            return 2, 0
        s, d = (tgt.size, tgt.depth) if tgt.size is not None else _collection_size_depth(tgt, n.name)
        return min(1 + s, _CLAMP), d
    if n.size is None:
        _collection_size_depth(n, "")
    return n.size, n.depth


def _collection_size_depth(root: Any, via: str) -> tuple[int, int]:
    """Post-order over collections (following aliases), iterative: any depth, each collection once."""
    if root.state == 1:
        raise _fail(f"anchor '{via}' value contains itself")
    root.state = 1
    stack = [[root, via, _children(root), 0]]
    while stack:
        frame = stack[-1]
        n, name, kids, i = frame
        pushed = False
        while i < len(kids):
            c = kids[i]
            i += 1
            tgt, cname = (c.target, c.name) if type(c) is _Alias else (c, name)
            if (type(tgt) is _Seq or type(tgt) is _Map) and tgt.size is None:
                if tgt.state == 1:
                    raise _fail(f"anchor '{cname}' value contains itself")
                tgt.state = 1
                frame[3] = i
                stack.append([tgt, cname, _children(tgt), 0])
                pushed = True
                break
        if pushed:
            continue
        stack.pop()
        size, depth = 1, 0
        if type(n) is _Seq:
            for c in n:
                s, d = _size_depth(c)
                size += s
                depth = max(depth, d)
        else:
            for j in range(0, len(n), 2):
                k, v = n[j], n[j + 1]
                if _is_merge_key(k):
                    for m in _merged(v):
                        s, d = _size_depth(m)
                        size += s
                        depth = max(depth, d - 1)  # a merged map's values sit at this level
                else:
                    s1, _ = _size_depth(k)
                    s2, d = _size_depth(v)
                    size += s1 + s2
                    depth = max(depth, d)
        n.size = min(size, _CLAMP)
        n.depth = depth + 1
        n.state = 2
    return root.size, root.depth


# --- go-yaml's decode walk, replayed for its alias budget ----------------------------------------

def _allowed_alias_ratio(decodes: int) -> float:
    if decodes <= 400_000:
        return 0.99
    if decodes >= 4_000_000:
        return 0.10
    return 0.99 - 0.89 * ((decodes - 400_000) / 3_600_000)


def _excessive(decodes: int, aliased: int) -> bool:
    return aliased > 100 and decodes > 1000 and aliased / decodes > _allowed_alias_ratio(decodes)


def _check_aliasing(root: Any) -> None:
    """go-yaml v2 decoder.unmarshal counts each node it visits (decodeCount), and those visited while
    expanding an alias (aliasCount), and fails once the ratio is excessive. Nodes outside aliases are
    walked here one by one; an alias adds its memoised expanded size at once: within it both counts grow
    together, so the ratio only rises and checking at its end finds what checking each node would."""
    decodes, aliased = 1, 0  # the document node
    stack = [root]
    while stack:
        n = stack.pop()
        decodes += 1
        if _excessive(decodes, aliased):
            break
        t = type(n)
        if t is _Alias:
            size, _ = _size_depth(n.target)
            decodes += size
            aliased += size
            if _excessive(decodes, aliased):
                break
        elif t is _Seq:
            stack.extend(reversed(n))
        elif t is _Map:
            stack.extend(reversed(_children(n)))
    else:
        return
    raise _fail("document contains excessive aliasing")


# --- go-yaml v2's resolver ------------------------------------------------------------------------

_RESOLVE_MAP: dict[str, tuple[str, Any]] = {}
for _vals, _tag, _v in ((("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), _BOOL, True),
                        (("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), _BOOL, False),
                        (("", "~", "null", "Null", "NULL"), _NULL, None),
                        ((".nan", ".NaN", ".NAN"), _FLOAT, math.nan),
                        ((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), _FLOAT, math.inf),
                        (("-.inf", "-.Inf", "-.INF"), _FLOAT, -math.inf),
                        (("<<",), _MERGE, "<<")):
    for _s in _vals:
        _RESOLVE_MAP[_s] = (_tag, _v)
del _vals, _tag, _v, _s

_HINT = {**{c: "S" for c in "+-"}, **{c: "D" for c in "0123456789"}, **{c: "M" for c in "yYnNtTfFoO~"}, ".": "."}
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")
_TIMESTAMP_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:([Tt ])(\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?"
                           r"(Z|[+-]\d{2}:\d{2})?)?")
_DIGITS = {2: frozenset("01"), 8: frozenset("01234567"), 10: frozenset("0123456789"),
           16: frozenset("0123456789abcdefABCDEF")}
_INT64_MIN, _INT64_MAX, _UINT64_MAX = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1


def _short(tag: str) -> str:
    return "!!" + tag[len(_LONG_PREFIX):] if tag.startswith(_LONG_PREFIX) else tag


def _go_parse_base0(s: str, signed: bool) -> int | None:
    """strconv.ParseInt(s, 0, 64) (signed) / ParseUint(s, 0, 64): the value, or None on any error."""
    neg = False
    if signed and s[:1] in ("+", "-"):
        neg, s = s[0] == "-", s[1:]
    base = 10
    if len(s) >= 2 and s[0] == "0":
        p = s[1].lower()
        if p in "xbo":
            base, s = {"x": 16, "b": 2, "o": 8}[p], s[2:]
        else:
            base, s = 8, s[1:]
    if not s or not set(s) <= _DIGITS[base]:
        return None
    v = -int(s, base) if neg else int(s, base)
    if signed:
        return v if _INT64_MIN <= v <= _INT64_MAX else None
    return v if v <= _UINT64_MAX else None


def _is_timestamp(s: str) -> bool:
    """go-yaml v2 parseTimestamp: one of its four layouts, a valid date and time."""
    m = _TIMESTAMP_RE.fullmatch(s)
    if m is None:
        return False
    y, mo, d, sep, hh, mi, ss, zone = m.groups()
    if sep is not None:
        if (sep == " ") != (zone is None) or int(hh) > 23 or int(mi) > 59 or int(ss) > 59:
            return False
    try:
        datetime.date(int(y), int(mo), int(d))
    except ValueError:
        return False
    return True


def _resolve_untagged(tag: str, s: str) -> tuple[str, Any]:
    hint = _HINT.get(s[0], "") if s else "N"
    if hint and tag != _STR and tag != _BINARY:
        hit = _RESOLVE_MAP.get(s)
        if hit is not None:
            return hit
        if hint == ".":
            if _DOT_FLOAT.fullmatch(s):
                f = float(s)
                if not math.isinf(f):
                    return _FLOAT, f
        elif hint in ("D", "S"):
            if tag in ("", _TIMESTAMP) and _is_timestamp(s):
                return _TIMESTAMP, s
            plain = s.replace("_", "")
            v = _go_parse_base0(plain, True)
            if v is None:
                v = _go_parse_base0(plain, False)
            if v is not None:
                return _INT, v
            if _YAML_FLOAT.fullmatch(plain):
                f = float(plain)
                if not math.isinf(f):
                    return _FLOAT, f
            if plain.startswith("0b") or plain.startswith("-0b"):
                digits = plain[2:] if plain[0] == "0" else plain[3:]
                if digits and set(digits) <= _DIGITS[2]:
                    v = int(digits, 2) * (-1 if plain[0] == "-" else 1)
                    if _INT64_MIN <= v <= _UINT64_MAX:
                        return _INT, v
    return _STR, s


def _resolve(tag: str, s: str) -> tuple[str, Any]:
    """go-yaml v2 resolve(): the resolved tag and value; an explicit tag the value cannot take fails."""
    if tag not in _RESOLVABLE:
        return tag, s
    rtag, out = _resolve_untagged(tag, s)
    if tag in ("", rtag, _STR, _BINARY):
        return rtag, out
    if tag == _FLOAT and rtag == _INT and _INT64_MIN <= out <= _INT64_MAX:
        return _FLOAT, float(out)
    raise _fail(f"cannot decode {_short(rtag)} `{s}` as a {_short(tag)}")


def _plain_value(s: str) -> Any:
    """An untagged plain scalar (the common case)."""
    hit = _RESOLVE_MAP.get(s)
    if hit is not None:
        return hit[1] if hit[0] != _MERGE else s
    if s and s[0] in "+-.0123456789":
        return _resolve_untagged("", s)[1]
    return s


def _scalar_value(n: _Scalar) -> Any:
    """go-yaml v2 decoder.scalar into interface{}."""
    if not n.tag and not n.implicit:
        return n.value  # quoted or block scalar: a string
    tag, v = _resolve(n.tag, n.value)
    if tag == _BINARY:
        try:
            raw = base64.b64decode(v.replace("\r", "").replace("\n", ""), validate=True)
        except (binascii.Error, ValueError):
            raise _fail("!!binary value contains invalid base64 data") from None
        v = raw.decode("utf-8", "surrogateescape")
        if any("\udc80" <= ch <= "\udcff" for ch in v):  # invalid UTF-8: json.Marshal writes U+FFFD
            v = "".join("\ufffd" if "\udc80" <= ch <= "\udcff" else ch for ch in v)
        return v
    if tag == _TIMESTAMP:
        return n.value  # timestamps decoded into interface{} stay strings in go-yaml v2
    if tag == _MERGE:
        return n.value
    return v


# --- building the value -----------------------------------------------------------------------------

def _go_sharp_v(v: Any, top: bool = True) -> str:
    """fmt's %#v of a decoded interface{} value (close enough for error texts)."""
    if v is None:
        return "<nil>" if top else "interface {}(nil)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, int):
        return hex(v) if v > _INT64_MAX else str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "+Inf" if v > 0 else "-Inf"
        return repr(v).removesuffix(".0")
    if isinstance(v, list):
        return "[]interface {}{" + ", ".join(_go_sharp_v(x, False) for x in v) + "}"
    if isinstance(v, dict):
        return "map[interface {}]interface {}{" + ", ".join(
            f"{_go_sharp_v(k, False)}:{_go_sharp_v(x, False)}" for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))) + "}"
    return str(v)


def _go_float32_g(f: float) -> str:
    """strconv.FormatFloat(f, 'g', -1, 32), with go-yaml's names for the special values."""
    if math.isnan(f):
        return ".nan"
    if math.isinf(f):
        return ".inf" if f > 0 else "-.inf"
    import struct
    f32 = struct.unpack("f", struct.pack("f", f))[0] if abs(f) < 3.5e38 else f
    for prec in range(1, 10):
        s = f"{f32:.{prec}g}"
        if struct.unpack("f", struct.pack("f", float(s)))[0] == f32:
            break
    mant, _, exp = s.partition("e")
    if exp:
        e = int(exp)
        return f"{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    return s


class _Build:
    """The value go-yaml then sigs.k8s.io/yaml produce, and the first error of the later stages
    (key conversion, then json.Marshal) which only count if decoding itself succeeds."""

    def __init__(self) -> None:
        self.convert_error = ""
        self.marshal_error = ""

    def value(self, n: Any) -> Any:
        t = type(n)
        if t is str:
            v = _plain_value(n)
        elif t is _Scalar:
            v = _scalar_value(n)
        elif t is _Alias:
            return self.value(n.target)
        elif t is _Seq:
            return [self.value(c) for c in n]
        else:
            out: dict[str, Any] = {}
            self.fill(out, n)
            return out
        if type(v) is float and not self.marshal_error and (math.isnan(v) or math.isinf(v)):
            self.marshal_error = "json: unsupported value: " + ("NaN" if math.isnan(v) else "+Inf" if v > 0 else "-Inf")
        return v

    def fill(self, out: dict[str, Any], n: _Map) -> None:
        """A mapping's pairs into `out`; a `<<` merges its maps into the same dict (go-yaml's decoder.merge,
        later keys overwriting). Merge chains are followed with a stack: an anchor may merge an anchor that
        merges another, thousands deep, without nesting the result."""
        stack = [(n, 0)]
        while stack:
            node, i = stack.pop()
            while i < len(node):
                k, v = node[i], node[i + 1]
                i += 2
                if _is_merge_key(k):
                    stack.append((node, i))
                    stack.extend((m.target if type(m) is _Alias else m, 0) for m in reversed(_merged(v)))
                    break
                key = self.value(k)
                if isinstance(key, (list, dict)):
                    raise _fail(f"invalid map key: {_go_sharp_v(key)}")
                value = self.value(v)
                out[self.key(key, value)] = value

    def key(self, k: Any, value: Any) -> str:
        """sigs.k8s.io/yaml convertToJSONableObject's map keys."""
        if isinstance(k, str):
            return k
        if isinstance(k, bool):
            return "true" if k else "false"
        if isinstance(k, int) and k <= _INT64_MAX:
            return str(k)
        if isinstance(k, float):
            return _go_float32_g(k)
        if not self.convert_error:
            typ = "%!s(<nil>)" if k is None else "uint64"
            self.convert_error = (f"unsupported map key of type: {typ}, key: {_go_sharp_v(k)}, "
                                  f"value: {_go_sharp_v(value)}")
        return str(k)


def _deref(n: Any) -> Any:
    while type(n) is _Alias:
        n = n.target
    return n


def _deepest_open(root: Any, level: int) -> str:
    """'[' or '{': the collection opened at `level` (1 = root) on a deepest path of the JSON (a path through
    a merge stops early: close enough for an error text)."""
    n = _deref(root)
    for _ in range(level - 1):
        kids = list(n) if type(n) is _Seq else [n[i + 1] for i in range(0, len(n), 2) if not _is_merge_key(n[i])]
        nxt = next((c for c in kids if _size_depth(c)[1] == n.depth - 1), None)
        if nxt is None or type(_deref(nxt)) not in (_Seq, _Map):
            break
        n = _deref(nxt)
    return "[" if type(n) is _Seq else "{"


def yaml_to_json(body: bytes, max_depth: int) -> Any:
    """The JSON value upstream decodes from a YAML body (None for an empty one), or YAMLToJSONError
    with upstream's text; TooDeep beyond `max_depth` (< 1,000; upstream's limit is 10,000)."""
    root = _compose(body, max_depth)
    if root is None:
        return None
    _check_aliasing(root)
    _, depth = _size_depth(root)
    if depth > MAX_DEPTH:
        raise YAMLToJSONError("couldn't get version/kind; json parse error: invalid character "
                              f"'{_deepest_open(root, MAX_DEPTH + 1)}' exceeded max depth")
    if depth > max_depth:
        raise TooDeep(depth, max_depth)
    b = _Build()
    value = b.value(root)
    if b.convert_error:
        raise YAMLToJSONError(b.convert_error)
    if b.marshal_error:
        raise YAMLToJSONError(b.marshal_error)
    return value
