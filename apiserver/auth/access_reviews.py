"""authorization.k8s.io/v1: the access review kinds (create only, never stored; `kubectl auth can-i`), as
k8s.io/kubernetes pkg/registry/authorization/{selfsubjectaccessreview,subjectaccessreview,
localsubjectaccessreview,selfsubjectrulesreview}/rest.go answer them, from the server's authorizer chain
(apiserver/auth/authz.py):

* SelfSubjectAccessReview: may the requesting user do `spec.resourceAttributes` (namespace, verb, group,
  version: `*` when empty, resource, subresource, name) or `spec.nonResourceAttributes` (path, verb)? The body
  is echoed (unknown fields dropped, Go field order) with `status: {allowed, denied, reason}`; 201.
* SubjectAccessReview: the same for `spec.user` / `spec.groups` / `spec.uid` / `spec.extra` (exactly those:
  no group is added).
* LocalSubjectAccessReview: a SubjectAccessReview under /namespaces/<ns>/, whose resourceAttributes must be in
  that namespace.
* SelfSubjectRulesReview: the rules the RBAC authorizer gives the requesting user in `spec.namespace` (what
  `kubectl auth can-i --list` prints), with AlwaysAllow's `*` rules when that mode is on.

Validation errors are upstream's 422 (`.authorization.k8s.io "" is invalid: ...`: the internal object's empty
kind), wrong field types upstream's 400 decoder texts. Not kept: managedFields in the echoed metadata (this
server keeps none), field- and label-selector authorization (the attributes are echoed, not evaluated).
"""
from __future__ import annotations

from typing import Any

from apiserver.httpstack import web

from machinery import errors, jsonenc
from machinery.gocompat import json_type_word, unmarshal_type_error
from machinery.resources import Resource

from ..endpoints.common import decode_body, json_response
from .attributes import Attributes
from .authz import ALLOW, ALWAYS_ALLOW, AUTHORIZER, DENY, Authorizer
from .user import UNSECURED, UserInfo

GROUP = "authorization.k8s.io"

# Go types of the fields, in Go field order: name -> (json type word of the Go type, Go type, nested schema).
_REQ = {"key": "string", "operator": "string", "values": "[]string"}
_SELECTOR = lambda req_type: {"rawSelector": "string", "requirements": ("[]", req_type, _REQ)}  # noqa: E731
RESOURCE_ATTRIBUTES = {
    "namespace": "string", "verb": "string", "group": "string", "version": "string", "resource": "string",
    "subresource": "string", "name": "string",
    "fieldSelector": ("v1.FieldSelectorAttributes", "FieldSelectorAttributes",
                      _SELECTOR("v1.FieldSelectorRequirement")),
    "labelSelector": ("v1.LabelSelectorAttributes", "LabelSelectorAttributes",
                      _SELECTOR("v1.LabelSelectorRequirement")),
}
NON_RESOURCE_ATTRIBUTES = {"path": "string", "verb": "string"}
_ATTRS = {"resourceAttributes": ("v1.ResourceAttributes", "ResourceAttributes", RESOURCE_ATTRIBUTES),
          "nonResourceAttributes": ("v1.NonResourceAttributes", "NonResourceAttributes", NON_RESOURCE_ATTRIBUTES)}
SELF_SPEC = dict(_ATTRS)
SAR_SPEC = {**_ATTRS, "user": "string", "groups": "[]string", "extra": "map[string]v1.ExtraValue", "uid": "string"}
RULES_SPEC = {"namespace": "string"}
SPECS = {"SelfSubjectAccessReview": ("v1.SelfSubjectAccessReviewSpec", "SelfSubjectAccessReviewSpec", SELF_SPEC),
         "SubjectAccessReview": ("v1.SubjectAccessReviewSpec", "SubjectAccessReviewSpec", SAR_SPEC),
         "LocalSubjectAccessReview": ("v1.SubjectAccessReviewSpec", "SubjectAccessReviewSpec", SAR_SPEC),
         "SelfSubjectRulesReview": ("v1.SelfSubjectRulesReviewSpec", "SelfSubjectRulesReviewSpec", RULES_SPEC)}
