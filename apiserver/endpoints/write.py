"""Writes: create, update, patch (one read-modify-CAS loop), delete (preconditions, finalizers) and
deletecollection. Every write is a compare-and-swap on etcd through the resource's storage
contract; the cache learns of it from its etcd watch, like every other apiserver would."""
from __future__ import annotations

import datetime as _dt
from typing import Callable

from apiserver.httpstack import web

from machinery import bodies, defaults, errors, gocompat, jsonenc, objects, patch as patchmod, protobuf, typed, validation
from machinery.encoding import encode_list_item
from machinery.listoptions import parse_resource_version
from machinery.resources import Resource
from storage import errors as serr

from ..status import map_storage_error
from .common import (Context, Obj, RequestScope, check_gvk, decode_body, dry_run, dry_run_errors, json_response, list_options,
                     read_body, respond_obj, stream_list)
from .read import list_request


async def ensure_namespace(ctx: Context, namespace: str) -> None:
    """Creates need an existing namespace. As upstream's NamespaceLifecycle admission, the
    namespace cache answers when it holds the namespace; otherwise etcd is asked (a namespace
    just created may not have reached the cache: never a false 404)."""
    ns_res = ctx.registry.lookup("", "v1", "namespaces")
    key = ns_res.key(ctx.etcd_prefix, None, namespace)
    storage = ctx.storage(ns_res)
    if storage.holds(key):
        return
    try:
        await storage.get(key)
    except serr.StorageError as e:
        if e.code is serr.Code.KEY_NOT_FOUND:
            raise errors.not_found("namespaces", namespace) from None
        raise map_storage_error(e, ns_res, namespace) from None


async def decode_in_scope(request: web.Request, scope: RequestScope) -> tuple[Obj, Obj]:
    """The request's object and its metadata, bound to the URL's name (an update) and namespace:
    400 if the body names others."""
    obj = await decode_body(request, scope.resource)
    md = obj.setdefault("metadata", {})
    if not isinstance(md, dict):
        res = scope.resource
        if res.custom:
            raise errors.bad_request("metadata must be an object")
        # upstream's typed decoder (transformDecodeError with the body's group version kind)
        raise errors.bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                                 + gocompat.unmarshal_type_error(gocompat.json_type_word(md), "v1.ObjectMeta",
                                                                 f"{res.kind}.metadata"))
    if not scope.resource.custom:
        try:
            typed.check_object(obj, scope.resource.api_version, scope.resource.kind)
        except bodies.TypedDecodeError as e:
            res = scope.resource
            raise errors.bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                                     + e.json_error()) from None
    if scope.name is not None:
        if md.get("name") and md["name"] != scope.name:
            raise errors.bad_request(f"the name of the object ({md['name']}) does not match the name on "
                                     f"the URL ({scope.name})")
        md["name"] = scope.name
    if scope.resource.namespaced:
        body_ns = md.get("namespace")
        if body_ns and scope.namespace and body_ns != scope.namespace:
            raise errors.bad_request("the namespace of the provided object does not match the "
                                     "namespace sent on the request")
        md["namespace"] = scope.namespace
    return obj, md


