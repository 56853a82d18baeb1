"""Who is asking: upstream's user.Info (k8s.io/apiserver/pkg/authentication/user)."""
from __future__ import annotations

from dataclasses import dataclass, field

# Well-known names (k8s.io/apiserver/pkg/authentication/user/user.go).
SYSTEM_PRIVILEGED_GROUP = "system:masters"
ALL_AUTHENTICATED = "system:authenticated"
ALL_UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
APISERVER_USER = "system:apiserver"   # upstream's loopback client

# A deployment's supervisor (deployment/supervisor.py) probes its fronts' /readyz and /metrics with a token of its
# own, given in the environment: authenticated as upstream's loopback client, system:apiserver in system:masters.
LOOPBACK_TOKEN_ENV = "APISERVER_LOOPBACK_TOKEN"


@dataclass(frozen=True)
class UserInfo:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict, hash=False, compare=False)


# Requests on the plain HTTP port carry no credentials when no authentication flag is given: they act as
# upstream's old insecure port did (`system:unsecured` in `system:masters`), so local experiments stay
# two commands. Any authentication flag makes the plain port authenticate like the secure one.
UNSECURED = UserInfo("system:unsecured", groups=(SYSTEM_PRIVILEGED_GROUP, ALL_AUTHENTICATED))
ANONYMOUS_USER = UserInfo(ANONYMOUS, groups=(ALL_UNAUTHENTICATED,))
