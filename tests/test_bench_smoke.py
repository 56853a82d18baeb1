"""Smoke test of the etcd-path benchmark: `python -m bench.etcd_path --quick` runs end to end.

No timing thresholds (machines are noisy): only that every figure is present and a positive number.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.etcd_path import FIGURES
from tests.helpers.gobin import ready_binaries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True, scope="module")
def binaries():
    """A current etcd and kube-apiserver (bench.vs_upstream), built or waited for before a benchmark's time
    limit starts counting (a cold CI run waited for kube-apiserver's build inside it and timed out)."""
    ready_binaries("etcd", "kube-apiserver")


def test_etcd_path_quick(tmp_path):
    out = tmp_path / "etcd_path.json"
    r = subprocess.run([sys.executable, "-m", "bench.etcd_path", "--quick", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "watch-events/s" in r.stdout and "list-objs/s" in r.stdout, r.stdout
    doc = json.loads(out.read_text())
    figs = doc["figures"]
    for name in FIGURES:
        v = figs.get(name)
        assert isinstance(v, (int, float)) and not isinstance(v, bool), (name, v)
        assert v > 0, (name, v)
    assert figs["list_paged_pages"] > 1  # the paged list really followed continue tokens
    vers = doc["versions"]
    for k in ("python", "aiohttp", "etcd", "cpu_model", "cpu_count"):
        assert vers.get(k), k
    assert isinstance(vers["etcd"], dict) and vers["etcd"].get("etcdserver"), vers["etcd"]


# --- the watch-cache benchmarks (issue 3): --quick runs, figures present and sane, no timing thresholds ----

def _run_quick(module: str, out, timeout: int = 120, extra: tuple[str, ...] = ()) -> dict:
    r = subprocess.run([sys.executable, "-m", f"bench.{module}", "--quick", "--out", str(out), *extra],
                       cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip(), "no table on stdout"
    doc = json.loads(out.read_text())
    assert doc["versions"].get("python"), doc["versions"]
    return doc


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def test_cache_reads_quick(tmp_path):
    from bench.cache_reads import FIGURES as CR_FIGURES
    doc = _run_quick("cache_reads", tmp_path / "cache_reads.json")
    figs = doc["figures"]
    for mode in ("cache_on", "cache_off"):
        for name in CR_FIGURES:
            if name in ("etcd_list", "etcd_current_rv", "etcd_requests_per_list"):
                assert isinstance(figs[mode][name], (int, float)), (mode, name)
            else:
                assert _positive(figs[mode][name]), (mode, name, figs[mode][name])
    assert figs["cache_off"]["etcd_list"] >= figs["cache_off"]["lists"]  # every list is a range from etcd
    assert isinstance(doc["versions"]["etcd"], dict) and doc["versions"]["etcd"].get("etcdserver")


def test_heap_per_object_quick(tmp_path):
    doc = _run_quick("heap_per_object", tmp_path / "heap.json")
    for kind in ("pod", "configmap", "rolebinding", "ai_pod"):
        row = doc["figures"][kind]
        for k in ("json_bytes", "cache_tracemalloc_bytes", "native_bytes_per_object", "cache_rss_bytes",
                  "dict_tracemalloc_bytes", "target_bytes"):
            assert _positive(row[k]), (kind, k, row[k])
        assert row["native_bytes_per_object"] >= row["json_bytes"]  # the bytes themselves are kept


def test_watch_fanout_quick(tmp_path):
    doc = _run_quick("watch_fanout", tmp_path / "fanout.json")
    runs = doc["figures"]["runs"]
    assert {"on_20", "on_100", "off_20"} <= set(runs)
    for r in runs.values():
        assert r["deliveries"] == r["deliveries_expected"], r
        assert _positive(r["deliveries_per_s"]) and r["latency_p99_ms"] is not None


def test_list_memory_quick(tmp_path):
    doc = _run_quick("list_memory", tmp_path / "lm.json")
    cases = doc["figures"]
    assert set(cases) == {"cache on, RV=0", "cache on, consistent", "cache off, consistent"}
    for c in cases.values():
        assert _positive(c["list_bytes"]) and _positive(c["hwm_mib"]) and c["growth_mib"] >= 0


def test_snapshot_retention_quick(tmp_path):
    doc = _run_quick("snapshot_retention", tmp_path / "sr.json")
    f = doc["figures"]
    assert _positive(f["live_cache_bytes"]) and f["kept"]["snapshots"] > f["dropped"]["snapshots"]
    assert isinstance(f["snapshot_fraction_of_live"], float)


def test_front_lists_timed_by_the_compiled_client(tmp_path):
    """bench.front with bench/go/lister: both servers' lists timed, the same bytes, the watch delivered."""
    out = tmp_path / "front.json"
    r = subprocess.run([sys.executable, "-m", "bench.front", "--objects", "120", "--lists", "3", "--writes", "10",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["client"] == "go"
    for key in ("list all front", "list all full", "list limit=500 front", "list limit=500 full"):
        assert _positive(doc["lists_ms"][key]["p50"]), (key, doc["lists_ms"])
    for label in ("list all", "list limit=500"):   # no writes while listing: the same list from both
        assert doc["lists_ms"][f"{label} front"]["bytes"] == doc["lists_ms"][f"{label} full"]["bytes"] > 10_000
    assert doc["watch_ms"]["front"]["events"] == doc["watch_ms"]["full"]["events"] == 10


def test_all_lists_every_benchmark():
    from bench.all import BENCHMARKS
    for name in BENCHMARKS:
        assert os.path.exists(os.path.join(ROOT, "bench", f"{name}.py")), name


# --- ours against kube-apiserver (issue 12): both sides measured, every shape present --------------------------

def test_vs_upstream_quick(tmp_path):
    from bench.vs_upstream import KINDS, LIST_SHAPES
    doc = _run_quick("vs_upstream", tmp_path / "vs_upstream.json", timeout=300, extra=("--sections", "memory,lists"))
    assert doc["versions"]["kube_apiserver"] == "v1.37.2"
    assert set(doc["memory"]) == set(KINDS)
    for name, row in doc["memory"].items():
        # both caches held exactly the loaded objects (checked by the bench); ours grew by a positive amount
        assert row["objects"] > 0 and row["json_bytes_per_object"] > 0, (name, row)
        assert row["ours_heap_per_object"] > 0, (name, row)
        assert "ours_rss_traced_per_object" in row, row   # RSS read from the twin run without tracemalloc
    assert len(doc["lists"]) == 2 * len(LIST_SHAPES)
    for name, row in doc["lists"].items():
        for side in ("ours", "kube"):
            assert row[side]["n"] > 0 and row[side]["p50_ms"] > 0, (name, side, row)
        # both servers returned the same bytes for the same list (same objects, same RV semantics)
        if "label" not in name:
            assert row["ours"]["bytes"] > 0 and abs(row["ours"]["bytes"] - row["kube"]["bytes"]) < 0.01 * row["kube"]["bytes"]


def test_vs_upstream_fanout_throughput_restart_quick(tmp_path):
    """The other sections of issues 12 and 21 in quick mode (~1.5 min): every watcher got every update from both
    servers (the compiled fan-out driver too, at its first rate), both served every create/update/GET, both came
    back with every object after a restart."""
    doc = _run_quick("vs_upstream", tmp_path / "vs_upstream.json", timeout=300,
                     extra=("--sections", "fanout,saturation,throughput,restart"))
    assert doc["versions"]["kube_apiserver"] == "v1.37.2" and doc["versions"]["git_commit"]
    assert set(doc) >= {"fanout", "saturation", "throughput", "restart"} and "memory" not in doc
    for name, row in doc["saturation"].items():
        for side in ("ours", "kube"):
            first = row[side][0]["steps"][0]   # 20 writes/s to 20 watchers: both keep up
            assert first["ok"] and first["deliveries"] == first["expected"] == first["writes"] * 20, (side, first)
            assert first["p99_ms"] <= 1000 and row[side][0]["score_deliveries_per_s"] > 0, (side, row[side])
        assert _positive(row["score_ratio"]), row
    for name, row in doc["fanout"].items():
        for side in ("ours", "kube"):
            r = row[side]
            assert r["deliveries"] == r["deliveries_expected"] > 0 and r["incomplete_watchers"] == 0, (name, side, r)
            # ack-to-delivery may be negative (the watched server can beat the writer's ack stamp); send-to-delivery not
            assert _positive(r["deliveries_per_s"]) and _positive(r["sent_latency_p99_ms"]), (name, side, r)
            assert isinstance(r["latency_p99_ms"], float) and r["latency_p99_ms"] <= r["sent_latency_p99_ms"], r
        assert _positive(row["deliveries_ratio"]), row
    assert set(doc["throughput"]) == {"create", "update", "get"}
    for verb, row in doc["throughput"].items():
        for side in ("ours", "kube"):
            assert row[side]["n"] > 0 and _positive(row[side]["per_s"]), (verb, side, row)
            # sent by the compiled writer (the default), every answer counted by its status
            assert row[side]["statuses"] == {"201" if verb == "create" else "200": row[side]["n"]}, (verb, side, row)
    rs = doc["restart"]
    assert rs["objects"] > 0 and _positive(rs["json_bytes_per_object"])
    for side in ("ours", "kube"):
        assert 0 < rs[side]["readyz_s"] <= rs[side]["ready_s"], (side, rs[side])
        assert _positive(rs[side]["peak_rss"]), (side, rs[side])
    assert _positive(rs["ready_ratio"]) and _positive(rs["peak_rss_ratio"])


def test_deployment_quick(tmp_path):
    """bench.deployment (issue 21) in quick mode: ours in one process, `python -m deployment` (2 fronts, 1 shard)
    and kube, every section measured on all three, every watcher got every event at the ladder's first rate."""
    doc = _run_quick("deployment", tmp_path / "deployment.json", timeout=400, extra=("--fronts", "2"))
    sides = {"ours", "deployment", "kube"}
    assert doc["fronts"] == 2 and doc["shards"] == 1
    for name, row in doc["saturation"].items():
        assert set(row["runs"]) == sides
        for side, ladders in row["runs"].items():
            first = ladders[0]["steps"][0]
            assert first["ok"] and first["deliveries"] == first["expected"] > 0, (name, side, first)
    assert set(doc["lists"]) == sides and all(r["n"] > 0 and r["p99_ms"] > 0 for r in doc["lists"].values())
    for verb in ("create", "update"):
        assert all(_positive(r["per_s"]) for r in doc["throughput"][verb].values()) and \
            set(doc["throughput"][verb]) == sides
        assert all(r["statuses"] == {"201" if verb == "create" else "200": r["n"]}
                   for r in doc["throughput"][verb].values()), doc["throughput"][verb]
    mem = doc["memory"]
    assert set(mem) == sides and all(_positive(r["memory_bytes"]) for r in mem.values())
    assert set(mem["deployment"]["processes"]) == {"shard-0", "front-0", "front-1"}
    assert mem["deployment"]["memory_bytes"] > sum(mem["deployment"]["processes"].values())   # + the supervisor


# --- the HTTP fuzz run (issue 14), short form: the same criteria as the long run -------------------------------

def test_http_fuzz_short(tmp_path):
    """`python -m bench.http_fuzz` with 1,500 requests of a seed of its own: zero 5xx, no dropped connection,
    the server alive, no request over 1 s of server CPU, RSS growth under 100 MB (the bench's exit status)."""
    out = tmp_path / "http_fuzz.json"
    r = subprocess.run([sys.executable, "-m", "bench.http_fuzz", "--requests", "1500", "--seed", "3",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    doc = json.loads(out.read_text())
    assert r.returncode == 0, (r.stdout[-2000:], doc["failures"][:5])
    assert doc["requests"] == 1500 and doc["five_xx"] == 0 and doc["server_alive"]
    # the inputs reach the parsers: most answers are 4xx, and some requests succeed
    codes = {int(k) for k in doc["statuses"] if k.isdigit()}
    assert {200, 201, 400, 404, 422} <= codes, doc["statuses"]


# --- the RBAC memory floor (issue 14): --quick runs, every figure present and positive, no thresholds ----------

def test_rbac_floor_quick(tmp_path):
    from bench.rbac_floor import FIGURES as RBAC_FIGURES
    doc = _run_quick("rbac_floor", tmp_path / "rbac_floor.json", timeout=300)
    assert [s["objects"] for s in doc["steps"]] == [300, 1000]
    for step in doc["steps"]:
        for name in RBAC_FIGURES:   # RSS deltas of a few hundred objects are noise: present, not necessarily > 0
            v = step["figures"][name]
            assert isinstance(v, (int, float)) and (name.endswith("_rss") or v > 0), (step["objects"], name, v)
        idx = step["index"]
        assert sum(idx["counts"].values()) == step["objects"] + idx["bootstrap_objects"]
        assert 0 < idx["allowed"] < idx["decisions"]   # the request mix has both answers
        assert step["cache"]["rbac_objects"] >= step["objects"]
