"""Kubernetes Status errors: one coded family, mapped in one place to HTTP.

Shapes follow SPEC.md S8.2-S8.3 (key order kind, apiVersion, metadata, status,
message, reason, details, code; empty fields omitted). Every error the HTTP
layer returns is a `StatusError`; anything else reaching the handler is an
internal bug and becomes a 500 InternalError (never a stack trace on the wire).
"""
from __future__ import annotations

from typing import Any

from . import gocompat, jsonenc


class StatusError(Exception):
    """An error that is answered with a Kubernetes `Status` object."""

    def __init__(self, code: int, reason: str, message: str,
                 details: dict[str, Any] | None = None,
                 metadata: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}
        self._has_details = details is not None  # an empty StatusDetails is written as "details":{}
        self.metadata = metadata or {}

    @property
    def retry_after(self) -> int:
        return int(self.details.get("retryAfterSeconds") or 0)

    def status(self) -> dict[str, Any]:
        """The Status object as an ordered dict (Go struct order, S8.2)."""
        out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1",
                               "metadata": dict(self.metadata), "status": "Failure"}
        if self.message:
            out["message"] = self.message
        if self.reason:
            out["reason"] = self.reason
        if self._has_details:
            out["details"] = _ordered_details(self.details)
        out["code"] = self.code
        return out

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"StatusError({self.code}, {self.reason!r}, {self.message!r})"


_DETAIL_ORDER = ("name", "group", "kind", "uid", "causes", "retryAfterSeconds")
_CAUSE_ORDER = ("reason", "message", "field")


def _ordered_details(details: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k in _DETAIL_ORDER:
        v = details.get(k)
        if v in (None, "", [], 0):
            continue
        if k == "causes":
            v = [{ck: c[ck] for ck in _CAUSE_ORDER if c.get(ck)} for c in v]
        out[k] = v
    return out


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str, group: str, kind: str, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "group": group, "kind": kind}
    d.update(extra)
    return d


# --- constructors, one per upstream helper in apimachinery/pkg/api/errors ---

def not_found(resource: str, name: str, group: str = "") -> StatusError:
    """404 NotFound: `configmaps "foo" not found` (S1.17)."""
    return StatusError(404, "NotFound", f'{_qualified(resource, group)} "{name}" not found',
                       _details(name, group, resource))


def already_exists(resource: str, name: str, group: str = "") -> StatusError:
    return StatusError(409, "AlreadyExists", f'{_qualified(resource, group)} "{name}" already exists',
                       _details(name, group, resource))


def conflict(resource: str, name: str, group: str, why: str) -> StatusError:
    return StatusError(
        409, "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}',
        _details(name, group, resource))


def invalid(kind: str, name: str, group: str, causes: list[dict[str, str]]) -> StatusError:
    """422 Invalid: `Kind.group "name" is invalid: [e1, e2]` (S1.2).

    Each cause is {"reason": FieldValueInvalid|..., "message": <error body>, "field": ...}
    as `field_error` builds it; the top-level message spells each as `field: body`
    (upstream's field.Error.Error()), de-duplicated.
    """
    msgs: list[str] = []
    for c in causes:
        m = f"{c['field']}: {c['message']}" if c.get("field") else c["message"]
        if m not in msgs:
            msgs.append(m)
    joined = msgs[0] if len(msgs) == 1 else "[" + ", ".join(msgs) + "]"
    qual = f"{kind}.{group}" if group else kind
    return StatusError(422, "Invalid", f'{qual} "{name}" is invalid: {joined}',
                       _details(name, group, kind, causes=causes))


def field_error(kind: str, field: str, detail: str, value: Any = None) -> dict[str, str]:
    """One field error as a Status cause: the message is upstream's ErrorBody()
    (`Invalid value: "x": detail`), the field is separate (S1.2)."""
    labels = {
        "FieldValueInvalid": "Invalid value",
        "FieldValueRequired": "Required value",
        "FieldValueForbidden": "Forbidden",
        "FieldValueNotSupported": "Unsupported value",
        "FieldValueDuplicate": "Duplicate value",
        "FieldValueTooLong": "Too long",
    }
    label = labels[kind]
    if kind in ("FieldValueInvalid", "FieldValueNotSupported", "FieldValueDuplicate") and value is not None:
        msg = f"{label}: {_bad_value(value)}"
        if detail:
            msg += f": {detail}"
    else:
        msg = f"{label}: {detail}" if detail else label
    return {"reason": kind, "message": msg, "field": field}


def _bad_value(value: Any) -> str:
    """field.Error.ErrorBody's rendering of BadValue: %q for strings, %v for numbers and bools,
    json.Marshal for anything else."""
    if isinstance(value, str):
        return gocompat.quote(value)
    if isinstance(value, (bool, int, float)):
        return gocompat.format_v(value)
    return jsonenc.dumps(value).decode()


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def method_not_supported(resource: str, action: str, group: str = "") -> StatusError:
    """apierrors.NewMethodNotSupported (what --read-only answers for a write verb)."""
    return StatusError(405, "MethodNotAllowed",
                       f"{action} is not supported on resources of kind \"{_qualified(resource, group)}\"",
                       {"group": group, "kind": resource})


def request_entity_too_large(message: str) -> StatusError:
    return StatusError(413, "RequestEntityTooLarge", f"Request entity too large: {message}")


def expired(message: str, metadata: dict[str, Any] | None = None) -> StatusError:
    """410 Expired (S1.24, S2.12)."""
    return StatusError(410, "Expired", message, metadata=metadata)


def too_large_resource_version(requested: int, current: int, retry_after: int = 1) -> StatusError:
    """504 Timeout with the ResourceVersionTooLarge cause (S1.16, S1.22)."""
    details: dict[str, Any] = {"causes": [{"reason": "ResourceVersionTooLarge",
                                           "message": "Too large resource version"}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return StatusError(504, "Timeout",
                       f"Timeout: Too large resource version: {requested}, current: {current}", details)


def too_many_requests(message: str, retry_after: int) -> StatusError:
    """429 (S1.25)."""
    return StatusError(429, "TooManyRequests", message, {"retryAfterSeconds": retry_after})


def internal(message: str) -> StatusError:
    """500 InternalError (S8.3: message prefixed `Internal error occurred: `)."""
    return StatusError(500, "InternalError", f"Internal error occurred: {message}",
                       {"causes": [{"message": message}]})
