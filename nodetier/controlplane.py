"""The tier's connection to the control plane (an apiserver or a slice front): who the tier is there (a
kubeconfig's server, CA, client certificate or token), the Lease calls the forwarder makes with that
identity, and the streaming proxy that carries every other request as the client sent it."""
from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any, AsyncIterator
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from machinery import errors, jsonenc

from .h1 import H1Client, H1Error
from .split import HOP_HEADER

Obj = dict[str, Any]
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
# Not forwarded by a proxy (RFC 9110 7.6.1), or set by the proxy's own client for the body it sends.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length"}


@dataclass
class Identity:
    server: str
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    token: str = ""
    insecure: bool = False

    @classmethod
    def from_kubeconfig(cls, path: str) -> "Identity":
        """The current context of a kubeconfig: server, certificate-authority(-data), client-certificate
        (-data) and client-key(-data), token or tokenFile, insecure-skip-tls-verify."""
        import yaml
        with open(path) as f:
            cfg = yaml.safe_load(f) or {}
        ctx_name = cfg.get("current-context")
        ctx = next((c["context"] for c in cfg.get("contexts") or [] if c.get("name") == ctx_name), None)
        if ctx is None:
            raise ValueError(f"{path}: no current context")
        cluster = next((c["cluster"] for c in cfg.get("clusters") or [] if c.get("name") == ctx.get("cluster")), {})
        user = next((u.get("user") or {} for u in cfg.get("users") or [] if u.get("name") == ctx.get("user")), {})
        base = os.path.dirname(os.path.abspath(path))

        def file_of(d: dict, name: str) -> str:
            if d.get(f"{name}-data"):
                fd, p = tempfile.mkstemp(prefix="nodetier-", suffix=".pem")
                with os.fdopen(fd, "wb") as f:
                    f.write(base64.b64decode(d[f"{name}-data"]))
                return p
            v = d.get(name) or ""
            return os.path.join(base, v) if v and not os.path.isabs(v) else v
        token = user.get("token") or ""
        if not token and user.get("tokenFile"):
            with open(os.path.join(base, user["tokenFile"])) as f:
                token = f.read().strip()
        if not cluster.get("server"):
            raise ValueError(f"{path}: the current context's cluster has no server")
        return cls(cluster["server"], file_of(cluster, "certificate-authority"), file_of(user, "client-certificate"),
                   file_of(user, "client-key"), token, bool(cluster.get("insecure-skip-tls-verify")))

    def ssl_context(self, with_cert: bool = True) -> ssl.SSLContext | bool:
        if not self.server.startswith("https:"):
            return False
        ctx = ssl.create_default_context(cafile=self.ca_file or None)
        if self.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if self.cert_file and with_cert:
            ctx.load_cert_chain(self.cert_file, self.key_file or None)
        return ctx


def impersonation_headers(user: Any) -> list[tuple[str, str]]:
    """Upstream's impersonation headers for `user` (apiserver.auth.user.UserInfo): its name, uid, groups
    (`system:authenticated`, which the control plane adds back for a named user, left out) and extras (the key
    path-escaped, as client-go's transport does)."""
    out = [("Impersonate-User", user.name)]
    if user.uid:
        out.append(("Impersonate-Uid", user.uid))
    out += [("Impersonate-Group", g) for g in user.groups if g != "system:authenticated"]
    for key, values in (user.extra or {}).items():
        out += [("Impersonate-Extra-" + quote(key, safe=""), v) for v in values]
    return out


class ControlPlaneError(Exception):
    """The control plane answered with an error (its Status), or could not be reached (status 0)."""

    def __init__(self, status: int, body: Obj | None, text: str = ""):
        super().__init__(f"control plane answered {status}: {text or body}")
        self.status, self.body = status, body

    def status_error(self) -> errors.StatusError:
        """The control plane's Status, for the tier's client, as the control plane worded it."""
        b = self.body or {}
        if self.status and b.get("kind") == "Status":
            return errors.StatusError(self.status, b.get("reason", ""), b.get("message", ""), b.get("details"))
        return errors.StatusError(503, "ServiceUnavailable", f"the control plane is unavailable: {self}", {})


