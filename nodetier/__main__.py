"""`python -m nodetier --control-plane URL | --kubeconfig FILE [--port N]`: the node-facing tier.

Point kubelets' (or kwok's) kubeconfig at it. It absorbs the renewals of their Leases in kube-node-lease and
proxies everything else to the control plane."""
from __future__ import annotations

import os

# The tier's raw Lease path works inside aiohttp's protocol (nodetier/rawpath.py), so this process runs the
# apiserver's modules on aiohttp whatever APISERVER_HTTP says (apiserver/httpstack.py reads it at import).
os.environ["APISERVER_HTTP"] = "aiohttp"

import argparse  # noqa: E402
import asyncio  # noqa: E402
import faulthandler  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

from apiserver.__main__ import SHUTDOWN_DUMP_AFTER, start_sites
from apiserver.flags import _address, _bool, _duration, _port
from machinery import pauses

from .controlplane import Identity
from .rawpath import RawRenewals
from .server import NodeTier
from .split import NodeRanges


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m nodetier", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--control-plane", default="", help="the control plane's URL (an apiserver or a slice front), "
                   "reached with no credentials (plain HTTP) or the system CAs")
    p.add_argument("--kubeconfig", default="", help="the tier's own identity towards the control plane "
                   "(server, CA, client certificate or token of the current context)")
    p.add_argument("--bind-address", type=_address, default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8090, help="plain HTTP port (0 disables it)")
    p.add_argument("--secure-port", type=_port, default=0, help="HTTPS port (needs --tls-cert-file and "
                   "--tls-private-key-file)")
    p.add_argument("--tls-cert-file", default="")
    p.add_argument("--tls-private-key-file", default="")
    p.add_argument("--client-ca-file", default="", help="authenticate clients by x509 certificate, as the apiserver")
    p.add_argument("--token-auth-file", default="", help="authenticate clients by bearer token, as the apiserver")
    p.add_argument("--anonymous-auth", type=_bool, default=None, nargs="?", const=True)
    p.add_argument("--forward-interval", type=_duration, default=30.0,
                   help="a renewal reaches the control plane once it is about this much newer than the control "
                        "plane's copy (at most 3 renewal periods), and at once when the next renewal is overdue "
                        "(default 30s: every third renewal of a 40 s Lease)")
    p.add_argument("--forward-qps", type=float, default=500.0,
                   help="at most this many forwards a second (after an outage too), or the renewals absorbed a "
                        "second where that is more (the steady state forwards a third of them)")
    p.add_argument("--forward-concurrency", type=int, default=192,
                   help="at most this many forwards in flight to the control plane at once (default 192); the "
                        "Leases due beyond them wait, longest due first")
    p.add_argument("--tiers", default="", help="several tiers splitting the nodes: every tier's URL, this one "
                   "included, comma-separated, the same list and order for each; tier i holds the Leases whose "
                   "name's FNV-1a 64 hash lies in the i-th of as many equal ranges, and sends a request for "
                   "another tier's Lease to it")
    p.add_argument("--tier-index", type=int, default=0, help="this tier's place in --tiers (from 0)")
    p.add_argument("--raw-renewals", type=_bool, default=True, nargs="?", const=True,
                   help="answer plain renewals from their bytes before aiohttp (nodetier/rawpath.py; default true; "
                        "false: every request through aiohttp, for comparison)")
    p.add_argument("-v", "--v", dest="verbosity", type=int, default=0)
    a = p.parse_args(argv)
    if bool(a.control_plane) == bool(a.kubeconfig):
        p.error("give one of --control-plane and --kubeconfig")
    if a.secure_port and not (a.tls_cert_file and a.tls_private_key_file):
        p.error("--secure-port needs --tls-cert-file and --tls-private-key-file")
    if not a.port and not a.secure_port:
        p.error("nothing to serve: both --port and --secure-port are 0")
    if a.forward_interval <= 0 or a.forward_qps <= 0 or a.forward_concurrency <= 0:
        p.error("--forward-interval, --forward-qps and --forward-concurrency must be positive")
    try:
        a.ranges = NodeRanges([t for t in a.tiers.split(",") if t], a.tier_index)
    except ValueError as e:
        p.error(f"--tier-index: {e}")
    try:
        a.identity = Identity.from_kubeconfig(a.kubeconfig) if a.kubeconfig else Identity(a.control_plane)
    except (OSError, ValueError, KeyError) as e:
        p.error(f"--kubeconfig: {e}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if a.verbosity >= 4 else logging.INFO,
                        format="time=%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    pauses.install()      # python_gc_duration_seconds on /metrics, from the start
    pauses.fewer_collections()
    tier = NodeTier(a.identity, forward_interval=a.forward_interval, forward_qps=a.forward_qps,
                    forward_concurrency=a.forward_concurrency, token_auth_file=a.token_auth_file,
                    client_ca_file=a.client_ca_file, anonymous_auth=a.anonymous_auth, ranges=a.ranges)
    import uvloop
    try:
        uvloop.run(_serve(tier, a))
    finally:
        faulthandler.cancel_dump_traceback_later()
    return 0


async def _serve(tier: NodeTier, a) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    pauses.install().start_lag()     # python_event_loop_lag_seconds
    raw = RawRenewals(tier)         # renewals answered from their bytes, before aiohttp (nodetier/rawpath.py)
    if a.raw_renewals:
        runner, urls = await start_sites(tier.app(), a, wrap=raw.wrap, runner_kwargs=raw.runner_kwargs)
    else:
        runner, urls = await start_sites(tier.app(), a)
    print(f"nodetier ready: {' '.join(urls)} control-plane={a.identity.server} "
          f"forward-interval={a.forward_interval:g}s holds={a.ranges.describe()}", file=sys.stderr, flush=True)
    await stop.wait()
    print("shutting down", file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(SHUTDOWN_DUMP_AFTER + 5, exit=False)   # (+ the flush of pending renewals)
    raw.close()         # (aiohttp's cleanup closes the connections it took over, then forwards what is pending)
    await runner.cleanup()


if __name__ == "__main__":
    sys.exit(main())
