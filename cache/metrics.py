"""Watch cache metrics under upstream names (S4.20, k8s.io/apiserver/pkg/storage/cacher/metrics)."""
from machinery.metrics import Counter, Gauge, Histogram

_L = ["group", "resource"]

events_received = Counter("apiserver_watch_cache_events_received_total",
                          "Counter of events received in watch cache broken by resource type.", _L)
events_dispatched = Counter("apiserver_watch_cache_events_dispatched_total",
                            "Counter of events dispatched in watch cache broken by resource type.", _L)
resource_version = Gauge("apiserver_watch_cache_resource_version",
                         "Current resource version of watch cache broken by resource type.", _L)
initializations = Counter("apiserver_watch_cache_initializations_total",
                          "Counter of watch cache initializations broken by resource type.", _L)
capacity = Gauge("watch_cache_capacity",  # no apiserver_ prefix, as kube-apiserver 1.37 exports it
                 "Total capacity of watch cache broken by resource type.", _L)
capacity_increase = Counter("apiserver_watch_cache_capacity_increase_total",
                            "Total number of watch cache capacity increase events broken by resource type.", _L)
capacity_decrease = Counter("apiserver_watch_cache_capacity_decrease_total",
                            "Total number of watch cache capacity decrease events broken by resource type.", _L)
read_wait = Histogram("apiserver_watch_cache_read_wait_seconds",
                      "Histogram of time spent waiting for a watch cache to become fresh.", _L,
                      buckets=(0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3))
consistent_read = Counter("apiserver_watch_cache_consistent_read_total",
                          "Counter for consistent reads from cache.", _L + ["success", "fallback"])
terminated_watchers = Counter("apiserver_terminated_watchers_total",
                              "Counter of watchers closed due to unresponsiveness broken by resource type.", _L)
# LISTs served from the cache: kube-apiserver 1.37's names (apiserver_storage_list_*, storage="watchcache";
# the older apiserver_cache_list_* are gone from it). index="label" when our label bitmaps chose the candidates
# (upstream has no label index: its index values name field indexes).
storage_list_total = Counter("apiserver_storage_list_total", "Number of LIST requests served from storage",
                             ["group", "index", "resource", "storage"])
storage_list_returned = Counter("apiserver_storage_list_returned_objects_total",
                                "Number of objects returned for a LIST request from storage",
                                ["group", "resource", "storage"])
# Compressed entries (cache/compression.py, not upstream) that failed to decode: each re-initialises the cache.
corrupt_entries = Counter("apiserver_watch_cache_corrupt_entries_total",
                          "Compressed watch cache entries found damaged when read (each re-initialises the cache).", _L)
entries = Gauge("apiserver_watch_cache_entries",
                "Watch cache entries held as wire bytes (plain) or compressed, broken by resource type.",
                _L + ["state"])
compressed_bytes = Gauge("apiserver_watch_cache_compressed_bytes",
                         "Bytes of the compressed entries' frames, broken by resource type.", _L)
dictionary_bytes = Gauge("apiserver_watch_cache_dictionary_bytes",
                         "Bytes of the compression dictionaries and their decoder contexts, broken by resource type.",
                         _L)
init_events = Counter("apiserver_init_events_total", "Counter of init events processed in watch cache broken by resource type.", _L)

# Residency: requests a partially resident cache could not answer (served from etcd).
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

# Warm restart (cache/snapshot.py; beyond upstream, which always lists).
snapshot_loads = Counter(
    "apiserver_watch_cache_snapshot_loads_total",
    "Watch cache starts by how they began: result=warm (snapshot loaded, etcd watch resumed from its revision), "
    "or the reason it listed from etcd instead (missing, corrupt, version, mismatch, compacted, unverified, error).",
    _L + ["result"])
snapshot_files_rejected = Counter(
    "apiserver_watch_cache_snapshot_files_rejected_total",
    "Snapshot files found unusable at start (torn, truncated, corrupt, another format version).", ["reason"])
snapshot_writes = Counter("apiserver_watch_cache_snapshot_writes_total",
                          "Snapshot files written (result=ok) or abandoned on an error (result=error).", ["result"])
snapshot_bytes = Gauge("apiserver_watch_cache_snapshot_bytes", "Size of the last snapshot file written.")
snapshot_seconds = Gauge("apiserver_watch_cache_snapshot_seconds", "How long the last snapshot took to write.")
