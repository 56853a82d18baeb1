"""Cache residency benchmark (issue 4): heap per shard against full replication.

Starts a real current etcd (tools/build_etcd.py), loads a workload through a loader apiserver
(`--watch-cache=false`), then starts a full-replica apiserver and K shard apiservers (separate
processes, same etcd, complementary residencies from `machinery.shard_selector.complementary(k)`), all with
`RESIDENCY_TRACEMALLOC=1`; waits until every process has ingested the same revision and measures
each process's heap three ways: tracemalloc, native bytes (sum of the cache's structure bytes in
`/debug/residency`) and RSS, plus the floor of an empty apiserver (cache on, empty `--etcd-prefix`).

    .venv/bin/python -m bench.residency [--quick] [--objects N] [--ks 1,2,4,8] [--profiles node,churn,state]
                                        [--kwok] [--out bench/out/residency.json] [--png bench/out/residency.png]

Profiles: node-bound (Nodes ~3 KB, Leases ~0.4 KB, heartbeats while measuring), churn-bound (custom
resources created/updated/deleted while measuring), state-bound (ConfigMaps, Secrets, Pods,
RoleBindings, a few 100 KB ConfigMaps; shards run with `--residency-full-resources
namespaces,customresourcedefinitions`, so RBAC is sharded too). A correctness check per profile and K:
with writers stopped, the union of the shards' sharded lists equals the full replica's list at the same
resourceVersion, no object in two shards. `--kwok` (or the profile `kwok`): the node-bound profile driven by
kwok v0.8.0 (tools/build_kwok.py) instead of our own writer: --objects / 12 simulated nodes, a Lease each
renewed every ~10 s as kubelets do and 10 pods bound to each that kwok runs, kwok writing through the loader
for the whole profile (bench/nodes.py measures what those heartbeats cost). In-process micro-benchmarks:
dropping a non-resident event, ingest events/s, label-selector list from bitmaps vs a scan.

Progress on stderr, a table per profile on stdout, every figure plus versions to --out (JSON), a PNG
(matplotlib, Agg) to --png. Targets are printed beside the figures, never asserted.

Residency advisor, on data an etcd already holds (e.g. a restored snapshot of a production etcd):

    .venv/bin/python -m bench.residency --read-only --etcd-servers URL [--prefix /registry] [--ks 1,2,4,8]
                                        [--residency-full-resources ...] [--out bench/out/residency_data.json]

loads nothing and writes nothing: the floor, the full replica and the K shards all run `--read-only` against
that etcd and prefix; the compared resources are those the full replica finds objects in; the same table
(plus where each resource's objects live per K) and plot; etcd's revision before and after, and the keys
under the prefix that belong to resources this apiserver does not serve (not measured). No micro-benchmarks.

The workloads (objects and profiles) are in bench/workloads.py, processes and HTTP helpers in
bench/harness.py, the table and the PNG in bench/report.py; this module runs and measures.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import sys
import time
import types
import uuid

import aiohttp
import orjson

from bench.harness import (Apiserver, BenchError, compression_settled, current_etcd, get_json, log, stop_all,
                           versions, wait_all_ready_async, write_json)
from bench.report import MIB, RESIDENCY_MEASURES as MEASURES, residency_plot, residency_table
from bench.workloads import PROFILES, STATE_FULL_RESOURCES, Profile, pod
from cache.residency import DEFAULT_FULL_RESOURCES
from machinery.shard_selector import complementary

# Figures every run has (the smoke test asserts each is a positive number); per profile/K figures are
# named "<profile>_k<K>_<measure>_<stat>" (see profile_figures).
FIGURES = (
    "floor_tracemalloc_bytes", "floor_rss_bytes", "floor_native_bytes",
    "drop_nonresident_median_us", "keep_resident_median_us",
    "ingest_events_per_s_full", "ingest_events_per_s_k2",
    "select_bitmap_median_ms", "select_scan_median_ms", "select_speedup", "select_objects", "select_matches",
)
PROFILE_STATS = ("shard_mean_bytes", "shard_max_bytes", "shard_sum_bytes", "full_bytes", "mean_over_full")


# --- processes -------------------------------------------------------------------

def spawn(role: str, endpoint: str, prefix: str, *extra: str, tracemalloc: bool = True, residency=None) -> Apiserver:
    """Start (not wait for) an apiserver named `role` in messages and reports."""
    return Apiserver(endpoint, *extra, etcd_prefix=prefix, residency=residency, name=role,
                     log_name=f"bench-residency-{role}", env={"RESIDENCY_TRACEMALLOC": "1"} if tracemalloc else None
                     ).start()


async def wait_ready(procs: list[Apiserver], timeout: float = 180.0) -> None:
    await wait_all_ready_async(procs, timeout)


def stop_procs(procs: list[Apiserver]) -> None:
    stop_all(procs, timeout=15, strict=False)


# --- the node-bound profile driven by kwok ---------------------------------------------------------------

class KwokNodeProfile(Profile):
    """The node-bound profile with real simulated nodes (`--kwok`): N Nodes that kwok v0.8.0 manages with
    upstream's stages (Ready through nodes/status patches, a Lease each in kube-node-lease renewed every
    ~10 s as kubelets do) and PODS_PER_NODE pods bound to each (kwok runs them: pods/status). kwok runs
    against the loader from the load until the profile ends; it is the writer while measuring (its writes
    counted from the loader's request metrics). `--objects` is split as N x (Node + Lease + pods)."""
    name = "kwok"
    title = "node-bound (kwok)"
    PODS_PER_NODE = 10
    NS = "bench-kwok"
    resources = (("nodes", "/api/v1/nodes"), ("leases.coordination.k8s.io", "/apis/coordination.k8s.io/v1/leases"),
                 ("pods", "/api/v1/pods"))

    def __init__(self, n: int):
        super().__init__(n)
        self.nodes = max(2, n // (2 + self.PODS_PER_NODE))
        self.pods = self.nodes * self.PODS_PER_NODE
        self.kwok = None

    def _pod(self, i: int) -> dict:
        obj = pod(self.NS, i)
        obj.pop("status", None)   # kwok's pod-ready stage runs it
        obj["spec"]["nodeName"] = f"kwok-{i % self.nodes:06d}"
        return obj

    async def load(self, s, base, clients):
        from bench.harness import run_pool
        from bench.nodes import count_ready, create_nodes
        from bench.workloads import ensure_namespace
        from tests.helpers.kwok import KwokProcess
        await ensure_namespace(s, base, self.NS)
        self.kwok = KwokProcess(base, options={"nodeLeaseParallelism": 32, "nodePlayStageParallelism": 16,
                                               "podPlayStageParallelism": 16}).start()
        await create_nodes(s, base, self.nodes, clients)   # kwok running: renewals spread over the period
        await run_pool(self.pods, clients, lambda i: self.create(s, base, f"/api/v1/namespaces/{self.NS}/pods",
                                                                 self._pod(i), "Pods"), "pods", steps=5)
        deadline = time.monotonic() + 900
        while True:
            if not self.kwok.alive():
                raise BenchError(f"kwok exited: {self.kwok.log()[-2000:]}")
            ready, leases = await count_ready(s, base)
            running = await self._running(s, base)
            if ready >= self.nodes and leases >= self.nodes and running >= self.pods:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"kwok: {ready}/{self.nodes} nodes Ready, {leases} Leases, {running}/{self.pods} "
                                 "pods Running after 900 s")
            await asyncio.sleep(1.0)
        log(f"kwok: {self.nodes} nodes Ready with Leases, {self.pods} pods Running")
        await self._sizes(s, base)

    async def _running(self, s, base) -> int:
        n, params = 0, {"limit": "2000"}
        while True:
            doc = await get_json(s, base + f"/api/v1/namespaces/{self.NS}/pods", params)
            n += sum((it.get("status") or {}).get("phase") == "Running" for it in doc["items"])
            if not doc["metadata"].get("continue"):
                return n
            params = {"limit": "2000", "continue": doc["metadata"]["continue"]}

    async def _sizes(self, s, base) -> None:
        """Counts and sizes as served once kwok has written the statuses (and created the Leases)."""
        self.counts, self.sample_bytes, self.bytes_total = {}, {}, 0
        for kind, path in (("Nodes", "/api/v1/nodes"), ("Leases", "/apis/coordination.k8s.io/v1/leases"),
                           ("Pods", f"/api/v1/namespaces/{self.NS}/pods")):
            n = size = 0
            params = {"limit": "2000"}
            while True:
                doc = await get_json(s, base + path, params)
                for it in doc["items"]:
                    n += 1
                    size += len(orjson.dumps(it))
                if not doc["metadata"].get("continue"):
                    break
                params = {"limit": "2000", "continue": doc["metadata"]["continue"]}
            self.counts[kind] = n
            self.bytes_total += size
            self.sample_bytes[kind] = size // n if n else 0

    async def writer(self, s, base, stop):
        """kwok writes; this counts. When measuring stops kwok is paused (SIGSTOP; resumed by the next
        writer and before it is stopped), so the correctness check sees the quiet cluster it expects; its
        Leases (40 s) outlive the pause."""
        from bench.nodes import WRITE_VERBS, delta_sum, metrics as request_metrics
        self._signal(signal.SIGCONT)
        m0 = await request_metrics(s, base)
        await stop.wait()
        self._signal(signal.SIGSTOP)
        await asyncio.sleep(0.5)   # writes already sent land before the check reads the revision
        m1 = await request_metrics(s, base)
        self.writes += int(sum(delta_sum(m0, m1, "apiserver_request_total", verb=v) for v in WRITE_VERBS))
        self.write_errors += int(sum(delta_sum(m0, m1, "apiserver_request_total", verb=v, code=c)
                                     for v in WRITE_VERBS for c in ("409", "500", "503", "504")))

    def _signal(self, sig: int) -> None:
        if self.kwok is not None and self.kwok.alive():
            os.kill(self.kwok.pid, sig)

    def close(self) -> None:
        if self.kwok is not None:
            self._signal(signal.SIGCONT)
            self.kwok.stop()
            self.kwok = None

    def describe(self) -> str:
        return super().describe() + (f"; kwok v0.8.0 simulating {self.nodes} nodes (Lease renewals every ~10 s, "
                                     f"~{self.nodes / 10.2:.0f}/s) and running {self.pods} pods")


ALL_PROFILES = {**PROFILES, "kwok": KwokNodeProfile}


# --- measuring -------------------------------------------------------------------

def native_bytes(rep: dict) -> tuple[int, int]:
    """(all cache structure bytes, object-state bytes = entries + B-tree + bitmaps + slots)."""
    total = state = 0
    for st in rep["resources"].values():
        s = st["entry_bytes"] + st["btree_bytes"] + st["bitmap_bytes"] + st["slots_bytes"]
        state += s
        total += s + st["history_bytes"] + st["snapshot_bytes_estimate"]
    return total, state


def measurement(rep: dict) -> dict:
    total, state = native_bytes(rep)
    pm = rep["process"]
    if "tracemalloc_bytes" not in pm:
        raise BenchError("/debug/residency has no tracemalloc_bytes (RESIDENCY_TRACEMALLOC=1 not honoured?)")
    return {"native": total, "object_state": state, "tracemalloc": pm["tracemalloc_bytes"], "rss": pm["rss_bytes"],
            "rss_peak": pm.get("rss_peak_bytes", 0),
            "resources": {k: {f: v[f] for f in ("objects", "entry_bytes", "btree_bytes", "bitmap_bytes",
                                                 "slots_bytes", "history_events", "history_bytes",
                                                 "snapshot_bytes_estimate", "rv", "partial", "droppedNonResident")}
                          for k, v in rep["resources"].items()}}


async def current_revision(s, p: Apiserver, path: str) -> int:
    doc = await get_json(s, p.base + path, {"limit": "1"})
    return int(doc["metadata"]["resourceVersion"])


async def sync(s, procs: list[Apiserver], prof: Profile, partial, rev: int, timeout: float = 120.0) -> None:
    """Consistent lists (which make each cache catch up to etcd's revision), then poll /debug/residency
    until every compared resource (and namespaces) is ready with rv >= rev."""
    compared = dict(prof.resources)
    compared.setdefault("namespaces", "/api/v1/namespaces")
    keys = list(compared)
    for p in procs:
        for key, path in compared.items():
            params = {"limit": "1"}
            if p.residency is not None and partial(key):
                params["shardSelector"] = str(p.residency)
            await get_json(s, p.base + path, params, f"{p.name} sync list {key}")
    deadline = time.monotonic() + timeout
    for p in procs:
        while True:
            rep = await get_json(s, p.base + "/debug/residency")
            lag = [k for k in keys if not (rep["resources"].get(k, {}).get("ready")
                                           and rep["resources"][k]["rv"] >= rev)]
            if not lag:
                break
            if time.monotonic() > deadline:
                raise BenchError(f"{p.name}: caches {lag} did not reach rv {rev} in {timeout:.0f} s")
            await asyncio.sleep(0.1)


def _by_name(items: list[dict]) -> dict:
    return {(i["metadata"].get("namespace", ""), i["metadata"]["name"]): i["metadata"]["resourceVersion"]
            for i in items}


async def correctness(s, full: Apiserver, shards: list[Apiserver], prof: Profile, partial) -> dict:
    """Union of the shards' sharded lists == the full replica's list at the same RV, no object twice; a fully
    resident resource (not `partial`): every shard's list == the full replica's."""
    problems: list[str] = []
    per_resource = {}
    for key, path in prof.resources:
        whole = await get_json(s, full.base + path, None, f"full list {key}")
        want = _by_name(whole["items"])
        rv = whole["metadata"]["resourceVersion"]
        if not partial(key):
            sizes = []
            for sh in shards:
                doc = await get_json(s, sh.base + path, None, f"{sh.name} list {key}")
                got = _by_name(doc["items"])
                sizes.append(len(got))
                if doc["metadata"]["resourceVersion"] != rv or got != want:
                    problems.append(f"{key} (fully resident): {sh.name} has {len(got)} at RV "
                                    f"{doc['metadata']['resourceVersion']}, full {len(want)} at {rv}")
            per_resource[key] = {"full_items": len(want), "shard_items": sizes, "rv": rv, "fully_resident": True}
            continue
        seen: dict = {}
        for sh in shards:
            params = {"shardSelector": str(sh.residency)} if partial(key) else None
            doc = await get_json(s, sh.base + path, params, f"{sh.name} sharded list {key}")
            if doc["metadata"]["resourceVersion"] != rv:
                problems.append(f"{key}: {sh.name} list at RV {doc['metadata']['resourceVersion']}, full at {rv}")
            for it in doc["items"]:
                md = it["metadata"]
                k = (md.get("namespace", ""), md["name"])
                if k in seen:
                    problems.append(f"{key}: {k} in {seen[k][0]} and {sh.name}")
                seen[k] = (sh.name, md["resourceVersion"])
                if partial(key) and not sh.residency.matches(md["uid"], md.get("namespace", "")):
                    problems.append(f"{key}: {k} outside {sh.name}'s selector")
        got = {k: v[1] for k, v in seen.items()}
        if got != want:
            missing = set(want) - set(got)
            extra = set(got) - set(want)
            stale = [k for k in set(got) & set(want) if got[k] != want[k]]
            problems.append(f"{key}: union differs (missing {len(missing)}, extra {len(extra)}, "
                            f"different RV {len(stale)})")
        per_resource[key] = {"full_items": len(want), "union_items": len(got), "rv": rv}
    return {"passed": not problems, "problems": problems[:20], "resources": per_resource}


def resident_by_mapping(pid: int) -> dict[str, int]:
    """Resident bytes of a process by kind of mapping (/proc/PID/smaps): glibc's brk heap, anonymous mappings
    (pymalloc's arenas, large mmapped blocks, thread stacks), files (libraries). Where RSS goes beyond the heap."""
    out = {"heap": 0, "anonymous": 0, "files": 0}
    kind = "anonymous"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 6)
                if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
                    path = head[5].strip() if len(head) > 5 else ""
                    kind = "heap" if path == "[heap]" else "files" if path.startswith("/") else "anonymous"
                elif line.startswith("Rss:"):
                    out[kind] += int(line.split()[1]) * 1024
    except OSError:
        return {}
    return out


