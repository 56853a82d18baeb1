"""Label and field selectors, parsed and matched as upstream apimachinery does.

* Label selectors follow `k8s.io/apimachinery/pkg/labels` (`labels.Parse`): the
  same lexer/parser states, the same validation of keys (qualified names) and
  values, the same error texts, the same canonical `String()` form
  (requirements sorted by key, set values sorted).
* Field selectors follow `k8s.io/apimachinery/pkg/fields` (`fields.ParseSelector`,
  backslash escapes) plus the per-kind field-label conversion the handler runs
  right after parsing (`scope.Convertor.ConvertFieldLabel`), which is where an
  unsupported field label is rejected.

All parse errors are `StatusError` 400 BadRequest whose message is the raw Go
error text, exactly as the LIST/WATCH handler returns it (`NewBadRequest(err.Error())`).

Spec references: S1.20 (exact name narrowing), S7.12 (selectors AND with sharding).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from machinery.errors import bad_request
from machinery import jsonenc
from machinery.gocompat import parse_int64, quote as go_quote
# The label key/value validators are shared with object validation (one implementation).
from machinery.validation import is_qualified_name, is_valid_label_value

__all__ = [
    "LabelSelector", "FieldSelector", "SelectableFields",
    "parse_label_selector", "parse_field_selector", "FIELD_SELECTORS",
    "field_selectors_for",
]


# ---------------------------------------------------------------------------
# Go formatting helpers
# ---------------------------------------------------------------------------

def _invalid(field: str, value: str, detail: str) -> str:
    """field.Invalid(...).Error() for a string value."""
    return f"{field}: Invalid value: {go_quote(value)}: {detail}"


def _aggregate(msgs: list[str]) -> str | None:
    """utilerrors aggregate Error(): dedup, `[a, b]` when more than one."""
    seen: list[str] = []
    for m in msgs:
        if m not in seen:
            seen.append(m)
    if not seen:
        return None
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


# ---------------------------------------------------------------------------
# Label selectors
# ---------------------------------------------------------------------------

# internal operator names (selection.Operator values upstream)
_OP_EXISTS, _OP_NOT_EXISTS = "exists", "!"
_OP_EQ, _OP_DEQ, _OP_NEQ = "=", "==", "!="
_OP_IN, _OP_NOTIN, _OP_GT, _OP_LT = "in", "notin", "gt", "lt"
_BINARY_OPS = "in, notin, =, ==, !=, gt, lt"  # strings.Join(binaryOperators, ", ")

# lexer tokens
_T_ERR, _T_EOS, _T_CLOSE, _T_COMMA, _T_NOT, _T_DEQ, _T_EQ, _T_GT, _T_ID, _T_IN, _T_LT, _T_NEQ, \
    _T_NOTIN, _T_OPEN = range(14)
_STRING2TOKEN = {")": _T_CLOSE, ",": _T_COMMA, "!": _T_NOT, "==": _T_DEQ, "=": _T_EQ, ">": _T_GT,
                 "in": _T_IN, "<": _T_LT, "!=": _T_NEQ, "notin": _T_NOTIN, "(": _T_OPEN}
_WS = " \t\r\n"
_SPECIAL = "=!(),><"


class _SelectorSyntaxError(Exception):
    pass


def _lex(s: str) -> list[tuple[int, str]]:
    items: list[tuple[int, str]] = []
    pos, n = 0, len(s)
    while True:
        while pos < n and s[pos] in _WS:
            pos += 1
        if pos >= n:
            items.append((_T_EOS, ""))
            return items
        ch = s[pos]
        if ch in _SPECIAL:
            buf, last = "", None
            while pos < n and s[pos] in _SPECIAL:
                buf += s[pos]
                pos += 1
                tok = _STRING2TOKEN.get(buf)
                if tok is not None:
                    last = (tok, buf)
                elif last is not None:
                    pos -= 1
                    break
            if last is None:
                items.append((_T_ERR, f"error expected: keyword found '{buf}'"))
            else:
                items.append(last)
        else:
            start = pos
            while pos < n and s[pos] not in _SPECIAL and s[pos] not in _WS:
                pos += 1
            lit = s[start:pos]
            items.append((_STRING2TOKEN.get(lit, _T_ID), lit))


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str                     # internal op: exists ! = == != in notin gt lt
    values: tuple[str, ...]     # sorted, unique

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op in (_OP_IN, _OP_EQ, _OP_DEQ):
            return self.key in labels and labels[self.key] in self.values
        if op in (_OP_NOTIN, _OP_NEQ):
            return self.key not in labels or labels[self.key] not in self.values
        if op == _OP_EXISTS:
            return self.key in labels
        if op == _OP_NOT_EXISTS:
            return self.key not in labels
        if op in (_OP_GT, _OP_LT):
            if self.key not in labels or len(self.values) != 1:
                return False
            lv, rv = _int64_or_none(labels[self.key]), _int64_or_none(self.values[0])
            if lv is None or rv is None:
                return False
            return lv > rv if op == _OP_GT else lv < rv
        return False

    def __str__(self) -> str:
        op = self.op
        if op == _OP_EXISTS:
            return self.key
        if op == _OP_NOT_EXISTS:
            return "!" + self.key
        vals = ",".join(self.values)
        if op == _OP_IN:
            return f"{self.key} in ({vals})"
        if op == _OP_NOTIN:
            return f"{self.key} notin ({vals})"
        sym = {_OP_EQ: "=", _OP_DEQ: "==", _OP_NEQ: "!=", _OP_GT: ">", _OP_LT: "<"}[op]
        return f"{self.key}{sym}{vals}"


_PUBLIC_OP = {_OP_EQ: "=", _OP_DEQ: "=", _OP_NEQ: "!=", _OP_IN: "in", _OP_NOTIN: "notin",
              _OP_EXISTS: "exists", _OP_NOT_EXISTS: "!", _OP_GT: "gt", _OP_LT: "lt"}

def _int64_or_none(s: str) -> int | None:
    try:
        return parse_int64(s)
    except ValueError:
        return None


def _new_requirement(key: str, op: str, vals: list[str]) -> _Requirement:
    """labels.NewRequirement with a nil field path; raises _SelectorSyntaxError."""
    errs: list[str] = []
    key_err = _validate_label_key(key, "key")
    if key_err:
        errs.append(key_err)
    if op in (_OP_IN, _OP_NOTIN) and len(vals) == 0:
        errs.append("values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty")
    elif op in (_OP_EQ, _OP_DEQ, _OP_NEQ) and len(vals) != 1:
        errs.append("values: Invalid value: " + _json_list(vals)
                    + ": exact-match compatibility requires one single value")
    elif op in (_OP_GT, _OP_LT):
        if len(vals) != 1:
            errs.append("values: Invalid value: " + _json_list(vals)
                        + ": for 'Gt', 'Lt' operators, exactly one value is required")
        for i, v in enumerate(vals):
            if _int64_or_none(v) is None:
                errs.append(_invalid(f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer"))
    for i, v in enumerate(vals):
        problems = is_valid_label_value(v)
        if problems:
            errs.append(_invalid(f"values[{i}][{key}]", v, "; ".join(problems)))
    agg = _aggregate(errs)
    if agg is not None:
        raise _SelectorSyntaxError(agg)
    return _Requirement(key, op, tuple(vals))


def _json_list(vals: list[str]) -> str:
    return jsonenc.dumps(vals).decode()


def _validate_label_key(key: str, path: str) -> str | None:
    problems = is_qualified_name(key)
    if problems:
        return _invalid(path, key, "; ".join(problems))
    return None


class _Parser:
    def __init__(self, s: str):
        self.items = _lex(s)
        self.pos = 0

    @staticmethod
    def _ctx(tok: int, values: bool) -> int:
        if values and tok in (_T_IN, _T_NOTIN):
            return _T_ID
        return tok

    def lookahead(self, values: bool = True) -> tuple[int, str]:
        tok, lit = self.items[self.pos]
        return self._ctx(tok, values), lit

    def consume(self, values: bool = True) -> tuple[int, str]:
        tok, lit = self.items[self.pos]
        self.pos += 1
        return self._ctx(tok, values), lit

    def parse(self) -> list[_Requirement]:
        reqs: list[_Requirement] = []
        while True:
            tok, lit = self.lookahead()
            if tok in (_T_ID, _T_NOT):
                try:
                    reqs.append(self.parse_requirement())
                except _SelectorSyntaxError as e:
                    raise _SelectorSyntaxError(f"unable to parse requirement: {e}") from None
                t, l = self.consume()
                if t == _T_EOS:
                    return reqs
                if t == _T_COMMA:
                    t2, l2 = self.lookahead()
                    if t2 not in (_T_ID, _T_NOT):
                        raise _SelectorSyntaxError(f"found '{l2}', expected: identifier after ','")
                else:
                    raise _SelectorSyntaxError(f"found '{l}', expected: ',' or 'end of string'")
            elif tok == _T_EOS:
                return reqs
            else:
                raise _SelectorSyntaxError(f"found '{lit}', expected: !, identifier, or 'end of string'")

    def parse_requirement(self) -> _Requirement:
        key, op = self.parse_key_and_infer_operator()
        if op in (_OP_EXISTS, _OP_NOT_EXISTS):
            return _new_requirement(key, op, [])
        op = self.parse_operator()
        if op in (_OP_IN, _OP_NOTIN):
            values = self.parse_values()
        else:
            values = self.parse_exact_value()
        return _new_requirement(key, op, sorted(values))

    def parse_key_and_infer_operator(self) -> tuple[str, str]:
        op = ""
        tok, lit = self.consume()
        if tok == _T_NOT:
            op = _OP_NOT_EXISTS
            tok, lit = self.consume()
        if tok != _T_ID:
            raise _SelectorSyntaxError(f"found '{lit}', expected: identifier")
        err = _validate_label_key(lit, "<nil>")
        if err:
            raise _SelectorSyntaxError(err)
        t, _ = self.lookahead()
        if t in (_T_EOS, _T_COMMA) and op != _OP_NOT_EXISTS:
            op = _OP_EXISTS
        return lit, op

    def parse_operator(self) -> str:
        tok, lit = self.consume(values=False)
        op = {_T_IN: _OP_IN, _T_EQ: _OP_EQ, _T_DEQ: _OP_DEQ, _T_GT: _OP_GT, _T_LT: _OP_LT,
              _T_NOTIN: _OP_NOTIN, _T_NEQ: _OP_NEQ}.get(tok)
        if op is None:
            raise _SelectorSyntaxError(f"found '{lit}', expected: {_BINARY_OPS}")
        return op

    def parse_values(self) -> set[str]:
        tok, lit = self.consume()
        if tok != _T_OPEN:
            raise _SelectorSyntaxError(f"found '{lit}' expected: '('")
        tok, lit = self.lookahead()
        if tok in (_T_ID, _T_COMMA):
            s = self.parse_identifiers_list()
            tok2, _ = self.consume()
            if tok2 != _T_CLOSE:  # unreachable upstream too; same text
                raise _SelectorSyntaxError(f"found '{lit}', expected: ')'")
            return s
        if tok == _T_CLOSE:
            self.consume()
            return {""}
        raise _SelectorSyntaxError(f"found '{lit}', expected: ',', ')' or identifier")

    def parse_identifiers_list(self) -> set[str]:
        s: set[str] = set()
        while True:
            tok, lit = self.consume()
            if tok == _T_ID:
                s.add(lit)
                tok2, lit2 = self.lookahead()
                if tok2 == _T_COMMA:
                    continue
                if tok2 == _T_CLOSE:
                    return s
                raise _SelectorSyntaxError(f"found '{lit2}', expected: ',' or ')'")
            elif tok == _T_COMMA:
                if not s:
                    s.add("")
                tok2, _ = self.lookahead()
                if tok2 == _T_CLOSE:
                    s.add("")
                    return s
                if tok2 == _T_COMMA:
                    self.consume()
                    s.add("")
            else:
                raise _SelectorSyntaxError(f"found '{lit}', expected: ',', or identifier")

    def parse_exact_value(self) -> set[str]:
        tok, _ = self.lookahead()
        if tok in (_T_EOS, _T_COMMA):
            return {""}
        tok, lit = self.consume()
        if tok == _T_ID:
            return {lit}
        raise _SelectorSyntaxError(f"found '{lit}', expected: identifier")


class LabelSelector:
    """A parsed label selector (AND of requirements, sorted by key)."""

    __slots__ = ("_reqs",)

    def __init__(self, reqs: list[_Requirement]):
        self._reqs = tuple(reqs)

    @property
    def empty(self) -> bool:
        return not self._reqs

    @property
    def requirements(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(key, op, values): op in `=`, `!=`, `in`, `notin`, `exists`, `!` (and `gt`/`lt`).

        `==` is reported as `=`; `exists`/`!` have no values; values are sorted.
        """
        return [(r.key, _PUBLIC_OP[r.op], r.values) for r in self._reqs]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self._reqs)

    def requires_exact_match(self, key: str) -> str | None:
        for r in self._reqs:
            if r.key == key:
                if r.op in (_OP_EQ, _OP_DEQ, _OP_IN) and len(r.values) == 1:
                    return r.values[0]
                return None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._reqs)

    def __repr__(self) -> str:
        return f"LabelSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelSelector) and self._reqs == other._reqs

    def __hash__(self) -> int:
        return hash(self._reqs)


