"""Smoke test of the residency benchmark: `python -m bench.residency --quick` runs end to end.

No timing thresholds (machines are noisy): every figure is present and a positive number, the PNG is
written, and the correctness check (union of sharded lists == full list at the same RV) passed for
every profile and K.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from bench.residency import FIGURES, MEASURES, profile_figures
from tests.helpers.gobin import ready_binaries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True, scope="module")
def binaries():
    """A current etcd, built or waited for before a benchmark's time limit starts counting."""
    ready_binaries("etcd")


def test_residency_quick(tmp_path):
    out = tmp_path / "residency.json"
    png = tmp_path / "residency.png"
    r = subprocess.run([sys.executable, "-m", "bench.residency", "--quick", "--out", str(out), "--png", str(png)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ideal 1/K" in r.stdout and "targets (reported, not asserted)" in r.stdout, r.stdout
    doc = json.loads(out.read_text())
    figs = doc["figures"]
    profiles = doc["params"]["profiles"]
    ks = doc["params"]["ks"]
    assert set(profiles) == {"node", "churn", "state"} and ks
    for name in FIGURES + tuple(profile_figures(profiles, ks)):
        v = figs.get(name)
        assert isinstance(v, (int, float)) and not isinstance(v, bool), (name, v)
        assert v > 0, (name, v)
    for name, pr in doc["profiles"].items():
        assert [run["k"] for run in pr["runs"]] == ks
        for run in pr["runs"]:
            assert run["check"]["passed"], (name, run["k"], run["check"]["problems"])
            assert len(run["shards"]) == run["k"]
            for m in MEASURES:
                assert all(s[m] > 0 for s in run["shards"]) and run["full"][m] > 0, (name, run["k"], m)
    assert doc["checks_passed"] is True
    assert doc["profiles"]["state"]["rbac_sharded"] is True
    assert png.stat().st_size > 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    vers = doc["versions"]
    for k in ("python", "aiohttp", "orjson", "pyroaring", "etcd", "cpu_model", "cpu_count"):
        assert vers.get(k), k
    assert isinstance(vers["etcd"], dict) and vers["etcd"].get("etcdserver"), vers["etcd"]


def test_residency_advisor_read_only_on_existing_data(tmp_path):
    """`python -m bench.residency --read-only --etcd-servers URL --prefix P`: objects loaded beforehand through an
    apiserver are measured where they are; etcd's revision does not move; every loaded object is counted, the
    shards' residents sum to the full replica's, fully resident kinds are in every shard, the check passes."""
    from tests.helpers import Api, crd, current_etcd, etcd_revision, start_apiserver

    group = "adv.example.com"
    prefix = f"/registry-adv{os.getpid()}"
    out, png = tmp_path / "data.json", tmp_path / "data.png"
    # An etcd of its own: the revision check must not see other servers' writes.
    with current_etcd() as etcd:
        loader = start_apiserver(etcd.endpoint, prefix, "--etcd-compaction-interval=0")
        try:
            api = Api(loader.base)
            for ns in ("adv-a", "adv-b"):
                assert api.post("/api/v1/namespaces", {"metadata": {"name": ns}}).status_code == 201
            for i in range(40):
                ns = "adv-a" if i % 4 else "adv-b"
                body = {"metadata": {"name": f"cm-{i}", "labels": {"i": str(i)}}, "data": {"k": "v" * (100 + i)}}
                assert api.post(f"/api/v1/namespaces/{ns}/configmaps", body).status_code == 201
            for i in range(12):
                body = {"metadata": {"name": f"s-{i}"}, "stringData": {"k": "x" * 50}}
                assert api.post("/api/v1/namespaces/adv-a/secrets", body).status_code == 201
            assert api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                            crd(group, "gadgets", "Gadget")).status_code == 201
            deadline = time.monotonic() + 30
            while api.get(f"/apis/{group}/v1/gadgets").status_code != 200:
                assert time.monotonic() < deadline, "CRD not served"
                time.sleep(0.1)
            for i in range(8):
                body = {"apiVersion": f"{group}/v1", "kind": "Gadget", "metadata": {"name": f"g-{i}"}, "spec": {"n": i}}
                assert api.post(f"/apis/{group}/v1/namespaces/adv-b/gadgets", body).status_code == 201
            for i in range(3):
                body = {"metadata": {"name": f"adv-role-{i}"}, "rules": []}
                assert api.post("/apis/rbac.authorization.k8s.io/v1/clusterroles", body).status_code == 201
            namespaces = len(api.get("/api/v1/namespaces").json()["items"])
        finally:
            loader.stop()
        before = etcd_revision(etcd.endpoint)
        r = subprocess.run([sys.executable, "-m", "bench.residency", "--read-only", "--etcd-servers", etcd.endpoint,
                            "--prefix", prefix, "--ks", "1,2", "--out", str(out), "--png", str(png)],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
        after = etcd_revision(etcd.endpoint)
    assert r.returncode == 0, r.stderr[-3000:]
    assert after == before, "the advisor wrote to etcd"
    doc = json.loads(out.read_text())
    assert doc["mode"] == "read-only"
    assert doc["source"]["revision_before"] == doc["source"]["revision_after"] == before
    assert doc["source"]["prefix"] == prefix and doc["source"]["unserved_keys_total"] == 0
    loaded = {"configmaps": 40, "secrets": 12, f"gadgets.{group}": 8, "namespaces": namespaces,
              "clusterroles.rbac.authorization.k8s.io": 3, "customresourcedefinitions.apiextensions.k8s.io": 1}
    data = doc["profiles"]["data"]
    assert data["counts"] == loaded
    assert doc["source"]["etcd_keys"] == sum(loaded.values())
    assert data["workload_bytes"] > 40 * 100
    assert [run["k"] for run in data["runs"]] == [1, 2]
    full_resident = {"namespaces", "clusterroles.rbac.authorization.k8s.io",
                     "customresourcedefinitions.apiextensions.k8s.io"}
    for run in data["runs"]:
        assert run["check"]["passed"], run["check"]["problems"]
        assert run["writes_per_s_while_measuring"] == 0
        assert len(run["shards"]) == run["k"]
        for res, n in loaded.items():
            assert run["full"]["resources"][res]["objects"] == n, res
            per_shard = [sh["resources"][res]["objects"] for sh in run["shards"]]
            if res in full_resident:
                assert per_shard == [n] * run["k"], res
            else:
                assert sum(per_shard) == n, (res, per_shard)
        if run["k"] == 2:
            assert all(0 < sh["resources"]["configmaps"]["objects"] < 40 for sh in run["shards"])
        for m in MEASURES:
            assert run["full"][m] > 0 and all(sh[m] > 0 for sh in run["shards"]), m
            sm = run["summary"][m]
            assert sm["full_bytes"] == run["full"][m] and sm["mean_over_full"] > 0
        # native object state splits as the objects do
        assert run["summary"]["object_state"]["shard_sum_bytes"] >= run["full"]["object_state"] * 0.9
    assert doc["checks_passed"] is True
    assert "read-only over" in r.stdout and "ideal 1/K" in r.stdout and "resident objects" in r.stdout, r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_residency_realistic_quick(tmp_path):
    """`--profiles realistic` (issue 23): the state-bound kinds as a cluster holds them (bench/corpus.py), the
    shards and the full replica measured beside a full replica with --cache-compression=false; at 1,200 objects
    the full replica's kinds pass the 256 entries at which a cache compresses, so its object bytes fall well
    below the uncompressed replica's."""
    out = tmp_path / "residency.json"
    r = subprocess.run([sys.executable, "-m", "bench.residency", "--quick", "--profiles", "realistic", "--objects",
                        "1200", "--ks", "2", "--out", str(out), "--png", str(tmp_path / "residency.png")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "against a full replica with --cache-compression=false" in r.stdout, r.stdout
    doc = json.loads(out.read_text())
    pr = doc["profiles"]["realistic"]
    assert set(pr["counts"]) == {"ConfigMaps", "Secrets", "Pods", "RoleBindings", "100KB-Pods"}, pr["counts"]
    (run,) = pr["runs"]
    assert run["check"]["passed"], run["check"]["problems"]
    plain, full = run["uncompressed_full"], run["full"]
    assert plain["resources"]["configmaps"]["objects"] == full["resources"]["configmaps"]["objects"] == 360
    assert run["summary"]["native"]["full_over_uncompressed_full"] < 0.8, run["summary"]["native"]
    assert any(t["target"].startswith("K=2 with compression") for t in doc["targets"])
    nt = run["rss_without_tracemalloc"]       # twins of the full replicas and the shards, without tracemalloc
    assert len(nt["shard_bytes"]) == 2 and all(v > 0 for v in nt["shard_bytes"]) and nt["uncompressed_full_bytes"] > 0
