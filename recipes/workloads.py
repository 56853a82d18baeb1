"""The workloads that test a recipe, one class per axis. Each part of a recipe's `[[workload]]` becomes one:

* `prepare()` before the measured window (create nodes and wait for them Ready; load objects; install a CRD),
* `run(stop)` during it (its own calls are timed by the client's recorder; pod startup and watch latency are
  measured here and handed to `recipes.slo` as extra SLIs),
* `check()` after it: the correctness checks that do not depend on timing (every node Ready, every object
  listed, every event delivered once, in order), each {"ok": bool, "detail": str},
* `load()`: the load offered and the load achieved, in the part's own unit.

Objects carry the label `recipes.residency.io/run=<run id>`, so a check counts only what this run made.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime
import random
import time

import orjson

from shardslice import widgets

from . import corpus
from .client import AsyncClient, Client, Sample, scrape_counter
from .spec import Part
from .topology import KWOK_ANNOTATION, Topology

RUN_LABEL = "recipes.residency.io/run"
LEASE_SECONDS = 40
RENEW_SECONDS = 10
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


def now_rfc3339_micro() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(s: str) -> float:
    return datetime.datetime.strptime(s[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc).timestamp()


async def paced(stop: asyncio.Event, rate: float, op, workers: int = 8) -> int:
    """Call op(i) `rate` times a second until stop (open loop: a slow call does not delay the next start,
    up to `workers` in flight); returns how many were started."""
    if rate <= 0:
        await stop.wait()
        return 0
    sem = asyncio.Semaphore(workers)
    t0 = time.monotonic()
    i = 0
    tasks = set()
    while not stop.is_set():
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            try:
                await asyncio.wait_for(stop.wait(), delay)
                break
            except asyncio.TimeoutError:
                pass
        await sem.acquire()

        async def one(k=i):
            try:
                await op(k)
            finally:
                sem.release()
        t = asyncio.create_task(one())
        tasks.add(t)
        t.add_done_callback(tasks.discard)
        i += 1
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    return i


class Workload:
    kind = ""
    slis: tuple[str, ...] = ()

    def __init__(self, part: Part, size: float, topo: Topology, client: AsyncClient, run_id: str, say=print):
        self.part = part
        self.size = size
        self.topo = topo
        self.client = client
        self.run_id = run_id
        self.say = say
        self.extra: dict[str, list[tuple[float, float]]] = {}   # SLI name -> [(monotonic time, seconds)]
        self.window_s = 0.0       # as measured
        self.topo_window = 30.0   # as planned (set by make)

    def v(self, key: str, default=None):
        return self.part.value(key, self.size, default)

    async def prepare(self) -> None:
        pass

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()

    async def check(self) -> dict[str, dict]:
        return {}

    def load(self) -> dict:
        return {}

    async def watch(self, collection: str, resource: str, started: asyncio.Event):
        """This run's objects' events on a watch of `collection` (label-selected, from a list's resourceVersion),
        as (monotonic time, wall time, event) on arrival; bookmarks skipped, an ERROR event raised."""
        sel = f"labelSelector={RUN_LABEL}%3D{self.run_id}"
        code, body = await self.client.call("GET", f"{collection}?{sel}&limit=1", resource=resource, verb="LIST",
                                            scope="cluster")
        if code != 200:
            raise RuntimeError(f"list {collection}: HTTP {code}: {body[:300]!r}")
        rv = orjson.loads(body)["metadata"]["resourceVersion"]
        url = self.topo.api.url + f"{collection}?watch=1&{sel}&resourceVersion={rv}&allowWatchBookmarks=true"
        async with self.client.session.get(url, timeout=None) as r:
            if r.status != 200:
                raise RuntimeError(f"watch {collection}: HTTP {r.status}: {(await r.read())[:300]!r}")
            started.set()
            buf = b""
            async for chunk in r.content.iter_any():
                t, wall = time.monotonic(), time.time()
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = orjson.loads(line)
                    if ev["type"] == "ERROR":
                        raise RuntimeError(f"watch {collection}: ERROR {ev['object']}")
                    if ev["type"] != "BOOKMARK":
                        yield t, wall, ev

    async def list_items(self, path: str) -> list[dict]:
        code, body = await self.client.call("GET", path + ("&" if "?" in path else "?") + "resourceVersion=0",
                                            resource="check", verb="CHECK", scope="cluster")
        if code != 200:
            raise RuntimeError(f"list {path}: HTTP {code}: {body[:300]!r}")
        return orjson.loads(body).get("items") or []


# --- node-bound -------------------------------------------------------------------------------------------

def kwok_node(name: str, kwok: str = "fake", *, labels: dict | None = None, cpu: str = "32", memory: str = "256Gi",
              pods: str = "110") -> dict:
    """A Node the kwok process named `kwok` manages (its annotation selector), with a kubelet's usual capacity;
    kwok fills in the status. The tests' and benchmarks' kwok nodes are these too (tests/helpers/kwok.py)."""
    res = {"cpu": cpu, "memory": memory, "pods": pods}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {KWOK_ANNOTATION: kwok, "node.alpha.kubernetes.io/ttl": "0"},
                         # both the GA and the beta os/arch labels, as a kubelet registers them: without the beta
                         # ones the node lifecycle controller GETs and PATCHes every Node to add them, at its
                         # client's QPS (at 5,000 nodes and the default 20, ~9 Nodes a second for ten minutes)
                         "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                                    "beta.kubernetes.io/arch": "amd64", **(labels or {})}},
            "status": {"allocatable": dict(res), "capacity": dict(res)}}


class Nodes(Workload):
    """N kwok nodes, renewing their Leases every 10 s (through the node tier where there is one). A probe reads
    a node (GET), the node Leases (namespace LIST) and all nodes (cluster LIST), and renews a Lease of its own
    once a second beside kwok's."""
    kind = "nodes"
    slis = ("mutating", "read-resource", "read-namespace", "read-cluster")

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.n = int(self.v("nodes"))
        kwoks = [c.name for c in self.topo.children if c.kind == "kwok"]
        self.kwoks = kwoks or ["kwok"]
        self.names = [f"kwok-{i:06d}" for i in range(self.n)]
        self.renewals = 0.0          # node Lease renewals during the window
        self.probe_renewals = 0

    async def prepare(self) -> None:
        t0 = time.monotonic()
        # spread over one renewal period, so that the renewals are spread as a cluster's kubelets' are (each
        # node at its own point of the period, measured from t0: a relative sleep would add up per worker)

        async def create(i):
            due = t0 + i * RENEW_SECONDS / max(self.n, 1)
            if due > time.monotonic():
                await asyncio.sleep(due - time.monotonic())
            node = kwok_node(self.names[i], self.kwoks[i % len(self.kwoks)])
            code, body = await self.client.call("POST", "/api/v1/nodes", body=orjson.dumps(node),
                                                resource="nodes", verb="POST", scope="resource", ok=(201,))
            if code not in (201, 409):
                raise RuntimeError(f"create node: HTTP {code}: {body[:300]!r}")
        sem = asyncio.Semaphore(32)

        async def bounded(i):
            async with sem:
                await create(i)
        await asyncio.gather(*(bounded(i) for i in range(self.n)))
        self.say(f"  {self.n} nodes created in {time.monotonic() - t0:.1f} s; waiting for them Ready with Leases")
        deadline = time.monotonic() + 120 + self.n / 50
        while True:
            ready, leases = await self._ready_and_leases()
            if ready >= self.n and leases >= self.n:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ready} of {self.n} nodes Ready, {leases} Leases, after "
                                   f"{time.monotonic() - t0:.0f} s")
            await asyncio.sleep(1.0)
        self.say(f"  {self.n} nodes Ready with Leases {time.monotonic() - t0:.1f} s after the first was created")
        await asyncio.sleep(RENEW_SECONDS + 2)   # one renewal period of steady state before the window

    async def _ready_and_leases(self) -> tuple[int, int]:
        ours = set(self.names)
        ready = sum(1 for it in await self.list_items("/api/v1/nodes") if it["metadata"]["name"] in ours
                    and any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (it.get("status") or {}).get("conditions") or []))
        leases = sum(1 for it in await self.list_items(NODE_LEASES) if it["metadata"]["name"] in ours)
        return ready, leases

    async def _count_renewals(self, stop: asyncio.Event) -> None:
        """Renewals of this run's node Leases: behind a node tier, its count of renewals answered (the probe's
        own taken out); without one, the MODIFIED events of those Leases on a watch of the control plane (the
        apiservers' PUT counts would include leader election and the probe)."""
        if self.topo.tiers:
            first = sum([await scrape_counter(self.client, t, "nodetier_renewals_absorbed_total")
                         for t in self.topo.tiers])
            await stop.wait()
            last = sum([await scrape_counter(self.client, t, "nodetier_renewals_absorbed_total")
                        for t in self.topo.tiers])
            self.renewals = last - first - self.probe_renewals
            return
        ours = set(self.names)
        code, body = await self.client.call("GET", NODE_LEASES + "?limit=1", resource="leases", verb="LIST",
                                            scope="namespace")
        rv = orjson.loads(body)["metadata"]["resourceVersion"]
        async with self.client.session.get(self.topo.api.url + NODE_LEASES + f"?watch=1&resourceVersion={rv}",
                                           timeout=None) as r:
            buf = b""
            reader = asyncio.ensure_future(stop.wait())
            while True:
                chunk = asyncio.ensure_future(r.content.readany())
                await asyncio.wait([chunk, reader], return_when=asyncio.FIRST_COMPLETED)
                if not chunk.done():
                    chunk.cancel()
                    return
                if not chunk.result():   # the server ended the watch: the count so far stands
                    reader.cancel()
                    return
                buf += chunk.result()
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if b'"MODIFIED"' in line[:30]:
                        ev = orjson.loads(line)
                        self.renewals += ev["object"]["metadata"]["name"] in ours

    async def run(self, stop: asyncio.Event) -> None:
        counter = asyncio.create_task(self._count_renewals(stop))
        t0 = time.monotonic()
        node_ep = self.topo.node_server
        probe = AsyncClient(node_ep, self.client.rec, connections=4)
        lease_path = NODE_LEASES + "/recipe-probe"
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "recipe-probe", "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": "recipe-probe", "leaseDurationSeconds": LEASE_SECONDS}}
        code, b = await probe.call("POST", NODE_LEASES, body=orjson.dumps(body), resource="leases", verb="POST",
                                   scope="resource", ok=(201, 409))
        cur = orjson.loads(b) if code == 201 else None
        rnd = random.Random(1)

        async def renew(_):
            nonlocal cur
            if cur is None:
                c, b = await probe.call("GET", lease_path, resource="leases", verb="GET", scope="resource")
                cur = orjson.loads(b) if c == 200 else None
                return
            cur["spec"]["renewTime"] = now_rfc3339_micro()
            c, b = await probe.call("PUT", lease_path, body=orjson.dumps(cur), resource="leases", verb="PUT",
                                    scope="resource")
            cur = orjson.loads(b) if c == 200 else None
            self.probe_renewals += c == 200

        async def get_node(_):
            await self.client.call("GET", f"/api/v1/nodes/{rnd.choice(self.names)}", resource="nodes", verb="GET",
                                   scope="resource")

        async def list_leases(_):
            await self.client.call("GET", NODE_LEASES, resource="leases", verb="LIST", scope="namespace")

        async def list_nodes(_):
            await self.client.call("GET", "/api/v1/nodes", resource="nodes", verb="LIST", scope="cluster")
        qps = float(self.v("probe_qps", 5))
        try:
            await asyncio.gather(paced(stop, 1.0, renew, 1), paced(stop, qps, get_node),
                                 paced(stop, 0.2, list_leases, 2), paced(stop, 0.1, list_nodes, 2))
        finally:
            await probe.close()
        self.window_s = time.monotonic() - t0
        await counter

    async def check(self) -> dict[str, dict]:
        ours = set(self.names)
        nodes = [it for it in await self.list_items("/api/v1/nodes") if it["metadata"]["name"] in ours]
        not_ready = [it["metadata"]["name"] for it in nodes if not any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (it.get("status") or {}).get("conditions") or [])]
        tainted = [it["metadata"]["name"] for it in nodes if any(
            t.get("key") == "node.kubernetes.io/unreachable" for t in (it.get("spec") or {}).get("taints") or [])]
        now = time.time()
        ages = [now - parse_time(it["spec"]["renewTime"]) for it in await self.list_items(NODE_LEASES)
                if it["metadata"]["name"] in ours and (it.get("spec") or {}).get("renewTime")]
        expired = sum(a > LEASE_SECONDS for a in ages)
        return {
            "nodes exist": {"ok": len(nodes) == self.n, "detail": f"{len(nodes)} of {self.n}"},
            "nodes Ready": {"ok": not not_ready, "detail": f"{len(not_ready)} not Ready {not_ready[:5]}"},
            "no node unreachable": {"ok": not tainted, "detail": f"{len(tainted)} tainted unreachable {tainted[:5]}"},
            "Leases fresh on the control plane": {
                "ok": len(ages) == self.n and expired == 0,
                "detail": f"{len(ages)} Leases, {expired} older than {LEASE_SECONDS} s, oldest "
                          f"{max(ages) if ages else float('nan'):.1f} s"}}

    def load(self) -> dict:
        w = max(self.window_s, 1e-9)
        return {"unit": "Lease renewals/s", "offered": round(self.n / RENEW_SECONDS, 1),
                "achieved": round(self.renewals / w, 1)}