class ControlPlane:
    def __init__(self, identity: Identity, namespace: str = "kube-node-lease", max_idle: int = 64):
        self.identity = identity
        self.max_idle = max_idle      # kept-alive connections of `call`: at least the forwards in flight
        self.namespace = namespace
        self.base = identity.server.rstrip("/")
        self.session: aiohttp.ClientSession | None = None     # as the tier (its certificate)
        self.bare: aiohttp.ClientSession | None = None        # as nobody: the client's own token, if any
        self.calls: H1Client | None = None                    # the tier's own calls (`call`), as the tier

    async def start(self) -> None:
        def session(with_cert: bool) -> aiohttp.ClientSession:
            # No pool limit: proxied watches hold their connection for minutes, and the clients' own concurrency
            # (and the control plane's in-flight limits) bound the rest.
            return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.identity.ssl_context(with_cert),
                                                                        limit=0),
                                         auto_decompress=False, skip_auto_headers=("User-Agent",))
        self.session, self.bare = session(True), session(False)
        self.calls = H1Client(self.base, self.identity.ssl_context(True), max_idle=self.max_idle)

    async def close(self) -> None:
        for s in (self.session, self.bare):
            if s is not None:
                await s.close()
        if self.calls is not None:
            await self.calls.close()

    def _headers(self, user_agent: str = "") -> dict[str, str]:
        h = {"Accept": "application/json", "Content-Type": "application/json",
             "User-Agent": user_agent or "nodetier"}
        if self.identity.token:
            h["Authorization"] = f"Bearer {self.identity.token}"
        return h

    async def call(self, method: str, path: str, body: Obj | None = None, *, user_agent: str = "",
                   params: dict[str, str] | None = None, timeout: float = 10.0) -> Obj:
        """One request with the tier's identity; the decoded answer, or ControlPlaneError."""
        assert self.calls is not None
        if params:
            path += "?" + urlencode(params)
        try:
            status, headers, raw = await self.calls.request(method, path, self._headers(user_agent),
                                                            jsonenc.dumps(body) if body is not None else None,
                                                            timeout=timeout)
        except H1Error as e:
            raise ControlPlaneError(0, None, str(e)) from None
        if headers.get("content-encoding") == "gzip":
            import gzip
            raw = gzip.decompress(raw)
        try:
            doc = jsonenc.loads(raw) if raw else {}
        except ValueError:
            doc = None
        if status >= 300:
            raise ControlPlaneError(status, doc, raw[:200].decode("utf-8", "replace"))
        return doc

    def lease_path(self, name: str | None = None) -> str:
        p = LEASES.format(ns=self.namespace)
        return p if name is None else f"{p}/{quote(name, safe='')}"

    async def list_leases(self) -> tuple[list[Obj], int]:
        """Every Lease in the namespace (pages of 500), and the list's resourceVersion."""
        items: list[Obj] = []
        cont = ""
        while True:
            params = {"limit": "500"} | ({"continue": cont} if cont else {})
            doc = await self.call("GET", self.lease_path(), params=params, timeout=60.0)
            items.extend(doc.get("items") or [])
            cont = (doc.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items, int(doc["metadata"]["resourceVersion"])

    async def watch_leases(self, rv: int) -> AsyncIterator[Obj]:
        """The namespace's Lease events from `rv` (with bookmarks), until the stream ends."""
        assert self.session is not None
        params = {"watch": "1", "resourceVersion": str(rv), "allowWatchBookmarks": "true",
                  "timeoutSeconds": "300"}
        try:
            async with self.session.get(self.base + self.lease_path(), params=params, headers=self._headers(),
                                        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)) as r:
                if r.status != 200:
                    raise ControlPlaneError(r.status, None, (await r.read())[:200].decode("utf-8", "replace"))
                buf = b""
                async for chunk in r.content.iter_any():
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if line.strip():
                            yield jsonenc.loads(line)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise ControlPlaneError(0, None, repr(e)) from None

    # --- the proxy: everything the tier does not absorb -------------------------------------------

    async def proxy(self, request: web.Request, as_tier: bool, base: str = "",
                    impersonate: Any = None) -> web.StreamResponse:
        """The request as the client sent it (headers, Authorization included, and body streamed), its answer
        streamed back as it arrives: watches, long lists and gzip bodies pass through untouched.

        Whose request it is at the control plane: with `as_tier` (a tier without authentication flags, a
        trusted local component like the apiserver's unsecured port) the tier's own credentials, unless the
        client sent a token of its own; otherwise only what the client sent (its bearer token, or nothing:
        anonymous), never the tier's identity. `impersonate` (a UserInfo: a client-certificate user, whose
        certificate cannot be passed on) sends it with the tier's identity and upstream's impersonation headers
        for that user (`Impersonate-User`, `-Uid`, `-Group`, `-Extra-<key>`), which the control plane authorizes
        for the tier's identity (verb impersonate) and then decides as that user. `base` sends it to another
        tier instead (the owner of a Lease outside this tier's range), with the same credentials rule."""
        assert self.session is not None and self.bare is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        if impersonate is not None:
            as_tier = True
            headers = {k: v for k, v in headers.items()
                       if k.lower() != "authorization" and not k.lower().startswith("impersonate-")}
            headers = CIMultiDict(headers)
            for k, v in impersonation_headers(impersonate):
                headers.add(k, v)
        if as_tier and "Authorization" not in headers and self.identity.token:
            headers["Authorization"] = f"Bearer {self.identity.token}"
        if request.content_length is not None:
            headers["Content-Length"] = str(request.content_length)
        kept = request.get("body")           # read already (by read_body): what was read goes on
        body = kept if kept is not None else request.content if request.body_exists else None
        if kept is not None:
            headers["Content-Length"] = str(len(kept))
        if base:
            headers[HOP_HEADER] = "1"
        try:
            upstream = await (self.session if as_tier else self.bare).request(request.method, (base or self.base) + request.path_qs, headers=headers,
                                                  data=body, allow_redirects=False,
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            what = f"the node tier at {base}" if base else "the control plane"
            raise errors.StatusError(503, "ServiceUnavailable", f"{what} is unavailable: {e!r}", {}) from None
        try:
            resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for k, v in upstream.headers.items():
                if k.lower() not in HOP_BY_HOP:
                    resp.headers.add(k, v)
            if upstream.headers.get("Content-Length") is not None:
                resp.content_length = int(upstream.headers["Content-Length"])
            await resp.prepare(request)
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp
        except aiohttp.ClientError:
            return resp   # the control plane ended the stream: so does the client's
        finally:
            upstream.release()
