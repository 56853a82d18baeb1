"""Build the reference kube-apiserver from the Go module proxy (k8s.io/kubernetes/cmd/kube-apiserver).

    python tools/build_kube_apiserver.py [--version v1.37.2] [--dest .cache/kube-apiserver]

Builds `<dest>/<version>/kube-apiserver` unless it is already there, prints its path on stdout (progress
goes to stderr) and exits non-zero with a clear message if Go is missing or the build fails.

k8s.io/kubernetes is not meant to be used as a module: its go.mod replaces every staging module
(`k8s.io/api => ./staging/src/k8s.io/api`, ...) with a directory the module zip does not ship. The build
module here requires `k8s.io/kubernetes <version>` and replaces each of those staging modules with the
published `k8s.io/<name> v0.<minor>.<patch>`; the list is read from kubernetes' own go.mod (through the
module proxy), so a new version needs no edit here. Tags and version ldflags are those of upstream's
`hack/lib/golang.sh` and `hack/lib/version.sh` (CGO off, `-tags=selinux,notest`, `gitVersion` etc.), so
`/version` answers as a release build would. About 6 minutes on 2 cores with a warm Go cache.

From Python: load this file and call `ensure_kube_apiserver()` (tests/helpers/kube.py does).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
from gobuild import BuildError, build_once, cli, go_build, go_env, log, reported_version, run  # noqa: E402

DEFAULT_VERSION = "v1.37.2"
MODULE = "k8s.io/kubernetes"
PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
DEFAULT_DEST = os.path.join(REPO_ROOT, ".cache", "kube-apiserver")
TOOL = "build_kube_apiserver"
# Recorded in the binary as the build date (upstream: the commit date of a release); fixed so that
# two builds of one version are the same binary.
BUILD_DATE = "2026-01-01T00:00:00Z"

__all__ = ["BuildError", "ensure_kube_apiserver", "DEFAULT_VERSION"]


def binary_version(path: str) -> str | None:
    return reported_version(path, r"Kubernetes\s+(v\S+)")


def _is_good(path: str, version: str) -> bool:
    return os.access(path, os.X_OK) and binary_version(path) == version


def ensure_kube_apiserver(version: str = DEFAULT_VERSION, dest: str = DEFAULT_DEST) -> str:
    """Return the path of `<dest>/<version>/kube-apiserver`, building it first if needed.

    Idempotent and safe to call concurrently (a file lock serialises builds)."""
    if not re.fullmatch(r"v1\.\d+\.\d+", version):
        raise BuildError(f"bad Kubernetes version {version!r} (expected e.g. {DEFAULT_VERSION})")
    target = os.path.join(os.path.abspath(os.path.join(dest, version)), "kube-apiserver")
    return build_once(target, lambda t: _is_good(t, version), lambda go: build_command(go, version, target),
                      f"kube-apiserver {version}")


def ensure_kubernetes_command(name: str, version: str, dest: str, tool: str) -> str:
    """`<dest>/<version>/<name>`: the command k8s.io/kubernetes/cmd/<name>, built (as `build_command` builds)
    unless a binary reporting `version` is there. kube-scheduler and kube-controller-manager use it."""
    if not re.fullmatch(r"v1\.\d+\.\d+", version):
        raise BuildError(f"bad Kubernetes version {version!r} (expected e.g. {DEFAULT_VERSION})")
    target = os.path.join(os.path.abspath(os.path.join(dest, version)), name)
    return build_once(target, lambda t: _is_good(t, version),
                      lambda go: build_command(go, version, target, f"{MODULE}/cmd/{name}", tool), f"{name} {version}")


def staging_modules(go: str, version: str, cwd: str, env: dict[str, str], tool: str = TOOL) -> list[str]:
    """The modules kubernetes' go.mod replaces with `./staging/src/...` directories."""
    info = json.loads(run(tool, [go, "mod", "download", "-json", f"{MODULE}@{version}"], cwd, env))
    with open(info["GoMod"]) as f:
        gomod = f.read()
    mods = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, re.M)
    if not mods:
        raise BuildError(f"no staging replacements found in {info['GoMod']}")
    return mods


def build_command(go: str, version: str, target: str, package: str = PACKAGE, tool: str = TOOL) -> None:
    """Build `package` (a command of k8s.io/kubernetes <version>) into `target`, as a release build would
    (tools/build_kube_scheduler.py builds kube-scheduler with it)."""
    env = go_env()
    t0 = time.monotonic()
    minor, patch = re.fullmatch(r"v1\.(\d+)\.(\d+)", version).groups()
    staging_version = f"v0.{minor}.{patch}"
    with tempfile.TemporaryDirectory(prefix="kubebuild-") as src:
        with open(os.path.join(src, "go.mod"), "w") as f:
            f.write("module residency/kubebuild\n\ngo 1.26.0\n\n")
        mods = staging_modules(go, version, src, env, tool)
        lines = [f"require {MODULE} {version}\n", "\nreplace (\n"]
        lines += [f"\t{m} => {m} {staging_version}\n" for m in mods]
        lines.append(")\n")
        with open(os.path.join(src, "go.mod"), "a") as f:
            f.writelines(lines)
        log(tool, f"building {package} {version} ({len(mods)} staging modules at {staging_version}); "
                  "a cold build takes several minutes")
        ldflags = " ".join([
            "-s", "-w",
            f"-X k8s.io/component-base/version.gitVersion={version}",
            "-X k8s.io/component-base/version.gitMajor=1",
            f"-X k8s.io/component-base/version.gitMinor={minor}",
            "-X k8s.io/component-base/version.gitTreeState=clean",
            f"-X k8s.io/component-base/version.buildDate={BUILD_DATE}",
            f"-X k8s.io/client-go/pkg/version.gitVersion={version}",
            "-X k8s.io/client-go/pkg/version.gitMajor=1",
            f"-X k8s.io/client-go/pkg/version.gitMinor={minor}",
        ])
        go_build(tool, go, ["-trimpath", "-tags=selinux,notest", "-ldflags", ldflags, package], src, env, target,
                 binary_version, version)
    log(tool, f"built {target} in {time.monotonic() - t0:.1f}s")


def main(argv: list[str] | None = None) -> int:
    return cli(TOOL, __doc__.splitlines()[0], DEFAULT_VERSION, DEFAULT_DEST, ensure_kube_apiserver, argv)


if __name__ == "__main__":
    sys.exit(main())
