"""Discovery, OpenAPI and Table output over HTTP, differentially (issue 12): every test runs against our
apiserver (watch cache on, and off) and against the real kube-apiserver v1.37.2 (`api.mode == "kube"`), and
compares what the server under test answers with what the reference kube-apiserver answers (in kube mode the
reference is the server under test, so the comparisons hold trivially and the assertions about kube itself
are what is checked).

* Discovery: for every resource we serve, its entry in /api/v1, /apis/<g>/<v> and the aggregated documents
  equals kube's; the resources kube serves and we do not are a known gap (issue 13) asserted as such.
* OpenAPI: every v3 document we serve (and the v2 document) equals kube's for the paths we serve and every
  schema it contains. Deliberate: no `application/apply-patch+yaml` in PATCH operations (server-side apply is
  answered 415), JSON only (no protobuf/YAML documents), our own version in `info`.
* Tables: column definitions and cells equal kube's for objects created here, list and get, every
  includeObject. Normalised, because they depend on the clock or on when the server created the object: cells
  of `Age` columns (human durations of creationTimestamp) and of `date` columns (RFC 3339 creation times),
  each checked for its format first. managedFields (not maintained here, docs/differences.md) are left out of
  the row objects' metadata.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import re
import subprocess
import time

import pytest

from tests.conftest import KUBECTL
from machinery.resources import GROUP_ORDER, GROUPS, SERVED_SUBRESOURCES
from tests.helpers import Api, crd

AGG = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
KUBECTL_DISCOVERY = f"{AGG},application/json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
APPLY = "application/apply-patch+yaml"

# --- the known gap (docs/differences.md): what kube-apiserver serves and we do not --------------------------

# Subresources (machinery.resources.SERVED_SUBRESOURCES are served; upstream's others are not).
GAP_SUBRESOURCES = {"approval", "attach", "binding", "ephemeralcontainers", "eviction", "exec", "finalize", "log",
                    "portforward", "proxy", "resize", "scale", "token"} - SERVED_SUBRESOURCES
# Top-level resources, by group: not stored (bindings: a create, componentstatuses: probes), tokenreviews.
GAP_RESOURCES = {"": {"bindings", "componentstatuses"}, "authentication.k8s.io": {"tokenreviews"}}
# events.k8s.io/v1 Events share core Events' key (upstream converts between them), autoscaling/v1 is a second
# version of HorizontalPodAutoscalers (conversion): neither is served.
GAP_GROUPS = {"events.k8s.io"}
GAP_VERSIONS = {"autoscaling/v1"}
# Groups of review kinds (create only, never stored: machinery.resources.REVIEWS): in discovery, not in OpenAPI.
REVIEW_GROUPS = {"authentication.k8s.io", "authorization.k8s.io"}
OPENAPI_GAP_GROUPS = GAP_GROUPS | REVIEW_GROUPS
SERVED_GVS = [(g, v) for g in GROUP_ORDER if g not in GAP_GROUPS for v in GROUPS["versions"][g]
              if f"{g}/{v}" not in GAP_VERSIONS]
DISCOVERY_GROUPS = [g for g in GROUP_ORDER if g and g not in GAP_GROUPS]  # kube's order


def gap(name: str, group: str) -> bool:
    """`name` (`pods`, `pods/log`) of `group` is served by kube, not here."""
    sub = name.partition("/")[2]
    return name in GAP_RESOURCES.get(group, ()) or sub in GAP_SUBRESOURCES


GAP_OPENAPI_V3 = {".well-known/openid-configuration", "openid/v1/jwks"}


@pytest.fixture
def api(differential_api):
    return differential_api


class Reference:
    """The reference kube-apiserver, with the documents that do not depend on a test's objects cached."""

    def __init__(self, k):
        self.api = Api(k.url, cert=k.client_cert, verify=k.ca)
        self.api.mode = "kube"
        self.server = k
        self._cache: dict = {}

    def json(self, path: str, accept: str | None = None):
        key = (path, accept)
        if key not in self._cache:
            r = self.api.get(path, headers={"Accept": accept} if accept else None, timeout=120)
            assert r.status_code == 200, r.text
            self._cache[key] = r.json()
        return self._cache[key]


@pytest.fixture(scope="module")
def ref(kube_apiserver):
    return Reference(kube_apiserver)


def servers(api, ref) -> list:
    """The server under test and the reference, once each (one server in kube mode)."""
    return [api] if api.mode == "kube" else [api, ref.api]


def by(items, key):
    return {i[key]: i for i in items}


def subsequence(small, big) -> bool:
    it = iter(big)
    return all(x in it for x in small)


# ============================================================ discovery

def test_api_versions_and_group_list(api, ref):
    r = api.get("/api")
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    doc = r.json()
    assert list(doc) == list(ref.json("/api")) == ["kind", "versions", "serverAddressByClientCIDRs"]
    assert doc["versions"] == ["v1"]
    (cidr,) = doc["serverAddressByClientCIDRs"]
    assert cidr["clientCIDR"] == "0.0.0.0/0" and re.fullmatch(r"[\d.]+:\d+", cidr["serverAddress"])

    groups = api.get("/apis").json()
    kube_groups = ref.json("/apis")
    assert list(groups) == list(kube_groups) == ["kind", "apiVersion", "groups"]
    mine = [g["name"] for g in groups["groups"] if not g["name"].endswith(".example.com")]
    theirs = [g["name"] for g in kube_groups["groups"] if not g["name"].endswith(".example.com")]
    assert subsequence(DISCOVERY_GROUPS, theirs) and GAP_GROUPS <= set(theirs)  # kube: our groups and the gap
    if api.mode != "kube":
        assert mine == DISCOVERY_GROUPS  # in kube's order
        assert set(theirs) - set(mine) == GAP_GROUPS
    kg = by(kube_groups["groups"], "name")
    for g in groups["groups"]:
        if g["name"] in DISCOVERY_GROUPS:
            expected = kg[g["name"]]
            if api.mode != "kube":  # less the versions we do not serve
                expected = dict(expected, versions=[v for v in expected["versions"]
                                                    if v["groupVersion"] not in GAP_VERSIONS])
            assert g == expected
            one = api.get(f"/apis/{g['name']}/")  # trailing slash served too
            assert one.status_code == 200
            assert one.json() == {"kind": "APIGroup", "apiVersion": "v1", **g}
            assert {"kind": "APIGroup", "apiVersion": "v1", **kg[g["name"]]} == ref.json(f"/apis/{g['name']}")


@pytest.mark.parametrize("path", [f"/apis/{g}/{v}" if g else "/api/v1" for g, v in SERVED_GVS])
def test_resource_lists_equal_kube_for_what_we_serve(api, ref, path):
    doc = api.get(path).json()
    kube_doc = ref.json(path)
    assert [k for k in doc if k != "resources"] == [k for k in kube_doc if k != "resources"]
    assert doc["groupVersion"] == kube_doc["groupVersion"]
    mine, theirs = by(doc["resources"], "name"), by(kube_doc["resources"], "name")
    for name, entry in mine.items():
        assert entry == theirs[name], name  # name, singularName, namespaced, kind, verbs, shortNames, ...
    assert [n for n in theirs if n in mine] == list(mine)  # same order
    group = "" if path == "/api/v1" else path.split("/")[2]
    missing = {n for n in theirs if gap(n, group)}
    assert GAP_RESOURCES.get(group, set()) <= set(theirs)
    if api.mode != "kube":
        assert set(theirs) - set(mine) == missing


