"""The node tier's raw renewal path (nodetier/rawpath.py): a connection that carries plain renewals is answered
from the request's bytes, before aiohttp, with what aiohttp's path answers (its `Date` aside); the first
request that is anything else (or a renewal the fast path declines) goes to aiohttp with the rest of the
connection. Real etcd, a real apiserver and a real `python -m nodetier`, spoken to over raw sockets so that
what is on the wire is what is checked."""
from __future__ import annotations

import datetime
import json
import re
import socket
import uuid

import pytest

from machinery import protobuf
from nodetier.rawpath import _parse
from tests.helpers import Api, start_apiserver
from tests.helpers.nodetier import NodeTierProcess
from tests.helpers.protowire import envelope, field as _ld, int_field as _vi
from tests.test_nodetier import LEASES, create, lease, now_micro

RENEWAL_HEAD = (b"PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1 HTTP/1.1\r\n"
                b"Host: 127.0.0.1:8090\r\nUser-Agent: kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef\r\n"
                b"Content-Length: 321\r\nAccept: application/json, */*\r\nContent-Type: application/json\r\n"
                b"Accept-Encoding: gzip")


def test_a_kubelets_renewal_head_is_parsed_and_anything_else_is_left_to_aiohttp():
    r = _parse(RENEWAL_HEAD)
    assert (r.name, r.length, r.user_agent, r.authorization) == \
        ("node-1", 321, "kubelet/v1.37.2 (linux/amd64) kubernetes/abcdef", None)
    assert _parse(RENEWAL_HEAD + b"\r\nAuthorization: Bearer abc").authorization == "Bearer abc"
    assert _parse(RENEWAL_HEAD + b"\r\nConnection: keep-alive") is not None
    assert not r.protobuf
    # the kubelet's (and kwok's) typed client: a protobuf body, protobuf or JSON back (answered as JSON here)
    kubelet = RENEWAL_HEAD.replace(b"Accept: application/json, */*\r\nContent-Type: application/json",
                                   b"Accept: application/vnd.kubernetes.protobuf,application/json\r\n"
                                   b"Content-Type: application/vnd.kubernetes.protobuf")
    assert kubelet != RENEWAL_HEAD and _parse(kubelet).protobuf
    assert _parse(RENEWAL_HEAD.replace(b"Accept: application/json, */*\r\n", b"")) is not None   # no Accept
    line = RENEWAL_HEAD.split(b"\r\n")[0]
    for other in (
            RENEWAL_HEAD.replace(b"node-1 HTTP", b"node-1?fieldManager=x HTTP"),     # a query
            RENEWAL_HEAD.replace(b"HTTP/1.1", b"HTTP/1.0"),
            RENEWAL_HEAD.replace(b"PUT ", b"PATCH "),
            RENEWAL_HEAD.replace(b"leases/node-1", b"leases/Node_1"),               # not a name the path keeps
            RENEWAL_HEAD.replace(b"leases/node-1", b"leases/node%2D1"),
            RENEWAL_HEAD.replace(b"kube-node-lease", b"default"),
            RENEWAL_HEAD.replace(b"application/json\r\nAccept-Encoding", b"application/json; charset=utf-8\r\nA"),
            RENEWAL_HEAD.replace(b"application/json, */*", b"application/json;as=Table;v=v1;g=meta.k8s.io"),
            RENEWAL_HEAD.replace(b"Content-Length: 321", b"Content-Length: 0"),
            RENEWAL_HEAD.replace(b"Content-Length: 321", b"Content-Length: 70000"),
            RENEWAL_HEAD.replace(b"Content-Length: 321", b"Content-Length: +321"),
            RENEWAL_HEAD.replace(b"Content-Length: 321\r\n", b""),
            RENEWAL_HEAD + b"\r\nContent-Length: 321",
            RENEWAL_HEAD + b"\r\nTransfer-Encoding: chunked",
            RENEWAL_HEAD + b"\r\nExpect: 100-continue",
            RENEWAL_HEAD + b"\r\nConnection: close",
            RENEWAL_HEAD + b"\r\nConnection: Upgrade\r\nUpgrade: h2c",
            RENEWAL_HEAD + b"\r\nContent-Encoding: gzip",
            RENEWAL_HEAD + b"\r\nImpersonate-User: someone",
            RENEWAL_HEAD + b"\r\n folded",
            RENEWAL_HEAD + b"\r\nno colon",
            RENEWAL_HEAD + b"\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b"):
        assert _parse(other) is None, other
    assert line.endswith(b" HTTP/1.1")


