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
            if state and state.get("objects"):
                entry["bytes_per_object"] = best["doc"].get("state_bytes_per_object")
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
                    bpo = c.get("bytes_per_object") or 1024.0
                    cap = cap * bpo / 1e9
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
    n = len(r.stores)
    for p in r.processes:
        if p.kind == "deployment":
            n += 1 + int(p.options.get("shards", 1)) + int(p.options.get("fronts", 2))
        else:
            n += p.count
    return n
