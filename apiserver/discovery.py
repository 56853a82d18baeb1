"""Discovery documents: /api, /apis, /apis/<g>, /api/v1, /apis/<g>/<v>, /version, aggregated v2.

Pure functions returning dicts in Go struct key order (encode with jsonenc.dumps).

Upstream shapes (k8s.io/apiserver pkg/endpoints/discovery, v0.36.0; k8s.io/apimachinery meta/v1 types.go):

* ``/api`` and ``/api/v1`` are written through ``stripVersionNegotiatedSerializer`` (legacy.go,
  version.go ``keepUnversioned("")``): ``kind`` but **no apiVersion**.
* ``/apis``, ``/apis/<g>`` and ``/apis/<g>/<v>``: in a real kube-apiserver these are answered by the
  kube-aggregator, which does not strip: ``"apiVersion": "v1"``, and the groups carry no
  ``serverAddressByClientCIDRs``.
* APIResource key order: name, singularName, namespaced, group, version, kind, verbs, shortNames,
  categories, storageVersionHash (omitempty fields omitted). ``storageVersionHash`` =
  base64(sha256("<group>/<storage version>/<kind>")[:8]) (storageversionhash.go): for built-in kinds the
  reference's own value (machinery/builtin_resources.json: some are stored in a version not served, e.g.
  v1beta1 ClusterTrustBundles), computed for custom resources. Subresources are listed as
  ``<plural>/<subresource>`` with their kind (group and version only for another group version's kind,
  autoscaling/v1 Scale) and verbs, no storageVersionHash; only those served
  (machinery.resources.SERVED_SUBRESOURCES).
* Aggregated discovery (``Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList``,
  k8s.io/api apidiscovery/v2 types.go; aggregated/handler.go): ``APIGroupDiscoveryList`` with the
  response Content-Type ``AGGREGATED_CONTENT_TYPE`` (+ ``ETag``, ``Vary: Accept``). client-go
  (discovery_client.go ``downloadLegacy``/``downloadAPIs``) checks the *response* Content-Type with
  ``ContentTypeIsGVK``: a plain ``application/json`` answer falls back to unaggregated discovery
  (then one GET per group-version), so both work with kubectl; aggregated saves the per-GV round trips.
"""
from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from machinery import jsonenc
from machinery.resources import GROUP_ORDER, LEGACY_GROUP_ORDER, REVIEWS, Registry, Resource

__all__ = [
    "AGGREGATED_CONTENT_TYPE", "wants_aggregated", "aggregated_etag", "etag_matches", "version_json",
    "api_versions", "api_group_list", "api_group", "api_resource_list", "version_info",
    "aggregated_discovery", "storage_version_hash",
]

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


_DISCOVERY_MEDIA = {("application", "json"), ("application", "yaml"), ("application", "vnd.kubernetes.protobuf"),
                    ("application", "*"), ("*", "*")}


def wants_aggregated(accept: str | None) -> bool:
    """True if some clause of the Accept header asks for the v2 APIGroupDiscoveryList.

    Upstream (aggregated/wrapper.go) negotiates with restrictions that allow *only* the aggregated
    GVK as a transform, so a plain `application/json` clause never wins over an aggregated one,
    whatever their order; v2beta1 is no longer served (AggregatedDiscoveryRemoveBetaType), and any
    `profile` is accepted. The answer is JSON here whichever serializer the clause names.
    """
    if not accept:
        return False
    for rng in accept.split(","):
        parts = [p.strip(" ") for p in rng.split(";")]
        typ, _, sub = parts[0].partition("/")
        if (typ.strip(), (sub or "*").strip()) not in _DISCOVERY_MEDIA:
            continue
        params = {}
        for p in parts[1:]:
            k, _, v = p.partition("=")
            params[k.strip()] = v.strip()
        if params.get("g") == "apidiscovery.k8s.io" and params.get("v") == "v2" \
                and params.get("as") == "APIGroupDiscoveryList":
            return True
    return False


