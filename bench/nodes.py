"""Node heartbeats from kwok's simulated nodes (issue 13 §2, issue 22 §5): what a control plane absorbs, side by
side. Each count N runs in each of `--configs`: `kube` (kube-apiserver v1.37.2, kwok over TLS), `direct` (this
apiserver), `tier` (this apiserver behind `python -m nodetier` at its defaults: kwok and the probe talk to the
tier), `lease-etcd` (direct, with Leases on a no-fsync tmpfs etcd of their own, as `--embedded-lease-etcd`),
`tier-lease-etcd` (the node plane: the tier in front of this apiserver with the Lease etcd). Per configuration
it also reports the tier's and each etcd's CPU, the control plane's Lease writes and CPU per renewal absorbed,
behind a tier how old the control plane's copy of a Lease was when a forward replaced it
(`nodetier_control_plane_renewal_age_seconds`: p99 and the highest bucket reached), and, with
`--controller-manager` (default), what kube-controller-manager v1.37.2's node lifecycle controller (upstream's
50 s grace, 5 s period) on the control plane decided: the nodes it marked NotReady (leasegen's runs create a
Ready Node for each Lease; a count with any is not sustained), and its CPU.

For each node count N: a fresh apiserver (watch cache on, default flags) over a fresh current etcd of its own
(issue 22 §5: each configuration over its own etcd, so no run inherits another's history and database), kwok
v0.8.0 (tools/build_kwok.py) with upstream's stages (tools/kwok/) and 40 s node leases (renewed every ~10 s, as
kubelets do), then N Nodes annotated for kwok created through the API, spread over
at least one renewal period so that the renewals are spread as a cluster's kubelets' are (nodes created at
once would renew in lockstep: all N within 0.4 s every 10 s). Once every node
is Ready and every Lease exists, and one lease period has passed, a window of --window seconds measures:

* heartbeat writes/s absorbed: every write the server answered (apiserver_request_total deltas of POST, PUT,
  PATCH, DELETE), and the share that are Lease renewals (PUT leases); Node status patches (the
  heartbeat-with-lease stage re-patches each node every 10-20 minutes: ~N/905 per second in steady state;
  none in a window that starts within 10 minutes of the nodes' initialisation) are counted apart;
* apiserver CPU (user+system from /proc, cores = CPU-seconds per second) and per 1,000 nodes; kwok's CPU;
* etcd write rate: etcd's revision delta per second (every write is one revision);
* p99 latency of a Lease renewal, twice: server-side from apiserver_request_duration_seconds{verb="PUT",
  resource="leases"} (bucket deltas, linear inside a bucket, as histogram_quantile), and client-side from a
  probe that renews its own Lease in kube-node-lease 5 times a second as kwok does (a PUT of the last
  returned object) and times each round trip;
* at the window's end: how many revisions the Lease watch cache trails etcd by (/debug/residency);
* after the window: Leases whose renewTime is older than their 40 s duration (expired: the node-lifecycle
  controller would mark the node NotReady) and older than 20 s (late: two missed renewals).

`--generator leasegen` replaces kwok with bench/go/leasegen (issue 22 §5): Leases only, no Nodes, renewed exactly
as the kubelet's lease controller renews them (see its source), from a compiled process, for counts kwok cannot
drive on this machine. The window is then leasegen's own, and the row adds leasegen's view of it: renewals/s,
the share renewed on time (within 1.1 periods of the node's previous renewal) and its round trips.

A count is "sustained" when both p99 renewal latencies are under 1 s, Lease renewals run at >= 85 % of the
expected N/10.2 per second (10 s plus kwok's jitter of up to 4 %; a window holds a whole number of renewal
rounds, hence the margin), no Lease expired and the controller manager marked no node NotReady. The largest
sustained N is stated (`--search` keeps doubling N past the list until one is not sustained, up to --max-nodes).

    .venv/bin/python -m bench.nodes [--quick] [--nodes 1000,5000,10000] [--window 60] [--search]
                                    [--configs kube,direct,tier,lease-etcd,tier-lease-etcd]
                                    [--generator kwok|leasegen] [--controller-manager true|false]
                                    [--out bench/out/nodes.json] [--docs docs/nodes.json]

Progress on stderr, the table on stdout, every figure with the machine's load average to --out, and a copy
to --docs (the committed figures). The machine has 2 cores, shared by etcd, the apiserver, kwok and this
process: absolute figures depend on that (the load average is recorded).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import statistics
import sys
import time

import aiohttp
import orjson

from bench.harness import (JSON_CT, Apiserver, BenchError, check, cpu_probe_ms, current_etcd, get_json, log,
                           machine_shares, machine_ticks, proc_cpu_s, proc_mem_mib, run_pool, ssl_context, versions,
                           wait_all_ready_async, write_json)
from tests.helpers.apiserver import ApiserverError
from tests.helpers.kube import KubeApiserver
from tests.helpers.kwok import (NODE_LEASE_NAMESPACE, KubeControllerManagerProcess, KwokProcess, kwok_node,
                                ready_node)
from tests.helpers.nodetier import NodeTierProcess

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
LEASE_SECONDS = 40
RENEW_SECONDS = LEASE_SECONDS / 4
# kwok renews every RENEW_SECONDS with a jitter of up to 4 % (wait.Jitter, as the kubelet's lease
# controller): the mean period is 1.02 x RENEW_SECONDS.
RENEW_PERIOD = RENEW_SECONDS * 1.02
PROBE_RATE = 5.0
TIER_FORWARD_INTERVAL = 30.0    # python -m nodetier's default --forward-interval
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
# Figures of every measured count (the smoke test checks each).
FIGURES = ("writes_per_s", "lease_renewals_per_s", "lease_share", "apiserver_cpu_cores",
           "apiserver_cpu_cores_per_1000_nodes", "etcd_writes_per_s", "lease_put_p99_server_s",
           "lease_put_p99_probe_s", "kwok_cpu_cores", "apiserver_rss_mib")


# --- metrics ----------------------------------------------------------------------------------------------

def parse_metrics(text: str) -> dict[tuple[str, frozenset], float]:
    """Prometheus text -> {(sample name, labels): value} (the samples this benchmark reads)."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        if fam.name not in ("apiserver_request", "apiserver_request_duration_seconds",
                            "apiserver_watch_cache_resource_version", "nodetier_renewals_absorbed",
                            "nodetier_renewals_fast_path", "nodetier_renewals_raw_path",
                            "nodetier_control_plane_renewal_age_seconds",
                            "nodetier_forward_duration_seconds", "nodetier_forward_wait_seconds",
                            "nodetier_forwards", "python_gc_duration_seconds", "python_event_loop_lag_seconds"):
            continue
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


