"""OpenAPI documents: /openapi/v2 (swagger 2.0) and /openapi/v3 (index + one document per path).

Public API
----------
``v2(registry) -> dict``                      the swagger 2.0 document of everything served
``v3_index(registry) -> dict``                ``{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}}}``
``v3_document(registry, path) -> dict|None``  one v3 document: ``api``, ``api/v1``, ``apis``, ``apis/<g>``,
                                              ``apis/<g>/<v>``, ``version``
``v3_group_version(registry, group, version)``, ``v3_hash(registry, path)``
``v2_body(registry)``, ``v3_body(registry, path)``   (JSON bytes, hash) for the HTTP handlers

Everything is memoized on the registry state (the identity of every served ``Resource``: CRD updates create
new Resource objects); the returned dicts are shared and must not be mutated.

What the documents are made of, as kube-apiserver v1.37.2 makes them:

* Schemas of the built-in kinds: ``openapi_upstream.json`` (extracted from the reference kube-apiserver by
  ``tools/openapi_upstream.py``; upstream generates them from the k8s.io/api Go types). The v3 documents
  serve them as they are; the v2 definitions are derived as kube-openapi derives them (``$ref`` instead of a
  one-element ``allOf``, no ``default``, int-or-string and quantity as ``type: string``).
* Paths and operations: the endpoint installer's routes (k8s.io/apiserver pkg/endpoints/installer.go:
  descriptions, ``<verb><Group><Version>[Namespaced]<Kind>[Status][List|ForAllNamespaces]`` operation ids,
  ``x-kubernetes-action``, media types, responses), turned into documents as kube-openapi's builders do
  (parameters sorted by name, those shared by every operation of a path hoisted to the path; v2 shares
  parameters under ``#/parameters/<name>-<fnv hash>`` except name, dryRun, fieldValidation and bodies
  referring to the kind).
* Custom resources: apiextensions-apiserver's openapi builder (its own routes: no watch paths, no group
  document, JSON and YAML only; the kind's schema is the CRD's with apiVersion, kind and metadata added).

Deliberate difference: PATCH operations do not offer ``application/apply-patch+yaml`` (server-side apply is
answered 415 here). kubectl reads: the first PATCH operation of a kind must carry a ``fieldValidation``
parameter (cli-runtime query_param_verifier_v3.go) and offer strategic merge patch for ``kubectl apply``
to use it (kubectl pkg/cmd/apply/patcher.go); ``strategicpatch.PatchMetaFromOpenAPIV3`` walks the schemas'
``x-kubernetes-patch-strategy``/``-merge-key``.
"""
from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import logging
import os
import pickle
import subprocess
import sys
import threading
from typing import Any, Callable

import zstandard

from machinery import jsonenc
from machinery.memory import release_free_memory
from machinery.resources import Registry, Resource, Subresource

from . import discovery

log = logging.getLogger("apiserver")

__all__ = ["v2", "v3_index", "v3_document", "v3_group_version", "v3_hash", "v2_body", "v3_body",
           "definition_name", "PATCH_TYPES"]

META = "io.k8s.apimachinery.pkg.apis.meta.v1."
V3_REF = "#/components/schemas/"
V2_REF = "#/definitions/"
DATA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openapi_upstream.json")

JSON, YAML, PROTOBUF = "application/json", "application/yaml", "application/vnd.kubernetes.protobuf"
STREAM = ["application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"]
# Offered for PATCH (apply-patch+yaml left out: server-side apply is not served here).
PATCH_TYPES = ["application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json"]

_LIST_PARAMS = ["allowWatchBookmarks", "continue", "fieldSelector", "labelSelector", "limit", "resourceVersion",
                "resourceVersionMatch", "sendInitialEvents", "shardSelector", "timeoutSeconds", "watch"]
_WRITE_PARAMS = ["dryRun", "fieldManager", "fieldValidation"]
_DELETE_PARAMS = ["dryRun", "gracePeriodSeconds", "ignoreStoreReadErrorWithClusterBreakingPotential",
                  "orphanDependents", "propagationPolicy"]
_DELETECOLLECTION_PARAMS = sorted(set(_DELETE_PARAMS) | set(_LIST_PARAMS) - {"allowWatchBookmarks", "watch"})
# The groups whose scheme registrations the apiextensions-apiserver's scheme lacks (DeleteOptions' GVKs
# in a custom resource document are those of kube-apiserver's legacy scheme).
_NOT_IN_LEGACY_SCHEME = {"admission.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io", "imagepolicy.k8s.io"}
_SECURITY_SCHEME = {"BearerToken": {"type": "apiKey", "description": "Bearer Token authentication",
                                    "name": "authorization", "in": "header"}}
_TYPE_META_DOCS = ("apiVersion", "kind")


@functools.cache
def _data() -> dict:
    with open(DATA_FILE, encoding="utf-8") as f:
        return json.load(f)


def _info() -> dict:
    v = discovery.version_info()
    return {"title": "Kubernetes", "version": f"{v['major']}.{v['minor']}"}


# ----------------------------------------------------------------------------- names

