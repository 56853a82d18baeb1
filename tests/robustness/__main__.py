"""`python -m tests.robustness [--scenario NAME ...] [--seed N] [--seeds K | --seed-range A-B] [--duration S]
[--rate R] [--watch-cache true|false|resident|both|all] [--kind configmaps|widgets|both] [--jobs J]
[--soak SECONDS] [--json PATH]`: run scenarios, print the table per run and the summary per scenario (and, for
each failure, the violations with the excerpt of history that shows them), write every result as JSON.
Exit 1 if any failed."""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import sys

from tests.robustness.scenarios import (DEPLOYMENT_ONLY, SCENARIOS, compare_rss, explain, informer_limit, run_scenario, summary,
                                        table)
from tests.robustness.nodeplane import NODE_SCENARIOS, run_node_scenario
from tests.robustness.traffic import KINDS

# (watch cache, residency): residency True is one apiserver with --residency, "deployment" is python -m deployment
# (2 resident shards, 2 fronts); the front-kill and shard-kill faults run only there, whatever the mode asked.
DEPLOYMENT = (True, "deployment")
MODES = {"true": [(True, False)], "false": [(False, False)], "resident": [(True, True)], "deployment": [DEPLOYMENT],
         "both": [(True, False), (False, False)], "all": [(True, False), (False, False), (True, True), DEPLOYMENT]}
ROTATE = [(True, False), (False, False), (True, True)]   # --watch-cache rotate: seed n runs ROTATE[n % 3]


def _one(job: tuple) -> dict:
    name, seed, duration, rate, wc, res, kind, rss_every = job
    if name in NODE_SCENARIOS:      # the node plane (tests/robustness/nodeplane.py): its own processes and traffic
        return asyncio.run(run_node_scenario(name, seed=seed, duration=max(duration, 40.0)))
    return asyncio.run(run_scenario(name, seed=seed, duration=duration, rate=rate, watch_cache=wc,
                                    residency=res is True, deployment=res == "deployment", kind=KINDS[kind],
                                    rss_every=rss_every))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.robustness", description=__doc__)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS + NODE_SCENARIOS + ["all"],
                    help="a scenario (repeatable); default: all. The node plane's (" + ", ".join(NODE_SCENARIOS)
                         + ": kubelets through the node tier, Leases on their own etcd, kube-controller-manager "
                         "judging; at least 40 s each) run once per seed, whatever the mode and kind")
    ap.add_argument("--seed", type=int, default=1, help="first seed (the fault's moment and the traffic)")
    ap.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed on")
    ap.add_argument("--seed-range", help="A-B: seeds A to B (instead of --seed/--seeds)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of traffic (the fault's traffic after "
                                                                  "extends it until the server recovers)")
    ap.add_argument("--rate", type=float, default=100.0, help="target requests per second, all clients together")
    ap.add_argument("--watch-cache", choices=list(MODES) + ["rotate"], default="true",
                    help="true: cache on; false: --watch-cache=false; resident: cache on with --residency (one of "
                         "two shards); deployment: python -m deployment (2 shards, 2 fronts; front-kill and shard-kill "
                         "always run there); both: true and false; all: all four; rotate: one of the first three per "
                         "seed (seed mod 3)")
    ap.add_argument("--kind", choices=list(KINDS) + ["both", "rotate"], default="configmaps",
                    help="the resource written: ConfigMaps, or widgets (a custom resource; its CRD is created); both; "
                         "rotate: ConfigMaps for even seeds, widgets for odd ones")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each its own etcd and apiserver)")
    ap.add_argument("--soak", type=float, default=0.0,
                    help="instead of the scenarios: one run of mixed traffic this many seconds long on the cache "
                         "path (scenario none) with the apiserver's RSS sampled every 10 s")
    ap.add_argument("--json", default=os.path.join("bench", "out", "robustness.json"), help="where to write results")
    ap.add_argument("--report", nargs="+", metavar="JSON",
                    help="run nothing: print the tables of earlier runs' JSON files (the RSS comparison and the "
                         "informer's limit applied again, as they are now)")
    a = ap.parse_args(argv)
    if a.report:
        results = [r for path in a.report for r in json.load(open(path))]
        for r in results:
            # the RSS comparison and the informer's limit are redone with the current rules
            r["violations"] = [v for v in r.get("violations", []) if v["checker"] != "memory" and not (
                v["checker"] == "informer" and r.get("informer_converged_s") is not None
                and r["informer_converged_s"] <= informer_limit(r.get("apiserver_restarts", 0)))]
            r["other_violations"] = sum(1 for v in r["violations"]
                                        if v["checker"] not in ("writes", "reads", "watch", "linearizability"))
            r["passed"] = not r["violations"]
        compare_rss(results)
        print(table(results))
        print()
        print(summary(results))
        return 0 if all(r["passed"] for r in results) else 1
    names = SCENARIOS + NODE_SCENARIOS if not a.scenario or "all" in a.scenario else a.scenario
    if a.seed_range:
        lo, _, hi = a.seed_range.partition("-")
        seeds = list(range(int(lo), int(hi or lo) + 1))
    else:
        seeds = list(range(a.seed, a.seed + a.seeds))
    def kinds_of(seed: int) -> list[str]:
        """rotate: ConfigMaps for even seeds, the custom resource for odd ones."""
        return list(KINDS) if a.kind == "both" else [list(KINDS)[seed % 2]] if a.kind == "rotate" else [a.kind]

    def modes(seed: int) -> list:
        return [ROTATE[seed % 3]] if a.watch_cache == "rotate" else MODES[a.watch_cache]
    if a.soak:
        jobs = [("none", s, a.soak, a.rate, wc, res, k, 10.0) for s in seeds for wc, res in modes(s) for k in kinds_of(s)]
    else:
        jobs = [(n, s, a.duration, a.rate, wc, res, k, 10.0) for s in seeds for n in names if n not in NODE_SCENARIOS
                for wc, res in ([DEPLOYMENT] if n in DEPLOYMENT_ONLY else modes(s)) for k in kinds_of(s)]
        jobs += [(n, s, a.duration, a.rate, True, "node-plane", "configmaps", 10.0) for s in seeds for n in names
                 if n in NODE_SCENARIOS]
    results = []

    def report(r: dict) -> None:
        results.append(r)
        print(f"{r['scenario']} seed {r['seed']}: {'pass' if r['passed'] else 'FAIL'} ({r['wall_s']} s)",
              file=sys.stderr, flush=True)
        if not r["passed"]:
            print(explain(r), file=sys.stderr, flush=True)
        _write(a.json, results)   # as it goes: a long run interrupted keeps what it did

    if a.jobs > 1:
        with concurrent.futures.ProcessPoolExecutor(a.jobs) as ex:
            for r in ex.map(_one, jobs):
                report(r)
    else:
        for j in jobs:
            report(_one(j))
    compare_rss(results)
    print(table(results))
    print()
    print(summary(results))
    _write(a.json, results)
    print(f"JSON: {a.json}")
    return 0 if all(r["passed"] for r in results) else 1


def _write(path: str, results: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1, default=str)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    sys.exit(main())