# --- churn-bound ------------------------------------------------------------------------------------------

class Churn(Workload):
    """Short-lived custom resources: Widgets created at `rate`/s over `namespaces` namespaces, each deleted
    `lifetime_s` after its creation; one cluster-wide watch times each ADDED against its create's answer (the
    watch-latency SLI) and must see every Widget added and deleted, once each, in resourceVersion order."""
    kind = "churn"
    slis = ("mutating", "read-namespace", "watch-latency")

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rate = float(self.v("rate"))
        self.lifetime = float(self.v("lifetime_s", 5))
        self.namespaces = [f"churn-{i}" for i in range(int(self.v("namespaces", 4)))]
        self.acked: dict[str, float] = {}       # name -> monotonic time its create was answered
        self.deleted: set[str] = set()
        self.seen: dict[str, list[str]] = {}    # name -> event types in order
        self.rv_order_ok = True
        self.created = self.failed = 0

    async def prepare(self) -> None:
        with Client(self.topo.api) as c:
            code, body = c.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgets.crd())
            if code not in (201, 409):
                raise RuntimeError(f"create the Widget CRD: HTTP {code}: {body[:300]!r}")
            for ns in self.namespaces:
                c.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": ns}})
            deadline = time.monotonic() + 60
            while c.request("GET", widgets.collection() + "?limit=1")[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError("the Widget CRD is not served after 60 s")
                await asyncio.sleep(0.2)

    async def _watch(self, started: asyncio.Event, stop: asyncio.Event) -> None:
        last_rv: dict[str, int] = {}
        async with contextlib.aclosing(self.watch(widgets.collection(), "widgets", started)) as events:
            async for t, _, ev in events:
                md = ev["object"]["metadata"]
                name, erv = md["name"], int(md["resourceVersion"])
                if erv <= last_rv.get(name, 0):
                    self.rv_order_ok = False
                last_rv[name] = erv
                self.seen.setdefault(name, []).append(ev["type"])
                if ev["type"] == "ADDED" and name in self.acked:
                    self.extra.setdefault("watch-latency", []).append((t, max(0.0, t - self.acked[name])))
                if stop.is_set() and self._drained():
                    return

    def _drained(self) -> bool:
        return all("DELETED" in self.seen.get(n, ()) for n in self.deleted) and all(n in self.seen for n in self.acked)

    async def run(self, stop: asyncio.Event) -> None:
        started = asyncio.Event()
        watch_stop = asyncio.Event()
        watcher = asyncio.create_task(self._watch(started, watch_stop))
        await asyncio.wait([watcher, asyncio.create_task(started.wait())], return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            watcher.result()
        t0 = time.monotonic()
        deletes: set[asyncio.Task] = set()

        async def create(i):
            ns = self.namespaces[i % len(self.namespaces)]
            name = f"w-{self.run_id}-{i:07d}"
            obj = widgets.widget(name, ns, i % 100, labels={RUN_LABEL: self.run_id})
            code, _ = await self.client.call("POST", widgets.collection(ns), body=orjson.dumps(obj),
                                             resource="widgets", verb="POST", scope="resource")
            if code != 201:
                self.failed += 1
                return
            self.acked[name] = time.monotonic()
            self.created += 1
            t = asyncio.create_task(self._delete_later(ns, name))
            deletes.add(t)
            t.add_done_callback(deletes.discard)

        async def list_ns(i):
            await self.client.call("GET", widgets.collection(self.namespaces[i % len(self.namespaces)]),
                                   resource="widgets", verb="LIST", scope="namespace")
        await asyncio.gather(paced(stop, self.rate, create, 64), paced(stop, 1.0, list_ns, 2))
        self.window_s = time.monotonic() - t0
        if deletes:
            await asyncio.gather(*list(deletes), return_exceptions=True)
        watch_stop.set()
        try:
            await asyncio.wait_for(self._wait_drained(watcher), 30)
        except asyncio.TimeoutError:
            pass
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)

    async def _wait_drained(self, watcher) -> None:
        while not self._drained() and not watcher.done():
            await asyncio.sleep(0.1)

    async def _delete_later(self, ns: str, name: str) -> None:
        await asyncio.sleep(self.lifetime)
        code, _ = await self.client.call("DELETE", widgets.collection(ns) + f"/{name}", resource="widgets",
                                         verb="DELETE", scope="resource")
        if code == 200:
            self.deleted.add(name)

    async def check(self) -> dict[str, dict]:
        missing_add = [n for n in self.acked if "ADDED" not in self.seen.get(n, ())]
        missing_del = [n for n in self.deleted if "DELETED" not in self.seen.get(n, ())]
        dup = [n for n, evs in self.seen.items() if evs.count("ADDED") > 1 or evs.count("DELETED") > 1]
        left = [it["metadata"]["name"] for it in
                await self.list_items(widgets.collection() + f"?labelSelector={RUN_LABEL}%3D{self.run_id}")]
        out = {
            "every create answered 201": {"ok": self.failed == 0 and self.created > 0,
                                          "detail": f"{self.created} created, {self.failed} failed"},
            "every delete answered 200": {"ok": len(self.deleted) == self.created,
                                          "detail": f"{len(self.deleted)} of {self.created}"},
            "watch saw every Widget added and deleted": {
                "ok": not missing_add and not missing_del,
                "detail": f"{len(missing_add)} ADDED and {len(missing_del)} DELETED missing"},
            "watch saw each event once, in resourceVersion order": {
                "ok": not dup and self.rv_order_ok, "detail": f"{len(dup)} repeated; order ok: {self.rv_order_ok}"},
            "no Widget of the run left": {"ok": not left, "detail": f"{len(left)} left"}}
        if self.topo.controller_urls:
            counts = {}
            for u in self.topo.controller_urls:
                async with self.client.session.get(u + "/debug/controller") as r:
                    snap = orjson.loads(await r.read())
                for k in ("reconciles", "out_of_range_reads", "out_of_range_writes", "errors"):
                    counts[k] = counts.get(k, 0) + snap["counts"][k]
            out["sharded controllers stayed in their ranges"] = {
                "ok": counts["out_of_range_reads"] == 0 and counts["out_of_range_writes"] == 0,
                "detail": f"{counts['reconciles']} reconciles, {counts['out_of_range_reads']} out-of-range reads, "
                          f"{counts['out_of_range_writes']} writes, {counts['errors']} errors"}
        return out

    def load(self) -> dict:
        return {"unit": "creates/s (each deleted later)", "offered": self.rate,
                "achieved": round(self.created / max(self.window_s, 1e-9), 1)}


# --- state-bound ------------------------------------------------------------------------------------------

class State(Workload):
    """`objects` realistic ConfigMaps (recipes.corpus: config files as data, Helm labels, across team
    namespaces) loaded before the window; during it, GETs, namespace lists, a cluster list every
    `cluster_list_every_s` and a few updates."""
    kind = "state"
    slis = ("mutating", "read-resource", "read-namespace", "read-cluster")

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.n = int(self.v("objects"))
        self.ns = corpus.TEAMS[: int(self.v("namespaces", 12))]
        self.objs: list[tuple[str, str]] = []   # (namespace, name)
        self.done = {"GET": 0, "LIST": 0, "PUT": 0}
        self.load_s = 0.0
        self.bytes = 0

    def make(self, i: int) -> dict:
        src = corpus.configmap(i)
        md = src["metadata"]
        ns = self.ns[i % len(self.ns)]
        return {"apiVersion": "v1", "kind": "ConfigMap", "data": src["data"],
                "metadata": {"name": f"{md['labels']['app.kubernetes.io/name']}-{i:07d}", "namespace": ns,
                             "labels": {**md["labels"], RUN_LABEL: self.run_id}, "annotations": md["annotations"]}}

    async def prepare(self) -> None:
        with Client(self.topo.api) as c:
            for ns in self.ns:
                c.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": ns}})
        t0 = time.monotonic()
        sem = asyncio.Semaphore(16)

        async def create(i):
            obj = self.make(i)
            async with sem:
                code, body = await self.client.call(
                    "POST", f"/api/v1/namespaces/{obj['metadata']['namespace']}/configmaps",
                    body=orjson.dumps(obj), resource="configmaps", verb="POST", scope="resource")
            if code != 201:
                raise RuntimeError(f"load configmap {i}: HTTP {code}: {body[:300]!r}")
            self.objs.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
            self.bytes += len(body)   # the object as the server stored it (uid, timestamps, managedFields)
        await asyncio.gather(*(create(i) for i in range(self.n)))
        self.load_s = time.monotonic() - t0
        self.say(f"  {self.n} ConfigMaps loaded in {self.load_s:.1f} s")

    async def run(self, stop: asyncio.Event) -> None:
        t0 = time.monotonic()
        rnd = random.Random(2)

        async def get(_):
            ns, name = rnd.choice(self.objs)
            code, _ = await self.client.call("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}",
                                             resource="configmaps", verb="GET", scope="resource")
            self.done["GET"] += code == 200

        async def list_ns(i):
            code, _ = await self.client.call("GET", f"/api/v1/namespaces/{self.ns[i % len(self.ns)]}/configmaps",
                                             resource="configmaps", verb="LIST", scope="namespace")
            self.done["LIST"] += code == 200

        async def list_all(_):
            code, _ = await self.client.call("GET", "/api/v1/configmaps", resource="configmaps", verb="LIST",
                                             scope="cluster")
            self.done["LIST"] += code == 200

        async def update(_):
            ns, name = rnd.choice(self.objs)
            c, b = await self.client.call("GET", f"/api/v1/namespaces/{ns}/configmaps/{name}",
                                          resource="configmaps", verb="GET", scope="resource")
            if c != 200:
                return
            obj = orjson.loads(b)
            obj.setdefault("data", {})["LAST_TOUCHED"] = now_rfc3339_micro()
            code, _ = await self.client.call("PUT", f"/api/v1/namespaces/{ns}/configmaps/{name}",
                                             body=orjson.dumps(obj), resource="configmaps", verb="PUT",
                                             scope="resource")
            self.done["PUT"] += code == 200
        every = float(self.v("cluster_list_every_s", 10))
        await asyncio.gather(paced(stop, float(self.v("get_qps", 20)), get),
                             paced(stop, float(self.v("list_qps", 2)), list_ns, 4),
                             paced(stop, 1.0 / every, list_all, 2),
                             paced(stop, float(self.v("update_qps", 2)), update, 4))
        self.window_s = time.monotonic() - t0

    async def check(self) -> dict[str, dict]:
        items = await self.list_items(f"/api/v1/configmaps?labelSelector={RUN_LABEL}%3D{self.run_id}")
        names = {(it["metadata"]["namespace"], it["metadata"]["name"]) for it in items}
        return {"every object listed once": {"ok": len(items) == self.n and names == set(self.objs),
                                             "detail": f"{len(items)} listed, {len(names)} distinct, {self.n} loaded"}}

    def load(self) -> dict:
        w = max(self.window_s, 1e-9)
        offered = float(self.v("get_qps", 20)) + float(self.v("list_qps", 2)) + \
            1.0 / float(self.v("cluster_list_every_s", 10)) + 2 * float(self.v("update_qps", 2))
        return {"unit": "reads and writes/s", "offered": round(offered, 2),
                "achieved": round((self.done["GET"] + self.done["LIST"] + 2 * self.done["PUT"]) / w, 2),
                "objects": self.n, "load_s": round(self.load_s, 1),
                "bytes_per_object": round(self.bytes / max(self.n, 1))}


# --- pods -------------------------------------------------------------------------------------------------

class Pods(Workload):
    """Deployments of `replicas` Pods created at a steady `pods_per_second` through the window's first two thirds
    (the last third lets them start); kube-controller-manager makes their ReplicaSets and Pods,
    kube-scheduler binds them to the kwok nodes, kwok starts them. A watch on Pods times each one from its
    creationTimestamp to the event where all its containers are started (the pod-startup SLI)."""
    kind = "pods"
    slis = ("mutating", "pod-startup")

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.replicas = int(self.v("replicas", 5))
        self.rate = float(self.v("pods_per_second", 5)) / self.replicas   # Deployments a second
        self.ns = [f"pods-{i}" for i in range(int(self.v("namespaces", 2)))]
        self.started: dict[str, float] = {}   # pod uid -> startup seconds
        self.made = self.tried = 0

    async def prepare(self) -> None:
        with Client(self.topo.api) as c:
            for ns in self.ns:
                c.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": ns}})

    def deployment(self, i: int) -> dict:
        app = f"app-{self.run_id}-{i:05d}"
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": app, "namespace": self.ns[i % len(self.ns)], "labels": {RUN_LABEL: self.run_id}},
                "spec": {"replicas": self.replicas, "selector": {"matchLabels": {"app": app}},
                         "template": {"metadata": {"labels": {"app": app, RUN_LABEL: self.run_id}},
                                      "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                                               "resources": {"requests": {"cpu": "10m",
                                                                                          "memory": "16Mi"}}}],
                                               "nodeSelector": {"type": "kwok"},
                                               "tolerations": [{"key": KWOK_ANNOTATION, "operator": "Exists",
                                                                "effect": "NoSchedule"}]}}}}

    async def _watch(self, started: asyncio.Event) -> None:
        async with contextlib.aclosing(self.watch("/api/v1/pods", "pods", started)) as events:
            async for t, wall, ev in events:
                if ev["type"] not in ("ADDED", "MODIFIED"):
                    continue
                pod = ev["object"]
                uid = pod["metadata"]["uid"]
                cs = (pod.get("status") or {}).get("containerStatuses") or []
                spec_n = len((pod.get("spec") or {}).get("containers") or [])
                if uid not in self.started and cs and len(cs) == spec_n and all(
                        c.get("started") or "running" in (c.get("state") or {}) for c in cs):
                    secs = wall - parse_time(pod["metadata"]["creationTimestamp"])
                    self.started[uid] = secs
                    self.extra.setdefault("pod-startup", []).append((t, secs))

    async def run(self, stop: asyncio.Event) -> None:
        started = asyncio.Event()
        watcher = asyncio.create_task(self._watch(started))
        await asyncio.wait([watcher, asyncio.create_task(started.wait())], return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():
            watcher.result()
        t0 = time.monotonic()
        creating = asyncio.Event()

        async def make(i):
            d = self.deployment(i)
            self.tried += 1
            code, _ = await self.client.call("POST", f"/apis/apps/v1/namespaces/{d['metadata']['namespace']}/deployments",
                                             body=orjson.dumps(d), resource="deployments", verb="POST",
                                             scope="resource")
            self.made += code == 201

        async def until():
            try:
                await asyncio.wait_for(stop.wait(), self.topo_window * 2 / 3)
            except asyncio.TimeoutError:
                pass
            creating.set()
        await asyncio.gather(paced(creating, self.rate, make, 8), until())
        await stop.wait()
        self.window_s = time.monotonic() - t0
        # pods still starting at the window's end get a grace period before the check
        deadline = time.monotonic() + 60
        while len(self.started) < self.made * self.replicas and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)

    async def check(self) -> dict[str, dict]:
        want = self.made * self.replicas
        pods = await self.list_items(f"/api/v1/pods?labelSelector={RUN_LABEL}%3D{self.run_id}")
        running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
        return {"every Deployment created": {"ok": self.made > 0 and self.made == self.tried,
                                             "detail": f"{self.made} of {self.tried}"},
                "every Pod bound and Running": {"ok": len(pods) == want and running == want and bound == want,
                                                "detail": f"{len(pods)} pods of {want}, {bound} bound, "
                                                          f"{running} Running"},
                "every Pod's startup observed via watch": {"ok": len(self.started) == want,
                                                           "detail": f"{len(self.started)} of {want}"}}

    def load(self) -> dict:
        """Pods asked for, and Pods started, per second of the creating part of the window."""
        creating = max(min(self.window_s, self.topo_window * 2 / 3), 1e-9)
        return {"unit": "pods/s", "offered": round(self.rate * self.replicas, 2),
                "achieved": round(len(self.started) / creating, 2)}


KINDS = {"nodes": Nodes, "churn": Churn, "state": State, "pods": Pods}


def make(part: Part, size: float, topo: Topology, client: AsyncClient, run_id: str, window_s: float,
         say=print) -> Workload:
    w = KINDS[part.kind](part, size, topo, client, run_id, say=say)
    w.topo_window = window_s
    return w


__all__ = ["KINDS", "Sample", "Workload", "make"]
