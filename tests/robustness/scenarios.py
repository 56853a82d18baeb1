"""Scenarios: a fresh etcd and apiserver, the ground-truth recorder, traffic before, during and after one
fault injected at a moment the seed chooses, then the final reads and every checker."""
from __future__ import annotations

import asyncio
import collections
import json
import random
import time
import traceback
import urllib.parse
from dataclasses import dataclass, field

import aiohttp

from storage.compact import compact_now
from storage.etcd import EtcdClient
from tests.robustness import checkers
from tests.robustness.informer import Informer
from tests.robustness.informer import build as informer_binary
from tests.robustness.cluster import Apiserver, DeploymentUnderTest, Etcd, EtcdCluster, Proxy
from tests.robustness.traffic import CONFIGMAPS, NAMESPACE, SHARDS, History, Kind, Traffic
from tests.robustness.truth import Recorder

REQUEST_TIMEOUT = 10.0    # the apiserver's --request-timeout in every scenario
TIMEOUT_MARGIN = 5.0      # a loaded 2-core machine: answers may come this late after the timeout
RECOVERY_LIMIT = 30.0     # /readyz must pass this soon after etcd returns
INFORMER_LIMIT = 10.0     # a client-go informer must equal etcd's state this soon after the traffic
# ... plus, where the apiserver itself was down (refusing connections), client-go's own reflector backoff
# (0.8 s doubling to 30 s, jittered): the informer may only try again that long after the server is back
INFORMER_BACKOFF = 30.0


def informer_limit(apiserver_restarts: int) -> float:
    return INFORMER_LIMIT + (INFORMER_BACKOFF if apiserver_restarts else 0.0)


@dataclass
class Run:
    """What a fault needs, and what it reports."""
    etcd: Etcd
    api: Apiserver
    h: History
    rng: random.Random
    duration: float
    fault_at: float
    no_answer_ok: list = field(default_factory=list)   # windows where the apiserver itself was down
    etcd_fault: tuple | None = None                   # (start, end) of etcd being away
    fault_end: float | None = None
    compactions: list = field(default_factory=list)   # (t, rev)
    notes: list = field(default_factory=list)
    proxy: Proxy | None = None                       # between the apiserver and etcd (etcd-blackhole)
    notes_info: dict = field(default_factory=dict)    # what the fault reports (not a violation)
    kind: Kind = CONFIGMAPS
    watch_cache: bool = True
    residency: bool = False
    pad: asyncio.Event = field(default_factory=asyncio.Event)   # writers pad their objects while it is set


async def sleep_until(h: History, t: float) -> None:
    left = t - h.now()
    if left > 0:
        await asyncio.sleep(left)


# --- faults ---------------------------------------------------------------------------------------------------

async def fault_none(run: Run) -> None:
    return None


async def fault_etcd_kill(run: Run) -> None:
    """(1) etcd SIGKILL, down for a few seconds, restarted on the same data directory and ports."""
    await sleep_until(run.h, run.fault_at)
    down = run.rng.uniform(5.0, 7.0)
    a = run.h.now()
    await asyncio.to_thread(run.etcd.kill)
    await asyncio.sleep(down)
    await asyncio.to_thread(run.etcd.restart)
    run.etcd_fault = (a, run.h.now())
    run.fault_end = run.h.now()


async def fault_etcd_pause(run: Run) -> None:
    """(2) etcd SIGSTOP for several seconds, then SIGCONT."""
    await sleep_until(run.h, run.fault_at)
    down = run.rng.uniform(5.0, 8.0)
    a = run.h.now()
    run.etcd.pause()
    await asyncio.sleep(down)
    run.etcd.resume()
    run.etcd_fault = (a, run.h.now())
    run.fault_end = run.h.now()


async def fault_apiserver_kill(run: Run) -> None:
    """(5) the apiserver SIGKILLed under load and restarted on the same port; clients reconnect and resume
    their watches from the last resourceVersion they saw."""
    await sleep_until(run.h, run.fault_at)
    a = run.h.now()
    await asyncio.to_thread(run.api.kill)
    await asyncio.to_thread(run.api.restart_process)
    run.fault_end = run.h.now()
    ready = await asyncio.to_thread(run.api.wait_ready, 60.0)
    # Requests may go unanswered from the kill until the new process serves (and a moment after).
    run.no_answer_ok.append((a, run.h.now() + 1.0))
    if not ready:
        run.notes.append("apiserver not ready 60 s after its restart")


