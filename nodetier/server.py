"""The node tier's HTTP server: the node Leases it absorbs are served by the apiserver's own endpoints over
`TierLeases`; every other request is proxied to the control plane as it came.

Absorbed: GET (one Lease, a list, a watch), PUT, PATCH and DELETE under
`/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases`. A create goes to the control plane, and its
answer becomes the tier's copy. Who may write an absorbed Lease is decided here, since no RBAC lives in the
tier: `system:masters` (and every request when the tier has no authentication flags, as the apiserver's
unsecured port), and a node for its own Lease only (upstream's NodeRestriction admission: the 403 text is
upstream's); any other user's request goes to the control plane, which decides. The tier answers its own
`/livez`, `/readyz` (ready once its Leases are loaded) and `/metrics`.
"""
from __future__ import annotations

import functools
import logging
from types import SimpleNamespace

import orjson
from aiohttp import web
from machinery.metrics import CONTENT_TYPE, generate_latest

from apiserver.auth import authz, impersonation
from apiserver.auth.authn import X509, authentication
from apiserver.auth.requestinfo import RequestInfoError
from apiserver.auth.user import SYSTEM_PRIVILEGED_GROUP
from apiserver.endpoints import read, watch, write
from apiserver.endpoints.common import Context, RequestScope, decode_body, read_body, respond_obj
from apiserver.middleware import status_and_metrics
from apiserver.routes import is_watch
from machinery import errors, protobuf, tables
from machinery.resources import Registry

from .controlplane import ControlPlane, ControlPlaneError, Identity
from .forwarder import Forwarder
from . import metrics
from .leases import REQUEST_USER_AGENT, TierLeases
from .memkv import MemoryKV
from .split import HOP_HEADER, NodeRanges

log = logging.getLogger("nodetier")

NAMESPACE = "kube-node-lease"
COLLECTION = ["apis", "coordination.k8s.io", "v1", "namespaces", NAMESPACE, "leases"]
NODES_GROUP = "system:nodes"
NODE_PREFIX = "system:node:"
FAST_BODY_MAX = 64 * 1024          # the largest renewal body the fast paths take (a Lease is ~0.6 KB)
# A renewal's body: JSON (leasegen, some clients), or protobuf (the kubelet's and kwok's typed clients send
# built-in kinds as application/vnd.kubernetes.protobuf, accepting protobuf or JSON back).
RENEWAL_MEDIA_TYPES = ("application/json", protobuf.MEDIA_TYPE)


@functools.lru_cache(maxsize=64)
def plain_object(accept: str | None) -> bool:
    """Whether the Accept header asks for the object itself (no Table or PartialObjectMetadata), which this
    server answers as JSON whatever the media type (machinery.tables.negotiate): then a renewal's answer is
    respond_obj's JSON. (A handful of distinct values in practice: one per kind of client.)"""
    return tables.negotiate(accept) is None


def node_name(user) -> str | None:
    """The node a user is (`system:node:NAME` in `system:nodes`, as upstream's NodeRestriction reads it), or None."""
    if NODES_GROUP in user.groups and user.name.startswith(NODE_PREFIX):
        return user.name[len(NODE_PREFIX):]
    return None


def serves_itself(user, lease: str | None, method: str) -> bool:
    """Whether the tier answers a request on Lease `lease` (None: the collection) itself rather than leaving it to
    the control plane and its policy: without authentication (`user` None), for `system:masters`, and for a node
    on its own Lease (or creating one). Both the aiohttp path (`NodeTier._absorbs`, which first refuses a node's
    request for another node's Lease) and the raw path (`rawpath.RawRenewals`) ask this."""
    if user is None or SYSTEM_PRIVILEGED_GROUP in user.groups:
        return True
    node = node_name(user)
    return node is not None and (lease == node if lease is not None else method == "POST")


