"""Heap per cached object, three ways, for four realistic object shapes (issue 3).

In-process, no server: a real `cache.cacher.Cacher`, configured as `apiserver.app` configures it (encode,
wire head) but never started, ingests N objects with its own `_ingest_object` (decode, stamp the RV, encode,
stored form) and fills its `WatchCache` with `replace`, as `_list_and_replace` does. The etcd values
(bytes as `storage.store.encode_value` writes them) exist before the measurement starts, so only what the
cache retains is counted. Per object kind:

* tracemalloc: traced bytes retained after ingest minus before, / N (Python allocations only; CRoaring
  bitmaps are invisible to it);
* native: `__sizeof__` of the cache's structures from `WatchCache.stats()` (entries with their bytes and key
  strings, B-tree nodes, bitmaps, slot list), / N;
* RSS: `VmRSS` after minus before, / N, in a fresh child process without tracemalloc, glibc `malloc_trim(0)`
  before both readings (includes allocator slack and fragmentation);
* exact copy: the same ingest with each encoded value copied to an exact-size `bytes` before caching
  (orjson's result keeps an allocation larger than its length: >= 4 KB per object, see the README);
* baseline: the same objects kept as decoded dicts (what an upstream-style decoded object costs in Python),
  tracemalloc and RSS.

Target: bytes/object <= 1.2 x JSON size + 100 B (JSON size = the stamped wire bytes the cache keeps).
Anchors (ANCHORS.md): Go apiserver keeps decoded objects at 5.2-7x JSON size; a Python dict costs 4-6.6x.

    .venv/bin/python -m bench.heap_per_object            # N = 20k pods, 50k ConfigMaps, 50k RoleBindings, 1k AI pods
    .venv/bin/python -m bench.heap_per_object --quick    # N / 25 (< 30 s)
    .venv/bin/python -m bench.heap_per_object --realistic   # compression (issue 23), on bench/corpus.py's objects

`--realistic` measures compressed residency instead: the objects of `bench/corpus.py` (what a cluster holds:
server-set fields, managedFields, real config files, random secrets), each kind ingested plain ("hot": as every
entry is while the event window refers to it) and then compressed as the cache does once the window has moved
past them ("cold": `cache.compression.Compressor`, its dictionary trained from the ingested objects). Object
cache bytes = tracemalloc's retained bytes + the bitmaps' native bytes + the codecs' native bytes (dictionary
and decoder context, as libzstd reports them), per object; RSS and peak RSS (VmHWM) of the child beside them.
Also the decode time per entry and a full list's cost (every entry's bytes joined), plain against compressed.
"""
from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor

import orjson

from bench.harness import ROOT, log, proc_status_kib, versions, write_json
from bench.report import render
from bench.workloads import deployment_pod, settings_configmap, training_pod, user_rolebinding
from cache.watch_cache import WatchCache
from storage.store import encode_value, stamp_rv

KINDS = ("pod", "configmap", "rolebinding", "ai_pod")
DEFAULT_N = {"pod": 20_000, "configmap": 50_000, "rolebinding": 50_000, "ai_pod": 1_000}
RESOURCE = {"pod": "pods", "configmap": "configmaps", "rolebinding": "rolebindings", "ai_pod": "pods",
            "secret": "secrets"}
REALISTIC_KINDS = ("configmap", "pod", "ai_pod", "rolebinding", "secret")
REALISTIC_N = {"configmap": 20_000, "pod": 10_000, "ai_pod": 500, "rolebinding": 30_000, "secret": 10_000}
# Targets (issue 23): object cache bytes per object / JSON bytes, cold; secrets have none (their entropy).
REALISTIC_TARGET = {"configmap": 0.3, "pod": 0.3, "ai_pod": 0.3, "rolebinding": 0.5}


# The object shapes (bench/workloads.py): a Deployment-owned web Pod (~3.4 KB of JSON), an application
# ConfigMap (~1 KB), a RoleBinding of one user (~0.4 KB), a distributed-training Pod (~100 KB).
MAKERS = {"pod": deployment_pod, "configmap": settings_configmap, "rolebinding": user_rolebinding,
          "ai_pod": training_pod}


def etcd_values(kind: str, n: int, realistic: bool = False) -> list[tuple[str, bytes]]:
    """(key, value) as the storage layer writes them to etcd."""
    if realistic:
        from bench import corpus
        make = corpus.MAKERS[kind]
    else:
        make = MAKERS[kind]
    out = []
    for i in range(n):
        o = make(i)
        md = o["metadata"]
        out.append((f"/registry/{RESOURCE[kind]}/{md['namespace']}/{md['name']}", encode_value(o)))
    return out


