"""Reading a server's Prometheus text in tests: the sum of one metric's series whose labels are exactly those
given (a label compared by name and value, never by substring: `resource="pods"` does not match
`subresource="pods"`)."""
from __future__ import annotations

import re

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of `name` (labels unescaped as Prometheus escapes them), in order."""
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            head, _, value = line.rpartition(" ")
            labels = {k: re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)
                      for k, v in _LABEL.findall(head[len(name) + 1:])}
        elif line.startswith(name + " "):
            labels, value = {}, line.rpartition(" ")[2]
        else:
            continue
        out.append((labels, float(value)))
    return out


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include every given one (0.0 if none)."""
    return sum(v for got, v in series(text, name) if all(got.get(k) == str(want) for k, want in labels.items()))


def scrape(api, name: str, **labels: str) -> float:
    """`metric_sum` over `api`'s /metrics (tests.helpers.Api or anything with `.get(path).text`)."""
    return metric_sum(api.get("/metrics").text, name, **labels)