def parse_label_selector(s: str | None) -> LabelSelector:
    """labels.Parse. Errors -> 400 BadRequest with upstream's message."""
    if not s:
        return LabelSelector([])
    try:
        reqs = _Parser(s).parse()
    except _SelectorSyntaxError as e:
        raise bad_request(str(e)) from None
    reqs.sort(key=lambda r: r.key)  # sort.Sort(ByKey): deterministic order
    return LabelSelector(reqs)


# ---------------------------------------------------------------------------
# Field selectors
# ---------------------------------------------------------------------------

Getter = Callable[[dict], str]


class SelectableFields(dict):
    """Field label -> getter, plus how the kind rejects an unknown label.

    `style="label"`: kinds with a registered field-label conversion func
    (core Pod, Node, Event, Namespace, Secret, Service, ReplicationController):
    `field label not supported: <label>`.
    `style="default"`: everything else (runtime.DefaultMetaV1FieldSelectorConversion):
    `"<label>" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    """

    def __init__(self, fields: Mapping[str, Getter], style: str = "default"):
        super().__init__(fields)
        self.style = style

    def unsupported(self, label: str) -> str:
        if self.style == "label":
            return f"field label not supported: {label}"
        return (f"{go_quote(label)} is not a known field selector: only "
                f"\"metadata.name\", \"metadata.namespace\"")


