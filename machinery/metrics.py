"""Prometheus metrics for the servers' /metrics: counters, gauges and histograms with label children, and the
text exposition format (version 0.0.4), without prometheus_client.

Why not prometheus_client: every process of a deployment (fronts, shards, the node tier) pays for its metrics,
and prometheus_client's are heavy for what they do. A histogram child there is a value object and a lock per
bucket: 6.0 KB for one label set of the request histograms (24 buckets; 1.1 KB here, tracemalloc), and every
(verb, resource, scope) and every (operation, resource) of the etcd client gets one; its import, with its
default collectors, is another ~2 MiB. An empty apiserver that had served discovery, OpenAPI and a list and a
watch of each of its 62 resources held ~4.6 MiB of Python heap in prometheus_client's objects. Here a histogram
child is one list of counts and a sum, an update a list index and a float addition (no lock: metrics are
updated on the event loop's thread; an update from a worker thread could only race another update of the same
series; creating a series takes a lock).

The exposition is prometheus_client's ``generate_latest`` text (label names sorted, numbers as its
floatToGoString writes them, a counter's family named with ``_total``) without its ``_created`` series, which
kube-apiserver does not export either; the process's own ``process_*`` gauges come first, as kube-apiserver's
Go collector gives them (same names and help). Clients and tests parse it with any Prometheus parser (tests use
prometheus_client's).
"""
from __future__ import annotations

import bisect
import math
import os
import threading

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
INF = float("inf")
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, INF)


def go_float(v: float) -> str:
    """A number as prometheus_client's floatToGoString writes it: Python's shortest repr ("1.0", "0.005"), Go's
    exponent form for large positive values ("1.234567e+06"), "+Inf", "-Inf", "NaN". Not Go's own 'g' format
    (which writes "1"): the text stays byte-identical to what these servers served before."""
    v = float(v)
    if v == INF:
        return "+Inf"
    if v == -INF:
        return "-Inf"
    if math.isnan(v):
        return "NaN"
    s = repr(v)
    dot = s.find(".")
    if v > 0 and dot > 6:   # Go switches to an exponent sooner than Python
        return f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.") + f"e+0{dot - 1}"
    return s


def _escape_help(s: str) -> str:
    return s.replace("\\", r"\\").replace("\n", r"\n")


def _escape_value(s: str) -> str:
    return s.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs) -> str:
    """`{a="x",b="y"}` with the names sorted, or "" for none."""
    body = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(pairs))
    return "{" + body + "}" if body else ""


class Registry:
    """What one /metrics shows: collectors in the order they registered, each with `expose(out: list[str])`."""

    def __init__(self, process: bool = True) -> None:
        self._collectors: list = [ProcessCollector()] if process else []

    def register(self, collector) -> None:
        if collector in self._collectors:
            return
        name = getattr(collector, "name", None)
        if name is not None and any(getattr(c, "name", None) == name for c in self._collectors):
            raise ValueError(f"metric {name!r} is registered already")
        self._collectors.append(collector)

    def expose(self) -> bytes:
        out: list[str] = []
        for c in list(self._collectors):
            c.expose(out)
        return "".join(out).encode()


