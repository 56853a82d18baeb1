"""`/livez`, `/readyz`, `/healthz` (with `?verbose`, `?exclude=` and per-check paths) and the
`/debug/residency` report."""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Callable

from apiserver.httpstack import web

from cache.cacher import Cacher
from cache.residency import Residency
from machinery import errors
from machinery.memory import malloc_info
from machinery.resources import Registry
from storage.router import Router

log = logging.getLogger("apiserver")

# Timeout of the etcd readiness check.
ETCD_CHECK_TIMEOUT = 2.0


class Health:
    def __init__(self, registry: Registry, router: Router, etcd_prefix: str,
                 cacher_of: Callable[[Any], Cacher | None], watch_cache: bool):
        self.registry = registry
        self.router = router
        self.etcd_prefix = etcd_prefix   # (FrontHealth builds on it)
        self.health_key = ("/" + "/".join(p for p in (etcd_prefix.strip("/"), "health") if p)).encode()
        self.cacher_of = cacher_of   # a resource's watch cache (None with --watch-cache=false)
        self.watch_cache = watch_cache  # /readyz waits for the watch caches

    async def check_etcd(self) -> str | None:
        """A linearizable GET of the one key `/<prefix>/health`, as upstream's prober (factory/etcd3.go). Not a
        range over the prefix: etcd walks every key of a range to count it, 35 ms at 280,000 objects."""
        try:
            async with asyncio.timeout(ETCD_CHECK_TIMEOUT):
                await self.router.default_client().get(self.health_key, "healthz")
            return None
        except Exception as e:
            return f"etcd: {e!r}"

    async def check_watch_cache(self) -> str | None:
        """Ready once every built-in resource's cache is initialised (upstream 1.36 default)."""
        pending = [f"{r.plural}" for r in self.registry.all()
                   if not r.custom and not self.cacher_of(r).ready]
        return f"watch cache not ready: {', '.join(pending)}" if pending else None

    def checks(self, kind: str) -> dict[str, Any]:
        checks: dict[str, Any] = {"ping": None, "log": None}
        checks["etcd"] = self.check_etcd   # on /livez too (S11.1)
        if kind == "readyz" and self.watch_cache:
            checks["watch-cache"] = self.check_watch_cache
        return checks

    async def respond(self, request: web.Request, kind: str, only: str | None) -> web.Response:
        checks = self.checks(kind)
        if only is not None and only not in checks:
            raise errors.not_found("", only)
        excluded = set(request.query.getall("exclude", []))
        lines = []
        failed = False
        for name, fn in checks.items():
            if only is not None and name != only:
                continue
            if name in excluded:
                lines.append(f"[+]{name} excluded: ok")
                continue
            err = await fn() if fn else None
            if err:
                failed = True
                lines.append(f"[-]{name} failed: reason withheld")
                log.warning("health check failed check=%s error=%s", name, err)
            else:
                lines.append(f"[+]{name} ok")
        verbose = "verbose" in request.query
        if only is not None:
            text = "ok" if not failed else lines[0] + "\n"
        elif failed:
            text = "\n".join(lines) + f"\n{kind} check failed\n"
        elif verbose:
            text = "\n".join(lines) + f"\n{kind} check passed\n"
        else:
            text = "ok"
        return web.Response(text=text, status=500 if failed else 200, content_type="text/plain")


def residency_report(residency: Residency, cachers: dict[tuple[str, str], Cacher]) -> dict[str, Any]:
    """Per resource: resident objects and bytes by structure (debug endpoint, residency benchmark)."""
    out: dict[str, Any] = {"residency": str(residency.selector) if residency.selector else "",
                           "fullResources": sorted(residency.full_resources), "resources": {}}
    for (group, plural), c in sorted(cachers.items()):
        st = c.wc.stats()
        st.update({"ready": c.ready, "start": c.started, "partial": residency.partial(plural), "rv": c.wc.rv,
                   "droppedNonResident": c.dropped_nonresident, "watchers": len(c.watchers)})
        out["resources"][f"{plural}.{group}" if group else plural] = st
    out["process"] = process_memory()
    return out


def process_memory() -> dict[str, int]:
    """RSS / peak RSS from /proc and the Python heap from tracemalloc (when the process was started
    with RESIDENCY_TRACEMALLOC=1, see __main__)."""
    import tracemalloc
    out: dict[str, int] = {"pid": os.getpid()}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    k, v = line.split(":", 1)
                    out["rss_bytes" if k == "VmRSS" else "rss_peak_bytes"] = int(v.split()[0]) * 1024
    except OSError:
        pass
    if tracemalloc.is_tracing():
        cur, peak = tracemalloc.get_traced_memory()
        out["tracemalloc_bytes"] = cur
        out["tracemalloc_peak_bytes"] = peak
    out.update(malloc_info())
    return out
