"""Consistent reads with the watch cache on and off, side by side (issue 3, KEP-2340 demo at 1/10 scale).

One current etcd (built by tools/build_etcd.py, so progress requests work and the cache may serve
consistent reads, S3.6) is loaded with N ConfigMaps of S bytes through a throw-away apiserver
(`--watch-cache=false`). Then, for each mode, a *fresh* apiserver process (`--watch-cache=true`, then
`false`) over the same etcd and data gets W concurrent workers doing consistent LISTs (no resourceVersion)
of the namespace for D seconds. Per mode:

* etcd requests by kind during the read window, from the apiserver's own `/metrics`
  (`etcd_requests_total{operation,type}` before/after): `list` (ranges) vs `getCurrentResourceVersion`
  (limit=1 keys-only ranges);
* apiserver peak RSS (`VmHWM` of the fresh process) and RSS when idle (ready, before the reads);
* LIST latency p50/p99 (request sent -> last body byte), lists/s.

    .venv/bin/python -m bench.cache_reads                 # 1,000 x 100 KB, 20 workers, 60 s per mode
    .venv/bin/python -m bench.cache_reads --quick         # 150 x 100 KB, 5 workers, 4 s per mode (< 30 s)

Progress on stderr, table on stdout, JSON to `--out` (default bench/out/cache_reads.json).
Client, apiserver and etcd share the machine's cores; the client only counts body bytes (no decoding).

Also holds the helpers the other server benchmarks share (current etcd, apiserver with flags, metrics).
"""
from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import aiohttp
import orjson

from bench.etcd_path import BenchError, check, log, pct, proc_mem_mib, versions
from storage.embedded import EmbeddedEtcd, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMESPACE = "bench"
JSON_CT = {"Content-Type": "application/json"}

FIGURES = ("lists", "lists_per_s", "list_p50_ms", "list_p99_ms", "etcd_list", "etcd_current_rv",
           "etcd_requests_per_list", "apiserver_hwm_mib", "apiserver_rss_idle_mib")


# --- shared helpers (also used by list_memory and watch_fanout) ---------------------------------------

def current_etcd_binary() -> str:
    """Path of the current etcd built by tools/build_etcd.py (builds it once if missing)."""
    spec = importlib.util.spec_from_file_location("_build_etcd", os.path.join(ROOT, "tools", "build_etcd.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ensure_etcd()


class Apiserver:
    """A real `python -m apiserver` process; context manager, terminated on exit."""

    def __init__(self, etcd_endpoint: str, watch_cache: bool):
        self.etcd_endpoint = etcd_endpoint
        self.watch_cache = watch_cache
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(tempfile.gettempdir(), f"bench-apiserver-{self.port}.log")
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "Apiserver":
        with open(self.log_path, "wb") as lf:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "apiserver", "--etcd-servers", self.etcd_endpoint, "--port", str(self.port),
                 f"--watch-cache={'true' if self.watch_cache else 'false'}"],
                stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"apiserver exited with {self.proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(self.base + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        log(f"apiserver pid {self.proc.pid} watch-cache={self.watch_cache} at {self.base} "
                            f"(log {self.log_path})")
                        return self
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        raise BenchError(f"apiserver not ready in 60 s; see {self.log_path}")

    def __exit__(self, *exc) -> None:
        self.stop()

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"apiserver exited with {self.proc.returncode} during the run; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def mem(self) -> dict[str, float]:
        return proc_mem_mib(self.proc.pid)

    def cpu_s(self) -> float:
        return proc_cpu_s(self.proc.pid)


def proc_cpu_s(pid: int) -> float:
    """user+system CPU seconds of a process (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_METRIC_RE = re.compile(r'^etcd_requests_total\{([^}]*)\}\s+([0-9.eE+]+)', re.M)


async def etcd_requests(s: aiohttp.ClientSession, base: str, type_contains: str = "configmaps") -> dict[str, float]:
    """{operation: count} from the apiserver's /metrics, summed over types containing `type_contains`."""
    async with s.get(base + "/metrics") as r:
        text = (await check(r, "GET /metrics")).decode()
    out: dict[str, float] = {}
    for labels, val in _METRIC_RE.findall(text):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if type_contains in lab.get("type", ""):
            out[lab.get("operation", "?")] = out.get(lab.get("operation", "?"), 0.0) + float(val)
    return out


