"""Authentication and authorization, as upstream's handler chain has them (k8s.io/apiserver
pkg/authentication, pkg/authorization, plugin/pkg/auth/authorizer/rbac):

* `user`: who is asking (`UserInfo`), the well-known users and groups.
* `attributes`: what they ask for (`Attributes`, upstream's authorizer.AttributesRecord) and the answer
  (`Decision`).
* `authn`: the authentication filter (bearer tokens from `--token-auth-file`, x509 client certificates from
  `--client-ca-file`, `--anonymous-auth`); sets `request["user"]`, or answers 401.
* `authz`: the authorization filter (`--authorization-mode`: AlwaysAllow, RBAC); answers 403.
* `rbac`: the RBAC authorizer over the RBAC objects the watch cache holds.
"""
