"""`python -m apiserver` / `residency-apiserver`: the command line.

Flags are named as kube-apiserver's. Without `--etcd-servers` a real etcd is
started (embedded default etcd) with its data in `--state-dir`, and stopped
cleanly on exit: `$ETCD_BIN`, else the newest etcd found (storage.embedded.find_etcd),
with one warning line on stderr when it is too old for consistent reads from the cache.
"""
from __future__ import annotations

import argparse
import asyncio
import faulthandler
import functools
import logging
import os
import signal
import ssl
import sys

from apiserver.httpstack import web

from machinery import http1, pauses

from .flags import build_parser

SHUTDOWN_DUMP_AFTER = 7.0   # s; tests kill a process still running 10 s after SIGTERM


def parse_args(argv: list[str] | None = None):
    from storage.router import parse_overrides, parse_servers
    p = build_parser()
    a = p.parse_args(argv)
    try:
        a.etcd_server_list = parse_servers(a.etcd_servers) if a.etcd_servers else []
        a.overrides = parse_overrides(a.etcd_servers_overrides)
    except ValueError as e:
        p.error(str(e))
    if a.embedded_lease_etcd and ("coordination.k8s.io", "leases") in a.overrides:
        p.error("--embedded-lease-etcd: coordination.k8s.io/leases already has --etcd-servers-overrides")
    if a.secure_port and not (a.tls_cert_file and a.tls_private_key_file):
        p.error("--secure-port needs --tls-cert-file and --tls-private-key-file")
    for f in (a.tls_cert_file, a.tls_private_key_file):
        if f and not os.path.isfile(f):
            p.error(f"TLS file not found: {f}")
    from machinery.shard_selector import ShardSelectorError, parse_shard_selector
    try:
        a.residency_selector = parse_shard_selector(a.residency)
    except ShardSelectorError as e:
        p.error(f"--residency: {e}")
    a.full_resources = tuple(r.strip() for r in a.residency_full_resources.split(",") if r.strip())
    if a.residency_selector is not None and not a.watch_cache:
        p.error("--residency needs the watch cache (--watch-cache=true)")
    a.shard_urls = [u.strip() for u in a.shards.split(",") if u.strip()]
    if a.front and not a.shard_urls:
        p.error("--front needs --shards")
    if a.shard_urls and not a.front:
        p.error("--shards needs --front")
    if a.front and (a.residency_selector is not None or not a.etcd_server_list):
        p.error("--front needs --etcd-servers (the shards' etcd) and takes no --residency")
    if not a.port and not a.secure_port:
        p.error("nothing to serve: both --port and --secure-port are 0")
    from .auth.authz import parse_modes
    try:
        a.authorization_modes = parse_modes(a.authorization_mode)
    except ValueError as e:
        p.error(f"--authorization-mode: {e}")
    _check_authentication(p, a)
    return a


def _check_authentication(p: argparse.ArgumentParser, a) -> None:
    """The authentication flags: a malformed token file or an unreadable client CA is a CLI error; anonymous
    auth is reset to false under the AlwaysAllow authorizer, with upstream's warning."""
    from .auth import authn
    if a.token_auth_file:
        try:
            authn.load_token_file(a.token_auth_file)
        except authn.TokenFileError as e:
            p.error(f"--token-auth-file: {e}")
    if a.client_ca_file:
        try:
            ssl.create_default_context(cafile=a.client_ca_file)
        except (OSError, ssl.SSLError) as e:
            p.error(f"--client-ca-file: {a.client_ca_file}: {e}")
    if authn.enabled(a) and a.anonymous_auth is not False and "AlwaysAllow" in a.authorization_modes:
        print("warning: AnonymousAuth is not allowed with the AlwaysAllow authorizer. Resetting AnonymousAuth "
              "to false. You should use a different authorizer", file=sys.stderr)
        a.anonymous_auth = False


