"""Streaming list memory: apiserver peak RSS growth under 10 concurrent full lists of ~100 MB.

One current etcd loaded (through a throw-away apiserver) with N ConfigMaps of S bytes (default 1,000 x 100 KB
= ~100 MB). Per case a *fresh* apiserver: wait until idle and ready (cache filled when on), read `VmRSS`
(idle), then C concurrent unpaged LISTs of the namespace, each read to the end by the client (bytes counted,
not kept), and read `VmHWM` (peak). Growth = peak - idle. Cases:

* cache on, RV=0 (served from the cache snapshot);
* cache on, consistent (no resourceVersion: one revision request, then from the cache);
* cache off, consistent (from etcd: every list is a full range).

    .venv/bin/python -m bench.list_memory           # 1,000 x 100 KB, 10 concurrent lists
    .venv/bin/python -m bench.list_memory --quick   # 200 x 100 KB, 10 concurrent lists (< 30 s)

Target (issue 3): growth < 64 MB and not proportional to list size. Anchor: streaming list encoding,
10 concurrent 1 GB lists 70-80 GB -> 3 GB (kubernetes.io blog 2025-05-09).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

import aiohttp

from bench.cache_reads import NAMESPACE
from bench.harness import Apiserver, BenchError, current_etcd, log, versions, wait_cache_ready, write_json
from bench.report import etcd_version_str, render
from bench.workloads import load_with_throwaway_apiserver

TARGET_MIB = 64.0


async def concurrent_lists(api: Apiserver, concurrency: int, params: dict) -> dict:
    url = f"{api.base}/api/v1/namespaces/{NAMESPACE}/configmaps"
    sizes: list[int] = []
    lat: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=600)) as s:
        async def one():
            t0 = time.perf_counter()
            async with s.get(url, params=params) as r:
                n = 0
                async for chunk in r.content.iter_any():
                    n += len(chunk)
                if r.status != 200:
                    raise BenchError(f"LIST {params}: HTTP {r.status}")
            sizes.append(n)
            lat.append(time.perf_counter() - t0)
        await asyncio.gather(*(one() for _ in range(concurrency)))
    return {"list_bytes": min(sizes), "list_s_max": max(lat), "list_s_min": min(lat)}


def run_case(endpoint: str, wc: bool, params: dict, n: int, concurrency: int) -> dict:
    with Apiserver(endpoint, watch_cache=wc) as api:
        if wc:
            asyncio.run(wait_cache_ready(api.base, f"/api/v1/namespaces/{NAMESPACE}/configmaps", n))
        time.sleep(1.0)
        idle = api.mem()
        # VmHWM so far includes initialisation (e.g. the cache's paged initial list); growth is measured
        # against the larger of idle RSS and that earlier peak.
        r = asyncio.run(concurrent_lists(api, concurrency, params))
        api.alive()
        mem = api.mem()
        vers = versions(endpoint, api.base)
    base = max(idle["VmRSS"], idle["VmHWM"])
    r.update({"rss_idle_mib": idle["VmRSS"], "hwm_before_mib": idle["VmHWM"], "hwm_mib": mem["VmHWM"],
              "growth_mib": mem["VmHWM"] - base, "growth_over_idle_rss_mib": mem["VmHWM"] - idle["VmRSS"]})
    r["growth_per_list_mb"] = r["growth_mib"] * 1.048576 / concurrency
    r["pass"] = r["growth_mib"] < TARGET_MIB
    return r, vers


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.list_memory", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run for CI (< 30 s)")
    ap.add_argument("--objects", type=int, help="ConfigMaps (default 1000; --quick 200)")
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--out", default="bench/out/list_memory.json")
    p = ap.parse_args(argv)
    p.objects = p.objects or (200 if p.quick else 1000)
    t0 = time.perf_counter()
    cases = {}
    with current_etcd() as etcd:
        obj_bytes = load_with_throwaway_apiserver(etcd.endpoint, NAMESPACE, p.objects, p.size)
        for name, wc, params in (("cache on, RV=0", True, {"resourceVersion": "0"}),
                                 ("cache on, consistent", True, {}),
                                 ("cache off, consistent", False, {})):
            log(f"{name}: {p.concurrency} concurrent full lists")
            cases[name], vers = run_case(etcd.endpoint, wc, params, p.objects, p.concurrency)
            log(f"  growth {cases[name]['growth_mib']:.0f} MiB")
    write_json(p.out, {"benchmark": "list_memory", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "elapsed_s": time.perf_counter() - t0, "etcd_binary": etcd.binary, "object_bytes": obj_bytes,
                       "params": {k: v for k, v in vars(p).items() if k != "out"},
                       "measured": "fresh apiserver per case; growth = VmHWM after the lists - max(VmRSS idle, "
                                   "VmHWM before the lists); client counts bytes only",
                       "versions": vers, "figures": cases})
    rows = [(k, f"{c['list_bytes'] / 1e6:.0f} MB", f"{c['rss_idle_mib']:.0f}", f"{c['hwm_before_mib']:.0f}",
             f"{c['hwm_mib']:.0f}", f"{c['growth_mib']:.0f}", f"{c['list_s_max']:.1f}",
             ("PASS" if c["pass"] else "FAIL") + f" (< {TARGET_MIB:.0f} MiB)") for k, c in cases.items()]
    print(f"# streaming list memory: {p.concurrency} concurrent unpaged LISTs of {p.objects} ConfigMaps x "
          f"{obj_bytes / 1000:.0f} KB; etcd {etcd_version_str(vers)}; Python {vers['python']}; {vers['cpu_model']}\n"
          f"# anchor: streaming list encoding, 10 concurrent 1 GB lists 70-80 GB -> 3 GB (blog 2025-05-09)\n"
          + render(rows, ("case", "list size", "RSS idle MiB", "HWM before MiB", "HWM after MiB", "growth MiB",
                          "slowest list s", "target")))
    log(f"wrote {p.out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