def _aggregated(api, head):
    r = api.get(head, headers={"Accept": KUBECTL_DISCOVERY})
    assert r.status_code == 200
    return r


@pytest.mark.parametrize("head", ["/api", "/apis"])
def test_aggregated_discovery_equals_kube_for_what_we_serve(api, ref, head):
    r = _aggregated(api, head)
    assert r.headers["Content-Type"] == AGG
    assert r.headers["Vary"] == "Accept" and r.headers["Cache-Control"] == "public"
    doc = r.json()
    kube_doc = ref.json(head, KUBECTL_DISCOVERY)
    assert list(doc) == list(kube_doc) == ["kind", "apiVersion", "metadata", "items"]
    # aggregated/etag.go: SHA-512 of the list without its TypeMeta, as encoding/json writes it
    body = r.content.rstrip(b"\n")
    stripped = re.sub(rb'^\{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2",', b"{", body)
    assert r.headers["ETag"] == '"' + hashlib.sha512(stripped).hexdigest().upper() + '"'
    again = api.get(head, headers={"Accept": KUBECTL_DISCOVERY, "If-None-Match": r.headers["ETag"]})
    assert again.status_code == 304 and again.content == b"" and again.headers["ETag"] == r.headers["ETag"]

    mine = [i["metadata"].get("name", "") for i in doc["items"]]
    theirs = [i["metadata"].get("name", "") for i in kube_doc["items"]]
    builtin = [g for g in mine if not g.endswith(".example.com")]
    assert subsequence(builtin, theirs)
    kube_items = by([dict(i, name=i["metadata"].get("name", "")) for i in kube_doc["items"]], "name")
    if api.mode != "kube":
        # (custom groups left out: the reference may list another test's CRD, the tables tests' `kube_objects`,
        # while it lives or a moment after it was deleted)
        assert [g for g in theirs if g not in GAP_GROUPS and not g.endswith(".example.com")] == builtin
    for item in doc["items"]:
        name = item["metadata"].get("name", "")
        if name.endswith(".example.com"):
            continue
        kube_item = kube_items[name]
        assert item["metadata"] == kube_item["metadata"]
        kv = by(kube_item["versions"], "version")
        assert [v["version"] for v in item["versions"]] == \
            [v["version"] for v in kube_item["versions"] if api.mode == "kube" or f"{name}/{v['version']}" not in GAP_VERSIONS]
        for v in item["versions"]:
            assert list(v) == list(kv[v["version"]]) and v["freshness"] == kv[v["version"]]["freshness"]
            kr = by(kv[v["version"]]["resources"], "resource")
            for res in v["resources"]:
                theirs_res = kr[res["resource"]]
                assert {k: x for k, x in res.items() if k != "subresources"} == \
                       {k: x for k, x in theirs_res.items() if k != "subresources"}, res["resource"]
                subs = by(res.get("subresources", []), "subresource")
                ksubs = by(theirs_res.get("subresources", []), "subresource")
                for s, entry in subs.items():
                    assert entry == ksubs[s]
                missing = {f"{res['resource']}/{s}" for s in ksubs if s not in subs}
                assert all(gap(m, name) for m in missing), missing
                if api.mode != "kube":
                    assert missing == {f"{res['resource']}/{s}" for s in ksubs if s in GAP_SUBRESOURCES}
                assert [s["subresource"] for s in res.get("subresources", [])] == [s for s in ksubs if s in subs]
            assert [x["resource"] for x in v["resources"]] == [x for x in kr if x in by(v["resources"], "resource")]
            if api.mode != "kube":
                assert set(kr) - set(by(v["resources"], "resource")) == GAP_RESOURCES.get(name, set()), name


@pytest.mark.parametrize("accept,aggregated", [
    (KUBECTL_DISCOVERY, True),
    ("application/json, " + AGG, True),  # upstream allows only the aggregated transform: order does not matter
    (AGG + ";profile=nopeer", True),
    ("*/*;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", True),
    (AGG.replace("v=v2", "v=v2beta1") + ",application/json", False),  # v2beta1 is gone in 1.37
    ("application/json", False),
    ("*/*", False),
])
def test_aggregated_discovery_negotiation(api, accept, aggregated):
    for head in ("/api", "/apis"):
        r = api.get(head, headers={"Accept": accept})
        assert r.status_code == 200
        assert (r.json()["kind"] == "APIGroupDiscoveryList") is aggregated
        assert r.headers["Content-Type"] == (AGG if aggregated else "application/json")


def test_discovery_media_types_we_do_not_produce(api):
    """Deliberate (docs/differences.md, Protobuf): JSON whatever the Accept header; kube answers protobuf
    when asked first and 406 for what it cannot produce (here: only the gone v2beta1)."""
    pb = "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," + KUBECTL_DISCOVERY
    r = api.get("/apis", headers={"Accept": pb})
    beta = api.get("/apis", headers={"Accept": AGG.replace("v=v2", "v=v2beta1")})
    if api.mode == "kube":
        assert r.headers["Content-Type"].startswith("application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io")
        assert beta.status_code == 406
    else:
        assert r.headers["Content-Type"] == AGG and r.json()["kind"] == "APIGroupDiscoveryList"
        assert beta.status_code == 200 and beta.json()["kind"] == "APIGroupList"


def _make_crds(api, ref, request):
    """Two CRD groups whose legacy and aggregated orders differ (legacy sorts by `<version>.<group>`,
    aggregated by group), one multi-version with categories, one cluster-scoped."""
    tag = f"{abs(hash(request.node.nodeid)) % 10**7}"
    a, b = f"a{tag}.example.com", f"b{tag}.example.com"
    multi = crd(a, "gizmos", "Gizmo")
    multi["spec"]["names"]["categories"] = ["all", "gadgetry"]
    multi["spec"]["names"]["shortNames"] = ["gz", "giz"]
    v2 = copy.deepcopy(multi["spec"]["versions"][0])
    multi["spec"]["versions"][0].update(name="v2", storage=True)
    v1beta1 = dict(copy.deepcopy(v2), name="v1beta1", storage=False)
    v1beta1.pop("subresources", None)
    hidden = dict(copy.deepcopy(v1beta1), name="v1alpha1", served=False)
    multi["spec"]["versions"] += [v1beta1, hidden]
    cluster = crd(b, "doohickeys", "Doohickey", scope="Cluster", status=False, short_names=False)
    created = []
    for srv in servers(api, ref):
        for body in (multi, cluster):
            r = srv.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
            assert r.status_code == 201, r.text
            created.append((srv, body["metadata"]["name"]))
        for path in (f"/apis/{a}/v2", f"/apis/{a}/v1beta1", f"/apis/{b}/v1"):
            deadline = time.monotonic() + 30
            while srv.get(path).status_code != 200:
                assert time.monotonic() < deadline, path
                time.sleep(0.1)
        deadline = time.monotonic() + 30  # kube's aggregated discovery follows a moment later
        while not {a, b} <= {i["metadata"].get("name") for i in srv.get("/apis", headers={"Accept": AGG}).json()["items"]}:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    return a, b, created


