"""`meta.k8s.io/v1` Table output (what `kubectl get` asks for).

Public API
----------
``negotiate(accept) -> Target | None``
    The conversion the Accept header asks for (Table, PartialObjectMetadata, PartialObjectMetadataList of
    ``meta.k8s.io`` v1 or v1beta1), chosen as upstream's content negotiation does; None for the object.
``partial_object(obj, gv)``, ``partial_object_list(objects, list_meta, gv)``
    ``PartialObjectMetadata`` and ``PartialObjectMetadataList`` (client-go's metadata client).
``to_table(resource, objects, list_meta, include_object="Metadata", no_headers=False, ...) -> dict``
    One Table for a list (``objects`` = the items, ``list_meta`` = the list's metadata) or for a
    single object (``objects=[obj]``, ``list_meta={"resourceVersion": obj's RV}``).
``watch_table(resource, obj, first, include_object="Metadata") -> dict``
    The object of one WATCH event when the watch was opened with the Table Accept header.
``human_duration(seconds) -> str``
    ``k8s.io/apimachinery/pkg/util/duration.HumanDuration``.

Upstream behaviour reproduced (paraphrased, not copied):

* Column definitions and cells per kind: kubernetes ``pkg/printers/internalversion/printers.go``
  (v1.36). The server always generates with ``Wide: true`` (``pkg/printers/storage/storage.go``), so the
  priority-1 columns and cells are always present; kubectl hides them unless ``-o wide``.
* CustomResourceDefinitions: apiextensions-apiserver's own convertor (1.37: Name, Scope, Versions,
  Created At, and with priority 1 Group, Kind, ShortNames, Established).
* Kinds without a printer (roles, clusterroles) use the default convertor
  ``k8s.io/apiserver/pkg/registry/rest/table.go``: ``Name`` + ``Created At`` (type ``date``, cell
  RFC3339 UTC timestamp).
* Custom resources: ``apiextensions-apiserver/pkg/registry/customresource/tableconvertor``: ``Name`` +
  the CRD's additionalPrinterColumns (defaulted to ``Age``/date/``.metadata.creationTimestamp`` when
  the CRD has none, ``apiextensions-apiserver/pkg/apiserver/helpers.go``).
* Table metadata (``ListMeta``): resourceVersion/continue/remainingItemCount of the list, or the object's
  resourceVersion for a single object.
* ``includeObject`` (``k8s.io/apiserver/pkg/endpoints/handlers/response.go`` asTable): ``Object`` = the full
  object, ``Metadata`` (and empty, the default) = ``PartialObjectMetadata`` with the same Table
  group-version, ``None`` = ``"object": null``.
* WATCH with the Table Accept header (``response.go`` watchEmbeddedEncoder): every event object is a Table
  with exactly one row; the FIRST event encoded on the stream carries ``columnDefinitions``, all later
  ones are generated with ``NoHeaders`` and carry ``"columnDefinitions": null``. Each event Table's
  ``metadata.resourceVersion`` is that object's RV. ERROR events keep their Status object. (Bookmarks
  are not requested by ``kubectl get -w``.)
"""
from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import re
from typing import Any, Iterable, NamedTuple

from . import jsonenc
from .resources import Resource

__all__ = ["Target", "negotiate", "to_table", "watch_table", "human_duration",
           "column_definitions", "PARTIAL_KIND", "partial_object", "partial_object_list", "not_acceptable_message",
           "include_object_error"]

PARTIAL_KIND = "PartialObjectMetadata"

# --- Accept header: the conversion a client asks for ---------------------------------------

META_GROUP_VERSIONS = ("meta.k8s.io/v1", "meta.k8s.io/v1beta1")
TRANSFORM_KINDS = ("Table", "PartialObjectMetadata", "PartialObjectMetadataList")
# The media types of the serializers a resource endpoint offers, in upstream's order.
_MEDIA_TYPES = (("application", "json"), ("application", "yaml"), ("application", "vnd.kubernetes.protobuf"))


class Target(NamedTuple):
    """A conversion asked for with `;as=<kind>;g=meta.k8s.io;v=<version>`."""
    kind: str            # Table | PartialObjectMetadata | PartialObjectMetadataList
    group_version: str   # meta.k8s.io/v1 | meta.k8s.io/v1beta1


def _clauses(accept: str) -> list[tuple[str, str, dict[str, str]]]:
    """goautoneg.ParseAccept: (type, subtype, params) by quality, wildcards after concrete types."""
    out = []
    for i, part in enumerate(accept.split(",")):
        pieces = part.strip(" ").split(";")
        typ, _, sub = pieces[0].partition("/")
        typ, sub = typ.strip(" "), (sub.strip(" ") if sub else ("*" if typ.strip(" ") == "*" else ""))
        params, q = {}, 1.0
        for p in pieces[1:]:
            k, _, v = p.partition("=")
            k, v = k.strip(" "), v.strip(" ")
            if k == "q":
                try:
                    q = float(v)
                except ValueError:
                    q = 0.0
            elif k:
                params[k] = v
        out.append((-q, typ == "*", sub == "*", i, typ, sub, params))
    out.sort()
    return [(typ, sub, params) for *_, typ, sub, params in out]


def negotiate(accept: str | None) -> Target | None:
    """The conversion upstream's negotiation (handlers/negotiation NegotiateMediaTypeOptions with the
    resource endpoints' restrictions, handlers/rest.go AllowsMediaTypeTransform) picks from the Accept
    header, or None for the object itself.

    Clauses are tried best first; within a clause, `as`/`g`/`v` name the conversion, which must be a Table
    (JSON or YAML only), PartialObjectMetadata or PartialObjectMetadataList of meta.k8s.io v1/v1beta1, or
    the clause is skipped. kubectl get sends `application/json;as=Table;v=v1;g=meta.k8s.io,
    application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json`; client-go's metadata client asks
    for PartialObjectMetadata(List), protobuf first. (Responses are JSON here whatever the clause's
    media type; when no clause is acceptable upstream answers 406, we answer plain JSON.)
    """
    if not accept:
        return None
    for typ, sub, params in _clauses(accept):
        for mt, ms in _MEDIA_TYPES:
            if not ((typ == mt and sub in (ms, "*")) or (typ == "*" and sub == "*")):
                continue
            if not ({"as", "g", "v"} & params.keys()):
                return None
            gv, kind = f"{params.get('g', '')}/{params.get('v', '')}", params.get("as", "")
            if gv not in META_GROUP_VERSIONS or kind not in TRANSFORM_KINDS:
                continue
            if kind == "Table" and ms not in ("json", "yaml"):
                continue
            return Target(kind, gv)
    return None


_INTERNAL_PACKAGE = {"": "core", "rbac.authorization.k8s.io": "rbac", "coordination.k8s.io": "coordination",
                     "apiextensions.k8s.io": "apiextensions"}


def go_type(resource: Resource, is_list: bool) -> str:
    """The Go type upstream names in its NotAcceptable messages (`%T` of the internal object)."""
    if resource.custom:
        return "*unstructured.UnstructuredList" if is_list else "*unstructured.Unstructured"
    pkg = _INTERNAL_PACKAGE.get(resource.group, resource.group.split(".")[0])
    return f"*{pkg}.{resource.list_kind if is_list else resource.kind}"


