"""machinery.patch: merge patch, JSON patch, strategic merge patch and the PATCH dispatcher.

Expected behaviour is upstream's: k8s.io/apiserver handlers/patch.go (status codes),
gopkg.in/evanphx/json-patch.v4 (JSON/merge patch engine), k8s.io/apimachinery
util/strategicpatch (strategic merge) and the patch tags of k8s.io/api types.
"""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings, strategies as st

from machinery.errors import StatusError
from machinery.patch import (STRATEGIC_SCHEMA, apply_patch, json_merge_patch, json_patch,
                             strategic_merge_patch)

GENERIC_422 = "the server rejected our request due to an error in our request"

json_scalars = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5)
json_values = st.recursive(json_scalars,
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
                           max_leaves=10)
json_docs = st.dictionaries(st.text(max_size=4), json_values, max_size=4)


def _raises(fn, *a) -> StatusError:
    with pytest.raises(StatusError) as ei:
        fn(*a)
    return ei.value


# ----------------------------------------------------------------------------- merge patch

def test_merge_patch_rfc7386_examples():
    # RFC 7386 appendix A (subset)
    assert json_merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert json_merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert json_merge_patch({"a": "b"}, {"a": None}) == {}
    assert json_merge_patch({"a": ["b"]}, {"a": "c"}) == {"a": "c"}
    assert json_merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert json_merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert json_merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}
    assert json_merge_patch({"a": "foo"}, ["c"]) == ["c"]
    assert json_merge_patch({}, {"a": {"bb": {"ccc": None}}}) == {"a": {"bb": {}}}


def test_merge_patch_does_not_mutate_inputs():
    doc, patch = {"a": {"b": 1}}, {"a": {"c": 2}}
    json_merge_patch(doc, patch)
    assert doc == {"a": {"b": 1}} and patch == {"a": {"c": 2}}


@given(json_docs)
def test_merge_patch_self_is_identity_without_nulls(doc):
    # a document without null members patched with itself is unchanged
    def strip(v):
        if isinstance(v, dict):
            return {k: strip(x) for k, x in v.items() if x is not None}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v
    d = strip(doc)
    assert json_merge_patch(d, d) == d


# ----------------------------------------------------------------------------- JSON patch

def test_json_patch_ops():
    doc = {"metadata": {"labels": {"a": "1"}}, "list": [1, 2, 3]}
    out = json_patch(doc, [
        {"op": "add", "path": "/metadata/labels/b", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "x"},
        {"op": "remove", "path": "/list/0"},
        {"op": "add", "path": "/list/-", "value": 4},
        {"op": "add", "path": "/list/0", "value": 0},
        {"op": "copy", "from": "/metadata/labels/b", "path": "/copied"},
        {"op": "move", "from": "/copied", "path": "/moved"},
        {"op": "test", "path": "/moved", "value": "2"},
    ])
    assert out == {"metadata": {"labels": {"a": "x", "b": "2"}}, "list": [0, 2, 3, 4], "moved": "2"}
    assert doc["list"] == [1, 2, 3]  # input untouched


def test_json_patch_pointer_escapes():
    doc = {"metadata": {"annotations": {"kubectl.kubernetes.io/x": "1", "a~b": "2"}}}
    out = json_patch(doc, [
        {"op": "remove", "path": "/metadata/annotations/kubectl.kubernetes.io~1x"},
        {"op": "replace", "path": "/metadata/annotations/a~0b", "value": "3"},
    ])
    assert out == {"metadata": {"annotations": {"a~b": "3"}}}


def test_json_patch_negative_index_like_v4():
    assert json_patch({"a": [1, 2, 3]}, [{"op": "remove", "path": "/a/-1"}]) == {"a": [1, 2]}


def test_json_patch_replace_missing_member_adds_like_v4():
    # json-patch v4 (vendored by the apiserver) does not check that the member exists
    assert json_patch({"a": {}}, [{"op": "replace", "path": "/a/b", "value": 1}]) == {"a": {"b": 1}}


