"""Object lifecycle rules the server applies on writes (sans-IO).

What upstream's registry strategies do for the kinds we serve, reduced to
what clients observe: server-set metadata (uid, creationTimestamp,
generation), status-subresource semantics, and CRD status conditions.
"""
from __future__ import annotations

import base64
import time
import uuid
from typing import Any

from . import defaults
from .resources import Resource

Obj = dict[str, Any]

# Kinds whose metadata.generation tracks spec changes (upstream sets it for
# these strategies; ConfigMaps, Secrets, Leases, RBAC, ... have no generation).
_GENERATION_KINDS = defaults.GENERATION_KINDS | {("apiextensions.k8s.io", "customresourcedefinitions")}

# The kinds served before every built-in kind was (issue 13) keep the fields a client sent as it sent them;
# every other built-in kind (pods too) is encoded as Go encodes its struct (`defaults.go_shape`).
_UNSHAPED = {("", "namespaces"), ("", "configmaps"), ("", "secrets"), ("", "nodes"), ("", "services"),
             ("", "serviceaccounts"), ("", "events"), ("coordination.k8s.io", "leases"),
             ("apiextensions.k8s.io", "customresourcedefinitions")}

# Top-level field order for the Go structs we serve (typed objects are
# encoded in struct order, S6.3); unknown fields follow in client order.
_TOP_ORDER = ["kind", "apiVersion", "metadata", "spec", "status", "immutable", "data", "binaryData",
              "stringData", "type", "secrets", "imagePullSecrets", "automountServiceAccountToken",
              "rules", "aggregationRule", "subjects", "roleRef"]
_TOP_RANK = {k: i for i, k in enumerate(_TOP_ORDER)}
_META_ORDER = ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
               "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
               "labels", "annotations", "ownerReferences", "finalizers", "managedFields")
_META_RANK = {k: i for i, k in enumerate(_META_ORDER)}
# Go maps are encoded with sorted keys.
_SORTED_MAPS = ("labels", "annotations")
_SORTED_TOP_MAPS = ("data", "binaryData", "stringData")


_stamp: tuple[int, str] = (0, "")   # (second, its RFC 3339 text): replaced whole, so a thread reads a pair


def now_rfc3339() -> str:
    """The time now to the second, as metav1.Time encodes it. Formatted once a second (strftime took 3.6 us,
    called twice per create)."""
    global _stamp
    t = int(time.time())
    st = _stamp
    if st[0] != t:
        st = _stamp = (t, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)))
    return st[1]


def canonical(resource: Resource, obj: Obj) -> Obj:
    """Reorder a typed object like Go would encode it; custom resources are left alone
    (they are encoded with sorted keys everywhere, S6.4)."""
    if resource.custom:
        return obj
    out = {k: obj[k] for k in sorted(obj, key=lambda k: _TOP_RANK.get(k, 99))}
    md = out.get("metadata")
    if isinstance(md, dict):
        md = {k: md[k] for k in sorted(md, key=lambda k: _META_RANK.get(k, 99))}
        for m in _SORTED_MAPS:
            if isinstance(md.get(m), dict):
                md[m] = dict(sorted(md[m].items()))
        out["metadata"] = md
    for m in _SORTED_TOP_MAPS:
        if isinstance(out.get(m), dict):
            out[m] = dict(sorted(out[m].items()))
    return out


def _has_generation(resource: Resource) -> bool:
    return resource.custom or (resource.group, resource.plural) in _GENERATION_KINDS


def _shaped(resource: Resource, obj: Obj, subresource: str = "") -> Obj:
    if resource.custom or (resource.group, resource.plural) in _UNSHAPED or \
            resource.group == "rbac.authorization.k8s.io":
        return obj
    if subresource == "status":  # the rest is the stored object, shaped when it was written
        return defaults.go_shape_field(resource.api_version, resource.kind, obj, "status")
    return defaults.go_shape(resource.api_version, resource.kind, obj)


def _namespace_name_label(ns: Obj) -> None:
    """namespaceStrategy.Canonicalize: the `kubernetes.io/metadata.name` label always names the namespace."""
    md = ns.setdefault("metadata", {})
    md["labels"] = {**(md.get("labels") or {}), "kubernetes.io/metadata.name": md.get("name", "")}


def _service_defaults(svc: Obj) -> None:
    """SetDefaults_Service (k8s.io/kubernetes pkg/apis/core/v1/defaults.go)."""
    spec = svc.get("spec")
    if not isinstance(spec, dict):
        return
    if not spec.get("sessionAffinity"):
        spec["sessionAffinity"] = "None"
    if spec["sessionAffinity"] == "None":
        spec.pop("sessionAffinityConfig", None)
    elif spec["sessionAffinity"] == "ClientIP":
        cfg = spec.get("sessionAffinityConfig") or {}
        if not (cfg.get("clientIP") or {}).get("timeoutSeconds"):
            spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 10800}}
    if not spec.get("type"):
        spec["type"] = "ClusterIP"
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            if not port.get("protocol"):
                port["protocol"] = "TCP"
            if port.get("targetPort") in (None, 0, ""):
                port["targetPort"] = port.get("port")
    t = spec["type"]
    if (t in ("LoadBalancer", "NodePort") or (t == "ClusterIP" and spec.get("externalIPs"))) \
            and not spec.get("externalTrafficPolicy"):
        spec["externalTrafficPolicy"] = "Cluster"
    if spec.get("internalTrafficPolicy") is None and t in ("NodePort", "LoadBalancer", "ClusterIP"):
        spec["internalTrafficPolicy"] = "Cluster"
    if t == "LoadBalancer":
        if spec.get("allocateLoadBalancerNodePorts") is None:
            spec["allocateLoadBalancerNodePorts"] = True
        for ing in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            if isinstance(ing, dict) and ing.get("ip") and ing.get("ipMode") is None:
                ing["ipMode"] = "VIP"


