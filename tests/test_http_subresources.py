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
import time

import pytest

from tests.helpers import Api
from tests.helpers.etcd import load_tool
from tests.helpers.protowire import field as _field


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


# --- workload kinds: defaults against kube-apiserver --------------------------------------------------

TEMPLATE = {"metadata": {"labels": {"app": "w", "tier": "a"}}, "spec": {
    "containers": [{"name": "c", "image": "nginx"}, {"name": "d", "image": "busybox:1"}],
    "nodeSelector": {"disk": "ssd", "a": "b"}}}
SELECTOR = {"matchLabels": {"app": "w"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]},
                                                             {"key": "x", "operator": "DoesNotExist"}]}
JOB_TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}
APPS = "/apis/apps/v1/namespaces/{ns}"
BATCH = "/apis/batch/v1/namespaces/{ns}"
CORE = "/api/v1/namespaces/{ns}"

WORKLOADS = [
    (f"{APPS}/deployments", {"metadata": {"name": "d"}, "spec": {"replicas": 3, "selector": SELECTOR,
                                                                 "template": TEMPLATE}}),
    (f"{APPS}/deployments", {"metadata": {"name": "d2"}, "spec": {
        "selector": {"matchLabels": {"app": "w"}}, "strategy": {"type": "Recreate"}, "template": TEMPLATE}}),
    (f"{APPS}/replicasets", {"metadata": {"name": "rs"}, "spec": {"selector": SELECTOR, "template": TEMPLATE}}),
    (f"{APPS}/statefulsets", {"metadata": {"name": "ss"}, "spec": {"selector": SELECTOR, "template": TEMPLATE,
                                                                   "serviceName": "s"}}),
    (f"{APPS}/statefulsets", {"metadata": {"name": "ss2"}, "spec": {
        "selector": SELECTOR, "updateStrategy": {"type": "OnDelete"}, "template": TEMPLATE,
        "volumeClaimTemplates": [{"metadata": {"name": "v"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    (f"{APPS}/daemonsets", {"metadata": {"name": "ds"}, "spec": {"selector": SELECTOR, "template": TEMPLATE}}),
    (f"{BATCH}/jobs", {"metadata": {"name": "j"}, "spec": {"template": JOB_TEMPLATE}}),
    (f"{BATCH}/jobs", {"metadata": {"name": "j2"}, "spec": {"parallelism": 3, "template": JOB_TEMPLATE}}),
    (f"{BATCH}/jobs", {"metadata": {"name": "j3", "labels": {"mine": "1"}}, "spec": {
        "completions": 5, "parallelism": 2, "template": {"metadata": {"labels": {"app": "z"}}, **JOB_TEMPLATE},
        "podFailurePolicy": {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]}}}),
    (f"{BATCH}/cronjobs", {"metadata": {"name": "cj"}, "spec": {"schedule": "*/5 * * * *", "timeZone": "Etc/UTC",
                                                               "jobTemplate": {"spec": {"template": JOB_TEMPLATE}}}}),
    (f"{BATCH}/cronjobs", {"metadata": {"name": "cj2"}, "spec": {"schedule": "* * * * *", "suspend": True,
                                                                "jobTemplate": {"spec": {"template": JOB_TEMPLATE}}}}),
    (f"{CORE}/replicationcontrollers", {"metadata": {"name": "rc"}, "spec": {
        "replicas": 2, "selector": {"app": "w", "tier": "a"}, "template": TEMPLATE}}),
    (f"{CORE}/podtemplates", {"metadata": {"name": "pt"}, "template": TEMPLATE}),
    ("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {"metadata": {"name": "pdb"}, "spec": {
        "minAvailable": "50%", "selector": {"matchLabels": {"a": "b"}}}}),
    ("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {"metadata": {"name": "pdb2"},
                                                              "spec": {"maxUnavailable": 1}}),
    ("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", {"metadata": {"name": "np"}, "spec": {
        "podSelector": {"matchLabels": {"a": "b"}}, "egress": [{"ports": [{"port": 53}]}]}}),
    ("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", {"metadata": {"name": "np2"},
                                                                    "spec": {"podSelector": {}}}),
    (f"{APPS}/controllerrevisions", {"metadata": {"name": "cr", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u1", "controller": True}]},
        "revision": 3, "data": {"a": 1}}),
    ("/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers", {"metadata": {"name": "hpa"}, "spec": {
        "scaleTargetRef": {"kind": "Deployment", "name": "d", "apiVersion": "apps/v1"}, "maxReplicas": 3}}),
    ("/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers", {"metadata": {"name": "hpa2"}, "spec": {
        "scaleTargetRef": {"kind": "StatefulSet", "name": "ss", "apiVersion": "apps/v1"}, "minReplicas": 2,
        "maxReplicas": 5, "metrics": [
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                            "averageValue": "100Mi"}}},
            {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue",
                                                                           "averageValue": "10"}}},
            {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "5"}}}]}}),
    (f"{CORE}/persistentvolumeclaims", {"metadata": {"name": "pvc"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    (f"{CORE}/persistentvolumeclaims", {"metadata": {"name": "pvc2"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "storageClassName": "fast", "volumeName": "pv1",
        "resources": {"requests": {"storage": "1Gi"}}}}),
    (f"{CORE}/endpoints", {"metadata": {"name": "ep"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}],
                                                                      "ports": [{"port": 80}]}]}),
    (f"{CORE}/limitranges", {"metadata": {"name": "lr"}, "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "1Mi"}}]}}),
    ("/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses", {"metadata": {"name": "ing"}, "spec": {
        "ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}],
        "rules": [{"host": h} for h in ("a.example.com", "b.example.com", "", "c.example.com", "d.example.com")]}}),
    ("/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses", {"metadata": {"name": "ing2"}, "spec": {
        "defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}}),
    ("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
        "metadata": {"name": "es"}, "addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}],
        "ports": [{"port": 80}]}),
    ("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {
        "metadata": {"name": "es2"}, "addressType": "IPv4",
        "endpoints": [{"addresses": [f"10.0.1.{i}"]} for i in range(5)],
        "ports": [{"port": 80, "name": "a"}, {"name": "metrics"}, {"port": 9090, "name": "b"},
                  {"port": 9091, "name": "c"}]}),
    ("/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices", {"metadata": {"name": "es3"}, "addressType": "IPv6"}),
    (f"{CORE}/endpoints", {"metadata": {"name": "ep2"}, "subsets": [
        {"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80, "name": "a"},
                                                                         {"port": 81, "name": "b"}]},
        {"addresses": [{"ip": "fd00::1"}]}]}),
    (f"{CORE}/endpoints", {"metadata": {"name": "ep3"}}),
]
CLUSTER_KINDS = [
    ("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": "pc"}, "value": 10}),
    ("/apis/storage.k8s.io/v1/storageclasses", {"metadata": {"name": "sc"}, "provisioner": "x.example.com"}),
    ("/apis/storage.k8s.io/v1/csidrivers", {"metadata": {"name": "csi.example.com"}, "spec": {}}),
    ("/apis/networking.k8s.io/v1/ingressclasses", {"metadata": {"name": "ic"}, "spec": {
        "controller": "example.com/x", "parameters": {"kind": "K", "name": "n"}}}),
    ("/apis/networking.k8s.io/v1/ingressclasses", {"metadata": {
        "name": "ic2", "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}, "spec": {
        "controller": "example.com/y", "parameters": {"kind": "K", "apiGroup": "example.com", "name": "n"}}}),
    ("/apis/storage.k8s.io/v1/csidrivers", {"metadata": {"name": "tok.csi.example.com"}, "spec": {
        "attachRequired": False, "tokenRequests": [{"audience": "a"}, {"audience": "b"}],
        "volumeLifecycleModes": ["Persistent", "Ephemeral"]}}),
    ("/api/v1/persistentvolumes", {"metadata": {"name": "pv", "annotations": {
        "volume.beta.kubernetes.io/storage-class": "slow"}}, "spec": {
        "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
        "hostPath": {"path": "/data"}, "claimRef": {"namespace": "ns", "name": "claim"}}}),
    ("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": "pc2"}, "value": 7,
                                                    "preemptionPolicy": "Never", "description": "x"}),
]