def not_acceptable_message(target: Target, resource: Resource, is_list: bool) -> str | None:
    """handlers/response.go asPartialObjectMetadata(List): the 406 text when the conversion does not fit
    the answer (a PartialObjectMetadata of a list, a PartialObjectMetadataList of one object)."""
    if target.kind == "PartialObjectMetadata" and is_list:
        return f"you requested PartialObjectMetadata, but the requested object is a list ({go_type(resource, True)})"
    if target.kind == "PartialObjectMetadataList" and not is_list:
        return ("you requested PartialObjectMetadataList, but the requested object is not a list "
                f"({go_type(resource, False)})")
    return None


def include_object_error(include_object: str | None) -> str | None:
    """validation.ValidateTableOptions, as the 400 BadRequest message upstream answers a Table request with."""
    if include_object in (None, "", "None", "Metadata", "Object"):
        return None
    return ("Unable to convert to Table as requested: includeObject: Invalid value: "
            f"{jsonenc.dumps(include_object).decode()}: must be 'Metadata', 'Object', 'None', or empty")


def partial_object(obj: dict, group_version: str = "meta.k8s.io/v1") -> dict:
    """meta.AsPartialObjectMetadata: kind, apiVersion and the object's metadata."""
    return {"kind": PARTIAL_KIND, "apiVersion": group_version, "metadata": obj.get("metadata") or {}}


def partial_object_list(objects: Iterable[dict], list_meta: dict | None, group_version: str) -> dict:
    """asPartialObjectMetadataList: the list metadata keeps resourceVersion, continue and
    remainingItemCount only."""
    return {"kind": PARTIAL_KIND + "List", "apiVersion": group_version, "metadata": _list_meta(list_meta),
            "items": [partial_object(o, group_version) for o in objects]}


# --- durations ----------------------------------------------------------------

def human_duration(seconds: float) -> str:
    """duration.HumanDuration (apimachinery pkg/util/duration), on integer nanoseconds like Go."""
    ns = int(round(seconds * 1e9))
    secs = -((-ns) // 10**9) if ns < 0 else ns // 10**9  # Go: int(d.Seconds()) truncates toward zero
    if secs < -1:
        return "<invalid>"
    if secs < 0:
        return "0s"
    if secs < 60 * 2:
        return f"{secs}s"
    minutes = ns // (60 * 10**9)
    if minutes < 10:
        s = (ns // 10**9) % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 60 * 3:
        return f"{minutes}m"
    hours = ns // (3600 * 10**9)
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def _parse_time(value: Any) -> _dt.datetime | None:
    if not value or not isinstance(value, str):
        return None
    s = value.strip()
    if s.endswith("Z") or s.endswith("z"):
        s = s[:-1] + "+00:00"
    # fromisoformat (3.11) accepts fractional seconds of any length up to 6 digits; trim longer ones.
    s = re.sub(r"(\.\d{6})\d+", r"\1", s)
    try:
        t = _dt.datetime.fromisoformat(s)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t


def _since(value: Any, now: _dt.datetime) -> str:
    """translateTimestampSince: `<unknown>` for a zero/missing time."""
    t = _parse_time(value)
    if t is None:
        return "<unknown>"
    return human_duration((now - t).total_seconds())


def _rfc3339_utc(value: Any) -> str:
    """metav1.Time.UTC().Format(time.RFC3339); the zero time for a missing timestamp."""
    t = _parse_time(value)
    if t is None:
        return "0001-01-01T00:00:00Z"
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- column definitions ------------------------------------------------------
# Descriptions are the published API field docs (k8s.io/api *_swagger_doc_generated.go).

_D_NAME = ("Name must be unique within a namespace. Is required when creating resources, although some resources "
           "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
           "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
           "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names")
_D_CREATED = ("CreationTimestamp is a timestamp representing the server time when this object was created. It is not "
              "guaranteed to be set in happens-before order across separate operations. Clients may not set this "
              "value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null "
              "for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/"
              "api-conventions.md#metadata")
_D_POD_IP = "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."
_D_NODE_NAME = ("NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for "
                "scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this "
                "node becomes responsible for the lifecycle of this pod. This field should not be used to express a "
                "desire for the pod to be scheduled on a specific node. "
                "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename")
_D_NOMINATED = ("nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be "
                "scheduled right away as preemption victims receive their graceful termination periods. This field "
                "does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the "
                "pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the "
                "resources on this node to a higher priority pod that is created after preemption. As a result, "
                "this field may be different than PodSpec.nodeName when the pod is scheduled.")
_D_READINESS_GATES = ("If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all "
                      "its containers are ready AND all conditions specified in the readiness gates have status "
                      "equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/"
                      "580-pod-readiness-gates")
_D_CM_DATA = ("Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or "
              "'.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must "
              "not overlap with the keys in the BinaryData field, this is enforced during validation process.")
_D_SECRET_TYPE = ("Used to facilitate programmatic handling of secret data. More info: "
                  "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types")
_D_SECRET_DATA = ("Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or "
                  "'.'. The serialized form of the secret data is a base64 encoded string, representing the "
                  "arbitrary (possibly non-string) data value here. Described in "
                  "https://tools.ietf.org/html/rfc4648#section-4")
_D_KUBELET = "Kubelet Version reported by the node."
_D_ADDRESSES = ("List of addresses reachable to the node. Queried from cloud provider, if available. More info: "
                "https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as "
                "mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it "
                "is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an "
                "example. Consumers should assume that addresses can change during the lifetime of a Node. However, "
                "there are some exceptions where this may not be possible, such as Pods that inherit a Node's "
                "address in its own status or consumers of the downward API (status.hostIP).")
_D_OS_IMAGE = "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."
_D_KERNEL = "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."
_D_CRI = "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."
_D_SVC_TYPE = ("type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, "
               "ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for "
               "load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, "
               "by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no "
               "virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual "
               "IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same "
               "endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external "
               "load-balancer (if supported in the current cloud) which routes to the same endpoints as the "
               "clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields "
               "do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/"
               "services-networking/service/#publishing-services-service-types")
_D_CLUSTER_IP = ("clusterIP is the IP address of the service and is usually assigned randomly. If an address is "
                 "specified manually, is in-range (as per system configuration), and is not in use, it will be "
                 "allocated to the service; otherwise creation of the service will fail. This field may not be "
                 "changed through updates unless the type field is also being changed to ExternalName (which "
                 "requires this field to be blank) or the type field is being changed from ExternalName (in which "
                 "case this field may optionally be specified, as describe above).  Valid values are \"None\", empty "
                 "string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no "
                 "virtual IP), which is useful when direct endpoint connections are preferred and proxying is not "
                 "required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified "
                 "when creating a Service of type ExternalName, creation will fail. This field will be wiped when "
                 "updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/"
                 "services-networking/service/#virtual-ips-and-service-proxies")
_D_EXTERNAL_IPS = ("externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic "
                   "for this service.  These IPs are not managed by Kubernetes.  The user is responsible for "
                   "ensuring that traffic arrives at a node with this IP.  A common example is external "
                   "load-balancers that are not part of the Kubernetes system.")
_D_PORTS = ("The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/"
            "services-networking/service/#virtual-ips-and-service-proxies")
_D_SELECTOR = ("Route service traffic to pods with label keys and values matching this selector. If empty or not "
               "present, the service is assumed to have an external process managing its endpoints, which "
               "Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if "
               "type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/")
_D_EV_LAST = "The time at which the most recent occurrence of this event was recorded."
_D_EV_TYPE = "Type of this event (Normal, Warning), new types could be added in the future"
_D_EV_REASON = ("This should be a short, machine understandable string that gives the reason for the transition "
                "into the object's current status.")
_D_EV_OBJECT = "The object that this event is about."
_D_EV_FIELDPATH = ("If referring to a piece of an object instead of an entire object, this string should contain a "
                   "valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, "
                   "if the object reference is to a container within a pod, this would take on a value like: "
                   "\"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the "
                   "event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in "
                   "this pod). This syntax is chosen only to have some well-defined way of referencing a part of an "
                   "object.")
_D_EV_SOURCE = "The component reporting this event. Should be a short machine understandable string."
_D_EV_MESSAGE = "A human-readable description of the status of this operation."
_D_EV_FIRST = "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"
_D_EV_COUNT = "The number of times this event has occurred."
_D_HOLDER = ("holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election "
             "is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.")
# The printers take these from rbac/v1beta1's swagger docs.
_D_RB_ROLEREF = ("roleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. "
                 "If the RoleRef cannot be resolved, the Authorizer must return an error.")
_D_CRB_ROLEREF = ("roleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be "
                  "resolved, the Authorizer must return an error.")


def _col(name: str, description: str, type_: str = "string", fmt: str = "", priority: int = 0) -> dict[str, Any]:
    # TableColumnDefinition field order: name, type, format, description, priority (none omitempty).
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


_NAME = _col("Name", _D_NAME, fmt="name")
_AGE = _col("Age", _D_CREATED)

_COLUMNS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("", "pods"): [
        _NAME,
        _col("Ready", "The aggregate readiness state of this pod for accepting traffic."),
        _col("Status", "The aggregate status of the containers in this pod."),
        _col("Restarts", "The number of times the containers in this pod have been restarted and when the last "
                         "container in this pod has restarted."),
        _AGE,
        _col("IP", _D_POD_IP, priority=1),
        _col("Node", _D_NODE_NAME, priority=1),
        _col("Nominated Node", _D_NOMINATED, priority=1),
        _col("Readiness Gates", _D_READINESS_GATES, priority=1),
    ],
    ("", "namespaces"): [_NAME, _col("Status", "The status of the namespace"), _AGE],
    ("", "configmaps"): [_NAME, _col("Data", _D_CM_DATA), _AGE],
    ("", "secrets"): [_NAME, _col("Type", _D_SECRET_TYPE), _col("Data", _D_SECRET_DATA), _AGE],
    ("", "nodes"): [
        _NAME, _col("Status", "The status of the node"), _col("Roles", "The roles of the node"), _AGE,
        _col("Version", _D_KUBELET),
        _col("Internal-IP", _D_ADDRESSES, priority=1), _col("External-IP", _D_ADDRESSES, priority=1),
        _col("OS-Image", _D_OS_IMAGE, priority=1), _col("Kernel-Version", _D_KERNEL, priority=1),
        _col("Container-Runtime", _D_CRI, priority=1),
    ],
    ("", "services"): [
        _NAME, _col("Type", _D_SVC_TYPE), _col("Cluster-IP", _D_CLUSTER_IP), _col("External-IP", _D_EXTERNAL_IPS),
        _col("Port(s)", _D_PORTS), _AGE, _col("Selector", _D_SELECTOR, priority=1),
    ],
    ("", "serviceaccounts"): [_NAME, _AGE],
    ("", "events"): [
        _col("Last Seen", _D_EV_LAST), _col("Type", _D_EV_TYPE), _col("Reason", _D_EV_REASON),
        _col("Object", _D_EV_OBJECT), _col("Subobject", _D_EV_FIELDPATH, priority=1),
        _col("Source", _D_EV_SOURCE, priority=1), _col("Message", _D_EV_MESSAGE),
        _col("First Seen", _D_EV_FIRST, priority=1), _col("Count", _D_EV_COUNT, priority=1),
        _col("Name", _D_NAME, fmt="name", priority=1),
    ],
    ("coordination.k8s.io", "leases"): [_NAME, _col("Holder", _D_HOLDER), _AGE],
    ("rbac.authorization.k8s.io", "rolebindings"): [
        _NAME, _col("Role", _D_RB_ROLEREF), _AGE,
        _col("Users", "Users in the roleBinding", priority=1),
        _col("Groups", "Groups in the roleBinding", priority=1),
        _col("ServiceAccounts", "ServiceAccounts in the roleBinding", priority=1),
    ],
    ("rbac.authorization.k8s.io", "clusterrolebindings"): [
        _NAME, _col("Role", _D_CRB_ROLEREF), _AGE,
        _col("Users", "Users in the clusterRoleBinding", priority=1),
        _col("Groups", "Groups in the clusterRoleBinding", priority=1),
        _col("ServiceAccounts", "ServiceAccounts in the clusterRoleBinding", priority=1),
    ],
}

# rest.NewDefaultTableConvertor (roles, clusterroles, anything unknown)
_DEFAULT_COLUMNS = [_NAME, _col("Created At", _D_CREATED, type_="date")]

# apiextensions-apiserver pkg/registry/customresourcedefinition/tableconvertor (1.37)
_COLUMNS[("apiextensions.k8s.io", "customresourcedefinitions")] = [
    _NAME, _col("Scope", "Cluster/Namespaced"), _col("Versions", "Served versions"),
    _col("Created At", _D_CREATED, type_="date"), _col("Group", "API group", priority=1),
    _col("Kind", "CustomResource kind", priority=1), _col("ShortNames", "Short names", priority=1),
    _col("Established", "Established status", type_="boolean", priority=1),
]


def _crd_columns(resource: Resource) -> list[dict[str, Any]]:
    cols = resource.printer_columns or [
        {"name": "Age", "type": "date", "description": _D_CREATED, "jsonPath": ".metadata.creationTimestamp"}]
    out = [_NAME]
    for c in cols:
        desc = c.get("description") or f"Custom resource definition column (in JSONPath format): {c.get('jsonPath', '')}"
        out.append(_col(c.get("name", ""), desc, type_=c.get("type", "string"), fmt=c.get("format", ""),
                        priority=int(c.get("priority") or 0)))
    return out


_COLUMNS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "table_columns.json")


