"""Build kube-scheduler from the Go module proxy (k8s.io/kubernetes/cmd/kube-scheduler).

    python tools/build_kube_scheduler.py [--version v1.37.2] [--dest .cache/kube-scheduler]

Builds `<dest>/<version>/kube-scheduler` unless it is already there, prints its path on stdout (progress
goes to stderr) and exits non-zero with a clear message if Go is missing or the build fails.

Built exactly as tools/build_kube_apiserver.py builds kube-apiserver (its `build_command`: a module that
requires `k8s.io/kubernetes <version>` with every staging module replaced by the published
`k8s.io/<name> v0.<minor>.<patch>`, upstream's tags and version ldflags), so the two binaries share the Go
build cache: after kube-apiserver, kube-scheduler takes a minute or two on 2 cores.

From Python: load this file and call `ensure_kube_scheduler()` (tests/test_kube_scheduler.py does).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
from build_kube_apiserver import DEFAULT_VERSION, ensure_kubernetes_command  # noqa: E402
from gobuild import BuildError, cli  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
DEFAULT_DEST = os.path.join(REPO_ROOT, ".cache", "kube-scheduler")
TOOL = "build_kube_scheduler"

__all__ = ["BuildError", "ensure_kube_scheduler", "DEFAULT_VERSION"]


def ensure_kube_scheduler(version: str = DEFAULT_VERSION, dest: str = DEFAULT_DEST) -> str:
    """Return the path of `<dest>/<version>/kube-scheduler`, building it first if needed.

    Idempotent and safe to call concurrently (a file lock serialises builds)."""
    return ensure_kubernetes_command("kube-scheduler", version, dest, TOOL)


def main(argv: list[str] | None = None) -> int:
    return cli(TOOL, __doc__.splitlines()[0], DEFAULT_VERSION, DEFAULT_DEST, ensure_kube_scheduler, argv)


if __name__ == "__main__":
    sys.exit(main())
