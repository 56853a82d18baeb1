"""What kube-scheduler, kwok and kubectl rely on beyond CRUD (issue 13 §1), run differentially: against our
apiserver (watch cache on, and off) and the real kube-apiserver v1.37.2 (`api.mode == "kube"`); every
assertion of upstream behaviour holds on all three.

* `pods/binding` and the legacy `bindings` collection (upstream's BindingREST, pkg/registry/core/pod/storage):
  spec.nodeName, the Binding's annotations, the PodScheduled condition, 409 when bound or being deleted, 404
  for a missing pod, ValidatePodBinding's aggregate (a 500 without a reason upstream), JSON and protobuf.
* What a created object reads back as, compared with what kube-apiserver stores for the same body: the
  scheme's defaulters (SetDefaults_Pod/PodSpec/Container, the workload kinds' defaults), the registry
  strategies' create-time fields, the DefaultTolerationSeconds and Priority admission plugins.
* The `scale` subresource of deployments, replicasets, statefulsets and replicationcontrollers.
* Table output of the workload kinds (printers.go), headers from machinery/table_columns.json, which is
  checked against the running kube-apiserver.
"""
from __future__ import annotations

import copy
import json
import re
import sys
import time

import pytest

from tests.helpers import Api


@pytest.fixture
def api(differential_api):
    return differential_api


@pytest.fixture(scope="module")
def kube(kube_apiserver):
    a = Api(kube_apiserver.url, cert=kube_apiserver.client_cert, verify=kube_apiserver.ca)
    a.mode = "kube"
    return a


def status_of(r):
    body = r.json()
    assert body["kind"] == "Status" and body["apiVersion"] == "v1", body
    return body


POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "nginx"}]}}
SUCCESS_201 = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


def binding(name, node="n1", **extra):
    return {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, **extra},
            "target": {"kind": "Node", "name": node}}


# --- pods/binding -------------------------------------------------------------------------------------

def test_binding_sets_node_annotations_and_condition(api, namespace):
    base = f"/api/v1/namespaces/{namespace}/pods"
    created = api.post(base, POD)
    assert created.status_code == 201, created.text
    r = api.post(f"{base}/p/binding", binding("p", annotations={"scheduler.example.com/x": "y"}))
    assert r.status_code == 201, r.text
    assert r.json() == SUCCESS_201
    pod = api.get(f"{base}/p").json()
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"] == {"scheduler.example.com/x": "y"}
    assert pod["metadata"]["generation"] == 1  # the binding bypasses the strategy: no generation bump
    assert int(pod["metadata"]["resourceVersion"]) > int(created.json()["metadata"]["resourceVersion"])
    cond = pod["status"]["conditions"]
    assert [(c["type"], c["status"], c["lastProbeTime"]) for c in cond] == [("PodScheduled", "True", None)]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cond[0]["lastTransitionTime"])
    assert list(cond[0]) == ["type", "status", "lastProbeTime", "lastTransitionTime"]


def test_binding_twice_is_409_on_pods_binding(api, namespace):
    base = f"/api/v1/namespaces/{namespace}/pods"
    assert api.post(base, POD).status_code == 201
    assert api.post(f"{base}/p/binding", binding("p")).status_code == 201
    r = api.post(f"{base}/p/binding", binding("p", node="n2"))
    assert r.status_code == 409
    assert status_of(r) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1"',
        "reason": "Conflict", "details": {"name": "p", "kind": "pods/binding"}, "code": 409}
    assert api.get(f"{base}/p").json()["spec"]["nodeName"] == "n1"
    # a pod created with spec.nodeName is bound already
    bound = copy.deepcopy(POD)
    bound["metadata"]["name"] = "q"
    bound["spec"]["nodeName"] = "n9"
    assert api.post(base, bound).status_code == 201
    r = api.post(f"{base}/q/binding", binding("q"))
    assert r.status_code == 409 and 'pod q is already assigned to node "n9"' in status_of(r)["message"]


