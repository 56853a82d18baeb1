"""Which recipe carries a cluster of a given shape, answered from capacities measured on this machine
(`docs/recipes/capacity-<recipe>-<implementation>.json`, written by `python -m recipes run NAME --find-capacity
--out ...`), never extrapolated silently: a demand beyond every measured capacity is said to be beyond.

A cluster's shape has three axes, each carried by the recipes whose workload drives it:
* nodes: a recipe with a `nodes` workload, its capacity in nodes;
* writes per second: a `churn` workload, its capacity in creates/s (each created object is also deleted);
* state: a `state` workload, its capacity in objects; GB are converted at the recipe's measured bytes per object.
"""
from __future__ import annotations

import glob
import json
import os

from . import spec
from .topology import ROOT

MEASURED = os.path.join(ROOT, "docs", "recipes")
AXIS_OF = {"nodes": "nodes", "creates_per_second": "writes", "objects": "state"}


def measured(directory: str = MEASURED) -> dict[str, dict[str, dict]]:
    """recipe -> implementation -> {capacity, size_name, limited_by, cores, pss_mib, bytes_per_object}."""
    out: dict[str, dict[str, dict]] = {}
    for path in sorted(glob.glob(os.path.join(directory, "capacity-*.json"))):
        with open(path) as f:
            doc = json.load(f)
        best = next((s for s in doc["steps"] if s["size"] == doc["capacity"]), None)
        entry = {"capacity": doc["capacity"], "size_name": doc["size_name"], "limited_by": doc["limited_by"],
                 "first_failure": doc["first_failure"], "file": os.path.relpath(path, ROOT)}
        if best:
            entry["cores"] = best["resources"]["cores"]
            entry["pss_mib"] = best["resources"]["pss_mib"]
            state = best["doc"]["load"].get("state")
            if state and state.get("bytes_per_object"):
                entry["bytes_per_object"] = state["bytes_per_object"]
        out.setdefault(doc["recipe"], {})[doc["implementation"]] = entry
    return out


def answer(nodes: int = 0, writes_per_second: float = 0.0, state_gb: float = 0.0,
           directory: str = MEASURED) -> dict:
    caps = measured(directory)
    recipes = {r.name: r for r in spec.load_all()}
    demand = {"nodes": nodes, "writes": writes_per_second, "state": state_gb}
    lines = [f"cluster: {nodes} nodes, {writes_per_second:g} writes/s, {state_gb:g} GB of state"]
    picks = {}
    for axis, want in demand.items():
        if not want:
            continue
        cands = []
        for name, by_impl in caps.items():
            r = recipes.get(name)
            if r is None:
                continue
            for impl, c in by_impl.items():
                if AXIS_OF.get(c["size_name"]) != axis or c["capacity"] is None:
                    continue
                cap = c["capacity"]
                if axis == "state":
                    if not c.get("bytes_per_object"):
                        continue
                    cap = cap * c["bytes_per_object"] / 1e9   # objects -> GB at the measured JSON size
                cands.append((cap, r.rung, name, impl, c))
        fitting = sorted((x for x in cands if x[0] >= want), key=lambda x: (x[1] or 99, x[4].get("cores") or 0))
        if fitting:
            cap, rung, name, impl, c = fitting[0]
            picks[axis] = {"recipe": name, "implementation": impl, "capacity": cap, "processes": _procs(recipes[name]),
                           "cores": c.get("cores"), "pss_mib": c.get("pss_mib"), "file": c["file"]}
            lines.append(f"  {axis}: {name} on {impl} (measured capacity {cap:g}; {picks[axis]['processes']} "
                         f"processes, {c.get('cores')} cores, {c.get('pss_mib')} MiB PSS at that size)")
        elif cands:
            best = max(cands, key=lambda x: x[0])
            picks[axis] = {"recipe": None, "beyond_measured": True, "largest_measured": best[0], "by": best[2]}
            lines.append(f"  {axis}: {want:g} is beyond what was measured on this machine (largest: {best[0]:g} "
                         f"by {best[2]} on {best[3]}); no recipe is claimed")
        else:
            picks[axis] = {"recipe": None, "measured": False}
            lines.append(f"  {axis}: no capacity measured yet for this axis (docs/recipes/capacity-*.json)")
    return {"demand": demand, "picks": picks, "text": "\n".join(lines)}


def _procs(r: spec.Recipe) -> int:
    """Processes a recipe runs: etcd stores, apiservers (and their balancer), a deployment's supervisor, shards
    and fronts, tiers, controllers, kwok."""
    n = len(r.stores)
    for p in r.processes:
        if p.kind == "deployment":
            n += 1 + int(p.options.get("shards", 1)) + int(p.options.get("fronts", 2))
        else:
            n += p.count + (p.kind == "apiserver" and p.count > 1)   # N apiservers: the balancer in front
    return n


def ladder(directory: str = MEASURED) -> str:
    """The README's table, from the measured capacities: per recipe and implementation the largest size that
    passed every SLO and check with its load achieved, the first size that did not and why, and the resources
    at that capacity; then each process kind's cost there (cores and MiB PSS, per 1,000 of the recipe's unit)."""
    caps = measured(directory)
    rows = ["| recipe | rung / axis | runs on | capacity here | first failure | limited by | processes | cores | "
            "PSS (MiB) |", "|---|---|---|---|---|---|---|---|---|"]
    costs = ["| recipe | runs on | process kind | count | cores | PSS (MiB) | cores per 1,000 | MiB per 1,000 |",
             "|---|---|---|---|---|---|---|---|"]
    for r in spec.load_all():
        for impl, c in sorted(caps.get(r.name, {}).items()):
            place = f"rung {r.rung}" if r.rung else f"{r.axis} axis"
            cap = "none passed" if c["capacity"] is None else f"{c['capacity']:g} {r.size_name}"
            if c["capacity"] is not None and c["first_failure"] is None:
                cap = "at least " + cap   # every size tried passed: a lower bound
            fail = "-" if c["first_failure"] is None else f"{c['first_failure']:g}"
            rows.append(f"| {r.name} | {place} | {impl} | {cap} | {fail} | {c['limited_by'] or '-'} | "
                        f"{_procs(r)} | {c.get('cores', '-')} | {c.get('pss_mib', '-')} |")
            for kind, k in kind_costs(directory, r.name, impl).items():
                per = 1000.0 / c["capacity"] if c["capacity"] else 0.0
                costs.append(f"| {r.name} | {impl} | {kind} | {k['count']} | {k['cores']:.2f} | {k['pss_mib']:.0f} | "
                             f"{k['cores'] * per:.3f} | {k['pss_mib'] * per:.0f} |")
    return "\n".join(rows) + "\n\n" + "\n".join(costs)


def kind_costs(directory: str, recipe: str, impl: str) -> dict[str, dict]:
    """Each process kind's cores and PSS in the run at the measured capacity (summed over its processes)."""
    path = os.path.join(directory, f"capacity-{recipe}-{impl}.json")
    with open(path) as f:
        doc = json.load(f)
    best = next((s for s in doc["steps"] if s["size"] == doc["capacity"]), None)
    out: dict[str, dict] = {}
    if not best:
        return out
    for name, p in best["doc"]["resources"]["processes"].items():
        kind = p["kind"] if "/" not in name else name.split("/")[1].rstrip("0123456789").rstrip("-")
        k = out.setdefault(kind, {"count": 0, "cores": 0.0, "pss_mib": 0.0})
        k["count"] += 1
        k["cores"] += p["cores"] or 0.0
        k["pss_mib"] += p["pss_mib"]
    return out
