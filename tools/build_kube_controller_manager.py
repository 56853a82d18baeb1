"""Build kube-controller-manager from the Go module proxy (k8s.io/kubernetes/cmd/kube-controller-manager).

    python tools/build_kube_controller_manager.py [--version v1.37.2] [--dest .cache/kube-controller-manager]

Builds `<dest>/<version>/kube-controller-manager` unless it is already there, prints its path on stdout (progress
goes to stderr) and exits non-zero with a clear message if Go is missing or the build fails.

Built exactly as tools/build_kube_apiserver.py builds kube-apiserver (its `build_command`: a module that
requires `k8s.io/kubernetes <version>` with every staging module replaced by the published
`k8s.io/<name> v0.<minor>.<patch>`, upstream's tags and version ldflags), so the binaries share the Go build
cache: after kube-apiserver, kube-controller-manager takes a minute or two on 2 cores. Its node lifecycle
controller is the one reader of node Leases that matters (issue 22): it judges the heartbeats a server carries.

From Python: load this file and call `ensure_kube_controller_manager()` (tests/helpers/kwok.py does).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
from build_kube_apiserver import DEFAULT_VERSION, ensure_kubernetes_command  # noqa: E402
from gobuild import BuildError, cli  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
DEFAULT_DEST = os.path.join(REPO_ROOT, ".cache", "kube-controller-manager")
TOOL = "build_kube_controller_manager"

__all__ = ["BuildError", "ensure_kube_controller_manager", "DEFAULT_VERSION"]


def ensure_kube_controller_manager(version: str = DEFAULT_VERSION, dest: str = DEFAULT_DEST) -> str:
    """Return the path of `<dest>/<version>/kube-controller-manager`, building it first if needed.

    Idempotent and safe to call concurrently (a file lock serialises builds)."""
    return ensure_kubernetes_command("kube-controller-manager", version, dest, TOOL)


def main(argv: list[str] | None = None) -> int:
    return cli(TOOL, __doc__.splitlines()[0], DEFAULT_VERSION, DEFAULT_DEST, ensure_kube_controller_manager, argv)


if __name__ == "__main__":
    sys.exit(main())
