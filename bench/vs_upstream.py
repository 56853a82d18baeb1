"""Ours against the real kube-apiserver, one etcd, one run: every figure as ours/kube.

One current etcd; the reference kube-apiserver v1.37.2 (tools/build_kube_apiserver.py, upstream's default
protobuf storage) and this apiserver (cache on) over the same etcd prefix, both serving HTTPS with the same
serving certificate; every request below goes over HTTPS/1.1 with keep-alive to both (kube also speaks
HTTP/2, which client-go would use; HTTP/1.1 for both keeps the transports alike). Objects are loaded once,
through kube-apiserver (so they are stored as protobuf, as in a real cluster) and both servers' caches hold
them. Load comes from client *processes* (aiohttp, forked), one per concurrent client, so that the client is
not one Python event loop; the machine's cores are shared by client and server, alike for both servers.

Sections (`--sections`, default all six):

* `memory`: per kind (bench/corpus.py's realistic 1.5 KB ConfigMaps, 5 KB Pods, 0.75 KB RoleBindings, 100 KB
  training Pods), bytes per cached object = growth / N once both caches hold the N objects. Heap: kube's `go_memstats_heap_alloc_bytes` after
  a forced GC (`/debug/pprof/heap?gc=1`); ours tracemalloc (which sees the cache's entries and B-tree
  nodes) + the roaring bitmaps' and compression codecs' native bytes (`/debug/residency`; ours runs with
  RESIDENCY_TRACEMALLOC=1 for this section only), read once our cold entries are compressed. RSS for both (ours read
  after `/debug/residency?gc=1&trim=1`: a collection and glibc's malloc_trim, before and after each kind).
  (`--quick` runs ours with `--cache-compression-eager`, so neither section waits out the 75 s window.)
* `lists`: 1,000 x 100 KB ConfigMaps of real config files (`bench/corpus.py`; the KubeCon demo shape at 1/10
  scale): consistent, `resourceVersion=0`, paged (limit 500, followed to the end), label-selected (1/10 of the
  objects); 1 client (sequential requests) and 20 concurrent clients: p50 / p99 per shape. Measured once our
  cache has compressed the objects (cold: the event window's 75 s after the load; `lists_compression`).
* `fanout`: 100 and 1,000 watchers (HTTPS, from the current RV, on a namespace of 100 x 1 KB ConfigMaps)
  spread over `--watch-procs` (4) forked client processes, each holding its share of the watches on one
  aiohttp session and counting updates by the sequence number in the raw bytes (no JSON decoding). A forked
  writer process then PUTs 2,000 (100 watchers) / 500 (1,000 watchers) updates on 16 keep-alive connections,
  always through kube-apiserver (the same writer for both sides, so the watched server only ingests and fans
  out). deliveries/s = updates received by all watchers / (last receipt - first write); write-to-delivery =
  receipt time of the chunk - ack time of the PUT (same host clock), p99 over every delivery; it is
  negative when the watched server delivers before the writer stamps kube's ack, so the p99 ratio is taken
  on send-to-delivery (receipt - time the PUT was sent), which includes the write. Also: the
  CPU-seconds each server used, deliveries per CPU-second of the watched server, and watches the server
  closed before they saw every update (kube-apiserver closes a watcher that stays unresponsive; the
  deliveries/s ratio is then n/a).
* `saturation` (issue 21): watch fan-out at saturation with compiled clients. bench/go/fanout holds 100 (then
  1,000) watches on the server under test, one HTTP/1.1 connection each, and writes through a third apiserver
  over the same etcd (ours, without a watch cache, so neither server under test spends CPU on the writes) at a
  paced rate that rises by sqrt(2) every 10 s. A step passes when every event reaches every watcher within
  10 s of the step's end and p99 write-to-delivery (receipt - PUT ack) is at most 1 s; the ladder stops at
  the first step that fails. Score = the highest deliveries/s (achieved write rate x watchers) of a passing
  step; `--saturation-reps` (3) ladders per server, interleaved, median score compared (target >= 1.2x).
  The `fanout` section's Python watchers and unpaced writer measure something else: at saturation its
  p99 is the backlog's age, whichever server is watched.
* `throughput`: creates/s, updates/s (unconditional PUT of a changed object) and GETs/s (2 per object) of 1 KB
  ConfigMaps from `--tp-clients` (16) keep-alive HTTPS connections of the compiled bench/go/writer (`--tp-client
  python`: one forked Python process per connection, as before 2026-12-06); 4,000
  objects per server, each server in its own namespace, ours then kube per verb.
* `restart`: its own etcd and servers: 100,000 ConfigMaps (~0.9 KB as served) in one namespace, loaded once
  through kube; then each server in turn is stopped (SIGTERM) and started again over the same etcd,
  `--restart-reps` (2) times each. Time to ready = from spawning the process until /readyz is 200 AND a
  consistent list of the namespace (no limit, no resourceVersion) returns all 100,000 objects (probes every
  50 ms, each a new HTTPS connection); the same definition for both; the fastest start of each is
  reported. Peak RSS = VmHWM of the new process once ready (the start and that first list).

    .venv/bin/python -m bench.vs_upstream             # the full run (figures in the README)
    .venv/bin/python -m bench.vs_upstream --quick     # small sizes, for CI smoke (~1.5 min)
    .venv/bin/python -m bench.vs_upstream --sections fanout,restart

Targets (issue 12), ours/kube: heap per object <= 0.3 for every kind; list p50 and p99 <= 1.0 for every
shape; fan-out deliveries/s >= 0.8; creates/s >= 1.0; restart time <= 1.0; (issue 21) fan-out at
saturation >= 1.2. Printed beside the figures, never
asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from array import array
import time

import aiohttp
import orjson

from bench.harness import (JSON_CT, Apiserver, BenchError, check, compression_settled, current_etcd, get_json, log,
                           proc_cpu_s, proc_status_kib, ssl_context, versions, wait_tasks, write_json)
from bench.report import etcd_version_str, pct, render
from bench import corpus
from bench.workloads import sized_configmap
from storage.embedded import free_port, stop_process
from tests.helpers.etcd import load_tool
from tests.helpers.kube import KubeApiserver

TARGETS = {"heap_per_object": ("<=", 0.3), "list_p50": ("<=", 1.0), "list_p99": ("<=", 1.0),
           "fanout_deliveries": (">=", 0.8), "saturation": (">=", 1.2), "creates": (">=", 1.0),
           "restart": ("<=", 1.0)}


# --- the two servers --------------------------------------------------------------------------------------

class Side:
    """One server under test, as the client processes see it: an HTTPS base URL and the credentials."""

    def __init__(self, name: str, base: str, ca: str, cert: tuple[str, str], pid: int):
        self.name, self.base, self.ca, self.cert, self.pid = name, base, ca, cert, pid

    def tls(self) -> dict:
        return {"ca": self.ca, "cert": self.cert}

    def conf(self) -> dict:
        return {"base": self.base, **self.tls()}

    def rss(self) -> int:
        return proc_status_kib(self.pid)["VmRSS"] * 1024

    def cpu_s(self) -> float:
        """CPU seconds the server has used (every process of it: bench.deployment's side sums its children)."""
        return proc_cpu_s(self.pid)

    def hwm(self) -> int:
        return proc_status_kib(self.pid)["VmHWM"] * 1024


def session(conf: dict, limit: int = 0, timeout: float = 600.0) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context(conf), limit=limit),
                                 timeout=aiohttp.ClientTimeout(total=timeout))


