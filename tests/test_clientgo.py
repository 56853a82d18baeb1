"""The real k8s.io/client-go (tests/clientgo, a Go module) against real apiserver processes.

The Go test binary is built once (`go test -c` into .cache/go; a missing `go` fails, never skips) and
run once per Go test with the servers' URLs in the environment (see tests/clientgo/helpers_test.go).
Servers: a fully resident cache server and two complementary `--residency` shards over the current
etcd, and a `--watch-cache=false` server over its own etcd 3.5.1 (the compaction test compacts it).
"""
from __future__ import annotations

import os
import subprocess

import pytest

from machinery.shard_selector import complementary
from tests.helpers import ApiserverProcess, distro_etcd, stop_all, wait_all_ready
from tests.helpers.gobin import go_program

HERE = os.path.dirname(os.path.abspath(__file__))
MODULE = os.path.join(HERE, "clientgo")


@pytest.fixture(scope="module")
def clientgo_binary():
    """`go test -c` of tests/clientgo, built once into .cache/go (tools/build_repo_go.py)."""
    return go_program("clientgo.test")


@pytest.fixture(scope="module")
def clientgo_servers(current_etcd):
    prefix = f"/registry-cg{os.getpid()}"
    sels = [str(s) for s in complementary(2)]
    with distro_etcd() as own_etcd:
        started = [ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=prefix),
                   ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, residency=sels[0]),
                   ApiserverProcess(etcd_servers=current_etcd.endpoint, etcd_prefix=prefix, residency=sels[1]),
                   ApiserverProcess("--watch-cache=false", etcd_servers=own_etcd.endpoint, etcd_prefix="/registry")]
        try:
            for p in started:  # all start at once, then each is waited for
                p.start()
            wait_all_ready(started, 30)
            env = {
                "APISERVER_URL": started[0].base,
                "SHARD_URLS": "\n".join(p.base for p in started[1:3]),
                "SHARD_SELECTORS": "\n".join(sels),
                "APISERVER_ETCD_URL": started[3].base,
                "ETCD_URL": own_etcd.endpoint,
            }
            yield env
        finally:
            stop_all(started)


def run_go(binary, servers, test, **extra_env):
    env = dict(os.environ, **servers, **extra_env)
    r = subprocess.run([binary, "-test.v", "-test.count=1", "-test.timeout=120s", "-test.run", f"^{test}$"],
                       cwd=MODULE, capture_output=True, text=True, timeout=180, env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and f"--- PASS: {test}" in out, f"go {test} failed (rc={r.returncode}):\n{out[-8000:]}"
    assert "data inconsistency detected" not in out, out[-8000:]
    return out


@pytest.mark.parametrize("watchlist", ["true", "false"])
def test_informer_configmaps(clientgo_binary, clientgo_servers, watchlist):
    out = run_go(clientgo_binary, clientgo_servers, "TestInformerConfigMaps",
                 KUBE_FEATURE_WatchListClient=watchlist, KUBE_WATCHLIST_INCONSISTENCY_DETECTOR="true")
    assert f"WatchListClient={watchlist} detector=true" in out
    if watchlist == "true":
        # The detector ran (it logs this before its Exact list, and panics on a difference).
        assert "data consistency check is enabled" in out, out[-4000:]


@pytest.mark.parametrize("server", ["APISERVER_URL", "APISERVER_ETCD_URL"])
def test_protobuf_writes(clientgo_binary, clientgo_servers, server):
    """Typed clientsets' default protobuf bodies (creates, updates, deletes), cache and etcd servers."""
    run_go(clientgo_binary, dict(clientgo_servers, APISERVER_URL=clientgo_servers[server]), "TestProtobufWrites")


@pytest.mark.parametrize("watchlist", ["true", "false"])
def test_relist_after_stale_rv(clientgo_binary, clientgo_servers, watchlist):
    run_go(clientgo_binary, clientgo_servers, "TestRelistAfterStaleRV", KUBE_FEATURE_WatchListClient=watchlist)


def test_relist_after_compaction(clientgo_binary, clientgo_servers):
    run_go(clientgo_binary, clientgo_servers, "TestRelistAfterCompaction")


def test_pager_exact_list(clientgo_binary, clientgo_servers):
    run_go(clientgo_binary, clientgo_servers, "TestPagerExactList")


def test_dynamic_client_and_informer_on_crd(clientgo_binary, clientgo_servers):
    run_go(clientgo_binary, clientgo_servers, "TestDynamicCRD")


def test_sharded_informers(clientgo_binary, clientgo_servers):
    run_go(clientgo_binary, clientgo_servers, "TestShardedInformers")
