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
