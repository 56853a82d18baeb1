"""Ours in one process, ours as a deployment of N fronts and K shards (`python -m deployment`), and kube-apiserver:
one etcd, one run, side by side (issue 21). Every server serves HTTPS with kube's serving certificate; clients
are forked processes (lists, writes) or the compiled bench/go/fanout (fan-out), as in `bench.vs_upstream`, whose
code this reuses.

    .venv/bin/python -m bench.deployment                 # the full run (figures in the README)
    .venv/bin/python -m bench.deployment --quick         # small sizes, two ladder steps, memory read warm (smoke)

Sections (`--sections`, default all five, run in this order: memory, saturation, lists, biglists, throughput):

* `saturation`: watch fan-out at saturation (`bench.vs_upstream`'s section: the writer is a third apiserver over
  the same etcd; rates rise by sqrt(2) every 10 s; score = highest deliveries/s of a step that delivered every
  event with p99 write-to-delivery at most 1 s), 100 and 1,000 watchers (`--saturation-watchers`),
  `--saturation-reps` ladders per server, interleaved; medians compared. Target: the deployment >= 1.2x kube. A
  server that passes every step (`--saturation-steps`) scores the ladder's top, a lower bound: the ratio is shown
  as one (">= r"), and "undecided" when both servers passed every step.
* `lists`: 20 concurrent consistent lists of 10,000 1 KB ConfigMaps (each client lists `--list-reps` times):
  p50 / p99. Target: p99 <= 0.6x kube.
* `biglists`: 20 concurrent consistent lists of 100 MB each (1,000 realistic 100 KB Pods, `bench.corpus.ai_pod`,
  loaded through kube-apiserver; each client lists `--big-list-reps` times): p50 / p99. Target: p99 <= 0.8x kube.
* `throughput`: creates/s and updates/s of 1 KB ConfigMaps from 16 keep-alive HTTPS connections of the compiled
  bench/go/writer (`--tp-client python`: forked Python processes, as before 2026-12-06): `--tp-reps` interleaved
  rounds of `--tp-n` creates then `--tp-n` updates per side, medians compared. Target >= 1.5x.
* `memory`: the whole server's memory once it holds 20,000 1 KB ConfigMaps (loaded through kube; read once
  our caches have compressed their cold entries): kube's RSS; ours single-process its RSS (and PSS); the
  deployment the sum of its processes' PSS (/proc/PID/smaps_rollup), the supervisor included. Target: the
  deployment <= 0.6x kube's RSS.

`lists`, `biglists` and `throughput` also record each server's CPU seconds (the deployment: every process of it)
and etcd's over the measurement, so a list's and a write's CPU cost can be compared (per-core figures for a
projection to bigger machines).

Targets are printed beside the figures, never asserted. `--fronts` / `--shards` default to the deployment's own
defaults (N = cores, K = 1).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import urllib.request

import aiohttp
import orjson

from bench import corpus
from bench.harness import Apiserver, BenchError, compression_settled, current_etcd, log, proc_cpu_s, versions, write_json
from bench.report import render
from bench.vs_upstream import (Servers, Side, ensure_ns, fanout_ladder, fanout_objects, load, ratio, run_clients,
                               run_ops, saturation_ladder, synced_count)
from bench.workloads import sized_configmap
from deployment.supervisor import pss_bytes
from storage.embedded import free_port
from tests.helpers import ROOT
from tests.helpers.etcd import load_tool

TARGETS = {"saturation": (">=", 1.2), "lists_p99": ("<=", 0.6), "biglists_p99": ("<=", 0.8),
           "creates": (">=", 1.5), "updates": (">=", 1.5), "memory": ("<=", 0.6)}


class DeploymentSide(Side):
    """The deployment as the clients see it (its one HTTPS address); CPU and memory are its processes' sum."""

    def __init__(self, base: str, ca: str, cert: tuple[str, str], proc: subprocess.Popen, dbase: str):
        super().__init__("deployment", base, ca, cert, proc.pid)
        self.proc, self.dbase = proc, dbase

    def pids(self) -> list[int]:
        with urllib.request.urlopen(self.dbase + "/debug/residency", timeout=20) as r:
            rep = orjson.loads(r.read())
        zygote = (rep.get("zygote") or {}).get("pid")   # the process the children were forked from
        return [self.pid] + ([zygote] if zygote else []) + [p["pid"] for p in rep["processes"] if p["pid"]]

    def cpu_s(self) -> float:
        return sum(proc_cpu_s(p) for p in self.pids())

    def roles(self) -> dict[int, str]:
        """Each child's pid and role ("front", "shard"), asked once (the report costs the children CPU)."""
        with urllib.request.urlopen(self.dbase + "/debug/residency", timeout=20) as r:
            rep = orjson.loads(r.read())
        return {p["pid"]: p["role"] for p in rep["processes"] if p["pid"]}

    def cpu_by_role(self, roles: dict[int, str]) -> dict[str, float]:
        """CPU seconds so far of the fronts, the shards and the supervisor, each summed."""
        out = {"supervisor": proc_cpu_s(self.pid), "front": 0.0, "shard": 0.0}
        for pid, role in roles.items():
            out[role] += proc_cpu_s(pid)
        return out

    def rss(self) -> int:   # the deployment's memory: its processes' PSS (shared pages counted once)
        return sum(pss_bytes(p) for p in self.pids())

    def shard_bases(self) -> list[str]:
        with urllib.request.urlopen(self.dbase + "/debug/residency", timeout=20) as r:
            rep = orjson.loads(r.read())
        return [p["url"] for p in rep["processes"] if p["role"] == "shard"]


