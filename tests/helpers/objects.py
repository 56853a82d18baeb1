"""Object factories shared by tests and benchmarks."""
from __future__ import annotations


def crd(group: str, plural: str, kind: str, scope: str = "Namespaced", status: bool = True,
        short_names: bool = True) -> dict:
    """A v1 CustomResourceDefinition, one served and stored version with an open schema."""
    v = {"name": "v1", "served": True, "storage": True,
         "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    if status:
        v["subresources"] = {"status": {}}
    names = {"plural": plural, "singular": kind.lower(), "kind": kind}
    if short_names:
        names["shortNames"] = [plural[:3]]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": scope, "versions": [v], "names": names}}
