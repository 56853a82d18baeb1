"""Authentication: who is asking, as kube-apiserver's authenticator chain answers it
(k8s.io/apiserver pkg/authentication, k8s.io/kubernetes pkg/kubeapiserver/authenticator/config.go).

`authentication(config)` is the aiohttp middleware; it sets `request["user"]` (a `UserInfo`) or answers 401.

* No authentication flag (`--token-auth-file`, `--client-ca-file`, `--anonymous-auth`): every request, on
  every port, is `UNSECURED` (`system:unsecured` in `system:masters`), as the server always behaved; the
  middleware then costs one dict store.
* Otherwise every port authenticates, in upstream's order: the x509 client certificate (secure port,
  `--client-ca-file`: user = CN, groups = O, extra `authentication.kubernetes.io/credential-id` =
  `X509SHA256=<hex sha256 of the certificate>`), then the bearer token (`Authorization: Bearer X`,
  `--token-auth-file`). The first that succeeds wins; authenticated users get `system:authenticated`
  appended to their groups (group.AuthenticatedGroupAdder). A presented credential that fails (an
  unknown bearer token) is 401 even with anonymous auth on (union.NewFailOnError); no credential at all is
  `system:anonymous` in `system:unauthenticated` with `--anonymous-auth` (default true), else 401.
* The 401 is upstream's (filters.Unauthorized: responsewriters.ErrorNegotiated of NewUnauthorized("")):
  `{"kind":"Status",
  "apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized",
  "code":401}`.

The token file is upstream's CSV (tokenfile.NewCSV: `token,user,uid[,"group1,group2"]`, more columns
ignored, read with Go's encoding/csv, whose parse errors are reproduced here): `load_token_file` raises
`TokenFileError` with upstream's text, a CLI error at start.
"""
from __future__ import annotations

import hashlib
import logging
import os
import uuid
from dataclasses import dataclass
from typing import Any

from apiserver.httpstack import web

from .user import (ALL_AUTHENTICATED, ALL_UNAUTHENTICATED, ANONYMOUS, ANONYMOUS_USER, APISERVER_USER,
                   LOOPBACK_TOKEN_ENV, SYSTEM_PRIVILEGED_GROUP, UNSECURED, UserInfo)

log = logging.getLogger("apiserver.authn")

CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"  # user.CredentialIDKey
X509 = "x509"     # request["credential"] when the user came from a client certificate

UNAUTHORIZED_BODY = (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized",'
                     b'"reason":"Unauthorized","code":401}\n')


class TokenFileError(ValueError):
    """The token file cannot be read or parsed (upstream's message)."""


# --- the token file: Go's encoding/csv as tokenfile.NewCSV uses it (FieldsPerRecord = -1) -------------

_ERR_BARE_QUOTE = 'bare " in non-quoted-field'
_ERR_QUOTE = 'extraneous or missing " in quoted-field'


class _CSVError(Exception):
    def __init__(self, start_line: int, line: int, column: int, err: str):
        super().__init__(f"parse error on line {line}, column {column}: {err}" if start_line == line else
                         f"record on line {start_line}; parse error on line {line}, column {column}: {err}")


