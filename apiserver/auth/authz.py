"""Authorization: `--authorization-mode`, the authorizer chain and the filter (k8s.io/apiserver
pkg/endpoints/filters/authorization.go, pkg/authorization/union; k8s.io/kubernetes pkg/kubeapiserver/
authorizer), and the RBAC authorizer's data feed.

* Modes: a comma list as upstream's flag (`AlwaysAllow` default, `RBAC`, `AlwaysDeny`); upstream's other
  valid modes (ABAC, Webhook, Node) are refused as unsupported here, unknown ones with upstream's text.
* The chain is upstream's union: the `system:masters` authorizer first, then the modes in order; the first
  authorizer that allows (or denies) decides; otherwise the request is refused with every authorizer's
  reason, `<mode in lowercase>: <reason>`, joined by newlines (`rbac: RBAC: role.rbac... "x" not found`).
* The filter resolves the request info (apiserver/auth/requestinfo.py) before any route, builds the
  Attributes from it and the user the authentication filter left in `request["user"]` (UNSECURED when
  none), and answers a refusal with upstream's 403 Status (`ForbiddenStatusError`): `<resource>[.<group>]
  ["<name>"] is forbidden: User "<user>" cannot <verb> resource "<resource>[/<subresource>]" in API group
  "<group>" (in the namespace "<ns>" | at the cluster scope)[: <reason>]`, or `forbidden: User "<user>"
  cannot <verb> path "<path>"` for non-resource requests. Lists and watches are authorized when they
  start; an open watch is not re-authorized (as upstream).
* The RBAC authorizer is fed the Roles, ClusterRoles and their bindings: from the watch caches (an observer
  on each of the four cachers: the initial list and every event, so a change takes effect as soon as the
  cache has it), or, with `--watch-cache=false` (or when the residency does not keep RBAC fully
  resident), from its own list + watch on etcd per kind.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable

from apiserver.httpstack import web

from urllib.parse import unquote

from machinery import errors
from machinery.gocompat import quote
from storage.reflector import reflect

from ..status import status_response

from .attributes import Attributes, Decision
from .requestinfo import RequestInfo, RequestInfoError, new_request_info
from .user import SYSTEM_PRIVILEGED_GROUP, UNSECURED, UserInfo

log = logging.getLogger("apiserver")

ALWAYS_ALLOW, ALWAYS_DENY, RBAC = "AlwaysAllow", "AlwaysDeny", "RBAC"
# k8s.io/kubernetes pkg/kubeapiserver/authorizer/modes: every mode upstream's flag accepts.
UPSTREAM_MODES = ("AlwaysAllow", "AlwaysDeny", "ABAC", "Webhook", "RBAC", "Node")
SUPPORTED_MODES = (ALWAYS_ALLOW, ALWAYS_DENY, RBAC)
DEFAULT_MODES = (ALWAYS_ALLOW,)

RBAC_KINDS = {"roles": "Role", "clusterroles": "ClusterRole", "rolebindings": "RoleBinding",
              "clusterrolebindings": "ClusterRoleBinding"}

ALLOW, DENY, NO_OPINION = "Allow", "Deny", "NoOpinion"


def parse_modes(value: str) -> tuple[str, ...]:
    """`--authorization-mode`: pflag's StringSlice (comma-separated, no trimming) validated as upstream's
    BuiltInAuthorizationOptions.Validate; ValueError with upstream's texts (joined by ', ')."""
    modes = [m for m in value.split(",")] if value else []
    errs = []
    if not modes:
        errs.append("at least one authorization-mode must be passed")
    for m in modes:
        if m not in UPSTREAM_MODES:
            errs.append(f"authorization-mode {quote(m)} is not a valid mode")
        elif m == "ABAC":
            errs.append("authorization-mode ABAC's authorization policy file not passed")
        elif m == "Webhook":
            errs.append("authorization-mode Webhook's authorization config file not passed")
        elif m not in SUPPORTED_MODES:
            errs.append(f"authorization-mode {quote(m)} is not supported by this server "
                        f"(supported: {', '.join(SUPPORTED_MODES)})")
    if len(set(modes)) != len(modes):
        errs.append(f"authorization-mode [{' '.join(quote(m) for m in modes)}] has mode specified more than once")
    if errs:
        raise ValueError(", ".join(errs))
    return tuple(modes)


class Authorizer:
    """Upstream's union of the privileged-group authorizer and the configured modes.

    `authorize(attrs)` -> (decision, reason): ALLOW / DENY / NO_OPINION; only ALLOW lets a request through."""

    def __init__(self, modes: Iterable[str] = DEFAULT_MODES, rbac: Any = None):
        self.modes = tuple(modes)
        self.rbac = rbac
        if RBAC in self.modes and rbac is None:
            raise ValueError("RBAC mode needs an RBAC authorizer")
        self.always_allow = self.modes[:1] == (ALWAYS_ALLOW,)

    def authorize(self, attrs: Attributes) -> tuple[str, str]:
        if SYSTEM_PRIVILEGED_GROUP in attrs.user.groups:
            return ALLOW, ""
        reasons = []
        for mode in self.modes:
            if mode == ALWAYS_ALLOW:
                return ALLOW, ""
            if mode == ALWAYS_DENY:
                decision, reason = NO_OPINION, "Everything is forbidden."
            else:
                d: Decision = self.rbac.authorize(attrs)
                decision, reason = (ALLOW if d.allowed else NO_OPINION), d.reason
            if decision != NO_OPINION:
                return decision, reason
            if reason:
                reasons.append(f"{mode.lower()}: {reason}")
        return NO_OPINION, "\n".join(reasons)

    def allowed(self, attrs: Attributes) -> bool:
        return self.authorize(attrs)[0] == ALLOW


