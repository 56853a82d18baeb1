"""Build the repository's own Go programs (the tests' reference encoders and client-go tests) once per change.

    python tools/build_repo_go.py [NAME ...]      # all of them without a name

Each program is built into `.cache/go/<name>/<name>` under a file lock and rebuilt only when its sources
(every file of its module directory) or the Go version change: a `go test -c` or `go build` per pytest
worker or per module would link the same binary again and again. All are built as the stock binaries are
(`-trimpath`, CGO off, `-mod=mod`: tools/gobuild.go_env), so the packages they share with kube-apiserver
(k8s.io/api, apimachinery, client-go) come from the Go build cache that kube-apiserver's build filled instead
of being compiled a second time with other flags.

From Python: load this file and call `ensure(name)` (tests/helpers/gobin.py does).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tools/ is not a package
from gobuild import BuildError, build_once, go_env, log, run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(HERE)
DEST = os.path.join(REPO_ROOT, ".cache", "go")
TOOL = "build_repo_go"


@dataclass(frozen=True)
class Program:
    module: str          # the module directory, relative to the repository
    package: str = "."   # the package inside it
    test: bool = False   # a `go test -c` binary rather than a command


PROGRAMS: dict[str, Program] = {
    "jsonref": Program("tests/go/jsonref"),              # encoding/json reference (test_jsonenc)
    "errtext": Program("tests/go/errtext"),              # encoding/json's error texts (test_jsonenc)
    "protoref": Program("tests/go/protoref"),            # the k8s.io/api protobuf reference (test_protobuf)
    "k8sproto": Program("tools/k8sproto"),               # the protobuf schema generator (test_protobuf)
    "clientgo.test": Program("tests/clientgo", test=True),    # the client-go conformance tests
    "robustinformer": Program("tests/clientgo", "./robustinformer"),  # the robustness suite's informer
    "fanout": Program("bench/go/fanout"),                # watch fan-out at saturation (bench.vs_upstream)
    "leasegen": Program("bench/go/leasegen"),            # kubelet-like Lease renewals (bench.nodes --generator)
    "lister": Program("bench/go/lister"),                # lists timed by a compiled client (bench.front)
    "writer": Program("bench/go/writer"),                # writes timed by a compiled client (throughput sections)
}


def _go_version(go: str) -> str:
    return subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()


def source_key(prog: Program, go: str) -> str:
    """A hash of every file under the module directory, the package, the kind and the Go version."""
    h = hashlib.sha256(f"{prog}\n{_go_version(go)}\n".encode())
    root = os.path.join(REPO_ROOT, prog.module)
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for fn in sorted(filenames):
            path = os.path.join(dirpath, fn)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def target_of(name: str) -> str:
    return os.path.join(DEST, name, name)


def _is_good(name: str, go: str | None) -> bool:
    target = target_of(name)
    if go is None or not os.access(target, os.X_OK):
        return False
    try:
        with open(target + ".key") as f:
            return f.read().strip() == source_key(PROGRAMS[name], go)
    except OSError:
        return False


def _build(name: str, go: str) -> None:
    prog = PROGRAMS[name]
    target = target_of(name)
    key = source_key(prog, go)
    tmp = target + f".tmp{os.getpid()}"
    cmd = [go, "test", "-c", "-vet=off"] if prog.test else [go, "build"]
    t0 = time.monotonic()
    try:
        run(TOOL, cmd + ["-trimpath", "-o", tmp, prog.package], os.path.join(REPO_ROOT, prog.module), go_env())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    with open(target + ".key", "w") as f:
        f.write(key + "\n")
    log(TOOL, f"built {target} in {time.monotonic() - t0:.1f}s")


def ensure(name: str) -> str:
    """The path of program `name`, built first if missing or stale; BuildError if it cannot be built."""
    if name not in PROGRAMS:
        raise BuildError(f"unknown program {name!r} (known: {', '.join(PROGRAMS)})")
    go = shutil.which("go")
    return build_once(target_of(name), lambda _t: _is_good(name, go), lambda g: _build(name, g),
                      f"the Go program {name}")


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or list(PROGRAMS)
    try:
        for n in names:
            print(ensure(n))
    except BuildError as e:
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
