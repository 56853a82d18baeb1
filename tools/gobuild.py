"""What tools/build_etcd.py and tools/build_kube_apiserver.py share: the Go environment, running a
command with its output shown on failure, a file-locked "build once into .cache" and the command line."""
from __future__ import annotations

import argparse
import fcntl
import os
import re
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


def build_once(target: str, is_good: Callable[[str], bool], build: Callable[[], None]) -> str:
    """`target` if it is good, else build it under a file lock (concurrent callers wait for one build)."""
    if is_good(target):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(os.path.join(os.path.dirname(target), ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not is_good(target):  # else built by someone else while we waited
            build()
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
