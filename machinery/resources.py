"""What we serve: the resource registry (built-in kinds and CRD-defined kinds).

A `Resource` carries everything the HTTP layer needs to route, validate,
store, discover and print one kind: group/version/kind, plural and singular
names, scope, the etcd key prefix (as upstream lays keys out), short names,
subresources, and - for custom resources - the CRD's schema.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Iterable

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# A custom resource's verbs in the order apiextensions-apiserver lists them in discovery (crdHandler).
CR_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]


# Resources whose upstream registry sets ReturnDeletedObject (checked against kube-apiserver v1.37.2);
# every other DELETE answers with a Success Status.
RETURN_DELETED_OBJECT = {("", "pods"), ("", "services"), ("", "serviceaccounts"), ("", "namespaces"),
                         ("apiextensions.k8s.io", "customresourcedefinitions")}


@dataclass
class Resource:
    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    key_resource: str = ""           # path under the etcd prefix (upstream layout)
    short_names: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    status_subresource: bool = False
    custom: bool = False             # defined by a CRD (unstructured: sorted keys, CR lists)
    list_kind: str = ""
    schema: dict[str, Any] | None = None      # CRD openAPIV3Schema (custom resources)
    printer_columns: list[dict[str, Any]] = field(default_factory=list)  # CRD additionalPrinterColumns
    verbs: list[str] = field(default_factory=lambda: list(VERBS))
    # The version objects are stored in upstream (discovery's storageVersionHash is computed from it):
    # the CRD's storage version for custom resources, v1beta1 for CRDs themselves.
    storage_version: str = ""
    # False: a review kind answered from the request alone (create only), never stored: no etcd key, no
    # watch cache, no storageVersionHash in discovery. Such kinds are in REVIEWS, not in the Registry.
    stored: bool = True

    def __post_init__(self) -> None:
        if not self.list_kind:
            self.list_kind = self.kind + "List"
        if not self.key_resource:
            self.key_resource = f"{self.group}/{self.plural}" if self.custom else self.plural
        if not self.storage_version:
            self.storage_version = self.version

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def returns_deleted_object(self) -> bool:
        """A DELETE answers with the deleted object (else with a Success Status), as upstream's
        registries set `ReturnDeletedObject`."""
        return not self.custom and (self.group, self.plural) in RETURN_DELETED_OBJECT

    @property
    def qualified(self) -> str:
        """`resource.group` as upstream messages spell it (`configmaps`, `leases.coordination.k8s.io`)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def prefix(self, etcd_prefix: str, namespace: str | None = None) -> str:
        """Key prefix of a collection, ending in '/' (all namespaces if namespace is None)."""
        base = f"{etcd_prefix.rstrip('/')}/{self.key_resource}/"
        if self.namespaced and namespace:
            return f"{base}{namespace}/"
        return base

    def key(self, etcd_prefix: str, namespace: str | None, name: str) -> str:
        return self.prefix(etcd_prefix, namespace) + name


def _r(group, kind, plural, namespaced, key=None, short=(), cats=(), status=False, version="v1", verbs=VERBS):
    return Resource(group=group, version=version, kind=kind, plural=plural, singular=kind.lower(),
                    namespaced=namespaced, key_resource=key or plural, short_names=list(short),
                    categories=list(cats), status_subresource=status, verbs=list(verbs))


# Key layout as upstream (k8s.io/kubernetes pkg/registry/*/storage): note
# nodes live under "minions" and services under "services/specs".
BUILTINS: list[Resource] = [
    # Namespaces have no deletecollection (the namespace registry is no CollectionDeleter).
    _r("", "Namespace", "namespaces", False, short=["ns"], status=True,
       verbs=[v for v in VERBS if v != "deletecollection"]),
    _r("", "ConfigMap", "configmaps", True, short=["cm"]),
    _r("", "Secret", "secrets", True),
    _r("", "Pod", "pods", True, short=["po"], cats=["all"], status=True),
    _r("", "Node", "nodes", False, key="minions", short=["no"], status=True),
    _r("", "Service", "services", True, key="services/specs", short=["svc"], cats=["all"], status=True),
    _r("", "ServiceAccount", "serviceaccounts", True, short=["sa"]),
    _r("", "Event", "events", True, short=["ev"]),
    _r("coordination.k8s.io", "Lease", "leases", True),
    _r("rbac.authorization.k8s.io", "Role", "roles", True),
    _r("rbac.authorization.k8s.io", "RoleBinding", "rolebindings", True),
    _r("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", False),
    _r("rbac.authorization.k8s.io", "ClusterRoleBinding", "clusterrolebindings", False),
    Resource(group="apiextensions.k8s.io", version="v1", kind="CustomResourceDefinition",
             plural="customresourcedefinitions", singular="customresourcedefinition", namespaced=False,
             key_resource="apiextensions.k8s.io/customresourcedefinitions", short_names=["crd", "crds"],
             categories=["api-extensions"], status_subresource=True, storage_version="v1beta1"),
]

