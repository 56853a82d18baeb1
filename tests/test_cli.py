"""The command line: flag validation, embedded etcd lifecycle, HTTPS, per-resource etcd routing."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from storage.embedded import EmbeddedEtcd, free_port
from tests.helpers import ApiserverProcess, start_apiserver
from tests.helpers.kube import self_signed_serving_cert
from tests.helpers.ports import free_runs


@pytest.mark.parametrize("args,needle", [
    (["--port", "abc"], "invalid port"),
    (["--port", "70000"], "out of range"),
    (["--etcd-servers", "ftp://x:1"], "invalid etcd server URL"),
    (["--etcd-servers-overrides", "configmaps-no-hash"], "--etcd-servers-overrides entry"),
    (["--etcd-servers-overrides", "/configmaps#notaurl"], "invalid etcd server URL"),
    (["--bind-address", "localhost:1"], "invalid IP address"),
    (["--secure-port", "8443"], "--secure-port needs --tls-cert-file"),
    (["--watch-cache", "maybe"], "invalid boolean"),
    (["--etcd-prefix", "registry"], "must start with '/'"),
])
def test_malformed_flags_are_refused_at_start(args, needle):
    r = subprocess.run([sys.executable, "-m", "apiserver", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr
    assert "Traceback" not in r.stderr


def test_embedded_etcd_starts_and_stops_with_the_server(tmp_path):
    """README command 1: no --etcd-servers starts a real etcd in the state dir, stopped on exit."""
    srv = ApiserverProcess("--state-dir", str(tmp_path), stderr_pipe=True).start()  # no --etcd-servers
    proc = srv.popen
    try:
        assert srv.poll_ready(30)
        ns = requests.get(f"{srv.base}/api/v1/namespaces").json()
        assert {"default", "kube-system"} <= {i["metadata"]["name"] for i in ns["items"]}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "kubectl --server http://127.0.0.1:" in err
    assert os.path.isdir(tmp_path / "etcd" / "member-data")
    # The etcd child is gone: nothing listens on its port any more.
    etcd_line = [l for l in err.splitlines() if l.startswith("embedded etcd:")][0]
    endpoint = etcd_line.split()[2]
    with pytest.raises(requests.RequestException):
        requests.get(endpoint + "/health", timeout=1)


def test_embedded_etcd_never_takes_the_servers_own_port(tmp_path, monkeypatch):
    """The server binds its --port only once its embedded etcd is up, and etcd's ports come from the same
    RESIDENCY_PORT_RANGE its parent picked --port from: etcd must not take that port (a CI run failed with
    "cannot listen on ...: address already in use", etcd holding the test's port). With a range of three
    ports, one of them --port, etcd's two are the other two, every time (without the fix, etcd's random walk
    took --port in about two starts of three). A fresh range each start: a stopped etcd's ports linger in
    TIME_WAIT, which free_port counts as taken."""
    free_port()   # this process's walk is somewhere in its wide range, as after any earlier test of the worker
    for i, base in enumerate(free_runs(3, 3)):
        monkeypatch.setenv("RESIDENCY_PORT_RANGE", f"{base}-{base + 3}")
        assert base <= free_port() < base + 3   # a narrowed range is walked from inside it (a CI run got 16036)
        srv = ApiserverProcess("--state-dir", str(tmp_path / str(i)), stderr_pipe=True).start()
        try:
            assert srv.poll_ready(30), srv.popen.stderr.read() if srv.popen.poll() is not None else "not ready"
            assert base <= srv.port < base + 3
        finally:
            srv.popen.send_signal(signal.SIGTERM)
            _, err = srv.popen.communicate(timeout=30)
        etcd_port = int([ln for ln in err.splitlines() if ln.startswith("embedded etcd:")][0].split()[2]
                        .rsplit(":", 1)[1])
        assert etcd_port != srv.port and base <= etcd_port < base + 3


def test_https_serving(etcd, tmp_path):
    cert, key = self_signed_serving_cert(tmp_path)
    sport = free_port()
    srv = start_apiserver(etcd.endpoint, "/registry-tls", "--secure-port", str(sport),
                          "--tls-cert-file", str(cert), "--tls-private-key-file", str(key))
    try:
        r = requests.get(f"https://127.0.0.1:{sport}/version", verify=str(cert), timeout=5)
        assert r.status_code == 200 and r.json()["major"] == "1"
        # A live watch over TLS: events are written straight to the TLS transport by the dispatcher.
        url = f"https://127.0.0.1:{sport}/api/v1/namespaces/default/configmaps"
        with requests.get(url, params={"watch": "1", "timeoutSeconds": "10"}, verify=str(cert), stream=True,
                          timeout=15) as w:
            assert w.status_code == 200
            for i in range(3):
                assert requests.post(url, json={"metadata": {"name": f"tls{i}"}}, verify=str(cert),
                                     timeout=5).status_code == 201
            seen = []
            for line in w.iter_lines():
                ev = json.loads(line)
                seen.append((ev["type"], ev["object"]["metadata"]["name"]))
                if len(seen) == 3:
                    break
        assert seen == [("ADDED", "tls0"), ("ADDED", "tls1"), ("ADDED", "tls2")]
    finally:
        srv.stop()


def etcd_keys(endpoint: str, prefix: str) -> set[str]:
    """The keys under `prefix` in the etcd at `endpoint`."""
    from storage.etcd import EtcdClient, prefix_end

    async def keys() -> set[str]:
        c = EtcdClient([endpoint])
        try:
            kvs, *_ = await c.range(prefix.encode(), prefix_end(prefix.encode()), keys_only=True)
            return {kv.key.decode() for kv in kvs}
        finally:
            await c.close()
    return asyncio.run(keys())


def test_etcd_servers_overrides_route_builtin_and_custom_resources(etcd):
    """configmaps and a custom resource go to a second etcd; everything else to the default one."""
    with EmbeddedEtcd() as other:
        group = "ov.example.com"
        overrides = f"/configmaps#{other.endpoint},{group}/things#{other.endpoint}"
        srv = start_apiserver(etcd.endpoint, "/registry-ov", "--etcd-servers-overrides", overrides)
        base = srv.base
        try:
            s = requests.Session()
            assert s.post(f"{base}/api/v1/namespaces/default/configmaps",
                          json={"metadata": {"name": "routed"}}).status_code == 201
            assert s.post(f"{base}/api/v1/namespaces/default/secrets",
                          json={"metadata": {"name": "notrouted"}}).status_code == 201
            crd = {"metadata": {"name": f"things.{group}"},
                   "spec": {"group": group, "scope": "Namespaced",
                            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
                            "versions": [{"name": "v1", "served": True, "storage": True,
                                          "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
            assert s.post(f"{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd).status_code == 201
            assert s.post(f"{base}/apis/{group}/v1/namespaces/default/things",
                          json={"metadata": {"name": "t"}}).status_code == 201
            in_other = etcd_keys(other.endpoint, "/registry-ov/")
            in_default = etcd_keys(etcd.endpoint, "/registry-ov/")
            assert "/registry-ov/configmaps/default/routed" in in_other
            assert f"/registry-ov/{group}/things/default/t" in in_other
            assert "/registry-ov/configmaps/default/routed" not in in_default
            assert "/registry-ov/secrets/default/notrouted" in in_default
        finally:
            srv.stop()


def test_kube_apiserver_routes_only_builtin_resources_by_its_overrides(current_etcd):
    """The reference, for the difference above (README, recipe store-split): kube-apiserver v1.37.2 accepts an
    --etcd-servers-overrides entry for a custom resource but stores that resource on its default etcd (the CRD
    storage takes the default etcd servers); a built-in resource goes where its override says."""
    from tests.helpers.kube import KubeApiserver
    group = "ov.example.com"
    with EmbeddedEtcd(binary=current_etcd.binary) as other:
        overrides = f"--etcd-servers-overrides=/configmaps#{other.endpoint},{group}/things#{other.endpoint}"
        with KubeApiserver(current_etcd.endpoint, prefix="/registry-kov", extra_args=(overrides,)) as k:
            tls = {"cert": k.client_cert, "verify": k.ca}   # per call: a Session's verify loses to REQUESTS_CA_BUNDLE
            assert requests.post(f"{k.url}/api/v1/namespaces/default/configmaps",
                                 json={"metadata": {"name": "routed"}}, **tls).status_code == 201
            crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                   "metadata": {"name": f"things.{group}"},
                   "spec": {"group": group, "scope": "Namespaced",
                            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
                            "versions": [{"name": "v1", "served": True, "storage": True,
                                          "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
            assert requests.post(f"{k.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                 json=crd, **tls).status_code == 201
            deadline = time.monotonic() + 60
            while True:     # until the new resource is served
                code = requests.post(f"{k.url}/apis/{group}/v1/namespaces/default/things",
                                     json={"apiVersion": f"{group}/v1", "kind": "Thing",
                                           "metadata": {"name": "t"}}, **tls).status_code
                if code == 201 or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert code == 201
            in_other = etcd_keys(other.endpoint, "/registry-kov/")
            in_default = etcd_keys(current_etcd.endpoint, "/registry-kov/")
            assert "/registry-kov/configmaps/default/routed" in in_other
            assert f"/registry-kov/{group}/things/default/t" in in_default
            assert f"/registry-kov/{group}/things/default/t" not in in_other


def test_an_overrides_etcd_is_compacted_too(etcd):
    """Every etcd cluster gets a compactor, as upstream runs one per storage endpoint: a Lease etcd taking every
    renewal would otherwise keep its whole history."""
    from storage.compact import last_compacted
    from storage.etcd import EtcdClient
    with EmbeddedEtcd() as other:
        srv = start_apiserver(etcd.endpoint, "/registry-ovc", "--etcd-compaction-interval", "1s",
                              "--etcd-servers-overrides", f"coordination.k8s.io/leases#{other.endpoint}")
        try:
            url = f"{srv.base}/apis/coordination.k8s.io/v1/namespaces/default/leases"
            for i in range(3):
                assert requests.post(url, json={"metadata": {"name": f"l{i}"}}).status_code == 201

            async def compacted() -> int:
                c = EtcdClient([other.endpoint])
                try:
                    return await last_compacted(c)
                finally:
                    await c.close()
            deadline = time.monotonic() + 10
            while asyncio.run(compacted()) == 0 and time.monotonic() < deadline:
                time.sleep(0.3)
            assert asyncio.run(compacted()) > 0, "the overrides' etcd was never compacted"
        finally:
            srv.stop()


def test_embedded_lease_etcd_takes_the_leases(etcd, tmp_path):
    """--embedded-lease-etcd: Leases (node heartbeats) go to a second etcd without fsync on tmpfs, started with the
    process, its data kept across a restart (its directory belongs to --state-dir); everything else stays on the main etcd
    (issue 22 §3)."""
    import re
    import shutil

    state = str(tmp_path / "state")
    lease_path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"

    def start():
        srv = start_apiserver(etcd.endpoint, "/registry-le", "--embedded-lease-etcd", "--state-dir", state)
        with open(srv.log_path) as f:
            m = re.search(r"embedded lease etcd: (\S+) data=(\S+)", f.read())
        assert m, "no lease etcd line"
        return srv, m.group(1), m.group(2)
    srv, lease_url, data_dir = start()
    try:
        assert data_dir.startswith("/dev/shm/") or not os.path.isdir("/dev/shm")
        assert requests.post(f"{srv.base}{lease_path}",
                             json={"metadata": {"name": "n1"}, "spec": {"holderIdentity": "n1"}}).status_code == 201
        assert requests.post(f"{srv.base}/api/v1/namespaces/default/configmaps",
                             json={"metadata": {"name": "c"}}).status_code == 201
        assert "/registry-le/leases/kube-node-lease/n1" in etcd_keys(lease_url, "/registry-le/")
        main = etcd_keys(etcd.endpoint, "/registry-le/")
        assert "/registry-le/configmaps/default/c" in main and "/registry-le/leases/kube-node-lease/n1" not in main
        srv.stop()
        srv, _, again = start()     # the same state dir: the same lease etcd data, the Lease is still there
        assert again == data_dir
        assert requests.get(f"{srv.base}{lease_path}/n1").json()["spec"]["holderIdentity"] == "n1"
        srv.stop()
        # The state dir deleted and made anew at the same path: a fresh Lease etcd, not the old one's Leases,
        # and the old directory, claimed by no state dir any more, removed.
        shutil.rmtree(state)
        srv, _, fresh = start()
        assert fresh != data_dir and not os.path.exists(data_dir)
        assert requests.get(f"{srv.base}{lease_path}/n1").status_code == 404
        data_dir = fresh
    finally:
        srv.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
