"""Extract upstream's bootstrap RBAC policy from the reference kube-apiserver.

    python tools/rbac_bootstrap_policy.py            # starts etcd + kube-apiserver (RBAC), writes the file
    python tools/rbac_bootstrap_policy.py --check    # exits 1 if the committed file differs from a fresh extract

Writes `apiserver/auth/bootstrap_policy.json`: every ClusterRole, ClusterRoleBinding, Role and RoleBinding
kube-apiserver v1.37.2 creates at start with `--authorization-mode=RBAC` (its `rbac/bootstrap-roles` post-start
hook, k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy; label
`kubernetes.io/bootstrapping=rbac-defaults`), as kube serves them, without the fields the server sets
(uid, resourceVersion, creationTimestamp, managedFields). `apiserver/auth/bootstrap.py` creates them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "apiserver", "auth", "bootstrap_policy.json")
RBAC = "/apis/rbac.authorization.k8s.io/v1/"
KINDS = (("ClusterRole", "clusterroles"), ("ClusterRoleBinding", "clusterrolebindings"),
         ("Role", "roles"), ("RoleBinding", "rolebindings"))
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation")


def extract(get) -> dict:
    """{kind: [objects]} from `get(path) -> dict`, objects in name order (namespace, name for Roles)."""
    out = {}
    for kind, plural in KINDS:
        items = get(RBAC + plural + "?labelSelector=kubernetes.io%2Fbootstrapping%3Drbac-defaults")["items"]
        objs = []
        for it in items:
            md = {k: v for k, v in it["metadata"].items() if k not in SERVER_SET}
            objs.append({"kind": kind, "apiVersion": "rbac.authorization.k8s.io/v1", "metadata": md,
                         **{k: v for k, v in it.items() if k not in ("metadata", "kind", "apiVersion")}})
        objs.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        out[kind] = objs
    return out


def fresh() -> dict:
    sys.path.insert(0, ROOT)
    import requests  # noqa: PLC0415

    from tests.helpers.etcd import current_etcd  # noqa: PLC0415
    from tests.helpers.kube import KubeApiserver  # noqa: PLC0415
    with current_etcd() as etcd, KubeApiserver(etcd.endpoint, prefix="/registry-rbac",
                                               authorization_mode="RBAC") as kube:
        def get(path):
            r = requests.get(kube.url + path, cert=kube.client_cert, verify=kube.ca, timeout=60)
            r.raise_for_status()
            return r.json()
        return extract(get)


def render(doc: dict) -> str:
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    a = p.parse_args(argv)
    text = render(fresh())
    if a.check:
        with open(OUT) as f:
            same = f.read() == text
        print("up to date" if same else f"{OUT} is stale: run python tools/rbac_bootstrap_policy.py")
        return 0 if same else 1
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
