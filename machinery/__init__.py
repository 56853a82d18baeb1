"""Pure API machinery (the role of k8s.io/apimachinery): Status errors, Go compatibility helpers,
selectors and shard selectors, list options, validation, patches, server-set object fields, the resource
registry, wire encoders (JSON byte-identical to Go, protobuf request bodies) and Table output.

Nothing here does I/O or imports a package of ours above it (storage, cache, apiserver).
"""