async def metrics(s: aiohttp.ClientSession, base: str) -> dict:
    async with s.get(base + "/metrics") as r:
        return parse_metrics((await check(r, "GET /metrics")).decode())


def delta_sum(a: dict, b: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v - a.get(k, 0.0) for k, v in b.items() if k[0] == name and want <= k[1])


def bucket_deltas(a: dict, b: dict, name: str, **labels: str) -> dict[float, float]:
    """{upper bound: cumulative count} of histogram `name` between snapshots a and b, summed over the series
    whose labels include `labels`."""
    want = set(labels.items())
    buckets: dict[float, float] = {}
    for k, v in b.items():
        if k[0] == name + "_bucket" and want <= k[1]:
            le = float(dict(k[1])["le"])
            buckets[le] = buckets.get(le, 0.0) + v - a.get(k, 0.0)
    return buckets


def histogram_quantile(a: dict, b: dict, q: float, name: str = "apiserver_request_duration_seconds",
                       **labels: str) -> float | None:
    """The q-quantile of the observations between snapshots a and b of the histogram `name` (bucket deltas;
    linear interpolation inside the bucket, as Prometheus' histogram_quantile)."""
    buckets = bucket_deltas(a, b, name, **labels)
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for le in bounds:
        if buckets[le] >= rank:
            if le == float("inf"):
                return prev_bound
            inside = buckets[le] - prev_count
            return prev_bound + (le - prev_bound) * ((rank - prev_count) / inside if inside else 1.0)
        prev_bound, prev_count = le, buckets[le]
    return bounds[-1]


def histogram_max(a: dict, b: dict, name: str, **labels: str) -> float | None:
    """The upper bound of the bucket that holds the largest observation of histogram `name` between snapshots
    a and b (the smallest bound whose cumulative count reached the total; inf if only +Inf did)."""
    cum = bucket_deltas(a, b, name, **labels)
    total = cum.get(float("inf"), 0.0)
    if total <= 0:
        return None
    return min(le for le, c in cum.items() if c >= total)


def quantile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# --- one node count -----------------------------------------------------------------------------------------

async def items(s, url: str, what: str) -> list[dict]:
    """Every object, from the watch cache as it is (resourceVersion=0: no wait for freshness; under load the
    cache may trail etcd by thousands of revisions, and a consistent or paged read then times out with 504
    "Too large resource version", as upstream's does)."""
    return (await get_json(s, url, {"resourceVersion": "0"}, f"list {what}"))["items"]


async def count_ready(s, base: str) -> tuple[int, int]:
    """(Ready nodes, Leases in kube-node-lease but the probe's)."""
    ready = sum(any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (it.get("status") or {}).get("conditions") or [])
                for it in await items(s, base + "/api/v1/nodes", "nodes"))
    leases = sum(it["metadata"]["name"] != "bench-probe" for it in await items(s, base + LEASES, "leases"))
    return ready, leases


async def lease_staleness(s, base: str) -> dict:
    """Leases by renewTime age: older than the lease duration (expired) and than two renew intervals; the
    oldest age and the p99 (seconds, of the Leases that have a renewTime)."""
    now = time.time()
    expired = late = total = 0
    ages = []
    for it in await items(s, base + LEASES, "leases"):
        if it["metadata"]["name"] == "bench-probe":
            continue
        total += 1
        rt = (it.get("spec") or {}).get("renewTime")
        age = now - datetime.datetime.strptime(rt[:19], "%Y-%m-%dT%H:%M:%S").replace(
            tzinfo=datetime.timezone.utc).timestamp() if rt else float("inf")
        expired += age > LEASE_SECONDS
        late += age > 2 * RENEW_SECONDS
        if rt:
            ages.append(age)
    return {"leases": total, "expired": expired, "late": late,
            "age_max_s": max(ages) if ages else None, "age_p99_s": quantile(ages, 0.99) if ages else None}


async def probe(s, base: str, stop: asyncio.Event) -> tuple[list[float], int]:
    """Renew a Lease of our own PROBE_RATE times a second (PUT of the last returned object, as kwok's lease
    controller does); the round-trip seconds of each renewal, and how many answers were 429 (too many requests
    in flight: retried after Retry-After, as client-go does)."""
    url = base + LEASES
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "bench-probe", "namespace": NODE_LEASE_NAMESPACE},
            "spec": {"holderIdentity": "bench", "leaseDurationSeconds": LEASE_SECONDS}}
    async with s.post(url, data=orjson.dumps(body), headers=JSON_CT) as r:
        cur = orjson.loads(await check(r, "create probe lease", ok=(201, 409)))
    if cur.get("kind") != "Lease":
        cur = await get_json(s, url + "/bench-probe")
    lat: list[float] = []
    t0 = time.perf_counter()
    i = 0
    throttled = 0
    while not stop.is_set():
        due = t0 + i / PROBE_RATE
        i += 1
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        cur["spec"]["renewTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        t = time.perf_counter()
        async with s.put(url + "/bench-probe", data=orjson.dumps(cur), headers=JSON_CT) as r:
            b = await r.read()
            if r.status == 200:
                lat.append(time.perf_counter() - t)
                cur = orjson.loads(b)
            elif r.status == 409:
                cur = await get_json(s, url + "/bench-probe")
            elif r.status == 429:
                throttled += 1
                await asyncio.sleep(float(r.headers.get("Retry-After") or 1))
            else:
                raise BenchError(f"probe renewal: HTTP {r.status}: {b[:300]!r}")
    return lat, throttled


async def create_nodes(s, base: str, n: int, clients: int = 16) -> float:
    """Create n kwok nodes, spread over at least one renewal period, with kwok already running: each node's
    Lease is created when its node appears, so the renewals are spread over the period as a cluster's
    kubelets' are, instead of all N in the same 0.4 s (kwok renews every 10 s + up to 4 %, so phases that
    start together stay together for hours). Returns the seconds taken."""
    t0 = time.perf_counter()

    async def create(i):
        due = t0 + i * RENEW_PERIOD / n
        now = time.perf_counter()
        if due > now:
            await asyncio.sleep(due - now)
        await post_node(s, base, kwok_node(f"kwok-{i:06d}"))
    elapsed, _ = await run_pool(n, clients, create, "nodes", steps=4 if n >= 2000 else 0)
    return elapsed


async def post_node(s, base: str, node: dict, ok: tuple[int, ...] | None = None) -> None:
    """POST a Node; a 429 (max requests in flight) is retried, as client-go does."""
    for _ in range(100):
        async with s.post(base + "/api/v1/nodes", data=orjson.dumps(node), headers=JSON_CT) as r:
            if r.status != 429:
                await check(r, "create node", ok=ok)
                return
            await r.read()
        await asyncio.sleep(0.2)
    raise BenchError("create node: still 429 after 100 tries")


async def create_ready_nodes(s, base: str, n: int, prefix: str = "lg-", clients: int = 16) -> float:
    """leasegen's nodes (its Leases are PREFIX000000..): Ready Nodes of the same names, so a real controller
    manager has nodes to judge."""
    async def create(i):
        await post_node(s, base, ready_node(f"{prefix}{i:06d}", "leasegen renews this node's Lease"), ok=(201, 409))
    elapsed, _ = await run_pool(n, clients, create, "nodes", steps=4 if n >= 2000 else 0)
    return elapsed


async def node_verdicts(s, base: str) -> dict:
    """What the real node lifecycle controller decided: Nodes whose Ready condition is not True (leasegen's
    nodes have no kubelet to set it back), and the nodes with a NodeNotReady event in the core events. The
    controller records them as core/v1 Events in `default` (for one node they are there: the node-plane
    robustness scenarios check it), yet none was found in any run here, even where it had marked nodes
    NotReady; why not at this scale was not investigated, so they are kept in the JSON only."""
    nodes = await items(s, base + "/api/v1/nodes", "nodes")
    not_ready = sum(not any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (it.get("status") or {}).get("conditions") or []) for it in nodes)
    events = await items(s, base + "/api/v1/events", "events")
    marked = {e.get("involvedObject", {}).get("name") for e in events if e.get("reason") == "NodeNotReady"}
    return {"nodes": len(nodes), "not_ready": not_ready, "node_not_ready_events": len(marked)}


