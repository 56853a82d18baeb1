"""Routing: one catch-all route resolved against the `Registry` on every request (so CRDs are
served as soon as they exist): health, metrics, version, discovery, OpenAPI, then
`/api/v1/...` and `/apis/<group>/<version>/...` to the endpoints by verb."""
from __future__ import annotations

import datetime
import email.utils
import hashlib
from typing import Any, Callable

from apiserver.httpstack import web
from machinery.metrics import CONTENT_TYPE, generate_latest

from machinery import errors, jsonenc
from machinery.memory import release_free_memory

from . import discovery
from .auth import reviews
from .endpoints import eviction, read, scale, watch, write
from machinery.resources import REVIEWS, Registry, review

from .endpoints.common import Context, RequestScope, json_response
from .health import Health

# The request key under which dispatch names a non-resource handler upstream instruments: (the subresource
# label, the component label) of its apiserver_request_total series (apiserver.middleware.observe).
NON_RESOURCE_METRIC = "non_resource_metric"


def page_not_found() -> web.Response:
    """Go's http.NotFound, which ends upstream's handler chain."""
    return web.Response(status=404, body=b"404 page not found\n",
                        headers={"Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff"})


def not_found() -> errors.StatusError:
    return errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})


def resolve(parts: list[str]) -> tuple[str, str, list[str]] | None:
    """Split `/api/v1/...` or `/apis/g/v/...` into (group, version, rest)."""
    if len(parts) >= 2 and parts[0] == "api":
        return "", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return parts[1], parts[2], parts[3:]
    return None


def is_watch(request: web.Request) -> bool:
    return request.query.get("watch", "").lower() in ("1", "true", "t")