def start_deployment(sv: Servers, fronts: int | None, shards: int | None, state_dir: str) -> DeploymentSide:
    port, dport = free_port(), free_port()
    d = sv.kube.dir
    argv = [sys.executable, "-m", "deployment", "--etcd-servers", sv.etcd_endpoint, "--etcd-prefix", "/registry",
            "--port", "0", "--secure-port", str(port), "--tls-cert-file", os.path.join(d, "serving.crt"),
            "--tls-private-key-file", os.path.join(d, "serving.key"), "--deployment-port", str(dport),
            "--state-dir", state_dir]
    if fronts:
        argv += ["--fronts", str(fronts)]
    if shards:
        argv += ["--shards", str(shards)]
    log_path = os.path.join(state_dir, "deployment.log")
    os.makedirs(state_dir, exist_ok=True)
    with open(log_path, "ab") as f:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while True:
        with open(log_path, "rb") as f:
            if b"deployment ready:" in f.read():
                break
        if proc.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"python -m deployment did not become ready; see {log_path}")
        time.sleep(0.3)
    return DeploymentSide(f"https://127.0.0.1:{port}", sv.kube.ca, sv.kube.client_cert, proc,
                          f"http://127.0.0.1:{dport}")


def stop_deployment(side: DeploymentSide) -> None:
    side.proc.terminate()
    try:
        side.proc.wait(90)
    except subprocess.TimeoutExpired:
        side.proc.kill()
        side.proc.wait()


async def _settled_plain(base: str) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        await compression_settled(s, base, quiet=True, strict=False)


def cold(sides: list[Side]) -> None:
    """Wait until every cache of ours has compressed its cold entries (the event window's 75 s after a load)."""
    from bench.vs_upstream import settled
    for side in sides:
        if isinstance(side, DeploymentSide):
            for b in side.shard_bases():
                asyncio.run(_settled_plain(b))
        elif side.name == "ours":
            asyncio.run(settled(side, "/api/v1/namespaces/default/configmaps"))


# --- sections ------------------------------------------------------------------------------------------------

