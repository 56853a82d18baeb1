"""recipes/manifests.py: every catalog recipe renders to objects that read back into the same stores and
processes, that the real kube-apiserver v1.37.2 accepts under strict field validation (server-side dry run),
and that the CLI prints or writes as YAML."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid

import pytest
import yaml

from recipes import manifests, spec
from tests.helpers import ROOT, current_etcd


def _synthetic(name: str, stores: list[dict], processes: list[dict], workload: list[dict]) -> spec.Recipe:
    return spec.parse({"name": name, "axis": "mixed", "size": {"name": "nodes", "small": 10, "full": 100},
                       "budget": {"cores": 4, "memory_gib": 8}, "stores": stores, "processes": processes,
                       "workload": workload})


# Shapes the catalog does not have (yet): several node tiers and kwoks, three shards with the fronts' count left
# to the default and flags the deployment divides or keeps for shard 0, HA apiservers and controllers.
SYNTHETIC = [
    _synthetic("wide-slice", [{"name": "main", "durability": "none"}, {"name": "pods", "resources": ["/pods"]}],
               [{"kind": "deployment", "shards": 3,
                 "flags": ["--max-requests-inflight=90", "--etcd-compaction-interval=1m", "--cache-compression=false",
                           "--front-shared-watches=false"]},
                {"kind": "nodetier", "count": 2, "flags": ["--forward-interval=20s"]},
                {"kind": "slice-controllers", "count": 3, "workers": 2},
                {"kind": "kwok", "count": 2}],
               [{"kind": "nodes", "nodes": "size"}]),
    _synthetic("ha-plane", [{"name": "main"}, {"name": "leases", "resources": ["coordination.k8s.io/leases"],
                                                "durability": "none"}],
               [{"kind": "apiserver", "name": "api", "count": 3, "flags": ["--max-requests-inflight=800"]},
                {"kind": "kube-scheduler", "count": 2, "flags": ["-v=2"]},
                {"kind": "kube-controller-manager", "count": 2},
                {"kind": "kwok"}],
               [{"kind": "nodes", "nodes": "size"}]),
]
RECIPES = spec.load_all() + SYNTHETIC
NS = "residency"

# kind -> (API prefix, collection) for the kinds render() makes
COLLECTIONS = {"Secret": ("/api/v1", "secrets"), "ConfigMap": ("/api/v1", "configmaps"),
               "Service": ("/api/v1", "services"), "Deployment": ("/apis/apps/v1", "deployments"),
               "StatefulSet": ("/apis/apps/v1", "statefulsets")}


def expected(r: spec.Recipe) -> dict:
    return {"name": r.name, "stores": [dataclasses.asdict(s) for s in r.stores],
            "processes": [dataclasses.asdict(p) for p in r.processes]}


def containers(objects: list[dict]):
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet"):
            yield o, o["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_round_trip(recipe):
    objects = manifests.render(recipe, namespace=NS)
    for o in objects:
        assert o["apiVersion"] and o["kind"] in COLLECTIONS, o
        assert o["metadata"]["name"] and o["metadata"]["namespace"] == NS, o["metadata"]
        assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == recipe.name
        assert o["metadata"]["labels"]["recipes.residency.io/recipe"] == recipe.name
        assert manifests.SOURCE in o["metadata"]["annotations"]
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), names
    assert manifests.to_recipe(objects) == expected(recipe)
    # the recipe's own flags are on the command lines (a deployment's are routed to its shards or fronts, but
    # those it divides or keeps for one shard: test_deployment_flags)
    args = {o["metadata"]["name"]: c["args"] for o, c in containers(objects)}
    for p in recipe.processes:
        for flag in p.flags:
            if p.kind == "deployment" and flag.split("=")[0] in ("--max-requests-inflight",
                                                                 "--etcd-compaction-interval"):
                continue
            assert any(flag in a for a in args.values()), (p.name, flag)


def test_what_the_runner_would_run():
    """Spot checks of the mapping: routing by DNS name, durability, shard ranges, fronts, kwok's selector."""
    r = spec.load("sharded-slice")
    objects = {(o["kind"], o["metadata"]["name"]): o for o in manifests.render(r, namespace="ns")}
    etcd = lambda s: f"http://etcd-{s}-0.etcd-{s}.ns.svc:2379"  # noqa: E731
    leases = objects["StatefulSet", "etcd-leases"]["spec"]
    assert "--unsafe-no-fsync" in leases["template"]["spec"]["containers"][0]["args"]
    assert leases["template"]["spec"]["volumes"] == [{"name": "data", "emptyDir": {"medium": "Memory"}}]
    assert "volumeClaimTemplates" in objects["StatefulSet", "etcd-main"]["spec"]
    shard0 = objects["StatefulSet", "deployment-shard-0"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert shard0[:2] == ["--etcd-servers", etcd("main")]
    assert (f"--etcd-servers-overrides=/events#{etcd('events')},coordination.k8s.io/leases#{etcd('leases')},"
            f"slice.example.com/widgets#{etcd('widgets')}") in shard0
    assert shard0[-2:] == ["--residency", "shardRange(object.metadata.uid, '0x0000000000000000', "
                                          "'0x8000000000000000')"]
    front = objects["Deployment", "deployment-front"]
    assert front["spec"]["replicas"] == 2
    fargs = front["spec"]["template"]["spec"]["containers"][0]["args"]
    i = fargs.index("--shards")
    assert fargs[i + 1] == ("http://deployment-shard-0-0.deployment-shards.ns.svc:8080,"
                            "http://deployment-shard-1-0.deployment-shards.ns.svc:8080")
    kwok = objects["Deployment", "kwok"]["spec"]["template"]["spec"]
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=kwok" in kwok["containers"][0]["args"]
    assert kwok["automountServiceAccountToken"] is False
    # the budget is divided, not multiplied: the requests add up to at most the recipe's cores
    total = sum(int(c["resources"]["requests"]["cpu"][:-1]) * o["spec"]["replicas"]
                for o, c in containers(list(objects.values())))
    assert 0.9 * r.budget["cores"] * 1000 <= total <= r.budget["cores"] * 1000


def test_deployment_flags():
    """As python -m deployment hands them out: fronts get the N-th of the in-flight limits and the front flags,
    shard 0 alone compacts (at the recipe's interval), the shards keep the cache flags."""
    objects = {o["metadata"]["name"]: o for o in manifests.render(SYNTHETIC[0])}
    args = lambda n: objects[n]["spec"]["template"]["spec"]["containers"][0]["args"]  # noqa: E731
    front = args("deployment-front")
    assert objects["deployment-front"]["spec"]["replicas"] == 2
    assert front[front.index("--max-requests-inflight") + 1] == "45"
    assert "--front-shared-watches=false" in front and "--cache-compression=false" not in front
    shards = [args(f"deployment-shard-{j}") for j in range(3)]
    assert [a[a.index("--etcd-compaction-interval") + 1] for a in shards] == ["1m", "0", "0"]
    assert all("--cache-compression=false" in a and "--front-shared-watches=false" not in a for a in shards)
    assert len({a[a.index("--residency") + 1] for a in shards}) == 3


def test_node_tiers_by_pod_index():
    objects = {(o["kind"], o["metadata"]["name"]): o for o in manifests.render(SYNTHETIC[0], namespace="ns")}
    sts = objects["StatefulSet", "nodetier"]
    assert sts["spec"]["replicas"] == 2 and sts["spec"]["serviceName"] == "nodetier-tiers"
    assert objects["Service", "nodetier-tiers"]["spec"]["clusterIP"] == "None"
    c = sts["spec"]["template"]["spec"]["containers"][0]
    assert c["args"][-4:] == ["--tiers", "http://nodetier-0.nodetier-tiers.ns.svc:8090,"
                              "http://nodetier-1.nodetier-tiers.ns.svc:8090", "--tier-index", "$(TIER_INDEX)"]
    assert c["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    selectors = [objects["Deployment", f"kwok-{j}"]["spec"]["template"]["spec"]["containers"][0]["args"][3]
                 for j in range(2)]
    assert selectors == [f"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=kwok-{j}" for j in range(2)]


def test_edits_show_in_the_recipe_read_back():
    """to_recipe reads counts and durability from the objects, not only from the annotation."""
    r = spec.load("node-bound")
    objects = manifests.render(r)
    for o in objects:
        if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "etcd-leases":
            o["spec"]["template"]["spec"]["containers"][0]["args"].remove("--unsafe-no-fsync")
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "apiserver":
            o["spec"]["replicas"] = 3
    back = manifests.to_recipe(objects)
    assert back["stores"][1]["durability"] == "fsync"
    assert back["processes"][0]["count"] == 3


# --- the real kube-apiserver: every object passes a server-side dry run under strict validation -------------

@pytest.fixture(scope="module")
def kube():
    from tests.helpers.kube import KubeApiserver
    with current_etcd() as etcd, KubeApiserver(etcd.endpoint, prefix="/registry") as k:
        yield k


def test_server_side_dry_run(kube):
    import requests
    s = requests.Session()
    # per request: a session's `verify` loses to REQUESTS_CA_BUNDLE from the environment
    tls = {"cert": kube.client_cert, "verify": kube.ca, "timeout": 30}
    failures = []
    for r in RECIPES:
        ns = f"m-{r.name}"[:50] + "-" + uuid.uuid4().hex[:6]
        resp = s.post(kube.url + "/api/v1/namespaces", json={"metadata": {"name": ns}}, **tls)
        assert resp.status_code == 201, resp.text
        for o in manifests.render(r, namespace=ns):
            prefix, plural = COLLECTIONS[o["kind"]]
            resp = s.post(f"{kube.url}{prefix}/namespaces/{ns}/{plural}",
                          params={"dryRun": "All", "fieldValidation": "Strict"}, json=o, **tls)
            if resp.status_code != 201:
                failures.append((r.name, o["kind"], o["metadata"]["name"], resp.status_code, resp.text[:500]))
    assert not failures, failures


def test_strict_validation_catches_a_typo(kube):
    """The dry run above proves something: a misspelt field is refused (400) under Strict."""
    import requests
    obj = manifests.render(spec.load("node-bound"), namespace="default")
    dep = next(o for o in obj if o["kind"] == "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    resp = requests.post(f"{kube.url}/apis/apps/v1/namespaces/default/deployments",
                         params={"dryRun": "All", "fieldValidation": "Strict"}, json=dep,
                         cert=kube.client_cert, verify=kube.ca, timeout=30)
    assert resp.status_code == 400 and "readinesProbe" in resp.text, resp.text


# --- the CLI --------------------------------------------------------------------------------------------

def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "recipes", "manifests", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_cli_stream():
    out = cli("node-bound", "--out", "-")
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert docs == manifests.render(spec.load("node-bound"))
    assert manifests.to_recipe(docs) == expected(spec.load("node-bound"))
    assert out.stdout.startswith("# placeholder:")   # the TLS Secret says what to fill in


def test_cli_directory(tmp_path):
    out = cli("node-bound", "--out", str(tmp_path / "m"), "--namespace", "elsewhere", "--image", "me/img:1")
    assert out.returncode == 0, out.stderr
    objects = manifests.render(spec.load("node-bound"), namespace="elsewhere", image="me/img:1")
    files = sorted(os.listdir(tmp_path / "m"))
    assert files == sorted(f"{o['kind'].lower()}-{o['metadata']['name']}.yaml" for o in objects)
    for o in objects:
        with open(tmp_path / "m" / manifests.filename(o)) as f:
            assert yaml.safe_load(f) == o
    images = {c["image"] for _, c in containers(objects)}
    assert "me/img:1" in images
