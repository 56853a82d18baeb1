"""machinery.web, the lean HTTP/1.1 server (the default; APISERVER_HTTP=aiohttp runs aiohttp.web): an apiserver on
it over a real etcd, spoken to
over raw sockets for what HTTP/1.1 says (keep-alive, pipelining, HTTP/1.0, HEAD, Expect: 100-continue, a body the
handler leaves unread, refusals, compression, shutdown), and side by side with the same apiserver on aiohttp.web
over the same etcd prefix: the same answers, byte for byte but for the headers each server adds itself. (The
rest of the suite runs on the default, machinery.web; docs/floor.md says when it last passed on aiohttp.web.)"""
from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import time
import uuid

import pytest
import requests

from tests.helpers.apiserver import ApiserverProcess

MIB = 1 << 20


@pytest.fixture(scope="module")
def prefix():
    return f"/registry-lean-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def lean(current_etcd, prefix):
    with ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, log_name="lean",
                          env={"APISERVER_HTTP": "lean"}) as p:
        yield p


@pytest.fixture(scope="module")
def aio(current_etcd, prefix, lean):
    with ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, log_name="lean-aiohttp",
                          env={"APISERVER_HTTP": "aiohttp"}) as p:
        yield p


def connect(p) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    return s


def request(method: str, path: str, headers: dict | None = None, body: bytes = b"", version: str = "1.1") -> bytes:
    h = {"Host": "127.0.0.1", **(headers or {})}
    if body and "Content-Length" not in h:
        h["Content-Length"] = str(len(body))
    return (f"{method} {path} HTTP/{version}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) +
            "\r\n").encode() + body