async def rss_without_tracemalloc(s, full: Apiserver, plain: Apiserver, shards: list[Apiserver]) -> dict:
    """RSS of processes run without tracemalloc (twins of the full replica, the uncompressed one and the shards),
    once their compression has settled. tracemalloc keeps a trace per live allocation, in malloc'd memory
    interleaved with the objects: freed objects then leave holes glibc cannot give back, and RSS grows by more
    than the traces (30,000 realistic Pods, compressed: 222 MiB RSS with tracemalloc, 118 MiB without)."""
    processes: dict[str, dict] = {}   # each twin's /debug/residency "process" (glibc's heap account beside RSS)

    async def rss(p: Apiserver) -> int:
        await compression_settled(s, p.base)
        processes[p.name] = (await get_json(s, p.base + "/debug/residency", {"gc": "1"}))["process"]
        processes[p.name]["resident_by_mapping"] = resident_by_mapping(p.pid)
        return processes[p.name]["rss_bytes"]
    f, u = await rss(full), await rss(plain)
    sh = [await rss(p) for p in shards]
    mean = statistics.mean(sh)
    return {"full_bytes": f, "uncompressed_full_bytes": u, "shard_bytes": sh, "shard_mean_bytes": mean,
            "shard_mean_over_uncompressed_full": mean / u, "shard_mean_over_full": mean / f,
            "full_over_uncompressed_full": f / u, "processes": processes}


