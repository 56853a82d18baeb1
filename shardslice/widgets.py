"""The custom resource of the slice: `widgets.slice.example.com/v1`, namespaced, with a status subresource.

    spec:   {size: <int>, payload: <string, optional>}
    status: {observedGeneration: <metadata.generation reconciled>, square: size*size, shard: <controller>}

A reconcile of generation g writes `status` through the status subresource with the object's
resourceVersion as precondition, so it happens at most once per generation: a second write for g would need
a resourceVersion at which status.observedGeneration is already g, and such an object is never reconciled.
"""
from __future__ import annotations

GROUP = "slice.example.com"
VERSION = "v1"
PLURAL = "widgets"
KIND = "Widget"
CRD_NAME = f"{PLURAL}.{GROUP}"
API = f"/apis/{GROUP}/{VERSION}"


def crd() -> dict:
    """The CustomResourceDefinition (a structural schema; the status subresource)."""
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer", "minimum": 0},
                                                  "payload": {"type": "string"}}},
        "status": {"type": "object", "properties": {
            "observedGeneration": {"type": "integer"}, "square": {"type": "integer"},
            "shard": {"type": "string"}}}}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": CRD_NAME},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"plural": PLURAL, "singular": "widget", "kind": KIND, "shortNames": ["wdg"]},
                     "versions": [{"name": VERSION, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": schema}}]}}


def widget(name: str, namespace: str, size: int, labels: dict | None = None, payload: str = "") -> dict:
    md = {"name": name, "namespace": namespace}
    if labels:
        md["labels"] = labels
    spec = {"size": size, "payload": payload} if payload else {"size": size}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": md, "spec": spec}


def collection(namespace: str | None = None) -> str:
    """The list path: cluster-wide, or one namespace's."""
    return f"{API}/namespaces/{namespace}/{PLURAL}" if namespace else f"{API}/{PLURAL}"


def status_path(namespace: str, name: str) -> str:
    return f"{API}/namespaces/{namespace}/{PLURAL}/{name}/status"


def desired_status(obj: dict, shard: str) -> dict:
    """The status a reconcile of `obj`'s current generation writes."""
    size = int((obj.get("spec") or {}).get("size") or 0)
    return {"observedGeneration": int(obj["metadata"].get("generation") or 1), "square": size * size,
            "shard": shard}


def reconciled(obj: dict) -> bool:
    """True when the object's status already reflects its current generation."""
    st = obj.get("status") or {}
    return st.get("observedGeneration") == int(obj["metadata"].get("generation") or 1)