def _valid_id(s: str, capitalize: bool) -> str:
    """openapi.ToValidOperationID: letters, '_' and (not first) digits; other runes capitalize the next."""
    out = []
    cap = capitalize
    for i, ch in enumerate(s):
        if ch.isalpha() or ch == "_" or (i != 0 and ch.isdigit()):
            out.append(ch.upper() if cap else ch)
            cap = False
        else:
            cap = True
    return "".join(out)


def _group_id(group: str) -> str:
    return (group or "core").removesuffix(".k8s.io")


def _tag(group: str, version: str | None = None) -> str:
    """GetOperationIDAndTags: `core_v1`, `rbacAuthorization_v1`, `exExampleCom_v1`; group documents
    `rbacAuthorization`."""
    t = _valid_id(_group_id(group), False)
    return f"{t}_{_valid_id(version, False)}" if version else t


def _operation_id(verb: str, rest: str, group: str, version: str | None) -> str:
    out = verb + _valid_id(_group_id(group), True)
    if version:
        out += _valid_id(version, True)
    return out + _valid_id(rest, True)


def _reverse_domain(group: str) -> str:
    return ".".join(reversed(group.split(".")))


def definition_name(r: Resource, kind: str | None = None) -> str:
    kind = kind or r.kind
    if not r.custom:
        return _data()["kinds"][f"{r.group}/{r.version}/{kind}"]
    return f"{_reverse_domain(r.group)}.{r.version}.{kind}"


# ----------------------------------------------------------------------------- routes

class Op:
    """One route of the endpoint installer, in a form both renderers use."""

    def __init__(self, path: str, method: str, verb: str, rest: str, description: str, action: str | None,
                 params: list[dict], responses: list[tuple[str, str, str]], produces: list[str],
                 consumes: list[str], body: tuple[str, bool] | None = None, gvk: dict | None = None,
                 tag_version: str | None = None, group: str = "", version: str | None = None,
                 v3_body_types: list[str] | None = None):
        self.path, self.method, self.description, self.action = path, method, description, action
        self.params, self.responses, self.produces, self.consumes = params, responses, produces, consumes
        self.body, self.gvk = body, gvk
        self.tag = _tag(group, version)
        self.operation_id = _operation_id(verb, rest, group, version)
        self.v3_body_types = v3_body_types


def _param(name: str) -> dict:
    return _data()["parameters"][name]


def _name_param(kind: str) -> dict:
    return {"name": "name", "in": "path", "description": f"name of the {kind}", "required": True,
            "schema": {"type": "string", "uniqueItems": True}}


def _article(kind: str) -> str:
    """installer.go GetArticleForNoun: none for a plural-looking noun (`Endpoints`, not `Class`)."""
    if kind.endswith("s") and not kind.endswith("ss"):
        return " "
    return " an " if kind[:1].lower() in "aeiou" else " a "


def _item_ops(r: Resource, path: str, item_params: list[dict], delete_ref: str, p, media: list[str],
              consumes: list[str], common: dict) -> list[Op]:
    """get, put, delete, patch of one object."""
    k, custom, nsd = r.kind, r.custom, "Namespaced" if r.namespaced else ""
    kind_ref = definition_name(r)
    get_params = item_params + (p(["resourceVersion"]) if custom else [])
    return [
        Op(path, "get", "read", f"{nsd}{k}", f"read the specified {k}", "get", get_params,
           [("200", "OK", kind_ref)], media, consumes, **common),
        Op(path, "put", "replace", f"{nsd}{k}", f"replace the specified {k}", "put", item_params + p(_WRITE_PARAMS),
           [("200", "OK", kind_ref), ("201", "Created", kind_ref)], media, consumes, body=(kind_ref, True), **common),
        Op(path, "delete", "delete", f"{nsd}{k}", f"delete{_article(k)}{k}", "delete", item_params + p(_DELETE_PARAMS),
           [("200", "OK", delete_ref), ("202", "Accepted", delete_ref)], media, consumes,
           body=(META + "DeleteOptions", False), **common),
        _patch_op(r, path, f"{nsd}{k}", f"partially update the specified {k}", item_params, kind_ref, p, media,
                  common)]


def _patch_op(r: Resource, path: str, rest: str, description: str, params: list[dict], ref: str, p, media,
              common: dict) -> Op:
    patch_types = [t for t in PATCH_TYPES if not r.custom or "strategic" not in t]
    return Op(path, "patch", "patch", rest, description, "patch", params + p(_WRITE_PARAMS + ["force"], patch=True),
              [("200", "OK", ref)] + ([] if r.custom else [("201", "Created", ref)]), media, patch_types,
              body=(META + "Patch", True), **common)


