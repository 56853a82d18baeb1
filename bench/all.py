"""Run every benchmark, one after the other, each writing its JSON under bench/out/ and printing its table.

    .venv/bin/python -m bench.all            # every default run (~15 min on 2 cores)
    .venv/bin/python -m bench.all --quick    # every --quick run (each < 30 s)
    .venv/bin/python -m bench.all --only cache_reads,heap_per_object

Each benchmark runs in its own process (`python -m bench.<name> [--quick]`) so that one's memory does not
skew another's; a failure is reported and the others still run (exit code 1 if any failed). A summary with
each benchmark's exit code and elapsed time is written to bench/out/all.json.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Order: in-process ones first (no etcd), then the server ones.
BENCHMARKS = ("btree_snapshot", "snapshot_retention", "heap_per_object", "residency", "etcd_path", "cache_reads",
              "list_memory", "watch_fanout")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.all", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    ap.add_argument("--only", help="comma-separated subset of: " + ",".join(BENCHMARKS))
    ap.add_argument("--out", default="bench/out/all.json")
    p = ap.parse_args(argv)
    names = p.only.split(",") if p.only else list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s): {unknown}")
    summary = {}
    for name in names:
        cmd = [sys.executable, "-m", f"bench.{name}"] + (["--quick"] if p.quick else [])
        print(f"\n## {' '.join(['python'] + cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=ROOT)
        summary[name] = {"returncode": rc, "elapsed_s": time.perf_counter() - t0,
                         "json": f"bench/out/{name}.json"}
        if rc != 0:
            print(f"!! bench.{name} failed with exit code {rc}", flush=True)
    os.makedirs(os.path.dirname(os.path.join(ROOT, p.out)), exist_ok=True)
    with open(os.path.join(ROOT, p.out), "w") as f:
        json.dump({"quick": p.quick, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": summary}, f, indent=2)
    failed = [n for n, r in summary.items() if r["returncode"] != 0]
    print(f"\n# {len(names) - len(failed)}/{len(names)} benchmarks ok" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
