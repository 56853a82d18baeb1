"""Harness shared by the tests and the benchmarks (bench/): real etcd and apiserver processes, a small
HTTP client, object factories. Nothing here imports pytest, so `python -m bench.<name>` can use it."""
from tests.helpers.apiserver import (ApiserverError, ApiserverProcess, start_apiserver, stop_all,
                                     wait_all_ready, wait_all_ready_async)
from tests.helpers.client import Api
from tests.helpers.etcd import (ROOT, build_etcd_module, current_etcd, current_etcd_binary, distro_etcd,
                                etcd_revision)
from tests.helpers.objects import crd

__all__ = ["ROOT", "Api", "ApiserverError", "ApiserverProcess", "build_etcd_module", "crd", "current_etcd",
           "current_etcd_binary", "distro_etcd", "etcd_revision", "start_apiserver", "stop_all", "wait_all_ready", "wait_all_ready_async"]
