"""HTTP behaviour of the core verbs, list options, paging and watches, run differentially: against our
apiserver (watch cache on, and off) and against the real kube-apiserver v1.37.2 (`api.mode == "kube"`),
each a real process over a real etcd. An assertion of upstream behaviour must hold on all three.
Statement ids refer to SPEC.md."""
from __future__ import annotations

import json
import time

import pytest


def cm(name, **data):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def status_of(r):
    body = r.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1", body
    return body


@pytest.fixture
def api(differential_api):
    return differential_api


# --- verbs -----------------------------------------------------------------

def test_create_sets_server_fields_and_get_returns_it(api, namespace):
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("a", k="v"))
    assert r.status_code == 201, r.text
    obj = r.json()
    md = obj["metadata"]
    assert md["uid"] and md["creationTimestamp"] and int(md["resourceVersion"]) > 0
    assert list(obj)[:3] == ["kind", "apiVersion", "metadata"]  # Go struct order (S6.3)
    g = api.get(f"/api/v1/namespaces/{namespace}/configmaps/a")
    assert g.status_code == 200 and g.json() == obj
    assert g.content.endswith(b"\n")


def test_generate_name(api, namespace):
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps",
                 {"metadata": {"generateName": "gen-"}, "data": {}})
    assert r.status_code == 201, r.text
    name = r.json()["metadata"]["name"]
    assert name.startswith("gen-") and len(name) == len("gen-") + 5


def test_create_existing_is_409_already_exists(api, namespace):
    assert api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("a")).status_code == 201
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("a"))
    assert r.status_code == 409
    assert status_of(r)["reason"] == "AlreadyExists"
    assert status_of(r)["message"] == 'configmaps "a" already exists'


def test_create_in_missing_namespace_is_404(api):
    r = api.post("/api/v1/namespaces/does-not-exist/configmaps", cm("a"))
    assert r.status_code == 404
    assert status_of(r)["message"] == 'namespaces "does-not-exist" not found'


def test_get_missing_is_404_with_details(api, namespace):
    """S1.17."""
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps/foo")
    assert r.status_code == 404
    body = status_of(r)
    assert body["reason"] == "NotFound" and body["message"] == 'configmaps "foo" not found'
    assert body["details"] == {"name": "foo", "kind": "configmaps"}
    assert list(body) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"]


def test_update_with_stale_rv_is_409_conflict(api, namespace):
    v1 = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("a", k="1")).json()
    v2 = dict(v1, data={"k": "2"})
    r = api.put(f"/api/v1/namespaces/{namespace}/configmaps/a", v2)
    assert r.status_code == 200, r.text
    assert int(r.json()["metadata"]["resourceVersion"]) > int(v1["metadata"]["resourceVersion"])
    stale = dict(v1, data={"k": "3"})
    r = api.put(f"/api/v1/namespaces/{namespace}/configmaps/a", stale)
    assert r.status_code == 409
    assert status_of(r)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(r)["message"]


def test_update_keeps_uid_and_creation_timestamp(api, namespace):
    """A uid in an update's body is a precondition (upstream hands it to the etcd3 store: 409 with the
    storage error's text); without one the stored uid and creationTimestamp are kept."""
    v1 = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("a")).json()
    body = cm("a", k="x")
    body["metadata"]["uid"] = "forged"
    r = api.put(f"/api/v1/namespaces/{namespace}/configmaps/a", body)
    assert r.status_code == 409, r.text
    msg = status_of(r)["message"]
    assert msg.startswith('Operation cannot be fulfilled on configmaps "a": StorageError: invalid object, Code: 4, Key: ')
    assert msg.endswith(f"/configmaps/{namespace}/a, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: "
                        f"UID in precondition: forged, UID in object meta: {v1['metadata']['uid']}")
    body["metadata"]["creationTimestamp"] = "2000-01-01T00:00:00Z"
    del body["metadata"]["uid"]
    r = api.put(f"/api/v1/namespaces/{namespace}/configmaps/a", body)
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["uid"] == v1["metadata"]["uid"]
    assert r.json()["metadata"]["creationTimestamp"] == v1["metadata"]["creationTimestamp"]