def storage_version_hash(group: str, version: str, kind: str) -> str:
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _kube_version_key(v: str):
    """version.CompareKubeAwareVersionStrings as a sort key: GA > beta > alpha, higher numbers first;
    versions that are not kube-like come after, in string order."""
    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", v)
    if not m:
        return (1, 0, 0, 0, v)
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    return (0, stage, -int(m.group(1)), -int(m.group(3) or 0), "")


def _version_order(versions: list[str]) -> list[str]:
    return sorted(versions, key=_kube_version_key)


# Built-in groups come in upstream's order (machinery/builtin_resources.json: the kube-aggregator sorts by
# GroupPriorityMinimum, kubernetes pkg/controlplane/apiserver/aggregator.go); custom resource groups are
# registered by the CRD registration controller with priority 1000, below every built-in group, and sorted
# among themselves as upstream sorts equal priorities.
_AGG_RANK = {g: i for i, g in enumerate(GROUP_ORDER)}
_LEGACY_RANK = {g: i for i, g in enumerate(LEGACY_GROUP_ORDER)}


def _groups(registry: Registry) -> dict[str, list[str]]:
    """group -> served versions, preferred first (every version of a group has one VersionPriority here);
    the review kinds' groups (machinery.resources.REVIEWS) included."""
    groups = registry.groups()
    for r in REVIEWS:
        vs = groups.setdefault(r.group, [])
        if r.version not in vs:
            vs.append(r.version)
    return {g: _version_order(vs) for g, vs in groups.items()}


def _legacy_group_order(groups: dict[str, list[str]]) -> list[str]:
    """/apis order: the kube-aggregator sorts APIServices (named `<version>.<group>`) by
    GroupPriorityMinimum, highest first, then by name, and lists each group where its first APIService
    falls (apiregistration helper SortedByGroupAndVersion)."""
    def key(g: str):
        return (_LEGACY_RANK.get(g, len(_LEGACY_RANK)), min(f"{v}.{g}" for v in groups[g]))
    return sorted(groups, key=key)


def _aggregated_group_order(groups: dict[str, list[str]]) -> list[str]:
    """Aggregated discovery order: highest group priority first, then by group name (aggregated/handler.go)."""
    return sorted(groups, key=lambda g: (_AGG_RANK.get(g, len(_AGG_RANK)), g))


# --- unaggregated -----------------------------------------------------------------