def _go_csv_records(data: bytes):
    """Records of `data` as Go's csv.Reader reads them (comma ',', no comments, strict quotes): empty
    lines skipped, CRLF normalised, quoted fields may span lines; errors as csv.ParseError's text."""
    lines = [ln + b"\n" for ln in data.split(b"\n")]
    last = lines.pop()[:-1]
    if last:  # no newline at the end: Go drops a trailing \r before EOF
        lines.append(last[:-1] if last.endswith(b"\r") else last)
    it = iter(lines)
    num_line = 0

    def read_line() -> bytes | None:
        nonlocal num_line
        line = next(it, None)
        if line is None:
            return None
        num_line += 1
        if line.endswith(b"\r\n"):
            line = line[:-2] + b"\n"
        return line

    def nl_len(b: bytes) -> int:
        return 1 if b.endswith(b"\n") else 0

    while True:
        line = read_line()
        while line is not None and len(line) == nl_len(line):  # empty lines
            line = read_line()
        if line is None:
            return
        rec_line = num_line
        fields: list[bytes] = []
        pos_line, col = num_line, 1
        while True:  # parseField
            if not line.startswith(b'"'):
                i = line.find(b",")
                field = line[:i] if i >= 0 else line[:len(line) - nl_len(line)]
                j = field.find(b'"')
                if j >= 0:
                    raise _CSVError(rec_line, num_line, col + j, _ERR_BARE_QUOTE)
                fields.append(field)
                if i >= 0:
                    line = line[i + 1:]
                    col += i + 1
                    continue
                break
            line = line[1:]
            col += 1
            buf = b""
            done = False
            while True:
                i = line.find(b'"')
                if i >= 0:
                    buf += line[:i]
                    line = line[i + 1:]
                    col += i + 1
                    if line.startswith(b'"'):
                        buf += b'"'
                        line = line[1:]
                        col += 1
                    elif line.startswith(b","):
                        line = line[1:]
                        col += 1
                        fields.append(buf)
                        break  # next field
                    elif len(line) == nl_len(line):
                        fields.append(buf)
                        done = True
                        break
                    else:
                        raise _CSVError(rec_line, num_line, col - 1, _ERR_QUOTE)
                elif line:  # a quoted field going on past the end of the line
                    buf += line
                    col += len(line)
                    nxt = read_line()
                    if nxt is None:
                        line = b""
                    else:
                        line = nxt
                        pos_line, col = num_line, 1
                else:
                    raise _CSVError(rec_line, pos_line, col, _ERR_QUOTE)
            if done:
                break
        yield fields


def parse_token_file(data: bytes, path: str) -> dict[str, UserInfo]:
    """token -> user, as tokenfile.NewCSV builds it (later duplicates win; empty tokens skipped)."""
    tokens: dict[str, UserInfo] = {}
    try:
        records = list(_go_csv_records(data))
    except _CSVError as e:
        raise TokenFileError(str(e)) from None
    for n, rec in enumerate(records, 1):
        if len(rec) < 3:
            raise TokenFileError(f"token file '{path}' must have at least 3 columns (token, user name, user uid), "
                                 f"found {len(rec)}")
        token, name, uid = (f.decode("utf-8", "surrogateescape") for f in rec[:3])
        if not token:
            log.warning("empty token has been found in token file '%s', record number '%d'", path, n)
            continue
        if token in tokens:
            log.warning("duplicate token has been found in token file '%s', record number '%d'", path, n)
        groups = tuple(rec[3].decode("utf-8", "surrogateescape").split(",")) if len(rec) >= 4 else ()
        tokens[token] = UserInfo(name, uid=uid, groups=groups)
    return tokens


def load_token_file(path: str) -> dict[str, UserInfo]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TokenFileError(f"open {path}: no such file or directory") from None
    except OSError as e:
        raise TokenFileError(f"open {path}: {e.strerror.lower() if e.strerror else e}") from None
    return parse_token_file(data, path)


# --- the authenticator chain -----------------------------------------------------------------------

class _Invalid(Exception):
    """A presented credential that does not authenticate (upstream: an error from the union)."""


def bearer_token(header: str | None) -> str | None:
    """bearertoken.Authenticator: the token of `Authorization: Bearer X`, or None when the header carries
    no bearer token (absent, another scheme, or an empty token)."""
    if not header:
        return None
    auth = header.strip(" \t\r\n\v\f")
    if not auth:
        return None
    parts = auth.split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def with_authenticated_group(u: UserInfo) -> UserInfo:
    """group.AuthenticatedGroupAdder: append `system:authenticated` unless the user is anonymous or already
    in system:authenticated or system:unauthenticated."""
    if u.name == ANONYMOUS or ALL_AUTHENTICATED in u.groups or ALL_UNAUTHENTICATED in u.groups:
        return u
    return UserInfo(u.name, uid=u.uid, groups=(*u.groups, ALL_AUTHENTICATED), extra=u.extra)