@pytest.mark.parametrize("ctype,body,expect", [
    ("application/merge-patch+json", {"data": {"a": None, "b": "2"}}, {"b": "2"}),
    ("application/json-patch+json", [{"op": "remove", "path": "/data/a"},
                                     {"op": "add", "path": "/data/b", "value": "2"}], {"b": "2"}),
    ("application/strategic-merge-patch+json", {"data": {"a": None, "b": "2"}}, {"b": "2"}),
])
def test_patch_types(api, namespace, ctype, body, expect):
    api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("p", a="1"))
    r = api.patch(f"/api/v1/namespaces/{namespace}/configmaps/p", body, ctype)
    assert r.status_code == 200, r.text
    assert r.json()["data"] == expect


def test_unsupported_patch_type_is_415_even_for_a_missing_object(api, namespace):
    """kubectl apply --server-side of a new object: the media type is checked before the object is
    read, so 415 rather than 404. Server-side apply itself is a deliberate difference
    (docs/differences.md): kube-apiserver accepts the media type."""
    r = api.patch(f"/api/v1/namespaces/{namespace}/configmaps/absent", b"data: {a: '1'}",
                  "application/apply-patch+yaml", params={"fieldManager": "kubectl"})
    if api.mode == "kube":
        assert r.status_code != 415, r.text
    else:
        assert r.status_code == 415, r.text
        assert status_of(r)["reason"] == "UnsupportedMediaType"
    r = api.patch(f"/api/v1/namespaces/{namespace}/configmaps/absent", b"{}", "text/plain")
    assert r.status_code == 415, r.text


def test_strategic_merge_patch_merges_containers_by_name(api, namespace):
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}
    assert api.post(f"/api/v1/namespaces/{namespace}/pods", pod).status_code == 201
    r = api.patch(f"/api/v1/namespaces/{namespace}/pods/p",
                  {"spec": {"containers": [{"name": "b", "image": "b:2"}]}},
                  "application/strategic-merge-patch+json")
    assert r.status_code == 200, r.text
    assert [(c["name"], c["image"]) for c in r.json()["spec"]["containers"]] == [("a", "a:1"), ("b", "b:2")]


def test_back_to_back_updates_with_the_returned_rv_never_conflict(api, namespace):
    """Writes start from the watch cache's copy (one etcd Txn), which may lag the write just
    acknowledged: a PUT carrying the RV the previous PUT returned must still succeed, and a
    no-op PUT must not be answered from a stale copy."""
    obj = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("b2b")).json()
    for i in range(30):
        obj["data"] = {"i": str(i)}
        r = api.put(f"/api/v1/namespaces/{namespace}/configmaps/b2b", obj)
        assert r.status_code == 200, (i, r.text)
        assert r.json()["data"] == {"i": str(i)}
        obj = r.json()
        r = api.put(f"/api/v1/namespaces/{namespace}/configmaps/b2b", obj)  # no-op: same RV back
        assert r.status_code == 200 and r.json()["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
    stale = dict(obj, metadata=dict(obj["metadata"], resourceVersion="2"), data={"x": "y"})
    r = api.put(f"/api/v1/namespaces/{namespace}/configmaps/b2b", stale)
    assert r.status_code == 409, r.text


def test_delete_with_preconditions(api, namespace):
    obj = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("d")).json()
    r = api.delete(f"/api/v1/namespaces/{namespace}/configmaps/d",
                   {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "wrong"}})
    assert r.status_code == 409, r.text
    st = status_of(r)
    assert st["message"] == (f'Operation cannot be fulfilled on ConfigMap "d": the UID in the precondition (wrong) '
                             f'does not match the UID in record ({obj["metadata"]["uid"]}). The object might have '
                             f'been deleted and then recreated')
    assert st["details"] == {"name": "d", "kind": "ConfigMap"}
    r = api.delete(f"/api/v1/namespaces/{namespace}/configmaps/d",
                   {"preconditions": {"resourceVersion": "1"}})
    assert r.status_code == 409, r.text
    assert status_of(r)["message"] == (
        f'Operation cannot be fulfilled on ConfigMap "d": the ResourceVersion in the precondition (1) does not '
        f'match the ResourceVersion in record ({obj["metadata"]["resourceVersion"]}). The object might have been '
        f'modified')
    r = api.delete(f"/api/v1/namespaces/{namespace}/configmaps/d",
                   {"preconditions": {"uid": obj["metadata"]["uid"],
                                      "resourceVersion": obj["metadata"]["resourceVersion"]}})
    assert r.status_code == 200, r.text
    assert api.get(f"/api/v1/namespaces/{namespace}/configmaps/d").status_code == 404


