"""The command line: flag validation, embedded etcd lifecycle, HTTPS, per-resource etcd routing."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

import pytest
import requests

from storage.embedded import EmbeddedEtcd, free_port
from tests.helpers import ApiserverProcess, start_apiserver


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


def test_https_serving(etcd, tmp_path):
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
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


def test_etcd_servers_overrides_route_builtin_and_custom_resources(etcd):
    """configmaps and a custom resource go to a second etcd; everything else to the default one."""
    from storage.etcd import EtcdClient
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

            async def keys(endpoint):
                c = EtcdClient([endpoint])
                kvs, *_ = await c.range(b"/registry-ov/", b"/registry-ov0", keys_only=True)
                await c.close()
                return {kv.key.decode() for kv in kvs}
            in_other = asyncio.run(keys(other.endpoint))
            in_default = asyncio.run(keys(etcd.endpoint))
            assert "/registry-ov/configmaps/default/routed" in in_other
            assert f"/registry-ov/{group}/things/default/t" in in_other
            assert "/registry-ov/configmaps/default/routed" not in in_default
            assert "/registry-ov/secrets/default/notrouted" in in_default
        finally:
            srv.stop()
