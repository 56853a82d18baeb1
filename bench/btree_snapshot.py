"""Benchmark of the watch cache's copy-on-write B-tree (ext.btree vs its twin ext.btree_py vs dict).

For 10k, 100k and 1M entries (keys ``/registry/pods/ns<NN>/pod-<random>``, inserted in random order,
values shared ``None`` so that only the structure is measured):

* ``snapshot()``: median of many calls (each followed by dropping the snapshot);
* first write after a snapshot (copies the root-to-leaf path) vs a write with no live snapshot;
* bytes per entry of the structure itself: ``__sizeof__`` (nodes only; dict: ``sys.getsizeof``)
  and tracemalloc (allocations while building, keys/values excluded because they pre-exist).

    .venv/bin/python -m bench.btree_snapshot [--sizes 10000,100000,1000000] [--out bench/out/btree_snapshot.json]

A table goes to stdout, every figure (plus versions) to the JSON file. The twin is slow to build at 1M
(~1 min); ``--quick`` uses 10k and 100k only.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
import tracemalloc

import ext.btree as btree_c
import ext.btree_py as btree_py
from bench.harness import versions, write_json

IMPLS = {"c": btree_c.BTree, "py": btree_py.BTree}


def make_keys(n: int, seed: int = 1) -> list[str]:
    rnd = random.Random(seed)
    keys = {f"/registry/pods/ns{rnd.randrange(100):02d}/pod-{rnd.getrandbits(40):010x}" for _ in range(n)}
    while len(keys) < n:
        keys.add(f"/registry/pods/ns{rnd.randrange(100):02d}/pod-{rnd.getrandbits(40):010x}")
    out = list(keys)
    rnd.shuffle(out)
    return out


def build(factory, keys):
    t = factory()
    if isinstance(t, dict):
        for k in keys:
            t[k] = None
    else:
        ins = t.insert
        for k in keys:
            ins(k, None)
    return t


def measure_build(factory, keys):
    """(structure, tracemalloc bytes retained by the structure)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    t = build(factory, keys)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return t, after - before


def time_snapshot(t, reps: int, keep: bool = False) -> float:
    """Median seconds of ``t.snapshot()``: dropped right after, as the cache drops old ones, or with `keep`
    every earlier snapshot stays alive (retention window)."""
    perf = time.perf_counter_ns
    kept = []
    samples = []
    for _ in range(reps):
        t0 = perf()
        s = t.snapshot()
        t1 = perf()
        if keep:
            kept.append(s)
        del s
        samples.append(t1 - t0)
    return statistics.median(samples) * 1e-9


def time_write(t, keys, reps: int, after_snapshot: bool) -> float:
    """Median seconds of an insert (replace of a random existing key): with no snapshot ever taken, or the
    first insert after a snapshot that stays alive (copies the path)."""
    perf = time.perf_counter_ns
    rnd = random.Random(2 if after_snapshot else 3)
    value = 1 if after_snapshot else 2
    samples = []
    for _ in range(reps):
        k = rnd.choice(keys)
        s = t.snapshot() if after_snapshot else None
        t0 = perf()
        t.insert(k, value)
        t1 = perf()
        samples.append(t1 - t0)
        del s
    return statistics.median(samples) * 1e-9


def run(sizes: list[int], reps: int) -> dict:
    results = []
    for n in sizes:
        keys = make_keys(n)
        row: dict = {"entries": n}
        for name, factory in (("c", IMPLS["c"]), ("py", IMPLS["py"]), ("dict", dict)):
            t0 = time.perf_counter()
            t, traced = measure_build(factory, keys)
            build_s = time.perf_counter() - t0
            sizeof = sys.getsizeof(t) if name == "dict" else t.__sizeof__()
            r = {
                "build_s": build_s,
                "sizeof_bytes": sizeof,
                "sizeof_bytes_per_entry": sizeof / n,
                "tracemalloc_bytes_per_entry": traced / n,
            }
            if name != "dict":
                r["nodes"] = t.node_count()
                r["write_no_snapshot_us"] = time_write(t, keys, min(reps, 2000), after_snapshot=False) * 1e6  # before any snapshot
                r["snapshot_median_us"] = time_snapshot(t, reps) * 1e6
                r["snapshot_kept_median_us"] = time_snapshot(t, min(reps, 2000), keep=True) * 1e6
                r["first_write_after_snapshot_us"] = time_write(t, keys, min(reps, 2000), after_snapshot=True) * 1e6
                t._check() if n <= 100_000 else None
            row[name] = r
            print(f"  {n:>9,} {name:<4} built in {build_s:.2f}s", file=sys.stderr)
            del t
            gc.collect()
        results.append(row)
    return {"results": results}


def table(doc: dict) -> str:
    lines = [
        "entries    impl  snapshot µs  snap(kept) µs  1st write after snap µs  write(no snap) µs  B/entry sizeof  B/entry tracemalloc  nodes",
    ]
    for row in doc["results"]:
        for name in ("c", "py", "dict"):
            r = row[name]
            if name == "dict":
                lines.append(
                    f"{row['entries']:>9,}  {name:<4}  {'-':>11}  {'-':>13}  {'-':>23}  {'-':>17}"
                    f"  {r['sizeof_bytes_per_entry']:>14.1f}  {r['tracemalloc_bytes_per_entry']:>19.1f}  {'-':>5}"
                )
            else:
                lines.append(
                    f"{row['entries']:>9,}  {name:<4}  {r['snapshot_median_us']:>11.3f}  {r['snapshot_kept_median_us']:>13.3f}"
                    f"  {r['first_write_after_snapshot_us']:>23.2f}  {r['write_no_snapshot_us']:>17.2f}"
                    f"  {r['sizeof_bytes_per_entry']:>14.1f}  {r['tracemalloc_bytes_per_entry']:>19.1f}  {r['nodes']:>5}"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--reps", type=int, default=20000, help="snapshot() calls per size (median)")
    ap.add_argument("--quick", action="store_true", help="10k and 100k only, fewer repetitions")
    ap.add_argument("--out", default=os.path.join("bench", "out", "btree_snapshot.json"))
    args = ap.parse_args(argv)
    sizes = [10_000, 100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    reps = 2000 if args.quick else args.reps
    doc = run(sizes, reps)
    doc["versions"] = versions(degree=btree_c.DEGREE)
    doc["notes"] = (
        "values are a shared None: bytes/entry is the structure only (keys and values excluded). "
        "sizeof = nodes reachable from the tree; tracemalloc = bytes allocated and retained while building."
    )
    print(table(doc))
    write_json(args.out, doc)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