async def fault_etcd_blackhole(run: Run) -> None:
    """(4) the apiserver's link to etcd blackholed for several seconds (a TCP proxy we own holds every byte
    and every new connection), then restored; etcd itself runs on. Longer than the request timeout
    (sometimes), so requests stuck on the link must be answered 504 in time."""
    await sleep_until(run.h, run.fault_at)
    down = run.rng.uniform(6.0, 12.0)
    a = run.h.now()
    run.proxy.blackhole()
    await asyncio.sleep(down)
    run.proxy.restore()
    run.etcd_fault = (a, run.h.now())
    run.fault_end = run.h.now()


async def _cluster_kill(run: Run, leader: bool) -> None:
    """(3) one member of the three-member cluster SIGKILLed, down for a few seconds, restarted into the
    cluster on its data directory; the other two keep quorum, so etcd stays available (a leader's death
    costs an election) and the apiserver, given all three endpoints, must carry on through the others."""
    await sleep_until(run.h, run.fault_at)
    cluster = run.etcd
    lead = await asyncio.to_thread(cluster.leader)
    # a follower: the first endpoint when it is one (the apiserver's gRPC channel is connected there, so the
    # kill makes it fail over), else the next
    victim = lead if leader else next(m for m in cluster.members if m is not lead)
    # (members[0] is the first endpoint; next() above picks it whenever it is a follower)
    down = run.rng.uniform(4.0, 6.0)
    a = run.h.now()
    await asyncio.to_thread(cluster.kill, victim)
    await asyncio.sleep(down)
    await asyncio.to_thread(cluster.restart, victim)
    new_lead = await asyncio.to_thread(cluster.leader)
    run.notes_info.update({"killed": victim.name, "was_leader": victim is lead, "leader_after": new_lead.name,
                           "member_down": [round(a, 2), round(run.h.now(), 2)]})
    run.fault_end = run.h.now()


async def fault_cluster_leader_kill(run: Run) -> None:
    await _cluster_kill(run, leader=True)


async def fault_cluster_follower_kill(run: Run) -> None:
    await _cluster_kill(run, leader=False)


def _terminated_watchers(base: str) -> float | None:
    """apiserver_terminated_watchers_total, every series summed (None: /metrics did not answer in 10 s; a
    server stalled for longer shows in the requests' durations)."""
    import urllib.request
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except OSError:
        return None
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith("apiserver_terminated_watchers_total"))


