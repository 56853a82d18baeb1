"""How objects of one resource look on the wire: whole objects, list items, and the head the watch
cache strips from stored entries (S8.1: items of built-in lists carry no kind/apiVersion)."""
from __future__ import annotations

from typing import Any

from . import jsonenc, objects, tables
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


class WatchFrames:
    """The frames of one watch response (S4.2): `{"type":…,"object":…}` lines, or the objects converted as
    the client asked (handlers/response.go watchEmbeddedEncoder): Table rows (one row per event, column
    headers only in the first), or PartialObjectMetadata (client-go's metadata informers)."""

    def __init__(self, res: Resource, table: bool = False, include_object: str = "Metadata",
                 target: "tables.Target | None" = None):
        self.res = res
        if target is None and table:
            target = tables.Target("Table", "meta.k8s.io/v1")
        self.target = target
        self.table = target is not None and target.kind in ("Table", "PartialObjectMetadata")
        self.include_object = include_object
        self._first_row = True

    def _row(self, ev_type: str, obj: Obj) -> bytes:
        if self.target.kind == "PartialObjectMetadata":
            return jsonenc.watch_event(ev_type, jsonenc.dumps(tables.partial_object(obj, self.target.group_version)))
        t = tables.watch_table(self.res, obj, self._first_row, self.include_object,
                               api_version=self.target.group_version)
        self._first_row = False
        return jsonenc.watch_event(ev_type, jsonenc.dumps(t))

    def event(self, ev_type: str, data: bytes) -> bytes:
        """An event whose object is already encoded (the watch cache's bytes)."""
        if self.table:
            return self._row(ev_type, jsonenc.loads(data))
        return jsonenc.watch_event(ev_type, data)

    def event_obj(self, ev_type: str, obj: Obj) -> bytes:
        """An event of a decoded object (the etcd path)."""
        if self.table:
            return self._row(ev_type, obj)
        return jsonenc.watch_event(ev_type, encode_obj(self.res, obj))

    def bookmark(self, rv: int, initial_events_end: bool = False) -> bytes:
        """BOOKMARK events are never Tables (S4.11, S5.4)."""
        obj = objects.bookmark(self.res, rv, initial_events_end)
        return jsonenc.watch_event("BOOKMARK", encode_obj(self.res, obj))