def section_saturation(sv: Servers, sides: list[Side], counts: dict[int, float], steps: int, step_s: float,
                       drain_s: float, reps: int) -> dict:
    fanout = load_tool("build_repo_go").ensure("fanout")
    path = fanout_objects(sv)
    for side in sides:
        if asyncio.run(synced_count(side, path)) != 100:
            raise BenchError(f"{side.name} does not list the fan-out objects")
    out: dict = {}
    with Apiserver(sv.etcd_endpoint, watch_cache=False, etcd_prefix="/registry", name="writer",
                   log_name="bench-deployment-writer") as writer:
        for w, start in counts.items():
            rates = saturation_ladder(start, steps)
            runs: dict[str, list] = {s.name: [] for s in sides}
            for rep in range(reps):
                for side in sides:
                    log(f"saturation: {w} watchers on {side.name} (ladder {rep + 1}/{reps}: {rates} writes/s)")
                    lad = fanout_ladder(fanout, side, writer.base, path, w, rates, step_s, drain_s)
                    runs[side.name].append(lad)
                    log(f"  score {lad['score_deliveries_per_s']:,.0f} deliveries/s, server {lad['server_cores']:.2f} cores")
            med = {k: statistics.median(x["score_deliveries_per_s"] for x in v) for k, v in runs.items()}
            # A side that passed every step of every ladder: its score is the ladder's top, a lower bound.
            top = {k: all(len(x["steps"]) == len(rates) and all(st["ok"] for st in x["steps"]) for x in v)
                   for k, v in runs.items()}
            out[f"{w} watchers"] = {"runs": runs, "rates": rates, "score": med, "at_top": top}
    return out


def load_configmaps(sv: Servers, sides: list[Side], ns: str, name: str, n: int) -> str:
    """n 1 KB ConfigMaps in `ns`, created through kube-apiserver and listed by every side; the collection path."""
    path = f"/api/v1/namespaces/{ns}/configmaps"
    asyncio.run(ensure_ns(sv.kube_side, ns))
    log(f"{ns}: loading {n} x 1 KB ConfigMaps through kube-apiserver")
    load(sv.kube_side, path, lambda i: sized_configmap(f"{name}-{i:06d}", 1024, ns), n)
    for side in sides:
        if asyncio.run(synced_count(side, path)) != n:
            raise BenchError(f"{side.name} does not list {n} objects")
    return path


def measured(side: Side, etcd_pid: int, run) -> dict:
    """run() -> a run_clients result, with the side's and etcd's CPU seconds over it added."""
    roles = side.roles() if isinstance(side, DeploymentSide) else {}
    c0, e0 = proc_cpu_s(side.pid), proc_cpu_s(etcd_pid)
    r0 = side.cpu_by_role(roles) if roles else {}
    out = run()
    if roles:   # where the deployment's CPU went (a shard is one core: it bounds what N fronts can do)
        out["cpu_s_by_role"] = {k: v - r0[k] for k, v in side.cpu_by_role(roles).items()}
        out["server_cpu_s"] = sum(out["cpu_s_by_role"].values())
    else:
        out["server_cpu_s"] = proc_cpu_s(side.pid) - c0
    out["etcd_cpu_s"] = proc_cpu_s(etcd_pid) - e0
    return out


def section_lists(sv: Servers, sides: list[Side], etcd_pid: int, n: int, clients: int, reps: int) -> dict:
    path = load_configmaps(sv, sides, "dep-lists", "cm", n)
    return concurrent_lists(sides, etcd_pid, path, clients, reps)


def concurrent_lists(sides: list[Side], etcd_pid: int, path: str, clients: int, reps: int) -> dict:
    out = {}
    for side in sides:
        jobs = [{"kind": "list", "path": path, "params": {}, "follow": False, "n": reps}] * clients
        out[side.name] = r = measured(side, etcd_pid, lambda: run_clients(side, jobs))
        log(f"  {side.name}: {clients} concurrent consistent lists of {r['bytes'] / 1e6:,.1f} MB: "
            f"p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms, server {r['server_cpu_s']:.1f} CPU-s, "
            f"etcd {r['etcd_cpu_s']:.1f}")
    return out


def section_biglists(sv: Servers, sides: list[Side], etcd_pid: int, n: int, clients: int, reps: int) -> dict:
    """n realistic 100 KB Pods (about 100 MB at n = 1,000), loaded through kube-apiserver."""
    ns = "dep-biglists"
    path = f"/api/v1/namespaces/{ns}/pods"
    asyncio.run(ensure_ns(sv.kube_side, ns))
    make = corpus.as_posted(corpus.ai_pod)
    log(f"{ns}: loading {n} x 100 KB Pods through kube-apiserver")
    load(sv.kube_side, path, lambda i: make(ns, i), n)
    for side in sides:
        if asyncio.run(synced_count(side, path)) != n:
            raise BenchError(f"{side.name} does not list {n} Pods")
    return concurrent_lists(sides, etcd_pid, path, clients, reps)


