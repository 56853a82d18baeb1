"""What is asked and the answer: upstream's authorizer.Attributes / Decision
(k8s.io/apiserver/pkg/authorization/authorizer)."""
from __future__ import annotations

from dataclasses import dataclass

from .user import UserInfo


@dataclass(frozen=True)
class Attributes:
    user: UserInfo
    verb: str                      # get list watch create update patch delete deletecollection (or an HTTP verb, lowercased, for non-resource requests)
    resource_request: bool
    api_group: str = ""
    api_version: str = ""
    resource: str = ""             # plural
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""                 # the URL path, for non-resource requests


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""               # upstream's reason text (e.g. the RBAC binding that allowed it), may be empty
