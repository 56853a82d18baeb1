"""recipes/balancer.py: the layer-4 balancer in front of apiservers, with real sockets on loopback.

The scenarios run on both event loops (asyncio's and uvloop, which the CLI uses): their transports differ in
exactly what the balancer relies on (pause/resume reading, half-close, write buffer limits)."""
from __future__ import annotations

import asyncio
import hashlib
import random
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest
import uvloop

from recipes.balancer import Balancer
from storage.embedded import free_port

ROOT = Path(__file__).resolve().parent.parent
LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"), pytest.param(uvloop.new_event_loop, id="uvloop")]


class _Server:
    """A plain asyncio TCP server on loopback running `handler(reader, writer)` per connection."""

    def __init__(self, handler):
        self.handler = handler
        self.tasks: set[asyncio.Task] = set()
        self.port = 0

    async def start(self, port: int = 0, tls: ssl.SSLContext | None = None) -> _Server:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port, ssl=tls)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _handle(self, reader, writer):
        task = asyncio.current_task()
        self.tasks.add(task)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.tasks.discard(task)
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass

    async def stop(self) -> None:
        self.server.close()
        tasks = list(self.tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.server.wait_closed()


def _greeter(tag: str):
    """Says its tag on a line, then echoes until the client's EOF, then sends its own EOF."""
    async def handler(reader, writer):
        writer.write(f"{tag}\n".encode())
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        writer.write_eof()
        await writer.drain()
    return handler


def _http(tag: str):
    """Answers each HTTP/1.1 request (no body) with its tag, keeping the connection open."""
    async def handler(reader, writer):
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            path = head.split(b" ", 2)[1].decode()
            body = f"{tag} {path}".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            await writer.drain()
    return handler


async def _http_get(reader, writer, path: str) -> str:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
    return (await reader.readexactly(length)).decode()


async def _close(writer) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except ConnectionError:
        pass


async def _until(pred, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def _run(loop_factory, scenario) -> None:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(asyncio.wait_for(scenario(), 20))


def _name(port: int) -> str:
    return f"127.0.0.1:{port}"


# -- (1) round-robin, and bytes intact both ways (20 MB: the backpressure path)

async def _round_robin() -> None:
    servers = [await _Server(_greeter(f"b{i}")).start() for i in range(3)]
    bal = Balancer("127.0.0.1", 0, [("127.0.0.1", s.port) for s in servers])
    await bal.start()
    try:
        assert bal.listen_port > 0
        tags = []
        for i in range(6):
            reader, writer = await asyncio.open_connection("127.0.0.1", bal.listen_port)
            tags.append((await reader.readline()).decode().strip())
            writer.write(b"ping %d\n" % i)
            assert await reader.readline() == b"ping %d\n" % i
            await _close(writer)
        assert tags == ["b0", "b1", "b2", "b0", "b1", "b2"]
        st = bal.stats()
        assert st["accepted"] == 6 and st["failed_connects"] == 0 and st["rejected"] == 0
        assert {n: b["connections"] for n, b in st["backends"].items()} == {_name(s.port): 2 for s in servers}

        payload = random.Random(1).randbytes(20 * 2**20)
        reader, writer = await asyncio.open_connection("127.0.0.1", bal.listen_port)
        assert await reader.readline() == b"b0\n"

        async def send():
            writer.write(payload)
            await writer.drain()
            writer.write_eof()
        sender = asyncio.create_task(send())
        echoed = await reader.read()  # to the backend's EOF, which follows the client's
        await sender
        assert len(echoed) == len(payload)
        assert hashlib.sha256(echoed).digest() == hashlib.sha256(payload).digest()
        # Both ends have sent EOF: the balancer closes the connection by itself.
        await _until(lambda: bal.stats()["active"] == 0)
        await _close(writer)
    finally:
        await bal.stop()
        for s in servers:
            await s.stop()


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_round_robin_and_integrity(loop_factory):
    _run(loop_factory, _round_robin)


# -- backpressure: a reader that does not read costs the balancer a bounded buffer, in both directions

async def _backpressure() -> None:
    size = 24 * 2**20
    payload = random.Random(2).randbytes(size)
    digest = hashlib.sha256(payload).hexdigest().encode()

    async def firehose(reader, writer):
        writer.write(payload)
        await writer.drain()

    async def slow_sink(reader, writer):
        await asyncio.sleep(0.6)  # not reading: the client's bytes pile up before the balancer, not in it
        h, n = hashlib.sha256(), 0
        while data := await reader.read(1 << 16):
            h.update(data)
            n += len(data)
        writer.write(b"%d %s" % (n, h.hexdigest().encode()))
        await writer.drain()

    down_srv, up_srv = await _Server(firehose).start(), await _Server(slow_sink).start()
    bounded = 2 * 2**20  # without backpressure the balancer would hold most of the 24 MB
    bal_down = Balancer("127.0.0.1", 0, [("127.0.0.1", down_srv.port)])
    bal_up = Balancer("127.0.0.1", 0, [("127.0.0.1", up_srv.port)])
    await bal_down.start()
    await bal_up.start()
    try:
        # backend -> balancer -> a client that reads nothing for a while
        reader, writer = await asyncio.open_connection("127.0.0.1", bal_down.listen_port)
        peak = 0
        for _ in range(30):
            await asyncio.sleep(0.02)
            peak = max(peak, bal_down.stats()["buffered_bytes"])
        assert 0 < peak <= bounded, peak
        got = await reader.read()
        assert len(got) == size and hashlib.sha256(got).hexdigest().encode() == digest
        await _close(writer)

        # a client -> balancer -> a backend that reads nothing for a while
        reader, writer = await asyncio.open_connection("127.0.0.1", bal_up.listen_port)
        writer.write(payload)
        writer.write_eof()
        peak = 0
        for _ in range(25):
            await asyncio.sleep(0.02)
            peak = max(peak, bal_up.stats()["buffered_bytes"])
        assert 0 < peak <= bounded, peak
        assert await reader.read() == b"%d %s" % (size, digest)
        await _close(writer)
        await _until(lambda: bal_down.stats()["active"] == 0 and bal_up.stats()["active"] == 0)
    finally:
        await bal_down.stop()
        await bal_up.stop()
        await down_srv.stop()
        await up_srv.stop()


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_backpressure_bounds_the_buffer(loop_factory):
    _run(loop_factory, _backpressure)


# -- (2) half-close, in both directions

async def _half_close() -> None:
    async def counter(reader, writer):
        n = len(await reader.read())  # to the client's EOF
        writer.write(b"got %d" % n)
        await writer.drain()

    heard: asyncio.Future = asyncio.get_running_loop().create_future()

    async def talks_first(reader, writer):
        writer.write(b"hello")
        writer.write_eof()  # done talking, still listening
        await writer.drain()
        heard.set_result(await reader.read())

    s1, s2 = await _Server(counter).start(), await _Server(talks_first).start()
    b1 = Balancer("127.0.0.1", 0, [("127.0.0.1", s1.port)])
    b2 = Balancer("127.0.0.1", 0, [("127.0.0.1", s2.port)])
    await b1.start()
    await b2.start()
    try:
        # The client is done sending; the backend answers after that, then closes.
        reader, writer = await asyncio.open_connection("127.0.0.1", b1.listen_port)
        writer.write(b"x" * 100_000)
        writer.write_eof()
        assert await asyncio.wait_for(reader.read(), 5) == b"got 100000"
        assert reader.at_eof()
        await _close(writer)
        await _until(lambda: b1.stats()["active"] == 0)

        # The backend is done sending; the client still sends, and the backend gets it all.
        reader, writer = await asyncio.open_connection("127.0.0.1", b2.listen_port)
        assert await asyncio.wait_for(reader.read(), 5) == b"hello"
        assert b2.stats()["active"] == 1  # the half-closed connection stays up
        writer.write(b"still here")
        writer.write_eof()
        assert await asyncio.wait_for(heard, 5) == b"still here"
        await _close(writer)
        await _until(lambda: b2.stats()["active"] == 0)
    finally:
        await b1.stop()
        await b2.stop()
        await s1.stop()
        await s2.stop()


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_half_close(loop_factory):
    _run(loop_factory, _half_close)


# -- (3) a backend that is down is skipped, all down fails fast, a backend that comes back is used again

async def _down_backends() -> None:
    dead = free_port()
    a, b = await _Server(_greeter("a")).start(), await _Server(_greeter("b")).start()
    bal = Balancer("127.0.0.1", 0, [("127.0.0.1", dead), ("127.0.0.1", a.port), ("127.0.0.1", b.port)],
                   check_interval=0.2, down_for=0.4)
    await bal.start()
    back = None
    dead2, dead3 = free_port(avoid={dead}), free_port(avoid={dead})
    none_up = Balancer("127.0.0.1", 0, [("127.0.0.1", dead2), ("127.0.0.1", dead3)])
    await none_up.start()

    async def tag() -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", bal.listen_port)
        try:
            return (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
        finally:
            await _close(writer)
    try:
        assert [await tag() for _ in range(4)] == ["a", "b", "a", "b"]
        st = bal.stats()
        assert st["failed_connects"] == 1 and st["rejected"] == 0
        assert st["backends"][_name(dead)] == {"up": False, "connections": 0, "failed_connects": 1}

        # Every backend down: the client's connection is closed at once, not left hanging.
        for attempt in (1, 2):
            t0 = time.monotonic()
            reader, writer = await asyncio.open_connection("127.0.0.1", none_up.listen_port)
            assert await asyncio.wait_for(reader.read(), 2) == b""
            assert time.monotonic() - t0 < 1.0
            await _close(writer)
            st = none_up.stats()
            assert st["rejected"] == attempt and st["failed_connects"] == 2 * attempt
        assert not any(x["up"] for x in st["backends"].values())

        # The dead backend comes up: the health check (not a client) marks it up, and it is used again.
        back = await _Server(_greeter("back")).start(dead)
        await _until(lambda: bal.stats()["backends"][_name(dead)]["up"], timeout=3)
        assert bal.stats()["failed_connects"] == 1
        tags = [await tag() for _ in range(3)]
        assert sorted(tags) == ["a", "b", "back"]
        assert bal.stats()["backends"][_name(dead)]["connections"] == 1
    finally:
        await bal.stop()
        await none_up.stop()
        for s in (a, b, back):
            if s is not None:
                await s.stop()


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_down_backends(loop_factory):
    _run(loop_factory, _down_backends)


# -- TLS passes through: the client verifies the backend's certificate, the backend sees the client's

def _self_signed(d: Path, name: str) -> tuple[str, str]:
    crt, key = str(d / f"{name}.crt"), str(d / f"{name}.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "1", "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", crt], check=True, capture_output=True)
    return crt, key


async def _tls(d: Path) -> None:
    servers, client_crt = [], _self_signed(d, "admin")
    trust = ssl.create_default_context()
    for tag in ("apiserver-0", "apiserver-1"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*_self_signed(d, tag))
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_crt[0])
        trust.load_verify_locations(str(d / f"{tag}.crt"))

        async def whoami(reader, writer, tag=tag):
            subject = dict(x[0] for x in writer.get_extra_info("peercert")["subject"])
            writer.write(f"{tag} sees {subject['commonName']}\n".encode())
            await writer.drain()
            await reader.read()
        servers.append(await _Server(whoami).start(tls=ctx))
    trust.load_cert_chain(*client_crt)
    bal = Balancer("127.0.0.1", 0, [("127.0.0.1", s.port) for s in servers])
    await bal.start()
    try:
        seen = []
        for _ in range(2):
            reader, writer = await asyncio.open_connection("127.0.0.1", bal.listen_port, ssl=trust,
                                                           server_hostname="127.0.0.1")
            cn = dict(x[0] for x in writer.get_extra_info("peercert")["subject"])["commonName"]
            seen.append((cn, (await reader.readline()).decode().strip()))
            await _close(writer)
        assert seen == [("apiserver-0", "apiserver-0 sees admin"), ("apiserver-1", "apiserver-1 sees admin")]
    finally:
        await bal.stop()
        for s in servers:
            await s.stop()


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_tls_passes_through(loop_factory, tmp_path):
    _run(loop_factory, lambda: _tls(tmp_path))


# -- (4) the CLI, in front of two HTTP servers

async def test_cli():
    servers = [await _Server(_http(tag)).start() for tag in ("one", "two")]
    port = free_port()
    cmd = [sys.executable, "-m", "recipes.balancer", "--listen", f"127.0.0.1:{port}"]
    for s in servers:
        cmd += ["--backend", _name(s.port)]
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    held = None
    try:
        ready = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode()
        assert ready == f"balancer ready listen=127.0.0.1:{port} backends={_name(servers[0].port)},{_name(servers[1].port)}\n"

        # A long-lived connection (a watch's, say) opened first and left idle while others come and go.
        held = await asyncio.open_connection("127.0.0.1", port)
        assert await _http_get(*held, "/watch") == "one /watch"
        bodies = []
        for i in range(4):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            bodies.append(await _http_get(reader, writer, f"/r{i}"))
            bodies.append(await _http_get(reader, writer, f"/r{i}/again"))  # keep-alive: same backend
            await _close(writer)
        assert bodies == ["two /r0", "two /r0/again", "one /r1", "one /r1/again",
                          "two /r2", "two /r2/again", "one /r3", "one /r3/again"]
        await asyncio.sleep(1.2)  # past a health-check interval
        assert await _http_get(*held, "/watch/later") == "one /watch/later"

        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 5)
        assert proc.returncode == 0, err.decode()
        assert time.monotonic() - t0 < 5
        assert out == b""  # the ready line was the only one
        assert b"balancer stopped" in err and b'"accepted": 5' in err
        # The held connection was closed by the balancer on its way out.
        assert await asyncio.wait_for(held[0].read(), 2) == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.communicate()
        if held is not None:
            await _close(held[1])
        for s in servers:
            await s.stop()