def main(argv: list[str] | None = None) -> int:
    from machinery.memory import limit_malloc_arenas
    limit_malloc_arenas()   # before any thread starts (machinery/memory.py says why)
    a = parse_args(argv)
    if os.environ.get("RESIDENCY_TRACEMALLOC") == "1":
        # Heap measurement for bench/residency.py (tracemalloc costs CPU and memory; opt-in).
        import tracemalloc
        tracemalloc.start(1)
    logging.basicConfig(level=logging.DEBUG if a.verbosity >= 4 else logging.INFO,
                        format="time=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s")
    if a.verbosity < 6:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    pauses.install()      # python_gc_duration_seconds on /metrics, from the start
    pauses.fewer_collections()
    from storage.embedded import EmbeddedEtcd, find_etcd
    from cache.compression import EAGER, CompressionConfig
    from .app import APIServer, Config

    etcd = None
    own_ports = frozenset(p for p in (a.port, a.secure_port) if p)   # not bound until etcd is up: not for etcd
    servers = a.etcd_server_list
    if not servers:
        try:
            binary = find_etcd()
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        etcd = EmbeddedEtcd(data_dir=os.path.abspath(os.path.join(a.state_dir, "etcd")), binary=binary.path,
                            avoid=own_ports).start()
        servers = [etcd.endpoint]
        print(f"embedded etcd: {etcd.endpoint} data={etcd.data_dir} log={etcd.log_path} "
              f"binary={binary.path} version={binary.version or 'unknown'} ({binary.source})", file=sys.stderr)
        if a.watch_cache and (warning := old_etcd_warning(binary)):
            print(warning, file=sys.stderr)
    lease_etcd = None
    try:
        if a.embedded_lease_etcd:
            from storage.embedded import lease_etcd as start_lease_etcd
            lease_etcd = start_lease_etcd(find_etcd().path, state_dir=a.state_dir, avoid=own_ports)
            a.overrides[("coordination.k8s.io", "leases")] = [lease_etcd.endpoint]
            print(f"embedded lease etcd: {lease_etcd.endpoint} data={lease_etcd.data_dir} (no fsync, tmpfs)",
                  file=sys.stderr)
        cfg = Config(etcd_servers=servers, etcd_prefix=a.etcd_prefix, etcd_overrides=a.overrides,
                     watch_cache=a.watch_cache, read_only=a.read_only,
                     residency=a.residency_selector, full_resources=a.full_resources,
                     compaction_interval=a.etcd_compaction_interval,
                     max_requests_inflight=a.max_requests_inflight,
                     max_mutating_requests_inflight=a.max_mutating_requests_inflight,
                     request_timeout=a.request_timeout, token_auth_file=a.token_auth_file,
                     client_ca_file=a.client_ca_file, anonymous_auth=a.anonymous_auth,
                     authorization_modes=a.authorization_modes, state_dir=a.state_dir,
                     warm_restart=a.warm_restart, snapshot_interval=a.cache_snapshot_interval,
                     compression=CompressionConfig(enabled=a.cache_compression,
                                                   **(EAGER if a.cache_compression_eager else {})))
        if os.environ.get("RESIDENCY_EVENT_LOOP", "uvloop") == "uvloop":
            # uvloop's TLS and socket writes take half the CPU of asyncio's: watch fan-out to 1,000 watchers
            # over HTTPS delivered 2.2x the events per CPU-second (bench.vs_upstream). RESIDENCY_EVENT_LOOP=asyncio
            # runs the standard loop.
            import uvloop
            uvloop.run(_serve(_server(cfg, a), a))
        else:
            asyncio.run(_serve(_server(cfg, a), a))
    finally:
        faulthandler.cancel_dump_traceback_later()
        for e in (lease_etcd, etcd):
            if e is not None:
                e.stop()
    return 0


def _server(cfg, a):
    from .app import APIServer
    if a.front:
        from .front_server import FrontServer
        return FrontServer(cfg, a.shard_urls, shared_watches=a.front_shared_watches == "true")
    return APIServer(cfg)