def big_configmap(name: str, size: int, ns: str = NAMESPACE, extra: dict | None = None) -> dict:
    """A ConfigMap whose JSON is about `size` bytes (10 keys of equal length)."""
    per = max(1, (size - 200) // 10)
    data = {f"k{i}": chr(ord("a") + i) * per for i in range(10)}
    if extra:
        data.update(extra)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": "bench"}}, "data": data}


async def load_configmaps(base: str, n: int, size: int, clients: int = 8, ns: str = NAMESPACE) -> int:
    """Create namespace `ns` and n ConfigMaps of ~size bytes; returns the body size of one."""
    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
        async with s.post(f"{base}/api/v1/namespaces", data=orjson.dumps({"metadata": {"name": ns}}),
                          headers=JSON_CT) as r:
            if r.status not in (201, 409):
                await check(r, "POST namespace")
        url = f"{base}/api/v1/namespaces/{ns}/configmaps"
        it = iter(range(n))
        done = [0]
        step = max(1, n // 5)

        async def worker():
            for i in it:
                body = orjson.dumps(big_configmap(f"cm-{i:06d}", size, ns))
                async with s.post(url, data=body, headers=JSON_CT) as r:
                    if r.status != 409:
                        await check(r, f"POST cm-{i:06d}")
                done[0] += 1
                if done[0] % step == 0:
                    log(f"  loaded {done[0]}/{n}")

        await asyncio.gather(*(worker() for _ in range(clients)))
    return len(orjson.dumps(big_configmap("cm-000000", size, ns)))


def load_with_throwaway_apiserver(etcd_endpoint: str, n: int, size: int, clients: int = 8) -> int:
    """Load through a `--watch-cache=false` apiserver that is stopped afterwards, so the measured processes
    start fresh (their VmHWM covers initialisation and the measured load only)."""
    log(f"loading {n} ConfigMaps of ~{size} B through a throw-away apiserver")
    t0 = time.perf_counter()
    with Apiserver(etcd_endpoint, watch_cache=False) as api:
        obj_bytes = asyncio.run(load_configmaps(api.base, n, size, clients))
    log(f"loaded in {time.perf_counter() - t0:.1f} s")
    return obj_bytes


async def wait_cache_ready(base: str, n: int, timeout: float = 120.0, ns: str = NAMESPACE) -> float:
    """Poll an RV=0 list (served by the cache when on) until it has n items; returns seconds waited."""
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
        while time.perf_counter() - t0 < timeout:
            async with s.get(f"{base}/api/v1/namespaces/{ns}/configmaps", params={"resourceVersion": "0"}) as r:
                if r.status == 200:
                    if len(orjson.loads(await r.read()).get("items") or []) >= n:
                        return time.perf_counter() - t0
                else:
                    await r.read()
            await asyncio.sleep(0.2)
    raise BenchError(f"cache at {base} did not show {n} objects in {timeout} s")


def write_json(path: str, doc: dict) -> None:
    # The machine may be shared: the load average says how much other work competed with the run.
    doc.setdefault("loadavg_1_5_15_at_end", list(os.getloadavg()))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)


def render(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> str:
    rows = [header] + rows
    w = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(f"{c:<{w[i]}}" for i, c in enumerate(r)).rstrip() for r in rows)


def etcd_version_str(vers: dict) -> str:
    return vers["etcd"].get("etcdserver", "?") if isinstance(vers.get("etcd"), dict) else "?"


# --- the benchmark ---------------------------------------------------------------------------------------

async def consistent_lists(api: Apiserver, n: int, workers: int, duration: float) -> dict:
    url = f"{api.base}/api/v1/namespaces/{NAMESPACE}/configmaps"
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=600)) as s:
        async with s.get(url) as r:  # one checked list: n items, and warms connections/code paths
            body = await check(r, "LIST")
        items = len(orjson.loads(body)["items"])
        if items != n:
            raise BenchError(f"consistent LIST returned {items} items, expected {n}")
        list_bytes = len(body)
        del body
        idle = api.mem()
        before = await etcd_requests(s, api.base)
        cpu0 = api.cpu_s()
        lat: list[float] = []
        errors: list[str] = []
        t_end = time.perf_counter() + duration

        async def worker():
            while time.perf_counter() < t_end:
                t0 = time.perf_counter()
                async with s.get(url) as r:
                    got = 0
                    async for chunk in r.content.iter_any():
                        got += len(chunk)
                    if r.status != 200:
                        errors.append(f"HTTP {r.status}")
                        continue
                lat.append((time.perf_counter() - t0) * 1000.0)
                if got < list_bytes * 0.9:
                    errors.append(f"short body {got} < {list_bytes}")

        async def progress():
            while time.perf_counter() < t_end:
                await asyncio.sleep(10)
                log(f"  {len(lat)} lists so far, RSS {api.mem()['VmRSS']:.0f} MiB")

        t0 = time.perf_counter()
        ptask = asyncio.create_task(progress())
        await asyncio.gather(*(worker() for _ in range(workers)))
        elapsed = time.perf_counter() - t0
        ptask.cancel()
        cpu = api.cpu_s() - cpu0
        after = await etcd_requests(s, api.base)
    api.alive()
    if errors:
        raise BenchError(f"{len(errors)} failed lists, first: {errors[0]}")
    if not lat:
        raise BenchError("no list completed within the duration")
    mem = api.mem()
    d = {op: after.get(op, 0.0) - before.get(op, 0.0) for op in set(after) | set(before)}
    etcd_total = sum(d.values())
    return {"lists": len(lat), "elapsed_s": elapsed, "lists_per_s": len(lat) / elapsed,
            "list_p50_ms": pct(lat, 50), "list_p99_ms": pct(lat, 99), "list_max_ms": max(lat),
            "list_bytes": list_bytes, "list_mb_per_s": len(lat) * list_bytes / elapsed / 1e6,
            "etcd_list": d.get("list", 0.0), "etcd_current_rv": d.get("getCurrentResourceVersion", 0.0),
            "etcd_requests_by_op": d, "etcd_requests_total": etcd_total,
            "etcd_requests_per_list": etcd_total / len(lat),
            "etcd_list_total_since_start": after.get("list", 0.0),
            "apiserver_cpu_s": cpu, "apiserver_cpu_cores": cpu / elapsed,
            "apiserver_hwm_mib": mem["VmHWM"], "apiserver_rss_mib": mem["VmRSS"],
            "apiserver_rss_idle_mib": idle["VmRSS"]}


