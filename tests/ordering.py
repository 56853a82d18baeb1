"""How the suite shares one machine with itself and with the Go builds (a pytest plugin, from conftest).

* Ports: each pytest-xdist worker gets its own slice of 10000-32767 (`RESIDENCY_PORT_RANGE`, read by
  `storage.embedded.free_port` in this process and in every process a test starts), so two workers never
  pick the same free port, and no outgoing connection takes a port picked for a server.
* Order: tests run in stages by the Go binaries they need, so the ones that need none run while
  `tools/build_all.py` (started in the background by `.ci/run`) is still building, in the order it builds:
  0 none, 1 a current etcd and the stdlib-only references, 2 kube-apiserver, 3 the client-go test binary and
  the robustness informer, 4 kwok, 5 kube-scheduler and kube-controller-manager, 6 the protobuf references.
  Within a stage the longest modules go first, then the collection order. A test that reaches a binary still
  being built waits on its lock (tools/gobuild.build_once), one that is not being built yet builds it; the
  order only decides how much of that there is.
"""
from __future__ import annotations

import os

# The fixtures that bring a Go binary, by stage (tools/build_all.py builds in this order).
_FIXTURE_STAGE = {
    "current_etcd": 1, "apiserver_mode_cache": 1, "apiserver_mode": 1, "apiserver": 1, "api": 1,
    "gobin": 1, "go_errtext": 1,
    "kube_apiserver": 2, "differential_mode": 2, "differential_api": 2, "apiserver_mode_deployment": 1,
    "clientgo_binary": 3,
    "protoref": 6,
}
# Modules whose tests start a binary themselves (not through a fixture above): their stage.
_MODULE_STAGE = {
    "test_current_etcd": 1, "test_etcd_selection": 1, "test_compaction": 1, "test_read_only": 1,
    "test_residency_bench": 1, "test_warm_restart": 1,
    "test_authn": 2, "test_hostile_input": 2, "test_shared_etcd": 2, "test_watch_cache": 2,
    "test_builtin_kinds": 2, "test_bench_smoke": 2, "test_kubectl_workloads": 2,
    # 3: the client-go test binary and the robustness informer
    "test_authz": 3, "test_robustness": 3, "test_compaction_boundary": 3, "test_etcd_reconnect": 3,
    "test_warm_restart_crd": 3,
    # 4: kwok; 5: kube-scheduler, kube-controller-manager; 6: the protobuf references
    "test_kwok": 4, "test_bench_kwok_smoke": 5,      # (bench.nodes runs kube-controller-manager)
    "test_kube_scheduler": 5, "test_kube_controller_manager": 5, "test_robustness_nodeplane": 5,
    "test_recipes_churn": 1, "test_recipes_state": 1, "test_recipes_manifests": 2, "test_recipes_node": 5,
    "test_protobuf": 6,
}
# Within a stage the longest modules go first, so no worker is left with a long module at the end while the
# others idle (seconds on one worker, from a run's --junitxml; a module not named here counts as short).
_MODULE_SECONDS = {
    "test_bench_smoke": 330, "test_robustness": 115, "test_warm_restart": 98, "test_bench_kwok_smoke": 190,
    "test_residency_bench": 61, "test_authn": 56, "test_front_reshard": 52, "test_watch_cache": 46,
    "test_http_discovery": 40, "test_slice": 40, "test_http_subresources": 39, "test_kubectl_workloads": 37,
    "test_front_conformance": 70, "test_hostile_input": 31, "test_front_feed": 135, "test_deployment": 45,
    "test_recipes_churn": 50, "test_recipes_state": 45, "test_recipes_node": 60, "test_robustness_nodeplane": 160,
}
PORTS_LO, PORTS_HI = 10000, 32767  # below the kernel's ephemeral range (net.ipv4.ip_local_port_range)


def _set_port_range() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    # A worker sets its own slice even when it inherited the controller's whole range (the controller loads
    # this conftest, and sets it, before it starts the workers); elsewhere a range already set is kept.
    if not worker and "RESIDENCY_PORT_RANGE" in os.environ:
        return
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    span = (PORTS_HI - PORTS_LO) // max(count, 1)
    lo = PORTS_LO + index * span
    os.environ["RESIDENCY_PORT_RANGE"] = f"{lo}-{lo + span}"


_set_port_range()


def stage(item) -> int:
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
    return max([_MODULE_STAGE.get(module, 0)] + [_FIXTURE_STAGE.get(f, 0) for f in item.fixturenames])


def pytest_collection_modifyitems(session, config, items):
    # A module moves as a whole (at its latest item's stage), so its module-scoped fixtures are set up once;
    # the same order on every worker (xdist checks that they all collected the same list).
    def module(it) -> str:
        return it.nodeid.split("::")[0]

    stages: dict[str, int] = {}
    for it in items:
        stages[module(it)] = max(stages.get(module(it), 0), stage(it))

    def key(it) -> tuple[int, int]:
        m = module(it)
        return stages[m], -_MODULE_SECONDS.get(m.rsplit("/", 1)[-1].removesuffix(".py"), 0)

    items[:] = [it for _, _, it in sorted((key(it), i, it) for i, it in enumerate(items))]
