"""Cache residency: which objects this process keeps in its watch caches.

A process's residency is a shard selector (KEP-5866 grammar, `machinery/shard_selector.py`);
objects outside it are dropped at ingest, before they cost heap: for
`object.metadata.uid` only the UID is read out of the stored bytes (no JSON
decode), for `object.metadata.namespace` only the key. Some resources are kept
fully resident whatever the selector (those an authorizer or the API machinery
needs everywhere).

A request can be answered from a partially resident cache only if its own
`shardSelector` lies inside the residency; anything else goes to etcd (never a
partial answer that looks complete).
"""
from __future__ import annotations

from typing import Callable

import ext
from storage.codec import decode_value

from machinery.shard_selector import ShardSelector

# Resources left fully resident by default: namespaces and CRDs (the API
# machinery reads them everywhere), and RBAC (an authorizer would need all of
# it in every apiserver). Override with --residency-full-resources.
DEFAULT_FULL_RESOURCES = ("namespaces", "customresourcedefinitions", "roles", "rolebindings", "clusterroles",
                          "clusterrolebindings")

_META = b'"metadata":{'
_UID = b'"uid":"'


def uid_of(value: bytes) -> str | None:
    """metadata.uid read straight from stored bytes.

    Our storage layer writes `kind`, `apiVersion`, then `metadata` first (see
    storage/store.encode_value) and ObjectMeta's fields before `uid` (name,
    generateName, namespace, selfLink) are strings without quotes, so the first
    `"uid":"` after the top-level `"metadata":{` is metadata.uid. Returns None if
    the layout is not that (the caller then decodes).
    """
    m = value.find(_META)
    if m < 0 or m > 400:
        return None
    head = value[1:m]
    if head and not (head.startswith(b'"kind":') or head.startswith(b'"apiVersion":')) or b"{" in head:
        return None
    i = value.find(_UID, m)
    if i < 0:
        return ""
    between = value[m + len(_META):i]
    if b"{" in between or b"[" in between:
        return None  # the first "uid" is nested (no metadata.uid before it): decode instead
    j = value.find(b'"', i + 7)
    return value[i + 7:j].decode()


def namespace_of_key(key: str, prefix: str) -> str:
    rest = key[len(prefix):]
    i = rest.find("/")
    return rest[:i] if i >= 0 else ""


class Residency:
    def __init__(self, selector: ShardSelector | None, full_resources: tuple[str, ...] = DEFAULT_FULL_RESOURCES):
        self.selector = selector
        self.full_resources = set(full_resources)

    def partial(self, plural: str) -> bool:
        return self.selector is not None and plural not in self.full_resources

    def ingest_filter(self, plural: str, prefix: str, namespaced: bool) -> Callable[[str, bytes], bool] | None:
        """(key, stored bytes) -> keep? ; None when the resource is fully resident."""
        if not self.partial(plural):
            return None
        sel = self.selector
        if sel.field == "namespace":
            if not namespaced:
                keep_all = sel.matches_hash(ext.fnv1a64(""))
                return lambda key, value: keep_all   # cluster-scoped objects have namespace "" (S7.11)
            return lambda key, value: sel.matches_hash(ext.fnv1a64(namespace_of_key(key, prefix)))

        def keep(key: str, value: bytes) -> bool:
            uid = uid_of(value)
            if uid is None:  # another layout, or protobuf: decode
                md = decode_value(key, value).get("metadata")
                uid = md.get("uid") if isinstance(md, dict) else None
                uid = uid if isinstance(uid, str) else ""
            return sel.matches_hash(ext.fnv1a64(uid))
        return keep

    def serves(self, plural: str, request: ShardSelector | None) -> bool:
        """Can the cache answer a list/watch with this shardSelector without a partial result?"""
        if not self.partial(plural):
            return True
        return request is not None and self.selector.contains(request)


def entry_shard_filter(sel: ShardSelector, prefix: str) -> Callable:
    """A per-entry filter for a request's shardSelector (S7.11-S7.13), hash computed at ingest for UIDs."""
    if sel.field == "uid":
        return lambda e: sel.matches_hash(e.uid_hash)
    return lambda e: sel.matches_hash(ext.fnv1a64(namespace_of_key(e.key, prefix)))
