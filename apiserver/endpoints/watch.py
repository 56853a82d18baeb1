"""WATCH: options parsed here; the storage contract serves the stream (the watch cache, or one etcd
watch per client with the cache off) into a `ResponseSink` over the HTTP response."""
from __future__ import annotations

import random
from typing import Callable

from apiserver.httpstack import web

from machinery import jsonenc
from machinery.encoding import WatchFrames
from machinery.listoptions import parse_resource_version
from machinery.resources import Resource
from storage import errors as serr
from storage.interface import FRONT_PREV_HEADER, FRONT_PROGRESS_HEADER, WatchRequest

from ..status import map_storage_error
from .common import (Context, Obj, RequestScope, conversion, include_object, list_options, parse_shard, predicate,
                     sent_selectors)

# Watch without timeoutSeconds: random in [minRequestTimeout, 2*minRequestTimeout] (S4.8).
MIN_REQUEST_TIMEOUT = 1800
# Above this many bytes waiting in the socket's buffer, events go through the watcher's queue
# (and its writer task's drain), so a slow client meets the S4.14 budget.
DIRECT_WRITE_LIMIT = 64 * 1024


class ResponseSink:
    """The watch's HTTP response: chunked JSON frames; storage errors after the start become ERROR
    events carrying their Status (S4.4)."""

    def __init__(self, request: web.Request, res: Resource):
        self.request = request
        self.res = res
        self.resp = web.StreamResponse(status=200)
        self.resp.content_type = "application/json"
        self.resp.enable_chunked_encoding()
        self.started = False

    async def start(self) -> None:
        await self.resp.prepare(self.request)
        self.started = True

    async def write(self, data: bytes) -> None:
        await self.resp.write(data)

    async def fail(self, err: serr.StorageError) -> None:
        await self.resp.write(jsonenc.watch_event("ERROR", jsonenc.dumps(map_storage_error(err, self.res).status())))

    def direct_writer(self) -> Callable[[bytes], bool] | None:
        transport = self.request.transport
        if transport is None:
            return None

        def write(data: bytes) -> bool:
            if transport.is_closing() or transport.get_write_buffer_size() > DIRECT_WRITE_LIMIT:
                return False
            transport.write(http_chunk(data))
            return True
        return write

    async def finish(self) -> web.StreamResponse:
        try:
            await self.resp.write_eof()
        except ConnectionResetError:
            pass
        return self.resp


def http_chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding chunk (what aiohttp writes for a chunked response): the
    dispatcher's direct writes bypass aiohttp's writer."""
    return b"%x\r\n%b\r\n" % (len(data), data)


async def watch(ctx: Context, request: web.Request, scope: RequestScope) -> web.StreamResponse:
    res = scope.resource
    opts = list_options(ctx, request, res, watch=True)
    pred, exact_name = predicate(opts)
    if scope.name:  # watch on a single object: /namespaces/x/configmaps?watch&fieldSelector=... or legacy
        exact_name = scope.name
    if exact_name is not None:
        inner = pred

        def pred(obj: Obj, _n=exact_name, _p=inner) -> bool:
            return (obj.get("metadata") or {}).get("name") == _n and (_p is None or _p(obj))
    if opts.resource_version:
        parse_resource_version(opts.resource_version)
    target = conversion(request)
    req = WatchRequest(
        frames=WatchFrames(res, include_object=include_object(request, target), target=target),
        timeout=opts.timeout_seconds or random.uniform(MIN_REQUEST_TIMEOUT, 2 * MIN_REQUEST_TIMEOUT),
        resource_version=opts.resource_version, send_initial_events=opts.send_initial_events,
        allow_bookmarks=opts.allow_watch_bookmarks, predicate=pred, shard=parse_shard(opts),
        selectors=sent_selectors(request, scope.name), progress=request.headers.get(FRONT_PROGRESS_HEADER) == "true",
        prev=request.headers.get(FRONT_PREV_HEADER) == "true")
    sink = ResponseSink(request, res)
    try:
        await ctx.storage(res).serve_watch(ctx.prefix(scope), req, sink)
    except serr.StorageError as e:
        if not sink.started:
            raise map_storage_error(e, res) from None  # before the stream: an HTTP error (S1.33)
        try:
            await sink.fail(e)
        except ConnectionResetError:
            pass
    except ConnectionResetError:
        if not sink.started:
            raise
        # The client hung up mid-stream: nothing to answer and, as upstream, nothing to log (aiohttp logged
        # a traceback per watch that ended this way).
    return await sink.finish()