@dataclass(frozen=True)
class _FieldTerm:
    field: str
    op: str  # "=" or "!="
    value: str


def escape_field_value(s: str) -> str:
    """fields.EscapeValue."""
    return s.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


class FieldSelector:
    __slots__ = ("_terms", "_getters")

    def __init__(self, terms: list[_FieldTerm], getters: Mapping[str, Getter]):
        self._terms = tuple(terms)
        self._getters = getters

    @property
    def empty(self) -> bool:
        return not self._terms

    @property
    def requirements(self) -> list[tuple[str, str, str]]:
        """(field, op, value) with op `=` or `!=` (`==` reported as `=`)."""
        return [(t.field, t.op, t.value) for t in self._terms]

    def _get(self, obj: dict, field: str) -> str:
        g = self._getters.get(field)
        if g is None:
            return ""
        try:
            v = g(obj)
        except (KeyError, TypeError, AttributeError, IndexError):
            return ""
        return "" if v is None else v

    def matches(self, obj: dict) -> bool:
        for t in self._terms:
            v = self._get(obj, t.field)
            if (v == t.value) != (t.op == "="):
                return False
        return True

    def requires_exact_match(self, field: str) -> str | None:
        for t in self._terms:
            if t.field == field and t.op == "=":
                return t.value
        return None

    def exact_name(self) -> str | None:
        """The name if the selector pins `metadata.name=<x>` (S1.20)."""
        return self.requires_exact_match("metadata.name")

    def __str__(self) -> str:
        return ",".join(f"{t.field}{t.op}{escape_field_value(t.value)}" for t in self._terms)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"