def test_delete_dry_run_in_body_keeps_the_object(api, namespace):
    """kubectl delete --dry-run=server and client-go send dryRun in the DeleteOptions body."""
    api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("dry"))
    r = api.delete(f"/api/v1/namespaces/{namespace}/configmaps/dry", {"dryRun": ["All"]})
    assert r.status_code == 200, r.text
    st = r.json()  # configmaps answer a DELETE with a Success Status, not the object
    assert st["kind"] == "Status" and st["status"] == "Success"
    assert st["details"]["name"] == "dry" and st["details"]["kind"] == "configmaps"
    assert api.get(f"/api/v1/namespaces/{namespace}/configmaps/dry").status_code == 200
    r = api.delete(f"/api/v1/namespaces/{namespace}/configmaps", {"dryRun": ["All"]})
    assert r.status_code == 200 and [i["metadata"]["name"] for i in r.json()["items"]] == ["dry"]
    assert api.get(f"/api/v1/namespaces/{namespace}/configmaps/dry").status_code == 200


@pytest.mark.parametrize("opts,message", [
    ({"propagationPolicy": "Sideways"},
     'propagationPolicy: Unsupported value: "Sideways": supported values: "Foreground", "Background", "Orphan", '
     '"nil"'),
    ({"propagationPolicy": "Orphan", "orphanDependents": True},
     'propagationPolicy: Invalid value: "Orphan": orphanDependents and deletionPropagation cannot be both set'),
    ({"dryRun": ["Some"]}, 'dryRun: Unsupported value: ["Some"]: supported values: "All"'),
])
def test_invalid_delete_options_are_422(api, namespace, opts, message):
    api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("keep"))
    r = api.delete(f"/api/v1/namespaces/{namespace}/configmaps/keep", opts)
    assert r.status_code == 422, r.text
    st = status_of(r)
    assert st["reason"] == "Invalid" and st["details"]["kind"] == "DeleteOptions"
    assert st["message"] == f'DeleteOptions.meta.k8s.io "" is invalid: {message}'
    assert api.get(f"/api/v1/namespaces/{namespace}/configmaps/keep").status_code == 200


def test_secret_string_data_and_default_type(api, namespace):
    """v1 conversion merges stringData into data; SetDefaults_Secret sets type Opaque."""
    r = api.post(f"/api/v1/namespaces/{namespace}/secrets",
                 {"metadata": {"name": "s"}, "data": {"a": "YQ=="}, "stringData": {"b": "bé", "a": "x"}})
    assert r.status_code == 201, r.text
    got = api.get(f"/api/v1/namespaces/{namespace}/secrets/s").json()
    assert "stringData" not in got and got["type"] == "Opaque"
    assert got["data"] == {"a": "eA==", "b": "YsOp"}
    assert list(got) == ["kind", "apiVersion", "metadata", "data", "type"]


def test_deletecollection_with_label_selector(api, namespace):
    for i in range(4):
        body = cm(f"c{i}")
        body["metadata"]["labels"] = {"del": "yes" if i % 2 else "no"}
        api.post(f"/api/v1/namespaces/{namespace}/configmaps", body)
    r = api.delete(f"/api/v1/namespaces/{namespace}/configmaps", params={"labelSelector": "del=yes"})
    assert r.status_code == 200, r.text
    left = api.get(f"/api/v1/namespaces/{namespace}/configmaps").json()["items"]
    assert sorted(i["metadata"]["name"] for i in left) == ["c0", "c2"]


def test_pod_status_subresource(api, namespace):
    pod = {"metadata": {"name": "s"}, "spec": {"containers": [{"name": "a", "image": "a"}]}}
    created = api.post(f"/api/v1/namespaces/{namespace}/pods", pod).json()
    assert created["status"]["phase"] == "Pending"
    # Status written through the main resource is ignored...
    body = dict(created, status={"phase": "Running"})
    r = api.put(f"/api/v1/namespaces/{namespace}/pods/s", body)
    assert r.status_code == 200 and r.json()["status"]["phase"] == "Pending"
    # ...and through /status it sticks.
    cur = api.get(f"/api/v1/namespaces/{namespace}/pods/s").json()
    r = api.put(f"/api/v1/namespaces/{namespace}/pods/s/status", dict(cur, status={"phase": "Running"}))
    assert r.status_code == 200, r.text
    assert api.get(f"/api/v1/namespaces/{namespace}/pods/s").json()["status"]["phase"] == "Running"


# --- lists ------------------------------------------------------------------

