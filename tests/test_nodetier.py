"""The node-facing tier (`python -m nodetier`, issue 22 §2) in front of our apiserver over a real etcd: what it
absorbs, what it forwards and when, what a client of either side sees, and its in-memory store's etcd contract.

Design under test (nodetier/leases.py): a write that changes only `spec.renewTime` is answered by the tier
alone and reaches the control plane within the forward interval (or at once when the next renewal is
overdue, 1.1 renewal periods later); every other change reaches the control plane before the answer; the tier's
resourceVersions are its own, the control plane's stay its own."""
from __future__ import annotations

import asyncio
import collections
import datetime
import time
import types
import uuid

import pytest

from nodetier.forwarder import Forwarder
from nodetier.leases import LeaseState, renewal_only
from nodetier.memkv import MemoryKV
from nodetier.split import NodeRanges
from storage import errors as serr
from storage.etcd import WatchCompacted, WatchEvent, WatchProgress
from storage.embedded import free_port
from tests.helpers import Api, start_apiserver
from tests.helpers.kube import make_pki
from tests.helpers.kwok import write_kubeconfig
from tests.helpers.nodetier import NodeTierProcess

NS = "kube-node-lease"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
INTERVAL = 2.0          # --forward-interval of the module's tier


def now_micro(offset: float = 0.0) -> str:
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease(name: str, duration: int = 40) -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": now_micro()}}