def section_throughput(sv: Servers, sides: list[Side], etcd_pid: int, n: int, clients: int,
                       client: str = "go", reps: int = 1) -> dict:
    """`reps` interleaved rounds: in each, every side creates n new ConfigMaps, then every side updates them
    (unconditional PUTs), the sides' order rotated by one each round so none always follows the same neighbour.
    A side's figure per verb is the median of its rounds (rate, p99, CPU per write); `runs` keeps every round."""
    for side in sides:
        asyncio.run(ensure_ns(sv.kube_side, f"dep-tp-{side.name}"))
    runs: dict[str, dict[str, list]] = {verb: {side.name: [] for side in sides} for verb in ("create", "update")}
    for rnd in range(reps):
        order = sides[rnd % len(sides):] + sides[:rnd % len(sides)]
        for verb in ("create", "update"):
            for side in order:
                path = f"/api/v1/namespaces/dep-tp-{side.name}/configmaps"
                if verb == "create":
                    ops = [("POST", path, orjson.dumps(sized_configmap(f"cm-{rnd}-{i:06d}", 1024,
                                                                       f"dep-tp-{side.name}"))) for i in range(n)]
                else:
                    ops = [("PUT", f"{path}/cm-{rnd}-{i:06d}", orjson.dumps(sized_configmap(
                        f"cm-{rnd}-{i:06d}", 1024, f"dep-tp-{side.name}", extra={"gen": "2"}))) for i in range(n)]
                r = measured(side, etcd_pid, lambda: run_ops(side, ops, clients, client))
                runs[verb][side.name].append(r)
                log(f"throughput {verb} on {side.name} (round {rnd + 1} of {reps}): {r['per_s']:,.0f}/s, "
                    f"p99 {r['p99_ms']:.0f} ms, server {r['server_cpu_s'] / r['n'] * 1e3:.2f} CPU-ms per write, "
                    f"etcd {r['etcd_cpu_s'] / r['n'] * 1e3:.2f}")
    return {verb: {name: median_of_rounds(rs) for name, rs in row.items()} for verb, row in runs.items()}


def median_of_rounds(rs: list[dict]) -> dict:
    """One side's rounds of one verb: medians of the rate, p99 and CPU per write; writes and statuses summed."""
    med = statistics.median
    out = {"per_s": med(r["per_s"] for r in rs), "p50_ms": med(r["p50_ms"] for r in rs),
           "p99_ms": med(r["p99_ms"] for r in rs), "n": sum(r["n"] for r in rs),
           "server_cpu_ms_per_write": med(r["server_cpu_s"] / r["n"] * 1e3 for r in rs),
           "etcd_cpu_ms_per_write": med(r["etcd_cpu_s"] / r["n"] * 1e3 for r in rs),
           "server_cpu_s": sum(r["server_cpu_s"] for r in rs), "etcd_cpu_s": sum(r["etcd_cpu_s"] for r in rs),
           "statuses": {}, "runs": rs}
    for r in rs:
        for code, k in r["statuses"].items():
            out["statuses"][code] = out["statuses"].get(code, 0) + k
    return out


def section_memory(sv: Servers, sides: list[Side], n: int, settle: bool = True) -> dict:
    load_configmaps(sv, sides, "dep-mem", "m", n)
    if settle:   # --quick reads memory at once (warm: entries not compressed yet)
        log("memory: waiting for our caches to compress their cold entries (75 s after the load)")
        time.sleep(80)
        cold(sides)
    out = {}
    for side in sides:
        row = {"memory_bytes": side.rss()}
        if side.name == "ours":
            row["pss_bytes"] = pss_bytes(side.pid)
        if isinstance(side, DeploymentSide):
            with urllib.request.urlopen(side.dbase + "/debug/residency", timeout=20) as r:
                rep = orjson.loads(r.read())
            row["processes"] = {p["name"]: p["pssBytes"] for p in rep["processes"]}
            row["supervisor_pss_bytes"] = rep["memory"]["supervisorPssBytes"]
            row["zygote_pss_bytes"] = rep["memory"].get("zygotePssBytes", 0)
        out[side.name] = row
        log(f"  {side.name}: {row['memory_bytes'] / 2**20:,.0f} MiB")
    return out


