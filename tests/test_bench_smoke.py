"""Smoke test of the etcd-path benchmark: `python -m bench.etcd_path --quick` runs end to end.

No timing thresholds (machines are noisy): only that every figure is present and a positive number.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.etcd_path import FIGURES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