def _subresource_ops(r: Resource, sub: Subresource, item: str, ns_param: list[dict], p, media: list[str],
                     consumes: list[str]) -> list[Op]:
    """installer.go for `<item>/<subresource>`: the verbs discovery lists, on the subresource's kind (the
    parent's for status; autoscaling/v1 Scale, core Binding, policy/v1 Eviction, ...)."""
    k, nsd, path, title = r.kind, "Namespaced" if r.namespaced else "", f"{item}/{sub.name}", sub.name.title()
    if r.custom or not (sub.group or sub.version):
        ref, gvk = definition_name(r, sub.kind), {"group": r.group, "version": r.version, "kind": sub.kind}
    else:
        ref = _data()["kinds"][f"{sub.group}/{sub.version}/{sub.kind}"]
        gvk = {"group": sub.group, "version": sub.version, "kind": sub.kind}
    common = dict(group=r.group, version=r.version, gvk=gvk)
    params = [_name_param(sub.kind)] + ns_param + [_param("pretty")]
    what = f"{sub.name} of the specified {k}"
    rest = f"{nsd}{k}{title}"
    ops = []
    if "create" in sub.verbs:
        ops.append(Op(path, "post", "create", rest, f"create {sub.name} of{_article(k)}{k}", "post",
                      params + p(_WRITE_PARAMS), [("200", "OK", ref), ("201", "Created", ref), ("202", "Accepted", ref)],
                      media, consumes, body=(ref, True), **common))
    if "get" in sub.verbs:
        get_params = params + (p(["resourceVersion"]) if r.custom else [])
        ops.append(Op(path, "get", "read", rest, f"read {what}", "get", get_params, [("200", "OK", ref)], media,
                      consumes, **common))
    if "update" in sub.verbs:
        ops.append(Op(path, "put", "replace", rest, f"replace {what}", "put", params + p(_WRITE_PARAMS),
                      [("200", "OK", ref), ("201", "Created", ref)], media, consumes, body=(ref, True), **common))
    if "patch" in sub.verbs:
        ops.append(_patch_op(r, path, rest, f"partially update {what}", params, ref, p, media, common))
    return ops


def _resource_ops(r: Resource) -> list[Op]:
    """installer.go registerResourceHandlers for a built-in resource; apiextensions' builder for a custom
    one."""
    base = f"/api/{r.version}" if not r.group else f"/apis/{r.group}/{r.version}"
    k = r.kind
    custom = r.custom
    media = [JSON, YAML] if custom else [JSON, YAML, PROTOBUF]
    list_media = media if custom else media + STREAM
    consumes = [JSON, YAML] if custom else ["*/*"]
    gvk = {"group": r.group, "version": r.version, "kind": k}
    kind_ref, list_ref = definition_name(r), definition_name(r, r.list_kind)
    status_ref = META + "Status"
    # The installer documents the deleted object for registries that return it; the namespace and CRD
    # registries return it from their own Delete, and their routes document a Status.
    documents_deleted = r.returns_deleted_object and r.plural not in ("namespaces", "customresourcedefinitions")
    delete_ref = kind_ref if documents_deleted else status_ref
    pretty = _param("pretty")
    ns_param = [_param("namespace")] if r.namespaced else []
    coll = f"{base}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{base}/{r.plural}"
    item = coll + "/{name}"
    nsd = "Namespaced" if r.namespaced else ""
    item_params = [_name_param(k)] + ns_param + [pretty]
    coll_params = ns_param + [pretty]
    common = dict(group=r.group, version=r.version, gvk=gvk)

    def p(names: list[str], patch: bool = False) -> list[dict]:
        return [_param(n + ("+patch" if patch and n == "fieldManager" else "")) for n in names]

    list_desc = f"list objects of kind {k}" if custom else f"list or watch objects of kind {k}"
    ops: list[Op] = []
    if r.namespaced:
        ops.append(Op(f"{base}/{r.plural}", "get", "list", f"{k}ForAllNamespaces", list_desc, "list",
                      p(_LIST_PARAMS) + [pretty], [("200", "OK", list_ref)], list_media, consumes, **common))
    ops.append(Op(coll, "get", "list", f"{nsd}{k}", list_desc, "list", coll_params + p(_LIST_PARAMS),
                  [("200", "OK", list_ref)], list_media, consumes, **common))
    ops.append(Op(coll, "post", "create", f"{nsd}{k}", f"create{_article(k)}{k}", "post",
                  coll_params + p(_WRITE_PARAMS),
                  [("200", "OK", kind_ref), ("201", "Created", kind_ref), ("202", "Accepted", kind_ref)],
                  media, consumes, body=(kind_ref, True), **common))
    if "deletecollection" in r.verbs:
        if custom:
            ops.append(Op(coll, "delete", "delete", f"Collection{nsd}{k}", f"delete collection of {k}",
                          "deletecollection", coll_params + p(_LIST_PARAMS), [("200", "OK", status_ref)],
                          media, consumes, **common))
        else:
            ops.append(Op(coll, "delete", "delete", f"Collection{nsd}{k}", f"delete collection of {k}",
                          "deletecollection", coll_params + p(_DELETECOLLECTION_PARAMS),
                          [("200", "OK", status_ref)], media, consumes, body=(META + "DeleteOptions", False),
                          **common))
    ops.extend(_item_ops(r, item, item_params, delete_ref, p, media, consumes, common))
    for sub in r.served_subresources:
        ops.extend(_subresource_ops(r, sub, item, ns_param, p, media, consumes))
    if not custom:
        watch_ref = META + "WatchEvent"
        wbase = f"{base}/watch"
        all_media = [JSON, YAML, PROTOBUF] + STREAM
        watch_params = p(_LIST_PARAMS) + [pretty]
        if r.namespaced:
            ops.append(Op(f"{wbase}/{r.plural}", "get", "watch", f"{k}ListForAllNamespaces",
                          f"watch individual changes to a list of {k}. deprecated: use the 'watch' parameter with "
                          "a list operation instead.", "watchlist", watch_params, [("200", "OK", watch_ref)],
                          all_media, consumes, **common))
        wcoll = f"{wbase}/namespaces/{{namespace}}/{r.plural}" if r.namespaced else f"{wbase}/{r.plural}"
        ops.append(Op(wcoll, "get", "watch", f"{nsd}{k}List",
                      f"watch individual changes to a list of {k}. deprecated: use the 'watch' parameter with a "
                      "list operation instead.", "watchlist", ns_param + watch_params, [("200", "OK", watch_ref)],
                      all_media, consumes, **common))
        ops.append(Op(wcoll + "/{name}", "get", "watch", f"{nsd}{k}",
                      f"watch changes to an object of kind {k}. deprecated: use the 'watch' parameter with a list "
                      "operation instead, filtered to a single item with the 'fieldSelector' parameter.", "watch",
                      [_name_param(k)] + ns_param + watch_params, [("200", "OK", watch_ref)], all_media, consumes,
                      **common))
    if custom:  # apiextensions' builder: request bodies in JSON or YAML (no */*)
        for op in ops:
            op.v3_body_types = [JSON, YAML]
    return ops


