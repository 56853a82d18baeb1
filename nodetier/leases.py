"""The absorbed Leases as a storage contract (the one `apiserver.endpoints` write, read and watch through), over
the tier's in-memory store (`nodetier.memkv`).

A write that changes only the renewal field (`spec.renewTime`; managedFields, which this server does not
maintain, are not compared) is absorbed: it is stored here and answered at once, and the forwarder sends the newest renewal to the
control plane later. Any other change (a new holder, a new duration, labels, owner references) is forwarded
to the control plane at once, with the control plane's resourceVersion as its precondition, and stored here as
the control plane answered it. Deletes are forwarded before they are stored.

resourceVersions: the ones the tier hands out are its own (`nodetier.memkv`), for every Lease it holds, so a
client of the tier (a kubelet's precondition, kwok's informer) sees one consistent history; the control plane
keeps its own. The tier remembers per Lease the control plane's version (`LeaseState.cp_rv`) for its own
preconditions there.
"""
from __future__ import annotations

import contextvars
import datetime
import re
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from cache.delegator import CacheDelegator
from cache.residency import Residency
from machinery.resources import Resource
from storage import errors as serr
from storage.store import EtcdStore, decode_kv

from . import metrics
from .controlplane import ControlPlane, ControlPlaneError
from .memkv import MemoryKV

Obj = dict[str, Any]
# The client of the request being served (its User-Agent names the managedFields manager upstream), for a
# write the storage forwards at once.
REQUEST_USER_AGENT: contextvars.ContextVar[str] = contextvars.ContextVar("nodetier_user_agent", default="")
RENEW_SHARE = 0.25      # a kubelet renews every quarter of its lease's duration (nodelease.go)
# metav1.MicroTime as Go marshals it (RFC3339 with microseconds, UTC): what kubelets and kwok send.
MICRO_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")


def micro_time(s: str | None) -> float | None:
    """metav1.MicroTime text as seconds since the epoch."""
    if not s:
        return None
    try:
        return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def without_renewal(obj: Obj) -> Obj:
    """The Lease minus what a bare renewal changes and the tier's own resourceVersion."""
    md = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "renewTime"}
    return {**obj, "metadata": md, "spec": spec}


def renewal_only(cur: Obj, new: Obj) -> bool:
    return without_renewal(cur) == without_renewal(new)


def for_control_plane(obj: Obj, cp_rv: int | None) -> Obj:
    """The Lease as the tier sends it: the control plane's resourceVersion as precondition, no managedFields
    (the control plane keeps its own and stamps the update, as for the client's own write)."""
    md = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")}
    if cp_rv is not None:
        md["resourceVersion"] = str(cp_rv)
    return {**obj, "metadata": md}


@dataclass
class LeaseState:
    """What the tier knows of one Lease beyond its own copy."""
    cp_rv: int                    # the control plane's resourceVersion of its copy
    cp_renew: float               # that copy's spec.renewTime (0: none)
    tier_renew: float = 0.0       # the spec.renewTime of the tier's copy
    renewed_at: float = 0.0       # monotonic clock of the last renewal absorbed
    renew_period: float = 10.0    # RENEW_SHARE x spec.leaseDurationSeconds
    user_agent: str = ""          # of the last renewal: the control plane names its managedFields manager by it
    in_flight: bool = False
    due_at: float | None = None   # the forwarder's queued due time (monotonic), None when not queued
    in_step: bool = False         # the control plane's copy came from a renewal the forwarder sent
    phase: int = 0                # which renewal goes first while not in step (Forwarder._threshold)

    @property
    def pending(self) -> bool:
        """The tier holds a renewal newer than the control plane's copy."""
        return self.tier_renew > self.cp_renew

    @classmethod
    def of(cls, cp_obj: Obj) -> "LeaseState":
        renew = renew_time(cp_obj)
        st = cls(int(cp_obj["metadata"]["resourceVersion"]), renew, renew,
                 phase=zlib.crc32(cp_obj["metadata"]["name"].encode()))
        st.set_period(cp_obj)
        return st

    def set_period(self, obj: Obj) -> None:
        d = (obj.get("spec") or {}).get("leaseDurationSeconds")
        if isinstance(d, int) and d > 0:
            self.renew_period = RENEW_SHARE * d