async def test_a_coroutine_run_inline_that_suspends_is_carried_on_by_a_task():
    """RawRenewalProtocol runs a renewal inline (`coro.send(None)`); one that suspends goes on in a task from where
    it waited: its result, an exception raised where it waited, and a cancellation reach the coroutine."""
    import asyncio
    from nodetier.rawpath import _carry_on
    loop = asyncio.get_running_loop()

    async def twice(futs, seen):
        try:
            a = await futs[0]
            await asyncio.sleep(0)          # (a bare yield, as asyncio.sleep(0) makes)
            b = await futs[1]
        except BaseException as e:
            seen.append(type(e).__name__)
            raise
        return a + b

    futs, seen = [loop.create_future(), loop.create_future()], []
    coro = twice(futs, seen)
    task = asyncio.ensure_future(_carry_on(coro, coro.send(None)))
    futs[0].set_result(1)
    await asyncio.sleep(0.01)
    futs[1].set_result(2)
    assert await task == 3 and seen == []
    futs, seen = [loop.create_future(), loop.create_future()], []
    coro = twice(futs, seen)
    task = asyncio.ensure_future(_carry_on(coro, coro.send(None)))
    futs[0].set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        await task
    assert seen == ["KeyError"]
    futs, seen = [loop.create_future(), loop.create_future()], []
    coro = twice(futs, seen)
    task = asyncio.ensure_future(_carry_on(coro, coro.send(None)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["CancelledError"] and futs[0].cancelled()


# --- a Lease in protobuf, as the kubelet's typed client sends it (k8s.io/api coordination/v1 field numbers) ------

def _time(s: str) -> bytes:
    """metav1.Time / MicroTime: seconds (1) and nanos (2)."""
    t = datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
    micros = t.microsecond
    return _vi(1, int(t.replace(microsecond=0).timestamp())) + (_vi(2, micros * 1000) if micros else b"")


def lease_protobuf(obj: dict) -> bytes:
    md, spec = obj["metadata"], obj["spec"]
    meta = _ld(1, md["name"]) + _ld(3, md["namespace"]) + _ld(5, md["uid"]) + _ld(6, md["resourceVersion"])
    meta += _ld(8, _time(md["creationTimestamp"]))
    for m in md.get("managedFields", []):
        meta += _ld(17, _ld(1, m["manager"]) + _ld(2, m["operation"]) + _ld(3, m["apiVersion"])
                    + _ld(4, _time(m["time"])) + _ld(6, m["fieldsType"])
                    + _ld(7, _ld(1, json.dumps(m["fieldsV1"], separators=(",", ":")))))
    sp = _ld(1, spec["holderIdentity"]) + _vi(2, spec["leaseDurationSeconds"]) + _ld(4, _time(spec["renewTime"]))
    raw = _ld(1, meta) + _ld(2, sp)
    return envelope("coordination.k8s.io/v1", "Lease", raw)


def test_a_kubelets_protobuf_renewal_is_answered_raw_as_aiohttp_answers_it(tier):
    """The kubelet's and kwok's typed clients PUT their Lease as protobuf, accepting protobuf or JSON back: the
    raw path decodes it as the general path does and answers the same JSON aiohttp's path gives."""
    made = create(tier, "raw-pb")
    raw0 = metric(tier, "nodetier_renewals_raw_path_total")
    new = {**made, "spec": {**made["spec"], "renewTime": now_micro(1)}}
    assert protobuf.decode(lease_protobuf(new), "coordination.k8s.io/v1", "Lease") == new    # (the encoder)

    def pb_renewal(obj: dict) -> bytes:
        body = lease_protobuf(obj)
        return (f"PUT {LEASES}/raw-pb HTTP/1.1\r\nHost: tier\r\nUser-Agent: kubelet/v1.37.2\r\n"
                f"Accept: application/vnd.kubernetes.protobuf,application/json\r\n"
                f"Content-Type: application/vnd.kubernetes.protobuf\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body
    a = Wire(tier.base)
    a.send(pb_renewal(new))
    status, _, body, whole = a.response()
    assert status == 200, body
    first = json.loads(body)
    assert first["spec"]["renewTime"] == new["spec"]["renewTime"]
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 1
    b = Wire(tier.base)                     # behind a GET: aiohttp's fast path, protobuf too
    b.send(get(f"{LEASES}/raw-pb") + pb_renewal({**first, "spec": {**first["spec"], "renewTime": now_micro(2)}}))
    assert b.response()[0] == 200
    status2, _, body2, whole2 = b.response()
    assert status2 == 200, body2
    second = json.loads(body2)
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 1
    assert without(whole, first) == without(whole2, second)
    assert tier.get(f"{LEASES}/raw-pb").json() == second
    a.close(), b.close()


class Wire:
    """One raw HTTP/1.1 connection."""

    def __init__(self, base: str):
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=20)
        self.pending = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def response(self) -> tuple[int, dict[str, str], bytes, bytes]:
        """(status, headers, body, the whole response's bytes)."""
        while b"\r\n\r\n" not in self.pending:
            self._more()
        head, _, rest = self.pending.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        n = int(headers["Content-Length"])
        while len(rest) < n:
            self.pending = head + b"\r\n\r\n" + rest
            self._more()
            head, _, rest = self.pending.partition(b"\r\n\r\n")
        self.pending = rest[n:]
        return int(lines[0].split()[1]), headers, rest[:n], head + b"\r\n\r\n" + rest[:n]

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, "the tier closed the connection"
        self.pending += chunk

    def close(self) -> None:
        self.sock.close()


def renewal(obj: dict, offset: float, token: str = "") -> bytes:
    body = json.dumps({**obj, "spec": {**obj["spec"], "renewTime": now_micro(offset)}}).encode()
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    return (f"PUT {LEASES}/{obj['metadata']['name']} HTTP/1.1\r\nHost: tier\r\nUser-Agent: kubelet/v1.37.2\r\n"
            f"Content-Type: application/json\r\nAccept: application/json, */*\r\nContent-Length: {len(body)}\r\n"
            ).encode() + auth + b"\r\n" + body


def get(path: str, token: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: tier\r\nAccept: application/json\r\n{auth}\r\n".encode()


def metric(t: Api, name: str, labels: str = "") -> float:
    pat = re.compile(re.escape(name) + (r"\{[^}]*" + labels + r"[^}]*\}" if labels else "") + r" (\S+)$")
    return sum(float(m.group(1)) for line in t.get("/metrics").text.splitlines() if (m := pat.match(line)))


@pytest.fixture(scope="module")
def tier(current_etcd):
    cp = start_apiserver(current_etcd.endpoint, f"/registry/rawpath-{uuid.uuid4().hex[:8]}")
    try:
        with NodeTierProcess(cp.base, "--forward-interval", "2") as t:
            yield Api(t.base)
    finally:
        cp.stop()


def without(raw: bytes, obj: dict) -> bytes:
    """The response with its Date, renewTime and resourceVersion blanked."""
    raw = re.sub(rb"Date: [^\r]+", b"Date: -", raw)
    raw = raw.replace(obj["spec"]["renewTime"].encode(), b"T")
    return raw.replace(f'"resourceVersion":"{obj["metadata"]["resourceVersion"]}"'.encode(), b'"resourceVersion":"R"')


def test_renewals_on_their_own_connection_are_answered_raw_as_aiohttp_answers_them(tier):
    made = create(tier, "raw-1")
    raw0, fast0 = metric(tier, "nodetier_renewals_raw_path_total"), metric(tier, "nodetier_renewals_fast_path_total")
    puts0 = metric(tier, "apiserver_request_total", 'code="200".*resource="leases".*verb="PUT"')
    a = Wire(tier.base)
    a.send(renewal(made, 1))
    status, headers, body, whole = a.response()
    assert status == 200, body
    first = json.loads(body)
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 1
    # the same renewal behind a GET in one send: aiohttp has the GET when the renewal is read, so the renewal is
    # its too (requests are answered in order), on its fast path
    b = Wire(tier.base)
    b.send(get(f"{LEASES}/raw-1") + renewal(first, 2))
    assert b.response()[0] == 200
    status2, headers2, body2, whole2 = b.response()
    assert status2 == 200, body2
    second = json.loads(body2)
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 1
    assert metric(tier, "nodetier_renewals_fast_path_total") == fast0 + 2
    assert list(headers) == list(headers2) and headers["Server"] == headers2["Server"]
    assert without(whole, first) == without(whole2, second)          # byte for byte, the Date aside
    assert tier.get(f"{LEASES}/raw-1").json() == second
    # both counted in the request metrics as PUTs answered 200
    assert metric(tier, "apiserver_request_total", 'code="200".*resource="leases".*verb="PUT"') == puts0 + 2
    # once aiohttp has answered, the next renewal on that connection is raw again
    b.send(renewal(second, 3))
    status, _, body, _ = b.response()
    assert status == 200, body
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 2
    a.send(renewal(json.loads(body), 4))
    assert a.response()[0] == 200
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 3
    a.close(), b.close()


def test_pipelined_and_split_requests_are_answered_in_order(tier):
    made = create(tier, "raw-2")
    raw0 = metric(tier, "nodetier_renewals_raw_path_total")
    w = Wire(tier.base)
    data = renewal(made, 1)
    for i in range(0, len(data), 37):             # the renewal in pieces
        w.send(data[i:i + 37])
    status, _, body, _ = w.response()
    assert status == 200, body
    renewed = json.loads(body)
    # a renewal and a GET in one send: the GET is aiohttp's, after the renewal's answer, and sees it
    w.send(renewal(renewed, 2) + get(f"{LEASES}/raw-2"))
    s1, _, b1, _ = w.response()
    s2, _, b2, _ = w.response()
    assert (s1, s2) == (200, 200), (b1, b2)
    assert json.loads(b2) == json.loads(b1)
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 2
    w.close()


def test_a_renewal_the_fast_path_declines_is_answered_by_the_general_path_on_the_same_connection(tier):
    made = create(tier, "raw-3")
    w = Wire(tier.base)
    w.send(renewal(made, 1))
    status, _, body, _ = w.response()
    assert status == 200
    raw0 = metric(tier, "nodetier_renewals_raw_path_total")
    w.send(renewal(made, 2))                      # the old version: upstream's 409, worded by the general path
    status, headers, body, _ = w.response()
    assert status == 409 and headers["Content-Type"] == "application/json", body
    assert json.loads(body)["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "raw-3": the object has been modified; '
        'please apply your changes to the latest version and try again')
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0
    w.send(renewal(tier.get(f"{LEASES}/raw-3").json(), 3))     # and the next renewal is raw again
    assert w.response()[0] == 200
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 1
    w.close()


def test_with_tokens_a_node_renews_its_own_lease_raw_and_anything_else_is_judged_as_before(current_etcd, tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('node-a-token,system:node:node-a,uid-a,"system:nodes"\n'
                      'admin-token,admin,uid-admin,"system:masters"\n'
                      'dev-token,dev,uid-dev,"devs"\n')
    cp = start_apiserver(current_etcd.endpoint, f"/registry/rawpath-{uuid.uuid4().hex[:8]}")
    try:
        with NodeTierProcess(cp.base, "--token-auth-file", str(tokens), "--anonymous-auth=false",
                             ready_token="admin-token") as t:
            admin = Api(t.base)
            admin.s.headers["Authorization"] = "Bearer admin-token"
            a, b = create(admin, "node-a"), create(admin, "node-b")
            raw0 = metric(admin, "nodetier_renewals_raw_path_total")
            w = Wire(t.base)
            w.send(renewal(a, 1, "node-a-token"))
            assert w.response()[0] == 200
            assert metric(admin, "nodetier_renewals_raw_path_total") == raw0 + 1
            w.send(renewal(b, 1, "node-a-token"))          # another node's Lease: upstream's 403
            status, _, body, _ = w.response()
            assert status == 403 and json.loads(body)["message"] == (
                'leases.coordination.k8s.io "node-b" is forbidden: can only access node lease with the same name as '
                'the requesting node'), body
            for token, want in (("", 401), ("wrong", 401), ("admin-token", 200)):
                v = Wire(t.base)
                v.send(renewal(admin.get(f"{LEASES}/node-b").json(), 2, token))
                assert v.response()[0] == want, token
                v.close()
            assert metric(admin, "nodetier_renewals_raw_path_total") == raw0 + 2     # node-a's, then the admin's
            w.close()
    finally:
        cp.stop()


def test_a_lease_made_elsewhere_is_not_in_the_tiers_hands_until_it_is(tier):
    """A renewal of a Lease the tier does not hold (made at the control plane after the tier's load, not yet
    seen) is not answered raw: what the general path answers is what the client gets."""
    w = Wire(tier.base)
    w.send(renewal(lease("raw-unknown") | {"metadata": {"name": "raw-unknown", "namespace": "kube-node-lease",
                                                          "resourceVersion": "1"}}, 1))
    status, _, body, _ = w.response()
    assert status == 404, body
    w.close()


def test_other_requests_keep_their_framing_and_streams_on_a_raw_connection(tier):
    made = create(tier, "raw-4")
    raw0 = metric(tier, "nodetier_renewals_raw_path_total")
    # a create whose body comes in pieces goes to aiohttp as it arrives
    w = Wire(tier.base)
    body = json.dumps(lease("raw-5") | {"metadata": {"name": "raw-5", "annotations": {"a": "x" * 100_000}}}).encode()
    w.send(f"POST {LEASES} HTTP/1.1\r\nHost: tier\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:1000])
    w.send(body[1000:50_000])
    w.send(body[50_000:])
    status, _, out, _ = w.response()
    assert status == 201, out[:300]
    # a watch (a chunked, streamed answer) ends after its timeout; the renewal behind it is raw
    w.send(get(f"{LEASES}?watch=1&timeoutSeconds=1&fieldSelector=metadata.name%3Draw-4"))
    while b"0\r\n\r\n" not in w.pending:
        w._more()
    assert w.pending.startswith(b"HTTP/1.1 200 OK") and b"Transfer-Encoding: chunked" in w.pending
    assert b'"type":"ADDED"' in w.pending
    w.pending = b""
    w.send(renewal(made, 1))
    status, _, renewed, _ = w.response()
    assert status == 200, renewed
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 1
    # a chunked request hands aiohttp the connection for good: it answers the renewal after it
    chunked = json.dumps({**json.loads(renewed), "spec": {**json.loads(renewed)["spec"],
                                                         "renewTime": now_micro(2)}}).encode()
    w.send(f"PUT {LEASES}/raw-4 HTTP/1.1\r\nHost: tier\r\nContent-Type: application/json\r\n"
           f"Transfer-Encoding: chunked\r\n\r\n{len(chunked):x}\r\n".encode() + chunked + b"\r\n0\r\n\r\n")
    status, _, again, _ = w.response()
    assert status == 200, again
    w.send(renewal(json.loads(again), 3))
    assert w.response()[0] == 200
    assert metric(tier, "nodetier_renewals_raw_path_total") == raw0 + 1
    w.close()
    # Connection: close is aiohttp's, which closes after its answer
    c = Wire(tier.base)
    c.send(f"GET {LEASES}/raw-4 HTTP/1.1\r\nHost: tier\r\nConnection: close\r\n\r\n".encode())
    assert c.response()[0] == 200
    assert c.sock.recv(10) == b""
    c.close()


def test_raw_renewals_false_sends_every_request_through_aiohttp(current_etcd):
    cp = start_apiserver(current_etcd.endpoint, f"/registry/rawpath-{uuid.uuid4().hex[:8]}")
    try:
        with NodeTierProcess(cp.base, "--raw-renewals=false") as p:
            t = Api(p.base)
            made = create(t, "raw-off")
            w = Wire(p.base)
            w.send(renewal(made, 1))
            assert w.response()[0] == 200
            assert metric(t, "nodetier_renewals_fast_path_total") == 1
            assert metric(t, "nodetier_renewals_raw_path_total") == 0
            w.close()
    finally:
        cp.stop()


def test_a_client_that_stops_sending_gets_the_answers_to_what_it_sent_whole(tier):
    made = create(tier, "raw-eof")
    w = Wire(tier.base)
    w.send(renewal(made, 1))
    w.sock.shutdown(socket.SHUT_WR)               # a whole renewal, then the client's end of the stream
    status, _, body, _ = w.response()
    assert status == 200, body
    assert w.sock.recv(10) == b""                 # then the tier closes
    w.close()
    cut = Wire(tier.base)
    cut.send(renewal(json.loads(body), 2)[:-10])  # a renewal cut short: closed, nothing stored
    cut.sock.shutdown(socket.SHUT_WR)
    assert cut.sock.recv(10) == b""
    cut.close()
    assert tier.get(f"{LEASES}/raw-eof").json() == json.loads(body)