_DISCOVERY_MEDIA = [JSON, YAML, PROTOBUF]


def _gv_discovery_op(group: str, version: str) -> Op:
    path = f"/api/{version}/" if not group else f"/apis/{group}/{version}/"
    return Op(path, "get", "get", "APIResources", "get available resources", None, [],
              [("200", "OK", META + "APIResourceList")], _DISCOVERY_MEDIA, _DISCOVERY_MEDIA, group=group,
              version=version)


def _root_ops(doc: str) -> list[Op]:
    """The documents of the discovery endpoints (`api`, `apis`, `apis/<group>`, `version`)."""
    if doc == "api":
        op = Op("/api/", "get", "get", "APIVersions", "get available API versions", None, [],
                [("200", "OK", META + "APIVersions")], _DISCOVERY_MEDIA, _DISCOVERY_MEDIA)
        op.tag, op.operation_id = "core", "getCoreAPIVersions"
        return [op]
    if doc == "apis":
        op = Op("/apis/", "get", "get", "APIVersions", "get available API versions", None, [],
                [("200", "OK", META + "APIGroupList")], _DISCOVERY_MEDIA, _DISCOVERY_MEDIA)
        op.tag, op.operation_id = "apis", "getAPIVersions"
        return [op]
    if doc == "version":
        op = Op("/version/", "get", "get", "CodeVersion", "get the version information for this server", None, [],
                [("200", "OK", "io.k8s.apimachinery.pkg.version.Info")], [JSON], [JSON])
        op.tag, op.operation_id = "version", "getCodeVersion"
        return [op]
    group = doc.split("/", 1)[1]
    return [Op(f"/apis/{group}/", "get", "get", "APIGroup", "get information of a group", None, [],
               [("200", "OK", META + "APIGroup")], _DISCOVERY_MEDIA, _DISCOVERY_MEDIA, group=group)]


# ----------------------------------------------------------------------------- rendering

def _refs(x: Any, acc: set[str]) -> set[str]:
    if isinstance(x, dict):
        for k, v in x.items():
            if k == "$ref" and isinstance(v, str) and v.startswith((V2_REF, V3_REF)):
                acc.add(v.rsplit("/", 1)[-1])
            else:
                _refs(v, acc)
    elif isinstance(x, list):
        for v in x:
            _refs(v, acc)
    return acc


def _hoist(ops: list[Op], param_key: Callable[[dict], str]) -> tuple[list[dict], dict[str, list[dict]]]:
    """kube-openapi: parameters every operation of the path has move to the path (sorted by name, in)."""
    shared = None
    for op in ops:
        keys = {param_key(p) for p in op.params}
        shared = keys if shared is None else shared & keys
    shared = shared or set()
    path_params: dict[str, dict] = {}
    per_op: dict[str, list[dict]] = {}
    for op in ops:
        mine = []
        for prm in op.params:
            if param_key(prm) in shared:
                path_params.setdefault(param_key(prm), prm)
            else:
                mine.append(prm)
        per_op[op.method] = sorted(mine, key=lambda x: (x["name"], x["in"]))
    return sorted(path_params.values(), key=lambda x: (x["name"], x["in"])), per_op


_METHOD_ORDER = ("get", "put", "post", "delete", "options", "head", "patch")


def _group_by_path(ops: list[Op]) -> dict[str, list[Op]]:
    by: dict[str, list[Op]] = {}
    for op in ops:
        by.setdefault(op.path, []).append(op)
    return {p: sorted(v, key=lambda o: _METHOD_ORDER.index(o.method)) for p, v in sorted(by.items())}


