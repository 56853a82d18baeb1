"""The RBAC authorizer (apiserver/auth/rbac.py, issue 14): upstream's rules one by one, then a generated
comparison with a reference evaluator written plainly here (a loop over every binding, as upstream's
DefaultRuleResolver.VisitRulesFor and RuleAllows read), sharing no code with the authorizer.

Each example is one generated set of RBAC objects built through a sequence of ADDED / MODIFIED / DELETED
events, with a decision compared after every event and REQUESTS more at the end (a third random, two thirds
built from an existing binding and a rule of its role, then maybe one attribute changed). The default, 170
examples, is about 10,700 cases (derandomized, but which examples Hypothesis draws still depends on the tests
that ran before in the same process: 9,749 to 10,071 at 160 were seen); RBAC_EXAMPLES=<n> for a longer (and
not derandomized) run.
"""
from __future__ import annotations

import dataclasses
import os
import time

import orjson
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from apiserver.auth.attributes import Attributes
from apiserver.auth.rbac import KEYS, SMALL_GROUP, SMALL_REGISTRY, RBACAuthorizer, _Group
from apiserver.auth.user import UserInfo

G = "rbac.authorization.k8s.io"


def role(name, rules, ns="demo"):
    return {"apiVersion": f"{G}/v1", "kind": "Role", "metadata": {"name": name, "namespace": ns}, "rules": rules}


def crole(name, rules, labels=None, aggregation=None):
    o = {"apiVersion": f"{G}/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules}
    if labels:
        o["metadata"]["labels"] = labels
    if aggregation is not None:
        o["aggregationRule"] = {"clusterRoleSelectors": aggregation}
    return o


def rb(name, ref_kind, ref_name, subjects, ns="demo"):
    return {"apiVersion": f"{G}/v1", "kind": "RoleBinding", "metadata": {"name": name, "namespace": ns},
            "roleRef": {"apiGroup": G, "kind": ref_kind, "name": ref_name}, "subjects": subjects}


def crb(name, ref_name, subjects, ref_kind="ClusterRole"):
    return {"apiVersion": f"{G}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": G, "kind": ref_kind, "name": ref_name}, "subjects": subjects}


def user(name="alice", *groups):
    return UserInfo(name, groups=tuple(groups) or ("system:authenticated",))


def U(name):
    return {"kind": "User", "apiGroup": G, "name": name}


def Grp(name):
    return {"kind": "Group", "apiGroup": G, "name": name}


def SA(name, ns=None):
    s = {"kind": "ServiceAccount", "name": name}
    if ns is not None:
        s["namespace"] = ns
    return s


def res(u, verb, resource, ns="demo", group="", sub="", name=""):
    return Attributes(u, verb, True, api_group=group, api_version="v1", resource=resource, subresource=sub,
                      namespace=ns, name=name)


def nonres(u, verb, path):
    return Attributes(u, verb, False, path=path)


def authz(*objs):
    a = RBACAuthorizer()
    for o in objs:
        a.apply(o["kind"], "ADDED", o)
    return a


