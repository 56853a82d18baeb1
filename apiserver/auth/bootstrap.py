"""Upstream's default RBAC policy, created at start with `--authorization-mode=RBAC`.

* `ensure_bootstrap_policy`: every ClusterRole, ClusterRoleBinding, Role and RoleBinding of
  `bootstrap_policy.json` (extracted from kube-apiserver v1.37.2 by tools/rbac_bootstrap_policy.py: what its
  `rbac/bootstrap-roles` post-start hook creates, e.g. cluster-admin bound to system:masters, admin, edit,
  view, system:discovery / system:basic-user bound to system:authenticated, system:public-info-viewer bound
  to system:authenticated and system:unauthenticated) is created if absent, with upstream's labels
  (`kubernetes.io/bootstrapping: rbac-defaults`) and annotations (`rbac.authorization.kubernetes.io/
  autoupdate: "true"`). Objects that exist are left as they are (upstream reconciles those whose autoupdate
  annotation is "true" by adding missing rules and subjects; not done here).

Aggregated ClusterRoles (admin, edit, view) are stored as upstream stores them, without rules (in a cluster
kube-controller-manager's aggregation controller writes them); the RBAC authorizer computes their rules
(apiserver/auth/rbac.py), so a user bound to `view` can read. Nothing is written with `--read-only`.
"""
from __future__ import annotations

import copy
import json
import logging
import os
from typing import Any, Callable

from machinery import objects
from machinery.resources import Registry, Resource
from storage import errors as serr

log = logging.getLogger("apiserver")

POLICY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap_policy.json")
PLURALS = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles",
           "RoleBinding": "rolebindings"}
GROUP, VERSION = "rbac.authorization.k8s.io", "v1"


def load_policy() -> dict[str, list[dict]]:
    with open(POLICY_FILE) as f:
        return json.load(f)


async def ensure_bootstrap_policy(registry: Registry, store_for: Callable[[Resource], Any], etcd_prefix: str) -> int:
    """Create the bootstrap objects that are absent; returns how many were created."""
    created = 0
    for kind, objs in load_policy().items():
        res = registry.lookup(GROUP, VERSION, PLURALS[kind])
        store = store_for(res)
        have = {(o["metadata"].get("namespace", ""), o["metadata"]["name"])
                for o in (await store.list(res.prefix(etcd_prefix))).items}
        for obj in objs:
            md = obj["metadata"]
            ns = md.get("namespace", "")
            if (ns, md["name"]) in have:
                continue
            try:
                await store.create(res.key(etcd_prefix, ns or None, md["name"]),
                                   objects.prepare_create(res, copy.deepcopy(obj)))
                created += 1
            except serr.StorageError as e:
                if e.code is not serr.Code.KEY_EXISTS:  # another apiserver created it meanwhile
                    raise
    if created:
        log.info("rbac bootstrap policy created=%d", created)
    return created