@pytest.mark.parametrize("ops", [
    [{"op": "test", "path": "/a", "value": 2}],                 # failed test
    [{"op": "test", "path": "/a", "value": True}],              # 1 is not true
    [{"op": "remove", "path": "/nope"}],                        # missing key
    [{"op": "add", "path": "/x/y/z", "value": 1}],              # missing parent
    [{"op": "add", "path": "/l/5", "value": 1}],                # index out of range
    [{"op": "replace", "path": "/l/2", "value": 1}],
    [{"op": "frobnicate", "path": "/a"}],                       # unknown op
    [{"path": "/a"}],                                           # no op
    [{"op": "move", "from": "/nope", "path": "/b"}],
    [{"op": "copy", "from": "/nope", "path": "/b"}],
    [{"op": "add", "path": "", "value": 1}],                    # whole-document ops are not supported by v4
])
def test_json_patch_failures_are_generic_422(ops):
    # handlers/patch.go: patchObj.Apply error -> NewGenericServerResponse(422, ...): reason
    # Invalid, generic message, the engine's text is not sent.
    e = _raises(json_patch, {"a": 1, "l": [0, 1]}, ops)
    assert (e.code, e.reason, e.message) == (422, "Invalid", GENERIC_422)
    assert "causes" not in e.status().get("details", {})


def test_json_patch_failure_is_atomic():
    doc = {"a": 1}
    _raises(json_patch, doc, [{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/zz"}])
    assert doc == {"a": 1}


def test_json_patch_too_many_operations_413():
    e = _raises(json_patch, {}, [{"op": "test", "path": "/a", "value": None}] * 10001)
    assert e.code == 413 and e.reason == "RequestEntityTooLarge"
    assert "The allowed maximum operations in a JSON patch is 10000, got 10001" in e.message


@settings(max_examples=75)
@given(json_docs, st.text(min_size=1, max_size=6), json_values)
def test_json_patch_add_then_remove_restores(doc, key, value):
    if key in doc:
        return
    ptr = "/" + key.replace("~", "~0").replace("/", "~1")
    added = json_patch(doc, [{"op": "add", "path": ptr, "value": value}])
    assert added[key] == value
    assert json_patch(added, [{"op": "remove", "path": ptr}]) == doc


# ----------------------------------------------------------------------------- strategic merge

def pod(*containers, **spec):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "finalizers": ["a.io/x"]},
            "spec": {"containers": [dict(c) for c in containers], **spec}}


C_A = {"name": "a", "image": "nginx:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
       "ports": [{"containerPort": 80}], "volumeMounts": [{"name": "v", "mountPath": "/data"}]}
C_B = {"name": "b", "image": "busybox"}


def test_smp_maps_merge_and_null_deletes():
    doc = {"metadata": {"name": "c", "labels": {"a": "1", "b": "2"}}, "data": {"k": "v", "gone": "x"}}
    out = strategic_merge_patch(doc, {"metadata": {"labels": {"b": None, "c": "3"}},
                                      "data": {"gone": None, "new": "n"}}, "configmaps")
    assert out == {"metadata": {"name": "c", "labels": {"a": "1", "c": "3"}}, "data": {"k": "v", "new": "n"}}


def test_smp_containers_merge_by_name_and_nested_lists_by_key():
    out = strategic_merge_patch(pod(C_A, C_B), {"spec": {"containers": [
        {"name": "a", "image": "nginx:2", "env": [{"name": "Y", "value": "22"}, {"name": "Z", "value": "3"}],
         "ports": [{"containerPort": 443}], "volumeMounts": [{"name": "w", "mountPath": "/data"}]},
    ]}}, "pods")
    a, b = out["spec"]["containers"]
    assert b == C_B
    assert a["image"] == "nginx:2"
    assert {e["name"]: e["value"] for e in a["env"]} == {"X": "1", "Y": "22", "Z": "3"}
    assert [p["containerPort"] for p in a["ports"]] == [443, 80]  # patch items first, then server-only
    assert a["volumeMounts"] == [{"name": "w", "mountPath": "/data"}]  # merged by mountPath


def test_smp_new_list_element_order_and_directive_delete():
    out = strategic_merge_patch(pod(C_A, C_B), {"spec": {"containers": [
        {"name": "c", "image": "c"}, {"name": "b", "$patch": "delete"}]}}, "pods")
    assert [c["name"] for c in out["spec"]["containers"]] == ["c", "a"]


def test_smp_list_replace_directive_and_map_directives():
    out = strategic_merge_patch(pod(C_A, C_B), {"spec": {"containers": [{"$patch": "replace"}, {"name": "z"}]}},
                                "pods")
    assert out["spec"]["containers"] == [{"name": "z"}]
    out = strategic_merge_patch({"spec": {"nodeSelector": {"a": "1"}}},
                                {"spec": {"nodeSelector": {"$patch": "replace", "b": "2"}}}, "pods")
    assert out["spec"]["nodeSelector"] == {"b": "2"}
    out = strategic_merge_patch({"spec": {"nodeSelector": {"a": "1"}, "x": 1}},
                                {"spec": {"nodeSelector": {"$patch": "delete"}}}, "pods")
    assert out["spec"]["nodeSelector"] == {}


def test_smp_unknown_map_directive_is_400():
    # handleDirectiveInMergeMap only knows replace/delete; upstream's plain Go error is a 500, a 400 here
    # (the patch is the client's mistake: docs/differences.md)
    e = _raises(strategic_merge_patch, {"spec": {}}, {"spec": {"$patch": "merge", "a": 1}}, "pods")
    assert e.code == 400 and e.message.startswith("unknown patch type: merge in map: map[")


def test_smp_lists_without_merge_key_are_replaced():
    doc = pod(C_A, tolerations=[{"key": "a", "operator": "Exists"}])
    out = strategic_merge_patch(doc, {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}, "pods")
    assert out["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    # container args / command are atomic too
    out = strategic_merge_patch(pod({"name": "a", "args": ["x", "y"]}),
                                {"spec": {"containers": [{"name": "a", "args": ["z"]}]}}, "pods")
    assert out["spec"]["containers"][0]["args"] == ["z"]


def test_smp_finalizers_union_and_delete_from_primitive_list():
    out = strategic_merge_patch(pod(C_A), {"metadata": {"finalizers": ["b.io/y", "a.io/x"]}}, "pods")
    assert sorted(out["metadata"]["finalizers"]) == ["a.io/x", "b.io/y"]
    out = strategic_merge_patch(out, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/x"]}}, "pods")
    assert out["metadata"]["finalizers"] == ["b.io/y"]


def test_smp_other_tables():
    svc = {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}}
    out = strategic_merge_patch(svc, {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}, "services")
    assert out["spec"]["ports"] == [{"port": 80, "targetPort": 9090}, {"port": 443}]
    node = {"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "DiskPressure",
                                                                            "status": "False"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}
    out = strategic_merge_patch(node, {"status": {"conditions": [{"type": "Ready", "status": "True"}],
                                                  "addresses": [{"type": "Hostname", "address": "n1"}]}}, "nodes")
    assert {c["type"]: c["status"] for c in out["status"]["conditions"]} == {"Ready": "True",
                                                                              "DiskPressure": "False"}
    assert len(out["status"]["addresses"]) == 2
    refs = {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]}}
    out = strategic_merge_patch(refs, {"metadata": {"ownerReferences": [{"uid": "2", "name": "c"}]}}, "roles")
    assert out["metadata"]["ownerReferences"] == [{"uid": "1", "name": "a"}, {"uid": "2", "name": "c"}]
    # RBAC rules have no merge key: replaced
    out = strategic_merge_patch({"rules": [{"verbs": ["get"]}]}, {"rules": [{"verbs": ["list"]}]}, "roles")
    assert out["rules"] == [{"verbs": ["list"]}]


