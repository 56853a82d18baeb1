"""How objects of one resource look on the wire: whole objects, list items, and the head the watch
cache strips from stored entries (S8.1: items of built-in lists carry no kind/apiVersion)."""
from __future__ import annotations

from typing import Any

from . import jsonenc
from .resources import Resource

Obj = dict[str, Any]


def encode_obj(res: Resource, obj: Obj) -> bytes:
    """A whole object: Go's field order for built-in kinds, sorted keys for custom resources (S6.3)."""
    return jsonenc.dumps_sorted(obj) if res.custom else jsonenc.dumps(obj)


def encode_list_item(res: Resource, obj: Obj) -> bytes:
    if res.custom:
        return jsonenc.dumps_sorted(obj)
    # Items of built-in lists carry no kind/apiVersion (S8.1).
    return jsonenc.dumps({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})


def wire_head(res: Resource) -> bytes | None:
    """`{"kind":"X","apiVersion":"v",` of a typed kind (None for custom resources, whose items keep them)."""
    if res.custom:
        return None
    return b'{"kind":' + jsonenc.dumps(res.kind) + b',"apiVersion":' + jsonenc.dumps(res.api_version) + b","


def list_item_bytes(res: Resource, data: bytes) -> bytes:
    """A cached entry's bytes as a list item: the cache stores built-in kinds without their head."""
    if res.custom or not data.startswith(b'{"kind":'):
        return data
    obj = jsonenc.loads(data)
    return jsonenc.dumps({k: v for k, v in obj.items() if k not in ("kind", "apiVersion")})
