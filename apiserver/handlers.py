"""REST verbs for one resource: get, list, watch, create, update, patch,
delete, deletecollection (upstream's `endpoints/handlers` + `registry/generic`).

Reads and watches here go straight to etcd (the `--watch-cache=false` path);
the watch cache plugs in behind the same `Reader` calls.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from aiohttp import web

from storage import errors as serr
from storage.continue_token import decode_continue, encode_continue
from storage.store import EtcdStore, Event, ListResult

from cache import delegator
from machinery import shard_selector as sharding
from cache.residency import entry_shard_filter

from machinery.encoding import encode_list_item, encode_obj, list_item_bytes
from machinery import errors, jsonenc, objects, patch as patchmod, protobuf, tables, validation

from . import cached
from .status import map_storage_error
from .metrics import residency_delegated, sharded_watch_metrics
from machinery.listoptions import ListOptions, parse_list_options, parse_resource_version
from machinery.resources import Resource
from machinery.selectors import field_selectors_for

Obj = dict[str, Any]

# Upstream refuses request bodies over 3 MiB (DESIGN.md "Limits").
MAX_BODY_BYTES = 3 * 1024 * 1024
# Watch without timeoutSeconds: random in [minRequestTimeout, 2*minRequestTimeout] (S4.8).
MIN_REQUEST_TIMEOUT = 1800
# Upstream sends a bookmark about once a minute (defaultBookmarkFrequency, S4.11).
BOOKMARK_FREQUENCY = 60.0

@dataclass
class RequestScope:
    """What the router resolved from the URL."""
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str


def wants_table(request: web.Request) -> bool:
    return tables.parse_table_accept(request.headers.get("Accept", ""))


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


class ResourceHandlers:
    """Verb implementations over the storage contract."""

    def __init__(self, server):
        self.server = server  # apiserver.server.APIServer (config, registry, stores)

    # --- helpers -------------------------------------------------------------

    def store(self, res: Resource) -> EtcdStore:
        return self.server.store_for(res)

    def key(self, scope: RequestScope, name: str | None = None) -> str:
        return scope.resource.key(self.server.etcd_prefix, scope.namespace, name or scope.name or "")

    async def read_body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
            raise errors.request_entity_too_large(f"limit is {MAX_BODY_BYTES}")
        # read() may return a part of the body: read until EOF (or just past the limit).
        parts: list[bytes] = []
        size = 0
        while size <= MAX_BODY_BYTES:
            chunk = await request.content.read(MAX_BODY_BYTES + 1 - size)
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise errors.request_entity_too_large(f"limit is {MAX_BODY_BYTES}")
        return b"".join(parts)

    async def decode_body(self, request: web.Request, res: Resource) -> Obj:
        body = await self.read_body(request)
        # No Content-Type means the first supported type, JSON (upstream NegotiateInputSerializer);
        # aiohttp would report application/octet-stream.
        ctype = request.content_type.lower() if request.headers.get("Content-Type") else "application/json"
        if ctype in ("application/yaml", "application/apply-patch+yaml"):
            import yaml
            try:
                obj = yaml.safe_load(body)
            except yaml.YAMLError as e:
                raise errors.bad_request(f"error converting YAML to JSON: {e}") from None
        elif ctype in ("application/json", "*/*", ""):
            try:
                obj = jsonenc.loads(body)
            except ValueError as e:
                raise errors.bad_request(
                    f"the object provided is unrecognized (must be of type {res.kind}): "
                    f"couldn't get version/kind; json parse error: {e}") from None
        elif ctype == protobuf.MEDIA_TYPE and not res.custom and protobuf.supports(res.api_version, res.kind):
            # client-go's typed clientsets send built-in kinds as protobuf (custom
            # resources have no protobuf form: 415 as upstream).
            try:
                obj = protobuf.decode(body, res.api_version, res.kind)
            except protobuf.ProtobufError as e:
                raise errors.bad_request(
                    f"the object provided is unrecognized (must be of type {res.kind}): {e}") from None
        else:
            raise errors.StatusError(415, "UnsupportedMediaType",
                                     f"the body of the request was in an unknown format - accepted media "
                                     f"types include: {self.accepted_media_types(res)}")
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the object provided is unrecognized (must be of type {res.kind}): "
                                     f"couldn't get version/kind; json parse error: expected an object")
        self.check_gvk(res, obj)
        return obj

    @staticmethod
    def accepted_media_types(res: Resource) -> str:
        types = ["application/json", "application/yaml"]
        if not res.custom and protobuf.supports(res.api_version, res.kind):
            types.append(protobuf.MEDIA_TYPE)
        return ", ".join(types)

    @staticmethod
    def check_gvk(res: Resource, obj: Obj) -> None:
        """kind/apiVersion may be omitted (defaulted from the URL) but must not differ (400)."""
        av = obj.get("apiVersion")
        kind = obj.get("kind")
        if av and av != res.api_version:
            raise errors.bad_request(f"the API version in the data ({av}) does not match the expected "
                                     f"API version ({res.api_version})")
        if kind and kind != res.kind:
            raise errors.bad_request(f"the kind in the data ({kind}) does not match the expected kind "
                                     f"({res.kind}) for {res.qualified}")
        if res.custom:
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        else:
            rest = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
            obj.clear()
            obj.update({"kind": res.kind, "apiVersion": res.api_version, **rest})

    def list_options(self, request: web.Request, res: Resource, *, watch: bool) -> ListOptions:
        return parse_list_options(request.query, watch=watch, watch_list_enabled=self.server.watch_list_enabled,
                                  field_selectors=field_selectors_for("" if res.custom else res.plural,
                                                                      res.namespaced))

    def predicate(self, res: Resource, opts: ListOptions) -> tuple[Callable[[Obj], bool] | None, str | None]:
        """(object predicate or None, exact name pinned by the field selector)."""
        ls, fs = opts.labels, opts.fields
        if ls.empty and fs.empty:
            return None, None

        def pred(obj: Obj) -> bool:
            return ls.matches((obj.get("metadata") or {}).get("labels") or {}) and fs.matches(obj)
        return pred, fs.exact_name()

    @staticmethod
    def shard_selector(opts: ListOptions):
        """The request's KEP-5866 shardSelector (S7.1), or None; 400 if invalid (S7.9: upstream 500)."""
        try:
            return sharding.parse_shard_selector(opts.shard_selector or "")
        except sharding.ShardSelectorError as e:
            raise sharding.status_error(e) from None

    @staticmethod
    def with_shard(pred, shard):
        """The etcd-path object predicate: label/field selectors AND the shard selector (S7.12)."""
        if shard is None:
            return pred

        def p(obj: Obj) -> bool:
            md = obj.get("metadata") or {}
            return shard.matches(md.get("uid") or "", md.get("namespace") or "") and (pred is None or pred(obj))
        return p

    async def ensure_namespace(self, namespace: str) -> None:
        """Creates need an existing namespace. As upstream's NamespaceLifecycle admission, the
        namespace cache answers when it holds the namespace; otherwise etcd is asked (a namespace
        just created may not have reached the cache: never a false 404)."""
        ns_res = self.server.registry.lookup("", "v1", "namespaces")
        key = ns_res.key(self.server.etcd_prefix, None, namespace)
        if self._cached_entry(ns_res, key) is not None:
            return
        try:
            await self.store(ns_res).get(key)
        except serr.StorageError as e:
            if e.code is serr.Code.KEY_NOT_FOUND:
                raise errors.not_found("namespaces", namespace) from None
            raise map_storage_error(e, ns_res, namespace) from None

    def respond_obj(self, request: web.Request, res: Resource, obj: Obj, status: int = 200) -> web.Response:
        if wants_table(request):
            table = tables.to_table(res, [obj], {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                                    request.query.get("includeObject", "Metadata"))
            return json_response(jsonenc.dumps(table) + b"\n", status)
        return json_response(encode_obj(res, obj) + b"\n", status)

    # --- GET -----------------------------------------------------------------

    async def get(self, request: web.Request, scope: RequestScope) -> web.Response:
        res = scope.resource
        rv_s = request.query.get("resourceVersion")
        rv = parse_resource_version(rv_s) if rv_s else 0
        cacher = await self.server.settled_cacher(res)
        if cacher is not None and self.server.residency.partial(res.plural):
            # A name does not tell which shard holds the object: never answer 404 for an
            # object that merely lives outside this process's residency.
            residency_delegated.labels(res.group, res.plural, "get").inc()
            cacher = None
        if cacher is not None:
            try:
                where = delegator.plan_get(rv_s, ready=cacher.ready)
            except delegator.NotReadyError:
                raise errors.too_many_requests("storage is (re)initializing", cacher.retry_after()) from None
            if where == "cache":
                # S1.15-S1.16: RV=0 any state; RV=N wait up to 3 s, 504 otherwise (no etcd fallback).
                if rv:
                    await cached.wait_fresh_or_504(cacher, rv)
                e = cacher.wc.store.get(self.key(scope))
                if e is None:
                    raise errors.not_found(res.plural, scope.name or "", res.group)
                if wants_table(request):
                    return self.respond_obj(request, res, jsonenc.loads(cacher.wire(e.data)))
                return json_response(cacher.wire(e.data) + b"\n")
        try:
            # S1.14: RV unset is a quorum read. On the etcd path RV=N reads the
            # latest state and checks it is not older than N.
            obj = await self.store(res).get(self.key(scope))
        except serr.StorageError as e:
            raise map_storage_error(e, res, scope.name or "") from None
        if rv and int(obj["metadata"]["resourceVersion"]) < rv:
            cur = await self.store(res).current_revision(res.prefix(self.server.etcd_prefix))
            if cur < rv:
                raise errors.too_large_resource_version(rv, cur, retry_after=1)
        return self.respond_obj(request, res, obj)

    # --- LIST ----------------------------------------------------------------

    async def list(self, request: web.Request, scope: RequestScope) -> web.StreamResponse:
        res = scope.resource
        opts = self.list_options(request, res, watch=False)
        pred, exact_name = self.predicate(res, opts)
        shard = self.shard_selector(opts)
        prefix = res.prefix(self.server.etcd_prefix, scope.namespace)
        cacher = await self.server.settled_cacher(res)
        if cacher is not None:
            if self.server.residency.serves(res.plural, shard):
                served = await self.list_from_cache(request, scope, opts, pred, exact_name, cacher, prefix, shard)
                if served is not None:
                    return served
            else:
                residency_delegated.labels(res.group, res.plural, "list").inc()
        result = await self.list_from_etcd(scope, opts, self.with_shard(pred, shard), exact_name)
        meta: Obj = {"resourceVersion": str(result.resource_version)}
        if result.continue_key is not None:
            # continue_key is "<last key>\x00"; the token format appends the NUL itself (S2.1).
            last = result.continue_key[len(prefix):]
            meta["continue"] = encode_continue(last.removesuffix("\x00"), result.resource_version)
            if result.remaining is not None:
                meta["remainingItemCount"] = result.remaining
        if shard is not None:
            meta["shardInfo"] = {"selector": str(shard)}  # S7.3 (custom resources too, unlike 1.36)
        if wants_table(request):
            table = tables.to_table(res, result.items, meta, request.query.get("includeObject", "Metadata"))
            return json_response(jsonenc.dumps(table) + b"\n")
        return await self.stream_list(request, res, meta, (encode_list_item(res, o) for o in result.items))

    async def list_from_cache(self, request: web.Request, scope: RequestScope, opts: ListOptions, pred,
                              exact_name: str | None, cacher, prefix: str, shard) -> web.StreamResponse | None:
        """Serve a LIST from the watch cache, or None when it must go to etcd (delegator, S1.18-S1.26)."""
        res = scope.resource
        if opts.resource_version not in (None, "", "0"):
            parse_resource_version(opts.resource_version)  # S1.11: 400 before routing
        start_key, cont_rv = (None, None)
        if opts.continue_:
            start_key, cont_rv = decode_continue(opts.continue_, prefix)
        single_key = exact_name is not None and (not res.namespaced or scope.namespace is not None)
        try:
            plan = delegator.plan_list(opts.resource_version, opts.resource_version_match, opts.limit, cont_rv,
                                       ready=cacher.ready, consistent_supported=cacher.progress_supported,
                                       has_selectors=pred is not None or shard is not None, single_key=single_key,
                                       cache_rv=cacher.wc.rv)
        except delegator.NotReadyError:
            raise errors.too_many_requests("storage is (re)initializing", cacher.retry_after()) from None
        if plan.source != "cache":
            return None
        label_reqs = cached.indexable(opts.labels) if opts.fields.empty else None
        try:
            page = await cached.list_from_cache(
                cacher, res, plan, prefix, start_key, pred, label_reqs, scope.namespace,
                shard=entry_shard_filter(shard, res.prefix(self.server.etcd_prefix)) if shard else None)
        except cached.Delegate:
            return None
        meta: Obj = {"resourceVersion": str(page.resource_version)}
        if page.continue_key is not None:
            meta["continue"] = encode_continue(page.continue_key[len(prefix):], page.resource_version)
            if page.remaining is not None:
                meta["remainingItemCount"] = page.remaining
        if shard is not None:
            meta["shardInfo"] = {"selector": str(shard)}  # S7.3
        if wants_table(request):
            table = tables.to_table(res, [jsonenc.loads(e.data) for e in page.entries], meta,
                                    request.query.get("includeObject", "Metadata"))
            return json_response(jsonenc.dumps(table) + b"\n")
        return await self.stream_list(request, res, meta, (list_item_bytes(res, e.data) for e in page.entries))

    async def list_from_etcd(self, scope: RequestScope, opts: ListOptions,
                             pred, exact_name: str | None) -> ListResult:
        """List semantics of upstream's etcd3 store (S1.4 with the cache off, S2)."""
        res = scope.resource
        prefix = res.prefix(self.server.etcd_prefix, scope.namespace)
        store = self.store(res)
        rv_s = opts.resource_version
        revision = 0
        not_older_than = 0
        start_key = None
        cont_rv = 0
        if opts.continue_:
            start_key, cont_rv = decode_continue(opts.continue_, prefix)
            if cont_rv > 0:
                revision = cont_rv
        elif rv_s not in (None, "", "0"):
            n = parse_resource_version(rv_s)
            exact = opts.resource_version_match == "Exact" or (
                not opts.resource_version_match and opts.limit > 0)
            if exact:
                revision = n          # L5/L6: exactly at N
            else:
                not_older_than = n    # L3/L4: latest state, must be >= N
        limit = opts.limit
        if exact_name is not None and (not res.namespaced or scope.namespace):
            # A list narrowed to one key (S1.20).
            try:
                obj = await store.get(prefix + exact_name, rv=revision)
                items = [obj] if pred is None or pred(obj) else []
            except serr.StorageError as e:
                if e.code is not serr.Code.KEY_NOT_FOUND:
                    raise self._list_error(e, res, opts, prefix, start_key) from None
                items = []
            rev = revision or await store.current_revision(prefix)
            return ListResult(items, rev, None, None)
        try:
            return await store.list(prefix, revision=revision, start_key=start_key, limit=limit,
                                    predicate=pred, not_older_than=not_older_than)
        except serr.StorageError as e:
            raise self._list_error(e, res, opts, prefix, start_key) from None

    def _list_error(self, e: serr.StorageError, res: Resource, opts: ListOptions, prefix: str,
                    start_key: str | None) -> errors.StatusError:
        if e.code is serr.Code.EXPIRED and opts.continue_ and start_key is not None:
            # S2.12: a new token continuing inconsistently from the same key.
            token = encode_continue(start_key[len(prefix):].removesuffix("\x00"), -1)
            return errors.expired(
                "The provided continue parameter is too old to display a consistent list result. You can "
                "start a new list without the continue parameter, or use the continue token in this "
                "response to retrieve the remainder of the results. Continuing with the provided token "
                "results in an inconsistent list - objects that were created, modified, or deleted between "
                "the time the first chunk was returned and now may show up in the list.",
                metadata={"continue": token})
        if e.code is serr.Code.TOO_LARGE_RV and not e.rv:
            e.rv = int(opts.resource_version or 0)
        return map_storage_error(e, res)

    async def stream_list(self, request: web.Request, res: Resource, meta: Obj,
                          items: Iterable[bytes]) -> web.StreamResponse:
        """Write the list item by item (streaming encoding, S6.1-S6.2)."""
        resp = web.StreamResponse(status=200)
        resp.content_type = "application/json"
        await resp.prepare(request)
        enc = jsonenc.iter_unstructured_list if res.custom else jsonenc.iter_list
        buf: list[bytes] = []
        size = 0
        for chunk in enc(res.list_kind, res.api_version, meta, items):
            buf.append(chunk)
            size += len(chunk)
            if size >= 64 * 1024:  # write in ~64 KiB pieces, never the whole body at once
                await resp.write(b"".join(buf))
                buf, size = [], 0
        if buf:
            await resp.write(b"".join(buf))
        await resp.write_eof()
        return resp

    # --- WATCH ---------------------------------------------------------------

    async def watch(self, request: web.Request, scope: RequestScope) -> web.StreamResponse:
        res = scope.resource
        opts = self.list_options(request, res, watch=True)
        pred, exact_name = self.predicate(res, opts)
        if scope.name:  # watch on a single object: /namespaces/x/configmaps?watch&fieldSelector=... or legacy
            exact_name = scope.name
        if exact_name is not None:
            inner = pred

            def pred(obj: Obj, _n=exact_name, _p=inner) -> bool:
                return (obj.get("metadata") or {}).get("name") == _n and (_p is None or _p(obj))
        rv_s = opts.resource_version
        rv = parse_resource_version(rv_s) if rv_s else 0
        timeout = opts.timeout_seconds if opts.timeout_seconds else \
            random.uniform(MIN_REQUEST_TIMEOUT, 2 * MIN_REQUEST_TIMEOUT)
        table = wants_table(request)
        shard = self.shard_selector(opts)
        cacher = await self.server.settled_cacher(res)
        if cacher is not None and not self.server.residency.serves(res.plural, shard):
            residency_delegated.labels(res.group, res.plural, "watch").inc()
            cacher = None
        if cacher is not None:
            if not cacher.ready:  # S1.33: a plain 429, not an ERROR event
                raise errors.too_many_requests("storage is (re)initializing", cacher.retry_after())
            return await cached.serve_watch(
                request, cacher, res, prefix=res.prefix(self.server.etcd_prefix, scope.namespace),
                rv_s=rv_s, send_initial=opts.send_initial_events, allow_bookmarks=opts.allow_watch_bookmarks,
                timeout=timeout, predicate=pred,
                shard=entry_shard_filter(shard, res.prefix(self.server.etcd_prefix)) if shard else None,
                encode_obj=lambda o: encode_obj(res, o),
                table=table, include_object=request.query.get("includeObject", "Metadata"),
                on_watcher=sharded_watch_metrics(res) if shard else None)
        pred = self.with_shard(pred, shard)
        resp = web.StreamResponse(status=200)
        resp.content_type = "application/json"
        resp.enable_chunked_encoding()
        await resp.prepare(request)  # S4.3: 200 and headers flushed before the first event
        prefix = res.prefix(self.server.etcd_prefix, scope.namespace)
        first_table = [True]

        def frame(ev_type: str, obj: Obj) -> bytes:
            if table and ev_type not in ("ERROR", "BOOKMARK"):  # same framing as the cache path
                t = tables.watch_table(res, obj, first_table[0], request.query.get("includeObject", "Metadata"))
                first_table[0] = False
                return jsonenc.watch_event(ev_type, jsonenc.dumps(t))
            return jsonenc.watch_event(ev_type, encode_obj(res, obj))

        async def pump() -> None:
            # Bookmarks: ask etcd for progress once a minute, or ~2 s before the
            # timeout for short watches (the cadence of S4.11).
            start = rv
            if opts.send_initial_events is None:
                initial = rv == 0   # RV unset/0 without watch-list: state first (S1.29)
            else:
                initial = opts.send_initial_events  # watch-list served from etcd (S5.5-S5.7)
                if not initial and rv == 0:
                    start = await self.store(res).current_revision(prefix)
            gen = self.store(res).watch(prefix, start, pred, initial_state=initial,
                                        mark_initial_end=bool(opts.send_initial_events),
                                        progress=opts.allow_watch_bookmarks,
                                        progress_interval=min(BOOKMARK_FREQUENCY, max(timeout - 2, 0.5)))
            try:
                async for ev in gen:
                    if ev.type == "INITIAL_END":
                        if opts.allow_watch_bookmarks:  # S5.4, S5.8
                            await resp.write(jsonenc.watch_event("BOOKMARK", encode_obj(
                                res, objects.bookmark(res, ev.rv, initial_events_end=True))))
                    elif ev.type == "BOOKMARK":
                        await resp.write(frame("BOOKMARK", objects.bookmark(res, ev.rv)))
                    else:
                        await resp.write(frame(ev.type, ev.obj))
            except serr.StorageError as e:
                if e.code is serr.Code.EXPIRED:
                    st = errors.expired(f"too old resource version: {rv} ({e.current_rv})").status()
                else:
                    st = map_storage_error(e, res).status()
                await resp.write(jsonenc.watch_event("ERROR", jsonenc.dumps(st)))
            finally:
                await gen.aclose()

        task = asyncio.ensure_future(pump())
        self.server.watchers.add(task)
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError:
            task.cancel()
        except (ConnectionResetError, asyncio.CancelledError):
            task.cancel()
            raise
        finally:
            self.server.watchers.discard(task)
            if not task.done():
                task.cancel()
        try:
            await resp.write_eof()
        except ConnectionResetError:
            pass
        return resp

    # --- CREATE --------------------------------------------------------------

    async def create(self, request: web.Request, scope: RequestScope) -> web.Response:
        res = scope.resource
        obj = await self.decode_body(request, res)
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise errors.bad_request("metadata must be an object")
        if res.namespaced:
            body_ns = md.get("namespace")
            if body_ns and scope.namespace and body_ns != scope.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the "
                                         "namespace sent on the request")
            md["namespace"] = scope.namespace
        else:
            md.pop("namespace", None)
        if not md.get("name") and md.get("generateName"):
            md["name"] = validation.generate_name(md["generateName"])
        validation.validate_object(res.plural, res.kind, res.group, obj, namespaced=res.namespaced)
        if res.namespaced:
            await self.ensure_namespace(scope.namespace)
        obj = objects.prepare_create(res, obj)
        if dry_run(request):
            return self.respond_obj(request, res, obj, 201)
        key = res.key(self.server.etcd_prefix, scope.namespace, md["name"])
        try:
            out = await self.store(res).create(key, obj)
        except serr.StorageError as e:
            raise map_storage_error(e, res, md["name"]) from None
        await self.server.after_write(res, "ADDED", out)
        return self.respond_obj(request, res, out, 201)

    # --- UPDATE / PATCH ------------------------------------------------------

    async def update(self, request: web.Request, scope: RequestScope) -> web.Response:
        res = scope.resource
        obj = await self.decode_body(request, res)
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise errors.bad_request("metadata must be an object")
        if md.get("name") and md["name"] != scope.name:
            raise errors.bad_request(f"the name of the object ({md['name']}) does not match the name on "
                                     f"the URL ({scope.name})")
        md["name"] = scope.name
        if res.namespaced:
            if md.get("namespace") and md["namespace"] != scope.namespace:
                raise errors.bad_request("the namespace of the provided object does not match the "
                                         "namespace sent on the request")
            md["namespace"] = scope.namespace
        want_rv = md.get("resourceVersion") or None
        if want_rv is not None:
            want_rv = str(parse_resource_version(str(want_rv)))

        def apply(cur: Obj) -> Obj:
            if want_rv is not None and cur["metadata"].get("resourceVersion") != want_rv:
                raise serr.conflict(self.key(scope), "the object has been modified")
            return dict(obj)
        return await self._write(request, scope, apply, status_ok=200)

    async def patch(self, request: web.Request, scope: RequestScope) -> web.Response:
        res = scope.resource
        ctype = (request.content_type or "").lower()
        patchmod.check_patch_type(ctype, res.plural, res.custom)
        body = await self.read_body(request)

        def apply(cur: Obj) -> Obj:
            doc = {k: v for k, v in cur.items()}
            patched = patchmod.apply_patch(doc, ctype, body, res.plural, res.custom)
            if not isinstance(patched, dict):
                raise errors.bad_request("the patched object is not a JSON object")
            pmd = patched.get("metadata") or {}
            want = pmd.get("resourceVersion")
            if want and want != cur["metadata"].get("resourceVersion"):
                raise serr.conflict(self.key(scope), "the object has been modified")
            if pmd.get("name") not in (None, scope.name):
                raise errors.bad_request(f"the name of the object ({pmd.get('name')}) does not match the "
                                         f"name on the URL ({scope.name})")
            self.check_gvk(res, patched)
            return patched
        return await self._write(request, scope, apply, status_ok=200)

    async def _write(self, request: web.Request, scope: RequestScope,
                     make_new: Callable[[Obj], Obj], status_ok: int) -> web.Response:
        """Read-modify-CAS loop shared by update and patch (upstream GuaranteedUpdate).

        As upstream, the first attempt starts from the watch cache's copy when there is one, so
        a write is one etcd Txn; its failure branch returns the current object for the retry.
        A copy that may be stale is never the basis of an answer other than a successful CAS:
        an error, a no-op or a dry run computed from it is recomputed from etcd first."""
        res = scope.resource
        store = self.store(res)
        key = self.key(scope)
        cur = self._cached_copy(res, key)
        authoritative = False
        for _ in range(20):
            if cur is None:
                try:
                    cur = await store.get(key)
                except serr.StorageError as e:
                    raise map_storage_error(e, res, scope.name or "") from None
                authoritative = True
            try:
                new = make_new(jsonenc.loads(jsonenc.dumps(cur)))
                md = new.setdefault("metadata", {})
                md["name"] = scope.name
                if res.namespaced:
                    md["namespace"] = scope.namespace
                new = objects.prepare_update(res, new, cur, scope.subresource)
                validation.validate_object(res.plural, res.kind, res.group, new, namespaced=res.namespaced,
                                           old=cur)
                no_op = _same_content(new, cur)
                dry = dry_run(request)
            except (errors.StatusError, serr.StorageError):  # e.g. a precondition's conflict
                if not authoritative:
                    cur = None
                    continue
                raise
            if (no_op or dry) and not authoritative:
                cur = None
                continue
            if no_op:
                return self.respond_obj(request, res, cur, status_ok)  # no-op: RV unchanged, as upstream
            if dry:
                return self.respond_obj(request, res, new, status_ok)
            if self._finalized(new):
                out, _ = await store.delete(key)
                await self.server.after_write(res, "DELETED", out)
                return self.respond_obj(request, res, new, status_ok)
            try:
                out, current = await store.try_update(key, new, int(cur["metadata"]["resourceVersion"]))
            except serr.StorageError as e:
                raise map_storage_error(e, res, scope.name or "") from None
            if out is None:
                cur, authoritative = current, True  # changed under us: retry from etcd's state
                continue
            await self.server.after_write(res, "MODIFIED", out)
            return self.respond_obj(request, res, out, status_ok)
        raise errors.conflict(res.plural, scope.name or "", res.group, "too many concurrent updates")

    def _cached_entry(self, res: Resource, key: str):
        """(cacher, entry) for an object the ready watch cache holds, else None."""
        cacher = self.server.cacher_for(res)
        if cacher is None or not cacher.ready:
            return None
        e = cacher.wc.store.get(key)
        return (cacher, e) if e is not None else None

    def _cached_copy(self, res: Resource, key: str) -> Obj | None:
        """The watch cache's copy of an object (with its RV), if the cache is ready and holds it."""
        hit = self._cached_entry(res, key)
        return jsonenc.loads(hit[0].wire(hit[1].data)) if hit is not None else None

    @staticmethod
    def _finalized(obj: Obj) -> bool:
        """An object being deleted whose last finalizer was just removed goes away."""
        md = obj.get("metadata") or {}
        return bool(md.get("deletionTimestamp")) and not md.get("finalizers")

    # --- DELETE --------------------------------------------------------------

    async def delete_options(self, request: web.Request) -> Obj:
        body = await self.read_body(request)
        opts: Obj = {}
        ctype = (request.content_type or "").lower() if request.headers.get("Content-Type") else ""
        if ctype == protobuf.MEDIA_TYPE and body:
            try:
                opts = protobuf.decode_delete_options(body)
            except protobuf.ProtobufError as e:
                raise errors.bad_request(f"invalid DeleteOptions: {e}") from None
        elif body.strip():
            try:
                opts = jsonenc.loads(body)
            except ValueError as e:
                raise errors.bad_request(f"invalid DeleteOptions: {e}") from None
            if not isinstance(opts, dict):
                raise errors.bad_request("invalid DeleteOptions: not an object")
        pre = dict(opts.get("preconditions") or {})
        for q in ("preconditions.uid", "preconditions.resourceVersion"):
            if q in request.query:
                pre[q.split(".", 1)[1]] = request.query[q]
        opts["preconditions"] = pre
        for q in ("propagationPolicy", "orphanDependents"):
            if q in request.query:
                opts[q] = request.query[q]
        # dryRun may come in the body (client-go, kubectl --dry-run=server) or the query.
        opts["dryRun"] = list(opts.get("dryRun") or []) + request.query.getall("dryRun", [])
        validate_delete_options(opts)
        return opts

    async def delete(self, request: web.Request, scope: RequestScope) -> web.Response:
        res = scope.resource
        opts = await self.delete_options(request)
        pre = opts["preconditions"]
        out, status = await self.delete_one(request, res, scope.namespace, scope.name or "",
                                            uid=pre.get("uid"), rv=pre.get("resourceVersion"),
                                            dry=bool(opts["dryRun"]))
        return self.respond_obj(request, res, out, status)

    async def delete_one(self, request: web.Request, res: Resource, namespace: str | None, name: str,
                         uid: str | None = None, rv: str | None = None, dry: bool = False) -> tuple[Obj, int]:
        """Delete one object; objects with finalizers only get a deletionTimestamp (202)."""
        store = self.store(res)
        key = res.key(self.server.etcd_prefix, namespace, name)
        try:
            cur = await store.get(key)
        except serr.StorageError as e:
            raise map_storage_error(e, res, name) from None
        md = cur["metadata"]
        if uid is not None and md.get("uid") != uid:
            raise errors.conflict(res.plural, name, res.group,
                                  f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                  f"{md.get('uid', '')}")
        if rv is not None and md.get("resourceVersion") != rv:
            raise errors.conflict(res.plural, name, res.group,
                                  f"Precondition failed: ResourceVersion in precondition: {rv}, "
                                  f"ResourceVersion in object meta: {md.get('resourceVersion')}")
        if dry:
            return cur, 200
        if md.get("finalizers") and res.plural != "namespaces":
            if md.get("deletionTimestamp"):
                return cur, 202

            def mark(o: Obj) -> Obj:
                o["metadata"]["deletionTimestamp"] = objects.now_rfc3339()
                o["metadata"]["deletionGracePeriodSeconds"] = 0
                o["metadata"].pop("resourceVersion", None)
                return objects.canonical(res, o)
            try:
                out = await store.guaranteed_update(key, mark)
            except serr.StorageError as e:
                raise map_storage_error(e, res, name) from None
            await self.server.after_write(res, "MODIFIED", out)
            return out, 202
        try:
            out, _ = await store.delete(key, uid=uid, rv=rv)
        except serr.StorageError as e:
            raise map_storage_error(e, res, name) from None
        await self.server.after_write(res, "DELETED", out)
        return out, 200

    async def deletecollection(self, request: web.Request, scope: RequestScope) -> web.StreamResponse:
        res = scope.resource
        opts = self.list_options(request, res, watch=False)
        dopts = await self.delete_options(request)
        pred, exact_name = self.predicate(res, opts)
        pred = self.with_shard(pred, self.shard_selector(opts))  # S7.1: deletecollection lists first
        opts.limit = 0
        opts.continue_ = ""
        result = await self.list_from_etcd(scope, opts, pred, exact_name)
        deleted: list[Obj] = []
        for obj in result.items:
            md = obj["metadata"]
            try:
                out, _ = await self.delete_one(request, res, md.get("namespace"), md["name"],
                                               dry=bool(dopts["dryRun"]))
            except errors.StatusError as e:
                if e.code == 404:
                    continue  # deleted concurrently
                raise
            deleted.append(out)
        meta = {"resourceVersion": str(result.resource_version)}
        return await self.stream_list(request, res, meta, (encode_list_item(res, o) for o in deleted))


