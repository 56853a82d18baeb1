"""The REST verbs of a resource (upstream `endpoints/handlers` + `registry/generic`), one module per
kind of request: `read` (get, list), `watch`, `write` (create, update, patch, delete,
deletecollection); `common` holds what they share (request scope, bodies, options, responses).

Endpoints parse and validate the request, call the resource's `cache.delegator.CacheDelegator`
(the storage contract: cache or etcd) and encode the answer. They see the server only through
`common.Context`."""