# leasegen stands in for kubelets on other machines, so the less of these two cores it takes the better: one P
# (fewer wake-ups across cores: futex 11 %, the scheduler's findRunnable 19 % of its profile) and a collection
# per 4x heap growth. At 30,000 nodes it then took 105-106 against 127 us of CPU per renewal (0.31 against 0.36
# cores, one run with the Go defaults between two without), its renewals and latencies measured the same way.
LEASEGEN_ENV = {**os.environ, "GOMAXPROCS": "1", "GOGC": "400"}


class LeaseGen:
    """bench/go/leasegen (issue 22 §5): N Leases renewed as the kubelet's lease controller renews them (a PUT of
    the last answer with a new renewTime, a GET and a retry on 409, every 10 s + up to 4 %), from a compiled
    process, where kwok cannot drive that many nodes here. Leases only: no Nodes, no node status patches.
    Its measuring window is its own (after the Leases exist and `warmup`); `window()` waits for its start,
    `done()` for its end, `result()` gives its JSON (renewals, latencies, on-time share, its own CPU)."""

    def __init__(self, binary: str, base: str, n: int, window: float, warmup: float, tls: tuple | None):
        self.argv = [binary, "-server", base, "-nodes", str(n), "-lease-seconds", str(LEASE_SECONDS),
                     "-duration", f"{window}s", "-warmup", f"{warmup}s"]
        if tls:
            ca, (cert, key) = tls
            self.argv += ["-ca", ca, "-cert", cert, "-key", key]
        self.proc: asyncio.subprocess.Process | None = None
        self.err: list[str] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def start(self) -> "LeaseGen":
        self.proc = await asyncio.create_subprocess_exec(*self.argv, stdout=asyncio.subprocess.PIPE,
                                                         stderr=asyncio.subprocess.PIPE, env=LEASEGEN_ENV)
        return self

    async def _until(self, text: str, timeout: float) -> None:
        async def read():
            while True:
                line = (await self.proc.stderr.readline()).decode()
                if not line:
                    raise BenchError(f"leasegen exited: {''.join(self.err[-20:])}")
                self.err.append(line)
                if text in line:
                    return
        try:
            async with asyncio.timeout(timeout):
                await read()
        except TimeoutError:
            raise BenchError(f"leasegen: no {text!r} in {timeout:.0f} s: {''.join(self.err[-20:])}") from None

    async def window(self, timeout: float) -> None:
        await self._until("window starts", timeout)

    async def done(self, timeout: float) -> None:
        await self._until("window ends", timeout)

    async def result(self) -> dict:
        out, err = await self.proc.communicate()
        if self.proc.returncode != 0:
            raise BenchError(f"leasegen exited {self.proc.returncode}: {''.join(self.err[-20:])}{err.decode()[-2000:]}")
        return orjson.loads(out.strip().splitlines()[-1])

    def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()


class KubeTarget:
    """kube-apiserver v1.37.2 (its own etcd prefix, protobuf storage as it defaults) where a run expects ours."""

    def __init__(self, kube: KubeApiserver):
        self.kube, self.base, self.ca, self.cert = kube, kube.url, kube.ca, kube.client_cert
        self.ssl = ssl_context({"ca": kube.ca, "cert": kube.client_cert})

    @property
    def pid(self) -> int:
        return self.kube.proc.pid

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)

    def alive(self) -> None:
        if self.kube.proc is None or self.kube.proc.poll() is not None:
            raise BenchError(f"kube-apiserver exited: {self.kube.tail()}")

    def stop(self) -> None:
        self.kube.stop()


async def start_kwok(s, n: int, config: str, p: argparse.Namespace, srv, front: str, tier: bool):
    """kwok with N nodes created through the control plane, every node Ready with its Lease, then one lease
    period (behind the tier: its forward interval) to settle. (kwok, seconds creating, seconds settling)"""
    t_kwok = time.perf_counter()
    kwok = KwokProcess(front, lease_seconds=LEASE_SECONDS, options={
        "nodeLeaseParallelism": p.lease_parallelism, "nodePlayStageParallelism": 16},
        ca=getattr(srv, "ca", None), cert=getattr(srv, "cert", None)).start()
    log(f"N={n} {config}: creating {n} kwok nodes over at least one renewal period (kwok running)")
    create_s = await create_nodes(s, srv.base, n)
    deadline = time.monotonic() + p.settle_timeout
    while True:
        if not kwok.alive():
            raise BenchError(f"kwok exited: {kwok.log()[-2000:]}")
        ready, leases = await count_ready(s, front)
        if ready >= n and leases >= n:
            break
        if time.monotonic() > deadline:
            raise BenchError(f"N={n}: {ready} Ready nodes and {leases} Leases after {p.settle_timeout} s")
        await asyncio.sleep(3.0 if n >= 2000 else 0.5)
    settle_s = time.perf_counter() - t_kwok
    log(f"N={n} {config}: all Ready with Leases {settle_s:.1f} s after kwok started; one lease period to settle")
    # Behind the tier, the forwarder's steady state: every Lease forwarded once since its creation.
    await asyncio.sleep((TIER_FORWARD_INTERVAL if tier else RENEW_SECONDS) + 2)
    return kwok, create_s, settle_s


