"""What a request asks for, from its method, path and query alone: upstream's RequestInfoFactory
(k8s.io/apiserver/pkg/endpoints/request/requestinfo.go), which the authorization filter reads before any
route is resolved (so a request for a resource this server does not serve is still authorized as one).

* Resource requests are under `/api/<version>/...` and `/apis/<group>/<version>/...` with at least one
  segment after the version; anything else (`/version`, `/healthz`, `/apis/<group>`, `/api/v1`, ...) is a
  non-resource request whose verb is the lowercased HTTP method.
* Verbs: POST create, GET/HEAD get, PUT update, PATCH patch, DELETE delete; a `watch` (or `proxy`) segment
  right after the version is the verb itself (the deprecated /watch/ paths). A get without a name is list,
  or watch when `?watch` is set to anything but `0`/`false` (runtime.Convert_Slice_string_To_bool); a
  delete without a name is deletecollection.
* `namespaces/<ns>/<rest>` sets the namespace (`namespaces/<ns>/status` and `/finalize` stay subresources
  of the namespace itself); then `<resource>[/<name>[/<subresource>]]`.
* A list or watch whose fieldSelector pins `metadata.name=<x>` is about that name (as upstream: only when
  the whole query decodes as ListOptions and the name is a valid path segment).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from machinery.gocompat import parse_int64
from machinery.listoptions import parse_query_bool
from machinery.validation import is_valid_path_segment_name

API_PREFIXES = ("api", "apis")
GROUPLESS_PREFIXES = ("api",)
SPECIAL_VERBS = ("proxy", "watch")
SPECIAL_VERBS_NO_SUBRESOURCES = ("proxy",)
NAMESPACE_SUBRESOURCES = ("status", "finalize")
VERBS_WITH_SELECTORS = ("list", "watch", "deletecollection")
METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}


class RequestInfoError(Exception):
    """`unable to determine kind and namespace from url, <url>` (upstream answers 500 for it)."""


@dataclass
class RequestInfo:
    is_resource_request: bool
    path: str
    verb: str
    api_prefix: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)
    field_selector: str = ""
    label_selector: str = ""


def split_path(path: str) -> list[str]:
    p = path.strip("/")
    return p.split("/") if p else []


def new_request_info(method: str, path: str, query: Mapping[str, str], url: str = "") -> RequestInfo:
    """RequestInfoFactory.NewRequestInfo. `query` maps a parameter to its first value (aiohttp's
    MultiDict does); `url` is only for the error text."""
    info = RequestInfo(is_resource_request=False, path=path, verb=method.lower())
    parts = split_path(path)
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return info
    info.api_prefix = parts[0]
    parts = parts[1:]
    if info.api_prefix not in GROUPLESS_PREFIXES:
        if len(parts) < 3:
            return info
        info.api_group = parts[0]
        parts = parts[1:]
    info.is_resource_request = True
    info.api_version = parts[0]
    parts = parts[1:]

    via_path = False
    if parts[0] in SPECIAL_VERBS:
        if len(parts) < 2:
            raise RequestInfoError(f"unable to determine kind and namespace from url, {url or path}")
        info.verb = parts[0]
        parts = parts[1:]
        via_path = True
    else:
        info.verb = METHOD_VERBS.get(method.upper(), "")

    if parts[0] == "namespaces":
        if len(parts) > 1:
            info.namespace = parts[1]
            if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
                parts = parts[2:]
    info.parts = parts
    if len(parts) >= 3 and info.verb not in SPECIAL_VERBS_NO_SUBRESOURCES:
        info.subresource = parts[2]
    if len(parts) >= 2:
        info.name = parts[1]
    if len(parts) >= 1:
        info.resource = parts[0]

    if not info.name and info.verb == "get":
        info.verb = "watch" if parse_query_bool(query.get("watch")) else "list"
        name = _selected_name(query)
        if name is not None and not is_valid_path_segment_name(name):
            info.name = name
    if not info.name and info.verb == "delete":
        info.verb = "deletecollection"
    if not via_path and info.verb in VERBS_WITH_SELECTORS:
        info.field_selector = query.get("fieldSelector", "")
        info.label_selector = query.get("labelSelector", "")
    return info


class _AnyField(dict):
    """Every field label is selectable here: the request info only reads the selector's terms."""

    def __contains__(self, key) -> bool:
        return True


def _selected_name(query: Mapping[str, str]) -> str | None:
    """metadata.name pinned by the fieldSelector, if the query decodes as ListOptions (upstream's
    DecodeParameters: a bad selector or integer leaves the options empty)."""
    from machinery.errors import StatusError
    from machinery.selectors import parse_field_selector, parse_label_selector
    fs = query.get("fieldSelector")
    if not fs:
        return None
    try:
        for k in ("limit", "timeoutSeconds"):
            if k in query:
                parse_int64(query[k])
        parse_label_selector(query.get("labelSelector"))
        sel = parse_field_selector(fs, _AnyField())
    except (ValueError, StatusError):
        return None
    return sel.requires_exact_match("metadata.name")
