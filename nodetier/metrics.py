"""The tier's own figures on its /metrics."""
from machinery.metrics import Counter, Gauge, Histogram

renewals_absorbed = Counter("nodetier_renewals_absorbed_total", "Lease renewals answered by the tier alone")
renewals_fast = Counter("nodetier_renewals_fast_path_total", "Lease renewals absorbed on the fast path (the "
                        "body was the tier's copy with a new renewTime), without the general update path")
renewals_raw = Counter("nodetier_renewals_raw_path_total", "Lease renewals answered from the request's bytes, "
                       "before aiohttp (nodetier.rawpath); also counted in nodetier_renewals_fast_path_total")
forwards = Counter("nodetier_forwards_total", "Lease writes the tier sent to the control plane",
                   ["why", "result"])   # why: renewal (the forwarder) or change (at once, in the client's request)
leases_held = Gauge("nodetier_leases", "Leases the tier holds")
leases_pending = Gauge("nodetier_leases_pending", "Leases whose newest renewal the control plane has not seen")
# The oldest renewTime a reader of the control plane saw: the age of the control plane's copy when a forward of
# the tier replaced it (the node lifecycle controller adds its poll to this; the margin is 40 s).
control_plane_age = Histogram(
    "nodetier_control_plane_renewal_age_seconds",
    "Age of the control plane's spec.renewTime of a Lease when the tier's forward replaced it",
    buckets=(5, 10, 15, 20, 25, 28, 30, 31, 32, 33, 34, 35, 36, 37, 38, 40, 45, 50, 60, 90, 120))
forward_seconds = Histogram(
    "nodetier_forward_duration_seconds",
    "Seconds a renewal's forward took, from the forwarder taking it up to the control plane's answer",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16))
forward_wait_seconds = Histogram(
    "nodetier_forward_wait_seconds",
    "Seconds a due renewal waited for the forwarder (its tick, the forward budget) before its forward started",
    buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32))
