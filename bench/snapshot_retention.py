"""Memory retained by per-event B-tree snapshots over the 75 s window at 1,000 writes/s (issue 3, KEP-4988).

In-process, no server, no sleeping: a `cache.watch_cache.WatchCache` with an injected clock is filled with
N objects (`replace`), then U updates are applied (`apply_put`, random objects, ~1 KB exact-size values),
advancing the clock by 1/rate per update (default 75,000 updates over 10,000 objects at 1,000 writes/s =
the whole 75 s window). Measured with tracemalloc, twice:

* snapshots kept (the cache as it is: one snapshot per event, dropped with the window);
* snapshots dropped (after each update only the newest snapshot is kept, so the B-tree copies nothing
  for old readers); the event history is the same in both runs.

Retained by snapshots = traced(kept) - traced(dropped); compared with the live cache (traced bytes of the
filled cache after `replace`). Target < 5 % of the live cache. Anchor: KEP-4988, snapshots cost +300 MB,
1.3 % of apiserver memory at 5,000 nodes.

    .venv/bin/python -m bench.snapshot_retention           # 10,000 objects, 75,000 updates
    .venv/bin/python -m bench.snapshot_retention --quick   # 1,000 objects, 7,500 updates (< 30 s)
"""
from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc

import ext
from bench.harness import log, versions, write_json
from bench.report import render
from cache.watch_cache import WatchCache

TARGET = 0.05


def value(i: int, rv: int, size: int) -> bytes:
    head = b'{"kind":"ConfigMap","metadata":{"name":"cm-%08d","resourceVersion":"%d"},"data":{"v":"' % (i, rv)
    return head + b"x" * max(0, size - len(head) - 3) + b'"}}'


def _drop_all_but_newest(wc: WatchCache) -> None:
    """Keep only the newest snapshot (works with the deque pair and with the older list layout)."""
    if hasattr(wc, "snapshot_trees"):
        while len(wc.snapshot_trees) > 1:
            wc.snapshot_rvs.popleft()
            wc.snapshot_trees.popleft()
    else:
        del wc.snapshots[:-1]


def run(n: int, updates: int, rate: float, size: int, keep_snapshots: bool) -> dict:
    now = [0.0]
    wc = WatchCache("/registry/configmaps/", clock=lambda: now[0])
    keys = [f"/registry/configmaps/ns-{i % 50:02d}/cm-{i:08d}" for i in range(n)]
    labels = {"app": "bench"}
    gc.collect()
    tracemalloc.start()
    t0 = tracemalloc.get_traced_memory()[0]
    wc.replace(((keys[i], 1, value(i, 1, size), f"uid-{i}", f"ns-{i % 50:02d}", labels) for i in range(n)), 1)
    gc.collect()
    live = tracemalloc.get_traced_memory()[0] - t0
    rnd = random.Random(7)
    step = 1.0 / rate
    t1 = tracemalloc.get_traced_memory()[0]
    p0 = time.perf_counter()
    for k in range(updates):
        now[0] += step
        i = rnd.randrange(n)
        rv = 2 + k
        wc.apply_put(keys[i], rv, value(i, rv, size), f"uid-{i}", f"ns-{i % 50:02d}", labels, labels)
        if not keep_snapshots:
            _drop_all_but_newest(wc)
    el = time.perf_counter() - p0
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - t1
    tracemalloc.stop()
    n_snap = len(wc.snapshot_trees) if hasattr(wc, "snapshot_trees") else len(wc.snapshots)
    return {"live_cache_bytes": live, "retained_after_updates_bytes": retained, "snapshots": n_snap,
            "history_events": len(wc.history), "capacity": wc.capacity, "window_s": wc.window,
            "store_nodes": wc.store.node_count(), "apply_us": el / updates * 1e6,
            "oldest_event_age_s": now[0] - wc.history[0].time if wc.history else 0.0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.snapshot_retention", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 objects, 7,500 updates (< 30 s)")
    ap.add_argument("--objects", type=int)
    ap.add_argument("--updates", type=int)
    ap.add_argument("--rate", type=float, default=1000.0, help="writes/s of the injected clock")
    ap.add_argument("--size", type=int, default=1000, help="bytes per object value")
    ap.add_argument("--out", default="bench/out/snapshot_retention.json")
    p = ap.parse_args(argv)
    p.objects = p.objects or (1_000 if p.quick else 10_000)
    p.updates = p.updates or (7_500 if p.quick else 75_000)
    t0 = time.perf_counter()
    kept = run(p.objects, p.updates, p.rate, p.size, True)
    log(f"kept: {kept['retained_after_updates_bytes'] / 1e6:.1f} MB retained, {kept['snapshots']} snapshots")
    dropped = run(p.objects, p.updates, p.rate, p.size, False)
    log(f"dropped: {dropped['retained_after_updates_bytes'] / 1e6:.1f} MB retained")
    snap = kept["retained_after_updates_bytes"] - dropped["retained_after_updates_bytes"]
    live = kept["live_cache_bytes"]
    figs = {"kept": kept, "dropped": dropped, "snapshot_bytes": snap, "live_cache_bytes": live,
            "snapshot_fraction_of_live": snap / live, "snapshot_bytes_per_snapshot": snap / max(kept["snapshots"], 1),
            "history_bytes": dropped["retained_after_updates_bytes"], "pass": snap / live < TARGET}
    vers = versions(btree=getattr(ext.BTree, "__module__", "?"))
    write_json(p.out, {"benchmark": "snapshot_retention", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "elapsed_s": time.perf_counter() - t0,
                       "params": {k: v for k, v in vars(p).items() if k != "out"},
                       "measured": "in-process tracemalloc, injected clock; snapshot bytes = kept - dropped run",
                       "versions": vers, "figures": figs})
    rows = [("live cache (after replace)", f"{live / 1e6:.1f} MB", f"{p.objects:,} objects x {p.size} B"),
            ("retained by snapshots", f"{snap / 1e6:.2f} MB",
             f"{kept['snapshots']:,} snapshots, {figs['snapshot_bytes_per_snapshot']:.0f} B each"),
            ("snapshots / live cache", f"{figs['snapshot_fraction_of_live'] * 100:.2f} %",
             ("PASS" if figs["pass"] else "FAIL") + " (target < 5 %; KEP-4988: 1.3 %)"),
            ("history window (both runs)", f"{figs['history_bytes'] / 1e6:.1f} MB",
             f"{kept['history_events']:,} events, oldest {kept['oldest_event_age_s']:.0f} s, capacity {kept['capacity']:,}"),
            ("apply_put with / without snapshots", f"{kept['apply_us']:.1f} / {dropped['apply_us']:.1f} us",
             "under tracemalloc")]
    print(f"# snapshot retention: {p.updates:,} updates over {p.objects:,} objects at {p.rate:,.0f} writes/s "
          f"(injected clock, {p.updates / p.rate:.0f} s window); Python {vers['python']}\n"
          + render(rows, ("figure", "value", "detail")))
    log(f"wrote {p.out} in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