class ProcessCollector:
    """process_* gauges from /proc/self, under the names and help of Go's (and prometheus_client's)."""
    _ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    _pagesize = os.sysconf("SC_PAGESIZE") if hasattr(os, "sysconf") else 4096

    def __init__(self) -> None:
        self._btime = 0.0
        try:
            with open("/proc/stat", "rb") as f:
                for line in f:
                    if line.startswith(b"btime "):
                        self._btime = float(line.split()[1])
        except OSError:
            pass

    def expose(self, out: list[str]) -> None:
        if not self._btime:
            return
        try:
            with open("/proc/self/stat", "rb") as f:
                parts = f.read().split(b")")[-1].split()
            rows = [("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", float(parts[20])),
                    ("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                     float(parts[21]) * self._pagesize),
                    ("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
                     float(parts[19]) / self._ticks + self._btime),
                    ("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
                     (float(parts[11]) + float(parts[12])) / self._ticks)]
            rows.append(("process_open_fds", "gauge", "Number of open file descriptors.",
                         float(len(os.listdir("/proc/self/fd")))))
            with open("/proc/self/limits", "rb") as f:
                soft = next((ln.split()[3] for ln in f if ln.startswith(b"Max open file")), b"")
            if soft.isdigit():   # not "unlimited"
                rows.append(("process_max_fds", "gauge", "Maximum number of open file descriptors.", float(soft)))
        except (OSError, IndexError, ValueError):
            return
        for name, kind, help_, value in rows:
            out.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n{name} {go_float(value)}\n")


REGISTRY = Registry()
_NEW_CHILD = threading.Lock()   # only taken to create a series; an update takes no lock


class _Metric:
    """A family: its children by label values (a family without labels is its own only child)."""
    kind = ""

    def __init__(self, name: str, documentation: str, labelnames=(), registry: Registry | None = REGISTRY):
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple, object] = {}     # label values as given and as strings -> child
        self._series: list[tuple] = []               # (labels as _label_pairs gives them, child), creation order
        if not self.labelnames:
            self._only = self._child(())
            self._series.append((self._label_pairs(()), self._only))
        if registry is not None:
            registry.register(self)

    def labels(self, *values, **by_name):
        if by_name:
            values = tuple(by_name[n] for n in self.labelnames)
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: {len(self.labelnames)} label values wanted, {len(values)} given")
            key = tuple(str(v) for v in values)
            with _NEW_CHILD:   # two threads asking for a new series at once get one
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = self._child(key)
                    self._series.append((self._label_pairs(key), child))
                self._children[values] = child
        return child

    def _label_pairs(self, key: tuple) -> list[tuple[str, str]]:
        return list(zip(self.labelnames, key))

    def _child(self, key: tuple):
        raise NotImplementedError

    def _head(self, out: list[str], name: str) -> None:
        out.append(f"# HELP {name} {_escape_help(self.documentation)}\n# TYPE {name} {self.kind}\n")


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def get(self) -> float:
        return self.value


class _CounterChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        self.value += amount


class _GaugeChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class _Simple(_Metric):
    def _label_pairs(self, key: tuple) -> str:   # a counter's or gauge's label string, built once
        return _labels(zip(self.labelnames, key))

    def expose(self, out: list[str]) -> None:
        name = self._sample_name()
        self._head(out, name)
        out.extend(f"{name}{labels} {go_float(c.value)}\n" for labels, c in self._series)

    def _sample_name(self) -> str:
        return self.name

    # without labels: the family is its child
    def get(self) -> float:
        return self._only.value


class Counter(_Simple):
    """A monotonic counter; exposed as `<name>_total` whether or not the name given ends so."""
    kind = "counter"

    def _child(self, key):
        return _CounterChild()

    def _sample_name(self) -> str:
        return self.name if self.name.endswith("_total") else self.name + "_total"

    def inc(self, amount: float = 1.0) -> None:
        self._only.inc(amount)


class Gauge(_Simple):
    kind = "gauge"

    def _child(self, key):
        return _GaugeChild()

    def inc(self, amount: float = 1.0) -> None:
        self._only.inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._only.dec(amount)

    def set(self, value: float) -> None:
        self._only.set(value)


class HistogramSeries:
    """One histogram series: counts per bucket (not cumulative; the last bound is +Inf) and the sum. A
    Histogram's children, and machinery.pauses' own (a GC callback must not allocate much nor take a lock)."""
    __slots__ = ("upper", "counts", "sum")

    def __init__(self, upper: tuple) -> None:
        self.upper = upper
        self.counts = [0] * len(upper)
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self.upper, amount)] += 1   # the first bucket whose bound is >= amount
        self.sum += amount


def histogram_lines(out: list[str], name: str, labels: list[tuple[str, str]], upper, counts, total: float) -> None:
    """One histogram series: cumulative `_bucket`s (`le` sorted among the labels), `_count`, `_sum`."""
    acc = 0
    for bound, n in zip(upper, counts):
        acc += n
        out.append(f"{name}_bucket{_labels(labels + [('le', go_float(bound))])} {go_float(acc)}\n")
    plain = _labels(labels)
    out.append(f"{name}_count{plain} {go_float(acc)}\n{name}_sum{plain} {go_float(total)}\n")


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, documentation: str, labelnames=(), registry: Registry | None = REGISTRY,
                 buckets=DEFAULT_BUCKETS):
        upper = tuple(sorted(float(b) for b in buckets))
        if not upper or upper[-1] != INF:
            upper += (INF,)
        self.upper = upper
        super().__init__(name, documentation, labelnames, registry)

    def _child(self, key):
        return HistogramSeries(self.upper)

    def observe(self, amount: float) -> None:
        self._only.observe(amount)

    def expose(self, out: list[str]) -> None:
        self._head(out, self.name)
        for labels, c in self._series:
            histogram_lines(out, self.name, labels, self.upper, c.counts, c.sum)


def generate_latest(registry: Registry = REGISTRY) -> bytes:
    """The registry's text, as prometheus_client's function of that name (without `_created` series)."""
    return registry.expose()