def _read_chunked(raw: bytes) -> tuple[int, list[dict], bool]:
    """An HTTP/1.1 response read to EOF: (status, the watch events of its chunked body, whether the body
    ended with its terminating chunk)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    data, complete = b"", False
    while body:
        size_line, sep, rest = body.partition(b"\r\n")
        if not sep:
            break
        try:
            n = int(size_line.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            complete = True
            break
        if len(rest) < n + 2:
            data += rest[:n]
            break
        data += rest[:n]
        body = rest[n + 2:]
    events = []
    for line in data.split(b"\n"):
        if line.strip():
            try:
                events.append(json.loads(line))
            except ValueError:
                break   # a torn last line: the connection cut mid-event
    return status, events, complete


async def fault_slow_watcher(run: Run) -> None:
    """(7) one watcher that stops reading (a tiny receive buffer, never read) while the others go on and the
    writers write bigger objects (64 KB): with the cache, upstream's dispatch budget (S4.14) must terminate it
    (its stream ended, no ERROR event, apiserver_terminated_watchers_total up) without holding anyone else up
    (on a resident shard the watch is sharded to the resident range, so the cache serves it). Without the
    cache (a watch on etcd, which upstream does not terminate either) it is held for 8 s, then closed by us:
    the others must be unaffected and the server must not buffer for it without bound (the RSS check). What
    it got before the end must be a correct prefix of etcd's stream (checked as a watch chain)."""
    import socket
    from tests.robustness.traffic import WatchChain
    await sleep_until(run.h, run.fault_at)
    base = run.api.base
    m0 = None
    for _ in range(6):
        m0 = await asyncio.to_thread(_terminated_watchers, base)
        if m0 is not None:
            break
    if m0 is None:
        run.notes.append("/metrics did not answer in 60 s")
        m0 = 0.0
    async with aiohttp.ClientSession(base) as s:
        async with s.get(run.kind.path) as r:
            start_rv = int((await r.json())["metadata"]["resourceVersion"])
    host, port = base.removeprefix("http://").split(":")
    shard = SHARDS[0] if run.residency else None
    sel = "&shardSelector=" + urllib.parse.quote(shard) if shard else ""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    t0 = run.h.now()
    sock.sendall(f"GET {run.kind.path}?watch=1&resourceVersion={start_rv}&timeoutSeconds=600{sel} HTTP/1.1\r\n"
                 f"Host: {host}\r\n\r\n".encode())
    run.pad.set()        # writers now write ~64 KB objects, so the watcher's buffers fill within seconds
    terminated = None
    try:
        hold = run.h.now() + (run.duration + 60 if run.watch_cache else 8.0)
        while run.h.now() < hold:
            await asyncio.sleep(0.5)
            if (await asyncio.to_thread(_terminated_watchers, base) or 0) > m0:
                terminated = run.h.now()
                break
        run.pad.clear()
        # now read what it was sent: the stream must end (closed by the server), without an ERROR event
        sock.settimeout(5)
        until = time.monotonic() + 15

        def drain() -> tuple[bytes, str]:
            buf = bytearray()
            try:
                while time.monotonic() < until and (chunk := sock.recv(1 << 20)):
                    buf += chunk
                    if buf.endswith(b"\r\n0\r\n\r\n"):
                        return bytes(buf), "ended"     # the response's last chunk (the connection may stay)
                return bytes(buf), "closed" if time.monotonic() < until else "still open"
            except OSError as e:
                return bytes(buf), f"{type(e).__name__}: {e}"
        raw, how = await asyncio.to_thread(drain)
    finally:
        run.pad.clear()
        sock.close()
    m1 = await asyncio.to_thread(_terminated_watchers, base)
    if m1 is not None and m1 - m0 > 1:
        run.notes.append(f"{m1 - m0:.0f} watchers terminated, not just the slow one (the others read promptly)")
    status, events, complete = _read_chunked(raw)
    chain = WatchChain("slow", 0, start_rv, t0, shard=shard)
    for ev in events:
        obj = ev.get("object") or {}
        md = obj.get("metadata") or {}
        chain.events.append((t0, ev.get("type"), md.get("name"), int(md.get("resourceVersion") or 0),
                             (obj.get("data") or {}).get("op")))
    chain.sessions.append((t0, run.h.now(), start_rv, f"slow watcher: {how}", 600))
    run.h.chains.append(chain)
    run.notes_info.update({"slow_watcher_terminated_after": None if terminated is None else round(terminated - t0, 2),
                           "slow_watcher_events": len(events), "slow_watcher_bytes": len(raw),
                           "slow_watcher_stream": how, "slow_watcher_clean_end": complete})
    if not run.watch_cache:
        pass   # served from etcd: not terminated (as upstream); the prefix and the others are what is checked
    elif terminated is None:
        run.notes.append(f"the slow watcher was not terminated ({len(raw)} bytes sent to it, stream {how}; "
                         "apiserver_terminated_watchers_total did not move)")
    if status != 200:
        run.notes.append(f"the slow watcher's watch answered {status}")
    if any(ev.get("type") == "ERROR" for ev in events):
        run.notes.append("the slow watcher's stream carried an ERROR event (upstream closes it without one)")
    if run.watch_cache and how not in ("closed", "ended"):
        run.notes.append(f"the slow watcher's stream was not closed by the server: {how}")
    run.fault_end = run.h.now()


async def fault_defrag(run: Run) -> None:
    """(8) etcd defragmented three times in a row during the traffic."""
    await sleep_until(run.h, run.fault_at)
    client = EtcdClient(run.etcd.endpoint.split(","), timeout=30.0)
    try:
        for _ in range(3):
            await client.defragment()
            await asyncio.sleep(0.3)
    finally:
        await client.close()
    run.fault_end = run.h.now()


