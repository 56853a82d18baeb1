"""The state axis's recipe at small scale: realistic ConfigMaps in two resident shards with compression, read
through two fronts (GETs, namespace and cluster lists) while a few are updated."""
from __future__ import annotations

import asyncio

from recipes import runner, spec
from tests.recipe_checks import assert_small_run


def test_state_bound_recipe_runs_small():
    doc = asyncio.run(runner.run(spec.load("state-bound"), scale="small"))
    print(runner.report(doc))
    assert_small_run(doc, {"deployment/supervisor", "deployment/front-0", "deployment/front-1", "deployment/shard-0",
                           "deployment/shard-1", "etcd-main"},
                     {"mutating", "read-resource", "read-namespace", "read-cluster"})
    assert doc["load"]["state"]["objects"] == 1500


def test_up_starts_a_recipe_and_stops_it_on_sigterm(tmp_path):
    """`python -m recipes up NAME`, the one launcher: every process printed with its log as it starts, a
    ready line with the address and a kubeconfig, the API served there, and SIGTERM stops everything (exit 0)."""
    import json
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from tests.helpers import ROOT
    from tests.recipe_checks import alive
    p = subprocess.Popen([sys.executable, "-m", "recipes", "up", "state-bound", "--dir", str(tmp_path)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
            if line.startswith("ready: "):
                break
        url = lines[-1].split()[1]
        pids = [int(ln.split(" pid ")[1].split()[0]) for ln in lines if " pid " in ln]
        assert pids and any("deployment" in ln and ".log" in ln for ln in lines), lines
        assert (tmp_path / "kubeconfig").read_text().count(url) == 1
        with urllib.request.urlopen(url + "/api/v1/namespaces/default/configmaps", timeout=10) as r:
            assert json.loads(r.read())["kind"] == "ConfigMapList"
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    assert "stopped every process" in out
    assert not [pid for pid in pids if alive(pid)]