async def measure_all(s, procs: list[Apiserver]) -> list[dict]:
    for p in procs:   # every process measured cold (its cold entries compressed), not some mid-way
        await compression_settled(s, p.base)
    out = []
    for p in procs:
        out.append(measurement(await get_json(s, p.base + "/debug/residency", {"gc": "1"})))
    return out


def summarize(full: dict, shards: list[dict], k: int, floor: dict, plain: dict | None = None) -> dict:
    """Per measure: the shards against the full replica (both with the cache's default compression) and, given
    `plain` (a full replica with --cache-compression=false), against an uncompressed full replica too."""
    out = {}
    for m in MEASURES + ("object_state",):
        vals = [x[m] for x in shards]
        mean = statistics.mean(vals)
        d = {"shard_mean_bytes": mean, "shard_max_bytes": max(vals), "shard_min_bytes": min(vals),
             "shard_sum_bytes": sum(vals), "full_bytes": full[m], "mean_over_full": mean / full[m],
             "max_over_full": max(vals) / full[m], "ideal": 1.0 / k,
             "max_dev_from_full_over_k": max(abs(v - full[m] / k) for v in vals) / (full[m] / k)}
        fl = floor.get(m, 0)
        if m in ("tracemalloc", "rss") and full[m] > fl:
            d["above_floor_mean_over_full"] = (mean - fl) / (full[m] - fl)
        if plain is not None:
            d["uncompressed_full_bytes"] = plain[m]
            d["mean_over_uncompressed_full"] = mean / plain[m]
            d["full_over_uncompressed_full"] = full[m] / plain[m]
        out[m] = d
    objs = sum(r["objects"] for x in shards for r in x["resources"].values())
    bm = sum(r["bitmap_bytes"] for x in shards for r in x["resources"].values())
    out["bitmap_bytes_per_object"] = bm / objs if objs else 0.0
    fobjs = sum(r["objects"] for r in full["resources"].values())
    fbm = sum(r["bitmap_bytes"] for r in full["resources"].values())
    out["full_bitmap_bytes_per_object"] = fbm / fobjs if fobjs else 0.0
    return out