def test_binding_of_missing_or_deleting_pod(api, namespace):
    base = f"/api/v1/namespaces/{namespace}/pods"
    r = api.post(f"{base}/nope/binding", binding("nope"))
    assert r.status_code == 404
    assert status_of(r)["message"] == 'pods "nope" not found'
    assert status_of(r)["details"] == {"name": "nope", "kind": "pods"}
    held = copy.deepcopy(POD)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    assert api.post(base, held).status_code == 201
    assert api.delete(f"{base}/p").status_code == 200
    try:
        r = api.post(f"{base}/p/binding", binding("p"))
        assert r.status_code == 409
        assert status_of(r)["message"] == ('Operation cannot be fulfilled on pods/binding "p": pod p is being '
                                           'deleted, cannot be assigned to a host')
    finally:
        cur = api.get(f"{base}/p").json()
        cur["metadata"]["finalizers"] = []
        api.put(f"{base}/p", cur)


def test_legacy_bindings_collection(api, namespace):
    base = f"/api/v1/namespaces/{namespace}"
    assert api.post(f"{base}/pods", POD).status_code == 201
    r = api.post(f"{base}/bindings", binding("p", node="n7"))
    assert r.status_code == 201 and r.json() == SUCCESS_201
    assert api.get(f"{base}/pods/p").json()["spec"]["nodeName"] == "n7"
    r = api.post(f"{base}/bindings", binding("missing"))
    assert r.status_code == 404 and status_of(r)["message"] == 'pods "missing" not found'
    for verb in ("GET", "PUT", "DELETE"):
        r = api.req(verb, f"{base}/bindings", json={} if verb == "PUT" else None)
        assert r.status_code == 405 and status_of(r)["reason"] == "MethodNotAllowed", verb