class Routes:
    def __init__(self, registry: Registry, endpoints: Context, health: Health,
                 residency_report: Callable[[], dict[str, Any]], read_only: bool = False):
        self.registry = registry
        self.read_only = read_only  # --read-only: every write verb is 405, as for a read-only registry
        self.endpoints = endpoints
        self.health = health
        self.residency_report = residency_report

    def scope_for(self, group: str, version: str, rest: list[str]) -> RequestScope:
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace = rest[1]
            rest = rest[2:]
        if not rest:
            raise errors.not_found("", "")
        res = self.registry.lookup(group, version, rest[0])
        if res is None or (namespace is not None and not res.namespaced):
            raise not_found()
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else ""
        if len(rest) > 3 or (sub and not (sub == "status" and res.status_subresource) and not serves(res, sub)):
            raise not_found()
        return RequestScope(res, namespace, name, sub)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return json_response(jsonenc.dumps({"paths": sorted(
                ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/metrics", "/version",
                 "/openapi/v2", "/openapi/v3"] + [f"/apis/{g}" for g in {*self.registry.groups(), *(
                    r.group for r in REVIEWS)} if g])}))
        head = parts[0]
        if head in ("livez", "readyz", "healthz") and len(parts) <= 2:
            if request.path == f"/{head}":  # the roots only, as upstream instruments them (healthz.go)
                request[NON_RESOURCE_METRIC] = (request.path, "")
            return await self.health.respond(request, head, parts[1] if len(parts) == 2 else None)
        if head == "metrics" and len(parts) == 1:
            return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE})
        if parts == ["debug", "residency"]:
            if "gc" in request.query:
                import gc
                gc.collect()
            if "trim" in request.query:
                # freed heap back to the OS first (as the server does after a (re)list), so that RSS read next
                # holds what is live rather than what earlier garbage left in glibc's free lists
                release_free_memory()
            return json_response(jsonenc.dumps(self.residency_report()) + b"\n")
        if head == "version" and len(parts) == 1:
            return json_response(discovery.version_json())
        if head == "openapi":
            if request.path == "/openapi/v3" or request.path.startswith("/openapi/v3/"):
                # kube-aggregator's OpenAPI v3 handlers (an exact path and a prefix) are instrumented
                request[NON_RESOURCE_METRIC] = ("openapi/v3" if request.path == "/openapi/v3" else "openapi/v3/", "")
            return self.openapi(request, parts)
        if head not in ("api", "apis"):
            return page_not_found()
        if head in ("api", "apis") and len(parts) == 1:
            if discovery.wants_aggregated(request.headers.get("Accept")):
                request[NON_RESOURCE_METRIC] = (head, "apiserver")  # the aggregated discovery handler's labels
                # Aggregated discovery (one request instead of one per group version).
                doc = discovery.aggregated_discovery(self.registry, core=(head == "api"))
                etag = discovery.aggregated_etag(doc)
                headers = {"ETag": etag, "Vary": "Accept", "Cache-Control": "public"}
                if discovery.etag_matches(request.headers.get("If-None-Match"), etag):
                    return web.Response(status=304, headers=headers)
                return web.Response(body=jsonenc.dumps(doc) + b"\n", headers={
                    **headers, "Content-Type": discovery.AGGREGATED_CONTENT_TYPE})
            if head == "api":
                return json_response(jsonenc.dumps(discovery.api_versions(request.host)) + b"\n")
            return json_response(jsonenc.dumps(discovery.api_group_list(self.registry)) + b"\n")
        if head == "apis" and len(parts) == 2:
            g = discovery.api_group(self.registry, parts[1])
            if g is None:
                return page_not_found()
            return json_response(jsonenc.dumps(g) + b"\n")
        resolved = resolve(parts)
        if resolved is None:
            return page_not_found()
        group, version, rest = resolved
        if len(rest) == 1 and (rv := review(group, version, rest[0])) is not None and not rv.namespaced:
            return await self.review(request, rv)
        if len(rest) == 3 and rest[0] == "namespaces" and (rv := review(group, version, rest[2])) is not None \
                and rv.namespaced:  # LocalSubjectAccessReview
            request["review_namespace"] = rest[1]
            return await self.review(request, rv)
        if (group, version) == ("", "v1") and len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "bindings":
            # the legacy bindings collection: create only (LegacyBindingREST)
            if request.method != "POST":
                raise method_not_allowed()
            pods = self.registry.lookup("", "v1", "pods")
            scope = RequestScope(pods, rest[1], None, "binding")
            request["scope"] = scope
            if self.read_only:
                raise errors.method_not_supported("bindings", "create")
            return await write.bind(self.endpoints, request, scope)
        try:
            if not rest:
                rl = discovery.api_resource_list(self.registry, group, version)
                if rl is None:
                    raise not_found()
                return json_response(jsonenc.dumps(rl) + b"\n")
            legacy_watch = rest[0] == "watch"  # deprecated /watch/ paths: GET only, always a watch
            scope = self.scope_for(group, version, rest[1:] if legacy_watch else rest)
        except errors.StatusError as e:
            # Upstream: paths under a group kube-apiserver itself serves (and under /api) that match nothing
            # are NotFound Statuses; anything under an unknown group, or a group only custom resources use,
            # falls through to the delegation chain's end: Go's plain-text 404. (Asked here, on a 404 only: a
            # scan of every resource on every request was 0.6-1.4 % of the apiserver's samples under Lease writes.)
            builtin = not group or any(not r.custom for r in self.registry.all() if r.group == group) or \
                any(r.group == group for r in REVIEWS)
            if e.code == 404 and not builtin:
                return page_not_found()
            raise
        request["scope"] = scope
        return await self.verb(request, scope, legacy_watch)

    def openapi(self, request: web.Request, parts: list[str]) -> web.Response:
        """kube-openapi's handlers (handler/handler.go for v2, handler3/handler.go for v3)."""
        from . import openapi  # noqa: PLC0415 (documents are built on first request)
        registry = self.registry
        inm = request.headers.get("If-None-Match")
        if parts == ["openapi", "v2"] and not request.path.endswith("/"):
            body, digest = openapi.v2_body(registry)
            etag = f'"{digest}"'
            headers = {"ETag": etag, "Vary": "Accept-Encoding, Accept", "Cache-Control": "no-cache, private"}
            if inm == etag:
                return web.Response(status=304, headers=headers)
            resp = web.Response(body=body, headers={**headers, "Content-Type": "application/json",
                                                    "Last-Modified": openapi_built(digest)})
            resp.enable_compression()
            return resp
        if parts == ["openapi", "v3"] and not request.path.endswith("/"):
            # Upstream writes the index without a Content-Type; Go's sniffing calls JSON text/plain.
            body = jsonenc.dumps(openapi.v3_index(registry))
            return web.Response(body=body, headers={
                "Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-cache, private",
                "Last-Modified": openapi_built(hashlib.sha256(body).hexdigest())})
        if len(parts) >= 3 and parts[:2] == ["openapi", "v3"] and not request.path.endswith("/"):
            got = openapi.v3_body(registry, "/".join(parts[2:]))
            if got is not None:
                body, digest = got
                etag = f'"{digest}"'
                headers = {"ETag": etag, "Vary": "Accept", "Cache-Control": "no-cache, private"}
                asked = request.query.get("hash")
                if asked is not None and asked != digest:
                    return web.Response(status=301, headers={
                        **headers, "Location": f"{request.path}?hash={digest}", "Content-Type": "application/json"})
                if asked is not None:  # an immutable URL: cacheable for a year
                    headers["Cache-Control"] = "public, immutable"
                    headers["Expires"] = email.utils.format_datetime(
                        datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=365)).replace(
                        "+0000", "UTC")
                if inm == etag:
                    return web.Response(status=304, headers=headers)
                return web.Response(body=body, headers={**headers, "Content-Type": "application/json",
                                                        "Last-Modified": openapi_built(digest)})
        if parts[:2] == ["openapi", "v3"]:
            return web.Response(status=404)  # handler3 answers an unknown document with an empty 404
        return page_not_found()

    async def review(self, request: web.Request, res) -> web.StreamResponse:
        """A review kind (create only, never stored): POST on its collection path, 405 otherwise."""
        if request.method != "POST":
            raise method_not_allowed()
        request["scope"] = RequestScope(res, request.get("review_namespace"), None, "")  # for the request metrics
        return await reviews.HANDLERS[(res.group, res.plural)](request, res)

    async def verb(self, request: web.Request, scope: RequestScope, legacy_watch: bool = False) -> web.StreamResponse:
        collection = scope.name is None
        m = request.method
        res = scope.resource
        if scope.subresource in SUBRESOURCE_VERBS:
            endpoint, name = SUBRESOURCE_VERBS[scope.subresource].get(m, (None, ""))
            if endpoint is None or legacy_watch:  # (?watch= on a subresource GET is a plain GET, as upstream)
                raise method_not_allowed()
            if self.read_only and m != "GET":
                raise errors.method_not_supported(f"{res.plural}/{scope.subresource}", name, res.group)
            return await endpoint(self.endpoints, request, scope)
        if legacy_watch and (m != "GET" or scope.subresource):
            endpoint, name = None, ""
        elif m == "GET" and (is_watch(request) or legacy_watch):
            endpoint, name = watch.watch, "watch"
        elif m == "DELETE" and scope.subresource:
            endpoint, name = None, ""
        else:
            endpoint, name = (COLLECTION_VERBS if collection else OBJECT_VERBS).get(m), verb_name(m, collection)
        if endpoint is None or name not in res.verbs:
            # Upstream installs no route for a verb the registry lacks: go-restful's 405, which the
            # apiserver answers with a generic MethodNotAllowed Status (empty details).
            raise method_not_allowed()
        if self.read_only and m != "GET":
            raise errors.method_not_supported(res.plural, name, res.group)
        return await endpoint(self.endpoints, request, scope)


