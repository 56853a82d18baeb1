"""What every server benchmark needs around its measurement: processes (etcd and apiservers, built on
tests.helpers), /proc readings, HTTP helpers, the versions of what ran, the load average, JSON output."""
from __future__ import annotations

import asyncio
import json
import os
import platform
import ssl
import subprocess
import sys
import time
import urllib.request
from importlib.metadata import version as dist_version

import aiohttp
import orjson

# Process control comes from the tests' harness; benchmarks import it from here.
from tests.helpers import (ROOT, ApiserverProcess, current_etcd, stop_all,  # noqa: F401  (re-exported)
                           wait_all_ready_async)

JSON_CT = {"Content-Type": "application/json"}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class BenchError(RuntimeError):
    pass


# --- processes --------------------------------------------------------------------------------------------

def proc_status_kib(pid: int | str = "self") -> dict[str, int]:
    """VmRSS and VmHWM of a process, in kB (from /proc/<pid>/status)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0])
    return out


def proc_mem_mib(pid: int) -> dict[str, float]:
    return {k: v / 1024.0 for k, v in proc_status_kib(pid).items()}


def proc_cpu_s(pid: int) -> float:
    """user+system CPU seconds of a process (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_ticks() -> list[int]:
    """The machine's CPU time so far, in ticks, from the first line of /proc/stat: user, nice, system, idle,
    iowait, irq, softirq, steal."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def machine_shares(t0: list[int], t1: list[int]) -> dict[str, float]:
    """What the machine's cores did between two `machine_ticks`: busy (user, nice, system, irq, softirq), idle
    (with iowait), and stolen by the hypervisor for other guests: with `cpu_probe_ms`, whether a slower run
    had a slower machine under it."""
    d = [b - a for a, b in zip(t0, t1)]
    total = sum(d) or 1
    return {"busy_share": (d[0] + d[1] + d[2] + d[5] + d[6]) / total, "idle_share": (d[3] + d[4]) / total,
            "steal_share": d[7] / total}


def cpu_probe_ms(rounds: int = 5) -> float:
    """Median milliseconds of a fixed pure-Python loop, one core: the machine's speed before a run starts its
    processes (a frequency change or a noisy neighbour shows here; on a busy machine it measures the contention)."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        x = 0
        for i in range(300_000):
            x += i & 7
        times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[rounds // 2]


class Apiserver(ApiserverProcess):
    """A benchmark's apiserver: `--watch-cache=<watch_cache>` unless None, log under
    <tmp>/bench-apiserver-<port>.log, memory and CPU readings, stopped by kill if SIGTERM is not enough."""

    def __init__(self, etcd_endpoint: str, *args: str, watch_cache: bool | None = None, ready_timeout=60.0,
                 name="apiserver", log_name="bench-apiserver", **kw):
        if watch_cache is not None:
            args += (f"--watch-cache={'true' if watch_cache else 'false'}",)
        super().__init__(*args, etcd_servers=etcd_endpoint, name=name, log_name=log_name,
                         ready_timeout=ready_timeout, **kw)
        self.watch_cache = watch_cache

    def __enter__(self) -> "Apiserver":
        super().__enter__()
        wc = "" if self.watch_cache is None else f" watch-cache={self.watch_cache}"
        log(f"apiserver pid {self.pid}{wc} at {self.base} (log {self.log_path})")
        return self

    def stop(self, timeout: float = 10.0, strict: bool = False) -> None:
        super().stop(timeout, strict)

    def mem(self) -> dict[str, float]:
        return proc_mem_mib(self.pid)

    def cpu_s(self) -> float:
        return proc_cpu_s(self.pid)


# --- HTTP -------------------------------------------------------------------------------------------------

def ssl_context(tls: dict) -> ssl.SSLContext:
    """Client TLS for an HTTPS apiserver: tls = {"ca": CA file, "cert": (certificate, key) or None}."""
    ctx = ssl.create_default_context(cafile=tls["ca"])
    if tls.get("cert"):
        ctx.load_cert_chain(*tls["cert"])
    return ctx


def http_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


async def check(resp: aiohttp.ClientResponse, what: str, ok=None) -> bytes:
    """The body; BenchError unless the status is in `ok` (default: any 2xx)."""
    body = await resp.read()
    if (resp.status >= 300) if ok is None else (resp.status not in ok):
        raise BenchError(f"{what}: HTTP {resp.status}: {body[:500]!r}")
    return body


async def compression_settled(s: aiohttp.ClientSession, base: str, timeout: float = 300.0, quiet: bool = False,
                              strict: bool = True, unread: bool = False) -> dict:
    """Wait until every cache of the apiserver at `base` has compressed its cold entries (cache/compression.py),
    so memory is measured cold; a server without compression is settled at once. `quiet`: also nothing pending
    (after a load, once the window's 75 s have passed). `unread`: also no decoder context left (each is
    dropped DECODER_TTL, 30 s, after a read made it: the state of objects nobody reads). Returns the last
    /debug/residency report; past `timeout` raises BenchError, or with `strict=False` returns it as it is."""
    deadline = time.monotonic() + timeout
    while True:
        rep = await get_json(s, base + "/debug/residency")
        zs = {k: v.get("compression", {"settled": True}) for k, v in rep["resources"].items()}
        busy = [k for k, z in zs.items() if not z["settled"] or (quiet and z.get("pending"))
                or (unread and z.get("decoders"))]
        if not busy:
            return rep
        if time.monotonic() > deadline:
            if not strict:
                return rep
            raise BenchError(f"{base}: compression of {busy} not settled in {timeout:.0f} s")
        await asyncio.sleep(0.25)


async def get_json(s: aiohttp.ClientSession, url: str, params: dict | None = None, what: str = "") -> dict:
    """GET and decode, retrying while a cache (re)initialises (429)."""
    for _ in range(50):
        async with s.get(url, params=params) as r:
            if r.status == 429:
                await r.read()
                await asyncio.sleep(0.2)
                continue
            return orjson.loads(await check(r, what or url, ok=(200,)))
    raise BenchError(f"{what or url}: still 429 after retries")


async def post(s: aiohttp.ClientSession, url: str, obj: dict, ok=(200, 201)) -> bytes:
    async with s.post(url, data=orjson.dumps(obj), headers=JSON_CT) as r:
        return await check(r, f"POST {url}", ok=ok)


async def run_pool(n: int, clients: int, op, label: str = "", steps: int = 10) -> tuple[float, list[float]]:
    """Run op(i) for i in range(n) on `clients` concurrent workers, logging progress `steps` times (0: never);
    returns (elapsed s, per-call latencies ms)."""
    lat: list[float] = []
    it = iter(range(n))
    step = max(1, n // steps) if steps else 0
    prefix = f"{label}: " if label else ""

    async def worker():
        for i in it:
            t0 = time.perf_counter()
            await op(i)
            lat.append((time.perf_counter() - t0) * 1000.0)
            if step and len(lat) % step == 0:
                log(f"  {prefix}{len(lat)}/{n}")

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return time.perf_counter() - t0, lat


async def wait_tasks(tasks: list[asyncio.Task], timeout: float) -> set[asyncio.Task]:
    """Wait up to `timeout` for the tasks; cancel the ones still running, raise the first failure;
    returns the ones still pending (cancelled)."""
    done, pending = await asyncio.wait(tasks, timeout=timeout)
    for t in pending:
        t.cancel()
    for t in done:
        if t.exception():
            raise t.exception()
    return pending


async def wait_cache_ready(base: str, path: str, n: int, timeout: float = 120.0) -> float:
    """Poll an RV=0 list of `path` (served by the cache when on) until it has n items; returns seconds waited."""
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as s:
        while time.perf_counter() - t0 < timeout:
            async with s.get(base + path, params={"resourceVersion": "0"}) as r:
                if r.status == 200:
                    if len(orjson.loads(await r.read()).get("items") or []) >= n:
                        return time.perf_counter() - t0
                else:
                    await r.read()
            await asyncio.sleep(0.2)
    raise BenchError(f"cache at {base} did not show {n} objects in {timeout} s")


# --- what ran, and where the figures go -------------------------------------------------------------------

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        return ""


def versions(etcd: str | None = None, apiserver: str | None = None, packages: tuple[str, ...] = (),
             git: bool = False, **extra) -> dict:
    """Python, aiohttp, orjson, platform and CPU; plus `packages` (installed versions), `extra` as given,
    the git commit, and the `/version` of the etcd and apiserver at the given URLs."""
    out = {"python": platform.python_version(), "aiohttp": aiohttp.__version__, "orjson": orjson.__version__,
           "platform": platform.platform(), "cpu_model": _cpu_model() or platform.processor(),
           "cpu_count": os.cpu_count(),
           "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}
    out.update(extra)
    for name in packages:
        try:
            out[name] = dist_version(name)
        except Exception as e:  # noqa: BLE001
            out[name] = f"unavailable: {e}"
    if git:
        try:
            out["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                               text=True, timeout=5).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out["git_commit"] = ""
    for key, base in (("etcd", etcd), ("apiserver", apiserver)):
        if base:
            try:
                out[key] = http_json(base + "/version")
            except OSError as e:
                out[key] = f"unavailable: {e}"
    return out


def write_json(path: str, doc: dict) -> None:
    # The machine may be shared: the load average says how much other work competed with the run.
    doc.setdefault("loadavg_1_5_15_at_end", list(os.getloadavg()))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