async def _kill_child(run: Run, role: str) -> float:
    """Kill the first child of `role` at the fault's moment and wait for it to serve again; returns the kill's time."""
    await sleep_until(run.h, run.fault_at)
    a = run.h.now()
    killed = await asyncio.to_thread(run.api.kill_child, role)
    back = await asyncio.to_thread(run.api.wait_restarted, killed, 60.0)
    run.fault_end = run.h.now()
    run.notes_info["killed"] = killed["name"]
    run.notes_info["restarted_after_s"] = round(run.fault_end - a, 2)
    if not back:
        run.notes.append(f"{killed['name']} not serving again 60 s after it was killed")
    return a


async def fault_front_kill(run: Run) -> None:
    """(10) one front of a deployment SIGKILLed under traffic; its supervisor restarts it on the shared port
    (SO_REUSEPORT: the other front takes the new connections meanwhile). Requests on the killed front's
    connections go unanswered; the clients reconnect and resume their watches from the last resourceVersion
    they saw, which the shards' windows still hold: no 410, no relist (checked after the run)."""
    a = await _kill_child(run, "front")
    run.no_answer_ok.append((a, run.h.now() + 1.0))


async def fault_shard_kill(run: Run) -> None:
    """(11) one resident shard of a deployment SIGKILLed under traffic, restarted by its supervisor (a warm
    start from its snapshot). The fronts stay up: while the shard is away, what needs it (merged lists,
    watches) is answered with a Status (504) or an ERROR event, never a dropped connection; writes and GETs
    go to etcd and go on."""
    await _kill_child(run, "shard")


async def fault_compaction(run: Run) -> None:
    """(6) compaction every second, as kube's compactor does it (compact_rev_key, then Compact) at the
    revision seen one interval earlier, for the whole traffic."""
    client = EtcdClient(run.etcd.endpoint.split(","), timeout=5.0)
    prev = 0
    try:
        while True:
            rev = await client.current_revision(b"/registry/")
            if prev:
                # recorded as the call starts: a read may see the compaction before the call returns
                run.compactions.append((run.h.now(), prev))
                await compact_now(client, prev)
            prev = rev
            await asyncio.sleep(1.0)
    finally:
        await client.close()


FAULTS = {
    "none": fault_none,
    "etcd-kill": fault_etcd_kill,
    "etcd-pause": fault_etcd_pause,
    "etcd-blackhole": fault_etcd_blackhole,
    "etcd3-leader-kill": fault_cluster_leader_kill,
    "etcd3-follower-kill": fault_cluster_follower_kill,
    "apiserver-kill": fault_apiserver_kill,
    "apiserver-kill-ha": fault_apiserver_kill,
    "compaction": fault_compaction,
    "slow-watcher": fault_slow_watcher,
    "defrag": fault_defrag,
    "front-kill": fault_front_kill,
    "shard-kill": fault_shard_kill,
}
# Faults of a deployment's children: these run on `python -m deployment` (2 shards, 2 fronts), whatever the mode.
DEPLOYMENT_ONLY = {"front-kill", "shard-kill"}
# What a scenario needs beyond one apiserver over etcd: a proxy on the apiserver's etcd link, a second
# apiserver over the same etcd (half the writers write through it, so writes go on while the first is down).
SETUPS = {"etcd-blackhole": {"proxy": True}, "apiserver-kill-ha": {"second": True},
          "etcd3-leader-kill": {"cluster": True}, "etcd3-follower-kill": {"cluster": True}}
SCENARIOS = list(FAULTS)


# --- one scenario ---------------------------------------------------------------------------------------------

async def _final_reads(base: str, path: str) -> dict:
    """After the traffic: a consistent list and a resourceVersion=0 list (the cache, when it is on)."""
    out = {}
    async with aiohttp.ClientSession(base, timeout=aiohttp.ClientTimeout(total=30)) as s:
        for kind, params in (("consistent", {}), ("rv0", {"resourceVersion": "0"})):
            for _ in range(60):
                async with s.get(path, params=params) as r:
                    if r.status == 200:
                        doc = await r.json()
                        out[kind] = (int(doc["metadata"]["resourceVersion"]),
                                     {it["metadata"]["name"]: (int(it["metadata"]["resourceVersion"]),
                                                               (it.get("data") or {}).get("op"))
                                      for it in doc["items"]})
                        break
                    await r.read()
                await asyncio.sleep(0.5)
    return out