class Reader:
    """Answers read off one socket, one at a time (Content-Length, chunked, or to the end)."""

    def __init__(self, s: socket.socket):
        self.s, self.buf = s, b""

    def _fill(self) -> bool:
        data = self.s.recv(1 << 16)
        self.buf += data
        return bool(data)

    def head(self) -> tuple[int, dict[str, str], str]:
        while b"\r\n\r\n" not in self.buf:
            assert self._fill(), f"connection closed before a head: {self.buf[:200]!r}"
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        version, status = lines[0].split(" ")[:2]
        headers = {}
        for line in lines[1:]:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        return int(status), headers, version

    def answer(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        status, headers, _ = self.head()
        if head_only or status in (204, 304) or 100 <= status < 200:
            return status, headers, b""
        if "content-length" in headers:
            n = int(headers["content-length"])
            while len(self.buf) < n:
                assert self._fill(), "connection closed inside a body"
            body, self.buf = self.buf[:n], self.buf[n:]
            return status, headers, body
        if headers.get("transfer-encoding") == "chunked":
            out = b""
            while True:
                while b"\r\n" not in self.buf:
                    assert self._fill()
                size_line, rest = self.buf.split(b"\r\n", 1)
                size = int(size_line, 16)
                while len(rest) < size + 2:
                    assert self._fill()
                    size_line, rest = self.buf.split(b"\r\n", 1)
                out += rest[:size]
                self.buf = rest[size + 2:]
                if size == 0:
                    return status, headers, out
        while self._fill():
            pass
        body, self.buf = self.buf, b""
        return status, headers, body

    def closed(self) -> bool:
        try:
            return not self._fill() and not self.buf
        except (ConnectionResetError, socket.timeout):
            return True


def test_the_lean_server_maps_no_aiohttp(lean):
    with open(f"/proc/{lean.pid}/maps") as f:
        maps = f.read()
    assert "httptools" in maps and "aiohttp" not in maps


def test_a_front_maps_no_aiohttp(current_etcd, prefix, lean):
    """A front's shard lists, watches and health checks go over front.listconn: no HTTP client library either
    (docs/floor.md). It has served a merged list and a merged watch first."""
    with ApiserverProcess("--front", "--shards", lean.base, etcd_servers=current_etcd.endpoint, etcd_prefix=prefix,
                          log_name="lean-front", env={"APISERVER_HTTP": "lean"}) as front:
        assert requests.get(front.base + "/api/v1/namespaces/default/configmaps", timeout=10).status_code == 200
        with requests.get(front.base + "/api/v1/namespaces/default/configmaps",
                          params={"watch": "1", "timeoutSeconds": "1"}, stream=True, timeout=10) as r:
            assert r.status_code == 200
            assert r.content is not None   # read to the watch's end (timeoutSeconds)
        with open(f"/proc/{front.pid}/maps") as f:
            maps = f.read()
        assert "httptools" in maps and "aiohttp" not in maps


def test_keep_alive_and_pipelined_requests_are_answered_in_order(lean):
    with connect(lean) as s:
        r = Reader(s)
        s.sendall(request("GET", "/version"))
        status, headers, body = r.answer()
        assert status == 200 and json.loads(body)["major"] and "date" in headers
        assert headers.get("connection") != "close"
        # three at once: answered in order on the same connection
        s.sendall(request("GET", "/api/v1/namespaces/default") + request("GET", "/no/such/path") +
                  request("GET", "/version"))
        a, b, c = r.answer(), r.answer(), r.answer()
        assert a[0] == 200 and json.loads(a[2])["metadata"]["name"] == "default"
        assert b[0] == 404
        assert c[0] == 200 and c[2] == body


def test_connection_close_on_a_pipelined_request_ends_the_connection_after_its_answer(lean):
    with connect(lean) as s:
        r = Reader(s)
        s.sendall(request("GET", "/version") + request("GET", "/version", {"Connection": "close"}) +
                  request("GET", "/version"))
        first, second = r.answer(), r.answer()
        assert first[0] == second[0] == 200
        assert first[1].get("connection") != "close" and second[1]["connection"] == "close"
        assert r.closed()      # the third request is not answered: the client asked to close before it


def test_a_request_split_across_writes_is_answered(lean):
    with connect(lean) as s:
        raw = request("GET", "/api/v1/namespaces/default")
        for piece in (raw[:5], raw[5:17], raw[17:]):
            s.sendall(piece)
            time.sleep(0.05)
        status, _, body = Reader(s).answer()
        assert status == 200 and b'"default"' in body


def test_http_1_0_gets_its_answer_to_the_connections_end(lean):
    with connect(lean) as s:
        s.sendall(request("GET", "/api/v1/namespaces", version="1.0"))
        r = Reader(s)
        status, headers, body = r.answer()
        assert status == 200 and headers.get("connection") == "close"
        assert "transfer-encoding" not in headers      # no chunks on HTTP/1.0
        assert json.loads(body)["kind"] == "NamespaceList"


def test_head_has_the_headers_of_get_and_no_body(lean):
    with connect(lean) as s:
        r = Reader(s)
        s.sendall(request("GET", "/version"))
        _, get_headers, body = r.answer()
        s.sendall(request("HEAD", "/version") + request("GET", "/version"))
        status, headers, _ = r.answer(head_only=True)
        assert status == 200 and headers["content-length"] == str(len(body))
        assert headers["content-type"] == get_headers["content-type"]
        assert r.answer()[2] == body    # nothing of a body came between the two


def test_expect_100_continue(lean):
    cm = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{uuid.uuid4().hex[:6]}"},
                     "data": {"k": "v" * 2000}}).encode()
    with connect(lean) as s:
        r = Reader(s)
        s.sendall(request("POST", "/api/v1/namespaces/default/configmaps",
                          {"Content-Type": "application/json", "Expect": "100-continue",
                           "Content-Length": str(len(cm))}))
        status, _, _ = r.head()
        assert status == 100
        s.sendall(cm)
        status, _, body = r.answer()
        assert status == 201 and json.loads(body)["data"]["k"] == "v" * 2000


