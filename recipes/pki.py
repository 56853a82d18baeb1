"""Throwaway certificates for loopback control planes, made with the `openssl` command: a CA, a serving
certificate for 127.0.0.1 and localhost, an admin client certificate (O=system:masters), service-account keys.
kube-apiserver needs them (1.37 refuses anonymous requests under AlwaysAllow); the recipes and the tests share
them."""
from __future__ import annotations

import os
import subprocess


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
