"""One run of a recipe: start its processes, drive its workload through a measured window, judge every SLI
against its SLO, check the workload's correctness, report the load offered and achieved, the resources each
process used and which saturated first, write JSON, and stop everything it started.

`find_capacity` repeats runs at growing sizes (doubling, then bisecting, a bounded number of steps) for the
largest size at which every SLO passes, every check holds and the offered load is achieved.
"""
from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
import uuid

from . import slo
from .client import AsyncClient, Recorder, metrics_text
from .processes import cpu_seconds, memory_kib
from .spec import Recipe
from .topology import ROOT, Topology
from .workloads import make

SATURATED = 0.85        # a process busy this share of its capacity is saturated
ACHIEVED = 0.90         # the offered load counts as achieved at this share


async def scrape_slis(client: AsyncClient, topo: Topology) -> dict:
    """The SLI histograms of every server the clients reach: each apiserver (a deployment's fronts, from its
    aggregated /metrics), and the Lease renewals the node tiers answer themselves."""
    out: dict = {}
    if topo.deployment_metrics:
        out = slo.sli_buckets(await metrics_text(client, topo.deployment_metrics), process_prefix="front")
    else:
        for a in topo.apiservers:
            out = slo.merge(out, slo.sli_buckets(await metrics_text(client, a.url)))
    for t in topo.tiers:
        out = slo.merge(out, {k: v for k, v in slo.sli_buckets(await metrics_text(client, t.url)).items()
                              if k[0] == "leases"})
    return out


def versions(topo: Topology) -> dict:
    """What ran: each etcd store's version and the control plane's /version."""
    import urllib.request
    out = {}
    for name, e in topo.stores.items():
        try:
            with urllib.request.urlopen(e.endpoint + "/version", timeout=5) as r:
                out[f"etcd-{name}"] = json.loads(r.read()).get("etcdserver")
        except OSError as err:
            out[f"etcd-{name}"] = f"unavailable: {err}"
    try:
        with urllib.request.urlopen(topo.api.url + "/version", timeout=5, context=topo.api.ssl()) as r:
            out["apiserver"] = json.loads(r.read()).get("gitVersion")
    except OSError as err:
        out["apiserver"] = f"unavailable: {err}"
    return out


def machine() -> dict:
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        model = ""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return {"cores": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kib / 2**20, 1),
            "python": platform.python_version(), "git_commit": commit}


