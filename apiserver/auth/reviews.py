"""The review APIs: create-only kinds answered from the request, never stored (machinery.resources.REVIEWS).

* `SelfSubjectReview` (authentication.k8s.io/v1, `kubectl auth whoami`): the authenticated user as the
  authentication filter left it in `request["user"]` (k8s.io/kubernetes pkg/registry/authentication/
  selfsubjectreview/rest.go): username, uid, groups and extra in `status.userInfo`, the creation time in
  `metadata.creationTimestamp`; 201.

`HANDLERS` maps (group, plural) to the handler; the routes call it for POST on the collection path
(any other verb: 405; a name or a namespace in the path: 404, as upstream).
"""
from __future__ import annotations

import datetime
from typing import Any, Awaitable, Callable

from apiserver.httpstack import web

from machinery import jsonenc
from machinery.resources import Resource

from ..endpoints.common import decode_body, json_response
from . import access_reviews
from .user import UNSECURED, UserInfo


def user_info(user: UserInfo) -> dict[str, Any]:
    """authentication/v1 UserInfo in Go field order (uid, groups, extra omitempty; extra keys sorted as
    encoding/json writes a map)."""
    out: dict[str, Any] = {"username": user.name}
    if user.uid:
        out["uid"] = user.uid
    if user.groups:
        out["groups"] = list(user.groups)
    if user.extra:
        out["extra"] = {k: list(user.extra[k]) for k in sorted(user.extra)}
    return out


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


async def self_subject_review(request: web.Request, res: Resource) -> web.Response:
    await decode_body(request, res)  # upstream decodes (and so validates) the body, then ignores it
    user = request.get("user", UNSECURED)
    doc = {"kind": res.kind, "apiVersion": res.api_version, "metadata": {"creationTimestamp": now_rfc3339()},
           "status": {"userInfo": user_info(user)}}
    return json_response(jsonenc.dumps(doc) + b"\n", 201)


HANDLERS: dict[tuple[str, str], Callable[[web.Request, Resource], Awaitable[web.StreamResponse]]] = {
    ("authentication.k8s.io", "selfsubjectreviews"): self_subject_review,
    **access_reviews.HANDLERS,  # authorization.k8s.io: SelfSubjectAccessReview, SubjectAccessReview, ...
}
