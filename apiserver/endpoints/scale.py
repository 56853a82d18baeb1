"""The `scale` subresource (autoscaling/v1 Scale) of deployments, replicasets, statefulsets and
replicationcontrollers, as upstream's ScaleREST (pkg/registry/{apps/*,core/replicationcontroller}/storage):

* GET: the parent as a Scale: name, namespace, uid, resourceVersion and creationTimestamp of the parent,
  spec.replicas, status.replicas and status.selector (the label selector as a string).
* PUT / PATCH: the body (or the patch applied to the current Scale) becomes a new Scale, validated
  (replicas >= 0: 422 on Scale.autoscaling), its uid a precondition (409 on `<plural>/scale`), its
  resourceVersion the parent's (409 when stale, through the store); only the parent's spec.replicas changes,
  through the parent's update path (generation bumped, status kept). The answer is the new Scale.
"""
from __future__ import annotations

from apiserver.httpstack import web

from machinery import errors, jsonenc, patch as patchmod, tables
from machinery.listoptions import parse_resource_version
from machinery.resources import Resource
from storage import errors as serr

from ..status import map_storage_error
from .common import Context, Obj, RequestScope, json_response, read_body
from .write import _write, check_patched, decode_in_scope

SCALE = Resource(group="autoscaling", version="v1", kind="Scale", plural="scale", singular="scale", namespaced=True,
                 verbs=["get", "patch", "update"], stored=False)

# The resources with a scale subresource, as upstream's registries install it.
SCALABLE = {("apps", "deployments"), ("apps", "replicasets"), ("apps", "statefulsets"), ("", "replicationcontrollers")}


def scalable(res: Resource) -> bool:
    return not res.custom and (res.group, res.plural) in SCALABLE


def to_scale(res: Resource, obj: Obj) -> Obj:
    """scaleFrom<Kind>: the parent as an autoscaling/v1 Scale."""
    md = obj.get("metadata") or {}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if res.plural == "replicationcontrollers":
        selector = tables.format_labels(spec.get("selector"))  # labels.SelectorFromSet(...).String()
        selector = "" if selector == "<none>" else selector
    else:
        selector = tables.selector_string(spec.get("selector"))
        if selector is None:
            raise errors.internal("invalid label selector")
    smd = {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp") if k in md}
    return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": smd,
            "spec": {"replicas": spec.get("replicas", 0)} if spec.get("replicas") else {},
            "status": {"replicas": status.get("replicas") or 0, "selector": selector}}


def _respond(res: Resource, obj: Obj, status: int = 200) -> web.Response:
    return json_response(jsonenc.dumps(to_scale(res, obj)) + b"\n", status)


async def get(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    res = scope.resource
    try:
        got = await ctx.storage(res).get_at(ctx.key(scope), request.query.get("resourceVersion") or None)
    except serr.StorageError as e:
        raise map_storage_error(e, res, scope.name or "") from None
    return _respond(res, jsonenc.loads(got) if isinstance(got, bytes) else got)


def _apply_scale(ctx: Context, scope: RequestScope, cur: Obj, scale: Obj) -> Obj:
    """scaleUpdatedObjectInfo.UpdatedObject: validate the new Scale, check its uid, move replicas and
    resourceVersion onto the parent."""
    md = scale.get("metadata") if isinstance(scale.get("metadata"), dict) else {}
    replicas = (scale.get("spec") or {}).get("replicas") or 0
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise errors.bad_request("spec.replicas must be an integer")
    if replicas < 0:
        raise errors.invalid("Scale", cur["metadata"].get("name", ""), "autoscaling", [errors.field_error(
            "FieldValueInvalid", "spec.replicas", "must be greater than or equal to 0", replicas)])
    uid = md.get("uid")
    if uid and uid != cur["metadata"].get("uid"):  # a uid in the body is a precondition of the store
        key = ctx.key(scope)
        raise serr.conflict(key, f"StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, "
                                 f"AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, "
                                 f"UID in object meta: {cur['metadata'].get('uid', '')}")
    want = md.get("resourceVersion")
    if want:
        want = str(parse_resource_version(str(want)))
        if want != cur["metadata"].get("resourceVersion"):
            raise serr.conflict(ctx.key(scope), "the object has been modified")
    new = dict(cur)
    new["spec"] = {**(cur.get("spec") or {}), "replicas": replicas}
    return new


async def update(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    scale, _ = await decode_in_scope(request, RequestScope(SCALE, scope.namespace, scope.name, ""))
    return await _write(ctx, request, scope, lambda cur: _apply_scale(ctx, scope, cur, scale), status_ok=200,
                        present=lambda obj, code: _respond(scope.resource, obj, code))


async def patch(ctx: Context, request: web.Request, scope: RequestScope) -> web.Response:
    ctype = (request.content_type or "").lower()
    # Scale has no list field, so no merge key matters to a strategic merge patch of it: the patch engine is
    # given a built-in kind whose strategic metadata has nothing under the Scale's fields.
    smp_as = "configmaps"
    patchmod.check_patch_type(ctype, smp_as, False)
    body = await read_body(request)

    def apply(cur: Obj) -> Obj:
        scale = patchmod.apply_patch(to_scale(scope.resource, cur), ctype, body, smp_as, False)
        if not isinstance(scale, dict):
            raise errors.bad_request("the patched object is not a JSON object")
        check_patched(SCALE, scale, ctype, body)
        pmd = scale.get("metadata") if isinstance(scale.get("metadata"), dict) else {}
        if pmd.get("name") not in (None, scope.name):
            raise errors.bad_request(f"the name of the object ({pmd.get('name')}) does not match the "
                                     f"name on the URL ({scope.name})")
        return _apply_scale(ctx, scope, cur, scale)
    return await _write(ctx, request, scope, apply, status_ok=200,
                        present=lambda obj, code: _respond(scope.resource, obj, code))

