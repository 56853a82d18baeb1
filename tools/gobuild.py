"""What tools/build_etcd.py and tools/build_kube_apiserver.py share: the Go environment, running a
command with its output shown on failure, a file-locked "build once into .cache" and the command line."""
from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
from typing import Callable


class BuildError(RuntimeError):
    pass


def log(tool: str, msg: str) -> None:
    print(f"[{tool}] {msg}", file=sys.stderr, flush=True)


def go_env() -> dict[str, str]:
    """Module mode (go.sum entries resolved through the proxy as needed), static binaries."""
    env = dict(os.environ)
    flags = [f for f in env.get("GOFLAGS", "").split() if not f.startswith("-mod=")] + ["-mod=mod"]
    env["GOFLAGS"] = " ".join(flags)
    env["CGO_ENABLED"] = "0"
    return env


def run(tool: str, cmd: list[str], cwd: str, env: dict[str, str]) -> str:
    """Run `cmd`; its stdout is returned, its stderr shown; BuildError (with all output) if it fails."""
    log(tool, "$ " + " ".join(cmd))
    p = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise BuildError(f"`{' '.join(cmd)}` failed with exit code {p.returncode} (output above)")
    sys.stderr.write(p.stderr)
    return p.stdout


def reported_version(path: str, pattern: str) -> str | None:
    """The version `path --version` reports (group 1 of `pattern`), None if it does not run."""
    try:
        out = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(pattern, out)
    return m.group(1) if m else None


def go_build(tool: str, go: str, args: list[str], src: str, env: dict[str, str], target: str,
             version_of: Callable[[str], str | None], want: str) -> None:
    """`go build <args> -o <tmp>` in `src`, check the version the binary reports, then move it to
    `target` (a half-written or wrong binary never takes the target's place)."""
    tmp_out = target + f".tmp{os.getpid()}"
    try:
        run(tool, [go, "build", "-o", tmp_out, *args], src, env)
        got = version_of(tmp_out)
        if got != want:
            raise BuildError(f"built binary reports version {got!r}, expected {want}")
        os.replace(tmp_out, target)
    finally:
        if os.path.exists(tmp_out):
            os.unlink(tmp_out)


def build_once(target: str, is_good: Callable[[str], bool], build: Callable[[str], None], what: str) -> str:
    """`target` if it is good, else `build(go)` under a file lock (concurrent callers wait for one build).
    BuildError if it has to be built and Go is missing; `what` names it in that message."""
    if is_good(target):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(os.path.join(os.path.dirname(target), ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_good(target):  # else built by someone else while we waited
            go = shutil.which("go")
            if go is None:
                raise BuildError(f"Go is not installed (no `go` on PATH); it is needed to build {what}")
            build(go)
    return target


def cli(tool: str, description: str, default_version: str, default_dest: str,
        ensure: Callable[[str, str], str], argv: list[str] | None) -> int:
    """`--version`/`--dest`; prints the binary's path on stdout, exits 1 with the reason on failure."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--version", default=default_version, help=f"version (default {default_version})")
    ap.add_argument("--dest", default=default_dest, help=f"cache directory (default {default_dest})")
    args = ap.parse_args(argv)
    try:
        path = ensure(args.version, args.dest)
    except BuildError as e:
        print(f"{tool}: error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0