# metav1.ObjectMeta's fields in Go order (the echoed metadata).
OBJECT_META = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
               "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
               "ownerReferences", "finalizers", "managedFields")


# --- decoding: the body as the Go types take it ----------------------------------------------------

def _type_error(value: Any, go_type: str, field: str) -> str:
    return unmarshal_type_error(json_type_word(value), go_type, field)


def _scalar_ok(value: Any, go_type: str) -> bool:
    if go_type == "string":
        return isinstance(value, str)
    if go_type == "[]string":
        return isinstance(value, list)
    if go_type.startswith("map["):
        return isinstance(value, dict)
    return True


def _decode(value: dict, schema: dict, struct: str, path: str) -> dict:
    """The fields `schema` knows, in its (Go) order, type-checked; raises ValueError with encoding/json's
    first UnmarshalTypeError (`Go struct field <Struct>.<path> of type <type>`)."""
    out: dict[str, Any] = {}
    for k, t in schema.items():
        if k not in value or value[k] is None:
            continue
        v = value[k]
        if isinstance(t, str) and v in ("", [], {}) and not (schema is _REQ and k != "values"):
            continue  # omitempty strings, lists and maps (all but a requirement's key and operator)
        p = f"{path}.{k}" if path else k
        if isinstance(t, str):
            if not _scalar_ok(v, t):
                raise ValueError(_type_error(v, t, f"{struct}.{p}"))
            if t == "[]string":
                for item in v:
                    if not isinstance(item, str):
                        raise ValueError(_type_error(item, "string", f"{struct}.{p}"))
            elif t.startswith("map["):
                for ev in v.values():
                    if ev is not None and not isinstance(ev, list):
                        raise ValueError(_type_error(ev, "v1.ExtraValue", f"{struct}.{p}"))
                    for x in ev or ():
                        if not isinstance(x, str):
                            raise ValueError(_type_error(x, "string", f"{struct}.{p}"))
                v = {ek: v[ek] for ek in sorted(v)}  # encoding/json writes a map's keys sorted
            out[k] = v
        elif t[0] == "[]":
            _, go_type, sub = t
            if not isinstance(v, list):
                raise ValueError(_type_error(v, f"[]{go_type}", f"{struct}.{p}"))
            items = []
            for item in v:
                if not isinstance(item, dict):
                    raise ValueError(_type_error(item, go_type, f"{struct}.{p}"))
                items.append(_decode(item, sub, go_type.rpartition(".")[2], p))
            out[k] = items
        else:
            go_type, sub_struct, sub = t
            if not isinstance(v, dict):
                raise ValueError(_type_error(v, go_type, f"{struct}.{p}"))
            out[k] = _decode(v, sub, sub_struct, p)
    return out


def decode_review(obj: dict, res: Resource) -> tuple[dict, dict]:
    """(metadata, spec) of a review body, as upstream's decoder keeps them."""
    kind = res.kind
    md = obj.get("metadata")
    if md is not None and not isinstance(md, dict):
        raise _cannot_handle(kind, _type_error(md, "v1.ObjectMeta", f"{kind}.metadata"))
    spec = obj.get("spec")
    go_type, struct, schema = SPECS[kind]
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        raise _cannot_handle(kind, _type_error(spec, go_type, f"{kind}.spec"))
    try:
        spec = _decode(spec, schema, struct, "spec")
    except ValueError as e:
        raise _cannot_handle(kind, str(e)) from None
    meta = {k: md[k] for k in OBJECT_META if md and md.get(k) not in (None, "", {}, [])}
    return meta, spec


def _cannot_handle(kind: str, err: str) -> errors.StatusError:
    return errors.bad_request(f'{kind} in version "v1" cannot be handled as a {kind}: {err}')


# --- validation (pkg/apis/authorization/validation) ----------------------------------------------

