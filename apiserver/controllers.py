"""What upstream's controllers and post-start hooks would do, done in-process: the system
namespaces at start, CRDs served as soon as they exist (in every process sharing the etcd),
cascade deletes of a deleted CRD's objects and a deleted namespace's contents, and the
`apiserver_resource_objects` count."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from machinery import objects
from machinery.resources import CRD, Registry, Resource
from storage import errors as serr
from storage.router import Router
from storage.store import EtcdStore

from . import metrics

log = logging.getLogger("apiserver")

# Namespaces upstream creates at start (the system namespaces controller).
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# How often apiserver_resource_objects is refreshed (upstream: every minute).
STORAGE_OBJECTS_PERIOD = 30.0


class Controllers:
    def __init__(self, registry: Registry, router: Router, etcd_prefix: str,
                 store_for: Callable[[Resource], EtcdStore], serve: Callable[[Resource], Any],
                 forget: Callable[[Resource], None]):
        self.registry = registry
        self.router = router
        self.etcd_prefix = etcd_prefix
        self.store_for = store_for
        self.serve = serve      # start serving a resource (its storage and watch cache)
        self.forget = forget    # stop serving one (its CRD is gone)

    async def create_system_namespaces(self) -> None:
        ns = self.registry.lookup("", "v1", "namespaces")
        for name in SYSTEM_NAMESPACES:
            obj: dict[str, Any] = {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": name}}
            try:
                await self.store_for(ns).create(ns.key(self.etcd_prefix, None, name), objects.prepare_create(ns, obj))
            except serr.StorageError as e:
                if e.code is not serr.Code.KEY_EXISTS:
                    raise

    # --- CRDs: served as soon as created, in every process -------------------------------------

    async def load_crds(self) -> int:
        res = await self.store_for(CRD).list(CRD.prefix(self.etcd_prefix))
        for crd in res.items:
            self.registry.apply_crd(crd)
        return res.resource_version

    async def sync_crds_forever(self) -> None:
        """Follow CRD changes made through any apiserver sharing this etcd."""
        while True:
            try:
                rv = await self.load_crds()
                async for ev in self.store_for(CRD).watch(CRD.prefix(self.etcd_prefix), rv):
                    self.apply_crd_event(ev.type, ev.obj)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # etcd hiccup: re-list and re-watch
                log.warning("crd sync restarting error=%r", e)
                await asyncio.sleep(1)

    def apply_crd_event(self, ev_type: str, crd: dict) -> None:
        if ev_type == "DELETED":
            for r in self.registry.remove_crd(crd["metadata"]["name"]):
                self.forget(r)
        else:
            for r in self.registry.apply_crd(crd):
                self.serve(r)  # start filling the new resource's cache right away

    # --- side effects of writes ----------------------------------------------------------------

    async def after_write(self, res: Resource, ev_type: str, obj: dict) -> None:
        """Side effects of a successful write (what upstream's controllers would do)."""
        if res is CRD or res.plural == "customresourcedefinitions" and res.group == CRD.group:
            self.apply_crd_event(ev_type, obj)
            if ev_type == "DELETED":
                await self._delete_custom_objects(obj)
        elif res.plural == "namespaces" and not res.group and ev_type == "DELETED":
            await self._delete_namespace_contents(obj["metadata"]["name"])

    async def _delete_custom_objects(self, crd: dict) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        prefix = f"{self.etcd_prefix}/{spec.get('group')}/{names.get('plural')}/"
        await self.router.client_for(spec.get("group", ""), names.get("plural", "")).delete_prefix(prefix.encode())

    async def _delete_namespace_contents(self, namespace: str) -> None:
        # Upstream's namespace controller empties a terminating namespace; we do
        # it synchronously on delete (documented difference).
        done = set()
        for r in self.registry.all():
            if not r.namespaced or (r.group, r.plural) in done:
                continue
            done.add((r.group, r.plural))
            await self.router.client_for(r.group, r.plural).delete_prefix(r.prefix(self.etcd_prefix, namespace).encode())

    # --- metrics -------------------------------------------------------------------------------

    async def count_objects_forever(self) -> None:
        while True:
            seen = set()
            for r in self.registry.all():
                if (r.group, r.plural) in seen:
                    continue
                seen.add((r.group, r.plural))
                try:
                    n = await self.store_for(r).count(r.prefix(self.etcd_prefix))
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.warning("storage object count failed resource=%s error=%r", r.qualified, e)
                    n = -1  # as upstream: -1 when the count could not be fetched
                metrics.apiserver_resource_objects.labels(r.group, r.plural).set(n)
            await asyncio.sleep(STORAGE_OBJECTS_PERIOD)
