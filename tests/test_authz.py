"""Authorization (issue 14): `--authorization-mode`, the request info, the 403s, RBAC fed from the watch cache
(or etcd), upstream's bootstrap policy, the access reviews, kubectl and client-go as a user bound to `view`.

Real processes: our apiserver with `--authorization-mode=RBAC --token-auth-file` (watch cache on, and off, and
the same flags given to `python -m deployment`), and the reference kube-apiserver v1.37.2 with the same flags,
for byte-for-byte comparisons of the 403s and the reviews.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

from apiserver.auth import authz
from apiserver.auth.attributes import Attributes, Decision
from apiserver.auth.requestinfo import RequestInfoError, new_request_info
from apiserver.auth.user import ANONYMOUS_USER, UNSECURED, UserInfo
from tests.conftest import KUBECTL
from tests.helpers import ApiserverProcess, etcd_revision
from tests.helpers.etcd import load_tool

RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
TOKENS = {"admin": "admin-token", "alice": "alice-token", "bob": "bob-token", "vera": "vera-token",
          "mallory": "mallory-token", "wanda": "wanda-token", "ivan": "ivan-token"}
TOKEN_FILE = "\n".join([
    'admin-token,admin,1,"system:masters"', "alice-token,alice,2", 'bob-token,bob,3,"dev,qa"',
    "vera-token,vera,4", "mallory-token,mallory,5", "wanda-token,wanda,6", "ivan-token,ivan,7"]) + "\n"


# ============================================================ unit: modes, chain, request info, messages

@pytest.mark.parametrize("value,modes", [
    ("AlwaysAllow", ("AlwaysAllow",)), ("RBAC", ("RBAC",)), ("AlwaysAllow,RBAC", ("AlwaysAllow", "RBAC")),
    ("RBAC,AlwaysDeny", ("RBAC", "AlwaysDeny"))])
def test_parse_modes(value, modes):
    assert authz.parse_modes(value) == modes


@pytest.mark.parametrize("value,message", [
    ("", "at least one authorization-mode must be passed"),
    ("Foo", 'authorization-mode "Foo" is not a valid mode'),
    ("rbac", 'authorization-mode "rbac" is not a valid mode'),
    ("RBAC, AlwaysAllow", 'authorization-mode " AlwaysAllow" is not a valid mode'),
    ("ABAC", "authorization-mode ABAC's authorization policy file not passed"),
    ("Webhook", "authorization-mode Webhook's authorization config file not passed"),
    ("Node", 'authorization-mode "Node" is not supported by this server (supported: AlwaysAllow, AlwaysDeny, RBAC)'),
    ("RBAC,RBAC", 'authorization-mode ["RBAC" "RBAC"] has mode specified more than once')])
def test_parse_modes_refuses_as_upstream(value, message):
    with pytest.raises(ValueError) as e:
        authz.parse_modes(value)
    assert str(e.value) == message


def test_cli_refuses_unknown_mode():
    from apiserver.__main__ import parse_args
    with pytest.raises(SystemExit) as e:
        parse_args(["--authorization-mode=Foo"])
    assert e.value.code == 2
    assert parse_args(["--authorization-mode=AlwaysAllow,RBAC"]).authorization_modes == ("AlwaysAllow", "RBAC")
    assert parse_args([]).authorization_modes == ("AlwaysAllow",)


class FakeRBAC:
    def __init__(self, allowed: set[str], reason: str = ""):
        self.allowed, self.reason = allowed, reason

    def authorize(self, a: Attributes) -> Decision:
        return Decision(True, "RBAC: allowed") if a.user.name in self.allowed else Decision(False, self.reason)


def _attrs(user: UserInfo, verb="get") -> Attributes:
    return Attributes(user=user, verb=verb, resource_request=True, resource="configmaps", namespace="ns")


def test_union_first_decisive_authorizer_wins():
    alice, bob = UserInfo("alice", groups=("system:authenticated",)), UserInfo("bob")
    rbac = FakeRBAC({"alice"}, 'RBAC: role.rbac.authorization.k8s.io "x" not found')
    assert authz.Authorizer(["RBAC"], rbac).authorize(_attrs(alice)) == (authz.ALLOW, "RBAC: allowed")
    assert authz.Authorizer(["RBAC"], rbac).authorize(_attrs(bob)) == (
        authz.NO_OPINION, 'rbac: RBAC: role.rbac.authorization.k8s.io "x" not found')
    assert authz.Authorizer(["AlwaysAllow", "RBAC"], rbac).authorize(_attrs(bob)) == (authz.ALLOW, "")
    assert authz.Authorizer(["RBAC", "AlwaysAllow"], rbac).authorize(_attrs(bob)) == (authz.ALLOW, "")
    assert authz.Authorizer(["RBAC", "AlwaysAllow"], rbac).authorize(_attrs(alice)) == (authz.ALLOW, "RBAC: allowed")
    assert authz.Authorizer(["RBAC", "AlwaysDeny"], rbac).authorize(_attrs(bob)) == (
        authz.NO_OPINION, 'rbac: RBAC: role.rbac.authorization.k8s.io "x" not found\n'
                          "alwaysdeny: Everything is forbidden.")
    assert authz.Authorizer(["AlwaysDeny"]).authorize(_attrs(bob)) == (authz.NO_OPINION,
                                                                      "alwaysdeny: Everything is forbidden.")
    # system:masters first, whatever the modes
    assert authz.Authorizer(["AlwaysDeny"]).authorize(_attrs(UNSECURED)) == (authz.ALLOW, "")
    assert authz.Authorizer(["AlwaysAllow"]).always_allow and not authz.Authorizer(["RBAC", "AlwaysAllow"], rbac).always_allow


INFO_CASES = [
    # method, path, query -> verb, resource request, group, version, namespace, resource, subresource, name
    ("GET", "/api/v1/namespaces/ns/configmaps", {}, ("list", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"watch": "true"}, ("watch", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"watch": "x"}, ("watch", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"watch": "False"}, ("list", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"watch": "0"}, ("list", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/configmaps", {}, ("list", True, "", "v1", "", "configmaps", "", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps/x", {}, ("get", True, "", "v1", "ns", "configmaps", "", "x")),
    ("HEAD", "/api/v1/namespaces/ns/configmaps/x", {}, ("get", True, "", "v1", "ns", "configmaps", "", "x")),
    ("GET", "/api/v1/namespaces/ns/pods/p/log", {}, ("get", True, "", "v1", "ns", "pods", "log", "p")),
    ("GET", "/api/v1/watch/namespaces/ns/configmaps", {}, ("watch", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/watch/namespaces/ns/configmaps/x", {}, ("watch", True, "", "v1", "ns", "configmaps", "", "x")),
    ("GET", "/api/v1/watch/configmaps", {}, ("watch", True, "", "v1", "", "configmaps", "", "")),
    ("GET", "/api/v1/proxy/namespaces/ns/services/s/a/b", {}, ("proxy", True, "", "v1", "ns", "services", "", "s")),
    ("POST", "/api/v1/namespaces/ns/configmaps", {}, ("create", True, "", "v1", "ns", "configmaps", "", "")),
    ("PUT", "/api/v1/namespaces/ns/configmaps/x", {}, ("update", True, "", "v1", "ns", "configmaps", "", "x")),
    ("PATCH", "/api/v1/namespaces/ns/configmaps/x", {}, ("patch", True, "", "v1", "ns", "configmaps", "", "x")),
    ("DELETE", "/api/v1/namespaces/ns/configmaps/x", {}, ("delete", True, "", "v1", "ns", "configmaps", "", "x")),
    ("DELETE", "/api/v1/namespaces/ns/configmaps", {}, ("deletecollection", True, "", "v1", "ns", "configmaps", "", "")),
    ("OPTIONS", "/api/v1/namespaces/ns/configmaps/x", {}, ("", True, "", "v1", "ns", "configmaps", "", "x")),
    ("GET", "/api/v1/namespaces", {}, ("list", True, "", "v1", "", "namespaces", "", "")),
    ("GET", "/api/v1/namespaces/ns", {}, ("get", True, "", "v1", "ns", "namespaces", "", "ns")),
    ("GET", "/api/v1/namespaces/ns/status", {}, ("get", True, "", "v1", "ns", "namespaces", "status", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", True, "", "v1", "ns", "namespaces", "finalize", "ns")),
    ("GET", "/apis/apps/v1/namespaces/ns/deployments/d/scale", {},
     ("get", True, "apps", "v1", "ns", "deployments", "scale", "d")),
    ("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/view", {},
     ("get", True, "rbac.authorization.k8s.io", "v1", "", "clusterroles", "", "view")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"fieldSelector": "metadata.name=abc"},
     ("list", True, "", "v1", "ns", "configmaps", "", "abc")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"fieldSelector": "metadata.name==abc,a=b", "watch": "1"},
     ("watch", True, "", "v1", "ns", "configmaps", "", "abc")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"fieldSelector": "metadata.name!=abc"},
     ("list", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"fieldSelector": "metadata.name=a/b"},
     ("list", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"fieldSelector": "metadata.name=abc", "limit": "x"},
     ("list", True, "", "v1", "ns", "configmaps", "", "")),
    ("GET", "/api", {}, ("get", False, "", "", "", "", "", "")),
    ("GET", "/api/v1", {}, ("get", False, "", "", "", "", "", "")),
    ("GET", "/apis/apps/v1", {}, ("get", False, "", "", "", "", "", "")),
    ("POST", "/healthz", {}, ("post", False, "", "", "", "", "", "")),
]


@pytest.mark.parametrize("method,path,query,want", INFO_CASES)
def test_request_info(method, path, query, want):
    i = new_request_info(method, path, query)
    assert (i.verb, i.is_resource_request, i.api_group, i.api_version, i.namespace, i.resource, i.subresource,
            i.name) == want


def test_request_info_error():
    with pytest.raises(RequestInfoError, match="unable to determine kind and namespace from url, /api/v1/watch"):
        new_request_info("GET", "/api/v1/watch", {})


def test_forbidden_status_shapes():
    alice = UserInfo("alice")
    e = authz.forbidden(_attrs(alice, "list"))
    assert e.status() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": 'configmaps is forbidden: User "alice" cannot list resource "configmaps" in API '
                                     'group "" in the namespace "demo"'.replace("demo", "ns"),
                          "reason": "Forbidden", "details": {"kind": "configmaps"}, "code": 403}
    nr = Attributes(user=ANONYMOUS_USER, verb="get", resource_request=False, path="/foo")
    assert authz.forbidden(nr, "x").status()["message"] == 'forbidden: User "system:anonymous" cannot get path "/foo": x'
    assert authz.forbidden(nr).status()["details"] == {}
    named = Attributes(user=alice, verb="get", resource_request=True, api_group="apps", resource="deployments",
                       subresource="scale", name="d")
    st = authz.forbidden(named).status()
    assert st["message"] == ('deployments.apps "d" is forbidden: User "alice" cannot get resource "deployments/scale" '
                             'in API group "apps" at the cluster scope')
    assert st["details"] == {"name": "d", "group": "apps", "kind": "deployments"}
    odd = Attributes(user=UserInfo("a<b>&c"), verb="list", resource_request=True, resource="configmaps",
                     namespace="n")
    assert 'User "a&lt;b&gt;&amp;c" cannot' in authz.forbidden(odd).message  # upstream's sanitizer


# ============================================================ processes

@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("authz") / "tokens.csv"
    p.write_text(TOKEN_FILE)
    return str(p)


class Client:
    """requests with a bearer token (or none: anonymous)."""

    def __init__(self, base: str, token: str | None, verify=True, mode: str = "ours"):
        import requests
        self.base, self.token, self.verify, self.mode = base, token, verify, mode
        self.s = requests.Session()

    def req(self, method, path, body=None, *, params=None, stream=False, timeout=30, headers=None):
        h = {"Accept": "application/json", **(headers or {})}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        return self.s.request(method, self.base + path, data=data, headers=h, params=params, stream=stream,
                              timeout=timeout, verify=self.verify)

    def as_user(self, user: str | None) -> "Client":
        return Client(self.base, TOKENS[user] if user else None, self.verify, self.mode)


def _ours(current_etcd, token_file, *extra, name="authz"):
    return ApiserverProcess("--authorization-mode=RBAC", f"--token-auth-file={token_file}", *extra,
                            etcd_servers=current_etcd.endpoint, etcd_prefix=f"/registry-{name}{os.getpid()}",
                            name=name, ready_token=TOKENS["admin"])


@pytest.fixture(scope="module")
def ours(current_etcd, token_file, tmp_path_factory):
    """Plain HTTP and HTTPS (`secure_url`, `ca`): kubectl sends no token over plain HTTP."""
    from storage.embedded import free_port
    from tests.helpers.kube import make_pki
    pki = tmp_path_factory.mktemp("authz-pki")
    make_pki(str(pki))
    port = free_port()
    with _ours(current_etcd, token_file, f"--secure-port={port}", f"--tls-cert-file={pki / 'serving.crt'}",
               f"--tls-private-key-file={pki / 'serving.key'}", name="authz") as p:
        c = Client(p.base, TOKENS["admin"])
        c.secure_url, c.ca = f"https://127.0.0.1:{port}", str(pki / "ca.crt")
        yield c


@pytest.fixture(scope="module")
def ours_etcd(current_etcd, token_file):
    """--watch-cache=false: the authorizer runs its own list + watch on etcd."""
    with _ours(current_etcd, token_file, "--watch-cache=false", name="authz-etcd") as p:
        yield Client(p.base, TOKENS["admin"], mode="etcd")


@pytest.fixture(scope="module")
def ours_deployment(current_etcd, token_file, tmp_path_factory):
    """The same flags given to `python -m deployment` (two fronts over two resident shards): the fronts
    authorize, each from RBAC indexes of its own."""
    from tests.helpers.deployment import differential
    d = differential(tmp_path_factory.mktemp("authz-deployment"), current_etcd.endpoint,
                     f"/registry-authzdep{os.getpid()}", "--authorization-mode=RBAC", f"--token-auth-file={token_file}")
    yield Client(d.base, TOKENS["admin"], mode="deployment")
    d.stop()


@pytest.fixture(scope="module")
def ours_all(ours, ours_etcd, ours_deployment):
    """Every server of ours the differential tests compare with kube-apiserver."""
    return ours, ours_etcd, ours_deployment


@pytest.fixture(scope="module")
def kube(current_etcd, token_file):
    from tests.helpers.kube import KubeApiserver
    load_tool("build_kube_apiserver").ensure_kube_apiserver()
    with KubeApiserver(current_etcd.endpoint, prefix=f"/registry-authz-kube{os.getpid()}", authorization_mode="RBAC",
                       extra_args=(f"--token-auth-file={token_file}",)) as k:
        c = Client(k.url, TOKENS["admin"], verify=k.ca, mode="kube")
        c.fresh_policy = load_tool("rbac_bootstrap_policy").extract(lambda p: c.req("GET", p).json())
        aggregate_like_kube_controller_manager(c)
        yield c


def _matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def aggregate_like_kube_controller_manager(c: Client) -> None:
    """What a cluster's kube-controller-manager does and kube-apiserver alone does not: fill the aggregated
    ClusterRoles (admin, edit, view) with the rules of the ClusterRoles their selectors match (its
    clusterrole-aggregation controller: roles in name order, each rule once), until nothing changes."""
    for _ in range(5):
        roles = c.req("GET", f"{RBAC_API}/clusterroles").json()["items"]
        changed = False
        for role in roles:
            if not role.get("aggregationRule"):
                continue
            rules: list = []
            for sel in role["aggregationRule"]["clusterRoleSelectors"]:
                for other in sorted(roles, key=lambda r: r["metadata"]["name"]):
                    if other["metadata"]["name"] != role["metadata"]["name"] and \
                            _matches(sel, other["metadata"].get("labels") or {}):
                        rules += [r for r in other.get("rules") or [] if r not in rules]
            if rules != (role.get("rules") or []):
                r = c.req("PUT", f"{RBAC_API}/clusterroles/{role['metadata']['name']}", {**role, "rules": rules})
                assert r.status_code == 200, r.text
                changed = True
        if not changed:
            return
    raise AssertionError("aggregation did not converge")


@pytest.fixture(scope="module", params=["cache", "etcd", "deployment"])
def server(request):
    return request.getfixturevalue({"cache": "ours", "etcd": "ours_etcd",
                                    "deployment": "ours_deployment"}[request.param])


def _ns(c: Client, name: str) -> str:
    r = c.req("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert r.status_code in (201, 409), r.text
    return name


def _bind(c: Client, ns: str | None, name: str, role_kind: str, role: str, subjects: list[dict]) -> None:
    body = {"metadata": {"name": name}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                                                   "name": role}, "subjects": subjects}
    path = f"{RBAC_API}/namespaces/{ns}/rolebindings" if ns else f"{RBAC_API}/clusterrolebindings"
    r = c.req("POST", path, body)
    assert r.status_code == 201, r.text


def _user(name: str) -> dict:
    return {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name}


def _wait(pred, timeout: float) -> float:
    """Seconds until pred() holds (polled every 20 ms); fails after `timeout`."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"not within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def policy(ours_all, kube):
    """The same RBAC objects on every server: namespace authz-demo, mallory bound to missing roles, alice
    allowed to list configmaps in authz-demo only, vera bound to `view` in authz-demo."""
    for c in (*ours_all, kube):
        _ns(c, "authz-demo")
        r = c.req("POST", f"{RBAC_API}/namespaces/authz-demo/roles", {
            "metadata": {"name": "cm-lister"}, "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                                                          "verbs": ["list", "watch"]}]})
        assert r.status_code == 201, r.text
        _bind(c, "authz-demo", "alice-cm", "Role", "cm-lister", [_user("alice")])
        _bind(c, "authz-demo", "vera-view", "ClusterRole", "view", [_user("vera")])
        _bind(c, "authz-demo", "mallory-missing", "Role", "missing", [_user("mallory")])
        _bind(c, None, "authz-mallory-missing", "ClusterRole", "missing2", [_user("mallory")])
    for c in (*ours_all, kube):  # the authorizers have seen them
        vera = c.as_user("vera")
        _wait(lambda: vera.req("GET", "/api/v1/namespaces/authz-demo/configmaps").status_code == 200, 10)
        m = c.as_user("mallory")
        _wait(lambda: "missing2" in m.req("GET", "/foo").text, 10)
    return True


# ============================================================ impersonation, as kube-apiserver

IMPERSONATOR = {"metadata": {"name": "authz-impersonator"}, "rules": [
    {"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["vera", "system:anonymous"]},
    {"apiGroups": [""], "resources": ["groups", "serviceaccounts"], "verbs": ["impersonate"]},
    {"apiGroups": ["authentication.k8s.io"], "resources": ["uids", "userextras/scopes"], "verbs": ["impersonate"]}]}


@pytest.fixture(scope="module")
def impersonator(policy, ours_all, kube):
    """ivan may impersonate vera and system:anonymous, any group or service account, uids and the extra
    `scopes` (a ClusterRole bound to him on every server)."""
    for c in (*ours_all, kube):
        r = c.req("POST", f"{RBAC_API}/clusterroles", IMPERSONATOR)
        assert r.status_code == 201, r.text
        _bind(c, None, "authz-impersonator", "ClusterRole", "authz-impersonator", [_user("ivan")])
    for c in (*ours_all, kube):
        ivan = c.as_user("ivan")
        _wait(lambda: ivan.req("GET", "/api/v1/namespaces/authz-demo/configmaps",
                               headers={"Impersonate-User": "vera"}).status_code == 200, 10)
    return True


WHOAMI = ("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
          {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
IMPERSONATION_CASES = [   # (who, headers, request): upstream's answer, compared as a whole or as the user it acts as
    ("ivan", {"Impersonate-User": "vera"}, WHOAMI),
    ("ivan", {"Impersonate-User": "vera", "Impersonate-Group": "devs"}, WHOAMI),
    ("ivan", {"Impersonate-User": "vera", "Impersonate-Group": "system:unauthenticated"}, WHOAMI),
    ("ivan", {"Impersonate-User": "system:serviceaccount:authz-demo:robot"}, WHOAMI),
    ("ivan", {"Impersonate-User": "system:anonymous"}, WHOAMI),
    ("ivan", {"Impersonate-User": "vera", "Impersonate-Uid": "u-7", "Impersonate-Extra-Scopes": "openid"}, WHOAMI),
    ("ivan", {"Impersonate-User": "vera"}, ("GET", "/api/v1/namespaces/authz-demo/configmaps", None)),
    ("ivan", {"Impersonate-User": "vera"}, ("GET", "/api/v1/namespaces/authz-demo/secrets", None)),   # vera may not
    ("ivan", {"Impersonate-User": "mallory"}, WHOAMI),                                     # ivan may not
    ("ivan", {"Impersonate-User": "vera", "Impersonate-Extra-Other": "x"}, WHOAMI),        # nor this extra
    ("alice", {"Impersonate-User": "vera"}, ("GET", "/api/v1/namespaces/authz-demo/configmaps", None)),
    ("ivan", {"Impersonate-Group": "devs"}, WHOAMI),                                       # no user: a 400
    ("ivan", {"Impersonate-Uid": "u", "Impersonate-Extra-Scopes": "openid"}, WHOAMI),
    (None, {"Impersonate-User": "vera"}, WHOAMI),                                          # anonymous may not
    # never granted any impersonation: the first constrained mode's refusal, on the request's own verb
    ("alice", {"Impersonate-User": "vera"}, WHOAMI),
    ("alice", {"Impersonate-User": "vera"}, ("GET", "/foo", None)),
    ("alice", {"Impersonate-User": "vera", "Impersonate-Group": "g"},
     ("GET", "/api/v1/namespaces/authz-demo/configmaps/x", None)),
    ("bob", {"Impersonate-User": "system:serviceaccount:authz-demo:robot"},
     ("GET", "/api/v1/namespaces/authz-demo/pods/p/log", None)),
    ("bob", {"Impersonate-User": "system:node:n1"}, ("GET", "/api/v1/nodes", None)),
]


def test_impersonation_headers():
    """processImpersonationHeaders: extras by lowercased, path-unescaped key whatever the header's case; a uid,
    groups or extras without a user are upstream's 400, the asked user printed as Go's %#v prints it."""
    from multidict import CIMultiDict
    from apiserver.auth import impersonation
    from machinery import errors
    h = CIMultiDict([("Impersonate-User", "vera"), ("Impersonate-Extra-Scopes", "a"), ("impersonate-extra-scopes", "b"),
                     ("Impersonate-Extra-acme.com%2Fproject", "p"), ("Impersonate-Group", "g1"),
                     ("Impersonate-Group", "g2")])
    assert impersonation.wanted(h) == UserInfo("vera", groups=("g1", "g2"))
    assert impersonation.wanted(h).extra == {"scopes": ("a", "b"), "acme.com/project": ("p",)}
    assert impersonation.wanted(CIMultiDict([("Accept", "x")])) is None
    with pytest.raises(errors.StatusError) as e:
        impersonation.wanted(CIMultiDict([("Impersonate-Group", "devs"), ("Impersonate-Extra-Scopes", "openid")]))
    assert (e.value.code, e.value.reason) == (400, "BadRequest")
    assert e.value.message == ('requested &user.DefaultInfo{Name:"", UID:"", Groups:[]string{"devs"}, '
                               'Extra:map[string][]string{"scopes":[]string{"openid"}}} without impersonating a user name')


@pytest.mark.parametrize("user,headers,call", IMPERSONATION_CASES)
def test_impersonation_as_kube(impersonator, ours_all, kube, user, headers, call):
    """The impersonation filter (apiserver/auth/impersonation.py) against kube-apiserver: every refusal byte for
    byte, every allowed request with the same status and, for `kubectl auth whoami`'s review, the same user."""
    method, path, body = call
    k = kube.as_user(user).req(method, path, body, headers=headers)
    for c in ours_all:
        r = c.as_user(user).req(method, path, body, headers=headers)
        assert r.status_code == k.status_code, (c.mode, r.text, k.text)
        if k.status_code >= 400:
            assert (r.headers["Content-Type"], r.content) == (k.headers["Content-Type"], k.content), c.mode
        elif path.endswith("selfsubjectreviews"):
            assert r.json()["status"]["userInfo"] == k.json()["status"]["userInfo"], c.mode


# ============================================================ the 403s, byte for byte with kube-apiserver

FORBIDDEN_CASES = [
    ("alice", "GET", "/api/v1/namespaces/other/configmaps", None),
    ("alice", "GET", "/api/v1/configmaps", None),                        # cluster-wide list: denied
    ("alice", "GET", "/api/v1/namespaces/authz-demo/configmaps/x", None),  # get is not granted
    ("alice", "GET", "/api/v1/namespaces/authz-demo/pods/p/log", None),
    ("alice", "GET", "/foo", None),
    (None, "GET", "/foo", None),
    (None, "GET", "/api/v1/namespaces/authz-demo/configmaps", None),
    ("alice", "GET", "/api/v1/namespaces/other/configmaps?watch=true", None),
    ("alice", "GET", "/api/v1/watch/namespaces/other/configmaps/x", None),
    ("alice", "GET", "/api/v1/watch/configmaps", None),
    ("alice", "DELETE", "/apis/apps/v1/namespaces/authz-demo/deployments", None),
    ("alice", "DELETE", "/api/v1/namespaces/authz-demo/configmaps", None),
    ("alice", "POST", "/api/v1/namespaces/authz-demo/configmaps", {"metadata": {"name": "x"}}),
    ("alice", "PUT", "/api/v1/namespaces/authz-demo/configmaps/x", {"metadata": {"name": "x"}}),
    ("alice", "GET", "/api/v1/namespaces/other/configmaps?fieldSelector=metadata.name%3Dabc", None),
    ("alice", "GET", "/api/v1/namespaces/authz-demo/configmaps/a&<b>", None),
    ("alice", "GET", "/api/v1/namespaces/authz-demo/status", None),
    ("alice", "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/view", None),
    ("alice", "GET", "/apis/widgets.example.com/v1/namespaces/authz-demo/gadgets", None),
    ("alice", "GET", "/api/v1/namespaces/authz-demo/configmaps/x/y/z", None),
    ("alice", "GET", "/api/v1/watch", None),  # upstream's RequestInfo error: a plain-text 500
    ("mallory", "GET", "/api/v1/namespaces/authz-demo/configmaps", None),  # the RBAC reason suffix
    ("mallory", "GET", "/api/v1/configmaps", None),
    ("mallory", "GET", "/foo", None),
    ("vera", "POST", "/api/v1/namespaces/authz-demo/configmaps", {"metadata": {"name": "x"}}),
    ("vera", "GET", "/api/v1/namespaces/authz-demo/secrets", None),  # view does not read secrets
    ("vera", "GET", "/api/v1/configmaps", None),
]


@pytest.mark.parametrize("user,method,path,body", FORBIDDEN_CASES)
def test_forbidden_equals_kube(policy, ours_all, kube, user, method, path, body):
    k = kube.as_user(user).req(method, path, body)
    assert k.status_code in (403, 500), k.text
    for c in ours_all:
        r = c.as_user(user).req(method, path, body)
        assert (r.status_code, r.headers["Content-Type"], r.content) == (
            k.status_code, k.headers["Content-Type"], k.content), c.mode


ALLOWED_CASES = [
    ("alice", "GET", "/api/v1/namespaces/authz-demo/configmaps"),
    ("alice", "GET", "/api"),             # system:discovery for system:authenticated
    ("alice", "GET", "/apis"),
    (None, "GET", "/version"),            # system:public-info-viewer for system:unauthenticated
    (None, "GET", "/healthz"),
    ("vera", "GET", "/api/v1/namespaces/authz-demo/configmaps"),
    ("vera", "GET", "/api/v1/namespaces/authz-demo/pods"),
    ("bob", "GET", "/apis/rbac.authorization.k8s.io/v1"),
]


@pytest.mark.parametrize("user,method,path", ALLOWED_CASES)
def test_allowed_as_kube(policy, ours_all, kube, user, method, path):
    assert kube.as_user(user).req(method, path).status_code == 200
    for c in ours_all:
        assert c.as_user(user).req(method, path).status_code == 200, c.mode


def test_namespace_list_allowed_cluster_list_forbidden(policy, server):
    alice = server.as_user("alice")
    assert alice.req("GET", "/api/v1/namespaces/authz-demo/configmaps").status_code == 200
    assert alice.req("GET", "/api/v1/namespaces/authz-demo/configmaps", params={"watch": "1", "timeoutSeconds": "1"}
                     ).status_code == 200
    r = alice.req("GET", "/api/v1/configmaps")
    assert r.status_code == 403 and r.json()["message"] == (
        'configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" at the cluster scope')


# ============================================================ changes take effect within a second

def test_binding_change_takes_effect_within_a_second(server):
    ns = _ns(server, f"authz-live-{server.mode}")
    bob = server.as_user("bob")
    path = f"/api/v1/namespaces/{ns}/configmaps"
    assert bob.req("GET", path).status_code == 403
    t0 = time.monotonic()
    _bind(server, ns, "dev-view", "ClusterRole", "view", [{"kind": "Group", "name": "dev",
                                                           "apiGroup": "rbac.authorization.k8s.io"}])
    _wait(lambda: bob.req("GET", path).status_code == 200, 5)
    granted = time.monotonic() - t0
    t0 = time.monotonic()
    assert server.req("DELETE", f"{RBAC_API}/namespaces/{ns}/rolebindings/dev-view").status_code == 200
    _wait(lambda: bob.req("GET", path).status_code == 403, 5)
    revoked = time.monotonic() - t0
    assert granted < 1.0 and revoked < 1.0, (granted, revoked)


def test_role_change_takes_effect_within_a_second(server):
    ns = _ns(server, f"authz-role-{server.mode}")
    wanda = server.as_user("wanda")
    r = server.req("POST", f"{RBAC_API}/namespaces/{ns}/roles", {"metadata": {"name": "r"}, "rules": []})
    assert r.status_code == 201
    _bind(server, ns, "wanda-r", "Role", "r", [_user("wanda")])
    path = f"/api/v1/namespaces/{ns}/secrets"
    t0 = time.monotonic()
    r = server.req("PUT", f"{RBAC_API}/namespaces/{ns}/roles/r", {"metadata": {"name": "r"}, "rules": [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]})
    assert r.status_code == 200, r.text
    _wait(lambda: wanda.req("GET", path).status_code == 200, 5)
    assert time.monotonic() - t0 < 1.0


def test_open_watch_is_not_cut_when_the_binding_is_removed(server):
    ns = _ns(server, f"authz-watch-{server.mode}")
    _bind(server, ns, "wanda-view", "ClusterRole", "view", [_user("wanda")])
    wanda = server.as_user("wanda")
    path = f"/api/v1/namespaces/{ns}/configmaps"
    _wait(lambda: wanda.req("GET", path).status_code == 200, 5)
    w = wanda.req("GET", path, params={"watch": "1", "timeoutSeconds": "20"}, stream=True, timeout=30)
    assert w.status_code == 200
    assert server.req("DELETE", f"{RBAC_API}/namespaces/{ns}/rolebindings/wanda-view").status_code == 200
    _wait(lambda: wanda.req("GET", path).status_code == 403, 5)  # new requests are refused ...
    got: list[dict] = []

    def read():
        for line in w.iter_lines():
            if line:
                got.append(json.loads(line))
                return
    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert server.req("POST", path, {"metadata": {"name": "after"}}).status_code == 201
    t.join(10)
    w.close()
    assert got and got[0]["type"] == "ADDED" and got[0]["object"]["metadata"]["name"] == "after"  # ... this one is not


# ============================================================ bootstrap policy

BOOTSTRAP = [("clusterroles", n) for n in ("cluster-admin", "admin", "edit", "view", "system:discovery",
                                           "system:basic-user", "system:public-info-viewer", "system:aggregate-to-view")] + \
            [("clusterrolebindings", n) for n in ("cluster-admin", "system:discovery", "system:basic-user",
                                                  "system:public-info-viewer")]


@pytest.mark.parametrize("plural,name", BOOTSTRAP)
def test_bootstrap_policy_equals_kube(ours, kube, plural, name):
    """As kube-apiserver creates them (before any controller): the aggregated roles without rules."""
    kind = {"clusterroles": "ClusterRole", "clusterrolebindings": "ClusterRoleBinding"}[plural]
    (k,) = [o for o in kube.fresh_policy[kind] if o["metadata"]["name"] == name]
    mine = ours.req("GET", f"{RBAC_API}/{plural}/{name}").json()
    md = {k_: v for k_, v in mine["metadata"].items() if k_ not in ("uid", "resourceVersion", "creationTimestamp")}
    assert {**mine, "metadata": md} == k
    assert k["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
    assert k["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "true"


def test_bootstrap_policy_file_is_every_default_kube_creates(kube):
    from apiserver.auth.bootstrap import load_policy
    assert kube.fresh_policy == load_policy()


def test_read_only_writes_no_policy(token_file):
    from tests.helpers.etcd import current_etcd as own_etcd
    with own_etcd() as etcd:  # its own: kube-apiserver writes leases to the shared one
        before = etcd_revision(etcd.endpoint)
        with ApiserverProcess("--authorization-mode=RBAC", f"--token-auth-file={token_file}", "--read-only",
                              etcd_servers=etcd.endpoint, name="authz-ro", ready_token=TOKENS["admin"]) as p:
            admin = Client(p.base, TOKENS["admin"])
            assert admin.req("GET", f"{RBAC_API}/clusterroles").json()["items"] == []
            r = admin.as_user("alice").req("GET", "/api")  # no system:discovery binding: refused
            assert r.status_code == 403
        assert etcd_revision(etcd.endpoint) == before


# ============================================================ access reviews

REVIEW_CASES = [
    ("alice", "selfsubjectaccessreviews", {"spec": {"resourceAttributes": {
        "namespace": "authz-demo", "verb": "list", "resource": "configmaps"}}}),
    ("alice", "selfsubjectaccessreviews", {"spec": {"resourceAttributes": {"verb": "list", "resource": "configmaps"}}}),
    ("mallory", "selfsubjectaccessreviews", {"spec": {"resourceAttributes": {
        "namespace": "authz-demo", "verb": "get", "resource": "pods", "version": "v1", "group": ""}}}),
    ("vera", "selfsubjectaccessreviews", {"spec": {"nonResourceAttributes": {"path": "/apis", "verb": "get"},
                                                   "junk": 1}, "status": {"allowed": True}}),
    ("vera", "selfsubjectaccessreviews", {"spec": {}}),
    ("vera", "selfsubjectaccessreviews", {"spec": {
        "nonResourceAttributes": {"path": "/x", "verb": "get"}, "resourceAttributes": {"verb": "get"}}}),
    ("vera", "selfsubjectaccessreviews", {"spec": {"resourceAttributes": {"verb": 1}}}),
    ("vera", "selfsubjectaccessreviews", {"spec": {"resourceAttributes": {"verb": "get", "labelSelector": {}}}}),
    ("vera", "selfsubjectrulesreviews", {"spec": {"namespace": "authz-demo"}}),
    ("mallory", "selfsubjectrulesreviews", {"spec": {"namespace": "authz-demo"}}),
    ("vera", "selfsubjectrulesreviews", {"spec": {}}),
    ("admin", "subjectaccessreviews", {"spec": {"user": "vera", "resourceAttributes": {
        "namespace": "authz-demo", "verb": "watch", "resource": "configmaps"}}}),
    ("admin", "subjectaccessreviews", {"spec": {"user": "vera", "groups": ["system:authenticated"],
                                                "nonResourceAttributes": {"verb": "get", "path": "/apis"}}}),
    ("admin", "subjectaccessreviews", {"spec": {"resourceAttributes": {"verb": "get"}}}),
    ("admin", "subjectaccessreviews", {"spec": {"groups": "x"}}),
    ("vera", "subjectaccessreviews", {"spec": {"user": "vera", "resourceAttributes": {"verb": "get"}}}),
    ("admin", "namespaces/authz-demo/localsubjectaccessreviews", {"spec": {"user": "alice", "resourceAttributes": {
        "namespace": "authz-demo", "verb": "list", "resource": "configmaps"}}}),
    ("admin", "namespaces/authz-demo/localsubjectaccessreviews", {"spec": {"user": "alice", "resourceAttributes": {
        "namespace": "other", "verb": "list", "resource": "configmaps"}}}),
    ("admin", "localsubjectaccessreviews", {"spec": {"user": "alice", "resourceAttributes": {"verb": "list"}}}),
]


@pytest.mark.parametrize("user,plural,body", REVIEW_CASES)
def test_access_reviews_equal_kube(policy, ours_all, kube, user, plural, body):
    path = f"/apis/authorization.k8s.io/v1/{plural}"
    k = kube.as_user(user).req("POST", path, body)
    kj = _rules_as_sets(k.json())
    kj.get("metadata", {}).pop("managedFields", None)  # not kept here (docs/differences.md)
    for c in ours_all:
        r = c.as_user(user).req("POST", path, body)
        assert (r.status_code, _rules_as_sets(r.json())) == (k.status_code, kj), c.mode


def _rules_as_sets(doc: dict) -> dict:
    """A rules review's rules in a canonical order: upstream lists the bindings' rules in its informer's (map)
    order, which differs from one run to the next."""
    st = doc.get("status")
    if doc.get("kind") == "SelfSubjectRulesReview" and st:
        for k in ("resourceRules", "nonResourceRules"):
            st[k] = sorted(st[k], key=lambda r: json.dumps(r, sort_keys=True))
    return doc


def test_review_metadata_must_be_empty(ours):
    """As upstream, but the invalid value shows the metadata without the managedFields kube adds first."""
    r = ours.as_user("vera").req("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "metadata": {"name": "x"}, "spec": {"nonResourceAttributes": {"path": "/x", "verb": "get"}}})
    assert r.status_code == 422 and r.json()["message"] == (
        '.authorization.k8s.io "" is invalid: metadata: Invalid value: {"name":"x"}: must be empty')


def test_review_discovery_and_methods(ours, kube):
    for c in (ours, kube):
        r = c.req("GET", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
        assert r.status_code == 405 and r.json()["reason"] == "MethodNotAllowed"
    assert ours.req("GET", "/apis/authorization.k8s.io/v1").json() == kube.req(
        "GET", "/apis/authorization.k8s.io/v1").json()


# ============================================================ kubectl as a user bound to `view`

def _kubectl(server: Client, token: str, *args, home):
    env = dict(os.environ, HOME=str(home), KUBECONFIG=str(home / "none"))
    return subprocess.run([KUBECTL, "--server", server.secure_url, "--certificate-authority", server.ca,
                           "--token", token, *args], capture_output=True, text=True, timeout=60, env=env)


def test_kubectl_as_view_user(policy, ours, tmp_path):
    assert KUBECTL, "kubectl not found"
    assert ours.req("POST", "/api/v1/namespaces/authz-demo/configmaps", {
        "metadata": {"name": "kc1"}, "data": {"a": "b"}}).status_code in (201, 409)
    tok = TOKENS["vera"]
    r = _kubectl(ours, tok, "get", "configmaps", "-n", "authz-demo", home=tmp_path)
    assert r.returncode == 0 and "kc1" in r.stdout, r.stderr
    r = _kubectl(ours, tok, "get", "configmap", "kc1", "-n", "authz-demo", "-o", "json", home=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["data"] == {"a": "b"}, r.stderr
    r = _kubectl(ours, tok, "auth", "can-i", "list", "configmaps", "-n", "authz-demo", home=tmp_path)
    assert (r.returncode, r.stdout.strip()) == (0, "yes"), r.stderr
    r = _kubectl(ours, tok, "auth", "can-i", "create", "configmaps", "-n", "authz-demo", home=tmp_path)
    assert (r.returncode, r.stdout.strip()) == (1, "no"), r.stderr
    r = _kubectl(ours, tok, "auth", "can-i", "get", "secrets", "-n", "authz-demo", home=tmp_path)
    assert (r.returncode, r.stdout.strip()) == (1, "no"), r.stderr
    r = _kubectl(ours, tok, "auth", "can-i", "--list", "-n", "authz-demo", home=tmp_path)
    assert r.returncode == 0 and "configmaps" in r.stdout and "selfsubjectaccessreviews" in r.stdout, r.stderr
    r = _kubectl(ours, tok, "get", "configmaps", "-A", home=tmp_path)
    assert r.returncode == 1
    assert ('configmaps is forbidden: User "vera" cannot list resource "configmaps" in API group "" at the '
            'cluster scope') in r.stderr
    r = _kubectl(ours, tok, "create", "configmap", "kc2", "-n", "authz-demo", home=tmp_path)
    assert r.returncode == 1 and 'User "vera" cannot create resource "configmaps"' in r.stderr


# ============================================================ client-go: an informer as a `view` user

def test_clientgo_view_user_informer(policy, ours, clientgo_binary):
    from tests.test_clientgo import run_go
    out = run_go(clientgo_binary, {"APISERVER_URL": ours.secure_url}, "TestRBACViewInformer", RBAC_CA=ours.ca,
                 RBAC_TOKEN=TOKENS["vera"], RBAC_ADMIN_TOKEN=TOKENS["admin"], RBAC_NAMESPACE="authz-demo")
    assert "informer synced" in out


@pytest.fixture(scope="module")
def clientgo_binary():
    from tests.helpers.gobin import go_program
    return go_program("clientgo.test")


@pytest.mark.parametrize("path", ["/api/v1/namespaces/authz-demo/configmaps/..",
                                  "/api/v1/namespaces/authz-demo/configmaps/%2e%2e",
                                  "/api/v1/namespaces/authz-demo/configmaps/a%2Fb",
                                  "/api/v1/namespaces/../configmaps",
                                  "/api/v1/namespaces/authz-demo/configmaps/a%25b"])
def test_forbidden_before_path_checks_as_kube(policy, ours, kube, path):
    """Upstream authorizes before any handler looks at the names in the path: a refused request is 403 with
    the names as sent (`..` kept, `%2F` a separator), not the path checks' 400."""
    import http.client
    import ssl
    import urllib.parse

    def get(c: Client):  # http.client sends the path as given (requests and urllib3 resolve dot segments)
        u = urllib.parse.urlsplit(c.base)
        conn = (http.client.HTTPSConnection(u.hostname, u.port, context=ssl.create_default_context(cafile=c.verify))
                if u.scheme == "https" else http.client.HTTPConnection(u.hostname, u.port))
        conn.request("GET", path, headers={"Authorization": f"Bearer {TOKENS['alice']}", "Accept": "application/json"})
        r = conn.getresponse()
        out = r.status, r.read()
        conn.close()
        return out
    mine, theirs = get(ours), get(kube)
    assert mine[0] == 403 and mine == theirs


# ============================================================ the watch cache's observers (the RBAC feed)

class Recorder:
    def __init__(self):
        self.calls: list = []

    def replace(self, objs):
        self.calls.append(("replace", sorted(o["metadata"]["name"] for o in objs)))

    def apply(self, event_type, obj):
        self.calls.append((event_type, obj["metadata"]["name"], obj["metadata"].get("resourceVersion")))


async def test_cacher_observers(etcd_client, unique_prefix):
    """Cacher.add_observer: an observer added before the first list gets `replace` with it, one added to a ready
    cache gets `replace` with what the cache holds at once; both get every event applied afterwards (ADDED,
    MODIFIED, DELETED with the last state), and an observer's exception does not stop the cache."""
    import asyncio

    from cache.cacher import Cacher
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    from storage.store import EtcdStore
    res = Registry().lookup("rbac.authorization.k8s.io", "v1", "clusterroles")
    prefix = f"{unique_prefix}/"
    es = EtcdStore(etcd_client, res.plural)

    def role(name, verbs=("get",)):
        return {"kind": "ClusterRole", "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": {"name": name},
                "rules": [{"verbs": list(verbs), "apiGroups": [""], "resources": ["pods"]}]}
    await es.create(prefix + "a", role("a"))
    c = Cacher(store=es, client=etcd_client, prefix=prefix, resource_label=res.plural, group=res.group,
               encode=lambda o: encode_obj(res, o), head=wire_head(res))
    early, late = Recorder(), Recorder()

    class Broken:
        def replace(self, objs):
            raise RuntimeError("observer bug")
        apply = replace
    c.add_observer(Broken())
    c.add_observer(early)
    c.start()
    try:
        for _ in range(250):
            if c.ready:
                break
            await asyncio.sleep(0.02)
        assert c.ready and early.calls == [("replace", ["a"])]
        await es.create(prefix + "b", role("b"))
        for _ in range(250):
            if len(early.calls) == 2:
                break
            await asyncio.sleep(0.02)
        c.add_observer(late)
        assert late.calls == [("replace", ["a", "b"])]
        await es.guaranteed_update(prefix + "a", lambda o: {**o, "rules": role("a", ("list",))["rules"]})
        await es.delete(prefix + "b")
        for _ in range(250):
            if len(late.calls) == 3:
                break
            await asyncio.sleep(0.02)
        assert [x[:2] for x in early.calls[1:]] == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
        assert [x[:2] for x in late.calls[1:]] == [("MODIFIED", "a"), ("DELETED", "b")]
        assert all(x[2] for x in early.calls[1:])  # the objects carry their resourceVersion
    finally:
        await c.stop()


def test_rbac_not_resident_reads_etcd(current_etcd, token_file):
    """A shard whose residency leaves RBAC out of its caches (--residency-full-resources without the RBAC
    kinds) feeds its authorizer from its own list + watch on etcd: decisions stay complete and current."""
    from machinery.shard_selector import complementary
    sel = str(complementary(2)[0])
    with _ours(current_etcd, token_file, f"--residency={sel}",
               "--residency-full-resources=namespaces,customresourcedefinitions", name="authz-shard") as p:
        c = Client(p.base, TOKENS["admin"], mode="shard")
        ns = _ns(c, "authz-shard")
        bob = c.as_user("bob")
        path = f"/api/v1/namespaces/{ns}/configmaps"
        assert bob.req("GET", path).status_code == 403
        for i in range(8):  # bindings on both sides of the shard split
            _bind(c, ns, f"dev-view-{i}", "ClusterRole", "view", [_user(f"nobody-{i}")])
        _bind(c, ns, "dev-view", "ClusterRole", "view", [{"kind": "Group", "name": "dev",
                                                          "apiGroup": "rbac.authorization.k8s.io"}])
        assert _wait(lambda: bob.req("GET", path).status_code == 200, 5) < 1.0


# ============================================================ bootstrap reconciliation

def test_reconcile_role_and_binding_units():
    from apiserver.auth import bootstrap as b
    expected = {"metadata": {"name": "r", "labels": {"l": "1"}, "annotations": {b.AUTOUPDATE: "true"}},
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]},
                          {"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}
    assert b.reconciled_role(expected, expected) is None
    existing = {"metadata": {"name": "r", "labels": {"l": "mine", "x": "y"}},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "*/log"]},
                          {"verbs": ["*"], "nonResourceURLs": ["/health*"]}]}
    new = b.reconciled_role(existing, expected)
    assert new["metadata"] == {"name": "r", "labels": {"l": "mine", "x": "y"}, "annotations": {b.AUTOUPDATE: "true"}}
    assert new["rules"] == existing["rules"] + [  # broken down, only what is not covered
        {"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]},
        {"verbs": ["list"], "apiGroups": [""], "resources": ["pods/log"]}]
    agg = {"metadata": {"name": "v"}, "rules": None, "aggregationRule": {"clusterRoleSelectors": [
        {"matchLabels": {"a": "1"}}, {"matchLabels": {"b": "1"}}]}}
    filled = {"metadata": {"name": "v"}, "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["x"]}],
              "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"a": "1"}}]}}
    assert b.reconciled_role(filled, agg)["aggregationRule"] == agg["aggregationRule"]
    assert b.reconciled_role({**agg, "metadata": {"name": "v"}}, {k: v for k, v in agg.items() if k != "aggregationRule"}
                             ).get("aggregationRule") is None
    binding = {"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
               "subjects": [{"kind": "Group", "name": "g1"}, {"kind": "Group", "name": "g2"}]}
    got = b.reconciled_binding({**binding, "subjects": [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g2"}]},
                               binding)
    assert got["subjects"] == [{"kind": "User", "name": "u"}, {"kind": "Group", "name": "g2"},
                               {"kind": "Group", "name": "g1"}]
    assert b.reconciled_binding(binding, binding) is None


def test_bootstrap_reconciles_on_restart(current_etcd, token_file):
    """A restart restores what was taken from the default roles and bindings (rules, subjects, a changed
    roleRef), and leaves alone those annotated autoupdate "false"."""
    prefix = f"/registry-authz-rec{os.getpid()}"

    def start():
        return ApiserverProcess("--authorization-mode=RBAC", f"--token-auth-file={token_file}",
                                etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, name="authz-rec",
                                ready_token=TOKENS["admin"])
    with start() as p:
        c = Client(p.base, TOKENS["admin"])
        basic = c.req("GET", f"{RBAC_API}/clusterroles/system:basic-user").json()
        want_rules = basic["rules"]
        assert c.req("PUT", f"{RBAC_API}/clusterroles/system:basic-user", {**basic, "rules": want_rules[:1]}
                     ).status_code == 200
        disc = c.req("GET", f"{RBAC_API}/clusterrolebindings/system:discovery").json()
        assert c.req("PUT", f"{RBAC_API}/clusterrolebindings/system:discovery", {**disc, "subjects": [
            _user("someone")]}).status_code == 200
        assert c.req("DELETE", f"{RBAC_API}/clusterrolebindings/system:basic-user").status_code == 200
        assert c.req("POST", f"{RBAC_API}/clusterrolebindings", {**c.req(
            "GET", f"{RBAC_API}/clusterrolebindings/cluster-admin").json(), "metadata": {
            "name": "system:basic-user", "annotations": {"x": "y"}}, "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}}).status_code == 201
        view = c.req("GET", f"{RBAC_API}/clusterroles/system:public-info-viewer").json()
        view["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] = "false"
        assert c.req("PUT", f"{RBAC_API}/clusterroles/system:public-info-viewer", {**view, "rules": []}
                     ).status_code == 200
    with start() as p:
        c = Client(p.base, TOKENS["admin"])
        assert c.req("GET", f"{RBAC_API}/clusterroles/system:basic-user").json()["rules"] == want_rules
        assert c.req("GET", f"{RBAC_API}/clusterrolebindings/system:discovery").json()["subjects"] == [
            _user("someone"), {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}]
        rb = c.req("GET", f"{RBAC_API}/clusterrolebindings/system:basic-user").json()
        assert rb["roleRef"]["name"] == "system:basic-user" and "x" not in rb["metadata"].get("annotations", {})
        assert c.req("GET", f"{RBAC_API}/clusterroles/system:public-info-viewer").json()["rules"] == []