def table(res: dict, p: argparse.Namespace, vers: dict, obj_bytes: int) -> str:
    on, off = res["cache_on"], res["cache_off"]
    cores = vers.get("cpu_affinity") or vers.get("cpu_count")
    # count-only ranges (apiserver_storage_objects refresh every 30 s) are also recorded as operation "list".
    count_calls = int(p.duration // 30) + 1
    speed = off["list_p50_ms"] / on["list_p50_ms"] if on["list_p50_ms"] else float("inf")
    rows = [
        ("etcd `list` ranges in window", f"{on['etcd_list']:.0f}", f"{off['etcd_list']:.0f}",
         f"0 full ranges with cache (<= {count_calls} count-only ranges also show as `list`)",
         "PASS" if on["etcd_list"] <= count_calls else "FAIL"),
        ("etcd getCurrentResourceVersion", f"{on['etcd_current_rv']:.0f}", f"{off['etcd_current_rv']:.0f}",
         "", ""),
        ("etcd requests per list", f"{on['etcd_requests_per_list']:.3f}", f"{off['etcd_requests_per_list']:.3f}",
         "<= 1 with cache (fewer with coalescing)", "PASS" if on["etcd_requests_per_list"] <= 1 else "FAIL"),
        ("lists completed", f"{on['lists']}", f"{off['lists']}", "", ""),
        ("lists/s", f"{on['lists_per_s']:.2f}", f"{off['lists_per_s']:.2f}", "", ""),
        ("list p50 ms", f"{on['list_p50_ms']:.0f}", f"{off['list_p50_ms']:.0f}",
         f">= 10x lower with cache (got {speed:.1f}x)", "PASS" if speed >= 10 else "FAIL"),
        ("list p99 ms", f"{on['list_p99_ms']:.0f}", f"{off['list_p99_ms']:.0f}", "", ""),
        ("apiserver peak RSS (VmHWM) MiB", f"{on['apiserver_hwm_mib']:.0f}", f"{off['apiserver_hwm_mib']:.0f}",
         "KubeCon 1.35: 18 GB -> 9 GB at 10x scale", ""),
        ("apiserver RSS idle MiB", f"{on['apiserver_rss_idle_mib']:.0f}", f"{off['apiserver_rss_idle_mib']:.0f}",
         "ready, before the reads", ""),
        ("apiserver CPU cores busy", f"{on['apiserver_cpu_cores']:.2f}", f"{off['apiserver_cpu_cores']:.2f}",
         "", ""),
    ]
    head = (f"# consistent LISTs, watch cache on vs off: {p.objects} ConfigMaps x {obj_bytes / 1000:.0f} KB "
            f"({on['list_bytes'] / 1e6:.1f} MB per list), {p.workers} workers, {p.duration:.0f} s per mode\n"
            f"# etcd {etcd_version_str(vers)} (same binary both modes); Python {vers['python']}, aiohttp "
            f"{vers['aiohttp']}; {cores} cores ({vers['cpu_model']}) shared by etcd, apiserver and client\n"
            f"# anchors: KEP-2340 LIST p50 1,438 ms etcd vs 25 ms cache (300 x 1 MB); KubeCon 1.35 "
            f"(10,000 x 100 KB, 20 lists): etcd list calls 63 -> 3\n")
    return head + render(rows, ("figure", "cache on", "cache off", "target", "verdict"))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.cache_reads", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run for CI (< 30 s)")
    ap.add_argument("--objects", type=int, help="ConfigMaps (default 1000; --quick 150)")
    ap.add_argument("--size", type=int, default=100_000, help="bytes of JSON per ConfigMap (default 100000)")
    ap.add_argument("--workers", type=int, help="concurrent consistent listers (default 20; --quick 5)")
    ap.add_argument("--duration", type=float, help="seconds of lists per mode (default 60; --quick 4)")
    ap.add_argument("--out", default="bench/out/cache_reads.json")
    p = ap.parse_args(argv)
    p.objects = p.objects or (150 if p.quick else 1000)
    p.workers = p.workers or (5 if p.quick else 20)
    p.duration = p.duration or (4.0 if p.quick else 60.0)
    return p