def test_binding_bad_requests(api, namespace):
    base = f"/api/v1/namespaces/{namespace}/pods"
    assert api.post(base, POD).status_code == 201
    r = api.post(f"{base}/p/binding", binding("other"))
    assert r.status_code == 400
    assert status_of(r)["message"] == "name in URL does not match name in Binding object"
    r = api.post(f"{base}/p/binding", binding("p", namespace="elsewhere"))
    assert r.status_code == 400 and status_of(r)["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request")
    # ValidatePodBinding's errors come back as an aggregate, which upstream answers as a 500 without a reason
    r = api.post(f"{base}/p/binding", dict(binding("p"), target={"kind": "Pod"}))
    assert r.status_code == 500
    assert status_of(r) == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": '[target.kind: Unsupported value: "Pod": supported values: "Node", '
                                       '"<empty>", target.name: Required value]', "code": 500}
    r = api.post(f"{base}/p/binding", {"metadata": {"name": "p"}, "target": {}})
    assert r.status_code == 500 and status_of(r)["message"] == "target.name: Required value"
    r = api.post(f"{base}/p/binding", {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}})
    assert r.status_code == 400 and status_of(r)["message"] == (
        'Pod in version "v1" cannot be handled as a Binding: converting (v1.Pod) to (core.Binding): unknown '
        'conversion')
    for verb in ("GET", "PUT", "PATCH", "DELETE"):
        r = api.req(verb, f"{base}/p/binding", data="{}", headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 405 and status_of(r)["reason"] == "MethodNotAllowed", verb
    assert "nodeName" not in api.get(f"{base}/p").json()["spec"]  # nothing bound along the way


def test_binding_dry_run(api, namespace):
    base = f"/api/v1/namespaces/{namespace}/pods"
    assert api.post(base, POD).status_code == 201
    r = api.post(f"{base}/p/binding", binding("p"), params={"dryRun": "All"})
    assert r.status_code == 201 and r.json() == SUCCESS_201
    assert "nodeName" not in api.get(f"{base}/p").json()["spec"]
    r = api.post(f"{base}/p/binding", binding("p"), params={"dryRun": "X"})
    assert r.status_code == 422 and status_of(r)["details"]["kind"] == "CreateOptions"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num: int, payload: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def protobuf_binding(name: str, node: str, annotations: dict[str, str]) -> bytes:
    """A v1 Binding as client-go's protobuf serializer writes it (kube-scheduler's binder): the `k8s\\0`
    magic and a runtime.Unknown with the type meta and the Binding message (ObjectMeta name=1,
    annotations=12; ObjectReference kind=1, name=3)."""
    meta = _field(1, name.encode()) + b"".join(
        _field(12, _field(1, k.encode()) + _field(2, v.encode())) for k, v in annotations.items())
    msg = _field(1, meta) + _field(2, _field(1, b"Node") + _field(3, node.encode()))
    unknown = _field(1, _field(1, b"v1") + _field(2, b"Binding")) + _field(2, msg) + _field(3, b"") + _field(4, b"")
    return b"k8s\x00" + unknown


def test_binding_in_protobuf(api, namespace):
    """kube-scheduler posts its Binding as application/vnd.kubernetes.protobuf."""
    base = f"/api/v1/namespaces/{namespace}/pods"
    assert api.post(base, POD).status_code == 201
    r = api.req("POST", f"{base}/p/binding", data=protobuf_binding("p", "n3", {"a": "b"}),
                headers={"Content-Type": "application/vnd.kubernetes.protobuf", "Accept": "application/json"})
    assert r.status_code == 201, r.text
    pod = api.get(f"{base}/p").json()
    assert pod["spec"]["nodeName"] == "n3" and pod["metadata"]["annotations"] == {"a": "b"}


# --- what a created object reads back as, against kube-apiserver ----------------------------------------

_TIME = re.compile(r'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"')
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _normalised(obj: dict, ns: str) -> dict:
    """Server-chosen values replaced: uid (also in Job selectors and labels), times, RV, managedFields
    (not maintained here, docs/differences.md), the namespace."""
    obj = copy.deepcopy(obj)
    md = obj.get("metadata", {})
    for k in ("resourceVersion", "managedFields"):
        md.pop(k, None)
    text = _UID.sub("<uid>", _TIME.sub('"<time>"', json.dumps(obj))).replace(f'"{ns}"', '"<ns>"')
    return json.loads(text)


def _created_on_both(api, kube, path: str, body: dict) -> tuple[dict, dict]:
    """Create `body` at `path` (with {ns}) on the server under test and on kube-apiserver, each in a fresh
    namespace; both answers (and both GETs, which must equal them) normalised."""
    got = []
    for srv in ([api] if api.mode == "kube" else [api, kube]):
        ns = f"dflt-{srv.mode}-{time.monotonic_ns() % 10**9}"
        assert srv.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
        p = path.format(ns=ns)
        r = srv.post(p, body)
        assert r.status_code == 201, r.text
        g = srv.get(f"{p}/{r.json()['metadata']['name']}")
        assert g.status_code == 200 and g.json() == r.json()
        got.append(_normalised(r.json(), ns))
    return got[0], got[-1]


PODS = {
    "plain": {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "busybox:1.2"},
                       {"name": "c", "image": "registry.example.com:5000/team/app@sha256:" + "a" * 64}],
        "initContainers": [{"name": "i", "image": "x:latest"}]}},
    "everything": {"metadata": {"name": "q", "labels": {"app": "q"}}, "spec": {
        "schedulingGates": [{"name": "example.com/gate"}],
        "containers": [{"name": "a", "image": "nginx:1.27", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                        "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}],
                        "livenessProbe": {"httpGet": {"port": 80}}, "readinessProbe": {"tcpSocket": {"port": 80}},
                        "lifecycle": {"preStop": {"httpGet": {"port": 8080}}},
                        "env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "B", "value": "b"}]}],
        "volumes": [{"name": "v"}, {"name": "s", "secret": {"secretName": "x"}},
                    {"name": "c", "configMap": {"name": "x"}}, {"name": "h", "hostPath": {"path": "/x"}},
                    {"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
                    {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        "restartPolicy": "OnFailure", "dnsPolicy": "Default", "terminationGracePeriodSeconds": 5,
        "enableServiceLinks": False, "schedulerName": "my-scheduler", "serviceAccountName": "default"},
        "status": {"phase": "Running", "podIP": "10.0.0.1"}},  # status is dropped on create
    "burstable-hostnetwork": {"metadata": {"name": "r"}, "spec": {
        "hostNetwork": True, "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 8080}],
                        "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}}}]}},
    "system-priority": {"metadata": {"name": "s"}, "spec": {
        "priorityClassName": "system-node-critical", "containers": [{"name": "a", "image": "nginx"}]}},
}


@pytest.mark.parametrize("case", sorted(PODS))
def test_pod_defaults_equal_kube(api, kube, case):
    mine, theirs = _created_on_both(api, kube, "/api/v1/namespaces/{ns}/pods", PODS[case])
    assert mine == theirs
    assert list(mine["spec"]) == list(theirs["spec"])  # Go's field order
    spec = mine["spec"]
    assert spec["schedulerName"] and spec["restartPolicy"] and spec["dnsPolicy"]  # never left empty


def test_pod_defaults_spelled_out(api, namespace):
    """What kube-scheduler and kubectl read, spelled out (the same on every server)."""
    r = api.post(f"/api/v1/namespaces/{namespace}/pods", PODS["plain"])
    assert r.status_code == 201, r.text
    spec, status = r.json()["spec"], r.json()["status"]
    assert spec["schedulerName"] == "default-scheduler" and spec["restartPolicy"] == "Always"
    assert spec["dnsPolicy"] == "ClusterFirst" and spec["terminationGracePeriodSeconds"] == 30
    assert spec["securityContext"] == {} and spec["enableServiceLinks"] is True
    assert spec["priority"] == 0 and spec["preemptionPolicy"] == "PreemptLowerPriority"
    assert [c["imagePullPolicy"] for c in spec["containers"]] == ["Always", "IfNotPresent", "IfNotPresent"]
    assert spec["initContainers"][0]["imagePullPolicy"] == "Always"
    assert {(c["terminationMessagePath"], c["terminationMessagePolicy"]) for c in spec["containers"]} == {
        ("/dev/termination-log", "File")}
    assert [t["key"] for t in spec["tolerations"]] == ["node.kubernetes.io/not-ready",
                                                       "node.kubernetes.io/unreachable"]
    assert status == {"phase": "Pending", "qosClass": "BestEffort"}


def test_pod_priority_admission(api, namespace):
    base = f"/api/v1/namespaces/{namespace}/pods"
    body = copy.deepcopy(POD)
    body["spec"]["priority"] = 5
    r = api.post(base, body)
    assert r.status_code == 403
    assert status_of(r) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'pods "p" is forbidden: the integer value of priority (5) must not be provided in pod spec; '
                   'priority admission controller computed 0 from the given PriorityClass name',
        "reason": "Forbidden", "details": {"name": "p", "kind": "pods"}, "code": 403}
    body = copy.deepcopy(POD)
    body["spec"]["priorityClassName"] = "no-such-class"
    r = api.post(base, body)
    assert r.status_code == 403
    assert status_of(r)["message"] == 'pods "p" is forbidden: no PriorityClass with name no-such-class was found'
    body = copy.deepcopy(POD)
    body["spec"].update(priorityClassName="system-cluster-critical", priority=2000000000)
    r = api.post(base, body)
    assert r.status_code == 201 and r.json()["spec"]["priority"] == 2000000000


def test_pod_update_keeps_defaults(api, namespace):
    """An update is defaulted like a create (kube decodes every body): a PUT of what was read back with a
    field defaulted server-side removed is not a change of the immutable pod spec."""
    base = f"/api/v1/namespaces/{namespace}/pods"
    created = api.post(base, POD).json()
    body = copy.deepcopy(created)
    for c in body["spec"]["containers"]:
        del c["imagePullPolicy"], c["terminationMessagePath"]
    del body["spec"]["schedulerName"], body["spec"]["dnsPolicy"]
    body["metadata"]["labels"] = {"x": "y"}
    r = api.put(f"{base}/p", body)
    assert r.status_code == 200, r.text
    assert r.json()["spec"] == created["spec"] and r.json()["metadata"]["labels"] == {"x": "y"}