def renew_time(obj: Obj) -> float:
    return micro_time((obj.get("spec") or {}).get("renewTime")) or 0.0


class TierLeases(CacheDelegator):
    """The storage contract for the Leases of one namespace, held by the tier. `states` is shared with the
    forwarder; `on_renewal(name)` tells it of a renewal absorbed."""

    def __init__(self, res: Resource, kv: MemoryKV, prefix: str, cp: ControlPlane,
                 on_renewal: Callable[[str], None]):
        super().__init__(res, EtcdStore(kv, res.qualified), None, Residency(None), prefix)
        self.kv, self.cp, self.prefix = kv, cp, prefix
        self.states: dict[str, LeaseState] = {}
        self.on_renewal = on_renewal
        self.on_state: Callable[[str], None] = _ignore   # any other change of a state (the forwarder schedules)

    def name_of(self, key: str) -> str:
        return key[len(self.prefix):]

    # --- writes ----------------------------------------------------------------------------------

    async def try_update(self, key: str, obj: Obj, expected_rv: int) -> tuple[Obj | None, Obj | None]:
        name = self.name_of(key)
        cur = await self.store.get(key)
        if int(cur["metadata"]["resourceVersion"]) != expected_rv:
            return None, cur
        st = self.states.get(name)
        if st is not None and renewal_only(cur, obj):
            out, now = await self.store.try_update(key, obj, expected_rv)
            if out is not None:
                self.renewed(name, st, out)
            return out, now
        # Any other change: the control plane first, with its own resourceVersion as the precondition.
        try:
            cp_obj = await self.cp.call("PUT", self.cp.lease_path(name),
                                        for_control_plane(obj, st.cp_rv if st else None),
                                        user_agent=REQUEST_USER_AGENT.get())
        except ControlPlaneError as e:
            metrics.forwards.labels("change", str(e.status or "unreachable")).inc()
            if e.status == 409:
                # Changed there by someone else: take the control plane's copy; the client's precondition
                # then fails here as it would have there.
                return None, await self.adopt(name, await self.cp.call("GET", self.cp.lease_path(name)))
            if e.status == 404:
                await self.forget(name)
            raise e.status_error() from None
        metrics.forwards.labels("change", "ok").inc()
        return await self.store_as(name, cp_obj, expected_rv), None

    def renewed(self, name: str, st: LeaseState, out: Obj) -> None:
        """A bare renewal was stored (`out`, the tier's new version)."""
        st.renewed_at = time.monotonic()
        st.tier_renew = renew_time(out)
        st.user_agent = REQUEST_USER_AGENT.get()
        st.set_period(out)
        self.on_renewal(name)

    async def fast_renewal(self, name: str, body: Obj) -> Obj | None:
        """A renewal as kubelets send it (`nodetier.server.NodeTier.fast_renewal`): the body is the tier's
        current copy, resourceVersion included, with a new `spec.renewTime` in metav1.MicroTime's own form.
        Then what the general update path would store is exactly that copy with the new renewTime (the copy
        already went through defaulting, validation and canonical ordering; a MicroTime in this form is
        valid and kept as sent), so it is stored without that path. The stored object, or None when the
        body is anything else (the general path then answers, its errors and 409 texts included)."""
        st = self.states.get(name)
        spec = body.get("spec")
        if st is None or not isinstance(spec, dict):
            return None
        rt = spec.get("renewTime")
        if not isinstance(rt, str) or not MICRO_TIME.fullmatch(rt):
            return None
        kv = self.kv.current((self.prefix + name).encode())
        if kv is None:
            return None
        cur = decode_kv(kv)
        cur_spec = cur.get("spec")
        if not isinstance(cur_spec, dict) or "renewTime" not in cur_spec or cur_spec["renewTime"] == rt:
            return None         # (a renewTime added to the spec, or a no-op: the general path's answers)
        new = {**cur, "spec": {**cur_spec, "renewTime": rt}}
        if new != body:
            return None
        out, _ = await self.store.try_update(self.prefix + name, new, kv.mod_revision)
        if out is None:
            return None
        self.renewed(name, st, out)
        return out

    async def store_as(self, name: str, cp_obj: Obj, expected_rv: int) -> Obj:
        """Store the control plane's answer to a forward as the tier's new version."""
        key = self.prefix + name
        out, _ = await self.store.try_update(key, {**cp_obj, "metadata": without_rv(cp_obj)}, expected_rv)
        if out is None:     # changed here meanwhile (a renewal): the next forward carries it
            out = await self.store.get(key)
        st = self.note_control_plane(name, cp_obj)
        st.tier_renew = renew_time(out)
        self.on_state(name)
        return out

    def note_control_plane(self, name: str, cp_obj: Obj) -> LeaseState:
        st = self.states.get(name)
        if st is None:
            st = self.states[name] = LeaseState.of(cp_obj)
        rv = int(cp_obj["metadata"]["resourceVersion"])
        if rv >= st.cp_rv:
            st.cp_rv = rv
            st.cp_renew = renew_time(cp_obj)
            st.set_period(cp_obj)
        self.on_state(name)
        return st

    async def adopt(self, name: str, cp_obj: Obj) -> Obj:
        """The control plane's copy changed by someone else: it becomes the tier's, keeping a newer renewal
        the tier holds (acknowledged to its client: it is not lost, the forwarder sends it)."""
        key = self.prefix + name
        st = self.note_control_plane(name, cp_obj)
        st.in_step = False
        new = {**cp_obj, "metadata": without_rv(cp_obj), "spec": dict(cp_obj.get("spec") or {})}
        try:
            cur = await self.store.get(key)
        except serr.StorageError as e:
            if e.code is not serr.Code.KEY_NOT_FOUND:
                raise
            return await self.store.create(key, new)
        mine = renew_time(cur)
        if mine > st.cp_renew:
            new["spec"]["renewTime"] = cur["spec"]["renewTime"]
        st.tier_renew = max(mine, st.cp_renew)
        self.on_state(name)
        if without_renewal(cur) == without_renewal(new) and (cur.get("spec") or {}).get("renewTime") == \
                new["spec"].get("renewTime"):
            return cur
        out, _ = await self.store.try_update(key, new, int(cur["metadata"]["resourceVersion"]))
        return out if out is not None else await self.store.get(key)

    async def forget(self, name: str) -> None:
        """Deleted at the control plane: gone here too."""
        self.states.pop(name, None)
        try:
            await self.store.delete(self.prefix + name)
        except serr.StorageError as e:
            if e.code is not serr.Code.KEY_NOT_FOUND:
                raise

    async def create(self, key: str, obj: Obj) -> Obj:
        raise AssertionError("creates are proxied to the control plane (nodetier.server)")

    async def delete(self, key: str, **kw) -> tuple[Obj, int]:
        """Preconditions checked here (the tier's resourceVersion), then the control plane deletes its copy
        (the uid as precondition), then the tier's goes."""
        name = self.name_of(key)
        cur = await self.store.get(key)
        if kw.get("rv") is not None and cur["metadata"].get("resourceVersion") != kw["rv"]:
            return await self.store.delete(key, **kw)   # fails with the upstream conflict text
        uid = cur["metadata"].get("uid")
        try:
            await self.cp.call("DELETE", self.cp.lease_path(name),
                               {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}},
                               user_agent=REQUEST_USER_AGENT.get())
        except ControlPlaneError as e:
            if e.status != 404:
                raise e.status_error() from None
        self.states.pop(name, None)
        try:
            return await self.store.delete(key, **kw)
        except serr.StorageError as e:
            if e.code is not serr.Code.KEY_NOT_FOUND:
                raise
            return cur, self.kv.revision    # the control plane's DELETED event was here first (forget)


def _ignore(_name: str) -> None:
    return None


def without_rv(obj: Obj) -> Obj:
    return {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