# The node lifecycle controller records a `RegisteredNode` event for every Node it first sees, at its client's
# QPS: at the default 20, 5,000 Nodes took ~250 s, so the events (~0.06 cores of apiserver and etcd, a fifth of
# our control plane's CPU at 5,000 nodes) ran through the whole window. The controller gets the QPS large
# clusters give it, and the window starts once they are drained (kcm_drain_s); the window's event POSTs are
# reported (`control_plane_event_posts_per_s`) so a run shows whether they were.
KCM_QPS = 100


def kcm_drain_s(n: int) -> float:
    """Seconds for the controller manager to record its `RegisteredNode` events for n Nodes, with margin."""
    return n / KCM_QPS * 1.2 + 10


def start_kcm(srv, config: str) -> KubeControllerManagerProcess:
    """kube-controller-manager v1.37.2's node lifecycle controller on the control plane: upstream's lease and
    grace defaults, its client at KCM_QPS."""
    tls = {"ca": srv.ca, "cert": srv.cert} if config == "kube" else {}
    return KubeControllerManagerProcess(srv.base, grace=50, monitor_period=5, qps=KCM_QPS, **tls).start()


async def start_leasegen(n: int, config: str, p: argparse.Namespace, srv, front: str, tier: bool,
                         min_warmup: float = 0.0):
    """leasegen with N Leases; returns once its window starts (the Leases exist, then the same settling as
    kwok's, or `min_warmup` seconds if longer). (leasegen, None, seconds until its window)"""
    t_gen = time.perf_counter()
    warmup = max((TIER_FORWARD_INTERVAL if tier else RENEW_SECONDS) + 2, min_warmup)
    gen = await LeaseGen(p.leasegen, front, n, p.window, warmup,
                         (srv.ca, srv.cert) if config == "kube" else None).start()
    log(f"N={n} {config}: leasegen renewing {n} Leases; its window starts {warmup:.0f} s after they exist")
    await gen.window(p.settle_timeout)
    return gen, None, time.perf_counter() - t_gen