# --- ingest like Cacher._ingest_object ---------------------------------------------------------------------

class _NoClient:
    """Stands in for the etcd client: ingest never talks to etcd."""
    version = "3.5.35"


def make_cacher(kind: str, compression=None):
    """A real `Cacher` configured as `apiserver.app` configures it (encode, wire head); never started."""
    from machinery.encoding import encode_obj, wire_head
    from machinery.resources import Registry
    from cache.cacher import Cacher
    group = "rbac.authorization.k8s.io" if kind == "rolebinding" else ""
    res = Registry().lookup(group, "v1", RESOURCE[kind])
    prefix = f"/registry/{RESOURCE[kind]}/"
    return Cacher(store=None, client=_NoClient(), prefix=prefix, resource_label=res.plural, group=res.group,
                  encode=lambda obj, _r=res: encode_obj(_r, obj), head=wire_head(res), clock=lambda: 0.0,
                  compression=compression)


def ingest(kind: str, values: list[tuple[str, bytes]], rv0: int = 100, exact: bool = False,
           compress: bool = False) -> WatchCache:
    """What `Cacher._list_and_replace` does with the listed kvs: `Cacher.install_list`. `exact`:
    additionally copy each stored value into an exact-size bytes (memoryview.tobytes) before caching.
    `compress`: then compress every entry as the cache's compressor does once they are cold."""
    from cache.compression import CompressionConfig
    from storage.etcd import KV
    c = make_cacher(kind, CompressionConfig(batch=1 << 30) if compress else None)
    if exact:
        stored_form = c._stored_form
        c._stored_form = lambda full: memoryview(stored_form(full)).tobytes()
    listed = [KV(key.encode(), value, rv0 + j, rv0 + j) for j, (key, value) in enumerate(values)]
    c.install_list(listed, rv0 + len(values))
    if compress:
        import asyncio
        c.wc.compressor.active = None   # the Cacher is never started (ready) here: the state is complete

        async def passes():
            while await c.wc.compressor.step():
                pass
        asyncio.run(passes())
    return c.wc


def decode_dicts(values: list[tuple[str, bytes]]) -> dict:
    """Baseline: decoded dicts keyed by storage key (an informer-style store in Python)."""
    return {key: stamp_rv(orjson.loads(value), 100 + j) for j, (key, value) in enumerate(values)}