def x509_user(cert: dict[str, Any] | None, der: bytes | None) -> UserInfo | None:
    """x509.CommonNameUserConversion on a verified peer certificate (`ssl.SSLObject.getpeercert()`):
    user = the subject's CN (the last, as Go's pkix.Name), groups = its O values in order; None when there
    is no certificate or its CN is empty."""
    if not cert:
        return None
    cn = ""
    orgs: list[str] = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                cn = value
            elif key == "organizationName":
                orgs.append(value)
    if not cn:
        return None
    extra = {CREDENTIAL_ID: ("X509SHA256=" + hashlib.sha256(der).hexdigest(),)} if der else {}
    return UserInfo(cn, groups=tuple(orgs), extra=extra)


@dataclass
class Authenticator:
    tokens: dict[str, UserInfo] | None    # --token-auth-file (None: no token authenticator)
    client_certs: bool                    # --client-ca-file given: x509 client certificates
    anonymous: bool                       # --anonymous-auth (after upstream's AlwaysAllow reset)

    def authenticate(self, request: web.Request) -> UserInfo | None:
        """The user, or None for a 401."""
        failed = False
        if self.client_certs:
            ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
            if ssl_object is not None:
                u = x509_user(ssl_object.getpeercert(), ssl_object.getpeercert(binary_form=True))
                if u is not None:
                    request["credential"] = X509    # (a proxy such as the node tier carries it on by impersonation)
                    return with_authenticated_group(u)
        if self.tokens is not None:
            token = bearer_token(request.headers.get("Authorization"))
            if token is not None:
                u = self.tokens.get(token)
                if u is not None:
                    return with_authenticated_group(u)
                failed = True  # invalid bearer token
        if failed or not self.anonymous:
            return None
        return ANONYMOUS_USER


def enabled(config) -> bool:
    """Whether any authentication flag was given (else every request is UNSECURED)."""
    return bool(config.token_auth_file or config.client_ca_file or config.anonymous_auth is not None)


def authenticator(config) -> Authenticator | None:
    """The authenticator for `config` (Config's token_auth_file, client_ca_file, anonymous_auth), or None
    without authentication flags. Raises TokenFileError for an unreadable or malformed token file."""
    if not enabled(config):
        return None
    tokens = load_token_file(config.token_auth_file) if config.token_auth_file else None
    loopback = os.environ.get(LOOPBACK_TOKEN_ENV)
    if loopback:
        tokens = dict(tokens or {})
        tokens[loopback] = UserInfo(APISERVER_USER, uid=str(uuid.uuid4()), groups=(SYSTEM_PRIVILEGED_GROUP,))
    anonymous = True if config.anonymous_auth is None else config.anonymous_auth
    return Authenticator(tokens=tokens, client_certs=bool(config.client_ca_file), anonymous=anonymous)


def unauthorized() -> web.Response:
    """responsewriters.Unauthorized's Status (checked byte for byte against kube-apiserver v1.37.2)."""
    return web.Response(status=401, body=UNAUTHORIZED_BODY, content_type="application/json",
                        headers={"Cache-Control": "no-cache, private"})


def authentication(config):
    """The aiohttp middleware: `request["user"]` for the handlers after it, or a 401."""
    auth = authenticator(config)
    if auth is None:
        @web.middleware
        async def unsecured(request: web.Request, handler):
            request["user"] = UNSECURED
            return await handler(request)
        return unsecured

    authenticate = auth.authenticate

    @web.middleware
    async def authenticated(request: web.Request, handler):
        user = authenticate(request)
        if user is None:
            return unauthorized()
        request["user"] = user
        return await handler(request)
    return authenticated