async def measure(n: int, etcd, p: argparse.Namespace, config: str = "direct") -> dict:
    """One count in one configuration: "kube" (kwok and the probe on kube-apiserver v1.37.2), "direct" (on this
    apiserver), "tier" (on a node tier, `python -m nodetier` with its defaults, in front of this apiserver),
    "lease-etcd" or "tier-lease-etcd" (the same, Leases on their own no-fsync etcd)."""
    etcd_ep = etcd.endpoint
    prefix = f"/registry-nodes-{os.getpid()}-{config}-{n}"
    probe_ms = cpu_probe_ms()      # before this count's processes start: how fast the machine is now
    driver = tier = lease_db = kcm = None
    if config == "kube":
        srv = KubeTarget(KubeApiserver(etcd_ep, prefix=prefix, protobuf=True, sharding_gate=False))
    else:
        extra: tuple[str, ...] = ()
        if config in ("lease-etcd", "tier-lease-etcd"):   # what --embedded-lease-etcd starts: no fsync, tmpfs,
            # compacted every minute
            from storage.embedded import lease_etcd
            lease_db = lease_etcd(etcd.binary)
            extra = ("--etcd-servers-overrides", f"coordination.k8s.io/leases#{lease_db.endpoint}")
        srv = Apiserver(etcd_ep, *extra, etcd_prefix=prefix, name=f"nodes-{n}", log_name=f"bench-nodes-{n}").start()
    conn = aiohttp.TCPConnector(limit=64, ssl=srv.ssl if config == "kube" else False)
    try:
        if config == "kube":
            await asyncio.to_thread(srv.kube.start)
        else:
            await wait_all_ready_async([srv], 120)
        front = srv.base
        if config in ("tier", "tier-lease-etcd"):
            tier = NodeTierProcess(srv.base, *p.tier_flags.split(), name=f"nodetier-{n}",
                                   log_name=f"bench-nodetier-{n}",
                                   ready_timeout=60).start()
            await wait_all_ready_async([tier], 60)
            front = tier.base
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as s:
            if p.generator == "leasegen":
                if p.controller_manager:
                    log(f"N={n} {config}: creating {n} Ready nodes for leasegen's Leases")
                    await create_ready_nodes(s, srv.base, n)
                    kcm = start_kcm(srv, config)
                driver, create_s, settle_s = await start_leasegen(
                    n, config, p, srv, front, tier is not None, kcm_drain_s(n) if p.controller_manager else 0.0)
            else:
                driver, create_s, settle_s = await start_kwok(s, n, config, p, srv, front, tier is not None)
                if p.controller_manager:
                    kcm, drain = start_kcm(srv, config), kcm_drain_s(n)
                    log(f"N={n} {config}: {drain:.0f} s for the controller manager's RegisteredNode events")
                    await asyncio.sleep(drain)
            m0, c0 = await metrics(s, front), await metrics(s, srv.base)
            cpu0, kcpu0, ecpu0 = srv.cpu_s(), proc_cpu_s(driver.pid), proc_cpu_s(etcd._proc.pid)
            kcpu_kcm0 = proc_cpu_s(kcm.pid) if kcm is not None else 0.0
            tcpu0 = proc_cpu_s(tier.pid) if tier else 0.0
            lcpu0 = proc_cpu_s(lease_db._proc.pid) if lease_db else 0.0
            lrev0 = await etcd_rev(lease_db.endpoint) if lease_db else 0
            rev0 = await etcd_rev(etcd_ep)
            ticks0 = machine_ticks()
            t0 = time.perf_counter()
            stop = asyncio.Event()
            ptask = asyncio.create_task(probe(s, front, stop))
            if isinstance(driver, LeaseGen):
                await driver.done(p.window + 60)
            else:
                await asyncio.sleep(p.window)
            stop.set()
            lat, probe_429 = await ptask
            el = time.perf_counter() - t0
            machine = machine_shares(ticks0, machine_ticks())
            # (leasegen may have exited at its window's end: it reports its own CPU)
            kcpu1 = kcpu0 if isinstance(driver, LeaseGen) else proc_cpu_s(driver.pid)
            cpu1, ecpu1 = srv.cpu_s(), proc_cpu_s(etcd._proc.pid)
            kcpu_kcm1 = proc_cpu_s(kcm.pid) if kcm is not None else 0.0
            tcpu1 = proc_cpu_s(tier.pid) if tier else 0.0
            lcpu1 = proc_cpu_s(lease_db._proc.pid) if lease_db else 0.0
            lrev1 = await etcd_rev(lease_db.endpoint) if lease_db else 0
            rev1 = await etcd_rev(etcd_ep)
            m1, c1 = await metrics(s, front), await metrics(s, srv.base)
            if config == "kube":   # its watch cache's revision (apiserver_watch_cache_resource_version)
                cache_rv = max((v for (name, labels), v in c1.items() if name == "apiserver_watch_cache_resource_version"
                                and dict(labels).get("resource") == "leases"), default=0)
            else:
                dbg = await get_json(s, srv.base + "/debug/residency")
                cache_rv = (dbg["resources"].get("leases.coordination.k8s.io") or {}).get("rv", 0)
            rss = proc_mem_mib(srv.pid)["VmRSS"]
            tier_rss = proc_mem_mib(tier.pid)["VmRSS"] if tier else None
            stale = await lease_staleness(s, srv.base)    # the control plane's copies: what a controller sees
            verdicts = await node_verdicts(s, srv.base) if kcm is not None else None
            if kcm is not None and not kcm.alive():
                raise BenchError(f"kube-controller-manager exited: {kcm.log()[-2000:]}")
            gen = await driver.result() if isinstance(driver, LeaseGen) else None
            srv.alive()
            if tier:
                tier.alive()
    finally:
        try:
            if kcm is not None:
                kcm.stop()
            if driver is not None:
                driver.stop()
            if tier is not None:
                tier.stop(strict=False)     # (a hung shutdown must not hide the run's own error)
        finally:                            # (nor leave the apiserver running: it did once, for an hour)
            srv.stop()
            if lease_db is not None:
                lease_db.stop()
    writes = sum(delta_sum(m0, m1, "apiserver_request_total", verb=v) for v in WRITE_VERBS)
    probe_n = len(lat)
    # Renewals absorbed: the PUTs answered 200 (a 409 is a renewal that did not happen: kwok retries it later).
    lease_puts = delta_sum(m0, m1, "apiserver_request_total", verb="PUT", resource="leases", code="200") - probe_n
    lease_conflicts = delta_sum(m0, m1, "apiserver_request_total", verb="PUT", resource="leases", code="409")
    writes -= probe_n   # the probe's own renewals are not kwok's heartbeats
    node_patches = delta_sum(m0, m1, "apiserver_request_total", verb="PATCH", resource="nodes")
    errors = sum(delta_sum(m0, m1, "apiserver_request_total", verb=v, code=c) for v in WRITE_VERBS
                 for c in ("409", "429", "500", "503", "504"))
    cp_writes = sum(delta_sum(c0, c1, "apiserver_request_total", verb=v) for v in WRITE_VERBS)
    cp_lease_puts = delta_sum(c0, c1, "apiserver_request_total", verb="PUT", resource="leases", code="200")
    cores = (cpu1 - cpu0) / el
    p99_server = histogram_quantile(m0, m1, 0.99, verb="PUT", resource="leases")
    p99_probe = quantile(lat, 0.99)
    renew_rate = lease_puts / el
    expected = n / RENEW_PERIOD
    out = {
        "config": config, "nodes": n, "window_s": el, "create_nodes_s": create_s, "kwok_settle_s": settle_s,
        "writes_per_s": writes / el, "lease_renewals_per_s": renew_rate,
        "lease_renewals_expected_per_s": expected, "lease_share": lease_puts / writes if writes else 0.0,
        "node_status_patches_per_s": node_patches / el, "write_errors": errors,
        "lease_conflicts_per_s": lease_conflicts / el,
        "apiserver_cpu_cores": cores, "apiserver_cpu_cores_per_1000_nodes": cores / (n / 1000.0),
        "tier_cpu_cores": (tcpu1 - tcpu0) / el if tier else None,
        # the share of the tier's absorbed renewals answered on its fast path (nodetier.server.fast_renewal)
        "tier_fast_path_share": delta_sum(m0, m1, "nodetier_renewals_fast_path_total")
        / max(1.0, delta_sum(m0, m1, "nodetier_renewals_absorbed_total")) if tier else None,
        # ... and of those, answered from their bytes before aiohttp (nodetier.rawpath)
        "tier_raw_path_share": delta_sum(m0, m1, "nodetier_renewals_raw_path_total")
        / max(1.0, delta_sum(m0, m1, "nodetier_renewals_absorbed_total")) if tier else None,
        # the control plane's copy of a Lease: how old its renewTime was when a forward replaced it (the oldest
        # renewal a reader of the control plane saw during the window), p99 and the highest bucket reached
        "tier_cp_age_p99_s": histogram_quantile(m0, m1, 0.99, "nodetier_control_plane_renewal_age_seconds")
        if tier else None,
        "tier_cp_age_max_bucket_s": histogram_max(m0, m1, "nodetier_control_plane_renewal_age_seconds")
        if tier else None,
        # the tier's forwards: p99 from due to answered, and how many failed (by result: 409, 429, 5xx, unreachable)
        "tier_forward_p99_s": histogram_quantile(m0, m1, 0.99, "nodetier_forward_duration_seconds")
        if tier else None,
        # ... and how long due renewals waited for the forwarder (its tick and budget): p99 and the highest bucket
        "tier_forward_wait_p99_s": histogram_quantile(m0, m1, 0.99, "nodetier_forward_wait_seconds")
        if tier else None,
        "tier_forward_wait_max_bucket_s": histogram_max(m0, m1, "nodetier_forward_wait_seconds") if tier else None,
        "tier_forwards_failed": {r: delta_sum(m0, m1, "nodetier_forwards_total", why="renewal", result=r)
                                 for r in {dict(k[1]).get("result") for k in m1 if k[0] == "nodetier_forwards_total"}
                                 if r != "ok"} if tier else None,
        # what stopped the event loop of the process the nodes talk to (the tier, or our apiserver direct)
        **front_pauses(m0, m1, el, ours=config != "kube"),
        "etcd_cpu_cores": (ecpu1 - ecpu0) / el,
        "lease_etcd_cpu_cores": (lcpu1 - lcpu0) / el if lease_db else None,
        "lease_etcd_writes_per_s": (lrev1 - lrev0) / el if lease_db else None,
        "control_plane_writes_per_s": cp_writes / el, "control_plane_lease_puts_per_s": cp_lease_puts / el,
        "control_plane_event_posts_per_s": delta_sum(c0, c1, "apiserver_request_total", verb="POST",
                                                     resource="events") / el,
        # behind a tier: the control plane's own time for the forwarded PUTs (server-side p50 / p99)
        "control_plane_put_p50_server_s": histogram_quantile(c0, c1, 0.50, verb="PUT", resource="leases")
        if tier else None,
        "control_plane_put_p99_server_s": histogram_quantile(c0, c1, 0.99, verb="PUT", resource="leases")
        if tier else None,
        "control_plane_writes_per_renewal": cp_lease_puts / lease_puts if lease_puts else None,
        "control_plane_cpu_s_per_renewal": ((cpu1 - cpu0) + (ecpu1 - ecpu0) + (lcpu1 - lcpu0)) / lease_puts
        if lease_puts else None,
        # the "control plane (apiserver + main etcd)": the Lease etcd, where there is one, left out
        "apiserver_main_etcd_cpu_s_per_renewal": ((cpu1 - cpu0) + (ecpu1 - ecpu0)) / lease_puts
        if lease_puts else None,
        "generator": p.generator,
        "kwok_cpu_cores": (kcpu1 - kcpu0) / el if gen is None else None,
        "leasegen_cpu_cores": gen["cpu_s"] / gen["window_s"] if gen is not None else None,
        # leasegen's own view of its window: renewals answered 200, the share within 1.1 periods of the node's
        # previous one, its PUTs' round trips (409s included), conflicts and other errors
        **({f"leasegen_{k}": gen[k] for k in ("renewals_per_s", "expected_per_s", "on_time", "p50_ms", "p99_ms",
                                               "max_ms", "conflicts", "errors")} if gen else {}),
        "etcd_writes_per_s": (rev1 - rev0) / el,
        "lease_put_p50_server_s": histogram_quantile(m0, m1, 0.50, verb="PUT", resource="leases"),
        "lease_put_p99_server_s": p99_server,
        "lease_put_p50_probe_s": quantile(lat, 0.50), "lease_put_p99_probe_s": p99_probe,
        "lease_put_max_probe_s": max(lat) if lat else None, "probe_renewals": probe_n, "probe_429": probe_429,
        "apiserver_rss_mib": rss, "tier_rss_mib": tier_rss,
        "lease_cache_lag_revisions": max(0, (lrev1 if lease_db else rev1) - cache_rv), **{f"leases_{k}": v for k, v in stale.items()},
        "loadavg_after": list(os.getloadavg()),
        # the machine itself: a fixed loop's time before the count started its processes, and what its cores did
        # during the window (stolen by the hypervisor included); with the CPU each process spent per operation
        # below, a run that is slower because the machine was slower is told from one in a slower state
        "machine_cpu_probe_ms": probe_ms, **{f"machine_{k}": v for k, v in machine.items()},
        "cpu_us_per_op": cpu_per_op(tier is not None, lease_puts, cp_lease_puts, cp_writes,
                                    (rev1 - rev0) + (lrev1 - lrev0),
                                    cpu1 - cpu0, tcpu1 - tcpu0, (ecpu1 - ecpu0) + (lcpu1 - lcpu0),
                                    gen["cpu_s"] if gen else None, gen["renewals_per_s"] * gen["window_s"]
                                    if gen else None),
        # the real node lifecycle controller (upstream's defaults: 50 s grace, 5 s period) on the control plane
        "kcm_nodes": verdicts["nodes"] if verdicts else None,
        "kcm_cpu_cores": (kcpu_kcm1 - kcpu_kcm0) / el if kcm is not None else None,
        "kcm_nodes_not_ready": verdicts["not_ready"] if verdicts else None,
        "kcm_node_not_ready_events": verdicts["node_not_ready_events"] if verdicts else None,
    }
    out["sustained"] = bool(p99_server is not None and p99_server < 1.0 and p99_probe is not None
                            and p99_probe < 1.0 and renew_rate >= 0.85 * expected and stale["expired"] == 0
                            and not (verdicts and verdicts["not_ready"]))
    log(f"N={n} {config}: {out['writes_per_s']:.0f} writes/s ({out['lease_share'] * 100:.0f} % Lease renewals, "
        f"{renew_rate:.0f}/s of {expected:.0f}/s expected), apiserver {cores:.2f} cores "
        f"({out['apiserver_cpu_cores_per_1000_nodes']:.3f} per 1k nodes)"
        + (f", tier {out['tier_cpu_cores']:.2f} cores" if tier else "")
        + (f", lease etcd {out['lease_etcd_writes_per_s']:.0f} writes/s ({out['lease_etcd_cpu_cores']:.2f} cores)"
           if lease_db else "")
        + f", etcd {out['etcd_writes_per_s']:.0f} writes/s ({out['etcd_cpu_cores']:.2f} cores), control-plane "
        f"Lease writes {out['control_plane_lease_puts_per_s']:.0f}/s, p99 renewal {fmt_s(p99_server)} server / "
        f"{fmt_s(p99_probe)} probe, expired leases {stale['expired']}"
        + (f", control plane's renewTime age at forward p99 {out['tier_cp_age_p99_s'] or 0:.1f} s (max bucket "
           f"{out['tier_cp_age_max_bucket_s']} s)" if tier else "") + ": "
        f"{'sustained' if out['sustained'] else 'NOT sustained'}")
    return out


