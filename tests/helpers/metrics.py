"""Reading a server's Prometheus text in tests: the sum of one metric's series whose labels are exactly those
given (a label compared by name and value, never by substring: `resource="pods"` does not match
`subresource="pods"`). Parsed by prometheus_client's own parser, as bench/nodes.py and test_http_core read it."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample named `name` (labels unescaped), in order. Only its lines are parsed: the whole text of a
    server's /metrics takes the parser ~0.1 s, and tests read it in loops."""
    lines = "\n".join(ln for ln in text.splitlines() if ln.startswith((name + "{", name + " ")))
    return [(dict(s.labels), float(s.value)) for fam in text_string_to_metric_families(lines + "\n")
            for s in fam.samples if s.name == name]


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include every given one (0.0 if none)."""
    return sum(v for got, v in series(text, name) if all(got.get(k) == str(want) for k, want in labels.items()))


def scrape(api, name: str, **labels: str) -> float:
    """`metric_sum` over `api`'s /metrics (tests.helpers.Api or anything with `.get(path).text`)."""
    return metric_sum(api.get("/metrics").text, name, **labels)