def _v3_paths(ops: list[Op]) -> dict:
    out: dict[str, dict] = {}
    for path, path_ops in _group_by_path(ops).items():
        path_params, per_op = _hoist(path_ops, lambda p: json.dumps(p, sort_keys=True))
        item: dict[str, Any] = {}
        for op in path_ops:
            o: dict[str, Any] = {"tags": [op.tag], "description": op.description, "operationId": op.operation_id}
            if per_op[op.method]:
                o["parameters"] = per_op[op.method]
            if op.body:
                types = op.consumes if op.method == "patch" else (op.v3_body_types or op.consumes)
                body: dict[str, Any] = {"content": {t: {"schema": {"$ref": V3_REF + op.body[0]}} for t in sorted(types)}}
                if op.body[1]:
                    body["required"] = True
                o["requestBody"] = body
            resp: dict[str, Any] = {}
            for code, desc, ref in op.responses:
                resp[code] = {"description": desc,
                              "content": {t: {"schema": {"$ref": V3_REF + ref}} for t in sorted(op.produces)}}
            resp["401"] = {"description": "Unauthorized"}
            o["responses"] = resp
            if op.action:
                o["x-kubernetes-action"] = op.action
            if op.gvk:
                o["x-kubernetes-group-version-kind"] = dict(op.gvk)
            item[op.method] = o
        if path_params:
            item["parameters"] = path_params
        out[path] = item
    return out


def _v2_param(p: dict) -> dict:
    out: dict[str, Any] = {"uniqueItems": True, "type": p["schema"]["type"], "description": p["description"],
                           "name": p["name"], "in": p["in"]}
    if p.get("required"):
        out["required"] = True
    return out


def _fnv1_64(b: bytes) -> int:
    h = 0xCBF29CE484222325
    for c in b:
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        h ^= c
    return h


@functools.lru_cache(maxsize=256)
def _param_hash(encoded: bytes) -> str:
    return base64.urlsafe_b64encode(_fnv1_64(encoded).to_bytes(8, "big")[:6]).decode()


def _shared_name(p: dict) -> str | None:
    """builder/parameters.go collectSharedParameters: the name a parameter is shared under, or None."""
    if p["name"] == "name" and p["in"] in ("query", "path"):
        return None
    if p["in"] == "query" and p["name"] in ("fieldValidation", "dryRun"):
        return None
    if p["in"] == "body" and not p["schema"]["$ref"].startswith(V2_REF + "io.k8s.apimachinery"):
        return None
    return p["name"] + "-" + _param_hash(jsonenc.dumps(p))


def _v2_paths(ops: list[Op], shared: dict[str, dict]) -> dict:
    def ref_or_inline(p: dict) -> dict:
        name = _shared_name(p)
        if name is None:
            return p
        shared[name] = p
        return {"$ref": "#/parameters/" + name}

    out: dict[str, dict] = {}
    for path, path_ops in _group_by_path(ops).items():
        for op in path_ops:
            op._v2params = [_v2_param(p) for p in op.params]
            if op.body:
                b: dict[str, Any] = {"name": "body", "in": "body"}
                if op.body[1]:
                    b["required"] = True
                b["schema"] = {"$ref": V2_REF + op.body[0]}
                op._v2params.insert(0, b)
        shared_keys = None
        for op in path_ops:
            keys = {jsonenc.dumps(p) for p in op._v2params if p["in"] != "body"}
            shared_keys = keys if shared_keys is None else shared_keys & keys
        shared_keys = shared_keys or set()
        item: dict[str, Any] = {}
        path_params: dict[bytes, dict] = {}
        for op in path_ops:
            mine = []
            for p in op._v2params:
                k = jsonenc.dumps(p)
                if p["in"] != "body" and k in shared_keys:
                    path_params.setdefault(k, p)
                else:
                    mine.append(p)
            mine.sort(key=lambda x: (x["name"], x["in"]))
            o: dict[str, Any] = {"description": op.description, "consumes": list(op.consumes),
                                 "produces": list(op.produces), "schemes": ["https"], "tags": [op.tag],
                                 "operationId": op.operation_id}
            if mine:
                o["parameters"] = [ref_or_inline(p) for p in mine]
            resp: dict[str, Any] = {code: {"description": desc, "schema": {"$ref": V2_REF + ref}}
                                    for code, desc, ref in op.responses}
            resp["401"] = {"description": "Unauthorized"}
            o["responses"] = resp
            if op.action:
                o["x-kubernetes-action"] = op.action
            if op.gvk:
                o["x-kubernetes-group-version-kind"] = {"group": op.gvk["group"], "kind": op.gvk["kind"],
                                                        "version": op.gvk["version"]}
            item[op.method] = o
        if path_params:
            item["parameters"] = [ref_or_inline(p) for p in sorted(path_params.values(),
                                                                     key=lambda x: (x["name"], x["in"]))]
        out[path] = item
    return out


def to_v2_schema(x: Any, in_properties: bool = False) -> Any:
    """A v3 schema as kube-openapi writes it in v2: a one-element `allOf` of a `$ref` becomes the `$ref`,
    `default` is dropped, a `oneOf` of plain types (int-or-string, quantity) becomes `type: string`."""
    if isinstance(x, list):
        return [to_v2_schema(v) for v in x]
    if not isinstance(x, dict):
        return x
    out: dict[str, Any] = {}
    for k, v in x.items():
        if in_properties:
            out[k] = to_v2_schema(v)
        elif k == "$ref" and isinstance(v, str):
            out[k] = v.replace(V3_REF, V2_REF)
        elif k == "default":
            continue
        elif k == "allOf" and len(v) == 1 and isinstance(v[0], dict) and isinstance(v[0].get("$ref"), str):
            out["$ref"] = v[0]["$ref"].replace(V3_REF, V2_REF)
        elif k == "oneOf" and all(isinstance(o, dict) and set(o) == {"type"} for o in v):
            out["type"] = "string"
        else:
            out[k] = to_v2_schema(v, k == "properties")
    return out


