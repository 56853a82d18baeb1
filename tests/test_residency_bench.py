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

from bench.residency import FIGURES, MEASURES, profile_figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