def front_pauses(m0: dict, m1: dict, el: float, ours: bool) -> dict:
    """machinery.pauses figures of our process over the window (None for kube-apiserver): the share of the window
    spent collecting garbage (all told and per generation), the collections per generation, the longest full
    collection's bucket, and how late the loop ran a callback it had scheduled (p99, highest bucket)."""
    if not ours:
        return dict.fromkeys(("front_gc_share", "front_gc_share_by_generation", "front_gc_collections_by_generation",
                              "front_gc2_max_bucket_s", "front_loop_lag_p99_s", "front_loop_lag_max_bucket_s"))
    gc_sums = [delta_sum(m0, m1, "python_gc_duration_seconds_sum", generation=g) for g in "012"]
    return {
        "front_gc_share": sum(gc_sums) / el,
        "front_gc_share_by_generation": [v / el for v in gc_sums],
        "front_gc_collections_by_generation": [delta_sum(m0, m1, "python_gc_duration_seconds_count", generation=g)
                                               for g in "012"],
        "front_gc2_max_bucket_s": histogram_max(m0, m1, "python_gc_duration_seconds", generation="2"),
        "front_loop_lag_p99_s": histogram_quantile(m0, m1, 0.99, "python_event_loop_lag_seconds"),
        "front_loop_lag_max_bucket_s": histogram_max(m0, m1, "python_event_loop_lag_seconds"),
    }


