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
apiserver_storage_objects = Gauge(
    "apiserver_storage_objects", "Number of stored objects at the time of last check split by kind.",
    ["resource"])
apiserver_longrunning_requests = Gauge(
    "apiserver_longrunning_requests", "Gauge of all active long-running apiserver requests.",
    ["verb", "group", "version", "resource", "subresource", "scope", "component"])

# Residency (issue 4): lists/watches a partially resident cache could not answer.
residency_delegated = Counter(
    "apiserver_residency_delegated_total",
    "Requests served from etcd because their shardSelector lies outside this apiserver's cache residency.",
    ["group", "resource", "verb"])
# KEP-5866 metrics (S7.15).
watch_shards_total = Gauge("apiserver_watch_shards_total", "Number of open sharded watches.",
                           ["group", "resource"])
watch_filtered_events_total = Counter(
    "apiserver_watch_filtered_events_total", "Events a sharded watcher rejected by its shard selector.",
    ["group", "resource"])


def sharded_watch_metrics(res):
    """on_watcher callback: keeps apiserver_watch_shards_total in step with open sharded watches."""
    g = watch_shards_total.labels(res.group, res.plural)
    filtered = watch_filtered_events_total.labels(res.group, res.plural)

    def on_watcher(w, opened: bool) -> None:
        if opened:
            g.inc()
            w.on_filtered = filtered.inc
        else:
            g.dec()
    return on_watcher
