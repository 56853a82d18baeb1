"""The tier's own figures on its /metrics."""
from prometheus_client import Counter, Gauge

renewals_absorbed = Counter("nodetier_renewals_absorbed_total", "Lease renewals answered by the tier alone")
renewals_fast = Counter("nodetier_renewals_fast_path_total", "Lease renewals absorbed on the fast path (the "
                        "body was the tier's copy with a new renewTime), without the general update path")
forwards = Counter("nodetier_forwards_total", "Lease writes the tier sent to the control plane",
                   ["why", "result"])   # why: renewal (the forwarder) or change (at once, in the client's request)
leases_held = Gauge("nodetier_leases", "Leases the tier holds")
leases_pending = Gauge("nodetier_leases_pending", "Leases whose newest renewal the control plane has not seen")