@pytest.fixture
def crds(api, ref, request):
    a, b, created = _make_crds(api, ref, request)
    yield a, b
    for srv, name in created:
        srv.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")


def test_custom_resources_in_discovery(api, ref, crds):
    a, b = crds
    kube = ref.api
    for path in (f"/apis/{a}", f"/apis/{b}", f"/apis/{a}/v2", f"/apis/{a}/v1beta1", f"/apis/{b}/v1"):
        assert api.get(path).json() == kube.get(path).json(), path
    assert api.get(f"/apis/{a}/v1alpha1").status_code == kube.get(f"/apis/{a}/v1alpha1").status_code == 404
    g = by(api.get("/apis").json()["groups"], "name")[a]
    assert [v["version"] for v in g["versions"]] == ["v2", "v1beta1"] and g["preferredVersion"]["version"] == "v2"

    def order(doc_groups, names):
        return [n for n in doc_groups if n in names]
    legacy = order([x["name"] for x in api.get("/apis").json()["groups"]], {a, b})
    assert legacy == order([x["name"] for x in kube.get("/apis").json()["groups"]], {a, b}) == [b, a]
    agg = order([i["metadata"]["name"] for i in api.get("/apis", headers={"Accept": AGG}).json()["items"]], {a, b})
    assert agg == order([i["metadata"]["name"] for i in kube.get("/apis", headers={"Accept": AGG}).json()["items"]],
                        {a, b}) == [a, b]
    items = {i["metadata"]["name"]: i for i in api.get("/apis", headers={"Accept": AGG}).json()["items"]}
    kube_items = {i["metadata"]["name"]: i for i in kube.get("/apis", headers={"Accept": AGG}).json()["items"]}
    for g in (a, b):
        assert items[g] == kube_items[g]


def test_namespaces_have_no_deletecollection(api, namespace):
    r = api.delete("/api/v1/namespaces")
    assert r.status_code == 405
    assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                        "message": "the server does not allow this method on the requested resource",
                        "reason": "MethodNotAllowed", "details": {}, "code": 405}
    assert api.get(f"/api/v1/namespaces/{namespace}").status_code == 200


@pytest.mark.parametrize("path,json_status", [
    ("/api/v1/widgets", True), ("/api/v2", True), ("/apis/rbac.authorization.k8s.io/v9", True),
    ("/apis/rbac.authorization.k8s.io/v1/nothings", True), ("/apis/coordination.k8s.io/v1/namespaces/x/leases/a/b/c", True),
    ("/apis/nope.example.com", False), ("/apis/nope.example.com/v1/things", False), ("/nothing", False),
])
def test_not_found_shapes(api, path, json_status):
    """Under kube-apiserver's own groups: a NotFound Status; elsewhere the delegation chain's plain 404."""
    r = api.get(path)
    assert r.status_code == 404
    if json_status:
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "the server could not find the requested resource", "reason": "NotFound",
                            "details": {}, "code": 404}
    else:
        assert r.headers["Content-Type"] == "text/plain; charset=utf-8" and r.text == "404 page not found\n"


def test_unknown_version_or_resource_of_a_custom_group_is_a_plain_404(api, ref, crds):
    a, _ = crds
    for path in (f"/apis/{a}/v9", f"/apis/{a}/v2/nothings", f"/apis/{a}/v1alpha1"):
        r = api.get(path)
        assert r.status_code == 404 and r.text == "404 page not found\n", path


def test_version(api, ref):
    r = api.get("/version")
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    v = r.json()
    kube_v = ref.json("/version")
    assert list(v) == list(kube_v) == ["major", "minor", "emulationMajor", "emulationMinor", "minCompatibilityMajor",
                                       "minCompatibilityMinor", "gitVersion", "gitCommit", "gitTreeState",
                                       "buildDate", "goVersion", "compiler", "platform"]
    assert all(isinstance(x, str) for x in v.values())
    assert v["major"] == "1" and v["gitVersion"].startswith(f"v1.{v['minor']}.")
    assert re.fullmatch(r"\w+/\w+", v["platform"])
    # responsewriters.WriteRawJSON: json.MarshalIndent with two spaces, no newline at the end
    assert r.text == json.dumps(v, indent=2)


# ============================================================ OpenAPI

def _without_apply(doc: dict) -> dict:
    """kube's document without `application/apply-patch+yaml` in PATCH operations (the deliberate difference)."""
    doc = copy.deepcopy(doc)
    for item in doc["paths"].values():
        op = item.get("patch")
        if not op:
            continue
        if "requestBody" in op:
            op["requestBody"]["content"].pop(APPLY, None)
        if APPLY in op.get("consumes", []):
            op["consumes"].remove(APPLY)
    return doc


def _patch_types(doc: dict) -> list[set]:
    """The patch media types of every PATCH operation of what we serve."""
    return [set(item["patch"].get("requestBody", {}).get("content", {})) | set(item["patch"].get("consumes", []))
            for path, item in doc["paths"].items() if "patch" in item and _served(path)]


def _assert_apply_difference(api, doc):
    kinds = _patch_types(doc)
    assert kinds
    if api.mode == "kube":
        assert all(APPLY in t for t in kinds)
    else:
        assert not any(APPLY in t for t in kinds)


def test_openapi_v3_index(api, ref):
    r = api.get("/openapi/v3")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/plain; charset=utf-8"  # upstream sets none; Go sniffs text/plain
    idx = r.json()["paths"]
    kube_idx = ref.json("/openapi/v3")["paths"]
    builtin = {p for p in idx if ".example.com" not in p}
    assert builtin <= set(kube_idx)
    assert set(V3_DOCS) <= builtin
    unserved = {p for p in kube_idx if p.startswith("apis/") and p.split("/")[1] in OPENAPI_GAP_GROUPS} | \
        GAP_OPENAPI_V3 | {f"apis/{gv}" for gv in GAP_VERSIONS}
    assert unserved <= set(kube_idx)
    if api.mode != "kube":
        assert {p for p in kube_idx if ".example.com" not in p} - builtin == unserved
    for p, entry in idx.items():
        assert re.fullmatch(rf"/openapi/v3/{re.escape(p)}\?hash=[0-9A-F]{{128}}", entry["serverRelativeURL"])


OPENAPI_GVS = [(g, v) for g, v in SERVED_GVS if g not in REVIEW_GROUPS]
V3_DOCS = ["api", "api/v1", "apis", "version"] + list(dict.fromkeys(f"apis/{g}" for g, _ in OPENAPI_GVS if g)) + \
          [f"apis/{g}/{v}" for g, v in OPENAPI_GVS if g]


def _served(path: str) -> bool:
    parts = [p for p in path.split("/") if p]
    if parts[0] == "apis" and (len(parts) < 2 or parts[1] in OPENAPI_GAP_GROUPS or "/".join(parts[1:3]) in GAP_VERSIONS):
        return False
    return parts[0] in ("api", "apis") and not gap(_path_resource(path), _path_group(path))