def test_a_body_left_unread_keeps_the_connection(lean):
    """A 404 answered before the body is read: the body is read and dropped, the next request answered."""
    with connect(lean) as s:
        r = Reader(s)
        s.sendall(request("POST", "/api/v1/no-such-resource", {"Content-Type": "application/json"},
                          b"{" + b" " * (3 * MIB) + b"}"))
        assert r.answer()[0] == 404
        s.sendall(request("GET", "/version"))
        assert r.answer()[0] == 200


def test_what_the_parser_refuses_is_400_and_the_connection_closes(lean):
    with connect(lean) as s:
        s.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n")
        r = Reader(s)
        status, headers, _ = r.answer()
        assert status == 400 and headers["connection"] == "close"
        assert r.closed()


def test_headers_over_the_limits_are_431(lean):
    with connect(lean) as s:
        s.sendall(request("GET", "/version", {f"X-H{i}": "v" for i in range(200)}))
        status, headers, body = Reader(s).answer()
        assert status == 431 and body == b"431 Request Header Fields Too Large"
        assert headers["connection"] == "close"


def test_enable_compression_gzips_for_a_client_that_accepts_it(lean):
    plain = requests.get(lean.base + "/openapi/v2", headers={"Accept-Encoding": "identity"}, timeout=60)
    with connect(lean) as s:
        s.sendall(request("GET", "/openapi/v2", {"Accept-Encoding": "gzip"}))
        status, headers, body = Reader(s).answer()
    assert status == 200 and headers["content-encoding"] == "gzip" and "content-encoding" not in plain.headers
    assert gzip.decompress(body) == plain.content and len(body) < len(plain.content) / 4


def test_a_watch_streams_its_events_as_chunks(lean):
    name = f"w{uuid.uuid4().hex[:6]}"
    with connect(lean) as s:
        r = Reader(s)
        s.sendall(request("GET", f"/api/v1/namespaces/default/configmaps?watch=1&fieldSelector=metadata.name%3D{name}"))
        status, headers, _ = r.head()
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        requests.post(lean.base + "/api/v1/namespaces/default/configmaps",
                      json={"metadata": {"name": name}, "data": {"a": "b"}}, timeout=10).raise_for_status()
        while b'"ADDED"' not in r.buf:
            assert r._fill()
        size_line, rest = r.buf.split(b"\r\n", 1)
        event = json.loads(rest[:int(size_line, 16)])
        assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == name


PATHS = ["/version", "/api", "/apis", "/api/v1", "/api/v1/namespaces/default", "/api/v1/namespaces/nope",
         "/apis/apps/v1", "/api/v1/namespaces/default/configmaps?limit=1&labelSelector=x%3D%3D",
         "/api/v1/namespaces/default/pods?fieldSelector=bad", "/api/v1/namespaces/default/configmaps/..",
         "/no/such/path", "/openapi/v3", "/healthz", "/livez", "/readyz"]


@pytest.mark.parametrize("path", PATHS)
def test_the_same_answers_as_on_aiohttp(lean, aio, path):
    """Both servers over the same etcd prefix: the same status, body (but for each one's own address, in
    /api's serverAddressByClientCIDRs) and content headers."""
    a = requests.get(lean.base + path, timeout=30)
    b = requests.get(aio.base + path, timeout=30)
    assert (a.status_code, a.content.replace(f":{lean.port}".encode(), b":PORT")) == \
        (b.status_code, b.content.replace(f":{aio.port}".encode(), b":PORT"))
    for h in ("Content-Type", "Cache-Control", "Content-Length"):
        assert a.headers.get(h) == b.headers.get(h), h


def test_sigterm_ends_open_watches_and_the_process(current_etcd):
    with ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=f"/registry-lean-{uuid.uuid4().hex[:8]}",
                          log_name="lean-stop", env={"APISERVER_HTTP": "lean"}) as p:
        s = connect(p)
        s.sendall(request("GET", "/api/v1/configmaps?watch=1"))
        assert Reader(s).head()[0] == 200
        t0 = time.monotonic()
        os.kill(p.pid, signal.SIGTERM)
        assert p.popen.wait(20) == 0
        assert time.monotonic() - t0 < 15
        s.close()
