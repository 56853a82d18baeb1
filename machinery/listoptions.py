"""LIST/WATCH query parameters: decoding, defaulting (S5.2) and validation (S1.2-S1.10, S5.3).

Order of checks follows the upstream handler (AS:pkg/endpoints/handlers/get.go):

1. Decode the query (`ParameterCodec.DecodeParameters`): integers (`timeoutSeconds`,
   `limit`) with Go's `strconv.ParseInt`, then the label selector, then the field
   selector syntax. Any failure -> 400 BadRequest with the raw Go error text.
2. Field labels checked against the kind (`ConvertFieldLabel`) -> 400 BadRequest.
3. Defaulting `SetListOptionsDefaults` (S5.2, only when the WatchList gate is on).
4. `ValidateListOptions` -> 422 Invalid, `ListOptions.meta.k8s.io "" is invalid: ...` (S1.2).

Booleans are decoded as upstream's `runtime.Convert_Slice_string_To_bool` does, *not*
with strconv.ParseBool: only "0" and (case-insensitive) "false" are false, every other
value -- including junk and the empty string -- is true, and there is no error.

The resourceVersion string is not parsed here (upstream parses it in storage, S1.11):
use `parse_resource_version`. The continue token is decoded in storage too:
see `storage.continue_token.resolve_continue` (S1.12, S1.13).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from machinery.errors import StatusError, bad_request
from machinery.gocompat import parse_int64, parse_uint64, quote as go_quote
from machinery.selectors import FieldSelector, LabelSelector, parse_field_selector, parse_label_selector

__all__ = ["ListOptions", "parse_list_options", "parse_resource_version", "parse_query_bool",
           "parse_query_int64", "validate_list_options", "RVM_EXACT", "RVM_NOT_OLDER_THAN"]

RVM_EXACT = "Exact"
RVM_NOT_OLDER_THAN = "NotOlderThan"


@dataclass
class ListOptions:
    resource_version: str | None = None      # None = parameter absent
    resource_version_match: str = ""
    limit: int = 0
    continue_: str = ""
    label_selector: str = ""                 # raw query value
    field_selector: str = ""                 # raw query value
    watch: bool = False
    allow_watch_bookmarks: bool = False
    send_initial_events: bool | None = None  # None = parameter absent
    timeout_seconds: int | None = None
    shard_selector: str = ""                 # raw; empty = absent (S7.1); parsed later
    # parsed selectors (always set by parse_list_options; `fields` only when the
    # caller passed the kind's selectable fields)
    labels: LabelSelector | None = field(default=None, compare=False, repr=False)
    fields: FieldSelector | None = field(default=None, compare=False, repr=False)


# --- Go scalar decoding -------------------------------------------------------

def parse_query_bool(value: str | None) -> bool:
    """runtime.Convert_Slice_string_To_bool: absent/"0"/"false" (any case) -> False, else True."""
    if value is None:
        return False
    return not (value == "0" or value.lower() == "false")


def parse_query_int64(value: str) -> int:
    """A query integer; junk -> 400 `strconv.ParseInt: parsing "x": invalid syntax`."""
    try:
        return parse_int64(value)
    except ValueError as e:
        raise bad_request(str(e)) from None


def parse_resource_version(s: str | None) -> int:
    """S1.1/S1.11: "" / "0" / None -> 0; else uint64 (ParseUint: "007" -> 7).

    Junk -> 400 `invalid resource version: resourceVersion: Invalid value: "abc":
    strconv.ParseUint: parsing "abc": invalid syntax` (the LIST message; upstream's
    GET/WATCH path ends in a 500, which we do not reproduce).
    """
    if s is None or s == "" or s == "0":
        return 0
    try:
        return parse_uint64(s)
    except ValueError as e:
        raise bad_request(invalid_resource_version(s, e)) from None


def invalid_resource_version(s: str, err: ValueError) -> str:
    """The 400 message for an unparseable resourceVersion (S1.11)."""
    return f"invalid resource version: resourceVersion: Invalid value: {go_quote(s)}: {err}"


# --- validation -----------------------------------------------------------------

def _forbidden(fld: str, detail: str) -> dict[str, str]:
    return {"reason": "FieldValueForbidden", "field": fld, "body": f"Forbidden: {detail}"}


def _not_supported(fld: str, value: str, supported: list[str]) -> dict[str, str]:
    detail = "supported values: " + ", ".join(go_quote(v) for v in supported)
    return {"reason": "FieldValueNotSupported", "field": fld,
            "body": f"Unsupported value: {go_quote(value)}: {detail}"}


def _invalid_list_options(errs: list[dict[str, str]]) -> StatusError:
    """apierrors.NewInvalid(meta.k8s.io/ListOptions, "", errs) (S1.2).

    Message joins `field: body` (aggregate: deduplicated, `[a, b]` if several); each
    cause carries `ErrorBody()` (no field prefix) as its message, plus `field`.
    """
    full: list[str] = []
    for e in errs:
        m = f"{e['field']}: {e['body']}"
        if m not in full:
            full.append(m)
    joined = full[0] if len(full) == 1 else "[" + ", ".join(full) + "]"
    causes = [{"reason": e["reason"], "message": e["body"], "field": e["field"]} for e in errs]
    return StatusError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {joined}',
                       {"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes})


def validate_list_options(opts: ListOptions, watch_list_enabled: bool = True) -> None:
    """internalversion/validation.ValidateListOptions (S1.3-S1.9, S5.3) -> 422 or None."""
    errs: list[dict[str, str]] = []
    match = opts.resource_version_match
    rvm = "resourceVersionMatch"
    if not opts.watch:
        if match:
            if not opts.resource_version:
                errs.append(_forbidden(rvm, "resourceVersionMatch is forbidden unless resourceVersion is provided"))
            if opts.continue_:
                errs.append(_forbidden(rvm, "resourceVersionMatch is forbidden when continue is provided"))
            if match not in (RVM_EXACT, RVM_NOT_OLDER_THAN):
                errs.append(_not_supported(rvm, match, [RVM_EXACT, RVM_NOT_OLDER_THAN, ""]))
            if match == RVM_EXACT and opts.resource_version == "0":
                errs.append(_forbidden(rvm, 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
        if opts.send_initial_events is not None:
            errs.append(_forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    else:
        if opts.send_initial_events is not None:
            if match != RVM_NOT_OLDER_THAN:
                errs.append(_forbidden(rvm, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
            if not watch_list_enabled:
                errs.append(_forbidden("sendInitialEvents",
                                       "sendInitialEvents is forbidden for watch unless the WatchList "
                                       "feature gate is enabled"))
        if match:
            if opts.send_initial_events is None:
                errs.append(_forbidden(rvm, "resourceVersionMatch is forbidden for watch unless "
                                            "sendInitialEvents is provided"))
            if match != RVM_NOT_OLDER_THAN:
                errs.append(_not_supported(rvm, match, [RVM_NOT_OLDER_THAN]))
            if opts.continue_:
                errs.append(_forbidden(rvm, "resourceVersionMatch is forbidden when continue is provided"))
    if errs:
        raise _invalid_list_options(errs)


def set_list_options_defaults(opts: ListOptions, watch_list_enabled: bool = True) -> None:
    """SetListOptionsDefaults (S5.2): watch + RV ""/"0"/unset + no sIE + no RVM ->
    sendInitialEvents=true, resourceVersionMatch=NotOlderThan."""
    if not watch_list_enabled:
        return
    if opts.send_initial_events is not None or opts.resource_version_match:
        return
    if not opts.watch:
        return
    if opts.resource_version in (None, "", "0"):
        opts.send_initial_events = True
        opts.resource_version_match = RVM_NOT_OLDER_THAN


def parse_list_options(query: Mapping[str, str], *, watch: bool, watch_list_enabled: bool = True,
                       field_selectors: Mapping[str, Callable[[dict], str]] | None = None) -> ListOptions:
    """Decode, default and validate LIST/WATCH query parameters.

    `query` maps parameter -> first value (absent keys are "not provided").
    `watch`: the request is a watch (watch verb / `?watch=` handled by the caller);
    a truthy `watch` query parameter also turns it on.
    `field_selectors`: the kind's selectable fields (`selectors.field_selectors_for`);
    when given, unknown field labels are rejected here (400) and `opts.fields` is set.
    Raises StatusError 400 (decode) or 422 (validation).
    """
    q = query
    opts = ListOptions()
    # 1. decode, in upstream struct order: selectors are strings at this stage,
    #    timeoutSeconds then limit are integers.
    opts.label_selector = q.get("labelSelector", "") or ""
    opts.field_selector = q.get("fieldSelector", "") or ""
    opts.watch = bool(watch) or parse_query_bool(q.get("watch"))
    opts.allow_watch_bookmarks = parse_query_bool(q.get("allowWatchBookmarks"))
    opts.resource_version = q.get("resourceVersion")
    opts.resource_version_match = q.get("resourceVersionMatch", "") or ""
    if "timeoutSeconds" in q:
        opts.timeout_seconds = parse_query_int64(q["timeoutSeconds"])
    if "limit" in q:
        opts.limit = parse_query_int64(q["limit"])
    opts.continue_ = q.get("continue", "") or ""
    if "sendInitialEvents" in q:
        opts.send_initial_events = parse_query_bool(q["sendInitialEvents"])
    opts.shard_selector = q.get("shardSelector", "") or ""
    # v1 -> internal conversion: label selector, then field selector syntax
    opts.labels = parse_label_selector(opts.label_selector)
    if field_selectors is not None:
        opts.fields = parse_field_selector(opts.field_selector, field_selectors)
    else:
        parse_field_selector(opts.field_selector, _AnyField())
    # 3./4. defaulting then validation
    set_list_options_defaults(opts, watch_list_enabled)
    validate_list_options(opts, watch_list_enabled)
    return opts


class _AnyField(dict):
    """Syntax-only field selector check: every label is accepted."""

    def __contains__(self, key: Any) -> bool:  # noqa: D401
        return True
