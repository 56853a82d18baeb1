"""The node plane under faults (issue 22 §6; tests/robustness/nodeplane.py): kubelets renewing through the
node tier, Leases on their own etcd, a real kube-controller-manager judging the nodes. Every scenario once
(the tier killed or restarted, the control plane killed behind the live tier, the Lease etcd killed, and no
fault), and the checkers on small histories with one violation each, so a passing scenario means something."""
from __future__ import annotations

import pytest

from tests.robustness import nodeplane as np_
from tests.robustness.nodeplane import LOp, Run
from tests.robustness.scenarios import explain


@pytest.fixture(scope="module")
def results():
    """Every scenario, two at a time (each its own two etcds, apiserver, tier and controller manager), in
    spawned processes: a fork of a pytest worker that has used gRPC before (an etcd client) can crash in the
    child (it did once in .ci/run: a segfault while collecting garbage), as gRPC is not fork-safe."""
    import concurrent.futures
    import multiprocessing
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as ex:
        return dict(zip(np_.NODE_SCENARIOS, ex.map(np_.run_one, np_.NODE_SCENARIOS)))


@pytest.mark.parametrize("name", np_.NODE_SCENARIOS)
def test_node_plane_scenario(name, results):
    r = results[name]
    print({k: v for k, v in r.items() if k != "violations"})
    assert r["passed"], explain(r, limit=10)
    assert r["renewals"] >= 15 and r["reads"] > 20, r    # (3 live kubelets, a renewal each 5 s, over ~40 s)
    assert r["dead_unknown_after_s"] is not None, r
    if name != "node-none":
        assert r["fault_s"] is not None, r
    if name in ("tier-kill", "tier-restart"):     # stopped while holding unforwarded renewals
        assert r["pending_at_fault"] >= 1, r


# --- the checkers catch what they should -----------------------------------------------------------------

def _history() -> Run:
    """One Lease: created (version 10), renewed twice, read, edited, renewed; the controller's view right."""
    run = Run("node-none", 1, t0=0.0)
    run.ops = [
        LOp("get", "n", 0.0, 0.1, 200, rv=10, renew=100.0),
        LOp("renew", "n", 1.0, 1.1, 200, pre_rv=10, rv=11, renew=101.0, sent=101.0),
        LOp("read", "n", 1.2, 1.3, 200, rv=11, renew=101.0),
        LOp("renew", "n", 2.0, 2.1, 200, pre_rv=11, rv=12, renew=102.0, sent=102.0),
        LOp("edit", "n", 2.5, 2.6, 200, rv=13, renew=102.0, label="v1", sent="v1"),
        LOp("renew", "n", 3.0, 3.1, 409, pre_rv=12, sent=103.0),
        LOp("get", "n", 3.2, 3.3, 200, rv=13, renew=102.0, label="v1"),
        LOp("renew", "n", 3.4, 3.5, 200, pre_rv=13, rv=14, renew=103.4, label="v1", sent=103.4),
        LOp("read", "n", 3.6, 3.7, 200, rv=14, renew=103.4, label="v1"),
    ]
    return run


def _problems(run: Run) -> list[str]:
    return [v["message"] for v in np_.check_linearizable(run, "n")]


def test_checker_passes_a_good_history():
    assert _problems(_history()) == []


def test_checker_finds_a_lost_update():
    run = _history()
    run.ops.append(LOp("read", "n", 0.5, 0.6, 200, rv=15, renew=100.5))    # a version between 10 and ...
    run.ops[1] = LOp("renew", "n", 1.0, 1.1, 200, pre_rv=10, rv=16, renew=101.0, sent=101.0)
    assert any("lost update" in p for p in _problems(run))


def test_checker_finds_a_stale_read():
    run = _history()
    run.ops.append(LOp("read", "n", 4.0, 4.1, 200, rv=12, renew=102.0))
    assert any("stale" in p for p in _problems(run))


def test_checker_finds_two_values_for_one_version():
    run = _history()
    run.ops.append(LOp("read", "n", 4.0, 4.1, 200, rv=14, renew=99.0, label="v1"))
    assert any("answered as" in p for p in _problems(run))


def test_checker_finds_a_renewal_gone_back_and_allows_a_bounded_one_after_a_tier_kill():
    run = _history()
    run.ops.append(LOp("read", "n", 4.0, 4.1, 200, rv=20, renew=103.4 - 5.0, label="v1"))
    assert any("went back" in p for p in _problems(run))
    run.name = "tier-kill"                   # the documented loss: less than the forward interval
    assert _problems(run) == []
    run.ops[-1] = LOp("read", "n", 4.0, 4.1, 200, rv=20, renew=103.4 - np_.FORWARD - 1, label="v1")
    assert any("went back" in p for p in _problems(run))


def test_checker_finds_a_renewal_answered_with_another_time():
    run = _history()
    run.ops[3] = LOp("renew", "n", 2.0, 2.1, 200, pre_rv=11, rv=12, renew=101.5, sent=102.0)
    assert any("sent" in p for p in _problems(run))


def test_check_finds_a_lost_write_and_a_false_unknown():
    run = Run("tier-restart", 1, t0=0.0)
    for i, n in enumerate(np_.LIVE + [np_.DEAD]):
        run.ops.append(LOp("renew", n, 1.0, 1.1, 200, pre_rv=1, rv=2 + i, renew=100.0, sent=100.0))
        run.ready_seen[n] = ["True"]
    run.fault_at, run.fault_end = 2.0, 3.0
    run.cp_at_fault = {n: 100.0 for n in np_.LIVE}
    final = {n: (100.0, None) for n in np_.LIVE + [np_.DEAD]}
    alive = {"tier": True}
    events = {"node-controller/RegisteredNode", "node-controller/NodeNotReady"}
    ok = np_.check(run, final, 100.0 + np_.GRACE + 3, {"NoSchedule", "NoExecute"}, alive, events)
    assert ok == [], ok
    run.cp_at_fault[np_.LIVE[0]] = 99.0           # the SIGTERM lost a second of renewals: no loss allowed there
    final[np_.LIVE[1]] = (99.0, None)             # the end state lost the last renewal
    run.ready_seen[np_.LIVE[2]] = ["True", "Unknown", "True"]
    found = np_.check(run, final, 100.0 + np_.GRACE - 5, {"NoSchedule"}, {"tier": False},
                      {"node-controller/RegisteredNode"})
    texts = " | ".join(v["message"] for v in found)
    assert {v["checker"] for v in found} == {"writes", "controller", "crash"}, texts
    assert "trailed" in texts and "ends with renewTime" in texts and "(live) went" in texts, texts
    assert "went Unknown" in texts and "taints" in texts and "NodeNotReady event" in texts, texts
