"""The aiohttp application: routing, error mapping, metrics, health,
discovery/OpenAPI endpoints, and the CRD-driven resource registry.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from storage import errors as serr
from storage.router import Router
from storage.store import EtcdStore

from machinery import errors, jsonenc

from . import cached, discovery, metrics
from cache.cacher import LIST_PAGE, RESIDENT_LIST_PAGE, Cacher
from cache.residency import DEFAULT_FULL_RESOURCES, Residency

from machinery.encoding import encode_obj, wire_head

from .handlers import RequestScope, ResourceHandlers, json_response
from .status import map_storage_error, status_response
from machinery.resources import CRD, Registry, Resource

log = logging.getLogger("apiserver")

# Namespaces upstream creates at start (the system namespaces controller).
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# How often apiserver_storage_objects is refreshed (upstream: every minute).
STORAGE_OBJECTS_PERIOD = 30.0
# Timeout of the etcd readiness check.
ETCD_CHECK_TIMEOUT = 2.0


@dataclass
class Config:
    etcd_servers: list[str]
    etcd_prefix: str = "/registry"
    etcd_overrides: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    watch_cache: bool = False
    bind_address: str = "127.0.0.1"
    port: int = 8080
    residency: Any = None                      # machinery.shard_selector.ShardSelector or None (everything)
    full_resources: tuple[str, ...] = DEFAULT_FULL_RESOURCES
    compaction_interval: float = 300.0        # --etcd-compaction-interval (0: never)


class APIServer:
    def __init__(self, config: Config):
        self.config = config
        self.etcd_prefix = config.etcd_prefix.rstrip("/") or "/registry"
        self.registry = Registry()
        self.router = Router(config.etcd_servers, config.etcd_overrides)
        self.handlers = ResourceHandlers(self)
        # Watch-list (S5) is served by the watch cache; without it we answer as
        # upstream does with the WatchList gate off (S5.3).
        self.watch_list_enabled = config.watch_cache
        self._cachers: dict[tuple[str, str], Cacher] = {}
        self.residency = Residency(config.residency, config.full_resources)
        self.watchers: set[asyncio.Future] = set()
        self._stores: dict[tuple[str, str], EtcdStore] = {}
        self._tasks: list[asyncio.Task] = []
        self.etcd_version = ""

    # --- storage -------------------------------------------------------------

    def store_for(self, res: Resource) -> EtcdStore:
        k = (res.group, res.plural)
        s = self._stores.get(k)
        if s is None:
            s = self._stores[k] = EtcdStore(self.router.client_for(res.group, res.plural), res.qualified)
        return s

    def cacher_for(self, res: Resource) -> Cacher | None:
        """The resource's watch cache (created and started on first use), or None with --watch-cache=false."""
        if not self.config.watch_cache:
            return None
        k = (res.group, res.plural)
        c = self._cachers.get(k)
        if c is None:
            # A dedicated etcd client per cached resource: progress requests apply to
            # every watch on a gRPC stream (S3.2).
            client = self.router.client_for(res.group, res.plural, dedicated=True)
            client.version = self.etcd_version
            prefix = res.prefix(self.etcd_prefix)
            c = Cacher(store=self.store_for(res), client=client, prefix=prefix,
                       resource_label=res.plural, group=res.group,
                       encode=lambda obj, _r=res: encode_obj(_r, obj),
                       residency=self.residency.ingest_filter(res.plural, prefix, res.namespaced),
                       head=wire_head(res),
                       # Poll at least as often as we compact (upstream: every 15 s).
                       compaction_poll=min(15.0, self.config.compaction_interval or 15.0),
                       list_page=RESIDENT_LIST_PAGE if self.residency.partial(res.plural) else LIST_PAGE)
            self._cachers[k] = c
            c.start()
        return c

    async def settled_cacher(self, res: Resource) -> Cacher | None:
        c = self.cacher_for(res)
        if c is not None and not c.ready:
            await c.settle()
        return c

    async def start(self) -> None:
        self.etcd_version = await self.router.default_client().status()
        ns = self.registry.lookup("", "v1", "namespaces")
        for name in SYSTEM_NAMESPACES:
            obj: dict[str, Any] = {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": name}}
            from machinery import objects
            try:
                await self.store_for(ns).create(ns.key(self.etcd_prefix, None, name),
                                                objects.prepare_create(ns, obj))
            except serr.StorageError as e:
                if e.code is not serr.Code.KEY_EXISTS:
                    raise
        await self._load_crds()
        if self.config.watch_cache:
            for r in self.registry.all():
                self.cacher_for(r)
        self._tasks.append(asyncio.create_task(self._sync_crds_forever()))
        if self.config.compaction_interval > 0:
            from storage.compact import run_compactor
            self._tasks.append(asyncio.create_task(
                run_compactor(self.router.default_client(), self.config.compaction_interval)))
        self._tasks.append(asyncio.create_task(self._count_objects_forever()))

    async def stop(self) -> None:
        for c in self._cachers.values():
            await c.stop()
        for t in self._tasks:
            t.cancel()
        for t in list(self.watchers):
            t.cancel()
        await asyncio.gather(*self._tasks, *self.watchers, return_exceptions=True)
        await self.router.close()

    # --- CRDs: served as soon as created, in every process -------------------

    async def _load_crds(self) -> int:
        res = await self.store_for(CRD).list(CRD.prefix(self.etcd_prefix))
        for crd in res.items:
            self.registry.apply_crd(crd)
        return res.resource_version

    async def _sync_crds_forever(self) -> None:
        """Follow CRD changes made through any apiserver sharing this etcd."""
        while True:
            try:
                rv = await self._load_crds()
                async for ev in self.store_for(CRD).watch(CRD.prefix(self.etcd_prefix), rv):
                    self._apply_crd_event(ev.type, ev.obj)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # etcd hiccup: re-list and re-watch
                log.warning("crd sync restarting error=%r", e)
                await asyncio.sleep(1)

    def _apply_crd_event(self, ev_type: str, crd: dict) -> None:
        if ev_type == "DELETED":
            for r in self.registry.remove_crd(crd["metadata"]["name"]):
                c = self._cachers.pop((r.group, r.plural), None)
                if c is not None:
                    asyncio.ensure_future(c.stop())
        else:
            for r in self.registry.apply_crd(crd):
                self.cacher_for(r)  # start filling the new resource's cache right away

    async def after_write(self, res: Resource, ev_type: str, obj: dict) -> None:
        """Side effects of a successful write (what upstream's controllers would do)."""
        if res is CRD or res.plural == "customresourcedefinitions" and res.group == CRD.group:
            self._apply_crd_event(ev_type, obj)
            if ev_type == "DELETED":
                await self._delete_custom_objects(obj)
        elif res.plural == "namespaces" and not res.group and ev_type == "DELETED":
            await self._delete_namespace_contents(obj["metadata"]["name"])

    async def _delete_custom_objects(self, crd: dict) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        prefix = f"{self.etcd_prefix}/{spec.get('group')}/{names.get('plural')}/"
        await self.router.client_for(spec.get("group", ""), names.get("plural", "")).delete_prefix(
            prefix.encode())

    async def _delete_namespace_contents(self, namespace: str) -> None:
        # Upstream's namespace controller empties a terminating namespace; we do
        # it synchronously on delete (documented difference).
        done = set()
        for r in self.registry.all():
            if not r.namespaced or (r.group, r.plural) in done:
                continue
            done.add((r.group, r.plural))
            await self.router.client_for(r.group, r.plural).delete_prefix(
                r.prefix(self.etcd_prefix, namespace).encode())

    async def _count_objects_forever(self) -> None:
        while True:
            try:
                seen = set()
                for r in self.registry.all():
                    if (r.group, r.plural) in seen:
                        continue
                    seen.add((r.group, r.plural))
                    n = await self.store_for(r).count(r.prefix(self.etcd_prefix))
                    metrics.apiserver_storage_objects.labels(r.qualified).set(n)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("storage object count failed error=%r", e)
            await asyncio.sleep(STORAGE_OBJECTS_PERIOD)

    # --- health --------------------------------------------------------------

    async def check_etcd(self) -> str | None:
        try:
            await asyncio.wait_for(self.router.default_client().current_revision(
                (self.etcd_prefix + "/").encode(), "healthz"), ETCD_CHECK_TIMEOUT)
            return None
        except Exception as e:
            return f"etcd: {e!r}"

    def health_checks(self, kind: str) -> dict[str, Any]:
        checks: dict[str, Any] = {"ping": None, "log": None}
        if kind in ("readyz", "healthz"):
            checks["etcd"] = self.check_etcd
        if kind == "readyz" and self.config.watch_cache:
            checks["watch-cache"] = self.check_watch_cache
        return checks

    def residency_report(self) -> dict[str, Any]:
        """Per resource: resident objects and bytes by structure (debug endpoint, residency benchmark)."""
        out: dict[str, Any] = {"residency": str(self.residency.selector) if self.residency.selector else "",
                               "fullResources": sorted(self.residency.full_resources), "resources": {}}
        for (group, plural), c in sorted(self._cachers.items()):
            st = c.wc.stats()
            st.update({"ready": c.ready, "partial": self.residency.partial(plural), "rv": c.wc.rv,
                       "droppedNonResident": c.dropped_nonresident})
            out["resources"][f"{plural}.{group}" if group else plural] = st
        out["process"] = process_memory()
        return out

    async def check_watch_cache(self) -> str | None:
        """Ready once every built-in resource's cache is initialised (upstream 1.36 default)."""
        pending = [f"{r.plural}" for r in self.registry.all()
                   if not r.custom and not self.cacher_for(r).ready]
        return f"watch cache not ready: {', '.join(pending)}" if pending else None

    async def health(self, request: web.Request, kind: str, only: str | None) -> web.Response:
        checks = self.health_checks(kind)
        if only is not None and only not in checks:
            raise errors.not_found("", only)
        excluded = set(request.query.getall("exclude", []))
        lines = []
        failed = False
        for name, fn in checks.items():
            if only is not None and name != only:
                continue
            if name in excluded:
                lines.append(f"[+]{name} excluded: ok")
                continue
            err = await fn() if fn else None
            if err:
                failed = True
                lines.append(f"[-]{name} failed: reason withheld")
                log.warning("health check failed check=%s error=%s", name, err)
            else:
                lines.append(f"[+]{name} ok")
        verbose = "verbose" in request.query
        if only is not None:
            text = "ok" if not failed else lines[0] + "\n"
        elif failed:
            text = "\n".join(lines) + f"\n{kind} check failed\n"
        elif verbose:
            text = "\n".join(lines) + f"\n{kind} check passed\n"
        else:
            text = "ok"
        return web.Response(text=text, status=500 if failed else 200, content_type="text/plain")

    # --- routing -------------------------------------------------------------

    def resolve(self, parts: list[str]) -> tuple[str, str, list[str]] | None:
        """Split `/api/v1/...` or `/apis/g/v/...` into (group, version, rest)."""
        if len(parts) >= 2 and parts[0] == "api":
            return "", parts[1], parts[2:]
        if len(parts) >= 3 and parts[0] == "apis":
            return parts[1], parts[2], parts[3:]
        return None

    def scope_for(self, group: str, version: str, rest: list[str]) -> RequestScope:
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace = rest[1]
            rest = rest[2:]
        if not rest:
            raise errors.not_found("", "")
        plural = rest[0]
        res = self.registry.lookup(group, version, plural)
        if res is None:
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource",
                                     {})
        if namespace is not None and not res.namespaced:
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else ""
        if len(rest) > 3 or (sub and not (sub == "status" and res.status_subresource)):
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
        return RequestScope(res, namespace, name, sub)

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return json_response(jsonenc.dumps({"paths": sorted(
                ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/metrics", "/version",
                 "/openapi/v2", "/openapi/v3"] + [f"/apis/{g}" for g in self.registry.groups() if g])}))
        head = parts[0]
        if head in ("livez", "readyz", "healthz") and len(parts) <= 2:
            return await self.health(request, head, parts[1] if len(parts) == 2 else None)
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
        resolved = self.resolve(parts)
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
                raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
            return json_response(jsonenc.dumps(g) + b"\n")
        if resolved is None:
            raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
        group, version, rest = resolved
        if not rest:
            rl = discovery.api_resource_list(self.registry, group, version)
            if rl is None:
                raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})
            return json_response(jsonenc.dumps(rl) + b"\n")
        scope = self.scope_for(group, version, rest)
        request["scope"] = scope
        return await self.verb(request, scope)

    def openapi(self, parts: list[str]) -> web.Response:
        from . import openapi  # noqa: PLC0415 (documents are built on first request)
        if parts == ["openapi", "v2"]:
            return json_response(jsonenc.dumps(openapi.v2(self.registry)))
        if parts == ["openapi", "v3"]:
            return json_response(jsonenc.dumps(openapi.v3_index(self.registry)))
        if len(parts) >= 4 and parts[:2] == ["openapi", "v3"]:
            if parts[2] == "api" and len(parts) == 4:
                doc = openapi.v3_group_version(self.registry, "", parts[3])
            elif parts[2] == "apis" and len(parts) == 5:
                doc = openapi.v3_group_version(self.registry, parts[3], parts[4])
            else:
                doc = None
            if doc is not None:
                return json_response(jsonenc.dumps(doc))
        raise errors.StatusError(404, "NotFound", "the server could not find the requested resource", {})

    async def verb(self, request: web.Request, scope: RequestScope) -> web.StreamResponse:
        m = request.method
        h = self.handlers
        res = scope.resource
        is_watch = request.query.get("watch", "").lower() in ("1", "true", "t")
        if scope.name is None:
            if m == "GET":
                return await (h.watch if is_watch else h.list)(request, scope)
            if m == "POST":
                return await h.create(request, scope)
            if m == "DELETE":
                return await h.deletecollection(request, scope)
            raise errors.method_not_supported(res.plural, _verb_name(m, True), res.group)
        if m == "GET":
            if is_watch:
                return await h.watch(request, scope)
            return await h.get(request, scope)
        if m == "PUT":
            return await h.update(request, scope)
        if m == "PATCH":
            return await h.patch(request, scope)
        if m == "DELETE" and not scope.subresource:
            return await h.delete(request, scope)
        raise errors.method_not_supported(res.plural, _verb_name(m, False), res.group)

    # --- app -----------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self.middleware], client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)

        async def on_startup(_):
            await self.start()

        async def on_cleanup(_):
            await self.stop()
        app.on_startup.append(on_startup)
        app.on_cleanup.append(on_cleanup)
        return app

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        t0 = time.perf_counter()
        code = 500
        try:
            resp = await handler(request)
            code = resp.status
            return resp
        except errors.StatusError as e:
            code = e.code
            return status_response(e)
        except serr.StorageError as e:
            scope = request.get("scope")
            se = map_storage_error(e, scope.resource if scope else CRD)
            code = se.code
            return status_response(se)
        except web.HTTPException:
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            code = 499
            raise
        except Exception as e:  # an internal bug: log it, never send a stack trace
            log.exception("internal error path=%s", request.path)
            se = errors.internal(repr(e))
            code = 500
            return status_response(se)
        finally:
            self.observe(request, code, time.perf_counter() - t0)

    def observe(self, request: web.Request, code: int, seconds: float) -> None:
        scope: RequestScope | None = request.get("scope")
        if scope is None:
            labels = (request.method.lower(), "", "", "", "", "", "", "apiserver")
        else:
            r = scope.resource
            is_watch = request.query.get("watch", "").lower() in ("1", "true", "t")
            verb = _metric_verb(request.method, scope.name is None, is_watch)
            sc = "resource" if scope.name else ("namespace" if scope.namespace else "cluster")
            labels = (verb, "", r.group, r.version, r.plural, scope.subresource, sc, "apiserver")
        metrics.apiserver_request_total.labels(*labels, str(code)).inc()
        metrics.apiserver_request_duration_seconds.labels(*labels).observe(seconds)


def process_memory() -> dict[str, int]:
    """RSS / peak RSS from /proc and the Python heap from tracemalloc (when the process was started
    with RESIDENCY_TRACEMALLOC=1, see __main__)."""
    import tracemalloc
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out["rss_bytes" if k == "VmRSS" else "rss_peak_bytes"] = int(v.split()[0]) * 1024
    except OSError:
        pass
    if tracemalloc.is_tracing():
        cur, peak = tracemalloc.get_traced_memory()
        out["tracemalloc_bytes"] = cur
        out["tracemalloc_peak_bytes"] = peak
    return out


def _verb_name(method: str, collection: bool) -> str:
    return {"GET": "list" if collection else "get", "POST": "create", "PUT": "update",
            "PATCH": "patch", "DELETE": "deletecollection" if collection else "delete"}.get(method, method.lower())


def _metric_verb(method: str, collection: bool, watch: bool) -> str:
    if watch:
        return "WATCH"
    return {"GET": "LIST" if collection else "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH",
            "DELETE": "DELETE"}.get(method, method)
