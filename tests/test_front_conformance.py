"""Conformance through the front of a K=3 slice (issue 11, Correctness): the client-go tests (informers with
the inconsistency detector, watch-list on and off, pager, dynamic client on a custom resource, sharded
informers) and the kubectl scenarios, unchanged, with the front as their apiserver; then all of it again
through `python -m deployment --shards 3 --fronts 2` (issue 21: two fronts on one port).

The client-go tests come from tests/test_clientgo.py (same binary, same runner) with APISERVER_URL pointing at
the front; the kubectl tests are tests/test_kubectl.py's own functions, collected here with this module's
`apiserver`/`api` fixtures (the front) overriding conftest's.
"""
from __future__ import annotations

import os

import pytest

from machinery.shard_selector import complementary
from tests.helpers import Api, ApiserverProcess, stop_all, wait_all_ready
from tests.helpers.deployment import Deployment
from tests.test_clientgo import clientgo_binary, run_go  # noqa: F401  (a fixture, reused)
from tests.test_kubectl import (test_create_apply_get_table_and_json, test_get_chunk_size_over_50_objects,  # noqa: F401
                                test_get_watch_sees_a_change, test_label_annotate_and_delete)
from tests.test_kubectl_more import test_custom_resource_create_apply_get_label_delete  # noqa: F401


class _Entry:
    def __init__(self, base: str):
        self.base = base


@pytest.fixture(scope="module", params=["front", "deployment"])
def front_slice(request, current_etcd, tmp_path_factory):
    """etcd + 3 residency shards + the front (what `python -m apiserver --front` serves); or the same shards
    behind 2 fronts on one port (`python -m deployment --shards 3 --fronts 2`)."""
    prefix = f"/registry-frontcg{os.getpid()}-{request.param}"
    sels = [str(s) for s in complementary(3)]
    if request.param == "deployment":
        d = Deployment(tmp_path_factory.mktemp("deployment"), "--shards", "3", "--fronts", "2",
                       "--etcd-servers", current_etcd.endpoint, "--etcd-prefix", prefix)
        try:
            d.start()
            shards = [_Entry(p["url"]) for p in d.report()["processes"] if p["role"] == "shard"]
            yield _Entry(d.base), shards, sels
        finally:
            d.stop()
        return
    shards = [ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, residency=s) for s in sels]
    front = None
    try:
        for p in shards:
            p.start()
        wait_all_ready(shards, 90)
        front = ApiserverProcess("--front", "--shards", ",".join(p.base for p in shards),
                                 etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, name="front")
        front.start().wait_ready(60)
        yield front, shards, sels
    finally:
        stop_all([p for p in [front, *shards] if p is not None and p.popen is not None], strict=False)


@pytest.fixture(scope="module")
def clientgo_front(front_slice):
    front, shards, sels = front_slice
    return {"APISERVER_URL": front.base, "SHARD_URLS": "\n".join(p.base for p in shards[:2]),
            "SHARD_SELECTORS": "\n".join(complementary_two()),
            # Not used by the tests run here (the compaction test needs its own etcd).
            "APISERVER_ETCD_URL": front.base, "ETCD_URL": ""}


def complementary_two() -> list[str]:
    return [str(s) for s in complementary(2)]


@pytest.mark.parametrize("watchlist", ["true", "false"])
def test_informer_through_the_front(clientgo_binary, clientgo_front, watchlist):  # noqa: F811
    out = run_go(clientgo_binary, clientgo_front, "TestInformerConfigMaps",
                 KUBE_FEATURE_WatchListClient=watchlist, KUBE_WATCHLIST_INCONSISTENCY_DETECTOR="true")
    if watchlist == "true":
        assert "data consistency check is enabled" in out, out[-4000:]


def test_pager_through_the_front(clientgo_binary, clientgo_front):  # noqa: F811
    run_go(clientgo_binary, clientgo_front, "TestPagerExactList")


def test_dynamic_client_through_the_front(clientgo_binary, clientgo_front):  # noqa: F811
    run_go(clientgo_binary, clientgo_front, "TestDynamicCRD")


@pytest.mark.parametrize("watchlist", ["true", "false"])
def test_relist_after_stale_rv_through_the_front(clientgo_binary, clientgo_front, watchlist):  # noqa: F811
    run_go(clientgo_binary, clientgo_front, "TestRelistAfterStaleRV", KUBE_FEATURE_WatchListClient=watchlist)


# --- the kubectl scenarios' fixtures, pointed at the front -------------------------------------------------------

@pytest.fixture(scope="module")
def apiserver(front_slice):
    return front_slice[0].base


@pytest.fixture
def api(front_slice):
    a = Api(front_slice[0].base)
    a.mode = "front"
    a.etcd = None
    return a