def _case_id(case) -> str:
    path, body = case
    return f"{path.rsplit('/', 1)[-1]}-{body['metadata']['name']}"


@pytest.mark.parametrize("case", WORKLOADS, ids=_case_id)
def test_workload_defaults_equal_kube(api, kube, case):
    mine, theirs = _created_on_both(api, kube, *case)
    assert mine == theirs
    assert json.dumps(mine) == json.dumps(theirs)  # and Go's field order


@pytest.mark.parametrize("case", CLUSTER_KINDS, ids=_case_id)
def test_cluster_scoped_defaults_equal_kube(api, kube, case):
    path, body = case
    got = []
    for srv in ([api] if api.mode == "kube" else [api, kube]):
        b = copy.deepcopy(body)
        b["metadata"]["name"] = f"{srv.mode}-{time.monotonic_ns() % 10**9}.{body['metadata']['name']}"
        r = srv.post(path, b)
        assert r.status_code == 201, r.text
        out = _normalised(r.json(), "")
        out["metadata"].pop("name")
        got.append(out)
        srv.delete(f"{path}/{b['metadata']['name']}")
    assert json.dumps(got[0]) == json.dumps(got[-1])


# Kinds whose Tables are compared, not their defaults (admission policies' defaulters are not applied here).
CLUSTER_TABLE_ONLY = [
    ("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", {"metadata": {"name": "vap"}, "spec": {
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, "validations": [{"expression": "true"}] * 2,
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                                "resources": ["pods"]}]}}}),
    ("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {"metadata": {"name": "vapb"}, "spec": {
        "policyName": "vap", "validationActions": ["Deny"],
        "paramRef": {"name": "cfg", "parameterNotFoundAction": "Deny"}}}),
    ("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", {"metadata": {"name": "vapb2"}, "spec": {
        "policyName": "vap", "validationActions": ["Deny"],
        "paramRef": {"name": "cfg", "namespace": "ns", "parameterNotFoundAction": "Deny"}}}),
    ("/apis/networking.k8s.io/v1/servicecidrs", {"metadata": {"name": "cidr"}, "spec": {"cidrs": ["10.200.0.0/16"]}}),
    ("/apis/storage.k8s.io/v1/volumeattributesclasses", {"metadata": {"name": "vac"}, "driverName": "x.example.com",
                                                         "parameters": {"iops": "100"}}),
    ("/apis/resource.k8s.io/v1/resourceslices", {"metadata": {"name": "rs"}, "spec": {
        "driver": "gpu.example.com", "nodeName": "n1", "pool": {"name": "p", "resourceSliceCount": 1, "generation": 1}}}),
]


