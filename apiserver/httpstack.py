"""Which HTTP server the apiserver's processes (a full apiserver, a shard, a front) run on: machinery.web, the
default (a lean HTTP/1.1 server on httptools, without aiohttp's import graph: issue 21's 40 MiB floor,
docs/floor.md), or aiohttp.web when the environment says APISERVER_HTTP=aiohttp (the server this project ran on
until 2026-12-07; kept to compare with, and for the node tier).

Chosen at import, once per process, so an environment variable and not a flag: the deployment's zygote
imports the server before it reads any argument, and its children inherit what it imported. Every module of
the apiserver imports `web` from here; the node tier stays on aiohttp (its raw Lease path works inside
aiohttp's protocol)."""
import os

LEAN = os.environ.get("APISERVER_HTTP", "lean") != "aiohttp"

if LEAN:
    from machinery import web
else:
    from aiohttp import web

__all__ = ["LEAN", "web"]