def test_smp_retain_keys():
    doc = {"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}}
    out = strategic_merge_patch(doc, {"spec": {"volumes": [
        {"name": "v", "$retainKeys": ["emptyDir", "name"], "emptyDir": {}}]}}, "pods")
    assert out["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]
    # a patch key outside $retainKeys: ErrPatchContentNotMatchRetainKeys -> generic 422
    e = _raises(strategic_merge_patch, doc, {"spec": {"volumes": [
        {"name": "v", "$retainKeys": ["name"], "emptyDir": {}}]}}, "pods")
    assert (e.code, e.message) == (422, GENERIC_422)
    e = _raises(strategic_merge_patch, doc, {"spec": {"$retainKeys": "x"}}, "pods")
    assert (e.code, e.message) == (400, "invalid patch format of retainKeys")


def test_smp_missing_merge_key_is_400_with_the_engines_text():
    e = _raises(strategic_merge_patch, pod(C_A), {"spec": {"containers": [{"image": "x"}]}}, "pods")
    assert (e.code, e.reason) == (400, "BadRequest")  # upstream: 500, no reason
    assert e.message == "map: map[image:x] does not contain declared merge key: name"


def test_smp_list_of_lists_422():
    e = _raises(strategic_merge_patch, {"metadata": {"finalizers": [["a"]]}},
                {"metadata": {"finalizers": [["b"]]}}, "pods")
    assert (e.code, e.message) == (422, GENERIC_422)


def test_smp_custom_resource_415():
    e = _raises(strategic_merge_patch, {}, {}, "widgets")
    assert e.code == 415 and e.reason == "UnsupportedMediaType"
    assert e.message == ("the body of the request was in an unknown format - accepted media types include: "
                         "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")


def test_smp_new_subtree_drops_nulls_and_directives():
    out = strategic_merge_patch({"metadata": {"name": "x"}}, {"spec": {"containers": [
        {"name": "a", "env": [{"name": "E", "value": None}], "$setElementOrder/env": [{"name": "E"}]}],
        "nodeSelector": {"a": None, "b": "1"}}}, "pods")
    assert out["spec"] == {"containers": [{"name": "a", "env": [{"name": "E"}]}], "nodeSelector": {"b": "1"}}


container_names = st.lists(st.sampled_from("abcdefgh"), unique=True, max_size=6)


@given(container_names, container_names, st.integers(0, 3))
def test_smp_merge_by_key_preserves_untouched_entries(live_names, patch_names, salt):
    live = pod(*({"name": n, "image": f"{n}:live", "tty": True} for n in live_names))
    patch = {"spec": {"containers": [{"name": n, "image": f"{n}:{salt}"} for n in patch_names]}}
    out = strategic_merge_patch(live, patch, "pods")
    got = {c["name"]: c for c in out["spec"]["containers"]}
    assert len(got) == len(out["spec"]["containers"])  # no duplicates
    assert set(got) == set(live_names) | set(patch_names)
    for n in live_names:
        if n not in patch_names:
            assert got[n] == {"name": n, "image": f"{n}:live", "tty": True}
        else:
            assert got[n] == {"name": n, "image": f"{n}:{salt}", "tty": True}
    # relative order of the patch is kept
    order = [c["name"] for c in out["spec"]["containers"] if c["name"] in patch_names]
    assert order == list(patch_names)


@given(json_docs)
def test_smp_with_empty_patch_is_identity(doc):
    d = json_merge_patch({}, doc)  # strip nulls
    assert strategic_merge_patch(d, {}, "configmaps") == d


# ----------------------------------------------------------------------------- kubectl apply scenarios

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def test_kubectl_apply_three_way_patch_on_pod():
    # live pod: created by `kubectl apply` with containers [app, old], then a sidecar was
    # injected by someone else. The new manifest changes app's image, drops "old", adds "log".
    live = pod({"name": "app", "image": "app:1"}, {"name": "old", "image": "old:1"},
               {"name": "sidecar", "image": "proxy:1"})
    live["metadata"]["annotations"] = {LAST_APPLIED: '{"old":"config"}\n', "other": "keep"}
    new_applied = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}) + "\n"
    # what kubectl's CreateThreeWayMergePatch sends
    patch = {
        "metadata": {"annotations": {LAST_APPLIED: new_applied}},
        "spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "log"}],
            "containers": [{"image": "app:2", "name": "app"}, {"image": "log:1", "name": "log"},
                           {"$patch": "delete", "name": "old"}],
        },
    }
    body = json.dumps(patch).encode()
    out = apply_patch(copy.deepcopy(live), "application/strategic-merge-patch+json", body, "pods", False)
    assert out["metadata"]["annotations"] == {LAST_APPLIED: new_applied, "other": "keep"}
    assert out["metadata"]["finalizers"] == ["a.io/x"]
    assert out["spec"]["containers"] == [{"name": "app", "image": "app:2"}, {"name": "log", "image": "log:1"},
                                         {"name": "sidecar", "image": "proxy:1"}]


