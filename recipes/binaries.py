"""The stock binaries a recipe needs (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok), built
from their Go modules by the repository's `tools/build_*.py` scripts into `.cache/` the first time they are
needed. The apiserver itself needs only Python: a build is announced, since the first one takes minutes."""
from __future__ import annotations

import functools
import importlib.util
import os
import sys
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# binary -> (tool module, its ensure function)
TOOLS = {"etcd": ("build_etcd", "ensure_etcd"),
         "kube-apiserver": ("build_kube_apiserver", "ensure_kube_apiserver"),
         "kube-scheduler": ("build_kube_scheduler", "ensure_kube_scheduler"),
         "kube-controller-manager": ("build_kube_controller_manager", "ensure_kube_controller_manager"),
         "kwok": ("build_kwok", "ensure_kwok")}


@functools.cache
def load_tool(name: str) -> ModuleType:
    """tools/<name>.py, loaded from its file: `tools` is not a package, and a top-level `tools` from
    some installed distribution could shadow it as a namespace package."""
    spec = importlib.util.spec_from_file_location(f"_{name}", os.path.join(ROOT, "tools", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a dataclass in the tool looks its module up there
    spec.loader.exec_module(mod)
    return mod


@functools.cache
def binary(name: str, say=print) -> str:
    """The path of a stock binary, built first where `.cache/` has none (said on stdout)."""
    tool, fn = TOOLS[name]
    mod = load_tool(tool)
    dest = getattr(mod, "DEFAULT_DEST", "")
    if not dest or not os.path.exists(dest):
        say(f"building {name} with tools/{tool}.py (a stock component this recipe runs; minutes the first time)")
    return getattr(mod, fn)()