def prepare_create(resource: Resource, obj: Obj) -> Obj:
    """Server-set fields on create (uid, creationTimestamp, generation; no RV), the scheme's defaults."""
    if not resource.custom:
        defaults.defaults(resource.group, resource.plural, obj)
    md = obj.setdefault("metadata", {})
    md.pop("resourceVersion", None)
    md["uid"] = str(uuid.uuid4())
    md["creationTimestamp"] = now_rfc3339()
    md.pop("deletionTimestamp", None)
    md.pop("deletionGracePeriodSeconds", None)
    md.pop("selfLink", None)
    if _has_generation(resource):
        md["generation"] = 1
    else:
        md.pop("generation", None)
    if resource.plural == "namespaces":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
        _namespace_name_label(obj)
    elif resource.plural == "customresourcedefinitions":
        obj["status"] = crd_status(obj)
    elif resource.plural == "secrets":
        _secret_conversion(obj)
    elif resource.plural == "services":
        _service_defaults(obj)
    elif resource.custom and resource.status_subresource:
        obj.pop("status", None)  # status is written through /status only
    elif not resource.custom:
        defaults.prepare_create(resource.group, resource.plural, obj)
    return canonical(resource, _shaped(resource, obj))


def prepare_update(resource: Resource, new: Obj, old: Obj, subresource: str = "") -> Obj:
    """Carry server-owned fields from `old` into `new`; status-subresource rules; the scheme's defaults."""
    omd = old.get("metadata", {})
    if not resource.custom and subresource != "status":  # (a status update keeps the stored spec)
        defaults.defaults(resource.group, resource.plural, new)
    if subresource == "status":
        # Status updates change status only (upstream PrepareForUpdate of status strategies).
        merged = {**old, "metadata": dict(old.get("metadata") or {})}
        if "status" in new:
            merged["status"] = new["status"]
        else:
            merged.pop("status", None)
        new = merged
    elif resource.status_subresource and resource.plural != "customresourcedefinitions":
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)
    md = new.setdefault("metadata", {})
    for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
        if k in omd:
            md[k] = omd[k]
        else:
            md.pop(k, None)
    md.pop("resourceVersion", None)
    if _has_generation(resource):
        gen = int(omd.get("generation") or 1)
        changed = _spec_part(new) != _spec_part(old)
        md["generation"] = gen + 1 if changed and subresource != "status" else gen
    else:
        md.pop("generation", None)
    if resource.plural == "customresourcedefinitions":
        new["status"] = crd_status(new)
    elif resource.plural == "secrets":
        _secret_conversion(new)
    elif resource.plural == "namespaces":
        _namespace_name_label(new)
    elif resource.plural == "services":
        _service_defaults(new)
    elif (resource.group, resource.plural) == ("apps", "daemonsets") and subresource != "status":
        defaults.daemonset_update(old, new)
    elif (resource.group, resource.plural) == ("", "pods"):
        defaults.pod_status_conversion(new)
    return canonical(resource, _shaped(resource, new, subresource))


def _secret_conversion(obj: Obj) -> None:
    """What upstream's decoding does to a v1 Secret: stringData is merged into data (write-only
    field, v1 conversion) and an empty type defaults to Opaque (SetDefaults_Secret)."""
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        data = dict(obj.get("data") or {})
        for k, v in string_data.items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        obj["data"] = data
    if not obj.get("type"):
        obj["type"] = "Opaque"


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def crd_status(crd: Obj) -> Obj:
    """The status the apiextensions controllers would converge to: names accepted, established."""
    spec = crd.get("spec") or {}
    ts = now_rfc3339()
    conds = [
        {"type": "NamesAccepted", "status": "True", "lastTransitionTime": ts,
         "reason": "NoConflicts", "message": "no conflicts found"},
        {"type": "Established", "status": "True", "lastTransitionTime": ts,
         "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
    ]
    stored = [v["name"] for v in spec.get("versions") or [] if v.get("storage")]
    return {"conditions": conds, "acceptedNames": spec.get("names") or {}, "storedVersions": stored}


def bookmark(resource: Resource, rv: int, initial_events_end: bool = False) -> Obj:
    """A bookmark object: an empty object of the kind with only its RV (S4.10, S5.4)."""
    md: Obj = {"resourceVersion": str(rv)}
    if initial_events_end:
        md["annotations"] = {"k8s.io/initial-events-end": "true"}
    if resource.custom:
        return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": md}
    obj: Obj = {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": md}
    if resource.plural == "pods":
        obj["spec"] = {"containers": None}
        obj["status"] = {}
    return obj
