"""What we serve: the resource registry (built-in kinds and CRD-defined kinds).

A `Resource` carries everything the HTTP layer needs to route, validate,
store, discover and print one kind: group/version/kind, plural and singular
names, scope, the etcd key prefix (as upstream lays keys out), short names,
subresources, and - for custom resources - the CRD's schema.

The built-in kinds are not typed here: they are read from machinery/builtin_resources.json, which
tools/discovery_upstream.py extracts from the reference kube-apiserver (its aggregated discovery, the etcd
keys its objects get, whether its DELETE answers with the object).
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable

VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# A custom resource's verbs in the order apiextensions-apiserver lists them in discovery (crdHandler).
CR_VERBS = ["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"]

# The built-in resources as the reference kube-apiserver v1.37.2 serves them: its aggregated discovery and
# the etcd keys it writes, extracted by tools/discovery_upstream.py (tests/test_builtin_kinds.py fails when
# the committed file is stale).
DATA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "builtin_resources.json")

# The subresources this project serves (discovery lists only these; the data file has every one upstream
# lists, e.g. pods/exec): the endpoints implement them (apiserver/routes.py, apiserver/endpoints/).
SERVED_SUBRESOURCES = frozenset({"status", "binding", "eviction", "scale"})


@dataclass(frozen=True)
class Subresource:
    """One subresource as discovery shows it: `name` (`status`, `scale`, ...), the response kind (group and
    version empty when it is the parent's group version) and its verbs."""
    name: str
    group: str
    version: str
    kind: str
    verbs: tuple[str, ...]


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
    # the CRD's storage version for custom resources.
    storage_version: str = ""
    # False: a review kind answered from the request alone (create only), never stored: no etcd key, no
    # watch cache, no storageVersionHash in discovery. Such kinds are in REVIEWS, not in the Registry.
    stored: bool = True
    # Built-in kinds: every subresource upstream's discovery lists (served or not: SERVED_SUBRESOURCES),
    # upstream's storageVersionHash, and whether a DELETE answers with the object (ReturnDeletedObject).
    subresources: tuple[Subresource, ...] = ()
    storage_hash: str = ""
    return_deleted: bool = False

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
        registries set `ReturnDeletedObject` (observed on the reference by tools/discovery_upstream.py)."""
        return not self.custom and self.return_deleted

    @property
    def served_subresources(self) -> list[Subresource]:
        """The subresources discovery lists: those this project serves, in upstream's order."""
        if self.custom:
            return [Subresource("status", "", "", self.kind, ("get", "patch", "update"))] \
                if self.status_subresource else []
        return [s for s in self.subresources if s.name in SERVED_SUBRESOURCES]

    def subresource(self, name: str) -> Subresource | None:
        return next((s for s in self.subresources if s.name == name), None)

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


def _builtin(e: dict[str, Any]) -> Resource:
    subs = tuple(Subresource(s["name"], s["group"], s["version"], s["kind"], tuple(s["verbs"]))
                 for s in e["subresources"])
    stored = "storageVersionHash" in e
    return Resource(group=e["group"], version=e["version"], kind=e["kind"], plural=e["plural"],
                    singular=e["singular"], namespaced=e["scope"] == "Namespaced", key_resource=e.get("key", ""),
                    short_names=list(e["shortNames"]), categories=list(e["categories"]),
                    status_subresource=any(s.name == "status" for s in subs), verbs=list(e["verbs"]),
                    stored=stored, subresources=subs, storage_hash=e.get("storageVersionHash", ""),
                    return_deleted=e.get("returnsDeletedObject", False))


def _load() -> tuple[dict[str, Any], list[Resource]]:
    with open(DATA_FILE, encoding="utf-8") as f:
        data = json.load(f)
    return data["groups"], [_builtin(e) for e in data["resources"]]


GROUPS, UPSTREAM = _load()
# Upstream's group orders (aggregated discovery, and /apis: the kube-aggregator's APIService order).
GROUP_ORDER: list[str] = GROUPS["aggregated_order"]
LEGACY_GROUP_ORDER: list[str] = GROUPS["legacy_order"]

# Served but not here (docs/differences.md): a second version of a kind, which would need conversion
# (autoscaling/v1 HorizontalPodAutoscalers: only the preferred autoscaling/v2), and events.k8s.io/v1 Events,
# stored with core Events under one key (upstream converts between the two).
UNSERVED_GROUPS = frozenset({"events.k8s.io"})


def _served_builtins() -> list[Resource]:
    out, seen = [], set()
    for r in UPSTREAM:
        if not r.stored or r.group in UNSERVED_GROUPS or (r.group, r.plural) in seen:
            continue  # componentstatuses, bindings and the reviews; a kind's later (non-preferred) versions
        seen.add((r.group, r.plural))
        out.append(r)
    return out


BUILTINS: list[Resource] = _served_builtins()
CRD = next(r for r in BUILTINS if r.group == "apiextensions.k8s.io" and r.plural == "customresourcedefinitions")

# Upstream's create-only review APIs, answered from the request (the authenticated user, an authorizer
# decision) and never stored. Discovery lists them and the routes send them to their handlers
# (apiserver/auth/reviews.py); they stay out of the Registry, so nothing watches, counts or stores them.
REVIEW_KINDS = {("authentication.k8s.io", "selfsubjectreviews"), ("authorization.k8s.io", "localsubjectaccessreviews"),
                ("authorization.k8s.io", "selfsubjectaccessreviews"), ("authorization.k8s.io", "selfsubjectrulesreviews"),
                ("authorization.k8s.io", "subjectaccessreviews")}
REVIEWS: list[Resource] = [r for r in UPSTREAM if (r.group, r.plural) in REVIEW_KINDS]


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