async def _create_crd(s: aiohttp.ClientSession, kind: Kind, apis: list[Apiserver]) -> None:
    """Create the CRD and wait until every apiserver serves its resource."""
    async with s.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=kind.crd()) as r:
        assert r.status == 201, await r.text()
    for a in apis:
        async with aiohttp.ClientSession(a.base) as c:
            for _ in range(100):
                async with c.get(kind.path) as r:
                    await r.read()
                    if r.status == 200:
                        break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError(f"{kind.plural} not served by {a.base} 10 s after its CRD")


async def _sample_rss(api: "Apiserver", h: History, into: list, every: float) -> None:
    while True:
        if api.alive():
            into.append((round(h.now(), 1), api.rss_mib()))
        await asyncio.sleep(every)


async def run_scenario(name: str, *, seed: int = 1, duration: float = 8.0, rate: float = 100.0,
                       watch_cache: bool = True, kind: Kind = CONFIGMAPS, residency: bool = False,
                       deployment: bool = False, rss_every: float = 10.0) -> dict:
    """One scenario. `residency`: the apiserver keeps only SHARDS[0] (--residency), so sharded requests for
    that range are served by its cache and everything else goes to etcd. `deployment`: `python -m deployment`
    (2 resident shards, 2 fronts on one port) in place of the apiserver. RSS is sampled every `rss_every` s
    (a deployment's: its processes' summed)."""
    fault = FAULTS[name]
    spec = SETUPS.get(name, {})
    rng = random.Random(f"{name}/{seed}")
    deployment = deployment or name in DEPLOYMENT_ONLY
    watch_cache = watch_cache or deployment
    mode = "deployment" if deployment else "resident" if residency else ("cache" if watch_cache else "nocache")
    label = name + ("" if kind is CONFIGMAPS else f" {kind.plural}") + {"cache": "", "nocache": " (no cache)",
                                                                          "resident": " (resident)",
                                                                          "deployment": " (deployment)"}[mode]
    result: dict = {"scenario": label, "name": name, "mode": mode, "seed": seed, "duration": duration,
                    "rate": rate, "watch_cache": watch_cache, "residency": residency, "kind": kind.plural}
    await asyncio.to_thread(informer_binary)   # built (or waited for) before anything is timed
    etcd = EtcdCluster() if spec.get("cluster") else Etcd()
    api = api2 = proxy = informer = None
    truth = None
    t_start = time.monotonic()
    try:
        await asyncio.to_thread(etcd.start)
        if spec.get("proxy"):
            proxy = Proxy(etcd.member.client_port).start()
        flags = (f"--watch-cache={'true' if watch_cache else 'false'}", "--request-timeout",
                 f"{REQUEST_TIMEOUT:.0f}s", "--etcd-compaction-interval", "0")
        if watch_cache:   # every entry compressed within 50 ms (issue 23): faults meet compressed entries too
            flags += ("--cache-compression-eager",)
        if residency:
            flags += ("--residency", SHARDS[0])
        api = (DeploymentUnderTest(etcd.endpoint, *flags) if deployment else
               Apiserver(proxy.endpoint if proxy else etcd.endpoint, *flags))
        await asyncio.to_thread(api.start)
        if spec.get("second"):
            api2 = Apiserver(etcd.endpoint, *flags)
            await asyncio.to_thread(api2.start)
        async with aiohttp.ClientSession(api.base) as s:
            async with s.post("/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}}) as r:
                assert r.status == 201, await r.text()
            if kind.crd() is not None:
                await _create_crd(s, kind, [a for a in (api, api2) if a is not None])
        truth = Recorder(etcd.endpoint, kind.etcd_prefix)
        await truth.start()
        h = History()
        run = Run(etcd, api, h, rng, duration, fault_at=rng.uniform(0.25, 0.45) * duration, proxy=proxy, kind=kind,
                  watch_cache=watch_cache, residency=residency)
        traffic = Traffic(api.base, h, seed=rng.randrange(1 << 30), rate=rate, request_timeout=REQUEST_TIMEOUT,
                          write_bases=[api.base, api2.base] if api2 else None, kind=kind, watch_list=watch_cache, pad=run.pad)
        await traffic.setup()
        group, _, version = kind.api_version.rpartition("/")
        informer = await asyncio.to_thread(lambda: Informer(api.base, NAMESPACE, group, version, kind.plural,
                                                            api.log_path + ".informer").start())
        tasks = [asyncio.create_task(traffic.run()), asyncio.create_task(traffic.probe_health())]
        rss_samples: list = []
        sampler = asyncio.create_task(_sample_rss(api, h, rss_samples, rss_every))
        fault_task = asyncio.create_task(fault(run))
        await sleep_until(h, duration)
        if name != "compaction":
            await fault_task
        if run.fault_end is not None:
            # traffic after the fault: until the server is ready again and a few seconds more
            await asyncio.to_thread(api.wait_ready, RECOVERY_LIMIT + 10)
            await sleep_until(h, max(h.now() + 2.0, run.fault_end + 3.0))
        traffic.stopping.set()
        h.mark("traffic_stop")
        for t in tasks:
            await t
        if name == "compaction":
            fault_task.cancel()
            try:
                await fault_task
            except asyncio.CancelledError:
                pass
        elif fault_task.done() and fault_task.exception():
            raise fault_task.exception()
        ready = await asyncio.to_thread(api.wait_ready, RECOVERY_LIMIT)
        sampler.cancel()
        rss_end = api.rss_mib()
        final_rev = await truth.catch_up()
        state, _ = await truth.etcd_state(final_rev)
        final = {"rev": final_rev, "state": state}
        reads = await _final_reads(api.base, kind.path) if ready else {}
        # the client-go informer (watch-list on) converges to etcd's state within 10 s
        # (measured up to 60 s, so a slow convergence shows its time)
        converged, last = await asyncio.to_thread(informer.converge, state, 60.0)
        alive = api.alive() and etcd.alive() and (api2 is None or api2.alive())

        v: list[checkers.Violation] = []
        if truth.broken:
            v.append(checkers.Violation("harness", truth.broken))
        v += checkers.check_writes(h, truth, final)
        v += checkers.check_reads(h, truth, run.compactions)
        v += checkers.check_watches(h, truth, run.compactions)
        v += checkers.check_linearizable(h, truth)
        outage, info = checkers.check_outage(h, REQUEST_TIMEOUT, TIMEOUT_MARGIN, run.no_answer_ok, run.etcd_fault)
        v += outage
        recover = checkers.recovery_time(h, run.fault_end)
        if run.fault_end is not None and (recover is None or recover > RECOVERY_LIMIT):
            v.append(checkers.Violation("outage", f"not recovered within {RECOVERY_LIMIT:.0f} s of the fault's end "
                                                  f"(readyz 200 and an acknowledged write): {recover}",
                                        [{"t": round(t, 2), "status": st} for t, st in h.readyz
                                         if t >= run.fault_end][:8]))
        for kind in ("consistent", "rv0"):
            if kind not in reads:
                v.append(checkers.Violation("cache", f"no final {kind} list (ready={ready})"))
                continue
            rv, items = reads[kind]
            want, _ = await truth.etcd_state(rv)
            if items != want:
                v.append(checkers.Violation("cache", f"final {kind} list at rv {rv} differs from etcd at that rv",
                                            checkers.diff_states(want, items, "etcd", "apiserver")))
        if "consistent" in reads and reads["consistent"][0] < final_rev:
            v.append(checkers.Violation("cache", f"final consistent list at rv {reads['consistent'][0]} older than "
                                                 f"etcd's {final_rev}"))
        limit = informer_limit(api.restarts)
        if converged is None or converged > limit:
            v.append(checkers.Violation("informer", f"the client-go informer did not converge to etcd's state "
                                                    f"within {limit:.0f} s of the traffic's end "
                                                    f"({'not in 60 s' if converged is None else f'{converged:.1f} s'})",
                                        [{"synced": last.get("synced"), "exited": last.get("exited"),
                                          "lastSyncRV": last.get("lastSyncRV")}]
                                        + checkers.diff_states(state, last.get("items") or {}, "etcd", "informer")))
        if name == "front-kill":
            # A front's clients resume their watches elsewhere from the shards' windows (issue 21): no 410.
            relists = [c for c in h.chains if c.expired is not None]
            if relists:
                v.append(checkers.Violation("relist", f"{len(relists)} watch chain(s) got a 410 after a front was "
                                                      f"killed: resumed by a relist, not from their RV",
                                            [{"t": round(c.expired[0], 2), "from_rv": c.expired[1],
                                              "message": c.expired[2]} for c in relists[:5]]))
        if not alive:
            v.append(checkers.Violation("crash", f"process gone: apiserver exit {api.exit_code()}, "
                                                 f"etcd alive {etcd.alive()}"))
        for note in run.notes:
            v.append(checkers.Violation("harness", note))

        writes = [op for op in h.ops if op.kind in checkers.WRITES]
        result.update({
            "ops": len(h.ops) + sum(len(c.sessions) for c in h.chains),
            "writes": len(writes),
            "acknowledged": sum(1 for op in writes if checkers.ok(op)),
            "conflicts": sum(1 for op in writes if op.status == 409),
            "requests": dict(sorted(collections.Counter(op.kind for op in h.ops).items())),
            "statuses": dict(sorted(collections.Counter(str(op.status) for op in h.ops).items())),
            "watch_expired": sum(1 for c in h.chains if c.expired is not None),
            "errors": dict(collections.Counter(f"{op.kind} {op.status}" for op in h.ops
                                               if not checkers.ok(op) and op.status != 409).most_common()),
            "watch_outcomes": dict(collections.Counter(s[3][:60] for c in h.chains for s in c.sessions).most_common(8)),
            "slowest": [op.brief() for op in sorted(h.ops, key=lambda o: -(o.longest or o.end - o.start))[:3]],
            "lists": sum(1 for op in h.ops if op.kind in checkers.LISTS),
            "watch_events": sum(sum(1 for e in c.events if e[1] != "BOOKMARK") for c in h.chains),
            "watch_chains": len(h.chains),
            "watches_from_zero": sum(1 for c in h.chains if c.from_zero),
            "sharded_lists": sum(1 for op in h.ops if op.shard and op.kind in checkers.LISTS and checkers.ok(op)),
            "sharded_watch_events": sum(sum(1 for e in c.events if e[1] != "BOOKMARK") for c in h.chains if c.shard),
            "etcd_events": len(truth.events),
            "compactions": len(run.compactions),
            "lost": sum(1 for x in v if x.checker == "writes"),
            "stale": sum(1 for x in v if x.checker == "reads"),
            "watch_violations": sum(1 for x in v if x.checker == "watch"),
            "linearizability": sum(1 for x in v if x.checker == "linearizability"),
            "other_violations": sum(1 for x in v if x.checker not in ("writes", "reads", "watch", "linearizability")),
            "recover_s": None if recover is None else round(recover, 2),
            "fault_at": round(run.fault_at, 2) if name not in ("none", "compaction") else None,
            "fault_window": None if run.etcd_fault is None else [round(x, 2) for x in run.etcd_fault],
            "fault_end": None if run.fault_end is None else round(run.fault_end, 2),
            "apiserver_restarts": api.restarts,
            "informer_converged_s": None if converged is None else round(converged, 2),
            "rss_mib": None if rss_end is None else round(rss_end, 1),
            "rss_samples": rss_samples,
            "truth_reconnects": truth.reconnects,
            **({"fault_info": run.notes_info} if run.notes_info else {}),
            **{k: (None if val is None else round(val, 2)) for k, val in info.items()},
            "violations": [x.as_dict() for x in v],
            "apiserver_log": api.log_path,
        })
    except Exception as e:  # noqa: BLE001 - a harness failure is a failed scenario, reported as such
        result.update({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(),
                       "violations": [{"checker": "harness", "message": f"{type(e).__name__}: {e}",
                                       "excerpt": []}]})
        if api is not None:
            result["apiserver_log"] = api.log_path
    finally:
        if informer is not None:
            await asyncio.to_thread(informer.stop)
        if truth is not None:
            await truth.stop()
        for a in (api, api2):
            if a is not None:
                await asyncio.to_thread(a.stop)
        if proxy is not None:
            proxy.stop()
        await asyncio.to_thread(etcd.stop)
    result["wall_s"] = round(time.monotonic() - t_start, 1)
    result["passed"] = not result["violations"]
    return result


# --- reporting ------------------------------------------------------------------------------------------------

COLUMNS = [("scenario", "scenario"), ("seed", "seed"), ("ops", "ops"), ("acknowledged", "acked writes"),
           ("lost", "lost"), ("stale", "stale reads"), ("watch_violations", "watch violations"),
           ("linearizability", "not linearizable"), ("other_violations", "other"), ("recover_s", "recover (s)"), ("rss_mib", "RSS MiB"),
           ("rss_vs_none", "RSS / none"), ("passed", "result")]
RSS_BOUND = 1.10   # RSS after a scenario within 10 % of the same run (seed, mode, kind) without the fault


def compare_rss(results: list[dict]) -> None:
    """RSS against the `none` run of the same seed, mode and kind (when it is among `results`): sets
    `rss_vs_none`, and a run more than 10 % above it gets a `memory` violation and fails."""
    base = {(r["seed"], r.get("mode"), r.get("kind")): r.get("rss_mib") for r in results if r.get("name") == "none"}
    for r in results:
        ref = base.get((r["seed"], r.get("mode"), r.get("kind")))
        if r.get("name") == "none" or not ref or not r.get("rss_mib"):
            continue
        r["rss_vs_none"] = round(r["rss_mib"] / ref, 3)
        # slow-watcher is not held to the bound: its writers write PAD-byte objects while the watcher is open
        # (the none run's do not), and the cache keeps them (objects and the event window), so its RSS is not
        # like for like; its ratio is shown, and the watcher's own buffer is bounded by its termination
        if r["rss_vs_none"] > RSS_BOUND and r.get("apiserver_restarts", 0) == 0 and r.get("name") != "slow-watcher":
            r.setdefault("violations", []).append(
                {"checker": "memory", "message": f"RSS {r['rss_mib']} MiB is {r['rss_vs_none']:.2f} x the "
                                                 f"no-fault run's {ref} MiB (bound {RSS_BOUND})",
                 "excerpt": r.get("rss_samples", [])[-6:]})
            r["other_violations"] = r.get("other_violations", 0) + 1
            r["passed"] = False


def summary(results: list[dict]) -> str:
    """One row per scenario over all its seeds, modes and kinds: runs, ops, acknowledged writes, lost,
    stale reads, watch violations, other violations, worst recovery, worst RSS ratio, passed runs."""
    groups: dict[str, list[dict]] = {}
    for r in results:   # by scenario name: its runs in every mode and kind together
        groups.setdefault(r.get("name") or r["scenario"], []).append(r)
    rows = [["scenario", "runs", "ops", "acked writes", "lost", "stale reads", "watch violations",
             "not linearizable", "other",
             "recover max (s)", "RSS / none max", "passed"]]
    for name, rs in groups.items():
        rec = [r["recover_s"] for r in rs if r.get("recover_s") is not None]
        ratio = [r["rss_vs_none"] for r in rs if r.get("rss_vs_none") is not None]
        rows.append([name, str(len(rs)), str(sum(r.get("ops", 0) for r in rs)),
                     str(sum(r.get("acknowledged", 0) for r in rs)),
                     *(str(sum(r.get(k, 0) for r in rs)) for k in ("lost", "stale", "watch_violations",
                                                                     "linearizability", "other_violations")),
                     f"{max(rec):.2f}" if rec else "-", f"{max(ratio):.2f}" if ratio else "-",
                     f"{sum(1 for r in rs if r.get('passed'))}/{len(rs)}"])
    return _grid(rows)


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def table(results: list[dict]) -> str:
    rows = [[h for _, h in COLUMNS]]
    for r in results:
        row = []
        for k, _ in COLUMNS:
            val = r.get(k)
            if k == "passed":
                val = "pass" if val else "FAIL"
            elif val is None:
                val = "-"
            row.append(str(val))
        rows.append(row)
    return _grid(rows)


def explain(result: dict, limit: int = 5) -> str:
    """The violations of a failed scenario, each with its excerpt of history."""
    out = []
    for x in result.get("violations", [])[:limit]:
        out.append(f"[{result['scenario']}] {x['checker']}: {x['message']}")
        for line in x.get("excerpt") or []:
            out.append("    " + json.dumps(line, default=str))
    more = len(result.get("violations", [])) - limit
    if more > 0:
        out.append(f"[{result['scenario']}] ... and {more} more (see the JSON)")
    if result.get("traceback"):
        out.append(result["traceback"])
    return "\n".join(out)
