"""What the endpoints share: the request scope, request bodies, list options and selectors, responses."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable

from apiserver.httpstack import web

from cache.delegator import CacheDelegator
from ext import framed
from machinery import bodies, errors, jsonenc, protobuf, tables
from machinery import shard_selector
from machinery.encoding import encode_obj
from machinery.listoptions import ListOptions, parse_list_options
from machinery.resources import BUILTINS, REVIEWS, Registry, Resource
from machinery.selectors import field_selectors_for
from storage.interface import FRONT_FRAMED_HEADER, FRONT_FRAMED_SIZE_HEADER

Obj = dict[str, Any]

# Upstream refuses request bodies over 3 MiB (DESIGN.md "Limits").
MAX_BODY_BYTES = 3 * 1024 * 1024


@dataclass
class RequestScope:
    """What the router resolved from the URL."""
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str


@dataclass
class Context:
    """What endpoints need from the server, and nothing more."""
    registry: Registry
    etcd_prefix: str
    storage: Callable[[Resource], CacheDelegator]                 # the resource's storage contract
    after_write: Callable[[Resource, str, Obj], Awaitable[None]]  # controllers' reaction to a write
    watch_list_enabled: bool                                      # S5.3: served by the watch cache only

    def key(self, scope: RequestScope, name: str | None = None) -> str:
        return scope.resource.key(self.etcd_prefix, scope.namespace, name or scope.name or "")

    def prefix(self, scope: RequestScope) -> str:
        return scope.resource.prefix(self.etcd_prefix, scope.namespace)


# --- request bodies ----------------------------------------------------------------------------

async def read_body(request: web.Request) -> bytes:
    """The whole body, within MAX_BODY_BYTES (413 beyond); read once: a handler that looked at the body
    before handing the request on (the node tier's fast renewals) leaves it here for the next."""
    kept = request.get("body")
    if kept is not None:
        return kept
    body = await _read_whole(request)
    request["body"] = body
    return body


async def _read_whole(request: web.Request) -> bytes:
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


async def decode_body(request: web.Request, res: Resource) -> Obj:
    body = await read_body(request)
    # No Content-Type means the first supported type, JSON (upstream NegotiateInputSerializer);
    # aiohttp would report application/octet-stream.
    ctype = request.content_type.lower() if request.headers.get("Content-Type") else "application/json"
    if ctype in ("application/yaml", "application/apply-patch+yaml"):
        obj = bodies.decode_yaml_object(body, res.kind)  # bounded: nesting, aliases (machinery/yamlconv)
    elif ctype in ("application/json", "*/*", ""):
        obj = bodies.decode_json_object(body, res.kind)
    elif ctype == protobuf.MEDIA_TYPE and not res.custom and protobuf.supports(res.api_version, res.kind):
        # client-go's typed clientsets send built-in kinds as protobuf (custom
        # resources have no protobuf form: 415 as upstream).
        try:
            obj = protobuf.decode(body, res.api_version, res.kind)
            bodies.check_depth(obj)
        except protobuf.ProtobufError as e:
            raise errors.bad_request(
                f"the object provided is unrecognized (must be of type {res.kind}): {e}") from None
        except (bodies.TooDeep, RecursionError):  # e.g. a CRD's JSONSchemaProps nested without end
            raise errors.bad_request(f"the object provided is unrecognized (must be of type {res.kind}): "
                                     f"{bodies.too_deep_message()}") from None
    else:
        raise errors.StatusError(415, "UnsupportedMediaType",
                                 f"the body of the request was in an unknown format - accepted media "
                                 f"types include: {accepted_media_types(res)}")
    check_gvk(res, obj)
    return obj


def accepted_media_types(res: Resource) -> str:
    types = ["application/json", "application/yaml"]
    if not res.custom and protobuf.supports(res.api_version, res.kind):
        types.append(protobuf.MEDIA_TYPE)
    return ", ".join(types)


def check_gvk(res: Resource, obj: Obj) -> None:
    """kind/apiVersion may be omitted (defaulted from the URL) but must not differ (400)."""
    av = obj.get("apiVersion")
    kind = obj.get("kind")
    if not res.custom and ((av and av != res.api_version) or (kind and kind != res.kind)):
        raise errors.bad_request(scheme_mismatch(res, av or res.api_version, kind or res.kind))
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


def scheme_mismatch(res: Resource, av: str, kind: str) -> str:
    """Upstream's decoder error for a built-in body of another kind or version: a conversion error when
    the scheme knows the body's kind, else "no kind registered" (checked against kube-apiserver v1.37.2)."""
    version = av.rpartition("/")[2]
    head = f'{kind} in version "{version}" cannot be handled as a {res.kind}'
    if any(r.kind == kind and r.api_version == av for r in (*BUILTINS, *REVIEWS)):
        internal = res.group.split(".")[0] if res.group else "core"
        return f"{head}: converting ({version}.{kind}) to ({internal}.{res.kind}): unknown conversion"
    return f'{head}: no kind "{kind}" is registered for version "{av}" in scheme "pkg/runtime/scheme.go:111"'


def dry_run(request: web.Request) -> bool:
    values = request.query.getall("dryRun", [])
    causes = dry_run_errors(values)
    if causes:
        raise errors.invalid("DeleteOptions" if request.method == "DELETE" else "CreateOptions", "",
                             "meta.k8s.io", causes)
    return bool(values)


def dry_run_errors(values: list[str]) -> list[dict]:
    """Upstream ValidateDryRun: one error carrying the whole list when any value is not "All"."""
    if all(v == "All" for v in values):
        return []
    return [errors.field_error("FieldValueNotSupported", "dryRun", 'supported values: "All"', list(values))]


# --- list options and selectors ------------------------------------------------------------------

def list_options(ctx: Context, request: web.Request, res: Resource, *, watch: bool) -> ListOptions:
    return parse_list_options(request.query, watch=watch, watch_list_enabled=ctx.watch_list_enabled,
                              field_selectors=field_selectors_for("" if res.custom else res.plural,
                                                                  res.namespaced))


def predicate(opts: ListOptions) -> tuple[Callable[[Obj], bool] | None, str | None]:
    """(object predicate of the label and field selectors or None, exact name pinned by the field selector)."""
    ls, fs = opts.labels, opts.fields
    if ls.empty and fs.empty:
        return None, None

    def pred(obj: Obj) -> bool:
        return ls.matches((obj.get("metadata") or {}).get("labels") or {}) and fs.matches(obj)
    return pred, fs.exact_name()


def parse_shard(opts: ListOptions):
    """The request's KEP-5866 shardSelector (S7.1), or None; 400 if invalid (S7.9: upstream 500)."""
    try:
        return shard_selector.parse_shard_selector(opts.shard_selector or "")
    except shard_selector.ShardSelectorError as e:
        raise shard_selector.status_error(e) from None


def sent_selectors(request: web.Request, name: str | None = None) -> dict[str, str]:
    """labelSelector / fieldSelector as sent, the watched object's name (a path naming it) added to the field
    selector: what a front forwards to its shards."""
    sel = {k: request.query[k] for k in ("labelSelector", "fieldSelector") if request.query.get(k)}
    if name:
        sel["fieldSelector"] = ",".join(f for f in (f"metadata.name={name}", sel.get("fieldSelector")) if f)
    return sel


# --- responses -----------------------------------------------------------------------------------

def conversion(request: web.Request) -> tables.Target | None:
    """The Table / PartialObjectMetadata(List) the Accept header asks for (upstream's negotiation)."""
    return tables.negotiate(request.headers.get("Accept"))


def include_object(request: web.Request, target: tables.Target | None) -> str:
    """TableOptions.includeObject, validated as upstream does for a Table request (400 otherwise)."""
    value = request.query.get("includeObject", "")
    if target is not None and target.kind == "Table":
        msg = tables.include_object_error(value)
        if msg:
            raise errors.bad_request(msg)
    return value


def converted(request: web.Request, res: Resource, target: tables.Target, objects: list[Obj], list_meta: Obj,
              is_list: bool) -> bytes:
    """handlers/response.go transformResponseObject: the answer as a Table, a PartialObjectMetadata or a
    PartialObjectMetadataList (406 when that does not fit a single object / a list)."""
    inc = include_object(request, target)
    if target.kind == "PartialObjectMetadataList" and res.custom and not is_list:
        # Upstream: an Unstructured passes as a ListInterface, then EachListItem fails (a plain 500).
        raise errors.StatusError(500, "", "content is not a list")
    msg = tables.not_acceptable_message(target, res, is_list)
    if msg:
        raise errors.StatusError(406, "NotAcceptable", msg)
    if target.kind == "Table":
        doc = tables.to_table(res, objects, list_meta, inc, api_version=target.group_version)
    elif target.kind == "PartialObjectMetadataList":
        doc = tables.partial_object_list(objects, list_meta, target.group_version)
    else:
        doc = tables.partial_object(objects[0], target.group_version)
    return jsonenc.dumps(doc) + b"\n"


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def respond_obj(request: web.Request, res: Resource, obj: Obj, status: int = 200) -> web.Response:
    target = conversion(request)
    if target is not None:
        meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
        return json_response(converted(request, res, target, [obj], meta, is_list=False), status)
    return json_response(encode_obj(res, obj) + b"\n", status)


async def stream_list(request: web.Request, res: Resource, meta: Obj | Callable[[], Obj],
                      items: Iterable[bytes] | AsyncIterator[list[bytes] | bytes],
                      size: tuple[int, int] | None = None) -> web.StreamResponse:
    """Write the list item by item (streaming encoding, S6.1-S6.2). Items may arrive asynchronously in batches (the
    front), with `meta` then a function called where the envelope writes it (a custom resource's list: after the
    items), and `size` (their count and bytes) if known before they arrive."""
    resp = web.StreamResponse(status=200)
    resp.content_type = "application/json"
    enc = jsonenc.iter_unstructured_list if res.custom else jsonenc.iter_list
    if hasattr(items, "__aiter__"):
        await _stream_async(request, resp, res, enc, meta, items, size)
        return resp
    if isinstance(items, list):
        # Items already encoded (a cache's page): the length is known, so no chunk framing, and each ~64 KiB piece
        # is one copy of its items (ext.framed.join_piece).
        head = next(iter(enc(res.list_kind, res.api_version, meta, ())))
        tail = list(enc(res.list_kind, res.api_version, meta, ()))[-1]
        resp.content_length = len(head) + sum(map(len, items)) + max(len(items) - 1, 0) + len(tail)
        await resp.prepare(request)
        await resp.write(head)
        start = 0
        while start < len(items):
            piece, start = framed.join_piece(items, start, 64 * 1024, start > 0)
            await resp.write(piece)
        await resp.write(tail)
        await resp.write_eof()
        return resp
    await resp.prepare(request)
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


async def write_framed(request: web.Request, meta: Obj, keys: list[str], items: list[bytes],
                       cut: int = 0) -> web.StreamResponse:
    """A list key-framed for a front (ext.framed: its metadata, then each item with its key `keys[i][cut:]`, in
    ~64 KiB writes), with its Content-Length (the front reads each piece as it arrives, without joining chunks)."""
    records, nbytes = framed.framed_size(keys, items, cut)
    head = framed.frame_meta(jsonenc.dumps(meta))
    resp = web.StreamResponse(status=200, headers={FRONT_FRAMED_HEADER: "true",
                                                   FRONT_FRAMED_SIZE_HEADER: f"{len(items)},{nbytes}"})
    resp.content_type = "application/octet-stream"
    resp.content_length = len(head) + records + len(framed.END_RECORD)
    await resp.prepare(request)
    await resp.write(head)
    start = 0
    while start < len(items):
        piece, start = framed.frame_piece(keys, items, start, cut, 64 * 1024)
        await resp.write(piece)
    await resp.write(framed.END_RECORD)
    await resp.write_eof()
    return resp


def _wrong_size(res: Resource, written: int, expected: int) -> None:
    """The sizes the shards announced do not add up (a bug): fail before the answer's last byte is written, so the
    client sees a cut answer, never a wrong one of the announced length."""
    raise RuntimeError(f"list of {res.plural}: {written} bytes before the end, {expected} announced")


# A run of items at least this big is written as it is; smaller ones are gathered into ~64 KiB writes.
_WRITE_AS_IS = 16 * 1024


async def _stream_async(request: web.Request, resp: web.StreamResponse, res: Resource, enc, meta: Callable[[], Obj],
                        batches: AsyncIterator[list[bytes] | bytes], size: tuple[int, int] | None) -> None:
    """The front's lists: batches of items, or comma-joined runs (each after the first with its leading comma)
    written as they arrive. With `size` known the answer has a Content-Length (the front's merged lists: their
    metadata is final before the items arrive), so no chunk framing is added to each write, and a run is written
    without a copy."""
    head = next(iter(enc(res.list_kind, res.api_version, meta() if not res.custom else None, ())))
    expected = tail = None
    if size is not None:
        count, nbytes = size
        tail = list(enc(res.list_kind, res.api_version, meta(), ()))[-1]
        expected = resp.content_length = len(head) + nbytes + max(count - 1, 0) + len(tail)
        expected -= len(tail)   # what comes before the tail
    await resp.prepare(request)
    buf: list[bytes] = [head]
    pending = written = len(head)
    first = True
    async for batch in batches:
        if not batch:
            continue
        if isinstance(batch, bytes):
            run = batch
        else:
            run = (b"" if first else b",") + b",".join(batch)
        first = False
        written += len(run)
        if expected is not None and written > expected:
            _wrong_size(res, written, expected)
        if len(run) >= _WRITE_AS_IS:
            if buf:
                await resp.write(b"".join(buf))
                buf, pending = [], 0
            await resp.write(run)
            continue
        buf.append(run)
        pending += len(run)
        if pending >= 64 * 1024:
            await resp.write(b"".join(buf))
            buf, pending = [], 0
    if expected is not None and written != expected:
        _wrong_size(res, written, expected)
    buf.append(tail if tail is not None else list(enc(res.list_kind, res.api_version, meta(), ()))[-1])
    await resp.write(b"".join(buf))
    await resp.write_eof()
