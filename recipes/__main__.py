"""`python -m recipes list | run NAME | index | manifests NAME`.

    python -m recipes list
    python -m recipes run NAME [--scale small|full|N] [--implementation ours|kube] [--window S] [--out FILE]
                               [--find-capacity [--max-steps K]] [--keep-logs]
    python -m recipes up NAME [--implementation ours|kube] [--dir DIR] [--port P] [--etcd-servers URL]
                              [--shards K] [--fronts N] [--without KIND]... [--apiserver-flag FLAG]...
    python -m recipes ladder
    python -m recipes index --nodes N [--writes-per-second W] [--state-gb G]
    python -m recipes manifests NAME [--image IMAGE] [--namespace NS] [--out DIR|-]

`run` starts every process of the recipe on loopback (building the stock binaries it needs with tools/build_*.py
the first time), drives its workload, prints each SLI against its SLO, the load offered and achieved, the
resources each process used and which saturated first, writes JSON (--out), and stops everything it started.
Exit status: 0 when the run completed (whatever the verdict; --strict: only when it passed), 1 when it could not
run.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys

from . import spec


def cmd_list(_a) -> int:
    from .index import measured
    caps = measured()
    print(f"{'recipe':<20} {'rung':<5} {'axis':<6} {'seams':<7} {'runs on':<10} {'size':<22} processes")
    for r in spec.load_all():
        procs = ", ".join(f"{p.kind}" + (f" x{p.count}" if p.count > 1 else "")
                          + (f" ({p.options.get('shards')} shards, {p.options.get('fronts')} fronts)"
                             if p.kind == "deployment" else "") for p in r.processes)
        stores = f"etcd x{len(r.stores)}"
        size = f"{r.size_name} {r.sizes['small']:g}/{r.sizes['full']:g}"
        print(f"{r.name:<20} {r.rung or '-':<5} {r.axis:<6} {','.join(map(str, r.seams)) or '-':<7} "
              f"{'+'.join(r.implementations):<10} {size:<22} {stores}, {procs}")
        for impl, c in sorted(caps.get(r.name, {}).items()):
            print(f"{'':<20} measured on {impl}: capacity {c['capacity']} {r.size_name} ({c['limited_by'] or ''})")
    return 0


def interruptible(coro):
    """Run `coro` with SIGTERM and SIGINT cancelling it, so the runner's own clean-up stops every process it
    started (they run in sessions of their own and would outlive it), whether or not the shell that started
    the runner ignores SIGINT (as it does for a background job)."""
    import signal

    async def main():
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        return await coro
    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        print("interrupted: every process the run started is stopped", file=sys.stderr)
        raise SystemExit(130)


def cmd_run(a) -> int:
    from .processes import StartError
    from .runner import find_capacity, report, run
    try:
        recipe = spec.load(a.name)
    except spec.RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    try:
        if a.find_capacity:
            res = interruptible(find_capacity(recipe, implementation=a.implementation, max_steps=a.max_steps,
                                            start=float(a.scale) if a.scale not in ("small", "full") else None,
                                            window_s=a.window, out=a.out))
            print(f"capacity of {recipe.name} on {a.implementation}: {res['capacity']} {recipe.size_name} "
                  f"(first failure at {res['first_failure']}; limited by {res['limited_by']})")
            return 0
        doc = interruptible(run(recipe, implementation=a.implementation, scale=a.scale, window_s=a.window, out=a.out,
                              keep_logs=a.keep_logs))
    except (StartError, spec.RecipeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(report(doc))
    if a.out:
        print(f"JSON: {a.out}")
    return 0 if (doc["verdict"]["pass"] or not a.strict) else 2


def cmd_up(a) -> int:
    """Start a recipe's processes and keep them running until SIGTERM or Ctrl-C (no workload): the one launcher
    of a local topology (`python -m shardslice up` is a name for `recipes up slice`). Everything is started from
    the main thread, so every process dies with the launcher, even one killed with SIGKILL."""
    import os
    import signal
    import tempfile
    import time

    from cache.cacher import progress_requests_supported
    from storage.embedded import find_etcd

    from .processes import StartError
    from .topology import Topology
    try:
        recipe = spec.customized(spec.load(a.name), shards=a.shards, fronts=a.fronts, without=tuple(a.without),
                                 apiserver_flags=tuple(a.apiserver_flag))
    except spec.RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    run_dir = a.dir or tempfile.mkdtemp(prefix=f"recipe-{recipe.name}-")
    os.makedirs(run_dir, exist_ok=True)
    print(f"recipe {recipe.name} ({recipe.title}) on {a.implementation}; logs in {run_dir}", flush=True)
    try:
        etcd = None if a.etcd_servers else find_etcd()   # no Go needed: $ETCD_BIN, else the newest found
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if etcd is not None:
        print(f"etcd: {etcd.path} ({etcd.version or 'version unknown'}, {etcd.source})"
              + ("; before 3.5.13, consistent reads and watch-list fall back as upstream's do (SPEC S3.6)"
                 if not progress_requests_supported(etcd.version or "") else ""), flush=True)
    try:
        topo = Topology(recipe, a.implementation, run_dir, say=lambda m: print(m, flush=True), port=a.port,
                        etcd_servers=a.etcd_servers, keep_data=a.dir is not None,
                        etcd_binary=etcd.path if etcd else "")
    except StartError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    def leave(*_):
        raise SystemExit(0)
    for sig in (signal.SIGTERM, signal.SIGINT):   # Ctrl-C too where the shell that started it ignores SIGINT
        signal.signal(sig, leave)
    status = 0
    try:
        topo.start()
        kc = topo.api.kubeconfig(os.path.join(run_dir, "kubeconfig"))
        print(f"ready: {topo.api.url} (kubeconfig {kc})" + (f"; nodes' server {topo.node_server.url}"
                                                            if topo.node_server is not topo.api else ""), flush=True)
        print(f"try: kubectl --kubeconfig {kc} get all -A   (Ctrl-C or SIGTERM stops every process)", flush=True)
        while True:
            topo.check_alive()
            time.sleep(1.0)
    except SystemExit:   # SIGTERM or Ctrl-C: the normal way to stop it
        pass
    except StartError as e:
        print(f"error: {e}", file=sys.stderr)
        status = 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):   # the stop itself is not interrupted
            signal.signal(sig, signal.SIG_IGN)
        t0 = time.monotonic()
        topo.stop()
        print(f"stopped every process in {time.monotonic() - t0:.1f} s", flush=True)
    return status


def cmd_ladder(_a) -> int:
    from .index import ladder
    print(ladder())
    return 0


def cmd_index(a) -> int:
    from .index import answer
    print(json.dumps(answer(a.nodes, a.writes_per_second, a.state_gb), indent=2) if a.json
          else answer(a.nodes, a.writes_per_second, a.state_gb)["text"])
    return 0


def cmd_manifests(a) -> int:
    from .manifests import render, write
    try:
        objects = render(spec.load(a.name), image=a.image, namespace=a.namespace, scale=a.scale)
    except spec.RecipeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    write(objects, a.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m recipes", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="every recipe, its rung or axis, seams, processes, sizes and measured capacity")
    r = sub.add_parser("run", help="run a recipe on loopback and judge it against its SLOs")
    r.add_argument("name")
    r.add_argument("--scale", default="small", help="small, full, or the size itself (the recipe's unit)")
    r.add_argument("--implementation", default="ours", choices=spec.IMPLEMENTATIONS)
    r.add_argument("--window", type=float, default=None, help="measured window in seconds (default: the recipe's)")
    r.add_argument("--out", default=None, help="write the run's JSON here")
    r.add_argument("--keep-logs", action="store_true")
    r.add_argument("--strict", action="store_true", help="exit 2 when the verdict is FAIL")
    r.add_argument("--find-capacity", action="store_true",
                   help="double then bisect the size for the largest that passes every SLO")
    r.add_argument("--max-steps", type=int, default=6)
    u = sub.add_parser("up", help="start a recipe's processes and keep them running (no workload) until SIGTERM")
    u.add_argument("name")
    u.add_argument("--implementation", default="ours", choices=spec.IMPLEMENTATIONS)
    u.add_argument("--dir", default=None, help="where logs and data go, kept (a topology started again on it resumes; "
                                               "default: a new temporary directory, its stores' data removed)")
    u.add_argument("--port", type=int, default=0, help="the control plane's address (default: a free port)")
    u.add_argument("--etcd-servers", default=None, help="an existing etcd for the default store, instead of one started")
    u.add_argument("--shards", type=int, default=None,
                   help="K: the deployment's shards, and one sharded controller per shard where the recipe has them")
    u.add_argument("--fronts", type=int, default=None, help="N: the deployment's fronts")
    u.add_argument("--without", action="append", default=[], metavar="KIND",
                   help="leave out the processes of this kind (e.g. slice-controllers); repeatable")
    u.add_argument("--apiserver-flag", action="append", default=[], metavar="FLAG",
                   help="one more flag for the apiserver or deployment (e.g. --apiserver-flag=--embedded-lease-etcd)")
    sub.add_parser("ladder", help="the measured capacities and each process kind's cost, as Markdown tables")
    i = sub.add_parser("index", help="which recipe carries a cluster of this shape, from the measured capacities")
    i.add_argument("--nodes", type=int, default=0)
    i.add_argument("--writes-per-second", type=float, default=0.0)
    i.add_argument("--state-gb", type=float, default=0.0)
    i.add_argument("--json", action="store_true")
    m = sub.add_parser("manifests", help="the recipe as Kubernetes manifests, to run its processes as pods")
    m.add_argument("name")
    m.add_argument("--image", default="residency-apiserver:dev",
                   help="the image with this project installed (python -m apiserver etc.)")
    m.add_argument("--namespace", default="residency")
    m.add_argument("--scale", default="small", help="sizes the recipe's counts depend on (small, full or N)")
    m.add_argument("--out", default="-", help="a directory (one file per object) or - for one YAML stream")
    a = p.parse_args(argv)
    return {"list": cmd_list, "run": cmd_run, "up": cmd_up, "ladder": cmd_ladder, "index": cmd_index, "manifests": cmd_manifests}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
