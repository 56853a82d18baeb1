"""The reference: a real kube-apiserver (built by tools/build_kube_apiserver.py) on loopback against a
given etcd, for differential tests and benchmarks.

1.37 refuses anonymous requests under `AlwaysAllow`, so each process gets a throwaway CA, a serving
certificate for 127.0.0.1 and an admin client certificate (CN=admin, O=system:masters) made with the
`openssl` command, plus service-account keys. `--storage-media-type=application/json` (default here) makes
it store JSON, which this project reads; `protobuf=True` keeps upstream's default protobuf storage.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time

from storage.embedded import free_port, stop_process
from recipes.pki import make_client_cert, make_pki, self_signed_serving_cert  # noqa: F401  (re-exported)
from tests.helpers.etcd import load_tool


def kube_apiserver_binary() -> str:
    """Path of the reference kube-apiserver, built once into .cache/kube-apiserver."""
    return load_tool("build_kube_apiserver").ensure_kube_apiserver()


class KubeApiserver:
    """One kube-apiserver process; `url`, `ca`, `client_cert` for clients. Stopped by pid."""

    def __init__(self, etcd_endpoint: str, *, prefix: str = "/registry", protobuf: bool = False,
                 sharding_gate: bool = True, authorization_mode: str = "AlwaysAllow",
                 extra_args: tuple[str, ...] = ()):
        self.prefix = prefix
        self.dir = tempfile.mkdtemp(prefix="kube-apiserver-")
        make_pki(self.dir)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = os.path.join(self.dir, "ca.crt")
        self.client_cert = (os.path.join(self.dir, "admin.crt"), os.path.join(self.dir, "admin.key"))
        p = lambda n: os.path.join(self.dir, n)  # noqa: E731
        self.args = [
            kube_apiserver_binary(),
            f"--etcd-servers={etcd_endpoint}", f"--etcd-prefix={prefix}",
            "--bind-address=127.0.0.1", f"--secure-port={self.port}", f"--cert-dir={self.dir}",
            f"--tls-cert-file={p('serving.crt')}", f"--tls-private-key-file={p('serving.key')}",
            f"--client-ca-file={p('ca.crt')}", f"--authorization-mode={authorization_mode}",
            f"--service-account-key-file={p('sa.pub')}", f"--service-account-signing-key-file={p('sa.key')}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--endpoint-reconciler-type=none", "--service-cluster-ip-range=10.96.0.0/16",
            # No kube-controller-manager creates `default` service accounts here.
            "--disable-admission-plugins=ServiceAccount",
            *([] if protobuf else ["--storage-media-type=application/json"]),
            *(["--feature-gates=ShardedListAndWatch=true"] if sharding_gate else []),
            *extra_args,
        ]
        self.log_path = os.path.join(self.dir, "kube-apiserver.log")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> "KubeApiserver":
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        import requests
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited with {self.proc.returncode}; log: {self.tail()}")
            try:
                r = requests.get(self.url + "/readyz", cert=self.client_cert, verify=self.ca, timeout=2)
                if r.status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"kube-apiserver not ready after {timeout}s; log: {self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        stop_process(self.proc, 20)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "KubeApiserver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
