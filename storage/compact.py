"""etcd compaction as upstream runs it (`etcd3/compact.go`, S2.16.2).

Every `interval` (upstream: 5 min) one apiserver compacts etcd at the revision it
observed one interval earlier, so etcd keeps 5-10 min of history. Several
apiservers coordinate through the `compact_rev_key` key: a compare-and-swap on
its version elects the one that compacts this round; its value records the
compacted revision, which every apiserver's caches read (`last_compacted`) to
drop snapshots that etcd can no longer back (S2.16.2).
"""
from __future__ import annotations

import asyncio
import logging

from .etcd import EtcdClient
from .etcdpb import pb

log = logging.getLogger("storage.compact")

COMPACT_REV_KEY = b"compact_rev_key"
# DefaultCompactInterval (storagebackend/config.go).
DEFAULT_INTERVAL = 300.0


async def last_compacted(client: EtcdClient) -> int:
    """The revision recorded by the last compaction (0 if none yet)."""
    return (await revision_and_compacted(client))[1]


async def revision_and_compacted(client: EtcdClient) -> tuple[int, int]:
    """etcd's revision now (the response's header: a linearizable read) and the last compaction's revision, from
    one GET of the compaction key."""
    kv, rev = await client.get(COMPACT_REV_KEY, "compact")
    if kv is None:
        return rev, 0
    try:
        return rev, int(kv.value.decode() or 0)
    except ValueError:
        return rev, 0


async def _try_compact(client: EtcdClient, expect_version: int, rev: int) -> tuple[bool, int]:
    """CAS on compact_rev_key's version; the winner compacts at `rev`. Returns (won, current version)."""
    req = pb.TxnRequest(
        compare=[pb.Compare(key=COMPACT_REV_KEY, target=pb.Compare.VERSION, result=pb.Compare.EQUAL,
                            version=expect_version)],
        success=[pb.RequestOp(request_put=pb.PutRequest(key=COMPACT_REV_KEY, value=str(rev).encode()))],
        failure=[pb.RequestOp(request_range=pb.RangeRequest(key=COMPACT_REV_KEY))])
    r = await client.txn(req, "compact")
    if not r.succeeded:
        kvs = r.responses[0].response_range.kvs
        return False, (kvs[0].version if kvs else 0)
    if rev > 0:
        await client.compact(rev)
    return True, expect_version + 1


async def compact_now(client: EtcdClient, rev: int) -> None:
    """Compact at `rev` now, recording it in compact_rev_key first as every apiserver's compactor does
    (kube-apiserver's watch cache learns of compactions only through that key)."""
    version = 0
    while True:
        won, version = await _try_compact(client, version, rev)  # a lost CAS tells the current version
        if won:
            return


async def run_compactor(client: EtcdClient, interval: float = DEFAULT_INTERVAL) -> None:
    """Forever: every interval, compact at the revision seen one interval ago (if we win the CAS)."""
    version = 0
    prev_rev = 0
    while True:
        try:
            won, version = await _try_compact(client, version, prev_rev)
            if won and prev_rev:
                log.info("compacted etcd revision=%d", prev_rev)
            _, prev_rev = await client.get(COMPACT_REV_KEY, "compact")
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a compaction error must not take the server down
            log.warning("compaction failed error=%r", e)
        await asyncio.sleep(interval)
