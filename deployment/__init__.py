"""A whole apiserver deployment on every core of one machine: K resident shards and N fronts on one address.

    python -m deployment [--shards K] [--fronts N] [--deployment-port P] [apiserver flags...]

One command, the same flags as `python -m apiserver` (see `deployment.supervisor`): etcd (embedded unless
`--etcd-servers`), K shards (`--residency`, complementary ranges of the UID hash, on loopback), N fronts
(`--front --shards ...`) that all listen on `--port` / `--secure-port` with SO_REUSEPORT (the kernel spreads
connections over them), and this process as their supervisor: it restarts a child that dies (with a backoff),
takes them all down with it, stops them in order on SIGTERM, and serves the deployment's own endpoints.
"""