def _path_group(path: str) -> str:
    return path.split("/")[2] if path.startswith("/apis/") else ""


def _path_resource(path: str) -> str:
    """`/api/v1/namespaces/{namespace}/pods/{name}/log` -> `pods/log`."""
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[0] == "api" else parts[3:]
    if parts[:1] == ["watch"]:
        parts = parts[1:]
    if parts[:2] == ["namespaces", "{namespace}"] and len(parts) > 2:
        parts = parts[2:]
    if parts[-1:] == ["{path}"]:
        parts = parts[:-1]
    return "/".join(p for i, p in enumerate(parts) if i != 1 or p != "{name}")


@pytest.mark.parametrize("doc", V3_DOCS)
def test_openapi_v3_documents_equal_kube_for_what_we_serve(api, ref, doc):
    idx = api.get("/openapi/v3").json()["paths"]
    r = api.get(idx[doc]["serverRelativeURL"])
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    mine = r.json()
    kube_doc = ref.json(ref.json("/openapi/v3")["paths"][doc]["serverRelativeURL"])
    v = api.get("/version").json()
    assert mine["info"] == {"title": "Kubernetes", "version": f"{v['major']}.{v['minor']}"}
    assert list(mine) == list(kube_doc) == ["openapi", "info", "paths", "components"]
    assert mine["openapi"] == "3.0.0"
    assert list(mine["components"]) == list(kube_doc["components"])
    assert mine["components"]["securitySchemes"] == kube_doc["components"]["securitySchemes"]
    if any("patch" in i for i in mine["paths"].values()):
        _assert_apply_difference(api, mine)
    expected = _without_apply(kube_doc) if api.mode != "kube" else kube_doc
    for path, item in mine["paths"].items():
        assert item == expected["paths"][path], path
    for name, schema in mine["components"]["schemas"].items():
        assert schema == kube_doc["components"]["schemas"][name], name
    group = doc.split("/")[1] if doc.startswith("apis/") and doc.count("/") == 2 else ""
    extra = {_path_resource(p) for p in kube_doc["paths"] if p not in mine["paths"]}
    assert all(gap(e, group) for e in extra), extra
    if api.mode != "kube":
        assert extra == {_path_resource(p) for p in kube_doc["paths"] if gap(_path_resource(p), group)}


def test_openapi_v3_headers_and_caching(api):
    url = api.get("/openapi/v3").json()["paths"]["apis/coordination.k8s.io/v1"]["serverRelativeURL"]
    digest = url.rsplit("=", 1)[1]
    r = api.get(url)
    assert r.headers["ETag"] == f'"{digest}"' and r.headers["Vary"] == "Accept"
    assert r.headers["Cache-Control"] == "public, immutable" and r.headers["Expires"].endswith(" UTC")
    assert "Last-Modified" in r.headers
    again = api.get(url, headers={"If-None-Match": r.headers["ETag"]})
    assert again.status_code == 304 and again.content == b""
    plain = api.get(url.split("?")[0])
    assert plain.status_code == 200 and plain.headers["Cache-Control"] == "no-cache, private"
    assert plain.headers["ETag"] == r.headers["ETag"] and plain.content == r.content
    wrong = api.s.get(api.base + url.split("?")[0] + "?hash=WRONG", allow_redirects=False, cert=api.cert,
                      verify=api.verify)
    assert wrong.status_code == 301 and wrong.headers["Location"] == url
    for missing in ("/openapi/v3/apis/nope.example.com/v1", "/openapi/v3/api/v1/"):
        gone = api.get(missing)
        assert gone.status_code == 404 and gone.content == b""
    # Deliberate: JSON only. kube answers protobuf when asked, 406 for YAML.
    pb = api.get(url, headers={"Accept": "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"})
    yaml = api.get(url, headers={"Accept": "application/yaml"})
    if api.mode == "kube":
        assert pb.headers["Content-Type"] == "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"
        assert yaml.status_code == 406
    else:
        assert pb.headers["Content-Type"] == yaml.headers["Content-Type"] == "application/json"
        assert pb.content == yaml.content == r.content


def test_openapi_of_every_subresource_equals_kube(ref, monkeypatch):
    """Every subresource with a body (scale, binding, eviction, token, approval, finalize, ephemeralcontainers,
    resize; not the connect ones) documented as kube documents it, served or not yet: built in-process
    with all of them served, compared with the reference's v3 documents and v2 paths."""
    import dataclasses

    from apiserver import openapi
    from machinery import resources
    monkeypatch.setattr(resources, "SERVED_SUBRESOURCES", frozenset(
        {"status", "scale", "binding", "eviction", "token", "approval", "finalize", "ephemeralcontainers", "resize"}))
    reg = resources.Registry([dataclasses.replace(r) for r in resources.BUILTINS])  # new ids: no memo hits
    checked = set()
    kube_v2, mine_v2 = _without_apply(ref.json("/openapi/v2", "application/json")), openapi.v2(reg)
    docs = {}
    for r in resources.BUILTINS:
        for sub in r.served_subresources:
            doc = f"apis/{r.group}/{r.version}" if r.group else "api/v1"
            if doc not in docs:
                docs[doc] = (openapi.v3_document(reg, doc),
                             _without_apply(ref.json(ref.json("/openapi/v3")["paths"][doc]["serverRelativeURL"])))
            mine, kube_doc = docs[doc]
            paths = [p for p in kube_doc["paths"] if p.endswith(f"/{r.plural}/{{name}}/{sub.name}")]
            assert paths, (r.plural, sub.name)
            for path in paths:
                assert mine["paths"][path] == kube_doc["paths"][path], path
                assert mine_v2["paths"][path] == kube_v2["paths"][path], path
                for name in openapi._refs(mine["paths"][path], set()):
                    assert mine["components"]["schemas"][name] == kube_doc["components"]["schemas"][name], name
            checked.add(sub.name)
    assert checked == set(resources.SERVED_SUBRESOURCES)


