"""etcd client metrics under upstream names (k8s.io/apiserver/pkg/storage/etcd3/metrics)."""
from machinery.metrics import Counter, Histogram

etcd_requests_total = Counter(
    "etcd_requests_total", "Etcd request counts for each operation and object type.",
    ["operation", "type"])
etcd_request_duration_seconds = Histogram(
    "etcd_request_duration_seconds", "Etcd request latency in seconds for each operation and object type.",
    ["operation", "type"],
    buckets=(0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60))


# The two children per (operation, type), found with one lookup instead of two. A few hundred at most.
_SERIES: dict[tuple[str, str], tuple] = {}


def observe_etcd(operation: str, resource: str, seconds: float) -> None:
    series = _SERIES.get((operation, resource))
    if series is None:
        series = _SERIES[(operation, resource)] = (etcd_requests_total.labels(operation, resource),
                                                   etcd_request_duration_seconds.labels(operation, resource))
    series[0].inc()
    series[1].observe(seconds)
