"""Ours against the real kube-apiserver, one etcd, one run: every figure as ours/kube.

One current etcd; the reference kube-apiserver v1.37.2 (tools/build_kube_apiserver.py, upstream's default
protobuf storage) and this apiserver (cache on) over the same etcd prefix, both serving HTTPS with the same
serving certificate; every request below goes over HTTPS/1.1 with keep-alive to both (kube also speaks
HTTP/2, which client-go would use; HTTP/1.1 for both keeps the transports alike). Objects are loaded once,
through kube-apiserver (so they are stored as protobuf, as in a real cluster) and both servers' caches hold
them. Load comes from client *processes* (aiohttp, forked), one per concurrent client, so that the client is
not one Python event loop; the machine's cores are shared by client and server, alike for both servers.

Sections (`--sections`, default both):

* `memory`: per kind (1 KB ConfigMaps, 4 KB Pods, 0.4 KB RoleBindings, 100 KB Pods), bytes per cached
  object = growth / N once both caches hold the N objects. Heap: kube's `go_memstats_heap_alloc_bytes` after
  a forced GC (`/debug/pprof/heap?gc=1`); ours tracemalloc (which sees the cache's entries and B-tree
  nodes) + the roaring bitmaps' native bytes (`/debug/residency`; ours runs with RESIDENCY_TRACEMALLOC=1 for this section only). RSS for both.
* `lists`: 1,000 x 100 KB ConfigMaps (the KubeCon demo shape at 1/10 scale): consistent, `resourceVersion=0`,
  paged (limit 500, followed to the end), label-selected (1/10 of the objects); 1 client (sequential
  requests) and 20 concurrent clients: p50 / p99 per shape.

Not measured yet (issue 12 asks for them too): watch fan-out, creates/updates/GETs per second, and time to
ready after a restart.

    .venv/bin/python -m bench.vs_upstream             # the full run (figures in the README)
    .venv/bin/python -m bench.vs_upstream --quick     # small sizes, for CI smoke (< 1 min)

Targets (issue 12), ours/kube: heap per object <= 0.3 for every kind; list p50 and p99 <= 1.0 for every
shape. Printed beside the figures, never asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import re
import sys
import time

import aiohttp
import orjson

from bench.harness import (JSON_CT, Apiserver, BenchError, check, current_etcd, log, proc_status_kib, ssl_context,
                           versions, write_json)
from bench.report import etcd_version_str, pct, render
from bench.workloads import pod, rolebinding, sized_configmap
from storage.embedded import free_port
from tests.helpers.kube import KubeApiserver

TARGETS = {"heap_per_object": ("<=", 0.3), "list_p50": ("<=", 1.0), "list_p99": ("<=", 1.0)}


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

    def hwm(self) -> int:
        return proc_status_kib(self.pid)["VmHWM"] * 1024


def session(conf: dict, limit: int = 0, timeout: float = 600.0) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_context(conf), limit=limit),
                                 timeout=aiohttp.ClientTimeout(total=timeout))


class Servers:
    """etcd, kube-apiserver (protobuf storage) and ours (cache on, HTTPS with kube's serving certificate) over
    one etcd prefix. `restart_ours` / `restart_kube` return seconds to ready and the peak RSS while starting."""

    def __init__(self, etcd_endpoint: str):
        self.etcd_endpoint = etcd_endpoint
        self.kube = KubeApiserver(etcd_endpoint, protobuf=True, sharding_gate=False).start()
        self.ours: Apiserver | None = None
        self.ours_side: Side | None = None

    @property
    def kube_side(self) -> Side:
        k = self.kube
        return Side("kube", k.url, k.ca, k.client_cert, k.proc.pid)

    def start_ours(self, tracemalloc: bool, ready_timeout: float = 120.0) -> Apiserver:
        port = free_port()
        d = self.kube.dir
        self.ours = Apiserver(self.etcd_endpoint, "--secure-port", str(port),
                              "--tls-cert-file", os.path.join(d, "serving.crt"),
                              "--tls-private-key-file", os.path.join(d, "serving.key"),
                              etcd_prefix="/registry", name="ours", log_name="bench-vs-upstream",
                              ready_timeout=ready_timeout,
                              env={"RESIDENCY_TRACEMALLOC": "1"} if tracemalloc else None).start()
        self.ours.wait_ready()
        self.ours_side = Side("ours", f"https://127.0.0.1:{port}", self.kube.ca, self.kube.client_cert, self.ours.pid)
        return self.ours

    def stop(self) -> None:
        if self.ours is not None:
            self.ours.stop()
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


# --- loading (through kube-apiserver: stored as protobuf, as in a real cluster) ----------------------------

def big_pod(ns: str, i: int) -> dict:
    """A ~100 KB Pod: the 4 KB pod plus a 96 KB annotation (as large last-applied or tooling annotations)."""
    p = pod(ns, i)
    p["metadata"]["annotations"] = {"bench.example.com/blob": (f"{i:08x}" * 12_000)}
    return p


KINDS = {  # name: (collection path under /namespaces/<ns>, factory(ns, i), has a status to PUT)
    "ConfigMap 1 KB": ("/api/v1/namespaces/{ns}/configmaps", lambda ns, i: sized_configmap(f"cm-{i:06d}", 1024, ns),
                       False),
    "Pod 4 KB": ("/api/v1/namespaces/{ns}/pods", pod, True),
    "RoleBinding 0.4 KB": ("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", rolebinding, False),
    "Pod 100 KB": ("/api/v1/namespaces/{ns}/pods", big_pod, True),
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
        async with s.get(side.base + "/debug/residency") as r:
            rep = orjson.loads(await check(r, "/debug/residency"))
    # Entries and B-tree nodes are allocated through Python's allocator (tracemalloc sees them); the roaring
    # bitmaps are CRoaring's malloc, so they are added.
    native = sum(st["bitmap_bytes"] for st in rep["resources"].values())
    if "tracemalloc_bytes" not in rep["process"]:
        raise BenchError("ours runs without RESIDENCY_TRACEMALLOC=1")
    return rep["process"]["tracemalloc_bytes"] + native


async def memory_reading(side: Side) -> dict:
    heap = await heap_bytes(side)
    await asyncio.sleep(0.5)
    return {"heap": heap, "rss": side.rss()}


def section_memory(sv: Servers, sizes: dict[str, int]) -> dict:
    out = {}
    sides = (sv.ours_side, sv.kube_side)
    for k, (name, (tmpl, make, status)) in enumerate(KINDS.items()):
        n = sizes[name]
        ns = f"mem-{k}"
        path = tmpl.format(ns=ns)
        asyncio.run(ensure_ns(sv.kube_side, ns))
        for side in sides:
            asyncio.run(synced_count(side, path))
        before = {side.name: asyncio.run(memory_reading(side)) for side in sides}
        log(f"memory: loading {n} x {name} through kube-apiserver")
        load(sv.kube_side, path, lambda i: make(ns, i), n, status)
        counts = {side.name: asyncio.run(synced_count(side, path)) for side in sides}
        if any(c != n for c in counts.values()):
            raise BenchError(f"memory {name}: caches hold {counts}, expected {n}")
        time.sleep(1.0)
        after = {side.name: asyncio.run(memory_reading(side)) for side in sides}
        obj_bytes = asyncio.run(list_bytes(sv.ours_side, path)) / n
        row = {"objects": n, "json_bytes_per_object": obj_bytes}
        for side in sides:
            for m in ("heap", "rss"):
                row[f"{side.name}_{m}_per_object"] = (after[side.name][m] - before[side.name][m]) / n
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


def section_lists(sv: Servers, n: int, size: int, clients: int, reps1: int, repsn: int) -> dict:
    ns = "lists"
    path = f"/api/v1/namespaces/{ns}/configmaps"
    asyncio.run(ensure_ns(sv.kube_side, ns))
    log(f"lists: loading {n} x {size // 1000} KB ConfigMaps through kube-apiserver")
    load(sv.kube_side, path, lambda i: sized_configmap(f"cm-{i:06d}", size, ns, extra=None) | {
        "metadata": {"name": f"cm-{i:06d}", "namespace": ns, "labels": {"app": "bench", "tier": f"t{i % 10}"}}}, n)
    for side in (sv.ours_side, sv.kube_side):
        if asyncio.run(synced_count(side, path)) != n:
            raise BenchError(f"{side.name} does not list {n} objects")
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
    return out


# --- the run ------------------------------------------------------------------------------------------------

def ratio(ours: float, kube: float) -> float | None:
    return ours / kube if kube > 0 and ours >= 0 else None


def fmt(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}"


def verdict(ratio: float | None, target: str) -> str:
    op, limit = TARGETS[target]
    if ratio is None:
        return "n/a (a growth <= 0: too few objects to read)"
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
    for name, r in doc.get("lists", {}).items():
        for q in ("p50", "p99"):
            rows.append((f"list {q}, {name}", f"{r['ours'][q + '_ms']:,.0f} ms", f"{r['kube'][q + '_ms']:,.0f} ms",
                         f"{r[q + '_ratio']:.2f}", verdict(r[q + "_ratio"], f"list_{q}")))
    v = doc["versions"]
    head = (f"# ours vs kube-apiserver {v.get('kube_apiserver', '?')}, one etcd {etcd_version_str(v)}, HTTPS/1.1 both; "
            f"{v.get('cpu_affinity') or v.get('cpu_count')} cores ({v['cpu_model']}) shared by etcd, both servers "
            f"and the client processes; Python {v['python']}\n")
    return head + render(rows, ("figure", "ours", "kube", "ours/kube", "target"))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.vs_upstream", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    ap.add_argument("--sections", default="memory,lists", help="comma-separated: memory, lists")
    ap.add_argument("--clients", type=int, default=20, help="concurrent list clients (default 20)")
    ap.add_argument("--out", default="bench/out/vs_upstream.json")
    p = ap.parse_args(argv)
    p.sections = [x.strip() for x in p.sections.split(",") if x.strip()]
    for s in p.sections:
        if s not in ("memory", "lists"):
            ap.error(f"unknown section {s!r} (memory, lists)")
    if p.quick:
        p.mem_sizes = {"ConfigMap 1 KB": 300, "Pod 4 KB": 200, "RoleBinding 0.4 KB": 300, "Pod 100 KB": 30}
        p.list_n, p.reps1, p.repsn, p.clients = 50, 3, 1, min(p.clients, 4)
    else:
        p.mem_sizes = {"ConfigMap 1 KB": 10_000, "Pod 4 KB": 5_000, "RoleBinding 0.4 KB": 10_000, "Pod 100 KB": 500}
        p.list_n, p.reps1, p.repsn = 1_000, 10, 3
    return p


def main(argv=None) -> int:
    p = parse_args(argv)
    t0 = time.perf_counter()
    doc: dict = {"args": {k: v for k, v in vars(p).items()}}
    with current_etcd() as etcd:
        sv = Servers(etcd.endpoint)
        try:
            # tracemalloc (for the heap figure) slows ours: only while measuring memory
            sv.start_ours(tracemalloc="memory" in p.sections)
            kube_version = asyncio.run(_get(sv.kube_side, "/version"))
            doc["versions"] = versions(etcd.endpoint, sv.ours.base, git=True,
                                       kube_apiserver=kube_version.get("gitVersion"))
            if "memory" in p.sections:
                doc["memory"] = section_memory(sv, p.mem_sizes)
                sv.ours.stop()
                sv.start_ours(tracemalloc=False)
            if "lists" in p.sections:
                doc["lists"] = section_lists(sv, p.list_n, 100_000, p.clients, p.reps1, p.repsn)
        finally:
            sv.stop()
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