def wait_until(pred, timeout: float, step: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(step)


# --- the in-memory store: EtcdClient's contract -----------------------------------------------------

async def test_memkv_cas_ranges_at_a_revision_and_compaction():
    kv = MemoryKV(start_revision=100)
    ok, r1, _ = await kv.create(b"/a/1", b"one")
    assert ok and r1 == 101
    ok, _, cur = await kv.create(b"/a/1", b"again")
    assert not ok and cur.value == b"one"                       # create iff absent
    ok, _, cur = await kv.update(b"/a/1", b"two", 100)
    assert not ok and cur.mod_revision == 101                   # CAS on mod_revision
    ok, r2, _ = await kv.update(b"/a/1", b"two", 101)
    assert ok and r2 == 102
    await kv.create(b"/a/2", b"x")
    await kv.create(b"/b/1", b"other prefix")
    kvs, rev, more, count = await kv.range(b"/a/", b"/a0", revision=101)
    assert [(k.key, k.value) for k in kvs] == [(b"/a/1", b"one")] and rev == 101 and count == 1
    kvs, _, more, count = await kv.range(b"/a/", b"/a0", limit=1)
    assert [k.value for k in kvs] == [b"two"] and more and count == 2
    ok, r3, _ = await kv.delete(b"/a/1", 102)
    assert ok
    assert (await kv.get(b"/a/1"))[0] is None and (await kv.get(b"/a/1", revision=102))[0].value == b"two"
    await kv.compact(r3)
    with pytest.raises(serr.StorageError) as e:
        await kv.get(b"/a/1", revision=102)
    assert e.value.code is serr.Code.EXPIRED
    with pytest.raises(serr.StorageError) as e:
        await kv.range(b"/a/", b"/a0", revision=r3 + 10)
    assert e.value.code is serr.Code.TOO_LARGE_RV
    assert b"/a/1" not in kv._versions                          # a deleted key is gone once compacted


@pytest.mark.parametrize("retain", [200_000, 25])
async def test_memkv_compaction_in_steps_keeps_only_the_newest_version_at_or_below_it(retain):
    """After any sequence of writes and compactions each key keeps exactly its versions newer than the
    compacted revision plus the newest at or below it (a deleted key none), and the key index matches; also
    when the log's bound (`retain_events`) compacts at every write."""
    import random
    rnd = random.Random(7)
    kv = MemoryKV(start_revision=0, retain_events=retain)
    keys = [f"/k/{i}".encode() for i in range(20)]
    shadow: dict[bytes, list[int]] = {}         # every revision each key was written at
    for step in range(400):
        k = rnd.choice(keys)
        cur = kv.current(k)
        if cur is None:
            await kv.create(k, b"v%d" % step)
        elif rnd.random() < 0.15:
            await kv.delete(k, cur.mod_revision)
        else:
            await kv.update(k, b"v%d" % step, cur.mod_revision)
        shadow.setdefault(k, []).append(kv.revision)
        if step % 37 == 0:
            kv.compact_to(kv.revision - rnd.randint(0, 30))
        if step % 37 == 0 or retain < 400:
            c = kv.compacted
            assert len(kv._log) <= retain and all(r[0] > c for r in kv._log)
            for key, versions in kv._versions.items():
                assert sum(1 for v in versions if v[0] <= c) <= 1, (key, versions, c)
                assert not (len(versions) == 1 and versions[0][1] is None and versions[0][0] <= c)
                # nothing newer than the compacted revision was forgotten
                assert [v[0] for v in versions if v[0] > c] == [r for r in shadow[key] if r > c]
            assert kv._keys == sorted(kv._versions)
    for k in keys:                              # the newest versions are all still readable
        cur = kv.current(k)
        assert cur is None or (await kv.get(k))[0].value == cur.value


async def test_a_watch_served_without_the_cache_writes_each_watch_response_as_one_chunk():
    """`EtcdStore.serve_watch` (the tier's Lease watches; the apiserver with --watch-cache=false): the events of
    one watch response (here the memkv's replay, then what was queued while the pump waited) go out as one
    write, in order; a later response is a later write. A socket write per event was the tier's largest cost."""
    import orjson
    from machinery.encoding import WatchFrames
    from machinery.resources import BUILTINS
    from storage.interface import WatchRequest
    from storage.store import EtcdStore

    kv = MemoryKV(start_revision=0)
    store = EtcdStore(kv, "configmaps")
    prefix = "/registry/configmaps/"

    def cm(name):
        return {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": name, "namespace": "default"}}

    writes: list = []

    class Sink:
        async def start(self):
            pass

        async def write(self, data):
            writes.append([orjson.loads(line)["object"]["metadata"]["name"] for line in data.splitlines()])

        async def fail(self, err):
            writes.append(err)

        def direct_writer(self):
            return None

    async def until(n):
        deadline = time.monotonic() + 5
        while len(writes) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return writes

    rv = kv.revision
    for name in "abc":          # before the watch starts: one replay
        await store.create(prefix + "default/" + name, cm(name))
    configmaps = next(r for r in BUILTINS if r.plural == "configmaps")
    req = WatchRequest(frames=WatchFrames(configmaps), timeout=30, resource_version=str(rv))
    task = asyncio.ensure_future(store.serve_watch(prefix, req, Sink()))
    try:
        assert await until(1) == [["a", "b", "c"]]
        await store.create(prefix + "default/d", cm("d"))     # no await suspends between the two: one batch
        await store.create(prefix + "default/e", cm("e"))
        assert await until(2) == [["a", "b", "c"], ["d", "e"]]
        await store.create(prefix + "default/f", cm("f"))
        assert await until(3) == [["a", "b", "c"], ["d", "e"], ["f"]]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_memkv_watch_replays_then_follows_and_refuses_a_compacted_start():
    kv = MemoryKV(start_revision=0)
    await kv.create(b"/p/a", b"1")
    await kv.create(b"/q/a", b"elsewhere")
    _, r, _ = await kv.update(b"/p/a", b"2", 1)
    w = kv.watch(b"/p/", 1)
    it = w.__aiter__()
    first = await asyncio.wait_for(it.__anext__(), 1)
    assert [(e.type, e.kv.value, e.prev) for e in first][0][:2] == ("PUT", b"1")
    assert [e.kv.value for e in first] == [b"1", b"2"] and first[1].prev.value == b"1"
    ok, r2, _ = await kv.delete(b"/p/a", r)
    nxt = await asyncio.wait_for(it.__anext__(), 1)
    assert isinstance(nxt[0], WatchEvent) and nxt[0].type == "DELETE" and nxt[0].prev.value == b"2"
    w.request_progress()
    prog = await asyncio.wait_for(it.__anext__(), 1)
    assert isinstance(prog, WatchProgress) and prog.revision == r2
    w.close()
    kv.compact_to(r2)
    with pytest.raises(WatchCompacted):
        async for _ in kv.watch(b"/p/", 2):
            pass


async def test_the_tier_keeps_a_connection_per_forward_in_flight():
    """The forwarder runs up to --forward-concurrency calls at once; the control-plane client must keep that many
    connections alive. With H1Client's default 64 kept, every call beyond them dialled anew (a 20,000-node
    leasegen run opened 14,997 TCP connections in its 2 minutes, 343 with one kept per forward in flight)."""
    from nodetier.controlplane import ControlPlane, Identity
    opened = 0
    handlers: set[asyncio.Task] = set()

    async def serve(reader, writer):
        nonlocal opened
        opened += 1
        handlers.add(asyncio.current_task())
        try:
            while await reader.readuntil(b"\r\n\r\n"):
                await asyncio.sleep(0.01)             # every call in flight at once needs its own connection
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=512)   # (150 dials at once)
    port = server.sockets[0].getsockname()[1]
    for concurrency, kept in ((150, 150 + 16), (150, 64)):
        opened = 0
        cp = ControlPlane(Identity(f"http://127.0.0.1:{port}"), max_idle=kept)
        await cp.start()
        try:
            for _ in range(3):
                await asyncio.gather(*(cp.call("GET", cp.lease_path(f"n{i}")) for i in range(concurrency)))
        finally:
            await cp.close()
        if kept >= concurrency:
            assert opened == concurrency, opened       # one dial per call in flight, then reused
        else:
            assert opened >= concurrency + 2 * (concurrency - kept), opened   # what went wrong before
    server.close()
    for t in handlers:          # every server-side connection closed before the loop is (no StreamWriter left
        t.cancel()              # to warn at garbage collection, in whichever test that comes)
    await asyncio.gather(*handlers, return_exceptions=True)
    await server.wait_closed()
    from nodetier.server import NodeTier
    assert NodeTier(Identity("http://127.0.0.1:1"), forward_concurrency=150).cp.max_idle >= 150


def test_renewal_only_ignores_renew_time_managed_fields_and_resource_version():
    a = lease("n")
    b = {**a, "metadata": {**a["metadata"], "resourceVersion": "9", "managedFields": [{"manager": "kubelet"}]},
         "spec": {**a["spec"], "renewTime": now_micro(10)}}
    assert renewal_only(a, b)
    assert not renewal_only(a, {**b, "spec": {**b["spec"], "holderIdentity": "someone-else"}})
    assert not renewal_only(a, {**b, "metadata": {**b["metadata"], "labels": {"x": "y"}}})


# --- when a renewal is forwarded (nodetier.forwarder.Forwarder.next_due) ------------------------------------

def forward_times(offsets: list[float], period: float, interval: float = 30.0, *, in_step: bool = True,
                  phase: int = 0) -> list[float]:
    """A kubelet renewing at `offsets` seconds after the control plane's copy (renewTime 0), each renewal
    absorbed at its own time, nothing forwarded meanwhile: the times (seconds after the copy) at which the
    forwarder would send one, checked at each renewal and every 0.1 s in between, up to the last offset.
    `in_step`: the copy came from a forward of the tier's; else `phase` picks which renewal goes first."""
    fw = Forwarder(types.SimpleNamespace(states={}), None, interval=interval)
    st = LeaseState(cp_rv=1, cp_renew=0.0, renew_period=period, in_step=in_step, phase=phase)
    sent, t, i = [], 0.0, 0
    while t <= offsets[-1] + 1e-9 and not sent:
        while i < len(offsets) and offsets[i] <= t + 1e-9:
            st.tier_renew, st.renewed_at = offsets[i], offsets[i]
            i += 1
        if fw.due(st, now=t, mono=t):
            sent.append(round(t, 1))
        t += 0.1
    return sent


def test_a_renewal_in_step_is_forwarded_at_the_third_and_one_out_of_step_by_32_s():
    """At the defaults (30 s interval, 10 s period, up to 4 % jitter): in step with the control plane's copy the
    third renewal is the one sent, never an older one before it, however the period jitters; out of step (a
    Lease just created, loaded or changed elsewhere: renewals 3, 13, 23, 33 s after the copy) a renewal goes
    by 32 s, where it waited for the one at 33-35 s (the control plane's copy then read 35 s old; with the
    node lifecycle controller's 5 s poll past the 40 s margin of issue 22)."""
    for p in (10.0, 10.2, 10.4):
        assert forward_times([p, 2 * p, 3 * p], p) == [round(3 * p, 1)], p
    for first in (0.5, 1.5, 3.0, 5.0, 8.0):
        sent = forward_times([first, first + 10, first + 20, first + 30, first + 40], 10.0)
        assert sent and sent[0] <= 32.0, (first, sent)
    # Out of step, the renewal whose successor would come past 32 s goes as it arrives (so Leases created
    # together are spread by their renewals, not sent together at 32 s).
    assert forward_times([3.0, 13.0, 23.0, 33.0], 10.0) == [23.0]
    assert forward_times([1.5, 11.5, 21.5, 31.5], 10.0) == [31.5]
    # An overdue renewal (the kubelet stopped after its second) still goes at 1.1 periods.
    assert forward_times([10.0, 20.0, 40.0], 10.0) == [31.0]


def test_leases_out_of_step_forward_their_first_second_or_third_renewal_by_name():
    """Leases whose control-plane copies were made together (leasegen creates 30,000 in one burst; a tier
    that restarts loads them all at once) would forward together every 30 s for good: at 30,000 nodes, 30,000
    forwards in about 10 s of every 30, which a control plane taking ~1,000 a second worked off late (copies
    38 s old). Out of step, a Lease's phase (a hash of its name) picks its first, second or third renewal; in
    step, the third as before, so the early one costs a single extra write per Lease."""
    for p in (10.0, 10.2, 10.4):
        renewals = [p, 2 * p, 3 * p, 4 * p]
        assert forward_times(renewals, p, in_step=False, phase=0) == [round(3 * p, 1)]
        assert forward_times(renewals, p, in_step=False, phase=1) == [round(2 * p, 1)]
        assert forward_times(renewals, p, in_step=False, phase=2) == [round(p, 1)]
        assert forward_times(renewals, p, in_step=False, phase=5) == [round(p, 1)]     # phases count mod 3
        for phase in range(3):
            assert forward_times(renewals, p, in_step=True, phase=phase) == [round(3 * p, 1)]
    # Renewals out of step with the copy: never later than the cap, whatever the phase.
    for phase in range(3):
        assert forward_times([3.0, 13.0, 23.0, 33.0], 10.0, in_step=False, phase=phase) == [[23.0, 23.0, 13.0][phase]]
    # The phase comes from the name, evenly over 3,000 nodes.
    def at_control_plane(name: str) -> dict:
        obj = lease(name)
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": "7"}}
    phases = collections.Counter(LeaseState.of(at_control_plane(f"node-{i:05d}")).phase % 3 for i in range(3000))
    assert all(900 <= n <= 1100 for n in phases.values()), phases


class _SlowControlPlane:
    """The control plane as the forwarder calls it: every PUT waits for `gate`; counts what is in flight."""

    def __init__(self):
        self.gate = asyncio.Event()
        self.in_flight = self.most_in_flight = self.done = 0

    def lease_path(self, name: str) -> str:
        return name

    async def call(self, method: str, path: str, body: dict, **_kw) -> dict:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
        finally:
            self.in_flight -= 1
        self.done += 1
        md = body["metadata"]
        return {**body, "metadata": {**md, "resourceVersion": str(int(md["resourceVersion"]) + 1)}}


async def test_a_control_plane_slower_than_the_due_renewals_leaves_them_in_the_heap_not_as_tasks():
    """400 Leases due at once, 4 forwards at a time, a control plane that answers only when let: the forwarder
    has at most 4 forward tasks (the rest wait in its heap, where 18,000 tasks queued on a semaphore once made
    every full garbage collection of a 30,000-node tier 0.25 s); once the control plane answers, each free slot
    takes the next due Lease without waiting for the 0.25 s tick (100 rounds of ticks would be 25 s)."""
    now = time.time()
    states = {f"n{i}": LeaseState(cp_rv=1, cp_renew=now - 30.0, tier_renew=now, renewed_at=time.monotonic())
              for i in range(400)}

    async def get(key: str) -> dict:
        return lease(key)

    def note_control_plane(name: str, cp_obj: dict) -> None:
        st = states[name]
        st.cp_rv, st.cp_renew = int(cp_obj["metadata"]["resourceVersion"]), st.tier_renew

    leases = types.SimpleNamespace(states=states, prefix="", store=types.SimpleNamespace(get=get),
                                   note_control_plane=note_control_plane)
    cp = _SlowControlPlane()
    fw = Forwarder(leases, cp, qps=10_000, concurrency=4)
    fw.loaded.set()
    for name in states:
        fw.schedule(name)
    task = asyncio.create_task(fw._forward_forever())
    try:
        await asyncio.sleep(0.8)                  # three ticks, each with budget for every due Lease
        assert cp.in_flight == 4 and len(fw._forwards) == 4
        assert len([t for t in asyncio.all_tasks() if "forward" in repr(t.get_coro())]) <= 5   # (+ the loop)
        cp.gate.set()
        t0 = time.monotonic()
        while cp.done < 400 and time.monotonic() - t0 < 10.0:
            await asyncio.sleep(0.05)
        assert cp.done == 400, cp.done
        assert cp.most_in_flight == 4
        assert not any(st.pending for st in states.values())
        assert all(st.in_step for st in states.values())     # answered forwards: the next goes at the third
    finally:
        task.cancel()
        for t in fw._forwards:
            t.cancel()
        await asyncio.gather(task, *fw._forwards, return_exceptions=True)


# --- a tier in front of our apiserver ----------------------------------------------------------------

@pytest.fixture(scope="module")
def control_plane(current_etcd):
    srv = start_apiserver(current_etcd.endpoint, f"/registry/nodetier-{uuid.uuid4().hex[:8]}")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tier(control_plane):
    with NodeTierProcess(control_plane.base, "--forward-interval", str(INTERVAL)) as t:
        yield t


@pytest.fixture
def sides(control_plane, tier):
    return Api(control_plane.base), Api(tier.base)


def create(t: Api, name: str, **kw) -> dict:
    r = t.post(LEASES, lease(name, **kw))
    assert r.status_code == 201, r.text
    return r.json()


def renew(t: Api, obj: dict, offset: float = 0.0) -> dict:
    body = {**obj, "spec": {**obj["spec"], "renewTime": now_micro(offset)}}
    r = t.put(f"{LEASES}/{obj['metadata']['name']}", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_create_goes_to_the_control_plane_and_the_tier_answers_with_its_own_version(sides):
    cp, t = sides
    made = create(t, "create-1")
    there = cp.get(f"{LEASES}/create-1").json()
    assert there["metadata"]["uid"] == made["metadata"]["uid"]          # the control plane's object
    assert made["metadata"]["resourceVersion"] != there["metadata"]["resourceVersion"]
    def no_rv(o):
        return {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "resourceVersion"}}
    assert no_rv(made) == no_rv(there)
    r = t.post(LEASES, lease("create-1"))
    assert r.status_code == 409 and r.json()["reason"] == "AlreadyExists", r.text
    assert r.json()["message"] == 'leases.coordination.k8s.io "create-1" already exists'


def test_a_renewal_is_answered_by_the_tier_and_reaches_the_control_plane_within_the_interval(sides):
    cp, t = sides
    made = create(t, "renew-1")
    cp_before = cp.get(f"{LEASES}/renew-1").json()
    t0 = time.monotonic()
    out = renew(t, made, offset=0.5)
    assert int(out["metadata"]["resourceVersion"]) > int(made["metadata"]["resourceVersion"])
    assert t.get(f"{LEASES}/renew-1").json() == out
    seen = wait_until(lambda: (o := cp.get(f"{LEASES}/renew-1").json())["spec"]["renewTime"]
                      == out["spec"]["renewTime"] and o, INTERVAL + 3)
    took = time.monotonic() - t0
    assert seen, "the renewal never reached the control plane"
    assert took <= INTERVAL + 2, took
    assert int(seen["metadata"]["resourceVersion"]) > int(cp_before["metadata"]["resourceVersion"])
    # and the tier's copy (and its version, the client's next precondition) did not move
    assert t.get(f"{LEASES}/renew-1").json()["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]


def fast_renewals(t: Api) -> float:
    return gauge(t, "nodetier_renewals_fast_path_total")


def gauge(t: Api, name: str) -> float:
    """A sample without labels from the tier's /metrics."""
    return next(float(line.split()[-1]) for line in t.get("/metrics").text.splitlines()
                if line.startswith(name + " "))


def test_a_fast_renewal_answers_and_stores_what_the_general_path_does(sides):
    """A kubelet's renewal (its last answer with a new renewTime) skips the general update path
    (NodeTier.fast_renewal); a query parameter sends the same renewal through the general path. The two
    answers, the stored copies and the watch events differ only in renewTime and resourceVersion, byte for
    byte; a renewal in another form, or with a stale version, is the general path's."""
    cp, t = sides
    made = create(t, "fast-1")
    n0 = fast_renewals(t)
    fast = t.put(f"{LEASES}/fast-1", {**made, "spec": {**made["spec"], "renewTime": now_micro(1)}})
    assert fast.status_code == 200, fast.text
    assert fast_renewals(t) == n0 + 1
    f = fast.json()
    general = t.put(f"{LEASES}/fast-1", {**f, "spec": {**f["spec"], "renewTime": now_micro(2)}},
                    params={"fieldManager": "kubelet"})
    assert general.status_code == 200, general.text
    assert fast_renewals(t) == n0 + 1                                   # not the fast path
    g = general.json()
    assert fast.headers["Content-Type"] == general.headers["Content-Type"]
    as_general = fast.content.replace(f["spec"]["renewTime"].encode(), g["spec"]["renewTime"].encode()) \
        .replace(f'"resourceVersion":"{f["metadata"]["resourceVersion"]}"'.encode(),
                 f'"resourceVersion":"{g["metadata"]["resourceVersion"]}"'.encode())
    assert as_general == general.content
    assert t.get(f"{LEASES}/fast-1").content == general.content       # what is stored
    # the same renewal after the general one is fast again; its form decides, not the client
    again = t.put(f"{LEASES}/fast-1", {**g, "spec": {**g["spec"], "renewTime": now_micro(3)}})
    assert again.status_code == 200 and fast_renewals(t) == n0 + 2
    # a renewTime in another valid form (no fraction) and a stale version: the general path's answers
    other = t.put(f"{LEASES}/fast-1", {**again.json(), "spec": {**again.json()["spec"],
                                                               "renewTime": "2030-01-01T00:00:00Z"}})
    assert other.status_code == 200, other.text
    stale = t.put(f"{LEASES}/fast-1", {**g, "spec": {**g["spec"], "renewTime": now_micro(4)}})
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict", stale.text
    assert fast_renewals(t) == n0 + 2


def test_a_stale_precondition_is_upstreams_409(sides):
    _, t = sides
    made = create(t, "stale-1")
    renew(t, made)
    r = t.put(f"{LEASES}/stale-1", {**made, "spec": {**made["spec"], "renewTime": now_micro(1)}})
    assert r.status_code == 409, r.text
    assert r.json()["reason"] == "Conflict"
    assert r.json()["message"] == ('Operation cannot be fulfilled on leases.coordination.k8s.io "stale-1": the object '
                                   'has been modified; please apply your changes to the latest version and try again')


def test_a_change_other_than_the_renewal_reaches_the_control_plane_before_the_answer(sides):
    cp, t = sides
    made = create(t, "change-1")
    body = {**made, "metadata": {**made["metadata"], "labels": {"zone": "a"}},
            "spec": {**made["spec"], "holderIdentity": "other"}}
    r = t.put(f"{LEASES}/change-1", body)
    assert r.status_code == 200, r.text
    there = cp.get(f"{LEASES}/change-1").json()
    assert there["metadata"]["labels"] == {"zone": "a"} and there["spec"]["holderIdentity"] == "other"
    assert r.json()["metadata"]["labels"] == {"zone": "a"}
    # invalid input is the control plane's 422, as it words it
    bad = {**r.json(), "metadata": {**r.json()["metadata"], "labels": {"not a key!": "x"}}}
    r2 = t.put(f"{LEASES}/change-1", bad)
    cp_rv = cp.get(f"{LEASES}/change-1").json()["metadata"]["resourceVersion"]
    r3 = cp.put(f"{LEASES}/change-1", {**bad, "metadata": {**bad["metadata"], "resourceVersion": cp_rv}})
    assert r2.status_code == r3.status_code == 422, (r2.text, r3.text)
    assert r2.json()["message"] == r3.json()["message"]


def test_an_edit_at_the_control_plane_reaches_the_tier_and_keeps_its_newer_renewal(sides):
    cp, t = sides
    made = create(t, "edit-1")
    renewed = renew(t, made, offset=1)      # absorbed: not yet at the control plane
    r = cp.patch(f"{LEASES}/edit-1", {"metadata": {"labels": {"edited": "yes"}}}, "application/merge-patch+json")
    assert r.status_code == 200, r.text
    got = wait_until(lambda: (o := t.get(f"{LEASES}/edit-1").json())["metadata"].get("labels") and o, 3)
    assert got and got["metadata"]["labels"] == {"edited": "yes"}
    assert got["spec"]["renewTime"] == renewed["spec"]["renewTime"]       # the acknowledged renewal is kept
    # the client's precondition now fails, as it would have on the control plane
    r = t.put(f"{LEASES}/edit-1", {**renewed, "spec": {**renewed["spec"], "renewTime": now_micro(2)}})
    assert r.status_code == 409, r.text
    assert wait_until(lambda: cp.get(f"{LEASES}/edit-1").json()["spec"]["renewTime"] ==
                      renewed["spec"]["renewTime"], INTERVAL + 3)


def test_deletes_either_side(sides):
    cp, t = sides
    create(t, "del-1")
    create(t, "del-2")
    assert cp.delete(f"{LEASES}/del-1").status_code == 200
    assert wait_until(lambda: t.get(f"{LEASES}/del-1").status_code == 404, 3)
    r = t.delete(f"{LEASES}/del-2")
    assert r.status_code == 200, r.text
    assert cp.get(f"{LEASES}/del-2").status_code == 404
    assert t.get(f"{LEASES}/del-2").status_code == 404


def test_list_and_watch_of_the_tier_see_its_renewals(sides):
    _, t = sides
    made = create(t, "watch-1")
    lst = t.get(LEASES).json()
    assert "watch-1" in [i["metadata"]["name"] for i in lst["items"]]
    rv = lst["metadata"]["resourceVersion"]
    r = t.get(LEASES, params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "5",
                              "fieldSelector": "metadata.name=watch-1"}, stream=True)
    assert r.status_code == 200
    out = renew(t, made)
    import json
    for line in r.iter_lines():
        ev = json.loads(line)
        assert ev["type"] == "MODIFIED"
        assert ev["object"]["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]
        break
    r.close()
    # paged lists carry the tier's continue tokens
    for i in range(3):
        create(t, f"page-{i}")
    page = t.get(LEASES, params={"limit": "2"}).json()
    assert len(page["items"]) == 2 and page["metadata"].get("continue")
    rest = t.get(LEASES, params={"limit": "500", "continue": page["metadata"]["continue"]}).json()
    assert len(page["items"]) + len(rest["items"]) == len(t.get(LEASES).json()["items"])


def test_everything_else_is_proxied(sides, control_plane):
    cp, t = sides
    ns = f"proxied-{uuid.uuid4().hex[:6]}"
    assert t.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": ns}}).status_code == 201
    r = t.post(f"/api/v1/namespaces/{ns}/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                                      "metadata": {"name": "c"}, "data": {"a": "b"}})
    assert r.status_code == 201, r.text
    assert t.get(f"/api/v1/namespaces/{ns}/configmaps/c").content == cp.get(f"/api/v1/namespaces/{ns}/configmaps/c").content
    # Leases elsewhere are the control plane's (its resourceVersions)
    other = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    made = t.post(other, {**lease("x"), "metadata": {"name": "x", "namespace": ns}}).json()
    assert cp.get(f"{other}/x").json()["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]
    # a watch streams through the proxy
    r = t.get(f"/api/v1/namespaces/{ns}/configmaps", params={"watch": "1", "timeoutSeconds": "5"}, stream=True)
    import json
    first = json.loads(next(r.iter_lines()))
    assert first["type"] == "ADDED" and first["object"]["metadata"]["name"] == "c"
    r.close()
    # an error is the control plane's, untouched
    r = t.get(f"/api/v1/namespaces/{ns}/configmaps/missing")
    assert r.status_code == 404 and r.json()["message"] == 'configmaps "missing" not found'


def test_a_stopped_tier_forwards_what_it_holds_and_a_new_one_loads_the_control_planes(control_plane):
    cp = Api(control_plane.base)
    with NodeTierProcess(control_plane.base, "--forward-interval", "300") as t1:
        a = Api(t1.base)
        made = create(a, "flush-1")
        out = renew(a, made, offset=3)
        assert cp.get(f"{LEASES}/flush-1").json()["spec"]["renewTime"] != out["spec"]["renewTime"]
    # SIGTERM: the pending renewal was forwarded before the tier exited
    assert cp.get(f"{LEASES}/flush-1").json()["spec"]["renewTime"] == out["spec"]["renewTime"]
    with NodeTierProcess(control_plane.base) as t2:
        got = Api(t2.base).get(f"{LEASES}/flush-1").json()
        assert got["spec"]["renewTime"] == out["spec"]["renewTime"]
        # the new tier's versions are newer than any the old one handed out (a resumed watch gets 410, never a gap)
        assert int(got["metadata"]["resourceVersion"]) > int(out["metadata"]["resourceVersion"])
        r = Api(t2.base).get(LEASES, params={"watch": "1", "resourceVersion": out["metadata"]["resourceVersion"],
                                             "timeoutSeconds": "2"})
        assert '"code":410' in r.text, r.text


def test_an_overdue_renewal_is_forwarded_at_once(control_plane):
    """A Lease of 4 s is renewed every second; a renewal not followed by another within 1.1 s is forwarded
    though the interval (300 s) is far off: the node may be gone, and its last renewal must count."""
    cp = Api(control_plane.base)
    with NodeTierProcess(control_plane.base, "--forward-interval", "300") as t:
        a = Api(t.base)
        made = create(a, "overdue-1", duration=4)
        t0 = time.monotonic()
        out = renew(a, made, offset=0.2)
        assert wait_until(lambda: cp.get(f"{LEASES}/overdue-1").json()["spec"]["renewTime"]
                          == out["spec"]["renewTime"], 5)
        took = time.monotonic() - t0
        assert 0.9 <= took <= 2.5, took


def test_a_node_may_write_only_its_own_lease(control_plane, tmp_path):
    tokens = tmp_path / "tokens.csv"
    tokens.write_text('node-a-token,system:node:node-a,uid-a,"system:nodes"\n'
                      'admin-token,admin,uid-admin,"system:masters"\n'
                      'dev-token,dev,uid-dev,"devs"\n')
    with NodeTierProcess(control_plane.base, "--token-auth-file", str(tokens), "--anonymous-auth=false",
                         ready_token="admin-token") as t:
        def as_(token):
            a = Api(t.base)
            a.s.headers["Authorization"] = f"Bearer {token}"
            return a
        node, admin, dev = as_("node-a-token"), as_("admin-token"), as_("dev-token")
        assert Api(t.base).get(LEASES).status_code == 401
        made = create(node, "node-a")
        renew(node, made)
        r = node.post(LEASES, lease("node-b"))
        assert r.status_code == 403, r.text
        assert r.json()["message"] == ('leases.coordination.k8s.io "node-b" is forbidden: can only access node lease '
                                       'with the same name as the requesting node')
        create(admin, "node-b")
        r = node.get(f"{LEASES}/node-b")
        assert r.status_code == 403 and r.json()["reason"] == "Forbidden"
        # a user the tier cannot judge is the control plane's to judge: proxied (the control plane's versions)
        got = dev.get(f"{LEASES}/node-b").json()
        assert got["metadata"]["resourceVersion"] == Api(control_plane.base).get(
            f"{LEASES}/node-b").json()["metadata"]["resourceVersion"]


async def test_memkv_watch_from_a_future_revision_waits_for_it():
    kv = MemoryKV(start_revision=10)
    w = kv.watch(b"/p/", 13)
    it = w.__aiter__()
    nxt = asyncio.ensure_future(it.__anext__())
    await kv.create(b"/p/a", b"11")
    await kv.create(b"/p/b", b"12")
    await kv.create(b"/p/c", b"13")
    got = await asyncio.wait_for(nxt, 1)
    assert [e.kv.value for e in got] == [b"13"]
    w.close()


def test_a_killed_tier_restarted_forwards_at_once_and_its_clients_recover_with_one_409(control_plane):
    """SIGKILL loses the renewals the tier had not forwarded (at most one forward interval of each Lease). A new
    tier loads the control plane's copies; a client holding a version of the old tier gets a 409 (its next GET
    gives the new tier's), and its next renewal goes to the control plane at once, because the control plane's
    copy is already older than the interval."""
    cp = Api(control_plane.base)
    t1 = NodeTierProcess(control_plane.base, "--forward-interval", "4").start().wait_ready()
    a = Api(t1.base)
    made = create(a, "killed-1", duration=8)   # renewed every 2 s
    out = renew(a, made, offset=0.5)
    t1.popen.kill()
    t1.popen.wait()
    t1.stop()
    assert cp.get(f"{LEASES}/killed-1").json()["spec"]["renewTime"] != out["spec"]["renewTime"]   # lost
    time.sleep(4)                   # the control plane's copy is now older than the interval
    with NodeTierProcess(control_plane.base, "--forward-interval", "4") as t2:
        b = Api(t2.base)
        r = b.put(f"{LEASES}/killed-1", {**out, "spec": {**out["spec"], "renewTime": now_micro(1)}})
        assert r.status_code == 409, r.text
        fresh = b.get(f"{LEASES}/killed-1").json()
        again = renew(b, fresh, offset=1)
        assert wait_until(lambda: cp.get(f"{LEASES}/killed-1").json()["spec"]["renewTime"]
                          == again["spec"]["renewTime"], 2), "not forwarded at once"


def rbac_https_control_plane(current_etcd, d: str, tag: str):
    """A throwaway PKI in `d` and an apiserver serving HTTPS with it, clients authenticated by certificate,
    RBAC on: (the process, its HTTPS URL)."""
    make_pki(d)
    sport = free_port()
    srv = start_apiserver(current_etcd.endpoint, f"/registry/nodetier-{tag}-{uuid.uuid4().hex[:8]}",
                          "--secure-port", str(sport), "--tls-cert-file", f"{d}/serving.crt",
                          "--tls-private-key-file", f"{d}/serving.key", "--client-ca-file", f"{d}/ca.crt",
                          "--authorization-mode", "RBAC")
    return srv, f"https://127.0.0.1:{sport}"


def test_a_tier_given_a_kubeconfig_calls_an_https_control_plane_as_itself(current_etcd, tmp_path):
    """The tier's own calls (nodetier/h1.py: the create it hands on, the renewals it forwards) go over TLS with
    the kubeconfig's CA and client certificate, to a control plane that refuses anonymous requests (RBAC)."""
    d = str(tmp_path)
    srv, https = rbac_https_control_plane(current_etcd, d, "tls")
    try:
        admin = (f"{d}/admin.crt", f"{d}/admin.key")
        assert Api(https, verify=f"{d}/ca.crt").get(LEASES).status_code == 403       # anonymous is refused
        cp = Api(https, cert=admin, verify=f"{d}/ca.crt")
        kubeconfig = write_kubeconfig(f"{d}/tier.kubeconfig", https, ca=f"{d}/ca.crt", cert=admin)
        with NodeTierProcess("", "--forward-interval", "2", kubeconfig=kubeconfig) as tier:
            t = Api(tier.base)
            made = create(t, "tls-1")
            assert cp.get(f"{LEASES}/tls-1").json()["metadata"]["uid"] == made["metadata"]["uid"]
            out = renew(t, made, offset=0.5)
            assert wait_until(lambda: cp.get(f"{LEASES}/tls-1").json()["spec"]["renewTime"]
                              == out["spec"]["renewTime"], 5), "the renewal was not forwarded over TLS"
    finally:
        srv.stop()


def test_client_certificate_users_reach_the_control_plane_as_themselves_by_impersonation(current_etcd, tmp_path):
    """A tier that authenticates clients by certificate hands a request it does not absorb on with its own
    identity and upstream's impersonation headers for the client (its certificate cannot be passed on): the
    control plane decides as that user, byte for byte as if the user had come directly; a node's own Lease is
    still the tier's; a client-certificate user asking to impersonate another is allowed by the tier only in
    system:masters."""
    from tests.helpers.kube import make_client_cert
    d = str(tmp_path)
    srv, https = rbac_https_control_plane(current_etcd, d, "imp")
    try:
        ca = f"{d}/ca.crt"
        admin = (f"{d}/admin.crt", f"{d}/admin.key")
        carol = make_client_cert(d, "carol", "/O=dev/CN=carol")
        node = make_client_cert(d, "node-n1", "/O=system:nodes/CN=system:node:imp-n1")
        kubeconfig = write_kubeconfig(f"{d}/tier.kubeconfig", https, ca=ca, cert=admin)
        tport = free_port()
        with NodeTierProcess("", "--forward-interval", "2", "--secure-port", str(tport), "--tls-cert-file",
                             f"{d}/serving.crt", "--tls-private-key-file", f"{d}/serving.key", "--client-ca-file", ca,
                             kubeconfig=kubeconfig):
            tier_url = f"https://127.0.0.1:{tport}"
            whoami = ("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})

            def both(cert, method, path, body=None, headers=None):
                direct, via = Api(https, cert=cert, verify=ca), Api(tier_url, cert=cert, verify=ca)
                return [getattr(a, method)(path, body, headers=headers) if body is not None else
                        getattr(a, method)(path, headers=headers) for a in (direct, via)]
            d_who, t_who = both(carol, "post", *whoami)
            assert t_who.status_code == d_who.status_code == 201, (t_who.text, d_who.text)
            assert t_who.json()["status"]["userInfo"] == d_who.json()["status"]["userInfo"]
            assert t_who.json()["status"]["userInfo"]["username"] == "carol"
            d_cm, t_cm = both(carol, "get", "/api/v1/namespaces/default/configmaps")
            assert (t_cm.status_code, t_cm.content) == (d_cm.status_code, d_cm.content)
            assert t_cm.status_code == 403 and b'User \\"carol\\"' in t_cm.content, t_cm.text
            cp = Api(https, cert=admin, verify=ca)
            r = cp.post("/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", {
                "metadata": {"name": "carol-view"}, "subjects": [{"kind": "User", "name": "carol",
                                                                  "apiGroup": "rbac.authorization.k8s.io"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}})
            assert r.status_code == 201, r.text
            via = Api(tier_url, cert=carol, verify=ca)
            assert wait_until(lambda: via.get("/api/v1/namespaces/default/configmaps").status_code == 200, 5)
            d_node, t_node = both(node, "get", "/api/v1/nodes/imp-n1")        # the control plane decides as the node
            assert (t_node.status_code, t_node.content) == (d_node.status_code, d_node.content)
            # the node's own Lease is the tier's (created through it, renewed by it)
            n1 = Api(tier_url, cert=node, verify=ca)
            made = create(n1, "imp-n1")
            assert renew(n1, made, offset=0.5)["metadata"]["resourceVersion"] != made["metadata"]["resourceVersion"]
            # impersonation asked of the tier by a certificate user: masters only
            as_carol = Api(tier_url, cert=admin, verify=ca).post(*whoami, headers={"Impersonate-User": "carol"})
            assert as_carol.status_code == 201 and as_carol.json()["status"]["userInfo"]["username"] == "carol", \
                as_carol.text
            refused = via.post(*whoami, headers={"Impersonate-User": "admin"})
            assert refused.status_code == 403 and 'User \\"carol\\" cannot impersonate' in refused.text, refused.text
    finally:
        srv.stop()


def test_two_tiers_split_the_nodes_and_send_each_other_the_leases_they_do_not_hold(control_plane):
    """nodetier.split: tier i holds the Leases whose name hashes into its range; a request for another tier's
    Lease (a create through its body's name) goes to that tier, so either tier answers with the one copy
    (the same resourceVersion); each holds only its own; a list of the namespace is the control plane's."""
    cp = Api(control_plane.base)
    t0, t1 = NodeTierProcess(control_plane.base), NodeTierProcess(control_plane.base)
    urls = [t0.base, t1.base]
    for i, t in enumerate((t0, t1)):
        t.argv += ["--tiers", ",".join(urls), "--tier-index", str(i), "--forward-interval", str(INTERVAL)]
    ranges = NodeRanges(urls)
    names = [f"split-{i}" for i in range(12)]
    assert {ranges.owner(n) for n in names} == {0, 1}
    with t0, t1:
        a, b = Api(t0.base), Api(t1.base)
        for n in names:
            create(a, n)                                    # every create through tier 0
        renewed = {}
        for n in names:
            got_a, got_b = a.get(f"{LEASES}/{n}").json(), b.get(f"{LEASES}/{n}").json()
            assert got_a == got_b, n                        # one copy: its owner's
            renewed[n] = renew(b, got_a, offset=0.5)        # every renewal through tier 1
            assert a.get(f"{LEASES}/{n}").json() == renewed[n]
        held = [gauge(a, "nodetier_leases"), gauge(b, "nodetier_leases")]
        at_cp = {it["metadata"]["name"] for it in cp.get(LEASES).json()["items"]}
        assert sum(held) == len(at_cp), (held, len(at_cp))  # each Lease held once, by one tier
        assert all(h >= sum(ranges.owner(n) == i for n in names) for i, h in enumerate(held)), held
        listed = {it["metadata"]["name"] for it in a.get(LEASES).json()["items"]}
        assert listed == at_cp                              # the control plane's list
        assert wait_until(lambda: all(cp.get(f"{LEASES}/{n}").json()["spec"]["renewTime"] == r["spec"]["renewTime"]
                                      for n, r in renewed.items()), INTERVAL + 4), "not forwarded by the owners"
