"""Build every Go binary the test suite needs, one after another, in the order the suite needs them.

    python tools/build_all.py [--log FILE]

`.ci/run` starts this in the background before installing the Python packages, so the Go builds overlap the
install and the tests that need no Go binary (tests/conftest.py runs those first). A test that reaches a
binary still being built waits on that binary's file lock (tools/gobuild.build_once) rather than building it
a second time. One builder at a time: a second `build_all` exits at once while the first runs.

The builds run one at a time on purpose: each `go build` already uses every core, and two concurrent builds
would compile the packages they share (k8s.io/api, client-go...) twice, since the Go build cache does not
share work in progress. The order puts what most tests need first (a current etcd), then the small
stdlib-only references, kube-apiserver (the longest; it fills the build cache with the k8s.io packages), then
the programs that reuse that cache, in the order of the suite's stages (tests/ordering.py). `.ci/run` runs it
at a lower CPU priority (nice): the tests beside it have time limits, the builds have none.

Each build's wall and CPU time (its processes' user + sys) goes to stderr, and with `--log` to FILE too.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # tools/ is not a package
sys.path.insert(0, os.path.dirname(HERE))
from gobuild import BuildError  # noqa: E402

REPO_ROOT = os.path.dirname(HERE)
LOCK = os.path.join(REPO_ROOT, ".cache", "build_all.lock")


def _steps():
    import build_etcd
    import build_kube_apiserver
    import build_kube_controller_manager
    import build_kube_scheduler
    import build_kwok
    import build_repo_go
    return [
        ("etcd", build_etcd.ensure_etcd),
        ("jsonref", lambda: build_repo_go.ensure("jsonref")),
        ("errtext", lambda: build_repo_go.ensure("errtext")),
        ("kube-apiserver", build_kube_apiserver.ensure_kube_apiserver),
        ("lister", lambda: build_repo_go.ensure("lister")),   # bench.front's smoke test (stage 2); net/http is in
                                                              # the build cache by now
        ("clientgo.test", lambda: build_repo_go.ensure("clientgo.test")),
        ("robustinformer", lambda: build_repo_go.ensure("robustinformer")),
        ("kwok", build_kwok.ensure_kwok),
        ("kube-scheduler", build_kube_scheduler.ensure_kube_scheduler),
        ("kube-controller-manager", build_kube_controller_manager.ensure_kube_controller_manager),
        ("k8sproto", lambda: build_repo_go.ensure("k8sproto")),
        ("protoref", lambda: build_repo_go.ensure("protoref")),
        ("fanout", lambda: build_repo_go.ensure("fanout")),
        ("leasegen", lambda: build_repo_go.ensure("leasegen")),
        ("writer", lambda: build_repo_go.ensure("writer")),
    ]


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--log", help="append each build's timing to this file too")
    args = ap.parse_args(argv)
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    lock = open(LOCK, "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("build_all: another build_all is running; leaving the builds to it", file=sys.stderr)
        return 0
    failed = []
    t_all, cpu_all = time.monotonic(), _cpu()
    for name, ensure in _steps():
        t0, c0 = time.monotonic(), _cpu()
        try:
            path = ensure()
            status = "ok"
        except BuildError as e:  # the tests that need it fail with the reason; the rest still build
            path, status = str(e), "FAILED"
            failed.append(name)
        line = (f"build {name}: {status}, wall {time.monotonic() - t0:.1f} s, "
                f"cpu {_cpu() - c0:.1f} s ({path})")
        _say(line, args.log)
    _say(f"build total: wall {time.monotonic() - t_all:.1f} s, cpu {_cpu() - cpu_all:.1f} s"
         + (f", failed: {', '.join(failed)}" if failed else ""), args.log)
    return 1 if failed else 0


def _say(line: str, log: str | None) -> None:
    print(line, file=sys.stderr, flush=True)
    if log:
        with open(log, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
