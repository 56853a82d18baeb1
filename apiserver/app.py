"""The apiserver process: configuration, the per-resource storage (etcd store, watch cache and the
delegator between them), start-up and shut-down, and the aiohttp application."""
from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from apiserver.httpstack import web

from cache import metrics as cache_metrics
from cache import snapshot
from cache.cacher import LIST_PAGE, RESIDENT_LIST_PAGE, Cacher
from cache.compression import CompressionConfig
from cache.delegator import CacheDelegator
from cache.residency import DEFAULT_FULL_RESOURCES, Residency
from machinery.encoding import encode_obj, wire_head
from machinery.resources import Registry, Resource
from storage.reflector import NameSet, reflect
from storage.router import Router
from storage.store import EtcdStore

from . import filters
from .auth import authz
from .auth import impersonation
from .auth.authn import authentication
from .controllers import Controllers
from .endpoints.common import Context
from .health import Health, residency_report
from .middleware import status_and_metrics
from .routes import Routes

log = logging.getLogger("apiserver")

# Periodic snapshots wait at least this many times as long as the last one took to write (<= 5 % of the time).
SNAPSHOT_TIME_SHARE = 20


@dataclass
class Config:
    etcd_servers: list[str]
    etcd_prefix: str = "/registry"
    etcd_overrides: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    watch_cache: bool = True                   # as the CLI's --watch-cache default
    residency: Any = None                      # machinery.shard_selector.ShardSelector or None (everything)
    full_resources: tuple[str, ...] = DEFAULT_FULL_RESOURCES
    compaction_interval: float = 300.0         # --etcd-compaction-interval (0: never)
    read_only: bool = False                    # --read-only: no write reaches etcd
    max_requests_inflight: int = 400           # --max-requests-inflight (0: no limit)
    max_mutating_requests_inflight: int = 200  # --max-mutating-requests-inflight (0: no limit)
    request_timeout: float = 60.0              # --request-timeout in seconds (0: none)
    # Authentication (apiserver/auth/authn.py). None of the three given: every request is system:unsecured.
    token_auth_file: str = ""                  # --token-auth-file: bearer tokens (upstream's CSV)
    client_ca_file: str = ""                   # --client-ca-file: x509 client certificates (secure port)
    anonymous_auth: bool | None = None         # --anonymous-auth (None: not given; upstream default true)
    authorization_modes: tuple[str, ...] = authz.DEFAULT_MODES  # --authorization-mode (apiserver/auth/authz.py)
    # Warm restart (cache/snapshot.py): the caches' snapshot file goes under state_dir ("": none).
    state_dir: str = ""                        # --state-dir
    warm_restart: bool = True                  # --warm-restart
    snapshot_interval: float = 60.0            # --cache-snapshot-interval (0: on shutdown only)
    # Cold entries compressed (cache/compression.py): --cache-compression, --cache-compression-eager.
    compression: CompressionConfig = field(default_factory=CompressionConfig)