@functools.lru_cache(maxsize=1)
def upstream_columns() -> dict[str, list[dict[str, Any]]]:
    """`group/resource` -> the column definitions kube-apiserver v1.37.2 answers with
    (machinery/table_columns.json, extracted by tools/table_columns_upstream.py)."""
    with open(_COLUMNS_FILE, encoding="utf-8") as f:
        return json.load(f)


def column_definitions(resource: Resource) -> list[dict[str, Any]]:
    if resource.custom:
        return _crd_columns(resource)
    key = (resource.group, resource.plural)
    if key in _COLUMNS:
        return _COLUMNS[key]
    theirs = upstream_columns().get(f"{resource.group}/{resource.plural}")
    if theirs is None or key in _CELLS:
        return theirs or _DEFAULT_COLUMNS
    if [c["name"] for c in theirs] == ["Name", "Created At"]:
        return _DEFAULT_COLUMNS  # no printer upstream: rest.NewDefaultTableConvertor
    # A printer upstream whose cells are not computed here: its Name and Age (docs/differences.md).
    return [_NAME, _AGE]


# --- cells ---------------------------------------------------------------------

def _g(obj: Any, *path: str, default: Any = None) -> Any:
    for p in path:
        if not isinstance(obj, dict):
            return default
        obj = obj.get(p)
        if obj is None:
            return default
    return obj


def _name(obj: dict) -> str:
    return _g(obj, "metadata", "name", default="")


def _age(obj: dict, now: _dt.datetime) -> str:
    return _since(_g(obj, "metadata", "creationTimestamp"), now)