def test_openapi_v2_equals_kube_for_what_we_serve(api, ref):
    r = api.get("/openapi/v2", headers={"Accept": "application/json", "Accept-Encoding": "gzip"})
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    assert r.headers["Content-Encoding"] == "gzip" and r.headers["Vary"] == "Accept-Encoding, Accept"
    assert re.fullmatch(r'"[0-9A-F]{128}"', r.headers["ETag"])
    assert api.get("/openapi/v2", headers={"If-None-Match": r.headers["ETag"]}).status_code == 304
    mine = r.json()
    kube_doc = ref.json("/openapi/v2", "application/json")
    assert list(mine) == list(kube_doc)
    v = api.get("/version").json()
    assert mine["info"] == {"title": "Kubernetes", "version": f"{v['major']}.{v['minor']}"}
    for key in ("swagger", "securityDefinitions", "security"):
        assert mine[key] == kube_doc[key]
    _assert_apply_difference(api, mine)
    expected = _without_apply(kube_doc) if api.mode != "kube" else kube_doc
    builtin = {p: item for p, item in mine["paths"].items() if ".example.com" not in p}
    for path, item in builtin.items():
        assert item == expected["paths"][path], path
    for name, param in mine["parameters"].items():
        assert param == kube_doc["parameters"][name], name
    for name, schema in mine["definitions"].items():
        if ".example.com" not in name and not name.startswith("com.example."):
            assert schema == kube_doc["definitions"][name], name
    extra = {p for p in kube_doc["paths"] if p not in mine["paths"] and ".example.com" not in p}
    unserved_groups = {p for p in extra if p.startswith("/apis/") and (
        p.split("/")[2] in OPENAPI_GAP_GROUPS or "/".join(p.split("/")[2:4]) in GAP_VERSIONS)}
    other = {(_path_group(p), _path_resource(p)) for p in extra - unserved_groups
             if p != "/.well-known/openid-configuration/" and not p.startswith("/openid/") and not p.startswith("/logs/")}
    assert all(gap(r, g) for g, r in other), other
    if api.mode != "kube":
        assert other == {(_path_group(p), _path_resource(p)) for p in kube_doc["paths"] if p.startswith(("/api/", "/apis/"))
                         and len(p.split("/")) > 4 and (p.split("/")[2] not in OPENAPI_GAP_GROUPS)
                         and "/".join(p.split("/")[2:4]) not in GAP_VERSIONS
                         and gap(_path_resource(p), _path_group(p))}
    # Deliberate: JSON only (client-go asks for protobuf first; kubectl only falls back to v2).
    pb = api.get("/openapi/v2", headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
    assert pb.headers["Content-Type"] == ("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
                                          if api.mode == "kube" else "application/json")


SCHEMA_CRD_SCHEMA = {
    "type": "object",
    "description": "A CronTab runs a command now and then.",
    "required": ["spec"],
    "properties": {
        "spec": {"type": "object", "required": ["cronSpec"], "properties": {
            "cronSpec": {"type": "string", "description": "when", "pattern": "^(\\d+|\\*)( (\\d+|\\*)){4}$"},
            "image": {"type": "string", "maxLength": 100, "default": "busybox"},
            "replicas": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 10},
            "ratio": {"type": "number"},
            "mode": {"type": "string", "enum": ["Fast", "Slow"]},
            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"], "properties": {
                          "name": {"type": "string"}, "port": {"type": "integer"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "note": {"type": "string", "nullable": True},
        }},
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
    },
}


def _schema_crd(group: str) -> dict:
    body = crd(group, "crontabs", "CronTab")
    v = body["spec"]["versions"][0]
    v["schema"] = {"openAPIV3Schema": SCHEMA_CRD_SCHEMA}
    v["additionalPrinterColumns"] = [
        {"name": "Spec", "type": "string", "jsonPath": ".spec.cronSpec"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "description": "how many"},
        {"name": "Ratio", "type": "number", "jsonPath": ".spec.ratio", "priority": 1},
        {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready", "priority": 1},
        {"name": "First Tag", "type": "string", "jsonPath": ".spec.tags[0]"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return body


@pytest.fixture
def crontabs(api, ref, request):
    group = f"ct{abs(hash(request.node.nodeid)) % 10**7}.example.com"
    body = _schema_crd(group)
    for srv in servers(api, ref):
        r = srv.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body)
        assert r.status_code == 201, r.text
        deadline = time.monotonic() + 30  # kube publishes the CRD's OpenAPI a moment after it serves it
        while f"apis/{group}/v1" not in srv.get("/openapi/v3").json()["paths"] or \
                f"/apis/{group}/v1/crontabs" not in srv.get("/openapi/v2").json()["paths"]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    yield group
    for srv in servers(api, ref):
        srv.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.{group}")


def test_openapi_of_custom_resources(api, ref, crontabs):
    group = crontabs
    kube = ref.api
    mine = api.get(f"/openapi/v3/apis/{group}/v1").json()
    theirs = kube.get(f"/openapi/v3/apis/{group}/v1").json()
    _assert_apply_difference(api, mine)
    if api.mode != "kube":
        theirs = _without_apply(theirs)
    assert mine == theirs
    v2, kube_v2 = api.get("/openapi/v2").json(), kube.get("/openapi/v2").json()
    if api.mode != "kube":
        kube_v2 = _without_apply(kube_v2)
    paths = {p for p in kube_v2["paths"] if f"/apis/{group}/" in p}
    assert paths == {p for p in v2["paths"] if f"/apis/{group}/" in p}
    for p in paths:
        assert v2["paths"][p] == kube_v2["paths"][p], p
    for name in ("com.example.%s.v1.CronTab" % group.split(".")[0], "com.example.%s.v1.CronTabList" % group.split(".")[0]):
        assert v2["definitions"][name] == kube_v2["definitions"][name], name


# ============================================================ Tables

NODE_STATUS = {
    "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-01-01T00:00:00Z",
                    "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "KubeletReady", "message": "ok"}],
    "addresses": [{"type": "InternalIP", "address": "10.1.1.1"}, {"type": "ExternalIP", "address": "1.2.3.4"}],
    "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "6.1", "osImage": "Debian 12",
                 "containerRuntimeVersion": "containerd://1.7", "kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
                 "operatingSystem": "linux", "architecture": "amd64"},
}
RUNNING = {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
           "conditions": [{"type": "Ready", "status": "True"}, {"type": "example.com/gate", "status": "True"}],
           "containerStatuses": [
               {"name": "a", "ready": True, "restartCount": 2, "image": "x", "imageID": "",
                "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-01-01T00:00:00Z"}}},
               {"name": "b", "ready": False, "restartCount": 0, "image": "y", "imageID": "",
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
SUCCEEDED = {"phase": "Succeeded", "containerStatuses": [
    {"name": "a", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
     "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": "2026-01-01T00:00:00Z",
                              "finishedAt": "2026-01-01T00:01:00Z"}}}]}
INIT = {"phase": "Pending", "initContainerStatuses": [
    {"name": "i", "ready": False, "restartCount": 0, "image": "x", "imageID": "",
     "state": {"waiting": {"reason": "PodInitializing"}}}]}


def _pod(name, node=None, init=False, gates=False, finalizer=False):
    spec = {"containers": [{"name": "a", "image": "x"}] + ([] if init else [{"name": "b", "image": "y"}])}
    if init:
        spec["initContainers"] = [{"name": "i", "image": "x"}]
    if node:
        spec["nodeName"] = node
    if gates:
        spec["readinessGates"] = [{"conditionType": "example.com/gate"}]
    meta = {"name": name}
    if finalizer:
        meta["finalizers"] = ["example.com/hold"]
    return {"metadata": meta, "spec": spec}


def _lb_ip(ns: str) -> str:
    """A cluster IP in kube's --service-cluster-ip-range, different per namespace (kube keeps it allocated while
    a deleted namespace stays Terminating: no namespace controller runs here)."""
    h = int(hashlib.sha256(ns.encode()).hexdigest(), 16)
    return f"10.96.{h % 200 + 20}.{h // 200 % 250 + 2}"


def _objects(ns: str) -> list[tuple[str, dict, dict | None]]:
    """(collection path, object, status to PUT through /status) of every kind we serve."""
    node = f"{ns}-n1"
    lb_ip = _lb_ip(ns)
    return [
        (f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "cm1", "labels": {"a": "b"}},
                                                 "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}, None),
        (f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "cm2"}}, None),
        (f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "s1"}, "type": "kubernetes.io/tls",
                                              "data": {"tls.crt": "AA==", "tls.key": "AA=="}}, None),
        (f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "s2"}, "stringData": {"x": "y"}}, None),
        (f"/api/v1/namespaces/{ns}/pods", _pod("p1", node="n1", gates=True), RUNNING),
        (f"/api/v1/namespaces/{ns}/pods", _pod("p2"), None),
        (f"/api/v1/namespaces/{ns}/pods", _pod("p3", node="n1", init=True), SUCCEEDED),
        (f"/api/v1/namespaces/{ns}/pods", _pod("p4", init=True), INIT),
        (f"/api/v1/namespaces/{ns}/pods", _pod("p5", finalizer=True), None),
        (f"/api/v1/namespaces/{ns}/services", {"metadata": {"name": "headless"}, "spec": {
            "clusterIP": "None", "clusterIPs": ["None"], "ports": [{"port": 80, "protocol": "TCP"}],
            "selector": {"b": "c", "app": "x"}}}, None),
        (f"/api/v1/namespaces/{ns}/services", {"metadata": {"name": "ext"}, "spec": {
            "type": "ExternalName", "externalName": "example.com"}}, None),
        (f"/api/v1/namespaces/{ns}/services", {"metadata": {"name": "lb"}, "spec": {
            "type": "LoadBalancer", "clusterIP": lb_ip, "clusterIPs": [lb_ip], "allocateLoadBalancerNodePorts": False,
            "externalIPs": ["1.2.3.4"], "ports": [{"name": "https", "port": 443, "protocol": "TCP"},
                                                  {"name": "dns", "port": 53, "protocol": "UDP"}]}},
         {"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "lb.example.com"}]}}),
        (f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "sa1"}, "secrets": [{"name": "x"}]}, None),
        (f"/api/v1/namespaces/{ns}/events", {
            "metadata": {"name": "ev1"}, "type": "Normal", "reason": "Started", "message": "started\ncontainer",
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": ns, "fieldPath": "spec.containers{a}"},
            "source": {"component": "kubelet", "host": "n1"}, "count": 2,
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z"}, None),
        (f"/api/v1/namespaces/{ns}/events", {
            "metadata": {"name": "ev2"}, "type": "Warning", "reason": "X", "action": "A",
            "involvedObject": {"kind": "Pod", "name": "p1", "namespace": ns},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingComponent": "rc", "reportingInstance": "ri",
            "series": {"count": 3, "lastObservedTime": "2026-01-01T00:02:00.000000Z"}}, None),
        (f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", {"metadata": {"name": "l1"},
                                                                  "spec": {"holderIdentity": "me"}}, None),
        (f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", {"metadata": {"name": "l2"}}, None),
        (f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {"metadata": {"name": "r1"}, "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}, None),
        (f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
            "metadata": {"name": "rb1"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r1"},
            "subjects": [{"kind": "User", "name": "u1", "apiGroup": "rbac.authorization.k8s.io"},
                         {"kind": "User", "name": "u2", "apiGroup": "rbac.authorization.k8s.io"},
                         {"kind": "Group", "name": "g1", "apiGroup": "rbac.authorization.k8s.io"},
                         {"kind": "ServiceAccount", "name": "sa1", "namespace": ns}]}, None),
        ("/apis/rbac.authorization.k8s.io/v1/clusterroles", {"metadata": {"name": f"{ns}-cr1"}, "rules": []}, None),
        ("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "metadata": {"name": f"{ns}-crb1"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{ns}-cr1"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa1", "namespace": ns}]}, None),
        ("/api/v1/nodes", {"metadata": {"name": node, "labels": {"node-role.kubernetes.io/control-plane": "",
                                                                 "kubernetes.io/role": "worker"}},
                           "spec": {"unschedulable": True}}, NODE_STATUS),
        ("/api/v1/nodes", {"metadata": {"name": f"{ns}-n2"}}, None),
    ]


class Populated:
    """One namespace with an object of every kind (several states), and the cluster-scoped ones."""

    def __init__(self, srv: Api, ns: str):
        self.api, self.ns = srv, ns
        assert srv.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
        self.cluster = []
        for path, obj, status in _objects(ns):
            r = srv.post(path, obj)
            assert r.status_code == 201, r.text
            created = r.json()
            if status is not None:
                created["status"] = status
                r = srv.put(f"{path}/{obj['metadata']['name']}/status", created)
                assert r.status_code == 200, r.text
            if "/namespaces/" not in path:
                self.cluster.append(f"{path}/{obj['metadata']['name']}")
        # Terminating: a pod held by a finalizer, deleted
        assert srv.delete(f"/api/v1/namespaces/{ns}/pods/p5").status_code == 200
        self.crd_group = f"{ns}.example.com"
        body = _schema_crd(self.crd_group)
        assert srv.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body).status_code == 201
        self.cluster.append(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.{self.crd_group}")
        base = f"/apis/{self.crd_group}/v1/namespaces/{ns}/crontabs"
        deadline = time.monotonic() + 30
        while srv.get(base).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        for name, spec in (("ct1", {"cronSpec": "* * * * *", "replicas": 3, "ratio": 0.5, "tags": ["x", "y"]}),
                           ("ct2", {"cronSpec": "1 2 3 4 5"})):
            r = srv.post(base, {"apiVersion": f"{self.crd_group}/v1", "kind": "CronTab", "metadata": {"name": name},
                                "spec": spec})
            assert r.status_code == 201, r.text
        ct1 = srv.get(f"{base}/ct1").json()
        assert srv.put(f"{base}/ct1/status", dict(ct1, status={"ready": True})).status_code == 200

    def close(self):
        p = self.api.get(f"/api/v1/namespaces/{self.ns}/pods/p5").json()
        p["metadata"]["finalizers"] = []
        self.api.put(f"/api/v1/namespaces/{self.ns}/pods/p5", p)
        for path in self.cluster:
            self.api.delete(path)
        self.api.delete(f"/api/v1/namespaces/{self.ns}")


_instances = itertools.count()  # pytest may set a module fixture up more than once (parametrized sessions)


@pytest.fixture(scope="module")
def kube_objects(ref):
    p = Populated(ref.api, f"tbl-kube-{os.getpid()}-{next(_instances)}")
    yield p
    p.close()


@pytest.fixture(scope="module")
def our_objects(differential_mode, kube_objects):
    server, mode, _ = differential_mode
    if mode == "kube":
        yield kube_objects
        return
    p = Populated(Api(server), f"tbl-{mode}-{os.getpid()}-{next(_instances)}")
    yield p
    p.close()


def _paths(ns: str, crd_group: str) -> list[str]:
    return [f"/api/v1/namespaces/{ns}/{r}" for r in ("configmaps", "secrets", "pods", "services", "serviceaccounts",
                                                     "events")] + [
        f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        f"/api/v1/namespaces/{ns}",
        f"/apis/{crd_group}/v1/namespaces/{ns}/crontabs",
    ]


def _cluster_items(ns: str, crd_group: str) -> list[str]:
    return [f"/api/v1/nodes/{ns}-n1", f"/api/v1/nodes/{ns}-n2",
            f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{ns}-cr1",
            f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{ns}-crb1",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.{crd_group}"]


_DURATION = re.compile(r"(\d+[smhdy]){1,2}|0s")
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _normalised(table: dict, ns: str) -> dict:
    """Clock- and creation-time-dependent cells replaced (after checking their format); the namespace name and
    the load balancer's cluster IP (both chosen per namespace) replaced; row objects reduced to kind,
    apiVersion, name, namespace and metadata keys (managedFields left out)."""
    t = json.loads(json.dumps(table).replace(_lb_ip(ns), "<lb-ip>").replace(ns, "<ns>"))
    for i, col in enumerate(t.get("columnDefinitions") or []):
        for row in t["rows"]:
            cell = row["cells"][i]
            if col["name"] == "Age":
                assert isinstance(cell, str) and _DURATION.fullmatch(cell), cell
                row["cells"][i] = "<age>"
            elif col["type"] == "date":
                assert isinstance(cell, str) and _RFC3339.fullmatch(cell), cell
                row["cells"][i] = "<date>"
    for row in t["rows"]:
        obj = row.get("object")
        if isinstance(obj, dict):
            meta = obj.get("metadata", {})
            meta.pop("managedFields", None)  # docs/differences.md: not maintained here
            row["object"] = {"kind": obj.get("kind"), "apiVersion": obj.get("apiVersion"),
                             "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                                          "keys": sorted(meta)}}
    t["metadata"] = sorted(t["metadata"])
    return t


def _table(srv, path, **params):
    r = srv.get(path, headers={"Accept": TABLE}, params=params or None)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "application/json"
    return r.json()


@pytest.mark.parametrize("include", [None, "Metadata", "Object", "None"])
def test_tables_equal_kube(api, our_objects, kube_objects, include):
    mine, theirs = our_objects, kube_objects
    params = {"includeObject": include} if include else {}
    pairs = list(zip(_paths(mine.ns, mine.crd_group), _paths(theirs.ns, theirs.crd_group)))
    items = []
    for a, b in pairs[:-2]:  # one object of each namespaced kind too
        first = _table(theirs.api, b)["rows"][0]["cells"]
        name = first[9] if b.endswith("/events") else first[0]
        items.append((f"{a}/{name}", f"{b}/{name}"))
    items += list(zip(_cluster_items(mine.ns, mine.crd_group), _cluster_items(theirs.ns, theirs.crd_group)))
    for a, b in pairs + items:
        got, want = _table(mine.api, a, **params), _table(theirs.api, b, **params)
        assert list(got) == list(want) == ["kind", "apiVersion", "metadata", "columnDefinitions", "rows"]
        g, w = _normalised(got, mine.ns), _normalised(want, theirs.ns)
        assert g["columnDefinitions"] == w["columnDefinitions"], a
        assert g["metadata"] == w["metadata"], a
        assert [r["cells"] for r in g["rows"]] == [r["cells"] for r in w["rows"]], a
        assert [r.get("conditions") for r in g["rows"]] == [r.get("conditions") for r in w["rows"]], a
        assert [list(r) for r in g["rows"]] == [list(r) for r in w["rows"]], a
        assert [r["object"] for r in g["rows"]] == [r["object"] for r in w["rows"]], a


def test_table_kubectl_wide_columns(api, our_objects):
    """kubectl get -o wide shows the priority-1 columns the server always sends (Wide: true)."""
    t = _table(api, f"/api/v1/namespaces/{our_objects.ns}/pods")
    wide = [c["name"] for c in t["columnDefinitions"] if c["priority"] == 1]
    assert wide == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    assert all(len(r["cells"]) == len(t["columnDefinitions"]) for r in t["rows"])


def test_table_variants(api, our_objects):
    ns = our_objects.ns
    path = f"/api/v1/namespaces/{ns}/configmaps"
    beta = api.get(path, headers={"Accept": "application/json;as=Table;v=v1beta1;g=meta.k8s.io"}).json()
    assert beta["kind"] == "Table" and beta["apiVersion"] == "meta.k8s.io/v1beta1"
    assert beta["rows"][0]["object"]["apiVersion"] == "meta.k8s.io/v1beta1"
    bad = api.get(path, headers={"Accept": TABLE}, params={"includeObject": "Bogus"})
    assert bad.status_code == 400
    assert bad.json()["message"] == ("Unable to convert to Table as requested: includeObject: Invalid value: "
                                     "\"Bogus\": must be 'Metadata', 'Object', 'None', or empty")
    assert api.get(path, params={"includeObject": "Bogus"}).status_code == 200  # only a Table validates it
    page = api.get(f"/api/v1/namespaces/{ns}/secrets", headers={"Accept": TABLE}, params={"limit": "1"}).json()
    assert list(page["metadata"]) == ["resourceVersion", "continue", "remainingItemCount"] and len(page["rows"]) == 1
    created = api.post(path, {"metadata": {"name": "made"}}, headers={"Accept": TABLE})
    assert created.status_code == 201 and created.json()["kind"] == "Table"
    assert created.json()["rows"][0]["cells"][:2] == ["made", 0]
    assert api.delete(f"{path}/made").status_code == 200


def test_table_of_a_sharded_list_has_no_shard_info(api, our_objects):
    sel = "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
    path = f"/api/v1/namespaces/{our_objects.ns}/configmaps"
    plain = api.get(path, params={"shardSelector": sel}).json()
    assert plain["metadata"]["shardInfo"] == {"selector": sel}
    t = api.get(path, headers={"Accept": TABLE}, params={"shardSelector": sel}).json()
    assert list(t["metadata"]) == ["resourceVersion"] and len(t["rows"]) == 2


POM = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
POML = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
METADATA_CLIENT = ("application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
                   "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json")


def test_partial_object_metadata(api, our_objects):
    """client-go's metadata client (garbage collector, metadata informers)."""
    ns = our_objects.ns
    path = f"/api/v1/namespaces/{ns}/configmaps"
    lst = api.get(path, headers={"Accept": METADATA_CLIENT})
    # Deliberate (docs/differences.md, Protobuf): JSON here, kube answers the protobuf asked for first.
    assert lst.status_code == 200 and lst.headers["Content-Type"] == (
        "application/vnd.kubernetes.protobuf" if api.mode == "kube" else "application/json")
    doc = api.get(path, headers={"Accept": POML}).json()
    assert list(doc) == ["kind", "apiVersion", "metadata", "items"]
    assert doc["kind"] == "PartialObjectMetadataList" and doc["apiVersion"] == "meta.k8s.io/v1"
    assert [i["metadata"]["name"] for i in doc["items"]] == ["cm1", "cm2"]
    assert all(list(i) == ["kind", "apiVersion", "metadata"] and i["kind"] == "PartialObjectMetadata" for i in doc["items"])
    one = api.get(f"{path}/cm1", headers={"Accept": POM}).json()
    assert one["kind"] == "PartialObjectMetadata" and one["metadata"]["labels"] == {"a": "b"} and "data" not in one
    beta = api.get(path, headers={"Accept": POML.replace("v=v1", "v=v1beta1")}).json()
    assert beta["apiVersion"] == "meta.k8s.io/v1beta1" and beta["items"][0]["apiVersion"] == "meta.k8s.io/v1beta1"
    wrong = api.get(path, headers={"Accept": POM})
    assert wrong.status_code == 406
    assert wrong.json()["message"] == ("you requested PartialObjectMetadata, but the requested object is a list "
                                       "(*core.ConfigMapList)")
    wrong = api.get(f"{path}/cm1", headers={"Accept": POML})
    assert wrong.status_code == 406 and wrong.json()["reason"] == "NotAcceptable"
    assert wrong.json()["message"] == ("you requested PartialObjectMetadataList, but the requested object is not a "
                                       "list (*core.ConfigMap)")
    crs = f"/apis/{our_objects.crd_group}/v1/namespaces/{ns}/crontabs"
    cr = api.get(crs, headers={"Accept": POM})
    assert cr.status_code == 406 and cr.json()["message"].endswith("(*unstructured.UnstructuredList)")
    cr = api.get(f"{crs}/ct1", headers={"Accept": POML})  # upstream: Unstructured passes as a list, then fails
    assert cr.status_code == 500 and cr.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                   "status": "Failure", "message": "content is not a list",
                                                   "code": 500}
    assert api.get(f"{crs}/ct1", headers={"Accept": POM}).json()["kind"] == "PartialObjectMetadata"
    rv = doc["metadata"]["resourceVersion"]
    w = api.get(path, headers={"Accept": POM}, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "5"},
                stream=True)
    assert api.post(path, {"metadata": {"name": "watched", "labels": {"w": "1"}}, "data": {"k": "v"}}).status_code == 201
    try:
        ev = json.loads(next(line for line in w.iter_lines() if line))
    finally:
        w.close()
        api.delete(f"{path}/watched")
    assert ev["type"] == "ADDED" and ev["object"]["kind"] == "PartialObjectMetadata"
    assert ev["object"]["metadata"]["labels"] == {"w": "1"} and "data" not in ev["object"]


def test_watch_as_table(api, our_objects):
    """watchEmbeddedEncoder: every event a one-row Table, column definitions only on the first."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{our_objects.ns}/leases"
    rv = api.get(path).json()["metadata"]["resourceVersion"]
    w = api.get(path, headers={"Accept": "application/json;as=Table;v=v1beta1;g=meta.k8s.io"},
                params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "5"}, stream=True)
    for n in ("w1", "w2"):
        assert api.post(path, {"metadata": {"name": n}, "spec": {"holderIdentity": n}}).status_code == 201
    events = []
    try:
        for line in w.iter_lines():
            if line:
                events.append(json.loads(line))
            if len(events) == 2:
                break
    finally:
        w.close()
        for n in ("w1", "w2"):
            api.delete(f"{path}/{n}")
    first, second = (e["object"] for e in events)
    assert first["apiVersion"] == second["apiVersion"] == "meta.k8s.io/v1beta1"
    assert [c["name"] for c in first["columnDefinitions"]] == ["Name", "Holder", "Age"]
    assert second["columnDefinitions"] is None
    assert [e["object"]["rows"][0]["cells"][:2] for e in events] == [["w1", "w1"], ["w2", "w2"]]
    assert first["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


def test_legacy_watch_paths(api, our_objects):
    """The deprecated /watch/ paths (in both OpenAPI documents) are served."""
    ns = our_objects.ns
    for path in (f"/api/v1/watch/namespaces/{ns}/configmaps", f"/api/v1/watch/namespaces/{ns}/configmaps/cm2"):
        r = api.get(path, params={"timeoutSeconds": "1"})
        assert r.status_code == 200
        names = [json.loads(line)["object"]["metadata"]["name"] for line in r.text.splitlines() if line]
        assert names == (["cm1", "cm2"] if path.endswith("configmaps") else ["cm2"])
    assert api.post(f"/api/v1/watch/namespaces/{ns}/configmaps", {"metadata": {"name": "x"}}).status_code == 405


def test_strategic_merge_patch_of_a_crd(api, our_objects):
    """CRDs are a built-in kind: strategic merge patch works (and is offered in OpenAPI)."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/crontabs.{our_objects.crd_group}"
    r = api.patch(path, {"metadata": {"labels": {"smp": "yes"}}}, "application/strategic-merge-patch+json")
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["labels"] == {"smp": "yes"}


# --- kubectl get -o wide against both --------------------------------------------------------------

def _kubeconfig(tmp_path, name, server, ca=None, cert=None):
    cluster = {"server": server, **({"certificate-authority": ca} if ca else {})}
    user = {"client-certificate": cert[0], "client-key": cert[1]} if cert else {}
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    p = tmp_path / f"{name}.kubeconfig"
    p.write_text(json.dumps(cfg))
    return str(p)


def _kubectl_rows(kubeconfig, home, ns, *args):
    """kubectl's text output as rows of cells, cut at the header's column offsets (one block with its own
    header per kind), AGE cells normalised after checking their format."""
    env = dict(os.environ, HOME=str(home), KUBECONFIG=kubeconfig)
    r = subprocess.run([KUBECTL, *args], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    rows, starts, names = [], None, []
    for line in r.stdout.splitlines():
        if not line.strip():
            starts = None
            continue
        if starts is None:
            starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", line)]
            names = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
            rows.append(names)
            continue
        row = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        for i, h in enumerate(names):
            if h in ("AGE", "CREATED AT"):
                assert _DURATION.fullmatch(row[i]) or _RFC3339.fullmatch(row[i]), row[i]
                row[i] = "<age>"
        rows.append([c.replace(_lb_ip(ns), "<lb-ip>").replace(ns, "<ns>") for c in row])
    return rows


def test_kubectl_get_wide_same_output(api, ref, our_objects, kube_objects, tmp_path):
    assert KUBECTL, "kubectl not found"
    mine = (_kubeconfig(tmp_path, "ours", api.base) if api.mode != "kube" else
            _kubeconfig(tmp_path, "ours", ref.server.url, ref.server.ca, ref.server.client_cert))
    theirs = _kubeconfig(tmp_path, "kube", ref.server.url, ref.server.ca, ref.server.client_cert)
    # crontabs by their full name: an earlier instance's CRD of another group may still be in discovery while
    # it is deleted, and a bare "crontabs" could resolve to that group
    for kinds in ("pods,services,configmaps,secrets,serviceaccounts,leases,roles,rolebindings",
                  "events", "crontabs.{group}"):
        a = _kubectl_rows(mine, tmp_path, our_objects.ns, "get", kinds.format(group=our_objects.crd_group),
                          "-n", our_objects.ns, "-o", "wide")
        b = _kubectl_rows(theirs, tmp_path, kube_objects.ns, "get", kinds.format(group=kube_objects.crd_group),
                          "-n", kube_objects.ns, "-o", "wide")
        assert a == b, kinds
    a = _kubectl_rows(mine, tmp_path, our_objects.ns, "get", "nodes", f"{our_objects.ns}-n1", f"{our_objects.ns}-n2",
                      "-o", "wide")
    b = _kubectl_rows(theirs, tmp_path, kube_objects.ns, "get", "nodes", f"{kube_objects.ns}-n1",
                      f"{kube_objects.ns}-n2", "-o", "wide")
    assert a == b