def test_list_paging_is_consistent_and_tokens_as_upstream(api, namespace):
    """S2.1, S2.8-S2.10: pages at the first page's RV; remainingItemCount; no token on the last page."""
    for i in range(7):
        api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm(f"o{i}"))
    first = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"limit": 3}).json()
    assert first["kind"] == "ConfigMapList" and first["apiVersion"] == "v1"
    assert "kind" not in first["items"][0]  # S8.1
    meta = first["metadata"]
    assert list(meta) == ["resourceVersion", "continue", "remainingItemCount"]
    assert meta["remainingItemCount"] == 4
    import base64
    tok = json.loads(base64.urlsafe_b64decode(meta["continue"] + "=" * (-len(meta["continue"]) % 4)))
    # S2.2: the etcd path strips the slashed prefix, the cache path (ours and upstream's) the un-slashed one.
    assert list(tok) == ["v", "rv", "start"] and tok["start"] == ("o2\u0000" if api.mode == "etcd" else "/o2\u0000")
    api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("o3a"))  # after the first page
    names = [i["metadata"]["name"] for i in first["items"]]
    page = first
    while page["metadata"].get("continue"):
        page = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                       params={"limit": 3, "continue": page["metadata"]["continue"]}).json()
        assert page["metadata"]["resourceVersion"] == meta["resourceVersion"]
        names += [i["metadata"]["name"] for i in page["items"]]
    assert names == [f"o{i}" for i in range(7)]
    assert "remainingItemCount" not in page["metadata"]


def test_list_label_and_field_selectors(api, namespace):
    for name, labels in [("a", {"app": "x", "tier": "fe"}), ("b", {"app": "y"}), ("c", {})]:
        body = cm(name)
        body["metadata"]["labels"] = labels
        api.post(f"/api/v1/namespaces/{namespace}/configmaps", body)

    def names(**params):
        r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params=params)
        assert r.status_code == 200, r.text
        return [i["metadata"]["name"] for i in r.json()["items"]]
    assert names(labelSelector="app=x") == ["a"]
    assert names(labelSelector="app in (x,y)") == ["a", "b"]
    assert names(labelSelector="app notin (x)") == ["b", "c"]
    assert names(labelSelector="app") == ["a", "b"]
    assert names(labelSelector="!app") == ["c"]
    assert names(labelSelector="app!=x") == ["b", "c"]
    assert names(fieldSelector="metadata.name=b") == ["b"]
    assert names(fieldSelector="metadata.name!=b") == ["a", "c"]
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"fieldSelector": "spec.x=y"})
    assert r.status_code == 400


def test_pod_field_selectors(api, namespace):
    for name, node in [("p1", "n1"), ("p2", "n2")]:
        api.post(f"/api/v1/namespaces/{namespace}/pods",
                 {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}})
    r = api.get(f"/api/v1/namespaces/{namespace}/pods", params={"fieldSelector": "spec.nodeName=n2"})
    assert [i["metadata"]["name"] for i in r.json()["items"]] == ["p2"]
    r = api.get(f"/api/v1/namespaces/{namespace}/pods", params={"fieldSelector": "status.phase=Pending"})
    assert len(r.json()["items"]) == 2


@pytest.mark.parametrize("params,msg", [
    ({"resourceVersionMatch": "Exact"}, "resourceVersionMatch is forbidden unless resourceVersion is provided"),
    ({"resourceVersion": "0", "resourceVersionMatch": "Exact"},
     'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'),
    ({"resourceVersion": "5", "resourceVersionMatch": "Bogus"}, 'Unsupported value: "Bogus"'),
    ({"sendInitialEvents": "true"}, "sendInitialEvents is forbidden for list"),
])
def test_list_option_validation_is_422(api, namespace, params, msg):
    """S1.2-S1.7."""
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params=params)
    assert r.status_code == 422, r.text
    body = status_of(r)
    assert body["reason"] == "Invalid" and msg in body["message"]
    assert body["message"].startswith('ListOptions.meta.k8s.io "" is invalid: ')
    assert body["details"]["group"] == "meta.k8s.io" and body["details"]["kind"] == "ListOptions"


def test_unparseable_rv_is_400(api, namespace):
    """S1.11."""
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"resourceVersion": "abc"})
    assert r.status_code == 400
    assert status_of(r)["message"].startswith('invalid resource version: resourceVersion: Invalid value: "abc"')