_SUCCEEDED = [{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]
_FAILED = [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]


def _is_restartable_init(c: dict | None) -> bool:
    return bool(c) and c.get("restartPolicy") == "Always"


def _later(a: _dt.datetime | None, b: Any) -> _dt.datetime | None:
    t = _parse_time(b)
    if t is None:
        return a
    if a is None or a < t:
        return t
    return a


def _pod_cells(pod: dict, now: _dt.datetime) -> tuple[list[Any], list[dict] | None]:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = spec.get("containers") or []
    init_specs = spec.get("initContainers") or []
    total = len(containers)
    ready = 0
    restarts = 0
    restartable_restarts = 0
    last_restart: _dt.datetime | None = None
    last_restartable_restart: _dt.datetime | None = None

    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    conditions = status.get("conditions") or []
    for c in conditions:
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    row_conditions = None
    if phase == "Succeeded":
        row_conditions = _SUCCEEDED
    elif phase == "Failed":
        row_conditions = _FAILED

    inits: dict[str, dict] = {}
    for c in init_specs:
        inits[c.get("name", "")] = c
        if _is_restartable_init(c):
            total += 1

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += int(cs.get("restartCount") or 0)
        last_term = _g(cs, "lastState", "terminated")
        if last_term is not None:
            last_restart = _later(last_restart, last_term.get("finishedAt"))
        restartable = _is_restartable_init(inits.get(cs.get("name", "")))
        if restartable:
            restartable_restarts += int(cs.get("restartCount") or 0)
            if last_term is not None:
                last_restartable_restart = _later(last_restartable_restart, last_term.get("finishedAt"))
        term = _g(cs, "state", "terminated")
        waiting = _g(cs, "state", "waiting")
        if term is not None and int(term.get("exitCode") or 0) == 0:
            continue
        if restartable and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if term is not None:
            if not term.get("reason"):
                if term.get("signal"):
                    reason = f"Init:Signal:{term['signal']}"
                else:
                    reason = f"Init:ExitCode:{int(term.get('exitCode') or 0)}"
            else:
                reason = "Init:" + term["reason"]
            initializing = True
        elif waiting is not None and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + waiting["reason"]
            initializing = True
        else:
            reason = f"Init:{i}/{len(init_specs)}"
            initializing = True
        break

    initialized_true = False
    for c in conditions:
        if c.get("type") == "Initialized":
            initialized_true = c.get("status") == "True"
            break

    if not initializing or initialized_true:
        restarts = restartable_restarts
        last_restart = last_restartable_restart
        has_running = False
        error_reason = ""
        statuses = status.get("containerStatuses") or []
        for cs in reversed(statuses):
            restarts += int(cs.get("restartCount") or 0)
            last_term = _g(cs, "lastState", "terminated")
            if last_term is not None:
                last_restart = _later(last_restart, last_term.get("finishedAt"))
            waiting = _g(cs, "state", "waiting")
            term = _g(cs, "state", "terminated")
            if waiting is not None and waiting.get("reason"):
                reason = waiting["reason"]
            elif term is not None:
                if term.get("reason"):
                    reason = term["reason"]
                elif term.get("signal"):
                    reason = f"Signal:{term['signal']}"
                else:
                    reason = f"ExitCode:{int(term.get('exitCode') or 0)}"
                if int(term.get("exitCode") or 0) != 0:
                    error_reason = reason
            elif cs.get("ready") and _g(cs, "state", "running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed":
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            if has_running and pod_ready:
                reason = "Running"
            elif error_reason:
                reason = error_reason
            elif has_running:
                reason = "NotReady"

    deleting = _g(pod, "metadata", "deletionTimestamp") is not None
    if deleting and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleting and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"

    restarts_str = str(restarts)
    if restarts != 0 and last_restart is not None:
        restarts_str = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"

    cells: list[Any] = [_name(pod), f"{ready}/{total}", reason, restarts_str, _age(pod, now)]
    # Wide columns (always generated server side).
    pod_ips = status.get("podIPs") or []
    pod_ip = (pod_ips[0].get("ip") if pod_ips else "") or "<none>"
    node_name = spec.get("nodeName") or "<none>"
    nominated = status.get("nominatedNodeName") or "<none>"
    gates = spec.get("readinessGates") or []
    readiness = "<none>"
    if gates:
        true_count = 0
        for g in gates:
            for c in conditions:
                if c.get("type") == g.get("conditionType"):
                    if c.get("status") == "True":
                        true_count += 1
                    break
        readiness = f"{true_count}/{len(gates)}"
    cells += [pod_ip, node_name, nominated, readiness]
    return cells, row_conditions


def _node_cells(node: dict, now: _dt.datetime) -> list[Any]:
    conds = {c.get("type"): c for c in (_g(node, "status", "conditions") or [])}
    status: list[str] = []
    if "Ready" in conds:
        status.append("Ready" if conds["Ready"].get("status") == "True" else "NotReady")
    if not status:
        status.append("Unknown")
    if _g(node, "spec", "unschedulable"):
        status.append("SchedulingDisabled")
    roles = set()
    for k, v in (_g(node, "metadata", "labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/"):
            role = k[len("node-role.kubernetes.io/"):]
            if role:
                roles.add(role)
        elif k == "kubernetes.io/role" and v:
            roles.add(v)
    info = _g(node, "status", "nodeInfo") or {}
    addrs = _g(node, "status", "addresses") or []

    def addr(t: str) -> str:
        for a in addrs:
            if a.get("type") == t:
                return a.get("address", "")
        return "<none>"

    kernel = info.get("kernelVersion") or "<unknown>"
    if info.get("architecture"):
        kernel += " (" + info["architecture"] + ")"
    return [_name(node), ",".join(status), ",".join(sorted(roles)) or "<none>", _age(node, now),
            info.get("kubeletVersion", ""), addr("InternalIP"), addr("ExternalIP"),
            info.get("osImage") or "<unknown>", kernel, info.get("containerRuntimeVersion") or "<unknown>"]


def _service_cells(svc: dict, now: _dt.datetime) -> list[Any]:
    spec = svc.get("spec") or {}
    typ = spec.get("type") or ""
    cluster_ips = spec.get("clusterIPs") or []
    internal = cluster_ips[0] if cluster_ips else "<none>"
    ext_ips = spec.get("externalIPs") or []
    if typ in ("ClusterIP", "NodePort"):
        external = ",".join(ext_ips) if ext_ips else "<none>"
    elif typ == "LoadBalancer":
        ingress = _g(svc, "status", "loadBalancer", "ingress") or []
        lb = sorted({i.get("ip") or i.get("hostname") for i in ingress if i.get("ip") or i.get("hostname")})
        lbs = ",".join(lb)  # wide: never truncated server side
        if ext_ips:
            external = ",".join((lbs.split(",") if lbs else []) + ext_ips)
        else:
            external = lbs or "<pending>"
    elif typ == "ExternalName":
        external = spec.get("externalName", "")
    else:
        external = "<unknown>"
    pieces = []
    for p in spec.get("ports") or []:
        proto = p.get("protocol", "")
        if int(p.get("nodePort") or 0) > 0:
            pieces.append(f"{p.get('port', 0)}:{p['nodePort']}/{proto}")
        else:
            pieces.append(f"{p.get('port', 0)}/{proto}")
    ports = ",".join(pieces) or "<none>"
    selector = spec.get("selector") or {}
    sel = ",".join(f"{k}={selector[k]}" for k in sorted(selector)) or "<none>"  # labels.FormatLabels
    return [_name(svc), typ, internal, external, ports, _age(svc, now), sel]


def _event_cells(ev: dict, now: _dt.datetime) -> list[Any]:
    first = _since(ev.get("firstTimestamp"), now)
    if _parse_time(ev.get("firstTimestamp")) is None:
        first = _since(ev.get("eventTime"), now)
    last = _since(ev.get("lastTimestamp"), now)
    if _parse_time(ev.get("lastTimestamp")) is None:
        last = first
    count = int(ev.get("count") or 0)
    series = ev.get("series")
    if series is not None:
        last = _since(series.get("lastObservedTime"), now)
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    inv = ev.get("involvedObject") or {}
    kind = (inv.get("kind") or "").lower()
    target = f"{kind}/{inv['name']}" if inv.get("name") else kind
    src = ev.get("source") or {}
    component = src.get("component") or ev.get("reportingComponent") or ""
    instance = src.get("host") or ev.get("reportingInstance") or ""
    source = component + ", " + instance if instance else component
    return [last, ev.get("type", ""), ev.get("reason", ""), target, inv.get("fieldPath", ""), source,
            (ev.get("message") or "").strip(), first, count, _name(ev)]


def _binding_cells(rb: dict, now: _dt.datetime) -> list[Any]:
    ref = rb.get("roleRef") or {}
    users, groups, sas = [], [], []
    for s in rb.get("subjects") or []:
        k = s.get("kind")
        if k == "ServiceAccount":
            sas.append(f"{s.get('namespace', '')}/{s.get('name', '')}")
        elif k == "User":
            users.append(s.get("name", ""))
        elif k == "Group":
            groups.append(s.get("name", ""))
    return [_name(rb), f"{ref.get('kind', '')}/{ref.get('name', '')}", _age(rb, now),
            ", ".join(users), ", ".join(groups), ", ".join(sas)]


def _go_text(v: Any) -> str:
    """jsonpath PrintResults for one value: JSON for maps/lists, fmt.Fprint for scalars."""
    if isinstance(v, (dict, list)):
        return jsonenc.dumps_sorted(v).decode()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isfinite(v) and v == int(v) and abs(v) < 1e21:
            return str(int(v))
        return repr(v)
    if v is None:
        return "<nil>"
    return str(v)


_PATH_TOKEN = re.compile(r"\.([A-Za-z0-9_\-/]+)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def jsonpath_get(obj: Any, path: str) -> tuple[bool, Any]:
    """A small JSONPath subset: `.a.b`, `.a[0].b`, `.metadata.labels['x/y']`; braces optional."""
    p = path.strip()
    if p.startswith("{") and p.endswith("}"):
        p = p[1:-1].strip()
    if p.startswith("$"):
        p = p[1:]
    pos = 0
    cur = obj
    while pos < len(p):
        m = _PATH_TOKEN.match(p, pos)
        if not m:
            return False, None
        pos = m.end()
        key, idx, q1, q2 = m.groups()
        if idx is not None:
            if not isinstance(cur, list) or int(idx) >= len(cur):
                return False, None
            cur = cur[int(idx)]
        else:
            k = key if key is not None else (q1 if q1 is not None else q2)
            if not isinstance(cur, dict) or k not in cur:
                return False, None
            cur = cur[k]
    return True, cur


def _cr_cell(col: dict, obj: dict, now: _dt.datetime) -> Any:
    found, value = jsonpath_get(obj, col.get("jsonPath", ""))
    if not found:
        return None
    typ = col.get("type", "string")
    if typ == "string":
        return _go_text(value)
    if value is None:
        return None
    if typ in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return int(value) if typ == "integer" else float(value)
    if typ == "boolean":
        return value if isinstance(value, bool) else None
    if typ == "date":
        if isinstance(value, str):
            t = _parse_time(value)
            if t is None:
                return "<invalid>"
            return human_duration((now - t).total_seconds())
        return None
    return None


def _crd_cells(crd: dict) -> list[Any]:
    spec = crd.get("spec") or {}
    versions = sorted(v.get("name", "") + ("(storage)" if v.get("storage") else "")
                      for v in spec.get("versions") or [] if v.get("served"))
    established = any(c.get("type") == "Established" and c.get("status") == "True"
                      for c in _g(crd, "status", "conditions", default=None) or [])
    return [_name(crd), spec.get("scope", ""), ",".join(versions),
            _rfc3339_utc(_g(crd, "metadata", "creationTimestamp")), spec.get("group", ""),
            _g(crd, "spec", "names", "kind", default=""),
            ",".join(_g(crd, "spec", "names", "shortNames", default=None) or []), established]


def _cells(resource: Resource, obj: dict, now: _dt.datetime) -> tuple[list[Any], list[dict] | None]:
    if resource.custom:
        cols = resource.printer_columns or [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]
        return [_name(obj)] + [_cr_cell(c, obj, now) for c in cols], None
    key = (resource.group, resource.plural)
    if key == ("", "pods"):
        return _pod_cells(obj, now)
    if key == ("", "namespaces"):
        return [_name(obj), _g(obj, "status", "phase", default=""), _age(obj, now)], None
    if key == ("", "configmaps"):
        return [_name(obj), len(obj.get("data") or {}) + len(obj.get("binaryData") or {}), _age(obj, now)], None
    if key == ("", "secrets"):
        return [_name(obj), obj.get("type", ""), len(obj.get("data") or {}), _age(obj, now)], None
    if key == ("", "nodes"):
        return _node_cells(obj, now), None
    if key == ("", "services"):
        return _service_cells(obj, now), None
    if key == ("", "serviceaccounts"):
        return [_name(obj), _age(obj, now)], None
    if key == ("", "events"):
        return _event_cells(obj, now), None
    if key == ("coordination.k8s.io", "leases"):
        return [_name(obj), _g(obj, "spec", "holderIdentity", default=""), _age(obj, now)], None
    if key in (("rbac.authorization.k8s.io", "rolebindings"), ("rbac.authorization.k8s.io", "clusterrolebindings")):
        return _binding_cells(obj, now), None
    if key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        return _crd_cells(obj), None
    if key in _CELLS:
        return _CELLS[key](obj, now), None
    if column_definitions(resource) is not _DEFAULT_COLUMNS:
        return [_name(obj), _age(obj, now)], None
    return [_name(obj), _rfc3339_utc(_g(obj, "metadata", "creationTimestamp"))], None


# --- the printers of the kinds served since issue 13 (printers.go; headers from table_columns.json) ----------

def _containers(spec: Any) -> tuple[str, str]:
    """layoutContainerCells: container names and images, comma-separated."""
    cs = [c for c in (spec or {}).get("containers") or [] if isinstance(c, dict)] if isinstance(spec, dict) else []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def format_labels(labels: Any) -> str:
    """labels.FormatLabels: `k=v` sorted by key, `<none>` when empty."""
    if not isinstance(labels, dict) or not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def selector_string(sel: Any) -> str | None:
    """metav1.LabelSelectorAsSelector(sel).String(): requirements sorted by key; None when invalid."""
    if not isinstance(sel, dict):
        return ""
    reqs: list[tuple[str, str]] = []
    for k, v in (sel.get("matchLabels") or {}).items():
        reqs.append((k, f"{k}={v}"))
    for e in sel.get("matchExpressions") or []:
        if not isinstance(e, dict):
            return None
        k, op, vals = e.get("key", ""), e.get("operator", ""), sorted(set(e.get("values") or []))
        if op in ("In", "NotIn"):
            if not vals:
                return None
            reqs.append((k, f"{k} {'in' if op == 'In' else 'notin'} ({','.join(vals)})"))
        elif op == "Exists":
            reqs.append((k, k))
        elif op == "DoesNotExist":
            reqs.append((k, "!" + k))
        else:
            return None
    return ",".join(r for _, r in sorted(reqs, key=lambda x: x[0]))


def format_selector(sel: Any) -> str:
    """metav1.FormatLabelSelector: `<none>` for nothing or everything, `<error>` when invalid."""
    if sel is None:
        return "<none>"
    s = selector_string(sel)
    if s is None:
        return "<error>"
    return s or "<none>"


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _template_spec(obj: dict, *path: str) -> Any:
    return _g(obj, "spec", *path, "template", "spec")


def _deployment_cells(d: dict, now: _dt.datetime) -> list[Any]:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    names, images = _containers(_template_spec(d))
    sel = selector_string(spec.get("selector"))
    return [_name(d), f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}",
            _int(status.get("updatedReplicas")), _int(status.get("availableReplicas")), _age(d, now), names, images,
            "<invalid>" if sel is None else sel]


def _replicaset_cells(rs: dict, now: _dt.datetime) -> list[Any]:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    names, images = _containers(_template_spec(rs))
    return [_name(rs), _int(spec.get("replicas")), _int(status.get("replicas")), _int(status.get("readyReplicas")),
            _age(rs, now), names, images, format_selector(spec.get("selector"))]


def _replication_controller_cells(rc: dict, now: _dt.datetime) -> list[Any]:
    spec, status = rc.get("spec") or {}, rc.get("status") or {}
    names, images = _containers(_template_spec(rc))
    return [_name(rc), _int(spec.get("replicas")), _int(status.get("replicas")), _int(status.get("readyReplicas")),
            _age(rc, now), names, images, format_labels(spec.get("selector"))]


def _statefulset_cells(ss: dict, now: _dt.datetime) -> list[Any]:
    spec, status = ss.get("spec") or {}, ss.get("status") or {}
    names, images = _containers(_template_spec(ss))
    return [_name(ss), f"{_int(status.get('readyReplicas'))}/{_int(spec.get('replicas'))}", _age(ss, now), names,
            images]


def _daemonset_cells(ds: dict, now: _dt.datetime) -> list[Any]:
    spec, status = ds.get("spec") or {}, ds.get("status") or {}
    names, images = _containers(_template_spec(ds))
    return [_name(ds), _int(status.get("desiredNumberScheduled")), _int(status.get("currentNumberScheduled")),
            _int(status.get("numberReady")), _int(status.get("updatedNumberScheduled")),
            _int(status.get("numberAvailable")), format_labels(_g(_template_spec(ds), "nodeSelector")), _age(ds, now),
            names, images, format_selector(spec.get("selector"))]


def _has_condition(obj: dict, typ: str) -> bool:
    return any(isinstance(c, dict) and c.get("type") == typ and c.get("status") == "True"
               for c in _g(obj, "status", "conditions", default=None) or [])


_JOB_STATUS = (("Complete", "Complete"), ("Failed", "Failed"), (None, "Terminating"), ("Suspended", "Suspended"),
               ("FailureTarget", "FailureTarget"), ("SuccessCriteriaMet", "SuccessCriteriaMet"))


def _job_cells(job: dict, now: _dt.datetime) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = _int(status.get("succeeded"))
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{_int(spec.get('completions'))}"
    elif _int(spec.get("parallelism")) > 1:
        completions = f"{succeeded}/1 of {_int(spec.get('parallelism'))}"
    else:
        completions = f"{succeeded}/1"
    start, end = _parse_time(status.get("startTime")), _parse_time(status.get("completionTime"))
    duration = "" if start is None else human_duration(((end or now) - start).total_seconds())
    state = "Running"
    for cond, word in _JOB_STATUS:
        if (_g(job, "metadata", "deletionTimestamp") is not None) if cond is None else _has_condition(job, cond):
            state = word
            break
    names, images = _containers(_template_spec(job))
    return [_name(job), state, completions, duration, _age(job, now), names, images,
            format_selector(spec.get("selector"))]


def _bool_ptr(v: Any) -> str:
    """printBoolPtr."""
    if v is None:
        return "<unset>"
    return "True" if v else "False"


def _cronjob_cells(cj: dict, now: _dt.datetime) -> list[Any]:
    spec, status = cj.get("spec") or {}, cj.get("status") or {}
    last = status.get("lastScheduleTime")
    job_spec = _g(spec, "jobTemplate", "spec") or {}
    names, images = _containers(_g(job_spec, "template", "spec"))
    return [_name(cj), spec.get("schedule", ""), spec.get("timeZone") or "<none>", _bool_ptr(spec.get("suspend")),
            len(status.get("active") or []), "<none>" if last is None else _since(last, now), _age(cj, now), names,
            images, format_selector(job_spec.get("selector"))]


def _pod_template_cells(pt: dict, now: _dt.datetime) -> list[Any]:
    names, images = _containers(_g(pt, "template", "spec"))
    return [_name(pt), names, images, format_labels(_g(pt, "template", "metadata", "labels"))]


def _group_kind_name(api_version: str, kind: str, name: str) -> str:
    """formatResourceName(GroupKind, name, withKind): `kind.group/name` in lower case."""
    group = api_version.rpartition("/")[0] if "/" in (api_version or "") else ""
    gk = f"{kind}.{group}" if group else kind
    return f"{gk.lower()}/{name}" if kind else name


def _controller_revision_cells(cr: dict, now: _dt.datetime) -> list[Any]:
    owner = next((o for o in _g(cr, "metadata", "ownerReferences", default=None) or []
                  if isinstance(o, dict) and o.get("controller") is True), None)
    controller = "<none>" if owner is None else _group_kind_name(owner.get("apiVersion", ""), owner.get("kind", ""),
                                                               owner.get("name", ""))
    return [_name(cr), controller, _int(cr.get("revision")), _age(cr, now)]


def _intstr(v: Any) -> str:
    return "N/A" if v is None else str(v)


def _pdb_cells(pdb: dict, now: _dt.datetime) -> list[Any]:
    spec = pdb.get("spec") or {}
    return [_name(pdb), _intstr(spec.get("minAvailable")), _intstr(spec.get("maxUnavailable")),
            _int(_g(pdb, "status", "disruptionsAllowed")), _age(pdb, now)]


def _count_cells(field: str, *path: str):
    def cells(obj: dict, now: _dt.datetime) -> list[Any]:
        return [_name(obj), len(_g(obj, *path, field, default=None) or []), _age(obj, now)]
    return cells


def _field_cells(*paths: tuple[str, ...]):
    def cells(obj: dict, now: _dt.datetime) -> list[Any]:
        return [_name(obj)] + [_g(obj, *p, default="") for p in paths] + [_age(obj, now)]
    return cells


def _name_age(obj: dict, now: _dt.datetime) -> list[Any]:
    return [_name(obj), _age(obj, now)]


def _network_policy_cells(np: dict, now: _dt.datetime) -> list[Any]:
    return [_name(np), format_selector(_g(np, "spec", "podSelector", default={})), _age(np, now)]


def _ingress_cells(ing: dict, now: _dt.datetime) -> list[Any]:
    spec = ing.get("spec") or {}
    rules = [r for r in spec.get("rules") or [] if isinstance(r, dict)]
    hosts: list[str] = []
    more = False
    for rule in rules:  # formatHosts: at most 3
        if len(hosts) == 3:
            more = True
        if not more and rule.get("host"):
            hosts.append(rule["host"])
    host_cell = ",".join(hosts) if hosts else "*"
    if hosts and more:
        host_cell = f"{host_cell} + {len(rules) - 3} more..."
    lb = sorted({i.get("ip") or i.get("hostname") for i in _g(ing, "status", "loadBalancer", "ingress", default=None)
                 or [] if isinstance(i, dict) and (i.get("ip") or i.get("hostname"))})
    return [_name(ing), spec.get("ingressClassName") or "<none>", host_cell, ",".join(lb),
            "80, 443" if spec.get("tls") else "80", _age(ing, now)]


def _ingress_class_cells(ic: dict, now: _dt.datetime) -> list[Any]:
    name = _name(ic)
    if (_g(ic, "metadata", "annotations", default=None) or {}).get("ingressclass.kubernetes.io/is-default-class") \
            == "true":
        name += " (default)"
    params = _g(ic, "spec", "parameters")
    cell = "<none>"
    if isinstance(params, dict):
        cell = params.get("kind", "") + ("." + params["apiGroup"] if params.get("apiGroup") is not None else "") + \
            "/" + params.get("name", "")
    return [name, _g(ic, "spec", "controller", default=""), cell, _age(ic, now)]


def _storage_class_cells(sc: dict, now: _dt.datetime) -> list[Any]:
    return [_name(sc), sc.get("provisioner", ""), sc.get("reclaimPolicy") or "Delete",
            sc.get("volumeBindingMode") or "Immediate", bool(sc.get("allowVolumeExpansion")), _age(sc, now)]


def _priority_class_cells(pc: dict, now: _dt.datetime) -> list[Any]:
    return [_name(pc), _int(pc.get("value")), bool(pc.get("globalDefault")), _age(pc, now),
            pc.get("preemptionPolicy") or ""]


def _csi_driver_cells(d: dict, now: _dt.datetime) -> list[Any]:
    spec = d.get("spec") or {}
    tokens = spec.get("tokenRequests")
    modes = ",".join(spec.get("volumeLifecycleModes") or []) or "<none>"
    return [_name(d), spec.get("attachRequired", True) is not False, bool(spec.get("podInfoOnMount")),
            bool(spec.get("storageCapacity")),
            "<unset>" if tokens is None else ",".join(t.get("audience", "") for t in tokens if isinstance(t, dict)),
            bool(spec.get("requiresRepublish")), modes, _age(d, now)]


def _access_modes(modes: Any) -> str:
    """helper.GetAccessModesAsString."""
    modes = modes if isinstance(modes, list) else []
    return ",".join(short for mode, short in (("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"),
                                              ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP")) if mode in modes)


def _storage_class_of(obj: dict, field: str) -> str:
    """GetPersistentVolume(Claim)Class: the beta annotation first."""
    ann = _g(obj, "metadata", "annotations", default=None) or {}
    if "volume.beta.kubernetes.io/storage-class" in ann:
        return ann["volume.beta.kubernetes.io/storage-class"]
    return _g(obj, "spec", field, default="") or ""


def _phase(obj: dict) -> str:
    return "Terminating" if _g(obj, "metadata", "deletionTimestamp") else _g(obj, "status", "phase", default="")


def _pvc_cells(pvc: dict, now: _dt.datetime) -> list[Any]:
    spec = pvc.get("spec") or {}
    bound = bool(spec.get("volumeName"))
    return [_name(pvc), _phase(pvc), spec.get("volumeName", ""),
            str(_g(pvc, "status", "capacity", "storage", default="")) if bound else "",
            _access_modes(_g(pvc, "status", "accessModes")) if bound else "", _storage_class_of(pvc, "storageClassName"),
            spec.get("volumeAttributesClassName") or "<unset>", _age(pvc, now), spec.get("volumeMode") or "<unset>"]


def _pv_cells(pv: dict, now: _dt.datetime) -> list[Any]:
    spec = pv.get("spec") or {}
    ref = spec.get("claimRef")
    claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if isinstance(ref, dict) else ""
    return [_name(pv), str((spec.get("capacity") or {}).get("storage", "0")), _access_modes(spec.get("accessModes")),
            spec.get("persistentVolumeReclaimPolicy", ""), _phase(pv), claim, _storage_class_of(pv, "storageClassName"),
            spec.get("volumeAttributesClassName") or "<unset>", _g(pv, "status", "reason", default=""), _age(pv, now),
            spec.get("volumeMode") or "<unset>"]


def _host_port(ip: str, port: Any) -> str:
    """net.JoinHostPort."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _endpoints_cells(ep: dict, now: _dt.datetime) -> list[Any]:
    """formatEndpoints: at most 3 addresses (with each port), `+ N more...`."""
    subsets = [ss for ss in ep.get("subsets") or [] if isinstance(ss, dict)]
    shown: list[str] = []
    more, count = False, 0
    for ss in subsets:
        addrs = [a.get("ip", "") for a in ss.get("addresses") or [] if isinstance(a, dict)]
        ports = [p for p in ss.get("ports") or [] if isinstance(p, dict)]
        for port in ports or [None]:
            count += len(addrs)
            for ip in addrs:
                if len(shown) == 3:
                    more = True
                    break
                shown.append(ip if port is None else _host_port(ip, port.get("port", 0)))
    cell = "<none>" if not subsets else ",".join(shown) + (f" + {count - 3} more..." if more else "")
    return [_name(ep), cell, _age(ep, now)]


def _more(items: list[str], count: int) -> str:
    """listWithMoreString over the first three of `count` items."""
    if count > 3:
        return ",".join(items[:3]) + f" + {count - 3} more..."
    return ",".join(items) or "<unset>"


def _endpoint_slice_cells(es: dict, now: _dt.datetime) -> list[Any]:
    ports = [p for p in es.get("ports") or [] if isinstance(p, dict)]
    port_cells = [str(p["port"]) if p.get("port") is not None else (p["name"] if p.get("name") is not None else "*")
                  for p in ports]
    addrs = [a for e in es.get("endpoints") or [] if isinstance(e, dict) for a in e.get("addresses") or []]
    return [_name(es), es.get("addressType", ""), _more(port_cells, len(port_cells)), _more(addrs, len(addrs)),
            _age(es, now)]


def _param_kind(policy: dict, now: _dt.datetime, count_field: str) -> list[Any]:
    spec = policy.get("spec") or {}
    kind = spec.get("paramKind")
    param = f"{kind.get('apiVersion', '')}/{kind.get('kind', '')}" if isinstance(kind, dict) else "<unset>"
    return [_name(policy), len(spec.get(count_field) or []), param, _age(policy, now)]


def _policy_binding_cells(b: dict, now: _dt.datetime) -> list[Any]:
    spec = b.get("spec") or {}
    ref = spec.get("paramRef")
    param = "<unset>"
    if isinstance(ref, dict) and ref.get("name"):
        param = f"{ref.get('namespace') or '*'}/{ref['name']}"
    return [_name(b), spec.get("policyName", ""), param, _age(b, now)]


def _hpa_metric(spec: dict, status: dict | None) -> str:
    """One metric of formatHPAMetrics: `current/target` (quantities as stored)."""
    typ = spec.get("type")
    key = {"External": "external", "Pods": "pods", "Object": "object", "Resource": "resource",
           "ContainerResource": "containerResource"}.get(typ)
    if key is None:
        return "<unknown type>"
    src, cur = spec.get(key) or {}, (status or {}).get(key)
    target = src.get("target") or {}
    current = (cur or {}).get("current") or {}
    if key in ("resource", "containerResource"):
        name = src.get("name", "")
        if target.get("averageValue") is not None:
            now = str(current.get("averageValue", "")) if cur is not None else "<unknown>"
            return f"{name}: {now}/{target['averageValue']}"
        now = f"{current['averageUtilization']}%" if cur is not None and current.get("averageUtilization") is not None \
            else "<unknown>"
        want = f"{target['averageUtilization']}%" if target.get("averageUtilization") is not None else "<auto>"
        return f"{name}: {now}/{want}"
    if key == "pods":
        now = str(current.get("averageValue", "")) if cur is not None else "<unknown>"
        return f"{now}/{target.get('averageValue', '')}"
    if target.get("averageValue") is not None:
        now = str(current["averageValue"]) if cur is not None and current.get("averageValue") is not None \
            else "<unknown>"
        return f"{now}/{target['averageValue']} (avg)"
    now = str(current.get("value", "")) if cur is not None else "<unknown>"
    return f"{now}/{target.get('value', '')}"


def _hpa_cells(hpa: dict, now: _dt.datetime) -> list[Any]:
    spec, status = hpa.get("spec") or {}, hpa.get("status") or {}
    metrics = [m for m in spec.get("metrics") or [] if isinstance(m, dict)]
    statuses = status.get("currentMetrics") or []
    shown = [_hpa_metric(m, statuses[i] if i < len(statuses) and isinstance(statuses[i], dict) else None)
             for i, m in enumerate(metrics)]
    targets = "<none>" if not shown else ", ".join(shown[:2]) + (f" + {len(shown) - 2} more..." if len(shown) > 2 else "")
    ref = spec.get("scaleTargetRef") or {}
    return [_name(hpa), f"{ref.get('kind', '')}/{ref.get('name', '')}", targets,
            str(spec["minReplicas"]) if spec.get("minReplicas") is not None else "<unset>",
            _int(spec.get("maxReplicas")), _int(status.get("currentReplicas")), _age(hpa, now)]


_CELLS: dict[tuple[str, str], Any] = {
    ("autoscaling", "horizontalpodautoscalers"): _hpa_cells,
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"):
        lambda p, now: _param_kind(p, now, "validations"),
    ("admissionregistration.k8s.io", "mutatingadmissionpolicies"): lambda p, now: _param_kind(p, now, "mutations"),
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): _policy_binding_cells,
    ("admissionregistration.k8s.io", "mutatingadmissionpolicybindings"): _policy_binding_cells,
    ("networking.k8s.io", "servicecidrs"):
        lambda c, now: [_name(c), ",".join(_g(c, "spec", "cidrs", default=None) or []), _age(c, now)],
    ("storage.k8s.io", "volumeattributesclasses"): _field_cells(("driverName",)),
    ("resource.k8s.io", "resourceslices"): _field_cells(("spec", "nodeName"), ("spec", "driver"),
                                                        ("spec", "pool", "name")),
    ("", "endpoints"): _endpoints_cells,
    ("discovery.k8s.io", "endpointslices"): _endpoint_slice_cells,
    ("", "persistentvolumeclaims"): _pvc_cells,
    ("", "persistentvolumes"): _pv_cells,
    ("networking.k8s.io", "ingresses"): _ingress_cells,
    ("networking.k8s.io", "ingressclasses"): _ingress_class_cells,
    ("storage.k8s.io", "storageclasses"): _storage_class_cells,
    ("storage.k8s.io", "csidrivers"): _csi_driver_cells,
    ("scheduling.k8s.io", "priorityclasses"): _priority_class_cells,
    ("apps", "deployments"): _deployment_cells,
    ("apps", "replicasets"): _replicaset_cells,
    ("apps", "statefulsets"): _statefulset_cells,
    ("apps", "daemonsets"): _daemonset_cells,
    ("apps", "controllerrevisions"): _controller_revision_cells,
    ("batch", "jobs"): _job_cells,
    ("batch", "cronjobs"): _cronjob_cells,
    ("", "replicationcontrollers"): _replication_controller_cells,
    ("", "podtemplates"): _pod_template_cells,
    ("policy", "poddisruptionbudgets"): _pdb_cells,
    ("networking.k8s.io", "networkpolicies"): _network_policy_cells,
    ("node.k8s.io", "runtimeclasses"): _field_cells(("handler",)),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): _count_cells("webhooks"),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): _count_cells("webhooks"),
    ("storage.k8s.io", "csinodes"): _count_cells("drivers", "spec"),
    ("resource.k8s.io", "deviceclasses"): _name_age,
    ("resource.k8s.io", "resourceclaimtemplates"): _name_age,
}


# --- assembling ------------------------------------------------------------------

_LIST_META_ORDER = ("selfLink", "resourceVersion", "continue", "remainingItemCount")


def _list_meta(meta: dict | None) -> dict:
    """The Table's (and PartialObjectMetadataList's) ListMeta: upstream copies resourceVersion, continue
    and remainingItemCount from the list (printers/tablegenerator.go), nothing else (no shardInfo)."""
    meta = meta or {}
    return {k: meta[k] for k in _LIST_META_ORDER if meta.get(k) not in (None, "")}


def _row_object(resource: Resource, obj: dict, include_object: str, table_api_version: str) -> Any:
    mode = include_object or "Metadata"
    if mode == "Object":
        if obj.get("kind") and obj.get("apiVersion"):
            return obj
        full = {"kind": resource.kind, "apiVersion": resource.api_version}
        full.update({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
        return full
    if mode == "Metadata":
        return partial_object(obj, table_api_version)
    if mode == "None":
        return None
    raise ValueError(f"unrecognized includeObject value: {include_object!r}")


def to_table(resource: Resource, objects: Iterable[dict], list_meta: dict | None,
             include_object: str = "Metadata", no_headers: bool = False,
             api_version: str = "meta.k8s.io/v1", now: _dt.datetime | None = None) -> dict:
    """Build the Table for `objects` (dict key order as the Go struct: kind, apiVersion, metadata,
    columnDefinitions, rows; row: cells, conditions (omitempty), object).

    `include_object`: "None" | "Metadata" (default, also for "") | "Object"; anything else raises
    ValueError (upstream: 400 BadRequest `unrecognized includeObject value: "x"`).
    `no_headers`: columnDefinitions become null (used for WATCH events after the first).
    """
    if include_object not in ("", "None", "Metadata", "Object"):
        raise ValueError(f"unrecognized includeObject value: {include_object!r}")
    now = now or _dt.datetime.now(_dt.timezone.utc)
    rows = []
    for obj in objects:
        cells, conds = _cells(resource, obj, now)
        row: dict[str, Any] = {"cells": cells}
        if conds:
            row["conditions"] = [dict(c) for c in conds]
        row["object"] = _row_object(resource, obj, include_object, api_version)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": api_version,
        "metadata": _list_meta(list_meta),
        "columnDefinitions": None if no_headers else [dict(c) for c in column_definitions(resource)],
        "rows": rows,
    }


def watch_table(resource: Resource, obj: dict, first: bool, include_object: str = "Metadata",
                api_version: str = "meta.k8s.io/v1", now: _dt.datetime | None = None) -> dict:
    """The object of one WATCH event for a Table watch: one row; headers only on the first event."""
    rv = _g(obj, "metadata", "resourceVersion", default="")
    return to_table(resource, [obj], {"resourceVersion": rv}, include_object=include_object,
                    no_headers=not first, api_version=api_version, now=now)