def _invalid(causes: list[dict]) -> errors.StatusError:
    # apierrors.NewInvalid(authorizationapi.Kind(obj.Kind), "", errs): the internal object has no kind.
    return errors.invalid("", "", GROUP, causes)


def _cause(reason: str, field: str, message: str) -> dict:
    return {"reason": reason, "message": message, "field": field}


def _go_struct_json(attrs: dict | None, fields: tuple[str, ...]) -> str:
    """json.Marshal of an internal (untagged) struct: Go field names, every field."""
    if attrs is None:
        return "null"
    return jsonenc.dumps({f[0].upper() + f[1:]: attrs.get(f, "") for f in fields}).decode()


def _validate_spec(spec: dict, subject: bool) -> list[dict]:
    causes = []
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (ra is None) == (nra is None):
        value = _go_struct_json(nra, ("path", "verb"))
        causes.append(_cause("FieldValueInvalid", "spec", f"Invalid value: {value}: exactly one of "
                                                          f"nonResourceAttributes or resourceAttributes must be specified"))
    if subject and not spec.get("user") and not spec.get("groups"):
        causes.append(errors.field_error("FieldValueInvalid", "spec.user", "at least one of user or group must be "
                                         "specified", spec.get("user", "")))
    if ra is not None:
        for sel in ("fieldSelector", "labelSelector"):
            s = ra.get(sel)
            if s is None:
                continue
            path = f"spec.resourceAttributes.{sel}"
            if s.get("rawSelector") and s.get("requirements"):
                causes.append(errors.field_error("FieldValueInvalid", f"{path}.rawSelector",
                                                 "may not specified at the same time as requirements",
                                                 s["rawSelector"]))
            if not s.get("rawSelector") and not s.get("requirements"):
                causes.append(_cause("FieldValueRequired", f"{path}.requirements",
                                     f"Required value: when {path} is specified, requirements or rawSelector "
                                     f"is required"))
    return causes


def _validate_meta(meta: dict, allow_namespace: bool) -> list[dict]:
    check = {k: v for k, v in meta.items() if k != "managedFields" and not (allow_namespace and k == "namespace")}
    if not check:
        return []
    detail = "must be empty except for namespace" if allow_namespace else "must be empty"
    return [_cause("FieldValueInvalid", "metadata", f"Invalid value: {jsonenc.dumps(meta).decode()}: {detail}")]


# --- attributes and answers ------------------------------------------------------------------------

def resource_attributes(user: UserInfo, ra: dict) -> Attributes:
    """authorizationutil.ResourceAttributesFrom (an empty version is `*`)."""
    return Attributes(user=user, verb=ra.get("verb", ""), resource_request=True, namespace=ra.get("namespace", ""),
                      api_group=ra.get("group", ""), api_version=ra.get("version") or "*",
                      resource=ra.get("resource", ""), subresource=ra.get("subresource", ""), name=ra.get("name", ""))


def non_resource_attributes(user: UserInfo, nra: dict) -> Attributes:
    return Attributes(user=user, verb=nra.get("verb", ""), resource_request=False, path=nra.get("path", ""))


def spec_attributes(user: UserInfo, spec: dict) -> Attributes:
    ra = spec.get("resourceAttributes")
    return resource_attributes(user, ra) if ra is not None else non_resource_attributes(user, spec["nonResourceAttributes"])


def review_status(authorizer: Authorizer, attrs: Attributes) -> dict:
    decision, reason = authorizer.authorize(attrs)
    status: dict[str, Any] = {"allowed": decision == ALLOW}
    if decision == DENY:
        status["denied"] = True
    if reason:
        status["reason"] = reason
    return status


def _answer(res: Resource, meta: dict, spec: dict, status: dict) -> web.Response:
    doc = {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta, "spec": spec, "status": status}
    return json_response(jsonenc.dumps(doc) + b"\n", 201)


def _subject(spec: dict) -> UserInfo:
    """user.DefaultInfo from a SubjectAccessReviewSpec (its groups as given)."""
    extra = {k: tuple(v or ()) for k, v in (spec.get("extra") or {}).items()}
    return UserInfo(spec.get("user", ""), uid=spec.get("uid", ""), groups=tuple(spec.get("groups") or ()), extra=extra)


