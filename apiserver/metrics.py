"""apiserver metrics under upstream names (k8s.io/apiserver/pkg/endpoints/metrics)."""
from machinery.metrics import Counter, Gauge, Histogram

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
# Upstream observes it in MonitorRequest beside apiserver_request_duration_seconds, minus webhook and APF
# queue-wait time, never for WATCH (WithLatencyTrackers skips the watch verb) nor for dryRun requests. No
# dry_run label, and coarser buckets (no 0.005 / 0.025).
apiserver_request_sli_duration_seconds = Histogram(
    "apiserver_request_sli_duration_seconds",
    "Response latency distribution (not counting webhook duration and priority & fairness queue wait times) "
    "in seconds for each verb, group, version, resource, subresource, scope and component.",
    [n for n in REQUEST_LABELS if n != "dry_run"],
    buckets=(0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60))
apiserver_request_terminations_total = Counter(
    "apiserver_request_terminations_total", "Number of requests which apiserver terminated in self-defense.",
    [n for n in REQUEST_LABELS if n != "dry_run"] + ["code"])
apiserver_resource_objects = Gauge(
    "apiserver_resource_objects", "Number of stored objects at the time of last check split by kind. In case of a "
    "fetching error, the value will be -1.", ["group", "resource"])
