"""The request middleware: errors become Status responses (never a stack trace), and every request
is counted in `apiserver_request_total` / `apiserver_request_duration_seconds` and (but watches and dryRun
requests) `apiserver_request_sli_duration_seconds`."""
from __future__ import annotations

import asyncio
import logging
import time

from apiserver.httpstack import web

from machinery import errors
from machinery.resources import CRD
from storage import errors as serr

from . import metrics
from .auth.authz import request_info
from .auth.requestinfo import RequestInfoError
from .endpoints.common import RequestScope
from .routes import NON_RESOURCE_METRIC, is_watch
from .status import map_storage_error, status_response

log = logging.getLogger("apiserver")


@web.middleware
async def status_and_metrics(request: web.Request, handler) -> web.StreamResponse:
    t0 = time.perf_counter()
    code = 500
    try:
        resp = await handler(request)
        code = resp.status
        return resp
    except errors.StatusError as e:
        code = e.code
        return status_response(e)
    except serr.StorageError as e:
        scope = request.get("scope")
        se = map_storage_error(e, scope.resource if scope else CRD)
        code = se.code
        return status_response(se)
    except web.HTTPException as e:  # aiohttp's own answers (a body over the size limit): their code, not a 500
        code = e.status
        raise
    except (asyncio.CancelledError, ConnectionResetError):
        code = 499
        raise
    except Exception as e:  # an internal bug: log it, never send a stack trace
        log.exception("internal error path=%s", request.path)
        se = errors.internal(repr(e))
        code = 500
        return status_response(se)
    finally:
        observe(request, code, time.perf_counter() - t0)


def observe(request: web.Request, code: int, seconds: float) -> None:
    scope: RequestScope | None = request.get("scope")
    dry = dry_run_label(request.query.getall("dryRun", []))
    if scope is None:
        # Upstream instruments only a few non-resource handlers (healthz.InstallPathHandlerWithHealthyFunc,
        # kube-aggregator's OpenAPI v3 proxier, the aggregated discovery handler), which dispatch names; anything
        # else outside a resource (/version, /openapi/v2, unaggregated discovery, /metrics, an unknown path) is
        # not counted.
        named = request.get(NON_RESOURCE_METRIC)
        if named is None:
            return
        subresource, component = named
        labels = ("GET", dry, "", "", "", subresource, "", component)
        verb = "GET"
    else:
        r = scope.resource
        verb = metric_verb(request.method, scope.name is None, is_watch(request) or legacy_watch(request))
        # Upstream CleanScope: a named object, or any create (POST), is "resource".
        sc = "resource" if scope.name or request.method == "POST" else (
            "namespace" if scope.namespace else "cluster")
        labels = (verb, dry, r.group, r.version, r.plural, scope.subresource, sc, "apiserver")
    record(labels, code, seconds, verb != "WATCH" and not dry)


def record(labels: tuple[str, ...], code: int, seconds: float, sli: bool) -> None:
    """Count one request of the label set `labels` (upstream's order, without the code) in the three request
    metrics; `sli`: also in the SLI histogram. (The node tier's raw renewals count here too.)"""
    series = _SERIES.get((labels, code))
    if series is None:
        series = _SERIES[(labels, code)] = _series(labels, code, sli)
    total, duration, sli_series = series
    total.inc()
    duration.observe(seconds)
    if sli_series is not None:
        sli_series.observe(seconds)


# The children of the three request metrics per label set, found with one lookup instead of three. A few hundred
# label sets at most.
_SERIES: dict[tuple, tuple] = {}


def _series(labels: tuple[str, ...], code: int, sli: bool) -> tuple:
    # Upstream's SLI is the request duration minus mutating/validating webhook time and the APF queue wait;
    # this server has neither webhooks nor APF queueing, so the SLI value is the request duration itself.
    # Like upstream, never for a watch (WithLatencyTrackers skips the watch verb) nor a dryRun request
    # (any dryRun query value, "invalid" too: kubernetes#131092).
    return (metrics.apiserver_request_total.labels(*labels, str(code)),
            metrics.apiserver_request_duration_seconds.labels(*labels),
            metrics.apiserver_request_sli_duration_seconds.labels(labels[0], *labels[2:]) if sli else None)