def cpu_per_op(tiered: bool, renewals: float, cp_puts: float, cp_writes: float, etcd_writes: int,
               api_cpu: float, tier_cpu: float, etcd_cpu: float, gen_cpu: float | None,
               gen_renewals: float | None) -> dict:
    """Microseconds of CPU per operation of each process over the window: the apiserver per write it took,
    the tier per request it answered or forwarded, etcd per revision (the main etcd and the Lease etcd together,
    where there is one), leasegen per renewal it sent. Read beside the machine's steal share and probe: these
    rise in a slower state too (fewer writes share an etcd batch or a watch event's dispatch, leasegen waits on
    slower round trips), so they alone do not say the machine was slower."""
    us = lambda cpu, ops: cpu / ops * 1e6 if ops else None   # noqa: E731
    return {"apiserver": us(api_cpu, cp_writes if tiered else renewals),
            "tier": us(tier_cpu, renewals + cp_puts) if tiered else None,
            "etcd": us(etcd_cpu, etcd_writes), "leasegen": us(gen_cpu, gen_renewals) if gen_cpu else None}


async def etcd_rev(endpoint: str) -> int:
    from storage.etcd import EtcdClient
    c = EtcdClient([endpoint])
    try:
        return await c.current_revision(b"/", "bench")
    finally:
        await c.close()


# --- report -----------------------------------------------------------------------------------------------

def fmt_s(v: float | None) -> str:
    return "-" if v is None else (f"{v * 1000:.0f} ms" if v < 10 else f"{v:.0f} s")


