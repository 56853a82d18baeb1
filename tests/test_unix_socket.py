"""`--unix-socket`: an apiserver also serving plain HTTP on a Unix socket (owner-only), and a front given its shards
as http+unix:// URLs, as `python -m deployment`'s fronts are (the deployment itself: test_deployment.py). Over
the suite's current etcd; the servers on machinery.web (the default) and on aiohttp.web."""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import uuid

import pytest
import requests

from machinery.http1 import unix_path, unix_url
from machinery.shard_selector import complementary
from storage.embedded import free_port
from tests.helpers.apiserver import ApiserverProcess, stop_all, wait_all_ready

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def sock_dir():
    d = tempfile.mkdtemp(prefix="us-")   # (a pytest tmp_path can be longer than a socket's address allows)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def get_unix(path: str, target: str) -> tuple[int, bytes]:
    """One GET over the socket at `path` (HTTP/1.0: the answer ends with the connection)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(f"GET {target} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def test_unix_urls_round_trip():
    assert unix_url("/tmp/a b/s.sock") == "http+unix://%2Ftmp%2Fa%20b%2Fs.sock"
    assert unix_path(unix_url("/tmp/a b/s.sock")) == "/tmp/a b/s.sock"
    assert unix_path("http://127.0.0.1:8080") is None


@pytest.mark.parametrize("stack", ["lean", "aiohttp"])
def test_the_api_on_a_unix_socket_owner_only_and_removed_at_stop(current_etcd, sock_dir, stack):
    path = os.path.join(sock_dir, "api.sock")
    p = ApiserverProcess("--unix-socket", path, etcd_servers=current_etcd.endpoint,
                         etcd_prefix=f"/registry-unix-{uuid.uuid4().hex[:8]}", log_name=f"unix-{stack}",
                         env={"APISERVER_HTTP": stack})
    with p:
        mode = os.stat(path).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) & 0o077 == 0, oct(mode)   # owner-only
        status, body = get_unix(path, "/api/v1/namespaces/default")
        assert status == 200
        assert json.loads(body) == requests.get(p.base + "/api/v1/namespaces/default", timeout=10).json()
        status, body = get_unix(path, "/api/v1/namespaces/default/configmaps/nope")
        assert status == 404 and json.loads(body)["reason"] == "NotFound"   # a Status, as on the TCP port
    assert not os.path.exists(path)   # removed when the server stops (SIGTERM)


def test_a_stale_socket_is_replaced_and_any_other_file_refused(current_etcd, sock_dir):
    path = os.path.join(sock_dir, "api.sock")
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(path)   # what a killed process leaves behind
    stale.close()
    with ApiserverProcess("--unix-socket", path, etcd_servers=current_etcd.endpoint,
                          etcd_prefix=f"/registry-unix-{uuid.uuid4().hex[:8]}", log_name="unix-stale"):
        assert get_unix(path, "/readyz")[0] == 200
        assert os.listdir(sock_dir) == ["api.sock"]   # (bound under a temporary name, renamed over the stale one)
    other = os.path.join(sock_dir, "notes.txt")
    with open(other, "w") as f:
        f.write("keep me")
    r = subprocess.run([sys.executable, "-m", "apiserver", "--etcd-servers", current_etcd.endpoint, "--port",
                        str(free_port()), "--unix-socket", other, "--state-dir", os.path.join(sock_dir, "state")],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"cannot listen on http+unix://{other}" in r.stderr and "not a socket" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    with open(other) as f:
        assert f.read() == "keep me"


def test_a_front_over_shards_on_unix_sockets(current_etcd, sock_dir):
    prefix = f"/registry-unix-{uuid.uuid4().hex[:8]}"
    socks = [os.path.join(sock_dir, f"shard{i}.sock") for i in range(2)]
    shards = [ApiserverProcess("--unix-socket", socks[i], etcd_servers=current_etcd.endpoint, etcd_prefix=prefix,
                               residency=sel, name=f"unix-shard{i}") for i, sel in enumerate(complementary(2))]
    procs = list(shards)
    try:
        for s in shards:
            s.start()
        wait_all_ready(shards, 60)
        front = ApiserverProcess("--front", "--shards", ",".join(unix_url(p) for p in socks),
                                 etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, name="unix-front")
        procs.append(front)
        front.start().wait_ready(30)
        assert [s["url"] for s in requests.get(front.base + "/debug/shards", timeout=10).json()["shards"]] == \
            [unix_url(p) for p in socks]
        cm = front.base + "/api/v1/namespaces/default/configmaps"
        for i in range(30):
            r = requests.post(cm, json={"metadata": {"name": f"u{i:02d}"}, "data": {"i": str(i)}}, timeout=10)
            assert r.status_code == 201, r.text
        names = [f"u{i:02d}" for i in range(30)]
        # Both shards hold some of them; the front's list merges them in key order.
        held = [get_unix(p, "/api/v1/namespaces/default/configmaps?shardSelector=" +
                         requests.utils.quote(str(sel)))[1] for p, sel in zip(socks, complementary(2))]
        counts = [len(json.loads(b)["items"]) for b in held]
        assert sum(counts) == 30 and all(counts), counts
        lst = requests.get(cm, timeout=10).json()
        assert [o["metadata"]["name"] for o in lst["items"]] == names
        # Pages, continued.
        got, cont = [], None
        while True:
            page = requests.get(cm, params={"limit": "7", **({"continue": cont} if cont else {})}, timeout=10).json()
            got += [o["metadata"]["name"] for o in page["items"]]
            cont = page["metadata"].get("continue")
            if not cont:
                break
        assert got == names
        assert requests.get(cm + "/u07", timeout=10).json()["data"] == {"i": "7"}
        # A watch through the front from the list's RV sees the next write.
        events: list[dict] = []

        def watch() -> None:
            with requests.get(cm, params={"watch": "1", "resourceVersion": lst["metadata"]["resourceVersion"],
                                          "timeoutSeconds": "5"}, stream=True, timeout=30) as r:
                for line in r.iter_lines():
                    if line:
                        events.append(json.loads(line))
                        if events[-1]["type"] == "ADDED":
                            return
        t = threading.Thread(target=watch)
        t.start()
        assert requests.post(cm, json={"metadata": {"name": "u99"}}, timeout=10).status_code == 201
        t.join(30)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"] == \
            [("ADDED", "u99")]
    finally:
        stop_all(procs)
    assert not any(os.path.exists(p) for p in socks)
