"""GET and LIST: options parsed and validated here, then the resource's storage contract answers
(the watch cache or etcd, decided by `cache.delegator`); lists are streamed item by item."""
from __future__ import annotations

from apiserver.httpstack import web

from cache.reads import indexable
from machinery import jsonenc
from machinery.encoding import encode_list_item
from machinery.listoptions import ListOptions
from storage import errors as serr
from storage.interface import FRONT_FRAMED_HEADER, ListPage, ListRequest

from ..status import map_storage_error
from .common import (Context, Obj, RequestScope, conversion, converted, json_response, list_options, parse_shard,
                     predicate, respond_obj, sent_selectors, stream_list, write_framed)


async def get(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    res = scope.resource
    rv_s = request.query.get("resourceVersion") or None
    try:
        got = await ctx.storage(res).get_at(ctx.key(scope), rv_s)
    except serr.StorageError as e:
        raise map_storage_error(e, res, scope.name or "") from None
    if isinstance(got, bytes):  # the watch cache's wire bytes
        if conversion(request) is not None:
            return respond_obj(request, res, jsonenc.loads(got))
        return json_response(got + b"\n")
    return respond_obj(request, res, got)


def list_request(scope: RequestScope, opts: ListOptions) -> ListRequest:
    """The storage request of a LIST (or the list step of a deletecollection)."""
    res = scope.resource
    pred, exact_name = predicate(opts)
    return ListRequest(resource_version=opts.resource_version, resource_version_match=opts.resource_version_match,
                       limit=opts.limit, continue_=opts.continue_, predicate=pred, exact_name=exact_name,
                       namespace=scope.namespace, shard=parse_shard(opts),
                       label_requirements=indexable(opts.labels) if opts.fields.empty else None,
                       single_key=exact_name is not None and (not res.namespaced or scope.namespace is not None))


async def list_(ctx: Context, request: web.Request, scope: RequestScope) -> web.StreamResponse:
    res = scope.resource
    req = list_request(scope, list_options(ctx, request, res, watch=False))
    req.selectors = sent_selectors(request)
    target = conversion(request)
    req.runs = target is None
    try:
        page = await ctx.storage(res).get_list(ctx.prefix(scope), req)
    except serr.StorageError as e:
        raise map_storage_error(e, res) from None

    def meta() -> Obj:
        m: Obj = {"resourceVersion": str(page.resource_version)}
        if page.continue_ is not None:
            m["continue"] = page.continue_
            if page.remaining is not None:
                m["remainingItemCount"] = page.remaining
        if req.shard is not None:
            m["shardInfo"] = {"selector": str(req.shard)}  # S7.3 (custom resources too, unlike 1.36)
        return m
    if request.headers.get(FRONT_FRAMED_HEADER) == "true" and target is None and page.stream is None:
        return await write_framed(request, meta(), *framed_items(res, scope, page))   # a front asks (front.wire)
    if page.stream is not None:  # the front: items arrive from a shard while the list is written
        if target is None:
            return await stream_list(request, res, meta, page.stream, page.stream_size)
        page.raw = [b async for batch in page.stream for b in batch]
    if target is not None:
        return json_response(converted(request, res, target, list(page.items()), meta(), is_list=True))
    items = page.raw if page.raw is not None else (encode_list_item(res, o) for o in page.objects or ())
    return await stream_list(request, res, meta(), items)


def framed_items(res, scope: RequestScope, page: ListPage) -> tuple[list[str], list[bytes], int]:
    """A page's keys, its items and how much of each key to cut: what is left is the key below the list's prefix
    (`namespace/name` across namespaces, else `name`)."""
    if page.raw is not None and page.keys is not None:
        return page.keys(), page.raw, page.key_cut
    objs = page.items()
    across = res.namespaced and scope.namespace is None
    keys = [f"{o['metadata']['namespace']}/{o['metadata']['name']}" if across else o["metadata"]["name"]
            for o in objs]
    raw = page.raw if page.raw is not None else [encode_list_item(res, o) for o in objs]
    return keys, raw, 0