_VALID_VERBS = frozenset(("APPLY", "CONNECT", "CREATE", "DELETE", "DELETECOLLECTION", "GET", "LIST", "PATCH", "POST",
                          "PROXY", "PUT", "UPDATE", "WATCH", "WATCHLIST"))
_CONNECT_SUBRESOURCES = frozenset(("log", "exec", "portforward", "attach", "proxy"))


def _request_info_labels(request: web.Request) -> tuple:
    """(verb, RequestInfo of a resource request or None, scope) as upstream's RecordDroppedRequest and
    RecordRequestTermination compute them: CleanScope, then CanonicalVerb and CleanVerb."""
    try:
        info = request_info(request)
    except RequestInfoError:
        info = None
    if info is not None and (info.name or info.verb == "create"):
        scope = "resource"
    elif info is not None and info.namespace:
        scope = "namespace"
    elif info is not None and info.is_resource_request:
        scope = "cluster"
    else:
        scope = ""
    verb = request.method.upper()
    if verb in ("GET", "HEAD"):
        verb = "LIST" if scope not in ("resource", "") else "GET"
        if request.method == "GET" and request.query.get("watch", "").lower() not in ("", "0", "false"):
            verb = "WATCH"
    elif verb == "PATCH" and request.headers.get("Content-Type") == "application/apply-patch+yaml":
        verb = "APPLY"
    if info is not None and info.is_resource_request and info.subresource in _CONNECT_SUBRESOURCES:
        verb = "CONNECT"
    if verb not in _VALID_VERBS:
        verb = "other"
    if info is not None and not info.is_resource_request:
        info = None
    return verb, info, scope


def count_dropped(request: web.Request) -> None:
    """A request the in-flight limit refused (429), as upstream's WithMaxInFlightLimit records it: in
    apiserver_request_total (RecordDroppedRequest; no duration) and apiserver_request_terminations_total."""
    verb, info, scope = classified = _request_info_labels(request)
    dry = dry_run_label(request.query.getall("dryRun", []))
    if info is not None:
        labels = (verb, dry, info.api_group, info.api_version, info.resource, info.subresource, scope, "apiserver")
    else:
        labels = (verb, dry, "", "", "", "", scope, "apiserver")
    metrics.apiserver_request_total.labels(*labels, "429").inc()
    count_termination(request, 429, classified)


def count_termination(request: web.Request, code: int, classified: tuple | None = None) -> None:
    """upstream's RecordRequestTermination: a request the server ended in self-defense (429 from the in-flight
    limit, 504 from the request timeout), counted in apiserver_request_terminations_total; outside a resource
    under its path. `classified`: `_request_info_labels(request)` if the caller has it already."""
    verb, info, scope = classified or _request_info_labels(request)
    if info is not None:
        labels = (verb, info.api_group, info.api_version, info.resource, info.subresource, scope, "apiserver")
    else:
        labels = (verb, "", "", "", request.path, scope, "apiserver")
    metrics.apiserver_request_terminations_total.labels(*labels, str(code)).inc()


def dry_run_label(values: list[str]) -> str:
    """Upstream cleanDryRun: "" without dryRun, "invalid" if any value is not "All", else the sorted set joined."""
    if any(v != "All" for v in values):
        return "invalid"
    return ",".join(sorted(set(values)))


def legacy_watch(request: web.Request) -> bool:
    """A GET of a deprecated /watch/ path (/api/v1/watch/..., /apis/<group>/<version>/watch/...): a WATCH."""
    parts = request.path.split("/")  # ["", "api", "v1", "watch", ...] or ["", "apis", g, v, "watch", ...]
    return request.method == "GET" and ((len(parts) > 3 and parts[1] == "api" and parts[3] == "watch") or (
        len(parts) > 4 and parts[1] == "apis" and parts[4] == "watch"))


def metric_verb(method: str, collection: bool, watch: bool) -> str:
    if watch:
        return "WATCH"
    return {"GET": "LIST" if collection else "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH",
            "DELETE": "DELETE"}.get(method, method)