async def run(recipe: Recipe, *, implementation: str = "ours", scale: str = "small", window_s: float | None = None,
              out: str | None = None, keep_logs: bool = False, say=print) -> dict:
    size = recipe.size(scale)
    window = window_s or recipe.window(scale)
    run_id = uuid.uuid4().hex[:8]
    run_dir = tempfile.mkdtemp(prefix=f"recipe-{recipe.name}-")
    say(f"recipe {recipe.name} ({recipe.title}) on {implementation}: {recipe.size_name}={size:g}, "
        f"window {window:g} s; logs in {run_dir}")
    doc: dict = {"recipe": recipe.name, "title": recipe.title, "rung": recipe.rung, "axis": recipe.axis,
                 "seams": recipe.seams, "implementation": implementation, "scale": scale,
                 "size": {recipe.size_name: size}, "window_s": window, "run_id": run_id, "machine": machine(),
                 "budget": recipe.budget, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    topo = Topology(recipe, implementation, run_dir, say=say)
    client = None
    ok = False
    try:
        t_start = time.monotonic()
        await asyncio.to_thread(topo.start)
        doc["start_s"] = round(time.monotonic() - t_start, 1)
        say(f"  every process ready in {doc['start_s']} s; control plane at {topo.api.url}")
        doc["versions"] = versions(topo)
        rec = Recorder()
        client = AsyncClient(topo.api, rec)
        parts = [make(p, size, topo, client, run_id, window, say=say) for p in recipe.workload]
        for p in parts:
            say(f"  preparing {p.kind}")
            await p.prepare()
        topo.check_alive()
        say(f"  measuring for {window:g} s")
        # the set-up's own calls are not part of the window
        rec.samples.clear()
        rec.errors.clear()
        cpu0 = {m: cpu_seconds(m[1]) for _, m in members_of(topo)}
        self_cpu0 = cpu_seconds(os.getpid())
        t0 = time.monotonic()
        scrapes = [(t0, await scrape_slis(client, topo))]
        stop = asyncio.Event()
        runs = [asyncio.create_task(p.run(stop)) for p in parts]

        async def boundaries():
            nxt = t0 + slo.UPSTREAM_WINDOW_S
            while nxt < t0 + window - slo.UPSTREAM_WINDOW_S / 2:
                await asyncio.sleep(nxt - time.monotonic())
                scrapes.append((time.monotonic(), await scrape_slis(client, topo)))
                nxt += slo.UPSTREAM_WINDOW_S
        bt = asyncio.create_task(boundaries())
        done, _ = await asyncio.wait(runs, timeout=window)
        for t in done:   # a workload that failed during the window
            t.result()
        stop.set()
        bt.cancel()
        t1 = time.monotonic()
        scrapes.append((t1, await scrape_slis(client, topo)))
        members = members_of(topo)
        cpu1 = {m: cpu_seconds(m[1]) for _, m in members}
        self_cpu = cpu_seconds(os.getpid()) - self_cpu0
        mem = {m: memory_kib(m[1]) for _, m in members}
        await asyncio.gather(*runs)
        topo.check_alive()
        doc["checks"] = {p.kind: await p.check() for p in parts}
        server_errors = {k: n for k, n in rec.errors.items() if int(k.rsplit(" ", 1)[1]) >= 500}
        doc["checks"]["client"] = {"no call answered 5xx": {
            "ok": not server_errors, "detail": ", ".join(f"{k}: {n}" for k, n in server_errors.items()) or "none"}}
        extra: dict = {}
        for p in parts:
            for k, v in p.extra.items():
                extra.setdefault(k, []).extend(v)
        wanted = {s for p in parts for s in p.slis}
        doc["slis"] = slo.evaluate(rec.samples, scrapes, t0, t1, extra, wanted)
        doc["client"] = {"calls": len(rec.samples), "errors": rec.errors, "throttled_429": rec.throttled}
        doc["load"] = {p.kind: p.load() for p in parts}
        doc["resources"] = resources(topo, members, cpu0, cpu1, mem, t1 - t0, self_cpu)
        doc["verdict"] = verdict(doc)
        ok = True
    finally:
        if client is not None:
            await client.close()
        await asyncio.to_thread(topo.stop)
        say(f"  stopped every process ({len(topo.children)} started)")
        if ok and not keep_logs:
            shutil.rmtree(run_dir, ignore_errors=True)
        elif not ok:
            say(f"  the run failed; logs kept in {run_dir}")
            say_log_tails(run_dir, say)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(doc, f, indent=2)
    return doc


def say_log_tails(run_dir: str, say, lines: int = 12) -> None:
    """The last lines of every process log of a failed run (a deployment's children's too), so a failure in
    CI, where the run directory is gone with the machine, still says which process stopped and why."""
    for root, _, files in sorted(os.walk(run_dir)):
        for name in sorted(f for f in files if f.endswith(".log")):
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.path.getsize(path) - 8000))
                    tail = f.read().decode(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            say(f"  --- {os.path.relpath(path, run_dir)} (last {len(tail)} lines)")
            for t in tail:
                say(f"  | {t}")


def members_of(topo: Topology) -> list[tuple]:
    """(kind or Child, (label, pid, is Python)) for every process of the run: the children, then the stores."""
    out = [(c, m) for c in topo.children for m in c.members()]
    out += [("etcd", (f"etcd-{n}", e._proc.pid, False)) for n, e in topo.stores.items() if e._proc]
    return out


def resources(topo: Topology, members, cpu0: dict, cpu1: dict, mem: dict, window: float,
              driver_cpu: float) -> dict:
    """Per process (a deployment's supervisor, shards and fronts one by one; each etcd store): cores used over
    the window, busy share of its capacity (one core for a Python process, the machine for a Go one), PSS and
    peak RSS; totals; which process saturated first."""
    cores = os.cpu_count() or 1
    procs = {}
    for c, m in members:
        label, pid, python = m
        if m not in cpu0:   # started during the window (a restart): counted from its start
            cpu0[m] = 0.0
        used = (cpu1.get(m, 0.0) - cpu0[m]) / max(window, 1e-9)
        cap = 1.0 if python else float(cores)
        mm = mem.get(m, {})
        procs[label] = {"kind": c if isinstance(c, str) else c.kind, "pid": pid, "cores": round(used, 3), "busy": round(used / cap, 3),
                        "capacity_cores": cap, "pss_mib": round(mm.get("pss_kib", 0) / 1024, 1),
                        "peak_rss_mib": round(mm.get("hwm_kib", 0) / 1024, 1)}
    driver = {"cores": round(driver_cpu / max(window, 1e-9), 3)}
    driver["busy"] = driver["cores"]
    busiest = max(((n, p) for n, p in procs.items() if p["busy"] is not None), key=lambda x: x[1]["busy"],
                  default=(None, None))
    sat = busiest[0] if busiest[1] and busiest[1]["busy"] >= SATURATED else None
    total_cores = sum(p["cores"] or 0 for p in procs.values())
    return {"processes": procs, "driver": driver,
            "total": {"cores": round(total_cores, 3), "pss_mib": round(sum(p["pss_mib"] for p in procs.values()), 1)},
            "busiest": busiest[0], "saturated": sat,
            "driver_saturated": driver["busy"] >= SATURATED}


def verdict(doc: dict) -> dict:
    failed_slos = {n: s for n, s in doc["slis"].items() if s["verdict"] == "fail"}
    unmeasured = [n for n, s in doc["slis"].items() if s["verdict"] == "not measured"]
    failed_checks = [f"{k}: {n}" for k, cs in doc["checks"].items() for n, c in cs.items() if not c["ok"]]
    short = {k: v for k, v in doc["load"].items() if v.get("offered") and v["achieved"] < ACHIEVED * v["offered"]}
    res = doc["resources"]
    by_how_much = {}
    for n, s in failed_slos.items():
        worst = max((g["p99_s"] for side in ("client", "server") for g in s.get(side, {}).values()
                     if g.get("pass") is False), default=None)
        if worst is not None:
            by_how_much[n] = f"p99 {worst:.3f} s against {s['bound_s']} s ({worst / s['bound_s']:.2f}x)"
    limited_by = None
    if short or failed_slos:
        sat = res["processes"].get(res["saturated"] or "", {})
        if sat.get("kind") == "kwok":   # kwok is the nodes' load generator, not part of the recipe's control plane
            limited_by = f"the load generator (kwok, busy {sat['busy']:.0%})"
        elif res["saturated"]:
            limited_by = f"process {res['saturated']} (busy {sat['busy']:.0%})"
        elif res["driver_saturated"]:
            limited_by = "the load generator (the runner's own process is saturated)"
        else:
            cores = os.cpu_count() or 1
            used = res["total"]["cores"] + res["driver"]["cores"]
            limited_by = (f"the machine: {used:.2f} of {cores} cores busy, no single process saturated"
                          if used >= SATURATED * cores else
                          f"no process and not the machine ({used:.2f} of {cores} cores busy): latency, not CPU")
    return {"pass": not failed_slos and not failed_checks and not short and not unmeasured,
            "slos_failed": by_how_much or {n: "fail" for n in failed_slos}, "slis_not_measured": unmeasured,
            "checks_failed": failed_checks, "load_not_achieved": list(short), "limited_by": limited_by}


def report(doc: dict) -> str:
    lines = [f"recipe {doc['recipe']} on {doc['implementation']}: "
             f"{', '.join(f'{k}={v:g}' for k, v in doc['size'].items())}, window {doc['window_s']:g} s"]
    lines.append("  SLIs (p99, worst 5-minute window; client side / servers' apiserver_request_sli_duration_seconds):")
    for name, s in doc["slis"].items():
        def fmt(side):
            g = s.get(side) or {}
            return ", ".join(f"{k or name} {v['p99_s']:.3f}s" for k, v in sorted(g.items())
                             if v.get("p99_s") is not None) or "-"
        bound = f"<= {s['bound_s']} s" if s["bound_s"] is not None else "no upstream SLO"
        lines.append(f"    {name:<15} {s['verdict'].upper():<12} {bound:<16} client: {fmt('client')}")
        if "server" in s:
            lines.append(f"    {'':<15} {'':<12} {'':<16} server: {fmt('server')}")
    lines.append("  checks:")
    for kind, cs in doc["checks"].items():
        for n, c in cs.items():
            lines.append(f"    {'ok  ' if c['ok'] else 'FAIL'} {kind}: {n} ({c['detail']})")
    lines.append("  load:")
    for kind, ld in doc["load"].items():
        lines.append(f"    {kind}: offered {ld.get('offered')} {ld.get('unit')}, achieved {ld.get('achieved')}")
    res = doc["resources"]
    lines.append(f"  resources: {res['total']['cores']} cores, {res['total']['pss_mib']} MiB PSS in all; "
                 f"driver {res['driver']['cores']} cores; busiest {res['busiest']}; saturated: {res['saturated']}")
    for n, p in res["processes"].items():
        cores = "-" if p["cores"] is None else f"{p['cores']:.2f}"
        lines.append(f"    {n:<26} cores {cores:>5}  PSS {p['pss_mib']:>7.1f} MiB  peak RSS {p['peak_rss_mib']:>7.1f} MiB")
    v = doc["verdict"]
    lines.append(f"  verdict: {'PASS' if v['pass'] else 'FAIL'}"
                 + "".join(f"\n    SLO {k}: {m}" for k, m in v["slos_failed"].items())
                 + "".join(f"\n    check {c}" for c in v["checks_failed"])
                 + "".join(f"\n    load not achieved: {k}" for k in v["load_not_achieved"])
                 + "".join(f"\n    SLI not measured: {k}" for k in v["slis_not_measured"])
                 + (f"\n    limited by {v['limited_by']}" if v["limited_by"] else ""))
    return "\n".join(lines)


async def find_capacity(recipe: Recipe, *, implementation: str = "ours", start: float | None = None,
                        max_steps: int = 6, window_s: float | None = None, out: str | None = None,
                        say=print) -> dict:
    """Double from `start` (the small size) while every run passes, then bisect between the last pass and the
    first failure; at most `max_steps` runs. A failure whose offered load was not achieved while the load
    generator, not a server, was saturated is reported as a limit of the generator, not of the recipe."""
    size = start or recipe.sizes["small"]
    passed, failed = None, None
    steps = []
    for _ in range(max_steps):
        try:
            doc = await run(recipe, implementation=implementation, scale=str(size),
                            window_s=window_s or recipe.window("full"), say=say)
        except Exception as e:  # noqa: BLE001  (a size the recipe could not even set up is a failure)
            say(f"  size {size:g} could not run: {e}")
            doc = {"verdict": {"pass": False, "limited_by": f"the run failed: {str(e)[:500]}"},
                   "load": {}, "resources": {"total": {}}, "slis": {}, "error": str(e)[:2000]}
        else:
            say(report(doc))
        steps.append({"size": size, "pass": doc["verdict"]["pass"], "verdict": doc["verdict"],
                      "load": doc["load"], "resources": doc["resources"]["total"], "slis": {
                          n: s["verdict"] for n, s in doc["slis"].items()}, "doc": doc})
        if doc["verdict"]["pass"]:
            passed = size
        else:
            failed = size
            if (doc["verdict"]["limited_by"] or "").startswith("the load generator"):
                break
        if failed is None:
            size *= 2
        else:
            lo = passed or 0
            if failed - lo <= max(1, 0.1 * failed):
                break
            size = round((lo + failed) / 2)
    last_fail = next((s for s in reversed(steps) if not s["pass"]), None)
    res = {"recipe": recipe.name, "implementation": implementation, "size_name": recipe.size_name,
           "window_s": window_s or recipe.window("full"), "machine": machine(),
           "capacity": passed, "first_failure": failed,
           "limited_by": last_fail["verdict"]["limited_by"] if last_fail else "not reached in the steps allowed",
           "steps": steps}
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=2)
    return res
