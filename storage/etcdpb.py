"""etcd's v3 API messages (`pb`): aetcd's generated protobuf modules, loaded without aetcd's client.

`import aetcd.rpc.rpc_pb2` first runs `aetcd/__init__.py` and `aetcd/rpc/__init__.py`, which import aetcd's
client and grpcio: about 20 MiB of RSS in every process (grpc's native library), for a client nothing here
uses since the KV calls, watches and maintenance calls go over `storage.grpc_h2`. The generated modules need
only protobuf and each other, so the two packages are entered in `sys.modules` as plain namespaces over
their directories and the generated modules imported through them. If aetcd was already imported for real
(a test, a tool), that import is used as it is.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types


def _load():
    if "aetcd.rpc" not in sys.modules:
        spec = importlib.util.find_spec("aetcd")      # finds the package without running it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("aetcd (etcd's generated v3 API messages) is not installed")
        root = spec.submodule_search_locations[0]
        for name, path in (("aetcd", root), ("aetcd.rpc", os.path.join(root, "rpc"))):
            if name not in sys.modules:
                m = types.ModuleType(name, "aetcd's package, entered without its client (storage/etcdpb.py)")
                m.__path__ = [path]
                sys.modules[name] = m
    return importlib.import_module("aetcd.rpc.rpc_pb2")


pb = _load()
