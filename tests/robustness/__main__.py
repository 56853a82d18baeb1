"""`python -m tests.robustness [--scenario NAME ...] [--seed N] [--seeds K] [--duration S] [--rate R]
[--watch-cache true|false|both] [--kind configmaps|widgets|both] [--json PATH]`: run scenarios, print the
table (and, for each failure, the violations with the excerpt of history that shows them), write every
result as JSON. Exit 1 if any failed (known problems included)."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from tests.robustness.scenarios import SCENARIOS, explain, run_scenario, table
from tests.robustness.traffic import KINDS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.robustness", description=__doc__)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS + ["all"],
                    help="a scenario (repeatable); default: all")
    ap.add_argument("--seed", type=int, default=1, help="first seed (the fault's moment and the traffic)")
    ap.add_argument("--seeds", type=int, default=1, help="how many seeds from --seed on")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of traffic (the fault's traffic after "
                                                                  "extends it until the server recovers)")
    ap.add_argument("--rate", type=float, default=100.0, help="target requests per second, all clients together")
    ap.add_argument("--watch-cache", choices=["true", "false", "both"], default="true")
    ap.add_argument("--kind", choices=list(KINDS) + ["both"], default="configmaps",
                    help="the resource written: ConfigMaps, or widgets (a custom resource; its CRD is created)")
    ap.add_argument("--json", default=os.path.join("bench", "out", "robustness.json"), help="where to write results")
    a = ap.parse_args(argv)
    names = SCENARIOS if not a.scenario or "all" in a.scenario else a.scenario
    caches = {"true": [True], "false": [False], "both": [True, False]}[a.watch_cache]
    kinds = list(KINDS.values()) if a.kind == "both" else [KINDS[a.kind]]
    results = []
    for seed in range(a.seed, a.seed + a.seeds):
        for name in names:
            for wc in caches:
                for kind in kinds:
                    r = asyncio.run(run_scenario(name, seed=seed, duration=a.duration, rate=a.rate, watch_cache=wc,
                                                 kind=kind))
                    results.append(r)
                    print(f"{r['scenario']} seed {seed}: {'pass' if r['passed'] else 'FAIL'} ({r['wall_s']} s)",
                          file=sys.stderr, flush=True)
                    if not r["passed"]:
                        print(explain(r), file=sys.stderr, flush=True)
    print(table(results))
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    with open(a.json, "w") as f:
        json.dump(results, f, indent=1, default=str)
    print(f"JSON: {a.json}")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
