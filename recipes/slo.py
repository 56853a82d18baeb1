"""Upstream's SLIs and SLOs (SIG Scalability), measured twice: from the client side (every call the workload
makes, timed) and from the servers' own `apiserver_request_sli_duration_seconds` histograms (request latency
without webhook and priority-queue waits), scraped at every window boundary.

Sources (kubernetes/community, sig-scalability/slos/):
* api_call_latency.md, Official: latency of mutating API calls (POST, PUT, PATCH, DELETE) for single objects,
  per (resource, verb), p99 over the last 5 minutes <= 1 s; of non-streaming read-only calls (GET and LIST) per
  (resource, scope), p99 over the last 5 minutes <= 1 s for scope=resource, <= 5 s for scope=namespace, <= 30 s
  for scope=cluster. (Upstream's SLO excludes custom resources; the recipes hold them to the same bounds.)
* pod_startup_latency.md, Official: startup latency of schedulable stateless pods, from the pod's creation
  timestamp to when all its containers are reported started and observed via watch, p99 over the last
  5 minutes <= 5 s.
* watch latency (slos.md): WIP upstream, with no SLO: measured and printed, never a verdict.

A run's window is split into 5-minute windows as upstream's (a shorter run is one window, and says so); an
SLO passes when its p99 is within bounds in every window, for every (resource, verb) or (resource, scope).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

UPSTREAM_WINDOW_S = 300.0
SLI_METRIC = "apiserver_request_sli_duration_seconds"
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class SLO:
    name: str
    what: str
    bound_s: float | None      # None: measured, no upstream SLO
    source: str

    def verbs_scopes(self) -> tuple[tuple[str, ...], str | None]:
        return {"mutating": (MUTATING, None), "read-resource": (("GET",), "resource"),
                "read-namespace": (("LIST",), "namespace"), "read-cluster": (("LIST",), "cluster")}.get(
            self.name, ((), None))


API = "kubernetes/community sig-scalability/slos/api_call_latency.md (Official)"
SLOS = (
    SLO("mutating", "mutating API call latency, single objects, per (resource, verb), p99", 1.0, API),
    SLO("read-resource", "read-only API call latency, scope=resource, per resource, p99", 1.0, API),
    SLO("read-namespace", "read-only API call latency, scope=namespace, per resource, p99", 5.0, API),
    SLO("read-cluster", "read-only API call latency, scope=cluster, per resource, p99", 30.0, API),
    SLO("pod-startup", "pod startup latency, creation timestamp to all containers started, observed via watch, p99",
        5.0, "kubernetes/community sig-scalability/slos/pod_startup_latency.md (Official)"),
    SLO("watch-latency", "write acknowledged to event delivered to a watcher, p99", None,
        "kubernetes/community sig-scalability/slos/slos.md (WIP: no SLO upstream)"),
)
BY_NAME = {s.name: s for s in SLOS}


def p99(xs: list[float]) -> float | None:
    """Nearest-rank 99th percentile."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[max(0, math.ceil(0.99 * len(xs)) - 1)]