async def self_subject_access_review(request: web.Request, res: Resource) -> web.Response:
    meta, spec = decode_review(await decode_body(request, res), res)
    causes = _validate_spec(spec, subject=False) + _validate_meta(meta, allow_namespace=False)
    if causes:
        raise _invalid(causes)
    user = request.get("user") or UNSECURED
    return _answer(res, meta, spec, review_status(request.app[AUTHORIZER], spec_attributes(user, spec)))


async def subject_access_review(request: web.Request, res: Resource) -> web.Response:
    meta, spec = decode_review(await decode_body(request, res), res)
    causes = _validate_spec(spec, subject=True) + _validate_meta(meta, allow_namespace=False)
    if causes:
        raise _invalid(causes)
    return _answer(res, meta, spec, review_status(request.app[AUTHORIZER], spec_attributes(_subject(spec), spec)))


async def local_subject_access_review(request: web.Request, res: Resource) -> web.Response:
    namespace = request["review_namespace"]
    meta, spec = decode_review(await decode_body(request, res), res)
    if not meta.get("namespace"):
        meta = {**meta, "namespace": namespace}  # the create handler fills it from the path
        meta = {k: meta[k] for k in OBJECT_META if k in meta}
    elif meta["namespace"] != namespace:
        raise errors.bad_request("the namespace of the provided object does not match the namespace sent on the "
                                 "request")
    causes = _validate_spec(spec, subject=True) + _validate_meta(meta, allow_namespace=True)
    ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if ra is not None and ra.get("namespace", "") != meta["namespace"]:
        causes.append(errors.field_error("FieldValueInvalid", "spec.resourceAttributes.namespace",
                                         "must match metadata.namespace", ra.get("namespace", "")))
    if nra is not None:
        causes.append(_cause("FieldValueInvalid", "spec.nonResourceAttributes",
                             f"Invalid value: {_go_struct_json(nra, ('path', 'verb'))}: disallowed on this kind "
                             f"of request"))
    if causes:
        raise _invalid(causes)
    return _answer(res, meta, spec, review_status(request.app[AUTHORIZER], spec_attributes(_subject(spec), spec)))


async def self_subject_rules_review(request: web.Request, res: Resource) -> web.Response:
    _, spec = decode_review(await decode_body(request, res), res)
    namespace = spec.get("namespace", "")
    if not namespace:
        raise errors.bad_request("no namespace on request")
    user = request.get("user") or UNSECURED
    authorizer: Authorizer = request.app[AUTHORIZER]
    resource_rules: list[dict] = []
    non_resource_rules: list[dict] = []
    incomplete = False
    errs: list[str] = []
    for mode in authorizer.modes:  # the union's rule resolvers (the privileged-group authorizer has none)
        if mode == ALWAYS_ALLOW:
            resource_rules.append({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
            non_resource_rules.append({"verbs": ["*"], "nonResourceURLs": ["*"]})
        elif authorizer.rbac is not None and mode == "RBAC":
            rr, nrr, inc, err = authorizer.rbac.rules_for(user, namespace)
            resource_rules += rr
            non_resource_rules += nrr
            incomplete = incomplete or inc
            if err:
                errs.append(err)
    status: dict[str, Any] = {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                              "incomplete": incomplete}
    if errs:
        status["evaluationError"] = errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]"
    # Upstream answers a new object: only the status is kept.
    doc = {"kind": res.kind, "apiVersion": res.api_version, "metadata": {}, "spec": {}, "status": status}
    return json_response(jsonenc.dumps(doc) + b"\n", 201)


HANDLERS = {
    (GROUP, "selfsubjectaccessreviews"): self_subject_access_review,
    (GROUP, "subjectaccessreviews"): subject_access_review,
    (GROUP, "localsubjectaccessreviews"): local_subject_access_review,
    (GROUP, "selfsubjectrulesreviews"): self_subject_rules_review,
}