CRD = BUILTINS[-1]

# Upstream's create-only review APIs, answered from the request (the authenticated user, an authorizer
# decision) and never stored. Discovery lists them and the routes send them to their handlers
# (apiserver/auth/reviews.py); they stay out of the Registry, so nothing watches, counts or stores them.
REVIEWS: list[Resource] = [
    Resource(group="authentication.k8s.io", version="v1", kind="SelfSubjectReview", plural="selfsubjectreviews",
             singular="selfsubjectreview", namespaced=False, verbs=["create"], stored=False),
    *(Resource(group="authorization.k8s.io", version="v1", kind=kind, plural=kind.lower() + "s",
               singular=kind.lower(), namespaced=kind.startswith("Local"), verbs=["create"], stored=False)
      for kind in ("LocalSubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview",
                   "SubjectAccessReview")),
]


def review(group: str, version: str, plural: str) -> Resource | None:
    """The review kind served at /apis/<group>/<version>/<plural>, or None."""
    for r in REVIEWS:
        if r.group == group and r.version == version and r.plural == plural:
            return r
    return None


class Registry:
    """The set of served resources; custom resources come and go with CRDs.

    Lookups happen per request; updates happen when a CRD changes. A lock keeps
    the few multi-step updates consistent for readers on other threads
    (benchmarks and tests may read it from outside the event loop).
    """

    def __init__(self, builtins: Iterable[Resource] = BUILTINS):
        self._lock = threading.Lock()
        self._by_gvr: dict[tuple[str, str, str], Resource] = {}
        self._crd_owned: dict[str, list[Resource]] = {}  # CRD name -> resources it defines
        for r in builtins:
            self._by_gvr[(r.group, r.version, r.plural)] = r

    def lookup(self, group: str, version: str, plural: str) -> Resource | None:
        return self._by_gvr.get((group, version, plural))

    def all(self) -> list[Resource]:
        return list(self._by_gvr.values())

    def groups(self) -> dict[str, list[str]]:
        """group -> served versions (preferred first)."""
        out: dict[str, list[str]] = {}
        for r in self._by_gvr.values():
            vs = out.setdefault(r.group, [])
            if r.version not in vs:
                vs.append(r.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[Resource]:
        return [r for r in self._by_gvr.values() if r.group == group and r.version == version]

    # --- CRDs ---------------------------------------------------------------

    def apply_crd(self, crd: dict[str, Any]) -> list[Resource]:
        """(Re)register the resources a CRD defines (one per served version)."""
        name = crd["metadata"]["name"]
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        new: list[Resource] = []
        storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), "")
        for v in spec.get("versions") or []:
            if not v.get("served", True):
                continue
            sub = v.get("subresources") or {}
            new.append(Resource(
                group=spec["group"], version=v["name"], kind=names["kind"], plural=names["plural"],
                singular=names.get("singular") or names["kind"].lower(),
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=list(names.get("shortNames") or []), categories=list(names.get("categories") or []),
                status_subresource="status" in sub, custom=True,
                list_kind=names.get("listKind") or names["kind"] + "List",
                schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                printer_columns=list(v.get("additionalPrinterColumns") or []),
                verbs=list(CR_VERBS), storage_version=storage))
        with self._lock:
            self._remove_locked(name)
            for r in new:
                self._by_gvr[(r.group, r.version, r.plural)] = r
            self._crd_owned[name] = new
        return new

    def remove_crd(self, name: str) -> list[Resource]:
        """Unregister a CRD's resources; returns them."""
        with self._lock:
            return self._remove_locked(name)

    def _remove_locked(self, name: str) -> list[Resource]:
        removed = self._crd_owned.pop(name, [])
        for r in removed:
            if self._by_gvr.get((r.group, r.version, r.plural)) is r:
                del self._by_gvr[(r.group, r.version, r.plural)]
        return removed
