"""bench.deployment's throughput rounds: each side's figure is the median of its rounds, writes and statuses
summed, every round kept (issue 21 compares medians of interleaved runs)."""
from __future__ import annotations

from bench.deployment import median_of_rounds


def test_medians_of_rounds():
    rounds = [{"per_s": 900.0, "p50_ms": 10.0, "p99_ms": 40.0, "n": 1000, "server_cpu_s": 0.9, "etcd_cpu_s": 0.3,
               "statuses": {"200": 1000}},
              {"per_s": 1200.0, "p50_ms": 8.0, "p99_ms": 30.0, "n": 1000, "server_cpu_s": 0.6, "etcd_cpu_s": 0.4,
               "statuses": {"200": 999, "409": 1}},
              {"per_s": 1000.0, "p50_ms": 9.0, "p99_ms": 90.0, "n": 1000, "server_cpu_s": 0.7, "etcd_cpu_s": 0.2,
               "statuses": {"200": 1000}}]
    m = median_of_rounds(rounds)
    assert (m["per_s"], m["p50_ms"], m["p99_ms"]) == (1000.0, 9.0, 40.0)
    assert m["server_cpu_ms_per_write"] == 0.7 and m["etcd_cpu_ms_per_write"] == 0.3
    assert m["n"] == 3000 and m["statuses"] == {"200": 2999, "409": 1}
    assert abs(m["server_cpu_s"] - 2.2) < 1e-9 and m["runs"] is rounds
