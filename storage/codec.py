"""Stored values as objects: JSON (ours, and kube-apiserver with `--storage-media-type=application/json`)
or upstream's default protobuf (`k8s\\x00` + runtime.Unknown), decoded to the JSON upstream would serve.
Every place that reads a stored value goes through `decode_value`, so the cache, the etcd path and the
residency filter all read a real cluster's etcd."""
from __future__ import annotations

from typing import Any

import orjson

from machinery import protobuf

from . import errors


def decode_value(key: str, value: bytes) -> dict[str, Any]:
    """The stored object (without its resourceVersion, which is the key's mod_revision)."""
    try:
        if value.startswith(protobuf.MAGIC):
            return protobuf.decode_stored(value)
        obj = orjson.loads(value)
    except (orjson.JSONDecodeError, protobuf.ProtobufError, KeyError) as e:
        raise errors.StorageError(errors.Code.INTERNAL, key, f"undecodable value: {e}") from None
    if not isinstance(obj, dict):
        raise errors.StorageError(errors.Code.INTERNAL, key, "undecodable value: not an object")
    return obj