def partial_in(full_resources: str | tuple[str, ...]):
    """partial(report key) for shards run with these --residency-full-resources."""
    full_res = set(full_resources.split(",") if isinstance(full_resources, str) else full_resources)

    def partial(key: str) -> bool:
        return key.split(".", 1)[0] not in full_res
    return partial


async def run_ks(s, etcd_ep: str, prefix: str, prof: Profile, ks: list[int], p: argparse.Namespace, floor: dict,
                 full: Apiserver, partial, procs_alive: list[Apiserver], *, writer_base: str | None,
                 flags: tuple[str, ...] = (), plain: Apiserver | None = None,
                 rss_twins: tuple[Apiserver, Apiserver] | None = None) -> list[dict]:
    """For each K: start K shard processes, measure them and the full replica (and `plain`, the uncompressed
    full replica, if any) at one ingested revision (with the profile's writers running through `writer_base`;
    None: no writers), check the union of their lists, stop them. `flags` go to every shard (--read-only).
    `rss_twins` (the full replica and the uncompressed one, run without tracemalloc): the shards get twins
    without tracemalloc too, and their RSS is measured beside (rss_without_tracemalloc)."""
    runs = []
    for k in ks:
        sels = complementary(k)
        extra = (("--residency-full-resources", prof.full_resources) if prof.full_resources else ()) + flags
        shards = [spawn(f"{prof.name}-k{k}-s{i}", etcd_ep, prefix, *extra, residency=sel)
                  for i, sel in enumerate(sels)]
        procs_alive += shards
        twins = [spawn(f"{prof.name}-k{k}-s{i}-rss", etcd_ep, prefix, *extra, residency=sel, tracemalloc=False)
                 for i, sel in enumerate(sels)] if rss_twins else []
        procs_alive += twins
        log(f"K={k}: started {k} shard process(es){' and their twins without tracemalloc' if twins else ''}; "
            f"waiting for ready")
        await wait_ready(shards + twins)
        stop = asyncio.Event()
        writes0 = prof.writes
        wtask = asyncio.create_task(prof.writer(s, writer_base, stop)) if writer_base else None
        tw = time.perf_counter()
        if wtask:
            await asyncio.sleep(p.warmup)
        rev = await current_revision(s, full, prof.resources[0][1])
        others = [plain] if plain is not None else []
        await sync(s, [full] + shards + others + list(rss_twins or ()) + twins, prof, partial, rev)
        meas = await measure_all(s, [full] + shards + others)
        plain_meas = meas.pop() if plain is not None else None
        rss_free = await rss_without_tracemalloc(s, *rss_twins, twins) if rss_twins else None
        stop.set()
        if wtask:
            await wtask
        wrate = (prof.writes - writes0) / (time.perf_counter() - tw)
        log(f"K={k}: measured at rv >= {rev} " + (f"with writers running ({wrate:.0f} writes/s)" if wtask else
                                                   "(no writers)") + "; checking lists")
        rev2 = await current_revision(s, full, prof.resources[0][1])
        await sync(s, [full] + shards, prof, partial, rev2)
        chk = await correctness(s, full, shards, prof, partial)
        summ = summarize(meas[0], meas[1:], k, floor, plain_meas)
        log(f"K={k}: native/shard {summ['native']['mean_over_full']:.3f} of full, tracemalloc "
            f"{summ['tracemalloc']['mean_over_full']:.3f}, RSS {summ['rss']['mean_over_full']:.3f}"
            + (f" (RSS {summ['rss']['mean_over_uncompressed_full']:.3f} of an uncompressed full replica)"
               if plain_meas else "")
            + f"; check {'pass' if chk['passed'] else 'FAIL ' + '; '.join(chk['problems'][:3])}")
        runs.append({"k": k, "selectors": [str(x) for x in sels], "measured_at_rv": rev,
                     "writes_per_s_while_measuring": wrate, "full": meas[0], "shards": meas[1:],
                     **({"uncompressed_full": plain_meas} if plain_meas else {}),
                     **({"rss_without_tracemalloc": rss_free} if rss_free else {}),
                     "summary": summ, "check": chk})
        stop_procs(shards + twins)
        for sh in shards + twins:
            procs_alive.remove(sh)
    return runs


async def run_profile(s, etcd_ep: str, prof: Profile, ks: list[int], p: argparse.Namespace, floor: dict) -> dict:
    prefix = f"/registry-res-{prof.name}-{os.getpid()}"
    log(f"== profile {prof.title}: loading (prefix {prefix})")
    loader = spawn(f"{prof.name}-loader", etcd_ep, prefix, "--watch-cache=false", tracemalloc=False)
    procs_alive = [loader]
    try:
        await wait_ready([loader])
        t0 = time.perf_counter()
        await prof.load(s, loader.base, p.clients)
        load_s = time.perf_counter() - t0
        log(f"loaded in {load_s:.1f} s: {prof.describe()}")
        partial = partial_in(prof.full_resources or DEFAULT_FULL_RESOURCES)
        full = spawn(f"{prof.name}-full", etcd_ep, prefix)
        procs_alive.append(full)
        plain = twins = None
        if p.uncompressed_full or prof.name == "realistic":   # issue 23's target is against this one
            plain = spawn(f"{prof.name}-full-uncompressed", etcd_ep, prefix, "--cache-compression=false")
            twins = (spawn(f"{prof.name}-full-rss", etcd_ep, prefix, tracemalloc=False),
                     spawn(f"{prof.name}-full-uncompressed-rss", etcd_ep, prefix, "--cache-compression=false",
                           tracemalloc=False))
            procs_alive += [plain, *twins]
        await wait_ready([full] + ([plain, *twins] if plain else []))
        runs = await run_ks(s, etcd_ep, prefix, prof, ks, p, floor, full, partial, procs_alive,
                            writer_base=loader.base, plain=plain, rss_twins=twins)
        return {"title": prof.title, "description": prof.describe(), "counts": prof.counts,
                "sample_object_bytes": prof.sample_bytes, "workload_bytes": prof.bytes_total,
                "load_seconds": load_s, "writes": prof.writes, "write_errors": prof.write_errors,
                "shard_full_resources": prof.full_resources or "(default: namespaces, CRDs and RBAC fully resident)",
                "rbac_sharded": prof.full_resources == STATE_FULL_RESOURCES, "runs": runs}
    finally:
        close = getattr(prof, "close", None)   # the kwok profile's kwok process
        if close is not None:
            close()
        stop_procs(procs_alive)