@pytest.mark.parametrize("case", CLUSTER_KINDS + CLUSTER_TABLE_ONLY, ids=_case_id)
def test_cluster_scoped_tables_equal_kube(api, kube, case):
    path, body = case
    got = []
    for srv in ([api] if api.mode == "kube" else [api, kube]):
        b = copy.deepcopy(body)
        name = b["metadata"]["name"] = f"t{srv.mode}-{time.monotonic_ns() % 10**9}.{body['metadata']['name']}"
        assert srv.post(path, b).status_code == 201
        try:
            cols, cells = _table_cells(srv, f"{path}/{name}", name)
        finally:
            srv.delete(f"{path}/{name}")
        got.append((cols, cells))
    assert got[0] == got[-1]
    assert got[0][1][0][0].startswith("<ns>")  # (the name, replaced by the table helper)


def test_deployment_defaults_spelled_out(api, namespace):
    """What `kubectl create deployment` and `kubectl rollout` read back (the same on every server)."""
    path, body = WORKLOADS[1]
    r = api.post(path.format(ns=namespace), body)
    assert r.status_code == 201, r.text
    d = r.json()
    assert d["metadata"]["generation"] == 1 and d["status"] == {}
    assert d["spec"]["replicas"] == 1 and d["spec"]["revisionHistoryLimit"] == 10
    assert d["spec"]["progressDeadlineSeconds"] == 600 and d["spec"]["strategy"] == {"type": "Recreate"}
    assert d["spec"]["template"]["spec"]["schedulerName"] == "default-scheduler"
    r = api.post(path.format(ns=namespace), dict(WORKLOADS[0][1]))
    assert r.json()["spec"]["strategy"] == {"type": "RollingUpdate",
                                            "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
    # a spec change bumps the generation, the status stays
    d = api.get(f"{path.format(ns=namespace)}/d").json()
    d["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    r = api.put(f"{path.format(ns=namespace)}/d", d)
    assert r.status_code == 200 and r.json()["metadata"]["generation"] == 2


def test_daemonset_template_generation(api, namespace):
    path, body = next(c for c in WORKLOADS if c[1]["metadata"]["name"] == "ds")
    base = path.format(ns=namespace)
    r = api.post(base, body)
    assert r.json()["metadata"]["annotations"] == {"deprecated.daemonset.template.generation": "1"}
    ds = r.json()
    ds["metadata"]["labels"] = {"x": "y"}
    assert api.put(f"{base}/ds", ds).json()["metadata"]["annotations"] == {
        "deprecated.daemonset.template.generation": "1"}
    ds = api.get(f"{base}/ds").json()
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:2"
    r = api.put(f"{base}/ds", ds)
    assert r.json()["metadata"]["annotations"] == {"deprecated.daemonset.template.generation": "2"}
    assert r.json()["metadata"]["generation"] == 2


# --- the scale subresource ---------------------------------------------------------------------------

def _populate(srv, ns: str, status: dict | None = None) -> None:
    for path, body in WORKLOADS:
        p = path.format(ns=ns)
        r = srv.post(p, body)
        assert r.status_code == 201, r.text
        if status and body["metadata"]["name"] in status:
            cur = r.json()
            cur["status"] = status[body["metadata"]["name"]]
            r = srv.put(f"{p}/{body['metadata']['name']}/status", cur)
            assert r.status_code == 200, r.text


STATUS = {
    "d": {"replicas": 3, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1},
    "rs": {"replicas": 2, "readyReplicas": 1},
    "ss": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1},
    "ds": {"desiredNumberScheduled": 4, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 1,
           "numberAvailable": 1, "numberMisscheduled": 0},
    "j": {"startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:05Z", "succeeded": 1,
          "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]},
    "j3": {"startTime": "2026-01-01T00:00:00Z", "failed": 1, "conditions": [
        {"type": "FailureTarget", "status": "True"}, {"type": "Failed", "status": "True"}]},
    "cj": {"active": [{"name": "x"}], "lastScheduleTime": "2026-01-01T00:00:00Z"},
    "rc": {"replicas": 1, "readyReplicas": 1},
    "pdb": {"disruptionsAllowed": 2, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0},
    "hpa": {"currentReplicas": 2, "desiredReplicas": 2, "currentMetrics": [
        {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 42, "averageValue": "100m"}}}]},
    "pvc2": {"phase": "Bound", "accessModes": ["ReadWriteOnce", "ReadOnlyMany"], "capacity": {"storage": "2Gi"}},
}


