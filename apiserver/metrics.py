"""apiserver metrics under upstream names (k8s.io/apiserver/pkg/endpoints/metrics)."""
from prometheus_client import Counter, Gauge, Histogram

REQUEST_LABELS = ["verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component"]

apiserver_request_total = Counter(
    "apiserver_request_total",
    "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, "
    "scope, component, and HTTP response code.",
    REQUEST_LABELS + ["code"])
apiserver_request_duration_seconds = Histogram(
    "apiserver_request_duration_seconds",
    "Response latency distribution in seconds for each verb, dry run value, group, version, resource, "
    "subresource, scope and component.",
    REQUEST_LABELS,
    buckets=(0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20,
             30, 45, 60))
apiserver_resource_objects = Gauge(
    "apiserver_resource_objects", "Number of stored objects at the time of last check split by kind. In case of a "
    "fetching error, the value will be -1.", ["group", "resource"])
