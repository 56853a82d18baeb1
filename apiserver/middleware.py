"""The request middleware: errors become Status responses (never a stack trace), and every request
is counted in `apiserver_request_total` / `apiserver_request_duration_seconds`."""
from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web

from machinery import errors
from machinery.resources import CRD
from storage import errors as serr

from . import metrics
from .endpoints.common import RequestScope
from .routes import is_watch
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
    except web.HTTPException:
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
    if scope is None:
        labels = (request.method.lower(), "", "", "", "", "", "", "apiserver")
    else:
        r = scope.resource
        verb = metric_verb(request.method, scope.name is None, is_watch(request))
        sc = "resource" if scope.name else ("namespace" if scope.namespace else "cluster")
        labels = (verb, "", r.group, r.version, r.plural, scope.subresource, sc, "apiserver")
    metrics.apiserver_request_total.labels(*labels, str(code)).inc()
    metrics.apiserver_request_duration_seconds.labels(*labels).observe(seconds)


def metric_verb(method: str, collection: bool, watch: bool) -> str:
    if watch:
        return "WATCH"
    return {"GET": "LIST" if collection else "GET", "POST": "POST", "PUT": "PUT", "PATCH": "PATCH",
            "DELETE": "DELETE"}.get(method, method)