def test_continue_with_rv_is_400(api, namespace):
    """S1.12, S1.13: a valid token with a resourceVersion other than ""/"0" is 400 on both paths."""
    for i in range(3):
        api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm(f"c{i}"))
    first = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"limit": "1"}).json()
    token = first["metadata"]["continue"]
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"continue": token, "resourceVersion": "5",
                                                                       "limit": "1"})
    assert r.status_code == 400
    assert status_of(r)["reason"] == "BadRequest"
    assert status_of(r)["message"] == "specifying resource version is not allowed when using continue"
    for rv in ("", "0"):  # allowed with a token
        r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"continue": token, "resourceVersion": rv,
                                                                           "limit": "1"})
        assert r.status_code == 200, r.text
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"continue": "abc", "resourceVersion": "5"})
    assert r.status_code == 400
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"continue": "!!!"})
    assert r.status_code == 400 and status_of(r)["message"].startswith("invalid continue token")


def test_exact_list_at_future_rv_is_504(api, namespace):
    """S1.22: the cache waits 3 s then answers 504 with Retry-After 1; etcd's answer has
    retryAfterSeconds 0 (no header)."""
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"resourceVersion": "999999999", "resourceVersionMatch": "Exact"})
    assert r.status_code == 504
    body = status_of(r)
    assert body["reason"] == "Timeout" and "Too large resource version: 999999999" in body["message"]
    assert body["details"]["causes"] == [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
    if api.mode in ("cache", "deployment", "kube"):  # served from a watch cache (the deployment's: its shards')
        assert r.headers["Retry-After"] == "1" and body["details"]["retryAfterSeconds"] == 1
    else:
        assert "Retry-After" not in r.headers


def test_list_streaming_is_byte_identical_to_buffered(api, namespace):
    """S6.2: the streamed body equals the buffered encoding of the same list."""
    from machinery import jsonenc
    for i in range(5):
        api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm(f"s{i}", text="<&> \u2028 é"))
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps")
    body = r.content
    doc = jsonenc.loads(body)
    items = [jsonenc.dumps(i) for i in doc["items"]]
    assert body == jsonenc.encode_list("ConfigMapList", "v1", doc["metadata"], items)
    assert b"\\u003c\\u0026\\u003e \\u2028 \xc3\xa9" in body  # S6.3 escapes


# --- watches ------------------------------------------------------------------

def read_events(resp, n, timeout=10):
    out = []
    deadline = time.monotonic() + timeout
    for line in resp.iter_lines():
        if line:
            out.append(json.loads(line))
        if len(out) >= n or time.monotonic() > deadline:
            break
    return out


def test_watch_from_rv_sees_changes_and_delete_rv(api, namespace):
    """S4.2, S4.5."""
    v1 = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("w")).json()
    rv = v1["metadata"]["resourceVersion"]
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "10"}, stream=True)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    v2 = api.put(f"/api/v1/namespaces/{namespace}/configmaps/w", cm("w", k="2")).json()
    d = api.delete(f"/api/v1/namespaces/{namespace}/configmaps/w")
    assert d.status_code == 200
    evs = read_events(r, 2)
    assert [e["type"] for e in evs] == ["MODIFIED", "DELETED"]
    assert evs[0]["object"] == v2
    assert evs[0]["object"]["kind"] == "ConfigMap"
    assert int(evs[1]["object"]["metadata"]["resourceVersion"]) > int(v2["metadata"]["resourceVersion"])
    assert evs[1]["object"]["data"] == {"k": "2"}


def test_watch_without_rv_sends_current_state_first(api, namespace):
    """S1.29 (watch-list gate off, S5.3): RV unset starts with ADDED for existing objects."""
    api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("x"))
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps", params={"watch": "true", "timeoutSeconds": "5"},
                stream=True)
    evs = read_events(r, 1)
    assert evs[0]["type"] == "ADDED" and evs[0]["object"]["metadata"]["name"] == "x"


def test_watch_timeout_seconds_ends_stream(api, namespace):
    t0 = time.monotonic()
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "1", "resourceVersion": "1", "timeoutSeconds": "1"}, stream=True)
    list(r.iter_lines())
    assert time.monotonic() - t0 < 5