def old_etcd_warning(binary) -> str | None:
    """One line when the embedded etcd is too old for consistent reads from the watch cache (S3.6), else None."""
    from cache.cacher import progress_requests_supported
    if progress_requests_supported(binary.version or ""):
        return None
    return (f"warning: etcd {binary.version or '(version unknown)'} ({binary.path}) is too old for consistent reads "
            f"from the watch cache (S3.6: needs >= 3.4.31 on 3.4.x, >= 3.5.13 on 3.5.x), so they go to etcd; "
            f"for a current etcd run `python3 tools/build_etcd.py` (then it is found automatically) "
            f"or set ETCD_BIN=/path/to/etcd")


async def _serve(server, a) -> None:
    # Signal handlers before anything is served: a SIGTERM right after /readyz answers (or after the ready
    # line) must be a clean shutdown, not the default action killing the process (-15).
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pauses.install().start_lag()     # python_event_loop_lag_seconds
    runner, urls = await start_sites(server.app(), a)
    print(f"apiserver ready: {' '.join(urls)} etcd={','.join(server.config.etcd_servers)} "
          f"etcd_version={server.etcd_version}", file=sys.stderr)
    print(f"point kubectl at it:  kubectl --server {urls[0]} get configmaps -A", file=sys.stderr, flush=True)
    await stop.wait()
    print("shutting down", file=sys.stderr, flush=True)
    # A shutdown that hangs says where: every thread's stack on stderr after SHUTDOWN_DUMP_AFTER s (the process
    # goes on; whoever sent SIGTERM decides when to kill). Disarmed once the event loop has closed (main).
    faulthandler.dump_traceback_later(SHUTDOWN_DUMP_AFTER, exit=False)
    await runner.cleanup()


async def start_sites(app: web.Application, a, wrap=None, runner_kwargs=None) -> tuple[web.AppRunner, list[str]]:
    """Serve `app` on `--port` (plain HTTP) and `--secure-port` (HTTPS) of `--bind-address`: the runner and
    the URLs. Also the node tier's (nodetier/__main__.py), which takes the same flags, and whose connections
    start on a protocol of its own: `wrap(aiohttp's protocol factory)` gives the factory its ports use, and
    `runner_kwargs` go to aiohttp's runner."""
    from .filters import PROTOCOL_LIMITS, install_protocol_limits
    stack = _stack_of(app)
    runner = stack.AppRunner(app, handle_signals=False, **{"access_log": None, **(runner_kwargs or {})},
                             **PROTOCOL_LIMITS)
    await runner.setup()
    install_protocol_limits(runner)  # 431 for a request line or headers over the limits
    urls = []
    reuse = bool(getattr(a, "reuse_port", False)) or None   # the node tier has no such flag
    # The secure port listens first: whoever sees the plain port's /readyz answer (the tests, a probe) may go
    # straight to the secure one (on a loaded machine a TLS client was refused between the two binds).
    if a.secure_port:
        if a.client_ca_file:
            # Client certificates are asked for, not required, and verified against --client-ca-file alone
            # (no system CAs): apiserver/auth/authn.py reads the verified certificate's subject.
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_verify_locations(cafile=a.client_ca_file)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        else:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(a.tls_cert_file, a.tls_private_key_file)
        await _listen(_site(stack, runner, a.bind_address, a.secure_port, ssl_context=ctx, reuse_port=reuse,
                            wrap=wrap), runner)
        urls.append(f"https://{_host(a.bind_address)}:{a.secure_port}")
    if a.port:
        await _listen(_site(stack, runner, a.bind_address, a.port, reuse_port=reuse, wrap=wrap), runner)
        urls.insert(0, f"http://{_host(a.bind_address)}:{a.port}")
    if getattr(a, "admin_port", 0):
        await _listen(stack.TCPSite(runner, "127.0.0.1", a.admin_port, shutdown_timeout=1), runner)
        urls.append(f"admin=http://127.0.0.1:{a.admin_port}")
    if getattr(a, "unix_socket", ""):
        await _listen(_unix_site(stack, runner, a.unix_socket), runner)
        urls.append(http1.unix_url(a.unix_socket))
    return runner, urls