def test_kubectl_apply_set_element_order_reorders_existing():
    live = pod({"name": "a", "image": "a"}, {"name": "b", "image": "b"}, {"name": "c", "image": "c"})
    patch = {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]}}
    out = strategic_merge_patch(live, patch, "pods")
    assert [c["name"] for c in out["spec"]["containers"]] == ["c", "a", "b"]


def test_kubectl_apply_configmap():
    live = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "resourceVersion": "5",
                         "annotations": {LAST_APPLIED: "{}\n"}},
            "data": {"keep": "1", "drop": "2", "change": "3"}}
    patch = {"data": {"change": "33", "drop": None, "add": "4"},
             "metadata": {"annotations": {LAST_APPLIED: '{"data":{}}\n'}}}
    out = apply_patch(live, "application/strategic-merge-patch+json; charset=utf-8",
                      json.dumps(patch).encode(), "configmaps", False)
    assert out["data"] == {"keep": "1", "change": "33", "add": "4"}
    assert out["metadata"]["annotations"][LAST_APPLIED] == '{"data":{}}\n'
    assert out["metadata"]["resourceVersion"] == "5"


def test_set_element_order_mismatch_is_rejected():
    e = _raises(strategic_merge_patch, pod(C_A, C_B), {"spec": {
        "$setElementOrder/containers": [{"name": "a"}],
        "containers": [{"name": "b", "image": "x"}]}}, "pods")
    assert e.code == 400 and "doesn't match $setElementOrder list" in e.message