class NodeTier:
    def __init__(self, identity: Identity, *, forward_interval: float = 30.0, forward_qps: float = 500.0,
                 forward_concurrency: int = 192, token_auth_file: str = "", client_ca_file: str = "",
                 anonymous_auth: bool | None = None,
                 ranges: NodeRanges | None = None):
        self.registry = Registry()
        self.res = self.registry.lookup("coordination.k8s.io", "v1", "leases")
        # (a connection per forward in flight stays open: beyond H1Client's 64, every forward above them paid
        # for a new connection, at both ends)
        self.cp = ControlPlane(identity, NAMESPACE, max_idle=forward_concurrency + 16)
        self.kv = MemoryKV()
        prefix = self.res.prefix("/registry", NAMESPACE)
        self.leases = TierLeases(self.res, self.kv, prefix, self.cp, on_renewal=self._renewed)
        self.ranges = ranges or NodeRanges()
        self.forwarder = Forwarder(self.leases, self.cp, interval=forward_interval, qps=forward_qps,
                                   concurrency=forward_concurrency, owns=self.ranges.owns)
        self.ctx = Context(registry=self.registry, etcd_prefix="/registry", storage=lambda _r: self.leases,
                           after_write=_nothing, watch_list_enabled=False)
        self.auth_config = SimpleNamespace(token_auth_file=token_auth_file, client_ca_file=client_ca_file,
                                           anonymous_auth=anonymous_auth)
        self.authenticates = bool(token_auth_file or client_ca_file or anonymous_auth is not None)
        # impersonation asked by a client-certificate user: granted to system:masters alone (AlwaysDeny behind
        # the union's privileged-group authorizer)
        self._impersonator = impersonation.Impersonation(authz.Authorizer((authz.ALWAYS_DENY,)))

    def _renewed(self, name: str) -> None:
        metrics.renewals_absorbed.inc()
        self.forwarder.on_renewal(name)

    async def start(self) -> None:
        await self.cp.start()
        self.forwarder.start()

    async def stop(self) -> None:
        await self.forwarder.stop()
        await self.kv.close()
        await self.cp.close()

    # --- requests ---------------------------------------------------------------------------------

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts in (["livez"], ["healthz"]):
            return web.Response(text="ok")
        if parts == ["readyz"]:
            ok = self.forwarder.loaded.is_set()
            return web.Response(status=200 if ok else 500, text="ok" if ok else "leases not loaded yet")
        if parts == ["metrics"]:
            metrics.leases_held.set(len(self.leases.states))
            metrics.leases_pending.set(sum(1 for s in self.leases.states.values() if s.pending))
            return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE})
        self._impersonation(request)
        if parts[:6] != COLLECTION or len(parts) > 7 or not self._absorbs(request, parts):
            return await self._proxy(request)
        if self.ranges.split:
            routed = await self._route(request, parts)
            if routed is not None:
                return routed
        if not self.forwarder.loaded.is_set():
            raise errors.StatusError(429, "TooManyRequests", "the node tier is loading its Leases", {
                "retryAfterSeconds": 1}) from None
        name = parts[6] if len(parts) == 7 else None
        scope = RequestScope(self.res, NAMESPACE, name, "")
        request["scope"] = scope
        token = REQUEST_USER_AGENT.set(request.headers.get("User-Agent", ""))
        try:
            m = request.method
            if name is None:
                if m == "POST":
                    return await self.create(request)
                if m == "GET":
                    return await (watch.watch if is_watch(request) else read.list_)(self.ctx, request, scope)
                # deletecollection: the control plane's
                return await self._proxy(request)
            if m == "PUT":
                fast = await self.fast_renewal(request, name)
                if fast is not None:
                    return fast
            handler = {"GET": read.get, "PUT": write.update, "PATCH": write.patch, "DELETE": write.delete}.get(m)
            if handler is None:
                return await self._proxy(request)
            return await handler(self.ctx, request, scope)
        finally:
            REQUEST_USER_AGENT.reset(token)

    async def _proxy(self, request: web.Request, base: str = "") -> web.StreamResponse:
        """Hand the request on (to the control plane, or to the tier at `base`) as whom it came from: the tier
        itself without authentication flags; a client-certificate user by impersonation with the tier's
        identity (its certificate cannot be passed on); anyone else with what they sent (their token, or
        nothing: anonymous)."""
        if not self.authenticates:
            return await self.cp.proxy(request, as_tier=True, base=base)
        if request.get("credential") == X509:
            return await self.cp.proxy(request, as_tier=True, base=base, impersonate=request["user"])
        return await self.cp.proxy(request, as_tier=False, base=base)

    def _impersonation(self, request: web.Request) -> None:
        """A client-certificate user asking to act as another (another tier handing on a node's request, or an
        admin's `--as`): the tier trusts `system:masters` only (upstream's privileged group, as the apiserver's
        authorizer does) and then serves and hands on the request as the user asked for; anyone else gets
        upstream's 403 for the impersonation. (A token user's impersonation headers go on to the control
        plane with the token, which decides.)"""
        if request.get("credential") != X509 or not any(k[:12].lower() == "impersonate-" for k in request.headers):
            return
        want = impersonation.wanted(request.headers)
        if want is None:
            return
        try:
            info = authz.request_info(request)
        except RequestInfoError as e:
            raise errors.StatusError(500, "InternalError", f"failed to create RequestInfo: {e}", {}) from None
        try:
            request["user"] = self._impersonator.act_as(request["user"], want,
                                                        authz.attributes_for(info, request["user"]))
        except impersonation.Refused as e:
            raise authz.forbidden(e.attrs, e.reason) from None

    async def _route(self, request: web.Request, parts: list[str]) -> web.StreamResponse | None:
        """With several tiers (nodetier.split): a Lease another tier owns is that tier's (a create is routed by
        the name in its body); a list or watch of the namespace is the control plane's, which holds every
        Lease (renewTimes up to a forward interval old, its own resourceVersions), where a tier holds only
        its range. None: this tier serves the request."""
        if len(parts) == 6:
            if request.method == "GET":
                return await self._proxy(request)
            if request.method != "POST":
                return None
            md = (await decode_body(request, self.res)).get("metadata")     # (the body stays readable)
            name = md.get("name") if isinstance(md, dict) else None
            if not isinstance(name, str) or not name:
                return None                     # the create's own validation answers
        else:
            name = parts[6]
        if self.ranges.owns(name):
            return None
        if HOP_HEADER in request.headers:
            raise errors.StatusError(500, "InternalError", f"the node tiers disagree on who holds lease {name!r}: "
                                     f"this one holds {self.ranges.describe()}", {})
        return await self._proxy(request, base=self.ranges.url_of(name))

    async def fast_renewal(self, request: web.Request, name: str) -> web.Response | None:
        """A kubelet's renewal (a PUT of the Lease the tier last answered with a new renewTime: every ~10 s
        from every node) answered without the general update path, which costs most of the tier's CPU per
        renewal beside HTTP itself. Only a PUT with no query parameters, a JSON or protobuf body and an Accept
        that asks for the object itself (`plain_object`) qualifies; anything else, or a body that is not exactly
        such a renewal, takes the general path (which finds the body read_body kept), so every answer but the
        time it takes is the general path's."""
        if request.query_string or request.content_type not in RENEWAL_MEDIA_TYPES or \
                not plain_object(request.headers.get("Accept")):
            return None
        if (request.content_length or 0) > FAST_BODY_MAX:
            return None
        out = await self.absorb_renewal(name, await read_body(request),
                                        request.content_type == protobuf.MEDIA_TYPE)
        return None if out is None else respond_obj(request, self.res, out)

    async def absorb_renewal(self, name: str, body: bytes, is_protobuf: bool = False) -> dict | None:
        """A renewal's body (JSON, or protobuf), stored if it is exactly the kubelet's form
        (`TierLeases.fast_renewal`): the tier's new copy, or None (nothing stored) when the general path must
        answer. (Also nodetier.rawpath's.)"""
        try:
            obj = protobuf.decode(body, self.res.api_version, self.res.kind) if is_protobuf else orjson.loads(body)
        except Exception:  # noqa: BLE001 (a malformed body: the general path words the error)
            return None
        if not isinstance(obj, dict):
            return None
        out = await self.leases.fast_renewal(name, obj)
        if out is not None:
            metrics.renewals_fast.inc()
        return out

    def _absorbs(self, request: web.Request, parts: list[str]) -> bool:
        """Whether the tier serves this request itself (else the control plane does, with its policy)."""
        user = request.get("user")
        node = None if user is None else node_name(user)
        if node is not None and SYSTEM_PRIVILEGED_GROUP not in user.groups:
            if len(parts) == 7 and parts[6] != node:
                raise errors.StatusError(403, "Forbidden", f'leases.coordination.k8s.io "{parts[6]}" is forbidden: '
                                         "can only access node lease with the same name as the requesting node",
                                         {"name": parts[6], "group": "coordination.k8s.io", "kind": "leases"})
            request["node"] = node
        return serves_itself(user, parts[6] if len(parts) == 7 else None, request.method)

    async def create(self, request: web.Request) -> web.StreamResponse:
        """The control plane creates (its validation, uid, admission); its answer becomes the tier's copy."""
        obj = await decode_body(request, self.res)     # JSON, YAML or protobuf (client-go's typed clients)
        node = request.get("node")
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj.get("metadata"), dict) else None
        if node is not None and name != node:
            raise errors.StatusError(403, "Forbidden", f'leases.coordination.k8s.io "{name or ""}" is forbidden: '
                                     "can only access node lease with the same name as the requesting node",
                                     {"name": name or "", "group": "coordination.k8s.io", "kind": "leases"})
        params = dict(request.query)
        try:
            cp_obj = await self.cp.call("POST", self.cp.lease_path(), obj, params=params,
                                        user_agent=request.headers.get("User-Agent", ""))
        except ControlPlaneError as e:
            raise e.status_error() from None
        if request.query.get("dryRun"):
            return respond_obj(request, self.res, cp_obj, 201)
        out = await self.leases.adopt(cp_obj["metadata"]["name"], cp_obj)
        return respond_obj(request, self.res, out, 201)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[*([authentication(self.auth_config)] if self.authenticates else []),
                                           status_and_metrics],
                              client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)

        async def on_startup(_):
            await self.start()

        async def on_cleanup(_):
            await self.stop()
        app.on_startup.append(on_startup)
        app.on_cleanup.append(on_cleanup)
        return app


async def _nothing(*_a) -> None:
    return None