_PROPAGATION = ("Foreground", "Background", "Orphan")


def validate_delete_options(opts: Obj) -> None:
    """Upstream ValidateDeleteOptions: 422 on DeleteOptions.meta.k8s.io."""
    causes = []
    policy = opts.get("propagationPolicy")
    if opts.get("orphanDependents") is not None and policy is not None:
        causes.append(errors.field_error("FieldValueInvalid", "propagationPolicy",
                                         "orphanDependents and deletionPropagation cannot be both set", policy))
    if policy is not None and policy not in _PROPAGATION:
        causes.append(errors.field_error("FieldValueNotSupported", "propagationPolicy",
                                         "supported values: " + ", ".join(f'"{p}"' for p in _PROPAGATION + ("nil",)),
                                         policy))
    for v in opts.get("dryRun") or []:
        if v != "All":
            causes.append(errors.field_error("FieldValueNotSupported", "dryRun", 'supported values: "All"', v))
    if causes:
        raise errors.invalid("DeleteOptions", "", "meta.k8s.io", causes)


def dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    for v in values:
        if v != "All":
            raise errors.invalid("DeleteOptions" if request.method == "DELETE" else "CreateOptions", "",
                                 "meta.k8s.io",
                                 [errors.field_error("FieldValueNotSupported", "dryRun",
                                                     'supported values: "All"', v)])
    return bool(values)


def _same_content(new: Obj, cur: Obj) -> bool:
    a = dict(new)
    b = dict(cur)
    a["metadata"] = {k: v for k, v in (a.get("metadata") or {}).items() if k != "resourceVersion"}
    b["metadata"] = {k: v for k, v in (b.get("metadata") or {}).items() if k != "resourceVersion"}
    return a == b