class Servers:
    """etcd, kube-apiserver (protobuf storage) and ours (cache on, HTTPS with kube's serving certificate) over
    one etcd prefix. `restart_ours` / `restart_kube` return seconds to ready and the peak RSS while starting."""

    def __init__(self, etcd_endpoint: str, ours_flags: tuple[str, ...] = ()):
        self.etcd_endpoint = etcd_endpoint
        self.ours_flags = ours_flags
        self.kube = KubeApiserver(etcd_endpoint, protobuf=True, sharding_gate=False).start()
        self.ours: Apiserver | None = None
        self.ours_side: Side | None = None
        self.twin: Apiserver | None = None        # ours without tracemalloc, for RSS (see start_twin)
        self.twin_side: Side | None = None

    @property
    def kube_side(self) -> Side:
        k = self.kube
        return Side("kube", k.url, k.ca, k.client_cert, k.proc.pid)

    def _ours(self, name: str, tracemalloc: bool, ready_timeout: float) -> tuple[Apiserver, Side]:
        port = free_port()
        d = self.kube.dir
        proc = Apiserver(self.etcd_endpoint, *self.ours_flags, "--secure-port", str(port),
                         "--tls-cert-file", os.path.join(d, "serving.crt"),
                         "--tls-private-key-file", os.path.join(d, "serving.key"),
                         etcd_prefix="/registry", name=name, log_name=f"bench-vs-upstream-{name}",
                         ready_timeout=ready_timeout,
                         env={"RESIDENCY_TRACEMALLOC": "1"} if tracemalloc else None).start()
        return proc, Side(name, f"https://127.0.0.1:{port}", self.kube.ca, self.kube.client_cert, proc.pid)

    def spawn_ours(self, tracemalloc: bool, ready_timeout: float = 120.0) -> Apiserver:
        """Start ours (a new HTTPS port) without waiting for it."""
        self.ours, self.ours_side = self._ours("ours", tracemalloc, ready_timeout)
        return self.ours

    def start_twin(self) -> None:
        """A second ours, without tracemalloc, for the RSS readings: tracemalloc keeps a trace per live
        allocation in malloc'd memory between the objects, and the holes freed objects leave around them stay
        resident (bench.residency measured 222 MiB RSS with it, 118 MiB without, for one cache)."""
        self.twin, self.twin_side = self._ours("ours-rss", False, 120.0)
        self.twin.wait_ready()

    def stop_twin(self) -> None:
        if self.twin is not None:
            self.twin.stop()
            self.twin = self.twin_side = None

    def start_ours(self, tracemalloc: bool, ready_timeout: float = 120.0) -> Apiserver:
        self.spawn_ours(tracemalloc, ready_timeout)
        self.ours.wait_ready()
        return self.ours

    def stop_kube_process(self) -> None:
        """Stop kube-apiserver but keep its directory (certificates, keys) for `spawn_kube`."""
        stop_process(self.kube.proc, 20)

    def spawn_kube(self) -> None:
        """Start kube-apiserver again with the same arguments (same port and certificates), without waiting."""
        with open(self.kube.log_path, "ab") as f:
            self.kube.proc = subprocess.Popen(self.kube.args, stdout=f, stderr=subprocess.STDOUT,
                                              start_new_session=True)

    def stop(self) -> None:
        if self.ours is not None:
            self.ours.stop()
        self.stop_twin()
        self.kube.stop()


# --- client processes -------------------------------------------------------------------------------------

_CONTINUE = re.compile(rb'"continue":"([^"]*)"')


async def _list_job(s: aiohttp.ClientSession, base: str, job: dict) -> dict:
    lat, sizes = [], []
    for _ in range(job["n"]):
        params = dict(job["params"])
        t0 = time.perf_counter()
        size = 0
        while True:
            async with s.get(base + job["path"], params=params) as r:
                head = b""
                async for chunk in r.content.iter_chunked(1 << 20):
                    if len(head) < 4096:
                        head += chunk[:4096]
                    size += len(chunk)
                if r.status != 200:
                    raise BenchError(f"LIST {job['path']} {params}: HTTP {r.status}: {head[:300]!r}")
            m = _CONTINUE.search(head[:4096])
            if not job.get("follow") or not m or not m.group(1):
                break
            params = {k: v for k, v in job["params"].items() if k != "resourceVersion"}
            params["continue"] = m.group(1).decode()
        lat.append(time.perf_counter() - t0)
        sizes.append(size)
    return {"lat": lat, "bytes": sizes}


async def _ops_job(s: aiohttp.ClientSession, base: str, job: dict) -> dict:
    """job["ops"]: [(method, path, body or None)] run on job["conns"] connections of this process."""
    ops = iter(job["ops"])
    lat: list[float] = []

    async def worker():
        for method, path, body in ops:
            t0 = time.perf_counter()
            async with s.request(method, base + path, data=body, headers=JSON_CT if body else None) as r:
                await check(r, f"{method} {path}")
            lat.append(time.perf_counter() - t0)
    await asyncio.gather(*(worker() for _ in range(job["conns"])))
    return {"lat": lat}


JOBS = {"list": _list_job, "ops": _ops_job}


def _client_main(conf: dict, job: dict, go, q, idx: int) -> None:
    async def run():
        async with session(conf, limit=job.get("conns", 1)) as s:
            # one warm-up connection so the TLS handshake is not in the first latency
            async with s.get(conf["base"] + "/version") as r:
                await r.read()
            q.put(("ready", idx, None))
            while not go.is_set():
                await asyncio.sleep(0.005)
            t0 = time.time()
            res = await JOBS[job["kind"]](s, conf["base"], job)
            res["t0"], res["t1"] = t0, time.time()
            return res
    try:
        q.put(("done", idx, asyncio.run(run())))
    except BaseException as e:  # report instead of hanging the parent
        q.put(("error", idx, repr(e)))


def run_clients(side: Side, jobs: list[dict], timeout: float = 900.0) -> dict:
    """Run each job in its own forked process, all starting together; latencies (s) merged, wall = first
    start to last end."""
    ctx = mp.get_context("fork")
    q, go = ctx.Queue(), ctx.Event()
    ps = [ctx.Process(target=_client_main, args=(side.conf(), j, go, q, i), daemon=True) for i, j in enumerate(jobs)]
    for p in ps:
        p.start()
    results: list[dict | None] = [None] * len(ps)
    ready = 0
    try:
        while ready < len(ps):
            kind, i, val = q.get(timeout=60)
            if kind != "ready":
                raise BenchError(f"{side.name}: client {i} failed before starting: {val}")
            ready += 1
        go.set()
        for _ in ps:
            kind, i, val = q.get(timeout=timeout)
            if kind != "done":
                raise BenchError(f"{side.name}: client {i} failed: {val}")
            results[i] = val
    finally:
        for p in ps:
            p.join(5)
            if p.is_alive():
                p.kill()
    lat = [x for r in results for x in r["lat"]]
    wall = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    out = {"n": len(lat), "wall_s": wall, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3,
           "max_ms": max(lat) * 1e3, "per_s": len(lat) / wall if wall > 0 else 0.0}
    sizes = [b for r in results for b in r.get("bytes", [])]
    if sizes:
        out["bytes"] = min(sizes)
    return out