async def measure_floor(s, etcd_ep: str, *flags: str) -> dict:
    fp = spawn("floor", etcd_ep, f"/registry-empty-{os.getpid()}-{uuid.uuid4().hex[:8]}", *flags)
    try:
        await wait_ready([fp])
        await asyncio.sleep(1.0)
        m = measurement(await get_json(s, fp.base + "/debug/residency", {"gc": "1"}))
        m.pop("resources")
        return m
    finally:
        stop_procs([fp])


# --- the residency advisor: --read-only over the data an etcd already holds -------------------------------

RBAC = {"roles", "rolebindings", "clusterroles", "clusterrolebindings"}


class DataProfile(Profile):
    """What an etcd already holds under a prefix (--read-only): nothing is loaded and nothing written; the
    compared resources are those with objects, found by a full replica."""
    name = "data"

    def __init__(self, prefix: str, full_resources: str | None):
        super().__init__(0)
        self.title = f"data under {prefix}"
        self.full_resources = full_resources

    async def writer(self, s, base, stop: asyncio.Event):  # never started: --read-only writes nothing
        raise BenchError("the data profile has no writers")

    def describe(self) -> str:
        kinds = ", ".join(f"{self.counts[k]} {k} (~{self.sample_bytes[k] / 1024:.1f} KB avg)" for k in self.counts)
        return f"{kinds}; {self.bytes_total / 1e6:.1f} MB of objects"


async def wait_caches_ready(s, p: Apiserver, timeout: float = 600.0) -> dict:
    """/debug/residency once every cache of `p` is ready (its initial list ingested)."""
    deadline = time.monotonic() + timeout
    while True:
        rep = await get_json(s, p.base + "/debug/residency")
        lag = [k for k, v in rep["resources"].items() if not v.get("ready")]
        if not lag:
            return rep
        if time.monotonic() > deadline:
            raise BenchError(f"{p.name}: caches {lag} not ready in {timeout:.0f} s")
        await asyncio.sleep(0.2)


async def list_paths(s, p: Apiserver, keys: list[str]) -> dict[str, str]:
    """Cluster-wide list path of each report key (`plural` or `plural.group`), from discovery."""
    groups = await get_json(s, p.base + "/apis")
    preferred = {g["name"]: g["preferredVersion"]["version"] for g in groups["groups"]}
    out = {}
    for key in keys:
        plural, _, group = key.partition(".")
        if not group:
            out[key] = f"/api/v1/{plural}"
        elif group in preferred:
            out[key] = f"/apis/{group}/{preferred[group]}/{plural}"
    return out


async def describe_data(s, full: Apiserver, prof: DataProfile, paths: dict[str, str]) -> None:
    """Objects and bytes (JSON as served, compact) per resource, from paged lists of the full replica."""
    for key, path in paths.items():
        n = size = 0
        params = {"limit": "5000"}
        while True:
            doc = await get_json(s, full.base + path, params, f"count {key}")
            for it in doc["items"]:
                n += 1
                size += len(orjson.dumps(it))
            cont = doc["metadata"].get("continue")
            if not cont:
                break
            params = {"limit": "5000", "continue": cont}
        prof.counts[key] = n
        prof.bytes_total += size
        prof.sample_bytes[key] = size / n if n else 0.0


async def etcd_keys(endpoints: list[str], prefix: str, served: list[str]) -> dict:
    """Keys under `prefix` in etcd (keys-only paged ranges: reads, nothing written) and those under no
    served resource's key prefix, counted by their first one or two path segments."""
    from storage.etcd import EtcdClient, prefix_end
    c = EtcdClient(endpoints)
    base = prefix.rstrip("/") + "/"
    total = 0
    unserved: dict[str, int] = {}
    try:
        start, end = base.encode(), prefix_end(base.encode())
        rev = 0
        while True:
            kvs, hdr_rev, more, _ = await c.range(start, end, revision=rev, limit=10_000, keys_only=True,
                                                  resource="advisor")
            rev = rev or hdr_rev
            for kv in kvs:
                key = kv.key.decode(errors="replace")
                total += 1
                if not any(key.startswith(sp) for sp in served):
                    parts = key[len(base):].split("/")
                    what = "/".join(parts[:2]) if "." in parts[0] and len(parts) > 2 else parts[0]
                    unserved[what] = unserved.get(what, 0) + 1
            if not more or not kvs:
                break
            start = kvs[-1].key + b"\x00"
    finally:
        await c.close()
    return {"total": total, "unserved": dict(sorted(unserved.items(), key=lambda x: -x[1])),
            "unserved_total": sum(unserved.values())}


async def etcd_revision(endpoints: list[str]) -> int:
    from storage.etcd import EtcdClient
    c = EtcdClient(endpoints)
    try:
        return await c.current_revision(b"/", "advisor")
    finally:
        await c.close()


async def run_read_only(p: argparse.Namespace) -> dict:
    """Floor, a full replica and K shards, every one `--read-only`, over the data already under
    `p.prefix`: the same figures as a profile of the normal run, for the resources that have objects."""
    endpoints = p.etcd_servers.split(",")
    ep = p.etcd_servers
    rev0 = await etcd_revision(endpoints)
    log(f"read-only over {ep} prefix {p.prefix} (etcd revision {rev0}); nothing is loaded or written")
    ro = ("--read-only",)
    conn = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=1800)) as s:
        log("measuring the empty-process floor")
        floor = await measure_floor(s, ep, *ro)
        log(f"floor: tracemalloc {floor['tracemalloc'] / MIB:.1f} MiB, RSS {floor['rss'] / MIB:.1f} MiB")
        prof = DataProfile(p.prefix, p.residency_full_resources)
        partial = partial_in(p.residency_full_resources or DEFAULT_FULL_RESOURCES)
        full = spawn("data-full", ep, p.prefix, *ro)
        procs_alive = [full]
        try:
            await wait_ready([full])
            rep = await wait_caches_ready(s, full)
            present = [k for k, v in rep["resources"].items() if v["objects"] > 0]
            if not present:
                raise BenchError(f"no objects under {p.prefix} in any resource this apiserver serves")
            paths = await list_paths(s, full, present)
            prof.resources = tuple(paths.items())
            await describe_data(s, full, prof, paths)
            log(f"data: {prof.describe()}")
            served = []
            from machinery.resources import Registry
            builtin = {r.qualified: r for r in Registry().all()}
            for key in rep["resources"]:
                plural, _, group = key.partition(".")
                r = builtin.get(key)
                served.append(r.prefix(p.prefix) if r else f"{p.prefix.rstrip('/')}/{group}/{plural}/")
            keys = await etcd_keys(endpoints, p.prefix, served)
            if keys["unserved_total"]:
                top = ", ".join(f"{n} {w}" for w, n in list(keys["unserved"].items())[:8])
                log(f"not measured: {keys['unserved_total']} of {keys['total']} keys under {p.prefix} belong to "
                    f"resources this apiserver does not serve ({top})")
            runs = await run_ks(s, ep, p.prefix, prof, p.ks, p, floor, full, partial, procs_alive,
                                writer_base=None, flags=ro)
        finally:
            stop_procs(procs_alive)
    rev1 = await etcd_revision(endpoints)
    if rev1 != rev0:
        log(f"WARNING: etcd's revision moved {rev0} -> {rev1} during the run: someone else wrote (this run "
            f"starts every apiserver with --read-only)")
    profile = {"title": prof.title, "description": prof.describe(), "counts": prof.counts,
               "sample_object_bytes": prof.sample_bytes, "workload_bytes": prof.bytes_total,
               "load_seconds": 0.0, "writes": 0, "write_errors": 0,
               "shard_full_resources": prof.full_resources or "(default: namespaces, CRDs and RBAC fully resident)",
               "rbac_sharded": bool(prof.full_resources) and not RBAC & set(prof.full_resources.split(",")),
               "runs": runs}
    source = {"etcd_servers": ep, "prefix": p.prefix, "revision_before": rev0, "revision_after": rev1,
              "etcd_keys": keys["total"], "unserved_keys": keys["unserved"],
              "unserved_keys_total": keys["unserved_total"]}
    return {"floor": floor, "profiles": {"data": profile}, "source": source}


