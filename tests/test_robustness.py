"""The robustness suite (tests/robustness, issue 10): every scenario once in its short form (a few seconds of
traffic from 10 clients against a real apiserver over a real etcd, one fault, every checker), and the
checkers themselves on small recorded histories with one violation each, so a passing scenario means
something. The long form: `python -m tests.robustness --seeds 20 --duration 60` (see the README).
Scenario 3 (etcd3-leader-kill, etcd3-follower-kill) runs a three-member etcd cluster given to the apiserver as
three endpoints; scenario 7 (slow-watcher) a watcher that stops reading (S4.14)."""
from __future__ import annotations

import asyncio

import pytest

from tests.robustness import checkers
from tests.robustness.scenarios import DEPLOYMENT_ONLY, SCENARIOS, compare_rss, explain, run_scenario, table
from tests.robustness.traffic import CONFIGMAPS, KINDS, WIDGETS, History, Op, WatchChain
from tests.robustness.truth import Recorder, TEvent

# --- every scenario, short form ----------------------------------------------------------------------------

# Every scenario with the cache on ConfigMaps; etcd-kill also without the cache, on a custom resource and on a
# resident shard (--residency: sharded requests in its range from its cache, the rest from etcd).
SHORT = ([(name, True, CONFIGMAPS) for name in SCENARIOS if name not in DEPLOYMENT_ONLY]
         + [("etcd-kill", False, CONFIGMAPS), ("etcd-kill", True, WIDGETS), ("etcd-kill", "resident", CONFIGMAPS)]
         # python -m deployment (2 shards, 2 fronts): without a fault, and a front or a shard killed (issue 21)
         + [(name, "deployment", CONFIGMAPS) for name in ("none", "front-kill", "shard-kill")])


def _param(name, cache, kind):
    mode = cache if isinstance(cache, str) else ("cache" if cache else "nocache")
    return pytest.param(name, cache, kind, id=f"{name}-{mode}-{kind.plural}")


def _run_short(job) -> dict:
    name, cache, plural = job
    return asyncio.run(run_scenario(name, seed=1, duration=5.0, rate=60.0, watch_cache=bool(cache),
                                    kind=KINDS[plural], residency=cache == "resident",
                                    deployment=cache == "deployment"))


@pytest.fixture(scope="module")
def short_results():
    """Every short scenario, two at a time (each its own etcd and apiserver; the machine has 2 cores), in
    spawned processes (a fork of a worker that has used gRPC can crash: see test_robustness_nodeplane)."""
    import concurrent.futures
    import multiprocessing
    jobs = [(n, c, k.plural) for n, c, k in SHORT]
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as ex:
        results = dict(zip(jobs, ex.map(_run_short, jobs)))
    compare_rss(list(results.values()))   # against none (cache on, ConfigMaps): RSS within 10 %
    return results


@pytest.mark.parametrize("name,watch_cache,kind", [_param(*p) for p in SHORT])
def test_scenario_short(name, watch_cache, kind, short_results):
    r = short_results[(name, watch_cache, kind.plural)]
    watch_cache = bool(watch_cache)
    print(table([r]))
    assert r["passed"], explain(r, limit=10)
    assert r["acknowledged"] > 20 and r["lists"] > 5 and r["watch_events"] > 0, r


# --- the checkers catch what they should -------------------------------------------------------------------

def put(rev, name, op, created=False):
    return TEvent(rev, "PUT", f"/r/{name}", name, op, rev if created else 0, created)


def delete(rev, name, op):
    return TEvent(rev, "DELETE", f"/r/{name}", name, op, 0, False)


TRUTH = [put(2, "a", "w-1", True), put(3, "a", "w-2"), put(4, "b", "w-3", True), delete(5, "b", "w-3")]


def write(kind, name, opid, rv, t, read_rv=None, status=None):
    return Op("w", kind, t, t + 0.1, status or {"create": 201}.get(kind, 200), rv=rv, name=name, opid=opid,
              read_rv=read_rv)


