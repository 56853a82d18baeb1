"""Upstream's default RBAC policy, created at start with `--authorization-mode=RBAC`.

* `ensure_bootstrap_policy`: every ClusterRole, ClusterRoleBinding, Role and RoleBinding of
  `bootstrap_policy.json` (extracted from kube-apiserver v1.37.2 by tools/rbac_bootstrap_policy.py: what its
  `rbac/bootstrap-roles` post-start hook creates, e.g. cluster-admin bound to system:masters, admin, edit,
  view, system:discovery / system:basic-user bound to system:authenticated, system:public-info-viewer bound
  to system:authenticated and system:unauthenticated, with upstream's labels (`kubernetes.io/bootstrapping:
  rbac-defaults`) and annotations (`rbac.authorization.kubernetes.io/autoupdate: "true"`)) is reconciled as
  upstream's hook does: created if absent; if present and not annotated `autoupdate: "false"`, the missing
  labels, annotations, rules (validation.Covers' broken-down rules), aggregation selectors and subjects are
  added, and a binding whose roleRef differs is recreated.

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
    """Reconcile every bootstrap object as upstream's `rbac/bootstrap-roles` hook does (component-helpers
    auth/rbac/reconciliation, union mode): create the absent ones; in existing ones not annotated
    `rbac.authorization.kubernetes.io/autoupdate: "false"` add the missing labels, annotations, rules (as
    validation.Covers' broken-down rules), aggregation selectors and binding subjects, and recreate a binding
    whose roleRef differs. Returns how many objects were written."""
    written = 0
    for kind, objs in load_policy().items():
        res = registry.lookup(GROUP, VERSION, PLURALS[kind])
        store = store_for(res)
        have = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
                for o in (await store.list(res.prefix(etcd_prefix))).items}
        for obj in objs:
            md = obj["metadata"]
            ns = md.get("namespace", "")
            key = res.key(etcd_prefix, ns or None, md["name"])
            existing = have.get((ns, md["name"]))
            try:
                written += await _reconcile(res, store, key, existing, obj)
            except serr.StorageError as e:
                if e.code not in (serr.Code.KEY_EXISTS, serr.Code.KEY_NOT_FOUND):  # another apiserver meanwhile
                    raise
    if written:
        log.info("rbac bootstrap policy written=%d", written)
    return written


async def _reconcile(res: Resource, store: Any, key: str, existing: dict | None, expected: dict) -> int:
    if existing is None:
        await store.create(key, objects.prepare_create(res, copy.deepcopy(expected)))
        return 1
    binding = "roleRef" in expected
    if binding and _role_ref(existing) != _role_ref(expected):
        if _protected(existing):
            return 0
        await store.delete(key)
        await store.create(key, objects.prepare_create(res, copy.deepcopy(expected)))
        return 1
    changed = False

    def change(cur: dict) -> dict | None:
        nonlocal changed
        if _protected(cur):
            return None
        new = reconciled_binding(cur, expected) if binding else reconciled_role(cur, expected)
        if new is None:
            return None
        changed = True
        return objects.prepare_update(res, new, cur)
    await store.guaranteed_update(key, change)
    return 1 if changed else 0


def _protected(obj: dict) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(AUTOUPDATE) == "false"


AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"


def _role_ref(obj: dict) -> tuple:
    r = obj.get("roleRef") or {}
    return r.get("apiGroup", ""), r.get("kind", ""), r.get("name", "")


def _merged_meta(existing: dict, expected: dict) -> tuple[dict, bool]:
    """Labels and annotations: the expected ones added, the existing values kept (reconciliation.merge)."""
    md = dict(existing.get("metadata") or {})
    changed = False
    for k in ("annotations", "labels"):
        want, have = expected["metadata"].get(k), md.get(k)
        if want is None and have is None:
            continue
        merged = {**(want or {}), **(have or {})}
        if merged != (have or {}) or (have is None and want is not None):
            md[k] = merged
            changed = True
    return md, changed


def reconciled_role(existing: dict, expected: dict) -> dict | None:
    """computeReconciledRole (union): the existing role plus what it lacks, or None if it lacks nothing."""
    md, changed = _merged_meta(existing, expected)
    new = {**existing, "metadata": md}
    missing = uncovered_rules(existing.get("rules") or [], expected.get("rules") or [])
    if missing:
        new["rules"] = list(existing.get("rules") or []) + missing
        changed = True
    want_agg, have_agg = expected.get("aggregationRule"), existing.get("aggregationRule")
    if want_agg is None and have_agg is not None:
        new.pop("aggregationRule")
        changed = True
    elif want_agg is not None:
        have_sels = (have_agg or {}).get("clusterRoleSelectors") or []
        missing_sels = [sel for sel in want_agg.get("clusterRoleSelectors") or [] if sel not in have_sels]
        if missing_sels:
            new["aggregationRule"] = {"clusterRoleSelectors": have_sels + missing_sels}
            changed = True
    return new if changed else None


def reconciled_binding(existing: dict, expected: dict) -> dict | None:
    """computeReconciledRoleBinding (union, same roleRef): the missing subjects appended."""
    md, changed = _merged_meta(existing, expected)
    new = {**existing, "metadata": md}
    have = existing.get("subjects") or []
    missing: list[dict] = []
    for sub in expected.get("subjects") or []:
        if not any(_same_subject(sub, h) for h in have) and not any(_same_subject(sub, m) for m in missing):
            missing.append(sub)
    if missing:
        new["subjects"] = list(have) + missing
        changed = True
    return new if changed else None


def _same_subject(a: dict, b: dict) -> bool:
    return all(a.get(k, "") == b.get(k, "") for k in ("kind", "apiGroup", "name", "namespace"))


# --- validation.Covers (component-helpers auth/rbac/validation/policy_comparator.go) -----------------

def breakdown_rule(rule: dict) -> list[dict]:
    """One rule per group x resource x verb (x resourceName), and per nonResourceURL x verb."""
    out = []
    verbs = rule.get("verbs") or []
    for g in rule.get("apiGroups") or []:
        for r in rule.get("resources") or []:
            for v in verbs:
                names = rule.get("resourceNames") or []
                if names:
                    out += [{"verbs": [v], "apiGroups": [g], "resources": [r], "resourceNames": [n]} for n in names]
                else:
                    out.append({"verbs": [v], "apiGroups": [g], "resources": [r]})
    for u in rule.get("nonResourceURLs") or []:
        out += [{"verbs": [v], "nonResourceURLs": [u]} for v in verbs]
    return out


def _resource_covers_all(owned: list[str], wanted: list[str]) -> bool:
    if "*" in owned or all(w in owned for w in wanted):
        return True
    for path in wanted:
        if path in owned:
            continue
        if "/" not in path or "*/" + path.split("/", 1)[1] not in owned:
            return False
    return True


def _url_covers(owner: str, sub: str) -> bool:
    return owner == sub or (owner.endswith("*") and sub.startswith(owner.rstrip("*")))


def rule_covers(owner: dict, sub: dict) -> bool:
    ov, og = owner.get("verbs") or [], owner.get("apiGroups") or []
    onames, snames = owner.get("resourceNames") or [], sub.get("resourceNames") or []
    return (("*" in ov or all(v in ov for v in sub.get("verbs") or []))
            and ("*" in og or all(g in og for g in sub.get("apiGroups") or []))
            and _resource_covers_all(owner.get("resources") or [], sub.get("resources") or [])
            and (not onames if not snames else (not onames or all(n in onames for n in snames)))
            and all(any(_url_covers(o, u) for o in owner.get("nonResourceURLs") or [])
                    for u in sub.get("nonResourceURLs") or []))


def uncovered_rules(owner_rules: list[dict], servant_rules: list[dict]) -> list[dict]:
    """validation.Covers' second result: the broken-down servant rules no owner rule covers."""
    return [sub for rule in servant_rules for sub in breakdown_rule(rule)
            if not any(rule_covers(o, sub) for o in owner_rules)]