# ----------------------------------------------------------------------------- schemas

def _meta_gvks(kind: str, groups: list[tuple[str, str]] | None) -> list[dict]:
    """DeleteOptions / WatchEvent are registered in every group version; a group version's document lists
    the core one and its own, the v2 document (groups=None) every registration."""
    every = _data()["meta_gvks"][kind]
    if groups is None:
        return copy.deepcopy(every)
    return [{"group": "", "kind": kind, "version": "v1"}] + \
           [{"group": g, "kind": kind, "version": v} for g, v in groups if g]


def _type_meta(name: str) -> dict:
    # TypeMeta's documented properties, as every built-in kind's schema carries them.
    return copy.deepcopy(_data()["schemas"]["io.k8s.api.core.v1.ConfigMap"]["properties"][name])


_OBJECT_META_DOC = ("Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/"
                    "sig-architecture/api-conventions.md#metadata")
_LIST_META_DOC = ("Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/"
                  "sig-architecture/api-conventions.md#types-kinds")


def _cr_schemas(r: Resource, v2: bool) -> dict[str, dict]:
    """apiextensions builder: the kind's schema from the CRD's openAPIV3Schema, and its list."""
    ref = V2_REF if v2 else V3_REF
    gvk = [{"group": r.group, "kind": r.kind, "version": r.version}]
    schema = r.schema if isinstance(r.schema, dict) and r.schema else None
    if schema is None or (v2 and schema.get("x-kubernetes-preserve-unknown-fields")):
        kind: dict[str, Any] = {"type": "object"}
    else:
        kind = copy.deepcopy(schema)
        if v2:
            kind = _crd_v2(kind)
        props = dict(kind.get("properties") or {})
        props["apiVersion"] = _type_meta("apiVersion")
        props["kind"] = _type_meta("kind")
        props["metadata"] = ({"description": _OBJECT_META_DOC, "$ref": ref + META + "ObjectMeta"} if v2 else
                             {"description": _OBJECT_META_DOC, "allOf": [{"$ref": ref + META + "ObjectMeta"}]})
        kind["properties"] = dict(sorted(props.items()))
    kind["x-kubernetes-group-version-kind"] = gvk
    kind = dict(sorted(kind.items(), key=lambda kv: _schema_key_order(kv[0])))
    lst = {
        "description": f"{r.list_kind} is a list of {r.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": _type_meta("apiVersion"),
            "items": {"description": f"List of {r.plural}. More info: https://git.k8s.io/community/contributors/"
                                     "devel/sig-architecture/api-conventions.md",
                      "type": "array", "items": {"$ref": ref + definition_name(r)}},
            "kind": _type_meta("kind"),
            "metadata": ({"description": _LIST_META_DOC, "$ref": ref + META + "ListMeta"} if v2 else
                         {"description": _LIST_META_DOC, "allOf": [{"$ref": ref + META + "ListMeta"}]}),
        },
        "x-kubernetes-group-version-kind": [{"group": r.group, "kind": r.list_kind, "version": r.version}],
    }
    return {definition_name(r): kind, definition_name(r, r.list_kind): lst}


# spec.Schema's JSON field order (go-openapi), extensions after.
_SCHEMA_FIELDS = ["id", "$ref", "$schema", "description", "type", "nullable", "format", "title", "default", "maximum",
                  "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems",
                  "minItems", "uniqueItems", "multipleOf", "enum", "maxProperties", "minProperties", "required",
                  "items", "allOf", "oneOf", "anyOf", "not", "properties", "additionalProperties",
                  "patternProperties", "dependencies", "additionalItems", "definitions"]


def _schema_key_order(k: str) -> tuple:
    return (0, _SCHEMA_FIELDS.index(k), k) if k in _SCHEMA_FIELDS else (1, 0, k)