@pytest.fixture
def workloads(api, namespace):
    _populate(api, namespace, STATUS)
    return namespace


def _scale(ns, name, replicas, status_replicas, selector):
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas} if replicas else {},
            "status": {"replicas": status_replicas, "selector": selector}}


def _meta_free(scale: dict) -> dict:
    s = copy.deepcopy(scale)
    for k in ("uid", "resourceVersion", "creationTimestamp"):
        assert s["metadata"].pop(k)
    return s


@pytest.mark.parametrize("path,name,replicas,current,selector", [
    (APPS + "/deployments", "d", 3, 3, "app=w,tier in (a,b),!x"),
    (APPS + "/replicasets", "rs", 1, 2, "app=w,tier in (a,b),!x"),
    (APPS + "/statefulsets", "ss", 1, 1, "app=w,tier in (a,b),!x"),
    (CORE + "/replicationcontrollers", "rc", 2, 1, "app=w,tier=a"),
])
def test_scale_get_put_patch(api, workloads, path, name, replicas, current, selector):
    ns = workloads
    base = f"{path.format(ns=ns)}/{name}"
    r = api.get(f"{base}/scale")
    assert r.status_code == 200, r.text
    parent = api.get(base).json()
    assert list(r.json()) == ["kind", "apiVersion", "metadata", "spec", "status"]
    assert r.json()["metadata"] == {k: parent["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                                       "creationTimestamp")}
    assert _meta_free(r.json()) == _scale(ns, name, replicas, current, selector)
    # PUT the scale read back with other replicas: the parent's spec.replicas, generation +1, status kept
    body = r.json()
    body["spec"]["replicas"] = 5
    r = api.put(f"{base}/scale", body)
    assert r.status_code == 200, r.text
    assert _meta_free(r.json()) == _scale(ns, name, 5, current, selector)
    after = api.get(base).json()
    assert after["spec"]["replicas"] == 5 and after["status"] == parent["status"]
    assert after["metadata"]["generation"] == parent["metadata"]["generation"] + 1
    assert r.json()["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]
    # the same scale again: a stale resourceVersion is a conflict on the parent
    r = api.put(f"{base}/scale", body)
    assert r.status_code == 409
    assert status_of(r)["details"]["kind"] == path.rsplit("/", 1)[-1]
    # the three patch types
    for ctype, patch_body, want in (
            ("application/merge-patch+json", {"spec": {"replicas": 2}}, 2),
            ("application/strategic-merge-patch+json", {"spec": {"replicas": 4}}, 4),
            ("application/json-patch+json", [{"op": "replace", "path": "/spec/replicas", "value": 0}], 0)):
        r = api.patch(f"{base}/scale", patch_body, ctype)
        assert r.status_code == 200, (ctype, r.text)
        assert _meta_free(r.json()) == _scale(ns, name, want, current, selector)
        assert api.get(base).json()["spec"].get("replicas") == want


def test_scale_errors(api, workloads):
    base = f"{APPS.format(ns=workloads)}/deployments"
    r = api.put(f"{base}/d/scale", {"metadata": {"name": "d"}, "spec": {"replicas": -1}})
    assert r.status_code == 422
    assert status_of(r)["message"] == ('Scale.autoscaling "d" is invalid: spec.replicas: Invalid value: -1: must be '
                                       'greater than or equal to 0')
    assert status_of(r)["details"] == {"name": "d", "group": "autoscaling", "kind": "Scale", "causes": [
        {"reason": "FieldValueInvalid", "message": "Invalid value: -1: must be greater than or equal to 0",
         "field": "spec.replicas"}]}
    r = api.put(f"{base}/d/scale", {"metadata": {"name": "other"}, "spec": {"replicas": 1}})
    assert r.status_code == 400 and status_of(r)["message"] == (
        "the name of the object (other) does not match the name on the URL (d)")
    r = api.put(f"{base}/d/scale", {"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "d"}})
    assert r.status_code == 400 and status_of(r)["message"] == (
        'Deployment in version "v1" cannot be handled as a Scale: converting (v1.Deployment) to '
        '(autoscaling.Scale): unknown conversion')
    r = api.put(f"{base}/d/scale", {"metadata": {"name": "d", "uid": "not-the-uid"}, "spec": {"replicas": 1}})
    assert r.status_code == 409 and "Precondition failed: UID in precondition: not-the-uid" in status_of(r)["message"]
    for verb in ("GET", "PUT"):
        r = api.req(verb, f"{base}/missing/scale", json={"metadata": {"name": "missing"}} if verb == "PUT" else None)
        assert r.status_code == 404 and status_of(r)["message"] == 'deployments.apps "missing" not found'
    for verb in ("POST", "DELETE"):
        r = api.req(verb, f"{base}/d/scale", json={})
        assert r.status_code == 405 and status_of(r)["reason"] == "MethodNotAllowed"
    r = api.get(f"{APPS.format(ns=workloads)}/daemonsets/ds/scale")
    assert r.status_code == 404 and status_of(r)["message"] == "the server could not find the requested resource"
    assert api.get(f"{base}/d").json()["spec"]["replicas"] == 3  # nothing changed along the way


# --- Table output of the workload kinds ----------------------------------------------------------------

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
_DURATION = re.compile(r"(\d+[smhdy]){1,2}|0s")


def _table_cells(srv, path: str, ns: str) -> tuple[list, list]:
    r = srv.get(path, headers={"Accept": TABLE})
    assert r.status_code == 200, r.text
    t = json.loads(_UID.sub("<uid>", r.text).replace(ns, "<ns>"))
    for i, col in enumerate(t["columnDefinitions"]):
        for row in t["rows"]:
            if col["name"] == "Age":
                assert _DURATION.fullmatch(row["cells"][i]), row["cells"][i]
                row["cells"][i] = "<age>"
            elif col["type"] == "date":  # the default convertor's Created At
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row["cells"][i]), row["cells"][i]
                row["cells"][i] = "<date>"
    return t["columnDefinitions"], [row["cells"] for row in t["rows"]]


@pytest.fixture(scope="module")
def kube_workloads(kube):
    ns = f"wl-kube-{time.monotonic_ns() % 10**9}"
    assert kube.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
    _populate(kube, ns, STATUS)
    return ns


# Kinds whose printer (printers.go) is not reproduced: Name and Age only (docs/differences.md).
NAME_AGE_ONLY: set[str] = set()


@pytest.mark.parametrize("resource", sorted({p.rsplit("/", 1)[-1]: p for p, _ in WORKLOADS}.items()),
                         ids=lambda x: x[0])
def test_workload_tables_equal_kube(api, kube, workloads, kube_workloads, resource):
    plural, path = resource
    mine = _table_cells(api, path.format(ns=workloads), workloads)
    theirs = _table_cells(kube, path.format(ns=kube_workloads), kube_workloads)
    assert theirs[1], "no rows"
    if plural in NAME_AGE_ONLY and api.mode != "kube":
        assert [c["name"] for c in mine[0]] == ["Name", "Age"]
        assert mine[0] == [c for c in theirs[0] if c["name"] in ("Name", "Age")]
        assert mine[1] == [[r[0], "<age>"] for r in theirs[1]]
    else:
        assert mine == theirs


def test_workload_table_cells_spelled_out(api, workloads):
    """kubectl get deployments / jobs as a user reads them."""
    _, rows = _table_cells(api, f"{APPS.format(ns=workloads)}/deployments", workloads)
    assert rows == [["d", "1/3", 2, 1, "<age>", "c,d", "nginx,busybox:1", "app=w,tier in (a,b),!x"],
                    ["d2", "0/1", 0, 0, "<age>", "c,d", "nginx,busybox:1", "app=w"]]
    _, rows = _table_cells(api, f"{BATCH.format(ns=workloads)}/jobs", workloads)
    assert [r[:4] for r in rows] == [["j", "Complete", "1/1", "65s"], ["j2", "Running", "0/1 of 3", ""],
                                     ["j3", "Failed", "0/5", rows[2][3]]]
    assert rows[0][7] == "batch.kubernetes.io/controller-uid=<uid>"


def test_table_columns_file_is_current(kube):
    """machinery/table_columns.json is what the running kube-apiserver answers (tools/table_columns_upstream.py)."""
    tool = load_tool("table_columns_upstream")

    def get(path, accept):
        r = kube.get(path, headers={"Accept": accept}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()
    with open(tool.OUT, encoding="utf-8") as f:
        assert f.read() == tool.render(tool.extract(get)), "stale: run python tools/table_columns_upstream.py"


def test_pod_status_updates_equal_kube(api, kube):
    """What kwok and a kubelet write through pods/status (a strategic merge patch, then a PUT) reads back as
    kube-apiserver stores it: the PodStatus struct's encoding (lastProbeTime: null, restartCount: 0, ...)."""
    patch = {"status": {"phase": "Running", "podIP": "10.0.0.9", "hostIP": "10.1.0.1",
                        "startTime": "2026-01-01T00:00:00Z",
                        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                                       {"type": "Initialized", "status": "True"}],
                        "containerStatuses": [{"name": "a", "image": "nginx", "imageID": "", "ready": True,
                                               "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}
    got = []
    for srv in ([api] if api.mode == "kube" else [api, kube]):
        ns = f"st-{srv.mode}-{time.monotonic_ns() % 10**9}"
        assert srv.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
        base = f"/api/v1/namespaces/{ns}/pods"
        assert srv.post(base, POD).status_code == 201
        assert srv.post(f"{base}/p/binding", binding("p")).status_code == 201
        r = srv.patch(f"{base}/p/status", patch, "application/strategic-merge-patch+json")
        assert r.status_code == 200, r.text
        first = _normalised(r.json(), ns)
        cur = r.json()
        cur["status"]["containerStatuses"][0]["restartCount"] = 1
        cur["status"]["podIPs"] = [{"ip": "10.0.0.9"}]
        r = srv.put(f"{base}/p/status", cur)
        assert r.status_code == 200, r.text
        got.append((first, _normalised(r.json(), ns)))
    assert json.dumps(got[0]) == json.dumps(got[-1])
    assert got[0][0]["status"]["containerStatuses"][0]["restartCount"] == 0


# --- pods/eviction ----------------------------------------------------------------------------------

def _eviction(name):
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}


def _eviction_scene(srv, ns: str) -> None:
    """Pods p1 (Pending), p2..p5 bound, Running and Ready; PDB pdbx (app=x, one disruption allowed, its
    status as the disruption controller would write it), two PDBs for app=z."""
    assert srv.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
    base = f"/api/v1/namespaces/{ns}/pods"
    for name, app in (("p1", "x"), ("p2", "x"), ("p3", "y"), ("p4", "z")):
        assert srv.post(base, {"metadata": {"name": name, "labels": {"app": app}},
                               "spec": {"containers": [{"name": "c", "image": "nginx"}]}}).status_code == 201
        if name == "p1":
            continue
        assert srv.post(f"{base}/{name}/binding", binding(name)).status_code == 201
        cur = srv.get(f"{base}/{name}").json()
        cur["status"]["phase"] = "Running"
        cur["status"]["conditions"].append({"type": "Ready", "status": "True"})
        assert srv.put(f"{base}/{name}/status", cur).status_code == 200
    pdbs = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    r = srv.post(pdbs, {"metadata": {"name": "pdbx"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}})
    cur = r.json()
    cur["status"] = {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1,
                     "expectedPods": 2}
    assert srv.put(f"{pdbs}/pdbx/status", cur).status_code == 200
    for name in ("pdbz1", "pdbz2"):
        assert srv.post(pdbs, {"metadata": {"name": name}, "spec": {
            "minAvailable": 1, "selector": {"matchLabels": {"app": "z"}}}}).status_code == 201


def test_eviction_equal_kube(api, kube):
    """kubectl drain's path: the same answers, pods and budgets as kube-apiserver's (managedFields aside)."""
    results = []
    for srv in ([api] if api.mode == "kube" else [api, kube]):
        ns = f"ev-{srv.mode}-{time.monotonic_ns() % 10**9}"
        _eviction_scene(srv, ns)
        base = f"/api/v1/namespaces/{ns}/pods"
        pdbs = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
        seen = []

        def note(r):
            seen.append((r.status_code, _normalised(r.json(), ns)))
        note(srv.post(f"{base}/p1/eviction", _eviction("p1")))    # Pending: deleted at once
        note(srv.get(f"{base}/p1"))
        note(srv.post(f"{base}/p3/eviction", _eviction("p3")))    # Running, no budget: graceful delete
        note(srv.get(f"{base}/p3"))
        note(srv.post(f"{base}/p2/eviction", _eviction("p2")))    # the budget allows one: taken
        note(srv.get(f"{pdbs}/pdbx"))
        note(srv.get(f"{base}/p2"))
        note(srv.post(f"{base}/p4/eviction", _eviction("p4")))    # two budgets: 500
        note(srv.post(f"{base}/nope/eviction", _eviction("nope")))
        note(srv.post(f"{base}/p4/eviction", _eviction("other")))
        assert srv.delete(f"{pdbs}/pdbz2").status_code == 200
        note(srv.post(f"{base}/p4/eviction", _eviction("p4")))    # not observed by the controller yet: 429
        cur = srv.get(f"{pdbs}/pdbz1").json()
        cur["status"] = {"observedGeneration": 1, "disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1,
                         "expectedPods": 1}
        assert srv.put(f"{pdbs}/pdbz1/status", cur).status_code == 200
        note(srv.post(f"{base}/p4/eviction", _eviction("p4")))    # no disruption allowed: 429
        note(srv.post(f"{base}/p4/eviction", _eviction("p4"), params={"dryRun": "All"}))
        results.append(seen)
    assert json.dumps(results[0]) == json.dumps(results[-1])
    seen = results[0]
    assert [s for s, _ in seen] == [201, 404, 201, 200, 201, 200, 200, 500, 404, 400, 429, 429, 429]
    assert seen[0][1] == SUCCESS_201
    p3 = seen[3][1]
    assert p3["metadata"]["deletionGracePeriodSeconds"] == 30
    assert [c["type"] for c in p3["status"]["conditions"]][-1] == "DisruptionTarget"
    assert seen[5][1]["status"]["disruptionsAllowed"] == 0 and list(seen[5][1]["status"]["disruptedPods"]) == ["p2"]
    assert seen[10][1]["details"]["causes"] == [{"reason": "DisruptionBudget", "message":
                                                 "The disruption budget pdbz1 is still being processed by the server."}]
    assert seen[11][1]["details"]["causes"][0]["message"] == ("The disruption budget pdbz1 needs 1 healthy pods and "
                                                              "has 1 currently")