def api_versions(server_address: str) -> dict:
    """GET /api (APIVersions, apiVersion stripped)."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group_doc(group: str, versions: list[str]) -> dict:
    vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": vs, "preferredVersion": dict(vs[0])}


def api_group_list(registry: Registry) -> dict:
    """GET /apis (APIGroupList of every non-core group)."""
    all_groups = _groups(registry)
    groups = [_group_doc(g, all_groups[g]) for g in _legacy_group_order(all_groups) if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry: Registry, group: str) -> dict | None:
    """GET /apis/<group> (APIGroup) or None (-> 404)."""
    if not group:
        return None
    vs = _groups(registry).get(group)
    if not vs:
        return None
    doc = {"kind": "APIGroup", "apiVersion": "v1"}
    doc.update(_group_doc(group, vs))
    return doc


def _api_resource(r: Resource) -> dict:
    d: dict[str, Any] = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
                         "kind": r.kind, "verbs": list(r.verbs)}
    if r.short_names:
        d["shortNames"] = list(r.short_names)
    if r.categories:
        d["categories"] = list(r.categories)
    if r.stored:  # upstream sets it for stored kinds only (a StorageVersionProvider)
        d["storageVersionHash"] = r.storage_hash or storage_version_hash(r.group, r.storage_version, r.kind)
    return d


def _subresource(r: Resource, s) -> dict:
    d: dict[str, Any] = {"name": f"{r.plural}/{s.name}", "singularName": "", "namespaced": r.namespaced}
    if s.group or s.version:  # a kind of another group version (autoscaling/v1 Scale)
        d["group"], d["version"] = s.group, s.version
    d["kind"] = s.kind
    d["verbs"] = list(s.verbs)
    return d


def _sorted_resources(registry: Registry, group: str, version: str) -> list[Resource]:
    reviews = [r for r in REVIEWS if r.group == group and r.version == version]
    return sorted(registry.in_group_version(group, version) + reviews, key=lambda r: r.plural)


def api_resource_list(registry: Registry, group: str, version: str) -> dict | None:
    """GET /api/v1 or /apis/<g>/<v> (APIResourceList) or None (-> 404)."""
    resources = _sorted_resources(registry, group, version)
    if not resources:
        return None
    items = []
    for r in resources:
        items.append(_api_resource(r))
        items.extend(_subresource(r, s) for s in r.served_subresources)
    doc: dict[str, Any] = {"kind": "APIResourceList"}
    if group:  # the core group version is served through the version-stripping serializer
        doc["apiVersion"] = "v1"
    doc["groupVersion"] = f"{group}/{version}" if group else version
    doc["resources"] = items
    return doc


def version_info() -> dict:
    """GET /version (k8s.io/apimachinery/pkg/version.Info key order)."""
    import platform
    import sys

    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine or "amd64")
    osname = sys.platform if sys.platform != "linux2" else "linux"
    return {
        "major": "1",
        "minor": "36",
        "emulationMajor": "1",
        "emulationMinor": "36",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.0-residency",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "python" + platform.python_version(),
        "compiler": "cpython",
        "platform": f"{osname}/{arch}",
    }


def version_json() -> bytes:
    """The /version body as upstream writes it (responsewriters.WriteRawJSON: json.MarshalIndent with
    two spaces, no trailing newline)."""
    fields = [b'  "' + k.encode() + b'": ' + jsonenc.dumps(v) for k, v in version_info().items()]
    return b"{\n" + b",\n".join(fields) + b"\n}"


# --- aggregated (apidiscovery.k8s.io/v2) ---------------------------------------------

def _response_kind(r: Resource) -> dict:
    """Built-in resources leave the response kind's group and version empty (the endpoint installer
    sets them only for a kind from another group version); custom resources set them."""
    if r.custom:
        return {"group": r.group, "version": r.version, "kind": r.kind}
    return {"group": "", "version": "", "kind": r.kind}


def _resource_discovery(r: Resource) -> dict:
    d: dict[str, Any] = {
        "resource": r.plural,
        "responseKind": _response_kind(r),
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular,
        "verbs": list(r.verbs),
    }
    if r.short_names:
        d["shortNames"] = list(r.short_names)
    if r.categories:
        d["categories"] = list(r.categories)
    subs = r.served_subresources
    if subs:
        d["subresources"] = [{
            "subresource": s.name,
            "responseKind": {"group": s.group, "version": s.version, "kind": s.kind} if s.group or s.version
            else {**_response_kind(r), "kind": s.kind},  # pods/binding: Binding
            "verbs": list(s.verbs),
        } for s in subs]
    return d


def aggregated_discovery(registry: Registry, core: bool) -> dict:
    """APIGroupDiscoveryList for /api (core=True) or /apis (core=False)."""
    items = []
    groups = _groups(registry)
    for group in _aggregated_group_order(groups):
        versions = groups[group]
        if bool(group) == core:
            continue
        vdocs = []
        for v in versions:
            res = [_resource_discovery(r) for r in _sorted_resources(registry, group, v)]
            vd: dict[str, Any] = {"version": v}
            if res:
                vd["resources"] = res
            vd["freshness"] = "Current"
            vdocs.append(vd)
        meta = {"name": group} if group else {}
        items.append({"metadata": meta, "versions": vdocs})
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {}, "items": items}


def aggregated_etag(doc: dict) -> str:
    """Upstream's ETag (aggregated/etag.go): the quoted upper-case hex SHA-512 of the list marshalled
    by encoding/json *without* its TypeMeta, i.e. of `{"metadata":{},"items":[...]}`."""
    body = jsonenc.dumps({"metadata": doc["metadata"], "items": doc["items"]})
    return '"' + hashlib.sha512(body).hexdigest().upper() + '"'


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """If-None-Match against a strong ETag, as upstream's ServeHTTPWithETag (exact header value)."""
    return if_none_match is not None and if_none_match == etag
