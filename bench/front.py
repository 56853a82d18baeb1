"""The front's costs, side by side in one run: unsharded list latency through the front of K shards against a full
replica's, and watch delivery latency through the front's merge against a direct watch on the full replica.

    .venv/bin/python -m bench.front [--shards 2] [--objects 5000] [--lists 100] [--writes 200] [--client go|python]
                                    [--shard-transport unix|tcp] [--out bench/out/front.json]

One etcd, K `--residency` shards, one full replica (no `--residency`), the front; N ConfigMaps of ~1 KB in 10
namespaces. The front reaches its shards as `python -m deployment`'s fronts do: on their `--unix-socket`s
(`--shard-transport unix`, the default), or on loopback TCP. Lists alternate front / full (consistent lists, RV
unset, and `limit=500` first pages), timed by a compiled client (`--client go`, the default: bench/go/lister,
each body read whole and not decoded, so the client's CPU is not taken from the servers' two cores) or by Python
`requests` (`--client python`). Watches: one through the front, one on the full replica, opened from the same RV;
a writer updates objects at ~50/s and each event's delivery time (arrival minus the write's start) is recorded on
both. Prints a table and writes bench/out/front.json; the machine load (`uptime`) is part of the output.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

import requests

from machinery.http1 import unix_url
from machinery.shard_selector import complementary
from storage.embedded import EmbeddedEtcd
from tests.helpers import ApiserverProcess, build_etcd_module, stop_all, wait_all_ready
from tests.helpers.etcd import load_tool

from .harness import log, write_json


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.front", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--objects", type=int, default=5000)
    ap.add_argument("--lists", type=int, default=100,
                    help="lists per side and kind (the ratio of p50s over 30 spread 1.07-1.29 in five runs; over "
                         "100, 1.08-1.17)")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--client", choices=("go", "python"), default="go", help="what times the lists")
    ap.add_argument("--shard-transport", choices=("unix", "tcp"), default="unix",
                    help="how the front reaches its shards (the deployment: unix)")
    ap.add_argument("--out", default="bench/out/front.json")
    a = ap.parse_args(argv)
    lister = load_tool("build_repo_go").ensure("lister") if a.client == "go" else None
    etcd = EmbeddedEtcd(binary=build_etcd_module().ensure_etcd()).start()
    procs: list[ApiserverProcess] = []
    sock_dir = tempfile.mkdtemp(prefix="bench-front-")   # the shards' --unix-socket files
    try:
        ep, prefix = etcd.endpoint, "/registry"
        socks = [os.path.join(sock_dir, f"shard{i}.sock") for i in range(a.shards)]
        unix = a.shard_transport == "unix"
        shards = [ApiserverProcess(*(("--unix-socket", socks[i]) if unix else ()), etcd_servers=ep,
                                   etcd_prefix=prefix, residency=s, name=f"shard{i}")
                  for i, s in enumerate(complementary(a.shards))]
        full = ApiserverProcess(etcd_servers=ep, etcd_prefix=prefix, name="full")
        procs += shards + [full]
        for p in procs:
            p.start()
        wait_all_ready(procs, 60)
        shard_urls = [unix_url(p) for p in socks] if unix else [s.base for s in shards]
        front = ApiserverProcess("--front", "--shards", ",".join(shard_urls), etcd_servers=ep,
                                 etcd_prefix=prefix, name="front")
        procs.append(front)
        front.start().wait_ready(30)
        s = requests.Session()
        log(f"creating {a.objects} configmaps")
        for n in range(10):
            s.post(full.base + "/api/v1/namespaces", json={"metadata": {"name": f"n{n}"}})
        pad = "x" * 800
        for i in range(a.objects):
            r = s.post(full.base + f"/api/v1/namespaces/n{i % 10}/configmaps",
                       json={"metadata": {"name": f"cm{i:06d}", "labels": {"app": f"a{i % 7}"}}, "data": {"pad": pad}})
            assert r.status_code == 201, r.text
        time.sleep(1)
        lists: dict[str, list[float]] = {}
        sizes: dict[str, int] = {}   # the last body's bytes (the compiled client)
        for q, label in (("", "list all"), ("?limit=500", "list limit=500")):
            if lister is not None:
                urls = [front.base + "/api/v1/configmaps" + q, full.base + "/api/v1/configmaps" + q]
                got = json.loads(subprocess.run([lister, "-urls", ",".join(urls), "-n", str(a.lists)], check=True,
                                                capture_output=True, text=True, timeout=600).stdout)
                for who, u in zip(("front", "full"), urls):
                    lists[f"{label} {who}"] = [ms / 1000 for ms in got[u]["ms"]]
                    sizes[f"{label} {who}"] = got[u]["bytes"]
                continue
            for who, base in (("front", front.base), ("full", full.base)):
                s.get(base + "/api/v1/configmaps" + q)   # warm
            for _ in range(a.lists):
                for who, base in (("front", front.base), ("full", full.base)):
                    t0 = time.perf_counter()
                    r = s.get(base + "/api/v1/configmaps" + q)
                    lists.setdefault(f"{label} {who}", []).append(time.perf_counter() - t0)
                    assert r.status_code == 200
        # Watch delivery.
        rv = s.get(full.base + "/api/v1/configmaps?limit=1").json()["metadata"]["resourceVersion"]
        arrivals: dict[str, dict[str, float]] = {"front": {}, "full": {}}

        def watch(who: str, base: str) -> None:
            r = requests.get(base + "/api/v1/configmaps", params={"watch": "1", "resourceVersion": rv,
                                                                  "timeoutSeconds": str(int(a.writes / 50) + 15)},
                             stream=True)
            for line in r.iter_lines():
                if line:
                    e = json.loads(line)
                    arrivals[who][e["object"]["metadata"]["resourceVersion"]] = time.perf_counter()
                    if len(arrivals[who]) >= a.writes:
                        return
        ts = [threading.Thread(target=watch, args=w, daemon=True) for w in (("front", front.base), ("full", full.base))]
        for t in ts:
            t.start()
        time.sleep(1)
        acked: dict[str, float] = {}
        for i in range(a.writes):
            t0 = time.perf_counter()
            r = s.put(full.base + f"/api/v1/namespaces/n{i % 10}/configmaps/cm{i:06d}",
                      json={"metadata": {"name": f"cm{i:06d}"}, "data": {"v": str(i)}})
            acked[r.json()["metadata"]["resourceVersion"]] = t0   # delivery: from the write's start
            time.sleep(0.02)
        for t in ts:
            t.join(30)
        delivery = {who: [arrivals[who][k] - acked[k] for k in acked if k in arrivals[who]] for who in arrivals}
        load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
        out = {"shards": a.shards, "objects": a.objects, "client": a.client, "shard_transport": a.shard_transport,
               "uptime": load, "lists_ms": {}, "watch_ms": {}}
        print(f"\nK={a.shards} shards (the front reaches them on {a.shard_transport}), {a.objects} ConfigMaps, lists "
              f"timed by the {a.client} client; {load}")
        print(f"{'measure':32s} {'p50 ms':>8s} {'p99 ms':>8s}")
        for k, v in lists.items():
            out["lists_ms"][k] = {"p50": 1000 * pct(v, 50), "p99": 1000 * pct(v, 99), "bytes": sizes.get(k)}
            print(f"{k:32s} {1000 * pct(v, 50):8.1f} {1000 * pct(v, 99):8.1f}")
        for label in ("list all", "list limit=500"):
            ratio = pct(lists[f"{label} front"], 50) / pct(lists[f"{label} full"], 50)
            out["lists_ms"][f"{label} ratio p50"] = ratio
            print(f"{label + ' front/full p50':32s} {ratio:8.2f}")
        for who, v in delivery.items():
            out["watch_ms"][who] = {"p50": 1000 * pct(v, 50), "p99": 1000 * pct(v, 99), "events": len(v)}
            print(f"{'watch delivery ' + who:32s} {1000 * pct(v, 50):8.1f} {1000 * pct(v, 99):8.1f}  ({len(v)} events)")
        added = 1000 * (pct(delivery["front"], 99) - pct(delivery["full"], 99))
        out["watch_ms"]["added_p99"] = added
        print(f"{'watch added by the merge p99':32s} {added:8.1f}")
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        write_json(a.out, out)
        return 0
    finally:
        stop_all([p for p in procs if p.popen is not None], strict=False)
        etcd.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