def _split_terms(s: str) -> list[str]:
    if not s:
        return []
    terms, start, in_slash = [], 0, False
    for i, c in enumerate(s):
        if in_slash:
            in_slash = False
        elif c == "\\":
            in_slash = True
        elif c == ",":
            terms.append(s[start:i])
            start = i + 1
    terms.append(s[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def _unescape_value(s: str) -> str:
    if not any(c in s for c in "\\,="):
        return s
    out, in_slash = [], False
    for c in s:
        if in_slash:
            if c in "\\,=":
                out.append(c)
            else:
                raise _SelectorSyntaxError(f"invalid field selector: invalid escape sequence: \\{c}")
            in_slash = False
            continue
        if c == "\\":
            in_slash = True
        elif c in ",=":
            # Go formats the rune with %v: its integer code point
            raise _SelectorSyntaxError(f"invalid field selector: unescaped character in value: {ord(c)}")
        else:
            out.append(c)
    if in_slash:
        raise _SelectorSyntaxError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


def _go_sort_key(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


def parse_field_selector(s: str | None, allowed: Mapping[str, Getter]) -> FieldSelector:
    """fields.ParseSelector + the per-kind field label check (400 BadRequest on error).

    `allowed` maps field label -> getter over the object dict. If it is a
    `SelectableFields`, its `style` decides the unknown-label message; a plain
    mapping uses the default (apimachinery) message.
    """
    parts = sorted(_split_terms(s or ""), key=_go_sort_key)
    terms: list[_FieldTerm] = []
    try:
        for part in parts:
            if part == "":
                continue
            split = _split_term(part)
            if split is None:
                raise _SelectorSyntaxError(f"invalid selector: '{s}'; can't understand '{part}'")
            lhs, op, rhs = split
            terms.append(_FieldTerm(lhs, "!=" if op == "!=" else "=", _unescape_value(rhs)))
    except _SelectorSyntaxError as e:
        raise bad_request(str(e)) from None
    for t in terms:  # Transform(ConvertFieldLabel), in sorted order
        if t.field not in allowed:
            msg = (allowed.unsupported(t.field) if isinstance(allowed, SelectableFields)
                   else SelectableFields({}).unsupported(t.field))
            raise bad_request(msg)
    return FieldSelector(terms, allowed)


# ---------------------------------------------------------------------------
# Selectable fields of the built-in kinds we serve
# ---------------------------------------------------------------------------

def _path(*keys: str) -> Getter:
    def get(obj: dict) -> str:
        cur: Any = obj
        for k in keys:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(k)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        return str(cur)
    return get


def _bool_path(*keys: str) -> Getter:
    inner = _path(*keys)

    def get(obj: dict) -> str:
        v = inner(obj)
        return v if v in ("true", "false") else "false"   # strconv.FormatBool of the zero value
    return get


def _pod_ip(obj: dict) -> str:
    status = obj.get("status") or {}
    ips = status.get("podIPs") or []
    if ips and isinstance(ips[0], dict):
        return ips[0].get("ip") or ""
    return ""  # upstream reads podIPs[0] only (internal type); podIP mirrors it


def _event_source(obj: dict) -> str:
    src = _path("source", "component")(obj)
    return src or _path("reportingComponent")(obj)


_NAME = _path("metadata", "name")
_NAMESPACE = _path("metadata", "namespace")


def _namespaced(extra: Mapping[str, Getter] | None = None, style: str = "default") -> SelectableFields:
    d: dict[str, Getter] = {"metadata.name": _NAME, "metadata.namespace": _NAMESPACE}
    d.update(extra or {})
    return SelectableFields(d, style)


def _cluster(extra: Mapping[str, Getter] | None = None, style: str = "default",
             namespace_label: bool = True) -> SelectableFields:
    d: dict[str, Getter] = {"metadata.name": _NAME}
    if namespace_label:
        # Default conversion accepts the label; the object's field set lacks it -> reads "".
        d["metadata.namespace"] = lambda obj: ""
    d.update(extra or {})
    return SelectableFields(d, style)


_POD_FIELDS = {
    "spec.nodeName": _path("spec", "nodeName"),
    "spec.host": _path("spec", "nodeName"),  # legacy alias converted to spec.nodeName upstream
    "spec.restartPolicy": _path("spec", "restartPolicy"),
    "spec.schedulerName": _path("spec", "schedulerName"),
    "spec.serviceAccountName": _path("spec", "serviceAccountName"),
    "spec.hostNetwork": _bool_path("spec", "hostNetwork"),
    "status.phase": _path("status", "phase"),
    "status.podIP": _pod_ip,
    "status.podIPs": lambda obj: "",  # accepted by the conversion, absent from the field set
    "status.nominatedNodeName": _path("status", "nominatedNodeName"),
}

_EVENT_FIELDS = {
    "involvedObject.kind": _path("involvedObject", "kind"),
    "involvedObject.namespace": _path("involvedObject", "namespace"),
    "involvedObject.name": _path("involvedObject", "name"),
    "involvedObject.uid": _path("involvedObject", "uid"),
    "involvedObject.apiVersion": _path("involvedObject", "apiVersion"),
    "involvedObject.resourceVersion": _path("involvedObject", "resourceVersion"),
    "involvedObject.fieldPath": _path("involvedObject", "fieldPath"),
    "reason": _path("reason"),
    "reportingComponent": _path("reportingComponent"),
    "source": _event_source,
    "type": _path("type"),
}

#: plural resource -> selectable fields (field label -> getter over the object dict)
FIELD_SELECTORS: dict[str, SelectableFields] = {
    # core kinds with an upstream conversion func: "field label not supported: X"
    "pods": _namespaced(_POD_FIELDS, style="label"),
    "events": _namespaced(_EVENT_FIELDS, style="label"),
    "secrets": _namespaced({"type": _path("type")}, style="label"),
    "services": _namespaced({"spec.clusterIP": _path("spec", "clusterIP"),
                             "spec.type": _path("spec", "type")}, style="label"),
    # cluster-scoped core kinds whose conversion func does NOT accept metadata.namespace
    "namespaces": _cluster({"status.phase": _path("status", "phase")}, style="label",
                           namespace_label=False),
    "nodes": _cluster({"spec.unschedulable": _bool_path("spec", "unschedulable")}, style="label",
                      namespace_label=False),
    # default conversion: metadata.name / metadata.namespace only
    "configmaps": _namespaced(),
    "serviceaccounts": _namespaced(),
    "leases": _namespaced(),
    "roles": _namespaced(),
    "rolebindings": _namespaced(),
    "clusterroles": _cluster(),
    "clusterrolebindings": _cluster(),
    "customresourcedefinitions": _cluster(),
}


def field_selectors_for(resource: str, namespaced: bool = True) -> SelectableFields:
    """Selectable fields for a plural resource; unknown (e.g. custom) resources get
    metadata.name / metadata.namespace with the default message."""
    got = FIELD_SELECTORS.get(resource)
    if got is not None:
        return got
    return _namespaced() if namespaced else _cluster()