def _crd_v2(s: Any) -> Any:
    """apiextensions openapi/v2 ToStructuralOpenAPIV2 (and the v2 builder dropping defaults): no junctors,
    nullable and preserve-unknown-fields nodes lose what kubectl's v2 parser cannot take."""
    if not isinstance(s, dict):
        return s
    out = {k: v for k, v in s.items() if k not in ("allOf", "oneOf", "anyOf", "not", "default")}
    props = out.get("properties")
    if isinstance(props, dict) and out.get("required"):
        nullable = {f for f, fs in props.items() if isinstance(fs, dict) and fs.get("nullable")}
        out["required"] = [r for r in out["required"] if r not in nullable]
    ap = out.get("additionalProperties")
    if isinstance(ap, dict) and ap.get("nullable") and "required" in out:
        out.pop("required")
    if out.pop("nullable", False):
        out.pop("type", None)
        out.pop("items", None)
        out.pop("properties", None)
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("items", None)
        out.pop("properties", None)
    if "items" not in out and out.get("type") == "array":
        out.pop("type")
    if out.get("x-kubernetes-preserve-unknown-fields") and out.get("type") == "object":
        out.pop("type")
    if not out.get("required"):
        out.pop("required", None)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _crd_v2(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _crd_v2(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _crd_v2(out["additionalProperties"])
    return out


def _closure(roots: set[str], extra: dict[str, dict], v2: bool, meta_groups: list[tuple[str, str]] | None,
             custom_doc: bool = False) -> dict[str, dict]:
    schemas = _data()["schemas"]
    out: dict[str, dict] = {}
    todo = list(roots)
    while todo:
        n = todo.pop()
        if n in out:
            continue
        s = extra.get(n)
        if s is None:
            s = schemas[n]
            if n in (META + "DeleteOptions", META + "WatchEvent"):
                s = dict(s)
                kind = n.rsplit(".", 1)[1]
                if custom_doc:
                    s["x-kubernetes-group-version-kind"] = [
                        g for g in _meta_gvks(kind, None) if g["group"] not in _NOT_IN_LEGACY_SCHEME]
                else:
                    s["x-kubernetes-group-version-kind"] = _meta_gvks(kind, meta_groups)
            if v2:
                s = to_v2_schema(s)
        out[n] = s
        todo.extend(_refs(s, set()))
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------- memoization

# Only what is served is kept: the bodies, zstd-compressed (8.3 MB of JSON for the built-in kinds, 795 KiB
# compressed), and the small v3 index. The documents as dicts (and the upstream data they come from) are
# built per body and dropped: kept, they took a fresh process's first OpenAPI walk from +12 to +22 MiB of RSS
# (the "smaller floor" of issue 21).
_lock = threading.Lock()
_cache: dict[tuple, tuple[list[Resource], Any]] = {}
_CACHE_MAX = 512   # entries: a body per document, for every registry state since the last clear


def _state(registry: Registry) -> tuple[list[Resource], tuple]:
    rs = sorted(registry.all(), key=lambda r: (r.group, r.version, r.plural))
    return rs, tuple((r.group, r.version, r.plural, id(r)) for r in rs)


def _memo(kind: str, registry: Registry, extra: tuple, build):
    rs, sig = _state(registry)
    key = (kind, sig, extra)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit[1]
    value = build(rs)
    _built_since_trim[0] += 1
    with _lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = (rs, value)  # keeping `rs` alive keeps the id()s in the key unique
    return value


# ----------------------------------------------------------------------------- documents

def _gv_ops(rs: list[Resource], group: str, version: str) -> list[Op]:
    mine = [r for r in rs if r.group == group and r.version == version]
    ops = [] if any(r.custom for r in mine) else [_gv_discovery_op(group, version)]
    for r in mine:
        ops.extend(_resource_ops(r))
    return ops


def v2(registry: Registry) -> dict:
    """Swagger 2.0 document of everything served."""
    rs = _state(registry)[0]
    groups = discovery.api_group_list(registry)["groups"]
    ops = _root_ops("api") + _root_ops("apis") + _root_ops("version")
    served = {r.group for r in rs}  # the review kinds' groups (discovery only) are not described here
    ops += [op for g in groups if g["name"] in served and not _is_custom_group(rs, g["name"])
            for op in _root_ops(f"apis/{g['name']}")]
    for g, v in sorted({(r.group, r.version) for r in rs}):
        ops += _gv_ops(rs, g, v)
    shared: dict[str, dict] = {}
    paths = _v2_paths(ops, shared)
    extra: dict[str, dict] = {}
    for r in rs:
        if r.custom:
            extra.update(_cr_schemas(r, v2=True))
    roots = _refs(paths, set()) | _refs(shared, set())
    return {
        "swagger": "2.0",
        "info": _info(),
        "paths": paths,
        "definitions": _closure(roots, extra, True, None),
        "parameters": dict(sorted(shared.items())),
        "securityDefinitions": {"BearerToken": {"description": "Bearer Token authentication", "type": "apiKey",
                                                "name": "authorization", "in": "header"}},
        "security": [{"BearerToken": []}],
    }


def _is_custom_group(rs: list[Resource], group: str) -> bool:
    return any(r.custom for r in rs if r.group == group)


def _v3_paths_in_index(rs: list[Resource]) -> list[str]:
    out = ["api", "apis", "version"]
    for g, v in {(r.group, r.version) for r in rs}:
        out.append(f"api/{v}" if not g else f"apis/{g}/{v}")
        if g and not _is_custom_group(rs, g):
            out.append(f"apis/{g}")
    return sorted(set(out))


def v3_document(registry: Registry, path: str) -> dict | None:
    """The OpenAPI 3.0 document at /openapi/v3/<path>, or None."""
    rs = _state(registry)[0]
    if path not in _v3_paths_in_index(rs):
        return None
    custom = False
    meta_groups: list[tuple[str, str]] = []
    if path in ("api", "apis", "version") or (path.startswith("apis/") and path.count("/") == 1):
        ops = _root_ops(path)
    else:
        parts = path.split("/")
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        ops = _gv_ops(rs, group, version)
        custom = _is_custom_group(rs, group)
        meta_groups = [(group, version)]
    extra: dict[str, dict] = {}
    for r in rs:
        if r.custom and any(op.gvk and op.gvk["kind"] == r.kind and op.gvk["group"] == r.group for op in ops):
            extra.update(_cr_schemas(r, v2=False))
    paths = _v3_paths(ops)
    doc: dict[str, Any] = {"openapi": "3.0.0",
                           "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"} if custom else _info(),
                           "paths": paths}
    components: dict[str, Any] = {"schemas": _closure(_refs(paths, set()), extra, False, meta_groups,
                                                      custom_doc=custom)}
    if not custom:
        components["securitySchemes"] = copy.deepcopy(_SECURITY_SCHEME)
    doc["components"] = components
    return doc


def v3_group_version(registry: Registry, group: str, version: str) -> dict | None:
    return v3_document(registry, f"api/{version}" if not group else f"apis/{group}/{version}")


def _hash(body: bytes) -> str:
    return hashlib.sha512(body).hexdigest().upper()


class _Body:
    """A served document: its JSON zstd-compressed (`frame`) and its hash (the ETag)."""
    __slots__ = ("frame", "digest")

    def __init__(self, frame: bytes, digest: str):
        self.frame, self.digest = frame, digest

    @classmethod
    def of(cls, body: bytes) -> "_Body":
        # An exact-size copy: zstd's output buffer has the input's size (cache/compression.py, compress_all)
        return cls(memoryview(zstandard.ZstdCompressor(level=3).compress(body)).tobytes(), _hash(body))

    def get(self) -> tuple[bytes, str]:
        return zstandard.ZstdDecompressor().decompress(self.frame), self.digest


# ----------------------------------------------------------------------------- building out of process

# The documents are built in a child interpreter (`python -m apiserver.openapi`), which gets the served
# Resources and sends back only the compressed bodies: a build makes many short-lived objects (the
# upstream data, the document dicts), and in the server's own heap their garbage stayed as freed memory the
# allocator kept (+12 MiB of RSS after a walk of every document, against ~1 MiB of bodies kept: the "smaller
# floor" of issue 21). If the child cannot run, the server builds them itself, as before.
CHILD_TIMEOUT_S = 120.0


def _build_bodies(registry: Registry, wanted: list[tuple[str, str]]) -> list[_Body | None]:
    """The bodies of `wanted` ("v2", "") or ("v3", path) documents, None for a v3 path not served."""
    try:
        r = subprocess.run([sys.executable, "-m", "apiserver.openapi"], input=pickle.dumps((registry.all(), wanted)),
                           capture_output=True, timeout=CHILD_TIMEOUT_S, check=False,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if r.returncode == 0:
            return [None if got is None else _Body(*got) for got in pickle.loads(r.stdout)]
        log.warning("OpenAPI build child failed (exit %s): %s; building in this process", r.returncode,
                    r.stderr.decode(errors="replace")[-2000:])
    except (OSError, subprocess.SubprocessError, pickle.PickleError) as e:
        log.warning("OpenAPI build child could not run: %r; building in this process", e)
    return _build_here(registry, wanted)


def _build_here(registry: Registry, wanted: list[tuple[str, str]]) -> list[_Body | None]:
    out: list[_Body | None] = []
    for kind, path in wanted:
        if kind == "v2":
            out.append(_Body.of(jsonenc.dumps(v2(registry))))
        else:
            doc = v3_document(registry, path)
            out.append(None if doc is None else _Body.of(jsonenc.dumps(doc)))
    return out


def _child_main() -> None:
    resources, wanted = pickle.load(sys.stdin.buffer)
    bodies = _build_here(Registry(resources), wanted)
    sys.stdout.buffer.write(pickle.dumps([None if b is None else (b.frame, b.digest) for b in bodies]))


def _v3_body(registry: Registry, path: str) -> _Body | None:
    return _memo("v3body", registry, (path,), lambda rs: _build_bodies(registry, [("v3", path)])[0])


def v3_body(registry: Registry, path: str) -> tuple[bytes, str] | None:
    """The JSON of /openapi/v3/<path> and its hash, or None."""
    got = _v3_body(registry, path)
    if got is None:
        return None
    release_free_memory_after_build()
    return got.get()


def v3_hash(registry: Registry, path: str) -> str | None:
    got = _v3_body(registry, path)
    return None if got is None else got.digest


def v2_body(registry: Registry) -> tuple[bytes, str]:
    got = _memo("v2body", registry, (), lambda rs: _build_bodies(registry, [("v2", "")])[0])
    release_free_memory_after_build()
    return got.get()


def v3_index(registry: Registry) -> dict:
    """`/openapi/v3`: {"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}, ...}}."""
    def build(rs: list[Resource]) -> dict:
        paths = _v3_paths_in_index(rs)
        sig = _state(registry)[1]
        with _lock:
            missing = [p for p in paths if ("v3body", sig, (p,)) not in _cache]
        if missing:  # every document's hash is in the index: build them in one child
            for p, body in zip(missing, _build_bodies(registry, [("v3", p) for p in missing])):
                _memo("v3body", registry, (p,), lambda rs, body=body: body)
        return {"paths": {p: {"serverRelativeURL": f"/openapi/v3/{p}?hash={v3_hash(registry, p)}"}
                          for p in paths}}
    got = _memo("v3index", registry, (), build)
    release_free_memory_after_build()
    return got


_built_since_trim = [0]


def release_free_memory_after_build() -> None:
    """After documents were built (their dicts and the upstream data are garbage now), hand the freed heap back
    to the OS once, not once per document (a trim walks the heap)."""
    if _built_since_trim[0]:
        _built_since_trim[0] = 0
        _data.cache_clear()
        release_free_memory()


if __name__ == "__main__":
    _child_main()
