"""The repository's own Go programs (tools/build_repo_go.py), built once into .cache/go and shared by every
pytest worker and module: a missing `go` or a failed build fails the test, never skips it."""
from __future__ import annotations

import pytest

from tests.helpers.etcd import load_tool


def go_program(name: str) -> str:
    """The path of `name` (jsonref, errtext, protoref, k8sproto, clientgo.test, robustinformer)."""
    build = load_tool("build_repo_go")
    try:
        return build.ensure(name)
    except build.BuildError as e:
        pytest.fail(f"could not build the Go program {name}: {e}")


def ready_binaries(*tools: str) -> None:
    """Build (or wait for the build in progress of) the stock binaries a benchmark subprocess will look for,
    so its time limit counts the benchmark and not a build: "etcd", "kube-apiserver", "kwok"."""
    ensure = {"etcd": ("build_etcd", "ensure_etcd"), "kube-apiserver": ("build_kube_apiserver", "ensure_kube_apiserver"),
              "kwok": ("build_kwok", "ensure_kwok")}
    for t in tools:
        mod, fn = ensure[t]
        build = load_tool(mod)
        try:
            getattr(build, fn)()
        except build.BuildError as e:
            pytest.fail(f"could not build {t}: {e}")