AUTHORIZER = web.AppKey("authorizer", Authorizer)  # the application's authorizer (the review APIs ask it)


def attributes_for(info: RequestInfo, user: UserInfo) -> Attributes:
    """filters.GetAuthorizerAttributes (selectors are not authorized on: no field/label selector
    authorization here)."""
    return Attributes(user=user, verb=info.verb, resource_request=info.is_resource_request,
                      api_group=info.api_group, api_version=info.api_version, resource=info.resource,
                      subresource=info.subresource, namespace=info.namespace, name=info.name, path=info.path)


_SANITIZER = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def forbidden_message(attrs: Attributes) -> str:
    """responsewriters.forbiddenMessage."""
    user = quote(attrs.user.name)
    if not attrs.resource_request:
        return f"User {user} cannot {attrs.verb} path {quote(attrs.path)}"
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    where = (f"in the namespace {quote(attrs.namespace)}" if attrs.namespace else "at the cluster scope")
    return f"User {user} cannot {attrs.verb} resource {quote(resource)} in API group {quote(attrs.api_group)} {where}"


def forbidden(attrs: Attributes, reason: str = "") -> errors.StatusError:
    """responsewriters.ForbiddenStatusError: apierrors.NewForbidden over the sanitized message."""
    msg = forbidden_message(attrs).translate(_SANITIZER)
    if reason:
        msg = f"{msg}: {reason}"
    resource, group, name = attrs.resource, attrs.api_group, attrs.name
    if not resource and not group:
        message = f"forbidden: {msg}"
    else:
        qualified = f"{resource}.{group}" if group else resource
        message = f"{qualified} is forbidden: {msg}" if not name else f"{qualified} {quote(name)} is forbidden: {msg}"
    return errors.StatusError(403, "Forbidden", message, {"name": name, "group": group, "kind": resource})


def _internal_error(request: web.Request, err: str) -> web.Response:
    """responsewriters.InternalError: Go's http.Error, plain text."""
    text = f"Internal Server Error: {quote(request.raw_path)}: {err}".translate(_SANITIZER)
    return web.Response(status=500, body=(text + "\n").encode(), headers={
        "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"})


def request_info(request: web.Request) -> RequestInfo:
    """The request's RequestInfo, resolved once per request from the path as Go's URL.Path has it: decoded
    once, its `.` and `..` segments kept (aiohttp's request.path has them resolved away)."""
    info = request.get("request_info")
    if info is None:
        raw = request.raw_path.split("?", 1)[0]
        path = unquote(raw, errors="surrogateescape") if "%" in raw else raw
        info = request["request_info"] = new_request_info(request.method, path, request.query, request.raw_path)
    return info


def middleware(authorizer: Authorizer) -> Callable:
    """The authorization filter: 403 with upstream's Status unless the chain allows the request."""

    @web.middleware
    async def authorization(request: web.Request, handler) -> web.StreamResponse:
        try:
            info = request_info(request)
        except RequestInfoError as e:
            return _internal_error(request, f"failed to create RequestInfo: {e}")
        user = request.get("user") or UNSECURED
        attrs = attributes_for(info, user)
        decision, reason = authorizer.authorize(attrs)
        if decision == ALLOW:
            return await handler(request)
        log.debug("forbidden uri=%s reason=%s", request.raw_path, reason)
        resp = status_response(forbidden(attrs, reason))
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp
    return authorization


# --- the RBAC authorizer's data -------------------------------------------------------------------

class _KindObserver:
    """A cacher observer forwarding one RBAC kind's objects to the RBAC authorizer."""

    def __init__(self, rbac: Any, kind: str):
        self.rbac, self.kind = rbac, kind

    def replace(self, objects) -> None:  # any iterable of decoded objects
        self.rbac.replace(self.kind, objects)

    def apply(self, event_type: str, obj: dict) -> None:
        self.rbac.apply(self.kind, event_type, obj)


def observe_cache(rbac: Any, plural: str, cacher: Any) -> None:
    """Feed `rbac` from a watch cache holding every object of `plural` (one of RBAC_KINDS)."""
    cacher.add_observer(_KindObserver(rbac, RBAC_KINDS[plural]))


async def reflect_from_etcd(rbac: Any, plural: str, store: Any, prefix: str, retry: float = 1.0) -> asyncio.Task:
    """Feed `rbac` from its own list and watch on etcd (storage.reflector), where no watch cache holds the kind."""
    return await reflect(store, prefix, _KindObserver(rbac, RBAC_KINDS[plural]), plural, retry)