def good_history() -> History:
    h = History()
    h.ops = [write("create", "a", "w-1", 2, 0.0), write("update", "a", "w-2", 3, 0.2, read_rv=2),
             write("create", "b", "w-3", 4, 0.4), write("delete", "b", None, None, 0.6),
             Op("l", "list_consistent", 0.55, 0.6, 200, rv=4, items=[("a", 3, "w-2"), ("b", 4, "w-3")]),
             Op("l", "list_rv0", 0.1, 0.2, 200, rv=2, items=[("a", 2, "w-1")]),
             Op("w", "get", 0.3, 0.35, 200, rv=3, name="a", opid="w-2")]
    ch = WatchChain("x", 1, 1, 0.0)
    ch.events = [(0.1, "ADDED", "a", 2, "w-1"), (0.2, "MODIFIED", "a", 3, "w-2"), (0.3, "BOOKMARK", None, 3, None),
                 (0.4, "ADDED", "b", 4, "w-3"), (0.6, "DELETED", "b", 5, "w-3"), (0.9, "BOOKMARK", None, 5, None)]
    h.chains = [ch]
    return h


def violations(h: History, events=TRUTH, compactions=()) -> list[checkers.Violation]:
    truth = Recorder.offline(events)
    final_state = truth.states_at([truth.progress])[truth.progress]
    return (checkers.check_writes(h, truth, {"rev": truth.progress, "state": final_state})
            + checkers.check_reads(h, truth, list(compactions))
            + checkers.check_watches(h, truth, list(compactions)))


def test_checkers_pass_a_good_history():
    assert violations(good_history()) == []


def test_checkers_find_a_lost_write():
    h = good_history()
    h.ops.append(write("update", "a", "w-9", 6, 1.0, read_rv=3))
    v = violations(h)
    assert [x.checker for x in v] == ["writes"] and "not in etcd's history" in v[0].message


def test_checkers_find_a_lost_update():
    h = good_history()
    h.ops.append(write("update", "a", "w-4", 6, 1.0, read_rv=2))   # conditioned on rv 2, but 3 was current
    v = violations(h, TRUTH + [put(6, "a", "w-4")])
    assert [x.checker for x in v] == ["writes"] and "lost update" in v[0].message


def test_checkers_find_an_unexplained_write():
    v = violations(good_history(), TRUTH + [put(6, "a", "nobody")])
    assert any("nobody issued" in x.message for x in v)


def test_checkers_find_a_stale_and_an_inconsistent_list():
    h = good_history()
    h.ops.append(Op("l", "list_consistent", 0.52, 0.6, 200, rv=3, items=[("a", 3, "w-2")]))  # b acked at 0.5
    h.ops.append(Op("l", "list_consistent", 2.0, 2.1, 200, rv=5, items=[("a", 3, "w-2"), ("b", 4, "w-3")]))
    v = violations(h)
    assert [x.checker for x in v] == ["reads", "reads"]
    assert "stale" in v[0].message and "differs from etcd" in v[1].message
    assert v[1].excerpt[1] == {"name": "b", "etcd": None, "list": (4, "w-3")}


def test_checkers_find_a_stale_get():
    h = good_history()
    h.ops.append(Op("w", "get", 1.0, 1.1, 200, rv=2, name="a", opid="w-1"))
    assert [x.message for x in violations(h)] == ["stale GET a: rv 2 < acknowledged 3"]


@pytest.mark.parametrize("mutate,expect", [
    (lambda ev: ev.pop(1), "missing (3, 'MODIFIED', 'a', 'w-2')"),
    (lambda ev: ev.insert(2, ev[1]), "not after 3"),
    (lambda ev: ev.insert(4, (0.35, "BOOKMARK", None, 2, None)), "bookmark went backwards"),
    (lambda ev: ev.append((1.0, "BOOKMARK", None, 9, None)), "beyond what etcd had"),
])
def test_checkers_find_watch_violations(mutate, expect):
    h = good_history()
    mutate(h.chains[0].events)
    v = violations(h)
    assert v and all(x.checker == "watch" for x in v)
    assert any(expect in x.message for x in v), [x.message for x in v]


def test_checkers_allow_410_only_after_a_compaction():
    h = good_history()
    h.chains[0].expired = (1.0, 5, "too old resource version")
    v = violations(h)
    assert [x.checker for x in v] == ["watch"] and "not compacted" in v[0].message
    assert violations(h, compactions=[(0.8, 6)]) == []
    assert len(violations(h, compactions=[(1.5, 6)])) == 1   # compacted only after the 410


