"""The one place lower layers' errors become Kubernetes Status objects (S8.2-S8.3), and their response."""
from __future__ import annotations

from apiserver.httpstack import web

from machinery import bodies, errors, jsonenc
from machinery.resources import Resource
from storage import errors as serr


def map_storage_error(e: serr.StorageError, res: Resource, name: str = "") -> errors.StatusError:
    """The one place storage errors become Status objects (S8.3)."""
    c = e.code
    if c is serr.Code.KEY_NOT_FOUND:
        return errors.not_found(res.plural, name or e.key.rsplit("/", 1)[-1], res.group)
    if c is serr.Code.KEY_EXISTS:
        return errors.already_exists(res.plural, name or e.key.rsplit("/", 1)[-1], res.group)
    if c is serr.Code.RV_CONFLICT:
        why = e.message
        if why == "the object has been modified":
            why += "; please apply your changes to the latest version and try again"
        return errors.conflict(res.plural, name or e.key.rsplit("/", 1)[-1], res.group, why)
    if c is serr.Code.EXPIRED:
        return errors.expired(e.status_message or "The resourceVersion for the provided list is too old.",
                              metadata={"continue": e.continue_token} if e.continue_token else None)
    if c is serr.Code.TOO_LARGE_RV:
        return errors.too_large_resource_version(e.rv, e.current_rv, retry_after=e.retry_after)
    if c is serr.Code.NOT_READY:
        return errors.too_many_requests("storage is (re)initializing", e.retry_after)
    if c is serr.Code.PROGRESS_UNSUPPORTED:
        return errors.StatusError(500, "InternalError", "a watch stream was requested by the client but the "
                                                        "required storage feature RequestWatchProgress is disabled")
    if c in (serr.Code.INVALID_CONTINUE, serr.Code.INVALID_RV):
        return errors.bad_request(e.message)
    if c is serr.Code.TOO_LARGE:
        # Upstream answers 500 with etcd's text; the client's mistake is a 413 here (a deliberate difference).
        return errors.StatusError(413, "RequestEntityTooLarge", "etcdserver: request is too large")
    if c is serr.Code.INVALID_KEY:
        return errors.bad_request(e.message)  # upstream: 500 with this text (a deliberate difference)
    if c is serr.Code.INVALID_OBJECT:  # e.g. a JSON patch nesting the object deeper than this server stores
        return errors.bad_request(bodies.too_deep_message() if "Recursion" in e.message
                                  else f"the object cannot be stored: {e.message}")
    if c is serr.Code.UNREACHABLE:
        return errors.StatusError(504, "Timeout", f"etcd unreachable: {e.message}")
    return errors.internal(e.message or c.value)


def status_response(e: errors.StatusError) -> web.Response:
    headers = {}
    if e.retry_after:
        headers["Retry-After"] = str(e.retry_after)
    return web.Response(body=jsonenc.dumps(e.status()) + b"\n", status=e.code,
                        content_type="application/json", headers=headers)
