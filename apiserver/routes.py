"""Routing: one catch-all route resolved against the `Registry` on every request (so CRDs are
served as soon as they exist): health, metrics, version, discovery, OpenAPI, then
`/api/v1/...` and `/apis/<group>/<version>/...` to the endpoints by verb."""
from __future__ import annotations

from typing import Any, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from machinery import errors, jsonenc

from . import discovery
from .endpoints import read, watch, write
from machinery.resources import Registry

from .endpoints.common import Context, RequestScope, json_response
from .health import Health


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
        if len(rest) > 3 or (sub and not (sub == "status" and res.status_subresource)):
            raise not_found()
        return RequestScope(res, namespace, name, sub)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return json_response(jsonenc.dumps({"paths": sorted(
                ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/metrics", "/version",
                 "/openapi/v2", "/openapi/v3"] + [f"/apis/{g}" for g in self.registry.groups() if g])}))
        head = parts[0]
        if head in ("livez", "readyz", "healthz") and len(parts) <= 2:
            return await self.health.respond(request, head, parts[1] if len(parts) == 2 else None)
        if head == "metrics" and len(parts) == 1:
            return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})
        if parts == ["debug", "residency"]:
            if "gc" in request.query:
                import gc
                gc.collect()
            return json_response(jsonenc.dumps(self.residency_report()) + b"\n")
        if head == "version" and len(parts) == 1:
            return json_response(jsonenc.dumps(discovery.version_info()) + b"\n")
        if head == "openapi":
            return self.openapi(parts)
        if head in ("api", "apis") and len(parts) == 1:
            if discovery.wants_aggregated(request.headers.get("Accept")):
                # Aggregated discovery (one request instead of one per group version).
                doc = discovery.aggregated_discovery(self.registry, core=(head == "api"))
                return web.Response(body=jsonenc.dumps(doc) + b"\n", headers={
                    "Content-Type": discovery.AGGREGATED_CONTENT_TYPE, "Vary": "Accept",
                    "ETag": discovery.aggregated_etag(doc)})
            if head == "api":
                return json_response(jsonenc.dumps(discovery.api_versions(request.host)) + b"\n")
            return json_response(jsonenc.dumps(discovery.api_group_list(self.registry)) + b"\n")
        if head == "apis" and len(parts) == 2:
            g = discovery.api_group(self.registry, parts[1])
            if g is None:
                raise not_found()
            return json_response(jsonenc.dumps(g) + b"\n")
        resolved = resolve(parts)
        if resolved is None:
            raise not_found()
        group, version, rest = resolved
        if not rest:
            rl = discovery.api_resource_list(self.registry, group, version)
            if rl is None:
                raise not_found()
            return json_response(jsonenc.dumps(rl) + b"\n")
        scope = self.scope_for(group, version, rest)
        request["scope"] = scope
        return await self.verb(request, scope)

    def openapi(self, parts: list[str]) -> web.Response:
        from . import openapi  # noqa: PLC0415 (documents are built on first request)
        registry = self.registry
        if parts == ["openapi", "v2"]:
            return json_response(jsonenc.dumps(openapi.v2(registry)))
        if parts == ["openapi", "v3"]:
            return json_response(jsonenc.dumps(openapi.v3_index(registry)))
        if len(parts) >= 4 and parts[:2] == ["openapi", "v3"]:
            if parts[2] == "api" and len(parts) == 4:
                doc = openapi.v3_group_version(registry, "", parts[3])
            elif parts[2] == "apis" and len(parts) == 5:
                doc = openapi.v3_group_version(registry, parts[3], parts[4])
            else:
                doc = None
            if doc is not None:
                return json_response(jsonenc.dumps(doc))
        raise not_found()

    async def verb(self, request: web.Request, scope: RequestScope) -> web.StreamResponse:
        collection = scope.name is None
        m = request.method
        if m == "GET" and is_watch(request):
            endpoint = watch.watch
        elif (m == "DELETE" and scope.subresource) or (self.read_only and m != "GET"):
            endpoint = None
        else:
            endpoint = (COLLECTION_VERBS if collection else OBJECT_VERBS).get(m)
        if endpoint is None:
            res = scope.resource
            raise errors.method_not_supported(res.plural, verb_name(m, collection), res.group)
        return await endpoint(self.endpoints, request, scope)


COLLECTION_VERBS = {"GET": read.list_, "POST": write.create, "DELETE": write.deletecollection}
OBJECT_VERBS = {"GET": read.get, "PUT": write.update, "PATCH": write.patch, "DELETE": write.delete}


def verb_name(method: str, collection: bool) -> str:
    return {"GET": "list" if collection else "get", "POST": "create", "PUT": "update",
            "PATCH": "patch", "DELETE": "deletecollection" if collection else "delete"}.get(method, method.lower())