def test_watch_too_old_is_error_event_in_200(api, namespace):
    """S1.30: a start RV the server can no longer serve gives an ERROR event carrying a
    410 Expired Status in a 200 response. etcd path: a compacted revision; cache path:
    an RV older than the cache's initial list (S1.31)."""
    import asyncio

    from storage.etcd import EtcdClient
    v = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("old")).json()
    api.put(f"/api/v1/namespaces/{namespace}/configmaps/old", cm("old", k="1"))
    cur = int(api.put(f"/api/v1/namespaces/{namespace}/configmaps/old", cm("old", k="2")).json()
              ["metadata"]["resourceVersion"])

    async def compact():  # as kube-apiserver's compactor does it (its watch cache follows compact_rev_key)
        from storage.compact import compact_now
        c = EtcdClient([api.etcd.endpoint])
        await compact_now(c, cur)
        await c.close()
    asyncio.run(compact())
    start = v["metadata"]["resourceVersion"] if api.mode == "etcd" else "1"
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "1", "resourceVersion": start, "timeoutSeconds": "5"}, stream=True)
    assert r.status_code == 200
    evs = read_events(r, 1)
    assert evs[0]["type"] == "ERROR"
    st = evs[0]["object"]
    assert st["kind"] == "Status" and st["code"] == 410 and st["reason"] == "Expired"
    assert st["message"].startswith(f"too old resource version: {start} (")
    assert list(st) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "code"]  # S8.4
    # An exact list at the compacted revision is a real HTTP 410 (S1.24), on both paths
    # (the cache has no snapshot that old and delegates to etcd, S1.21).
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"resourceVersion": "2", "resourceVersionMatch": "Exact"})
    assert r.status_code == 410
    assert status_of(r)["message"] == "The resourceVersion for the provided list is too old."


def test_watch_selector_transitions(api, namespace):
    """S4.6."""
    body = cm("t")
    body["metadata"]["labels"] = {"on": "no"}
    v = api.post(f"/api/v1/namespaces/{namespace}/configmaps", body).json()
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "1", "resourceVersion": v["metadata"]["resourceVersion"],
                        "labelSelector": "on=yes", "timeoutSeconds": "10"}, stream=True)
    for i, val in enumerate(("yes", "yes", "no")):
        b = cm("t", v=str(i))
        b["metadata"]["labels"] = {"on": val}
        assert api.put(f"/api/v1/namespaces/{namespace}/configmaps/t", b).status_code == 200
    evs = read_events(r, 3)
    assert [(e["type"], e["object"]["metadata"]["labels"]["on"]) for e in evs] == \
        [("ADDED", "yes"), ("MODIFIED", "yes"), ("DELETED", "yes")]


def test_watch_list_needs_the_cache(api, namespace):
    """S5.3: with --watch-cache=false, sendInitialEvents on a watch is 422 (as upstream with the
    WatchList gate off); with the cache it is served (S5, detailed in test_watch_cache.py)."""
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
                        "allowWatchBookmarks": "true", "timeoutSeconds": "1", "resourceVersion": "0"})
    if api.mode == "etcd":
        assert r.status_code == 422
        assert "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled" in \
            status_of(r)["message"]
    else:
        assert r.status_code == 200
        evs = [json.loads(l) for l in r.content.splitlines() if l]
        # The first bookmark ends the initial events (S5.4); the real kube-apiserver has once been seen to
        # send a plain bookmark after it within the 1 s (S4.11/S4.12 allow more bookmarks), so only the
        # first one is checked and what follows it may only be bookmarks.
        first = next(i for i, e in enumerate(evs) if e["type"] == "BOOKMARK")
        assert evs[first]["object"]["metadata"].get("annotations") == {"k8s.io/initial-events-end": "true"}, evs
        assert all(e["type"] == "BOOKMARK" and "annotations" not in e["object"]["metadata"]
                   for e in evs[first + 1:]), evs


# --- errors -------------------------------------------------------------------

def test_malformed_json_is_400(api, namespace):
    r = api.req("POST", f"/api/v1/namespaces/{namespace}/configmaps", data="{not json",
                headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and status_of(r)["reason"] == "BadRequest"


def test_kind_or_version_mismatch_is_400(api, namespace):
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps", {"kind": "Pod", "apiVersion": "v1",
                                                                 "metadata": {"name": "x"}})
    assert r.status_code == 400
    assert status_of(r)["message"] == ('Pod in version "v1" cannot be handled as a ConfigMap: converting (v1.Pod) '
                                       'to (core.ConfigMap): unknown conversion')
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps", {"kind": "ConfigMap", "apiVersion": "v2",
                                                                 "metadata": {"name": "x"}})
    assert r.status_code == 400
    assert status_of(r)["message"] == ('ConfigMap in version "v2" cannot be handled as a ConfigMap: no kind '
                                       '"ConfigMap" is registered for version "v2" in scheme '
                                       '"pkg/runtime/scheme.go:111"')


def test_invalid_name_is_422(api, namespace):
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("Bad_Name"))
    assert r.status_code == 422
    body = status_of(r)
    assert body["reason"] == "Invalid"
    assert body["message"].startswith('ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"')