def windows(t0: float, t1: float) -> list[tuple[float, float]]:
    """[t0, t1) cut into upstream's 5-minute windows (the last one at least half a window, else merged)."""
    n = max(1, int((t1 - t0) // UPSTREAM_WINDOW_S))
    edges = [t0 + i * UPSTREAM_WINDOW_S for i in range(n)] + [t1]
    return list(zip(edges, edges[1:]))


# --- server side: histograms --------------------------------------------------------------------------------

def sli_buckets(text: str, process_prefix: str | None = None) -> dict[tuple[str, str, str], dict[float, float]]:
    """(resource, verb, scope) -> {le: cumulative count} of apiserver_request_sli_duration_seconds in one
    /metrics text. A deployment's aggregated text labels each child (`process`): only the processes named
    `process_prefix*` (its fronts, which face the clients) are counted, so a proxied request is not counted
    twice."""
    out: dict[tuple[str, str, str], dict[float, float]] = {}
    for fam in text_string_to_metric_families(text):
        # by the sample's name: an aggregated text repeats a family per process, which the parser then
        # reads as untyped families named after their samples
        for s in fam.samples:
            if s.name != SLI_METRIC + "_bucket":
                continue
            lab = s.labels
            if process_prefix and not lab.get("process", "").startswith(process_prefix):
                continue
            key = (lab.get("resource", ""), lab.get("verb", ""), lab.get("scope", ""))
            b = out.setdefault(key, {})
            le = float(lab["le"])
            b[le] = b.get(le, 0.0) + s.value
    return out


def merge(a: dict, b: dict) -> dict:
    out = {k: dict(v) for k, v in a.items()}
    for k, v in b.items():
        d = out.setdefault(k, {})
        for le, c in v.items():
            d[le] = d.get(le, 0.0) + c
    return out


def histogram_quantile(q: float, before: dict[float, float], after: dict[float, float]) -> tuple[float | None, int]:
    """Prometheus' histogram_quantile over the increase between two scrapes: (value, observations)."""
    les = sorted(set(after) | set(before))
    cum = [(le, after.get(le, 0.0) - before.get(le, 0.0)) for le in les]
    total = cum[-1][1] if cum else 0.0
    if total <= 0:
        return None, 0
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in cum:
        if c >= rank:
            if math.isinf(le):
                return prev_le, int(total)
            return prev_le + (le - prev_le) * ((rank - prev_c) / max(c - prev_c, 1e-12)), int(total)
        prev_le, prev_c = le, c
    return cum[-1][0], int(total)


# --- verdicts -----------------------------------------------------------------------------------------------

def evaluate(client_samples, scrapes: list[tuple[float, dict]], t0: float, t1: float,
             extra: dict[str, list[tuple[float, float]]] | None = None, wanted: set[str] | None = None) -> dict:
    """Every SLI of the run against its SLO.

    client_samples: recipes.client.Sample list; scrapes: (time, sli_buckets) at t0, every window boundary and t1
    (server side); extra: SLI name -> [(time, seconds)] measured by a workload (pod startup, watch latency).
    wanted: the SLIs this recipe's workload exercises (others are reported as not exercised).
    Returns {name: {"slo": ..., "bound_s", "source", "client": {...}, "server": {...}, "verdict"}}."""
    wins = windows(t0, t1)
    out = {}
    for slo in SLOS:
        if wanted is not None and slo.name not in wanted:
            continue
        res = {"what": slo.what, "bound_s": slo.bound_s, "source": slo.source,
               "windows": len(wins), "window_s": round(wins[0][1] - wins[0][0], 1)}
        if slo.name in ("pod-startup", "watch-latency"):
            pts = (extra or {}).get(slo.name, [])
            groups = {"": pts}
            res["client"] = _client_groups(groups, wins, slo.bound_s)
        else:
            verbs, scope = slo.verbs_scopes()
            groups: dict[str, list[tuple[float, float]]] = {}
            for s in client_samples:
                if s.verb in verbs and (scope is None or s.scope == scope) and s.code < 300:
                    groups.setdefault(f"{s.resource} {s.verb}" if scope is None else s.resource, []).append(
                        (s.t, s.seconds))
            res["client"] = _client_groups(groups, wins, slo.bound_s)
            res["server"] = _server_groups(scrapes, verbs, scope, slo.bound_s)
        res["verdict"] = _verdict(res, slo.bound_s)
        out[slo.name] = res
    return out


def _client_groups(groups: dict[str, list[tuple[float, float]]], wins, bound) -> dict:
    out = {}
    for key, pts in sorted(groups.items()):
        per = []
        for a, b in wins:
            v = p99([x for t, x in pts if a <= t < b or (b == wins[-1][1] and t >= b)])
            if v is not None:
                per.append(v)
        worst = max(per) if per else None
        out[key] = {"p99_s": worst, "samples": len(pts),
                    "pass": None if bound is None or worst is None else worst <= bound}
    return out


def _server_groups(scrapes, verbs, scope, bound) -> dict:
    out: dict[str, dict] = {}
    for (ta, a), (tb, b) in zip(scrapes, scrapes[1:]):
        for (res, verb, sc), after in b.items():
            if verb not in verbs or (scope is not None and sc != scope):
                continue
            key = f"{res} {verb}" if scope is None else res
            v, n = histogram_quantile(0.99, a.get((res, verb, sc), {}), after)
            if v is None:
                continue
            g = out.setdefault(key, {"p99_s": 0.0, "observations": 0})
            g["p99_s"] = max(g["p99_s"], v)
            g["observations"] += n
    for g in out.values():
        g["pass"] = None if bound is None else g["p99_s"] <= bound
    return out


def _verdict(res: dict, bound) -> str:
    """pass / fail / measured (no SLO) / not measured."""
    groups = [g for side in ("client", "server") for g in res.get(side, {}).values()]
    if not groups:
        return "not measured"
    if bound is None:
        return "measured"
    return "fail" if any(g["pass"] is False for g in groups) else "pass"
