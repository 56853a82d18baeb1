"""Extract from the reference kube-apiserver the built-in resources machinery/resources.py serves.

    python tools/discovery_upstream.py            # starts etcd + the reference kube-apiserver, writes the file
    python tools/discovery_upstream.py --check    # exits 1 if the committed file differs from a fresh extract

Writes `machinery/builtin_resources.json`, read by `machinery.resources` at import:

* `groups`: every group the reference serves, in its aggregated discovery order (`aggregated_order`) and in
  its `/apis` order (`legacy_order`, the kube-aggregator's APIService order), each group's served versions
  (preferred first).
* `resources`: every resource of every served group version, from the aggregated discovery documents
  (`/api` and `/apis` with `Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`):
  group, version, kind, plural, singular, scope, shortNames, categories, verbs, and every subresource with
  its response kind and verbs as discovery shows them (which ones this project serves is
  `machinery.resources.SERVED_SUBRESOURCES`); `storageVersionHash` as the unaggregated document reports it
  (absent for the kinds that are not stored: reviews, `bindings`, `componentstatuses`);
* `key`: the path of the resource's objects under the etcd prefix, observed: the tool creates one object of
  every stored kind through the reference server (the bodies in `SAMPLES`, minimal valid objects) and reads
  back which key etcd got (upstream's exceptions: `minions`, `services/specs`, `services/endpoints`,
  `controllers`, `ingress`, the apiextensions and apiregistration groups' `<group>/<resource>`; core and
  events.k8s.io Events share `events`). A kind whose sample the reference refuses makes the tool fail.
  `returnsDeletedObject`: whether a DELETE of that object answers with the object (upstream's
  `ReturnDeletedObject`; or an object that is not deleted at once: namespaces, CRDs) or with a Status.

The tests regenerate it from the live reference (tests/test_builtin_kinds.py) and fail when it is stale.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
import generated  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "machinery", "builtin_resources.json")
AGG = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
PREFIX = "/registry-kinds"
NS = "kinds-probe"

_POD_SPEC = {"containers": [{"name": "c", "image": "busybox"}]}
_LABELS = {"app": "probe"}
_TEMPLATE = {"metadata": {"labels": _LABELS}, "spec": _POD_SPEC}
_JOB_TEMPLATE = {"spec": {**_POD_SPEC, "restartPolicy": "Never"}}
_RULES = [{"apiGroups": ["probe.example.com"], "apiVersions": ["v1"], "operations": ["CREATE"],
           "resources": ["things"]}]
_UID = "0b8d3d5e-7c4f-4d3a-9a51-6f0e2b1c9d01"
_REF = {"kind": "Pod", "name": "p", "namespace": "{ns}", "apiVersion": "v1"}

# One minimal valid object of every stored kind, by `group/plural` (optional "name" overrides the default
# `kinds-probe-<plural>`). `{ca}` and `{csr}` are replaced by a PEM certificate and a base64 PEM CSR, `{stub}`
# by an ed25519 certificate request (base64 DER), `{ns}` by the probe's namespace.
SAMPLES: dict[str, dict] = {
    "/configmaps": {}, "/endpoints": {}, "/secrets": {}, "/serviceaccounts": {}, "/nodes": {},
    "/namespaces": {"name": "kinds-probe-namespaces"},
    "/events": {"involvedObject": _REF, "reason": "Probe", "message": "m", "type": "Normal"},
    "/limitranges": {"spec": {"limits": [{"type": "Container"}]}},
    "/persistentvolumeclaims": {"spec": {"accessModes": ["ReadWriteOnce"],
                                         "resources": {"requests": {"storage": "1Gi"}}}},
    "/persistentvolumes": {"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                    "hostPath": {"path": "/tmp/probe"}}},
    "/pods": {"spec": _POD_SPEC},
    "/podtemplates": {"template": _TEMPLATE},
    "/replicationcontrollers": {"spec": {"selector": _LABELS, "template": _TEMPLATE}},
    "/resourcequotas": {"spec": {}},
    "/services": {"spec": {"ports": [{"port": 80}]}},
    "apiregistration.k8s.io/apiservices": {"name": "v1.probe.example.com", "spec": {
        "group": "probe.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 10}},
    "apps/controllerrevisions": {"revision": 1, "data": {}},
    "apps/daemonsets": {"spec": {"selector": {"matchLabels": _LABELS}, "template": _TEMPLATE}},
    "apps/deployments": {"spec": {"selector": {"matchLabels": _LABELS}, "template": _TEMPLATE}},
    "apps/replicasets": {"spec": {"selector": {"matchLabels": _LABELS}, "template": _TEMPLATE}},
    "apps/statefulsets": {"spec": {"selector": {"matchLabels": _LABELS}, "template": _TEMPLATE}},
    "events.k8s.io/events": {"name": "kinds-probe-events.k8s.io", "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/probe",
                             "reportingInstance": "probe", "action": "Probe", "reason": "Probe", "regarding": _REF,
                             "type": "Normal"},
    "autoscaling/horizontalpodautoscalers": {"spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 2}},
    "batch/cronjobs": {"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": _JOB_TEMPLATE}}}},
    "batch/jobs": {"spec": {"template": _JOB_TEMPLATE}},
    "certificates.k8s.io/certificatesigningrequests": {"spec": {
        "request": "{csr}", "signerName": "example.com/probe", "usages": ["digital signature"]}},
    "certificates.k8s.io/podcertificaterequests": {"spec": {
        "signerName": "example.com/probe", "podName": "p", "podUID": _UID, "serviceAccountName": "default",
        "serviceAccountUID": _UID, "nodeName": "n", "nodeUID": _UID, "stubPKCS10Request": "{stub}"}},
    "certificates.k8s.io/clustertrustbundles": {"spec": {"trustBundle": "{ca}"}},
    "networking.k8s.io/ingressclasses": {"spec": {"controller": "example.com/probe"}},
    "networking.k8s.io/ingresses": {"spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}}},
    "networking.k8s.io/ipaddresses": {"name": "10.96.200.200", "spec": {
        "parentRef": {"resource": "services", "name": "s", "namespace": "{ns}"}}},
    "networking.k8s.io/networkpolicies": {"spec": {"podSelector": {}}},
    "networking.k8s.io/servicecidrs": {"spec": {"cidrs": ["10.200.0.0/24"]}},
    "policy/poddisruptionbudgets": {"spec": {"minAvailable": 1}},
    "rbac.authorization.k8s.io/roles": {"rules": []},
    "rbac.authorization.k8s.io/clusterroles": {"rules": []},
    "rbac.authorization.k8s.io/rolebindings": {"roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"}},
    "rbac.authorization.k8s.io/clusterrolebindings": {"roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"}},
    "storage.k8s.io/csidrivers": {"spec": {}},
    "storage.k8s.io/csinodes": {"spec": {"drivers": []}},
    "storage.k8s.io/csistoragecapacities": {"storageClassName": "sc"},
    "storage.k8s.io/storageclasses": {"provisioner": "example.com/probe"},
    "storage.k8s.io/volumeattachments": {"spec": {"attacher": "probe.example.com", "nodeName": "n",
                                                  "source": {"persistentVolumeName": "pv"}}},
    "storage.k8s.io/volumeattributesclasses": {"driverName": "example.com/probe", "parameters": {"a": "b"}},
    "admissionregistration.k8s.io/mutatingadmissionpolicies": {"spec": {
        "matchConstraints": {"resourceRules": _RULES}, "reinvocationPolicy": "Never",
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'test', path: '/metadata', value: object.metadata}]"}}]}},
    "admissionregistration.k8s.io/mutatingadmissionpolicybindings": {"spec": {"policyName": "p"}},
    "admissionregistration.k8s.io/mutatingwebhookconfigurations": {},
    "admissionregistration.k8s.io/validatingadmissionpolicies": {"spec": {
        "matchConstraints": {"resourceRules": _RULES}, "validations": [{"expression": "true"}]}},
    "admissionregistration.k8s.io/validatingadmissionpolicybindings": {"spec": {
        "policyName": "p", "validationActions": ["Deny"]}},
    "admissionregistration.k8s.io/validatingwebhookconfigurations": {},
    "apiextensions.k8s.io/customresourcedefinitions": {"name": "things.probe.example.com", "spec": {
        "group": "probe.example.com", "scope": "Namespaced",
        "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object"}}}]}},
    "scheduling.k8s.io/priorityclasses": {"value": 5},
    "coordination.k8s.io/leases": {},
    "node.k8s.io/runtimeclasses": {"handler": "probe"},
    "discovery.k8s.io/endpointslices": {"addressType": "IPv4", "endpoints": []},
    "resource.k8s.io/deviceclasses": {"spec": {}},
    "resource.k8s.io/devicetaintrules": {"spec": {"taint": {"key": "example.com/probe", "effect": "NoSchedule"}}},
    "resource.k8s.io/resourceclaims": {"spec": {}},
    "resource.k8s.io/resourceclaimtemplates": {"spec": {"spec": {}}},
    "resource.k8s.io/resourceslices": {"spec": {"driver": "probe.example.com", "allNodes": True, "pool": {
        "name": "p", "generation": 0, "resourceSliceCount": 1}}},
    "flowcontrol.apiserver.k8s.io/flowschemas": {"spec": {
        "priorityLevelConfiguration": {"name": "global-default"}, "matchingPrecedence": 5000}},
    "flowcontrol.apiserver.k8s.io/prioritylevelconfigurations": {"spec": {"type": "Limited", "limited": {
        "nominalConcurrencyShares": 1, "limitResponse": {"type": "Reject"}}}},
    "storagemigration.k8s.io/storageversionmigrations": {"spec": {
        "resource": {"group": "apps", "resource": "deployments"}}},
}


def _pem_material(d: str) -> dict[str, str]:
    """The `{...}` placeholders of SAMPLES, made with the openssl command."""
    def ossl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=probe-ca",
         "-keyout", "ca.key", "-out", "ca.crt")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=probe", "-keyout", "r.key", "-out", "r.csr")
    with open(os.path.join(d, "ca.crt")) as f:
        ca = f.read()
    with open(os.path.join(d, "r.csr"), "rb") as f:
        csr = base64.b64encode(f.read()).decode()
    ossl("genpkey", "-algorithm", "ed25519", "-out", "ed.key")
    ossl("req", "-new", "-key", "ed.key", "-subj", "/CN=probe", "-outform", "DER", "-out", "ed.csr")
    with open(os.path.join(d, "ed.csr"), "rb") as f:
        stub = base64.b64encode(f.read()).decode()
    return {"{ca}": ca, "{csr}": csr, "{stub}": stub}


def _fill(x, subst: dict):
    if isinstance(x, dict):
        return {k: _fill(v, subst) for k, v in x.items()}
    if isinstance(x, list):
        return [_fill(v, subst) for v in x]
    return subst.get(x, x) if isinstance(x, str) else x


def _resources(agg: dict, legacy: dict) -> list[dict]:
    out = []
    for doc in (agg["/api"], agg["/apis"]):
        for g in doc["items"]:
            group = g["metadata"].get("name", "")
            for v in g["versions"]:
                gv = f"{group}/{v['version']}" if group else v["version"]
                flat = {r["name"]: r for r in legacy[gv]["resources"]}
                for r in v.get("resources", []):
                    plain = flat[r["resource"]]
                    assert plain["kind"] == r["responseKind"]["kind"] and r["responseKind"]["group"] == "", r
                    e = {"group": group, "version": v["version"], "kind": r["responseKind"]["kind"],
                         "plural": r["resource"], "singular": r["singularResource"], "scope": r["scope"],
                         "shortNames": r.get("shortNames", []), "categories": r.get("categories", []),
                         "verbs": r["verbs"]}
                    if "storageVersionHash" in plain:
                        e["storageVersionHash"] = plain["storageVersionHash"]
                    subs = []
                    for s in r.get("subresources", []):
                        ps = flat[f"{r['resource']}/{s['subresource']}"]
                        rk = s["responseKind"]
                        # the unaggregated entry says the same (group/version only for another group version)
                        assert (ps.get("group", ""), ps.get("version", ""), ps["kind"], ps["verbs"]) == \
                            (rk["group"], rk["version"], rk["kind"], s["verbs"]), (ps, s)
                        subs.append({"name": s["subresource"], "group": rk["group"], "version": rk["version"],
                                     "kind": rk["kind"], "verbs": s["verbs"]})
                    e["subresources"] = subs
                    out.append(e)
    return out


def extract(api, etcd_endpoint: str) -> dict:
    """`api`: a tests.helpers.client.Api on the reference server (etcd prefix PREFIX)."""
    get, get_agg = generated.json_getter(api), generated.json_getter(api, AGG)
    agg = {p: get_agg(p) for p in ("/api", "/apis")}
    group_list = get("/apis")["groups"]
    legacy = {"v1": get("/api/v1")}
    for g in group_list:
        for v in g["versions"]:
            legacy[v["groupVersion"]] = get("/apis/" + v["groupVersion"])
    resources = _resources(agg, legacy)
    groups = {"aggregated_order": [g["metadata"].get("name", "") for d in agg.values() for g in d["items"]],
              "legacy_order": [""] + [g["name"] for g in group_list],
              "versions": {"": ["v1"], **{g["name"]: [v["version"] for v in g["versions"]] for g in group_list}}}
    for g in group_list:
        assert g["preferredVersion"]["version"] == g["versions"][0]["version"], g
    keys, deleted = probe(api, etcd_endpoint, PREFIX, resources)
    for e in resources:
        if "storageVersionHash" in e:
            k = keys.get((e["group"], e["plural"]))
            if k is None:
                raise SystemExit(f"no key observed for {e['group']}/{e['plural']}")
            e["key"] = k
            e["returnsDeletedObject"] = deleted[(e["group"], e["plural"])]
    return {"source": "kube-apiserver aggregated discovery and etcd keys (tools/discovery_upstream.py)",
            "groups": groups, "resources": resources}


def probe(api, etcd_endpoint: str, prefix: str, resources: list[dict], ns: str = NS,
          inspect=None) -> tuple[dict, dict]:
    """Create one object of every stored resource (its first version listed) through the server `api` (whose
    etcd prefix is `prefix`) in a new namespace `ns`, read back its etcd key, then delete it:
    ({(group, plural): key}, {(group, plural): DELETE answers with the object}). Also run against this
    project's server by tests/test_builtin_kinds.py, whose `inspect({(group, plural): object path})` looks at the
    objects before they are deleted."""
    import asyncio

    from storage.etcd import EtcdClient
    with tempfile.TemporaryDirectory() as d:
        subst = {**_pem_material(d), "{ns}": ns}
    r = api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    assert r.status_code == 201, r.text
    names: dict[str, tuple[str, str]] = {}
    paths: dict[tuple[str, str], str] = {}
    failed: list[str] = []
    done: set[tuple[str, str]] = set()
    for e in resources:
        gr = (e["group"], e["plural"])
        if "storageVersionHash" not in e or gr in done:
            continue  # not stored, or another version of one already probed
        done.add(gr)
        body = _fill(SAMPLES[f"{e['group']}/{e['plural']}"], subst)
        name = body.pop("name", f"{NS}-{e['plural']}")
        namespaced = e["scope"] == "Namespaced"
        obj = {"apiVersion": f"{e['group']}/{e['version']}" if e["group"] else e["version"], "kind": e["kind"],
               "metadata": {"name": name, **({"namespace": ns} if namespaced else {})}, **body}
        base = f"/apis/{e['group']}/{e['version']}" if e["group"] else "/api/v1"
        path = f"{base}/namespaces/{ns}/{e['plural']}" if namespaced else f"{base}/{e['plural']}"
        r = api.post(path, obj)
        if r.status_code != 201:
            failed.append(f"creating {e['group']}/{e['plural']}: {r.status_code} {r.text}")
        names[name] = gr
        paths[gr] = f"{path}/{name}"
    if failed:
        raise SystemExit("\n".join(failed))

    async def all_keys() -> list[str]:
        c = EtcdClient([etcd_endpoint])
        try:
            kvs = (await c.range(prefix.encode() + b"/", prefix.encode() + b"0", keys_only=True))[0]
            return [kv.key.decode() for kv in kvs]
        finally:
            await c.close()
    out: dict[tuple[str, str], str] = {}
    for k in asyncio.run(all_keys()):
        path, _, name = k[len(prefix) + 1:].rpartition("/")
        gr = names.get(name)
        if gr is None:
            continue
        if path.endswith("/" + ns) and gr[1] != "namespaces":
            path = path[:-len(ns) - 1]
        if out.setdefault(gr, path) != path:
            raise SystemExit(f"{gr}: two keys {out[gr]} and {path}")
    if inspect is not None:
        inspect(paths)
    deleted = {gr: _returns_deleted_object(api, p) for gr, p in paths.items()}
    return out, deleted


def _returns_deleted_object(api, path: str) -> bool:
    """Whether DELETE answers with the object (upstream's ReturnDeletedObject) or a Success Status. Finalizers
    (the admission plugins' pvc/pv-protection) are removed first and the propagation is Background (no
    `orphan` finalizer, the default of some kinds), so the object is deleted at once: but for namespaces
    (their `kubernetes` finalizer) and CRDs (removed by their controller), answered with the object."""
    r = api.patch(path, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    assert r.status_code == 200, r.text
    r = api.delete(path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                 "propagationPolicy": "Background"})
    assert r.status_code in (200, 202), r.text
    return r.json()["kind"] != "Status"


def _start_and_extract() -> dict:
    with generated.reference(PREFIX) as (api, etcd_endpoint):
        return extract(api, etcd_endpoint)


def render(data: dict) -> str:
    """One resource per line: readable diffs, a small file."""
    lines = ["{", f' "source": {json.dumps(data["source"])},', f' "groups": {json.dumps(data["groups"])},',
             ' "resources": [']
    lines += [" " + json.dumps(e, ensure_ascii=False) + ("," if i < len(data["resources"]) - 1 else "")
              for i, e in enumerate(data["resources"])]
    return "\n".join(lines + [" ]", "}"]) + "\n"


def main(argv: list[str] | None = None) -> int:
    return generated.main(__doc__.splitlines()[0], "python tools/discovery_upstream.py",
                          lambda: {OUT: render(_start_and_extract())}, argv)


if __name__ == "__main__":
    sys.exit(main())
