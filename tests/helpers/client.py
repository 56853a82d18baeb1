"""A small synchronous HTTP client for tests (requests-based)."""
from __future__ import annotations

import json as _json


class Api:
    """HTTP client bound to one apiserver's base URL; returns `requests` responses."""

    def __init__(self, base: str, *, cert: tuple[str, str] | None = None, verify: str | bool = True):
        import requests  # a test dependency: imported only where a test client is made
        self.base = base
        self.s = requests.Session()
        self.cert = cert      # a client certificate (kube-apiserver refuses anonymous requests)
        self.verify = verify  # the CA of an HTTPS server; per request, as REQUESTS_CA_BUNDLE beats a
                              # Session's verify (psf/requests#3829)

    def req(self, method, path, *, json=None, data=None, headers=None, params=None, stream=False, timeout=30):
        h = dict(headers or {})
        if json is not None:
            data = _json.dumps(json)
            h.setdefault("Content-Type", "application/json")
        r = self.s.request(method, self.base + path, data=data, headers=h, params=params, stream=stream,
                           timeout=timeout, cert=self.cert, verify=self.verify)
        return r

    def get(self, path, **kw):
        return self.req("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.req("POST", path, json=body, **kw)

    def put(self, path, body, **kw):
        return self.req("PUT", path, json=body, **kw)

    def patch(self, path, body, content_type, **kw):
        return self.req("PATCH", path, data=_json.dumps(body) if not isinstance(body, (bytes, str)) else body,
                        headers={"Content-Type": content_type}, **kw)

    def delete(self, path, body=None, **kw):
        return self.req("DELETE", path, json=body, **kw)