def _stack_of(app):
    """The HTTP server an application belongs to: machinery.web (the default) or aiohttp.web
    (APISERVER_HTTP=aiohttp, and always the node tier's)."""
    if type(app).__module__ == "machinery.web":
        from machinery import web as stack  # noqa: PLC0415
    else:
        from aiohttp import web as stack  # noqa: PLC0415
    return stack


def _site(stack, runner, host: str, port: int, *, wrap=None, **kw):
    """A TCP site of `runner`; with `wrap` (the node tier, on aiohttp) one whose connections may start on
    another protocol."""
    if wrap is None:
        return stack.TCPSite(runner, host, port, shutdown_timeout=1, **kw)
    return _wrapped_site_class()(runner, host, port, wrap=wrap, **kw)


def _unix_site(stack, runner, path: str):
    """`--unix-socket`: machinery.web's UnixSite, or on aiohttp its UnixSite on the same owner-only listener."""
    if stack.__name__ == "machinery.web":
        return stack.UnixSite(runner, path, shutdown_timeout=1)
    return _aiohttp_unix_site_class()(runner, path, shutdown_timeout=1)


@functools.cache
def _aiohttp_unix_site_class() -> type:
    from aiohttp import web as aioweb  # noqa: PLC0415

    from machinery.web import remove_socket, unix_listener  # noqa: PLC0415

    class OwnerOnlyUnixSite(aioweb.UnixSite):
        """aiohttp's UnixSite on machinery.web's listener (owner-only before it listens; a stale socket replaced),
        its file removed at stop, as machinery.web.UnixSite does."""

        @property
        def name(self) -> str:
            return f"http+unix://{self._path}"

        async def start(self) -> None:
            await aioweb.BaseSite.start(self)
            sock = unix_listener(self._path, self._backlog)
            self._server = await asyncio.get_running_loop().create_unix_server(self._runner.server, sock=sock,
                                                                              backlog=self._backlog)

        async def stop(self) -> None:
            bound = self._server is not None   # (a path it did not bind is not its to remove)
            await super().stop()
            if bound:
                remove_socket(self._path)
    return OwnerOnlyUnixSite


@functools.cache
def _wrapped_site_class() -> type:
    from aiohttp import web as aioweb  # noqa: PLC0415

    class WrappedSite(aioweb.TCPSite):
        """aiohttp's TCP site, whose connections start on another protocol (`start_sites`'s `wrap`). `start`
        repeats TCPSite.start's last step with its attributes (aiohttp has no hook for the protocol factory):
        pinned below aiohttp 4 in pyproject.toml, and tests/test_nodetier_rawpath.py starts it."""

        def __init__(self, runner, host: str, port: int, *, wrap, **kw):
            super().__init__(runner, host, port, shutdown_timeout=1, **kw)
            self._wrap = wrap

        async def start(self) -> None:
            await aioweb.BaseSite.start(self)   # (registers the site with its runner, as TCPSite.start does first)
            self._server = await asyncio.get_running_loop().create_server(
                self._wrap(self._runner.server), self._host, self._port, ssl=self._ssl_context,
                backlog=self._backlog, reuse_port=self._reuse_port)

    return WrappedSite


class ListenError(SystemExit):
    """A port that cannot be bound (in use, not permitted): one line and exit status 1, not a traceback."""


async def _listen(site: web.TCPSite, runner: web.AppRunner) -> None:
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        print(f"error: cannot listen on {site.name}: {e.strerror or e}", file=sys.stderr)
        raise ListenError(1) from None


def _host(addr: str) -> str:
    return f"[{addr}]" if ":" in addr else addr


if __name__ == "__main__":
    sys.exit(main())
