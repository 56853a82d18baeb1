"""kube-controller-manager v1.37.2's node lifecycle controller (built from the module proxy by
tools/build_kube_controller_manager.py) judges the node heartbeats this server carries, side by side with
kube-apiserver v1.37.2, in one test and at the same time (issue 22 §4).

Per server: three kwok nodes, two renewed by one kwok process and one by another (its own annotation value),
and a controller manager running only the node lifecycle controller. Once every node is Ready, the second kwok
is killed: its node's Lease is no longer renewed. The Lease duration and the grace period are scaled down
together from upstream's 40 s / 50 s to 16 s / 20 s (kwok renews every quarter of the lease, 4 s, as a kubelet
does; the controller looks every 2 s instead of 5 s) to keep CI short. Checked on both servers:

* the two live nodes stay Ready=True throughout: no false Ready=Unknown;
* the stopped node goes Ready=Unknown no earlier than the grace period after its last renewal (its Lease's
  renewTime) and no later than grace + 10 s, and gets the taints `node.kubernetes.io/unreachable` with effect
  NoSchedule and NoExecute (one node of three: the zone is not in full or partial disruption, where the
  controller stops tainting);
* the controller manager stays up and reports healthy.

A dedicated kube-apiserver (its own etcd prefix) is used, so no node left by another test joins the zone.

A third side is this server behind the node tier (`python -m nodetier`, issue 22 §2): kwok renews through the
tier, the controller manager reads the control plane, which sees a renewal every forward interval (12 s, the
default 30 s scaled with the lease) and the last one of the stopped node once its next renewal is overdue. The
same checks hold there, and the stopped node's last renewal at the tier is the one the control plane has.
"""
from __future__ import annotations

import datetime
import os
import threading
import time

import pytest

from tests.helpers import Api, start_apiserver, stop_all
from tests.helpers.kube import KubeApiserver
from tests.helpers.nodetier import NodeTierProcess
from tests.helpers.kwok import (ANNOTATION, KubeControllerManagerProcess, KwokProcess, kube_controller_manager_binary,
                                kwok_binary, kwok_node)

LEASE_SECONDS = 16          # upstream's kubelet: 40
GRACE = 20                  # --node-monitor-grace-period, upstream: 50 (scaled with the lease)
MONITOR_PERIOD = 2          # --node-monitor-period, upstream: 5
TIER_FORWARD = 12           # the node tier's --forward-interval, upstream-scaled: 30 s of a 40 s lease
LIVE = ["kcm-live-0", "kcm-live-1"]
STOPPED = "kcm-stopped"
TAINT = "node.kubernetes.io/unreachable"


@pytest.fixture(scope="module")
def binaries():
    from tests.helpers.etcd import load_tool
    out = []
    for fn, tool in ((kwok_binary, "build_kwok"), (kube_controller_manager_binary, "build_kube_controller_manager")):
        try:
            out.append(fn())
        except load_tool(tool).BuildError as e:
            pytest.fail(f"could not build with tools/{tool}.py: {e}")
    return out


def _time(s: str) -> float:
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def _ready(node: dict) -> dict | None:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"), None)


class Side:
    """One server with its kwok processes, controller manager, and a watcher of its nodes' Ready condition."""

    def __init__(self, name: str, api: Api, server: str, ca: str | None = None, cert: tuple[str, str] | None = None,
                 kwok_server: str | None = None):
        self.name, self.api = name, api
        kwok_server = kwok_server or server     # the node tier's side: kwok renews through it, the controller
                                                # manager reads the control plane
        for n in LIVE + [STOPPED]:
            node = kwok_node(n)
            if n == STOPPED:
                node["metadata"]["annotations"][ANNOTATION] = "fake-b"
            r = api.post("/api/v1/nodes", node)
            assert r.status_code == 201, (name, r.text)
        self.kwok = KwokProcess(kwok_server, lease_seconds=LEASE_SECONDS, ca=ca, cert=cert, name=f"kwok-{name}")
        self.kwok_b = KwokProcess(kwok_server, lease_seconds=LEASE_SECONDS, ca=ca, cert=cert, name=f"kwok-b-{name}",
                                  selector=f"{ANNOTATION}=fake-b")
        self.kcm = KubeControllerManagerProcess(server, grace=GRACE, monitor_period=MONITOR_PERIOD, ca=ca, cert=cert)
        self.seen: dict[str, list[str]] = {n: [] for n in LIVE + [STOPPED]}   # Ready statuses, in order
        self.errors: list[str] = []
        self._stop = threading.Event()

    def start(self) -> None:
        for p in (self.kwok, self.kwok_b, self.kcm):
            p.start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                items = self.api.get("/api/v1/nodes", timeout=10).json()["items"]
                for n in items:
                    name, c = n["metadata"]["name"], _ready(n)
                    if name in self.seen and c and (not self.seen[name] or self.seen[name][-1] != c["status"]):
                        self.seen[name].append(c["status"])
            except Exception as e:  # noqa: BLE001 (recorded, asserted empty)
                self.errors.append(repr(e))
            self._stop.wait(0.5)

    def node(self, name: str) -> dict:
        r = self.api.get(f"/api/v1/nodes/{name}")
        assert r.status_code == 200, (self.name, name, r.status_code, r.text)
        return r.json()

    def lease(self, name: str) -> dict:
        r = self.api.get(f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")
        assert r.status_code == 200, (self.name, name, r.status_code, r.text)
        return r.json()

    def all_ready(self) -> bool:
        return all(self.seen[n][-1:] == ["True"] for n in self.seen)

    def stop(self) -> None:
        self._stop.set()
        for p in (self.kcm, self.kwok_b, self.kwok):
            p.stop(keep_dir=False)


def _wait(what: str, pred, timeout: float, sides) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout} s: " + "; ".join(
                f"{s.name}: seen {s.seen}, kcm alive {s.kcm.alive()}, kcm log {s.kcm.log()[-1500:]}" for s in sides))
        time.sleep(0.25)


