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
from tests.helpers.etcd import load_tool


def kube_apiserver_binary() -> str:
    """Path of the reference kube-apiserver, built once into .cache/kube-apiserver."""
    return load_tool("build_kube_apiserver").ensure_kube_apiserver()


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def make_pki(d: str) -> None:
    """ca.{crt,key}, serving.{crt,key} (127.0.0.1, localhost), admin.{crt,key}, sa.{key,pub} in `d`."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=residency-test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)
    for name, subj, ext in (
            ("serving", "/CN=kube-apiserver", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
            ("admin", "/O=system:masters/CN=admin", "extendedKeyUsage=clientAuth")):
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subj, "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)


def make_client_cert(d: str, name: str, subject: str) -> tuple[str, str]:
    """`<name>.crt` / `<name>.key` in `d`: a client certificate with `subject` (e.g. `/O=dev/O=qa/CN=carol`)
    signed by the CA `make_pki` left there; returns (cert, key) paths."""
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject, "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d)
    return os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key")


def self_signed_serving_cert(d) -> tuple[str, str]:
    """`tls.crt` / `tls.key` in `d`: a self-signed serving certificate for 127.0.0.1 (CN and SAN); returns (cert,
    key) paths."""
    cert, key = os.path.join(str(d), "tls.crt"), os.path.join(str(d), "tls.key")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert, cwd=str(d))
    return cert, key


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