def test_outage_checker():
    h = History()
    h.ops = [Op("w", "create", 0.0, 20.0, 504), Op("w", "get", 1.0, 1.1, 0, error="reset"),
             Op("w", "get", 5.0, 5.1, 0, error="reset"), Op("w", "get", 6.0, 6.1, 502, status_kind=False)]
    h.readyz = [(0.0, 200), (3.0, 200), (3.5, 500), (9.0, 200)]
    h.livez = [(0.0, 200), (2.5, 500), (9.0, 200)]
    v, info = checkers.check_outage(h, 10.0, 5.0, [(4.0, 5.5)], (2.0, 8.0))
    assert [x.message for x in v] == ["create ran 20.0 s (request timeout 10 s)", "get got no answer (reset)",
                                      "get answered 502"]
    assert info == {"readyz_failed_after": 1.5, "livez_failed_after": 0.5}
    h.readyz = [(0.0, 200), (3.0, 200), (7.5, 500)]
    h.livez = [(0.0, 200), (3.0, 200)]
    v, _ = checkers.check_outage(h, 10.0, 5.0, [], (2.0, 8.0))
    assert [x.message for x in v if "did not fail" in x.message] == [
        "/readyz did not fail within 5 s of etcd going away (first failure after 5.5)",
        "/livez did not fail within 5 s of etcd going away (first failure after None)"]


def test_status_shapes():
    from tests.robustness.traffic import is_status
    assert is_status({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500})
    # upstream's request-timeout 504 is written from ErrStatus without its TypeMeta
    assert is_status({"metadata": {}, "status": "Failure", "message": "Timeout: request did not complete within "
                      "the allotted timeout", "reason": "Timeout", "details": {}, "code": 504})
    assert not is_status({"message": "oops"}) and not is_status(None) and not is_status([])


def test_exact_list_checks():
    h = good_history()
    h.ops.append(Op("l", "list_exact", 1.0, 1.1, 200, rv=2, read_rv=2, items=[("a", 2, "w-1")]))
    assert violations(h) == []
    h.ops.append(Op("l", "list_exact", 1.0, 1.1, 200, rv=3, read_rv=2, items=[("a", 3, "w-2")]))
    h.ops.append(Op("l", "list_exact", 1.0, 1.1, 410, read_rv=2))
    assert [x.message for x in violations(h)] == ["Exact list at rv 2 answered at rv 3",
                                                  "list_exact at rv 2 got 410 without a compaction past it"]
    assert len(violations(h, compactions=[(0.5, 3)])) == 1


def test_checkers_find_a_watch_left_behind():
    h = good_history()
    h.chains[0].events = h.chains[0].events[:2]
    h.chains[0].sessions = [(15.0, 20.0, 1, "stopped", 5)]
    h.marks["traffic_stop"] = 20.0
    v = violations(h)
    assert [x.message for x in v] == ["watch chain x#1 fell behind: at rv 3 when the traffic stopped, but rv 5 "
                                      "was acknowledged 8 s before"]
    h.marks["traffic_stop"] = 5.0   # the writes were acknowledged too recently to be due
    assert violations(h) == []


def _uid_in(shard: str, avoid: str = "") -> str:
    """A UID whose hash lies in `shard`'s range."""
    import uuid
    from machinery.shard_selector import parse_shard_selector
    from tests.robustness.traffic import NAMESPACE
    sel = parse_shard_selector(shard)
    return next(u for u in (str(uuid.UUID(int=i * 7919 + 1)) for i in range(1000))
                if sel.matches(u, NAMESPACE) and u != avoid)


def sharded_violations(h: History) -> list[checkers.Violation]:
    from tests.robustness.traffic import SHARDS
    truth = Recorder.offline(TRUTH)
    truth.uids = {"a": _uid_in(SHARDS[0]), "b": _uid_in(SHARDS[1])}
    return checkers.check_reads(h, truth, []) + checkers.check_watches(h, truth, [])


def test_sharded_watches_and_lists_are_the_filtered_stream():
    """Sharded watches are exactly etcd's stream filtered to their range, sharded lists exactly etcd's state
    filtered to it (a is in the low shard, b in the high one)."""
    from tests.robustness.traffic import SHARDS
    low, high = SHARDS
    h = History()
    ch = WatchChain("x", 1, 1, 0.0, shard=low)
    ch.events = [(0.1, "ADDED", "a", 2, "w-1"), (0.2, "MODIFIED", "a", 3, "w-2"), (0.9, "BOOKMARK", None, 5, None)]
    hi = WatchChain("x", 2, 1, 0.0, shard=high)
    hi.events = [(0.4, "ADDED", "b", 4, "w-3"), (0.6, "DELETED", "b", 5, "w-3")]
    h.chains = [ch, hi]
    h.ops = [Op("l", "list_consistent", 0.55, 0.6, 200, rv=4, items=[("a", 3, "w-2")], shard=low),
             Op("l", "list_consistent", 0.55, 0.6, 200, rv=4, items=[("b", 4, "w-3")], shard=high)]
    assert sharded_violations(h) == []
    ch.events.insert(2, (0.4, "ADDED", "b", 4, "w-3"))       # an event outside the range
    hi.events.pop(1)                                         # a missing event in range (before a later bookmark)
    hi.events.append((0.9, "BOOKMARK", None, 5, None))
    h.ops[0].items.append(("b", 4, "w-3"))                   # an item outside the range
    v = sharded_violations(h)
    assert sorted(x.checker for x in v) == ["reads", "watch", "watch"], [x.message for x in v]
    assert any("unexpected (4, 'ADDED', 'b', 'w-3')" in x.message for x in v)
    assert any("missing (5, 'DELETED', 'b', 'w-3')" in x.message for x in v)
    assert any("differs from etcd" in x.message and x.excerpt[1]["name"] == "b" for x in v)