def test_node_lifecycle_controller_on_our_leases_as_on_kubes(current_etcd, binaries, unique_prefix):
    ours = start_apiserver(current_etcd.endpoint, unique_prefix)
    behind = start_apiserver(current_etcd.endpoint, unique_prefix + "-tier")
    tier = NodeTierProcess(behind.base, "--forward-interval", str(TIER_FORWARD)).start().wait_ready()
    sides: list[Side] = []
    with KubeApiserver(current_etcd.endpoint, prefix=f"/registry-kcm{os.getpid()}") as kube:
        try:
            sides = [Side("ours", Api(ours.base), ours.base),
                     Side("kube", Api(kube.url, cert=kube.client_cert, verify=kube.ca), kube.url, ca=kube.ca,
                          cert=kube.client_cert),
                     Side("ours behind the node tier", Api(behind.base), behind.base, kwok_server=tier.base)]
            for s in sides:
                s.start()
            _wait("every node Ready on both servers", lambda: all(s.all_ready() for s in sides), 60, sides)
            time.sleep(2 * MONITOR_PERIOD)   # the controllers have looked at every node at least once
            for s in sides:
                s.kwok_b.popen.kill()
                s.kwok_b.popen.wait()
            t_stop = time.time()
            _wait("the stopped node Ready=Unknown on both servers",
                  lambda: all(s.seen[STOPPED][-1:] == ["Unknown"] for s in sides), GRACE + 40, sides)
            for s in sides:
                _wait(f"the {TAINT} taints on {s.name}",
                      lambda s=s: {t["effect"] for t in s.node(STOPPED)["spec"].get("taints") or []
                                   if t["key"] == TAINT} >= {"NoSchedule", "NoExecute"}, 20, [s])
            for s in sides:
                node, lease = s.node(STOPPED), s.lease(STOPPED)
                renewed = _time(lease["spec"]["renewTime"])
                assert renewed <= t_stop, (s.name, lease["spec"])   # no renewal after kwok was killed
                unknown = _time(_ready(node)["lastTransitionTime"])   # whole seconds: up to 1 s early
                assert GRACE - 1 <= unknown - renewed <= GRACE + 10, (s.name, unknown - renewed, node["status"])
                for n in LIVE:   # once Ready, never Unknown (or False)
                    assert s.seen[n][s.seen[n].index("True"):] == ["True"], (s.name, n, s.seen[n])
                    node_n = s.node(n)
                    assert not (node_n.get("spec") or {}).get("taints"), (s.name, n, node_n)
                if s.kwok.server != s.kcm.server:   # behind the tier: no acknowledged renewal lost
                    tier_copy = Api(s.kwok.server).get(
                        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{STOPPED}").json()
                    assert tier_copy["spec"]["renewTime"] == lease["spec"]["renewTime"], (tier_copy, lease)
                assert s.kcm.alive(), s.kcm.log()[-3000:]
                assert not s.errors, s.errors[:5]
            print({s.name: round(_time(_ready(s.node(STOPPED))["lastTransitionTime"])
                                 - _time(s.lease(STOPPED)["spec"]["renewTime"]), 1) for s in sides})
        finally:
            for s in sides:
                s.stop()
            stop_all([tier, ours, behind])