async def create(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    res = scope.resource
    obj, md = await decode_in_scope(request, scope)
    if not res.namespaced:
        md.pop("namespace", None)
    if not md.get("name") and md.get("generateName"):
        md["name"] = validation.generate_name(md["generateName"])
    validation.validate_object(res.plural, res.kind, res.group, obj, namespaced=res.namespaced)
    if res.namespaced:
        await ensure_namespace(ctx, scope.namespace)
    if (res.group, res.plural) == ("", "pods"):
        await admit_pod_priority(ctx, obj)
    obj = objects.prepare_create(res, obj)
    if dry_run(request):
        return respond_obj(request, res, obj, 201)
    key = res.key(ctx.etcd_prefix, scope.namespace, md["name"])
    try:
        out = await ctx.storage(res).create(key, obj)
    except serr.StorageError as e:
        raise map_storage_error(e, res, md["name"]) from None
    await ctx.after_write(res, "ADDED", out)
    return respond_obj(request, res, out, 201)


async def update(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    obj, md = await decode_in_scope(request, scope)
    want_rv = md.get("resourceVersion") or None
    if want_rv is not None:
        want_rv = str(parse_resource_version(str(want_rv)))

    want_uid = md.get("uid") or None

    def apply(cur: Obj) -> Obj:
        if want_rv is not None and cur["metadata"].get("resourceVersion") != want_rv:
            raise serr.conflict(ctx.key(scope), "the object has been modified")
        if want_uid is not None and cur["metadata"].get("uid") != want_uid:
            # A uid in the body is a precondition (upstream's update hands it to the etcd3 store).
            key = ctx.key(scope)
            raise serr.conflict(key, f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, "
                                     f"AdditionalErrorMsg: Precondition failed: UID in precondition: {want_uid}, "
                                     f"UID in object meta: {cur['metadata'].get('uid', '')}")
        return dict(obj)
    return await _write(ctx, request, scope, apply, status_ok=200)


async def patch(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    res = scope.resource
    ctype = (request.content_type or "").lower()
    patchmod.check_patch_type(ctype, res.plural, res.custom)
    body = await read_body(request)

    def apply(cur: Obj) -> Obj:
        doc = {k: v for k, v in cur.items()}
        patched = patchmod.apply_patch(doc, ctype, body, res.plural, res.custom)
        if not isinstance(patched, dict):
            raise errors.bad_request("the patched object is not a JSON object")
        check_patched(res, patched, ctype, body)
        pmd = patched.get("metadata") or {}
        want = pmd.get("resourceVersion")
        if want and want != cur["metadata"].get("resourceVersion"):
            raise serr.conflict(ctx.key(scope), "the object has been modified")
        if pmd.get("name") not in (None, scope.name):
            raise errors.bad_request(f"the name of the object ({pmd.get('name')}) does not match the "
                                     f"name on the URL ({scope.name})")
        check_gvk(res, patched)
        return patched
    return await _write(ctx, request, scope, apply, status_ok=200)


def check_patched(res: Resource, patched: Obj, ctype: str, body: bytes) -> None:
    """What upstream's typed decoding of the patched object refuses (422 `patch: Invalid value`): an
    apiVersion or kind that is not a string, metadata that is not an object. A strategic merge patch is
    converted from the patch map (its text is the map's %v); the other two decode the patched JSON."""
    bad = [(f, patched[f]) for f in ("apiVersion", "kind") if patched.get(f) is not None
           and not isinstance(patched[f], str)]
    md = patched.get("metadata")
    if md is not None and not isinstance(md, dict):
        bad.append(("metadata", md))
    if not bad:
        if not res.custom:
            try:
                typed.check_object(patched, res.api_version, res.kind)
            except bodies.TypedDecodeError as e:
                smp = ctype.split(";", 1)[0].strip() == patchmod.STRATEGIC_MERGE_PATCH
                detail = e.converter_error() if smp else e.json_error()
                shown = gocompat.format_v(jsonenc.loads(body)) if smp else jsonenc.dumps(patched).decode()
                raise errors.invalid("", "", "", [errors.field_error("FieldValueInvalid", "patch", detail, shown)]) \
                    from None
        return
    field, value = bad[0]
    word = gocompat.json_type_word(value)
    if ctype.split(";", 1)[0].strip() == patchmod.STRATEGIC_MERGE_PATCH:
        go = {"number": "float64" if isinstance(value, float) else "int64", "array": "slice", "object": "map"
              }.get(word, word)
        detail = (f"cannot convert {go} to string" if field != "metadata" else f"cannot restore struct from: {go}")
        shown = gocompat.format_v(jsonenc.loads(body))
    else:
        detail = ("couldn't get version/kind; json parse error: "
                  + gocompat.unmarshal_type_error(word, "string", f".{field}") if field != "metadata" else
                  gocompat.unmarshal_type_error(word, "v1.ObjectMeta", f"{res.kind}.metadata"))
        shown = jsonenc.dumps(patched).decode()
    raise errors.invalid("", "", "", [errors.field_error("FieldValueInvalid", "patch", detail, shown)])


async def _write(ctx: Context, request: web.Request, scope: RequestScope,
                 make_new: Callable[[Obj], Obj], status_ok: int,
                 present: Callable[[Obj, int], web.Response] | None = None) -> web.Response:
    """Read-modify-CAS loop shared by update and patch (upstream GuaranteedUpdate).

    As upstream, the first attempt starts from the watch cache's copy when there is one, so
    a write is one etcd Txn; its failure branch returns the current object for the retry.
    A copy that may be stale is never the basis of an answer other than a successful CAS:
    an error, a no-op or a dry run computed from it is recomputed from etcd first. `present` turns the
    answer into the response (a subresource's view of the object); the object itself by default."""
    res = scope.resource
    if present is None:
        def present(obj: Obj, code: int) -> web.Response:
            return respond_obj(request, res, obj, code)
    store = ctx.storage(res)
    key = ctx.key(scope)
    cur = store.cached_object(key)
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
            return present(cur, status_ok)  # no-op: RV unchanged, as upstream
        if dry:
            return present(new, status_ok)
        if _finalized(new):
            out, _ = await store.delete(key)
            await ctx.after_write(res, "DELETED", out)
            return present(new, status_ok)
        try:
            out, current = await store.try_update(key, new, int(cur["metadata"]["resourceVersion"]))
        except serr.StorageError as e:
            raise map_storage_error(e, res, scope.name or "") from None
        if out is None:
            cur, authoritative = current, True  # changed under us: retry from etcd's state
            continue
        await ctx.after_write(res, "MODIFIED", out)
        return present(out, status_ok)
    raise errors.conflict(res.plural, scope.name or "", res.group, "too many concurrent updates")


def _finalized(obj: Obj) -> bool:
    """An object being deleted whose last finalizer was just removed goes away."""
    md = obj.get("metadata") or {}
    return bool(md.get("deletionTimestamp")) and not md.get("finalizers")


async def delete_options(request: web.Request) -> Obj:
    body = await read_body(request)
    opts: Obj = {}
    ctype = (request.content_type or "").lower() if request.headers.get("Content-Type") else ""
    if ctype == protobuf.MEDIA_TYPE and body:
        try:
            opts = protobuf.decode_delete_options(body)
        except protobuf.ProtobufError as e:
            raise errors.bad_request(f"invalid DeleteOptions: {e}") from None
    elif body.strip():
        opts = bodies.decode_delete_options(body)  # upstream's decode errors, typed fields
    pre = dict(opts.get("preconditions") or {})
    for q in ("preconditions.uid", "preconditions.resourceVersion"):
        if q in request.query:
            pre[q.split(".", 1)[1]] = request.query[q]
    opts["preconditions"] = pre
    for q in ("propagationPolicy", "orphanDependents"):
        if q in request.query:
            opts[q] = request.query[q]
    if "gracePeriodSeconds" in request.query:
        try:
            opts["gracePeriodSeconds"] = int(request.query["gracePeriodSeconds"])
        except ValueError:
            raise errors.bad_request(f'strconv.ParseInt: parsing {gocompat.quote(request.query["gracePeriodSeconds"])}: '
                                     "invalid syntax") from None
    # dryRun may come in the body (client-go, kubectl --dry-run=server) or the query.
    opts["dryRun"] = list(opts.get("dryRun") or []) + request.query.getall("dryRun", [])
    validate_delete_options(opts)
    return opts


async def delete(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    res = scope.resource
    opts = await delete_options(request)
    pre = opts["preconditions"]
    out, deleted = await delete_one(ctx, request, res, scope.namespace, scope.name or "",
                                    uid=pre.get("uid"), rv=pre.get("resourceVersion"), dry=bool(opts["dryRun"]),
                                    grace=opts.get("gracePeriodSeconds"))
    if deleted and not res.returns_deleted_object:
        return json_response(jsonenc.dumps(deleted_status(res, out)) + b"\n")
    # handlers/delete.go: an object that is not gone yet (finalizers) comes back with 200, or 202 when the
    # client asked for orphanDependents=false.
    orphan = opts.get("orphanDependents")
    orphan_false = orphan is False or (isinstance(orphan, str) and orphan.lower() == "false")
    return respond_obj(request, res, out, 202 if not deleted and orphan_false else 200)


def deleted_status(res: Resource, obj: Obj) -> Obj:
    """The Success Status of a DELETE (upstream's registries without ReturnDeletedObject)."""
    details: Obj = {"name": obj["metadata"].get("name", "")}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.plural
    details["uid"] = obj["metadata"].get("uid", "")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


class _AlreadyDeleting(Exception):
    """A graceful deletion is pending and the request does not shorten it (upstream's errAlreadyDeleting)."""


class _DeleteNow(Exception):
    """No graceful deletion after all (upstream's errDeleteNow): delete the object as it is."""


def _before_delete(res: Resource, obj: Obj, grace: int | None) -> tuple[Obj | None, bool, int]:
    """Upstream's rest.BeforeDelete with the pod strategy's CheckGracefulDelete, for pods (the only
    built-in registry with graceful deletion): (the object marked for graceful deletion or None,
    pending?, grace period). None and not pending: delete now."""
    if grace is not None and grace < 0:
        grace = 1  # negative values are 1 s on the delete path
    if res.custom or res.group or res.plural != "pods":
        return None, False, 0
    md = obj["metadata"]
    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)
    if md.get("deletionTimestamp"):
        current = md.get("deletionGracePeriodSeconds")
        if not current:  # nil or 0: the earlier update went through, the delete did not
            return None, False, 0
        current = max(current, 1)
        if grace is None or grace >= current:  # only a shorter grace period may be asked for
            return None, True, current
        ts = _dt.datetime.strptime(md["deletionTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.timezone.utc)
        ts += _dt.timedelta(seconds=grace - current)
        if ts < now:  # never into the past; a graceful request stays graceful (1 s)
            ts, grace = now, (1 if grace else 0)
    else:
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if grace is None:
            grace = spec.get("terminationGracePeriodSeconds") or 0
        if not spec.get("nodeName") or status.get("phase") in ("Failed", "Succeeded"):
            grace = 0  # never scheduled, or already terminated: delete now
        grace = 1 if grace < 0 else grace
        ts = now + _dt.timedelta(seconds=grace)
    out = {**obj, "metadata": dict(md)}
    out["metadata"]["deletionTimestamp"] = ts.strftime("%Y-%m-%dT%H:%M:%SZ")
    out["metadata"]["deletionGracePeriodSeconds"] = grace
    if not md.get("deletionTimestamp") and (md.get("generation") or 0) > 0:
        out["metadata"]["generation"] = md["generation"] + 1
    return out, False, grace


async def _delete_gracefully(ctx: Context, res: Resource, key: str, name: str, grace: int | None,
                             dry: bool) -> tuple[Obj, bool]:
    """A pod's graceful deletion (upstream's updateForGracefulDeletionAndFinalizers): the update that sets
    deletionTimestamp and deletionGracePeriodSeconds. (the object, False) while it must stay; (the updated
    object, True) when it is to be deleted now (grace period 0, no finalizers)."""
    store = ctx.storage(res)
    period = 0

    def mark(o: Obj) -> Obj:
        nonlocal period
        marked, pending, period = _before_delete(res, o, grace)
        if pending:
            raise _AlreadyDeleting(o)
        if marked is None:
            if not o["metadata"].get("finalizers"):
                raise _DeleteNow(o)
            marked = {**o, "metadata": {**o["metadata"], "deletionTimestamp": objects.now_rfc3339(),
                                        "deletionGracePeriodSeconds": 0}}
            period = 0
        marked["metadata"].pop("resourceVersion", None)
        return objects.canonical(res, marked)
    try:
        if dry:
            cur = await store.get(key)
            out = {**mark(cur)}
            out["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        else:
            out = await store.guaranteed_update(key, mark)
    except _AlreadyDeleting as e:
        return e.args[0], False
    except _DeleteNow as e:
        return e.args[0], True
    except serr.StorageError as e:
        raise map_storage_error(e, res, name) from None
    if not dry:
        await ctx.after_write(res, "MODIFIED", out)
    return out, not (out["metadata"].get("finalizers") or period > 0)


async def delete_one(ctx: Context, request: web.Request, res: Resource, namespace: str | None, name: str,
                     uid: str | None = None, rv: str | None = None, dry: bool = False,
                     grace: int | None = None) -> tuple[Obj, bool]:
    """Delete one object: (the object, deleted?); objects with finalizers only get a deletionTimestamp, and
    pods a graceful deletion (`grace`: DeleteOptions.gracePeriodSeconds) unless their grace period is 0."""
    store = ctx.storage(res)
    key = res.key(ctx.etcd_prefix, namespace, name)
    try:
        cur = await store.get(key)
    except serr.StorageError as e:
        raise map_storage_error(e, res, name) from None
    md = cur["metadata"]
    # Upstream's registry checks DeleteOptions preconditions itself, naming the kind.
    if uid is not None and md.get("uid") != uid:
        raise errors.conflict(res.kind, name, res.group,
                              f"the UID in the precondition ({uid}) does not match the UID in record "
                              f"({md.get('uid', '')}). The object might have been deleted and then recreated")
    if rv is not None and md.get("resourceVersion") != rv:
        raise errors.conflict(res.kind, name, res.group,
                              f"the ResourceVersion in the precondition ({rv}) does not match the "
                              f"ResourceVersion in record ({md.get('resourceVersion')}). The object might have "
                              f"been modified")
    marked, pending, _ = _before_delete(res, cur, grace)
    if pending:
        return cur, False
    if marked is not None:
        cur, now = await _delete_gracefully(ctx, res, key, name, grace, dry)
        if not now:
            return cur, False
        md = cur["metadata"]
        rv = md["resourceVersion"] if rv is not None else None  # the update moved it (upstream does the same)
    if dry:
        return cur, True
    if md.get("finalizers") and res.plural != "namespaces":
        if md.get("deletionTimestamp"):
            return cur, False

        def mark(o: Obj) -> Obj:
            o = {**o, "metadata": dict(o["metadata"])}  # GuaranteedUpdate still needs the current RV
            o["metadata"]["deletionTimestamp"] = objects.now_rfc3339()
            o["metadata"]["deletionGracePeriodSeconds"] = 0
            o["metadata"].pop("resourceVersion", None)
            return objects.canonical(res, o)
        try:
            out = await store.guaranteed_update(key, mark)
        except serr.StorageError as e:
            raise map_storage_error(e, res, name) from None
        await ctx.after_write(res, "MODIFIED", out)
        return out, False
    try:
        out, _ = await store.delete(key, uid=uid, rv=rv)
    except serr.StorageError as e:
        if marked is not None and e.code is serr.Code.KEY_NOT_FOUND:
            return cur, True  # deleted by someone else since our update (upstream tolerates it: #19403)
        raise map_storage_error(e, res, name) from None
    await ctx.after_write(res, "DELETED", out)
    return out, True


async def deletecollection(ctx: Context, request: web.Request, scope: RequestScope) -> web.StreamResponse:
    res = scope.resource
    opts = list_options(ctx, request, res, watch=False)
    dopts = await delete_options(request)
    opts.limit = 0
    opts.continue_ = ""
    # S7.1: deletecollection lists first (selectors and shardSelector), from etcd.
    try:
        page = await ctx.storage(res).store.get_list(ctx.prefix(scope), list_request(scope, opts))
    except serr.StorageError as e:
        raise map_storage_error(e, res) from None
    deleted: list[Obj] = []
    for obj in page.items():
        md = obj["metadata"]
        try:
            out, _ = await delete_one(ctx, request, res, md.get("namespace"), md["name"],
                                      dry=bool(dopts["dryRun"]), grace=dopts.get("gracePeriodSeconds"))
        except errors.StatusError as e:
            if e.code == 404:
                continue  # deleted concurrently
            raise
        deleted.append(out)
    meta = {"resourceVersion": str(page.resource_version)}
    return await stream_list(request, res, meta, (encode_list_item(res, o) for o in deleted))



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
    causes += dry_run_errors(opts.get("dryRun") or [])
    if causes:
        raise errors.invalid("DeleteOptions", "", "meta.k8s.io", causes)


def _same_content(new: Obj, cur: Obj) -> bool:
    a = dict(new)
    b = dict(cur)
    a["metadata"] = {k: v for k, v in (a.get("metadata") or {}).items() if k != "resourceVersion"}
    b["metadata"] = {k: v for k, v in (b.get("metadata") or {}).items() if k != "resourceVersion"}
    return a == b


# --- admission plugins a pod create goes through ---------------------------------------------------

# The PriorityClasses kube-apiserver creates at start (scheduling.SystemPriorityClasses).
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


async def admit_pod_priority(ctx: Context, pod: Obj) -> None:
    """The Priority admission plugin on a pod create: spec.priority and spec.preemptionPolicy computed from
    spec.priorityClassName (0 and PreemptLowerPriority without one), 403 when the class does not exist or the
    pod gives other values itself. (A globalDefault PriorityClass is not looked up: docs/differences.md.)"""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    md = pod.get("metadata") or {}
    class_name = spec.get("priorityClassName") or ""
    priority, policy = 0, "PreemptLowerPriority"
    if class_name in SYSTEM_PRIORITY_CLASSES:
        priority = SYSTEM_PRIORITY_CLASSES[class_name]
    elif class_name:
        pc = await _priority_class(ctx, class_name)
        if pc is None:
            raise _forbidden_pod(md, f"no PriorityClass with name {class_name} was found")
        priority, policy = int(pc.get("value") or 0), pc.get("preemptionPolicy") or policy
    given = spec.get("priority")
    if given is not None and given != priority:
        raise _forbidden_pod(md, f"the integer value of priority ({given}) must not be provided in pod spec; "
                                 f"priority admission controller computed {priority} from the given PriorityClass name")
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        raise _forbidden_pod(md, f"the string value of PreemptionPolicy ({given_policy}) must not be provided in "
                                 f"pod spec; priority admission controller computed {policy} from the given "
                                 f"PriorityClass name")
    spec["priority"], spec["preemptionPolicy"] = priority, policy


async def _priority_class(ctx: Context, name: str) -> Obj | None:
    res = ctx.registry.lookup("scheduling.k8s.io", "v1", "priorityclasses")
    if res is None:
        return None
    try:
        return await ctx.storage(res).get(res.key(ctx.etcd_prefix, None, name))
    except serr.StorageError as e:
        if e.code is serr.Code.KEY_NOT_FOUND:
            return None
        raise map_storage_error(e, res, name) from None


def _forbidden_pod(md: Obj, why: str) -> errors.StatusError:
    name = md.get("name") or ""
    return errors.StatusError(403, "Forbidden", f'pods "{name}" is forbidden: {why}', {"name": name, "kind": "pods"})


# --- pods/binding and the legacy bindings collection ----------------------------------------------

BINDING = Resource(group="", version="v1", kind="Binding", plural="bindings", singular="binding", namespaced=True,
                   verbs=["create"], stored=False)


def _binding_errors(binding: Obj) -> list[str]:
    """validation.ValidatePodBinding."""
    target = binding.get("target") if isinstance(binding.get("target"), dict) else {}
    out = []
    kind = target.get("kind") or ""
    if kind and kind != "Node":
        out.append(f'target.kind: Unsupported value: {gocompat.quote(kind)}: supported values: "Node", '
                   f'"<empty>"')
    if not target.get("name"):
        out.append("target.name: Required value")
    return out


async def bind(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    """POST .../pods/<name>/binding (scope.name set) or .../namespaces/<ns>/bindings (the Binding's name):
    upstream's BindingREST. The pod gets spec.nodeName, the Binding's annotations and the PodScheduled
    condition in one guaranteed update of its own (no strategy: the generation stays); 409 on pods/binding when
    it is bound already or being deleted, 404 when it does not exist. The answer is a Success Status (201)."""
    binding = await decode_body(request, BINDING)
    md = binding.get("metadata") if isinstance(binding.get("metadata"), dict) else {}
    if md.get("namespace") and md["namespace"] != scope.namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on "
                                 "the request")
    name = md.get("name") or ""
    if scope.name is not None and name != scope.name:
        raise errors.bad_request("name in URL does not match name in Binding object")
    problems = _binding_errors(binding)
    if problems:  # upstream returns an aggregate, not a Status error: a 500 without a reason
        raise errors.StatusError(500, "", problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]")
    dry = dry_run(request)
    pods = ctx.registry.lookup("", "v1", "pods")
    key = pods.key(ctx.etcd_prefix, scope.namespace, name)
    target = binding["target"]["name"]

    def assign(cur: Obj) -> Obj:
        pod = jsonenc.loads(jsonenc.dumps(cur))
        pmd = pod.get("metadata") or {}
        if pmd.get("deletionTimestamp"):
            raise errors.conflict("pods/binding", name, "", f"pod {name} is being deleted, cannot be assigned to a host")
        node = (pod.get("spec") or {}).get("nodeName") or ""
        if node:
            raise errors.conflict("pods/binding", name, "",
                                  f"pod {name} is already assigned to node {gocompat.quote(node)}")
        pmd.pop("resourceVersion", None)
        return objects.canonical(pods, defaults.go_shape(pods.api_version, pods.kind, defaults.bind(
            pod, target, md.get("annotations"), objects.now_rfc3339())))
    store = ctx.storage(pods)
    try:
        if dry:
            assign(await store.get(key))
        else:
            out = await store.guaranteed_update(key, assign)
            await ctx.after_write(pods, "MODIFIED", out)
    except serr.StorageError as e:
        raise map_storage_error(e, pods, name) from None
    return json_response(jsonenc.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                        "code": 201}) + b"\n", 201)
