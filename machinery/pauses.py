"""What stops a process's event loop, timed. A request's own timing starts when its handler runs, so a loop that
was busy elsewhere (a garbage collection, a long callback, a compaction pass) shows up only in the client's
latency. Two figures on /metrics:

* `python_gc_duration_seconds{generation}`: every collection, as Go processes (kube-apiserver's among them)
  expose `go_gc_duration_seconds`;
* `python_event_loop_lag_seconds`: how late the loop ran a callback it had scheduled `LAG_PERIOD` ahead (the
  time any request arriving then waited before it could be read).

The GC callback must not take a lock (a collection can start inside any allocation): the counts live in plain
lists (machinery.metrics' lock-free histogram series), read at scrape time.
"""
from __future__ import annotations

import asyncio
import gc
import time

from .metrics import REGISTRY, HistogramSeries, histogram_lines

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LAG_PERIOD = 0.1


UPPER = (*BUCKETS, float("inf"))


class Pauses:
    def __init__(self) -> None:
        self.gc = [HistogramSeries(UPPER) for _ in range(3)]   # counts per bucket (+Inf last) and a sum
        self.lag = HistogramSeries(UPPER)
        self._gc_started = 0.0
        self._lag_task: asyncio.Task | None = None

    def gc_callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc[info.get("generation", 2)].observe(time.perf_counter() - self._gc_started)

    async def measure_lag(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + LAG_PERIOD
            await asyncio.sleep(LAG_PERIOD)
            self.lag.observe(max(0.0, loop.time() - due))

    def start_lag(self) -> None:
        """Start sampling the running loop's lag (once; from inside the loop)."""
        if self._lag_task is None or self._lag_task.done():
            self._lag_task = asyncio.get_running_loop().create_task(self.measure_lag())

    def expose(self, out: list[str]) -> None:
        """The two histograms in the text format (machinery.metrics.Registry calls it at each scrape)."""
        name = "python_gc_duration_seconds"
        out.append(f"# HELP {name} Seconds each garbage collection stopped the process, per generation\n"
                   f"# TYPE {name} histogram\n")
        for gen, h in enumerate(self.gc):
            histogram_lines(out, name, [("generation", str(gen))], UPPER, h.counts, h.sum)
        name = "python_event_loop_lag_seconds"
        out.append(f"# HELP {name} How late the event loop ran a callback scheduled {LAG_PERIOD:g} s ahead\n"
                   f"# TYPE {name} histogram\n")
        histogram_lines(out, name, [], UPPER, self.lag.counts, self.lag.sum)


def fewer_collections(young_objects: int = 10_000, young_collections: int = 100) -> None:
    """Collect the youngest generation after `young_objects` new tracked objects (CPython: 700), and the oldest
    only after `young_collections` collections of the middle one (CPython: 10). `python -m apiserver` and
    `python -m nodetier` install it.

    * A young collection walks every young object still alive, mostly those of the requests in flight. In a
      node tier answering 2,200-2,900 renewals a second at 30,000 nodes (bench.nodes, 60 s windows), CPython's
      700 gave 1,950 young collections of 1.9 ms each (6.2 % of the tier's time); 10,000 gave 35 of 18 ms
      (1.0 %): most objects die by reference counting between two collections instead of being walked. The
      apiserver with 10,000 Leases renewed on it directly: 2,420 young, 220 middle and 20 full collections a
      minute (5.8 % of its time, loop lag p99 61 ms) against 5, 1 and 0 (0.1 %, 29 ms). CPython counts new
      objects net of the ones freed, so a server's in-flight set rarely reaches 10,000.
    * A full collection walks every tracked object the process holds, so its pause grows with the state
      (0.1-0.25 s in a tier holding 30,000 Leases, every 3.4 s at 2,900 renewals a second: the loop's lag p99).
    Cyclic garbage waits longer to be freed (the young generation holds up to `young_objects` more objects): an
    empty apiserver after discovery, OpenAPI and a list and a watch of each of its 62 resources had 82.3-83.0 MiB
    of RSS against 81.0 MiB with CPython's thresholds (medians of three, an ad hoc script)."""
    _, g1, _ = gc.get_threshold()
    gc.set_threshold(young_objects, g1, young_collections)


_installed: Pauses | None = None


def install() -> Pauses:
    """Time this process's collections from now on and register the metrics (once per process; later calls
    return the same). The loop's lag is sampled once `start_lag()` is called from inside the loop."""
    global _installed
    if _installed is None:
        _installed = Pauses()
        gc.callbacks.append(_installed.gc_callback)
        REGISTRY.register(_installed)
    return _installed