def test_body_over_3mib_is_413(api, namespace):
    r = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("big", x="a" * (3 * 1024 * 1024 + 10)))
    assert r.status_code == 413 and status_of(r)["reason"] == "RequestEntityTooLarge"


def test_unknown_resource_is_404(api):
    r = api.get("/api/v1/widgets")
    assert r.status_code == 404 and status_of(r)["reason"] == "NotFound"
    assert api.get("/apis/nope.example.com/v1/things").status_code == 404


def test_unsupported_verb_is_405(api, namespace):
    r = api.req("PUT", f"/api/v1/namespaces/{namespace}/configmaps", json={})
    assert r.status_code == 405 and status_of(r)["reason"] == "MethodNotAllowed"


# --- health, metrics, version -----------------------------------------------------

def test_health_endpoints(api):
    for p in ("/livez", "/readyz", "/healthz"):
        r = api.get(p)
        assert r.status_code == 200 and r.text == "ok"
    r = api.get("/readyz", params={"verbose": "1"})
    assert "[+]etcd ok" in r.text and r.text.endswith("readyz check passed\n")
    assert api.get("/readyz/etcd").text == "ok"
    # The etcd check reads one key, /registry/health, as upstream's prober (factory/etcd3.go): never a range
    # over the prefix, which etcd answers by walking (counting) every key under it. (kube-apiserver does not
    # count its prober's reads in etcd_requests_total.)
    if api.mode == "kube":
        return
    text = api.get("/metrics").text
    assert 'etcd_requests_total{operation="get",type="healthz"}' in text
    assert 'operation="getCurrentResourceVersion",type="healthz"' not in text


def test_metrics_have_upstream_names(api, namespace):
    api.get(f"/api/v1/namespaces/{namespace}/configmaps")
    text = api.get("/metrics").text
    for name in ("apiserver_request_total", "apiserver_request_duration_seconds", "etcd_requests_total",
                 "etcd_request_duration_seconds", "apiserver_resource_objects"):
        assert name in text, name
    assert 'verb="LIST"' in text and 'resource="configmaps"' in text


def metric_samples(api) -> tuple[dict, dict]:
    """/metrics as ({(sample name, frozenset(labels)): value}, {family: help}); the stability marker
    kube-apiserver puts before a help text ("[ALPHA] ") is dropped."""
    from prometheus_client.parser import text_string_to_metric_families
    samples, helps = {}, {}
    for fam in text_string_to_metric_families(api.get("/metrics").text):
        helps[fam.name] = fam.documentation.split("] ", 1)[1] if fam.documentation.startswith("[") else \
            fam.documentation
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, helps


SLI_BUCKETS = [0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, float("inf")]


def test_request_sli_duration_seconds(api, namespace):
    """apiserver_request_sli_duration_seconds as kube-apiserver v1.37.2 exposes it (k8s.io/apiserver
    pkg/endpoints/metrics): apiserver_request_duration_seconds' labels but dry_run, its own buckets, observed
    for a GET and a LIST but never for a WATCH (?watch=1 or a legacy /watch/ path) nor a dryRun request."""
    ns = f"/api/v1/namespaces/{namespace}/configmaps"
    assert api.post(ns, cm("sli")).status_code == 201
    sli = "apiserver_request_sli_duration_seconds"
    base = {"group": "", "version": "v1", "resource": "configmaps", "subresource": "", "component": "apiserver"}
    key = lambda name, **labels: (name, frozenset({**base, **labels}.items()))  # noqa: E731
    get_count = key(sli + "_count", verb="GET", scope="resource")
    list_count = key(sli + "_count", verb="LIST", scope="namespace")
    post_count = key(sli + "_count", verb="POST", scope="resource")
    watches = key("apiserver_request_duration_seconds_count", verb="WATCH", scope="namespace", dry_run="")
    dry_posts = key("apiserver_request_duration_seconds_count", verb="POST", scope="resource", dry_run="All")
    before, _ = metric_samples(api)

    assert api.get(f"{ns}/sli").status_code == 200
    assert api.get(ns).status_code == 200
    assert api.get(ns, params={"watch": "1", "timeoutSeconds": "1"}).status_code == 200
    legacy = f"/api/v1/watch/namespaces/{namespace}/configmaps"  # the deprecated /watch/ path: a WATCH too
    assert api.get(legacy, params={"timeoutSeconds": "1"}).status_code == 200
    assert api.post(ns, cm("dry"), params={"dryRun": "All"}).status_code == 201

    delta = lambda k: after.get(k, 0) - before.get(k, 0)  # noqa: E731
    deadline = time.monotonic() + 5  # a request is counted once its handler returns, maybe after the reply
    while True:
        after, helps = metric_samples(api)
        if (delta(get_count) >= 1 and delta(list_count) >= 1 and delta(watches) >= 2 and delta(dry_posts) >= 1
                or time.monotonic() > deadline):
            break
        time.sleep(0.1)
    assert delta(get_count) >= 1 and delta(list_count) >= 1, (delta(get_count), delta(list_count))
    assert delta(watches) >= 2 and delta(dry_posts) == 1, (delta(watches), delta(dry_posts))  # counted there
    assert delta(post_count) == 0  # the dryRun POST is not in the SLI
    assert helps[sli] == ("Response latency distribution (not counting webhook duration and priority & fairness "
                          "queue wait times) in seconds for each verb, group, version, resource, subresource, "
                          "scope and component.")
    series = [dict(labels) for (name, labels) in after if name.startswith(sli + "_")]
    label_names = {"verb", "group", "version", "resource", "subresource", "scope", "component"}
    assert series and all(set(s) - {"le"} == label_names for s in series)
    assert not [s for s in series if s["verb"] == "WATCH"]
    for verb, scope in (("GET", "resource"), ("LIST", "namespace")):
        want = {**base, "verb": verb, "scope": scope}
        les = sorted(float(s["le"]) for s in series if "le" in s and {**s, "le": None} == {**want, "le": None})
        assert les == SLI_BUCKETS, (verb, les)  # compared as numbers: Go writes le="1", Python le="1.0"
        count = after[key(sli + "_count", verb=verb, scope=scope)]
        assert after[key(sli + "_bucket", verb=verb, scope=scope, le="+Inf")] == count