# --- report ----------------------------------------------------------------------------------------------------

def verdict(r: float | None, key: str) -> str:
    if r is None:
        return "n/a"
    op, v = TARGETS[key]
    ok = r >= v if op == ">=" else r <= v
    return f"{'met' if ok else 'missed'} ({op} {v})"


def table(doc: dict) -> str:
    rows = []
    names = ("ours", "deployment", "kube")

    def add(what: str, vals: dict, key: str, fmt: str, higher: bool, top: dict | None = None) -> None:
        d, k = vals.get("deployment"), vals.get("kube")
        r = ratio(d, k) if d is not None and k is not None else None
        shown, said = (f"{r:.2f}" if r is not None else "n/a"), verdict(r, key)
        if r is not None and top and top.get("deployment"):
            # The deployment's score is its ladder's top (a lower bound): so is the ratio, unless kube's is too.
            shown, said = ("n/a", "undecided: both passed the ladder's top step (raise --saturation-steps)") \
                if top.get("kube") else (f">= {r:.2f}", said if r >= TARGETS[key][1] else f"undecided (>= {r:.2f})")
        elif r is not None and top and top.get("kube"):
            shown, said = f"<= {r:.2f}", said if r < TARGETS[key][1] else f"undecided (<= {r:.2f})"
        rows.append([what] + [fmt.format(vals[x]) if vals.get(x) is not None else "-" for x in names] +
                    [shown, said])
    for name, sec in (doc.get("saturation") or {}).items():
        add(f"fan-out at saturation, {name} (deliveries/s)", sec["score"], "saturation", "{:,.0f}", True,
            sec.get("at_top"))
    if doc.get("lists"):
        add("20 concurrent consistent lists, 10,000 x 1 KB: p99 ms",
            {k: v["p99_ms"] for k, v in doc["lists"].items()}, "lists_p99", "{:,.0f}", False)
        rows.append(["  (p50 ms)"] + [f"{doc['lists'][x]['p50_ms']:,.0f}" if x in doc["lists"] else "-"
                                      for x in names] + ["", ""])
    if doc.get("biglists"):
        mb = min(v["bytes"] for v in doc["biglists"].values()) / 1e6
        add(f"20 concurrent consistent lists of {mb:,.0f} MB: p99 ms",
            {k: v["p99_ms"] for k, v in doc["biglists"].items()}, "biglists_p99", "{:,.0f}", False)
        rows.append(["  (p50 ms)"] + [f"{doc['biglists'][x]['p50_ms']:,.0f}" if x in doc["biglists"] else "-"
                                      for x in names] + ["", ""])
    for verb in ("create", "update"):
        if doc.get("throughput"):
            add(f"{verb}s/s, 16 keep-alive clients", {k: v["per_s"] for k, v in doc["throughput"][verb].items()},
                verb + "s", "{:,.0f}", True)
    if doc.get("memory"):
        add("memory at 20,000 x 1 KB ConfigMaps (MiB; deployment: sum of PSS)",
            {k: v["memory_bytes"] / 2**20 for k, v in doc["memory"].items()}, "memory", "{:,.0f}", False)
    return render(rows, ("", "ours, 1 process", f"ours, deployment ({doc['fronts']} fronts, {doc['shards']} shard(s))",
                         "kube", "deployment/kube", "target"))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.deployment", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sections", default="memory,saturation,lists,biglists,throughput",
                    help="comma-separated; they run in this order whatever the order given (memory first: it "
                         "reads whole-server memory, which the other sections' objects would add to)")
    ap.add_argument("--fronts", type=int, default=0,
                    help="the deployment's fronts (default: its own, the cores less its shards, at least 1)")
    ap.add_argument("--shards", type=int, default=0, help="the deployment's shards (default: its own, 1)")
    ap.add_argument("--saturation-reps", type=int, default=2)
    ap.add_argument("--saturation-watchers", default="100,1000",
                    help="comma-separated watcher counts, one ladder each (first rates: 50 writes/s at 100, 8 at "
                         "1,000, else 8,000 deliveries/s)")
    ap.add_argument("--saturation-steps", type=int, default=9,
                    help="steps per ladder, a factor of sqrt(2) apart (9: 8 -> 128 writes/s at 1,000 watchers; 11: "
                         "-> 256). A server that passes every step scores the top: a lower bound, said so")
    ap.add_argument("--big-list-reps", type=int, default=2, help="lists of 100 MB per client (biglists)")
    ap.add_argument("--tp-client", choices=("go", "python"), default="go",
                    help="who sends the writes: the compiled bench/go/writer, or forked Python processes")
    ap.add_argument("--tp-n", type=int, default=0, help="ConfigMaps each side creates and updates per round "
                                                           "(throughput; default 10,000, --quick 200)")
    ap.add_argument("--tp-reps", type=int, default=0, help="interleaved rounds of the throughput section, medians "
                                                           "compared (default 3, --quick 1)")
    ap.add_argument("--out", default="bench/out/deployment.json")
    p = ap.parse_args(argv)
    p.sections = [x.strip() for x in p.sections.split(",") if x.strip()]
    if p.quick:
        p.saturation = {"counts": {100: 50.0}, "steps": 2, "step_s": 3.0, "drain_s": 3.0, "reps": 1}
        p.list_n, p.list_reps, tp_n, tp_reps, p.mem_n, p.big_n = 500, 2, 200, 1, 1000, 20
    else:
        # bench.vs_upstream's ladders (rates all three servers sustain at first)
        starts = {100: 50.0, 1000: 8.0}
        counts = [int(x) for x in p.saturation_watchers.split(",") if x.strip()]
        p.saturation = {"counts": {w: starts.get(w, round(8000 / w, 1)) for w in counts},
                        "steps": p.saturation_steps, "step_s": 10.0, "drain_s": 10.0, "reps": p.saturation_reps}
        p.list_n, p.list_reps, tp_n, tp_reps, p.mem_n, p.big_n = 10_000, 5, 10_000, 3, 20_000, 1_000
    p.tp_n, p.tp_reps = p.tp_n or tp_n, p.tp_reps or tp_reps
    return p


