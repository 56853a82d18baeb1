"""Shared fixtures: a real etcd process on loopback (never a fake store)."""
from __future__ import annotations

import itertools
import os

import pytest

from storage.embedded import EmbeddedEtcd

_counter = itertools.count()


@pytest.fixture(scope="session")
def etcd():
    """One real etcd for the session, on free ports with a temporary data dir."""
    with EmbeddedEtcd() as e:
        yield e


@pytest.fixture
def unique_prefix():
    """A fresh key prefix under /registry so tests never see each other's keys."""
    return f"/registry/t{os.getpid()}x{next(_counter)}"


@pytest.fixture
async def etcd_client(etcd):
    from storage.etcd import EtcdClient
    c = EtcdClient([etcd.endpoint])
    yield c
    await c.close()


# --- a real apiserver process over the session's etcd --------------------------

class Api:
    """Tiny HTTP client for tests (requests-based; responses are parsed JSON when possible)."""

    def __init__(self, base: str):
        import requests
        self.base = base
        self.s = requests.Session()

    def req(self, method, path, *, json=None, data=None, headers=None, params=None, stream=False, timeout=30):
        import json as _json
        h = dict(headers or {})
        if json is not None:
            data = _json.dumps(json)
            h.setdefault("Content-Type", "application/json")
        r = self.s.request(method, self.base + path, data=data, headers=h, params=params, stream=stream,
                           timeout=timeout)
        return r

    def get(self, path, **kw):
        return self.req("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.req("POST", path, json=body, **kw)

    def put(self, path, body, **kw):
        return self.req("PUT", path, json=body, **kw)

    def patch(self, path, body, content_type, **kw):
        import json as _json
        return self.req("PATCH", path, data=_json.dumps(body) if not isinstance(body, (bytes, str)) else body,
                        headers={"Content-Type": content_type}, **kw)

    def delete(self, path, body=None, **kw):
        return self.req("DELETE", path, json=body, **kw)


def start_apiserver_process(etcd_endpoint: str, prefix: str, *extra: str):
    import subprocess
    import sys
    import time

    import requests

    from storage.embedded import free_port
    port = free_port()
    log = open(f"/tmp/apiserver-{port}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "apiserver", "--etcd-servers", etcd_endpoint,
                             "--etcd-prefix", prefix, "--port", str(port), *extra],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()  # the child keeps its own descriptor
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"apiserver exited: see /tmp/apiserver-{port}.log")
        try:
            if requests.get(base + "/readyz", timeout=1).status_code == 200:
                return proc, base
        except requests.RequestException:
            pass
        time.sleep(0.1)
    proc.kill()
    raise TimeoutError("apiserver did not become ready")


@pytest.fixture(scope="session")
def apiserver(etcd):
    """A real apiserver process (python -m apiserver) over the session etcd."""
    proc, base = start_apiserver_process(etcd.endpoint, f"/registry-http{os.getpid()}")
    yield base
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def api(apiserver):
    return Api(apiserver)


@pytest.fixture
def namespace(api):
    """A fresh namespace per test."""
    name = f"t{next(_counter)}-{os.getpid()}"
    r = api.post("/api/v1/namespaces", {"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name
