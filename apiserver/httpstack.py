"""Which HTTP server the apiserver's processes (a full apiserver, a shard, a front) run on: aiohttp.web, the
default, or machinery.web (a lean HTTP/1.1 server on httptools, without aiohttp's import graph: issue 21's
40 MiB floor, docs/floor.md) when the environment says APISERVER_HTTP=lean.

Chosen at import, once per process, so an environment variable and not a flag: the deployment's zygote
imports the server before it reads any argument, and its children inherit what it imported. Every module of
the apiserver imports `web` from here; the node tier stays on aiohttp (its raw Lease path works inside
aiohttp's protocol)."""
import os

LEAN = os.environ.get("APISERVER_HTTP", "aiohttp") == "lean"

if LEAN:
    from machinery import web
else:
    from aiohttp import web

__all__ = ["LEAN", "web"]