def main(argv=None) -> int:
    import tempfile
    p = parse_args(argv)
    t0 = time.perf_counter()
    doc: dict = {"args": {k: v for k, v in vars(p).items() if k != "saturation"}, "cores": os.cpu_count()}
    with current_etcd() as etcd, tempfile.TemporaryDirectory(prefix="bench-deployment-") as tmp:
        sv = Servers(etcd.endpoint)
        dep = None
        try:
            sv.start_ours(tracemalloc=False)
            dep = start_deployment(sv, p.fronts or None, p.shards or None, os.path.join(tmp, "deployment"))
            rep = orjson.loads(urllib.request.urlopen(dep.dbase + "/debug/residency", timeout=20).read())
            doc["fronts"], doc["shards"] = rep["fronts"], rep["shards"]
            doc["versions"] = versions(etcd.endpoint, sv.ours.base, git=True)
            sides = [sv.ours_side, dep, sv.kube_side]
            if "memory" in p.sections:
                doc["memory"] = section_memory(sv, sides, p.mem_n, settle=not p.quick)
            if "saturation" in p.sections:
                doc["saturation"] = section_saturation(sv, sides, **p.saturation)
            if "lists" in p.sections:
                doc["lists"] = section_lists(sv, sides, etcd.pid, p.list_n, 20, p.list_reps)
            if "biglists" in p.sections:
                doc["biglists"] = section_biglists(sv, sides, etcd.pid, p.big_n, 20, p.big_list_reps)
            if "throughput" in p.sections:
                doc["throughput"] = section_throughput(sv, sides, etcd.pid, p.tp_n, 16, p.tp_client, p.tp_reps)
        finally:
            if dep is not None:
                stop_deployment(dep)
            sv.stop()
    doc["elapsed_s"] = time.perf_counter() - t0
    write_json(p.out, doc)
    print(table(doc))
    log(f"done in {doc['elapsed_s']:.0f} s; JSON in {p.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
