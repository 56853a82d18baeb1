"""The apiserver's command-line flags (`python -m apiserver --help`), named as kube-apiserver's: the parser and
its value types. Light to import (no aiohttp, no gRPC): `python -m deployment` parses the same flags with it
before it starts any apiserver."""
from __future__ import annotations

import argparse
import os

from cache.residency import DEFAULT_FULL_RESOURCES


def _bool(v: str) -> bool:
    t = v.strip().lower()
    if t in ("1", "t", "true", "yes"):
        return True
    if t in ("0", "f", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {v!r} (want true or false)")


def _port(v: str) -> int:
    try:
        p = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port {v!r}") from None
    if not 0 <= p <= 65535:
        raise argparse.ArgumentTypeError(f"port {p} out of range 0-65535")
    return p


def _address(v: str) -> str:
    import ipaddress
    try:
        ipaddress.ip_address(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid IP address {v!r}") from None
    return v


def _duration(v: str) -> float:
    """Go-style durations as kube-apiserver takes them: 300, 30s, 5m, 1h, 1m30s, 0."""
    import re
    t = v.strip()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|ms|m|s)", t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise argparse.ArgumentTypeError(f"invalid duration {v!r} (e.g. 5m, 30s, 1h)")
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in parts)


def _count(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid count {v!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative")
    return n


def _prefix(v: str) -> str:
    if not v.startswith("/"):
        raise argparse.ArgumentTypeError(f"--etcd-prefix must start with '/', got {v!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m apiserver",
                                description="Prototype Kubernetes apiserver over etcd (watch-cache residency experiments)")
    p.add_argument("--etcd-servers", default="",
                   help="comma-separated etcd URLs (http://host:port). Absent: start an embedded etcd")
    p.add_argument("--etcd-prefix", type=_prefix, default="/registry", help="key prefix in etcd (default /registry)")
    p.add_argument("--etcd-servers-overrides", default="",
                   help="per-resource etcd servers: group/resource#url;url,... (core group: /pods#...); "
                        "custom resources are accepted too")
    p.add_argument("--embedded-lease-etcd", action="store_true",
                   help="start a second embedded etcd for coordination.k8s.io/leases (node heartbeats, leader "
                        "election): --unsafe-no-fsync, data on tmpfs (/dev/shm, belonging to --state-dir: kept across "
                        "restarts of the process, not of the machine), its own history compacted every minute")
    p.add_argument("--bind-address", type=_address, default="127.0.0.1")
    p.add_argument("--port", type=_port, default=8080, help="plain HTTP port (0 disables it)")
    p.add_argument("--secure-port", type=_port, default=0, help="HTTPS port (needs --tls-cert-file and --tls-private-key-file)")
    p.add_argument("--reuse-port", action="store_true",
                   help="bind --port and --secure-port with SO_REUSEPORT, so several processes serve one address "
                        "(the kernel spreads connections over them): python -m deployment")
    p.add_argument("--admin-port", type=_port, default=0,
                   help="also serve plain HTTP on this loopback port (the same API and /metrics, /readyz, "
                        "/debug/residency): one process of several on a --reuse-port address reached alone")
    p.add_argument("--unix-socket", default="",
                   help="also serve plain HTTP on this Unix socket (owner-only; the same API as --admin-port): a "
                        "front on the same machine reaches its shards there, http+unix://<the path, %%-encoded>, "
                        "at a third of loopback TCP's CPU per byte (python -m deployment does)")
    p.add_argument("--tls-cert-file", default="")
    p.add_argument("--tls-private-key-file", default="")
    p.add_argument("--watch-cache", type=_bool, default=True, nargs="?", const=True,
                   help="serve lists and watches from the watch cache (default true; false: everything from etcd)")
    p.add_argument("--etcd-compaction-interval", type=_duration, default=300.0,
                   help="how often etcd history is compacted (upstream default 5m; 0 disables), e.g. 5m, 30s")
    p.add_argument("--read-only", type=_bool, default=False, nargs="?", const=True,
                   help="refuse every write (405) and never write to etcd: no system namespaces, no compaction; "
                        "for pointing the apiserver at a restored snapshot of a production etcd")
    p.add_argument("--residency", default="",
                   help="shard selector (KEP-5866 grammar) of the objects this process keeps in its watch caches, "
                        "e.g. \"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')\"; "
                        "default: everything")
    p.add_argument("--residency-full-resources", default=",".join(DEFAULT_FULL_RESOURCES),
                   help="comma-separated plural resources kept fully resident whatever --residency says "
                        f"(default: {','.join(DEFAULT_FULL_RESOURCES)})")
    p.add_argument("--max-requests-inflight", type=_count, default=400,
                   help="non-mutating requests served at once, watches not counted; more get 429 (0: no limit)")
    p.add_argument("--max-mutating-requests-inflight", type=_count, default=200,
                   help="mutating requests served at once; more get 429 (0: no limit)")
    p.add_argument("--request-timeout", type=_duration, default=60.0,
                   help="non-long-running requests still running after this get 504 (default 1m; 0: none)")
    p.add_argument("--authorization-mode", default="AlwaysAllow",
                   help="ordered comma-separated list of authorizers: AlwaysAllow (default), RBAC, AlwaysDeny; "
                        "the first that allows a request decides, system:masters is always allowed")
    p.add_argument("--token-auth-file", default="",
                   help="bearer tokens for the secure and plain ports: upstream's CSV, token,user,uid[,\"group1,group2\"]")
    p.add_argument("--client-ca-file", default="",
                   help="CA bundle that verifies client certificates on the secure port (user = CN, groups = O)")
    p.add_argument("--anonymous-auth", type=_bool, default=None, nargs="?", const=True,
                   help="requests without credentials are system:anonymous (default true; reset to false under "
                        "the AlwaysAllow authorizer, as upstream). Without any of --token-auth-file, "
                        "--client-ca-file, --anonymous-auth every request is system:unsecured (system:masters)")
    p.add_argument("--state-dir", default=os.environ.get("RESIDENCY_STATE_DIR", "state"),
                   help="where the embedded etcd keeps its data and the watch caches their snapshot "
                        "(watch-cache/, for --warm-restart) (default ./state)")
    p.add_argument("--warm-restart", type=_bool, default=True, nargs="?", const=True,
                   help="write the watch caches to a snapshot in --state-dir on shutdown and every "
                        "--cache-snapshot-interval, and start from it: resume the etcd watch from its revision "
                        "instead of listing every resource (default true; false: always list)")
    p.add_argument("--cache-snapshot-interval", type=_duration, default=60.0,
                   help="how often the watch cache snapshot is written while serving (default 1m; 0: on "
                        "shutdown only)")
    p.add_argument("--cache-compression", type=_bool, default=True, nargs="?", const=True,
                   help="keep cold watch cache entries (the event window has moved past them) zstd-compressed "
                        "with a dictionary trained per resource (Secrets: without one); every answer is "
                        "byte-identical (default true; false: entries stay wire bytes)")
    p.add_argument("--cache-compression-eager", action="store_true",
                   help="testing: compress every entry, the newest and those the event window refers to "
                        "included, from a resource's second object on, within 50 ms, so a test holding few "
                        "objects is answered from compressed entries")
    p.add_argument("--front", action="store_true",
                   help="serve the whole API from the residency apiservers given by --shards (keeps no object "
                        "cache; writes and GETs go to etcd): see front/")
    p.add_argument("--shards", default="",
                   help="with --front: comma-separated shard URLs (http://host:port, https://..., or a shard's "
                        "--unix-socket as http+unix://<its path, %%-encoded>)")
    p.add_argument("--front-shared-watches", default="true", choices=("true", "false"),
                   help="with --front: serve watches from one merged stream of the shards per resource "
                        "(front/feed.py); false: K shard watches per client watch")
    p.add_argument("-v", "--v", dest="verbosity", type=int, default=0, help="log verbosity (0-10)")
    return p