def table(runs: list[dict]) -> str:
    cols = [("config", lambda r: r.get("config", "direct")),
            ("nodes", lambda r: f"{r['nodes']:,}"),
            ("writes/s", lambda r: f"{r['writes_per_s']:.0f}"),
            ("Lease share", lambda r: f"{r['lease_share'] * 100:.1f} %"),
            ("renewals/s (expected)", lambda r: f"{r['lease_renewals_per_s']:.0f} ({r['lease_renewals_expected_per_s']:.0f})"),
            ("apiserver cores", lambda r: f"{r['apiserver_cpu_cores']:.2f}"),
            ("cores / 1k nodes", lambda r: f"{r['apiserver_cpu_cores_per_1000_nodes']:.3f}"),
            ("tier cores", lambda r: "-" if r.get("tier_cpu_cores") is None else f"{r['tier_cpu_cores']:.2f}"),
            ("etcd writes/s", lambda r: f"{r['etcd_writes_per_s']:.0f}"),
            ("etcd cores", lambda r: f"{r['etcd_cpu_cores']:.2f}"),
            ("CP writes / renewal", lambda r: "-" if r.get("control_plane_writes_per_renewal") is None
             else f"{r['control_plane_writes_per_renewal']:.2f}"),
            ("p99 renewal server", lambda r: fmt_s(r["lease_put_p99_server_s"])),
            ("p99 renewal probe", lambda r: fmt_s(r["lease_put_p99_probe_s"])),
            ("expired", lambda r: str(r["leases_expired"])),
            ("oldest renewTime", lambda r: "-" if r.get("leases_age_max_s") is None else f"{r['leases_age_max_s']:.0f} s"),
            ("CP age p99 / max bucket", lambda r: "-" if r.get("tier_cp_age_p99_s") is None
             else f"{r['tier_cp_age_p99_s']:.1f} / {r['tier_cp_age_max_bucket_s']:.0f} s"),
            ("KCM NotReady", lambda r: "-" if r.get("kcm_nodes_not_ready") is None
             else str(r["kcm_nodes_not_ready"])),
            ("cache lag (revs)", lambda r: str(r["lease_cache_lag_revisions"])),
            ("front GC % / loop lag p99", lambda r: "-" if r.get("front_loop_lag_p99_s") is None
             else f"{100 * r['front_gc_share']:.1f} % / {fmt_s(r['front_loop_lag_p99_s'])}"),
            ("driver", lambda r: r.get("generator", "kwok")),
            ("driver cores", lambda r: f"{r.get('kwok_cpu_cores') or r.get('leasegen_cpu_cores') or 0:.2f}"),
            ("RSS MiB", lambda r: f"{r['apiserver_rss_mib']:.0f}"),
            ("CPU us/op api·tier·etcd·gen", lambda r: "-" if not r.get("cpu_us_per_op") else "·".join(
                "-" if v is None else f"{v:.0f}" for v in r["cpu_us_per_op"].values())),
            ("machine probe / steal", lambda r: "-" if r.get("machine_cpu_probe_ms") is None
             else f"{r['machine_cpu_probe_ms']:.0f} ms / {100 * r['machine_steal_share']:.1f} %"),
            ("sustained", lambda r: "yes" if r["sustained"] else "NO")]
    rows = [[c[0] for c in cols]] + [[f(r) for _, f in cols] for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    lines = ["  ".join(x.rjust(w) for x, w in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def largest_sustained(runs: list[dict]) -> dict:
    ok = [r["nodes"] for r in runs if r["sustained"]]
    bad = [r["nodes"] for r in runs if not r["sustained"]]
    best = max(ok) if ok else None
    first_bad = min((b for b in bad if best is None or b > best), default=None)
    if best is None:
        text = f"no measured count was sustained (smallest: {min(bad):,} nodes)"
    elif first_bad is None:
        text = f"{best:,} nodes sustained (the largest measured; not searched further)"
    else:
        text = f"{best:,} nodes sustained; {first_bad:,} not"
    below = sorted(b for b in bad if best is not None and b < best)
    if below:
        text += (f"; but {', '.join(f'{b:,}' for b in below)} was not sustained in its own window: the machine's "
                 "load varied during the run (see loadavg_after of each count)")
    return {"largest_sustained_nodes": best, "first_not_sustained_nodes": first_bad, "text": text}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.nodes", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run for the test suite (50 nodes, 21 s window)")
    ap.add_argument("--nodes", help="comma-separated node counts (default 1000,5000,10000; --quick 50)")
    ap.add_argument("--window", type=float, help="measuring window in seconds (default 60; --quick 21)")
    ap.add_argument("--search", action="store_true",
                    help="after the list, keep doubling N until a count is not sustained (up to --max-nodes)")
    ap.add_argument("--max-nodes", type=int, default=40_000)
    ap.add_argument("--configs", default="kube,direct,tier",
                    help="comma-separated: kube (kwok on kube-apiserver v1.37.2), direct (kwok on this apiserver), "
                         "tier (kwok on python -m nodetier in front of it), lease-etcd (direct, Leases on a no-fsync "
                         "tmpfs etcd of their own, as --embedded-lease-etcd), tier-lease-etcd (the node plane: the tier "
                         "in front of the apiserver with the Lease etcd); default kube,direct,tier, each count "
                         "in each (--quick: direct,tier)")
    ap.add_argument("--generator", choices=("kwok", "leasegen"), default="kwok",
                    help="what renews the Leases: kwok's nodes (default), or bench/go/leasegen, a compiled generator "
                         "renewing Leases only (no Nodes), exactly as the kubelet's lease controller does, for counts "
                         "kwok cannot drive here")
    ap.add_argument("--lease-parallelism", type=int, default=128,
                    help="kwok's nodeLeaseParallelism: renewals in flight at once (default 128, under the server's "
                         "200 mutating requests in flight; kwok's own default 4 caps renewals at 4 / latency, where "
                         "a cluster's kubelets renew independently)")
    ap.add_argument("--settle-timeout", type=float, default=900.0,
                    help="seconds for every node to become Ready with its Lease")
    ap.add_argument("--controller-manager", type=lambda v: v.lower() in ("1", "true", "yes"), default=True,
                    help="run kube-controller-manager's node lifecycle controller (upstream's 50 s grace) on the "
                         "control plane and report the nodes it marked NotReady (default true; leasegen's runs "
                         "then create a Ready Node for each of its Leases). Its client runs at 100 QPS, and the "
                         "window starts once its RegisteredNode events are recorded (n / 100 x 1.2 + 10 s)")
    ap.add_argument("--tier-flags", default="", help="more flags for the node tier (`python -m nodetier`), "
                    "space-separated, e.g. \"--forward-concurrency 128\"")
    ap.add_argument("--out", default="bench/out/nodes.json")
    ap.add_argument("--docs", help="copy of the JSON (default docs/nodes.json; --quick: none)")
    p = ap.parse_args(argv)
    p.nodes = [int(x) for x in (p.nodes or ("50" if p.quick else "1000,5000,10000")).split(",")]
    p.window = p.window or (21.0 if p.quick else 60.0)
    if p.quick and "--configs" not in " ".join(argv or sys.argv):
        p.configs = "direct,tier"
    p.configs = [c for c in p.configs.split(",") if c]
    if not p.configs or set(p.configs) - {"kube", "direct", "tier", "lease-etcd", "tier-lease-etcd"}:
        ap.error("--configs: kube, direct, tier, lease-etcd, tier-lease-etcd")
    if p.docs is None and not p.quick:
        p.docs = "docs/nodes.json" if p.generator == "kwok" else "docs/nodes_leasegen.json"
    return p


async def measure_on_fresh_etcd(n: int, p: argparse.Namespace, config: str) -> dict:
    """`measure` over an etcd started for it and removed after it: kube-apiserver and each of our configurations
    over an etcd of its own (issue 22 §5), none inheriting a previous measurement's keys, history or database."""
    with current_etcd() as etcd:
        return await measure(n, etcd, p, config)


async def run(p: argparse.Namespace) -> list[dict]:
    runs = []
    for n in p.nodes:
        for config in p.configs:
            try:
                runs.append(await measure_on_fresh_etcd(n, p, config))
            except (BenchError, ApiserverError, OSError) as e:   # the others still run; the row says why
                log(f"N={n} {config}: failed: {e}")
                runs.append({"config": config, "nodes": n, "generator": p.generator, "failed": str(e)[-2000:],
                             "sustained": False})
    if p.search:
        n = max(p.nodes)
        while runs[-1]["sustained"] and n * 2 <= p.max_nodes:
            n *= 2
            runs.append(await measure_on_fresh_etcd(n, p, p.configs[-1]))
    return runs


def main(argv=None) -> int:
    p = parse_args(argv)
    t_start = time.perf_counter()
    log("ensuring kwok (tools/build_kwok.py), leasegen (tools/build_repo_go.py) and a current etcd "
        "(tools/build_etcd.py)")
    from tests.helpers.etcd import load_tool
    from tests.helpers.kwok import kwok_binary
    kwok_bin = kwok_binary() if p.generator == "kwok" else None
    if p.controller_manager:
        from tests.helpers.kwok import kube_controller_manager_binary
        kube_controller_manager_binary()      # tools/build_kube_controller_manager.py, once
    p.leasegen = load_tool("build_repo_go").ensure("leasegen") if p.generator == "leasegen" else None
    with current_etcd() as etcd:      # for the versions only: each measurement starts an etcd of its own
        log(f"etcd {etcd.binary}")
        vers = versions(etcd.endpoint, git=True, etcd_binary=etcd.binary,
                        **({"kwok_binary": kwok_bin, "kwok": "v0.8.0"} if kwok_bin else {"leasegen": p.leasegen}))
    try:
        runs = asyncio.run(run(p))
    except BenchError as e:
        log(f"error: {e}")
        return 2
    verdict = {c: largest_sustained([r for r in runs if r["config"] == c]) for c in p.configs}
    doc = {"benchmark": "nodes", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "params": {k: v for k, v in vars(p).items() if k not in ("out", "docs", "leasegen")},
           "measured": "per configuration (kube, direct, tier, lease-etcd: see the module docstring) one server "
                       "(watch cache on) over a fresh current etcd of its own, kwok v0.8.0 with upstream's "
                       "stages and 40 s node leases, a probe renewing its own Lease 5/s; all on this machine; "
                       "writes and latencies from the apiserver's request metrics, CPU from /proc, etcd writes "
                       "from its revision",
           "sustained_means": "p99 Lease renewal < 1 s (server and probe), renewals >= 85 % of N/10.2 per s, no "
                              "Lease older than its 40 s duration after the window",
           "versions": vers, "runs": runs,
           "figures": {f"{r['config']}_n{r['nodes']}_{k}": r[k] for r in runs if "failed" not in r for k in FIGURES},
           "largest_sustained": verdict, "elapsed_s": time.perf_counter() - t_start}
    write_json(p.out, doc)
    if p.docs:
        os.makedirs(os.path.dirname(os.path.abspath(p.docs)), exist_ok=True)
        shutil.copyfile(p.out, p.docs)
    measured = [r for r in runs if "failed" not in r]
    print(table(measured))
    for r in runs:
        if "failed" in r:
            print(f"N={r['nodes']:,} {r['config']}: FAILED: {r['failed'][-300:]}")
    for c, v in verdict.items():
        print(f"\nlargest node count sustained here, {c}: {v['text']}")
    print(f"(load average after the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"median apiserver cores per 1k nodes "
          f"{statistics.median(r['apiserver_cpu_cores_per_1000_nodes'] for r in measured or [{'apiserver_cpu_cores_per_1000_nodes': 0}]):.3f})")
    log(f"wrote {p.out}" + (f" and {p.docs}" if p.docs else "") + f" in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
