"""Impersonation: a request that asks to act as another user, as kube-apiserver v1.37 decides it (k8s.io/
apiserver pkg/endpoints/filters/impersonation: WithConstrainedImpersonation, its modes in mode.go), after
authentication and before the in-flight limit and authorization, as in upstream's handler chain.

* Headers: `Impersonate-User`, `Impersonate-Uid`, `Impersonate-Group` (repeatable), `Impersonate-Extra-<key>`
  (repeatable; the key lowercased, then path-unescaped). A uid, groups or extras without a user are upstream's
  400 (`requested &user.DefaultInfo{...} without impersonating a user name`).
* Modes, tried in upstream's order (the mode that last worked for this requestor first, as its tracker does;
  the first refusal met is the answer when none works):
  - constrained (KEP-5284): `arbitrary-node` (a `system:node:<name>` user, nothing else asked),
    `serviceaccount` (a `system:serviceaccount:<ns>:<name>` user, nothing else asked), `user-info` (any other
    user). Each first needs the verb `impersonate-on:<mode>:<the request's verb>` on the request itself, then
    `impersonate:<mode>` on `users`/`nodes`/`serviceaccounts`, `uids`, `groups` and `userextras/<key>` (users and
    groups in `authentication.k8s.io`); `system:masters` and the empty group are never granted, extra keys
    must be lowercase domain-prefixed paths; a node gets the groups `system:nodes`;
  - legacy: verb `impersonate` on `users` (or `serviceaccounts` in the account's namespace) and `groups` in the
    core group, `uids` and `userextras/<key>` in `authentication.k8s.io`.
  Upstream's first mode, `associated-node` (a service account acting as the node its pod runs on), never
  applies here: no authenticator of this server yields a service account with a node-name extra.
* The new user: the name asked (a service account's groups when none are asked), the groups asked, then
  `system:unauthenticated` for `system:anonymous`, else `system:authenticated` unless
  `system:unauthenticated` was asked; the uid and extras asked.
* Not reproduced: upstream's caches of successful decisions (a few seconds); every request here is decided
  afresh.

The node tier (`nodetier`) uses it to carry a client-certificate user's identity to the control plane.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import replace
from urllib.parse import unquote

from apiserver.httpstack import web

from machinery import errors
from machinery.gocompat import quote
from machinery.validation import is_dns1123_subdomain

from ..status import status_response
from .attributes import Attributes
from .authz import ALLOW, Authorizer, _internal_error, attributes_for, forbidden, request_info
from .requestinfo import RequestInfoError
from .user import ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, SYSTEM_PRIVILEGED_GROUP, UNSECURED, UserInfo

USER, GROUP, UID, EXTRA_PREFIX = "Impersonate-User", "Impersonate-Group", "Impersonate-Uid", "Impersonate-Extra-"
SA_PREFIX, NODE_PREFIX, NODES_GROUP = "system:serviceaccount:", "system:node:", "system:nodes"
AUTH_GROUP = "authentication.k8s.io"
MANY = 4                    # upstream's manyAuthorizationChecksInLoop: one wildcard check first from this many
CONSTRAINED = ("arbitrary-node", "serviceaccount", "user-info")
MODES = CONSTRAINED + ("legacy",)
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")


def split_service_account(username: str) -> tuple[str, str] | None:
    """serviceaccount.SplitUsername: (namespace, name) of `system:serviceaccount:<ns>:<name>`, else None."""
    if not username.startswith(SA_PREFIX):
        return None
    parts = username[len(SA_PREFIX):].split(":")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    return parts[0], parts[1]


def node_name(username: str) -> str | None:
    if not username.startswith(NODE_PREFIX):
        return None
    name = username[len(NODE_PREFIX):]
    return None if is_dns1123_subdomain(name) else name


def _go_strings(values: list[str] | tuple[str, ...] | None) -> str:
    return "[]string(nil)" if values is None else "[]string{" + ", ".join(quote(v) for v in values) + "}"


def wanted(headers) -> UserInfo | None:
    """processImpersonationHeaders: the user asked for, or None when no user is asked. Raises the 400 for a uid,
    groups or extras without a user."""
    name, uid = headers.get(USER, ""), headers.get(UID, "")
    groups = headers.getall(GROUP, [])
    extra: dict[str, list[str]] = {}
    # one key per header name whatever its case (Go's canonical header keys), all its values
    for key in dict.fromkeys(k.lower() for k in headers if k.lower().startswith(EXTRA_PREFIX.lower())):
        extra_key = key[len(EXTRA_PREFIX):].lower()
        try:
            extra_key = unquote(extra_key, errors="strict")
        except UnicodeDecodeError:
            pass
        extra.setdefault(extra_key, []).extend(headers.getall(key))
    if not name and (uid or groups or extra):
        extras = "map[string][]string(nil)" if not extra else "map[string][]string{" + ", ".join(
            f"{quote(k)}:{_go_strings(v)}" for k, v in sorted(extra.items())) + "}"
        raise errors.bad_request(f"requested &user.DefaultInfo{{Name:{quote(name)}, UID:{quote(uid)}, "
                                 f"Groups:{_go_strings(groups or None)}, Extra:{extras}}} without impersonating a "
                                 "user name")
    if not name:
        return None
    return UserInfo(name, uid=uid, groups=tuple(groups), extra={k: tuple(v) for k, v in extra.items()})


def _applies(mode: str, want: UserInfo) -> bool:
    only_name = not want.uid and not want.groups and not want.extra
    if mode == "arbitrary-node":
        return only_name and node_name(want.name) is not None
    if mode == "serviceaccount":
        return only_name and split_service_account(want.name) is not None
    if mode == "user-info":
        return node_name(want.name) is None and split_service_account(want.name) is None
    return True


class Refused(Exception):
    def __init__(self, attrs: Attributes, reason: str):
        self.attrs, self.reason = attrs, reason


def _invalid_extra(extra: dict[str, tuple[str, ...]]) -> str:
    """validateExtra (constrained modes): the first problem, or ''."""
    for key, values in extra.items():
        if not key:
            return "impersonating the empty string key in extra is not allowed"
        domain, slash, path = key.partition("/")
        if not slash or is_dns1123_subdomain(domain) or not path or not _PATH_SEGMENT.fullmatch(path):
            return (f"impersonating an invalid key in extra is not allowed: extra.key: Invalid value: {quote(key)}: "
                    'must be a domain-prefixed path (such as "acme.io/foo")')
        if key != key.lower():
            return f"impersonating a non-lowercase key in extra is not allowed: {quote(key)}"
        if not values:
            return "impersonating empty values in extra is not allowed"
        if "" in values:
            return "impersonating the empty string value in extra is not allowed"
    return ""


class Impersonation:
    """The filter's decisions: `act_as(requestor, want, request_attrs)` -> the new user, or Refused."""

    def __init__(self, authorizer: Authorizer):
        self.authorizer = authorizer
        self.last_mode: OrderedDict[str, int] = OrderedDict()    # requestor name -> the mode that last worked

    def _check(self, attrs: Attributes) -> None:
        decision, reason = self.authorizer.authorize(attrs)
        if decision != ALLOW:
            raise Refused(attrs, reason)

    def _mode(self, mode: str, requestor: UserInfo, want: UserInfo, request_attrs: Attributes) -> UserInfo | None:
        if not _applies(mode, want):
            return None
        constrained = mode != "legacy"
        verb = f"impersonate:{mode}" if constrained else "impersonate"
        core = AUTH_GROUP if constrained else ""
        if constrained:
            self._check(replace(request_attrs, verb=f"impersonate-on:{mode}:{request_attrs.verb}"))

        def attrs(resource: str, name: str, group: str = core, namespace: str = "", sub: str = "") -> Attributes:
            return Attributes(user=requestor, verb=verb, resource_request=True, api_group=group, resource=resource,
                              subresource=sub, namespace=namespace, name=name)
        groups = list(want.groups)
        user_attrs = attrs("users", want.name)
        node = node_name(want.name) if constrained else None
        if node is not None:
            user_attrs = attrs("nodes", node)
            groups = [NODES_GROUP]
        sa = split_service_account(want.name)
        if sa is not None:
            user_attrs = attrs("serviceaccounts", sa[1], namespace=sa[0])
            if not want.groups:
                groups = ["system:serviceaccounts", f"system:serviceaccounts:{sa[0]}"]
        self._check(user_attrs)
        if want.uid:
            self._check(attrs("uids", want.uid, AUTH_GROUP))
        if want.groups:
            if constrained and "" in want.groups:
                raise Refused(attrs("groups", ""), "impersonating the empty string group is not allowed")
            if constrained and SYSTEM_PRIVILEGED_GROUP in want.groups:
                raise Refused(attrs("groups", SYSTEM_PRIVILEGED_GROUP),
                               "impersonating the system:masters group is not allowed")
            if not (constrained and len(want.groups) >= MANY and self.authorizer.authorize(attrs("groups", "*"))[0]
                    == ALLOW):
                for g in want.groups:
                    self._check(attrs("groups", g))
        if want.extra:
            if constrained:
                problem = _invalid_extra(want.extra)
                if problem:
                    raise Refused(attrs("userextras", "", AUTH_GROUP), problem)
            large = len(want.extra) >= MANY or sum(len(v) for v in want.extra.values()) >= MANY
            if not (constrained and large and self.authorizer.authorize(
                    attrs("userextras", "*", AUTH_GROUP, sub="*"))[0] == ALLOW):
                for key, values in want.extra.items():
                    for v in values:
                        self._check(attrs("userextras", v, AUTH_GROUP, sub=key))
        if want.name == ANONYMOUS:
            if ALL_UNAUTHENTICATED not in groups:
                groups.append(ALL_UNAUTHENTICATED)
        elif ALL_UNAUTHENTICATED not in groups and ALL_AUTHENTICATED not in groups:
            groups.append(ALL_AUTHENTICATED)
        return UserInfo(want.name, uid=want.uid, groups=tuple(groups), extra=dict(want.extra))

    def act_as(self, requestor: UserInfo, want: UserInfo, request_attrs: Attributes) -> UserInfo:
        """impersonationModesTracker.getImpersonatedUser."""
        first: Refused | None = None
        cached = self.last_mode.get(requestor.name)
        order = ([cached] if cached is not None else []) + [i for i in range(len(MODES)) if i != cached]
        for i in order:
            try:
                user = self._mode(MODES[i], requestor, want, request_attrs)
            except Refused as e:
                first = first or e
                continue
            if user is not None:
                self.last_mode[requestor.name] = i
                self.last_mode.move_to_end(requestor.name)
                while len(self.last_mode) > 1024:
                    self.last_mode.popitem(last=False)
                return user
        if first is not None:
            raise first
        raise Refused(request_attrs, "all impersonation modes failed")


def middleware(authorizer: Authorizer):
    """The filter: requests without an `Impersonate-*` header pass untouched (one scan of the header names)."""
    decide = Impersonation(authorizer)

    @web.middleware
    async def impersonation(request: web.Request, handler) -> web.StreamResponse:
        if not any(k[:12].lower() == "impersonate-" for k in request.headers):
            return await handler(request)
        try:
            want = wanted(request.headers)
        except errors.StatusError as e:
            return status_response(e)
        if want is None:
            return await handler(request)
        requestor = request.get("user") or UNSECURED
        try:
            request_attrs = attributes_for(request_info(request), requestor)
        except RequestInfoError as e:
            return _internal_error(request, f"failed to create RequestInfo: {e}")
        try:
            request["user"] = decide.act_as(requestor, want, request_attrs)
        except Refused as e:
            return status_response(forbidden(e.attrs, e.reason))
        return await handler(request)
    return impersonation
