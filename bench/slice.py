"""The sharded slice's recipe and scale test (issue 11 §3): K resident shards + the front + K controllers
against one full replica, over one etcd, for K = 1, 2, 4.

    .venv/bin/python -m bench.slice [--quick] [--ks 1,2,4] [--profiles churn,state] [--objects N]
                                    [--churn-seconds S] [--rate R] [--lists N] [--big N]
                                    [--list-path PROFILE=PATH] [--out bench/out/slice.json] [--docs]
                                    [--png bench/out/slice.png]

Per profile the objects are loaded once through a `--watch-cache=false` loader; a full replica (one
ordinary apiserver, cache on) runs beside every slice. Per K a slice is started (`shardslice.launcher.Slice`:
K shards with complementary `--residency`, the front over them, K controllers each pinned to its shard) and
measured while the profile's writers run:

* churn-bound: `widgets.slice.example.com` (~1 KB) created, updated and deleted (1:1:1) at a steady
  `--rate` through the front; the controllers reconcile every generation. Watch delivery: one unsharded
  watch through the front and one on the full replica, latency from each write's acknowledgement to its
  event. Reconcile latency: from the write's acknowledgement to the controller's status write.
  Exactly once: no (uid, generation) reconciled twice, every live object's last generation reconciled,
  each by the owner of its UID's range; out-of-range reads/writes 0. Capacity (`--burst N`): the
  controllers stopped (SIGSTOP), N Widgets given a new generation, the controllers continued: reconciles
  per second until the backlog is written.
* state-bound: bench/workloads.StateProfile (ConfigMaps, Secrets, Pods, RoleBindings, a few 100 KB
  ConfigMaps; shards with `--residency-full-resources namespaces,customresourcedefinitions`), a trickle of
  ConfigMap updates; `--big N` adds N more 100 KB ConfigMaps (the same shapes, more bytes: at 8,000
  objects every process's ~65 MiB empty floor dominates RSS, so the memory target is for large states).

Then, writers stopped: `--lists` unsharded consistent lists (`/apis/.../widgets`, `/api/v1/configmaps`)
through the front and on the full replica (p50/p99), and on one shard (the unsharded list a shard sends to
etcd: what K shards without a front cost). RSS (VmRSS) of the front + shards, of the full replica, of the
controllers; and the slice's pages, each physical page resident in any of its processes once (`bench.procmem`),
against the full replica's (issue 21 counts a deployment's memory with shared pages once). etcd requests (`etcd_requests_total` scraped from every apiserver's /metrics): range reads of
a whole resource (`operation="list"`) by the front and shards after the slice was ready (must stay 0),
and etcd requests per list of each path.

Without the front (`front` package absent) the front columns are n/a and the writers go through the loader.
Table on stdout, JSON to --out (and, with --docs, docs/slice.json and docs/slice.png), plot to --png.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import signal
import sys
import tempfile
import time

import aiohttp
import orjson

from bench.harness import (Apiserver, BenchError, current_etcd, get_json, log, post, proc_status_kib, run_pool,
                           stop_all, versions, wait_all_ready_async, write_json)
from bench.procmem import group_bytes
from bench.report import MIB, pct, render
from bench.workloads import StateProfile, blob_configmap, ensure_namespace, paced
from shardslice import widgets
from shardslice.launcher import Slice, front_available

NS = "churn"
# The etcd requests a list can cause: a range read of the resource, the current revision (a consistent list).
# Every apiserver also sends periodic ones (object counts, "count"; single-key reads, "get") whatever the lists.
LIST_READS = ("list", "getCurrentResourceVersion")
JSON_CT = {"Content-Type": "application/json"}
_METRIC = re.compile(r'^etcd_requests_total\{operation="([^"]*)",type="([^"]*)"\} ([0-9.e+]+)$', re.M)


# --- the churn-bound profile on the slice's own custom resource ---------------------------------------------

class SliceChurn:
    """Widgets of ~1 KB: `n` loaded, then create/update/delete (1:1:1) at `rate`/s; every acknowledged
    create and update is remembered by (uid, generation) and by resourceVersion with its time."""
    name = "churn"
    title = "churn-bound"
    full_resources = None
    list_path = widgets.collection()

    def __init__(self, n: int):
        self.n = n
        self.live: list[str] = []
        self.next_id = 0
        self.acks: dict[tuple[str, int], float] = {}   # (uid, generation) -> acknowledged at
        self.ack_rv: dict[str, float] = {}             # resourceVersion -> acknowledged at
        self.writes = self.write_errors = self.seq = 0
        self.sample_bytes = 0

    def make(self, i: int, size: int | None = None) -> dict:
        return widgets.widget(f"w-{i:07d}", NS, i % 100 if size is None else size, {"app": f"a{i % 10}"},
                              payload=("%07d" % i) * 120)

    async def load(self, s, base, clients):
        await ensure_namespace(s, base, NS)
        await post(s, base + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgets.crd(), ok=(201, 409))
        url = base + widgets.collection(NS)
        for _ in range(200):
            async with s.get(url, params={"limit": "1"}) as r:
                await r.read()
                if r.status == 200:
                    break
            await asyncio.sleep(0.1)

        async def op(i):
            body = await post(s, url, self.make(i))
            self.sample_bytes = len(body)
            self.live.append(f"w-{i:07d}")
        await run_pool(self.n, clients, op, "widgets", steps=5)
        self.next_id = self.n

    def describe(self) -> str:
        return f"{self.n} Widgets (~{self.sample_bytes / 1024:.1f} KB)"

    def _ack(self, body: bytes, t: float) -> None:
        md = orjson.loads(body)["metadata"]
        self.acks[(md["uid"], md["generation"])] = t
        self.ack_rv[md["resourceVersion"]] = t

    async def writer(self, s, base, stop: asyncio.Event, rate: float):
        url = base + widgets.collection(NS)
        rnd = random.Random(11)

        async def op(i):
            kind = i % 3
            ok = False
            if kind == 0:
                j = self.next_id
                self.next_id += 1
                async with s.post(url, data=orjson.dumps(self.make(j)), headers=JSON_CT) as r:
                    body = await r.read()
                    if r.status == 201:
                        ok = True
                        self._ack(body, time.time())
                        self.live.append(f"w-{j:07d}")
            elif kind == 1 and self.live:
                name = self.live[rnd.randrange(len(self.live))]
                self.seq += 1   # a new size every time (created ones are < 100): never a no-op patch
                patch = {"spec": {"size": 100 + self.seq}}
                async with s.patch(f"{url}/{name}", data=orjson.dumps(patch),
                                   headers={"Content-Type": "application/merge-patch+json"}) as r:
                    body = await r.read()
                    ok = r.status == 200 or r.status == 404
                    if r.status == 200:
                        self._ack(body, time.time())
            elif self.live:
                name = self.live.pop(rnd.randrange(len(self.live)))
                async with s.delete(f"{url}/{name}") as r:
                    await r.read()
                    ok = r.status in (200, 404)
            self.writes += 1
            self.write_errors += not ok
        await paced(stop, rate, 8, op)


class SliceState(StateProfile):
    """bench/workloads.StateProfile, plus `big` more 100 KB ConfigMaps (--big: the same shapes with more
    bytes, so the objects rather than the processes' floors dominate RSS)."""
    list_path = "/api/v1/configmaps"
    big = 0

    async def load(self, s, base, clients):
        await super().load(s, base, clients)
        first = max(2, self.n // 1000)

        async def op(i):
            ns = f"state-{i % self.NS}"
            await self.create(s, base, f"/api/v1/namespaces/{ns}/configmaps", blob_configmap(ns, first + i),
                              "100KB-ConfigMaps")
        await run_pool(self.big, min(clients, 4), op, "more big", steps=5)

    async def writer(self, s, base, stop: asyncio.Event, rate: float):   # noqa: ARG002 (its own trickle)
        await super().writer(s, base, stop)


PROFILES = {"churn": SliceChurn, "state": SliceState}


# --- readings ------------------------------------------------------------------------------------------------

async def etcd_requests(s, base: str) -> dict[str, float]:
    """etcd_requests_total of one apiserver, summed per operation."""
    async with s.get(base + "/metrics") as r:
        text = (await r.read()).decode()
    out: dict[str, float] = {}
    for op, _typ, v in _METRIC.findall(text):
        out[op] = out.get(op, 0.0) + float(v)
    return out


async def etcd_requests_sum(s, bases: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for b in bases:
        for op, v in (await etcd_requests(s, b)).items():
            out[op] = out.get(op, 0.0) + v
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in set(after) | set(before)
            if after.get(k, 0.0) != before.get(k, 0.0)}


def rss_bytes(pid: int) -> int:
    return proc_status_kib(pid)["VmRSS"] * 1024


async def gc_all(s, bases: list[str]) -> None:
    """Ask every apiserver to collect garbage before RSS is read (/debug/residency?gc=1; the front may not
    serve it, which is fine)."""
    for b in bases:
        try:
            async with s.get(b + "/debug/residency", params={"gc": "1"}) as r:
                await r.read()
        except aiohttp.ClientError:
            pass


async def timed_lists(s, base: str, path: str, n: int) -> tuple[list[float], int]:
    """n consistent unsharded lists; latencies in ms and the item count of the last."""
    lat, items = [], 0
    for _ in range(n):
        t0 = time.perf_counter()
        async with s.get(base + path) as r:
            body = await r.read()
            if r.status != 200:
                raise BenchError(f"list {base}{path}: HTTP {r.status}: {body[:300]!r}")
        lat.append((time.perf_counter() - t0) * 1000.0)
        items = body.count(b'"resourceVersion"') - 1
    return lat, items


class WatchProbe:
    """One unsharded watch; the receive time of each event's resourceVersion."""

    def __init__(self, name: str, base: str, path: str, rv: str):
        self.name, self.base, self.path, self.rv = name, base, path, rv
        self.recv: dict[str, float] = {}
        self.events = 0
        self.errors: list[str] = []

    async def run(self, s) -> None:
        params = {"watch": "1", "resourceVersion": self.rv, "allowWatchBookmarks": "true", "timeoutSeconds": "3600"}
        try:
            async with s.get(self.base + self.path, params=params,
                             timeout=aiohttp.ClientTimeout(total=None, sock_read=None)) as r:
                if r.status != 200:
                    self.errors.append(f"HTTP {r.status}: {(await r.read())[:200]!r}")
                    return
                buf = b""
                async for chunk in r.content.iter_any():
                    now = time.time()
                    buf += chunk
                    *lines, buf = buf.split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        ev = orjson.loads(line)
                        if ev["type"] == "ERROR":
                            self.errors.append(str(ev["object"].get("message")))
                            return
                        if ev["type"] != "BOOKMARK":
                            self.events += 1
                            self.recv.setdefault(ev["object"]["metadata"]["resourceVersion"], now)
        except (aiohttp.ClientError, asyncio.CancelledError) as e:
            if not isinstance(e, asyncio.CancelledError):
                self.errors.append(f"{type(e).__name__}: {e}")

    def latencies(self, ack_rv: dict[str, float]) -> list[float]:
        return [(self.recv[rv] - t) * 1000.0 for rv, t in ack_rv.items() if rv in self.recv]


def stats(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    return {"n": len(values), "p50": pct(values, 50), "p99": pct(values, 99), "max": max(values)}


# --- one K ---------------------------------------------------------------------------------------------------

async def controller_docs(s, sl: Slice, timeout: float = 30.0) -> list[dict]:
    """Every controller's records, once none has a key queued or a write in flight (a status write can be
    in etcd, and so in the lists, before its answer reaches the controller)."""
    deadline = time.monotonic() + timeout
    while True:
        docs = [await get_json(s, c.base + "/debug/controller") for c in sl.controllers]
        if all(d["queue"] == 0 and d["in_flight"] == 0 for d in docs) or time.monotonic() > deadline:
            return docs
        await asyncio.sleep(0.2)


async def wait_settled(s, base: str, timeout: float = 120.0) -> float:
    """Until every widget's status reflects its generation; seconds waited."""
    t0 = time.perf_counter()
    while True:
        doc = await get_json(s, base + widgets.collection())
        if all(widgets.reconciled(o) for o in doc["items"]):
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            left = sum(not widgets.reconciled(o) for o in doc["items"])
            raise BenchError(f"{left} widgets still unreconciled after {timeout:.0f} s")
        await asyncio.sleep(0.2)


def reconcile_report(prof, docs: list[dict], sl: Slice, live: list[dict], t_start: float, t_end: float) -> dict:
    """Exactly once, in range, latencies from acknowledgement, throughput over the churn window."""
    seen: dict[tuple[str, int], str] = {}
    acks = getattr(prof, "acks", {})
    dup = outside = 0
    lat, in_window = [], 0
    for d, c in zip(docs, sl.controllers):
        for rec in d["reconciles"]:
            key = (rec["uid"], rec["generation"])
            dup += key in seen
            seen[key] = d["name"]
            outside += not c.selector.matches(rec["uid"], rec["namespace"])
            if t_start <= rec["done"] <= t_end:
                in_window += 1
            t_ack = acks.get(key)
            if t_ack is not None:
                lat.append((rec["done"] - t_ack) * 1000.0)
    # every live object is reconciled (wait_settled saw it); those written during this K's run by these
    # controllers: the last generation of each object acknowledged in this run must be in their records
    missing_final = [(o["metadata"]["name"], o["metadata"]["uid"], o["metadata"]["generation"],
                      o["metadata"]["resourceVersion"], o.get("status")) for o in live
                     if (o["metadata"]["uid"], o["metadata"]["generation"]) in acks
                     and (o["metadata"]["uid"], o["metadata"]["generation"]) not in seen]
    acked = len(acks)
    counts = [d["counts"] for d in docs]
    return {"reconciles": len(seen) + dup, "duplicates": dup, "outside_range_by_uid": outside,
            "out_of_range_reads": sum(c["out_of_range_reads"] for c in counts),
            "out_of_range_writes": sum(c["out_of_range_writes"] for c in counts),
            "conflicts": sum(c["conflicts"] for c in counts), "errors": sum(c["errors"] for c in counts),
            "live_objects": len(live), "final_generation_unreconciled": len(missing_final),
            "final_generation_unreconciled_examples": missing_final[:5],
            "acked_generations": acked, "acked_generations_reconciled": len(lat),
            "latency_ms": stats(lat), "window_s": t_end - t_start,
            "throughput_per_s": in_window / (t_end - t_start) if t_end > t_start else 0.0,
            "per_controller": [{"name": d["name"], "objects": d["objects"], "reconciles": d["reconciles_total"],
                                "counts": d["counts"]} for d in docs]}


async def backlog(s, sl: Slice, prof: SliceChurn, base: str, docs: list[dict], n: int) -> dict:
    """Capacity: the controllers stopped (SIGSTOP), `n` Widgets given a new generation, the controllers
    continued (SIGCONT): reconciles per second until every one of those generations is written, and the
    exactly-once / in-range checks over every record of this K."""
    url = base + widgets.collection(NS)
    names = prof.live[:n]
    since = [d["reconciles_total"] for d in docs]
    want: dict[tuple[str, int], float] = {}
    for c in sl.controllers:
        os.kill(c.pid, signal.SIGSTOP)
    try:
        async def op(i):
            prof.seq += 1
            async with s.patch(f"{url}/{names[i]}", data=orjson.dumps({"spec": {"size": 100 + prof.seq}}),
                               headers={"Content-Type": "application/merge-patch+json"}) as r:
                body = await r.read()
                if r.status == 200:
                    md = orjson.loads(body)["metadata"]
                    want[(md["uid"], md["generation"])] = time.time()
        await run_pool(len(names), 16, op, "backlog writes", steps=0)
    finally:
        for c in sl.controllers:
            os.kill(c.pid, signal.SIGCONT)
    t0 = time.time()
    done: dict[tuple[str, int], float] = {}
    deadline = time.monotonic() + 600
    while len(done) < len(want) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        for i, c in enumerate(sl.controllers):
            for r in (await get_json(s, c.base + "/debug/controller", {"since": str(since[i])}))["reconciles"]:
                since[i] += 1
                key = (r["uid"], r["generation"])
                if key in want:
                    done[key] = r["done"]
    after = await controller_docs(s, sl)
    seen: set = set()
    dup = outside = 0
    for d, c in zip(after, sl.controllers):
        for r in d["reconciles"]:
            key = (r["uid"], r["generation"])
            dup += key in seen
            seen.add(key)
            outside += not c.selector.matches(r["uid"], r["namespace"])
    last = max(done.values(), default=t0)
    return {"objects": len(want), "reconciled": len(done), "drain_s": last - t0,
            "throughput_per_s": len(done) / (last - t0) if last > t0 else 0.0,
            "latency_from_continue_ms": stats([(t - t0) * 1000.0 for t in done.values()]),
            "duplicates_all_records": dup, "outside_range_all_records": outside,
            "out_of_range_reads": sum(d["counts"]["out_of_range_reads"] for d in after),
            "relists_410": sum(d["counts"]["relists_410"] for d in after)}


async def run_k(s, k: int, etcd_ep: str, prefix: str, prof, full: Apiserver, loader: Apiserver,
                a: argparse.Namespace, log_dir: str) -> dict:
    extra = ("--residency-full-resources", prof.full_resources) if prof.full_resources else ()
    sl = Slice(k, etcd_servers=etcd_ep, etcd_prefix=prefix, shard_args=extra, log_dir=log_dir,
               zygote=a.zygote == "true")
    log(f"K={k}: starting {k} shard(s), {'the front, ' if front_available() else ''}{k} controller(s)")
    t0 = time.perf_counter()
    await asyncio.to_thread(sl.start, a.start_timeout)
    start_s = time.perf_counter() - t0
    try:
        apis = [p.base for p in ([sl.front] if sl.front else []) + sl.shards]
        write_base = sl.front.base if sl.front else loader.base
        if isinstance(prof, SliceChurn):
            await wait_settled(s, full.base, 300)
        # start-up is over: from here on no process of the slice may read a whole resource from etcd
        etcd0 = await etcd_requests_sum(s, apis)
        full0 = await etcd_requests(s, full.base)
        rv = (await get_json(s, full.base + prof.list_path, {"limit": "1"}))["metadata"]["resourceVersion"]
        probes = [WatchProbe("direct", full.base, prof.list_path, rv)]
        if sl.front:
            probes.append(WatchProbe("front", sl.front.base, prof.list_path, rv))
        wtasks = [asyncio.create_task(p.run(s)) for p in probes]
        stop = asyncio.Event()
        if isinstance(prof, SliceChurn):   # this K's writes only
            prof.acks, prof.ack_rv = {}, {}
        w0 = prof.writes
        t_start = time.time()
        wt = asyncio.create_task(prof.writer(s, write_base, stop, a.rate))
        await asyncio.sleep(a.churn_seconds)
        # RSS while the writers run, after a collection in every apiserver
        await gc_all(s, apis + [full.base])
        rss = {"front": rss_bytes(sl.front.pid) if sl.front else 0,
               "shards": [rss_bytes(p.pid) for p in sl.shards], "full": rss_bytes(full.pid),
               "controllers": [rss_bytes(p.pid) for p in sl.controllers],
               # The process the apiservers were forked from (deployment/zygote.py): most of its pages are the
               # children's too, so it is in the pages below, not in the slice's summed RSS.
               "zygote": rss_bytes(sl.zygote.pid) if sl.zygote and sl.zygote.pid else 0}
        # The slice's pages, each once (what it would occupy on a machine of its own), and the full replica's
        rss["slice_pages"] = group_bytes(([sl.front.pid] if sl.front else []) + [p.pid for p in sl.shards]
                                         + ([sl.zygote.pid] if sl.zygote and sl.zygote.pid else []))
        rss["full_pages"] = group_bytes([full.pid])
        stop.set()
        await wt
        t_end = time.time()
        writes = prof.writes - w0
        settle_s = await wait_settled(s, full.base) if isinstance(prof, SliceChurn) else 0.0
        await asyncio.sleep(1.0)   # the last events reach the watchers
        for t in wtasks:
            t.cancel()
        await asyncio.gather(*wtasks, return_exceptions=True)
        acks = getattr(prof, "ack_rv", {})
        watch = {p.name: dict(stats(p.latencies({rv_: t for rv_, t in acks.items()})), events=p.events,
                              errors=p.errors[:3]) for p in probes}
        if isinstance(prof, SliceChurn):
            prof.ack_rv = {}
        docs = await controller_docs(s, sl)
        live = (await get_json(s, full.base + widgets.collection()))["items"] if isinstance(prof, SliceChurn) else []
        rec = reconcile_report(prof, docs, sl, live, t_start, t_end)
        burst = await backlog(s, sl, prof, write_base, docs, a.burst) if isinstance(prof, SliceChurn) else None
        # unsharded lists, writers stopped: the front, the full replica
        lists = {}
        e_before = await etcd_requests_sum(s, apis)
        if sl.front:
            lat, items = await timed_lists(s, sl.front.base, prof.list_path, a.lists)
            e_after = await etcd_requests_sum(s, apis)
            lists["front"] = dict(stats(lat), items=items, etcd_requests_per_list=sum(
                delta(e_after, e_before).values()) / a.lists, etcd_ops=delta(e_after, e_before))
        f_before = await etcd_requests(s, full.base)
        lat, items = await timed_lists(s, full.base, prof.list_path, a.lists)
        f_after = await etcd_requests(s, full.base)
        lists["full"] = dict(stats(lat), items=items, etcd_requests_per_list=sum(
            delta(f_after, f_before).values()) / a.lists, etcd_ops=delta(f_after, f_before))
        etcd_after = await etcd_requests_sum(s, apis)
        full_after = await etcd_requests(s, full.base)
        # the alternative without a front: an unsharded list on a shard goes to etcd
        s_before = await etcd_requests(s, sl.shards[0].base)
        lat, items = await timed_lists(s, sl.shards[0].base, prof.list_path, a.lists)
        s_after = await etcd_requests(s, sl.shards[0].base)
        lists["shard_to_etcd"] = dict(stats(lat), items=items, etcd_requests_per_list=sum(
            delta(s_after, s_before).values()) / a.lists, etcd_ops=delta(s_after, s_before))
        for lst in lists.values():
            lst["etcd_reads_per_list"] = sum(lst["etcd_ops"].get(op, 0.0) for op in LIST_READS) / lst["n"]
        sl.check_alive()
        run = {"k": k, "selectors": [str(x) for x in sl.selectors], "front": bool(sl.front), "start_s": start_s,
               "writes": writes, "write_errors": prof.write_errors, "writes_per_s": writes / (t_end - t_start),
               "settle_s": settle_s, "rss": rss,
               "rss_slice_bytes": rss["front"] + sum(rss["shards"]),
               "etcd_after_startup": delta(etcd_after, etcd0),
               "etcd_full_range_reads_after_startup": delta(etcd_after, etcd0).get("list", 0.0),
               "full_replica_etcd_during_run": delta(full_after, full0),
               "lists": lists, "watch": watch, "reconcile": rec, "backlog": burst}
        log(f"K={k}: RSS slice {run['rss_slice_bytes'] / MIB:.0f} MiB vs full {rss['full'] / MIB:.0f} MiB; "
            f"reconcile p99 {fmt_ms(rec['latency_ms']['p99'])}; duplicates {rec['duplicates']}, out of range "
            f"{rec['out_of_range_reads'] + rec['out_of_range_writes'] + rec['outside_range_by_uid']}; etcd lists "
            f"after start-up {run['etcd_full_range_reads_after_startup']:.0f}")
        return run
    finally:
        await asyncio.to_thread(sl.stop)


async def measure_floor(s, etcd_ep: str) -> int:
    fp = Apiserver(etcd_ep, etcd_prefix=f"/registry-slice-empty-{os.getpid()}", name="floor",
                   log_name="bench-slice-floor").start()
    try:
        await wait_all_ready_async([fp], 60)
        await asyncio.sleep(1.0)
        await gc_all(s, [fp.base])
        return rss_bytes(fp.pid)
    finally:
        stop_all([fp], strict=False)


async def run_profile(s, etcd_ep: str, name: str, a: argparse.Namespace, log_dir: str) -> dict:
    prof = PROFILES[name](a.objects)
    if name == "state":
        prof.big = a.big
    if a.list_path.get(name):
        prof.list_path = a.list_path[name]
    prefix = f"/registry-slice-{name}-{os.getpid()}"
    loader = Apiserver(etcd_ep, "--watch-cache=false", etcd_prefix=prefix, name=f"{name}-loader",
                       log_name="bench-slice-loader").start()
    procs = [loader]
    try:
        await wait_all_ready_async([loader], 60)
        log(f"== {prof.title}: loading {a.objects} objects (prefix {prefix})")
        t0 = time.perf_counter()
        await prof.load(s, loader.base, a.clients)
        log(f"loaded in {time.perf_counter() - t0:.0f} s: {prof.describe()}")
        full = Apiserver(etcd_ep, etcd_prefix=prefix, name=f"{name}-full", log_name="bench-slice-full").start()
        procs.append(full)
        await wait_all_ready_async([full], a.start_timeout)
        runs = [await run_k(s, k, etcd_ep, prefix, prof, full, loader, a, log_dir) for k in a.ks]
        return {"title": prof.title, "description": prof.describe(), "list_path": prof.list_path, "runs": runs}
    finally:
        stop_all(procs, timeout=15, strict=False)


# --- report --------------------------------------------------------------------------------------------------

def fmt_ms(v) -> str:
    return "n/a" if v is None else f"{v:,.1f} ms"


def above_floor(run: dict, floor: int) -> str:
    """(slice - (K + front) floors) / (full - floor): the objects' share, the empty processes taken out."""
    n = run["k"] + (1 if run["front"] else 0)
    full = run["rss"]["full"] - floor
    return f"{(run['rss_slice_bytes'] - n * floor) / full:.2f}" if full > 0 else "n/a"


def per_list(lst: dict | None) -> str:
    if not lst:
        return "n/a"
    return f"{lst['etcd_reads_per_list']:.1f} ({lst['etcd_ops'].get('list', 0.0) / lst['n']:.1f})"


def ratio(a, b) -> str:
    return "n/a" if a is None or b in (None, 0) else f"{a / b:.2f}"


def pages_target(profile: str, k: int, big: bool) -> float | None:
    """Issue 21's bound on the slice's pages against one full replica's: 2.0x at K = 2 of the state-bound profile,
    1.2x at K = 4 of its 1.66 GB form (`--big 16000`); None where it sets none."""
    if profile != "state":
        return None
    return 2.0 if k == 2 else 1.2 if k == 4 and big else None


def targets(doc: dict) -> list[dict]:
    out = []
    for name, pr in doc["profiles"].items():
        for run in pr["runs"]:
            if run["k"] != max(r["k"] for r in pr["runs"]):
                continue
            full = run["rss"]["full"]
            out.append({"profile": name, "k": run["k"], "target": "total RSS (front + shards) <= 1.2x one full replica",
                        "value": f"{run['rss_slice_bytes'] / full:.2f}x", "met": run["rss_slice_bytes"] <= 1.2 * full})
            pages, fpages = run["rss"].get("slice_pages"), run["rss"].get("full_pages")
            limit = pages_target(name, run["k"], bool(doc["params"].get("big")))
            if pages and fpages and limit:
                out.append({"profile": name, "k": run["k"], "target": "issue 21: the slice's pages (each shared page "
                            f"once) <= {limit}x one full replica's", "value": f"{pages / fpages:.2f}x",
                            "met": pages <= limit * fpages})
            fr = run["lists"].get("front")
            out.append({"profile": name, "k": run["k"], "target": "unsharded list p50 through the front <= 1.5x full replica",
                        "value": ratio(fr and fr["p50"], run["lists"]["full"]["p50"]) + "x" if fr else "n/a (no front)",
                        "met": (fr["p50"] <= 1.5 * run["lists"]["full"]["p50"]) if fr else None})
            w = run["watch"]
            if "front" in w and w["front"]["p99"] is not None and w["direct"]["p99"] is not None:
                add = w["front"]["p99"] - w["direct"]["p99"]
                out.append({"profile": name, "k": run["k"], "target": "the merge adds < 50 ms p99 to watch delivery",
                            "value": f"{add:+.1f} ms", "met": add < 50})
            elif name == "churn":
                out.append({"profile": name, "k": run["k"], "target": "the merge adds < 50 ms p99 to watch delivery",
                            "value": "n/a (no front)", "met": None})
        reads = sum(r["etcd_full_range_reads_after_startup"] for r in pr["runs"])
        out.append({"profile": name, "target": "zero etcd full-range reads after start-up (all K)",
                    "value": f"{reads:.0f}", "met": reads == 0})
        if name == "churn":
            bad = sum(r["reconcile"]["duplicates"] + r["reconcile"]["out_of_range_reads"]
                      + r["reconcile"]["out_of_range_writes"] + r["reconcile"]["outside_range_by_uid"]
                      + r["reconcile"]["final_generation_unreconciled"] for r in pr["runs"])
            bad += sum(b["duplicates_all_records"] + b["outside_range_all_records"] + b["out_of_range_reads"]
                       + b["objects"] - b["reconciled"] for b in (r["backlog"] for r in pr["runs"]) if b)
            out.append({"profile": name, "target": "every generation reconciled at most once, in range; every final "
                        "generation reconciled (all K)", "value": f"{bad} violations", "met": bad == 0})
    return out


def table(doc: dict) -> str:
    lines = [f"# sharded slice: K shards + front + K controllers vs one full replica; etcd "
             f"{doc['versions'].get('etcd', {}).get('etcdserver', '?') if isinstance(doc['versions'].get('etcd'), dict) else '?'}, "
             f"{doc['versions'].get('cpu_affinity') or doc['versions']['cpu_count']} cores, load average at start "
             f"{' '.join(f'{x:.1f}' for x in doc['loadavg_at_start'])}; empty apiserver RSS {doc['floor_rss_bytes'] / MIB:.0f} MiB"]
    for name, pr in doc["profiles"].items():
        lines.append("")
        lines.append(f"## {pr['title']}: {pr['description']}; unsharded list {pr['list_path']}")
        mem, lat = [], []
        for r in pr["runs"]:
            full = r["rss"]["full"]
            L, W, R = r["lists"], r["watch"], r["reconcile"]
            fr = L.get("front")
            pages, fpages = r["rss"].get("slice_pages"), r["rss"].get("full_pages")
            mem.append((
                str(r["k"]), f"{r['rss_slice_bytes'] / MIB:,.0f}", f"{full / MIB:,.0f}",
                f"{r['rss_slice_bytes'] / full:.2f}",
                f"{pages / MIB:,.0f} / {fpages / MIB:,.0f} ({pages / fpages:.2f})" if pages and fpages else "n/a",
                above_floor(r, doc["floor_rss_bytes"]),
                f"{r['rss_slice_bytes'] / (r['k'] * full):.2f}",
                f"{r['etcd_full_range_reads_after_startup']:.0f}",
                " / ".join(per_list(L.get(key)) for key in ("front", "full", "shard_to_etcd")),
                f"{R['duplicates']} / {R['out_of_range_reads'] + R['out_of_range_writes'] + R['outside_range_by_uid']}"))
            lat.append((
                str(r["k"]), fmt_ms(fr and fr["p50"]) + " / " + fmt_ms(fr and fr["p99"]),
                fmt_ms(L["full"]["p50"]) + " / " + fmt_ms(L["full"]["p99"]),
                ratio(fr and fr["p50"], L["full"]["p50"]),
                fmt_ms(L["shard_to_etcd"]["p50"]),
                fmt_ms(W.get("front", {}).get("p99")) + " / " + fmt_ms(W["direct"]["p99"]),
                (fmt_ms(R["latency_ms"]["p50"]) + " / " + fmt_ms(R["latency_ms"]["p99"])) if R["latency_ms"]["n"] else "n/a",
                f"{R['throughput_per_s']:.1f}" if name == "churn" else "n/a",
                (f"{r['backlog']['objects']} in {r['backlog']['drain_s']:.1f} s: {r['backlog']['throughput_per_s']:.0f}/s"
                 if r.get("backlog") else "n/a")))
        lines.append(render(mem, ("K", "slice RSS MiB", "full MiB", "slice/full", "pages MiB slice / full (ratio)",
                                  "-floor", "slice/(K*full)",
                                  "etcd lists", "etcd reads (lists) per list: front / full / shard", "dup / out")))
        lines.append("")
        lines.append(render(lat, ("K", "list p50 / p99 front", "list p50 / p99 full", "front/full p50",
                                  "list p50 shard->etcd", "watch p99 front / direct", "reconcile p50 / p99",
                                  "reconciles/s", "backlog drained")))
    lines.append("")
    lines.append("# slice RSS = front + K shards (VmRSS while the writers run, after gc); pages = the physical pages "
                 "resident in any of the slice's processes, each once (bench.procmem: shared libraries counted once, as "
                 "on a machine of the slice's own; the zygote the apiservers were forked from included), against the full replica's; -floor = the same ratio with "
                 "an empty apiserver's RSS taken from every process; the controllers are clients and "
                 "not counted (their RSS is in the JSON); etcd lists = etcd range reads of a whole resource by the front "
                 "and shards after start-up; etcd reads (lists) per list = range reads and current-revision reads of the serving processes per unsharded list (of them, range reads of a whole resource; the periodic count and get requests every apiserver makes are in the JSON); "
                 "reconcile latency from the write's acknowledgement to the status write; reconciles/s during the churn "
                 "(bounded by the offered creates + updates); backlog drained: --burst generations written while the "
                 "controllers were stopped, reconciled after SIGCONT; dup/out = generations "
                 "reconciled twice / objects read or written outside a controller's range")
    lines.append("")
    lines.append("targets:")
    for t in doc["targets"]:
        where = f" [{t['profile']} K={t['k']}]" if "k" in t else f" [{t['profile']}]"
        lines.append(f"  {({True: 'met', False: 'NOT met', None: 'n/a'})[t['met']]:<8} {t['target']}{where}: {t['value']}")
    return "\n".join(lines)


def plot(doc: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    profs = list(doc["profiles"].items())
    fig, axes = plt.subplots(len(profs), 3, figsize=(15, 4.2 * len(profs)), squeeze=False)
    for row, (name, pr) in zip(axes, profs):
        ks = [r["k"] for r in pr["runs"]]
        x = range(len(ks))
        full = [r["rss"]["full"] / MIB for r in pr["runs"]]
        ax = row[0]
        ax.bar([i - 0.27 for i in x], [r["rss_slice_bytes"] / MIB for r in pr["runs"]], 0.27, label="slice: front + K shards")
        ax.bar(list(x), full, 0.27, label="one full replica")
        ax.bar([i + 0.27 for i in x], [k * f for k, f in zip(ks, full)], 0.27, label="K full replicas")
        ax.plot(list(x), [1.2 * f for f in full], "k--", label="target 1.2x full")
        ax.set_xticks(list(x), [f"K={k}" for k in ks])
        ax.set_ylabel("RSS MiB")
        ax.set_title(f"{pr['title']}: memory")
        ax.legend(fontsize=7)
        ax = row[1]
        for key, label in (("front", "through the front"), ("full", "full replica"), ("shard_to_etcd", "shard -> etcd")):
            vals = [(r["lists"][key]["p50"] if key in r["lists"] else None) for r in pr["runs"]]
            if any(v is not None for v in vals):
                ax.plot(ks, [v if v is not None else float("nan") for v in vals], marker="o", label=f"{label} p50")
        ax.set_xticks(ks)
        ax.set_xlabel("K")
        ax.set_ylabel("ms")
        ax.set_title(f"{pr['title']}: unsharded list")
        ax.legend(fontsize=7)
        ax = row[2]
        if name == "churn":
            for key, label in (("p50", "reconcile p50"), ("p99", "reconcile p99")):
                ax.plot(ks, [r["reconcile"]["latency_ms"][key] or float("nan") for r in pr["runs"]], marker="o", label=label)
            for who in ("front", "direct"):
                vals = [r["watch"].get(who, {}).get("p99") for r in pr["runs"]]
                if any(v is not None for v in vals):
                    ax.plot(ks, [v if v is not None else float("nan") for v in vals], marker="s", linestyle=":",
                            label=f"watch delivery p99 ({who})")
            ax.set_title("churn-bound: reconcile and watch latency")
        else:
            ax.plot(ks, [r["etcd_full_range_reads_after_startup"] for r in pr["runs"]], marker="o",
                    label="etcd full-range reads after start-up")
            ax.set_title(f"{pr['title']}: etcd lists after start-up")
        ax.set_xticks(ks)
        ax.set_xlabel("K")
        ax.set_ylabel("ms" if name == "churn" else "range reads")
        ax.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --- main ----------------------------------------------------------------------------------------------------

async def amain(a: argparse.Namespace) -> dict:
    doc = {"command": " ".join(["python -m bench.slice"] + a.argv), "params": vars(a).copy(),
           "loadavg_at_start": list(os.getloadavg()), "front_available": front_available(), "profiles": {}}
    log_dir = tempfile.mkdtemp(prefix="bench-slice-logs-")
    log(f"process logs in {log_dir}")
    t0 = time.perf_counter()
    with current_etcd() as etcd:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64),
                                         timeout=aiohttp.ClientTimeout(total=600)) as s:
            doc["floor_rss_bytes"] = await measure_floor(s, etcd.endpoint)
            for name in a.profiles:
                doc["profiles"][name] = await run_profile(s, etcd.endpoint, name, a, log_dir)
        doc["versions"] = versions(etcd=etcd.endpoint, git=True)
    doc["seconds"] = time.perf_counter() - t0
    doc["targets"] = targets(doc)
    return doc


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.slice", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a smoke run: K=1,2, 300 objects, 4 s of churn at 30/s, 5 lists")
    p.add_argument("--ks", default="1,2,4")
    p.add_argument("--profiles", default="churn,state")
    p.add_argument("--objects", type=int, default=8000)
    p.add_argument("--churn-seconds", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=60.0, help="churn writes per second (create:update:delete 1:1:1)")
    p.add_argument("--lists", type=int, default=20, help="unsharded lists per path")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--burst", type=int, default=2000,
                   help="churn-bound: Widgets given a new generation while the controllers are stopped (capacity)")
    p.add_argument("--start-timeout", type=float, default=300.0, help="seconds for a slice to be ready")
    p.add_argument("--big", type=int, default=0, help="state-bound: this many more 100 KB ConfigMaps")
    p.add_argument("--list-path", action="append", default=[], metavar="PROFILE=PATH",
                   help="the unsharded list of a profile (default: churn=/apis/slice.example.com/v1/widgets, "
                        "state=/api/v1/configmaps)")
    p.add_argument("--zygote", choices=("true", "false"), default="true",
                   help="fork the slice's apiservers from one process that imported the server (false: each its own "
                        "python -m apiserver)")
    p.add_argument("--out", default="bench/out/slice.json")
    p.add_argument("--png", default="bench/out/slice.png")
    p.add_argument("--docs", action="store_true", help="also write docs/slice.json and docs/slice.png")
    if "--quick" in (sys.argv[1:] if argv is None else argv):   # smaller defaults; explicit flags still win
        p.set_defaults(ks="1,2", objects=300, churn_seconds=4.0, rate=30.0, lists=5, burst=100)
    a = p.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    a.ks = [int(x) for x in a.ks.split(",")]
    a.list_path = dict(x.split("=", 1) for x in a.list_path)
    a.profiles = [x for x in a.profiles.split(",") if x]
    for x in a.profiles:
        if x not in PROFILES:
            p.error(f"unknown profile {x!r} (churn, state)")
    doc = asyncio.run(amain(a))
    write_json(a.out, doc)
    plot(doc, a.png)
    if a.docs:
        write_json("docs/slice.json", doc)
        plot(doc, "docs/slice.png")
    print(table(doc))
    log(f"done in {doc['seconds']:.0f} s; JSON {a.out}, plot {a.png}")
    return doc


if __name__ == "__main__":
    main()
