"""Watch fan-out: deliveries/s and dispatch latency with 100 and 1,000 watchers, watch cache on vs off.

One current etcd; per mode a fresh apiserver (`--watch-cache=true|false`). M watchers (one HTTP watch each,
on a namespace of 100 ConfigMaps, from the current RV) are spread over P client *processes* (aiohttp,
forked), so that one Python client is not the bottleneck; they count events by scanning raw bytes (no JSON
decoding). The benchmark process then PUTs K updates (~1 KB ConfigMaps, 8 concurrent writers), each
carrying a sequence number; the writer records when each PUT was acknowledged.

* deliveries/s = MODIFIED events received by all watchers / (last receipt - first write);
* dispatch latency = receipt time - write ack time of the same update (same host clock; negative when the
  event arrives before the PUT response does), p50/p99 over every delivery;
* CPU: apiserver and client processes (user+sys seconds / wall time of the write+delivery phase).

With the cache off, each watcher is its own etcd watch (and the apiserver decodes each event once per
watcher): only 100 watchers by default there (`--off-watchers 100,1000` to try 1,000).

    .venv/bin/python -m bench.watch_fanout           # cache on: 100 and 1,000 watchers; off: 100
    .venv/bin/python -m bench.watch_fanout --quick   # on: 20 and 100 watchers; off: 20; 100 updates (< 30 s)
    .venv/bin/python -m bench.watch_fanout --separate-writer --writers 32   # + PUTs via a second apiserver

Target (issue 3): >= 50,000 deliveries/s on two cores. Anchors: etcd watch delivery ~10-45 k events/s;
one aiohttp process fanning out pre-encoded 1 KB events: 75-100 k deliveries/s.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import resource
import sys
import time

import aiohttp
import orjson

from bench.harness import (JSON_CT, Apiserver, BenchError, check, current_etcd, log, run_pool, versions,
                           wait_tasks, write_json)
from bench.report import etcd_version_str, pct, render
from bench.workloads import configmap, create_objects, ensure_namespace, payload

NAMESPACE = "fanout"
OBJECTS = 100
_RUN = [""]


def cm(i: int, seq: int | None = None) -> dict:
    # "run" is distinct per configuration: an identical PUT is a no-op (no event)
    data = payload() if seq is None else payload(seq=str(seq), run=_RUN[0])
    return configmap(f"cm-{i:04d}", NAMESPACE, data=data)


# --- client process ---------------------------------------------------------------------------------------

def client_main(base: str, rv: str, n_watchers: int, expected: int, timeout: float, q) -> None:
    """Runs in a forked process: n_watchers watches; reports ("ready", n) then ("done", result)."""
    async def run():
        conn = aiohttp.TCPConnector(limit=0)
        recv: list[tuple[int, int]] = []          # (seq, receipt ns) for every delivery
        counts = [0] * n_watchers
        lasts = [0.0] * n_watchers
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as s:
            url = f"{base}/api/v1/namespaces/{NAMESPACE}/configmaps"
            params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": str(int(timeout) + 60)}
            opened = asyncio.Event()
            n_open = [0]

            async def watcher(idx: int):
                async with s.get(url, params=params) as r:
                    if r.status != 200:
                        raise BenchError(f"WATCH: HTTP {r.status}: {(await r.read())[:300]!r}")
                    n_open[0] += 1
                    if n_open[0] == n_watchers:
                        opened.set()
                    buf = b""
                    seen = 0
                    async for chunk in r.content.iter_any():
                        now = time.time_ns()
                        buf += chunk
                        lines = buf.split(b"\n")
                        buf = lines.pop()
                        for line in lines:
                            if b'"type":"MODIFIED"' not in line[:40]:
                                continue
                            k = line.find(b'"seq":"')
                            if k < 0:
                                continue
                            recv.append((int(line[k + 7:line.index(b'"', k + 7)]), now))
                            seen += 1
                        counts[idx] = seen
                        lasts[idx] = time.time()
                        if seen >= expected:
                            return

            tasks = [asyncio.create_task(watcher(i)) for i in range(n_watchers)]
            try:
                await asyncio.wait_for(opened.wait(), 60)
            except asyncio.TimeoutError:
                for t in tasks:
                    if t.done() and t.exception():
                        raise t.exception()
                raise BenchError(f"only {n_open[0]}/{n_watchers} watches opened in 60 s")
            q.put(("ready", n_watchers))
            pending = await wait_tasks(tasks, timeout)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return {"counts": counts, "lasts": lasts, "recv": recv, "cpu_s": ru.ru_utime + ru.ru_stime,
                "incomplete": len(pending)}

    try:
        q.put(("done", asyncio.run(run())))
    except BaseException as e:  # report instead of hanging the parent
        q.put(("error", repr(e)))


# --- one configuration --------------------------------------------------------------------------------------

async def write_updates(base: str, updates: int, writers: int) -> tuple[float, list[int], float]:
    """(first write wall time, ack ns per seq, writes/s)."""
    acks = [0] * updates
    url = f"{base}/api/v1/namespaces/{NAMESPACE}/configmaps/"
    conn = aiohttp.TCPConnector(limit=writers)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def op(seq):
            i = seq % OBJECTS
            async with s.put(url + f"cm-{i:04d}", data=orjson.dumps(cm(i, seq)), headers=JSON_CT) as r:
                await check(r, f"PUT cm-{i:04d}")
            acks[seq] = time.time_ns()
        t0 = time.time()
        elapsed, _ = await run_pool(updates, writers, op, steps=0)
        return t0, acks, updates / elapsed


async def setup_namespace(base: str) -> str:
    async with aiohttp.ClientSession() as s:
        await ensure_namespace(s, base, NAMESPACE)
        url = f"{base}/api/v1/namespaces/{NAMESPACE}/configmaps"
        await create_objects(s, url, OBJECTS, cm, clients=1, steps=0)  # one by one, as before
        async with s.get(url, params={"limit": "1"}) as r:
            return orjson.loads(await check(r, "LIST"))["metadata"]["resourceVersion"]


def run_config(api: Apiserver, watchers: int, updates: int, procs: int, writers: int, timeout: float,
               write_base: str | None = None) -> dict:
    """write_base: the apiserver the PUTs go to (default: the watched one)."""
    _RUN[0] = str(time.time_ns())
    write_base = write_base or api.base
    rv = asyncio.run(setup_namespace(api.base))
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    per = [watchers // procs + (1 if k < watchers % procs else 0) for k in range(procs)]
    ps = [ctx.Process(target=client_main, args=(api.base, rv, n, updates, timeout, q), daemon=True)
          for n in per if n]
    for p in ps:
        p.start()
    ready = 0
    while ready < len(ps):
        kind, val = q.get(timeout=90)
        if kind != "ready":
            raise BenchError(f"watch client failed before the writes: {val}")
        ready += 1
    time.sleep(0.5)  # let the server settle the new watchers
    log(f"  {watchers} watchers open over {len(ps)} client processes; writing {updates} updates")
    cpu0 = api.cpu_s()
    t_first, acks, write_rate = asyncio.run(write_updates(write_base, updates, writers))
    results = []
    for _ in ps:
        kind, val = q.get(timeout=timeout + 60)
        if kind != "done":
            raise BenchError(f"watch client failed: {val}")
        results.append(val)
    t_last = max(max(r["lasts"]) for r in results)
    api_cpu = api.cpu_s() - cpu0
    for p in ps:
        p.join(10)
    api.alive()
    delivered = sum(sum(r["counts"]) for r in results)
    lat = [(ns - acks[seq]) / 1e6 for r in results for seq, ns in r["recv"] if seq < len(acks) and acks[seq]]
    wall = t_last - t_first
    return {"watchers": watchers, "updates": updates, "client_processes": len(ps),
            "deliveries": delivered, "deliveries_expected": watchers * updates,
            "incomplete_watchers": sum(r["incomplete"] for r in results),
            "deliveries_per_s": delivered / wall if wall > 0 else 0.0, "wall_s": wall,
            "write_per_s": write_rate,
            "latency_p50_ms": pct(lat, 50) if lat else None, "latency_p99_ms": pct(lat, 99) if lat else None,
            "latency_max_ms": max(lat) if lat else None,
            "apiserver_cpu_cores": api_cpu / wall if wall > 0 else 0.0,
            "client_cpu_cores": sum(r["cpu_s"] for r in results) / wall if wall > 0 else 0.0,
            "apiserver_rss_mib": api.mem()["VmRSS"], "writes_via_second_apiserver": write_base != api.base}


def table(res: dict, vers: dict, p) -> str:
    rows = []
    for key, r in res["runs"].items():
        if r.get("skipped"):
            rows.append((r["mode"], str(r["watchers"]), "not run", "", "", "", "", r["skipped"]))
            continue
        ok = r["deliveries_per_s"] >= 50_000
        rows.append((r["mode"], f"{r['watchers']:,}", f"{r['deliveries_per_s']:,.0f}",
                     f"{r['deliveries']:,}/{r['deliveries_expected']:,}",
                     f"{r['latency_p50_ms']:.0f} / {r['latency_p99_ms']:.0f}" if r["latency_p99_ms"] is not None else "-",
                     f"{r['write_per_s']:,.0f}", f"{r['apiserver_cpu_cores']:.2f} / {r['client_cpu_cores']:.2f}",
                     ("PASS" if ok else "FAIL") + " (>= 50,000/s)"))
    cores = vers.get("cpu_affinity") or vers.get("cpu_count")
    head = (f"# watch fan-out, {p.updates} updates of 1 KB ConfigMaps, {p.writers} writers; etcd "
            f"{etcd_version_str(vers)}; Python {vers['python']}, aiohttp {vers['aiohttp']}\n"
            f"# {cores} cores ({vers['cpu_model']}) shared by etcd, apiserver, writer and {p.procs} watch-client "
            f"processes; client CPU reported beside the server's\n"
            f"# anchors: etcd watch delivery ~10-45 k events/s; one aiohttp process fanning out pre-encoded 1 KB "
            f"events 75-100 k deliveries/s\n")
    return head + render(rows, ("mode", "watchers", "deliveries/s", "delivered", "ack->delivery p50/p99 ms",
                                "writes/s", "CPU cores api/clients", "target"))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.watch_fanout", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run for CI (< 30 s)")
    ap.add_argument("--on-watchers", help="watcher counts with the cache (default 100,1000; --quick 20,100)")
    ap.add_argument("--off-watchers", help="watcher counts without the cache (default 100; --quick 20)")
    ap.add_argument("--updates", type=int, help="updates per configuration (default 500; --quick 100)")
    ap.add_argument("--procs", type=int, default=2, help="watch-client processes (default 2)")
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for delivery")
    ap.add_argument("--separate-writer", action="store_true",
                    help="also run each cache-on configuration with the PUTs sent to a second apiserver, so "
                         "the watched one only ingests and fans out (its write path no longer caps writes/s)")
    ap.add_argument("--out", default="bench/out/watch_fanout.json")
    p = ap.parse_args(argv)
    p.on_watchers = [int(x) for x in (p.on_watchers or ("20,100" if p.quick else "100,1000")).split(",")]
    p.off_watchers = [int(x) for x in (p.off_watchers or ("20" if p.quick else "100")).split(",")]
    p.updates = p.updates or (100 if p.quick else 500)
    if p.quick:
        p.timeout = min(p.timeout, 20.0)
    return p


def main(argv=None) -> int:
    p = parse_args(argv)
    t0 = time.perf_counter()
    runs: dict = {}
    with current_etcd() as etcd:
        for mode, wc, counts in (("cache on", True, p.on_watchers), ("cache off", False, p.off_watchers)):
            for w in counts:
                with Apiserver(etcd.endpoint, watch_cache=wc) as api:
                    vers = versions(etcd.endpoint, api.base)
                    log(f"{mode}: {w} watchers")
                    r = run_config(api, w, p.updates, p.procs, p.writers, p.timeout)
                    r["mode"] = mode
                    runs[f"{'on' if wc else 'off'}_{w}"] = r
                    log(f"  {r['deliveries_per_s']:,.0f} deliveries/s, p99 {r['latency_p99_ms']} ms")
                    if wc and p.separate_writer:
                        # The watched apiserver only ingests and fans out; PUTs are served by another
                        # process on the same etcd (as behind a load balancer).
                        with Apiserver(etcd.endpoint, watch_cache=False) as writer_api:
                            log(f"{mode}: {w} watchers, writes via a second apiserver")
                            r = run_config(api, w, p.updates, p.procs, p.writers, p.timeout, writer_api.base)
                        r["mode"] = mode + " (writes via 2nd apiserver)"
                        runs[f"on_{w}_separate_writer"] = r
                        log(f"  {r['deliveries_per_s']:,.0f} deliveries/s, p99 {r['latency_p99_ms']} ms")
        if 1000 not in p.off_watchers and not p.quick:
            runs["off_1000"] = {"mode": "cache off", "watchers": 1000,
                                "skipped": "1,000 per-watcher etcd watches not run by default (each event decoded "
                                           "per watcher); --off-watchers 100,1000 to try"}
    res = {"runs": runs}
    write_json(p.out, {"benchmark": "watch_fanout", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "elapsed_s": time.perf_counter() - t0, "etcd_binary": etcd.binary,
                       "params": {k: v for k, v in vars(p).items() if k != "out"},
                       "measured": "watch clients in forked aiohttp processes counting raw bytes; writer in the "
                                   "benchmark process; all share the cores with etcd and the apiserver",
                       "versions": vers, "figures": res})
    print(table(res, vers, p))
    log(f"wrote {p.out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