# --- in-process micro-benchmarks --------------------------------------------------

def _stored_pod(i: int, uid: str) -> tuple[str, bytes, dict]:
    from storage.store import encode_value, stamp_rv
    obj = pod("micro", i)
    obj["metadata"]["uid"] = uid
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    obj = stamp_rv(obj, 1)   # the apiserver's ObjectMeta key order
    key = f"/registry/pods/micro/{obj['metadata']['name']}"
    return key, encode_value(obj), obj


def micro_drop(batches: int, per_batch: int) -> dict:
    """Residency.ingest_filter on a Pod's stored bytes: median per call, non-resident and resident."""
    from cache.residency import Residency, uid_of
    sel = complementary(2)[0]
    keep = Residency(sel).ingest_filter("pods", "/registry/pods/", True)
    rnd = random.Random(3)
    out = {}
    for label, want in (("drop_nonresident_median_us", False), ("keep_resident_median_us", True)):
        while True:
            uid = str(uuid.UUID(int=rnd.getrandbits(128), version=4))
            if sel.matches(uid, "micro") == want:
                break
        key, value, _ = _stored_pod(1, uid)
        assert uid_of(value) == uid, "stored layout not the one uid_of reads"
        assert keep(key, value) is want
        per = []
        for _ in range(batches):
            t0 = time.perf_counter()
            for _ in range(per_batch):
                keep(key, value)
            per.append((time.perf_counter() - t0) / per_batch * 1e6)
        out[label] = statistics.median(per)
        out["pod_stored_bytes"] = len(value)
    return out


def micro_ingest(n: int) -> dict:
    """The Cacher's own ingest (`Cacher._apply`: residency filter, decode, stamp RV, encode, apply to the
    WatchCache) on n etcd watch events: n/2 creates, then n/2 updates of the same Pods. A real Cacher
    configured as apiserver.app configures one, never started (no etcd, no watchers to dispatch to)."""
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    from cache.cacher import Cacher
    from cache.residency import Residency
    from storage.etcd import KV, WatchEvent
    res = Registry().lookup("", "v1", "pods")
    prefix = "/registry/pods/"
    rnd = random.Random(5)
    half = n // 2
    values = [_stored_pod(i, str(uuid.UUID(int=rnd.getrandbits(128), version=4)))[:2] for i in range(half)]
    out = {}
    for label, sel in (("ingest_events_per_s_full", None), ("ingest_events_per_s_k2", complementary(2)[0])):
        c = Cacher(store=None, client=types.SimpleNamespace(version="3.5.35"), prefix=prefix, resource_label=res.plural, group=res.group,
                   encode=lambda obj, _r=res: encode_obj(_r, obj), head=wire_head(res),
                   residency=Residency(sel).ingest_filter("pods", prefix, True) if sel else None,
                   clock=time.monotonic)
        c.wc.replace([], 1)
        events = []
        for i, (key, value) in enumerate(values):
            events.append(WatchEvent("PUT", KV(key.encode(), value, 2 + i, 2 + i), None))
        for i, (key, value) in enumerate(values):
            rv = 2 + half + i
            events.append(WatchEvent("PUT", KV(key.encode(), value, rv, 2 + i), KV(key.encode(), value, 2 + i, 2 + i)))
        t0 = time.perf_counter()
        applied = sum(1 for ev in events if c._apply(ev) is not None)
        el = time.perf_counter() - t0
        out[label] = n / el
        out[label.replace("events_per_s", "applied")] = applied
    out["ingest_events"] = n
    return out