def test_version(api):
    v = api.get("/version").json()
    assert v["major"] == "1" and "gitVersion" in v


def test_pod_spec_is_immutable_but_for_images(api, namespace):
    pod = {"metadata": {"name": "imm"}, "spec": {"containers": [{"name": "a", "image": "a:1",
                                                                  "env": [{"name": "X", "value": "1"}]}]}}
    assert api.post(f"/api/v1/namespaces/{namespace}/pods", pod).status_code == 201
    r = api.patch(f"/api/v1/namespaces/{namespace}/pods/imm",
                  {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}, "application/strategic-merge-patch+json")
    assert r.status_code == 200, r.text
    r = api.patch(f"/api/v1/namespaces/{namespace}/pods/imm",
                  {"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "2"}]}]}},
                  "application/strategic-merge-patch+json")
    assert r.status_code == 422
    assert "spec: Forbidden: pod updates may not change fields other than" in status_of(r)["message"]


def test_aggregated_discovery(api):
    accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    r = api.get("/apis", headers={"Accept": accept})
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    doc = r.json()
    assert doc["kind"] == "APIGroupDiscoveryList"
    assert "coordination.k8s.io" in {g["metadata"]["name"] for g in doc["items"]}


def test_watch_bookmarks_when_allowed(api, namespace):
    """S4.10-S4.12: a bookmark before timeoutSeconds ends, with an RV past the start RV."""
    v = api.post(f"/api/v1/namespaces/{namespace}/configmaps", cm("bm")).json()
    rv = int(v["metadata"]["resourceVersion"])
    r = api.get(f"/api/v1/namespaces/{namespace}/configmaps",
                params={"watch": "1", "resourceVersion": str(rv), "allowWatchBookmarks": "true",
                        "timeoutSeconds": "4"}, stream=True)
    time.sleep(0.5)
    # A write of the same resource in another namespace: not delivered to this watcher,
    # but it moves the RV a bookmark may carry (S1.2).
    other = api.post("/api/v1/namespaces", {"metadata": {"name": f"{namespace}-o"}})
    assert other.status_code == 201
    assert api.post(f"/api/v1/namespaces/{namespace}-o/configmaps", cm("x")).status_code == 201
    evs = [json.loads(l) for l in r.iter_lines() if l]
    bms = [e for e in evs if e["type"] == "BOOKMARK"]
    assert bms, evs
    assert bms[0]["object"] == {"kind": "ConfigMap", "apiVersion": "v1",
                                "metadata": {"resourceVersion": bms[0]["object"]["metadata"]["resourceVersion"]}}
    assert int(bms[0]["object"]["metadata"]["resourceVersion"]) > rv
    assert all(e["type"] == "BOOKMARK" for e in evs)
