"""The node axis's recipe at small scale, run by its README command (`python -m recipes run node-bound`): kwok
nodes renewing through the node tier onto a Lease store, a real kube-controller-manager judging them."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT
from tests.recipe_checks import assert_small_run


def test_node_bound_recipe_runs_small(tmp_path):
    out = tmp_path / "node-bound.json"
    p = subprocess.run([sys.executable, "-m", "recipes", "run", "node-bound", "--scale", "small", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    print(p.stdout[-6000:], p.stderr[-3000:])
    assert p.returncode == 0, p.stderr[-3000:]
    # what starts and where its log is, printed as it starts
    for name in ("etcd-main", "etcd-leases", "apiserver", "nodetier", "kube-controller-manager", "kwok"):
        assert f" {name} " in p.stdout and ".log" in p.stdout, name
    assert "verdict:" in p.stdout and "stopped every process" in p.stdout
    doc = json.loads(out.read_text())
    assert_small_run(doc, {"apiserver", "nodetier", "kube-controller-manager", "kwok", "etcd-main", "etcd-leases"},
                     {"mutating", "read-resource", "read-namespace", "read-cluster"})
    assert doc["size"] == {"nodes": 40}