def method_not_allowed() -> errors.StatusError:
    return errors.StatusError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                                                        "resource", {})


_BUILT: dict[str, str] = {}


def openapi_built(key: str) -> str:
    """Last-Modified of an OpenAPI document: when this process first served that version of it."""
    if key not in _BUILT:
        if len(_BUILT) > 256:
            _BUILT.clear()
        _BUILT[key] = email.utils.format_datetime(datetime.datetime.now(datetime.timezone.utc), usegmt=True)
    return _BUILT[key]


# Subresources other than status, with their endpoints per method (anything else is 405).
SUBRESOURCE_VERBS: dict[str, dict[str, tuple[Any, str]]] = {
    "binding": {"POST": (write.bind, "create")},
    "eviction": {"POST": (eviction.create, "create")},
    "scale": {"GET": (scale.get, "get"), "PUT": (scale.update, "update"), "PATCH": (scale.patch, "patch")},
}


def serves(res, sub: str) -> bool:
    """A subresource this server implements for the resource (upstream lists it for the resource)."""
    if sub not in SUBRESOURCE_VERBS or res.custom:
        return False
    if sub in ("binding", "eviction"):
        return (res.group, res.plural) == ("", "pods")
    return sub == "scale" and scale.scalable(res)


COLLECTION_VERBS = {"GET": read.list_, "POST": write.create, "DELETE": write.deletecollection}
OBJECT_VERBS = {"GET": read.get, "PUT": write.update, "PATCH": write.patch, "DELETE": write.delete}


def verb_name(method: str, collection: bool) -> str:
    return {"GET": "list" if collection else "get", "POST": "create", "PUT": "update",
            "PATCH": "patch", "DELETE": "deletecollection" if collection else "delete"}.get(method, method.lower())
