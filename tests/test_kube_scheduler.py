"""kube-scheduler v1.37.2 (built from the module proxy by tools/build_kube_scheduler.py) schedules onto kwok
nodes through this apiserver (issue 13 §3).

Our apiserver over a real etcd, kwok simulating the nodes, kube-scheduler with leader election off and a
credential-less kubeconfig; no controller manager runs, so a Deployment's worth of pods is created directly:
the Deployment, its ReplicaSet and REPLICAS pods owned by it, as the controllers would have written them.
Checked: the scheduler's informers on its 19 resources synced through watch-list (each reflector logged the
end-of-initial-events bookmark, none fell back to LIST; our server counted no LIST of a resource only the
scheduler informs on), every pod is bound by pods/binding (our request counter, the PodScheduled condition,
the scheduler's log), spread over the nodes, and kwok then runs every pod. ~30 s.
"""
from __future__ import annotations

import re
import time

import pytest

from tests.helpers import Api, start_apiserver
from tests.helpers.etcd import load_tool
from tests.helpers.kwok import KubeSchedulerProcess, KwokProcess, kwok_node
from tests.helpers.metrics import scrape as counter
from tests.test_kwok import wait_for

NODES = 4
REPLICAS = 20
NS = "default"
HASH = "6d4f8c7b9"   # pod-template-hash, as the deployment controller would name it
LABELS = {"app": "web"}
# Resources only the scheduler informs on (kwok watches nodes, pods and leases): it must never LIST them.
SCHEDULER_ONLY = ("persistentvolumes", "persistentvolumeclaims", "storageclasses", "csinodes", "csidrivers",
                  "csistoragecapacities", "replicasets", "statefulsets", "services", "poddisruptionbudgets",
                  "replicationcontrollers", "namespaces", "resourceslices", "resourceclaims", "deviceclasses")
END_OF_INITIAL_EVENTS = "Exiting watch because received the bookmark that marks the end of initial events stream"


@pytest.fixture(scope="module")
def binaries():
    out = {}
    for tool, fn in (("build_kwok", "ensure_kwok"), ("build_kube_scheduler", "ensure_kube_scheduler")):
        build = load_tool(tool)
        try:
            out[tool] = getattr(build, fn)()
        except build.BuildError as e:
            pytest.fail(f"could not build with tools/{tool}.py: {e}")
    return out


def template() -> dict:
    return {"metadata": {"labels": dict(LABELS)},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                     "terminationGracePeriodSeconds": 30}}


def deployment_objects() -> tuple[dict, dict]:
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": dict(LABELS)},
           "spec": {"replicas": REPLICAS, "selector": {"matchLabels": dict(LABELS)}, "template": template()}}
    rs_tpl = template()
    rs_tpl["metadata"]["labels"]["pod-template-hash"] = HASH
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
          "metadata": {"name": f"web-{HASH}", "labels": {**LABELS, "pod-template-hash": HASH}},
          "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {**LABELS, "pod-template-hash": HASH}},
                   "template": rs_tpl}}
    return dep, rs


def owned_pod(i: int, rs: dict) -> dict:
    tpl = template()
    md = {"name": f"web-{HASH}-{i:05d}", "labels": {**LABELS, "pod-template-hash": HASH},
          "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
                               "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": tpl["spec"]}


def test_kube_scheduler_binds_a_deployments_pods_to_kwok_nodes(current_etcd, binaries, unique_prefix):
    srv = start_apiserver(current_etcd.endpoint, unique_prefix)
    api = Api(srv.base)
    kwok = sched = None
    try:
        nodes = [f"kwok-node-{i}" for i in range(NODES)]
        for n in nodes:
            r = api.post("/api/v1/nodes", kwok_node(n))
            assert r.status_code == 201, r.text
        kwok = KwokProcess(srv.base).start()
        sched = KubeSchedulerProcess(srv.base, verbosity=4).start()   # reflector lines are V(3)-V(4)

        # The scheduler is ready once its informers synced (/readyz checks sched-handler-sync).
        wait_for("kube-scheduler /readyz 200", lambda: sched.get("/readyz")[0] == 200 or
                 (not sched.alive() and pytest.fail(f"kube-scheduler exited:\n{sched.log()[-5000:]}")), 60)
        log = sched.log()
        started = set(re.findall(r'"Starting reflector" type="\*([\w.]+)"', log))
        populated = set(re.findall(r'"Caches populated" type="\*([\w.]+)"', log))
        assert len(started) >= 19, sorted(started)
        assert populated == started, sorted(started - populated)
        assert log.count(END_OF_INITIAL_EVENTS) >= len(started), "some informer did not sync by watch-list"
        assert "falling back" not in log.lower(), [ln for ln in log.splitlines() if "falling back" in ln.lower()]
        for res in SCHEDULER_ONLY:
            assert counter(api, "apiserver_request_total", verb="LIST", resource=res) == 0, res

        # A Deployment's worth of pods, written as the controllers would (none runs here).
        dep, rs = deployment_objects()
        r = api.post(f"/apis/apps/v1/namespaces/{NS}/deployments", dep)
        assert r.status_code == 201, r.text
        dep = r.json()
        rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                              "uid": dep["metadata"]["uid"], "controller": True,
                                              "blockOwnerDeletion": True}]
        r = api.post(f"/apis/apps/v1/namespaces/{NS}/replicasets", rs)
        assert r.status_code == 201, r.text
        rs = r.json()
        t0 = time.monotonic()
        for i in range(REPLICAS):
            r = api.post(f"/api/v1/namespaces/{NS}/pods", owned_pod(i, rs))
            assert r.status_code == 201, r.text
            assert r.json()["spec"]["schedulerName"] == "default-scheduler"

        def pods():
            return api.get(f"/api/v1/namespaces/{NS}/pods", params={"labelSelector": "app=web"}).json()["items"]

        def all_running():
            items = pods()
            done = [p for p in items if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"]
            return items if len(done) == REPLICAS else None
        items = wait_for(f"{REPLICAS} pods bound and Running", all_running, 60, kwok, interval=0.5)
        elapsed = time.monotonic() - t0
        per_node: dict[str, int] = {}
        for p in items:
            node = p["spec"]["nodeName"]
            assert node in nodes, node
            per_node[node] = per_node.get(node, 0) + 1
            cond = {c["type"]: c for c in p["status"]["conditions"]}
            assert cond["PodScheduled"]["status"] == "True", p["status"]
            assert cond["Ready"]["status"] == "True"
            assert p["status"]["podIP"]
        assert len(per_node) > 1, per_node   # spread (topology spreading by the ReplicaSet's selector)
        assert counter(api, "apiserver_request_total", verb="POST", resource="pods", subresource="binding",
                       code="201") == REPLICAS
        log = sched.log()
        bound = set(re.findall(r'"Successfully bound pod to node" pod="default/([\w-]+)"', log))
        assert bound == {p["metadata"]["name"] for p in items}
        assert sched.alive() and kwok.alive()
        print(f"{REPLICAS} pods bound and Running in {elapsed:.1f} s; per node {per_node}")
    finally:
        for p in (sched, kwok):
            if p is not None:
                p.stop()
        srv.stop()