def main(argv=None) -> int:
    p = parse_args(argv)
    t_start = time.perf_counter()
    binary = current_etcd_binary()
    res: dict = {}
    with EmbeddedEtcd(binary=binary) as etcd:
        log(f"etcd {binary} at {etcd.endpoint}")
        obj_bytes = load_with_throwaway_apiserver(etcd.endpoint, p.objects, p.size)
        for mode, wc in (("cache_on", True), ("cache_off", False)):
            with Apiserver(etcd.endpoint, watch_cache=wc) as api:
                if wc:
                    res["cache_init_s"] = asyncio.run(wait_cache_ready(api.base, p.objects))
                vers = versions(etcd.endpoint, api.base)
                log(f"{mode}: {p.workers} workers x {p.duration:.0f} s of consistent LISTs")
                res[mode] = asyncio.run(consistent_lists(api, p.objects, p.workers, p.duration))
                log(f"{mode}: {res[mode]['lists']} lists, p50 {res[mode]['list_p50_ms']:.0f} ms")
    on, off = res["cache_on"], res["cache_off"]
    res["p50_speedup"] = off["list_p50_ms"] / on["list_p50_ms"]
    res["targets"] = {
        "no_full_range_reads_with_cache": on["etcd_list"] <= p.duration // 30 + 1,
        "at_most_one_etcd_request_per_list": on["etcd_requests_per_list"] <= 1.0,
        "p50_10x_lower": res["p50_speedup"] >= 10.0,
    }
    doc = {"benchmark": "cache_reads", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "elapsed_s": time.perf_counter() - t_start, "etcd_binary": binary, "object_bytes": obj_bytes,
           "params": {k: v for k, v in vars(p).items() if k != "out"},
           "measured": "aiohttp client in the same machine as etcd and the apiserver (shared cores); "
                       "latency = request sent to last body byte; bodies counted, not decoded; "
                       "etcd requests from the apiserver's etcd_requests_total during the read window "
                       "(count-only ranges of the 30 s object counter are recorded as operation=list)",
           "versions": vers, "figures": res}
    write_json(p.out, doc)
    print(table(res, p, vers, obj_bytes))
    log(f"wrote {p.out} in {doc['elapsed_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
