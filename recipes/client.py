"""The workload's clients: a blocking one for set-up, and an asyncio one whose every call is timed and
recorded by (resource, verb, scope) for the client-side SLIs (recipes.slo)."""
from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

import aiohttp

from prometheus_client.parser import text_string_to_metric_families

JSON = {"Content-Type": "application/json"}


@dataclass
class Endpoint:
    """Where a client reaches a server: `url`; for HTTPS the CA and the client certificate (cert, key)."""
    url: str
    ca: str | None = None
    cert: tuple[str, str] | None = None

    def ssl(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https:"):
            return None
        ctx = ssl.create_default_context(cafile=self.ca)
        if self.cert:
            ctx.load_cert_chain(*self.cert)
        return ctx

    def kubeconfig(self, path: str) -> str:
        cluster = [f"    server: {self.url}"] + ([f"    certificate-authority: {self.ca}"] if self.ca else [])
        user = ["  user: {}"] if not self.cert else ["  user:", f"    client-certificate: {self.cert[0]}",
                                                     f"    client-key: {self.cert[1]}"]
        with open(path, "w") as f:
            f.write("\n".join(["apiVersion: v1", "kind: Config", "clusters:", "- name: recipe", "  cluster:",
                               *cluster, "users:", "- name: recipe", *user, "contexts:", "- name: recipe",
                               "  context:", "    cluster: recipe", "    user: recipe",
                               "current-context: recipe", ""]))
        return path



class Client:
    """Blocking requests to an endpoint (set-up and checks)."""

    def __init__(self, ep: Endpoint):
        self.ep = ep
        self.ctx = ep.ssl()

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.ep.url + path, data=data, method=method, headers=JSON if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        pass


@dataclass
class Sample:
    t: float            # monotonic time the call started
    resource: str
    verb: str           # POST PUT PATCH DELETE GET LIST
    scope: str          # resource | namespace | cluster
    seconds: float
    code: int


@dataclass
class Recorder:
    samples: list[Sample] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)   # "VERB resource code" -> count (non-2xx)
    throttled: int = 0                                     # 429s, retried after Retry-After as client-go does

    def add(self, s: Sample) -> None:
        self.samples.append(s)
        if s.code >= 300:
            key = f"{s.verb} {s.resource} {s.code}"
            self.errors[key] = self.errors.get(key, 0) + 1


class AsyncClient:
    """aiohttp with the endpoint's TLS; `call` times every request into the recorder."""

    def __init__(self, ep: Endpoint, rec: Recorder, connections: int = 64):
        self.ep = ep
        self.rec = rec
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ep.ssl() or False, limit=connections),
            timeout=aiohttp.ClientTimeout(total=120))

    async def close(self) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, *, resource: str, verb: str, scope: str,
                   body: bytes | None = None, ok=(200, 201)) -> tuple[int, bytes]:
        for _ in range(20):
            t0 = time.monotonic()
            async with self.session.request(method, self.ep.url + path, data=body,
                                            headers=JSON if body is not None else None) as r:
                data = await r.read()
                dt = time.monotonic() - t0
            if r.status == 429:   # not an answer to the call: retried as client-go does
                self.rec.throttled += 1
                await asyncio.sleep(float(r.headers.get("Retry-After") or 1))
                continue
            self.rec.add(Sample(t0, resource, verb, scope, dt, r.status))
            return r.status, data
        return 429, b""


async def metrics_text(client: AsyncClient, url: str) -> str:
    async with client.session.get(url + "/metrics") as r:
        return (await r.text()) if r.status == 200 else ""


async def scrape_counter(client: AsyncClient, ep: Endpoint, name: str, **labels: str) -> float:
    """The sum of a counter's samples (matching `labels`) at an endpoint's /metrics."""
    total = 0.0
    for fam in text_string_to_metric_families(await metrics_text(client, ep.url)):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total