RULE_CM = {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps"]}


# ---------------------------------------------------------------------------- upstream's rules one by one

def test_deny_by_default_with_empty_reason():
    d = RBACAuthorizer().authorize(res(user(), "get", "configmaps"))
    assert (d.allowed, d.reason) == (False, "")


def test_system_masters_always_allowed():
    a = RBACAuthorizer()
    u = UserInfo("root", groups=("system:masters",))
    assert a.authorize(res(u, "delete", "secrets", ns="")).allowed
    assert a.authorize(nonres(u, "get", "/anything")).allowed
    assert a.authorize(res(u, "delete", "secrets", ns="")).reason == ""


def test_verbs_exact_and_star():
    a = authz(role("r", [RULE_CM]), rb("b", "Role", "r", [U("alice")]),
              role("w", [{"verbs": ["*"], "apiGroups": [""], "resources": ["secrets"]}]),
              rb("b2", "Role", "w", [U("alice")]))
    assert a.authorize(res(user(), "list", "configmaps")).allowed
    assert not a.authorize(res(user(), "delete", "configmaps")).allowed
    assert not a.authorize(res(user(), "LIST", "configmaps")).allowed  # case-sensitive
    assert a.authorize(res(user(), "deletecollection", "secrets")).allowed


def test_api_groups_exact_and_star():
    a = authz(role("r", [{"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]},
                         {"verbs": ["list"], "apiGroups": ["*"], "resources": ["deployments"]}]),
              rb("b", "Role", "r", [U("alice")]))
    assert a.authorize(res(user(), "get", "deployments", group="apps")).allowed
    assert not a.authorize(res(user(), "get", "deployments", group="extensions")).allowed
    assert not a.authorize(res(user(), "get", "deployments", group="")).allowed
    assert a.authorize(res(user(), "list", "deployments", group="extensions")).allowed


def test_resources_subresources_and_wildcards():
    a = authz(role("r", [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
                         {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"]},
                         {"verbs": ["update"], "apiGroups": [""], "resources": ["*/status"]},
                         {"verbs": ["patch"], "apiGroups": [""], "resources": ["pods/*"]},
                         {"verbs": ["list"], "apiGroups": [""], "resources": ["*"]}]),
              rb("b", "Role", "r", [U("alice")]))
    u = user()
    assert a.authorize(res(u, "get", "pods", name="p")).allowed
    assert not a.authorize(res(u, "get", "pods", sub="log", name="p")).allowed   # "pods" is not pods/log
    assert a.authorize(res(u, "create", "pods", sub="exec", name="p")).allowed
    assert not a.authorize(res(u, "create", "pods", name="p")).allowed           # pods/exec is not pods
    assert a.authorize(res(u, "update", "pods", sub="status")).allowed           # */status
    assert a.authorize(res(u, "update", "deployments", sub="status")).allowed
    assert not a.authorize(res(u, "update", "pods", sub="statuses")).allowed
    assert not a.authorize(res(u, "update", "pods")).allowed
    # "pods/*" is no wildcard upstream: only a subresource literally named "*" matches it
    assert not a.authorize(res(u, "patch", "pods", sub="status")).allowed
    assert a.authorize(res(u, "patch", "pods", sub="*")).allowed
    # "*" matches every resource and every subresource
    assert a.authorize(res(u, "list", "secrets")).allowed
    assert a.authorize(res(u, "list", "pods", sub="log")).allowed


def test_resource_names():
    a = authz(role("r", [{"verbs": ["get", "list", "update"], "apiGroups": [""], "resources": ["configmaps"],
                          "resourceNames": ["cfg", "other"]}]), rb("b", "Role", "r", [U("alice")]))
    u = user()
    assert a.authorize(res(u, "get", "configmaps", name="cfg")).allowed
    assert not a.authorize(res(u, "get", "configmaps", name="cfg2")).allowed
    assert not a.authorize(res(u, "list", "configmaps")).allowed  # no name: resourceNames do not match ""
    a2 = authz(role("r", [{"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"],
                           "resourceNames": [""]}]), rb("b", "Role", "r", [U("alice")]))
    assert a2.authorize(res(u, "list", "configmaps")).allowed


def test_non_resource_urls():
    a = authz(crole("nr", [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*", "/apis**", "/x/"]},
                           {"verbs": ["post"], "nonResourceURLs": ["*"]}]),
              crb("b", "nr", [U("alice")]))
    u = user()
    assert a.authorize(nonres(u, "get", "/healthz")).allowed
    assert not a.authorize(nonres(u, "get", "/healthz/etcd")).allowed
    assert a.authorize(nonres(u, "get", "/api/v1")).allowed
    assert a.authorize(nonres(u, "get", "/api/")).allowed
    assert not a.authorize(nonres(u, "get", "/api")).allowed          # the prefix is "/api/"
    assert a.authorize(nonres(u, "get", "/apis")).allowed             # every trailing * is cut: prefix "/apis"
    assert a.authorize(nonres(u, "get", "/apisx")).allowed
    assert not a.authorize(nonres(u, "get", "/x")).allowed
    assert a.authorize(nonres(u, "post", "/anything")).allowed
    assert not a.authorize(nonres(u, "put", "/healthz")).allowed
    # a resource rule never allows a non-resource request, nor the reverse
    a2 = authz(crole("both", [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]), crb("b", "both", [U("alice")]))
    assert not a2.authorize(nonres(u, "get", "/healthz")).allowed
    assert not a.authorize(res(u, "get", "pods", ns="")).allowed


def test_subjects_user_group_serviceaccount():
    a = authz(role("r", [RULE_CM]),
              rb("b", "Role", "r", [U("alice"), Grp("devs"), SA("builder"), SA("deployer", "ci")]))
    assert a.authorize(res(user("alice"), "get", "configmaps")).allowed
    assert a.authorize(res(UserInfo("bob", groups=("devs",)), "get", "configmaps")).allowed
    assert not a.authorize(res(UserInfo("devs"), "get", "configmaps")).allowed          # group != user
    assert not a.authorize(res(UserInfo("bob", groups=("alice",)), "get", "configmaps")).allowed
    # an SA subject without namespace is the RoleBinding's namespace's
    assert a.authorize(res(UserInfo("system:serviceaccount:demo:builder"), "get", "configmaps")).allowed
    assert not a.authorize(res(UserInfo("system:serviceaccount:ci:builder"), "get", "configmaps")).allowed
    assert a.authorize(res(UserInfo("system:serviceaccount:ci:deployer"), "get", "configmaps")).allowed
    assert not a.authorize(res(UserInfo("system:serviceaccount:demo:deployer"), "get", "configmaps")).allowed
    assert not a.authorize(res(UserInfo("builder"), "get", "configmaps")).allowed


def test_serviceaccount_without_namespace_in_cluster_role_binding_matches_nobody():
    a = authz(crole("c", [RULE_CM]), crb("b", "c", [SA("builder")]))
    for name in ("system:serviceaccount::builder", "system:serviceaccount:default:builder", "builder"):
        assert not a.authorize(res(UserInfo(name), "get", "configmaps")).allowed


def test_user_subject_named_like_a_service_account_matches_it():
    a = authz(crole("c", [RULE_CM]), crb("b", "c", [U("system:serviceaccount:ci:deployer")]))
    d = a.authorize(res(UserInfo("system:serviceaccount:ci:deployer"), "get", "configmaps"))
    # described as the User subject it is (upstream's describeSubject: the subject's kind and name)
    assert d.allowed and d.reason == ('RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "c" to '
                                      'User "system:serviceaccount:ci:deployer"')


def test_service_account_of_another_namespace_matches_its_user_name_spelt_out():
    """A ServiceAccount subject of another namespace (kept as its namespace and name, indexed by the namespace)
    matches exactly the user name system:serviceaccount:<namespace>:<name>, as upstream's MatchesUsername: a
    subject's namespace is not validated, so one holding ':' matches where the name would seem to start."""
    a = authz(crole("c", [RULE_CM]),
              crb("b", "c", [U("carol"), SA("deployer", "ci"), SA("c", "a:b"), SA("y:z", "x")]),
              role("r", [RULE_CM]), rb("rb", "Role", "r", [SA("builder", "ci"), SA("builder")]))
    d = a.authorize(res(UserInfo("system:serviceaccount:ci:deployer"), "get", "configmaps", ns=""))
    assert d.allowed and d.reason == ('RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "c" to '
                                      'ServiceAccount "deployer/ci"')
    for name, allowed in [("system:serviceaccount:a:b:c", True), ("system:serviceaccount:x:y:z", True),
                          ("system:serviceaccount:a:b", False), ("system:serviceaccount:ci:deployer:", False),
                          ("system:serviceaccount:ci", False), ("system:serviceaccount:ci:deployerx", False),
                          ("system:serviceaccount:cix:deployer", False), ("ci:deployer", False)]:
        assert a.authorize(res(UserInfo(name), "get", "configmaps", ns="")).allowed is allowed, name
    d = a.authorize(res(UserInfo("system:serviceaccount:ci:builder"), "get", "configmaps", ns="demo"))
    assert d.allowed and d.reason == ('RBAC: allowed by RoleBinding "rb/demo" of Role "r" to '
                                      'ServiceAccount "builder/ci"')
    assert a.authorize(res(UserInfo("system:serviceaccount:demo:builder"), "get", "configmaps", ns="demo")).allowed
    assert not a.authorize(res(UserInfo("system:serviceaccount:ci:builder"), "get", "configmaps", ns="")).allowed
    a.apply("ClusterRoleBinding", "MODIFIED", crb("b", "c", [U("carol"), SA("c", "a:b")]))
    assert not a.authorize(res(UserInfo("system:serviceaccount:ci:deployer"), "get", "configmaps", ns="")).allowed
    assert a.authorize(res(UserInfo("system:serviceaccount:a:b:c"), "get", "configmaps", ns="")).allowed
    a.apply("ClusterRoleBinding", "DELETED", crb("b", "c", []))
    assert not a.authorize(res(UserInfo("system:serviceaccount:a:b:c"), "get", "configmaps", ns="")).allowed
    assert a._crb_idx == ({}, {}, {}, {})       # nothing left indexed


def test_unknown_subject_kind_matches_nobody():
    a = authz(crole("c", [RULE_CM]), crb("b", "c", [{"kind": "Robot", "name": "alice"}]))
    assert not a.authorize(res(user("alice"), "get", "configmaps")).allowed


def test_role_binding_scope():
    a = authz(role("r", [RULE_CM]), rb("b", "Role", "r", [U("alice")]),
              crole("view", [RULE_CM]), rb("b2", "ClusterRole", "view", [U("bob")], ns="other"))
    assert a.authorize(res(user("alice"), "list", "configmaps", ns="demo")).allowed
    assert not a.authorize(res(user("alice"), "list", "configmaps", ns="other")).allowed
    assert not a.authorize(res(user("alice"), "list", "configmaps", ns="")).allowed     # cluster-wide
    # a RoleBinding to a ClusterRole grants it in the binding's namespace only
    assert a.authorize(res(user("bob"), "list", "configmaps", ns="other")).allowed
    assert not a.authorize(res(user("bob"), "list", "configmaps", ns="demo")).allowed
    assert not a.authorize(res(user("bob"), "list", "configmaps", ns="")).allowed


def test_role_binding_references_role_of_its_own_namespace_only():
    a = authz(role("r", [RULE_CM], ns="elsewhere"), rb("b", "Role", "r", [U("alice")]))
    d = a.authorize(res(user(), "get", "configmaps"))
    assert not d.allowed
    assert d.reason == 'RBAC: role.rbac.authorization.k8s.io "r" not found'


def test_cluster_role_binding_applies_everywhere_and_never_to_a_role():
    a = authz(crole("c", [RULE_CM]), crb("b", "c", [U("alice")]),
              role("r", [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}], ns="demo"),
              crb("b2", "r", [U("bob")], ref_kind="Role"))
    for ns in ("", "demo", "x"):
        assert a.authorize(res(user("alice"), "list", "configmaps", ns=ns)).allowed
    d = a.authorize(res(user("bob"), "list", "configmaps", ns="demo"))
    assert not d.allowed and d.reason == 'RBAC: role.rbac.authorization.k8s.io "r" not found'


def test_denial_reasons_aggregate_missing_roles():
    a = authz(rb("b1", "Role", "gone", [U("alice")]), rb("b2", "Role", "gone", [Grp("devs")]),
              crb("c1", "missing", [U("alice")]), rb("b3", "Pod", "x", [U("alice")]))
    d = a.authorize(res(UserInfo("alice", groups=("devs",)), "get", "pods"))
    assert not d.allowed
    assert d.reason == ('RBAC: [clusterrole.rbac.authorization.k8s.io "missing" not found, '
                        'role.rbac.authorization.k8s.io "gone" not found, unsupported role reference kind: "Pod"]')
    # bindings that do not apply to the user are not resolved
    assert a.authorize(res(user("carol"), "get", "pods")).reason == ""


def test_allow_reasons_as_upstream():
    a = authz(crole("c", [RULE_CM]), crb("cb", "c", [Grp("devs"), U("alice")]),
              role("r", [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]),
              rb("b", "Role", "r", [U("bob"), SA("builder")]))
    d = a.authorize(res(UserInfo("alice", groups=("devs",)), "get", "configmaps"))
    assert d.reason == 'RBAC: allowed by ClusterRoleBinding "cb" of ClusterRole "c" to Group "devs"'
    d = a.authorize(res(UserInfo("system:serviceaccount:demo:builder"), "get", "secrets"))
    assert d.reason == 'RBAC: allowed by RoleBinding "b/demo" of Role "r" to ServiceAccount "builder/demo"'


def test_role_ref_api_group_is_not_looked_at():
    b = rb("b", "Role", "r", [U("alice")])
    b["roleRef"]["apiGroup"] = "example.com"
    assert authz(role("r", [RULE_CM]), b).authorize(res(user(), "get", "configmaps")).allowed


def test_events_modify_and_delete():
    a = authz(role("r", [RULE_CM]), rb("b", "Role", "r", [U("alice")]))
    q = res(user(), "get", "configmaps")
    assert a.authorize(q).allowed
    a.apply("RoleBinding", "MODIFIED", rb("b", "Role", "r", [U("bob")]))
    assert not a.authorize(q).allowed
    assert a.authorize(res(user("bob"), "get", "configmaps")).allowed
    a.apply("Role", "MODIFIED", role("r", [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]))
    assert not a.authorize(res(user("bob"), "get", "configmaps")).allowed
    assert a.authorize(res(user("bob"), "get", "secrets")).allowed
    a.apply("Role", "DELETED", role("r", []))
    assert a.authorize(res(user("bob"), "get", "secrets")).reason == 'RBAC: role.rbac.authorization.k8s.io "r" not found'
    a.apply("RoleBinding", "DELETED", orjson.dumps(rb("b", "Role", "r", [U("bob")])))  # bytes accepted
    assert a.authorize(res(user("bob"), "get", "secrets")) == a.authorize(res(user("nobody"), "get", "x"))
    assert a.counts() == {"Role": 0, "ClusterRole": 0, "RoleBinding": 0, "ClusterRoleBinding": 0}
    assert not a._rb and not a._rb_idx and not a._roles


def test_replace_drops_what_is_gone():
    a = authz(crole("c", [RULE_CM]), crb("x", "c", [U("alice")]))
    a.replace("ClusterRoleBinding", [crb("y", "c", [U("bob")])])
    assert not a.authorize(res(user("alice"), "get", "configmaps")).allowed
    assert a.authorize(res(user("bob"), "get", "configmaps")).allowed


def test_identical_rules_are_shared():
    a = authz(*(role("r", [dict(RULE_CM)], ns=f"ns{i}") for i in range(50)))
    rulesets = {id(d["r"]) for d in a._roles.values()}
    assert len(rulesets) == 1


def test_names_and_label_pairs_are_held_once():
    """The same binding name in 50 namespaces (each decoded anew, as the cache hands them over) is one string;
    ClusterRoles with the same label pair hold one pair (issue 23: RBAC memory per object)."""
    a = RBACAuthorizer()
    for i in range(50):
        a.apply("RoleBinding", "ADDED", orjson.loads(orjson.dumps(rb("app-reader", "Role", "r", [U("alice")],
                                                                     ns=f"ns{i}"))))
        a.apply("ClusterRole", "ADDED", orjson.loads(orjson.dumps(
            crole(f"c{i}", [RULE_CM], labels={"app.kubernetes.io/managed-by": "Helm", "i": str(i)}))))
    assert len({id(b[0]) for b in _registered(a)}) == 1
    pairs = [kv for labels in a._labels.values() for kv in labels if kv[0] == "app.kubernetes.io/managed-by"]
    assert len(pairs) == 50 and len({id(kv) for kv in pairs}) == 1
    a._sweep()      # a sweep keeps them shared, and new objects share with them
    a.apply("ClusterRole", "ADDED", crole("c-new", [RULE_CM], labels={"app.kubernetes.io/managed-by": "Helm"}))
    assert len({id(kv) for labels in a._labels.values() for kv in labels
                if kv[0] == "app.kubernetes.io/managed-by"}) == 1
    a.apply("RoleBinding", "MODIFIED", rb("app-reader", "Role", "r", [U("bob")], ns="ns3"))
    assert a._rb["ns3"] == (a._rb["ns3"][0],) and a._rb["ns3"][0][KEYS:] == ("bob",)
    assert a.counts()["RoleBinding"] == 50
    assert len({id(b[0]) for b in _registered(a)}) == 1


def _registered(a):
    """Every RoleBinding of the authorizer's per-namespace registries (tuples, or dicts by name once large)."""
    return [b for reg in a._rb.values() for b in (reg.values() if type(reg) is dict else reg)]


def test_a_namespace_registry_is_a_tuple_while_small_then_a_dict():
    """A namespace's RoleBindings are kept in a tuple (found by name) up to SMALL_REGISTRY of them, in a dict by
    name beyond; updates and deletes find them either way, and a namespace's last delete drops its entry."""
    a = authz(role("r", [RULE_CM]))
    n = SMALL_REGISTRY + 3
    for i in range(n):
        a.apply("RoleBinding", "ADDED", rb(f"b{i}", "Role", "r", [U(f"u{i}")]))
        assert type(a._rb["demo"]) is (tuple if i < SMALL_REGISTRY else dict), i
    assert a.counts()["RoleBinding"] == n and len(_registered(a)) == n
    a.apply("RoleBinding", "MODIFIED", rb("b0", "Role", "r", [U("x")]))
    assert a.counts()["RoleBinding"] == n
    assert a.authorize(res(user("x"), "get", "configmaps")).allowed
    assert not a.authorize(res(user("u0"), "get", "configmaps")).allowed
    for i in range(n):
        a.apply("RoleBinding", "DELETED", rb(f"b{i}", "Role", "r", []))
        assert a.counts()["RoleBinding"] == n - 1 - i
    assert "demo" not in a._rb and "demo" not in a._rb_idx
    for i in range(3):
        a.apply("RoleBinding", "ADDED", rb(f"b{i}", "Role", "r", [U(f"u{i}")]))
    a.apply("RoleBinding", "MODIFIED", rb("b1", "Role", "r", [U("y")]))
    a.apply("RoleBinding", "DELETED", rb("b0", "Role", "r", []))
    assert sorted(b[0] for b in a._rb["demo"]) == ["b1", "b2"] and type(a._rb["demo"]) is tuple
    assert a.authorize(res(user("y"), "get", "configmaps")).allowed
    assert not a.authorize(res(user("u0"), "get", "configmaps")).allowed
    a.apply("RoleBinding", "DELETED", rb("nope", "Role", "r", []))      # an unknown one: nothing changes
    assert a.counts()["RoleBinding"] == 2


def test_bindings_under_one_index_key_are_a_tuple_group_while_small_then_a_list():
    """One binding per key is the binding itself, two to SMALL_GROUP a _Group (a tuple), a list beyond; each
    form answers alike, and deletes go back down to one binding and to nothing."""
    a = authz(role("r", [RULE_CM]))
    n = SMALL_GROUP + 4
    users = a._rb_idx

    def held():
        return users["demo"][0].get("alice")
    for i in range(n):
        a.apply("RoleBinding", "ADDED", rb(f"b{i}", "Role", "r", [U("alice")]))
        want = tuple if i == 0 else _Group if i < SMALL_GROUP else list
        assert type(held()) is want and (i == 0 or len(held()) == i + 1), i
        assert a.authorize(res(user("alice"), "get", "configmaps")).allowed
    for i in range(n - 1):
        a.apply("RoleBinding", "DELETED", rb(f"b{i}", "Role", "r", []))
        assert a.authorize(res(user("alice"), "get", "configmaps")).allowed, i
    assert type(held()) is tuple and held()[0] == "b%d" % (n - 1)
    for i in range(3):
        a.apply("RoleBinding", "ADDED", rb(f"c{i}", "Role", "r", [U("alice")]))
    assert type(held()) is _Group and sorted(b[0] for b in held()) == ["b%d" % (n - 1), "c0", "c1", "c2"]
    a.apply("RoleBinding", "MODIFIED", rb("c1", "Role", "r", [U("bob")]))
    assert sorted(b[0] for b in held()) == ["b%d" % (n - 1), "c0", "c2"]
    assert a.authorize(res(user("bob"), "get", "configmaps")).allowed
    for name in ("b%d" % (n - 1), "c0", "c2"):
        a.apply("RoleBinding", "DELETED", rb(name, "Role", "r", []))
    assert held() is None and not a.authorize(res(user("alice"), "get", "configmaps")).allowed


def test_aggregated_cluster_roles():
    view = crole("view", [], labels={"kubernetes.io/bootstrapping": "rbac-defaults",
                                     "rbac.authorization.k8s.io/aggregate-to-edit": "true"},
                 aggregation=[{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}])
    edit = crole("edit", [{"verbs": ["stale"], "apiGroups": [""], "resources": ["x"]}],
                 aggregation=[{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true"}}])
    view_cm = crole("system:aggregate-to-view", [RULE_CM],
                    labels={"rbac.authorization.k8s.io/aggregate-to-view": "true"})
    edit_cm = crole("system:aggregate-to-edit", [{"verbs": ["create"], "apiGroups": [""], "resources": ["configmaps"]}],
                    labels={"rbac.authorization.k8s.io/aggregate-to-edit": "true"})
    a = authz(view, edit, view_cm, edit_cm, rb("b", "ClusterRole", "edit", [U("alice")]))
    u = user()
    assert a.authorize(res(u, "create", "configmaps")).allowed
    assert a.authorize(res(u, "list", "configmaps")).allowed            # through view, aggregated into edit
    assert not a.authorize(res(u, "stale", "x")).allowed               # the controller overwrites stored rules
    # a change to an aggregated-in role takes effect
    a.apply("ClusterRole", "MODIFIED", crole("system:aggregate-to-view", [
        {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}],
        labels={"rbac.authorization.k8s.io/aggregate-to-view": "true"}))
    assert not a.authorize(res(u, "list", "configmaps")).allowed
    assert a.authorize(res(u, "get", "secrets")).allowed
    # matchExpressions, and an unparsable selector: stored rules stay
    a.apply("ClusterRole", "ADDED", crole("expr", [], aggregation=[
        {"matchExpressions": [{"key": "rbac.authorization.k8s.io/aggregate-to-edit", "operator": "Exists"}]}]))
    a.apply("ClusterRole", "ADDED", crole("bad", [RULE_CM], aggregation=[
        {"matchExpressions": [{"key": "k", "operator": "In", "values": []}]}]))
    a.apply("RoleBinding", "ADDED", rb("b2", "ClusterRole", "expr", [U("carol")]))
    a.apply("RoleBinding", "ADDED", rb("b3", "ClusterRole", "bad", [U("dave")]))
    assert a.authorize(res(user("carol"), "create", "configmaps")).allowed
    assert a.authorize(res(user("dave"), "list", "configmaps")).allowed


def test_rules_for():
    a = authz(crole("c", [RULE_CM, {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]),
              crb("cb", "c", [U("alice")]), rb("b", "Role", "missing", [U("alice")]))
    rr, nr, incomplete, err = a.rules_for(user(), "demo")
    assert rr == [{"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["configmaps"]}]
    assert nr == [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]
    assert not incomplete and err == 'role.rbac.authorization.k8s.io "missing" not found'


def test_decision_time():
    """A few dict lookups and the rules of the roles bound to the user: well under 20 µs on this machine."""
    objs = [crole("view", [RULE_CM, {"verbs": ["get"], "apiGroups": ["apps"], "resources": ["deployments"]}])]
    for i in range(2000):
        objs.append(role(f"r{i}", [RULE_CM], ns=f"ns{i % 100}"))
        objs.append(rb(f"b{i}", "Role", f"r{i}", [U(f"u{i}"), SA(f"sa{i}"), Grp("system:authenticated")],
                       ns=f"ns{i % 100}"))
    a = authz(*objs)
    qs = [res(UserInfo(f"u{i}", groups=("system:authenticated",)), "get", "deployments", ns=f"ns{i % 100}",
              group="apps") for i in range(500)]
    t0 = time.perf_counter()
    for q in qs * 4:
        a.authorize(q)
    per = (time.perf_counter() - t0) / 2000
    assert per < 200e-6, per   # generous: a shared 2-core machine under test load


# ---------------------------------------------------------------------------- the reference evaluator
# Written from upstream's semantics, plainly: lists of the stored objects, a loop over every binding.

class Reference:
    def __init__(self):
        self.objs = {"Role": {}, "ClusterRole": {}, "RoleBinding": {}, "ClusterRoleBinding": {}}

    def apply(self, kind, event, obj):
        md = obj["metadata"]
        key = (md.get("namespace", ""), md["name"])
        self.cr_rules = None
        if event == "DELETED":
            self.objs[kind].pop(key, None)
        else:
            self.objs[kind][key] = obj

    # LabelSelectorAsSelector, then Matches
    @staticmethod
    def selector_ok(sel):
        for e in sel.get("matchExpressions", []):
            if e["operator"] in ("In", "NotIn") and len(e.get("values", [])) == 0:
                return False
            if e["operator"] in ("Exists", "DoesNotExist") and len(e.get("values", [])) > 0:
                return False
            if e["operator"] not in ("In", "NotIn", "Exists", "DoesNotExist"):
                return False
        return True

    @staticmethod
    def selector_matches(sel, labels):
        for k, v in sel.get("matchLabels", {}).items():
            if k not in labels or labels[k] != v:
                return False
        for e in sel.get("matchExpressions", []):
            k, op, vals = e["key"], e["operator"], e.get("values", [])
            if op == "In" and not (k in labels and labels[k] in vals):
                return False
            if op == "NotIn" and k in labels and labels[k] in vals:
                return False
            if op == "Exists" and k not in labels:
                return False
            if op == "DoesNotExist" and k in labels:
                return False
        return True

    def cluster_role_rules(self):
        """The aggregation controller run to its fixed point, from aggregated roles with no rules."""
        crs = {name: o for (_, name), o in self.objs["ClusterRole"].items()}
        aggregated = {n for n, o in crs.items() if "aggregationRule" in o
                      and all(self.selector_ok(s) for s in o["aggregationRule"]["clusterRoleSelectors"])}
        rules = {n: ([] if n in aggregated else list(o.get("rules") or [])) for n, o in crs.items()}
        changed = True
        while changed:
            changed = False
            for n in aggregated:
                new = list(rules[n])
                for s in crs[n]["aggregationRule"]["clusterRoleSelectors"]:
                    for m, mo in crs.items():
                        if m != n and self.selector_matches(s, mo["metadata"].get("labels", {})):
                            for r in rules[m]:
                                if r not in new:
                                    new.append(r)
                if new != rules[n]:
                    rules[n] = new
                    changed = True
        return rules

    @staticmethod
    def applies(subject, u, ns):
        if subject["kind"] == "User":
            return u.name == subject["name"]
        if subject["kind"] == "Group":
            return subject["name"] in u.groups
        if subject["kind"] == "ServiceAccount":
            sa_ns = subject.get("namespace") or ns
            if sa_ns == "":
                return False
            return u.name == "system:serviceaccount:" + sa_ns + ":" + subject["name"]
        return False

    @staticmethod
    def rule_allows(a, r):
        verb_ok = "*" in r.get("verbs", []) or a.verb in r.get("verbs", [])
        if a.resource_request:
            combined = a.resource + "/" + a.subresource if a.subresource != "" else a.resource
            group_ok = "*" in r.get("apiGroups", []) or a.api_group in r.get("apiGroups", [])
            res_ok = False
            for x in r.get("resources", []):
                if x == "*" or x == combined:
                    res_ok = True
                if a.subresource != "" and x == "*/" + a.subresource:
                    res_ok = True
            names = r.get("resourceNames", [])
            name_ok = len(names) == 0 or a.name in names
            return verb_ok and group_ok and res_ok and name_ok
        url_ok = False
        for x in r.get("nonResourceURLs", []):
            if x == "*" or x == a.path:
                url_ok = True
            if x.endswith("*") and a.path.startswith(x.rstrip("*")):
                url_ok = True
        return verb_ok and url_ok

    def allowed(self, a):
        if "system:masters" in a.user.groups:
            return True
        if getattr(self, "cr_rules", None) is None:
            self.cr_rules = self.cluster_role_rules()
        cr_rules = self.cr_rules
        bindings = [(b, "") for b in self.objs["ClusterRoleBinding"].values()]
        if a.namespace != "":
            bindings += [(b, a.namespace) for (ns, _), b in self.objs["RoleBinding"].items() if ns == a.namespace]
        for b, ns in bindings:
            if not any(self.applies(s, a.user, ns) for s in b.get("subjects") or []):
                continue
            ref = b["roleRef"]
            if ref["kind"] == "ClusterRole":
                rules = cr_rules.get(ref["name"])
            elif ref["kind"] == "Role":
                r = self.objs["Role"].get((ns, ref["name"])) if ns != "" else None
                rules = None if r is None else (r.get("rules") or [])
            else:
                rules = None
            for r in rules or []:
                if self.rule_allows(a, r):
                    return True
        return False


# ---------------------------------------------------------------------------- the generated comparison

EXAMPLES = int(os.environ.get("RBAC_EXAMPLES", "170"))
REQUESTS = 50
NAMESPACES = ["ns1", "ns2"]
ROLE_NAMES = ["r1", "r2", "r3"]
USERS = ["alice", "bob", "system:serviceaccount:ns1:sa1", "system:serviceaccount:ns2:sa1",
         "system:serviceaccount:ns1:sa2", "system:serviceaccount::sa1", "system:serviceaccount:ns2:sa3"]
GROUPS = ["g1", "g2", "system:authenticated", "system:serviceaccounts"]
VERBS = ["get", "list", "create", "delete", "*", "watch"]
API_GROUPS = ["", "apps", "*", "batch"]
RESOURCES = ["pods", "pods/log", "*/log", "*", "configmaps", "pods/*", "deployments", "*/status", "pods/status"]
RES_NAMES = ["x", "y", ""]
URLS = ["/healthz", "/api/*", "*", "/api", "/apis/**", "/healthz/", "/version"]
PATHS = ["/healthz", "/api", "/api/v1", "/apis", "/apis/apps", "/healthz/x", "/version", "/", ""]
LABELS = [{}, {"agg": "x"}, {"agg": "y"}, {"agg": "x", "other": "1"}, {"other": "1"}]
SELECTORS = [{"matchLabels": {"agg": "x"}}, {"matchLabels": {"agg": "y"}}, {},
             {"matchExpressions": [{"key": "agg", "operator": "In", "values": ["x", "y"]}]},
             {"matchExpressions": [{"key": "agg", "operator": "NotIn", "values": ["x"]}]},
             {"matchExpressions": [{"key": "other", "operator": "Exists"}]},
             {"matchExpressions": [{"key": "agg", "operator": "DoesNotExist"}]},
             {"matchExpressions": [{"key": "agg", "operator": "In", "values": []}]}]  # unparsable

subsets = lambda pool, mn=0, mx=4: st.lists(st.sampled_from(pool), min_size=mn, max_size=mx)  # noqa: E731

resource_rule = st.fixed_dictionaries({"verbs": subsets(VERBS, 1), "apiGroups": subsets(API_GROUPS, 1),
                                       "resources": subsets(RESOURCES, 1)},
                                      optional={"resourceNames": subsets(RES_NAMES, 0, 2)})
url_rule = st.fixed_dictionaries({"verbs": subsets(VERBS, 1), "nonResourceURLs": subsets(URLS, 1)})
rules = st.lists(st.one_of(resource_rule, resource_rule, url_rule), min_size=1, max_size=5)

subject = st.one_of(
    st.builds(lambda n: {"kind": "User", "apiGroup": G, "name": n},
              st.sampled_from(USERS + ["g1", "carol"])),
    st.builds(lambda n: {"kind": "Group", "apiGroup": G, "name": n}, st.sampled_from(GROUPS + ["alice"])),
    st.builds(lambda n, ns: {"kind": "ServiceAccount", "name": n, **({"namespace": ns} if ns is not None else {})},
              st.sampled_from(["sa1", "sa2", "sa3"]), st.sampled_from([None, "", "ns1", "ns2"])),
    st.builds(lambda n: {"kind": "Robot", "name": n}, st.sampled_from(USERS)))


@st.composite
def rbac_object(draw):
    kind = draw(st.sampled_from(["Role", "ClusterRole", "RoleBinding", "RoleBinding", "ClusterRoleBinding"]))
    name = draw(st.sampled_from(ROLE_NAMES if "Role" == kind[-4:] else ["b1", "b2", "b3", "b4"]))
    if kind == "Role":
        return role(name, draw(rules), ns=draw(st.sampled_from(NAMESPACES)))
    if kind == "ClusterRole":
        o = crole(name, draw(rules), labels=draw(st.sampled_from(LABELS)))
        if draw(st.integers(0, 3)) == 0:
            o["aggregationRule"] = {"clusterRoleSelectors": draw(subsets(SELECTORS, 0, 2))}
        return o
    ref = {"apiGroup": G, "kind": draw(st.sampled_from(["Role", "ClusterRole", "ClusterRole", "Pod"])),
           "name": draw(st.sampled_from(ROLE_NAMES))}
    subs = draw(st.lists(subject, min_size=draw(st.sampled_from([1, 1, 1, 0])), max_size=6))
    if kind == "RoleBinding":
        o = rb(name, ref["kind"], ref["name"], subs, ns=draw(st.sampled_from(NAMESPACES)))
    else:
        o = crb(name, ref["name"], subs, ref_kind=ref["kind"])
    if not subs and draw(st.booleans()):
        del o["subjects"]
    return o


events = st.lists(st.tuples(rbac_object(), st.sampled_from(["ADDED", "ADDED", "MODIFIED", "MODIFIED", "DELETED"])),
                  min_size=6, max_size=30)

request = st.one_of(
    st.builds(lambda u, g, v, ag, r, sub, ns, n: Attributes(UserInfo(u, groups=tuple(g)), v, True, api_group=ag,
                                                            resource=r, subresource=sub, namespace=ns, name=n),
              st.sampled_from(USERS + ["g1", "carol"]), subsets(GROUPS + ["alice"], 0, 2),
              st.sampled_from(VERBS), st.sampled_from(["", "apps", "batch", "extensions"]),
              st.sampled_from(["pods", "configmaps", "deployments", "secrets"]),
              st.sampled_from(["", "", "log", "status", "*"]), st.sampled_from(["", "ns1", "ns2", "ns3"]),
              st.sampled_from(["", "x", "y", "z"])),
    st.builds(lambda u, g, v, p: Attributes(UserInfo(u, groups=tuple(g)), v, False, path=p),
              st.sampled_from(USERS + ["g1"]), subsets(GROUPS, 0, 2), st.sampled_from(VERBS),
              st.sampled_from(PATHS)))

STATS = {"cases": 0, "allowed": 0, "targeted": 0, "mismatches": []}

CONCRETE = {"verbs": VERBS[:4], "apiGroups": ["", "apps", "batch"], "resources": ["pods", "configmaps", "deployments"],
            "resourceNames": ["x", "y", ""], "nonResourceURLs": PATHS}


def targeted(rnd, ref: Reference):
    """A request built from a binding that exists and a rule of the role it names (a concrete value for
    each of the rule's entries), then maybe one attribute changed: near the edge of what is allowed."""
    bindings = [(b, ns) for (ns, _), b in ref.objs["RoleBinding"].items()] + \
               [(b, "") for b in ref.objs["ClusterRoleBinding"].values()]
    bindings = [(b, ns) for b, ns in bindings if b.get("subjects")]
    if not bindings:
        return None

    def resolves(b, ns):
        ref_ = b["roleRef"]
        if ref_["kind"] == "Role":
            return bool((ref.objs["Role"].get((ns, ref_["name"])) or {}).get("rules")) if ns else False
        o = ref.objs["ClusterRole"].get(("", ref_["name"])) if ref_["kind"] == "ClusterRole" else None
        return o is not None and (bool(o.get("rules")) or "aggregationRule" in o)

    resolvable = [(b, ns) for b, ns in bindings if resolves(b, ns)]
    pool = resolvable if resolvable and rnd.randint(0, 5) else bindings
    cluster = [(b, ns) for b, ns in pool if not ns]
    b, ns = rnd.choice(cluster if cluster and rnd.random() < 0.4 else pool)
    s = rnd.choice([x for x in b["subjects"] if x["kind"] != "Robot"] or b["subjects"])
    sa_ns = s.get("namespace") or ns
    name = s["name"] if s["kind"] != "ServiceAccount" else f"system:serviceaccount:{sa_ns}:{s['name']}"
    u = UserInfo(name if s["kind"] != "Group" else rnd.choice(USERS),
                 groups=(s["name"],) if s["kind"] == "Group" else tuple(rnd.sample(GROUPS, rnd.random() < 0.2)))
    ref_ = b["roleRef"]
    if ref_["kind"] == "Role":
        r = ref.objs["Role"].get((ns, ref_["name"]))
        role_rules = (r or {}).get("rules") or []
    else:
        r = ref.objs["ClusterRole"].get(("", ref_["name"]))
        role_rules = (r or {}).get("rules") or []
        if r is not None and "aggregationRule" in r:
            role_rules = [x for o in ref.objs["ClusterRole"].values() for x in o.get("rules") or []]
    if ns:   # a RoleBinding: only resource requests (in its namespace) can use it
        role_rules = [r for r in role_rules if "nonResourceURLs" not in r] or role_rules
    rule = rnd.choice(role_rules) if role_rules else {}

    def pick(field):
        vals = rule.get(field) or []
        v = rnd.choice(vals) if vals else rnd.choice(CONCRETE[field])
        if v == "*":
            v = rnd.choice(CONCRETE[field])
        elif v.endswith("*"):
            v = v.rstrip("*") + rnd.choice(["", "v1", "/x"] if field == "nonResourceURLs" else CONCRETE[field])
        return v

    req_ns = ns or rnd.choice(["", "ns1", "ns2"])
    if "nonResourceURLs" in rule or not rule:
        a = Attributes(u, pick("verbs"), False, path=pick("nonResourceURLs"))
    else:
        resource = pick("resources")
        sub = ""
        if "/" in resource:
            resource, sub = resource.split("/", 1)
            if resource in ("*", ""):
                resource = rnd.choice(CONCRETE["resources"])
        a = Attributes(u, pick("verbs"), True, api_group=pick("apiGroups"), resource=resource, subresource=sub,
                       namespace=req_ns, name=pick("resourceNames") if rule.get("resourceNames") else
                       rnd.choice(["", "x"]))
    change = rnd.choice([None, None, None, None, "verb", "namespace", "name", "user", "subresource", "group"])
    if change == "verb":
        a = dataclasses.replace(a, verb=rnd.choice(VERBS))
    elif change == "namespace":
        a = dataclasses.replace(a, namespace=rnd.choice(["", "ns1", "ns2", "ns3"]))
    elif change == "name":
        a = dataclasses.replace(a, name=rnd.choice(RES_NAMES + ["z"]))
    elif change == "user":
        a = dataclasses.replace(a, user=UserInfo(rnd.choice(USERS), groups=u.groups))
    elif change == "subresource":
        a = dataclasses.replace(a, subresource=rnd.choice(["", "log", "status", "*"]))
    elif change == "group":
        a = dataclasses.replace(a, api_group=rnd.choice(API_GROUPS))
    return a


@settings(max_examples=EXAMPLES, deadline=None, derandomize="RBAC_EXAMPLES" not in os.environ,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])   # no shrinking: the failure message says enough
@given(events, st.data())
def _compare(evs, data):
    ref, az = Reference(), RBACAuthorizer()
    rnd = data.draw(st.randoms(use_true_random=False))
    for o, ev in evs:
        if ev == "DELETED":   # a DELETED event carries the last state: take the stored one when there is one
            md = o["metadata"]
            o = ref.objs[o["kind"]].get((md.get("namespace", ""), md["name"]), o)
        ref.apply(o["kind"], ev, o)
        az.apply(o["kind"], ev, orjson.dumps(o) if rnd.random() < 0.5 else o)
        # decisions between events too (they fill the aggregated roles' cache, which events must invalidate)
        a = targeted(rnd, ref) or data.draw(request)
        want = ref.allowed(a)
        STATS["cases"] += 1
        STATS["allowed"] += want
        assert az.authorize(a).allowed == want, (a, want, [e[1] for e in evs])
    # and the same state built by replace() (a relist)
    relisted = RBACAuthorizer()
    relisted.big = 1   # every rule list through the (verb, resource) index
    for kind, objs in ref.objs.items():
        relisted.replace(kind, list(objs.values()))
    for i in range(REQUESTS):
        a = targeted(rnd, ref) if i % 3 else None
        if a is None:
            a = data.draw(request)
        else:
            STATS["targeted"] += 1
        want = ref.allowed(a)
        got, got2 = az.authorize(a).allowed, relisted.authorize(a).allowed
        STATS["cases"] += 1
        STATS["allowed"] += want
        if got != want or got2 != want:
            STATS["mismatches"].append((evs, a, want, got, got2))
        assert got == want, (a, want, [e[1] for e in evs])
        assert got2 == want, a


def test_decisions_match_reference():
    STATS.update(cases=0, allowed=0, mismatches=[])
    _compare()
    print(f"\nRBAC reference comparison: {STATS['cases']} cases ({STATS['targeted']} built from a binding), "
          f"{STATS['allowed']} allowed, "
          f"{len(STATS['mismatches'])} mismatches")
    assert not STATS["mismatches"]
    assert STATS["cases"] >= EXAMPLES * (REQUESTS + 6) * 0.9
    if EXAMPLES >= 160:
        assert STATS["cases"] >= 10_000
    assert 0.05 < STATS["allowed"] / STATS["cases"] < 0.95   # the generator exercises both answers