def micro_select(n: int, runs: int) -> dict:
    """A label-selector list over n resident objects: bitmaps (WatchCache.indexes.select, then entries in
    key order as cache/reads.py does) against a scan of the same cache (orjson decode + match)."""
    from machinery.selectors import parse_label_selector
    from cache.watch_cache import WatchCache
    wc = WatchCache("/registry/configmaps/", time.monotonic)
    objs = []
    for i in range(n):
        ns = f"ns-{i % 20}"
        labels = {"app": f"app-{i % 100}", "tier": ("web", "db", "cache")[i % 3]}
        obj = {"kind": "ConfigMap", "apiVersion": "v1",
               "metadata": {"name": f"cm-{i:06d}", "namespace": ns, "uid": str(uuid.UUID(int=i)),
                            "resourceVersion": str(i + 1), "labels": labels},
               "data": {"k": "v" * 200}}
        objs.append((f"/registry/configmaps/{ns}/cm-{i:06d}", i + 1, orjson.dumps(obj), str(uuid.UUID(int=i)),
                     ns, labels))
    wc.replace(objs, n + 1)
    del objs
    sel = parse_label_selector("app=app-7,tier=web")
    reqs = sel.requirements

    def by_bitmap():
        slots, _exact = wc.indexes.select(reqs, None)
        return [e.data for e in sorted((wc.slots[s] for s in slots), key=lambda e: e.key)]

    def by_scan():
        out = []
        for _, e in wc.store.iter_from("/registry/configmaps/"):
            if sel.matches((orjson.loads(e.data).get("metadata") or {}).get("labels")):
                out.append(e.data)
        return out

    a, b = by_bitmap(), by_scan()
    if a != b:
        raise BenchError(f"bitmap select ({len(a)}) and scan ({len(b)}) disagree")
    tb, ts = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        by_bitmap()
        tb.append(time.perf_counter() - t0)
    for _ in range(max(3, runs // 5)):
        t0 = time.perf_counter()
        by_scan()
        ts.append(time.perf_counter() - t0)
    mb, ms = statistics.median(tb), statistics.median(ts)
    return {"select_objects": n, "select_matches": len(a), "select_bitmap_median_ms": mb * 1e3,
            "select_scan_median_ms": ms * 1e3, "select_speedup": ms / mb, "select_selector": str(sel)}


# --- targets (reported beside the figures) ---------------------------------------

def targets(doc: dict, p: argparse.Namespace) -> list[dict]:
    out = []
    fl = doc["floor"]
    for name, pr in doc["profiles"].items():
        for run in pr["runs"]:
            k, sm = run["k"], run["summary"]
            dev = sm["object_state"]["max_dev_from_full_over_k"]
            out.append({"target": "object-cache bytes per shard within 5 % of full/K", "profile": name, "k": k,
                        "value": f"max deviation {dev * 100:.1f} %", "met": dev <= 0.05})
            limit = (sm["rss"]["full_bytes"] / k + fl["rss"]) * 1.10
            worst = sm["rss"]["shard_max_bytes"]
            out.append({"target": "per-shard RSS <= (full/K + empty floor) + 10 %", "profile": name, "k": k,
                        "value": f"max {worst / MIB:.0f} MiB vs limit {limit / MIB:.0f} MiB", "met": worst <= limit})
            bpo = sm["bitmap_bytes_per_object"]
            out.append({"target": "membership+index overhead <= 4 B per resident object", "profile": name, "k": k,
                        "value": f"{bpo:.1f} B/object (bitmap_bytes / objects, all shards)", "met": bpo <= 4.0})
    st = doc["profiles"].get("state")
    if st:
        r2 = [r for r in st["runs"] if r["k"] == 2]
        if r2:
            big = st["workload_bytes"] >= 500e6
            ratio = r2[0]["summary"]["rss"]["mean_over_full"]
            out.append({"target": "K=2 state-bound (>= 500 MB of objects): per-shard RSS < 0.55 of full",
                        "profile": "state", "k": 2,
                        "value": f"{ratio:.3f} (tracemalloc {r2[0]['summary']['tracemalloc']['mean_over_full']:.3f}) "
                                 f"on {st['workload_bytes'] / 1e6:.0f} MB"
                                 + ("" if big else " - workload below 500 MB, target not applicable at this size"),
                        "met": (ratio < 0.55) if big else None})
    for name, pr in doc["profiles"].items():
        for run in pr["runs"]:
            rss = run.get("rss_without_tracemalloc")
            if run["k"] != 2 or rss is None:
                continue
            big = pr["workload_bytes"] >= 500e6
            r = rss["shard_mean_over_uncompressed_full"]
            out.append({"target": "K=2 with compression (>= 500 MB of realistic objects): per-shard RSS <= 0.25 of "
                                  "an uncompressed full replica (issue 23; processes without tracemalloc)",
                        "profile": name, "k": 2,
                        "value": f"{r:.3f} ({rss['shard_mean_bytes'] / MIB:.0f} MiB per shard, uncompressed full "
                                 f"{rss['uncompressed_full_bytes'] / MIB:.0f} MiB, compressed full "
                                 f"{rss['full_bytes'] / MIB:.0f} MiB) on {pr['workload_bytes'] / 1e6:.0f} MB"
                                 + ("" if big else " - below 500 MB, target not applicable at this size"),
                        "met": (r <= 0.25) if big else None})
    mi = doc["micro"]
    if not mi:   # --read-only runs no micro-benchmarks
        return out
    out.append({"target": "drop a non-resident event <= 10 us", "value": f"{mi['drop_nonresident_median_us']:.2f} us",
                "met": mi["drop_nonresident_median_us"] <= 10})
    out.append({"target": "ingest >= 10,000 events/s per process",
                "value": f"{mi['ingest_events_per_s_full']:,.0f} events/s all resident "
                         f"({mi['ingest_events_per_s_k2']:,.0f} with K=2 residency)",
                "met": mi["ingest_events_per_s_full"] >= 10_000})
    out.append({"target": f"label-selector list over {mi['select_objects']:,} objects from bitmaps >= 10x a scan",
                "value": f"{mi['select_speedup']:.0f}x ({mi['select_bitmap_median_ms']:.2f} ms vs "
                         f"{mi['select_scan_median_ms']:.0f} ms)", "met": mi["select_speedup"] >= 10})
    return out


def flat_figures(doc: dict) -> dict:
    f = {"floor_tracemalloc_bytes": doc["floor"]["tracemalloc"], "floor_rss_bytes": doc["floor"]["rss"],
         "floor_native_bytes": doc["floor"]["native"]}
    f.update({k: v for k, v in doc["micro"].items() if isinstance(v, (int, float))})
    for name, pr in doc["profiles"].items():
        f[f"{name}_workload_bytes"] = pr["workload_bytes"]
        for run in pr["runs"]:
            for m in MEASURES:
                for st in PROFILE_STATS:
                    f[f"{name}_k{run['k']}_{m}_{st}"] = run["summary"][m][st]
    return f


def profile_figures(profiles: list[str], ks: list[int]) -> list[str]:
    return [f"{n}_k{k}_{m}_{st}" for n in profiles for k in ks for m in MEASURES for st in PROFILE_STATS] + \
        [f"{n}_workload_bytes" for n in profiles]


# --- main ------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.residency", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run for CI (< 1 min)")
    ap.add_argument("--objects", type=int, help="objects per profile (default 8000; --quick 300)")
    ap.add_argument("--ks", help="shard counts (default 1,2,4,8; --quick 1,2)")
    ap.add_argument("--profiles", help="comma-separated: node, churn, state, realistic, kwok (default node,churn,state)")
    ap.add_argument("--kwok", action="store_true",
                    help="the node-bound profile driven by kwok's simulated nodes and pods (the 'kwok' profile "
                         "instead of 'node')")
    ap.add_argument("--read-only", action="store_true",
                    help="residency advisor: measure the data already under --prefix of --etcd-servers (every "
                         "apiserver started with --read-only; nothing loaded, nothing written)")
    ap.add_argument("--etcd-servers", help="with --read-only: the etcd holding the data (comma-separated URLs)")
    ap.add_argument("--prefix", default="/registry", help="with --read-only: its key prefix (default /registry)")
    ap.add_argument("--residency-full-resources",
                    help="with --read-only: resources the shards keep fully resident (default: the apiserver's, "
                         "namespaces, CRDs and RBAC)")
    ap.add_argument("--out", help="JSON (default bench/out/residency.json; --read-only bench/out/residency_data.json)")
    ap.add_argument("--png", help="plot (default bench/out/residency.png; --read-only bench/out/residency_data.png)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent HTTP clients while loading")
    ap.add_argument("--uncompressed-full", action="store_true",
                    help="also run a full replica with --cache-compression=false and report every figure against "
                         "it (always on for the realistic profile)")
    ap.add_argument("--warmup", type=float, help="seconds writers run before measuring (default 5; --quick 1)")
    ap.add_argument("--select-objects", type=int, help="objects in the bitmap-vs-scan micro-benchmark "
                                                       "(default 100000; --quick 20000)")
    p = ap.parse_args(argv)
    q = p.quick
    if p.read_only:
        if not p.etcd_servers:
            ap.error("--read-only needs --etcd-servers (the etcd whose data is measured)")
        for flag, v in (("--objects", p.objects), ("--profiles", p.profiles), ("--quick", p.quick or None),
                        ("--kwok", p.kwok or None)):
            if v is not None:
                ap.error(f"{flag} makes no sense with --read-only (the data is what the etcd holds)")
        if not p.prefix.startswith("/"):
            ap.error(f"--prefix must start with '/', got {p.prefix!r}")
        p.profiles = []
    else:
        for flag in ("etcd_servers", "residency_full_resources"):
            if getattr(p, flag):
                ap.error(f"--{flag.replace('_', '-')} needs --read-only (the normal run starts its own etcd)")
        p.profiles = [x.strip() for x in (p.profiles or "node,churn,state").split(",") if x.strip()]
        if p.kwok:
            p.profiles = list(dict.fromkeys("kwok" if x == "node" else x for x in p.profiles))
    name = "residency_data" if p.read_only else "residency"
    p.out = p.out or f"bench/out/{name}.json"
    p.png = p.png or f"bench/out/{name}.png"
    p.objects = p.objects or (300 if q else 8000)
    p.ks = [int(x) for x in (p.ks or ("1,2" if q else "1,2,4,8")).split(",")]
    for x in p.profiles:
        if x not in ALL_PROFILES:
            ap.error(f"--profiles: unknown profile {x!r} (node, churn, state, realistic, kwok)")
    p.warmup = p.warmup if p.warmup is not None else (1.0 if q else 5.0)
    p.select_objects = p.select_objects or (20_000 if q else 100_000)
    return p


async def run(p: argparse.Namespace, etcd_ep: str) -> dict:
    conn = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
        log("measuring the empty-process floor")
        floor = await measure_floor(s, etcd_ep)
        log(f"floor: tracemalloc {floor['tracemalloc'] / MIB:.1f} MiB, RSS {floor['rss'] / MIB:.1f} MiB")
        profiles = {}
        for name in p.profiles:
            profiles[name] = await run_profile(s, etcd_ep, ALL_PROFILES[name](p.objects), p.ks, p, floor)
    return {"floor": floor, "profiles": profiles}


def main_read_only(p: argparse.Namespace, t_start: float) -> int:
    vers = versions(p.etcd_servers.split(",")[0], packages=("pyroaring", "matplotlib"), git=True)
    try:
        res = asyncio.run(run_read_only(p))
    except BenchError as e:
        log(f"error: {e}")
        return 2
    doc = {"benchmark": "residency", "mode": "read-only", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "params": {k: v for k, v in vars(p).items() if k not in ("out", "png")},
           "measured": "the full replica and K shard apiservers, every one started with --read-only against the "
                       "given etcd and prefix (nothing loaded, nothing written), as separate processes on this "
                       "machine; heap read from each process's /debug/residency?gc=1 at the same ingested "
                       "revision; no writers",
           "versions": vers, "micro": {}, **res}
    return finish(doc, p, t_start)


def finish(doc: dict, p: argparse.Namespace, t_start: float) -> int:
    """Targets, checks and flat figures into `doc`; JSON, PNG and table out; exit status from the checks."""
    doc["targets"] = targets(doc, p)
    doc["checks_passed"] = all(r["check"]["passed"] for pr in doc["profiles"].values() for r in pr["runs"])
    doc["figures"] = flat_figures(doc)
    doc["elapsed_s"] = time.perf_counter() - t_start
    write_json(p.out, doc)
    residency_plot(doc, p.png)
    print(residency_table(doc))
    log(f"wrote {p.out} and {p.png} in {doc['elapsed_s']:.1f} s")
    return 0 if doc["checks_passed"] else 1


def main(argv=None) -> int:
    p = parse_args(argv)
    t_start = time.perf_counter()
    if p.read_only:
        return main_read_only(p, t_start)
    log("ensuring a current etcd (tools/build_etcd.py)")
    etcd = current_etcd()
    q = p.quick
    log("in-process micro-benchmarks")
    micro = {}
    micro.update(micro_drop(50 if q else 200, 1000))
    micro.update(micro_ingest(4000 if q else 20000))
    micro.update(micro_select(p.select_objects, 10 if q else 20))
    log(f"micro: drop {micro['drop_nonresident_median_us']:.2f} us, ingest {micro['ingest_events_per_s_full']:,.0f}/s, "
        f"select speedup {micro['select_speedup']:.0f}x")
    with etcd:
        log(f"etcd at {etcd.endpoint} ({etcd.binary})")
        vers = versions(etcd.endpoint, packages=("pyroaring", "matplotlib"), git=True, etcd_binary=etcd.binary)
        res = asyncio.run(run(p, etcd.endpoint))
    doc = {"benchmark": "residency", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "params": {k: v for k, v in vars(p).items() if k not in ("out", "png")},
           "measured": "etcd, a loader apiserver (--watch-cache=false, drives the writers), the full replica and "
                       "K shard apiservers run as separate processes on one machine; heap read from each "
                       "process's /debug/residency?gc=1 (tracemalloc with RESIDENCY_TRACEMALLOC=1, RSS from "
                       "/proc, native = the cache's structure bytes) at the same ingested revision, with the "
                       "profile's writers running; micro-benchmarks in the benchmark process",
           "versions": vers, "micro": micro, **res}
    return finish(doc, p, t_start)


if __name__ == "__main__":
    sys.exit(main())
