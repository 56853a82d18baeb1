"""Build kwok (sigs.k8s.io/kwok/cmd/kwok) from the Go module proxy.

    python tools/build_kwok.py [--version v0.8.0] [--dest .cache/kwok] [--check-stages]

Builds `<dest>/<version>/kwok` unless it is already there, prints its path on stdout (progress goes to
stderr) and exits non-zero with a clear message if Go is missing or the build fails.

The build module requires `sigs.k8s.io/kwok <version>` and builds its `cmd/kwok` package (kwok's go.mod has
no replace directives, so the published module builds as is). The version ldflags are those of upstream's
`hack/releases.sh` (`sigs.k8s.io/kwok/pkg/consts.Version` set to the release tag, `PreRelease=GA`), so
`kwok --version` reports `kwok version v0.8.0 ...` and simulated nodes `kubeletVersion: kwok-v0.8.0`, as with
a release binary. About two minutes on 2 cores from a cold Go cache.

The standalone kwok binary has no stages of its own: node initialisation, heartbeat and pod lifecycle are
Stage objects passed with `--config`. tools/kwok/ holds upstream's stage files, copied verbatim from the
same module download (`kustomize/stage/...`, see tools/kwok/README.md); `--check-stages` compares the
committed copies with the module's and exits non-zero if they differ.

From Python: load this file and call `ensure_kwok()` (tests/helpers/kwok.py does).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
from gobuild import BuildError, build_once, cli, go_build, go_env, log, reported_version, run  # noqa: E402

DEFAULT_VERSION = "v0.8.0"
MODULE = "sigs.k8s.io/kwok"
PACKAGE = "sigs.k8s.io/kwok/cmd/kwok"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
DEFAULT_DEST = os.path.join(REPO_ROOT, ".cache", "kwok")
STAGES_DIR = os.path.join(HERE, "kwok")
TOOL = "build_kwok"

# Committed copy (tools/kwok/<name>) <- path inside the kwok module of DEFAULT_VERSION.
STAGE_FILES = {
    "node-initialize.yaml": "kustomize/stage/node/fast/node-initialize.yaml",
    "node-heartbeat-with-lease.yaml": "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod-ready.yaml": "kustomize/stage/pod/fast/pod-ready.yaml",
    "pod-complete.yaml": "kustomize/stage/pod/fast/pod-complete.yaml",
    "pod-delete.yaml": "kustomize/stage/pod/fast/pod-delete.yaml",
}

__all__ = ["BuildError", "ensure_kwok", "stage_files", "DEFAULT_VERSION"]


def binary_version(path: str) -> str | None:
    return reported_version(path, r"kwok version (v\S+)")


def _is_good(path: str, version: str) -> bool:
    return os.access(path, os.X_OK) and binary_version(path) == version


def ensure_kwok(version: str = DEFAULT_VERSION, dest: str = DEFAULT_DEST) -> str:
    """Return the path of `<dest>/<version>/kwok`, building it first if needed.

    Idempotent and safe to call concurrently (a file lock serialises builds)."""
    if not re.fullmatch(r"v\d+\.\d+\.\d+", version):
        raise BuildError(f"bad kwok version {version!r} (expected e.g. {DEFAULT_VERSION})")
    target = os.path.join(os.path.abspath(os.path.join(dest, version)), "kwok")
    return build_once(target, lambda t: _is_good(t, version), lambda go: _build(go, version, target),
                      f"kwok {version}")


def stage_files() -> list[str]:
    """The committed stage files (paths), in the order kwok gets them with --config."""
    return [os.path.join(STAGES_DIR, name) for name in STAGE_FILES]


def module_dir(go: str, version: str, cwd: str, env: dict[str, str]) -> str:
    """The extracted module (downloaded through the proxy if needed)."""
    info = json.loads(run(TOOL, [go, "mod", "download", "-json", f"{MODULE}@{version}"], cwd, env))
    return info["Dir"]


def _build(go: str, version: str, target: str) -> None:
    env = go_env()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kwokbuild-") as src:
        with open(os.path.join(src, "go.mod"), "w") as f:
            f.write(f"module residency/kwokbuild\n\ngo 1.26.0\n\nrequire {MODULE} {version}\n")
        log(TOOL, f"building {PACKAGE} {version} (a cold build takes a few minutes)")
        ldflags = " ".join(["-s", "-w", f"-X sigs.k8s.io/kwok/pkg/consts.Version={version}",
                            "-X sigs.k8s.io/kwok/pkg/consts.PreRelease=GA"])
        go_build(TOOL, go, ["-trimpath", "-ldflags", ldflags, PACKAGE], src, env, target, binary_version, version)
    log(TOOL, f"built {target} in {time.monotonic() - t0:.1f}s")


def check_stages(version: str = DEFAULT_VERSION) -> list[str]:
    """Names of committed stage files that differ from (or are missing in) the module's."""
    import shutil
    go = shutil.which("go")
    if go is None:
        raise BuildError("Go is not installed (no `go` on PATH); it is needed to download the kwok module")
    with tempfile.TemporaryDirectory(prefix="kwokstages-") as tmp:
        with open(os.path.join(tmp, "go.mod"), "w") as f:
            f.write("module residency/kwokstages\n\ngo 1.26.0\n")
        mod = module_dir(go, version, tmp, go_env())
    stale = []
    for name, rel in STAGE_FILES.items():
        with open(os.path.join(mod, rel), "rb") as f:
            want = f.read()
        try:
            with open(os.path.join(STAGES_DIR, name), "rb") as f:
                got = f.read()
        except FileNotFoundError:
            got = None
        if got != want:
            stale.append(name)
    return stale


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--check-stages" in argv:
        ap = argparse.ArgumentParser(description="compare tools/kwok/ with the kwok module's stage files")
        ap.add_argument("--check-stages", action="store_true")
        ap.add_argument("--version", default=DEFAULT_VERSION)
        args = ap.parse_args(argv)
        try:
            stale = check_stages(args.version)
        except BuildError as e:
            print(f"{TOOL}: error: {e}", file=sys.stderr)
            return 1
        for name in stale:
            print(f"{TOOL}: tools/kwok/{name} differs from {MODULE}@{args.version}/{STAGE_FILES[name]}",
                  file=sys.stderr)
        return 1 if stale else 0
    return cli(TOOL, __doc__.splitlines()[0], DEFAULT_VERSION, DEFAULT_DEST, ensure_kwok, argv)


if __name__ == "__main__":
    sys.exit(main())