# ----------------------------------------------------------------------------- dispatch / errors

def test_apply_patch_dispatch():
    doc = {"metadata": {"name": "x", "labels": {"a": "1"}}}
    assert apply_patch(doc, "application/merge-patch+json", b'{"metadata":{"labels":{"a":null}}}',
                       "configmaps", False) == {"metadata": {"name": "x", "labels": {}}}
    assert apply_patch(doc, "application/json-patch+json",
                       b'[{"op":"add","path":"/metadata/labels/b","value":"2"}]', "widgets", True) == \
        {"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}}


@pytest.mark.parametrize("ct,body,msg", [
    ("application/json-patch+json", b"{", "error decoding patch: unexpected end of JSON input"),
    ("application/json-patch+json", b"x", "error decoding patch: invalid character 'x' looking for beginning of value"),
    ("application/json-patch+json", b"{}",
     "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"),
    ("application/merge-patch+json", b"[1]",
     "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}"),
    ("application/merge-patch+json", b"null", "Invalid JSON Patch"),
    # upstream's text (kjson.UnmarshalStrict / UnmarshalCaseSensitivePreserveInts, Go 1.26): the scanner
    # fails at the 'o' of a would-be null, not at the 'n'
    ("application/strategic-merge-patch+json", b"nope",
     "invalid character 'o' in literal null (expecting 'u')"),
    # more texts as Go prints them for the same bodies (kjson.UnmarshalStrict into []jsonPatchOp /
    # map[string]interface{}): type errors in document order, syntax errors with Go's quoteChar
    ("application/json-patch+json", b'[{"path":1,"op":2}]',
     "error decoding patch: json: cannot unmarshal number into Go struct field jsonPatchOp.path of type string"),
    ("application/json-patch+json", b"[1]",
     "error decoding patch: json: cannot unmarshal number into Go value of type handlers.jsonPatchOp"),
    ("application/json-patch+json", b'[{"op":"add" "path":"/a"}]',
     "error decoding patch: invalid character '\"' after object key:value pair"),
    ("application/json-patch+json", b"\xff", "error decoding patch: invalid character 'ÿ' looking for beginning of value"),
    ("application/merge-patch+json", b'{"a":NaN}',
     "error decoding patch: invalid character 'N' looking for beginning of value"),
    ("application/strategic-merge-patch+json", b'{"a":1}\x01', "invalid character '\\x01' after top-level value"),
    ("application/strategic-merge-patch+json", b'"s"',
     "json: cannot unmarshal string into Go value of type map[string]interface {}"),
])
def test_malformed_bodies_400(ct, body, msg):
    e = _raises(apply_patch, {}, ct, body, "configmaps", False)
    assert (e.code, e.reason, e.message) == (400, "BadRequest", msg)


def test_patch_body_decodes_as_go():
    # encoding/json: invalid UTF-8 inside a string and a lone surrogate escape decode to U+FFFD (no error)
    assert apply_patch({"metadata": {"name": "x"}}, "application/merge-patch+json",
                       b'{"data":{"a":"\xffz","b":"\\ud800"}}', "configmaps", False) == \
        {"metadata": {"name": "x"}, "data": {"a": "\ufffdz", "b": "\ufffd"}}


def test_unsupported_content_types_415():
    e = _raises(apply_patch, {}, "application/json", b"{}", "configmaps", False)
    assert e.code == 415
    assert e.message.endswith("application/json-patch+json, application/merge-patch+json, "
                              "application/strategic-merge-patch+json, application/apply-patch+yaml")
    # strategic merge patch on a custom resource: not in the CR's accepted list
    e = _raises(apply_patch, {}, "application/strategic-merge-patch+json", b"{}", "widgets", True)
    assert e.code == 415 and "strategic" not in e.message
    # server-side apply is not implemented here
    e = _raises(apply_patch, {}, "application/apply-patch+yaml", b"a: 1", "configmaps", False)
    assert e.code == 415 and "apply-patch+yaml" not in e.message


def test_schema_covers_the_kinds_kubectl_applies():
    # every served built-in kind, from upstream's published OpenAPI (machinery/strategic_merge.json)
    from machinery.resources import BUILTINS
    assert set(STRATEGIC_SCHEMA) == {r.plural for r in BUILTINS}
    assert STRATEGIC_SCHEMA["deployments"]["spec.template.spec.containers"] == ("merge", "name")
    assert STRATEGIC_SCHEMA["deployments"]["spec.template.spec.containers[].ports"] == ("merge", "containerPort")
    assert STRATEGIC_SCHEMA["nodes"]["status.conditions"] == ("merge", "type")