def malloc_trim() -> None:
    """Return free heap pages to the OS (glibc), so RSS deltas are not hidden by reused freed memory."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def child(kind: str, n: int, method: str, store: str, realistic: bool = False) -> dict:
    """One measurement in this (fresh) process: method tracemalloc|rss, store cache|cache_z|dict."""
    values = etcd_values(kind, n, realistic)
    compress = store == "cache_z"
    if store != "dict":  # imports and first-use caches (registry, orjson keys) before the baseline
        ingest(kind, values[:300], compress=compress)
    else:
        decode_dicts(values[:10])
    gc.collect()
    malloc_trim()
    if method == "tracemalloc":
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
    else:
        before = proc_status_kib()["VmRSS"] * 1024
    t0 = time.perf_counter()
    kept = decode_dicts(values) if store == "dict" else ingest(kind, values, exact=store == "cache_exact",
                                                               compress=compress)
    ingest_s = time.perf_counter() - t0
    gc.collect()
    malloc_trim()  # as the server does after a (re)list (release_free_memory)
    if method == "tracemalloc":
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    else:
        after = proc_status_kib()["VmRSS"] * 1024
    out = {"kind": kind, "n": n, "method": method, "store": store, "bytes_per_object": (after - before) / n,
           "ingest_us_per_object": ingest_s / n * 1e6}
    if method == "rss":
        out["rss_bytes"] = after
        out["peak_rss_bytes"] = proc_status_kib()["VmHWM"] * 1024
    if store != "dict":
        wc = kept
        # JSON size = the wire bytes a GET returns (stored form plus the kind/apiVersion head, if stripped)
        c = make_cacher(kind)
        out["json_bytes"] = sum(len(c.encode(stamp_rv(orjson.loads(v), 100 + j))) for j, (_, v) in enumerate(values)) / n
        out["stored_bytes"] = sum(len(e.data) for e in wc.slots if e is not None) / n
        out["etcd_value_bytes"] = sum(len(v) for _, v in values) / n
        if realistic:
            out.update(_realistic_figures(wc, n))
        if method == "tracemalloc" and store == "cache":
            st = wc.stats()
            native = st["entry_bytes"] + st["btree_bytes"] + st["bitmap_bytes"] + st["slots_bytes"]
            out["native_bytes_per_object"] = native / n
            out["native_breakdown_per_object"] = {k: st[k] / n for k in ("entry_bytes", "btree_bytes",
                                                                        "bitmap_bytes", "slots_bytes")}
    return out


def _realistic_figures(wc: WatchCache, n: int) -> dict:
    """Native bytes the tracemalloc figure misses (bitmaps, codecs), decode time, a full list's cost."""
    st = wc.stats()
    z = st.get("compression") or {}
    entries = [e for e in wc.slots if e is not None]
    t0 = time.perf_counter()
    for e in entries:
        e.data
    decode = (time.perf_counter() - t0) / n
    lists = []
    for _ in range(5):
        t0 = time.perf_counter()
        b",".join([e.data for e in entries])
        lists.append(time.perf_counter() - t0)
    lists.sort()
    # CRoaring's allocations only: the dicts and BitMap objects around them are on tracemalloc's side
    return {"bitmap_bytes": st["bitmap_native_bytes"], "codec_native_bytes": z.get("codec_native_bytes", 0),
            "dictionary_bytes": z.get("dictionary_bytes", 0), "dictionaries": z.get("dictionaries", 0),
            "entries_compressed": z.get("entries_compressed", 0), "frame_bytes": z.get("compressed_bytes", 0) / n,
            "entry_bytes": st["entry_bytes"] / n, "btree_bytes": st["btree_bytes"] / n,
            "read_us_per_object": decode * 1e6, "full_list_ms": lists[len(lists) // 2] * 1e3}


def run_child(kind: str, n: int, method: str, store: str, realistic: bool = False) -> dict:
    r = subprocess.run([sys.executable, "-m", "bench.heap_per_object", "--child", kind, str(n), method, store,
                        *(["realistic"] if realistic else [])], cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"child {kind} {method} {store} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def run_children(kinds: list[str], ns: dict[str, int], stores: tuple[str, ...], realistic: bool = False) -> dict:
    """{(kind, n, method, store): figures}, a child per job. Children are independent processes: run two at a
    time (each measures only itself)."""
    jobs = [(kind, ns[kind], method, store) for kind in kinds for method in ("tracemalloc", "rss")
            for store in stores]
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(jobs, pool.map(lambda j: run_child(*j, realistic=realistic), jobs)))


def measure(kinds: list[str], ns: dict[str, int]) -> dict:
    done = run_children(kinds, ns, ("cache", "cache_exact", "dict"))
    res = {}
    for kind in kinds:
        n = ns[kind]
        row: dict = {"n": n}
        for method in ("tracemalloc", "rss"):
            for store in ("cache", "cache_exact", "dict"):
                r = done[(kind, n, method, store)]
                row[f"{store}_{method}_bytes"] = r["bytes_per_object"]
                row.setdefault("ingest_us_per_object", r["ingest_us_per_object"]) if store == "cache" else None
                for k in ("json_bytes", "stored_bytes", "etcd_value_bytes", "native_bytes_per_object", "native_breakdown_per_object"):
                    if k in r and store == "cache":
                        row[k] = r[k]
        js = row["json_bytes"]
        row["target_bytes"] = 1.2 * js + 100
        for m in ("tracemalloc", "rss"):
            row[f"cache_{m}_ratio"] = row[f"cache_{m}_bytes"] / js
            row[f"cache_exact_{m}_ratio"] = row[f"cache_exact_{m}_bytes"] / js
            row[f"dict_{m}_ratio"] = row[f"dict_{m}_bytes"] / js
        row["native_ratio"] = row["native_bytes_per_object"] / js
        row["pass_tracemalloc"] = row["cache_tracemalloc_bytes"] <= row["target_bytes"]
        row["pass_native"] = row["native_bytes_per_object"] <= row["target_bytes"]
        row["pass_rss"] = row["cache_rss_bytes"] <= row["target_bytes"]
        row["pass_exact_tracemalloc"] = row["cache_exact_tracemalloc_bytes"] <= row["target_bytes"]
        row["pass_exact_rss"] = row["cache_exact_rss_bytes"] <= row["target_bytes"]
        log(f"{kind}: json {js:.0f} B, cache {row['cache_tracemalloc_bytes']:.0f} B traced, "
            f"{row['native_bytes_per_object']:.0f} B native, {row['cache_rss_bytes']:.0f} B RSS")
        res[kind] = row
    return res


def measure_realistic(kinds: list[str], ns: dict[str, int]) -> dict:
    """Per kind, hot (plain) and cold (compressed), tracemalloc and RSS, each in its own child process."""
    done = run_children(kinds, ns, ("cache", "cache_z"), realistic=True)
    res = {}
    for kind in kinds:
        n = ns[kind]
        row: dict = {"n": n}
        for store, name in (("cache", "hot"), ("cache_z", "cold")):
            t = done[(kind, n, "tracemalloc", store)]
            r = done[(kind, n, "rss", store)]
            row["json_bytes"] = t["json_bytes"]
            cache_bytes = t["bytes_per_object"] + (t["bitmap_bytes"] + t["codec_native_bytes"]) / n
            row[name] = {"object_cache_bytes": cache_bytes, "ratio": cache_bytes / t["json_bytes"],
                         "tracemalloc_bytes": t["bytes_per_object"], "bitmap_bytes": t["bitmap_bytes"] / n,
                         "codec_native_bytes_total": t["codec_native_bytes"],
                         "dictionary_bytes_total": t["dictionary_bytes"], "dictionaries": t["dictionaries"],
                         "entries_compressed": t["entries_compressed"], "frame_bytes": t["frame_bytes"],
                         "entry_bytes": t["entry_bytes"], "rss_delta_bytes": r["bytes_per_object"],
                         "rss_bytes": r["rss_bytes"], "peak_rss_bytes": r["peak_rss_bytes"],
                         "ingest_us_per_object": t["ingest_us_per_object"],
                         "read_us_per_object": t["read_us_per_object"], "full_list_ms": t["full_list_ms"]}
        target = REALISTIC_TARGET.get(kind)
        row["target_ratio"] = target
        row["pass"] = None if target is None else row["cold"]["ratio"] <= target
        row["list_cost_ratio"] = row["cold"]["full_list_ms"] / max(row["hot"]["full_list_ms"], 1e-9)
        log(f"{kind}: json {row['json_bytes']:.0f} B, hot {row['hot']['object_cache_bytes']:.0f} B, "
            f"cold {row['cold']['object_cache_bytes']:.0f} B ({row['cold']['ratio']:.3f}x)")
        res[kind] = row
    return res


def table_realistic(res: dict, vers: dict, source: str) -> str:
    rows = []
    for kind, r in res.items():
        h, c = r["hot"], r["cold"]
        verdict = "" if r["pass"] is None else (" PASS" if r["pass"] else " FAIL")
        rows.append((kind, f"{r['n']:,}", f"{r['json_bytes']:,.0f}",
                     f"{h['object_cache_bytes']:,.0f} ({h['ratio']:.2f}x)",
                     f"{c['object_cache_bytes']:,.0f} ({c['ratio']:.3f}x){verdict}",
                     "-" if r["target_ratio"] is None else f"{r['target_ratio']}x",
                     f"{c['frame_bytes']:,.0f}",
                     f"{c['dictionaries']} / {c['codec_native_bytes_total'] / 1024:,.0f} KiB",
                     f"{h['rss_delta_bytes']:,.0f} / {c['rss_delta_bytes']:,.0f}",
                     f"{h['peak_rss_bytes'] / 2**20:,.0f} / {c['peak_rss_bytes'] / 2**20:,.0f}",
                     f"{c['read_us_per_object']:.2f}",
                     f"{h['full_list_ms']:.1f} / {c['full_list_ms']:.1f} ({r['list_cost_ratio']:.1f}x)"))
    head = (f"# object cache bytes per object, hot (wire bytes) and cold (compressed, cache/compression.py), on "
            f"bench/corpus.py's objects (payloads: {source}); Python {vers['python']}, zstandard "
            f"{vers.get('zstandard', '?')}; {vers['cpu_model']}\n"
            "# object cache bytes = tracemalloc retained + bitmaps + codecs' native (dictionary, decoder), "
            "per object\n")
    return head + render(rows, ("object", "N", "JSON B", "hot B", "cold B", "target", "frame B",
                                "dicts / native", "RSS delta B hot / cold", "peak RSS MiB hot / cold",
                                "decode us", "full list ms hot / cold"))


def table(res: dict, vers: dict) -> str:
    def v(ok):
        return "PASS" if ok else "FAIL"
    rows = []
    for kind, r in res.items():
        rows.append((kind, f"{r['n']:,}", f"{r['json_bytes']:,.0f}", f"{r['target_bytes']:,.0f}",
                     f"{r['cache_tracemalloc_bytes']:,.0f} ({r['cache_tracemalloc_ratio']:.2f}x) {v(r['pass_tracemalloc'])}",
                     f"{r['native_bytes_per_object']:,.0f} ({r['native_ratio']:.2f}x) {v(r['pass_native'])}",
                     f"{r['cache_rss_bytes']:,.0f} ({r['cache_rss_ratio']:.2f}x) {v(r['pass_rss'])}",
                     f"{r['cache_exact_tracemalloc_bytes']:,.0f} ({r['cache_exact_tracemalloc_ratio']:.2f}x) "
                     f"{v(r['pass_exact_tracemalloc'])}",
                     f"{r['cache_exact_rss_bytes']:,.0f} ({r['cache_exact_rss_ratio']:.2f}x) {v(r['pass_exact_rss'])}",
                     f"{r['dict_tracemalloc_bytes']:,.0f} ({r['dict_tracemalloc_ratio']:.2f}x)",
                     f"{r['dict_rss_bytes']:,.0f} ({r['dict_rss_ratio']:.2f}x)"))
    head = (f"# bytes/object in the watch cache (WatchCache.replace after Cacher-style ingest); Python "
            f"{vers['python']}, orjson {vers['orjson']}, pyroaring {vers['pyroaring']}; {vers['cpu_model']}\n"
            f"# target <= 1.2 x JSON + 100 B; anchors: Go apiserver 5.2-7x JSON (k/k #142062), Python dict 4-6.6x\n")
    return head + render(rows, ("object", "N", "JSON B", "target B", "cache tracemalloc", "cache native __sizeof__",
                                "cache RSS", "exact-copy tracemalloc", "exact-copy RSS", "dict tracemalloc",
                                "dict RSS"))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        kind, n, method, store = argv[1], int(argv[2]), argv[3], argv[4]
        print(json.dumps(child(kind, n, method, store, realistic=argv[5:] == ["realistic"])))
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.heap_per_object", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="N / 25 (< 30 s)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every N")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--out", default=None, help="default bench/out/heap_per_object[_realistic].json")
    ap.add_argument("--realistic", action="store_true",
                    help="compression on bench/corpus.py's objects, hot and cold (issue 23)")
    p = ap.parse_args(argv)
    if p.realistic:
        return main_realistic(p)
    p.out = p.out or "bench/out/heap_per_object.json"
    scale = p.scale * (0.04 if p.quick else 1.0)
    ns = {k: max(10, int(v * scale)) for k, v in DEFAULT_N.items()}
    t0 = time.perf_counter()
    res = measure(p.kinds.split(","), ns)
    vers = versions(packages=("pyroaring",))
    write_json(p.out, {"benchmark": "heap_per_object", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "elapsed_s": time.perf_counter() - t0, "params": {"quick": p.quick, "n": ns},
                       "measured": "in-process, one fresh child process per (kind, method, store); etcd values "
                                   "allocated before the baseline; tracemalloc misses CRoaring (see native)",
                       "versions": vers, "figures": res})
    print(table(res, vers))
    log(f"wrote {p.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def main_realistic(p) -> int:
    from bench import corpus
    scale = p.scale * (0.04 if p.quick else 1.0)
    kinds = [k for k in p.kinds.split(",") if k in REALISTIC_KINDS] if p.kinds != ",".join(KINDS) \
        else list(REALISTIC_KINDS)
    ns = {k: max(300, int(REALISTIC_N[k] * scale)) for k in kinds}
    out = p.out or "bench/out/heap_per_object_realistic.json"
    t0 = time.perf_counter()
    corpus.text_files()   # the module download, before any timing
    res = measure_realistic(kinds, ns)
    vers = versions(packages=("pyroaring", "zstandard"))
    write_json(out, {"benchmark": "heap_per_object_realistic", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                     "elapsed_s": time.perf_counter() - t0, "params": {"quick": p.quick, "n": ns},
                     "corpus": corpus.source(),
                     "measured": "in-process, one fresh child process per (kind, method, store); cold = every "
                                 "entry compressed by the cache's Compressor after a plain ingest",
                     "versions": vers, "figures": res})
    print(table_realistic(res, vers, corpus.source()))
    log(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