class APIServer:
    def __init__(self, config: Config):
        self.config = config
        self.etcd_prefix = config.etcd_prefix.rstrip("/") or "/registry"
        self.registry = Registry()
        self.router = Router(config.etcd_servers, config.etcd_overrides)
        self.residency = Residency(config.residency, config.full_resources)
        self.controllers = Controllers(self.registry, self.router, self.etcd_prefix, store_for=self.store_for,
                                       serve=self.storage_for, forget=self.forget)
        self.health = Health(self.registry, self.router, self.etcd_prefix,
                             cacher_of=lambda r: self.storage_for(r).cacher, watch_cache=config.watch_cache)
        # Watch-list (S5) is served by the watch cache; without it we answer as upstream
        # does with the WatchList gate off (S5.3).
        self.endpoints = Context(registry=self.registry, etcd_prefix=self.etcd_prefix, storage=self.storage_for,
                                 after_write=self.controllers.after_write, watch_list_enabled=config.watch_cache)
        self.routes = Routes(self.registry, self.endpoints, self.health,
                             residency_report=lambda: residency_report(self.residency, self.cachers()),
                             read_only=config.read_only)
        self._storage: dict[tuple[str, str], CacheDelegator] = {}
        self._stores: dict[tuple[str, str], EtcdStore] = {}
        self._tasks: list[asyncio.Task] = []
        self.etcd_version = ""
        self.rbac = None
        if authz.RBAC in config.authorization_modes:
            from .auth.rbac import RBACAuthorizer
            self.rbac = RBACAuthorizer()
        self.authorizer = authz.Authorizer(config.authorization_modes, self.rbac)
        self.snapshot_path = None   # named at start(), once the etcd clusters' ids are known
        self._snapshot_file: snapshot.SnapshotFile | None = None
        self._snapshot_reason: str | None = None   # at start: why there is no snapshot file ("" if there is)
        self._snapshot_task: asyncio.Task | None = None
        self._snapshot_lock = asyncio.Lock()

    # --- storage: one etcd store, watch cache and delegator per resource ----------------------

    def store_for(self, res: Resource) -> EtcdStore:
        k = (res.group, res.plural)
        s = self._stores.get(k)
        if s is None:
            s = self._stores[k] = EtcdStore(self.router.client_for(res.group, res.plural), res.qualified)
        return s

    def storage_for(self, res: Resource) -> CacheDelegator:
        """The resource's storage contract; its watch cache is created and started on first use."""
        k = (res.group, res.plural)
        d = self._storage.get(k)
        if d is None:
            d = self._storage[k] = CacheDelegator(res, self.store_for(res), self._new_cacher(res), self.residency,
                                                  res.prefix(self.etcd_prefix))
        return d

    def _new_cacher(self, res: Resource) -> Cacher | None:
        if not self.config.watch_cache:
            return None
        # A dedicated etcd client per cached resource: progress requests apply to
        # every watch on a gRPC stream (S3.2).
        client = self.router.client_for(res.group, res.plural, dedicated=True)
        client.version = self.etcd_version
        prefix = res.prefix(self.etcd_prefix)
        warm = None
        if self._snapshot_reason is not None:   # only for the caches created at start
            if self._snapshot_file is not None:
                warm = self._snapshot_file.sections.pop(f"{res.group}/{res.plural}", None)
            if warm is None:
                cache_metrics.snapshot_loads.labels(res.group, res.plural, self._snapshot_reason or "missing").inc()
        c = Cacher(store=self.store_for(res), client=client, prefix=prefix,
                   resource_label=res.plural, group=res.group,
                   encode=lambda obj, _r=res: encode_obj(_r, obj),
                   residency=self.residency.ingest_filter(res.plural, prefix, res.namespaced),
                   head=wire_head(res),
                   # Poll at least as often as we compact (upstream: every 15 s).
                   compaction_poll=min(15.0, self.config.compaction_interval or 15.0),
                   list_page=RESIDENT_LIST_PAGE if self.residency.partial(res.plural) else LIST_PAGE,
                   residency_name=self._residency_name(), warm=warm, compression=self.config.compression)
        c.start()
        return c

    def forget(self, res: Resource) -> None:
        """A resource no longer served (its CRD was deleted): stop its cache."""
        d = self._storage.pop((res.group, res.plural), None)
        if d is not None and d.cacher is not None:
            asyncio.ensure_future(d.cacher.stop())

    def cachers(self) -> dict[tuple[str, str], Cacher]:
        return {k: d.cacher for k, d in self._storage.items() if d.cacher is not None}

    # --- lifecycle -----------------------------------------------------------------------------

    def _residency_name(self) -> str:
        return str(self.config.residency) if self.config.residency is not None else ""

    async def start(self) -> None:
        self.etcd_version = await self.router.default_client().status()
        if self.config.state_dir and self.config.warm_restart and self.config.watch_cache:
            self.snapshot_path = await self._snapshot_path()
        if self.snapshot_path is not None:
            self._snapshot_file, self._snapshot_reason = snapshot.open_snapshot(self.snapshot_path)
        if not self.config.read_only:
            await self.controllers.create_system_namespaces()
        if self.rbac is not None and not self.config.read_only:
            from .auth.bootstrap import ensure_bootstrap_policy
            await ensure_bootstrap_policy(self.registry, self.store_for, self.etcd_prefix)
        await self.controllers.load_crds()
        if self.config.watch_cache:
            for r in self.registry.all():
                self.storage_for(r)
        self._snapshot_file = self._snapshot_reason = None   # a cache created later lists
        if self.snapshot_path is not None:
            self._snapshot_task = asyncio.create_task(self._snapshot_forever())
        if self.rbac is not None:
            await self._feed_rbac()
        await self._know_namespaces()
        self._tasks.append(asyncio.create_task(self.controllers.sync_crds_forever()))
        if self.config.compaction_interval > 0 and not self.config.read_only:
            # One compactor per etcd cluster, as upstream's per-endpoint compactors: an override's etcd (a Lease
            # etcd taking every renewal) would otherwise keep its whole history.
            from storage.compact import run_compactor
            clusters = {tuple(self.router.default_servers): ("", "")}
            for group, resource in sorted(self.router.overrides):
                clusters.setdefault(tuple(self.router.servers_for(group, resource)), (group, resource))
            for group, resource in clusters.values():
                self._tasks.append(asyncio.create_task(
                    run_compactor(self.router.client_for(group, resource), self.config.compaction_interval)))
        self._tasks.append(asyncio.create_task(self.controllers.count_objects_forever()))

    async def _feed_rbac(self) -> None:
        """The RBAC authorizer reads the four RBAC kinds from their watch caches (fully resident by default),
        else from its own list + watch on etcd."""
        for plural in authz.RBAC_KINDS:
            res = self.registry.lookup("rbac.authorization.k8s.io", "v1", plural)
            if self.config.watch_cache and not self.residency.partial(plural):
                authz.observe_cache(self.rbac, plural, self.storage_for(res).cacher)
            else:
                self._tasks.append(await authz.reflect_from_etcd(
                    self.rbac, plural, self.store_for(res), res.prefix(self.etcd_prefix)))

    async def _know_namespaces(self) -> None:
        """Without a watch cache of namespaces (a front, --watch-cache=false), keep their names from a reflector,
        so a create's NamespaceLifecycle check does not read etcd (upstream's admission reads an informer); a
        name not known yet is still asked of etcd (endpoints.write.ensure_namespace)."""
        res = self.registry.lookup("", "v1", "namespaces")
        st = self.storage_for(res)
        if st.cacher is None:
            prefix = res.prefix(self.etcd_prefix)
            st.known = NameSet(prefix)
            self._tasks.append(await reflect(self.store_for(res), prefix, st.known, "namespaces"))

    # --- warm restart: the caches' snapshot (cache/snapshot.py) ----------------------------------------------

    async def _snapshot_path(self) -> str | None:
        """The snapshot file of this data: the prefix, the residency, and the cluster id of the default etcd
        and of each override's (None, no warm restart this time, if an override's etcd does not answer)."""
        clusters = {"": f"{self.router.default_client().cluster_id:x}"}
        for group, resource in sorted(self.router.overrides):
            try:
                c = self.router.client_for(group, resource)
                if c.cluster_id is None:
                    await c.status()
            except Exception as e:  # noqa: BLE001 (any failure: it is only the warm restart that is lost)
                log.warning("warm restart off: the etcd of %s/%s did not give its cluster id: %r", group, resource, e)
                return None
            clusters[f"{group}/{resource}"] = f"{c.cluster_id:x}"
        return snapshot.snapshot_path(os.path.abspath(self.config.state_dir), self.etcd_prefix,
                                      self._residency_name(), clusters)

    async def write_snapshot(self) -> dict | None:
        """Write every ready cache to the snapshot file (atomically); None if it failed (logged, counted)."""
        cachers = list(self.cachers().items())
        await asyncio.gather(*(c.freshen() for _, c in cachers))

        async def captures():
            for (group, plural), c in cachers:
                cap = await c.capture()
                if cap is not None:
                    yield f"{group}/{plural}", cap
        async with self._snapshot_lock:
            try:
                st = await snapshot.write_snapshot(self.snapshot_path, {"etcd_prefix": self.etcd_prefix,
                                                                        "residency": self._residency_name()},
                                                   captures())
            except asyncio.CancelledError:
                raise
            except Exception as e:
                cache_metrics.snapshot_writes.labels("error").inc()
                log.warning("watch cache snapshot failed path=%s error=%r", self.snapshot_path, e)
                return None
        cache_metrics.snapshot_writes.labels("ok").inc()
        cache_metrics.snapshot_bytes.set(st["bytes"])
        cache_metrics.snapshot_seconds.set(st["seconds"])
        log.info("watch cache snapshot written path=%s resources=%d objects=%d bytes=%d seconds=%.3f",
                 self.snapshot_path, st["sections"], st["entries"], st["bytes"], st["seconds"])
        return st

    async def _snapshot_forever(self) -> None:
        """A first snapshot once every cache is ready (a process killed before its first periodic one still
        restarts warm), then one per interval when some cache has moved on; never more than 5 % of the time
        (a 10 s write of a 560 MB cache waits 200 s for the next)."""
        interval = self.config.snapshot_interval
        if interval <= 0:
            return
        t0 = time.monotonic()
        while not all(c.ready for c in self.cachers().values()) and time.monotonic() - t0 < interval:
            await asyncio.sleep(0.2)
        last: dict | None = None
        due = next_allowed = 0.0
        while True:
            state = {k: c.wc.rv for k, c in self.cachers().items() if c.ready}
            now = time.monotonic()
            # A cache that became ready since the last write (a CRD created after start) is written at once
            # (time share permitting): a process killed before the next interval still restarts it warm.
            new_cache = last is not None and not state.keys() <= last.keys()
            if state != last and (now >= due or (new_cache and now >= next_allowed)):
                st = await self.write_snapshot()
                took = st["seconds"] if st else 0.0
                last = state
                due = time.monotonic() + max(interval, SNAPSHOT_TIME_SHARE * took)
                next_allowed = time.monotonic() + SNAPSHOT_TIME_SHARE * took
            await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self._snapshot_task is not None:
            self._snapshot_task.cancel()
            await asyncio.gather(self._snapshot_task, return_exceptions=True)
        if self.snapshot_path is not None:
            await self.write_snapshot()
        for d in self._storage.values():
            if d.cacher is not None:
                await d.cacher.stop()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, *(s.stop() for s in self._stores.values()), return_exceptions=True)
        await self.router.close()

    def app(self) -> web.Application:
        c = self.config
        app = web.Application(middlewares=[
            # Authentication first, then the in-flight limit, as upstream's chain (WithAuthentication outside
            # WithMaxInFlightLimit): an unauthenticated flood gets 401s, never takes the in-flight seats. Before
            # the path checks too: upstream answers an unauthenticated request 401 whatever its path names
            # (only Go's HTTP server refuses a malformed escape before it).
            authentication(c),
            # Impersonation after authentication, before the in-flight limit and authorization (upstream's
            # chain: WithImpersonation between WithAuthentication and WithMaxInFlightLimit/WithAuthorization).
            impersonation.middleware(self.authorizer),
            filters.max_in_flight(c.max_requests_inflight, c.max_mutating_requests_inflight),
            # Authorization right after authentication, on the path as the client sent it (upstream: a
            # refused request is 403 whatever names its path holds).
            *([] if self.authorizer.always_allow else [authz.middleware(self.authorizer)]),
            filters.path_guard, status_and_metrics, filters.request_timeout(c.request_timeout),
        ], client_max_size=8 * 1024 * 1024)
        app[authz.AUTHORIZER] = self.authorizer
        app.router.add_route("*", "/{tail:.*}", self.routes.dispatch)

        async def on_startup(_):
            await self.start()

        async def on_cleanup(_):
            await self.stop()
        app.on_startup.append(on_startup)
        app.on_cleanup.append(on_cleanup)
        return app