def lin(h: History, events=TRUTH) -> list[str]:
    return [x.message for x in checkers.check_linearizable(h, Recorder.offline(events))]


def test_linearizability_checker():
    """The per-key register model (CAS on resourceVersion): the good history is linearizable; a GET that
    returns an overwritten version after the overwrite was answered, writes whose etcd order contradicts
    real time, a 409 while the version read was current, a 404 while the object existed are not."""
    assert lin(good_history()) == []
    h = good_history()
    h.ops.append(Op("w", "get", 0.5, 0.55, 200, rv=2, name="a", opid="w-1"))   # w-2 answered at 0.3
    assert lin(h) == ["a: GET sent at 0.500 returned rv 2, but rv 3 (the next version) was answered at 0.300, "
                      "before it (a stale read)"]
    h = good_history()
    h.ops[0].start, h.ops[0].end = 0.25, 0.28    # the create (rv 2) sent after the update (rv 3) was answered?
    h.ops[1].start, h.ops[1].end = 0.1, 0.2
    assert lin(h)[0].startswith("a: update at rv 3 was answered at 0.200, before the create")
    h = good_history()
    h.ops.append(Op("w", "update", 0.21, 0.22, 409, name="a", opid="w-8", read_rv=2))   # rv 3 current since 0.3?
    h.ops[1].start, h.ops[1].end = 0.25, 0.3
    assert lin(h) == ["a: update conditioned on rv 2 got 409, but rv 2 was current for its whole interval"]
    h.ops[1].start = 0.2                       # the update that superseded rv 2 was in flight: fine
    assert lin(h) == []
    h = good_history()
    h.ops.append(Op("w", "get", 0.45, 0.5, 404, name="b"))      # b created (0.4-0.5), deleted later
    assert lin(h) == []
    h.ops[-1].start = 0.55
    h.ops[-1].end = 0.58                                        # the delete was sent only at 0.6
    assert lin(h) == ["b: get got 404 while the object existed for its whole interval"]
    h.ops[-1].end = 0.65                                        # overlapping the delete: fine
    assert lin(h) == []


def test_watch_from_zero_checks():
    """A watch from resourceVersion=0: etcd's state at some revision as ADDED events (any order), then the
    events after it; a state that never was, or a gap after it, is a violation."""
    def zero(events):
        h = History()
        ch = WatchChain("x", 1, 0, 0.0, from_zero=True)
        ch.events = [(0.1, t, n, rv, o) for t, n, rv, o in events]
        h.chains = [ch]
        return [x.message for x in checkers.check_watches(h, Recorder.offline(TRUTH), [])]
    assert zero([("ADDED", "a", 3, "w-2"), ("ADDED", "b", 4, "w-3"), ("DELETED", "b", 5, "w-3")]) == []
    assert zero([("ADDED", "b", 4, "w-3"), ("ADDED", "a", 3, "w-2")]) == []          # the state at rv 4
    assert zero([("ADDED", "a", 2, "w-1"), ("MODIFIED", "a", 3, "w-2"), ("ADDED", "b", 4, "w-3")]) == []
    assert zero([]) == []                                                             # nothing? state at rv 5
    bad = [[("ADDED", "a", 2, "w-1"), ("ADDED", "b", 4, "w-3")],                      # no such state
           [("ADDED", "a", 2, "w-1"), ("ADDED", "b", 4, "w-3"), ("DELETED", "b", 5, "w-3")],
           [("ADDED", "a", 3, "w-2"), ("DELETED", "b", 5, "w-3")]]                    # b's ADDED missing
    for events in bad:
        v = zero(events)
        assert len(v) == 1 and "not etcd's state at any revision" in v[0], (events, v)