def run_ops_go(side: Side, ops: list[tuple], clients: int, timeout: float = 900.0) -> dict:
    """The same as run_clients over `clients` jobs of ops[k::clients], sent by the compiled bench/go/writer
    instead of forked Python processes (issue 21 asks for throughput with compiled clients: a Python client
    spends about as much CPU per request as the server it measures, on the same two cores)."""
    writer = load_tool("build_repo_go").ensure("writer")
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", prefix="writer-ops-") as f:
        for method, path, body in ops:
            f.write(orjson.dumps({"m": method, "p": path, "b": (body or b"").decode()}) + b"\n")
        f.flush()
        ca, (cert, key) = side.ca, side.cert
        r = subprocess.run([writer, "-base", side.base, "-ops", f.name, "-clients", str(clients), "-ca", ca,
                            "-cert", cert, "-key", key], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise BenchError(f"writer on {side.name}: exit {r.returncode}: {r.stderr[-600:]}")
    out = orjson.loads(r.stdout)
    if out["n"] != len(ops):
        raise BenchError(f"writer on {side.name}: {out['n']} of {len(ops)} operations answered")
    return out


def run_ops(side: Side, ops: list[tuple], clients: int, client: str = "go") -> dict:
    """ops[k::clients] per keep-alive client, all starting together: the compiled writer (`go`) or forked Python
    processes (`python`, as before 2026-12-06)."""
    if client == "go":
        return run_ops_go(side, ops, clients)
    return run_clients(side, [{"kind": "ops", "conns": 1, "ops": ops[k::clients]} for k in range(clients)])


# --- loading (through kube-apiserver: stored as protobuf, as in a real cluster) ----------------------------

KINDS = {  # name: (collection path under /namespaces/<ns>, factory(ns, i), has a status to PUT); realistic objects
    "ConfigMap 1.5 KB": ("/api/v1/namespaces/{ns}/configmaps", corpus.as_posted(corpus.configmap), False),
    "Pod 5 KB": ("/api/v1/namespaces/{ns}/pods", corpus.as_posted(corpus.pod), True),
    "RoleBinding 0.75 KB": ("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
                            corpus.as_posted(corpus.rolebinding), False),
    "Pod 100 KB": ("/api/v1/namespaces/{ns}/pods", corpus.as_posted(corpus.ai_pod), True),
}


def load(side: Side, path: str, make, n: int, status: bool = False, procs: int = 2, conns: int = 8) -> float:
    """POST make(i) for i < n to `path` (then PUT each one's status: kube-apiserver drops it on create);
    returns creates/s."""
    objs = [make(i) for i in range(n)]
    ops = [("POST", path, orjson.dumps(o)) for o in objs]
    r = run_clients(side, [{"kind": "ops", "conns": conns, "ops": ops[k::procs]} for k in range(procs)])
    if status:
        ops = [("PUT", f"{path}/{o['metadata']['name']}/status", orjson.dumps(o)) for o in objs]
        run_clients(side, [{"kind": "ops", "conns": conns, "ops": ops[k::procs]} for k in range(procs)])
    return r["per_s"]


async def ensure_ns(side: Side, name: str) -> None:
    async with session(side.conf()) as s:
        async with s.post(side.base + "/api/v1/namespaces", data=orjson.dumps({"metadata": {"name": name}}),
                          headers=JSON_CT) as r:
            await check(r, f"create namespace {name}", ok=(201, 409))


async def synced_count(side: Side, path: str) -> int:
    """A consistent list (limit 1): both servers make their cache catch up with etcd's current revision before
    answering; returns the number of objects."""
    async with session(side.conf()) as s:
        for _ in range(300):
            async with s.get(side.base + path, params={"limit": "1"}) as r:
                if r.status == 429:
                    await r.read()
                    await asyncio.sleep(0.2)
                    continue
                doc = orjson.loads(await check(r, f"LIST {path}", ok=(200,)))
            return len(doc["items"]) + int(doc["metadata"].get("remainingItemCount") or 0)
    raise BenchError(f"{side.name}: {path} still 429 after 60 s")


# --- memory per cached object -------------------------------------------------------------------------------

_HEAP_ALLOC = re.compile(rb"^go_memstats_heap_alloc_bytes (\S+)$", re.M)


async def heap_bytes(side: Side) -> int:
    """kube: Go heap in use after a forced GC; ours: tracemalloc (Python heap) + the roaring bitmaps."""
    async with session(side.conf()) as s:
        if side.name == "kube":
            async with s.get(side.base + "/debug/pprof/heap", params={"gc": "1"}) as r:
                await check(r, "pprof heap")
            async with s.get(side.base + "/metrics") as r:
                m = _HEAP_ALLOC.search(await check(r, "metrics"))
            return int(float(m.group(1)))
        # measured cold: once every cache has compressed its entries, nothing left pending (the loaded
        # objects' 75 s in the window have passed)
        rep = await compression_settled(s, side.base, quiet=True, strict=False)
    # Entries and B-tree nodes are allocated through Python's allocator (tracemalloc sees them); the roaring
    # bitmaps are CRoaring's malloc and the compression codecs libzstd's, so they are added.
    native = sum(st["bitmap_native_bytes"] + st.get("compression", {}).get("codec_native_bytes", 0)
                 for st in rep["resources"].values())
    if "tracemalloc_bytes" not in rep["process"]:
        raise BenchError("ours runs without RESIDENCY_TRACEMALLOC=1")
    return rep["process"]["tracemalloc_bytes"] + native


async def memory_reading(side: Side, heap: bool = True) -> dict:
    """Heap and RSS; `heap=False` (ours without tracemalloc): RSS only, once its compression has settled."""
    h = await heap_bytes(side) if heap else None
    if side.name != "kube":
        # glibc keeps freed pages until malloc_trim (which the server runs after a (re)list and after
        # compression gave up 8 MiB): trim before every reading, so that a reading after one kind is not lowered
        # by the previous kind's garbage given back in between (RoleBindings' growth read -40 B/object).
        # kube's heap reading above already forced a GC; Go returns freed spans on its own schedule.
        async with session(side.conf()) as s:
            if not heap:   # (heap_bytes waited for it)
                await compression_settled(s, side.base, quiet=True, strict=False)
            async with s.get(side.base + "/debug/residency", params={"gc": "1", "trim": "1"}) as r:
                await check(r, "residency")
    await asyncio.sleep(0.5)
    return {"heap": h, "rss": side.rss()}


def section_memory(sv: Servers, sizes: dict[str, int]) -> dict:
    """Heap per object (ours: tracemalloc) and RSS per object (ours: the twin without tracemalloc, when one runs;
    the traced process's RSS is kept as `ours_rss_traced_per_object`)."""
    out = {}
    sides = (sv.ours_side, sv.kube_side)
    every = sides + ((sv.twin_side,) if sv.twin_side else ())
    for k, (name, (tmpl, make, status)) in enumerate(KINDS.items()):
        n = sizes[name]
        ns = f"mem-{k}"
        path = tmpl.format(ns=ns)
        asyncio.run(ensure_ns(sv.kube_side, ns))
        for side in every:
            asyncio.run(synced_count(side, path))
        before = {side.name: asyncio.run(memory_reading(side, side is not sv.twin_side)) for side in every}
        log(f"memory: loading {n} x {name} through kube-apiserver")
        load(sv.kube_side, path, lambda i: make(ns, i), n, status)
        counts = {side.name: asyncio.run(synced_count(side, path)) for side in every}
        if any(c != n for c in counts.values()):
            raise BenchError(f"memory {name}: caches hold {counts}, expected {n}")
        time.sleep(1.0)
        after = {side.name: asyncio.run(memory_reading(side, side is not sv.twin_side)) for side in every}
        obj_bytes = asyncio.run(list_bytes(sv.ours_side, path)) / n
        row = {"objects": n, "json_bytes_per_object": obj_bytes}
        for side in sides:
            for m in ("heap", "rss"):
                row[f"{side.name}_{m}_per_object"] = (after[side.name][m] - before[side.name][m]) / n
        if sv.twin_side is not None:
            row["ours_rss_traced_per_object"] = row["ours_rss_per_object"]
            row["ours_rss_per_object"] = (after["ours-rss"]["rss"] - before["ours-rss"]["rss"]) / n
        # A Go heap can shrink between readings (earlier garbage collected): no ratio from a growth <= 0.
        row["heap_ratio"] = ratio(row["ours_heap_per_object"], row["kube_heap_per_object"])
        row["rss_ratio"] = ratio(row["ours_rss_per_object"], row["kube_rss_per_object"])
        log(f"  {name}: heap/object ours {row['ours_heap_per_object']:,.0f} B, kube {row['kube_heap_per_object']:,.0f} B"
            f" ({fmt(row['heap_ratio'])}); RSS/object {row['ours_rss_per_object']:,.0f} / "
            f"{row['kube_rss_per_object']:,.0f} B ({fmt(row['rss_ratio'])})")
        out[name] = row
    return out


async def list_bytes(side: Side, path: str) -> int:
    """Bytes of the items of a list (the list body minus its envelope)."""
    async with session(side.conf()) as s:
        async with s.get(side.base + path, params={"resourceVersion": "0"}) as r:
            body = await check(r, f"LIST {path}", ok=(200,))
    return sum(len(orjson.dumps(i)) for i in orjson.loads(body)["items"])


# --- lists --------------------------------------------------------------------------------------------------

LIST_SHAPES = {"consistent": ({}, False), "resourceVersion=0": ({"resourceVersion": "0"}, False),
               "paged (limit 500)": ({"limit": "500"}, True),
               "label-selected (1/10)": ({"labelSelector": "tier=t3"}, False)}


def section_lists(sv: Servers, n: int, size: int, clients: int, reps1: int, repsn: int) -> tuple[dict, dict]:
    """Rows per shape and client count, and our configmaps cache's compression figures as the lists ran."""
    ns = "lists"
    path = f"/api/v1/namespaces/{ns}/configmaps"
    asyncio.run(ensure_ns(sv.kube_side, ns))
    log(f"lists: loading {n} x {size // 1000} KB ConfigMaps of real config files (bench/corpus.py) through "
        "kube-apiserver")
    load(sv.kube_side, path,
         lambda i: corpus.big_configmap(i, size, ns=ns, labels={"app": "bench", "tier": f"t{i % 10}"}), n)
    for side in (sv.ours_side, sv.kube_side):
        if asyncio.run(synced_count(side, path)) != n:
            raise BenchError(f"{side.name} does not list {n} objects")
    # Lists are measured cold, from compressed entries (cache/compression.py: once the event window's 75 s
    # have passed): our worst case; `compressed` in the output says how many of ours were.
    z = asyncio.run(settled(sv.ours_side, path))
    out = {}
    out = {}
    for shape, (params, follow) in LIST_SHAPES.items():
        for c, reps in ((1, reps1), (clients, repsn)):
            row = {}
            for side in (sv.ours_side, sv.kube_side):
                jobs = [{"kind": "list", "path": path, "params": params, "follow": follow, "n": reps}] * c
                row[side.name] = run_clients(side, jobs)
            row["p50_ratio"] = row["ours"]["p50_ms"] / row["kube"]["p50_ms"]
            row["p99_ratio"] = row["ours"]["p99_ms"] / row["kube"]["p99_ms"]
            log(f"  {shape}, {c} client(s): p50 {row['ours']['p50_ms']:.0f} / {row['kube']['p50_ms']:.0f} ms "
                f"({row['p50_ratio']:.2f}), p99 {row['ours']['p99_ms']:.0f} / {row['kube']['p99_ms']:.0f} ms "
                f"({row['p99_ratio']:.2f})")
            out[f"{shape}, {c} client{'s' if c > 1 else ''}"] = row
    return out, z


async def settled(side: Side, path: str, timeout: float = 300.0) -> dict:
    """Wait until our caches have compressed their cold entries; the configmaps cache's compression figures."""
    async with session(side.conf()) as s:
        rep = await compression_settled(s, side.base, timeout, quiet=True, strict=False)
    return rep["resources"].get("configmaps", {}).get("compression", {"settled": True})


# --- watch fan-out --------------------------------------------------------------------------------------------

FANOUT_NS = "fanout"
FANOUT_OBJECTS = 100
_SEQ = re.compile(rb'"seq":"(\d+)"')


def fanout_cm(i: int, seq: int | None = None, run: str = "") -> dict:
    """~1 KB ConfigMap; an update carries its sequence number (and a per-run tag: an identical PUT is a no-op)."""
    cm = sized_configmap(f"cm-{i:04d}", 1024, FANOUT_NS)
    if seq is not None:
        cm["data"].update(seq=str(seq), run=run)
    return cm


def _watch_client_main(conf: dict, path: str, rv: str, n: int, expected: int, timeout: float, q, idx: int) -> None:
    """n watches from `rv` on one aiohttp session (n connections); counts update events by their "seq" in the
    raw bytes (no JSON decoding) and stamps each with the receipt time of its chunk."""
    async def run():
        seqs, times = array("q"), array("q")
        counts, ends = [0] * n, [0.0] * n
        closed = [0]  # watches the server ended before they saw every update
        opened, all_open = [0], asyncio.Event()
        params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": str(int(timeout) + 120)}
        async with session(conf, limit=0, timeout=timeout + 300) as s:
            async def watcher(i: int):
                async with s.get(conf["base"] + path, params=params) as r:
                    if r.status != 200:
                        raise BenchError(f"WATCH: HTTP {r.status}: {(await r.read())[:300]!r}")
                    opened[0] += 1
                    if opened[0] == n:
                        all_open.set()
                    buf, seen = b"", 0
                    async for chunk in r.content.iter_any():
                        now = time.time_ns()
                        buf += chunk
                        cut = buf.rfind(b"\n")
                        if cut < 0:
                            continue
                        found = _SEQ.findall(buf, 0, cut)
                        buf = buf[cut + 1:]
                        if found:
                            seqs.extend(int(x) for x in found)
                            times.extend([now] * len(found))
                            seen += len(found)
                            counts[i], ends[i] = seen, time.time()
                            if seen >= expected:
                                return
                    closed[0] += 1
            tasks = [asyncio.create_task(watcher(i)) for i in range(n)]
            try:
                await asyncio.wait_for(all_open.wait(), 120)
            except asyncio.TimeoutError:
                for t in tasks:
                    if t.done() and t.exception():
                        raise t.exception()
                raise BenchError(f"only {opened[0]}/{n} watches opened in 120 s")
            q.put(("ready", idx, None))
            pending = await wait_tasks(tasks, timeout)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {"counts": counts, "ends": ends, "seqs": seqs, "times": times,
                "cpu_s": ru.ru_utime + ru.ru_stime, "incomplete": len(pending), "closed": closed[0]}
    try:
        q.put(("done", idx, asyncio.run(run())))
    except BaseException as e:  # report instead of hanging the parent
        q.put(("error", idx, repr(e)))


def _writer_main(conf: dict, path: str, updates: int, conns: int, run: str, q) -> None:
    """`updates` PUTs (seq 0..updates-1, object seq % FANOUT_OBJECTS) on `conns` keep-alive connections;
    reports the wall time of the first write and the send and ack times (ns) of each."""
    async def go():
        acks = array("q", [0]) * updates
        sends = array("q", [0]) * updates
        it = iter(range(updates))
        async with session(conf, limit=conns) as s:
            async with s.get(conf["base"] + "/version") as r:
                await r.read()

            async def worker():
                for seq in it:
                    i = seq % FANOUT_OBJECTS
                    sends[seq] = time.time_ns()
                    async with s.put(f"{conf['base']}{path}/cm-{i:04d}", data=orjson.dumps(fanout_cm(i, seq, run)),
                                     headers=JSON_CT) as r:
                        await check(r, f"PUT cm-{i:04d}")
                    acks[seq] = time.time_ns()
            t0 = time.time()
            await asyncio.gather(*(worker() for _ in range(conns)))
            return {"t0": t0, "t1": time.time(), "acks": acks, "sends": sends}
    try:
        q.put(("done", -1, asyncio.run(go())))
    except BaseException as e:
        q.put(("error", -1, repr(e)))


async def list_rv(side: Side, path: str) -> str:
    """The resourceVersion of a consistent list (etcd's current revision, once the cache caught up)."""
    async with session(side.conf()) as s:
        doc = await get_json(s, side.base + path, params={"limit": "1"}, what=f"{side.name} LIST {path}")
    return doc["metadata"]["resourceVersion"]


def fanout_objects(sv: Servers) -> str:
    """The fan-out namespace's FANOUT_OBJECTS ConfigMaps (created through kube unless there), listed by both
    servers; returns the collection path."""
    path = f"/api/v1/namespaces/{FANOUT_NS}/configmaps"
    asyncio.run(ensure_ns(sv.kube_side, FANOUT_NS))
    if asyncio.run(synced_count(sv.kube_side, path)) != FANOUT_OBJECTS:
        load(sv.kube_side, path, fanout_cm, FANOUT_OBJECTS, procs=1, conns=4)
    for side in (sv.ours_side, sv.kube_side):
        if asyncio.run(synced_count(side, path)) != FANOUT_OBJECTS:
            raise BenchError(f"{side.name} does not list the {FANOUT_OBJECTS} fan-out objects")
    return path


def fanout_run(sv: Servers, side: Side, writer: Side, watchers: int, updates: int, procs: int, conns: int,
               timeout: float) -> dict:
    path = f"/api/v1/namespaces/{FANOUT_NS}/configmaps"
    run = f"{side.name}-{watchers}-{time.time_ns()}"
    rv = asyncio.run(list_rv(side, path))
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    per = [watchers // procs + (1 if k < watchers % procs else 0) for k in range(procs)]
    ps = [ctx.Process(target=_watch_client_main, args=(side.conf(), path, rv, n, updates, timeout, q, k),
                      daemon=True) for k, n in enumerate(per) if n]
    for p in ps:
        p.start()
    wp = None
    try:
        for _ in ps:
            kind, i, val = q.get(timeout=180)
            if kind != "ready":
                raise BenchError(f"{side.name}: watch client {i} failed before the writes: {val}")
        time.sleep(1.0)  # let the server settle the new watchers
        cpu0 = {x.name: proc_cpu_s(x.pid) for x in (sv.ours_side, sv.kube_side)}
        wp = ctx.Process(target=_writer_main, args=(writer.conf(), path, updates, conns, run, q), daemon=True)
        wp.start()
        results, wres = [], None
        for _ in range(len(ps) + 1):
            kind, i, val = q.get(timeout=timeout + 120)
            if kind != "done":
                raise BenchError(f"{side.name}: {'writer' if i < 0 else f'watch client {i}'} failed: {val}")
            if i < 0:
                wres = val
            else:
                results.append(val)
        cpu1 = {x.name: proc_cpu_s(x.pid) for x in (sv.ours_side, sv.kube_side)}
    finally:
        for p in ps + ([wp] if wp else []):
            p.join(10)
            if p.is_alive():
                p.kill()
    acks = wres["acks"]
    t_first = wres["t0"]
    t_last = max(max(r["ends"]) for r in results)
    wall = t_last - t_first
    sends = wres["sends"]
    # ack-based latency is negative when the watched server (not the writer) delivers before the writer's
    # event loop stamps the PUT's ack; send-based latency includes the write and is always positive
    got = [(q_, t) for r in results for q_, t in zip(r["seqs"], r["times"]) if 0 <= q_ < updates]
    lat = [(t - acks[q_]) / 1e6 for q_, t in got]
    lat_sent = [(t - sends[q_]) / 1e6 for q_, t in got]
    delivered = sum(sum(r["counts"]) for r in results)
    return {"watchers": watchers, "updates": updates, "client_processes": len(ps), "writer": writer.name,
            "deliveries": delivered, "deliveries_expected": watchers * updates,
            "incomplete_watchers": sum(r["incomplete"] for r in results),
            "watches_closed_by_server": sum(r["closed"] for r in results),
            "deliveries_per_s": delivered / wall if wall > 0 else 0.0, "wall_s": wall,
            "writes_per_s": updates / (wres["t1"] - wres["t0"]),
            "latency_p50_ms": pct(lat, 50) if lat else None, "latency_p99_ms": pct(lat, 99) if lat else None,
            "latency_max_ms": max(lat) if lat else None,
            "sent_latency_p50_ms": pct(lat_sent, 50) if lat_sent else None,
            "sent_latency_p99_ms": pct(lat_sent, 99) if lat_sent else None,
            "cpu_cores": {k: (cpu1[k] - cpu0[k]) / wall for k in cpu0} if wall > 0 else {},
            # deliveries per CPU-second of the watched server (its share of 2 busy cores differs: ours is one
            # thread, kube up to GOMAXPROCS=2; kube's CPU also serves the writes when it is the one watched)
            "deliveries_per_server_cpu_s": delivered / max(1e-9, cpu1[side.name] - cpu0[side.name]),
            "client_cpu_s": sum(r["cpu_s"] for r in results)}


def section_fanout(sv: Servers, counts: list[int], updates: dict[int, int], procs: int, conns: int,
                   timeout: float) -> dict:
    """Per watcher count: ours, then kube, watched by `procs` client processes; the same stream of updates
    written through kube-apiserver (the same writer for both: the measured server only fans out)."""
    fanout_objects(sv)   # created and synced in both caches; the watchers and the writer know its path
    out = {}
    for w in counts:
        row = {}
        for side in (sv.ours_side, sv.kube_side):
            log(f"fan-out: {w} watchers on {side.name}, {updates[w]} updates written through kube")
            r = row[side.name] = fanout_run(sv, side, sv.kube_side, w, updates[w], procs, conns, timeout)
            log(f"  {r['deliveries']:,}/{r['deliveries_expected']:,} delivered ({r['watches_closed_by_server']} watches "
                f"closed by the server), {r['deliveries_per_s']:,.0f}/s ({r['deliveries_per_server_cpu_s']:,.0f} per "
                f"server CPU-s), "
                f"p99 {r['latency_p99_ms']} ms, writes {r['writes_per_s']:,.0f}/s, CPU cores "
                + ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_cores"].items()))
        row["deliveries_ratio"] = ratio(row["ours"]["deliveries_per_s"], row["kube"]["deliveries_per_s"])
        row["deliveries_per_cpu_ratio"] = ratio(row["ours"]["deliveries_per_server_cpu_s"],
                                                row["kube"]["deliveries_per_server_cpu_s"])
        row["p99_ratio"] = (ratio(row["ours"]["sent_latency_p99_ms"], row["kube"]["sent_latency_p99_ms"])
                            if row["ours"]["sent_latency_p99_ms"] and row["kube"]["sent_latency_p99_ms"] else None)
        out[f"{w} watchers"] = row
    return out


# --- fan-out at saturation, compiled clients (issue 21) -------------------------------------------------------

WRITER_LIMITED = 0.9   # a step whose writer achieved less than this share of the offered rate


def saturation_ladder(start: float, steps: int) -> list[float]:
    """Write rates a factor of sqrt(2) apart: the score is known to within 41 %."""
    return [round(start * 2 ** (k / 2), 1) for k in range(steps)]


def fanout_ladder(fanout: str, side: Side, writer_base: str, path: str, watchers: int, rates: list[float],
                  step_s: float, drain_s: float) -> dict:
    """One ladder of bench/go/fanout on `side`: the steps it ran (up to the first that failed) and the score,
    the highest deliveries/s (achieved write rate x watchers) of a step that delivered every event with p99
    write-to-delivery at most 1 s."""
    ca, (cert, key) = side.ca, side.cert
    argv = [fanout, "-watch", side.base, "-write", writer_base, "-ca", ca, "-cert", cert, "-key", key,
            "-path", path, "-watchers", str(watchers), "-objects", str(FANOUT_OBJECTS), "-size", "1024",
            "-rates", ",".join(str(r) for r in rates), "-step", f"{step_s}s", "-drain", f"{drain_s}s",
            "-p99-limit", "1s", "-tag", f"{side.name}-{watchers}-{time.time_ns()}"]
    cpu0 = side.cpu_s()
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=len(rates) * (step_s + drain_s + 60) + 300)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise BenchError(f"fanout on {side.name}: exit {r.returncode}: {r.stderr[-600:]}")
    steps = [orjson.loads(line) for line in r.stdout.splitlines() if line.strip()]
    for st in steps:
        st["deliveries_per_s"] = st["achieved_rate"] * watchers
        # the writer did not reach the offered rate: from here on the ladder measures the writer, not the server
        st["writer_limited"] = st["achieved_rate"] < WRITER_LIMITED * st["rate"]
    ok = [st for st in steps if st["ok"]]
    best = max(ok, key=lambda st: st["deliveries_per_s"], default=None)
    return {"steps": steps, "score_deliveries_per_s": best["deliveries_per_s"] if best else 0.0,
            # the best passing step was writer-limited and no step failed: the server's capacity is above the score
            "score_writer_limited": bool(best and best["writer_limited"]) and len(ok) == len(steps),
            "server_cores": (side.cpu_s() - cpu0) / wall if wall > 0 else 0.0}


def section_saturation(sv: Servers, counts: dict[int, float], steps: int, step_s: float, drain_s: float,
                       reps: int) -> dict:
    """Watch fan-out at saturation, side by side: per watcher count, `reps` ladders on each server, interleaved
    (ours, kube, ours, kube...), the median score compared. The writes go through a third apiserver over the
    same etcd (ours, without a watch cache): neither server under test spends CPU on them. Watchers and the
    writer are one compiled program (bench/go/fanout), one HTTP/1.1 connection per watch."""
    fanout = load_tool("build_repo_go").ensure("fanout")
    path = fanout_objects(sv)
    out: dict = {}
    with Apiserver(sv.etcd_endpoint, watch_cache=False, etcd_prefix="/registry", name="writer",
                   log_name="bench-vs-upstream-writer") as writer:
        for w, start in counts.items():
            rates = saturation_ladder(start, steps)
            runs: dict[str, list] = {"ours": [], "kube": []}
            for rep in range(reps):
                for side in (sv.ours_side, sv.kube_side):
                    log(f"saturation: {w} watchers on {side.name} (ladder {rep + 1}/{reps}: {rates} writes/s)")
                    lad = fanout_ladder(fanout, side, writer.base, path, w, rates, step_s, drain_s)
                    runs[side.name].append(lad)
                    last = lad["steps"][-1] if lad["steps"] else {}
                    log(f"  score {lad['score_deliveries_per_s']:,.0f} deliveries/s"
                        f"{' (writer-limited: every step passed)' if lad['score_writer_limited'] else ''}; "
                        f"last step {last.get('rate')}/s offered, {last.get('achieved_rate', 0):,.0f}/s written: "
                        f"p99 {last.get('p99_ms', 0):,.0f} ms, {last.get('deliveries', 0):,}/{last.get('expected', 0):,}"
                        f" delivered, server {lad['server_cores']:.2f} cores")
            med = {k: statistics.median(x["score_deliveries_per_s"] for x in v) for k, v in runs.items()}
            out[f"{w} watchers"] = {"ours": runs["ours"], "kube": runs["kube"], "rates": rates,
                                    "ours_score": med["ours"], "kube_score": med["kube"],
                                    "score_ratio": ratio(med["ours"], med["kube"]),
                                    "writer_limited": {k: [x["score_writer_limited"] for x in v]
                                                       for k, v in runs.items()}}
    return out


# --- writes and GETs per second ---------------------------------------------------------------------------------

def section_throughput(sv: Servers, n: int, clients: int, client: str = "go") -> dict:
    """creates/s, updates/s (unconditional PUT of a changed object), GETs/s of 1 KB ConfigMaps: `clients`
    keep-alive HTTPS connections (the compiled bench/go/writer, or forked Python processes with `client="python"`);
    ours and kube in turn, each in its own namespace."""
    out: dict = {}
    for side in (sv.ours_side, sv.kube_side):
        asyncio.run(ensure_ns(sv.kube_side, f"tp-{side.name}"))
        asyncio.run(synced_count(side, f"/api/v1/namespaces/tp-{side.name}/configmaps"))

    def ops(side: Side, verb: str) -> list:
        path = f"/api/v1/namespaces/tp-{side.name}/configmaps"
        if verb == "create":
            return [("POST", path, orjson.dumps(sized_configmap(f"cm-{i:06d}", 1024, f"tp-{side.name}")))
                    for i in range(n)]
        if verb == "update":
            return [("PUT", f"{path}/cm-{i:06d}", orjson.dumps(
                sized_configmap(f"cm-{i:06d}", 1024, f"tp-{side.name}", extra={"gen": "2"}))) for i in range(n)]
        return [("GET", f"{path}/cm-{i % n:06d}", None) for i in range(2 * n)]

    for verb in ("create", "update", "get"):
        row = {}
        for side in (sv.ours_side, sv.kube_side):
            o = ops(side, verb)
            row[side.name] = run_ops(side, o, clients, client)
        row["ratio"] = ratio(row["ours"]["per_s"], row["kube"]["per_s"])
        log(f"throughput {verb}: {row['ours']['per_s']:,.0f} / {row['kube']['per_s']:,.0f} per s ({fmt(row['ratio'])}); "
            f"p99 {row['ours']['p99_ms']:.0f} / {row['kube']['p99_ms']:.0f} ms")
        out[verb] = row
    for side in (sv.ours_side, sv.kube_side):  # both saw every write of both namespaces
        for s2 in (sv.ours_side, sv.kube_side):
            c = asyncio.run(synced_count(side, f"/api/v1/namespaces/tp-{s2.name}/configmaps"))
            if c != n:
                raise BenchError(f"{side.name} lists {c} objects in tp-{s2.name}, expected {n}")
    return out


# --- time to ready after a restart --------------------------------------------------------------------------------

RESTART_NS = "restart"


async def _restart_wait(side: Side, path: str, n: int, timeout: float, t0: float) -> dict:
    """From t0 (the process was spawned): poll /readyz every 50 ms until 200, then consistent lists (no limit, no
    resourceVersion) until one returns all n objects. Each probe a new connection (the server is coming up)."""
    deadline = t0 + timeout
    t_readyz = None
    attempts = 0
    while time.perf_counter() < deadline:
        try:
            async with session(side.conf(), timeout=max(5.0, deadline - time.perf_counter())) as s:
                if t_readyz is None:
                    async with s.get(side.base + "/readyz") as r:
                        await r.read()
                        if r.status == 200:
                            t_readyz = time.perf_counter() - t0
                            hwm_readyz = side.hwm()
                            continue
                else:
                    attempts += 1
                    tl = time.perf_counter()
                    async with s.get(side.base + path) as r:
                        body = await r.read()
                    if r.status == 200:
                        got = len(orjson.loads(body)["items"])
                        if got == n:
                            now = time.perf_counter()
                            return {"readyz_s": t_readyz, "ready_s": now - t0, "first_full_list_s": now - tl,
                                    "list_attempts": attempts, "hwm_at_readyz": hwm_readyz, "hwm": side.hwm(),
                                    "rss_at_ready": side.rss()}
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            pass
        await asyncio.sleep(0.05)
    raise BenchError(f"{side.name} not ready with {n} objects {timeout:.0f} s after its start")


def restart_one(sv: Servers, name: str, n: int, timeout: float) -> dict:
    path = f"/api/v1/namespaces/{RESTART_NS}/configmaps"
    if name == "ours":
        sv.ours.stop()
        time.sleep(1.0)
        t0 = time.perf_counter()
        sv.spawn_ours(tracemalloc=False, ready_timeout=timeout)
        side = sv.ours_side
    else:
        sv.stop_kube_process()
        time.sleep(1.0)
        t0 = time.perf_counter()
        sv.spawn_kube()
        side = sv.kube_side
    r = asyncio.run(_restart_wait(side, path, n, timeout, t0))
    log(f"  {name}: /readyz after {r['readyz_s']:.1f} s, all {n:,} listed after {r['ready_s']:.1f} s "
        f"(the first full list {r['first_full_list_s']:.1f} s), peak RSS {r['hwm'] / 2**20:,.0f} MiB")
    return r


def section_restart(etcd_endpoint: str, n: int, size: int, reps: int, timeout: float) -> dict:
    """Its own etcd and servers: n small ConfigMaps in one namespace (loaded once through kube), then each
    server stopped and started again over the same etcd, in turn, `reps` times."""
    sv = Servers(etcd_endpoint)
    try:
        sv.start_ours(tracemalloc=False, ready_timeout=timeout)
        path = f"/api/v1/namespaces/{RESTART_NS}/configmaps"
        asyncio.run(ensure_ns(sv.kube_side, RESTART_NS))
        log(f"restart: loading {n:,} x {size} B ConfigMaps through kube-apiserver")
        t = time.perf_counter()
        load(sv.kube_side, path, lambda i: sized_configmap(f"cm-{i:06d}", size, RESTART_NS), n, procs=4, conns=8)
        log(f"  loaded in {time.perf_counter() - t:.0f} s")
        for side in (sv.ours_side, sv.kube_side):
            if asyncio.run(synced_count(side, path)) != n:
                raise BenchError(f"{side.name} does not list {n} objects")
        obj_bytes = asyncio.run(list_bytes(sv.ours_side, path)) / n
        runs: dict[str, list] = {"ours": [], "kube": []}
        for k in range(reps):
            for name in ("ours", "kube"):
                runs[name].append(restart_one(sv, name, n, timeout))
    finally:
        sv.stop()
    out = {"objects": n, "json_bytes_per_object": obj_bytes, "runs": runs}
    for name, rs in runs.items():
        best = min(rs, key=lambda r: r["ready_s"])
        out[name] = {"ready_s": best["ready_s"], "readyz_s": best["readyz_s"],
                     "first_full_list_s": best["first_full_list_s"], "peak_rss": max(r["hwm"] for r in rs)}
    out["ready_ratio"] = ratio(out["ours"]["ready_s"], out["kube"]["ready_s"])
    out["peak_rss_ratio"] = ratio(out["ours"]["peak_rss"], out["kube"]["peak_rss"])
    return out


# --- the run ------------------------------------------------------------------------------------------------

def ratio(ours: float, kube: float) -> float | None:
    return ours / kube if kube > 0 and ours >= 0 else None


def fmt(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}"


def verdict(ratio: float | None, target: str) -> str:
    op, limit = TARGETS[target]
    if ratio is None:
        return "n/a"
    ok = ratio <= limit if op == "<=" else ratio >= limit
    return f"{'PASS' if ok else 'FAIL'} ({op} {limit})"


def table(doc: dict) -> str:
    rows = []
    for name, r in doc.get("memory", {}).items():
        rows.append((f"heap per object, {name} (n={r['objects']:,}, {r['json_bytes_per_object']:,.0f} B JSON)",
                     f"{r['ours_heap_per_object']:,.0f} B", f"{r['kube_heap_per_object']:,.0f} B",
                     fmt(r["heap_ratio"]), verdict(r["heap_ratio"], "heap_per_object")))
        rows.append((f"RSS per object, {name}", f"{r['ours_rss_per_object']:,.0f} B",
                     f"{r['kube_rss_per_object']:,.0f} B", fmt(r["rss_ratio"]), ""))
    if "lists_compression" in doc:
        z = doc["lists_compression"]
        rows.append(("lists: our entries compressed / plain", f"{z.get('entries_compressed', 0):,} / "
                     f"{z.get('entries_plain', 0):,}", "-", "", ""))
    for name, r in doc.get("lists", {}).items():
        for q in ("p50", "p99"):
            rows.append((f"list {q}, {name}", f"{r['ours'][q + '_ms']:,.0f} ms", f"{r['kube'][q + '_ms']:,.0f} ms",
                         f"{r[q + '_ratio']:.2f}", verdict(r[q + "_ratio"], f"list_{q}")))
    for name, r in doc.get("fanout", {}).items():
        o, k = r["ours"], r["kube"]
        complete = all(x["deliveries"] == x["deliveries_expected"] for x in (o, k))
        rows.append((f"watch fan-out deliveries/s, {name} ({o['updates']:,} updates)", f"{o['deliveries_per_s']:,.0f}",
                     f"{k['deliveries_per_s']:,.0f}", fmt(r["deliveries_ratio"]),
                     verdict(r["deliveries_ratio"], "fanout_deliveries") if complete else "n/a (not all delivered)"))
        p99 = lambda x: "-" if x["sent_latency_p99_ms"] is None else f"{x['sent_latency_p99_ms']:,.0f} ms"  # noqa: E731
        rows.append((f"watch send-to-delivery p99, {name}", p99(o), p99(k), fmt(r["p99_ratio"]), ""))
        rows.append((f"  deliveries per CPU-second of the watched server, {name}",
                     f"{o['deliveries_per_server_cpu_s']:,.0f}", f"{k['deliveries_per_server_cpu_s']:,.0f}",
                     fmt(r["deliveries_per_cpu_ratio"]), ""))
        for side, x in (("ours", o), ("kube", k)):
            if x["deliveries"] != x["deliveries_expected"]:
                rows.append((f"  NOT ALL DELIVERED ({side}, {name}): {x['deliveries']:,} of {x['deliveries_expected']:,}, "
                             f"{x['watches_closed_by_server']} watches closed by the server", "", "", "", ""))
    for name, r in doc.get("saturation", {}).items():
        rows.append((f"fan-out at saturation, {name}: deliveries/s with every event in, p99 <= 1 s (median of "
                     f"{len(r['ours'])})", f"{r['ours_score']:,.0f}", f"{r['kube_score']:,.0f}", fmt(r["score_ratio"]),
                     verdict(r["score_ratio"], "saturation") if r["kube_score"] else "n/a (kube failed every step)"))
        for side in ("ours", "kube"):
            if any(r.get("writer_limited", {}).get(side, ())):
                rows.append((f"  {side}: passed every step, the writer limited ({name}; its score is a floor)",
                             "", "", "", ""))
    for verb, r in doc.get("throughput", {}).items():
        rows.append((f"{'GET' if verb == 'get' else verb}s/s, {doc['args']['tp_clients']} keep-alive clients (1 KB ConfigMaps)",
                     f"{r['ours']['per_s']:,.0f}", f"{r['kube']['per_s']:,.0f}", fmt(r["ratio"]),
                     verdict(r["ratio"], "creates") if verb == "create" else ""))
    if "restart" in doc:
        r = doc["restart"]
        n = f"{r['objects']:,} ConfigMaps of {r['json_bytes_per_object']:,.0f} B"
        rows.append((f"time to ready after a restart, {n}", f"{r['ours']['ready_s']:.1f} s",
                     f"{r['kube']['ready_s']:.1f} s", fmt(r["ready_ratio"]), verdict(r["ready_ratio"], "restart")))
        rows.append(("  of which until /readyz is 200", f"{r['ours']['readyz_s']:.1f} s", f"{r['kube']['readyz_s']:.1f} s",
                     fmt(ratio(r["ours"]["readyz_s"], r["kube"]["readyz_s"])), ""))
        rows.append(("peak RSS during that start", f"{r['ours']['peak_rss'] / 2**20:,.0f} MiB",
                     f"{r['kube']['peak_rss'] / 2**20:,.0f} MiB", fmt(r["peak_rss_ratio"]), ""))
    v = doc["versions"]
    head = (f"# ours vs kube-apiserver {v.get('kube_apiserver', '?')}, one etcd {etcd_version_str(v)}, HTTPS/1.1 both; "
            f"{v.get('cpu_affinity') or v.get('cpu_count')} cores ({v['cpu_model']}) shared by etcd, both servers "
            f"and the client processes; Python {v['python']}\n")
    return head + render(rows, ("figure", "ours", "kube", "ours/kube", "target"))


SECTIONS = ("memory", "lists", "fanout", "saturation", "throughput", "restart")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.vs_upstream", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated: {', '.join(SECTIONS)}")
    ap.add_argument("--clients", type=int, default=20, help="concurrent list clients (default 20)")
    ap.add_argument("--tp-clients", type=int, default=16, help="keep-alive clients for creates/updates/GETs")
    ap.add_argument("--tp-client", choices=("go", "python"), default="go",
                    help="who sends them: the compiled bench/go/writer, or forked Python processes")
    ap.add_argument("--watch-procs", type=int, default=4, help="watch client processes (fan-out)")
    ap.add_argument("--restart-objects", type=int, help="objects for the restart section (100,000; --quick 2,000)")
    ap.add_argument("--restart-reps", type=int, default=2, help="restarts of each server (the fastest is reported)")
    ap.add_argument("--saturation-reps", type=int, default=3, help="ladders per server and watcher count (saturation)")
    ap.add_argument("--out", default="bench/out/vs_upstream.json")
    p = ap.parse_args(argv)
    p.sections = [x.strip() for x in p.sections.split(",") if x.strip()]
    for s in p.sections:
        if s not in SECTIONS:
            ap.error(f"unknown section {s!r} ({', '.join(SECTIONS)})")
    if p.quick:
        p.mem_sizes = {"ConfigMap 1.5 KB": 300, "Pod 5 KB": 200, "RoleBinding 0.75 KB": 1_500, "Pod 100 KB": 30}
        p.list_n, p.reps1, p.repsn, p.clients = 50, 3, 1, min(p.clients, 4)
        p.fanout_updates, p.fanout_timeout = {20: 50, 100: 30}, 60.0
        p.tp_n, p.tp_clients, p.watch_procs = 100, min(p.tp_clients, 4), min(p.watch_procs, 2)
        p.restart_objects, p.restart_reps = p.restart_objects or 2_000, 1
        p.saturation = {"counts": {20: 20.0}, "steps": 2, "step_s": 2.0, "drain_s": 5.0, "reps": 1}
    else:
        p.mem_sizes = {"ConfigMap 1.5 KB": 10_000, "Pod 5 KB": 5_000, "RoleBinding 0.75 KB": 10_000,
                       "Pod 100 KB": 500}
        p.list_n, p.reps1, p.repsn = 1_000, 10, 3
        p.fanout_updates, p.fanout_timeout = {100: 2_000, 1000: 500}, 300.0
        p.tp_n = 4_000
        p.restart_objects = p.restart_objects or 100_000
        # ladders from rates both servers sustain (a few hundred deliveries/s per watcher at 100 watchers)
        p.saturation = {"counts": {100: 50.0, 1000: 8.0}, "steps": 9, "step_s": 10.0, "drain_s": 10.0,
                        "reps": p.saturation_reps}
    p.fanout_watchers = sorted(p.fanout_updates)
    return p


def main(argv=None) -> int:
    p = parse_args(argv)
    t0 = time.perf_counter()
    doc: dict = {"args": {k: v for k, v in vars(p).items()}}
    with current_etcd() as etcd:
        # Memory and lists are measured cold (our entries compressed, once the event window's 75 s have passed
        # after the load); --quick compresses at once instead (--cache-compression-eager), not to wait in CI.
        sv = Servers(etcd.endpoint, ours_flags=("--cache-compression-eager",) if p.quick else ())
        try:
            # tracemalloc (for the heap figure) slows ours: only while measuring memory
            sv.start_ours(tracemalloc="memory" in p.sections)
            kube_version = asyncio.run(_get(sv.kube_side, "/version"))
            doc["versions"] = versions(etcd.endpoint, sv.ours.base, git=True,
                                       kube_apiserver=kube_version.get("gitVersion"))
            if "memory" in p.sections:
                sv.start_twin()
                doc["memory"] = section_memory(sv, p.mem_sizes)
                sv.stop_twin()
                sv.ours.stop()
                sv.start_ours(tracemalloc=False)
            if "lists" in p.sections:
                doc["lists"], doc["lists_compression"] = section_lists(sv, p.list_n, 100_000, p.clients, p.reps1,
                                                                       p.repsn)
            if "fanout" in p.sections:
                doc["fanout"] = section_fanout(sv, p.fanout_watchers, p.fanout_updates, p.watch_procs, 16,
                                               p.fanout_timeout)
            if "saturation" in p.sections:
                doc["saturation"] = section_saturation(sv, **p.saturation)
            if "throughput" in p.sections:
                doc["throughput"] = section_throughput(sv, p.tp_n, p.tp_clients, p.tp_client)
        finally:
            sv.stop()
    if "restart" in p.sections:
        # its own etcd: the restart reads exactly the n objects, not what the other sections left
        with current_etcd() as etcd:
            doc["restart"] = section_restart(etcd.endpoint, p.restart_objects, 500, p.restart_reps,
                                             120.0 if p.quick else 900.0)
    doc["elapsed_s"] = time.perf_counter() - t0
    write_json(p.out, doc)
    print(table(doc))
    log(f"done in {doc['elapsed_s']:.0f} s; JSON in {p.out}")
    return 0


async def _get(side: Side, path: str) -> dict:
    async with session(side.conf()) as s:
        async with s.get(side.base + path) as r:
            return orjson.loads(await check(r, path, ok=(200,)))


if __name__ == "__main__":
    sys.exit(main())
