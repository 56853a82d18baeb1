"""A TCP load balancer that puts two or three apiservers behind one address, as the load balancer of a
"Classic HA" control plane does.

It works at layer 4: it copies bytes and never parses them, so TLS ends at the backends. Clients verify the
backends' own certificates (they carry 127.0.0.1), client certificates reach the apiserver that
authenticates them, the balancer holds no keys, and a watch is one TCP connection pinned to the backend that
accepted it, kept open for as long as both ends keep it open (there is no idle timeout).

Each accepted connection goes to the next healthy backend, round-robin. When a backend refuses a connect, or
does not answer one in time, it is marked down and the connection is retried on the next backend, so a
client sees a failure only when every backend is down. A probe (a TCP connect every second) marks a down
backend up again once it accepts connections.

    python -m recipes.balancer --listen 127.0.0.1:6443 --backend 127.0.0.1:6444 --backend 127.0.0.1:6445
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys

# Backpressure: once this much is queued for one side, reading from the other side pauses until the queue
# drains below LOW_WATER. A slow reader (such as a watch client that is behind) then costs at most about
# HIGH_WATER plus one read per direction, and not the whole stream.
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024


def _fmt(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Backend:
    """One backend address, with its health and counters."""

    __slots__ = ("host", "port", "up", "down_until", "connections", "failed_connects")

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self.up = True
        self.down_until = 0.0      # loop time before which no probe may mark it up again
        self.connections = 0       # connections spliced to it
        self.failed_connects = 0

    @property
    def name(self) -> str:
        return _fmt(self.host, self.port)


class _Side(asyncio.Protocol):
    """One end of a spliced connection. What it reads is written to the transport of the other end (`peer`)."""

    def __init__(self, conn: _Conn, backend: Backend | None = None):
        self.conn = conn
        self.backend = backend     # None for the client's end
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.got_eof = False
        self.lost = False
        # Client bytes read before a backend is connected. Reading is paused until then, so this stays empty
        # unless a loop delivers data before it sees the pause.
        self.pending: list[bytes] = []

    # -- the asyncio.Protocol callbacks

    def connection_made(self, transport):
        self.transport = transport
        transport.set_write_buffer_limits(HIGH_WATER, LOW_WATER)
        if self.backend is None:
            self.conn.client_connected()
        else:
            self.conn.backend_connected(self)

    def data_received(self, data):
        peer = self.peer
        if peer is None:
            self.pending.append(data)
            self.pause()
        elif not peer.lost and not peer.transport.is_closing():
            peer.transport.write(data)

    def eof_received(self):
        if self.got_eof:
            return True  # a selector transport can report EOF again after a resume_reading
        self.got_eof = True
        peer = self.peer
        if peer is None:
            return True  # passed on when a backend is connected
        if peer.lost or not peer.transport.can_write_eof():
            self.conn.close()
            return False
        # Pass the half-close on: the other end may still answer, as a server does after reading a request
        # body to its end, or send more, as `kubectl exec` does with stdin closed.
        peer.transport.write_eof()
        if peer.got_eof:
            self.conn.close()  # both directions are done
        return True

    def pause_writing(self):
        if self.peer is not None:
            self.peer.pause()

    def resume_writing(self):
        if self.peer is not None:
            self.peer.resume()

    def connection_lost(self, exc):
        self.lost = True
        self.conn.side_lost(self, exc)

    # -- helpers

    def pause(self):
        if not self.lost and not self.got_eof and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume(self):
        if not self.lost and not self.got_eof and not self.transport.is_closing():
            self.transport.resume_reading()

    def buffered(self) -> int:
        if self.transport is None or self.lost:
            return 0
        return self.transport.get_write_buffer_size() + sum(map(len, self.pending))


class _Conn:
    """One client connection and, once connected, its backend connection."""

    def __init__(self, balancer: Balancer):
        self.balancer = balancer
        self.client = _Side(self)
        self.backend: _Side | None = None
        self.task: asyncio.Task | None = None
        self.dead = False          # closing: a backend connecting now is closed at once

    def client_connected(self):
        # No reading until a backend is connected: the bytes would have nowhere to go.
        self.client.pause()
        self.task = asyncio.get_running_loop().create_task(self.balancer._connect(self))

    def backend_connected(self, side: _Side):
        if self.dead or self.backend is not None:
            side.transport.close()  # the client left while this connect was in flight
            return
        self.backend = side
        side.backend.up = True
        side.backend.connections += 1
        client = self.client
        side.peer, client.peer = client, side
        for data in client.pending:
            side.transport.write(data)
        client.pending.clear()
        if client.got_eof:
            side.transport.write_eof()
        else:
            client.resume()

    def side_lost(self, side: _Side, exc):
        if side is not self.client and side is not self.backend:
            return  # a backend connection closed at once by backend_connected: nothing else is tied to it
        other = self.client if side is not self.client else self.backend
        if side is self.client:
            self.dead = True
            if self.task is not None and not self.task.done():
                self.task.cancel()
        if other is not None and not other.lost and not other.transport.is_closing():
            # A clean close lets the other end have what is still queued for it; an error (a reset) is
            # passed on as one.
            if exc is None:
                other.transport.close()
            else:
                other.transport.abort()
        if self.client.lost and (self.backend is None or self.backend.lost):
            self.balancer._forget(self)

    def close(self, abort: bool = False):
        self.dead = True
        for side in (self.client, self.backend):
            if side is not None and side.transport is not None and not side.lost:
                if abort:
                    side.transport.abort()
                elif not side.transport.is_closing():
                    side.transport.close()


class Balancer:
    """A layer-4 round-robin balancer from listen_host:listen_port to `backends` (host, port) pairs.

    `listen_port` 0 picks a free port; after `start()` the attribute holds the bound one."""

    def __init__(self, listen_host: str, listen_port: int, backends: list[tuple[str, int]], *,
                 check_interval: float = 1.0, down_for: float = 2.0, connect_timeout: float = 3.0,
                 backlog: int = 1024):
        if not backends:
            raise ValueError("at least one backend is needed")
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.backends = [Backend(h, int(p)) for h, p in backends]
        self.check_interval = check_interval
        self.down_for = down_for
        self.connect_timeout = connect_timeout
        # A burst of clients (a benchmark's informers all starting together) must not overflow the accept queue.
        self.backlog = backlog
        self.accepted = 0
        self.failed_connects = 0
        self.rejected = 0          # clients closed because no backend accepted their connection
        self._rr = 0
        self._conns: set[_Conn] = set()
        self._idle = asyncio.Event()
        self._server: asyncio.AbstractServer | None = None
        self._check_task: asyncio.Task | None = None

    @property
    def address(self) -> str:
        return _fmt(self.listen_host, self.listen_port)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()  # bound to this loop
        self._idle.set()
        self._server = await loop.create_server(self._accept, self.listen_host, self.listen_port,
                                                backlog=self.backlog)
        self.listen_port = self._server.sockets[0].getsockname()[1]
        self._check_task = loop.create_task(self._check())

    async def stop(self, grace: float = 1.0) -> None:
        """Stop accepting, close every connection (what is queued gets `grace` seconds to be sent, then the
        rest are aborted) and stop the health check."""
        if self._server is None:
            return
        server, self._server = self._server, None
        server.close()
        self._check_task.cancel()
        tasks = [self._check_task] + [c.task for c in self._conns if c.task is not None]
        for conn in list(self._conns):
            conn.close()
        try:
            await asyncio.wait_for(self._idle.wait(), grace)
        except asyncio.TimeoutError:
            for conn in list(self._conns):
                conn.close(abort=True)
            await asyncio.sleep(0)  # let the aborts' connection_lost run
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()

    def stats(self) -> dict:
        return {
            "listen": self.address,
            "accepted": self.accepted,
            "active": len(self._conns),
            "failed_connects": self.failed_connects,
            "rejected": self.rejected,
            "buffered_bytes": sum(c.client.buffered() + (c.backend.buffered() if c.backend else 0)
                                  for c in self._conns),
            "backends": {b.name: {"up": b.up, "connections": b.connections, "failed_connects": b.failed_connects}
                         for b in self.backends},
        }

    # -- internals

    def _accept(self) -> _Side:
        self.accepted += 1
        conn = _Conn(self)
        self._conns.add(conn)
        self._idle.clear()
        return conn.client

    def _forget(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        if not self._conns:
            self._idle.set()

    def _candidates(self) -> list[Backend]:
        up = [b for b in self.backends if b.up]
        order = []
        if up:
            i = self._rr % len(up)
            self._rr += 1
            order = up[i:] + up[:i]
        # The backends marked down come last: a mark may be stale, and one more connect costs little
        # next to the failed client connection it can save.
        return order + [b for b in self.backends if not b.up]

    async def _connect(self, conn: _Conn) -> None:
        loop = asyncio.get_running_loop()
        for b in self._candidates():
            if conn.dead or conn.backend is not None:
                return
            try:
                await asyncio.wait_for(
                    loop.create_connection(lambda b=b: _Side(conn, b), b.host, b.port), self.connect_timeout)
                return
            # Refused, unreachable or timed out (TimeoutError is an OSError); anything else is a failure too,
            # or the client would wait, paused, forever.
            except Exception:
                if conn.backend is not None:
                    return  # connected after all, just as the timeout fired
                b.failed_connects += 1
                self.failed_connects += 1
                b.up = False
                b.down_until = loop.time() + self.down_for
        if not conn.dead:
            self.rejected += 1
            conn.close()

    async def _check(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.check_interval)
            now = loop.time()
            due = [b for b in self.backends if not b.up and now >= b.down_until]
            if due:
                await asyncio.gather(*(self._probe(b) for b in due))

    async def _probe(self, b: Backend) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(asyncio.Protocol, b.host, b.port), self.check_interval)
        except OSError:
            return
        transport.close()
        b.up = True


def _hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


async def _serve(args) -> int:
    balancer = Balancer(*args.listen, args.backend, check_interval=args.check_interval, down_for=args.down_for,
                        connect_timeout=args.connect_timeout)
    await balancer.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    backends = ",".join(b.name for b in balancer.backends)
    print(f"balancer ready listen={balancer.address} backends={backends}", flush=True)
    await stopping.wait()
    await balancer.stop()
    # On stderr, so that stdout stays the one ready line a caller waits for.
    print(f"balancer stopped stats={json.dumps(balancer.stats())}", file=sys.stderr, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m recipes.balancer", description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", type=_hostport, required=True, metavar="HOST:PORT", help="port 0 picks a free one")
    p.add_argument("--backend", type=_hostport, action="append", required=True, metavar="HOST:PORT",
                   help="repeat for each backend")
    p.add_argument("--check-interval", type=float, default=1.0, help="seconds between probes of a down backend")
    p.add_argument("--down-for", type=float, default=2.0,
                   help="seconds a backend that failed a connect stays down at least")
    p.add_argument("--connect-timeout", type=float, default=3.0)
    args = p.parse_args(argv)
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        return runner.run(_serve(args))


if __name__ == "__main__":
    sys.exit(main())
